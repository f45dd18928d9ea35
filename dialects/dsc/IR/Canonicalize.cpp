//===- Canonicalize.cpp - canonicalization patterns of the dsc ops --------===//
//
// Rewrites that every backend profits from and that keep results bit for
// bit: transposes folded into the matmuls that read them, a transpose of a
// matmul computed as the swapped product, exact cast pairs removed, layout
// ops moved in 16 bits rather than in a widened copy, elementwise chains
// (rotary embeddings) run in the layout that lets the transposes around
// them cancel or fold into the attention. The
// standard `canonicalize` pass applies them (dsc compile runs it after the
// step is complete, so --print-ir-after-all shows what they did).
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace dsc;

namespace {

/// Whether `perm` keeps every dim but swaps the last two.
bool swapsLastTwo(ArrayRef<int64_t> perm) {
  int64_t n = static_cast<int64_t>(perm.size());
  if (n < 2)
    return false;
  for (int64_t i = 0; i < n - 2; ++i)
    if (perm[i] != i)
      return false;
  return perm[n - 2] == n - 1 && perm[n - 1] == n - 2;
}

/// Whether reading `v` at `to` instead of at `from` would cross a
/// dsc.release of it (stage 3 frees a gathered bucket after its last
/// direct use): then the read must stay where it is. Conservative across
/// blocks.
bool releasedBetween(Value v, Operation *from, Operation *to) {
  if (from->getBlock() != to->getBlock() || !from->isBeforeInBlock(to))
    return true;
  for (Operation *op = from->getNextNode(); op != to; op = op->getNextNode())
    if (auto release = dyn_cast<ReleaseOp>(op))
      if (llvm::is_contained(release.getValues(), v))
        return true;
  return false;
}

/// The input of a transpose that swaps the last two dims and that `user`
/// may read in its place, else null.
Value swappedSource(Value v, Operation *user) {
  auto t = v.getDefiningOp<TransposeOp>();
  if (!t || !swapsLastTwo(t.getPerm()) ||
      releasedBetween(t.getInput(), t, user))
    return Value();
  return t.getInput();
}

/// The markers passes leave on an op (dsc.recomputed, ...), as one
/// dictionary: ops whose markers differ are kept apart (CSE would merge a
/// recomputed clone with its forward original).
DictionaryAttr markersOf(Operation *op) {
  SmallVector<NamedAttribute> m;
  for (NamedAttribute a : op->getAttrs())
    if (a.getName().strref().starts_with("dsc."))
      m.push_back(a);
  return DictionaryAttr::get(op->getContext(), m);
}

/// The elements of the tensor values `vs`.
int64_t elementsOf(ValueRange vs) {
  int64_t n = 0;
  for (Value v : vs)
    n += cast<RankedTensorType>(v.getType()).getNumElements();
  return n;
}

/// A clone of the layout op `op` reading `operands` (16-bit values), its
/// results retyped to `half`.
Operation *cloneIn16Bit(PatternRewriter &rewriter, Operation *op,
                        IRMapping &operands, Type half) {
  Operation *moved = rewriter.clone(*op, operands);
  for (Value r : moved->getResults())
    r.setType(cast<RankedTensorType>(r.getType()).clone(half));
  return moved;
}

/// matmul(transpose(x), y) -> matmul(x, y) {transpose_lhs}: the GEMM reads
/// x transposed (and likewise for the right operand, or both).
struct FoldTransposedOperands : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatMulOp op,
                                PatternRewriter &rewriter) const override {
    Value lhs = swappedSource(op.getLhs(), op),
          rhs = swappedSource(op.getRhs(), op);
    if (!lhs && !rhs)
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      if (lhs) {
        op.getLhsMutable().assign(lhs);
        op.setTransposeLhs(!op.getTransposeLhs());
      }
      if (rhs) {
        op.getRhsMutable().assign(rhs);
        op.setTransposeRhs(!op.getTransposeRhs());
      }
    });
    return success();
  }
};

/// transpose(matmul(a, b)) -> matmul(b, a) with both flags flipped, since
/// (op(a) op(b))^T = op(b)^T op(a)^T: a weight gradient computed as
/// (x^T g)^T is g^T x, with no transposed copy of either.
struct SwapTransposedProduct : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto mm = op.getInput().getDefiningOp<MatMulOp>();
    if (!mm || !swapsLastTwo(op.getPerm()) || !mm->hasOneUse())
      return failure();
    auto rank = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getRank();
    };
    if (rank(mm.getLhs()) < 2 || rank(mm.getRhs()) < 2 ||
        releasedBetween(mm.getLhs(), mm, op) ||
        releasedBetween(mm.getRhs(), mm, op))
      return failure();
    auto swapped = MatMulOp::create(
        rewriter, mm.getLoc(), op.getType(), mm.getRhs(), mm.getLhs(),
        rewriter.getBoolAttr(!mm.getTransposeRhs()),
        rewriter.getBoolAttr(!mm.getTransposeLhs()));
    copyMarkers(mm, swapped);
    rewriter.replaceOp(op, swapped.getResult());
    return success();
  }
};

/// transpose(transpose(x)) -> one transpose (or x); an identity perm -> x.
struct ComposeTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    ArrayRef<int64_t> perm = op.getPerm();
    auto identity = [](ArrayRef<int64_t> p) {
      for (auto [i, d] : llvm::enumerate(p))
        if (d != static_cast<int64_t>(i))
          return false;
      return true;
    };
    if (identity(perm) && op.getInput().getType() == op.getType()) {
      rewriter.replaceOp(op, op.getInput());
      return success();
    }
    auto inner = op.getInput().getDefiningOp<TransposeOp>();
    if (!inner)
      return failure();
    // result[i] = input[perm[i]] = x[innerPerm[perm[i]]].
    SmallVector<int64_t> composed;
    for (int64_t d : perm)
      composed.push_back(inner.getPerm()[d]);
    if (identity(composed)) {
      rewriter.replaceOp(op, inner.getInput());
      return success();
    }
    rewriter.replaceOpWithNewOp<TransposeOp>(
        op, op.getType(), inner.getInput(),
        rewriter.getDenseI64ArrayAttr(composed));
    return success();
  }
};

/// Whether every value of float type `from` is exactly a value of `to`.
bool exactWidening(Type from, Type to) {
  auto f = dyn_cast<FloatType>(from), t = dyn_cast<FloatType>(to);
  if (!f || !t || f == t)
    return false;
  if (f.isBF16() || f.isF16())
    return t.isF32() || t.isF64();
  return f.isF32() && t.isF64();
}

/// cast(x -> type of x) -> x; cast(cast(x : A -> B) -> A) -> x when A -> B
/// is exact.
struct RemoveCastPairs : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getInput().getType() == op.getType()) {
      rewriter.replaceOp(op, op.getInput());
      return success();
    }
    auto inner = op.getInput().getDefiningOp<CastOp>();
    if (!inner || inner.getInput().getType() != op.getType())
      return failure();
    if (!exactWidening(getElementTypeOrSelf(inner.getInput().getType()),
                       getElementTypeOrSelf(inner.getType())))
      return failure();
    rewriter.replaceOp(op, inner.getInput());
    return success();
  }
};

/// The 16-bit value `v` is the exact widening of, else null.
Value widenedFrom16Bit(Value v) {
  auto c = v.getDefiningOp<CastOp>();
  if (!c)
    return Value();
  Type from = getElementTypeOrSelf(c.getInput().getType());
  if (!(from.isBF16() || from.isF16()) ||
      !getElementTypeOrSelf(c.getType()).isF32())
    return Value();
  return c.getInput();
}

/// layout(cast(x : h -> f32), ...) -> cast(layout(x, ...) -> f32), for the
/// ops that only move elements (reshape, transpose, expand, slice, concat,
/// split) when every operand is the exact widening of one 16-bit type h:
/// the move runs on half the bytes and gives the same bits. The widening
/// then meets the narrowing cast after it, which it cancels (attention's
/// q, k and v, split from the f32 copy of the qkv product and transposed),
/// or the elementwise kernel that reads it, which does it in registers.
template <typename OpTy> struct NarrowLayoutOp : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    // Not when the widening would then cover more elements (a broadcast).
    if (elementsOf(op->getResults()) > elementsOf(op->getOperands()))
      return failure();
    Type half;
    IRMapping narrow;
    for (Value v : op->getOperands()) {
      // (A widening read elsewhere too would be done twice; one marked
      // otherwise than the op, a recomputed clone, stays apart.)
      Value x = widenedFrom16Bit(v);
      if (!x || !v.hasOneUse() ||
          (half && getElementTypeOrSelf(x.getType()) != half) ||
          markersOf(v.getDefiningOp()) != markersOf(op) ||
          releasedBetween(x, v.getDefiningOp(), op))
        return failure();
      half = getElementTypeOrSelf(x.getType());
      narrow.map(v, x);
    }
    if (!half)
      return failure();
    Operation *moved = cloneIn16Bit(rewriter, op, narrow, half);
    SmallVector<Value> widened;
    for (auto [r, old] : llvm::zip(moved->getResults(), op->getResults())) {
      auto up = CastOp::create(rewriter, op.getLoc(), old.getType(), r,
                               TypeAttr::get(getElementTypeOrSelf(old)));
      copyMarkers(op, up);
      widened.push_back(up);
    }
    rewriter.replaceOp(op, widened);
    return success();
  }
};

/// cast(layout(y : f32) -> h) -> layout(cast(y -> h)), for the same layout
/// ops when every use of every result narrows it to one 16-bit type h:
/// rounding commutes with moving elements, so the bits are the same, the
/// move runs on half the bytes, and the rounding lands next to the
/// producer of y, whose kernel then writes h (GPT-2's qkv bias add,
/// split, transposed to heads and rounded for attention).
template <typename OpTy> struct NarrowBeforeLayoutOp : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    // Not when the rounding would then cover more elements (a slice of a
    // larger value).
    if (elementsOf(op->getOperands()) > elementsOf(op->getResults()))
      return failure();
    // Every use a rounding to one type, marked as the op is (a recomputed
    // clone's cast stays apart from the forward's).
    Type half;
    DictionaryAttr markers = markersOf(op);
    for (Value r : op->getResults()) {
      if (r.use_empty())
        return failure();
      for (Operation *user : r.getUsers()) {
        auto c = dyn_cast<CastOp>(user);
        Type to = c ? getElementTypeOrSelf(c.getType()) : Type();
        if (!c || !getElementTypeOrSelf(r).isF32() ||
            !(to.isBF16() || to.isF16()) || (half && to != half) ||
            markersOf(c) != markers)
          return failure();
        half = to;
      }
    }
    if (!half || llvm::any_of(op->getOperands(), [](Value v) {
          return !getElementTypeOrSelf(v).isF32();
        }))
      return failure();
    IRMapping narrow;
    for (Value v : op->getOperands()) {
      auto down =
          CastOp::create(rewriter, op.getLoc(),
                         cast<RankedTensorType>(v.getType()).clone(half), v,
                         TypeAttr::get(half));
      copyMarkers(op, down);
      narrow.map(v, down);
    }
    Operation *moved = cloneIn16Bit(rewriter, op, narrow, half);
    for (auto [r, old] : llvm::zip(moved->getResults(), op->getResults())) {
      for (Operation *user : llvm::make_early_inc_range(old.getUsers()))
        rewriter.replaceOp(user, r);
    }
    rewriter.eraseOp(op);
    return success();
  }
};

/// reduce_sum(cast(x : h -> f32)) -> reduce_sum(x) : f32 (and reduce_mean):
/// the reduction widens each 16-bit element as it loads it and sums in the
/// same order, so the same bits without the f32 copy of x (GPT-2's bias
/// gradients: a [16384, 2304] cast each).
template <typename OpTy> struct ReduceOfWidened : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    // (No axes: the reduction is its input, the cast itself. A cast read
    // elsewhere too saves nothing and would keep x alive longer.)
    Value x = widenedFrom16Bit(op.getInput());
    if (!x || op.getAxes().empty() || !op.getInput().hasOneUse() ||
        releasedBetween(x, op.getInput().getDefiningOp(), op))
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.getInputMutable().assign(x); });
    return success();
  }
};

/// softmax_cross_entropy(cast(x : 16-bit -> f32)) -> softmax_cross_entropy(x):
/// the loss reads the 16-bit logits and computes in f32 as before (the same
/// bits), with no f32 copy of [tokens, vocab].
struct LossOf16BitScores : OpRewritePattern<SoftmaxCrossEntropyOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SoftmaxCrossEntropyOp op,
                                PatternRewriter &rewriter) const override {
    Value x = widenedFrom16Bit(op.getScores());
    if (!x)
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.getScoresMutable().assign(x); });
    return success();
  }
};

/// cast(class_loss_backward(g, cast(x : h -> f32)) -> h) for softmax
/// cross-entropy -> class_loss_backward(g, x) : h, the gradient rounded to
/// h where it is computed (the same bits as the f32 one cast).
struct GradientOf16BitScores : OpRewritePattern<CastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(CastOp op,
                                PatternRewriter &rewriter) const override {
    // (Through a reshape of the gradient, as autodiff leaves one.)
    Value in = op.getInput();
    auto reshape = in.getDefiningOp<ReshapeOp>();
    if (reshape && reshape->hasOneUse())
      in = reshape.getInput();
    auto back = in.getDefiningOp<ClassLossBackwardOp>();
    if (!back || back.getKind() != "softmax_cross_entropy" ||
        !back->hasOneUse())
      return failure();
    Value x = widenedFrom16Bit(back.getInput());
    Type half = getElementTypeOrSelf(op.getType());
    if (!x || getElementTypeOrSelf(x.getType()) != half)
      return failure();
    auto grad = ClassLossBackwardOp::create(
        rewriter, back.getLoc(), x.getType(), back.getGrad(), x,
        back.getLabels(), back.getWeights(), back.getKindAttr(),
        back.getReductionAttr(), back.getIgnoreIndexAttr());
    copyMarkers(back, grad);
    Value result = grad.getResult();
    if (result.getType() != op.getType())
      result = ReshapeOp::create(
          rewriter, op.getLoc(), op.getType(), result,
          rewriter.getDenseI64ArrayAttr(
              cast<RankedTensorType>(op.getType()).getShape()));
    rewriter.replaceOp(op, result);
    return success();
  }
};

} // namespace

void SoftmaxCrossEntropyOp::getCanonicalizationPatterns(
    RewritePatternSet &results, MLIRContext *context) {
  results.add<LossOf16BitScores>(context);
}

/// The [B, T, H, D] value `v` is a [0, 2, 1, 3] transpose of, when `user`
/// may read it in its place; else null.
Value tokensFirstSource(Value v, Operation *user) {
  auto t = v.getDefiningOp<TransposeOp>();
  ArrayRef<int64_t> perm = t ? t.getPerm() : ArrayRef<int64_t>();
  if (!t || perm.size() != 4 || perm[0] != 0 || perm[1] != 2 || perm[2] != 1 ||
      perm[3] != 3 || releasedBetween(t.getInput(), t, user))
    return Value();
  return t.getInput();
}

/// `v` ([B, T, H, D]) as [B, H, T, D]: the transpose the layout rewrites
/// below leave for the old users (it composes away with theirs).
Value headsFirst(PatternRewriter &rewriter, Location loc, Value v) {
  return TransposeOp::create(rewriter, loc, v,
                             rewriter.getDenseI64ArrayAttr({0, 2, 1, 3}));
}

/// Whether the attention kernels read and write [B, T, H, D] in place: the
/// target's `strided_attention` kernels (cuDNN's) take the 16-bit calls
/// without dropout, a mask or a window (a window or a mask they may
/// decline). Elsewhere a seq_major call copies heads-first in the runtime,
/// outside the memory plan, so those transposes stay in the IR.
template <typename AttentionLike> bool readsTokensFirst(AttentionLike op) {
  auto module = op->template getParentOfType<ModuleOp>();
  if (!module)
    return false;
  FailureOr<TargetDescription> target = TargetDescription::of(module);
  if (failed(target) || !target->stridedAttention)
    return false;
  Type e = getElementTypeOrSelf(op.getQuery().getType());
  auto k = dyn_cast<RankedTensorType>(op.getKey().getType());
  return (e.isBF16() || e.isF16()) && !op.getMask() && op.getWindow() == 0 &&
         op.getDropout().convertToDouble() == 0 && k && k.getRank() == 4 &&
         k.getNumElements() > 0;
}

/// The sources of `vs` if every one is a tokens-first transpose.
std::optional<SmallVector<Value>> tokensFirstSources(ValueRange vs,
                                                     Operation *user) {
  SmallVector<Value> sources;
  for (Value v : vs) {
    Value s = tokensFirstSource(v, user);
    if (!s)
      return std::nullopt;
    sources.push_back(s);
  }
  return sources;
}

/// attention(transpose(q), transpose(k), transpose(v)), each [0, 2, 1, 3]
/// of a [B, T, H, D] projection, -> transpose(attention {seq_major}(q, k,
/// v)): the kernel reads the projections where they are and the result's
/// transpose composes with its reader's (GPT-2: four strided copies a
/// layer less in the forward).
struct AttentionReadsTokensFirst : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getSeqMajor() || !readsTokensFirst(op))
      return failure();
    auto src =
        tokensFirstSources({op.getQuery(), op.getKey(), op.getValue()}, op);
    if (!src)
      return failure();
    auto seq = AttentionOp::create(
        rewriter, op.getLoc(), (*src)[0], (*src)[1], (*src)[2], op.getMask(),
        op.getScaleAttr(), op.getCausalAttr(), op.getWindowAttr(),
        op.getDropoutAttr(), op.getSeedIdAttr(), rewriter.getBoolAttr(true));
    copyMarkers(op, seq);
    rewriter.replaceOp(
        op, {headsFirst(rewriter, op.getLoc(), seq.getResult()), seq.getLse()});
    return success();
  }
};

/// The backward likewise, when its gradient, operands and the forward's
/// result are all tokens-first transposes (the forward's rewrite leaves
/// its result so): its gradients come out [B, T, H, D], transposed for
/// their old readers, whose own transposes back compose away.
struct AttentionBackwardReadsTokensFirst
    : OpRewritePattern<AttentionBackwardOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionBackwardOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getSeqMajor() || !readsTokensFirst(op))
      return failure();
    auto src = tokensFirstSources({op.getGrad(), op.getQuery(), op.getKey(),
                                   op.getValue(), op.getOutput()},
                                  op);
    if (!src)
      return failure();
    auto seq = AttentionBackwardOp::create(
        rewriter, op.getLoc(), (*src)[0], (*src)[1], (*src)[2], (*src)[3],
        (*src)[4], op.getLse(), op.getMask(), op.getScaleAttr(),
        op.getCausalAttr(), op.getWindowAttr(), op.getDropoutAttr(),
        op.getSeedIdAttr(), op.getWorkspaceLimitAttr(),
        rewriter.getBoolAttr(true), op.getDeterministicAttr());
    copyMarkers(op, seq);
    SmallVector<Value> grads;
    for (Value g : seq.getResults())
      grads.push_back(headsFirst(rewriter, op.getLoc(), g));
    rewriter.replaceOp(op, grads);
    return success();
  }
};

/// Ops whose result element i is computed from the operands' elements at i
/// (with broadcasting) alone, or, for rotate_half, from the last dim's
/// elements: a chain of them gives the same bits on permuted operands.
bool movesWithLayout(Operation *op) {
  if (op->getNumResults() != 1 || op->getNumRegions() || !isPure(op))
    return false;
  return isa<CastOp, NegOp, AbsOp, ExpOp, LogOp, SqrtOp, ReciprocalOp, TanhOp,
             ErfOp, SigmoidOp, ReluOp, FloorOp, CeilOp, SinOp, CosOp,
             SoftplusOp, GeluOp, LeakyReluOp, AddOp, SubOp, MulOp, DivOp, PowOp,
             MaxOp, MinOp, SwigluOp, WhereOp, RotateHalfOp>(op);
}

/// `shape` with 1s in front up to `rank` dims, as numpy broadcasting aligns
/// it.
SmallVector<int64_t> paddedShape(ArrayRef<int64_t> shape, int64_t rank) {
  SmallVector<int64_t> padded(rank - shape.size(), 1);
  padded.append(shape.begin(), shape.end());
  return padded;
}

/// The shape `shape` (numpy-aligned to rank `rank`) permuted by `perm`:
/// dim i of the result is dim perm[i] of the padded shape.
SmallVector<int64_t> permutedShape(ArrayRef<int64_t> shape, int64_t rank,
                                   ArrayRef<int64_t> perm) {
  SmallVector<int64_t> padded = paddedShape(shape, rank), r;
  for (int64_t d : perm)
    r.push_back(padded[d]);
  return r;
}

/// Whether `perm` applied to a value of `shape` only moves dims of size 1,
/// i.e. is a reshape.
bool permuteIsReshape(ArrayRef<int64_t> shape, int64_t rank,
                      ArrayRef<int64_t> perm) {
  SmallVector<int64_t> padded = paddedShape(shape, rank);
  int64_t last = -1;
  for (int64_t d : perm) {
    if (padded[d] == 1)
      continue;
    if (d < last)
      return false;
    last = d;
  }
  return true;
}

/// An elementwise chain ("cone") that computes `root` from leaves: full-size
/// ones that are transposes undone by `perm` (their inputs are read instead)
/// and broadcast ones whose permutation is a reshape. The chain computed on
/// the transposes' inputs is transpose(root, perm) without a copy.
struct LayoutCone {
  SmallVector<int64_t> perm;
  SmallVector<Operation *> ops;          // defs before uses, root's last
  llvm::MapVector<Value, Value> sources; // full leaf -> the transpose's input
  llvm::SetVector<Value> broadcasts;     // leaves moved by a reshape
};

/// Whether transpose(l, perm) is the input of the transpose l.
Value undoneBy(Value l, ArrayRef<int64_t> perm, Operation *user) {
  auto t = l.getDefiningOp<TransposeOp>();
  if (!t || t.getPerm().size() != perm.size() ||
      releasedBetween(t.getInput(), t, user))
    return Value();
  for (auto [i, d] : llvm::enumerate(perm))
    if (t.getPerm()[d] != static_cast<int64_t>(i))
      return Value();
  return t.getInput();
}

/// Collects the cone of `v` (post order) into `cone`; false when some value
/// is neither a leaf nor computed by an op that moves with the layout.
bool collectCone(Value v, ArrayRef<int64_t> rootShape, Operation *user,
                 DictionaryAttr markers, LayoutCone &cone,
                 llvm::SmallPtrSetImpl<Operation *> &seen) {
  if (cone.sources.count(v) || cone.broadcasts.contains(v))
    return true;
  auto type = dyn_cast<RankedTensorType>(v.getType());
  int64_t rank = static_cast<int64_t>(rootShape.size());
  if (!type || type.getRank() > rank)
    return false;
  if (type.getShape() != rootShape) {
    if (!permuteIsReshape(type.getShape(), rank, cone.perm))
      return false;
    cone.broadcasts.insert(v);
    return true;
  }
  if (Value x = undoneBy(v, cone.perm, user)) {
    cone.sources[v] = x;
    return true;
  }
  Operation *op = v.getDefiningOp();
  if (!op || !movesWithLayout(op) || markersOf(op) != markers)
    return false;
  if (seen.contains(op))
    return true;
  if (isa<RotateHalfOp>(op) && cone.perm.back() != rank - 1)
    return false;
  if (cone.ops.size() >= 64) // a bound on the work, well above rotary's
    return false;
  for (Value operand : op->getOperands())
    if (!collectCone(operand, rootShape, user, markers, cone, seen))
      return false;
  seen.insert(op);
  cone.ops.push_back(op);
  return true;
}

/// The cone of `root` under `perm`, if it reads at least one transpose it
/// undoes and no op of it but the root's is read outside it.
std::optional<LayoutCone> layoutCone(Value root, ArrayRef<int64_t> perm,
                                     Operation *user) {
  Operation *rootOp = root.getDefiningOp();
  auto type = dyn_cast<RankedTensorType>(root.getType());
  if (!rootOp || !type || !movesWithLayout(rootOp) ||
      static_cast<int64_t>(perm.size()) != type.getRank())
    return std::nullopt;
  LayoutCone cone;
  cone.perm.assign(perm.begin(), perm.end());
  llvm::SmallPtrSet<Operation *, 16> seen;
  if (!collectCone(root, type.getShape(), user, markersOf(rootOp), cone,
                   seen) ||
      cone.sources.empty())
    return std::nullopt;
  for (Operation *op : cone.ops)
    if (op != rootOp)
      for (Operation *u : op->getUsers())
        if (!seen.contains(u))
          return std::nullopt;
  return cone;
}

/// The cone computed on the transposes' inputs, before `at`: its root is
/// transpose(root, perm).
Value rebuildCone(PatternRewriter &rewriter, Operation *at,
                  const LayoutCone &cone) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(at);
  IRMapping map;
  for (auto [leaf, x] : cone.sources)
    map.map(leaf, x);
  int64_t rank = static_cast<int64_t>(cone.perm.size());
  for (Value b : cone.broadcasts) {
    auto type = cast<RankedTensorType>(b.getType());
    SmallVector<int64_t> shape =
        permutedShape(type.getShape(), rank, cone.perm);
    if (shape == paddedShape(type.getShape(), rank))
      continue; // broadcasts the same either way: read as it is
    auto moved = ReshapeOp::create(rewriter, b.getLoc(), type.clone(shape), b,
                                   rewriter.getDenseI64ArrayAttr(shape));
    map.map(b, moved.getResult());
  }
  for (Operation *op : cone.ops) {
    Operation *c = rewriter.clone(*op, map);
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    c->getResult(0).setType(
        type.clone(permutedShape(type.getShape(), rank, cone.perm)));
  }
  return map.lookup(cone.ops.back()->getResult(0));
}

/// transpose(chain(transpose(x), ...), p) -> chain(x, ...) where the inner
/// transposes undo p: the elementwise chain runs on the untransposed values
/// and both copies go (Llama's rotary gradient between the attention's and
/// the projection's layouts). Broadcast operands are reshaped; the chain's
/// values other than its result must have no other reader.
struct TransposeOfLayoutCone : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    Value root = op.getInput();
    if (!root.hasOneUse())
      return failure();
    auto cone = layoutCone(root, op.getPerm(), op);
    if (!cone)
      return failure();
    rewriter.replaceOp(op, rebuildCone(rewriter, op, *cone));
    return success();
  }
};

/// attention(chain(transpose(q), ...), ...) where a chain of elementwise
/// ops (rotary: casts, products with cos and sin, rotate_half) sits between
/// the heads-first transpose of a [B, T, H, D] projection and the
/// attention: the chain runs on the projection as it is and its result is
/// transposed instead, which AttentionReadsTokensFirst then folds into the
/// kernel (seq_major). Only when each of q, k and v then reads tokens
/// first, and every reader of a chain's result is an attention (forward or
/// backward), which reads the transpose the same way.
struct AttentionOperandsTokensFirst : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getSeqMajor() || !readsTokensFirst(op))
      return failure();
    const int64_t heads[] = {0, 2, 1, 3};
    SmallVector<std::pair<Value, LayoutCone>> cones;
    for (Value v : {op.getQuery(), op.getKey(), op.getValue()}) {
      if (tokensFirstSource(v, op))
        continue;
      if (llvm::any_of(v.getUsers(), [](Operation *u) {
            return !isa<AttentionOp, AttentionBackwardOp>(u);
          }))
        return failure();
      auto cone = layoutCone(v, heads, op);
      if (!cone)
        return failure();
      if (llvm::none_of(cones, [&](auto &c) { return c.first == v; }))
        cones.emplace_back(v, std::move(*cone));
    }
    if (cones.empty())
      return failure();
    for (auto &[root, cone] : cones) {
      Operation *rootOp = root.getDefiningOp();
      Value tokensFirst = rebuildCone(rewriter, rootOp, cone);
      rewriter.setInsertionPoint(rootOp);
      Value t = headsFirst(rewriter, rootOp->getLoc(), tokensFirst);
      rewriter.replaceAllUsesWith(root, t);
    }
    return success();
  }
};

/// sum_squares(1, (mul(x0, s), mul(x1, s), ...)) -> sum_squares(s, (x0,
/// x1, ...)) for one scalar f32 s and f32 tensors: the op multiplies each
/// element by its scale and rounds as the mul does, so the bits stay. The
/// grads of a loss normalized by its label count (dsc-optimizer) are read
/// unnormalized, and the muls are left to their other reader (the clip's,
/// which dsc-multi-tensor-adamw folds into its kernel): only when that is
/// their one other reader.
struct FoldCommonScale : OpRewritePattern<SumSquaresOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SumSquaresOp op,
                                PatternRewriter &rewriter) const override {
    auto one = op.getScale().getDefiningOp<ConstantOp>();
    auto attr = one ? dyn_cast<DenseFPElementsAttr>(one.getValue()) : nullptr;
    if (!attr || !attr.isSplat() ||
        !attr.getSplatValue<APFloat>().isExactlyValue(1.0) ||
        op.getTensors().empty())
      return failure();
    Value common;
    SmallVector<Value> unscaled;
    for (Value t : op.getTensors()) {
      auto [x, s] = scaledByScalar(t);
      Operation *mul = t.getDefiningOp();
      if (!s || !getElementTypeOrSelf(t).isF32() || (common && s != common) ||
          releasedBetween(x, mul, op))
        return failure();
      // Only where the product can go: read by this sum and one scalar
      // mul (the clip's, which the AdamW kernel folds). A product the step
      // also returns stays, and reading x here would keep both alive.
      unsigned others = 0;
      for (Operation *user : mul->getUsers())
        if (user != op.getOperation() && (!isa<MulOp>(user) || ++others > 1))
          return failure();
      common = s;
      unscaled.push_back(x);
    }
    rewriter.modifyOpInPlace(op, [&] {
      op.getScaleMutable().assign(common);
      op.getTensorsMutable().assign(unscaled);
    });
    return success();
  }
};

/// add(x, scatter_add(g, i)) -> scatter_add(g, i) into x, for x of the
/// result's type (no broadcast) and a scatter_add read by this add alone:
/// a tied embedding's gradient, whose classifier half is added to the
/// gather's. The op sums each indexed slice from zero and adds it to x's,
/// as the add did (the same bits, IEEE addition being commutative; a slice
/// no index names keeps x's, where the add gave x + 0: only a -0 differs,
/// which stays -0), and
/// touches only the indexed slices: the zeros of the whole [vocab, width]
/// result and the pass of the add over all of it are gone.
struct ScatterAddInto : OpRewritePattern<ScatterAddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ScatterAddOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getInit() || !op->hasOneUse())
      return failure();
    auto add = dyn_cast<AddOp>(*op->user_begin());
    if (!add || add.getType() != op.getType() ||
        add.getLhs().getType() != add.getRhs().getType() ||
        releasedBetween(op.getGrad(), op, add) ||
        releasedBetween(op.getIndices(), op, add))
      return failure();
    Value other = add.getLhs() == op.getResult() ? add.getRhs() : add.getLhs();
    if (other == op.getResult())
      return failure();
    rewriter.setInsertionPoint(add);
    auto into = ScatterAddOp::create(rewriter, add.getLoc(), op.getGrad(),
                                     op.getIndices(), other, op.getAxisAttr(),
                                     op.getShapeAttr());
    copyMarkers(add, into);
    rewriter.replaceOp(add, into.getResult());
    rewriter.eraseOp(op);
    return success();
  }
};

void ScatterAddOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                               MLIRContext *context) {
  results.add<ScatterAddInto>(context);
}

void AttentionOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<AttentionReadsTokensFirst, AttentionOperandsTokensFirst>(context);
}

void AttentionBackwardOp::getCanonicalizationPatterns(
    RewritePatternSet &results, MLIRContext *context) {
  results.add<AttentionBackwardReadsTokensFirst>(context);
}

void MatMulOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                           MLIRContext *context) {
  results.add<FoldTransposedOperands>(context);
}

void SumSquaresOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                               MLIRContext *context) {
  results.add<FoldCommonScale>(context);
}

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<SwapTransposedProduct, ComposeTransposes, TransposeOfLayoutCone>(
      context);
}

void CastOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                         MLIRContext *context) {
  results.add<RemoveCastPairs, GradientOf16BitScores>(context);
  // The layout ops' narrowing: registered here, beside the cast pairs it
  // feeds, rather than on six ops' own hooks.
  results
      .add<NarrowLayoutOp<ReshapeOp>, NarrowLayoutOp<TransposeOp>,
           NarrowLayoutOp<ExpandOp>, NarrowLayoutOp<SliceOp>,
           NarrowLayoutOp<ConcatOp>, NarrowLayoutOp<SplitOp>,
           NarrowBeforeLayoutOp<ReshapeOp>, NarrowBeforeLayoutOp<TransposeOp>,
           NarrowBeforeLayoutOp<ExpandOp>, NarrowBeforeLayoutOp<SliceOp>,
           NarrowBeforeLayoutOp<ConcatOp>, NarrowBeforeLayoutOp<SplitOp>>(
          context);
  // Reductions read the 16-bit value their operand widens.
  results.add<ReduceOfWidened<ReduceSumOp>, ReduceOfWidened<ReduceMeanOp>>(
      context);
}

LogicalResult FusedOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("body has ")
           << body.getNumArguments() << " arguments for " << getInputs().size()
           << " inputs";
  for (auto [arg, in] : llvm::zip(body.getArguments(), getInputs()))
    if (arg.getType() != in.getType())
      return emitOpError("body argument type ")
             << arg.getType() << " differs from its input's " << in.getType();
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ")
           << yield.getValues().size()
           << " values whose types differ from the op's results";
  if (getKind() != "elementwise")
    return emitOpError("kind must be \"elementwise\", got \"")
           << getKind() << "\"";
  if (getResults().empty())
    return emitOpError("must have a result");
  return success();
}
