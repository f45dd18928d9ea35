//===- MultiTensorAdamW.cpp - dsc.adamw ops as one dsc.adamw_multi --------===//
//
// dsc-multi-tensor-adamw (Passes.td): per function, the returned gradients
// unnormalized where a loss normalizer scales them all, then group the adamw
// ops by their scalar operands and the scales folded from their grads
// (analysis), then build one dsc.adamw_multi per group where its last member
// stood and rewire the members' results (rewrite); optionally the group also
// writes its parameters' compute copies, which become step state.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <map>
#include <tuple>

namespace dsc {
#define GEN_PASS_DEF_DSCMULTITENSORADAMW
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// One adamw as a member of a group: its grad with the scales folded out
/// (grad = mul(mul(grad', prescale), scale)).
struct Member {
  dsc::AdamWOp op;
  Value grad;     // what the kernel reads
  Value scale;    // null: none
  Value prescale; // null: none (never set without scale)
};

/// `v` = dsc.mul(x, s) of a scalar f32 s (dsc::scaledByScalar), read only
/// by its one user: {x, s}, else {v, null}.
std::pair<Value, Value> peelScale(Value v) {
  auto [x, s] = dsc::scaledByScalar(v);
  if (!s || !v.hasOneUse())
    return {v, Value()};
  return {x, s};
}

/// `op`'s grad with up to two scales peeled: the clip coefficient, then a
/// loss normalizer under it (its sum of squares reads the unnormalized
/// grads with that scale once canonicalized: see SumSquaresOp).
Member unscaled(dsc::AdamWOp op) {
  auto [scaled, scale] = peelScale(op.getGrad());
  if (!scale)
    return {op, scaled, Value(), Value()};
  auto [grad, prescale] = peelScale(scaled);
  return {op, grad, scale, prescale};
}

/// Whether any result of `op` is read before `last` (then the group, which
/// runs at `last`, cannot compute it).
bool readBefore(Operation *op, Operation *last) {
  for (Value r : op->getResults())
    for (Operation *user : r.getUsers())
      if (user->getBlock() != last->getBlock() || user->isBeforeInBlock(last))
        return true;
  return false;
}

/// Step 1: the groups of `block` (`minGroup` members or more), in block
/// order.
std::vector<std::vector<Member>> findGroups(Block &block, unsigned minGroup) {
  using Key = std::tuple<void *, void *, void *, void *, void *, void *, void *,
                         void *>;
  std::map<Key, std::vector<Member>> byKey;
  std::vector<Key> order;
  for (auto op : block.getOps<dsc::AdamWOp>()) {
    Member m = unscaled(op);
    Key key{op.getLr().getAsOpaquePointer(),
            op.getBeta1().getAsOpaquePointer(),
            op.getBeta2().getAsOpaquePointer(),
            op.getEps().getAsOpaquePointer(),
            op.getWeightDecay().getAsOpaquePointer(),
            op.getStep().getAsOpaquePointer(),
            m.scale.getAsOpaquePointer(),
            m.prescale.getAsOpaquePointer()};
    auto [it, isNew] = byKey.try_emplace(key);
    if (isNew)
      order.push_back(key);
    it->second.push_back(m);
  }
  std::vector<std::vector<Member>> groups;
  for (const Key &key : order) {
    std::vector<Member> &g = byKey[key];
    // Members whose results are read before the last member's position run
    // apart (the position moves up as they leave).
    bool changed = true;
    while (changed && g.size() > 1) {
      changed = false;
      Operation *last = g.back().op;
      for (auto it = g.begin(); it != g.end(); ++it)
        if (it->op != last && readBefore(it->op, last)) {
          g.erase(it);
          changed = true;
          break;
        }
    }
    if (!g.empty() && g.size() >= minGroup)
      groups.push_back(std::move(g));
  }
  return groups;
}

/// Step 2: one dsc.adamw_multi for `group`, at its last member. With
/// `computeCopies`, when every parameter of the group has a compute copy
/// (dsc.cast {dsc.compute_copy}) read only before the group runs, the group
/// also writes each parameter's copy, rounded from the new parameter, and
/// the casts become step state (dsc.compute_copy arguments and their
/// updates): no cast of every parameter at the next step's start.
LogicalResult rewrite(func::FuncOp fn, std::vector<Member> group,
                      bool computeCopies) {
  dsc::AdamWOp last = group.back().op;
  OpBuilder b(last);
  SmallVector<Value> params;
  for (Member &m : group)
    params.push_back(m.op.getParam());
  // The copies round the new parameters the step returns: not where the
  // step may still choose the old ones (a skipped fp16 step's dsc.where).
  bool returned = llvm::all_of(group, [](Member &m) {
    return llvm::all_of(m.op.getNewParam().getUsers(),
                        [](Operation *u) { return isa<func::ReturnOp>(u); });
  });
  SmallVector<dsc::CastOp> casts;
  if (computeCopies && returned)
    casts = dsc::computeCopyCasts(params, last, [](dsc::CastOp c) {
      return c->hasAttr("dsc.compute_copy");
    });
  SmallVector<Value> tensors(params);
  for (Member &m : group)
    tensors.push_back(m.grad);
  for (Member &m : group)
    tensors.push_back(m.op.getExpAvg());
  for (Member &m : group)
    tensors.push_back(m.op.getExpAvgSq());
  SmallVector<Location> locs;
  for (Member &m : group)
    locs.push_back(m.op.getLoc());
  // Unscaled grads: a splat 1 (the kernel skips the multiply).
  Value one;
  auto orOne = [&](Value scale) {
    if (!scale && !one)
      one = dsc::ConstantOp::create(
          b, last.getLoc(),
          DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                 b.getF32FloatAttr(1.0f).getValue()));
    return scale ? scale : one;
  };
  Value scale = orOne(group.front().scale);
  Value prescale = orOne(group.front().prescale);
  size_t n = group.size();
  SmallVector<Type> types;
  for (int k = 0; k < 3; ++k)
    for (Value p : params)
      types.push_back(p.getType());
  for (dsc::CastOp c : casts)
    types.push_back(c.getType());
  auto multi = dsc::AdamWMultiOp::create(
      b, FusedLoc::get(b.getContext(), locs), types, last.getLr(),
      last.getBeta1(), last.getBeta2(), last.getEps(), last.getWeightDecay(),
      last.getStep(), scale, prescale, tensors);
  for (size_t i = 0; i < n; ++i) {
    Member &m = group[i];
    m.op.getNewParam().replaceAllUsesWith(multi.getResult(i));
    m.op.getNewExpAvg().replaceAllUsesWith(multi.getResult(n + i));
    m.op.getNewExpAvgSq().replaceAllUsesWith(multi.getResult(2 * n + i));
  }
  for (Member &m : group) {
    // The clip coefficient's mul, then the normalizer's under it.
    Operation *outer = m.scale ? m.op.getGrad().getDefiningOp() : nullptr;
    Operation *inner = nullptr;
    if (outer && m.prescale)
      for (Value v : outer->getOperands())
        if (v != m.scale)
          inner = v.getDefiningOp();
    m.op.erase();
    for (Operation *mul : {outer, inner})
      if (mul && mul->use_empty())
        mul->erase();
  }
  if (casts.empty())
    return success();
  return dsc::castsToState(fn, casts, multi.getResults().drop_front(3 * n));
}

/// Step 0: when every gradient @train_step returns ({dsc.grad}) is dsc.mul(g,
/// s) of one scalar f32 s (the loss normalizer, 1 / label count), return the g
/// instead and s as a result {dsc.grad_normalizer}: the program multiplies them
/// when it reports gradients (--dump-grads, --gradcheck), rounding as the mul
/// does. Then no kernel of the step needs to write the normalized gradients:
/// the norm reads them unnormalized with s as its scale (SumSquaresOp's
/// canonicalization, applied again here) and the AdamW kernel folds s in (step
/// 1's prescale).
void returnRawGradients(func::FuncOp fn) {
  // The program's entry only: a callee's results are its callers' to read.
  auto ret = dyn_cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  if (!ret || fn.getSymName() != "train_step")
    return;
  Value common;
  SmallVector<std::pair<unsigned, Value>> raw;
  for (unsigned k = 0; k < fn.getNumResults(); ++k) {
    if (!fn.getResultAttr(k, "dsc.grad"))
      continue;
    auto [x, s] = dsc::scaledByScalar(ret.getOperand(k));
    if (!s || (common && s != common))
      return;
    common = s;
    raw.push_back({k, x});
  }
  if (raw.empty())
    return;
  for (auto [k, x] : raw)
    ret->setOperand(k, x);
  OpBuilder b(ret);
  SmallVector<Value> results(ret.getOperands());
  results.push_back(common);
  SmallVector<DictionaryAttr> attrs;
  fn.getAllResultAttrs(attrs);
  attrs.push_back(b.getDictionaryAttr(
      b.getNamedAttr("dsc.grad_normalizer", b.getUnitAttr())));
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(),
                               TypeRange(ValueRange(results))));
  fn.setAllResultAttrs(attrs);
  RewritePatternSet patterns(fn.getContext());
  dsc::SumSquaresOp::getCanonicalizationPatterns(patterns, fn.getContext());
  (void)applyPatternsGreedily(fn, std::move(patterns));
}

struct MultiTensorAdamW
    : dsc::impl::DscMultiTensorAdamWBase<MultiTensorAdamW> {
  using DscMultiTensorAdamWBase::DscMultiTensorAdamWBase;

  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      returnRawGradients(fn);
      for (std::vector<Member> &group :
           findGroups(fn.getBody().front(), minGroup))
        if (failed(rewrite(fn, std::move(group), computeCopies)))
          return signalPassFailure();
    }
  }
};

} // namespace
