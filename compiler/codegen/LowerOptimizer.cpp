//===- LowerOptimizer.cpp - adamw, sgd and lr_schedule to kernel calls ----===//
//
// The optimizer ops of dsc-optimizer map onto rt::adamw, rt::sgd and
// rt::lrSchedule, dsc-multi-tensor-adamw's adamw_multi onto rt::adamwMulti
// and the gradient norm's sum_squares onto rt::sumSquares (step_kernels.h),
// the multi-tensor ones over a table of their tensors. Hyperparameters stay
// run-time scalar tensors, so a compiled program can override its defaults.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Lowering.h"

#include "dialects/dsc/IR/DscOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dsc::codegen {

LowerResult lowerOptimizer(Operation *op, const LowerContext &ctx) {
  using R = std::optional<LoweredCall>;
  auto call = [](std::string callee, std::vector<std::string> args) -> R {
    return LoweredCall{"", cppCall(callee, args)};
  };
  // A splat 1 scale multiplies by nothing: the kernels skip an absent one.
  // A splat 1 scale is no scale: the kernel skips the multiply.
  auto isOne = [](Value scale) {
    auto c = scale.getDefiningOp<ConstantOp>();
    auto attr = c ? dyn_cast<DenseFPElementsAttr>(c.getValue()) : nullptr;
    return attr && attr.isSplat() &&
           attr.getSplatValue<APFloat>().isExactlyValue(1.0);
  };
  auto scaleView = [&](Value scale) -> std::string {
    return isOne(scale) ? "Tensor()" : ctx.view(scale);
  };
  return llvm::TypeSwitch<Operation *, LowerResult>(op)
      .Case([&](AdamWOp o) {
        return call("rt::adamw",
                    {ctx.view(o.getParam()), ctx.view(o.getGrad()),
                     ctx.view(o.getExpAvg()), ctx.view(o.getExpAvgSq()),
                     ctx.view(o.getLr()), ctx.view(o.getBeta1()),
                     ctx.view(o.getBeta2()), ctx.view(o.getEps()),
                     ctx.view(o.getWeightDecay()), ctx.view(o.getStep()),
                     ctx.view(o.getNewParam()), ctx.view(o.getNewExpAvg()),
                     ctx.view(o.getNewExpAvgSq())});
      })
      .Case([&](AdamWMultiOp o) -> LowerResult {
        // The entries' table, then one call for all of them.
        size_t n = o.getTensors().size() / 4;
        bool copies = o.getResults().size() == 4 * n;
        std::string table = "adamw" + std::to_string(ctx.opIndex);
        std::string setup = "const rt::AdamwTensors " + table + "[] = {\n";
        for (size_t i = 0; i < n; ++i) {
          setup += "    {";
          for (size_t k = 0; k < 4; ++k)
            setup += ctx.view(o.getTensors()[k * n + i]) + ", ";
          for (size_t k = 0; k < 3; ++k)
            setup += ctx.view(o.getResult(k * n + i)) + ", ";
          setup += (copies ? ctx.view(o.getResult(3 * n + i)) : "Tensor()") +
                   "},\n";
        }
        setup += "};\n";
        SmallVector<std::string> args = {table,
                                         std::to_string(n),
                                         ctx.view(o.getLr()),
                                         ctx.view(o.getBeta1()),
                                         ctx.view(o.getBeta2()),
                                         ctx.view(o.getEps()),
                                         ctx.view(o.getWeightDecay()),
                                         ctx.view(o.getStep()),
                                         scaleView(o.getGradScale())};
        if (!isOne(o.getGradPrescale()))
          args.push_back(ctx.view(o.getGradPrescale()));
        return R(LoweredCall{setup, cppCall("rt::adamwMulti", args)});
      })
      .Case([&](SumSquaresOp o) -> LowerResult {
        std::string table = "squares" + std::to_string(ctx.opIndex);
        std::string setup = "const Tensor " + table + "[] = {";
        for (Value t : o.getTensors())
          setup += ctx.view(t) + ", ";
        setup += "};\n";
        return R(LoweredCall{
            setup,
            cppCall("rt::sumSquares",
                    {table, std::to_string(o.getTensors().size()),
                     scaleView(o.getScale()), ctx.view(o.getResult())})});
      })
      .Case([&](SgdOp o) {
        return call("rt::sgd",
                    {ctx.view(o.getParam()), ctx.view(o.getGrad()),
                     ctx.view(o.getMomentumBuffer()), ctx.view(o.getLr()),
                     ctx.view(o.getMomentum()), ctx.view(o.getWeightDecay()),
                     ctx.view(o.getStep()),
                     cppDouble(o.getDampening().convertToDouble()),
                     cppBool(o.getNesterov()), ctx.view(o.getNewParam()),
                     ctx.view(o.getNewMomentumBuffer())});
      })
      .Case([&](LrScheduleOp o) -> LowerResult {
        StringRef kind = o.getKind();
        const char *schedule =
            kind == "constant"        ? "rt::LrSchedule::Constant"
            : kind == "warmup_cosine" ? "rt::LrSchedule::WarmupCosine"
            : kind == "warmup_linear" ? "rt::LrSchedule::WarmupLinear"
                                      : nullptr;
        if (!schedule) {
          o.emitOpError("kind must be \"constant\", \"warmup_cosine\" or "
                        "\"warmup_linear\", got \"")
              << kind << "\"";
          return failure();
        }
        return call("rt::lrSchedule",
                    {ctx.view(o.getStep()), ctx.view(o.getBaseLr()), schedule,
                     cppInt(static_cast<int64_t>(o.getWarmupSteps())),
                     cppInt(static_cast<int64_t>(o.getTotalSteps())),
                     cppDouble(o.getWarmupMinRatio().convertToDouble()),
                     cppDouble(o.getMinRatio().convertToDouble()),
                     ctx.view(o.getLr())});
      })
      .Default([](Operation *) { return R(); });
}

} // namespace dsc::codegen
