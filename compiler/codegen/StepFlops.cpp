//===- StepFlops.cpp - The floating-point work of a step ------------------===//

#include "compiler/codegen/StepFlops.h"
#include "dialects/dsc/IR/DscOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dsc::codegen {

namespace {

double numel(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  if (!r || !r.hasStaticShape())
    return 0;
  return double(r.getNumElements());
}

int64_t dim(Value v, int64_t i) {
  auto r = dyn_cast<RankedTensorType>(v.getType());
  if (!r || r.getRank() == 0)
    return 0;
  if (i < 0)
    i += r.getRank();
  return i >= 0 && i < r.getRank() && !r.isDynamicDim(i) ? r.getDimSize(i) : 0;
}

/// 4 B Hq Tq Tk D for the two matmuls of attention, halved under a causal
/// mask (or the window's share of keys).
double attentionFlops(Value query, Value key, bool causal, int64_t window,
                      bool seqMajor) {
  auto q = dyn_cast<RankedTensorType>(query.getType());
  auto k = dyn_cast<RankedTensorType>(key.getType());
  if (!q || !k || q.getRank() != 4 || k.getRank() != 4 || !q.hasStaticShape() ||
      !k.hasStaticShape())
    return 0;
  SmallVector<int64_t> qs = attentionHeadsFirst(q.getShape(), seqMajor),
                       ks = attentionHeadsFirst(k.getShape(), seqMajor);
  double b = qs[0], h = qs[1], tq = qs[2], d = qs[3], tk = ks[2];
  double keys = tk;
  if (window > 0)
    keys = std::min<double>(tk, double(window));
  else if (causal)
    keys = tk / 2;
  return 4 * b * h * tq * keys * d;
}

/// 2 * output elements * (input channels per group * kernel elements).
double convFlops(Type out, Type weight) {
  auto w = dyn_cast<RankedTensorType>(weight);
  if (!w || !w.hasStaticShape() || w.getRank() < 2)
    return 0;
  double perOutput = double(w.getNumElements()) / double(w.getDimSize(0));
  return 2 * numel(out) * perOutput;
}

class Counter {
public:
  explicit Counter(ModuleOp module) : module_(module) {}

  double of(func::FuncOp fn) {
    auto [it, fresh] = memo_.try_emplace(fn.getOperation(), 0.0);
    if (!fresh)
      return it->second;
    double total = 0;
    fn.walk([&](Operation *op) { total += opFlops(op); });
    memo_[fn.getOperation()] = total;
    return total;
  }

private:
  double opFlops(Operation *op) {
    return llvm::TypeSwitch<Operation *, double>(op)
        .Case([&](func::CallOp c) {
          auto callee = module_.lookupSymbol<func::FuncOp>(c.getCallee());
          return callee ? of(callee) : 0.0;
        })
        .Case([&](MatMulOp m) {
          // K: op(lhs)'s last dim, the stored second-to-last when transposed.
          int64_t k = dim(m.getLhs(), m.getTransposeLhs() ? -2 : -1);
          return 2 * numel(m.getResult().getType()) * double(k);
        })
        .Case([&](MatMulBiasGradOp m) {
          // K: the rows both operands share (the bias sum is not counted,
          // as a reduce_sum is not).
          return 2 * numel(m.getResult().getType()) *
                 double(dim(m.getLhs(), 0));
        })
        .Case([&](LinearCrossEntropyOp l) {
          // The logits, grad_input and grad_weight products: 3 x 2 N V C.
          return 6 * numel(l.getInput().getType()) *
                 numel(l.getGradWeight().getType()) /
                 std::max(1.0, double(dim(l.getInput(), -1)));
        })
        .Case([&](GemmGeluOp g) {
          return 2 * numel(g.getResult().getType()) * double(dim(g.getA(), 1));
        })
        .Case([&](MatMulGeluGradOp g) {
          return 2 * numel(g.getResult().getType()) * double(dim(g.getA(), 1));
        })
        .Case([&](GemmOp g) {
          int64_t k = g.getTransA() ? dim(g.getA(), 0) : dim(g.getA(), 1);
          return 2 * numel(g.getResult().getType()) * double(k);
        })
        .Case([&](ConvOp c) {
          return convFlops(c.getResult().getType(), c.getWeight().getType());
        })
        .Case([&](ConvBackwardInputOp c) {
          return convFlops(c.getGrad().getType(), c.getWeight().getType());
        })
        .Case([&](ConvBackwardWeightOp c) {
          return convFlops(c.getGrad().getType(), c.getResult().getType());
        })
        .Case([&](AttentionOp a) {
          return attentionFlops(a.getQuery(), a.getKey(), a.getCausal(),
                                a.getWindow(), a.getSeqMajor());
        })
        .Case([&](AttentionBackwardOp a) {
          // dQ, dK, dV and the recomputed scores and dP: five matmuls of
          // the forward's two.
          return 2.5 * attentionFlops(a.getQuery(), a.getKey(), a.getCausal(),
                                      a.getWindow(), a.getSeqMajor());
        })
        .Default([](Operation *) { return 0.0; });
  }

  ModuleOp module_;
  llvm::DenseMap<Operation *, double> memo_;
};

} // namespace

double stepFlops(ModuleOp module, func::FuncOp fn) {
  return Counter(module).of(fn);
}

} // namespace dsc::codegen
