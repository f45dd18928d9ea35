//===- MultiTensorAdamW.cpp - dsc.adamw ops as one dsc.adamw_multi --------===//
//
// dsc-multi-tensor-adamw (Passes.td): per function, group the adamw ops by
// their scalar operands and the scale folded from their grads (analysis),
// then build one dsc.adamw_multi per group where its last member stood and
// rewire the members' results (rewrite); optionally the group also writes
// its parameters' compute copies, which become step state.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <tuple>

namespace dsc {
#define GEN_PASS_DEF_DSCMULTITENSORADAMW
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// One adamw as a member of a group: its grad with the scale folded out.
struct Member {
  dsc::AdamWOp op;
  Value grad;  // what the kernel reads
  Value scale; // null: none
};

/// A scalar f32 `s` with grad = dsc.mul(g, s) (or mul(s, g)) used only by
/// `op`: g and s, else the grad as it is.
Member unscaled(dsc::AdamWOp op) {
  Value grad = op.getGrad();
  auto mul = grad.getDefiningOp<dsc::MulOp>();
  if (!mul || !grad.hasOneUse())
    return {op, grad, Value()};
  auto isScalar = [](Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    return t.getRank() == 0 && t.getElementType().isF32();
  };
  Value a = mul.getLhs(), b = mul.getRhs();
  if (isScalar(b) && a.getType() == grad.getType())
    return {op, a, b};
  if (isScalar(a) && b.getType() == grad.getType())
    return {op, b, a};
  return {op, grad, Value()};
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
  using Key = std::tuple<void *, void *, void *, void *, void *, void *,
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
            m.scale.getAsOpaquePointer()};
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
  Value scale = group.front().scale;
  if (!scale) // unscaled grads: a splat 1 (the kernel skips the multiply)
    scale = dsc::ConstantOp::create(
        b, last.getLoc(),
        DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                               b.getF32FloatAttr(1.0f).getValue()));
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
      last.getStep(), scale, tensors);
  for (size_t i = 0; i < n; ++i) {
    Member &m = group[i];
    m.op.getNewParam().replaceAllUsesWith(multi.getResult(i));
    m.op.getNewExpAvg().replaceAllUsesWith(multi.getResult(n + i));
    m.op.getNewExpAvgSq().replaceAllUsesWith(multi.getResult(2 * n + i));
  }
  for (Member &m : group) {
    Operation *scaled = m.scale ? m.op.getGrad().getDefiningOp() : nullptr;
    m.op.erase();
    if (scaled && scaled->use_empty())
      scaled->erase();
  }
  if (casts.empty())
    return success();
  return dsc::castsToState(fn, casts, multi.getResults().drop_front(3 * n));
}

struct MultiTensorAdamW
    : dsc::impl::DscMultiTensorAdamWBase<MultiTensorAdamW> {
  using DscMultiTensorAdamWBase::DscMultiTensorAdamWBase;

  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      for (std::vector<Member> &group :
           findGroups(fn.getBody().front(), minGroup))
        if (failed(rewrite(fn, std::move(group), computeCopies)))
          return signalPassFailure();
    }
  }
};

} // namespace
