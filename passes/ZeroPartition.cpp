//===- ZeroPartition.cpp - ZeRO stages 0-3 and hybrid sharding ------------===//
//
// Analyse, then rewrite, as upstream shard's Partition.cpp reads:
//   analysis   checkOptions, analyseStep (@train_step's parameters,
//              gradients, optimizer updates and hyperparameters, the shape
//              dsc-optimizer gives it), planBuckets (flat buckets per
//              weight-decay group): the BucketPlan;
//   rewrite    3. reduceLoss, reduceGradients (norm, clipping),
//              updateParameters (the update on shards, parameters
//              re-assembled): the tail of @train_step, in a TailRewrite;
//              4. stage 3 (and stages 1-2 with shard-masters):
//              gatherShardsForBackward (@forward_backward gathers each
//              bucket before its first forward use and, at stage 3 unless
//              keep-gathered, again before its first backward use),
//              passShardsToCalls;
//              5. rebuildReturn; 6. recordLayout (grid, buckets, stage).
//
//===----------------------------------------------------------------------===//
#include "dialects/dsc/IR/DscOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#include <functional>

#define DEBUG_TYPE "dsc-zero-partition"

namespace dsc {
#define GEN_PASS_DEF_DSCZEROPARTITION
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

constexpr const char *kGrid = "dsc_ranks";

struct ParamInfo {
  unsigned arg; // @train_step argument
  std::string name;
  RankedTensorType type;
  Operation *update = nullptr; // dsc.adamw / dsc.sgd
  SmallVector<unsigned> stateArgs;
  Value grad;        // averaged local gradient
  Value gradScale;   // grad = call result * gradScale, if any
  Value weightDecay; // operand of the update
  int bucket = -1;
  int64_t offset = 0;
};

struct Bucket {
  std::string name;
  SmallVector<unsigned> params; // indices into params
  int64_t numel = 0, padded = 0;
  Type element;
  Value weightDecay;
  /// Params are shards: stage 3 and not persistent, or stages 1-2 with
  /// shard-masters.
  bool sharded = true;
};

/// The analysis dsc-zero-partition makes before it rewrites anything: what
/// @train_step holds (dsc-optimizer's output: parameters, their gradients
/// and updates, the results that say what they are) and how the parameters
/// pack into buckets.
struct BucketPlan {
  func::FuncOp step, fb;
  SmallVector<ParamInfo> params;
  SmallVector<Bucket> buckets;
  int lossResult = -1, normResult = -1, lrResult = -1;
  llvm::StringMap<unsigned> gradResult, paramResult, stateResult;
  Value lossValue;
  Value clipArg; // the "clip" hyperparameter, if any
  /// Optimizer-state slots of every bucket ("exp_avg", "exp_avg_sq" for
  /// AdamW, "momentum_buffer" for SGD).
  SmallVector<StringRef> slots;
};

/// A result appended to @train_step (a bucket's gradient, state or shard).
struct NewResult {
  Value value;
  std::string role, name;
  int bucket;
};

/// What the rewrite steps of @train_step's tail build, one after the other,
/// until step 5 makes the return of it.
struct TailRewrite {
  SmallVector<Value> newResults; // the step's results, replaced in place
  SmallVector<NewResult> extraResults;
  SmallVector<Value> reduced; // per bucket: its reduced gradient
  double invWorld = 1.0;      // 1 / world-size, or 1 with a global count
  Value coef;                 // the clip coefficient
  unsigned shardArgBase = 0;  // the first of the bucket arguments
};

struct ZeroPartitionPass
    : public dsc::impl::DscZeroPartitionBase<ZeroPartitionPass> {
  using Base::Base;

  OpBuilder *b = nullptr;
  LocationAttr loc;
  int64_t groupSize = 1;

  RankedTensorType vec(int64_t n, Type e) {
    return RankedTensorType::get({n}, e);
  }
  Value scalarLike(Type element, double v) {
    auto t = RankedTensorType::get({}, element);
    return dsc::ConstantOp::create(
        *b, loc, SplatElementsAttr::get(t, FloatAttr::get(element, v)));
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    return dsc::ReshapeOp::create(*b, loc, v, b->getDenseI64ArrayAttr(shape));
  }
  /// Concatenates values flattened, padded with zeros to `padded`.
  Value flatten(ArrayRef<Value> values, int64_t padded) {
    SmallVector<Value> flat;
    int64_t n = 0;
    for (Value v : values) {
      auto t = cast<RankedTensorType>(v.getType());
      flat.push_back(reshape(v, {t.getNumElements()}));
      n += t.getNumElements();
    }
    Value r = flat.size() == 1 ? flat[0]
                               : dsc::ConcatOp::create(*b, loc, flat,
                                                       b->getI64IntegerAttr(0))
                                     .getResult();
    if (padded > n)
      r = dsc::PadOp::create(*b, loc, r,
                             b->getDenseI64ArrayAttr({0, padded - n}),
                             b->getF64FloatAttr(0.0));
    return r;
  }
  Value unflatten(Value flat, int64_t offset, RankedTensorType type) {
    Value s =
        dsc::SliceOp::create(*b, loc, flat, b->getDenseI64ArrayAttr({offset}),
                             b->getDenseI64ArrayAttr({type.getNumElements()}),
                             b->getDenseI64ArrayAttr({1}));
    return reshape(s, type.getShape());
  }
  void gridAttrs(SmallVectorImpl<NamedAttribute> &attrs,
                 ArrayRef<int16_t> axes) {
    attrs.push_back(b->getNamedAttr(
        "grid", FlatSymbolRefAttr::get(b->getContext(), kGrid)));
    attrs.push_back(
        b->getNamedAttr("grid_axes", b->getDenseI16ArrayAttr(axes)));
  }
  /// The label a collective carries into messages (hang, mismatch).
  std::string label;
  Location at() {
    return label.empty() ? Location(loc)
                         : Location(NameLoc::get(
                               StringAttr::get(loc.getContext(), label), loc));
  }
  /// Every communicating collective reads its operand through a
  /// dsc.collective_input: the shard ops are Pure, and this keeps CSE from
  /// merging two collectives of one value (a stage-3 bucket's forward and
  /// backward gathers) and pins each between effectful ops.
  Value collectiveInput(Value v) {
    return dsc::CollectiveInputOp::create(*b, at(), v);
  }
  Value allReduce(Value v, ArrayRef<int16_t> axes) {
    SmallVector<NamedAttribute> attrs;
    gridAttrs(attrs, axes);
    attrs.push_back(b->getNamedAttr(
        "reduction", shard::ReductionKindAttr::get(b->getContext(),
                                                   shard::ReductionKind::Sum)));
    return shard::AllReduceOp::create(*b, at(), TypeRange{v.getType()},
                                      ValueRange{collectiveInput(v)}, attrs)
        .getResult();
  }
  Value allGather(Value v, ArrayRef<int16_t> axes, int64_t n) {
    SmallVector<NamedAttribute> attrs;
    gridAttrs(attrs, axes);
    attrs.push_back(b->getNamedAttr("gather_axis", b->getIndexAttr(0)));
    auto t = cast<RankedTensorType>(v.getType());
    return shard::AllGatherOp::create(*b, at(),
                                      TypeRange{vec(n, t.getElementType())},
                                      ValueRange{collectiveInput(v)}, attrs)
        .getResult();
  }
  Value reduceScatter(Value v, ArrayRef<int16_t> axes, int64_t n) {
    SmallVector<NamedAttribute> attrs;
    gridAttrs(attrs, axes);
    attrs.push_back(b->getNamedAttr(
        "reduction", shard::ReductionKindAttr::get(b->getContext(),
                                                   shard::ReductionKind::Sum)));
    attrs.push_back(b->getNamedAttr("scatter_axis", b->getIndexAttr(0)));
    auto t = cast<RankedTensorType>(v.getType());
    return shard::ReduceScatterOp::create(*b, at(),
                                          TypeRange{vec(n, t.getElementType())},
                                          ValueRange{collectiveInput(v)}, attrs)
        .getResult();
  }
  /// This rank's slice of `v` among its group: `v` itself in a group of
  /// one (stages 1-3 on one rank), where there is nothing to slice.
  Value allSlice(Value v, ArrayRef<int16_t> axes, int64_t n) {
    if (groupSize == 1)
      return v;
    SmallVector<NamedAttribute> attrs;
    gridAttrs(attrs, axes);
    attrs.push_back(b->getNamedAttr("slice_axis", b->getIndexAttr(0)));
    auto t = cast<RankedTensorType>(v.getType());
    return shard::AllSliceOp::create(*b, at(),
                                     TypeRange{vec(n, t.getElementType())},
                                     ValueRange{v}, attrs)
        .getResult();
  }
  /// Stages 1-2 with shard-masters: the buckets are sharded as at stage 3.
  bool shardsMasters() const {
    return shardMasters && (stage == 1 || stage == 2);
  }
  /// Gathered once a call (a micro-batch) and kept through its backward:
  /// stage 3 with keep-gathered, and stages 1-2 (ZeRO-1/2 hold the whole
  /// 16-bit model; with several calls, gathered once in the step).
  bool keepsGathered() const { return keepGathered || stage < 3; }
  void runOnOperation() override;
  LogicalResult fail(const Twine &msg);
  LogicalResult checkOptions();
  // Analysis.
  LogicalResult analyseStep(BucketPlan &plan);
  void planBuckets(BucketPlan &plan);
  // Rewrite steps, in order.
  void reduceLoss(BucketPlan &plan, TailRewrite &tail);
  void reduceGradients(BucketPlan &plan, TailRewrite &tail);
  LogicalResult updateParameters(BucketPlan &plan, TailRewrite &tail);
  Value gatherUpdated(Value shard, const Bucket &bk, int64_t shardN);
  FailureOr<SmallVector<unsigned>> gatherShardsForBackward(BucketPlan &plan);
  LogicalResult gatherOncePerStep(BucketPlan &plan, TailRewrite &tail,
                                  ArrayRef<func::CallOp> calls);
  LogicalResult passShardsToCalls(BucketPlan &plan, TailRewrite &tail,
                                  ArrayRef<unsigned> eraseArgs);
  LogicalResult rebuildReturn(BucketPlan &plan, TailRewrite &tail);
  void recordLayout(const BucketPlan &plan);
  // Helpers of the steps.
  void
  recomputeViewsForBackward(BlockArgument param, unsigned bwdPos,
                            llvm::DenseMap<Operation *, unsigned> &position);
  LogicalResult syncBatchNorms(func::FuncOp fb);
  DenseMap<unsigned, unsigned>
  sinkGradientReductions(func::FuncOp step, func::FuncOp fb,
                         SmallVectorImpl<ParamInfo> &params,
                         ArrayRef<Bucket> buckets, bool shardGrads,
                         Value &lossValue, SmallVectorImpl<Value> &newResults);
  Value reduceFlat(Value flat, const Bucket &bk, bool shardGrads);
};

Value ZeroPartitionPass::reduceFlat(Value flat, const Bucket &bk,
                                    bool shardGrads) {
  SmallVector<int16_t> all = {0, 1}, group = {1}, replicas = {0};
  label = bk.name + " gradients";
  // Marked, so that dsc-mixed-precision can tell the gradient reductions
  // from the other collectives (statistics, the norm, the loss).
  auto mark = [&](Value r) {
    r.getDefiningOp()->setAttr("dsc.gradient_reduction", b->getUnitAttr());
    return r;
  };
  if (shardGrads) {
    Value r = mark(reduceScatter(flat, group, bk.padded / groupSize));
    if (worldSize > groupSize)
      r = mark(allReduce(r, replicas));
    return r;
  }
  return mark(allReduce(flat, all));
}

/// Whether gradient scales `a` and `b` are one value: the same, or equal
/// constants (dsc-optimizer makes one 1/K per gradient).
static bool sameScale(Value a, Value b) {
  if (a == b)
    return true;
  auto ca = a ? a.getDefiningOp<dsc::ConstantOp>() : nullptr;
  auto cb = b ? b.getDefiningOp<dsc::ConstantOp>() : nullptr;
  return ca && cb && ca.getValue() == cb.getValue();
}

// Moves each bucket's gradient collective into @forward_backward, right
// after the last of its gradients is computed, when @train_step calls it
// once, or (stages 2-3: reduce-scatter) once per micro-batch, as DeepSpeed
// and FSDP reduce: each call then returns its micro-batch's shard, and the
// step sums shards, not whole gradients (4/N bytes a parameter held across
// the calls, not 8). Returns bucket -> index of the calls' result that
// holds the reduced (summed over ranks, unscaled) bucket; buckets it
// cannot move are left out.
DenseMap<unsigned, unsigned> ZeroPartitionPass::sinkGradientReductions(
    func::FuncOp step, func::FuncOp fb, SmallVectorImpl<ParamInfo> &params,
    ArrayRef<Bucket> buckets, bool shardGrads, Value &lossValue,
    SmallVectorImpl<Value> &newResults) {
  DenseMap<unsigned, unsigned> sunk;
  SmallVector<func::CallOp> calls;
  step.walk([&](func::CallOp c) {
    if (c.getCallee() == fb.getSymName())
      calls.push_back(c);
  });
  if (worldSize == 1 || calls.empty() || (calls.size() > 1 && !shardGrads))
    return sunk;
  // Each gradient must be the calls' sum of one of their results, possibly
  // times a scale.
  DenseMap<unsigned, unsigned> resultOf; // param -> call result
  for (auto [pi, p] : llvm::enumerate(params)) {
    Value g = p.grad, scale;
    if (auto mul = g.getDefiningOp<dsc::MulOp>()) {
      g = mul.getLhs();
      scale = mul.getRhs();
    }
    std::optional<unsigned> r = dsc::summedCallResult(g, calls);
    if (!r)
      continue;
    p.gradScale = scale;
    resultOf[pi] = *r;
  }
  Block &body = fb.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  OpBuilder::InsertionGuard guard(*b);
  SmallVector<Value> extra;
  SmallVector<unsigned> extraBucket;
  for (auto [bi, bk] : llvm::enumerate(buckets)) {
    bool ok = true;
    Value scale;
    SmallVector<Value> grads;
    Operation *last = nullptr;
    for (unsigned pi : bk.params) {
      auto it = resultOf.find(pi);
      if (it == resultOf.end()) {
        ok = false;
        break;
      }
      if (pi != bk.params.front() && !sameScale(params[pi].gradScale, scale))
        ok = false;
      scale = params[pi].gradScale;
      Value g = ret.getOperand(it->second);
      grads.push_back(g);
      Operation *def = g.getDefiningOp();
      if (def && (!last || last->isBeforeInBlock(def)))
        last = def;
    }
    if (!ok)
      continue;
    if (last)
      b->setInsertionPointAfter(last);
    else
      b->setInsertionPointToStart(&body);
    loc = fb.getLoc();
    extra.push_back(reduceFlat(flatten(grads, bk.padded), bk, shardGrads));
    extraBucket.push_back(bi);
  }
  if (extra.empty())
    return sunk;
  // @forward_backward returns the reduced buckets too.
  unsigned first = ret.getNumOperands();
  SmallVector<Value> results(ret.getOperands());
  llvm::append_range(results, extra);
  b->setInsertionPoint(ret);
  func::ReturnOp::create(*b, ret.getLoc(), results);
  SmallVector<Attribute> attrs;
  for (unsigned i = 0; i < fb.getNumResults(); ++i)
    attrs.push_back(fb.getResultAttrDict(i)
                        ? (Attribute)fb.getResultAttrDict(i)
                        : (Attribute)b->getDictionaryAttr({}));
  for (unsigned bi : extraBucket)
    attrs.push_back(b->getDictionaryAttr(
        b->getNamedAttr("dsc.bucket_grad", b->getI64IntegerAttr(bi))));
  ret.erase();
  fb.setType(FunctionType::get(fb.getContext(), fb.getArgumentTypes(),
                               TypeRange(ValueRange(results))));
  fb.setAllResultAttrs(attrs);
  // The calls, with the new results; values held on the side follow.
  for (func::CallOp call : calls) {
    b->setInsertionPoint(call);
    auto nc = func::CallOp::create(*b, call.getLoc(), fb.getSymName(),
                                   fb.getFunctionType().getResults(),
                                   call.getOperands());
    for (auto [o, n] : llvm::zip(call.getResults(), nc.getResults())) {
      if (lossValue == o)
        lossValue = n;
      for (Value &v : newResults)
        if (v == o)
          v = n;
      for (ParamInfo &p : params)
        if (p.grad == o)
          p.grad = n;
    }
    call.replaceAllUsesWith(nc.getResults().take_front(call.getNumResults()));
    call.erase();
  }
  for (auto [k, bi] : llvm::enumerate(extraBucket))
    sunk[bi] = first + k;
  return sunk;
}

// Batch norm over the global batch: the per-channel sums of x and x^2 (and,
// backward, of dy and dy*xhat) are all-reduced over every rank. The
// parameter gradients stay local sums; the gradient reduction adds them.
LogicalResult ZeroPartitionPass::syncBatchNorms(func::FuncOp fb) {
  SmallVector<int16_t> all = {0, 1};
  struct Forward {
    Value xhat, inv, scaleB;
    double count;
  };
  llvm::DenseMap<Value, Forward> byInput;
  SmallVector<dsc::BatchNormTrainOp> fwd;
  SmallVector<dsc::BatchNormTrainBackwardOp> bwd;
  fb.walk([&](dsc::BatchNormTrainOp op) { fwd.push_back(op); });
  fb.walk([&](dsc::BatchNormTrainBackwardOp op) { bwd.push_back(op); });
  for (dsc::BatchNormTrainOp op : fwd) {
    b->setInsertionPoint(op);
    loc = op.getLoc();
    label = "batch-norm statistics";
    Value x = op.getInput();
    auto xt = cast<RankedTensorType>(x.getType());
    Type e = xt.getElementType();
    int64_t c = xt.getDimSize(1);
    SmallVector<int64_t> axes{0}, bshape(xt.getRank(), 1);
    bshape[1] = c;
    for (int64_t d = 2; d < xt.getRank(); ++d)
      axes.push_back(d);
    double m = double(xt.getNumElements() / c) * worldSize;
    auto sum = [&](Value v) {
      return dsc::ReduceSumOp::create(*b, loc, v, b->getDenseI64ArrayAttr(axes),
                                      b->getBoolAttr(true))
          .getResult();
    };
    // Two passes (mean, then squared deviations) as the kernel does: no
    // cancellation when the mean is large against the spread.
    Value s1 = allReduce(sum(x), all);
    Value mean = dsc::MulOp::create(*b, loc, s1, scalarLike(e, 1.0 / m));
    Value dev = dsc::SubOp::create(*b, loc, x, mean);
    Value s2 = allReduce(sum(dsc::MulOp::create(*b, loc, dev, dev)), all);
    Value var = dsc::MulOp::create(*b, loc, s2, scalarLike(e, 1.0 / m));
    double eps = op.getEpsilon().convertToDouble();
    Value inv = dsc::ReciprocalOp::create(
        *b, loc,
        dsc::SqrtOp::create(
            *b, loc, dsc::AddOp::create(*b, loc, var, scalarLike(e, eps))));
    Value xhat = dsc::MulOp::create(*b, loc, dev, inv);
    Value scaleB = reshape(op.getScale(), bshape);
    Value y =
        dsc::AddOp::create(*b, loc, dsc::MulOp::create(*b, loc, xhat, scaleB),
                           reshape(op.getBias(), bshape));
    double mom = op.getMomentum().convertToDouble();
    auto update = [&](Value running, Value stat) {
      return dsc::AddOp::create(
          *b, loc, dsc::MulOp::create(*b, loc, running, scalarLike(e, mom)),
          dsc::MulOp::create(*b, loc, reshape(stat, {c}),
                             scalarLike(e, 1.0 - mom)));
    };
    Value unbiased = dsc::MulOp::create(
        *b, loc, var, scalarLike(e, m > 1 ? m / (m - 1) : 1.0));
    op.getResult().replaceAllUsesWith(y);
    op.getNewRunningMean().replaceAllUsesWith(
        update(op.getRunningMean(), mean));
    op.getNewRunningVar().replaceAllUsesWith(
        update(op.getRunningVar(), unbiased));
    byInput[x] = {xhat, inv, scaleB, m};
    op.erase();
  }
  for (dsc::BatchNormTrainBackwardOp op : bwd) {
    auto it = byInput.find(op.getInput());
    if (it == byInput.end())
      return op.emitOpError("sync-batchnorm: no matching forward batch norm");
    Forward &f = it->second;
    b->setInsertionPoint(op);
    loc = op.getLoc();
    label = "batch-norm gradient statistics";
    auto xt = cast<RankedTensorType>(op.getInput().getType());
    Type e = xt.getElementType();
    int64_t c = xt.getDimSize(1);
    SmallVector<int64_t> axes{0};
    for (int64_t d = 2; d < xt.getRank(); ++d)
      axes.push_back(d);
    auto sum = [&](Value v) {
      return dsc::ReduceSumOp::create(*b, loc, v, b->getDenseI64ArrayAttr(axes),
                                      b->getBoolAttr(true))
          .getResult();
    };
    Value dy = op.getGrad();
    Value lb = sum(dy);
    Value ls = sum(dsc::MulOp::create(*b, loc, dy, f.xhat));
    Value gb = allReduce(lb, all), gs = allReduce(ls, all);
    // dx = scale * inv / M * (M * dy - sum(dy) - xhat * sum(dy * xhat))
    Value inner = dsc::SubOp::create(
        *b, loc,
        dsc::SubOp::create(
            *b, loc, dsc::MulOp::create(*b, loc, dy, scalarLike(e, f.count)),
            gb),
        dsc::MulOp::create(*b, loc, f.xhat, gs));
    Value coef = dsc::MulOp::create(
        *b, loc, dsc::MulOp::create(*b, loc, f.scaleB, f.inv),
        scalarLike(e, 1.0 / f.count));
    Value dx = dsc::MulOp::create(*b, loc, coef, inner);
    op.getGradInput().replaceAllUsesWith(dx);
    op.getGradScale().replaceAllUsesWith(reshape(ls, {c}));
    op.getGradBias().replaceAllUsesWith(reshape(lb, {c}));
    op.erase();
  }
  label.clear();
  return success();
}

// Views of a stage-3 parameter (transposes, reshapes) that forward computes
// and backward reads again would keep the forward copy's bytes alive through
// backward, past its dsc.release: backward computes its own from the
// parameter instead (gathered again like any backward use). A view is a
// copy, so the values are the same bits.
void ZeroPartitionPass::recomputeViewsForBackward(
    BlockArgument param, unsigned bwdPos,
    llvm::DenseMap<Operation *, unsigned> &position) {
  auto isView = [](Operation *op) {
    return isa<dsc::TransposeOp, dsc::ReshapeOp>(op);
  };
  llvm::DenseSet<Operation *> copies;
  auto isBackward = [&](Operation *user) {
    return !copies.contains(user) &&
           (position.lookup(user) > bwdPos || isa<func::ReturnOp>(user));
  };
  // The forward views of the parameter, and views of those.
  SmallVector<Operation *> views;
  SmallVector<Value> work = {param};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers())
      if (isView(user) && !isBackward(user) &&
          !llvm::is_contained(views, user)) {
        views.push_back(user);
        work.push_back(user->getResult(0));
      }
  }
  // The backward copy of a view, made from the parameter before `before`
  // (or an earlier one reused).
  llvm::DenseMap<Value, Value> copyOf;
  std::function<Value(Value, Operation *)> copyFor =
      [&](Value v, Operation *before) -> Value {
    if (v == param)
      return param;
    auto it = copyOf.find(v);
    if (it != copyOf.end() &&
        it->second.getDefiningOp()->isBeforeInBlock(before))
      return it->second;
    Operation *view = v.getDefiningOp();
    Value operand = copyFor(view->getOperand(0), before);
    OpBuilder::InsertionGuard guard(*b);
    b->setInsertionPoint(before);
    Operation *copy = b->clone(*view);
    copy->setOperand(0, operand);
    copies.insert(copy);
    position[copy] = position.lookup(before);
    copyOf[v] = copy->getResult(0);
    return copy->getResult(0);
  };
  for (Operation *view : views) {
    SmallVector<OpOperand *> bwdUses;
    for (OpOperand &u : view->getResult(0).getUses())
      if (isBackward(u.getOwner()))
        bwdUses.push_back(&u);
    for (OpOperand *u : bwdUses)
      u->set(copyFor(view->getResult(0), u->getOwner()));
  }
}

//===----------------------------------------------------------------------===//
// Analysis: the bucket plan
//===----------------------------------------------------------------------===//

/// Step 1: @train_step's parameters, their gradients and optimizer updates,
/// and the results that say what they are (dsc-optimizer's output).
LogicalResult ZeroPartitionPass::analyseStep(BucketPlan &plan) {
  ModuleOp module = getOperation();
  plan.step = module.lookupSymbol<func::FuncOp>("train_step");
  plan.fb = module.lookupSymbol<func::FuncOp>("forward_backward");
  if (!plan.step || !plan.fb)
    return fail("needs @train_step and @forward_backward; run dsc-autodiff "
                "and dsc-optimizer first");
  func::FuncOp step = plan.step;
  loc = step.getLoc();
  auto ret = cast<func::ReturnOp>(step.front().getTerminator());
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (auto n = step.getArgAttrOfType<StringAttr>(i, "dsc.param")) {
      ParamInfo info;
      info.arg = i;
      info.name = n.str();
      info.type = cast<RankedTensorType>(step.getArgument(i).getType());
      plan.params.push_back(std::move(info));
    }
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    if (step.getResultAttr(i, "dsc.output") && plan.lossResult < 0)
      plan.lossResult = i;
    else if (step.getResultAttr(i, "dsc.grad_norm"))
      plan.normResult = i;
    else if (step.getResultAttr(i, "dsc.lr"))
      plan.lrResult = i;
    else if (auto n = step.getResultAttrOfType<StringAttr>(i, "dsc.grad"))
      plan.gradResult[n] = i;
    else if (auto n =
                 step.getResultAttrOfType<StringAttr>(i, "dsc.param_update"))
      plan.paramResult[n] = i;
    else if (auto n = step.getResultAttrOfType<StringAttr>(
                 i, "dsc.opt_state_update"))
      plan.stateResult[n] = i;
  }
  if (plan.lossResult < 0 || plan.normResult < 0 || plan.lrResult < 0)
    return fail("@train_step lacks its loss, grad_norm or lr result");
  plan.lossValue = ret.getOperand(plan.lossResult);
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    if (auto h = step.getArgAttrOfType<StringAttr>(i, "dsc.hyper"))
      if (h.getValue() == "clip")
        plan.clipArg = step.getArgument(i);
  }
  for (ParamInfo &p : plan.params) {
    auto g = plan.gradResult.find(p.name);
    if (g == plan.gradResult.end())
      return fail("no gradient result for parameter '" + p.name + "'");
    p.grad = ret.getOperand(g->second);
    for (Operation *user : step.getArgument(p.arg).getUsers())
      if (isa<dsc::AdamWOp, dsc::SgdOp>(user) &&
          user->getOperand(0) == step.getArgument(p.arg))
        p.update = user;
    if (!p.update)
      return fail("no optimizer update for parameter '" + p.name + "'");
    if (auto a = dyn_cast<dsc::AdamWOp>(p.update)) {
      p.weightDecay = a.getWeightDecay();
      for (Value s : {a.getExpAvg(), a.getExpAvgSq()})
        p.stateArgs.push_back(cast<BlockArgument>(s).getArgNumber());
    } else {
      auto s = cast<dsc::SgdOp>(p.update);
      p.weightDecay = s.getWeightDecay();
      p.stateArgs.push_back(
          cast<BlockArgument>(s.getMomentumBuffer()).getArgNumber());
    }
  }
  if (plan.params.empty())
    return fail("the model has no trainable parameters");
  plan.slots = isa<dsc::AdamWOp>(plan.params.front().update)
                   ? SmallVector<StringRef>{"exp_avg", "exp_avg_sq"}
                   : SmallVector<StringRef>{"momentum_buffer"};
  return success();
}

/// Step 2: consecutive parameters of one weight-decay value and element
/// type, up to reduce-bucket-size elements, padded to a multiple of the
/// group.
void ZeroPartitionPass::planBuckets(BucketPlan &plan) {
  SmallVector<Bucket> &buckets = plan.buckets;
  for (unsigned i = 0; i < plan.params.size(); ++i) {
    ParamInfo &p = plan.params[i];
    bool persistent =
        stage == 3 && p.type.getNumElements() < persistenceThreshold;
    bool sharded = (stage == 3 && !persistent) || shardsMasters();
    Bucket *last = buckets.empty() ? nullptr : &buckets.back();
    if (!last || last->weightDecay != p.weightDecay ||
        last->element != p.type.getElementType() ||
        last->numel + p.type.getNumElements() > reduceBucketSize ||
        last->sharded != sharded) {
      buckets.push_back({});
      last = &buckets.back();
      last->name = "bucket" + std::to_string(buckets.size() - 1);
      last->element = p.type.getElementType();
      last->weightDecay = p.weightDecay;
      last->sharded = sharded;
    }
    p.bucket = buckets.size() - 1;
    p.offset = last->numel;
    last->params.push_back(i);
    last->numel += p.type.getNumElements();
  }
  for (Bucket &bk : buckets)
    bk.padded = (bk.numel + groupSize - 1) / groupSize * groupSize;
  LLVM_DEBUG({
    for (const Bucket &bk : buckets)
      llvm::dbgs() << "dsc-zero-partition: " << bk.name << ": "
                   << bk.params.size() << " parameters, " << bk.numel
                   << " elements (padded " << bk.padded << ")"
                   << (bk.sharded ? ", sharded" : "") << "\n";
  });
}

//===----------------------------------------------------------------------===//
// Rewrite steps of @train_step's tail
//===----------------------------------------------------------------------===//

/// Step 3a: the loss is the mean over ranks; a loss normalized by the count
/// of labels that count (dsc-global-mean-loss) takes the global count, and
/// the ranks' parts are summed.
void ZeroPartitionPass::reduceLoss(BucketPlan &plan, TailRewrite &tail) {
  OpBuilder &builder = *b;
  func::FuncOp step = plan.step;
  auto ret = cast<func::ReturnOp>(step.front().getTerminator());
  SmallVector<int16_t> all = {0, 1};
  dsc::ReciprocalOp normalizer;
  step.walk([&](dsc::ReciprocalOp r) {
    if (r->hasAttr("dsc.loss_normalizer"))
      normalizer = r;
  });
  if (normalizer && worldSize > 1) {
    builder.setInsertionPoint(normalizer);
    label = "label count";
    Value local = normalizer.getInput();
    Value global = reshape(allReduce(reshape(local, {1}), all), {});
    normalizer->setOperand(0, global);
    tail.invWorld = 1.0;
    builder.setInsertionPoint(ret);
  }
  if (worldSize > 1) {
    Type e = cast<RankedTensorType>(plan.lossValue.getType()).getElementType();
    label = "loss";
    Value l = reshape(allReduce(reshape(plan.lossValue, {1}), all), {});
    if (tail.invWorld != 1.0)
      l = dsc::MulOp::create(builder, loc, l, scalarLike(e, tail.invWorld));
    tail.newResults[plan.lossResult] = l;
  }
}

/// Step 3b: gradients reduced per bucket, full (stage 0/1) or a shard
/// (2/3); the global norm of what each rank holds and the clip coefficient.
void ZeroPartitionPass::reduceGradients(BucketPlan &plan, TailRewrite &tail) {
  OpBuilder &builder = *b;
  func::FuncOp step = plan.step;
  SmallVector<int16_t> group = {1};
  tail.reduced.assign(plan.buckets.size(), Value());
  bool shardGrads = stage >= 2;
  // With a single micro-batch, each bucket is reduced inside
  // @forward_backward as soon as its gradients are complete, so the
  // collective overlaps the rest of the backward pass.
  DenseMap<unsigned, unsigned> sunk =
      sinkGradientReductions(step, plan.fb, plan.params, plan.buckets,
                             shardGrads, plan.lossValue, tail.newResults);
  SmallVector<func::CallOp> calls;
  step.walk([&](func::CallOp c) {
    if (c.getCallee() == plan.fb.getSymName())
      calls.push_back(c);
  });
  for (auto [bi, bk] : llvm::enumerate(plan.buckets)) {
    if (sunk.count(bi)) {
      // Each call returns its reduced bucket, summed right after it (so no
      // micro-batch's shard waits for the last); the step's scale (1 /
      // label count, 1 / micro-batches) applies after the sum.
      Value r;
      for (func::CallOp call : calls) {
        Value part = call.getResult(sunk[bi]);
        if (r) {
          OpBuilder::InsertionGuard guard(builder);
          builder.setInsertionPointAfter(call);
          part = dsc::AddOp::create(builder, loc, r, part);
        }
        r = part;
      }
      Value scale = plan.params[bk.params.front()].gradScale;
      if (scale)
        r = dsc::MulOp::create(builder, loc, r, scale);
      if (tail.invWorld != 1.0)
        r = dsc::MulOp::create(builder, loc, r,
                               scalarLike(bk.element, tail.invWorld));
      tail.reduced[bi] = r;
      continue;
    }
    SmallVector<Value> grads;
    for (unsigned pi : bk.params)
      grads.push_back(plan.params[pi].grad);
    Value flat = flatten(grads, bk.padded);
    Value r =
        worldSize == 1
            ? (shardGrads ? allSlice(flat, group, bk.padded / groupSize) : flat)
            : reduceFlat(flat, bk, shardGrads);
    if (worldSize > 1 && tail.invWorld != 1.0)
      r = dsc::MulOp::create(builder, loc, r,
                             scalarLike(bk.element, tail.invWorld));
    tail.reduced[bi] = r;
  }
  // Global norm: what each rank holds, summed within its group if sharded.
  // One sum of squares per bucket, each as soon as its reduction is
  // waited, so the norm overlaps the reductions still in flight.
  Value sumSq;
  for (Value r : tail.reduced) {
    Value s = dsc::sumOfSquaresF32(builder, loc, r);
    sumSq = sumSq ? dsc::AddOp::create(builder, loc, sumSq, s).getResult() : s;
  }
  label = "gradient norm";
  if (shardGrads && groupSize > 1)
    sumSq = reshape(allReduce(reshape(sumSq, {1}), group), {});
  Value norm = dsc::SqrtOp::create(builder, loc, sumSq);
  tail.newResults[plan.normResult] = norm;
  tail.coef = dsc::clipCoefficient(builder, loc, norm, plan.clipArg);
}

/// Step 3c: the optimizer update. Stage 0 updates each parameter on its
/// full gradient; stages 1-3 update this rank's shard of each bucket (new
/// shard and optimizer-state arguments), and stages 1-2 without
/// shard-masters all-gather the updated shard back into the parameters.
LogicalResult ZeroPartitionPass::updateParameters(BucketPlan &plan,
                                                  TailRewrite &tail) {
  OpBuilder &builder = *b;
  func::FuncOp step = plan.step;
  auto ret = cast<func::ReturnOp>(step.front().getTerminator());
  SmallVector<int16_t> group = {1};
  bool shardGrads = stage >= 2;
  SmallVector<ParamInfo> &params = plan.params;
  ArrayRef<StringRef> slots = plan.slots;
  auto castTo = [&](Value scalar, Type element) -> Value {
    if (element == builder.getF32Type())
      return scalar;
    return dsc::CastOp::create(builder, loc, scalar, TypeAttr::get(element));
  };
  // Extra arguments, appended at the end.
  struct NewArg {
    std::string role, name;
    Type type;
    int bucket;
  };
  SmallVector<NewArg> newArgs;
  // Stage-3 parameter shards: new arguments replacing the parameters.
  for (auto [bi, bk] : llvm::enumerate(plan.buckets)) {
    Type shardType = vec(bk.padded / groupSize, bk.element);
    Value g = tail.reduced[bi];
    if (!shardGrads && stage == 0) {
      // Stage 0: per-parameter updates on full, reduced gradients.
      for (unsigned pi : bk.params) {
        ParamInfo &p = params[pi];
        Value gp = unflatten(g, p.offset, p.type);
        Value clipped =
            dsc::MulOp::create(builder, loc, gp, castTo(tail.coef, bk.element));
        p.update->setOperand(1, clipped);
        p.update->moveBefore(ret);
        tail.newResults[plan.gradResult[p.name]] = gp;
      }
      continue;
    }
    // Stages 1-3: the update runs on this rank's shard of the bucket.
    if (bk.sharded)
      newArgs.push_back({"dsc.param", bk.name, shardType, (int)bi});
    for (StringRef slot : slots)
      newArgs.push_back(
          {"dsc.opt_state", bk.name + "/" + slot.str(), shardType, (int)bi});
  }
  // Add the new arguments now, so shards can be used.
  unsigned base = step.getNumArguments();
  tail.shardArgBase = base;
  for (NewArg &a : newArgs) {
    if (failed(step.insertArgument(
            step.getNumArguments(), a.type,
            builder.getDictionaryAttr(
                {builder.getNamedAttr(a.role, builder.getStringAttr(a.name)),
                 builder.getNamedAttr("dsc.bucket",
                                      builder.getI64IntegerAttr(a.bucket))}),
            loc)))
      return fail("internal error: cannot add an argument");
  }
  unsigned next = 0;
  for (auto [bi, bk] : llvm::enumerate(plan.buckets)) {
    if (!shardGrads && stage == 0)
      continue;
    Value g = tail.reduced[bi];
    Value gShard = shardGrads ? g : Value();
    int64_t shardN = bk.padded / groupSize;
    builder.setInsertionPoint(ret);
    label = bk.name + " gradients";
    if (!gShard)
      gShard = allSlice(g, group, shardN);
    Value pShard;
    if (bk.sharded)
      pShard = step.getArgument(base + next++);
    else {
      SmallVector<Value> ps;
      for (unsigned pi : bk.params)
        ps.push_back(step.getArgument(params[pi].arg));
      label = bk.name + " parameters";
      pShard = allSlice(flatten(ps, bk.padded), group, shardN);
    }
    SmallVector<Value> state;
    for (size_t s = 0; s < slots.size(); ++s)
      state.push_back(step.getArgument(base + next++));
    Value clipped =
        dsc::MulOp::create(builder, loc, gShard, castTo(tail.coef, bk.element));
    Operation *proto = params[bk.params.front()].update;
    SmallVector<Value> newP, newState;
    if (auto a = dyn_cast<dsc::AdamWOp>(proto)) {
      auto op =
          dsc::AdamWOp::create(builder, loc, pShard, clipped, state[0],
                               state[1], a.getLr(), a.getBeta1(), a.getBeta2(),
                               a.getEps(), a.getWeightDecay(), a.getStep());
      newP.push_back(op.getNewParam());
      newState = {op.getNewExpAvg(), op.getNewExpAvgSq()};
    } else {
      auto s = cast<dsc::SgdOp>(proto);
      auto op =
          dsc::SgdOp::create(builder, loc, pShard, clipped, state[0], s.getLr(),
                             s.getMomentum(), s.getWeightDecay(), s.getStep(),
                             s.getDampeningAttr(), s.getNesterovAttr());
      newP.push_back(op.getNewParam());
      newState = {op.getNewMomentumBuffer()};
    }
    for (auto [slot, v] : llvm::zip(slots, newState))
      tail.extraResults.push_back(
          {v, "dsc.opt_state_update", bk.name + "/" + slot.str(), (int)bi});
    if (bk.sharded) {
      tail.extraResults.push_back(
          {newP[0], "dsc.param_update", bk.name, (int)bi});
    } else {
      label = bk.name + " updated parameters";
      Value full = gatherUpdated(newP[0], bk, shardN);
      for (unsigned pi : bk.params)
        tail.newResults[plan.paramResult[params[pi].name]] =
            unflatten(full, params[pi].offset, params[pi].type);
    }
    tail.extraResults.push_back({gShard, "dsc.grad", bk.name, (int)bi});
  }
  return success();
}

/// Stages 1-2: the updated shard back into the whole bucket, in all-gathers
/// of at most allgather-bucket-size elements.
Value ZeroPartitionPass::gatherUpdated(Value shard, const Bucket &bk,
                                       int64_t shardN) {
  OpBuilder &builder = *b;
  SmallVector<int16_t> group = {1};
  Value full = shard;
  int64_t chunk = allgatherBucketSize > 0
                      ? std::min(allgatherBucketSize / groupSize, shardN)
                      : shardN;
  chunk = std::max<int64_t>(chunk, 1);
  if (groupSize > 1 && chunk >= shardN) {
    full = allGather(shard, group, bk.padded);
  } else if (groupSize > 1) {
    // Chunk c of every rank's shard, then the pieces back in rank order.
    SmallVector<Value> gathered;
    SmallVector<int64_t> sizes;
    for (int64_t at = 0; at < shardN; at += chunk) {
      int64_t k = std::min(chunk, shardN - at);
      Value piece = dsc::SliceOp::create(
          builder, loc, shard, builder.getDenseI64ArrayAttr({at}),
          builder.getDenseI64ArrayAttr({k}), builder.getDenseI64ArrayAttr({1}));
      gathered.push_back(allGather(piece, group, k * groupSize));
      sizes.push_back(k);
    }
    SmallVector<Value> ordered;
    for (int64_t r = 0; r < groupSize; ++r)
      for (auto [g, k] : llvm::zip(gathered, sizes))
        ordered.push_back(dsc::SliceOp::create(
            builder, loc, g, builder.getDenseI64ArrayAttr({r * k}),
            builder.getDenseI64ArrayAttr({k}),
            builder.getDenseI64ArrayAttr({1})));
    full = dsc::ConcatOp::create(builder, loc, ordered,
                                 builder.getI64IntegerAttr(0));
  }
  return full;
}

//===----------------------------------------------------------------------===//
// Rewrite steps for stage 3, the return and the module
//===----------------------------------------------------------------------===//

/// @forward_backward's argument of each parameter, by name.
static llvm::StringMap<unsigned> paramArguments(func::FuncOp fb) {
  llvm::StringMap<unsigned> args;
  for (unsigned i = 0; i < fb.getNumArguments(); ++i)
    if (auto n = fb.getArgAttrOfType<StringAttr>(i, "dsc.param"))
      args[n] = i;
  return args;
}

/// The step's parameter-shard argument of each sharded bucket, in bucket
/// order. The bucket arguments follow one another from
/// `tail.shardArgBase`: a sharded bucket's parameter shard and its state
/// slots, a persistent one's state slots only.
static SmallVector<Value> bucketShards(const BucketPlan &plan,
                                       const TailRewrite &tail) {
  func::FuncOp step = plan.step;
  unsigned index = tail.shardArgBase;
  SmallVector<Value> shards;
  for (const Bucket &bk : plan.buckets) {
    if (bk.sharded)
      shards.push_back(step.getArgument(index++));
    index += plan.slots.size();
  }
  return shards;
}

/// Step 4a, in @forward_backward: the parameters of each sharded bucket
/// become one bucket-shard argument, gathered before the first forward use
/// and (stage 3 without keep-gathered) again before the first backward
/// use, the forward copy released after its last forward use. Returns the
/// parameter arguments it replaced.
FailureOr<SmallVector<unsigned>>
ZeroPartitionPass::gatherShardsForBackward(BucketPlan &plan) {
  OpBuilder &builder = *b;
  func::FuncOp fb = plan.fb;
  SmallVector<ParamInfo> &params = plan.params;
  SmallVector<int16_t> group = {1};
  Block &fbody = fb.front();
  Operation *backwardBegin = nullptr;
  for (Operation &op : fbody)
    if (op.hasAttr("dsc.backward_begin")) {
      backwardBegin = &op;
      break;
    }
  llvm::DenseMap<Operation *, unsigned> position;
  unsigned pos = 0;
  for (Operation &op : fbody)
    position[&op] = pos++;
  unsigned bwdPos = backwardBegin ? position[backwardBegin] : pos;
  llvm::StringMap<unsigned> fbParam = paramArguments(fb);
  SmallVector<unsigned> eraseArgs;
  for (auto indexed : llvm::enumerate(plan.buckets)) {
    unsigned bi = indexed.index();
    const auto &bk = indexed.value();
    if (!bk.sharded)
      continue;
    Type shardType = vec(bk.padded / groupSize, bk.element);
    unsigned shardIndex = fb.getNumArguments();
    if (failed(fb.insertArgument(
            shardIndex, shardType,
            builder.getDictionaryAttr(
                {builder.getNamedAttr("dsc.param_shard",
                                      builder.getStringAttr(bk.name)),
                 builder.getNamedAttr("dsc.bucket",
                                      builder.getI64IntegerAttr(bi))}),
            loc)))
      return fail("internal error: cannot add a shard argument");
    BlockArgument shardArg = fbody.getArgument(shardIndex);
    if (!keepsGathered())
      for (unsigned pi : bk.params)
        recomputeViewsForBackward(fbody.getArgument(fbParam[params[pi].name]),
                                  bwdPos, position);
    // Uses of each parameter, split into forward and backward.
    SmallVector<OpOperand *> fwdUses, bwdUses;
    Operation *firstFwd = nullptr, *firstBwd = nullptr;
    for (unsigned pi : bk.params) {
      BlockArgument a = fbody.getArgument(fbParam[params[pi].name]);
      for (OpOperand &u : a.getUses()) {
        Operation *user = u.getOwner();
        bool bwd = position.lookup(user) > bwdPos || isa<func::ReturnOp>(user);
        if (bwd && !keepsGathered()) {
          bwdUses.push_back(&u);
          if (!firstBwd || position[user] < position[firstBwd])
            firstBwd = user;
        } else {
          fwdUses.push_back(&u);
          if (!firstFwd || position[user] < position[firstFwd])
            firstFwd = user;
        }
      }
    }
    auto gatherBefore = [&](Operation *where,
                            SmallVectorImpl<OpOperand *> &uses) {
      if (!where)
        return;
      label = bk.name + (&uses == &fwdUses ? " parameters (forward)"
                                           : " parameters (backward)");
      builder.setInsertionPoint(where);
      Value full = groupSize > 1 ? allGather(shardArg, group, bk.padded)
                                 : Value(shardArg);
      llvm::DenseMap<unsigned, Value> pieces;
      for (OpOperand *u : uses) {
        unsigned argNo = cast<BlockArgument>(u->get()).getArgNumber();
        Value &piece = pieces[argNo];
        if (!piece) {
          for (unsigned pi : bk.params)
            if (fbParam[params[pi].name] == argNo)
              piece = unflatten(full, params[pi].offset, params[pi].type);
        }
        u->set(piece);
      }
    };
    gatherBefore(firstFwd, fwdUses);
    // The forward copies end at their last forward use: released (the
    // backward gathers again), unless they are kept.
    if (!keepsGathered() && !fwdUses.empty()) {
      SmallVector<Value> pieces;
      Operation *last = nullptr;
      for (OpOperand *u : fwdUses) {
        if (!llvm::is_contained(pieces, u->get()))
          pieces.push_back(u->get());
        Operation *user = u->getOwner();
        if (!last || last->isBeforeInBlock(user))
          last = user;
      }
      builder.setInsertionPointAfter(last);
      dsc::ReleaseOp::create(builder, last->getLoc(), pieces);
    }
    gatherBefore(firstBwd, bwdUses);
    for (unsigned pi : bk.params)
      eraseArgs.push_back(fbParam[params[pi].name]);
  }
  return eraseArgs;
}

/// Step 4, stages 1-2 with shard-masters and several calls (accumulation):
/// the step gathers each bucket once, before its first call, and every
/// call reads the gathered parameters, as DeepSpeed's ZeRO-1/2 hold the
/// whole 16-bit model through the step (dsc-mixed-precision casts the
/// shard before the gather: it moves 16 bits). Gathered in
/// @forward_backward, each of K calls would move the bucket again.
LogicalResult
ZeroPartitionPass::gatherOncePerStep(BucketPlan &plan, TailRewrite &tail,
                                     ArrayRef<func::CallOp> calls) {
  llvm::StringMap<unsigned> fbParam = paramArguments(plan.fb);
  b->setInsertionPoint(calls.front());
  SmallVector<Value> shards = bucketShards(plan, tail);
  auto shard = shards.begin();
  for (const Bucket &bk : plan.buckets) {
    if (!bk.sharded)
      continue;
    label = bk.name + " parameters (once a step)";
    Value full =
        groupSize > 1 ? allGather(*shard, {1}, bk.padded) : Value(*shard);
    ++shard;
    for (unsigned pi : bk.params) {
      const ParamInfo &p = plan.params[pi];
      auto arg = fbParam.find(p.name);
      if (arg == fbParam.end())
        return fail("internal error: @forward_backward takes no parameter '" +
                    p.name + "'");
      Value piece = unflatten(full, p.offset, p.type);
      for (func::CallOp call : calls)
        call->setOperand(arg->second, piece);
    }
  }
  return success();
}

/// Step 4b, in @train_step: the calls pass the bucket shards instead of the
/// replaced parameters.
LogicalResult
ZeroPartitionPass::passShardsToCalls(BucketPlan &plan, TailRewrite &tail,
                                     ArrayRef<unsigned> eraseArgs) {
  OpBuilder &builder = *b;
  func::FuncOp step = plan.step, fb = plan.fb;
  SmallVector<func::CallOp> calls;
  step.walk([&](func::CallOp c) {
    if (c.getCallee() == "forward_backward")
      calls.push_back(c);
  });
  SmallVector<Value> shardArgs = bucketShards(plan, tail);
  llvm::BitVector erase(fb.getNumArguments());
  for (unsigned a : eraseArgs)
    erase.set(a);
  for (func::CallOp c : calls) {
    SmallVector<Value> operands;
    for (unsigned i = 0; i < c.getNumOperands(); ++i)
      if (!erase.test(i))
        operands.push_back(c.getOperand(i));
    llvm::append_range(operands, shardArgs);
    builder.setInsertionPoint(c);
    auto nc = func::CallOp::create(builder, c.getLoc(), fb.getSymName(),
                                   c.getResultTypes(), operands);
    // Values held on the side (results still to be returned) follow.
    for (auto [o, n] : llvm::zip(c.getResults(), nc.getResults())) {
      for (Value &v : tail.newResults)
        if (v == o)
          v = n;
      for (NewResult &r : tail.extraResults)
        if (r.value == o)
          r.value = n;
    }
    c.replaceAllUsesWith(nc.getResults());
    c.erase();
  }
  if (failed(fb.eraseArguments(erase)))
    return fail("internal error: cannot drop gathered parameters");
  return success();
}

/// Step 5: the new return. Per-parameter state results that moved into
/// buckets and per-parameter param/grad results of sharded buckets go; the
/// bucket results come; what is dead afterwards is erased, and so are the
/// arguments nobody reads any more.
LogicalResult ZeroPartitionPass::rebuildReturn(BucketPlan &plan,
                                               TailRewrite &tail) {
  OpBuilder &builder = *b;
  func::FuncOp step = plan.step;
  Block &body = step.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> &newResults = tail.newResults;
  llvm::BitVector dropResult(newResults.size());
  if (stage >= 1)
    for (ParamInfo &p : plan.params) {
      for (StringRef slot : plan.slots)
        dropResult.set(plan.stateResult[p.name + "/" + slot.str()]);
      if (plan.buckets[p.bucket].sharded)
        dropResult.set(plan.paramResult[p.name]);
      dropResult.set(plan.gradResult[p.name]);
    }
  SmallVector<Value> finalResults;
  SmallVector<DictionaryAttr> finalAttrs;
  for (unsigned i = 0; i < newResults.size(); ++i)
    if (!dropResult.test(i)) {
      finalResults.push_back(newResults[i]);
      finalAttrs.push_back(step.getResultAttrDict(i)
                               ? step.getResultAttrDict(i)
                               : builder.getDictionaryAttr({}));
    }
  for (NewResult &r : tail.extraResults) {
    finalResults.push_back(r.value);
    finalAttrs.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr(r.role, builder.getStringAttr(r.name)),
         builder.getNamedAttr("dsc.bucket",
                              builder.getI64IntegerAttr(r.bucket))}));
  }
  builder.setInsertionPoint(ret);
  func::ReturnOp::create(builder, ret.getLoc(), finalResults);
  ret.erase();
  step.setType(FunctionType::get(&getContext(), body.getArgumentTypes(),
                                 TypeRange(ValueRange(finalResults))));
  step.setAllResultAttrs(
      SmallVector<Attribute>(finalAttrs.begin(), finalAttrs.end()));
  // Old per-parameter updates of stages 1-3, and their inputs, die here.
  if (stage >= 1)
    for (ParamInfo &p : plan.params)
      if (p.update->use_empty())
        p.update->erase();
  SmallVector<Operation *> order;
  for (Operation &op : body.without_terminator())
    order.push_back(&op);
  for (Operation *op : llvm::reverse(order))
    if (op->use_empty() &&
        (isPure(op) || isa<dsc::CollectiveInputOp>(op))) // of an erased one
      op->erase();
  // Drop arguments nobody reads any more: per-parameter optimizer state of
  // stages 1-3 and the parameters of sharded buckets.
  llvm::BitVector eraseArgs(step.getNumArguments());
  for (ParamInfo &p : plan.params) {
    if (stage >= 1)
      for (unsigned s : p.stateArgs)
        eraseArgs.set(s);
    if (plan.buckets[p.bucket].sharded)
      eraseArgs.set(p.arg);
  }
  for (unsigned i = 0; i < eraseArgs.size(); ++i)
    if (eraseArgs.test(i) && !step.getArgument(i).use_empty())
      return fail("internal error: argument #" + Twine(i) + " still used");
  if (failed(step.eraseArguments(eraseArgs)))
    return fail("internal error: cannot erase arguments");
  return success();
}

/// Step 6: what the program and later passes need to know: the grid, the
/// buckets' layout, the sharding.
void ZeroPartitionPass::recordLayout(const BucketPlan &plan) {
  OpBuilder &builder = *b;
  ModuleOp module = getOperation();
  if (!module.lookupSymbol(kGrid)) {
    builder.setInsertionPointToStart(module.getBody());
    shard::GridOp::create(builder, loc, kGrid,
                          {worldSize / groupSize, groupSize});
  }
  SmallVector<Attribute> bucketAttrs;
  for (const Bucket &bk : plan.buckets) {
    SmallVector<Attribute> entries;
    for (unsigned pi : bk.params)
      entries.push_back(builder.getArrayAttr(
          {builder.getStringAttr(plan.params[pi].name),
           builder.getI64IntegerAttr(plan.params[pi].offset),
           builder.getI64IntegerAttr(plan.params[pi].type.getNumElements())}));
    std::string dtype;
    llvm::raw_string_ostream os(dtype);
    bk.element.print(os);
    bucketAttrs.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr("name", builder.getStringAttr(bk.name)),
         builder.getNamedAttr("dtype", builder.getStringAttr(dtype)),
         builder.getNamedAttr("padded", builder.getI64IntegerAttr(bk.padded)),
         builder.getNamedAttr("sharded", builder.getBoolAttr(bk.sharded)),
         builder.getNamedAttr("entries", builder.getArrayAttr(entries))}));
  }
  module->setAttr("dsc.buckets", builder.getArrayAttr(bucketAttrs));
  module->setAttr("dsc.world_size", builder.getI64IntegerAttr(worldSize));
  module->setAttr("dsc.group_size", builder.getI64IntegerAttr(groupSize));
  module->setAttr("dsc.stage", builder.getI64IntegerAttr(stage));
  if (shardsMasters())
    module->setAttr("dsc.shard_masters", builder.getUnitAttr());
}

LogicalResult ZeroPartitionPass::fail(const Twine &msg) {
  getOperation().emitError("dsc-zero-partition: ") << msg;
  return failure();
}

LogicalResult ZeroPartitionPass::checkOptions() {
  if (stage < 0 || stage > 3)
    return fail("stage must be 0, 1, 2 or 3, not " + Twine(stage));
  if (worldSize < 1)
    return fail("world-size must be at least 1");
  groupSize = hybridGroup > 0 ? hybridGroup : worldSize;
  if (worldSize % groupSize)
    return fail("hybrid-group " + Twine(groupSize) +
                " does not divide world-size " + Twine(worldSize));
  if (reduceBucketSize < 1)
    return fail("reduce-bucket-size must be positive");
  return success();
}

void ZeroPartitionPass::runOnOperation() {
  OpBuilder builder(&getContext());
  b = &builder;
  label.clear();

  // 1-2. Analyse: the options, @train_step, then the bucket plan.
  BucketPlan plan;
  if (failed(checkOptions()) || failed(analyseStep(plan)))
    return signalPassFailure();
  planBuckets(plan);

  // 3. The new tail of @train_step, built before its return: the loss and
  // the gradients reduced over ranks, the norm, the updates on shards.
  Operation *ret = plan.step.front().getTerminator();
  TailRewrite tail;
  tail.newResults.assign(ret->operand_begin(), ret->operand_end());
  tail.invWorld = 1.0 / worldSize;
  builder.setInsertionPoint(ret);
  reduceLoss(plan, tail);
  reduceGradients(plan, tail);
  if (failed(updateParameters(plan, tail)))
    return signalPassFailure();
  if (syncBatchNorm && worldSize > 1 && failed(syncBatchNorms(plan.fb)))
    return signalPassFailure();
  loc = plan.step.getLoc();
  builder.setInsertionPoint(ret);

  // 4. Stage 3 (and 1-2 with shard-masters): parameters are shards,
  // gathered in @forward_backward; at stages 1-2 with several calls, once
  // in @train_step.
  SmallVector<func::CallOp> calls;
  plan.step.walk([&](func::CallOp c) {
    if (c.getCallee() == plan.fb.getSymName())
      calls.push_back(c);
  });
  bool sharded =
      llvm::any_of(plan.buckets, [](const Bucket &bk) { return bk.sharded; });
  if (sharded && shardsMasters() && calls.size() > 1) {
    if (failed(gatherOncePerStep(plan, tail, calls)))
      return signalPassFailure();
  } else if (sharded) {
    FailureOr<SmallVector<unsigned>> replaced = gatherShardsForBackward(plan);
    if (failed(replaced) || failed(passShardsToCalls(plan, tail, *replaced)))
      return signalPassFailure();
  }

  // 5-6. The return, then the layout on the module.
  if (failed(rebuildReturn(plan, tail)))
    return signalPassFailure();
  recordLayout(plan);
}

} // namespace
