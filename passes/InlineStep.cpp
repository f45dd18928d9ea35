//===- InlineStep.cpp - the step's call of @forward_backward inlined ------===//
//
// At ZeRO stages 0 and 1 on several ranks, @forward_backward returns the
// flat gradient buckets it reduces (all-reduced, full size), and a value a
// function returns is computed into its caller's storage, which the memory
// plan holds across the whole call: every bucket through the forward, as
// if the gradients existed before backward made them (4.6 GiB on the
// Llama-3.2-1B shape). With the call's body in the step, each bucket lives
// from the concat that fills it, late in backward, to the optimizer's last
// read of it. The step must make exactly one call (no --accum-steps loop of
// several), and an offloaded step is left to dsc-offload (which inlines the
// call itself for --offload-overlap).
//
// Stages 2 and 3 return the reduced shards only (dsc-drop-unused-results
// drops the rest), small beside the rest of the step: left as they are.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace dsc {
#define GEN_PASS_DEF_DSCINLINESTEP
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// The entry's one call of @forward_backward when the module is a stage-0
/// or stage-1 step on several ranks that nothing offloads; else null.
func::CallOp inlinableCall(ModuleOp module, StringRef entry) {
  auto i64 = [&](StringRef name) {
    auto a = module->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : -1;
  };
  if (i64("dsc.world_size") <= 1 || i64("dsc.stage") < 0 ||
      i64("dsc.stage") > 1)
    return nullptr;
  auto step = module.lookupSymbol<func::FuncOp>(entry);
  if (!step || step.isExternal())
    return nullptr;
  func::CallOp only;
  int calls = 0;
  bool offloaded = false;
  module.walk([&](Operation *op) {
    if (auto call = dyn_cast<func::CallOp>(op)) {
      ++calls;
      only = call;
    }
    offloaded |= isa<dsc::OffloadCopyOp>(op);
  });
  if (calls != 1 || offloaded || only->getParentOp() != step ||
      only.getCallee() != "forward_backward")
    return nullptr;
  return only;
}

struct InlineStepPass : public dsc::impl::DscInlineStepBase<InlineStepPass> {
  using Base::Base;

  void runOnOperation() override {
    if (func::CallOp call = inlinableCall(getOperation(), entry))
      dsc::inlineStepCall(call);
  }
};

} // namespace
