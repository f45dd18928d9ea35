//===- InPlaceUpdates.cpp - Updated state written into its argument -------===//
//
// dsc-in-place-updates (Passes.td): for each result of the step that is the
// updated value of an argument (a parameter, optimizer state, a buffer or the
// loss scaler's state, paired by role and name), decide whether the op that
// computes it may write it into the argument's storage, and say so with
// `dsc.in_place = <argument index>` on the result. Analysis only: the IR's
// ops are not changed; codegen and the program shell read the attribute.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/Support/Debug.h"

#include <optional>

#define DEBUG_TYPE "dsc-in-place-updates"

namespace dsc {
#define GEN_PASS_DEF_DSCINPLACEUPDATES
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// The result attribute of an updated value, and its argument's.
constexpr std::pair<const char *, const char *> kUpdateRoles[] = {
    {"dsc.param_update", "dsc.param"},
    {"dsc.opt_state_update", "dsc.opt_state"},
    {"dsc.buffer_update", "dsc.buffer"},
    {"dsc.scaler_update", "dsc.scaler"},
    {"dsc.compute_copy_update", "dsc.compute_copy"}};

/// The argument result `k` of `fn` is the update of, or none.
std::optional<unsigned> updatedArgument(func::FuncOp fn, unsigned k) {
  for (auto [resultAttr, argAttr] : kUpdateRoles) {
    auto name = fn.getResultAttrOfType<StringAttr>(k, resultAttr);
    if (!name)
      continue;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (auto n = fn.getArgAttrOfType<StringAttr>(i, argAttr))
        if (n == name)
          return i;
    return std::nullopt;
  }
  return std::nullopt;
}

/// Whether result `r` of `op` may be written over its operand `o`. The
/// optimizer ops update each state in place element by element (each
/// result over its own state operand only); elementwise ops over any operand
/// of the result's type. Not dsc.fused: its generated kernels declare their
/// operands __restrict__.
bool mayOverwrite(Operation *op, unsigned r, unsigned o) {
  if (op->getOperand(o).getType() != op->getResult(r).getType())
    return false;
  if (isa<dsc::AdamWOp>(op)) // (param, grad, exp_avg, exp_avg_sq, ...)
    return o == (r == 0 ? 0u : r + 1);
  if (isa<dsc::SgdOp>(op)) // (param, grad, momentum_buffer, ...)
    return o == (r == 0 ? 0u : 2u);
  if (auto multi = dyn_cast<dsc::AdamWMultiOp>(op)) {
    // tensors: N params, N grads, N exp_avgs, N exp_avg_sqs; results: N new
    // params, N new exp_avgs, N new exp_avg_sqs (and N compute copies,
    // which overwrite nothing).
    unsigned first = multi.getTensors().getBeginOperandIndex();
    unsigned n = multi.getTensors().size() / 4;
    unsigned slot = r / n, k = r % n;
    if (slot == 3)
      return false;
    return o == first + (slot == 0 ? k : (slot + 1) * n + k);
  }
  return dsc::writesLaneByLane(op);
}

/// Whether `op` is a slice or reshape (through any chain of them) of what
/// an all_gather gathered: ZeRO-1/2's updated parameters, cut out of the
/// gathered flat bucket. Written into the result's storage from there.
bool isGatheredPiece(Operation *op) {
  while (isa_and_nonnull<dsc::SliceOp, dsc::ReshapeOp>(op))
    op = op->getOperand(0).getDefiningOp();
  auto wait = dyn_cast_or_null<dsc::WaitOp>(op);
  return wait &&
         isa_and_nonnull<shard::AllGatherOp>(wait.getInput().getDefiningOp());
}

/// Why result `k` (the update of argument `a`) may not be computed into the
/// argument's storage; empty when it may.
std::string whyNot(func::FuncOp fn, unsigned k, unsigned a) {
  Block &body = fn.getBody().front();
  Operation *ret = body.getTerminator();
  Value v = ret->getOperand(k);
  BlockArgument arg = body.getArgument(a);
  if (v.getType() != arg.getType())
    return "its type differs from the argument's";
  if (llvm::count(ret->getOperands(), v) > 1)
    return "the value is returned twice";
  auto r = dyn_cast<OpResult>(v);
  Operation *def = r ? r.getOwner() : nullptr;
  if (!def || def->getBlock() != &body)
    return "it is not computed by an op of the body";
  // A copy into the device (dsc-offload's compute copies), a write into
  // an NVMe file (dsc-offload optimizer=nvme), or a grouped
  // AdamW's compute-copy result (kept on the host by --offload-param),
  // writes the whole storage from elsewhere: it may go over an argument
  // nobody reads later.
  // So does a piece of a gathered bucket (ZeRO-1/2's updated parameters).
  auto multi = dyn_cast<dsc::AdamWMultiOp>(def);
  bool copyIn =
      isa<dsc::OffloadCopyOp, dsc::NvmeWriteOp>(def) || isGatheredPiece(def) ||
      (multi && r.getResultNumber() >= 3 * (multi.getTensors().size() / 4));
  // The producer reads the argument itself, and only where it may write.
  bool reads = false;
  for (OpOperand &o : def->getOpOperands()) {
    if (o.get() != arg)
      continue;
    if (!mayOverwrite(def, r.getResultNumber(), o.getOperandNumber()))
      return ("'" + def->getName().getStringRef() +
              "' does not update that operand element by element")
          .str();
    reads = true;
  }
  if (!reads && !copyIn)
    return ("'" + def->getName().getStringRef() +
            "' does not read the argument")
        .str();
  // Nothing reads the argument's storage at or after the producer, but the
  // producer through its own operand (not through a view: another index).
  for (Operation *reader : dsc::storageReaders(arg)) {
    if (reader == def)
      continue;
    if (isa<dsc::ReshapeOp, dsc::WaitOp, dsc::CollectiveInputOp>(reader) &&
        llvm::is_contained(reader->getUsers(), def))
      return "the producer also reads a view of the argument";
    if (!reader->isBeforeInBlock(def))
      return ("'" + reader->getName().getStringRef() +
              "' reads the argument later")
          .str();
  }
  return "";
}

struct InPlaceUpdates : dsc::impl::DscInPlaceUpdatesBase<InPlaceUpdates> {
  using Base::Base;

  void runOnOperation() override {
    auto fn = getOperation().lookupSymbol<func::FuncOp>(function);
    if (!fn || fn.isExternal() || !fn.getBody().hasOneBlock())
      return;
    Builder b(&getContext());
    int inPlace = 0;
    for (unsigned k = 0; k < fn.getNumResults(); ++k) {
      std::optional<unsigned> a = updatedArgument(fn, k);
      if (!a)
        continue;
      std::string why = whyNot(fn, k, *a);
      LLVM_DEBUG(llvm::dbgs()
                 << DEBUG_TYPE ": result " << k << " (argument " << *a
                 << "): " << (why.empty() ? "in place" : why) << "\n");
      if (!why.empty())
        continue;
      fn.setResultAttr(k, "dsc.in_place", b.getI64IntegerAttr(*a));
      ++inPlace;
    }
    LLVM_DEBUG(llvm::dbgs()
               << DEBUG_TYPE ": " << inPlace << " results in place\n");
  }
};

} // namespace
