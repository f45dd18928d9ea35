//===- LowerOptimizer.cpp - adamw, sgd and lr_schedule to kernel calls ----===//
//
// The optimizer ops of dsc-optimizer map onto rt::adamw, rt::sgd and
// rt::lrSchedule (step_kernels.h). Their hyperparameters stay run-time
// scalar tensors, so a compiled program can override its defaults.
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
