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
            isa<BlockArgument>(c->getOperand(0)))
          gathers.push_back(c);
      llvm::sort(gathers, [&](Operation *a, Operation *b) {
        return waitOf[a]->isBeforeInBlock(waitOf[b]);
      });
      for (size_t i = 0; i < gathers.size(); ++i) {
        Operation *anchor = i < (size_t)prefetch
                                ? &body.front()
                                : waitOf[gathers[i - prefetch]];
        if (i < (size_t)prefetch)
          gathers[i]->moveBefore(anchor);
        else if (anchor->isBeforeInBlock(gathers[i]))
          gathers[i]->moveAfter(anchor);
      }
    }
  }
};

} // namespace
