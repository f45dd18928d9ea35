//===- RaiseRmsNorm.cpp - RMSNorm formulas as dsc.layer_norm {rms} --------===//
//
// dsc-raise-rms-norm (Passes.td). From each product of a 1-D scale and a
// normalized value, the matcher walks up the single-use chain HF's
// LlamaRMSNorm (and Mistral's, Qwen2's, ...) exports as:
//   w * (x * 1 / sqrt(mean(x^2, last axis) + eps))
// with the reciprocal as `1 / s`, `reciprocal(s)` or a division `x / s`, the
// square as `pow(x, 2)` or `x * x`, either operand order. The product
// becomes one dsc.layer_norm {rms}; the formula's ops die.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCRAISERMSNORM
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// `v`'s defining op if it is an `Op` whose result only one op reads.
template <typename Op> Op singleUse(Value v) {
  return v.hasOneUse() ? v.getDefiningOp<Op>() : Op();
}

/// x, where `v` is x^2.
Value squareOf(Value v) {
  if (auto pow = singleUse<dsc::PowOp>(v)) {
    std::optional<double> e = dsc::splatFloat(pow.getRhs());
    return e && *e == 2.0 ? pow.getLhs() : Value();
  }
  if (auto mul = singleUse<dsc::MulOp>(v))
    return mul.getLhs() == mul.getRhs() ? mul.getLhs() : Value();
  return Value();
}

/// x and eps, where `s` = sqrt(mean(x^2 over the last axis) + eps).
std::optional<std::pair<Value, double>> rootMeanSquare(Value s) {
  auto sqrt = singleUse<dsc::SqrtOp>(s);
  auto add = sqrt ? singleUse<dsc::AddOp>(sqrt.getInput()) : dsc::AddOp();
  if (!add)
    return std::nullopt;
  Value mean = add.getLhs();
  std::optional<double> eps = dsc::splatFloat(add.getRhs());
  if (!eps) {
    mean = add.getRhs();
    eps = dsc::splatFloat(add.getLhs());
  }
  auto reduce = singleUse<dsc::ReduceMeanOp>(mean);
  if (!eps || *eps < 0 || !reduce || !reduce.getKeepdims() ||
      mean.getType() != add.getResult().getType())
    return std::nullopt;
  Value x = squareOf(reduce.getInput());
  auto type = x ? dyn_cast<RankedTensorType>(x.getType()) : nullptr;
  if (!type || type.getRank() == 0 ||
      reduce.getAxes() != ArrayRef<int64_t>{type.getRank() - 1})
    return std::nullopt;
  return std::make_pair(x, *eps);
}

/// s, where `r` = 1 / s.
Value reciprocalOf(Value r) {
  if (auto rec = singleUse<dsc::ReciprocalOp>(r))
    return rec.getInput();
  auto div = singleUse<dsc::DivOp>(r);
  std::optional<double> one =
      div ? dsc::splatFloat(div.getLhs()) : std::nullopt;
  return one && *one == 1.0 ? div.getRhs() : Value();
}

/// x and eps, where `n` = x / sqrt(mean(x^2) + eps), single use.
std::optional<std::pair<Value, double>> normalized(Value n) {
  if (auto div = singleUse<dsc::DivOp>(n)) {
    auto m = rootMeanSquare(div.getRhs());
    return m && m->first == div.getLhs() ? m : std::nullopt;
  }
  auto mul = singleUse<dsc::MulOp>(n);
  if (!mul)
    return std::nullopt;
  for (auto [x, r] : {std::pair(mul.getLhs(), mul.getRhs()),
                      std::pair(mul.getRhs(), mul.getLhs())})
    if (Value s = reciprocalOf(r))
      if (auto m = rootMeanSquare(s); m && m->first == x)
        return m;
  return std::nullopt;
}

struct Found {
  dsc::MulOp product;
  Value x, scale;
  double eps;
};

/// The RMS norm `product` computes, if it is scale * normalized(x) with a
/// 1-D scale of x's last dim and x's type as the product's.
std::optional<Found> match(dsc::MulOp product) {
  for (auto [w, n] : {std::pair(product.getLhs(), product.getRhs()),
                      std::pair(product.getRhs(), product.getLhs())}) {
    auto m = normalized(n);
    if (!m)
      continue;
    auto x = cast<RankedTensorType>(m->first.getType());
    auto s = dyn_cast<RankedTensorType>(w.getType());
    if (!s || s.getRank() != 1 || s.getShape()[0] != x.getShape().back() ||
        s.getElementType() != x.getElementType() ||
        product.getResult().getType() != x)
      continue;
    return Found{product, m->first, w, m->second};
  }
  return std::nullopt;
}

struct RaiseRmsNorm : dsc::impl::DscRaiseRmsNormBase<RaiseRmsNorm> {
  void runOnOperation() override {
    // 1. Find the norms (analysis), then 2. replace them (rewrite).
    SmallVector<Found> found;
    getOperation().walk([&](dsc::MulOp product) {
      if (std::optional<Found> f = match(product))
        found.push_back(*f);
    });
    for (Found &f : found) {
      OpBuilder b(f.product);
      auto type = cast<RankedTensorType>(f.x.getType());
      auto norm = dsc::LayerNormOp::create(
          b, f.product.getLoc(), type, f.x, f.scale, Value(),
          b.getI64IntegerAttr(type.getRank() - 1), b.getF64FloatAttr(f.eps),
          b.getUnitAttr());
      f.product.getResult().replaceAllUsesWith(norm.getResult());
      f.product.erase();
    }
    // 3. The formulas' ops are dead now.
    dsc::eraseDeadOps(getOperation());
  }
};

} // namespace
