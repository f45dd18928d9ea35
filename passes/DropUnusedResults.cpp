//===- DropUnusedResults.cpp - results no caller reads are not returned ---===//
//
// dsc-autodiff's @forward_backward returns every parameter's gradient. Once
// dsc-zero-partition reduces them inside it (stages 1-3) and returns the
// bucket shards, the caller reads none of the per-parameter gradients, yet
// a returned value is computed into the caller's storage, which is held
// across the whole call: 4.6 GiB of f32 gradients alive through the forward
// of a 1.2B-parameter model. This pass drops the results no call reads from
// every function called only by func.call, so each such value lives from
// where it is made to its last use inside the function, as any other.
//
// Steps: (1) per function, the results no call reads; (2) rewrite the
// function's returns and type, and each call.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/BitVector.h"

namespace dsc {
#define GEN_PASS_DEF_DSCDROPUNUSEDRESULTS
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// Step 1: the results of `f` that none of `calls` reads.
llvm::BitVector unusedResults(func::FuncOp f, ArrayRef<func::CallOp> calls) {
  llvm::BitVector unused(f.getNumResults(), true);
  for (func::CallOp call : calls)
    for (OpResult r : call->getResults())
      if (!r.use_empty())
        unused.reset(r.getResultNumber());
  return unused;
}

/// Step 2: `f` no longer returns the `unused` results; each call is
/// rebuilt with the results that remain.
void dropResults(func::FuncOp f, ArrayRef<func::CallOp> calls,
                 const llvm::BitVector &unused) {
  f.walk([&](func::ReturnOp ret) { ret->eraseOperands(unused); });
  (void)f.eraseResults(unused);
  for (func::CallOp call : calls) {
    OpBuilder b(call);
    auto kept = func::CallOp::create(b, call.getLoc(), f, call.getOperands());
    kept->setDiscardableAttrs(call->getDiscardableAttrDictionary());
    unsigned next = 0;
    for (OpResult r : call->getResults())
      if (!unused.test(r.getResultNumber()))
        r.replaceAllUsesWith(kept->getResult(next++));
    call->erase();
  }
}

struct DropUnusedResultsPass
    : public dsc::impl::DscDropUnusedResultsBase<DropUnusedResultsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto f : module.getOps<func::FuncOp>()) {
      if (f.isExternal() || f.getSymName() == entry)
        continue; // the program's entry returns what its caller reads
      SmallVector<func::CallOp> calls = dsc::callsOf(f, module);
      if (calls.empty())
        continue; // the entry, @forward, or a symbol used otherwise
      llvm::BitVector unused = unusedResults(f, calls);
      if (unused.any())
        dropResults(f, calls, unused);
    }
  }
};

} // namespace
