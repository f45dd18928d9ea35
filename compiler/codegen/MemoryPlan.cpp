//===- MemoryPlan.cpp - Liveness and first-fit offsets for one function ---===//

#include "compiler/codegen/MemoryPlan.h"

#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <map>
#include <vector>

using namespace mlir;

namespace dsc::codegen {

namespace {

uint64_t alignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

/// Live ranges of the frame, kept sorted by offset.
class FreeList {
public:
  /// The lowest offset where `bytes` fit between live ranges.
  uint64_t allocate(Value v, uint64_t bytes) {
    uint64_t at = 0;
    auto it = live_.begin();
    for (; it != live_.end(); ++it) {
      if (it->offset >= at + bytes)
        break;
      at = std::max(at, it->offset + it->bytes);
    }
    live_.insert(it, {at, bytes, v});
    return at;
  }
  void release(Value v) {
    llvm::erase_if(live_, [&](const Range &r) { return r.value == v; });
  }

private:
  struct Range {
    uint64_t offset, bytes;
    Value value;
  };
  std::vector<Range> live_;
};

} // namespace

bool isViewOp(Operation *op) {
  return isa<dsc::ReshapeOp, dsc::WaitOp, dsc::OffloadWaitOp>(op);
}

bool isHostValue(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    auto memory =
        fn ? fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "dsc.memory")
           : StringAttr();
    // An NVMe argument is a file mapped into host memory.
    return memory &&
           (memory.getValue() == "host" || memory.getValue() == "nvme");
  }
  Operation *def = v.getDefiningOp();
  if (auto copy = dyn_cast<dsc::OffloadCopyOp>(def))
    return copy.getTo() == "host";
  if (isa<dsc::ReshapeOp>(def))
    return isHostValue(def->getOperand(0));
  return def->hasAttr("dsc.on_host");
}

namespace {

/// dsc.collective_input and dsc.wait carry effects only so that MLIR passes
/// keep collectives apart and in place; the program runs ops in block
/// order anyway. Here they are what they compute, the identity: dead when
/// nobody reads their result.
bool isOrderingOnly(Operation *op) {
  return isa<dsc::CollectiveInputOp, dsc::WaitOp, dsc::OffloadWaitOp>(op);
}

/// The stage-3 gather a value is (part of) a copy of: an all_gather of a
/// function argument (a parameter shard), or a wait, slice, reshape,
/// transpose or cast of such a value (the unflattened parameters and the
/// layouts and precisions the ops read them in). Null otherwise.
Operation *gatheredRoot(Value v, llvm::DenseMap<Value, Operation *> &memo) {
  auto it = memo.find(v);
  if (it != memo.end())
    return it->second;
  Operation *root = nullptr;
  Operation *def = v.getDefiningOp();
  if (auto g = dyn_cast_or_null<shard::AllGatherOp>(def)) {
    Value in = g.getInput();
    if (auto ci = in.getDefiningOp<dsc::CollectiveInputOp>())
      in = ci.getInput();
    // A host shard (--offload-param) is copied up before its gather.
    if (auto wait = in.getDefiningOp<dsc::OffloadWaitOp>())
      if (auto copy = wait.getInput().getDefiningOp<dsc::OffloadCopyOp>())
        in = copy.getInput();
    if (isa<BlockArgument>(in))
      root = def;
  } else if (isa_and_nonnull<dsc::WaitOp, dsc::SliceOp, dsc::ReshapeOp,
                             dsc::TransposeOp, dsc::CastOp>(def)) {
    root = gatheredRoot(def->getOperand(0), memo);
  }
  memo[v] = root;
  return root;
}

/// The operand `op` may write its result `r` over, as the IR says: for an
/// op's first result, dsc-in-place-temporaries' dsc.overwrites; for a
/// call's result, the callee's argument that result is returned in place
/// of (dsc.in_place: dsc-accumulate-in-call's running sums); for a
/// linear_cross_entropy's weight gradient, its init. Else none.
std::optional<unsigned> overwriteCandidate(Operation *op, Value r);

/// The values that make result `k` of `func` over one another: the
/// returned value, then the operand its op writes over
/// (overwriteCandidate), and so on, each made by an op of the body.
/// `writtenOver` gets the operand the last of them is written over, if any.
SmallVector<Value> overwriteChain(func::FuncOp func, unsigned k,
                                  Value &writtenOver) {
  Block &body = func.getBody().front();
  SmallVector<Value> chain;
  writtenOver = Value();
  for (Value v = body.getTerminator()->getOperand(k);;) {
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != &body)
      return chain;
    chain.push_back(v);
    std::optional<unsigned> c = overwriteCandidate(def, v);
    if (!c)
      return chain;
    v = writtenOver = def->getOperand(*c);
  }
}

/// Whether `callee`'s argument `a` is read only where its result `k` is
/// made over it: by one op, one of the chain that makes the returned value
/// (so nothing reads the argument after the result's storage, which the
/// caller may make the argument's, is written).
bool readOnlyForResult(func::FuncOp callee, unsigned k, unsigned a) {
  BlockArgument arg = callee.getBody().front().getArgument(a);
  if (!arg.hasOneUse())
    return false;
  Operation *reader = *arg.user_begin();
  Value writtenOver;
  return llvm::any_of(overwriteChain(callee, k, writtenOver),
                      [&](Value v) { return v.getDefiningOp() == reader; });
}

std::optional<unsigned> overwriteCandidate(Operation *op, Value r) {
  IntegerAttr attr;
  if (auto lce = dyn_cast<dsc::LinearCrossEntropyOp>(op)) {
    if (!lce.getInit() || r != lce.getGradWeight())
      return std::nullopt;
    return lce.getInitMutable()[0].getOperandNumber();
  }
  if (auto call = dyn_cast<func::CallOp>(op)) {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    unsigned k = cast<OpResult>(r).getResultNumber();
    if (callee && !callee.isExternal())
      attr = callee.getResultAttrOfType<IntegerAttr>(k, "dsc.in_place");
    if (attr && (attr.getInt() < 0 ||
                 attr.getInt() >= int64_t(callee.getNumArguments()) ||
                 !readOnlyForResult(callee, k, attr.getInt())))
      return std::nullopt;
  } else if (r == op->getResult(0)) {
    attr = op->getAttrOfType<IntegerAttr>("dsc.overwrites");
  }
  if (!attr || attr.getInt() < 0 || attr.getInt() >= op->getNumOperands())
    return std::nullopt;
  return static_cast<unsigned>(attr.getInt());
}

/// The operand whose storage `r` (a result of `op`) may take
/// (overwriteCandidate), when the plan agrees: it is an arena value (or a
/// view of one) of the result's bytes, read by nothing after the op, nor
/// by the op through another operand. A returned result takes it too: the
/// operand is then computed straight into the result's storage (the
/// gradients a step scales as they leave it), unless that storage is an
/// argument's (`returnedInPlace`: an in-place update, which may still read
/// the argument). Else none.
std::optional<unsigned>
overwrittenOperand(Operation *op, Value r, size_t at, const FramePlan &plan,
                   const llvm::DenseMap<Value, size_t> &lastUse,
                   const llvm::DenseSet<Value> &returnedInPlace,
                   const PlanOptions &options) {
  std::optional<unsigned> k = overwriteCandidate(op, r);
  if (!k)
    return std::nullopt;
  auto rootOf = [&](Value v) {
    const Storage &s = plan.storage.lookup(v);
    return s.kind == Storage::Kind::Alias ? s.source : v;
  };
  Value in = op->getOperand(*k);
  Value root = rootOf(in);
  const Storage &rootStorage = plan.storage.lookup(root);
  if (rootStorage.kind != Storage::Kind::Arena || lastUse.lookup(root) > at ||
      lastUse.lookup(in) > at || options.bytes(root) != options.bytes(r) ||
      returnedInPlace.contains(r))
    return std::nullopt;
  for (OpOperand &u : op->getOpOperands())
    if (u.getOperandNumber() != *k && rootOf(u.get()) == root)
      return std::nullopt;
  // Another result already written over it.
  for (Value other : op->getResults())
    if (other != r && plan.storage.count(other) &&
        plan.storage.lookup(other).kind == Storage::Kind::Alias &&
        plan.storage.lookup(other).source == root)
      return std::nullopt;
  return k;
}

/// The values computed into a result's storage that the function returns in
/// place of an argument (dsc.in_place), before the returned value itself:
/// the chain of overwritten operands (overwriteCandidate) back from it, each
/// read by the next alone, when it starts at an op that writes over the
/// argument itself, its only reader (a linear_cross_entropy adding its
/// terms onto a running sum, a scatter_add of the embedding's rows into
/// that). Every op of the chain reads its element before it writes it, so
/// the result may be the argument's storage or not. Value -> result slot.
llvm::DenseMap<Value, unsigned> inPlaceChains(func::FuncOp func) {
  llvm::DenseMap<Value, unsigned> into;
  Block &body = func.getBody().front();
  for (unsigned k = 0; k < func.getNumResults(); ++k) {
    auto attr = func.getResultAttrOfType<IntegerAttr>(k, "dsc.in_place");
    if (!attr || attr.getInt() < 0 ||
        attr.getInt() >= int64_t(body.getNumArguments()))
      continue;
    BlockArgument arg = body.getArgument(attr.getInt());
    Value writtenOver;
    SmallVector<Value> chain = overwriteChain(func, k, writtenOver);
    auto made = ArrayRef(chain).drop_front(); // before the returned value
    if (writtenOver != arg || !arg.hasOneUse() ||
        !llvm::all_of(made, [](Value v) { return v.hasOneUse(); }))
      continue;
    for (Value v : made)
      into[v] = k;
  }
  return into;
}

} // namespace

llvm::DenseSet<Operation *> findDeadOps(func::FuncOp func) {
  // A reverse walk sees users before their producers.
  llvm::DenseSet<Operation *> dead;
  Block &body = func.getBody().front();
  for (Operation &opRef : llvm::reverse(body)) {
    Operation *op = &opRef;
    if (op->hasTrait<OpTrait::IsTerminator>() ||
        (!isMemoryEffectFree(op) && !isOrderingOnly(op)))
      continue;
    bool used = llvm::any_of(
        op->getUsers(), [&](Operation *user) { return !dead.contains(user); });
    if (!used)
      dead.insert(op);
  }
  return dead;
}

namespace {

/// The end of the highest arena value live at op `i`, placed at `offsets`.
uint64_t liveTopAt(ArrayRef<Value> arena, const FramePlan &plan, size_t i,
                   ArrayRef<uint64_t> offsets) {
  uint64_t top = 0;
  for (auto [k, v] : llvm::enumerate(arena)) {
    const Storage &s = plan.storage.find(v)->second;
    if (s.firstOp <= i && i <= s.lastOp)
      top = std::max(top, offsets[k] + s.bytes);
  }
  return top;
}

/// Online first fit in op order: each value at the lowest offset free when
/// it is made.
std::vector<uint64_t> placeInOrder(ArrayRef<Value> arena,
                                   const FramePlan &plan) {
  std::vector<uint64_t> offsets(arena.size());
  FreeList frame;
  size_t k = 0;
  // Values are in op order: release what died before each one's op (a
  // value dying at an op is still read while the op's results are made).
  std::map<size_t, SmallVector<Value>> pending; // last op -> values
  for (Value v : arena) {
    const Storage &s = plan.storage.find(v)->second;
    while (!pending.empty() && pending.begin()->first < s.firstOp) {
      for (Value d : pending.begin()->second)
        frame.release(d);
      pending.erase(pending.begin());
    }
    offsets[k++] = frame.allocate(v, s.bytes);
    pending[s.lastOp].push_back(v);
  }
  return offsets;
}

/// Offline, largest first (the live ranges are all known): each value at
/// the lowest offset that no value live at the same time and placed before
/// it overlaps. Close to the peak of live bytes where op order fragments
/// the frame (a small temporary placed under a long-lived activation).
std::vector<uint64_t> placeBySize(ArrayRef<Value> arena,
                                  const FramePlan &plan) {
  std::vector<size_t> order(arena.size());
  for (size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  auto storageOf = [&](size_t k) -> const Storage & {
    return plan.storage.find(arena[k])->second;
  };
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    const Storage &x = storageOf(a), &y = storageOf(b);
    if (x.bytes != y.bytes)
      return x.bytes > y.bytes;
    return x.firstOp < y.firstOp;
  });
  std::vector<uint64_t> offsets(arena.size());
  std::vector<size_t> placed; // by offset
  for (size_t k : order) {
    const Storage &s = storageOf(k);
    // The first gap, in offset order, between the placed values live at
    // the same time.
    uint64_t at = 0;
    for (size_t q : placed) {
      const Storage &t = storageOf(q);
      if (t.firstOp > s.lastOp || s.firstOp > t.lastOp)
        continue;
      if (offsets[q] >= at + s.bytes)
        break;
      at = std::max(at, offsets[q] + t.bytes);
    }
    offsets[k] = at;
    auto pos = llvm::lower_bound(
        placed, k, [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
    placed.insert(pos, k);
  }
  return offsets;
}

/// The extent of a placement: its own values, and the callee frames above
/// what is live across each call.
uint64_t extentOf(ArrayRef<Value> arena, const FramePlan &plan,
                  ArrayRef<uint64_t> offsets, const PlanOptions &options,
                  ArrayRef<Operation *> ops, ArrayRef<size_t> calls) {
  uint64_t extent = 0;
  for (auto [k, v] : llvm::enumerate(arena))
    extent = std::max(extent, offsets[k] + plan.storage.find(v)->second.bytes);
  for (size_t i : calls)
    extent =
        std::max(extent, liveTopAt(arena, plan, i, offsets) +
                             options.calleeBytes(cast<func::CallOp>(ops[i])));
  return extent;
}

/// The arena offsets: without reuse, one after another; else the smaller of
/// the two placements above.
std::vector<uint64_t> placeArena(ArrayRef<Value> arena, const FramePlan &plan,
                                 const PlanOptions &options,
                                 ArrayRef<Operation *> ops,
                                 ArrayRef<size_t> calls) {
  std::vector<uint64_t> offsets(arena.size());
  if (!options.reuse) {
    uint64_t bump = 0;
    for (auto [k, v] : llvm::enumerate(arena)) {
      offsets[k] = bump;
      bump += plan.storage.find(v)->second.bytes;
    }
    return offsets;
  }
  std::vector<uint64_t> inOrder = placeInOrder(arena, plan);
  std::vector<uint64_t> bySize = placeBySize(arena, plan);
  return extentOf(arena, plan, bySize, options, ops, calls) <
                 extentOf(arena, plan, inOrder, options, ops, calls)
             ? bySize
             : inOrder;
}

/// Host frame offsets (separateHost): first fit in op order over the
/// values' live ranges. A range is reused once its value is dead: the
/// runtime orders a write into host memory after the copies and host tasks
/// that last read or wrote those bytes (cuda/offload.cu), so the frame holds
/// what is live at once (a few chunks' gradients on their way to the host
/// AdamW) rather than every value of the step. A range is free only once
/// the next host task after its value's last use is issued: a copy up
/// issued right after its chunk's AdamW would otherwise hold up the next
/// chunk's AdamW writing over it (the copy runs only after the first
/// AdamW, so the second would wait for both).
uint64_t placeHostFrame(ArrayRef<Value> values, ArrayRef<Operation *> ops,
                        FramePlan &plan) {
  // The NVMe reads and writes around a chunk are host tasks too, but not
  // the next chunk's AdamW that the comment above is about.
  auto isTask = [](Operation *op) {
    return op->hasAttr("dsc.on_host") &&
           !isa<dsc::NvmeReadOp, dsc::NvmeWriteOp>(op);
  };
  std::vector<size_t> nextTask(ops.size() + 1, ops.size());
  for (size_t i = ops.size(); i-- > 0;)
    nextTask[i] =
        i + 1 < ops.size() && isTask(ops[i + 1]) ? i + 1 : nextTask[i + 1];
  struct Placed {
    uint64_t offset, end;
    size_t freeAfter;
  };
  std::vector<Placed> live; // by offset
  uint64_t top = 0;
  for (Value v : values) {
    Storage &s = plan.storage[v];
    llvm::erase_if(live,
                   [&](const Placed &p) { return p.freeAfter < s.firstOp; });
    uint64_t at = 0;
    for (const Placed &p : live) {
      if (p.offset >= at + s.bytes)
        break;
      at = std::max(at, p.end);
    }
    s.offset = at;
    auto pos = llvm::upper_bound(
        live, at, [](uint64_t off, const Placed &p) { return off < p.offset; });
    live.insert(pos, Placed{at, at + s.bytes, nextTask[s.lastOp]});
    top = std::max(top, at + s.bytes);
  }
  return top;
}

/// The plan of `func`; results written over an operand (dsc.overwrites)
/// only when `overwrite`.
FramePlan planFrameWith(func::FuncOp func, const PlanOptions &options,
                        bool overwrite) {
  FramePlan plan;
  Block &body = func.getBody().front();
  std::vector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);

  // 1. Dead ops.
  plan.dead = findDeadOps(func);

  // 2. Last uses, by op position.
  llvm::DenseMap<Operation *, size_t> positionOf;
  for (auto [i, op] : llvm::enumerate(ops))
    positionOf[op] = i;
  llvm::DenseMap<Value, size_t> lastUse;
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (plan.dead.contains(op))
      continue;
    for (Value v : op->getOperands())
      lastUse[v] = std::max(lastUse.lookup(v), i);
  }

  // 2b. An asynchronous collective reads its input until its dsc.wait.
  if (options.asyncCollectives) {
    for (auto [i, op] : llvm::enumerate(ops)) {
      auto wait = dyn_cast<dsc::WaitOp>(op);
      if (!wait || plan.dead.contains(op))
        continue;
      Operation *start = wait.getInput().getDefiningOp();
      if (!start || !positionOf.count(start))
        continue;
      for (Value v : start->getOperands())
        lastUse[v] = std::max(lastUse.lookup(v), i);
    }
  }

  // 2c. A copy to the host reads its input on the copy stream while the
  //     compute stream goes on: keep it to the end.
  if (options.separateHost)
    for (Operation *op : ops)
      if (auto copy = dyn_cast<dsc::OffloadCopyOp>(op);
          copy && copy.getTo() == "host" && !plan.dead.contains(op))
        lastUse[copy.getInput()] = ops.size() - 1;

  // 3. Storage kinds. A value the function returns is computed into the
  //    caller's storage (at its first return position; later positions and
  //    values that are arguments, constants or aliases are copied there).
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    Storage &s = plan.storage[arg];
    s.kind = Storage::Kind::Argument;
    s.index = static_cast<unsigned>(i);
  }
  llvm::DenseMap<Value, unsigned> returnSlot;
  for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands()))
    returnSlot.try_emplace(v, static_cast<unsigned>(k));
  // Returned into an argument's storage (dsc-in-place-updates): nothing
  // made before such a value may be computed into its slot, the argument
  // may still be read then.
  llvm::DenseSet<Value> returnedInPlace;
  for (auto [v, k] : returnSlot)
    if (func.getResultAttr(k, "dsc.in_place"))
      returnedInPlace.insert(v);
  // ... but for the chain that writes over the argument itself.
  llvm::DenseMap<Value, unsigned> intoResult = inPlaceChains(func);

  llvm::DenseMap<size_t, std::vector<Value>> freeAt;
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (plan.dead.contains(op))
      continue;
    for (Value r : op->getResults()) {
      Storage s;
      if (auto into = intoResult.find(r); into != intoResult.end()) {
        s.kind = Storage::Kind::Result;
        s.index = into->second;
      } else if (isa<dsc::ConstantOp>(op) && options.isStaticConstant(op)) {
        s.kind = Storage::Kind::Constant;
      } else if ((isViewOp(op) && options.aliasReshapes) ||
                 isa<dsc::CollectiveInputOp>(op)) {
        Value in = op->getOperand(0);
        const Storage &src = plan.storage[in];
        s.kind = Storage::Kind::Alias;
        s.source = src.kind == Storage::Kind::Alias ? src.source : in;
        // The source lives as long as its alias is used.
        size_t &sourceEnd = lastUse[s.source];
        sourceEnd = std::max(sourceEnd, lastUse.lookup(r));
        // A returned reshape of a frame value: compute that value straight
        // into the result's storage (same bytes), so nothing is copied.
        Storage &root = plan.storage[s.source];
        if (auto slot = returnSlot.find(r); slot != returnSlot.end() &&
                                            root.kind == Storage::Kind::Arena &&
                                            !returnedInPlace.contains(r)) {
          root.kind = Storage::Kind::Result;
          root.index = slot->second;
        }
      } else if (std::optional<unsigned> k =
                     overwrite || isa<func::CallOp>(op)
                         ? overwrittenOperand(op, r, i, plan, lastUse,
                                              returnedInPlace, options)
                         : std::nullopt) {
        // Written over its operand, which dies here: that storage, kept
        // for as long as the result is read.
        Value in = op->getOperand(*k);
        const Storage &src = plan.storage[in];
        s.kind = Storage::Kind::Alias;
        s.source = src.kind == Storage::Kind::Alias ? src.source : in;
        s.operand = *k;
        size_t &sourceEnd = lastUse[s.source];
        sourceEnd = std::max(sourceEnd, lastUse.lookup(r));
        // Returned: the operand is computed into the result's storage (at
        // its first return position; others are copied).
        if (auto slot = returnSlot.find(r); slot != returnSlot.end()) {
          Storage &root = plan.storage[s.source];
          root.kind = Storage::Kind::Result;
          root.index = slot->second;
        }
      } else if (auto slot = returnSlot.find(r); slot != returnSlot.end()) {
        s.kind = Storage::Kind::Result;
        s.index = slot->second;
      } else {
        s.kind = options.separateHost && isHostValue(r)
                     ? Storage::Kind::HostArena
                     : Storage::Kind::Arena;
        s.bytes =
            alignUp(std::max<uint64_t>(options.bytes(r), 1), options.alignment);
      }
      plan.storage[r] = s;
    }
  }
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (plan.dead.contains(op))
      continue;
    for (Value r : op->getResults()) {
      Storage &s = plan.storage[r];
      if (s.kind != Storage::Kind::Arena && s.kind != Storage::Kind::HostArena)
        continue;
      s.firstOp = i;
      s.lastOp = std::max(lastUse.lookup(r), i);
      freeAt[s.lastOp].push_back(r);
    }
  }

  // 3b. Stage-3 gathered copies: each lives from its all_gather up to the
  //     last use of any part of it (the bucket, its unflattened pieces).
  llvm::DenseMap<Value, Operation *> rootOf;
  llvm::DenseMap<Operation *, std::pair<size_t, size_t>> gatheredSpan;
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (plan.dead.contains(op))
      continue;
    for (Value r : op->getResults()) {
      Operation *root = gatheredRoot(r, rootOf);
      if (!root)
        continue;
      auto [span, inserted] = gatheredSpan.try_emplace(root, i, i);
      span->second.second =
          std::max({span->second.second, i, lastUse.lookup(r)});
    }
  }
  for (auto &[root, span] : gatheredSpan)
    plan.gatheredBucketBytes =
        std::max(plan.gatheredBucketBytes, options.bytes(root->getResult(0)));
  for (size_t i = 0; i < ops.size() && !gatheredSpan.empty(); ++i) {
    uint64_t live = 0;
    for (auto &[root, span] : gatheredSpan)
      if (span.first <= i && i <= span.second)
        live += options.bytes(root->getResult(0));
    plan.gatheredPeakBytes = std::max(plan.gatheredPeakBytes, live);
  }

  // 4. The peak of live bytes (what any placement needs at least) and the
  //    host frame, in op order.
  std::vector<Value> arena; // arena values, in op order
  std::vector<Value> host;  // host frame values, in op order
  llvm::SetVector<Value> live;
  uint64_t liveBytes = 0;
  std::vector<size_t> calls; // positions of calls
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (plan.dead.contains(op))
      continue;
    for (Value r : op->getResults()) {
      Storage &s = plan.storage[r];
      if (s.kind == Storage::Kind::HostArena) {
        host.push_back(r);
        continue;
      }
      if (s.kind != Storage::Kind::Arena)
        continue;
      arena.push_back(r);
      live.insert(r);
      liveBytes += s.bytes;
    }
    if (liveBytes > plan.peakLiveBytes) {
      plan.peakLiveBytes = liveBytes;
      plan.peakOp = op;
      plan.peakLive.assign(live.begin(), live.end());
    }
    for (Value v : freeAt.lookup(i))
      if (live.remove(v))
        liveBytes -= plan.storage[v].bytes;
    if (isa<func::CallOp>(op))
      calls.push_back(i);
  }

  plan.hostBytes = placeHostFrame(host, ops, plan);

  // 5. Offsets: two placements of the same live ranges, the smaller kept.
  std::vector<uint64_t> offsets = placeArena(arena, plan, options, ops, calls);
  for (auto [v, offset] : llvm::zip(arena, offsets)) {
    Storage &s = plan.storage[v];
    s.offset = offset;
    plan.ownBytes = std::max(plan.ownBytes, s.offset + s.bytes);
  }
  // 6. A callee's frame goes above what is live across its call.
  for (size_t i : calls) {
    auto call = cast<func::CallOp>(ops[i]);
    uint64_t base = liveTopAt(arena, plan, i, offsets);
    plan.calleeOffset[call] = base;
    plan.totalBytes =
        std::max(plan.totalBytes, base + options.calleeBytes(call));
  }
  plan.totalBytes = std::max(plan.totalBytes, plan.ownBytes);
  return plan;
}

} // namespace

FramePlan planFrame(func::FuncOp func, const PlanOptions &options) {
  FramePlan plan = planFrameWith(func, options, /*overwrite=*/true);
  bool overwrites = false;
  func.walk(
      [&](Operation *op) { overwrites |= op->hasAttr("dsc.overwrites"); });
  if (!overwrites)
    return plan;
  // Writing over a dying operand keeps that storage until the result dies;
  // first fit in op order may then place the rest worse than with a buffer
  // of its own (small models, where the logits are not the peak). The
  // smaller of the two plans.
  FramePlan own = planFrameWith(func, options, /*overwrite=*/false);
  return own.totalBytes < plan.totalBytes ? own : plan;
}

} // namespace dsc::codegen
