//===- GlobalMeanLoss.cpp - a mean loss exact across micro-batches/ranks --===//
#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace dsc {
#define GEN_PASS_DEF_DSCGLOBALMEANLOSS
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

struct GlobalMeanLossPass
    : public dsc::impl::DscGlobalMeanLossBase<GlobalMeanLossPass> {
  using Base::Base;

  void runOnOperation() override {
    auto forward = getOperation().lookupSymbol<func::FuncOp>("forward");
    if (!forward || forward.isExternal())
      return;
    auto ret = cast<func::ReturnOp>(forward.front().getTerminator());
    if (ret.getNumOperands() == 0)
      return;
    // 1. The loss must be a class loss with reduction "mean" that weighs
    // labels unevenly (ignore_index or class weights).
    Operation *lossOp = ret.getOperand(0).getDefiningOp();
    Value labels, weights;
    std::optional<int64_t> ignore;
    if (auto sce = dyn_cast_or_null<dsc::SoftmaxCrossEntropyOp>(lossOp)) {
      if (sce.getReduction() != "mean")
        return;
      labels = sce.getLabels();
      weights = sce.getWeights();
      if (auto ii = sce.getIgnoreIndex())
        ignore = (int64_t)*ii;
    } else if (auto nll = dyn_cast_or_null<dsc::NllLossOp>(lossOp)) {
      if (nll.getReduction() != "mean")
        return;
      labels = nll.getLabels();
      weights = nll.getWeights();
      if (auto ii = nll.getIgnoreIndex())
        ignore = (int64_t)*ii;
    } else {
      return;
    }
    if (!ignore && !weights)
      return; // every label counts 1: equal slices average exactly
    if (!ret.getOperand(0).hasOneUse())
      return; // the mean is used elsewhere too: leave the model alone

    // 2. Sum instead of mean, and the count of what was summed.
    OpBuilder b(ret);
    Location loc = lossOp->getLoc();
    lossOp->setAttr("reduction", b.getStringAttr("sum"));
    auto lt = cast<RankedTensorType>(labels.getType());
    Type f =
        cast<RankedTensorType>(ret.getOperand(0).getType()).getElementType();
    Value counts;
    Value keep;
    if (ignore) {
      Value ii = dsc::ConstantOp::create(
          b, loc,
          SplatElementsAttr::get(
              RankedTensorType::get({}, lt.getElementType()),
              IntegerAttr::get(lt.getElementType(), *ignore)));
      keep =
          dsc::NotOp::create(b, loc, dsc::EqualOp::create(b, loc, labels, ii));
    }
    if (weights) {
      Value safe = labels;
      if (keep) {
        Value zero = dsc::ConstantOp::create(
            b, loc,
            SplatElementsAttr::get(
                RankedTensorType::get({}, lt.getElementType()),
                IntegerAttr::get(lt.getElementType(), 0)));
        safe = dsc::WhereOp::create(b, loc, keep, labels, zero);
      }
      counts =
          dsc::GatherOp::create(b, loc, weights, safe, b.getI64IntegerAttr(0));
      if (keep)
        counts = dsc::WhereOp::create(
            b, loc, keep, counts,
            dsc::ConstantOp::create(
                b, loc,
                SplatElementsAttr::get(RankedTensorType::get({}, f),
                                       FloatAttr::get(f, 0.0))));
    } else {
      counts = dsc::CastOp::create(b, loc, keep, TypeAttr::get(f));
    }
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < lt.getRank(); ++d)
      axes.push_back(d);
    Value count = axes.empty()
                      ? counts
                      : dsc::ReduceSumOp::create(b, loc, counts,
                                                 b.getDenseI64ArrayAttr(axes),
                                                 b.getBoolAttr(false))
                            .getResult();

    // 3. Return it, named.
    SmallVector<Value> results(ret.getOperands());
    results.push_back(count);
    SmallVector<Attribute> attrs;
    for (unsigned i = 0; i < forward.getNumResults(); ++i)
      attrs.push_back(forward.getResultAttrDict(i)
                          ? (Attribute)forward.getResultAttrDict(i)
                          : (Attribute)b.getDictionaryAttr({}));
    attrs.push_back(
        b.getDictionaryAttr(b.getNamedAttr("dsc.loss_count", b.getUnitAttr())));
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    forward.setType(FunctionType::get(&getContext(), forward.getArgumentTypes(),
                                      TypeRange(ValueRange(results))));
    forward.setAllResultAttrs(attrs);
  }
};

} // namespace
