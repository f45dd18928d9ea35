//===- FuseGemmEpilogue.cpp - bias gradients as GEMM epilogues ------------===//
//
// dsc-fuse-gemm-epilogue (Passes.td), two rewrites, each in two steps per
// function as upstream fusion passes do (analysis, then rewrite):
// - backward: a linear layer's bias gradient (a reduce_sum of its output
//   gradient over every dim but the last) and its weight gradient (a matmul
//   reading that gradient as [T, C]) become one dsc.matmul_bias_grad, which
//   the target's GEMM computes with the sum in its epilogue;
// - forward: a 16-bit product plus a widened 16-bit bias, rounded back to
//   16 bits, becomes a dsc.gemm with the bias as C (the GEMM's bias
//   epilogue, one rounding).
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

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
    }
  }
};

} // namespace
