//===- LowerLinalg.cpp - matmul, gemm, conv, pooling to kernel calls ------===//
//
// Forward ops map one to one onto rt::matmul, gemm, conv, maxPool, ...;
// dsc.matmul_bias_grad onto rt::matmulBiasGrad (the GEMM's epilogue sums the
// bias gradient where the backend can, else a reduction follows it);
// dsc.gemm_gelu and dsc.matmul_gelu_grad onto rt::gemmGelu and
// rt::matmulGeluGrad (GELU or its derivative in the GEMM's epilogue);
// the gradient ops onto rt::convBackwardInput / convBackwardWeight
// (step_kernels.h) and rt::maxPoolBackward / avgPoolBackward.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Lowering.h"

#include "dialects/dsc/IR/DscOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dsc::codegen {

namespace {

/// The view of an optional operand, or an absent view.
std::string optionalView(const LowerContext &ctx, Value v) {
  return v ? ctx.view(v) : std::string("Tensor()");
}

std::string poolAttrs(ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                      ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations,
                      bool ceilMode, bool countIncludePad) {
  return "rt::PoolAttrs{" + cppInts(kernel) + ", " + cppInts(strides) + ", " +
         cppInts(pads) + ", " + cppInts(dilations) + ", " + cppBool(ceilMode) +
         ", " + cppBool(countIncludePad) + "}";
}

template <typename PoolOp> std::string poolAttrsOf(PoolOp op) {
  return poolAttrs(op.getKernelShape(), op.getStrides(), op.getPads(),
                   op.getDilations(), op.getCeilMode(),
                   op.getCountIncludePad());
}

} // namespace

LowerResult lowerLinalg(Operation *op, const LowerContext &ctx) {
  using R = std::optional<LoweredCall>;
  auto call = [](std::string callee, std::vector<std::string> args) -> R {
    return LoweredCall{"", cppCall(callee, args)};
  };
  return llvm::TypeSwitch<Operation *, LowerResult>(op)
      .Case([&](MatMulOp o) {
        if (o.getTransposeLhs() || o.getTransposeRhs())
          return call("rt::matmulTransposed",
                      {ctx.view(o.getLhs()), cppBool(o.getTransposeLhs()),
                       ctx.view(o.getRhs()), cppBool(o.getTransposeRhs()),
                       ctx.view(o.getResult())});
        return call("rt::matmul", {ctx.view(o.getLhs()), ctx.view(o.getRhs()),
                                   ctx.view(o.getResult())});
      })
      .Case([&](MatMulBiasGradOp o) {
        return call("rt::matmulBiasGrad",
                    {ctx.view(o.getLhs()), ctx.view(o.getRhs()),
                     cppBool(o.getSumRhs()), ctx.view(o.getResult()),
                     ctx.view(o.getBiasGrad())});
      })
      .Case([&](GemmGeluOp o) {
        return call("rt::gemmGelu",
                    {ctx.view(o.getA()), ctx.view(o.getB()),
                     cppBool(o.getTransB()), optionalView(ctx, o.getBias()),
                     ctx.view(o.getResult()), ctx.view(o.getPre())});
      })
      .Case([&](MatMulGeluGradOp o) {
        return call("rt::matmulGeluGrad",
                    {ctx.view(o.getA()), ctx.view(o.getB()),
                     cppBool(o.getTransB()), ctx.view(o.getPre()),
                     ctx.view(o.getResult())});
      })
      .Case([&](GemmOp o) {
        std::string attrs =
            "rt::GemmAttrs{" + cppDouble(o.getAlpha().convertToDouble()) +
            ", " + cppDouble(o.getBeta().convertToDouble()) + ", " +
            cppBool(o.getTransA()) + ", " + cppBool(o.getTransB()) + "}";
        return call("rt::gemm", {ctx.view(o.getA()), ctx.view(o.getB()),
                                 optionalView(ctx, o.getC()), attrs,
                                 ctx.view(o.getResult())});
      })
      .Case([&](ConvOp o) {
        return call("rt::conv",
                    {ctx.view(o.getInput()), ctx.view(o.getWeight()),
                     optionalView(ctx, o.getBias()),
                     cppConvAttrs(o.getStrides(), o.getPads(), o.getDilations(),
                                  static_cast<int64_t>(o.getGroup())),
                     ctx.view(o.getResult())});
      })
      .Case([&](ConvBackwardInputOp o) {
        return call("rt::convBackwardInput",
                    {ctx.view(o.getGrad()), ctx.view(o.getWeight()),
                     cppConvAttrs(o.getStrides(), o.getPads(), o.getDilations(),
                                  static_cast<int64_t>(o.getGroup())),
                     ctx.view(o.getResult())});
      })
      .Case([&](ConvBackwardWeightOp o) {
        return call("rt::convBackwardWeight",
                    {ctx.view(o.getGrad()), ctx.view(o.getInput()),
                     cppConvAttrs(o.getStrides(), o.getPads(), o.getDilations(),
                                  static_cast<int64_t>(o.getGroup())),
                     ctx.view(o.getResult())});
      })
      .Case([&](MaxPoolOp o) {
        return call("rt::maxPool", {ctx.view(o.getInput()), poolAttrsOf(o),
                                    ctx.view(o.getResult())});
      })
      .Case([&](AvgPoolOp o) {
        return call("rt::avgPool", {ctx.view(o.getInput()), poolAttrsOf(o),
                                    ctx.view(o.getResult())});
      })
      .Case([&](GlobalAvgPoolOp o) {
        return call("rt::globalAvgPool",
                    {ctx.view(o.getInput()), ctx.view(o.getResult())});
      })
      .Case([&](GlobalMaxPoolOp o) {
        return call("rt::globalMaxPool",
                    {ctx.view(o.getInput()), ctx.view(o.getResult())});
      })
      .Case([&](PoolBackwardOp o) -> LowerResult {
        const char *callee = o.getKind() == "max"   ? "rt::maxPoolBackward"
                             : o.getKind() == "avg" ? "rt::avgPoolBackward"
                                                    : nullptr;
        if (!callee) {
          o.emitOpError("kind must be \"max\" or \"avg\", got \"")
              << o.getKind() << "\"";
          return failure();
        }
        return call(callee, {ctx.view(o.getInput()), poolAttrsOf(o),
                             ctx.view(o.getGrad()), ctx.view(o.getResult())});
      })
      .Default([](Operation *) { return R(); });
}

} // namespace dsc::codegen
