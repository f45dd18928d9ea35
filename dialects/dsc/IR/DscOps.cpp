//===- DscOps.cpp - op definitions, folders of the dsc dialect ------------===//
#include "dialects/dsc/IR/DscOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace dsc;

#include "dialects/dsc/IR/DscInterfaces.cpp.inc"

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValueAttr(); }

/// The upstream `shard` collectives that talk to other ranks (all_slice is
/// local, hence not one of them).
static bool isCommunicatingCollective(Operation *op) {
  static constexpr llvm::StringLiteral names[] = {
      "shard.all_gather", "shard.reduce_scatter", "shard.all_reduce"};
  return op && llvm::is_contained(names, op->getName().getStringRef());
}

void CollectiveInputOp::getAsmResultNames(
    function_ref<void(Value, StringRef)> setNameFn) {
  setNameFn(getResult(), "collective_input");
}

LogicalResult CollectiveInputOp::verify() {
  for (Operation *user : getResult().getUsers())
    if (!isCommunicatingCollective(user))
      return emitOpError("result must be used only by shard.all_gather, "
                         "shard.reduce_scatter or shard.all_reduce, not ")
             << user->getName();
  return success();
}

LogicalResult LayerNormOp::verify() {
  if (getRms() && getBias())
    return emitOpError("an RMS norm (rms) has no bias");
  return success();
}

LogicalResult WaitOp::verify() {
  if (!isCommunicatingCollective(getInput().getDefiningOp()))
    return emitOpError("input must be the result of shard.all_gather, "
                       "shard.reduce_scatter or shard.all_reduce");
  return success();
}

LogicalResult OffloadCopyOp::verify() {
  if (getTo() != "host" && getTo() != "device")
    return emitOpError("`to` must be \"host\" or \"device\", got \"")
           << getTo() << "\"";
  return success();
}

LogicalResult OffloadWaitOp::verify() {
  auto copy = getInput().getDefiningOp<OffloadCopyOp>();
  if (!copy || copy.getTo() != "device")
    return emitOpError("input must be the result of dsc.offload_copy "
                       "{to = \"device\"}");
  return success();
}

LogicalResult NvmeReadOp::verify() {
  auto arg = dyn_cast<BlockArgument>(getInput());
  auto fn = arg ? dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp())
                : FunctionOpInterface();
  auto memory =
      fn ? fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "dsc.memory")
         : StringAttr();
  if (!memory || memory.getValue() != "nvme")
    return emitOpError("input must be an argument of the function with "
                       "dsc.memory = \"nvme\"");
  return success();
}

LogicalResult NvmeWriteOp::verify() {
  for (Operation *user : getResult().getUsers())
    if (!user->hasTrait<OpTrait::ReturnLike>())
      return emitOpError("result is the state in its file: only the "
                         "function's return may use it, not ")
             << user->getName();
  return success();
}

LogicalResult AdamWMultiOp::verify() {
  size_t t = getTensors().size(), r = getResults().size();
  if (t % 4 != 0)
    return emitOpError("needs 4 tensors per parameter, got ") << t;
  size_t n = t / 4;
  if (r != 3 * n && r != 4 * n)
    return emitOpError("has ")
           << n << " parameters: 3 results each, or 4 with compute copies; got "
           << r;
  for (size_t i = 0; i < n && r == 4 * n; ++i) {
    auto param = cast<RankedTensorType>(getTensors()[i].getType());
    auto copy = cast<RankedTensorType>(getResult(3 * n + i).getType());
    if (copy.getShape() != param.getShape() ||
        !(copy.getElementType().isBF16() || copy.getElementType().isF16()))
      return emitOpError("compute copy ")
             << i << " must be bf16 or f16 of its parameter's shape "
             << param << ", got " << copy;
  }
  return success();
}

LogicalResult ReleaseOp::verify() {
  if (getValues().empty())
    return emitOpError("must release at least one value");
  return success();
}

void dsc::copyMarkers(Operation *from, Operation *to) {
  for (NamedAttribute a : from->getAttrs())
    if (a.getName().strref().starts_with("dsc."))
      to->setAttr(a.getName(), a.getValue());
}

std::pair<Value, Value> dsc::scaledByScalar(Value v) {
  auto mul = v.getDefiningOp<MulOp>();
  if (!mul)
    return {};
  auto isScalar = [](Value s) {
    auto t = dyn_cast<RankedTensorType>(s.getType());
    return t && t.getRank() == 0 && t.getElementType().isF32();
  };
  Value a = mul.getLhs(), b = mul.getRhs();
  if (isScalar(b) && a.getType() == v.getType())
    return {a, b};
  if (isScalar(a) && b.getType() == v.getType())
    return {b, a};
  return {};
}

#define GET_OP_CLASSES
#include "dialects/dsc/IR/DscOps.cpp.inc"
