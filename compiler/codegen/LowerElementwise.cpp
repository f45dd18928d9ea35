//===- LowerElementwise.cpp - Elementwise dsc ops to CPU kernel calls -----===//
//
// Unary ops, binary ops and comparisons (numpy broadcasting), where, cast,
// clip, gelu and leaky_relu: one rt:: kernel call each.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Lowering.h"

#include "dialects/dsc/IR/DscOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dsc::codegen {

namespace {

LoweredCall unary(const LowerContext &ctx, Operation *op, const char *kind) {
  return {"", cppCall("rt::unary", {std::string("rt::UnaryOp::") + kind,
                                     ctx.view(op->getOperand(0)),
                                     ctx.view(op->getResult(0))})};
}

LoweredCall binary(const LowerContext &ctx, Operation *op, const char *kind) {
  return {"", cppCall("rt::binary",
                      {std::string("rt::BinaryOp::") + kind,
                       ctx.view(op->getOperand(0)), ctx.view(op->getOperand(1)),
                       ctx.view(op->getResult(0))})};
}

std::optional<double> optionalDouble(FloatAttr attr) {
  if (!attr)
    return std::nullopt;
  return attr.getValueAsDouble();
}

} // namespace

LowerResult lowerElementwise(Operation *op, const LowerContext &ctx) {
  using R = std::optional<LoweredCall>;
  return llvm::TypeSwitch<Operation *, R>(op)
      .Case([&](NegOp o) { return unary(ctx, o, "Neg"); })
      .Case([&](AbsOp o) { return unary(ctx, o, "Abs"); })
      .Case([&](ExpOp o) { return unary(ctx, o, "Exp"); })
      .Case([&](LogOp o) { return unary(ctx, o, "Log"); })
      .Case([&](SqrtOp o) { return unary(ctx, o, "Sqrt"); })
      .Case([&](ReciprocalOp o) { return unary(ctx, o, "Reciprocal"); })
      .Case([&](TanhOp o) { return unary(ctx, o, "Tanh"); })
      .Case([&](ErfOp o) { return unary(ctx, o, "Erf"); })
      .Case([&](SigmoidOp o) { return unary(ctx, o, "Sigmoid"); })
      .Case([&](ReluOp o) { return unary(ctx, o, "Relu"); })
      .Case([&](FloorOp o) { return unary(ctx, o, "Floor"); })
      .Case([&](CeilOp o) { return unary(ctx, o, "Ceil"); })
      .Case([&](SinOp o) { return unary(ctx, o, "Sin"); })
      .Case([&](CosOp o) { return unary(ctx, o, "Cos"); })
      .Case([&](SoftplusOp o) { return unary(ctx, o, "Softplus"); })
      .Case([&](NotOp o) { return unary(ctx, o, "Not"); })
      .Case([&](AddOp o) { return binary(ctx, o, "Add"); })
      .Case([&](SubOp o) { return binary(ctx, o, "Sub"); })
      .Case([&](MulOp o) { return binary(ctx, o, "Mul"); })
      .Case([&](DivOp o) { return binary(ctx, o, "Div"); })
      .Case([&](PowOp o) { return binary(ctx, o, "Pow"); })
      .Case([&](MaxOp o) { return binary(ctx, o, "Max"); })
      .Case([&](MinOp o) { return binary(ctx, o, "Min"); })
      .Case([&](AndOp o) { return binary(ctx, o, "And"); })
      .Case([&](OrOp o) { return binary(ctx, o, "Or"); })
      .Case([&](XorOp o) { return binary(ctx, o, "Xor"); })
      .Case([&](EqualOp o) { return binary(ctx, o, "Equal"); })
      .Case([&](LessOp o) { return binary(ctx, o, "Less"); })
      .Case([&](LessEqualOp o) { return binary(ctx, o, "LessEqual"); })
      .Case([&](GreaterOp o) { return binary(ctx, o, "Greater"); })
      .Case([&](GreaterEqualOp o) { return binary(ctx, o, "GreaterEqual"); })
      .Case([&](WhereOp o) -> R {
        return LoweredCall{
            "", cppCall("rt::where",
                        {ctx.view(o.getCond()), ctx.view(o.getX()),
                         ctx.view(o.getY()), ctx.view(o.getResult())})};
      })
      .Case([&](CastOp o) -> R {
        return LoweredCall{"", cppCall("rt::cast", {ctx.view(o.getInput()),
                                                     ctx.view(o.getResult())})};
      })
      .Case([&](ClipOp o) -> R {
        return LoweredCall{
            "",
            cppCall("rt::clip", {ctx.view(o.getInput()),
                                  cppOptional(optionalDouble(o.getMinAttr())),
                                  cppOptional(optionalDouble(o.getMaxAttr())),
                                  ctx.view(o.getResult())})};
      })
      .Case([&](GeluOp o) -> R {
        return LoweredCall{
            "", cppCall("rt::gelu", {ctx.view(o.getInput()),
                                      cppBool(o.getTanhApproximation()),
                                      ctx.view(o.getResult())})};
      })
      .Case([&](LeakyReluOp o) -> R {
        return LoweredCall{"",
                           cppCall("rt::leakyRelu",
                                   {ctx.view(o.getInput()),
                                    cppDouble(o.getAlpha().convertToDouble()),
                                    ctx.view(o.getResult())})};
      })
      .Default([](Operation *) { return R(); });
}

} // namespace dsc::codegen
