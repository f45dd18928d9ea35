//===- InPlaceTemporaries.cpp - A result over an operand that dies there --===//
//
// dsc-in-place-temporaries (Passes.td): for each op whose kernels may write
// its result (a fused chain: its first) over one of its operands, decide
// whether that operand dies at the op, and say so with
// `dsc.overwrites = <operand index>` on the op.
// Analysis only: the memory plan reads the attribute and places the result
// in the operand's storage.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCINPLACETEMPORARIES
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

using dsc::storageRoot;

/// The operands `op`'s kernels may write its result (its first, for a
/// fused chain) over, element for element (every element of it read before
/// it is written, on the CPU and on the GPU). A fused elementwise kernel,
/// like an elementwise op's (dsc::writesLaneByLane: the tied classifier's
/// weight gradient added to the embedding's), reads each lane's inputs
/// before it writes the lane: any input of the result's type (not
/// broadcast) will do; the first that dies there is taken.
SmallVector<unsigned> overwritableOperands(Operation *op) {
  SmallVector<unsigned> ks;
  // Operand `k`, unless its storage is also another operand's: the
  // kernels read that one after they write (a norm backward's column sums
  // read the gradient and the input again).
  auto alone = [&](unsigned k) {
    Value root = storageRoot(op->getOperand(k));
    for (OpOperand &u : op->getOpOperands())
      if (u.getOperandNumber() != k && storageRoot(u.get()) == root)
        return;
    ks.push_back(k);
  };
  // A scatter_add into init adds each indexed slice to init's, element by
  // element (reading it first); the others stay as init left them.
  if (auto scatter = dyn_cast<dsc::ScatterAddOp>(op)) {
    if (scatter.getInit())
      alone(scatter.getInitMutable()[0].getOperandNumber());
    return ks;
  }
  // A norm backward adding the residual's gradient reads each element of
  // it before it writes the input gradient's (dsc-fuse-norm-residual).
  if (auto norm = dyn_cast<dsc::LayerNormBackwardOp>(op)) {
    if (norm.getResidual())
      alone(norm.getResidualMutable()[0].getOperandNumber());
    return ks;
  }
  if (auto back = dyn_cast<dsc::ClassLossBackwardOp>(op)) {
    if (back.getKind() == "softmax_cross_entropy" && op->getNumResults() == 1)
      ks.push_back(back.getInputMutable().getOperandNumber());
    return ks;
  }
  auto fused = dyn_cast<dsc::FusedOp>(op);
  bool lanes = fused ? fused.getKind() == "elementwise"
                     : dsc::writesLaneByLane(op) && op->getNumResults() == 1;
  if (!lanes || op->getNumResults() == 0)
    return ks;
  // A lane of a fused kernel also reads the partner element of an input
  // its body rotates (rotate_half), which another lane may have written:
  // neither that input nor another view of its storage is written over.
  llvm::SmallPtrSet<Value, 4> rotated;
  if (fused)
    for (auto rh : fused.getBody().getOps<dsc::RotateHalfOp>())
      if (auto arg = dyn_cast<BlockArgument>(rh.getInput()))
        rotated.insert(storageRoot(op->getOperand(arg.getArgNumber())));
  for (OpOperand &u : op->getOpOperands())
    if (u.get().getType() == op->getResult(0).getType() &&
        !rotated.contains(storageRoot(u.get())))
      ks.push_back(u.getOperandNumber());
  return ks;
}

/// Whether nothing in `op`'s block reads `root`, nor a reshape of it, after
/// `op` (a return reads it last of all).
bool diesAt(Value root, Operation *op) {
  SmallVector<Value> worklist = {root};
  llvm::SmallPtrSet<Operation *, 8> seen;
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (Operation *user : v.getUsers()) {
      Operation *reader = op->getBlock()->findAncestorOpInBlock(*user);
      if (!reader)
        return false;
      if (!seen.insert(reader).second || reader == op)
        continue;
      if (isa<dsc::ReshapeOp>(reader)) {
        worklist.push_back(reader->getResult(0));
        continue;
      }
      if (!reader->isBeforeInBlock(op))
        return false;
    }
  }
  return true;
}

struct InPlaceTemporaries
    : dsc::impl::DscInPlaceTemporariesBase<InPlaceTemporaries> {
  void runOnOperation() override {
    Builder b(&getContext());
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (fn.isExternal() || !fn.getBody().hasOneBlock())
        continue;
      for (Operation &op : fn.getBody().front()) {
        for (unsigned k : overwritableOperands(&op)) {
          if (op.getOperand(k).getType() != op.getResult(0).getType())
            continue;
          Value root = storageRoot(op.getOperand(k));
          Operation *def = root.getDefiningOp();
          if (!def || isa<dsc::ConstantOp>(def) ||
              def->getBlock() != op.getBlock() || !diesAt(root, &op))
            continue;
          op.setAttr("dsc.overwrites", b.getI64IntegerAttr(k));
          break;
        }
      }
    }
  }
};

} // namespace
