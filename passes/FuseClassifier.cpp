//===- FuseClassifier.cpp - The classifier and its loss, chunked ---------===//
//
// dsc-fuse-classifier (Passes.td): find the classifier matmul whose logits
// only a summed softmax cross-entropy and its gradient read, and the two
// matmuls that take that gradient to the classifier's input and weight
// (analysis: `matchClassifier`); make the five one dsc.linear_cross_entropy
// at the gradient's place, with a chunk that holds about `chunk-bytes` of
// logits (rewrite: `fuse`).
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCFUSECLASSIFIER
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

using dsc::sameOrRecomputed;
using dsc::storageRoot;

/// The ops of one classifier and its loss, forward and backward.
struct Classifier {
  dsc::MatMulOp logits;
  dsc::SoftmaxCrossEntropyOp loss;
  dsc::ClassLossBackwardOp grad;
  dsc::MatMulOp gradInput, gradWeight;
  bool transposeWeight = false;
  // Rows of the logits the loss reads (HF's logits[:, :-1]) and the
  // gradient's padding back to all rows, or null.
  dsc::SliceOp rows;
  dsc::InsertSliceOp padRows;

  /// The gradient of the matmul's logits: the loss's, padded when sliced.
  Value gradLogits() {
    return padRows ? padRows.getResult() : grad.getResult();
  }
};

/// The reshapes (and reshapes of those) that view `v`.
void collectViews(Value v, SetVector<Operation *> &out) {
  for (Operation *user : v.getUsers())
    if (auto r = dyn_cast<dsc::ReshapeOp>(user)) {
      out.insert(r);
      collectViews(r.getResult(), out);
    }
}

/// The non-reshape ops that read `v` or a reshape of it.
void readersThroughReshapes(Value v, SmallVectorImpl<Operation *> &out) {
  for (Operation *user : v.getUsers()) {
    if (auto r = dyn_cast<dsc::ReshapeOp>(user))
      readersThroughReshapes(r.getResult(), out);
    else
      out.push_back(user);
  }
}

/// Erases dsc-recompute's clones that nothing reads any more, from `v` up.
void eraseDeadClones(Value v) {
  Operation *op = storageRoot(v).getDefiningOp();
  if (!op || !op->hasAttr("dsc.recomputed") || !op->use_empty())
    return;
  SmallVector<Value> operands(op->getOperands());
  op->erase();
  for (Value operand : operands)
    eraseDeadClones(operand);
}

/// Whether `v` is computed from `op`'s results (within `op`'s block).
bool dependsOn(Value v, Operation *op, unsigned depth = 0) {
  Operation *def = v.getDefiningOp();
  if (!def || def->getBlock() != op->getBlock() || def->isBeforeInBlock(op))
    return false;
  if (def == op || depth > 64)
    return true; // too deep to tell: assume it does
  return llvm::any_of(def->getOperands(), [&](Value operand) {
    return dependsOn(operand, op, depth + 1);
  });
}

bool sameLoss(dsc::SoftmaxCrossEntropyOp loss, dsc::ClassLossBackwardOp g) {
  return g.getKind() == "softmax_cross_entropy" && g.getReduction() == "sum" &&
         !g.getWeights() && g.getLabels() == loss.getLabels() &&
         g.getIgnoreIndex() == loss.getIgnoreIndex() &&
         storageRoot(g.getInput()) == storageRoot(loss.getScores());
}

/// The two matmuls reading the logits' gradient: grad_input (reads the
/// weight, has the input's type) and grad_weight (reads the input, has the
/// weight's shape and element type), each in the layout its weight has.
LogicalResult matchGradients(Classifier &c) {
  SmallVector<Operation *> readers;
  readersThroughReshapes(c.grad.getResult(), readers);
  if (c.rows) {
    // The sliced rows' gradient, padded back with zeros as the slice's
    // backward does.
    auto pad = readers.size() == 1 ? dyn_cast<dsc::InsertSliceOp>(readers[0])
                                   : dsc::InsertSliceOp();
    if (!pad || pad.getOffsets() != c.rows.getOffsets() ||
        pad.getStrides() != c.rows.getStrides() ||
        pad.getType() != c.logits.getType())
      return failure();
    c.padRows = pad;
    readers.clear();
    readersThroughReshapes(pad.getResult(), readers);
  }
  if (readers.size() != 2)
    return failure();
  Value x = c.logits.getLhs(), w = c.logits.getRhs();
  auto wType = cast<RankedTensorType>(w.getType());
  for (Operation *r : readers) {
    auto mm = dyn_cast<dsc::MatMulOp>(r);
    if (!mm || mm->getBlock() != c.grad->getBlock())
      return failure();
    bool tl = mm.getTransposeLhs(), tr = mm.getTransposeRhs();
    Value lhs = storageRoot(mm.getLhs()), rhs = storageRoot(mm.getRhs());
    Value g = storageRoot(c.gradLogits());
    if (lhs == g && mm.getRhs() == w && !tl && tr == !c.transposeWeight &&
        mm.getType() == x.getType()) {
      c.gradInput = mm;
      continue;
    }
    auto t = cast<RankedTensorType>(mm.getType());
    bool weightLike = t.getShape() == wType.getShape() &&
                      t.getElementType() == wType.getElementType() && tl && !tr;
    if (weightLike && c.transposeWeight && lhs == g &&
        sameOrRecomputed(x, mm.getRhs()))
      c.gradWeight = mm;
    else if (weightLike && !c.transposeWeight &&
             sameOrRecomputed(x, mm.getLhs()) && rhs == g)
      c.gradWeight = mm;
    else
      return failure();
  }
  return success(c.gradInput && c.gradWeight);
}

/// Whether `slice` takes whole rows of logits (the last dim whole, unit
/// strides): those of the classifier's input rows it slices alike.
bool rowsOnly(dsc::SliceOp slice) {
  auto in = dyn_cast<RankedTensorType>(slice.getInput().getType());
  ArrayRef<int64_t> offsets = slice.getOffsets(), sizes = slice.getSizes();
  if (!in || in.getRank() < 2 || int64_t(offsets.size()) != in.getRank() ||
      int64_t(sizes.size()) != in.getRank() ||
      int64_t(slice.getStrides().size()) != in.getRank())
    return false;
  return llvm::all_of(slice.getStrides(), [](int64_t s) { return s == 1; }) &&
         offsets.back() == 0 && sizes.back() == in.getShape().back();
}

/// The classifier whose loss is `loss`, when the pass can fuse it.
std::optional<Classifier> matchClassifier(dsc::SoftmaxCrossEntropyOp loss) {
  if (loss.getReduction() != "sum" || loss.getWeights())
    return std::nullopt;
  auto scores = dyn_cast<RankedTensorType>(loss.getScores().getType());
  Classifier c;
  c.loss = loss;
  Value scored = storageRoot(loss.getScores());
  if (auto slice = scored.getDefiningOp<dsc::SliceOp>()) {
    if (!rowsOnly(slice))
      return std::nullopt;
    c.rows = slice;
    scored = storageRoot(slice.getInput());
  }
  c.logits = scored.getDefiningOp<dsc::MatMulOp>();
  if (!scores || scores.getRank() != 2 || !c.logits ||
      c.logits.getTransposeLhs() || c.logits->getBlock() != loss->getBlock())
    return std::nullopt;
  auto x = dyn_cast<RankedTensorType>(c.logits.getLhs().getType());
  auto w = dyn_cast<RankedTensorType>(c.logits.getRhs().getType());
  if (!x || !w || x.getRank() < 2 || w.getRank() != 2 || !x.hasStaticShape() ||
      !w.hasStaticShape())
    return std::nullopt;
  c.transposeWeight = c.logits.getTransposeRhs();
  // The logits' readers (the slice's, when sliced): this loss and one
  // gradient of it.
  SmallVector<Operation *> readers;
  readersThroughReshapes(c.logits.getResult(), readers);
  if (c.rows) {
    if (readers.size() != 1 || readers[0] != c.rows.getOperation())
      return std::nullopt;
    readers.clear();
    readersThroughReshapes(c.rows.getResult(), readers);
  }
  for (Operation *r : readers) {
    if (r == loss.getOperation())
      continue;
    auto g = dyn_cast<dsc::ClassLossBackwardOp>(r);
    if (!g || c.grad || !sameLoss(loss, g) || g->getBlock() != loss->getBlock())
      return std::nullopt;
    c.grad = g;
  }
  if (!c.grad || failed(matchGradients(c)))
    return std::nullopt;
  // The fused op computes the loss and its gradient at once: the seed of
  // the gradient must not come from the loss.
  if (dependsOn(c.grad.getGrad(), loss))
    return std::nullopt;
  // It stands at the gradient's place: the loss must not be read before it.
  for (Operation *u : loss->getUsers())
    if (u->isBeforeInBlock(c.grad))
      return std::nullopt;
  return c;
}

/// Rows per chunk: as many as `chunkBytes` of logits hold, spread evenly
/// over the chunks that takes and rounded up to 64 (whole GEMM tiles).
int64_t chunkRows(int64_t rows, int64_t rowBytes, int64_t chunkBytes) {
  int64_t fit =
      std::max<int64_t>(1, chunkBytes / std::max<int64_t>(1, rowBytes));
  if (fit >= rows)
    return std::max<int64_t>(rows, 1);
  int64_t chunks = (rows + fit - 1) / fit;
  int64_t even = (rows + chunks - 1) / chunks;
  int64_t aligned = (even + 63) / 64 * 64;
  return aligned <= fit ? aligned : even;
}

/// Replaces the classifier's five ops by one dsc.linear_cross_entropy.
void fuse(Classifier &c, int64_t chunkBytes) {
  Value x = c.logits.getLhs(), w = c.logits.getRhs();
  auto wType = cast<RankedTensorType>(w.getType());
  auto scores = cast<RankedTensorType>(c.loss.getScores().getType());
  Type wElem = wType.getElementType();
  bool f32Grad = wElem.getIntOrFloatBitWidth() == 16;
  int64_t rows = scores.getDimSize(0), classes = scores.getDimSize(1);
  int64_t rowBytes = classes * (scores.getElementTypeBitWidth() / 8);
  SmallVector<Location> locs = {c.logits.getLoc(), c.loss.getLoc(),
                                c.grad.getLoc(), c.gradInput.getLoc(),
                                c.gradWeight.getLoc()};
  OpBuilder b(c.grad);
  MLIRContext *ctx = b.getContext();
  Value rowsIn = x;
  if (c.rows) {
    // The input rows whose logits the loss reads.
    SmallVector<int64_t> sizes(c.rows.getSizes());
    sizes.back() = cast<RankedTensorType>(x.getType()).getShape().back();
    rowsIn = dsc::SliceOp::create(
                 b, c.rows.getLoc(), x, c.rows.getOffsetsAttr(),
                 b.getDenseI64ArrayAttr(sizes), c.rows.getStridesAttr())
                 .getResult();
  }
  auto fused = dsc::LinearCrossEntropyOp::create(
      b, FusedLoc::get(ctx, locs), rowsIn, w, c.loss.getLabels(),
      c.grad.getGrad(), /*init=*/Value(), b.getBoolAttr(c.transposeWeight),
      b.getBoolAttr(f32Grad),
      b.getI64IntegerAttr(chunkRows(rows, rowBytes, chunkBytes)),
      c.loss.getIgnoreIndexAttr());
  c.loss.getResult().replaceAllUsesWith(fused.getLoss());
  Value gradInput = fused.getGradInput();
  if (c.padRows)
    gradInput = dsc::InsertSliceOp::create(
                    b, c.padRows.getLoc(), gradInput,
                    b.getDenseI64ArrayAttr(
                        cast<RankedTensorType>(x.getType()).getShape()),
                    c.padRows.getOffsetsAttr(), c.padRows.getStridesAttr())
                    .getResult();
  c.gradInput.getResult().replaceAllUsesWith(gradInput);
  Value dw = c.gradWeight.getResult();
  if (f32Grad) {
    // Widening casts read the f32 gradient; anything else its 16-bit copy.
    for (Operation *u : llvm::make_early_inc_range(dw.getUsers())) {
      auto cast = dyn_cast<dsc::CastOp>(u);
      if (cast && cast.getType() == fused.getGradWeight().getType()) {
        cast.getResult().replaceAllUsesWith(fused.getGradWeight());
        cast.erase();
      }
    }
    if (!dw.use_empty()) {
      b.setInsertionPointAfter(fused);
      auto narrow =
          dsc::CastOp::create(b, c.gradWeight.getLoc(), fused.getGradWeight(),
                              TypeAttr::get(wElem));
      dw.replaceAllUsesWith(narrow.getResult());
    }
  } else {
    dw.replaceAllUsesWith(fused.getGradWeight());
  }
  Value xRead =
      c.transposeWeight ? c.gradWeight.getRhs() : c.gradWeight.getLhs();
  // The old ops, then the reshapes that only viewed their values.
  SetVector<Operation *> views;
  collectViews(c.logits.getResult(), views);
  collectViews(c.grad.getResult(), views);
  if (c.rows)
    collectViews(c.rows.getResult(), views);
  if (c.padRows)
    collectViews(c.padRows.getResult(), views);
  collectViews(x, views);
  for (Value v = xRead; v.getDefiningOp<dsc::ReshapeOp>();) {
    Operation *def = v.getDefiningOp();
    views.insert(def);
    v = def->getOperand(0);
  }
  Value xClone =
      storageRoot(xRead) != storageRoot(x) ? storageRoot(xRead) : Value();
  // Erased as they become unread: each view before what it views.
  SmallVector<Operation *> pending(views.begin(), views.end());
  pending.append({c.gradWeight, c.gradInput, c.grad, c.loss, c.logits});
  if (c.rows)
    pending.append({c.padRows, c.rows});
  for (bool erased = true; erased;) {
    erased = false;
    for (Operation *&op : pending)
      if (op && op->use_empty()) {
        op->erase();
        op = nullptr;
        erased = true;
      }
  }
  if (xClone)
    eraseDeadClones(xClone);
}

struct FuseClassifier : dsc::impl::DscFuseClassifierBase<FuseClassifier> {
  using DscFuseClassifierBase::DscFuseClassifierBase;

  void runOnOperation() override {
    if (chunkBytes <= 0)
      return;
    SmallVector<Classifier> found;
    getOperation().walk([&](dsc::SoftmaxCrossEntropyOp loss) {
      if (std::optional<Classifier> c = matchClassifier(loss))
        found.push_back(*c);
    });
    for (Classifier &c : found)
      fuse(c, chunkBytes);
  }
};

} // namespace
