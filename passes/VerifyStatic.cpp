//===- VerifyStatic.cpp - check the importer's promises on a module -------===//
#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace dsc {
#define GEN_PASS_DEF_DSCVERIFYSTATIC
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

bool isStaticTensor(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r && r.hasStaticShape();
}

struct VerifyStaticPass
    : public dsc::impl::DscVerifyStaticBase<VerifyStaticPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    bool ok = true;
    // 1. Every value an op defines or a block takes is a static tensor.
    module.walk([&](Operation *op) {
      if (isa<ModuleOp, func::FuncOp, func::ReturnOp>(op))
        return;
      if (!isa_and_nonnull<dsc::DscDialect>(op->getDialect())) {
        op->emitError("op outside the dsc dialect in a dsc module: ")
            << op->getName();
        ok = false;
      }
      for (Value v : op->getResults())
        if (!isStaticTensor(v.getType())) {
          op->emitError("result is not a tensor of static shape: ")
              << v.getType();
          ok = false;
        }
    });
    // 2. Every argument says what it is; @forward returns a scalar loss.
    for (auto func : module.getOps<func::FuncOp>()) {
      for (unsigned i = 0; i < func.getNumArguments(); ++i) {
        if (!isStaticTensor(func.getArgumentTypes()[i])) {
          func.emitError("argument #") << i << " is not a static tensor";
          ok = false;
        }
        if (!func.getArgAttr(i, "dsc.param") &&
            !func.getArgAttr(i, "dsc.input") &&
            !func.getArgAttr(i, "dsc.buffer")) {
          func.emitError("argument #")
              << i << " has none of dsc.param, dsc.input, dsc.buffer";
          ok = false;
        }
      }
      if (requireLoss && func.getName() == "forward") {
        auto results = func.getFunctionType().getResults();
        auto loss = results.empty()
                        ? RankedTensorType()
                        : dyn_cast<RankedTensorType>(results.front());
        if (!loss || loss.getRank() != 0) {
          func.emitError("@forward must return the scalar loss first");
          ok = false;
        }
      }
    }
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
