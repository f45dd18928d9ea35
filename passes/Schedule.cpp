//===- Schedule.cpp - asynchronous collectives: early start, late wait ----===//
#include "dialects/dsc/IR/DscOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace dsc {
#define GEN_PASS_DEF_DSCSCHEDULE
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

bool isCollective(Operation *op) {
  return isa<shard::AllGatherOp, shard::ReduceScatterOp, shard::AllReduceOp>(
      op);
}

/// What a collective communicates: the operand of its dsc.collective_input
/// (dsc-zero-partition puts one before each), or its own operand.
Value communicated(Operation *c) {
  Value v = c->getOperand(0);
  if (auto in = v.getDefiningOp<dsc::CollectiveInputOp>())
    return in.getInput();
  return v;
}

/// Moves a collective's start, its dsc.collective_input with it (just
/// before), so that the input point stays the collective's own.
void moveStart(Operation *c, Operation *before) {
  c->moveBefore(before);
  if (auto in = c->getOperand(0).getDefiningOp<dsc::CollectiveInputOp>())
    in->moveBefore(c);
}

struct SchedulePass : public dsc::impl::DscScheduleBase<SchedulePass> {
  using Base::Base;

  void runOnOperation() override {
    if (prefetch < 0) {
      getOperation().emitError("dsc-schedule: prefetch must be >= 0");
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      Block &body = func.front();
      // 1. Waits: each collective's uses go through a dsc.wait placed just
      // before the first of them.
      SmallVector<Operation *> collectives;
      for (Operation &op : body)
        if (isCollective(&op))
          collectives.push_back(&op);
      DenseMap<Operation *, Operation *> waitOf;
      for (Operation *c : collectives) {
        Value r = c->getResult(0);
        if (r.use_empty())
          continue;
        Operation *first = nullptr;
        for (Operation *user : r.getUsers()) {
          Operation *u = body.findAncestorOpInBlock(*user);
          if (!first || u->isBeforeInBlock(first))
            first = u;
        }
        OpBuilder b(first);
        auto wait = dsc::WaitOp::create(b, c->getLoc(), r);
        r.replaceAllUsesExcept(wait, wait);
        waitOf[c] = wait;
      }
      // 2. Starts: gathers of function arguments (stage-3 parameters) move
      // early, `prefetch` buckets ahead of their use; other collectives
      // start as soon as their operand exists (they already do).
      SmallVector<Operation *> gathers;
      for (Operation *c : collectives)
        if (isa<shard::AllGatherOp>(c) && waitOf.count(c) &&
            isa<BlockArgument>(communicated(c)))
          gathers.push_back(c);
      llvm::sort(gathers, [&](Operation *a, Operation *b) {
        return waitOf[a]->isBeforeInBlock(waitOf[b]);
      });
      auto elems = [](Operation *g) {
        return cast<RankedTensorType>(g->getResult(0).getType())
            .getNumElements();
      };
      for (size_t i = 0; i < gathers.size(); ++i) {
        // Start after the wait of gather `a` (-1: at the function's start):
        // `prefetch` buckets ahead, then later while a size bound is broken.
        int64_t a = (int64_t)i - prefetch;
        a = std::max<int64_t>(a, -1);
        auto within = [&](int64_t anchor) {
          int64_t inFlight = 0;
          for (int64_t k = anchor + 1; k <= (int64_t)i; ++k)
            inFlight += elems(gathers[k]);
          int64_t live = inFlight + (anchor >= 0 ? elems(gathers[anchor]) : 0);
          return (prefetchBucketSize <= 0 || inFlight <= prefetchBucketSize) &&
                 (maxLiveParameters <= 0 || live <= maxLiveParameters);
        };
        while (a < (int64_t)i - 1 && !within(a))
          ++a;
        if (a < 0)
          moveStart(gathers[i], &body.front());
        else if (waitOf[gathers[a]]->isBeforeInBlock(gathers[i]))
          moveStart(gathers[i], waitOf[gathers[a]]->getNextNode());
      }
    }
  }
};

} // namespace
