//===- Recompute.cpp - selective activation recomputation -----------------===//
//
// dsc-recompute (Passes.td): in @forward_backward, cheap forward values the
// backward reads are computed again before their first backward use
// instead of being kept. In three steps: find where backward begins,
// decide per forward op (analysis), then clone and rewire (rewrite).
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

namespace dsc {
#define GEN_PASS_DEF_DSCRECOMPUTE
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

/// The op classes selective recomputation redoes: elementwise math, casts,
/// where, norms and softmax. Dropout (random), the matmuls, attention,
/// reductions and collectives are kept.
bool isCheap(Operation *op) {
  return isa<dsc::NegOp, dsc::AbsOp, dsc::ExpOp, dsc::LogOp, dsc::SqrtOp,
             dsc::ReciprocalOp, dsc::TanhOp, dsc::ErfOp, dsc::SigmoidOp,
             dsc::ReluOp, dsc::LeakyReluOp, dsc::GeluOp, dsc::ClipOp,
             dsc::SoftplusOp, dsc::AddOp, dsc::SubOp, dsc::MulOp, dsc::DivOp,
             dsc::PowOp, dsc::MaxOp, dsc::MinOp, dsc::CastOp, dsc::WhereOp,
             dsc::LayerNormOp, dsc::SoftmaxOp, dsc::LogSoftmaxOp>(op) &&
         op->getNumRegions() == 0 && isPure(op);
}

/// The repeated block an op belongs to, from its ONNX node name: the path
/// up to the first component that is a module list entry ("/h.11/mlp/..."
/// -> "/h.11", "/model/layers.3/self_attn/..." -> "/model/layers.3");
/// empty outside any (embeddings, the final norm, the loss).
std::string blockOf(Operation *op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      loc = fused.getLocations().front();
  auto name = dyn_cast<NameLoc>(loc);
  if (!name)
    return "";
  StringRef path = name.getName().strref();
  size_t prefix = 0; // the path up to and with this component
  for (StringRef part : llvm::split(path, '/')) {
    prefix += part.size();
    auto [module, index] = part.rsplit('.');
    if (!module.empty() && !index.empty() &&
        llvm::all_of(index, [](char c) { return llvm::isDigit(c); }))
      return path.take_front(prefix).str();
    ++prefix; // the '/'
  }
  return "";
}

/// Full (per-block) recomputation also redoes the matmuls, attention and
/// every other deterministic op of a repeated block, so that of a block the
/// backward keeps only what flows into it. Never dropout or an attention
/// with dropout (a dropout's mask is drawn from its place among the
/// function's dropouts, which a clone does not share), nor anything with
/// effects (collectives, waits).
bool isRecomputableInBlock(Operation *op, StringRef block) {
  if (isa<dsc::DropoutOp, dsc::ConstantOp>(op) || op->getNumRegions() != 0 ||
      !isPure(op) || block.empty())
    return false;
  if (auto a = dyn_cast<dsc::AttentionOp>(op))
    return a.getDropout().convertToDouble() == 0;
  return true;
}

/// What the analysis decided, by op.
struct Plan {
  /// Forward ops to recompute, in block order.
  SmallVector<Operation *> ops;
  /// For each: the backward op before which its clone goes (the earliest
  /// backward use of its results or of a clone that reads it).
  llvm::DenseMap<Operation *, Operation *> before;
};

class Recompute {
public:
  Recompute(func::FuncOp fn, bool full) : fn_(fn), full_(full) {}

  /// 0 when there is nothing to do (no backward marker).
  int64_t run() {
    Block &body = fn_.getBody().front();
    int64_t index = 0;
    for (Operation &op : body) {
      position_[&op] = index++;
      if (op.hasAttr("dsc.backward_begin") && !begin_)
        begin_ = &op;
      if (full_ && !begin_)
        block_[&op] = blockOf(&op);
    }
    if (!begin_)
      return 0;
    Plan plan = analyse(body);
    rewrite(plan);
    return int64_t(plan.ops.size());
  }

private:
  bool isBackward(Operation *op) const {
    return position_.lookup(op) >= position_.lookup(begin_);
  }

  /// Full mode: a block's results that the forward reads outside the
  /// block (the residual stream into the next block) are its checkpoints,
  /// kept; recomputing them would chain every block's recomputation back
  /// to the first one at the start of the backward.
  bool isCheckpoint(Operation *op) const {
    for (Value r : op->getResults())
      for (Operation *user : r.getUsers())
        if (user->getBlock() == op->getBlock() && !isBackward(user) &&
            block_.lookup(user) != block_.lookup(op))
          return true;
    return false;
  }

  /// The first backward op that uses `v` (null: none).
  Operation *firstBackwardUse(Value v) const {
    Operation *first = nullptr;
    for (Operation *user : v.getUsers()) {
      if (user->getBlock() != begin_->getBlock() || !isBackward(user))
        continue;
      if (!first || position_.lookup(user) < position_.lookup(first))
        first = user;
    }
    return first;
  }

  Plan analyse(Block &body) {
    Plan plan;
    // 1. Forward ops that can be computed again from what the backward
    // keeps anyway (block arguments, constants, values a backward op reads)
    // through other such ops: nothing lives longer than it does now.
    llvm::DenseSet<Operation *> can;
    for (Operation &op : body) {
      if (&op == begin_)
        break;
      bool candidate =
          full_ ? (isCheap(&op) || isRecomputableInBlock(&op, block_[&op])) &&
                      !isCheckpoint(&op)
                : isCheap(&op);
      if (!candidate)
        continue;
      bool fromKept = llvm::all_of(op.getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || isa<dsc::ConstantOp>(def) || can.contains(def) ||
               firstBackwardUse(v);
      });
      if (fromKept)
        can.insert(&op);
    }
    // 2. Those the backward reads, and (latest first) the producers of
    // their operands that the backward does not read: their clones need
    // them again.
    llvm::SetVector<Operation *> chosen;
    for (Operation *op : can)
      if (llvm::any_of(op->getResults(),
                       [&](Value r) { return firstBackwardUse(r); }))
        chosen.insert(op);
    SmallVector<Operation *> work(chosen.begin(), chosen.end());
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (def && can.contains(def) && !firstBackwardUse(v) &&
            chosen.insert(def))
          work.push_back(def);
      }
    }
    plan.ops.assign(chosen.begin(), chosen.end());
    llvm::sort(plan.ops, [&](Operation *x, Operation *y) {
      return position_.lookup(x) < position_.lookup(y);
    });
    for (Operation *op : plan.ops)
      recomputed_.insert(op);
    // Where each clone goes, latest consumer first: its results' first
    // backward use, or earlier where a recomputed user's clone needs it.
    for (Operation *op : llvm::reverse(plan.ops)) {
      Operation *at = nullptr;
      auto earlier = [&](Operation *candidate) {
        if (candidate &&
            (!at || position_.lookup(candidate) < position_.lookup(at)))
          at = candidate;
      };
      for (Value r : op->getResults()) {
        earlier(firstBackwardUse(r));
        for (Operation *user : r.getUsers())
          if (recomputed_.contains(user))
            earlier(plan.before.lookup(user));
      }
      plan.before[op] = at;
    }
    return plan;
  }

  void rewrite(const Plan &plan) {
    IRMapping clones;
    OpBuilder b(fn_.getContext());
    for (Operation *op : plan.ops) {
      Operation *at = plan.before.lookup(op);
      b.setInsertionPoint(at);
      Operation *copy = b.clone(*op, clones); // maps recomputed operands
      copy->setAttr("dsc.recomputed", b.getUnitAttr());
      // Backward uses read the clone; forward ones keep the original.
      for (auto [orig, now] : llvm::zip(op->getResults(), copy->getResults()))
        orig.replaceUsesWithIf(now, [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return user != copy && !user->hasAttr("dsc.recomputed") &&
                 position_.count(user) && isBackward(user);
        });
    }
    // A forward op only the backward read is dead now.
    for (Operation *op : llvm::reverse(plan.ops))
      if (op->use_empty())
        op->erase();
  }

  func::FuncOp fn_;
  bool full_;
  Operation *begin_ = nullptr;
  llvm::DenseMap<Operation *, int64_t> position_;
  llvm::DenseMap<Operation *, std::string> block_; // full mode: blockOf
  llvm::DenseSet<Operation *> recomputed_;
};

struct RecomputePass : public dsc::impl::DscRecomputeBase<RecomputePass> {
  using Base::Base;

  void runOnOperation() override {
    if (mode == "none")
      return;
    if (mode != "selective" && mode != "full") {
      getOperation().emitError("dsc-recompute: mode must be none, "
                               "selective or full, not '")
          << mode << "'";
      return signalPassFailure();
    }
    auto fb = getOperation().lookupSymbol<func::FuncOp>("forward_backward");
    if (!fb || fb.isExternal())
      return;
    Recompute(fb, mode == "full").run();
  }
};

} // namespace
