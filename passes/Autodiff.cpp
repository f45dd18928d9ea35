//===- Autodiff.cpp - reverse-mode differentiation of @forward ------------===//
#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace dsc {
#define GEN_PASS_DEF_DSCAUTODIFF
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

bool isFloatTensor(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r && isa<FloatType>(r.getElementType());
}

struct AutodiffPass : public dsc::impl::DscAutodiffBase<AutodiffPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(function);
    if (!forward || forward.isExternal()) {
      module.emitError("dsc-autodiff: no function @")
          << function << " with a body";
      return signalPassFailure();
    }
    if (module.lookupSymbol(output)) {
      module.emitError("dsc-autodiff: @") << output << " exists already";
      return signalPassFailure();
    }
    // 1. Clone the forward function; the reverse sweep goes before its
    // return.
    func::FuncOp fb = forward.clone();
    fb.setName(output);
    module.insert(std::next(Block::iterator(forward)), fb);
    Block &body = fb.front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (ret.getNumOperands() == 0 ||
        cast<RankedTensorType>(ret.getOperand(0).getType()).getRank() != 0 ||
        !isFloatTensor(ret.getOperand(0).getType())) {
      fb.emitError("dsc-autodiff: @")
          << function << " must return a scalar float loss first";
      return signalPassFailure();
    }
    Value loss = ret.getOperand(0);

    // 2. Activity: float values that depend on a trainable parameter.
    llvm::DenseSet<Value> active;
    SmallVector<std::pair<BlockArgument, StringAttr>> params;
    for (BlockArgument arg : body.getArguments())
      if (auto name = fb.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                      "dsc.param")) {
        params.push_back({arg, name});
        if (isFloatTensor(arg.getType()))
          active.insert(arg);
      }
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator()) {
      ops.push_back(&op);
      bool dependsOnParam = llvm::any_of(
          op.getOperands(), [&](Value v) { return active.contains(v); });
      if (dependsOnParam)
        for (Value r : op.getResults())
          if (isFloatTensor(r.getType()))
            active.insert(r);
    }

    // 3. The reverse sweep: each op adds its operands' gradients.
    OpBuilder b(ret);
    llvm::DenseMap<Value, Value> grads;
    auto lossType = cast<RankedTensorType>(loss.getType());
    auto seed = dsc::ConstantOp::create(
        b, loss.getLoc(),
        SplatElementsAttr::get(lossType,
                               FloatAttr::get(lossType.getElementType(), 1.0)));
    // Later passes (stage-3 re-gathering) tell forward from backward by it.
    seed->setAttr("dsc.backward_begin", b.getUnitAttr());
    grads[loss] = seed;
    for (Operation *op : llvm::reverse(ops)) {
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        resultGrads.push_back(grads.lookup(r));
        any |= (bool)resultGrads.back();
      }
      if (!any || llvm::none_of(op->getOperands(),
                                [&](Value v) { return active.contains(v); }))
        continue;
      auto vjp = dyn_cast<dsc::VJPOpInterface>(op);
      if (!vjp) {
        op->emitError("cannot differentiate '")
            << op->getName()
            << "': it has no vector-Jacobian product, but a parameter's "
               "gradient flows through it";
        return signalPassFailure();
      }
      SmallVector<Value> operandGrads;
      b.setInsertionPoint(ret);
      if (failed(vjp.buildVJP(b, resultGrads, operandGrads)))
        return signalPassFailure();
      for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
        if (i >= operandGrads.size() || !operandGrads[i] ||
            !active.contains(operand))
          continue;
        Value g = operandGrads[i];
        if (g.getType() != operand.getType()) {
          op->emitError("internal error: gradient of operand #")
              << i << " has type " << g.getType() << ", expected "
              << operand.getType();
          return signalPassFailure();
        }
        Value &acc = grads[operand];
        acc = acc ? dsc::AddOp::create(b, op->getLoc(), acc, g).getResult() : g;
      }
    }

    // 4. Return the forward results, then one gradient per parameter.
    b.setInsertionPoint(ret);
    SmallVector<Value> results(ret.getOperands());
    unsigned firstGrad = results.size();
    for (auto &[arg, name] : params) {
      Value g = grads.lookup(arg);
      if (!g) {
        // Not on the loss's path: its gradient is zero.
        auto t = cast<RankedTensorType>(arg.getType());
        g = dsc::ConstantOp::create(
            b, fb.getLoc(),
            SplatElementsAttr::get(t, FloatAttr::get(t.getElementType(), 0.0)));
      }
      results.push_back(g);
    }
    SmallVector<Attribute> resultAttrs;
    for (unsigned i = 0; i < firstGrad; ++i)
      resultAttrs.push_back(fb.getResultAttrDict(i)
                                ? (Attribute)fb.getResultAttrDict(i)
                                : (Attribute)b.getDictionaryAttr({}));
    for (auto &[arg, name] : params)
      resultAttrs.push_back(
          b.getDictionaryAttr(b.getNamedAttr("dsc.grad", name)));
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    fb.setType(FunctionType::get(&getContext(), fb.getArgumentTypes(),
                                 TypeRange(ValueRange(results))));
    fb.setAllResultAttrs(resultAttrs);

    // 5. Drop what the gradients did not need (one backward walk suffices:
    // users come after their operands).
    SmallVector<Operation *> order;
    for (Operation &op : body.without_terminator())
      order.push_back(&op);
    for (Operation *op : llvm::reverse(order))
      if (op->use_empty() && isPure(op))
        op->erase();
  }
};

} // namespace
