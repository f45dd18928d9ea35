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
#include "llvm/ADT/StringSwitch.h"

#include <map>

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
             dsc::ReluOp, dsc::LeakyReluOp, dsc::GeluOp, dsc::SwigluOp,
             dsc::ClipOp, dsc::SoftplusOp, dsc::AddOp, dsc::SubOp, dsc::MulOp,
             dsc::DivOp, dsc::PowOp, dsc::MaxOp, dsc::MinOp, dsc::CastOp,
             dsc::WhereOp, dsc::LayerNormOp, dsc::SoftmaxOp, dsc::LogSoftmaxOp>(
             op) &&
         op->getNumRegions() == 0 && isPure(op);
}

/// What `mode=elementwise` redoes: the cheap ops but the norms and
/// softmaxes, whose recomputation is a kernel of its own. An elementwise
/// clone lands in the generated kernel of the backward op that reads it.
bool isElementwise(Operation *op) {
  return isCheap(op) &&
         !isa<dsc::LayerNormOp, dsc::SoftmaxOp, dsc::LogSoftmaxOp>(op);
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

enum class Mode { Selective, Elementwise, Full };

class Recompute {
public:
  Recompute(func::FuncOp fn, Mode mode) : fn_(fn), mode_(mode) {}

  /// 0 when there is nothing to do (no backward marker).
  int64_t run() {
    Block &body = fn_.getBody().front();
    int64_t index = 0;
    for (Operation &op : body) {
      position_[&op] = index++;
      if (op.hasAttr("dsc.backward_begin") && !begin_)
        begin_ = &op;
      if (mode_ == Mode::Full && !begin_)
        block_[&op] = blockOf(&op);
    }
    if (!begin_)
      return 0;
    Plan plan = analyse(body);
    if (mode_ == Mode::Elementwise)
      rewritePerUse(plan);
    else
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

  /// Whether this mode may recompute `op` (its operands aside).
  bool isCandidate(Operation *op) {
    switch (mode_) {
    case Mode::Selective:
      return isCheap(op);
    case Mode::Elementwise:
      return isElementwise(op);
    case Mode::Full:
      return (isCheap(op) || isRecomputableInBlock(op, block_[op])) &&
             !isCheckpoint(op);
    }
    llvm_unreachable("unknown recompute mode");
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
      if (!isCandidate(&op))
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

  /// Elementwise mode: every elementwise backward op that reads a
  /// recomputed value gets its own clones of what it needs, right before
  /// it, so that dsc-fuse-elementwise computes them inside that op's
  /// kernel instead of writing them to memory once for all the readers.
  /// The other readers of the same values (matmuls: SwiGLU's product read
  /// by the down projection's weight gradient) share one set of clones
  /// before the first of them, a kernel that writes just what they read. Each
  /// set carries its own `dsc.recomputed` number: CSE leaves them apart.
  void rewritePerUse(const Plan &plan) {
    llvm::DenseSet<Operation *> chosen(plan.ops.begin(), plan.ops.end());
    llvm::SetVector<Operation *> readers;
    for (Operation *op : plan.ops)
      for (Operation *user : op->getUsers())
        if (position_.count(user) && isBackward(user))
          readers.insert(user);
    SmallVector<Operation *> order(readers.begin(), readers.end());
    llvm::sort(order, [&](Operation *x, Operation *y) {
      return position_.lookup(x) < position_.lookup(y);
    });
    // Each elementwise reader alone; the others grouped by the recomputed
    // values they read, each group cloned at its first reader.
    SmallVector<SmallVector<Operation *>> groups;
    std::map<SmallVector<const void *>, size_t> groupOf; // by what they read
    for (Operation *reader : order) {
      if (isElementwise(reader)) {
        groups.push_back({reader});
        continue;
      }
      SmallVector<const void *> reads;
      for (Value v : reader->getOperands())
        if (chosen.contains(v.getDefiningOp()))
          reads.push_back(v.getAsOpaquePointer());
      llvm::sort(reads);
      auto [it, added] = groupOf.try_emplace(reads, groups.size());
      if (added)
        groups.emplace_back();
      groups[it->second].push_back(reader);
    }
    int64_t number = 0;
    for (ArrayRef<Operation *> group : groups)
      cloneBefore(group, chosen, number++);
    for (Operation *op : llvm::reverse(plan.ops))
      if (op->use_empty())
        op->erase();
  }

  /// Clones of the recomputed ops that `readers` need (through other
  /// recomputed ops), in block order, right before the first reader,
  /// marked `dsc.recomputed = number`; the readers read the clones.
  void cloneBefore(ArrayRef<Operation *> readers,
                   const llvm::DenseSet<Operation *> &chosen, int64_t number) {
    llvm::SetVector<Operation *> needed;
    SmallVector<Operation *> work;
    auto need = [&](Value v) {
      if (Operation *def = v.getDefiningOp();
          def && chosen.contains(def) && needed.insert(def))
        work.push_back(def);
    };
    for (Operation *reader : readers)
      llvm::for_each(reader->getOperands(), need);
    while (!work.empty())
      llvm::for_each(work.pop_back_val()->getOperands(), need);
    SmallVector<Operation *> clones(needed.begin(), needed.end());
    llvm::sort(clones, [&](Operation *x, Operation *y) {
      return position_.lookup(x) < position_.lookup(y);
    });
    IRMapping map;
    OpBuilder b(readers.front());
    auto mark = b.getI64IntegerAttr(number);
    for (Operation *op : clones)
      b.clone(*op, map)->setAttr("dsc.recomputed", mark);
    for (Operation *reader : readers)
      for (OpOperand &use : reader->getOpOperands())
        if (Value now = map.lookupOrNull(use.get()))
          use.set(now);
  }

  func::FuncOp fn_;
  Mode mode_;
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
    std::optional<Mode> m = llvm::StringSwitch<std::optional<Mode>>(mode)
                                .Case("selective", Mode::Selective)
                                .Case("elementwise", Mode::Elementwise)
                                .Case("full", Mode::Full)
                                .Default(std::nullopt);
    if (!m) {
      getOperation().emitError("dsc-recompute: mode must be none, "
                               "elementwise, selective or full, not '")
          << mode << "'";
      return signalPassFailure();
    }
    auto fb = getOperation().lookupSymbol<func::FuncOp>("forward_backward");
    if (!fb || fb.isExternal())
      return;
    Recompute(fb, *m).run();
    // Memory over speed: the attention backward's workspace too.
    if (attentionWorkspace > 0)
      fb.walk([&](dsc::AttentionBackwardOp op) {
        op.setWorkspaceLimit(uint64_t(attentionWorkspace));
      });
  }
};

} // namespace
