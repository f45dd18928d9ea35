//===- RaiseGelu.cpp - GELU formulas as dsc.gelu --------------------------===//
//
// dsc-raise-gelu (Passes.td). The matcher flattens products and sums of
// single-use values into factor and term lists, so the association the
// exporter chose does not matter: from each tanh or erf, it checks the
// argument (k * (x + c * x^3), or x * 1/sqrt(2)) and then the value
// 0.5 * x * (1 + t) that uses it, and replaces that value.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCRAISEGELU
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// Whether `a` is `b` to float32 precision.
bool near(double a, double b) {
  return std::fabs(a - b) <= 1e-6 * std::fabs(b);
}

/// The factors of `v` as a product of values used once (a splat constant's
/// value folded into `scale`): mul(mul(a, b), c) -> {a, b, c}.
void factors(Value v, SmallVectorImpl<Value> &out, double &scale,
             bool root = true) {
  if (std::optional<double> s = dsc::splatFloat(v)) {
    scale *= *s;
    return;
  }
  auto mul = v.getDefiningOp<dsc::MulOp>();
  if (mul && (root || v.hasOneUse())) {
    factors(mul.getLhs(), out, scale, false);
    factors(mul.getRhs(), out, scale, false);
    return;
  }
  auto div = v.getDefiningOp<dsc::DivOp>();
  if (div && (root || v.hasOneUse()))
    if (std::optional<double> d = dsc::splatFloat(div.getRhs()); d && *d != 0) {
      factors(div.getLhs(), out, scale, false);
      scale /= *d;
      return;
    }
  out.push_back(v);
}

/// The terms of `v` as a sum of values used once (splats into `constant`).
void terms(Value v, SmallVectorImpl<Value> &out, double &constant,
           bool root = true) {
  if (std::optional<double> s = dsc::splatFloat(v)) {
    constant += *s;
    return;
  }
  auto add = v.getDefiningOp<dsc::AddOp>();
  if (add && (root || v.hasOneUse())) {
    terms(add.getLhs(), out, constant, false);
    terms(add.getRhs(), out, constant, false);
    return;
  }
  out.push_back(v);
}

/// Whether `v` is x^3 (x*x*x in any association, or pow(x, 3)).
bool isCube(Value v, Value x) {
  if (auto pow = v.getDefiningOp<dsc::PowOp>()) {
    std::optional<double> e = dsc::splatFloat(pow.getRhs());
    return pow.getLhs() == x && e && *e == 3.0;
  }
  SmallVector<Value> f;
  double scale = 1.0;
  factors(v, f, scale);
  return scale == 1.0 && f.size() == 3 &&
         llvm::all_of(f, [&](Value y) { return y == x; });
}

/// For the argument u of tanh: x if u = sqrt(2/pi) * (x + 0.044715 * x^3).
Value tanhGeluInput(Value u) {
  SmallVector<Value> f;
  double k = 1.0;
  factors(u, f, k);
  if (f.size() != 1 || !near(k, std::sqrt(2.0 / M_PI)))
    return Value();
  SmallVector<Value> t;
  double zero = 0.0;
  terms(f[0], t, zero);
  if (t.size() != 2 || zero != 0.0)
    return Value();
  for (int i = 0; i < 2; ++i) {
    Value x = t[i], cubic = t[1 - i];
    SmallVector<Value> g;
    double c = 1.0;
    factors(cubic, g, c);
    if (near(c, 0.044715) && g.size() == 1 && isCube(g[0], x))
      return x;
    // c * x * x * x flattened into one product.
    if (near(c, 0.044715) && g.size() == 3 &&
        llvm::all_of(g, [&](Value y) { return y == x; }))
      return x;
  }
  return Value();
}

/// For the argument of erf: x if it is x / sqrt(2) (or x * 1/sqrt(2)).
Value erfGeluInput(Value u) {
  SmallVector<Value> f;
  double k = 1.0;
  factors(u, f, k);
  if (f.size() == 1 && near(k, M_SQRT1_2))
    return f[0];
  return Value();
}

/// The value 0.5 * x * (1 + t) built on `t` (its only user chain), if any.
Operation *geluProduct(Value t, Value x) {
  if (!t.hasOneUse())
    return nullptr;
  auto onePlus = dyn_cast<dsc::AddOp>(*t.user_begin());
  if (!onePlus)
    return nullptr;
  SmallVector<Value> s;
  double one = 0.0;
  terms(onePlus.getResult(), s, one);
  if (s.size() != 1 || s[0] != t || one != 1.0)
    return nullptr;
  // Climb the products that use (1 + t) while they are used once; the top
  // one must be 0.5 * x * (1 + t).
  Value top = onePlus.getResult();
  while (top.hasOneUse() && isa<dsc::MulOp>(*top.user_begin())) {
    Value next = top.user_begin()->getResult(0);
    top = next;
    SmallVector<Value> f;
    double half = 1.0;
    factors(top, f, half);
    bool hasX = llvm::is_contained(f, x),
         hasT = llvm::is_contained(f, onePlus.getResult());
    if (f.size() == 2 && hasX && hasT && near(half, 0.5))
      return top.getDefiningOp();
  }
  return nullptr;
}

struct RaiseGelu : dsc::impl::DscRaiseGeluBase<RaiseGelu> {
  void runOnOperation() override {
    SmallVector<std::pair<Operation *, std::pair<Value, bool>>> found;
    getOperation().walk([&](Operation *op) {
      Value x;
      bool tanh = isa<dsc::TanhOp>(op);
      if (tanh)
        x = tanhGeluInput(op->getOperand(0));
      else if (isa<dsc::ErfOp>(op))
        x = erfGeluInput(op->getOperand(0));
      if (!x)
        return;
      auto type = dyn_cast<RankedTensorType>(x.getType());
      if (!type || type != op->getResult(0).getType())
        return;
      if (Operation *product = geluProduct(op->getResult(0), x);
          product && product->getResult(0).getType() == type)
        found.push_back({product, {x, tanh}});
    });
    for (auto &[product, input] : found) {
      OpBuilder b(product);
      auto gelu = dsc::GeluOp::create(b, product->getLoc(), input.first,
                                      b.getBoolAttr(input.second));
      product->getResult(0).replaceAllUsesWith(gelu.getResult());
    }
    // The formulas' ops are dead now.
    dsc::eraseDeadOps(getOperation());
  }
};

} // namespace
