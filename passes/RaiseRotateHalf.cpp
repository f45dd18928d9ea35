//===- RaiseRotateHalf.cpp - rotary embedding's rotate_half as one op -----===//
//
// dsc-raise-rotate-half (Passes.td). From each concat, the matcher checks
// the form HF exports for rotate_half(x) = cat(-x2, x1), x1 and x2 the two
// halves of x's last dim:
//   concat(neg(slice(x, [h, 2h))), slice(x, [0, h)), axis = last)
// each slice unit-strided over the whole of x's other dims. The concat
// becomes one dsc.rotate_half of x; the slices and the neg die.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCRAISEROTATEHALF
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// The x of which `v` is the half [lo, lo + h) of the last dim (all of the
/// other dims, unit strides), or null.
Value halfOf(Value v, int64_t lo) {
  auto s = v.getDefiningOp<dsc::SliceOp>();
  if (!s)
    return {};
  auto in = dyn_cast<RankedTensorType>(s.getInput().getType());
  auto out = dyn_cast<RankedTensorType>(s.getResult().getType());
  if (!in || !out || !in.hasStaticShape() || in.getRank() < 1)
    return {};
  int64_t r = in.getRank(), d = in.getShape().back();
  ArrayRef<int64_t> offsets = s.getOffsets(), sizes = s.getSizes(),
                    strides = s.getStrides();
  if (d % 2 != 0 || int64_t(offsets.size()) != r ||
      int64_t(sizes.size()) != r || int64_t(strides.size()) != r)
    return {};
  for (int64_t i = 0; i < r; ++i) {
    bool last = i == r - 1;
    if (strides[i] != 1 || offsets[i] != (last ? lo : 0) ||
        sizes[i] != (last ? d / 2 : in.getDimSize(i)))
      return {};
  }
  return s.getInput();
}

/// rotate_half's x from its concat, if the concat is one.
Value match(dsc::ConcatOp concat) {
  auto t = dyn_cast<RankedTensorType>(concat.getResult().getType());
  if (!t || concat.getInputs().size() != 2 ||
      static_cast<int64_t>(concat.getAxis()) != t.getRank() - 1)
    return {};
  auto neg = concat.getInputs()[0].getDefiningOp<dsc::NegOp>();
  if (!neg)
    return {};
  int64_t h = t.getShape().back() / 2;
  Value x = halfOf(neg.getInput(), h);
  if (!x || halfOf(concat.getInputs()[1], 0) != x ||
      x.getType() != concat.getResult().getType())
    return {};
  return x;
}

struct RaiseRotateHalfPass
    : public dsc::impl::DscRaiseRotateHalfBase<RaiseRotateHalfPass> {
  void runOnOperation() override {
    // 1. Find the concats (analysis), then 2. replace them (rewrite).
    SmallVector<std::pair<dsc::ConcatOp, Value>> found;
    getOperation().walk([&](dsc::ConcatOp concat) {
      if (Value x = match(concat))
        found.push_back({concat, x});
    });
    for (auto &[concat, x] : found) {
      OpBuilder b(concat);
      auto rotated = dsc::RotateHalfOp::create(b, concat.getLoc(), x);
      concat.getResult().replaceAllUsesWith(rotated.getResult());
      concat.erase();
    }
    // 3. The slices and negations are dead now.
    dsc::eraseDeadOps(getOperation());
  }
};

} // namespace
