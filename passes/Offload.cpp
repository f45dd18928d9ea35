//===- Offload.cpp - The optimizer and its state in host memory -----------===//
//
// dsc-offload (Passes.td): in the step function, find the arguments the
// optimizer updates and the ops that may run on the host (analysis), then
// split the grouped AdamW into chunks, make its compute copies step state,
// copy what the host ops read from the device to the host, copy what the
// device reads from them back, and mark the ops, arguments and results
// (rewrite). DeepSpeed's offload_optimizer: cpu.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCOFFLOAD
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

constexpr llvm::StringLiteral kOnHost = "dsc.on_host";
constexpr llvm::StringLiteral kMemory = "dsc.memory";

/// The operands of an optimizer op that it updates element by element: the
/// parameters and their state (not the gradients or the scalars).
SmallVector<unsigned> updatedOperands(Operation *op) {
  if (isa<dsc::AdamWOp>(op))
    return {0, 2, 3};
  if (isa<dsc::SgdOp>(op))
    return {0, 2};
  auto multi = cast<dsc::AdamWMultiOp>(op);
  unsigned begin = multi.getTensors().getBeginOperandIndex();
  unsigned n = multi.getTensors().size() / 4;
  SmallVector<unsigned> list;
  for (unsigned k = 0; k < 4 * n; ++k)
    if (k / n != 1) // grads are the second quarter
      list.push_back(begin + k);
  return list;
}

/// What runs where: the arguments that live on the host and the ops that
/// run there.
struct Placement {
  llvm::SetVector<BlockArgument> hostArgs;
  llvm::SetVector<Operation *> hostOps; // in block order (the NVMe reads
                                        // and writes of step 3c at the end)
  /// The host arguments kept in files (optimizer=nvme), a subset.
  llvm::SetVector<BlockArgument> nvmeArgs;

  bool isHost(Value v) const {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return hostArgs.contains(arg);
    Operation *def = v.getDefiningOp();
    if (auto copy = dyn_cast<dsc::OffloadCopyOp>(def))
      return copy.getTo() == "host";
    return hostOps.contains(def);
  }
};

/// Step 1: the optimizer ops, the arguments they update and the compute
/// copies made of those.
FailureOr<Placement> analyze(func::FuncOp fn) {
  Placement p;
  SmallVector<Operation *> optimizers;
  for (Operation &op : fn.getBody().front())
    if (isa<dsc::AdamWOp, dsc::AdamWMultiOp, dsc::SgdOp>(op))
      optimizers.push_back(&op);
  if (optimizers.empty())
    return fn.emitError("dsc-offload: @")
           << fn.getSymName() << " has no optimizer op to run on the host";
  for (Operation *op : optimizers)
    for (unsigned i : updatedOperands(op)) {
      auto arg = dyn_cast<BlockArgument>(op->getOperand(i));
      if (!arg || (!fn.getArgAttr(arg.getArgNumber(), "dsc.param") &&
                   !fn.getArgAttr(arg.getArgNumber(), "dsc.opt_state")))
        return op->emitError("dsc-offload: the optimizer updates a value "
                             "that is not an argument of the step (ZeRO "
                             "stages 1-2 in fp32 slice their shard out of "
                             "the replicated parameters each step); "
                             "offload supports --stage 0 and --stage 3, "
                             "and stages 1-2 in --precision bf16 or fp16, "
                             "whose fp32 masters are themselves the "
                             "shards. In fp32, for ZeRO-2's traffic and "
                             "memory with the optimizer offloaded, use "
                             "--stage 3 --keep-gathered (each parameter "
                             "gathered once a step, as ZeRO-2 gathers the "
                             "updated ones)");
      p.hostArgs.insert(arg);
    }
  for (Operation &op : fn.getBody().front()) {
    auto castOp = dyn_cast<dsc::CastOp>(op);
    auto input = castOp ? dyn_cast<BlockArgument>(castOp.getInput())
                        : BlockArgument();
    bool computeCopy = castOp && castOp->hasAttr("dsc.compute_copy") &&
                       input && p.hostArgs.contains(input);
    if (computeCopy || llvm::is_contained(optimizers, &op))
      p.hostOps.insert(&op);
  }
  return p;
}

/// The grouped AdamWs among the host ops.
SmallVector<dsc::AdamWMultiOp> groupedAdamWs(const Placement &p) {
  SmallVector<dsc::AdamWMultiOp> multis;
  for (Operation *op : p.hostOps)
    if (auto m = dyn_cast<dsc::AdamWMultiOp>(op))
      multis.push_back(m);
  return multis;
}

/// `multi`'s hyperparameters and attributes on other tensors and results,
/// at `b`'s insertion point, in place of `multi` among the host ops.
dsc::AdamWMultiOp rebuild(OpBuilder &b, dsc::AdamWMultiOp multi,
                          ValueRange tensors, TypeRange types, Placement &p) {
  auto op = dsc::AdamWMultiOp::create(
      b, multi.getLoc(), types, multi.getLr(), multi.getBeta1(),
      multi.getBeta2(), multi.getEps(), multi.getWeightDecay(), multi.getStep(),
      multi.getGradScale(), multi.getGradPrescale(), tensors);
  op->setAttrs(multi->getAttrs());
  p.hostOps.insert(op);
  return op;
}

/// Where in the step each value is final, for ordering the optimizer by
/// backward (overlap): a result of the call of @forward_backward is final
/// where the callee makes the value it returns (the op's position in the
/// callee); a value made after the call, at the latest of its operands';
/// anything else (the arguments, what precedes the call) at 0.
class Readiness {
public:
  explicit Readiness(func::CallOp call) : call_(call) {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    Block &body = callee.getBody().front();
    int64_t i = 0;
    for (Operation &op : body)
      position_[&op] = ++i;
    returned_ = body.getTerminator()->getOperands();
  }

  int64_t of(Value v) {
    if (auto it = memo_.find(v); it != memo_.end())
      return it->second;
    int64_t r = 0;
    Operation *def = v.getDefiningOp();
    if (def == call_.getOperation()) {
      Operation *made =
          returned_[cast<OpResult>(v).getResultNumber()].getDefiningOp();
      r = made ? position_.lookup(made) : 0;
    } else if (def && call_->getBlock() == def->getBlock() &&
               call_->isBeforeInBlock(def)) {
      for (Value operand : def->getOperands())
        r = std::max(r, of(operand));
    }
    memo_[v] = r;
    return r;
  }

private:
  func::CallOp call_;
  ValueRange returned_;
  llvm::DenseMap<Operation *, int64_t> position_;
  llvm::DenseMap<Value, int64_t> memo_;
};

/// The one call of @forward_backward in the step (accumulation calls it once
/// per micro-batch), or null.
func::CallOp singleStepCall(func::FuncOp fn) {
  func::CallOp found;
  unsigned calls = 0;
  fn.walk([&](func::CallOp call) {
    ++calls;
    if (call.getCallee() == "forward_backward")
      found = call;
  });
  return calls == 1 ? found : func::CallOp();
}

/// Step 0 (overlap): the step must let each chunk's update start as soon as
/// its gradients are made: one micro-batch, no clipping and no fp16 loss
/// scaling (both read every gradient first), the parameters on the device.
FailureOr<func::CallOp> checkOverlap(func::FuncOp fn, StringRef params) {
  auto module = fn->getParentOfType<ModuleOp>();
  auto fail = [&](const Twine &why) {
    return fn.emitError("dsc-offload: overlap (the host optimizer running "
                        "during backward) needs ")
           << why;
  };
  if (params != "none")
    return fail("the parameters on the device (params=none)");
  func::CallOp call = singleStepCall(fn);
  if (!call)
    return fail("one call of @forward_backward in the step (--accum-steps 1): "
                "with accumulation a gradient is final only after the last "
                "micro-batch");
  if (auto hypers = module->getAttrOfType<DictionaryAttr>("dsc.hypers"))
    if (auto clip = hypers.getAs<FloatAttr>("clip");
        clip && clip.getValueAsDouble() != 0.0)
      return fail("--clip 0: clipping scales every gradient by the global "
                  "norm, known only when backward ends");
  if (auto precision = module->getAttrOfType<StringAttr>("dsc.precision");
      precision && precision.getValue() == "fp16")
    return fail("bf16 or fp32: fp16's loss scaler decides only when backward "
                "ends whether the step is skipped");
  return call;
}

/// Whether `v` is a splat float constant of `x`.
bool isSplat(Value v, double x) { return dsc::splatFloat(v) == x; }

/// Erases `roots` and what they read, from the last op back, wherever
/// nothing reads it any more and it has no effect.
void eraseDead(ArrayRef<Operation *> roots) {
  llvm::SetVector<Operation *> slice(roots.begin(), roots.end());
  for (size_t i = 0; i < slice.size(); ++i)
    for (Value v : slice[i]->getOperands())
      if (Operation *def = v.getDefiningOp())
        slice.insert(def);
  SmallVector<Operation *> ops = slice.takeVector();
  llvm::sort(ops,
             [](Operation *a, Operation *b) { return b->isBeforeInBlock(a); });
  for (Operation *op : ops)
    if (isOpTriviallyDead(op))
      op->erase();
}

/// Step 0b (overlap): clipping is off for good. Its coefficient,
/// where(clip > 0, min(1, clip / (norm + 1e-6)), 1), becomes its 1 (the
/// value it has with clip = 0: the same bits), so that no update waits for
/// the global norm; the `clip` hyperparameter leaves the step's arguments
/// and `dsc.hypers` (the program then has no --clip to set).
LogicalResult fixClipOff(func::FuncOp fn) {
  std::optional<unsigned> index;
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (auto h = fn.getArgAttrOfType<StringAttr>(i, "dsc.hyper");
        h && h.getValue() == "clip")
      index = i;
  if (!index)
    return success();
  BlockArgument clip = fn.getArgument(*index);
  SmallVector<Operation *> dead;
  for (Operation *user : llvm::to_vector(clip.getUsers())) {
    auto on = dyn_cast<dsc::GreaterOp>(user);
    if (!on || on.getOperand(0) != clip || !isSplat(on.getOperand(1), 0.0))
      continue;
    for (Operation *w : llvm::to_vector(on->getUsers())) {
      auto where = dyn_cast<dsc::WhereOp>(w);
      if (!where || where.getOperand(0) != on.getResult() ||
          !isSplat(where.getOperand(2), 1.0))
        continue;
      where.getResult().replaceAllUsesWith(where.getOperand(2));
      dead.push_back(where);
    }
  }
  eraseDead(dead);
  if (!clip.use_empty())
    return fn.emitError("dsc-offload: overlap needs the clip "
                        "hyperparameter read only by the clipping "
                        "coefficient");
  if (failed(fn.eraseArgument(*index)))
    return fn.emitError("dsc-offload: cannot drop the clip hyperparameter");
  auto module = fn->getParentOfType<ModuleOp>();
  if (auto hypers = module->getAttrOfType<DictionaryAttr>("dsc.hypers")) {
    NamedAttrList kept(hypers);
    kept.erase("clip");
    module->setAttr("dsc.hypers", kept.getDictionary(module.getContext()));
  }
  return success();
}

/// Step 1a (overlap): the order in which a grouped AdamW's parameters get
/// their final gradients in backward (stable: ties keep the group's order).
SmallVector<size_t> backwardOrder(dsc::AdamWMultiOp multi, Readiness *ready) {
  ValueRange t = multi.getTensors();
  size_t n = t.size() / 4;
  SmallVector<size_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = i;
  if (ready)
    llvm::stable_sort(order, [&](size_t a, size_t b) {
      return ready->of(t[n + a]) < ready->of(t[n + b]);
    });
  return order;
}

/// Step 5b (overlap): each copy to the host moves up to right after what it
/// reads is made, with the ops after backward that it reads (the loss
/// normalization of a gradient, the learning rate): the gradients come down
/// while backward goes on, and the host AdamW of a chunk starts when its
/// last gradient is down. Nothing of forward or backward moves.
void hoistCopiesToHost(Block &block, const llvm::DenseSet<Operation *> &after) {
  llvm::DenseSet<Operation *> done;
  std::function<void(Operation *)> hoist = [&](Operation *op) {
    if (!done.insert(op).second)
      return;
    Operation *last = nullptr;
    for (Value v : op->getOperands()) {
      Operation *def = v.getDefiningOp();
      if (!def)
        continue;
      if (after.contains(def) && def->getNumRegions() == 0 &&
          isMemoryEffectFree(def))
        hoist(def);
      if (!last || last->isBeforeInBlock(def))
        last = def;
    }
    if (!last)
      op->moveBefore(&block, block.begin());
    else if (last->isBeforeInBlock(op))
      op->moveAfter(last);
  };
  SmallVector<dsc::OffloadCopyOp> copies;
  for (Operation &op : block)
    if (auto copy = dyn_cast<dsc::OffloadCopyOp>(op);
        copy && copy.getTo() == "host")
      copies.push_back(copy);
  for (dsc::OffloadCopyOp copy : copies)
    hoist(copy);
}

/// Step 1a: a grouped AdamW over more than `chunk` elements becomes several,
/// each over whole parameters in order and about `chunk` elements, where it
/// stood. Each parameter's results are the same bits (same kernel). With
/// `ready` (overlap) the order is the one in which backward makes their
/// gradients, so that each chunk's update can start as soon as possible.
void splitOptimizer(Placement &p, int64_t chunk, Readiness *ready) {
  for (dsc::AdamWMultiOp multi : groupedAdamWs(p)) {
    ValueRange t = multi.getTensors();
    size_t n = t.size() / 4;
    SmallVector<size_t> order = backwardOrder(multi, ready);
    // Group boundaries, as positions in `order`: [starts[g], starts[g + 1]).
    SmallVector<size_t> starts = {0};
    int64_t filled = 0;
    for (size_t j = 0; j < n; ++j) {
      int64_t numel =
          cast<RankedTensorType>(t[order[j]].getType()).getNumElements();
      if (filled > 0 && filled + numel > chunk) {
        starts.push_back(j);
        filled = 0;
      }
      filled += numel;
    }
    starts.push_back(n);
    if (starts.size() <= 2)
      continue;
    OpBuilder b(multi);
    for (size_t g = 0; g + 1 < starts.size(); ++g) {
      size_t lo = starts[g], hi = starts[g + 1], m = hi - lo;
      SmallVector<Value> tensors;
      SmallVector<Type> types;
      for (size_t k = 0; k < 4; ++k)
        for (size_t j = lo; j < hi; ++j)
          tensors.push_back(t[k * n + order[j]]);
      for (size_t k = 0; k < 3; ++k)
        for (size_t j = lo; j < hi; ++j)
          types.push_back(t[order[j]].getType());
      auto part = rebuild(b, multi, tensors, types, p);
      for (size_t k = 0; k < 3; ++k)
        for (size_t j = lo; j < hi; ++j)
          multi.getResult(k * n + order[j])
              .replaceAllUsesWith(part.getResult(k * m + (j - lo)));
    }
    p.hostOps.remove(multi);
    multi.erase();
  }
}

/// Step 1a': with `ratio` < 1 (DeepSpeed's offload_optimizer.ratio, the
/// Twin-Flow of ZeRO-Offload++), optimizer ops taken from the last one back
/// whose elements add up to at most (1 - ratio) of all stay on the device
/// with their masters, state and compute-copy casts: the GPU updates them
/// while the host updates the rest. An op that would overshoot is skipped
/// for a smaller one before it, so the device never holds more than its
/// share.
void keepShareOnDevice(Placement &p, double ratio) {
  SmallVector<Operation *> optimizers;
  int64_t total = 0;
  for (Operation *op : p.hostOps)
    if (isa<dsc::AdamWOp, dsc::AdamWMultiOp, dsc::SgdOp>(op)) {
      optimizers.push_back(op);
      total += dsc::optimizerElements(op);
    }
  auto share = static_cast<int64_t>((1.0 - ratio) * static_cast<double>(total));
  int64_t kept = 0;
  for (Operation *op : llvm::reverse(optimizers)) {
    int64_t n = dsc::optimizerElements(op);
    if (kept + n > share)
      continue;
    kept += n;
    p.hostOps.remove(op);
    for (unsigned i : updatedOperands(op))
      p.hostArgs.remove(cast<BlockArgument>(op->getOperand(i)));
  }
  // The compute-copy casts of masters that stay go with them.
  for (Operation *op : SmallVector<Operation *>(p.hostOps.begin(),
                                                p.hostOps.end()))
    if (auto c = dyn_cast<dsc::CastOp>(op))
      if (auto arg = dyn_cast<BlockArgument>(c.getInput());
          !arg || !p.hostArgs.contains(arg))
        p.hostOps.remove(op);
}

/// Step 1b: the compute copies of the parameters a grouped AdamW updates
/// become step state in device memory: an argument (dsc.compute_copy) the
/// step reads where it read the cast, and a result (dsc.compute_copy_update)
/// that the AdamW writes rounded on the host, next to the new masters, and
/// a copy brings up at the step's end. No cast at the step's start, and no
/// wait: the next step reads the state after this one's end.
LogicalResult keepComputeCopies(func::FuncOp fn, Placement &p) {
  for (dsc::AdamWMultiOp multi : groupedAdamWs(p)) {
    size_t n = multi.getTensors().size() / 4;
    SmallVector<dsc::CastOp> casts = dsc::computeCopyCasts(
        multi.getTensors().take_front(n), multi,
        [&](dsc::CastOp c) { return p.hostOps.contains(c); });
    if (casts.empty())
      continue;
    // The AdamW with N more results: the rounded new parameters.
    SmallVector<Type> types(multi.getResultTypes());
    for (dsc::CastOp c : casts)
      types.push_back(c.getType());
    OpBuilder b(multi);
    auto grown = rebuild(b, multi, multi.getTensors(), types, p);
    for (size_t k = 0; k < 3 * n; ++k)
      multi.getResult(k).replaceAllUsesWith(grown.getResult(k));
    p.hostOps.remove(multi);
    multi.erase();
    // Each cast becomes an argument; the new copy goes up into it.
    b.setInsertionPointAfter(grown);
    SmallVector<Value> ups;
    for (auto [i, c] : llvm::enumerate(casts)) {
      p.hostOps.remove(c);
      ups.push_back(dsc::OffloadCopyOp::create(
          b, grown.getLoc(), types[3 * n + i], grown.getResult(3 * n + i),
          b.getStringAttr("device")));
    }
    if (failed(dsc::castsToState(fn, casts, ups)))
      return failure();
  }
  return success();
}

/// The copies made so far after each defining op (null: the arguments, at
/// the block's start): a new copy goes after them, so copies run in the
/// order they were asked for (a chunk's gradients before the next one's,
/// where all are results of one call).
using LastCopies = llvm::DenseMap<Operation *, Operation *>;

dsc::OffloadCopyOp makeCopy(OpBuilder &b, Value v, StringRef to,
                            LastCopies &last) {
  Operation *def = v.getDefiningOp();
  if (Operation *prev = last.lookup(def))
    b.setInsertionPointAfter(prev);
  else if (def)
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
  Location loc =
      def ? def->getLoc() : b.getInsertionBlock()->getParentOp()->getLoc();
  auto copy = dsc::OffloadCopyOp::create(b, loc, v.getType(), v,
                                         b.getStringAttr(to));
  last[def] = copy;
  return copy;
}

/// Step 2: every operand a host op reads from the device comes through a
/// copy to the host made right after it is computed (one per value); a
/// splat constant is cloned onto the host instead.
void copyOperandsToHost(Placement &p, LastCopies &last) {
  OpBuilder b(p.hostOps.front()->getContext());
  llvm::DenseMap<Value, Value> onHost;
  for (Operation *op : SmallVector<Operation *>(p.hostOps.begin(),
                                                p.hostOps.end()))
    for (OpOperand &use : op->getOpOperands()) {
      Value v = use.get();
      if (p.isHost(v))
        continue;
      if (auto constant = v.getDefiningOp<dsc::ConstantOp>()) {
        b.setInsertionPoint(op);
        Operation *clone = b.clone(*constant);
        clone->setAttr(kOnHost, b.getUnitAttr());
        p.hostOps.insert(clone);
        use.set(clone->getResult(0));
        continue;
      }
      Value &copy = onHost[v];
      if (!copy)
        copy = makeCopy(b, v, "host", last).getResult();
      use.set(copy);
    }
}

/// Whether `use` passes its value to a callee's host argument (params=cpu:
/// the callee copies it up where it gathers it).
bool passedToHostArg(OpOperand &use) {
  auto call = dyn_cast<func::CallOp>(use.getOwner());
  if (!call)
    return false;
  auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
      call, call.getCalleeAttr());
  auto memory =
      callee
          ? callee.getArgAttrOfType<StringAttr>(use.getOperandNumber(), kMemory)
          : StringAttr();
  return memory && memory.getValue() == "host";
}

/// Step 3: a host value the device reads is copied to the device right
/// after it is made and waited for right before its first device use.
void copyResultsToDevice(Placement &p, LastCopies &last) {
  SmallVector<Value> values(p.hostArgs.begin(), p.hostArgs.end());
  for (Operation *op : p.hostOps)
    llvm::append_range(values, op->getResults());
  OpBuilder b(p.hostOps.front()->getContext());
  for (Value v : values) {
    SmallVector<OpOperand *> deviceUses;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (!p.hostOps.contains(user) && !isa<func::ReturnOp>(user) &&
          !isa<dsc::OffloadCopyOp>(user) && !passedToHostArg(use))
        deviceUses.push_back(&use);
    }
    if (deviceUses.empty())
      continue;
    Operation *first = deviceUses.front()->getOwner();
    for (OpOperand *use : deviceUses)
      if (use->getOwner()->isBeforeInBlock(first))
        first = use->getOwner();
    auto copy = makeCopy(b, v, "device", last);
    b.setInsertionPoint(first);
    auto wait = dsc::OffloadWaitOp::create(b, copy.getLoc(), v.getType(),
                                           copy.getResult());
    for (OpOperand *use : deviceUses)
      use->set(wait.getResult());
  }
}

/// The host ops that compute (not constants, not the NVMe reads and writes
/// around them) in block order, and each one's position there.
struct TaskOrder {
  SmallVector<Operation *> tasks;
  llvm::DenseMap<Operation *, unsigned> index;

  explicit TaskOrder(const Placement &p) {
    for (Operation *op : p.hostOps)
      if (!isa<dsc::ConstantOp, dsc::NvmeReadOp, dsc::NvmeWriteOp>(op))
        tasks.push_back(op);
    llvm::sort(tasks, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    for (auto [i, op] : llvm::enumerate(tasks))
      index[op] = static_cast<unsigned>(i);
  }
};

/// Step 3b: a copy to the host whose value only host tasks read moves down
/// to `ahead` host tasks before the first of them (chunks run in order, so
/// chunk k's gradients come down while chunk k - ahead computes). Copies
/// read by the first chunks, and scalars every chunk reads, stay where they
/// are. Never moves a copy up.
void streamCopiesToHost(Placement &p, unsigned ahead) {
  if (!ahead)
    return;
  TaskOrder taskOrder(p);
  ArrayRef<Operation *> tasks = taskOrder.tasks;
  const llvm::DenseMap<Operation *, unsigned> &order = taskOrder.index;
  SmallVector<dsc::OffloadCopyOp> copies;
  tasks.front()->getBlock()->walk([&](dsc::OffloadCopyOp copy) {
    if (copy.getTo() == "host")
      copies.push_back(copy);
  });
  for (dsc::OffloadCopyOp copy : copies) {
    std::optional<unsigned> first;
    for (Operation *user : copy->getUsers()) {
      auto it = order.find(user);
      if (it == order.end()) {
        first.reset();
        break;
      }
      first = std::min(first.value_or(it->second), it->second);
    }
    if (!first || *first < ahead)
      continue;
    Operation *target = tasks[*first - ahead];
    if (copy->isBeforeInBlock(target))
      copy->moveBefore(target);
  }
}

/// The result of `fn` that is the update of argument `arg` (same role and
/// name), or none.
std::optional<unsigned> updateOf(func::FuncOp fn, BlockArgument arg) {
  for (auto [argRole, resultRole] :
       {std::pair<const char *, const char *>{"dsc.param", "dsc.param_update"},
        {"dsc.opt_state", "dsc.opt_state_update"}}) {
    auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), argRole);
    if (!name)
      continue;
    for (unsigned k = 0; k < fn.getNumResults(); ++k)
      if (fn.getResultAttrOfType<StringAttr>(k, resultRole) == name)
        return k;
  }
  return std::nullopt;
}

/// Step 3c (optimizer=nvme): the fp32 masters and optimizer state that only
/// the host optimizer reads, and whose update it makes, live in files (the
/// NVMe tier): each is read into host memory (dsc.nvme_read) right before
/// the first host op that reads it, which reads that instead, and its
/// update is written back into the file (dsc.nvme_write) right after it is
/// computed, which the step returns in its place. The host frame then holds
/// a chunk's state while it is updated, not the whole optimizer. A master
/// the device reads (fp32 compute, or a shard copied up where it is
/// gathered) stays in host memory.
void stageOnNvme(func::FuncOp fn, Placement &p) {
  Operation *ret = fn.getBody().front().getTerminator();
  OpBuilder b(fn.getContext());
  // The writes after each op, in the order of its arguments.
  llvm::DenseMap<Operation *, Operation *> lastWrite;
  auto optimizerOnHost = [&](Operation *op) {
    return op && p.hostOps.contains(op) &&
           isa<dsc::AdamWOp, dsc::AdamWMultiOp, dsc::SgdOp>(op);
  };
  for (BlockArgument arg : p.hostArgs) {
    // Only the host optimizer reads it (a compute-copy cast at the step's
    // start would hold it in the host frame all step), and the update the
    // step returns is that optimizer's.
    std::optional<unsigned> k = updateOf(fn, arg);
    if (!k || arg.use_empty() || !llvm::all_of(arg.getUsers(), optimizerOnHost))
      continue;
    Value update = ret->getOperand(*k);
    Operation *made = update.getDefiningOp();
    if (!optimizerOnHost(made) || !llvm::is_contained(arg.getUsers(), made))
      continue;
    Operation *first = *arg.getUsers().begin();
    for (Operation *u : arg.getUsers())
      if (u->isBeforeInBlock(first))
        first = u;
    b.setInsertionPoint(first);
    auto read = dsc::NvmeReadOp::create(b, first->getLoc(), arg.getType(), arg);
    arg.replaceAllUsesExcept(read.getResult(), read);
    Operation *&after = lastWrite[made];
    b.setInsertionPointAfter(after ? after : made);
    auto write =
        dsc::NvmeWriteOp::create(b, made->getLoc(), update.getType(), update);
    after = write;
    ret->setOperand(*k, write.getResult());
    p.hostOps.insert(read);
    p.hostOps.insert(write);
    p.nvmeArgs.insert(arg);
  }
}

/// Step 3d (optimizer=nvme): each read moves up to right before the host
/// task before its first reader (the previous chunk's AdamW): the read runs
/// on the I/O threads while that chunk updates (the reader waits for it),
/// so the host frame holds two chunks' state in, not one.
void prefetchNvmeReads(const Placement &p) {
  TaskOrder taskOrder(p);
  ArrayRef<Operation *> tasks = taskOrder.tasks;
  const llvm::DenseMap<Operation *, unsigned> &order = taskOrder.index;
  for (Operation *op : p.hostOps) {
    auto read = dyn_cast<dsc::NvmeReadOp>(op);
    if (!read)
      continue;
    std::optional<unsigned> first;
    for (Operation *user : read->getUsers())
      if (auto it = order.find(user); it != order.end())
        first = std::min(first.value_or(it->second), it->second);
    if (first && *first > 0 && tasks[*first - 1]->isBeforeInBlock(read))
      read->moveBefore(tasks[*first - 1]);
  }
}

/// Step 4: the marks codegen and the program read, and the check that each
/// offloaded argument's update is computed on the host. An argument kept on
/// NVMe (step 3c) is "nvme", as is the update written into its file.
LogicalResult mark(func::FuncOp fn, const Placement &p) {
  Builder b(fn.getContext());
  for (Operation *op : p.hostOps)
    op->setAttr(kOnHost, b.getUnitAttr());
  for (BlockArgument arg : p.hostArgs)
    fn.setArgAttr(arg.getArgNumber(), kMemory,
                  b.getStringAttr(p.nvmeArgs.contains(arg) ? "nvme" : "host"));
  Operation *ret = fn.getBody().front().getTerminator();
  for (auto [k, v] : llvm::enumerate(ret->getOperands())) {
    bool host = p.isHost(v);
    if (host)
      fn.setResultAttr(k, kMemory,
                       b.getStringAttr(v.getDefiningOp<dsc::NvmeWriteOp>()
                                           ? "nvme"
                                           : "host"));
    for (const char *role : {"dsc.param_update", "dsc.opt_state_update"}) {
      auto name = fn.getResultAttrOfType<StringAttr>(k, role);
      if (!name || host)
        continue;
      for (BlockArgument arg : p.hostArgs)
        for (const char *argRole : {"dsc.param", "dsc.opt_state"})
          if (fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), argRole) ==
              name)
            return (v.getDefiningOp() ? v.getDefiningOp() : ret)
                       ->emitError("dsc-offload: the update of '")
                   << name.getValue()
                   << "' is computed on the device, not by the optimizer "
                      "on the host (fp16 loss scaling's skipped steps are "
                      "not supported with offload yet)";
    }
  }
  return success();
}

/// The callee argument that each call reading `v` passes it to; none when
/// `v` has a device use other than such a call (host ops aside), or a
/// callee reads the argument other than through dsc.collective_input (a
/// gather: the value then goes up only where it is gathered).
SmallVector<BlockArgument> gatheredOnly(Value v, ModuleOp module,
                                        const Placement &p) {
  SmallVector<BlockArgument> args;
  for (OpOperand &use : v.getUses()) {
    if (p.hostOps.contains(use.getOwner()))
      continue;
    auto call = dyn_cast<func::CallOp>(use.getOwner());
    auto callee = call ? module.lookupSymbol<func::FuncOp>(call.getCallee())
                       : func::FuncOp();
    if (!callee || callee.isExternal())
      return {};
    BlockArgument arg = callee.getArgument(use.getOperandNumber());
    if (arg.use_empty() || !llvm::all_of(arg.getUsers(), [](Operation *u) {
          return isa<dsc::CollectiveInputOp>(u);
        }))
      return {};
    args.push_back(arg);
  }
  return args;
}

/// Step 1c (params=cpu), in the step: the parameter shards that the
/// callee only gathers stay on the host, the 16-bit compute copies or under
/// fp32 the masters themselves. A compute copy's argument is host memory
/// and its update the host AdamW's result, no longer copied up (a master's
/// update is the AdamW's own result already). Returns the callee arguments
/// they become.
llvm::SetVector<BlockArgument> keepShardsOnHost(func::FuncOp fn, Placement &p) {
  auto module = fn->getParentOfType<ModuleOp>();
  Operation *ret = fn.getBody().front().getTerminator();
  llvm::SetVector<BlockArgument> calleeArgs;
  for (BlockArgument arg : fn.getArguments()) {
    auto name =
        fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "dsc.compute_copy");
    bool master = !name && p.hostArgs.contains(arg) &&
                  fn.getArgAttr(arg.getArgNumber(), "dsc.param");
    if (!name && !master)
      continue;
    SmallVector<BlockArgument> gathered = gatheredOnly(arg, module, p);
    if (gathered.empty())
      continue;
    for (OpOperand &operand : ret->getOpOperands()) {
      if (!name)
        break;
      auto role = fn.getResultAttrOfType<StringAttr>(operand.getOperandNumber(),
                                                     "dsc.compute_copy_update");
      if (role != name)
        continue;
      if (auto up = operand.get().getDefiningOp<dsc::OffloadCopyOp>()) {
        operand.set(up.getInput());
        if (up->use_empty())
          up.erase();
      }
    }
    p.hostArgs.insert(arg);
    calleeArgs.insert(gathered.begin(), gathered.end());
  }
  return calleeArgs;
}

/// Step 1d (params=cpu), in each callee: the host shard arguments are host
/// memory, and each gather of one reads a copy made at the previous such
/// gather's wait (at the start for the first) and waited for right before
/// it, so that a shard comes up while the layer before computes.
void copyUpAtGathers(const llvm::SetVector<BlockArgument> &calleeArgs) {
  llvm::MapVector<func::FuncOp, SmallVector<dsc::CollectiveInputOp>> gathers;
  for (BlockArgument arg : calleeArgs) {
    auto callee = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    callee.setArgAttr(arg.getArgNumber(), kMemory,
                      StringAttr::get(callee.getContext(), "host"));
    for (Operation *user : arg.getUsers())
      gathers[callee].push_back(cast<dsc::CollectiveInputOp>(user));
  }
  for (auto &[callee, list] : gathers) {
    llvm::sort(list, [](dsc::CollectiveInputOp a, dsc::CollectiveInputOp b) {
      return a->isBeforeInBlock(b);
    });
    OpBuilder b(callee.getContext());
    Operation *previousWait = nullptr;
    for (dsc::CollectiveInputOp gather : list) {
      if (previousWait)
        b.setInsertionPoint(previousWait);
      else
        b.setInsertionPointToStart(&callee.getBody().front());
      Value shard = gather.getInput();
      auto up = dsc::OffloadCopyOp::create(b, gather.getLoc(), shard.getType(),
                                           shard, b.getStringAttr("device"));
      b.setInsertionPoint(gather);
      auto wait = dsc::OffloadWaitOp::create(b, gather.getLoc(),
                                             shard.getType(), up.getResult());
      gather->setOperand(0, wait.getResult());
      previousWait = wait;
    }
  }
}

/// Steps 1c and 1d.
LogicalResult offloadParams(func::FuncOp fn, Placement &p) {
  llvm::SetVector<BlockArgument> calleeArgs = keepShardsOnHost(fn, p);
  if (calleeArgs.empty())
    return fn.emitError("dsc-offload: params=cpu found no parameter shard "
                        "that is only gathered; parameter offload needs "
                        "--stage 3 and --offload-optimizer cpu");
  copyUpAtGathers(calleeArgs);
  return success();
}

struct OffloadPass : dsc::impl::DscOffloadBase<OffloadPass> {
  using DscOffloadBase::DscOffloadBase;

  void runOnOperation() override {
    if (optimizer == "none")
      return;
    if (optimizer != "cpu" && optimizer != "nvme") {
      getOperation().emitError("dsc-offload: optimizer must be none, cpu or "
                               "nvme, got '")
          << optimizer << "'";
      return signalPassFailure();
    }
    auto fn = getOperation().lookupSymbol<func::FuncOp>(function);
    if (!fn) {
      getOperation().emitError("dsc-offload: no function @") << function;
      return signalPassFailure();
    }
    FailureOr<Placement> placement = analyze(fn);
    if (failed(placement))
      return signalPassFailure();
    if (chunkElements < 1) {
      fn.emitError("dsc-offload: chunk-elements must be at least 1");
      return signalPassFailure();
    }
    if (params != "none" && params != "cpu") {
      getOperation().emitError("dsc-offload: params must be none or cpu, "
                               "got '")
          << params << "'";
      return signalPassFailure();
    }
    if (!(ratio >= 0.0 && ratio <= 1.0)) {
      getOperation().emitError("dsc-offload: ratio must be between 0 and 1 "
                               "(the share of the optimizer's elements "
                               "updated on the host), got ")
          << ratio;
      return signalPassFailure();
    }
    if (ratio < 1.0 && params == "cpu") {
      getOperation().emitError("dsc-offload: a ratio below 1 keeps part of "
                               "the optimizer on the device, which "
                               "params=cpu (parameters on the host) does "
                               "not support; use ratio=1");
      return signalPassFailure();
    }
    if (ratio == 0.0)
      return; // nothing offloaded: the IR stays as it is.
    // overlap: the step's one call of @forward_backward, inlined below.
    func::CallOp stepCall;
    std::optional<Readiness> ready;
    if (overlap) {
      FailureOr<func::CallOp> call = checkOverlap(fn, params);
      if (failed(call))
        return signalPassFailure();
      stepCall = *call;
      ready.emplace(stepCall);
    }
    splitOptimizer(*placement, chunkElements, ready ? &*ready : nullptr);
    if (ratio < 1.0)
      keepShareOnDevice(*placement, ratio);
    if (placement->hostOps.empty())
      return; // a share too small for any op: everything stays.
    if (failed(keepComputeCopies(fn, *placement)))
      return signalPassFailure();
    if (params == "cpu" && failed(offloadParams(fn, *placement)))
      return signalPassFailure();
    if (overlap && failed(fixClipOff(fn)))
      return signalPassFailure();
    LastCopies last;
    copyOperandsToHost(*placement, last);
    copyResultsToDevice(*placement, last);
    if (overlap) {
      llvm::DenseSet<Operation *> afterCall;
      for (Operation *op = stepCall->getNextNode(); op; op = op->getNextNode())
        afterCall.insert(op);
      // Step 5a: the step's later ops can then move into backward.
      dsc::inlineStepCall(stepCall);
      hoistCopiesToHost(fn.getBody().front(), afterCall);
    } else {
      // After the copies to the device: those go after the last copy made
      // of the same producer, which must not be one this moves down.
      streamCopiesToHost(*placement, copyAhead);
    }
    if (optimizer == "nvme") {
      stageOnNvme(fn, *placement);
      prefetchNvmeReads(*placement);
    }
    if (failed(mark(fn, *placement)))
      return signalPassFailure();
  }
};

} // namespace
