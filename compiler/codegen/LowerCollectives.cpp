//===- LowerCollectives.cpp - shard collectives to Communicator calls -----===//
//
// dsc-zero-partition shards the step over a 2-D grid of ranks
// (`shard.grid @dsc_ranks(shape = RxG)`: axis 0 the replicas, axis 1 the
// sharding group) and inserts the upstream `shard` dialect's collectives:
//
//   shard.all_reduce     -> ctx.comm->allReduce      (reduction sum)
//   shard.all_gather     -> ctx.comm->allGather      (gather_axis 0)
//   shard.reduce_scatter -> ctx.comm->reduceScatter  (scatter_axis 0, sum)
//   shard.all_slice      -> allSlice: a local copy of this rank's slice of
//                           dim 0 (slice_axis 0), no communication
//
// `grid_axes` becomes the GridAxes mask (bit i: grid axis i). Every call
// carries a label: the op's NameLoc, else "op #k" (k = the op's position in
// its function), so a mismatch between ranks or a hang names the
// collective. A program compiled without a grid has none of these ops; a
// program run without a Communicator fails at its first collective.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Lowering.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dsc::codegen {

namespace {

/// The label of a collective: its NameLoc, else its position.
std::string collectiveLabel(Operation *op, int64_t index) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return name.getName().str();
  return "op #" + std::to_string(index);
}

/// Checks what every collective needs: the module's grid, valid axes, one
/// element type, static shapes. Returns the axes mask and the size of the
/// group the axes span.
FailureOr<std::pair<uint32_t, int64_t>>
checkCollective(Operation *op, StringRef grid, ArrayRef<int16_t> axes,
                const LowerContext &ctx) {
  if (ctx.gridName.empty())
    return op->emitError("codegen: ")
           << op->getName()
           << " needs the module's rank grid (shard.grid), but it has none";
  if (grid != ctx.gridName)
    return op->emitError("codegen: ")
           << op->getName() << " on @" << grid
           << ", but the module's rank grid is @" << ctx.gridName;
  uint32_t mask = 0;
  int64_t groupSize = 1;
  for (int16_t axis : axes) {
    if (axis < 0 || axis >= static_cast<int64_t>(ctx.gridShape.size()))
      return op->emitError("codegen: grid axis ")
             << axis << " outside the grid's " << ctx.gridShape.size()
             << " axes";
    if (mask & (1u << axis))
      return op->emitError("codegen: grid axis ") << axis << " listed twice";
    mask |= 1u << axis;
    groupSize *= ctx.gridShape[axis];
  }
  auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape())
    return op->emitError("codegen: ")
           << op->getName() << " needs tensors of static shape";
  if (in.getElementType() != out.getElementType())
    return op->emitError("codegen: ")
           << op->getName() << " must keep the element type, got "
           << in.getElementType() << " -> " << out.getElementType();
  return std::make_pair(mask, groupSize);
}

/// `out` is `in` with dim 0 divided (or multiplied) by the group size.
LogicalResult checkDim0(Operation *op, RankedTensorType whole,
                        RankedTensorType part, int64_t groupSize) {
  bool ok = whole.getRank() >= 1 && whole.getRank() == part.getRank() &&
            whole.getDimSize(0) == part.getDimSize(0) * groupSize;
  for (int64_t d = 1; ok && d < whole.getRank(); ++d)
    ok = whole.getDimSize(d) == part.getDimSize(d);
  if (!ok)
    return op->emitError("codegen: ")
           << op->getName() << " over a group of " << groupSize
           << " ranks needs dim 0 of " << whole << " to be " << groupSize
           << " times that of " << part;
  return success();
}

LogicalResult checkAxisZero(Operation *op, StringRef what, APInt axis) {
  if (axis.getZExtValue() != 0)
    return op->emitError("codegen supports ")
           << op->getName() << " along tensor axis 0 only, got " << what
           << " = " << axis.getZExtValue();
  return success();
}

LogicalResult checkSum(Operation *op, shard::ReductionKind kind) {
  if (kind != shard::ReductionKind::Sum)
    return op->emitError("codegen supports reduction = <sum> only, got <")
           << shard::stringifyReductionKind(kind) << ">";
  return success();
}

std::string axesText(uint32_t mask) {
  return "dsc::GridAxes{" + std::to_string(mask) + "u}";
}

} // namespace

LowerResult lowerCollectives(Operation *op, const LowerContext &ctx) {
  using R = std::optional<LoweredCall>;
  std::string what = collectiveLabel(op, ctx.opIndex);
  // A Communicator call, or a clean failure without one.
  auto communicate = [&](const char *kind, const char *method,
                         uint32_t mask) -> LowerResult {
    std::string in = ctx.view(op->getOperand(0));
    std::string out = ctx.view(op->getResult(0));
    if (ctx.collective)
      ctx.collective(CollectiveCall{kind, what, mask, op->getOperand(0),
                                    op->getResult(0)});
    std::string label = cppString(what);
    return R(LoweredCall{
        "", "ctx.comm ? ctx.comm->" + std::string(method) + "(" + in + ", " +
                out + ", " + axesText(mask) + ", " + label +
                ")\n                : noCommunicator(" +
                cppString(op->getName().getStringRef()) + ", " + label + ")"});
  };
  auto types = [](Operation *o) {
    return std::make_pair(cast<RankedTensorType>(o->getOperand(0).getType()),
                          cast<RankedTensorType>(o->getResult(0).getType()));
  };
  return llvm::TypeSwitch<Operation *, LowerResult>(op)
      .Case([&](shard::AllReduceOp o) -> LowerResult {
        auto checked =
            checkCollective(op, o.getGrid(), o.getGridAxes(), ctx);
        if (failed(checked) || failed(checkSum(op, o.getReduction())))
          return failure();
        auto [in, out] = types(op);
        if (in.getShape() != out.getShape())
          return o.emitError("codegen: shard.all_reduce must keep the "
                             "shape, got ")
                 << in << " -> " << out;
        return communicate("all_reduce", "allReduce", checked->first);
      })
      .Case([&](shard::AllGatherOp o) -> LowerResult {
        auto checked =
            checkCollective(op, o.getGrid(), o.getGridAxes(), ctx);
        if (failed(checked) ||
            failed(checkAxisZero(op, "gather_axis", o.getGatherAxis())))
          return failure();
        auto [in, out] = types(op);
        if (failed(checkDim0(op, out, in, checked->second)))
          return failure();
        return communicate("all_gather", "allGather", checked->first);
      })
      .Case([&](shard::ReduceScatterOp o) -> LowerResult {
        auto checked =
            checkCollective(op, o.getGrid(), o.getGridAxes(), ctx);
        if (failed(checked) || failed(checkSum(op, o.getReduction())) ||
            failed(checkAxisZero(op, "scatter_axis", o.getScatterAxis())))
          return failure();
        auto [in, out] = types(op);
        if (failed(checkDim0(op, in, out, checked->second)))
          return failure();
        return communicate("reduce_scatter", "reduceScatter", checked->first);
      })
      .Case([&](shard::AllSliceOp o) -> LowerResult {
        auto checked =
            checkCollective(op, o.getGrid(), o.getGridAxes(), ctx);
        if (failed(checked) ||
            failed(checkAxisZero(op, "slice_axis", o.getSliceAxis())))
          return failure();
        auto [in, out] = types(op);
        if (failed(checkDim0(op, in, out, checked->second)))
          return failure();
        return R(LoweredCall{
            "", cppCall("allSlice", {"ctx", ctx.view(o.getInput()),
                                     ctx.view(o.getResult()),
                                     axesText(checked->first),
                                     cppString(what)})});
      })
      .Default([&](Operation *) -> LowerResult {
        if (isa_and_nonnull<shard::ShardDialect>(op->getDialect()))
          return op->emitError("codegen has no runtime lowering for ")
                 << op->getName()
                 << " (supported: all_reduce, all_gather, reduce_scatter, "
                    "all_slice)";
        return R(std::nullopt);
      });
}

} // namespace dsc::codegen
