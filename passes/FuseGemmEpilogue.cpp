//===- FuseGemmEpilogue.cpp - bias, bias gradient, GELU in GEMM epilogues ===//
//
// dsc-fuse-gemm-epilogue (Passes.td), four rewrites, each in two steps per
// function as upstream fusion passes do (analysis, then rewrite):
// - backward: a linear layer's bias gradient (a reduce_sum of its output
//   gradient over every dim but the last) and its weight gradient (a matmul
//   reading that gradient as [T, C]) become one dsc.matmul_bias_grad, which
//   the target's GEMM computes with the sum in its epilogue;
// - forward: a 16-bit product plus a widened 16-bit bias, rounded back to
//   16 bits, becomes a dsc.gemm with the bias as C (the GEMM's bias
//   epilogue, one rounding);
// - forward: such a product through GELU's tanh approximation, rounded to
//   16 bits, becomes a dsc.gemm_gelu (GELU in the epilogue, which also
//   writes GELU's input for backward);
// - backward: GELU's input gradient, a 16-bit GEMM times GELU's derivative
//   (found by evaluating the expression autodiff wrote), becomes a
//   dsc.matmul_gelu_grad (the derivative in the epilogue).
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>
#include <functional>
#include <set>
#include <tuple>

namespace dsc {
#define GEN_PASS_DEF_DSCFUSEGEMMEPILOGUE
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

RankedTensorType typeOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

bool isHalf(Type t) { return t.isBF16() || t.isF16(); }

/// One bias gradient and the weight gradient that absorbs it.
struct Pair {
  dsc::ReduceSumOp sum;
  dsc::MatMulOp product;
  bool sumRhs;   // the gradient is the product's rhs (else its lhs)
  Operation *at; // the fused op stands here (sum or product)
  SmallVector<Operation *> moved; // reshapes of the sum to move after it
};

/// The column sums over every dim but the last, in f32: a bias gradient.
bool isBiasGradient(dsc::ReduceSumOp r) {
  RankedTensorType in = typeOf(r.getInput()), out = typeOf(r.getResult());
  if (!in || !out || !in.hasStaticShape() || in.getRank() < 2 ||
      !out.getElementType().isF32())
    return false;
  ArrayRef<int64_t> axes = r.getAxes();
  if (int64_t(axes.size()) != in.getRank() - 1)
    return false;
  for (auto [i, a] : llvm::enumerate(axes))
    if (a != int64_t(i))
      return false;
  return out.getNumElements() == in.getShape().back();
}

/// The values a weight-gradient GEMM may read in place of the summed
/// gradient `x`: x itself, or its 16-bit casts when x is f32 (the fused op
/// then sums the 16-bit values, as the GEMM reads them).
SmallVector<Value> gradientForms(Value x) {
  SmallVector<Value> forms = {x};
  if (!typeOf(x).getElementType().isF32())
    return forms;
  for (Operation *user : x.getUsers())
    if (auto c = dyn_cast<dsc::CastOp>(user))
      if (isHalf(typeOf(c.getResult()).getElementType()))
        forms.push_back(c.getResult());
  return forms;
}

/// A weight gradient: a matmul `lhs^T x rhs` over T rows, both operands
/// 2-D, one of which is `g` as [T, C] (g itself or a reshape of it);
/// `sumRhs` tells which.
dsc::MatMulOp weightGradientOf(Value g, bool &sumRhs) {
  RankedTensorType gt = typeOf(g);
  int64_t c = gt.getShape().back(),
          t = gt.getNumElements() / std::max<int64_t>(c, 1);
  auto reads = [&](Value g2) -> dsc::MatMulOp {
    for (Operation *user : g2.getUsers()) {
      auto mm = dyn_cast<dsc::MatMulOp>(user);
      if (!mm || !mm.getTransposeLhs() || mm.getTransposeRhs() ||
          typeOf(mm.getLhs()).getRank() != 2 ||
          typeOf(mm.getRhs()).getRank() != 2 || mm->hasAttr("dsc.recomputed") ||
          mm->hasAttr("dsc.on_host"))
        continue;
      sumRhs = mm.getRhs() == g2;
      return mm;
    }
    return {};
  };
  if (gt.getRank() == 2)
    return reads(g);
  for (Operation *user : g.getUsers())
    if (auto r = dyn_cast<dsc::ReshapeOp>(user))
      if (typeOf(r.getResult()).getShape() == ArrayRef<int64_t>{t, c})
        if (dsc::MatMulOp mm = reads(r.getResult()))
          return mm;
  return {};
}

/// `op`, or the op of its block that holds it.
Operation *inBlock(Block &block, Operation *op) {
  return block.findAncestorOpInBlock(*op);
}

bool definedBefore(Block &block, Value v, Operation *at) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return true;
  Operation *d = inBlock(block, def);
  return d && d->isBeforeInBlock(at);
}

bool usedAfter(Block &block, Value v, Operation *at) {
  for (Operation *user : v.getUsers()) {
    Operation *u = inBlock(block, user);
    if (!u || (u != at && !at->isBeforeInBlock(u)))
      return false;
  }
  return true;
}

/// The reshapes of `v` (and of theirs) that stand before `at` while every
/// other reader of v comes after it: they move after `at` with no effect on
/// anything (a bias gradient is reshaped from [1, 1, C] to [C] at once).
/// False when some reader before `at` is not such a reshape.
bool reshapesToMove(Block &block, Value v, Operation *at,
                    SmallVectorImpl<Operation *> &moved) {
  for (Operation *user : v.getUsers()) {
    Operation *u = inBlock(block, user);
    if (u && (u == at || at->isBeforeInBlock(u)))
      continue;
    if (u != user || !isa<dsc::ReshapeOp>(user))
      return false;
    moved.push_back(user);
    if (!reshapesToMove(block, user->getResult(0), at, moved))
      return false;
  }
  return true;
}

/// Where the fused op can stand: at the product when the sum's readers all
/// come after it (or are reshapes that can move there), else at the sum
/// when the product's operands are ready there and its readers come after
/// it; null when neither.
Operation *placement(Block &block, dsc::ReduceSumOp sum, dsc::MatMulOp product,
                     SmallVectorImpl<Operation *> &moved) {
  Operation *s = sum, *p = product;
  if (definedBefore(block, sum.getInput(), p) &&
      reshapesToMove(block, sum.getResult(), p, moved))
    return p;
  moved.clear();
  if (definedBefore(block, product.getLhs(), s) &&
      definedBefore(block, product.getRhs(), s) &&
      usedAfter(block, product.getResult(), s))
    return s;
  return nullptr;
}

/// Analysis: every bias gradient with a weight gradient to absorb it.
SmallVector<Pair> findPairs(Block &block) {
  SmallVector<Pair> pairs;
  llvm::SmallPtrSet<Operation *, 16> taken;
  for (Operation &op : block) {
    auto sum = dyn_cast<dsc::ReduceSumOp>(&op);
    if (!sum || !isBiasGradient(sum) || sum->hasAttr("dsc.recomputed"))
      continue;
    for (Value g : gradientForms(sum.getInput())) {
      bool sumRhs = false;
      dsc::MatMulOp mm = weightGradientOf(g, sumRhs);
      if (!mm || mm->getBlock() != &block || taken.contains(mm))
        continue;
      SmallVector<Operation *> moved;
      if (Operation *at = placement(block, sum, mm, moved)) {
        taken.insert(mm);
        pairs.push_back({sum, mm, sumRhs, at, std::move(moved)});
        break;
      }
    }
  }
  return pairs;
}

/// Rewrite: one dsc.matmul_bias_grad where the pair's fused op stands.
void fuse(Pair p) {
  OpBuilder b(p.at);
  Location loc = b.getFusedLoc({p.product.getLoc(), p.sum.getLoc()});
  Value g = p.sumRhs ? p.product.getRhs() : p.product.getLhs();
  auto biasType =
      RankedTensorType::get({typeOf(g).getShape().back()}, b.getF32Type());
  auto fused = dsc::MatMulBiasGradOp::create(
      b, loc, TypeRange{p.product.getResult().getType(), biasType},
      p.product.getLhs(), p.product.getRhs(), b.getBoolAttr(p.sumRhs));
  Value bias = fused.getBiasGrad();
  if (bias.getType() != p.sum.getResult().getType())
    bias = dsc::ReshapeOp::create(
        b, p.sum.getLoc(), bias,
        b.getDenseI64ArrayAttr(typeOf(p.sum.getResult()).getShape()));
  // In block order, after the fused op (and the bias reshape, if any).
  Operation *after = bias.getDefiningOp();
  llvm::sort(p.moved,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (Operation *r : p.moved) {
    r->moveAfter(after);
    after = r;
  }
  p.product.getResult().replaceAllUsesWith(fused.getResult());
  p.sum.getResult().replaceAllUsesWith(bias);
  p.product->erase();
  p.sum->erase();
  // A reshape back to [C] reads the fused op's result itself.
  if (bias == fused.getBiasGrad())
    return;
  for (Operation *r : llvm::make_early_inc_range(bias.getUsers()))
    if (isa<dsc::ReshapeOp>(r) &&
        r->getResult(0).getType() == fused.getBiasGrad().getType()) {
      r->getResult(0).replaceAllUsesWith(fused.getBiasGrad());
      r->erase();
    }
  if (bias.use_empty())
    bias.getDefiningOp()->erase();
}

//===----------------------------------------------------------------------===//
// Forward: a bias added to a 16-bit product, rounded back to 16 bits
//===----------------------------------------------------------------------===//

/// A linear layer's forward as mixed precision writes it: a 16-bit matmul
/// `x W` (or `x W^T`), widened, plus a bias that is itself a widened 16-bit
/// [N] of the same type, and the sum rounded back to that type (the cast
/// the next GEMM, or backward, reads).
struct BiasedProduct {
  dsc::MatMulOp product;
  dsc::CastOp widen;               // the product to f32
  dsc::AddOp add;                  // + bias
  Value bias16;                    // the bias before its widening
  Value biasWide;                  // and after
  SmallVector<dsc::CastOp> narrow; // the sum back to 16 bits
};

/// The value of element type `t` that `v` widens, or null.
Value narrowSource(Value v, Type t) {
  auto c = v.getDefiningOp<dsc::CastOp>();
  if (!c || typeOf(c.getInput()).getElementType() != t)
    return {};
  return c.getInput();
}

/// Analysis: the biased product whose matmul is `mm`, if it is one.
std::optional<BiasedProduct> biasedProductAt(dsc::MatMulOp mm) {
  RankedTensorType rt = typeOf(mm.getResult()), lt = typeOf(mm.getLhs());
  Type half = rt.getElementType();
  if (!isHalf(half) || mm.getTransposeLhs() || lt.getRank() < 2 ||
      !lt.hasStaticShape() || typeOf(mm.getRhs()).getRank() != 2 ||
      !mm.getResult().hasOneUse())
    return std::nullopt;
  BiasedProduct bp;
  bp.product = mm;
  bp.widen = dyn_cast<dsc::CastOp>(*mm.getResult().getUsers().begin());
  if (!bp.widen || !typeOf(bp.widen.getResult()).getElementType().isF32() ||
      !bp.widen.getResult().hasOneUse() || bp.widen->hasAttr("dsc.recompute"))
    return std::nullopt;
  bp.add = dyn_cast<dsc::AddOp>(*bp.widen.getResult().getUsers().begin());
  if (!bp.add || bp.add.getResult().getType() != bp.widen.getResult().getType())
    return std::nullopt;
  Value other = bp.add.getLhs() == bp.widen.getResult() ? bp.add.getRhs()
                                                        : bp.add.getLhs();
  RankedTensorType bt = typeOf(other);
  if (!bt || bt.getRank() != 1 || bt.getDimSize(0) != rt.getShape().back())
    return std::nullopt;
  bp.biasWide = other;
  bp.bias16 = narrowSource(other, half);
  if (!bp.bias16)
    return std::nullopt;
  for (Operation *user : bp.add.getResult().getUsers())
    if (auto c = dyn_cast<dsc::CastOp>(user))
      if (c.getResult().getType() == mm.getResult().getType())
        bp.narrow.push_back(c);
  return bp;
}

/// Analysis: the biased products to rewrite. A layer's product is rewritten
/// when one of its instances rounds the sum back to 16 bits; then every
/// instance of it (same weight and bias: a clone dsc-recompute made for
/// backward, or the forward original whose only reader is GELU) is, so
/// that a recomputed value keeps the bits of the stored one.
SmallVector<BiasedProduct> findBiasedProducts(Block &block) {
  SmallVector<BiasedProduct> all;
  for (auto mm : block.getOps<dsc::MatMulOp>())
    if (std::optional<BiasedProduct> bp = biasedProductAt(mm))
      all.push_back(*bp);
  auto layer = [](BiasedProduct bp) {
    return std::make_tuple(bp.product.getRhs().getAsOpaquePointer(),
                           bp.bias16.getAsOpaquePointer(),
                           bp.product.getTransposeRhs());
  };
  std::set<std::tuple<const void *, const void *, bool>> rounded;
  for (const BiasedProduct &bp : all)
    if (!bp.narrow.empty())
      rounded.insert(layer(bp));
  SmallVector<BiasedProduct> chosen;
  for (BiasedProduct &bp : all)
    if (rounded.count(layer(bp)))
      chosen.push_back(bp);
  return chosen;
}

/// Rewrite: the sum, rounded once, is one dsc.gemm over the rows (x as
/// [T, K]) with the 16-bit bias as its C, which the GEMM adds to its f32
/// accumulator (cuBLASLt's bias epilogue) before it rounds: the value
/// PyTorch's autocast gives a bf16 nn.Linear. Readers of the f32 sum other
/// than the casts (GELU's chain) read the widened 16-bit sum instead.
void fuseBias(BiasedProduct &bp) {
  dsc::MatMulOp mm = bp.product;
  OpBuilder b(bp.add);
  Location loc = b.getFusedLoc({mm.getLoc(), bp.add.getLoc()});
  RankedTensorType lt = typeOf(mm.getLhs()), rt = typeOf(mm.getResult());
  int64_t k = lt.getShape().back();
  int64_t rows = lt.getNumElements() / std::max<int64_t>(k, 1);
  Value x = mm.getLhs();
  if (lt.getRank() != 2)
    x = dsc::ReshapeOp::create(b, mm.getLoc(), x,
                               b.getDenseI64ArrayAttr({rows, k}));
  auto gemm = dsc::GemmOp::create(
      b, loc,
      RankedTensorType::get({rows, rt.getShape().back()}, rt.getElementType()),
      x, mm.getRhs(), bp.bias16, b.getF64FloatAttr(1.0), b.getF64FloatAttr(1.0),
      b.getBoolAttr(false), b.getBoolAttr(mm.getTransposeRhs()));
  Value sum = gemm.getResult();
  if (rt.getRank() != 2)
    sum = dsc::ReshapeOp::create(b, mm.getLoc(), sum,
                                 b.getDenseI64ArrayAttr(rt.getShape()));
  // A recomputed clone (dsc-recompute) is rewritten as its original is, so
  // both give the same bits, and stays marked as one.
  if (Attribute mark = mm->getAttr("dsc.recomputed"))
    for (Value v : {x, Value(gemm.getResult()), sum})
      if (Operation *def = v.getDefiningOp())
        def->setAttr("dsc.recomputed", mark);
  for (dsc::CastOp c : bp.narrow) {
    c.getResult().replaceAllUsesWith(sum);
    c->erase();
  }
  if (!bp.add.getResult().use_empty()) {
    auto wide = dsc::CastOp::create(b, bp.add.getLoc(), sum,
                                    TypeAttr::get(b.getF32Type()));
    if (Attribute mark = bp.add->getAttr("dsc.recomputed"))
      wide->setAttr("dsc.recomputed", mark);
    bp.add.getResult().replaceAllUsesWith(wide.getResult());
  }
  bp.add->erase();
  bp.widen->erase();
  mm->erase();
  // The bias's widening, when nothing else reads it.
  if (bp.biasWide.use_empty())
    bp.biasWide.getDefiningOp()->erase();
}

//===----------------------------------------------------------------------===//
// GELU (tanh approximation) and its derivative in the GEMM's epilogue
//===----------------------------------------------------------------------===//

/// `v` with reshapes looked through (a reshape keeps the row-major order).
Value throughReshapes(Value v) {
  while (auto r = v.getDefiningOp<dsc::ReshapeOp>())
    v = r.getInput();
  return v;
}

/// `v` as `shape` (a reshape when it is not), created at `b`.
Value reshapedTo(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  if (typeOf(v).getShape() == shape)
    return v;
  return dsc::ReshapeOp::create(b, loc, v, b.getDenseI64ArrayAttr(shape));
}

/// Erases `op` and then, transitively, the ops that only it read. An op is
/// in the worklist at most once (an op reading one value twice names its
/// producer twice), and an erased op is never named again: it was read by
/// nothing.
void eraseDeadChain(Operation *op) {
  llvm::SetVector<Operation *> work;
  work.insert(op);
  while (!work.empty()) {
    Operation *o = work.pop_back_val();
    if (!isOpTriviallyDead(o))
      continue;
    SmallVector<Operation *> defs;
    for (Value v : o->getOperands())
      if (Operation *def = v.getDefiningOp())
        defs.push_back(def);
    o->erase();
    work.insert(defs.begin(), defs.end());
  }
}

/// A 16-bit GEMM the epilogue can take: a dsc.matmul over [.., K] rows with
/// a 2-D rhs, or a dsc.gemm with a [N] bias as C (alpha and beta 1), its
/// result not widened. Its operands as the fused ops read them.
struct Product {
  Operation *op = nullptr;
  Value a, b, bias; // a as stored ([.., K]), b 2-D, bias [N] or null
  bool transB = false;
};

std::optional<Product> productOf(Value v) {
  Product p;
  p.op = v.getDefiningOp();
  RankedTensorType rt = typeOf(v);
  if (!p.op || !rt || !isHalf(rt.getElementType()) || !rt.hasStaticShape())
    return std::nullopt;
  if (auto mm = dyn_cast<dsc::MatMulOp>(p.op)) {
    if (mm.getTransposeLhs() || typeOf(mm.getRhs()).getRank() != 2 ||
        !typeOf(mm.getLhs()).hasStaticShape())
      return std::nullopt;
    p.a = mm.getLhs(), p.b = mm.getRhs(), p.transB = mm.getTransposeRhs();
    return p;
  }
  auto g = dyn_cast<dsc::GemmOp>(p.op);
  if (!g || g.getTransA() || g.getAlpha().convertToDouble() != 1.0)
    return std::nullopt;
  if (Value c = g.getC()) {
    RankedTensorType ct = typeOf(c);
    if (g.getBeta().convertToDouble() != 1.0 || !ct || ct.getRank() != 1 ||
        ct !=
            RankedTensorType::get({rt.getShape().back()}, rt.getElementType()))
      return std::nullopt;
    p.bias = c;
  }
  p.a = g.getA(), p.b = g.getB(), p.transB = g.getTransB();
  return p;
}

/// The product's rows: `a` as [M, K].
std::pair<int64_t, int64_t> rowsAndK(const Product &p) {
  RankedTensorType at = typeOf(p.a);
  int64_t k = at.getShape().back();
  return {at.getNumElements() / std::max<int64_t>(k, 1), k};
}

/// Marks the ops defining `values` as recomputed when `from` is a clone
/// dsc-recompute made (so they stay bitwise the originals and marked).
void keepRecomputedMark(Operation *from, ArrayRef<Value> values) {
  if (Attribute mark = from->getAttr("dsc.recomputed"))
    for (Value v : values)
      if (Operation *def = v.getDefiningOp())
        def->setAttr("dsc.recomputed", mark);
}

/// Forward: a 16-bit product widened, through GELU (tanh), rounded back.
struct GeluProduct {
  Product product;
  dsc::GeluOp gelu;
  SmallVector<dsc::CastOp> narrow; // every reader of gelu: a 16-bit cast
};

/// The GELUs that read `v` through reshapes and widening casts.
SmallVector<dsc::GeluOp> gelusReading(Value v) {
  SmallVector<dsc::GeluOp> found;
  SmallVector<Value> work = {v};
  while (!work.empty())
    for (Operation *user : work.pop_back_val().getUsers()) {
      if (auto g = dyn_cast<dsc::GeluOp>(user))
        found.push_back(g);
      else if (isa<dsc::ReshapeOp>(user) ||
               (isa<dsc::CastOp>(user) &&
                typeOf(user->getResult(0)).getElementType().isF32()))
        work.push_back(user->getResult(0));
    }
  return found;
}

/// Analysis: the GELU whose input widens a fused-able product, read only
/// by casts back to the product's type. A product that another GELU reads
/// too (a clone dsc-recompute made of the GELU alone, which computes it
/// from the rounded product) stays apart, so that the recomputed value
/// keeps the stored one's bits.
std::optional<GeluProduct> geluProductAt(dsc::GeluOp g) {
  auto widen = g.getInput().getDefiningOp<dsc::CastOp>();
  if (!g.getTanhApproximation() || !widen || g.getResult().use_empty())
    return std::nullopt;
  Value s = throughReshapes(widen.getInput());
  std::optional<Product> p = productOf(s);
  if (!p || gelusReading(s).size() != 1)
    return std::nullopt;
  GeluProduct gp{*p, g, {}};
  Type half = typeOf(s).getElementType();
  for (Operation *user : g.getResult().getUsers()) {
    auto c = dyn_cast<dsc::CastOp>(user);
    if (!c || typeOf(c.getResult()).getElementType() != half)
      return std::nullopt;
    gp.narrow.push_back(c);
  }
  return gp;
}

/// Rewrite: one dsc.gemm_gelu; the product's readers (backward's GELU
/// derivative) read its `pre`, the casts its result.
void fuseGelu(GeluProduct &gp) {
  Product &p = gp.product;
  OpBuilder b(p.op);
  Location loc = b.getFusedLoc({p.op->getLoc(), gp.gelu.getLoc()});
  auto [m, k] = rowsAndK(p);
  RankedTensorType st = typeOf(p.op->getResult(0));
  auto t2 =
      RankedTensorType::get({m, st.getShape().back()}, st.getElementType());
  Value a = reshapedTo(b, p.op->getLoc(), p.a, {m, k});
  auto fused = dsc::GemmGeluOp::create(b, loc, TypeRange{t2, t2}, a, p.b,
                                       p.bias, b.getBoolAttr(p.transB));
  Value pre = reshapedTo(b, p.op->getLoc(), fused.getPre(), st.getShape());
  keepRecomputedMark(p.op, {a, fused.getResult(), pre});
  for (dsc::CastOp c : gp.narrow) {
    b.setInsertionPoint(c);
    Value r = reshapedTo(b, c.getLoc(), fused.getResult(),
                         typeOf(c.getResult()).getShape());
    keepRecomputedMark(p.op, {r});
    c.getResult().replaceAllUsesWith(r);
    c->erase();
  }
  p.op->getResult(0).replaceAllUsesWith(pre);
  p.op->erase();
  eraseDeadChain(gp.gelu);
}

/// Backward: GELU's input gradient, a 16-bit GEMM widened times GELU's
/// derivative at a widened 16-bit value, rounded back to 16 bits.
struct GeluGradProduct {
  Product product;
  Value pre;          // GELU's 16-bit input, as the derivative reads it
  dsc::CastOp narrow; // the rounded gradient
};

/// GELU's (tanh approximation) derivative.
double tanhGeluDerivative(double x) {
  const double c = std::sqrt(2.0 / M_PI), k = 0.044715;
  double t = std::tanh(c * (x + k * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x);
}

/// Whether `d`, an f32 elementwise expression of `shape` over scalar
/// constants and the widening of one 16-bit value, is GELU's (tanh)
/// derivative at that value: the expression is evaluated at sample points
/// (it is what autodiff wrote for dsc.gelu, in whatever order the passes
/// since left it). Sets `pre` to the 16-bit value.
bool isTanhGeluDerivative(Value d, ArrayRef<int64_t> shape, Value &pre) {
  constexpr size_t kMaxNodes = 64;
  SmallVector<Value> nodes; // post-order
  llvm::DenseSet<Value> seen;
  pre = Value();
  std::function<bool(Value)> visit = [&](Value v) {
    if (!seen.insert(v).second)
      return true;
    if (seen.size() > kMaxNodes)
      return false;
    Operation *def = v.getDefiningOp();
    RankedTensorType t = typeOf(v);
    if (!def || !t || !t.getElementType().isF32())
      return false;
    if (auto c = dyn_cast<dsc::ConstantOp>(def)) {
      auto attr = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!attr || !attr.isSplat() || t.getNumElements() != 1)
        return false;
    } else if (t.getShape() != shape) {
      return false;
    } else if (auto c = dyn_cast<dsc::CastOp>(def)) {
      Value in = c.getInput();
      if (!isHalf(typeOf(in).getElementType()) || (pre && pre != in))
        return false;
      pre = in;
    } else if (isa<dsc::AddOp, dsc::SubOp, dsc::MulOp, dsc::DivOp, dsc::TanhOp,
                   dsc::NegOp>(def)) {
      for (Value o : def->getOperands())
        if (!visit(o))
          return false;
    } else {
      return false;
    }
    nodes.push_back(v);
    return true;
  };
  if (!visit(d) || !pre)
    return false;
  for (double x : {-4.0, -2.0, -1.3, -0.5, -0.1, 0.0, 0.3, 0.9, 1.7, 3.5}) {
    llvm::DenseMap<Value, double> val;
    for (Value v : nodes) {
      Operation *def = v.getDefiningOp();
      auto at = [&](unsigned i) { return val.lookup(def->getOperand(i)); };
      double r = 0;
      if (auto c = dyn_cast<dsc::ConstantOp>(def))
        r = cast<DenseElementsAttr>(c.getValue())
                .getSplatValue<APFloat>()
                .convertToDouble();
      else if (isa<dsc::CastOp>(def))
        r = x;
      else if (isa<dsc::AddOp>(def))
        r = at(0) + at(1);
      else if (isa<dsc::SubOp>(def))
        r = at(0) - at(1);
      else if (isa<dsc::MulOp>(def))
        r = at(0) * at(1);
      else if (isa<dsc::DivOp>(def))
        r = at(0) / at(1);
      else if (isa<dsc::TanhOp>(def))
        r = std::tanh(at(0));
      else
        r = -at(0);
      val[v] = r;
    }
    double want = tanhGeluDerivative(x);
    if (!(std::abs(val[d] - want) <= 1e-5 * std::max(1.0, std::abs(want))))
      return false;
  }
  return true;
}

/// Analysis: the rounded GELU input gradient `narrow`, if it is a product
/// times GELU's derivative.
std::optional<GeluGradProduct> geluGradAt(dsc::CastOp narrow) {
  Type half = typeOf(narrow.getResult()).getElementType();
  Value prod = throughReshapes(narrow.getInput());
  auto mul = prod.getDefiningOp<dsc::MulOp>();
  if (!isHalf(half) || !mul || !typeOf(prod).getElementType().isF32() ||
      !prod.hasOneUse())
    return std::nullopt;
  ArrayRef<int64_t> shape = typeOf(prod).getShape();
  for (unsigned i : {0u, 1u}) {
    Value g = mul.getOperand(i), d = mul.getOperand(1 - i);
    auto widen = g.getDefiningOp<dsc::CastOp>();
    if (!widen || typeOf(g).getShape() != shape || !g.hasOneUse())
      continue;
    Value s = throughReshapes(widen.getInput());
    std::optional<Product> p = productOf(s);
    Value pre;
    if (!p || typeOf(s).getElementType() != half || !s.hasOneUse() ||
        !widen.getInput().hasOneUse() || !isTanhGeluDerivative(d, shape, pre) ||
        typeOf(pre).getNumElements() != typeOf(s).getNumElements() ||
        typeOf(pre).getElementType() != half)
      continue;
    return GeluGradProduct{*p, pre, narrow};
  }
  return std::nullopt;
}

/// Rewrite: one dsc.matmul_gelu_grad where the rounding stood.
void fuseGeluGrad(GeluGradProduct &gg) {
  Product &p = gg.product;
  OpBuilder b(gg.narrow);
  Location loc = b.getFusedLoc({p.op->getLoc(), gg.narrow.getLoc()});
  auto [m, k] = rowsAndK(p);
  int64_t n = typeOf(p.op->getResult(0)).getShape().back();
  Value a = reshapedTo(b, p.op->getLoc(), p.a, {m, k});
  Value pre = reshapedTo(b, gg.narrow.getLoc(), gg.pre, {m, n});
  auto fused = dsc::MatMulGeluGradOp::create(
      b, loc, typeOf(p.op->getResult(0)).clone(ArrayRef<int64_t>{m, n}), a, p.b,
      pre, b.getBoolAttr(p.transB));
  Value r = reshapedTo(b, gg.narrow.getLoc(), fused.getResult(),
                       typeOf(gg.narrow.getResult()).getShape());
  gg.narrow.getResult().replaceAllUsesWith(r);
  eraseDeadChain(gg.narrow);
}

/// Both GELU rewrites over a block: the analyses first, then the rewrites
/// (the backward's reads GELU's input, which the forward's replaces).
void fuseGelus(Block &block) {
  SmallVector<GeluGradProduct> grads;
  for (auto c : block.getOps<dsc::CastOp>())
    if (std::optional<GeluGradProduct> gg = geluGradAt(c))
      grads.push_back(*gg);
  SmallVector<GeluProduct> gelus;
  for (auto g : block.getOps<dsc::GeluOp>())
    if (std::optional<GeluProduct> gp = geluProductAt(g))
      gelus.push_back(*gp);
  for (GeluGradProduct &gg : grads)
    fuseGeluGrad(gg);
  for (GeluProduct &gp : gelus)
    fuseGelu(gp);
}

struct FuseGemmEpilogue : dsc::impl::DscFuseGemmEpilogueBase<FuseGemmEpilogue> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<dsc::TargetDescription> target =
        dsc::TargetDescription::of(module);
    if (failed(target))
      return signalPassFailure();
    if (!target->gemmEpilogues)
      return;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      for (Pair p : findPairs(fn.getBody().front()))
        fuse(p);
      for (BiasedProduct &bp : findBiasedProducts(fn.getBody().front()))
        fuseBias(bp);
      fuseGelus(fn.getBody().front());
    }
  }
};

} // namespace
