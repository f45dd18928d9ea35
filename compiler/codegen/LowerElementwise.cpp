//===- LowerElementwise.cpp - Elementwise dsc ops to CPU kernel calls -----===//
//
// Unary ops, binary ops and comparisons (numpy broadcasting), where, cast,
// clip, gelu, swiglu and leaky_relu: one rt:: kernel call each.
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

const char *unaryKind(Operation *op) {
  return llvm::TypeSwitch<Operation *, const char *>(op)
      .Case([](NegOp) { return "Neg"; })
      .Case([](AbsOp) { return "Abs"; })
      .Case([](ExpOp) { return "Exp"; })
      .Case([](LogOp) { return "Log"; })
      .Case([](SqrtOp) { return "Sqrt"; })
      .Case([](ReciprocalOp) { return "Reciprocal"; })
      .Case([](TanhOp) { return "Tanh"; })
      .Case([](ErfOp) { return "Erf"; })
      .Case([](SigmoidOp) { return "Sigmoid"; })
      .Case([](ReluOp) { return "Relu"; })
      .Case([](FloorOp) { return "Floor"; })
      .Case([](CeilOp) { return "Ceil"; })
      .Case([](SinOp) { return "Sin"; })
      .Case([](CosOp) { return "Cos"; })
      .Case([](SoftplusOp) { return "Softplus"; })
      .Case([](NotOp) { return "Not"; })
      .Default([](Operation *) { return nullptr; });
}

const char *binaryKind(Operation *op) {
  return llvm::TypeSwitch<Operation *, const char *>(op)
      .Case([](AddOp) { return "Add"; })
      .Case([](SubOp) { return "Sub"; })
      .Case([](MulOp) { return "Mul"; })
      .Case([](DivOp) { return "Div"; })
      .Case([](PowOp) { return "Pow"; })
      .Case([](MaxOp) { return "Max"; })
      .Case([](MinOp) { return "Min"; })
      .Case([](AndOp) { return "And"; })
      .Case([](OrOp) { return "Or"; })
      .Case([](XorOp) { return "Xor"; })
      .Case([](EqualOp) { return "Equal"; })
      .Case([](LessOp) { return "Less"; })
      .Case([](LessEqualOp) { return "LessEqual"; })
      .Case([](GreaterOp) { return "Greater"; })
      .Case([](GreaterEqualOp) { return "GreaterEqual"; })
      .Default([](Operation *) { return nullptr; });
}

LowerResult lowerElementwise(Operation *op, const LowerContext &ctx) {
  using R = std::optional<LoweredCall>;
  if (const char *kind = unaryKind(op))
    return R(unary(ctx, op, kind));
  if (const char *kind = binaryKind(op))
    return R(binary(ctx, op, kind));
  return llvm::TypeSwitch<Operation *, R>(op)
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
      .Case([&](SwigluOp o) -> R {
        return LoweredCall{
            "",
            cppCall("rt::swiglu", {ctx.view(o.getGate()), ctx.view(o.getUp()),
                                   ctx.view(o.getResult())})};
      })
      .Case([&](LeakyReluOp o) -> R {
        return LoweredCall{
            "",
            cppCall("rt::leakyRelu", {ctx.view(o.getInput()),
                                      cppDouble(o.getAlpha().convertToDouble()),
                                      ctx.view(o.getResult())})};
      })
      .Default([](Operation *) { return R(); });
}

} // namespace dsc::codegen
