//===- RaiseSwiglu.cpp - SwiGLU formulas as dsc.swiglu --------------------===//
//
// dsc-raise-swiglu (Passes.td). From each sigmoid, the matcher checks the
// single-use chain Llama-style MLPs export for silu(gate) * up:
//   (x * sigmoid(x)) * u
// either operand order in both products, x and u of one type. The outer
// product becomes one dsc.swiglu; the formula's ops die.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCRAISESWIGLU
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// The single op that reads `v`, if it is a dsc.mul with `v` as one operand.
dsc::MulOp onlyMulUser(Value v) {
  if (!v.hasOneUse())
    return {};
  return dyn_cast<dsc::MulOp>(*v.getUsers().begin());
}

/// The mul's operand that is not `v` (the other one when both are `v`).
Value otherOperand(dsc::MulOp mul, Value v) {
  return mul.getLhs() == v ? mul.getRhs() : mul.getLhs();
}

struct Found {
  dsc::MulOp product; // silu(x) * u
  Value gate, up;
};

/// silu(x) * u from its sigmoid: s = sigmoid(x) read once, by x * s, read
/// once, by that times u.
std::optional<Found> match(dsc::SigmoidOp sigmoid) {
  Value x = sigmoid.getInput(), s = sigmoid.getResult();
  dsc::MulOp silu = onlyMulUser(s);
  if (!silu || otherOperand(silu, s) != x)
    return std::nullopt;
  dsc::MulOp product = onlyMulUser(silu.getResult());
  if (!product)
    return std::nullopt;
  Value u = otherOperand(product, silu.getResult());
  if (u.getType() != x.getType() || product.getType() != x.getType())
    return std::nullopt;
  return Found{product, x, u};
}

struct RaiseSwigluPass : public dsc::impl::DscRaiseSwigluBase<RaiseSwigluPass> {
  void runOnOperation() override {
    // 1. Find the products (analysis), then 2. replace them (rewrite).
    SmallVector<Found> found;
    getOperation().walk([&](dsc::SigmoidOp sigmoid) {
      if (std::optional<Found> f = match(sigmoid))
        found.push_back(*f);
    });
    for (Found &f : found) {
      OpBuilder b(f.product);
      auto swiglu = dsc::SwigluOp::create(b, f.product.getLoc(), f.gate, f.up);
      f.product.getResult().replaceAllUsesWith(swiglu.getResult());
      f.product.erase();
    }
    // 3. The formulas' sigmoids and silus are dead now.
    dsc::eraseDeadOps(getOperation());
  }
};

} // namespace
