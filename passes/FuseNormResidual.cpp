//===- FuseNormResidual.cpp - the residual's gradient in the norm backward ===//
//
// dsc-fuse-norm-residual (Passes.td): a fused chain that adds the residual
// stream's gradient to a layer norm backward's input gradient (and casts
// the sum to 16 bits for the next GEMM) becomes the norm backward's
// epilogue (`residual`, `copy_type`). Each chain in block order: match it
// to its norm (analysis), then rewrite the pair.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCFUSENORMRESIDUAL
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

bool isF32(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

/// A chain `add(r, gx)` over gx, an f32 norm backward's input gradient read
/// by the chain alone, yielding the sum and at most a 16-bit cast of it; or
/// that add alone (a chain of one op stays unfused).
struct Match {
  Operation *chain; // a dsc.fused "elementwise" or a dsc.add
  dsc::LayerNormBackwardOp norm;
  Value residual;
  std::optional<unsigned> sumResult, copyResult; // the chain's results
  Type copyType;
};

/// The body of `chain` as `add(arg a, arg b)` and an optional cast of it,
/// yielded in any order; the two inputs' indices and where each yield is.
bool readBody(dsc::FusedOp chain, unsigned &lhs, unsigned &rhs, Match &m) {
  Block &body = chain.getBody().front();
  auto ops = body.without_terminator();
  auto it = ops.begin();
  if (it == ops.end())
    return false;
  auto add = dyn_cast<dsc::AddOp>(*it++);
  dsc::CastOp cast;
  if (it != ops.end())
    cast = dyn_cast<dsc::CastOp>(*it++);
  if (!add || it != ops.end() || (cast && cast.getInput() != add.getResult()))
    return false;
  auto a = dyn_cast<BlockArgument>(add.getLhs());
  auto b = dyn_cast<BlockArgument>(add.getRhs());
  if (!a || !b || a == b || a.getType() != add.getType() ||
      b.getType() != add.getType() || !isF32(add.getResult()))
    return false;
  if (cast) {
    Type half = getElementTypeOrSelf(cast.getType());
    if (!half.isBF16() && !half.isF16())
      return false;
    m.copyType = half;
  }
  auto yield = cast_or_null<dsc::YieldOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(yield.getValues())) {
    if (v == add.getResult() && !m.sumResult)
      m.sumResult = i;
    else if (cast && v == cast.getResult() && !m.copyResult)
      m.copyResult = i;
    else
      return false;
  }
  if (!m.copyResult) // a cast nothing reads: no copy to write
    m.copyType = Type();
  lhs = a.getArgNumber(), rhs = b.getArgNumber();
  return m.sumResult.has_value();
}

/// Whether `v` is available right before `op` (its block's order).
bool availableBefore(Value v, Operation *op) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return cast<BlockArgument>(v).getOwner() == op->getBlock();
  return def->getBlock() == op->getBlock() && def->isBeforeInBlock(op);
}

/// The chain over a norm gradient, if `chain` is one the norm can take.
std::optional<Match> matchChain(Operation *chain) {
  Match m;
  m.chain = chain;
  unsigned lhs = 0, rhs = 1;
  if (auto add = dyn_cast<dsc::AddOp>(chain)) {
    if (add.getLhs().getType() != add.getType() ||
        add.getRhs().getType() != add.getType() || !isF32(add.getResult()))
      return std::nullopt;
    m.sumResult = 0;
  } else {
    auto fused = dyn_cast<dsc::FusedOp>(chain);
    if (!fused || fused.getKind() != "elementwise" ||
        !readBody(fused, lhs, rhs, m))
      return std::nullopt;
  }
  for (auto [mine, other] : {std::pair{lhs, rhs}, std::pair{rhs, lhs}}) {
    Value gx = chain->getOperand(mine);
    auto norm = gx.getDefiningOp<dsc::LayerNormBackwardOp>();
    if (!norm || norm.getGradInput() != gx || norm.getResidual() ||
        norm.getCopyType() || !gx.hasOneUse() || !isF32(gx) ||
        norm->getBlock() != chain->getBlock())
      continue;
    Value r = chain->getOperand(other);
    if (r.getType() != gx.getType() || r == gx)
      continue;
    // The norm takes the residual where it stands: the residual must be
    // ready there. (It is, in every step autodiff writes: the residual's
    // gradient comes from the layers above, before this block's norm.)
    if (!availableBefore(r, norm))
      continue;
    m.norm = norm, m.residual = r;
    return m;
  }
  return std::nullopt;
}

/// The norm backward with the chain as its epilogue; the chain is gone.
void rewrite(Match m) {
  OpBuilder b(m.norm);
  dsc::LayerNormBackwardOp n = m.norm;
  auto fused = dsc::LayerNormBackwardOp::create(
      b, n.getLoc(), n.getGrad(), n.getInput(), n.getScale(), m.residual,
      n.getAxisAttr(), n.getEpsilonAttr(), n.getRmsAttr(),
      m.copyType ? TypeAttr::get(m.copyType) : TypeAttr());
  dsc::copyMarkers(n, fused);
  n.getGradScale().replaceAllUsesWith(fused.getGradScale());
  n.getGradBias().replaceAllUsesWith(fused.getGradBias());
  m.chain->getResult(*m.sumResult).replaceAllUsesWith(fused.getGradInput());
  if (m.copyResult)
    m.chain->getResult(*m.copyResult)
        .replaceAllUsesWith(fused.getGradInputCopy());
  m.chain->erase();
  n->erase();
}

struct FuseNormResidual : dsc::impl::DscFuseNormResidualBase<FuseNormResidual> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<dsc::TargetDescription> target =
        dsc::TargetDescription::of(module);
    if (failed(target))
      return signalPassFailure();
    if (!target->generatedKernels)
      return;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      // In block order, each chain rewritten as it is found: a residual
      // may be the sum an earlier chain made (then the norm that took
      // that chain's place made it).
      for (Operation &op : llvm::make_early_inc_range(fn.getBody().front()))
        if (std::optional<Match> m = matchChain(&op))
          rewrite(*m);
    }
  }
};

} // namespace
