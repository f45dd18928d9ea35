//===- LowerDataMovement.cpp - Reductions, data movement to kernels -------===//
//
// reduce_*, reshape (when it is not an alias, see EmitCpp.cpp), transpose,
// expand, slice, concat, split, gather, pad, trilu, cumsum, and the gradient
// ops scatter_add (rt::gatherBackward, or rt::gatherBackwardInto with an
// init) and insert_slice (rt::sliceBackward).
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Lowering.h"

#include "dialects/dsc/IR/DscOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dsc::codegen {

namespace {

template <typename ReduceOpT>
LoweredCall reduce(const LowerContext &ctx, ReduceOpT op, const char *kind) {
  // dsc reduces nothing for empty axes (rt::reduce would reduce every
  // dim): the result is the input (widened, for a 16-bit input summed into
  // f32).
  if (op.getAxes().empty())
    return {"", cppCall(op.getInput().getType() == op.getResult().getType()
                            ? "rt::reshape"
                            : "rt::cast",
                        {ctx.view(op.getInput()), ctx.view(op.getResult())})};
  return {"", cppCall("rt::reduce",
                      {std::string("rt::ReduceOp::") + kind,
                       ctx.view(op.getInput()), cppInts(op.getAxes()),
                       cppBool(op.getKeepdims()), ctx.view(op.getResult())})};
}

/// "{a, b, c}" of the views of `values`.
std::string viewList(const LowerContext &ctx, ValueRange values) {
  std::string s = "{";
  for (auto [i, v] : llvm::enumerate(values))
    s += (i ? ", " : "") + ctx.view(v);
  return s + "}";
}

} // namespace

LowerResult lowerDataMovement(Operation *op, const LowerContext &ctx) {
  using R = std::optional<LoweredCall>;
  auto call = [](std::string callee, std::vector<std::string> args) -> R {
    return LoweredCall{"", cppCall(callee, args)};
  };
  return llvm::TypeSwitch<Operation *, LowerResult>(op)
      .Case([&](ReduceSumOp o) -> R { return reduce(ctx, o, "Sum"); })
      .Case([&](ReduceMeanOp o) -> R { return reduce(ctx, o, "Mean"); })
      .Case([&](ReduceMaxOp o) -> R { return reduce(ctx, o, "Max"); })
      .Case([&](ReduceMinOp o) -> R { return reduce(ctx, o, "Min"); })
      .Case([&](ReduceProdOp o) -> R { return reduce(ctx, o, "Prod"); })
      .Case([&](ReshapeOp o) {
        return call("rt::reshape",
                    {ctx.view(o.getInput()), ctx.view(o.getResult())});
      })
      // A collective's completion: the identity for the synchronous CPU
      // runtime (a copy only when aliasing is off).
      .Case([&](WaitOp o) {
        return call("rt::reshape",
                    {ctx.view(o.getInput()), ctx.view(o.getResult())});
      })
      // Stage-3 release: storage is freed by the memory plan after its last
      // use, which this op is; nothing to call.
      .Case([&](ReleaseOp) {
        return LoweredCall{"", "Status()"};
      })
      .Case([&](TransposeOp o) {
        return call("rt::transpose",
                    {ctx.view(o.getInput()), cppInts(o.getPerm()),
                     ctx.view(o.getResult())});
      })
      .Case([&](ExpandOp o) {
        return call("rt::expand",
                    {ctx.view(o.getInput()), ctx.view(o.getResult())});
      })
      .Case([&](SliceOp o) {
        return call("rt::slice",
                    {ctx.view(o.getInput()), cppInts(o.getOffsets()),
                     cppInts(o.getStrides()), ctx.view(o.getResult())});
      })
      .Case([&](InsertSliceOp o) {
        return call("rt::sliceBackward",
                    {ctx.view(o.getGrad()), cppInts(o.getOffsets()),
                     cppInts(o.getStrides()), ctx.view(o.getResult())});
      })
      .Case([&](ConcatOp o) -> R {
        std::string list = "concat" + std::to_string(ctx.opIndex);
        return LoweredCall{
            "const Tensor " + list + "[] = " + viewList(ctx, o.getInputs()) +
                ";\n",
            cppCall("rt::concat", {list, std::to_string(o.getInputs().size()),
                                   cppInt(static_cast<int64_t>(o.getAxis())),
                                   ctx.view(o.getResult())})};
      })
      .Case([&](SplitOp o) -> R {
        std::string list = "split" + std::to_string(ctx.opIndex);
        return LoweredCall{
            "const Tensor " + list + "[] = " + viewList(ctx, o.getResults()) +
                ";\n",
            cppCall("rt::split",
                    {ctx.view(o.getInput()),
                     cppInt(static_cast<int64_t>(o.getAxis())), list,
                     std::to_string(o.getResults().size())})};
      })
      .Case([&](GatherOp o) {
        return call("rt::gather",
                    {ctx.view(o.getData()), ctx.view(o.getIndices()),
                     cppInt(static_cast<int64_t>(o.getAxis())),
                     ctx.view(o.getResult())});
      })
      .Case([&](ScatterAddOp o) {
        if (o.getInit())
          return call("rt::gatherBackwardInto",
                      {ctx.view(o.getGrad()), ctx.view(o.getIndices()),
                       cppInt(static_cast<int64_t>(o.getAxis())),
                       ctx.view(o.getInit()), ctx.view(o.getResult())});
        return call("rt::gatherBackward",
                    {ctx.view(o.getGrad()), ctx.view(o.getIndices()),
                     cppInt(static_cast<int64_t>(o.getAxis())),
                     ctx.view(o.getResult())});
      })
      .Case([&](PadOp o) {
        return call("rt::pad", {ctx.view(o.getInput()), cppInts(o.getPads()),
                                cppDouble(o.getValue().convertToDouble()),
                                ctx.view(o.getResult())});
      })
      .Case([&](RotateHalfOp o) {
        return call("rt::rotateHalf",
                    {ctx.view(o.getInput()), ctx.view(o.getResult())});
      })
      .Case([&](TriluOp o) {
        return call("rt::trilu", {ctx.view(o.getInput()), cppBool(o.getUpper()),
                                  cppInt(static_cast<int64_t>(o.getK())),
                                  ctx.view(o.getResult())});
      })
      .Case([&](CumSumOp o) {
        return call("rt::cumsum",
                    {ctx.view(o.getInput()),
                     cppInt(static_cast<int64_t>(o.getAxis())),
                     cppBool(o.getExclusive()), cppBool(o.getReverse()),
                     ctx.view(o.getResult())});
      })
      .Default([](Operation *) { return R(); });
}

} // namespace dsc::codegen
