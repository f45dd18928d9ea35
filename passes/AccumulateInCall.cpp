//===- AccumulateInCall.cpp - micro-batch sums added inside the callee ----===//
//
// With --accum-steps K, @train_step calls @forward_backward K times and sums
// each gradient over the calls: add(add(c0#r, c1#r), c2#r). A value a
// function returns is computed into its caller's storage, held across the
// whole call, so each call's gradients exist from the call's first op (its
// forward) beside the running sum: 8 bytes a f32 parameter, where PyTorch's
// `.grad += ` holds 4.
//
// This pass moves each such sum into the callee: @forward_backward takes the
// running sum as a new argument {dsc.accumulator = r} and returns
// add(sum, gradient) right where the gradient is made, a result marked
// {dsc.in_place = argument} (written over the argument's storage, which the
// memory plan lets it take in the caller when the sum dies at the call).
// The first call adds to zeros, so the sums keep their order and bits:
// ((0 + g0) + g1) + g2.
//
// Steps: (1) analysis: the calls, and the results every call's sum is made
// of (each call's result and each partial sum read by the chain alone);
// (2) rewrite the callee (arguments, adds, results); (3) rewrite the calls.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "dsc-accumulate-in-call"

namespace dsc {
#define GEN_PASS_DEF_DSCACCUMULATEINCALL
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// One sum over the calls: of result `result` of each, ending in `sum`.
struct Accumulation {
  unsigned result;
  Value sum;
  SmallVector<Operation *> adds; // the chain, first add first
};

/// Step 1: the sums of the step that may move into the callee. A sum moves
/// when it is a floating tensor of rank >= 1 (gradients and their shards,
/// not the scalar loss or label count), each call's result is read by the
/// chain alone and each partial sum by the next add alone.
SmallVector<Accumulation>
findAccumulations(func::FuncOp step, MutableArrayRef<func::CallOp> calls) {
  SmallVector<Accumulation> found;
  llvm::DenseSet<unsigned> taken;
  for (Operation &op : step.getBody().front()) {
    auto add = dyn_cast<dsc::AddOp>(op);
    if (!add)
      continue;
    std::optional<unsigned> r = dsc::summedCallResult(add, calls);
    auto type = dyn_cast<RankedTensorType>(add.getType());
    if (!r || !type || type.getRank() == 0 ||
        !isa<FloatType>(type.getElementType()) || taken.contains(*r))
      continue;
    Accumulation acc{*r, add, {}};
    for (auto a = add; a; a = a.getLhs().getDefiningOp<dsc::AddOp>())
      acc.adds.insert(acc.adds.begin(), a);
    bool alone = llvm::all_of(
        calls, [&](func::CallOp c) { return c->getResult(*r).hasOneUse(); });
    for (Operation *a : ArrayRef(acc.adds).drop_back())
      alone &= a->getResult(0).hasOneUse();
    if (!alone)
      continue;
    taken.insert(*r);
    found.push_back(std::move(acc));
  }
  return found;
}

/// The classifier whose weight gradient `g` is made from, when that is the
/// first term of every add that makes `g`: `g` itself, or a scatter_add of
/// a tied embedding's rows into it (each value read once). The running sum
/// is then that gradient's init: the classifier's GEMMs add their chunks
/// onto it, and no whole gradient of its own exists in the callee (the
/// order of the sums changes: ((sum + chunk0) + chunk1) + rows).
dsc::LinearCrossEntropyOp classifierOf(Value g) {
  while (g.hasOneUse()) {
    if (auto scatter = g.getDefiningOp<dsc::ScatterAddOp>();
        scatter && scatter.getInit()) {
      g = scatter.getInit();
      continue;
    }
    auto lce = g.getDefiningOp<dsc::LinearCrossEntropyOp>();
    if (lce && !lce.getInit() && g == lce.getGradWeight())
      return lce;
    break;
  }
  return {};
}

/// Step 2: @forward_backward takes each running sum as a new argument (in
/// `found`'s order) and returns it plus the gradient, added where the
/// gradient is made (or, for a classifier's weight gradient, where its
/// first term is).
void accumulateInCallee(func::FuncOp fb, ArrayRef<Accumulation> found) {
  Block &body = fb.front();
  Operation *ret = body.getTerminator();
  OpBuilder b(fb.getContext());
  for (const Accumulation &acc : found) {
    Value g = ret->getOperand(acc.result);
    unsigned arg = fb.getNumArguments();
    (void)fb.insertArgument(
        arg, g.getType(),
        b.getDictionaryAttr(
            b.getNamedAttr("dsc.accumulator", b.getI64IntegerAttr(acc.result))),
        fb.getLoc());
    BlockArgument sum = body.getArgument(arg);
    if (dsc::LinearCrossEntropyOp lce = classifierOf(g)) {
      lce.getInitMutable().assign(sum);
    } else {
      if (Operation *def = g.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(&body);
      ret->setOperand(acc.result, dsc::AddOp::create(b, g.getLoc(), sum, g));
    }
    fb.setResultAttr(acc.result, "dsc.in_place", b.getI64IntegerAttr(arg));
  }
}

/// Step 3: the first call adds to zeros (one constant each, marked so that
/// no CSE merges two: each becomes a sum's storage), every later call to
/// the previous call's result; the last call's result is the sum.
void rewriteCalls(func::FuncOp fb, MutableArrayRef<func::CallOp> calls,
                  ArrayRef<Accumulation> found) {
  for (size_t k = 0; k < calls.size(); ++k) {
    func::CallOp call = calls[k];
    OpBuilder b(call);
    SmallVector<Value> operands(call.getOperands());
    for (const Accumulation &acc : found) {
      if (k > 0) {
        operands.push_back(calls[k - 1]->getResult(acc.result));
        continue;
      }
      auto type = cast<RankedTensorType>(acc.sum.getType());
      auto zeros = dsc::ConstantOp::create(
          b, call.getLoc(),
          SplatElementsAttr::get(type,
                                 FloatAttr::get(type.getElementType(), 0.0)));
      zeros->setAttr("dsc.accumulator", b.getI64IntegerAttr(acc.result));
      operands.push_back(zeros);
    }
    auto next = func::CallOp::create(b, call.getLoc(), fb, operands);
    next->setDiscardableAttrs(call->getDiscardableAttrDictionary());
    call.replaceAllUsesWith(next.getResults());
    call.erase();
    calls[k] = next;
  }
  // Each chain's adds now read the calls' running sums: the last call's
  // result replaces the chain, whose adds go.
  for (const Accumulation &acc : found) {
    Value sum = acc.sum;
    sum.replaceAllUsesWith(calls.back()->getResult(acc.result));
    for (Operation *add : llvm::reverse(acc.adds))
      add->erase();
  }
}

struct AccumulateInCallPass
    : public dsc::impl::DscAccumulateInCallBase<AccumulateInCallPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>(entry);
    auto fb = module.lookupSymbol<func::FuncOp>(callee);
    if (!step || !fb || step.isExternal() || fb.isExternal())
      return;
    // Every use of the callee is a call in the step's block.
    SmallVector<func::CallOp> calls = dsc::callsOf(fb, module);
    if (calls.size() < 2 || llvm::any_of(calls, [&](func::CallOp c) {
          return c->getBlock() != &step.getBody().front();
        }))
      return;
    SmallVector<Accumulation> found = findAccumulations(step, calls);
    LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": " << found.size() << " sums over "
                            << calls.size() << " calls\n");
    if (found.empty())
      return;
    accumulateInCallee(fb, found);
    rewriteCalls(fb, calls, found);
  }
};

} // namespace
