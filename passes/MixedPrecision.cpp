//===- MixedPrecision.cpp - bf16 / fp16 compute with fp32 master weights --===//
//
// Runs after dsc-optimizer and dsc-zero-partition, before dsc-schedule:
//
//   1. @forward_backward takes a 16-bit compute copy of every parameter (or,
//      at stage 3, of every parameter shard, so the all-gathers move 16-bit);
//      @train_step makes the copies once per step from the fp32 masters.
//   2. Every op of @forward_backward runs in the precision the table below
//      gives its class; casts go where a value crosses from one to another.
//      Gradients leave @forward_backward in fp32, so accumulation, the
//      reduction over ranks, the norm and the optimizer stay fp32. What
//      the backward pass keeps of an elementwise result of 16-bit inputs
//      (a bias add, GELU's input) is its 16-bit copy, as autocast keeps it.
//   3. fp16 only: dynamic loss scaling (DeepSpeed's rules): the loss
//      gradient is seeded with the scale, gradients are unscaled as they
//      leave @forward_backward, and a step whose gradient norm is not finite
//      on any rank keeps every parameter and optimizer state as it was.
//
//===----------------------------------------------------------------------===//
#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#include <cmath>
#include <limits>

#define DEBUG_TYPE "dsc-mixed-precision"

namespace dsc {
#define GEN_PASS_DEF_DSCMIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {

/// Where an op computes once mixed precision is on. docs/numerics.md gives
/// the reason for each row; keep the two in step.
enum class PrecisionClass {
  /// Tensor-core math: 16-bit operands and result, fp32 accumulation
  /// (matmul, gemm, conv and the conv gradients), as autocast runs them.
  Low,
  /// Moves or selects elements without arithmetic: runs in whatever
  /// precision its operands come in (reshape, transpose, slices, gathers,
  /// the parameter all-gather), so a 16-bit matmul feeds the next one
  /// without a round trip through fp32.
  Follow,
  /// Everything else: fp32 math on fp32 operands (norms and their
  /// statistics, softmax, the loss, reductions, elementwise chains, gradient
  /// reductions over ranks, the optimizer).
  F32,
};

PrecisionClass precisionClassOf(Operation *op) {
  // A collective's input point is in the precision its collective takes, so
  // that a cast never lands between the two.
  if (isa<CollectiveInputOp>(op)) {
    Value r = op->getResult(0);
    return r.use_empty() ? PrecisionClass::Follow
                         : precisionClassOf(*r.user_begin());
  }
  if (isa<MatMulOp, GemmOp, ConvOp, ConvBackwardInputOp, ConvBackwardWeightOp,
          AttentionOp, AttentionBackwardOp>(op))
    return PrecisionClass::Low;
  if (isa<ReshapeOp, TransposeOp, ExpandOp, SliceOp, ConcatOp, SplitOp,
          InsertSliceOp, GatherOp, RotateHalfOp, WaitOp, shard::AllGatherOp,
          shard::AllSliceOp>(op))
    return PrecisionClass::Follow;
  return PrecisionClass::F32;
}

} // namespace dsc

namespace {

RankedTensorType withElement(Type t, Type element) {
  auto r = cast<RankedTensorType>(t);
  return RankedTensorType::get(r.getShape(), element);
}

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// Operands and results of a Low op that keep their own type: attention's
/// mask (added in fp32) and its softmax statistics (fp32 always).
bool keepsOwnType(Operation *op, Value v) {
  if (auto a = dyn_cast<dsc::AttentionOp>(op))
    return v == a.getMask() || v == a.getLse();
  if (auto a = dyn_cast<dsc::AttentionBackwardOp>(op))
    return v == a.getMask() || v == a.getLse();
  return false;
}

struct MixedPrecisionPass
    : public dsc::impl::DscMixedPrecisionBase<MixedPrecisionPass> {
  using Base::Base;

  Type low;                      // bf16 or f16
  Type f32;                      // the masters' type
  llvm::DenseSet<Value> lowered; // values this pass made 16-bit

  void runOnOperation() override;

  Value castTo(OpBuilder &b, Location loc, Value v, Type element,
               DenseMap<std::pair<Value, Type>, Value> &cache);
  Value lowOperand(OpBuilder &b, Location loc, Value v,
                   DenseMap<std::pair<Value, Type>, Value> &cache);
  SmallVector<unsigned> lowerArguments(func::FuncOp fb);
  void retypeOps(func::FuncOp fb);
  void retypeOp(Operation *op, DenseMap<std::pair<Value, Type>, Value> &cache);
  void castResults(func::FuncOp fb);
  void recomputeCastsForBackward(func::FuncOp fb);
  void keepLowForBackward(func::FuncOp fb);
  void makeComputeCopies(func::FuncOp step, func::FuncOp fb,
                         ArrayRef<unsigned> copied);
  Value gatheredCopy(Value master, DenseMap<Operation *, Value> &lowGathers,
                     SmallVectorImpl<Operation *> &replaced);
  LogicalResult addLossScaling(ModuleOp module, func::FuncOp step,
                               func::FuncOp fb);
  void lowerGradientReductions(func::FuncOp f, Type element);
};

/// Step 4 (grad-reduce-dtype=bf16): the gradient reductions dsc-zero-
/// partition marked run on bf16 copies of their operands; the result is
/// widened back to fp32 at once, so accumulation and the optimizer see
/// fp32. Two marked reductions in a row (hybrid: inside the group, then
/// across) pass bf16 between them.
void MixedPrecisionPass::lowerGradientReductions(func::FuncOp f, Type element) {
  SmallVector<Operation *> ops;
  f.walk([&](Operation *op) {
    if (op->hasAttr("dsc.gradient_reduction"))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    // The gradient enters through the collective's dsc.collective_input.
    Operation *entry = op;
    if (auto ci = op->getOperand(0).getDefiningOp<dsc::CollectiveInputOp>())
      entry = ci;
    Value in = entry->getOperand(0), result = op->getResult(0);
    if (elementOf(in) != f32)
      continue;
    OpBuilder b(entry);
    Value narrow;
    if (auto c = in.getDefiningOp<dsc::CastOp>();
        c && c->hasAttr("dsc.widened_reduction"))
      narrow = c.getInput();
    else
      narrow = dsc::CastOp::create(b, op->getLoc(), in, TypeAttr::get(element));
    entry->setOperand(0, narrow);
    if (entry != op)
      entry->getResult(0).setType(withElement(narrow.getType(), element));
    result.setType(withElement(result.getType(), element));
    b.setInsertionPointAfter(op);
    auto wide =
        dsc::CastOp::create(b, op->getLoc(), result, TypeAttr::get(f32));
    wide->setAttr("dsc.widened_reduction", b.getUnitAttr());
    result.replaceAllUsesExcept(wide, wide);
    if (Operation *def = in.getDefiningOp(); def && isOpTriviallyDead(def))
      def->erase();
  }
}

Value MixedPrecisionPass::castTo(
    OpBuilder &b, Location loc, Value v, Type element,
    DenseMap<std::pair<Value, Type>, Value> &cache) {
  Value &c = cache[{v, element}];
  if (!c) {
    OpBuilder::InsertionGuard guard(b);
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
    c = dsc::CastOp::create(b, loc, v, TypeAttr::get(element));
  }
  return c;
}

/// The op dsc-autodiff marks where the backward pass begins (the seed of
/// the loss gradient), or null.
Operation *backwardBeginOf(func::FuncOp fb) {
  for (Operation &op : fb.front())
    if (op.hasAttr("dsc.backward_begin"))
      return &op;
  return nullptr;
}

/// The op of `uses` that comes first in their (shared) block.
Operation *earliestOwner(ArrayRef<OpOperand *> uses) {
  Operation *first = uses.front()->getOwner();
  for (OpOperand *u : uses)
    if (u->getOwner()->isBeforeInBlock(first))
      first = u->getOwner();
  return first;
}

/// Erases `op` when nothing reads it any more, then its operands' producers
/// likewise (the fp32 moves lowOperand replaced by 16-bit ones).
void eraseIfDead(Operation *op) {
  if (!op || !op->use_empty() || !isa<dsc::TransposeOp, dsc::ReshapeOp>(op))
    return;
  Operation *source = op->getOperand(0).getDefiningOp();
  op->erase();
  eraseIfDead(source);
}

/// The 16-bit form of an fp32 operand of a Low op. When the operand only
/// moves an fp32 value (a transpose or reshape used by this op alone), the
/// move runs on the 16-bit copy instead: half the bytes, and the copy is
/// often made anyway for another matmul (the weight gradient's transposed
/// activation).
Value MixedPrecisionPass::lowOperand(
    OpBuilder &b, Location loc, Value v,
    DenseMap<std::pair<Value, Type>, Value> &cache) {
  Operation *def = v.getDefiningOp();
  if (!def || !v.hasOneUse() || def->getNumOperands() != 1 ||
      def->getNumResults() != 1 || !isa<dsc::TransposeOp, dsc::ReshapeOp>(def))
    return castTo(b, loc, v, low, cache);
  Value source = def->getOperand(0);
  if (elementOf(source) != f32 || lowered.contains(source))
    return castTo(b, loc, v, low, cache);
  Value lowSource = lowOperand(b, loc, source, cache);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(def);
  Operation *moved = b.clone(*def);
  moved->setOperand(0, lowSource);
  Value r = moved->getResult(0);
  r.setType(withElement(r.getType(), low));
  lowered.insert(r);
  return r;
}

/// Step 1a: float parameters (and stage-3 shards) of @forward_backward
/// become their 16-bit compute copies; returns their argument numbers.
SmallVector<unsigned> MixedPrecisionPass::lowerArguments(func::FuncOp fb) {
  Block &body = fb.front();
  SmallVector<unsigned> copied;
  for (unsigned i = 0; i < fb.getNumArguments(); ++i) {
    if (!fb.getArgAttr(i, "dsc.param") && !fb.getArgAttr(i, "dsc.param_shard"))
      continue;
    BlockArgument a = body.getArgument(i);
    if (elementOf(a) != f32)
      continue;
    a.setType(withElement(a.getType(), low));
    lowered.insert(a);
    copied.push_back(i);
  }
  fb.setType(FunctionType::get(fb.getContext(), body.getArgumentTypes(),
                               fb.getResultTypes()));
  return copied;
}

/// Step 2: each op in its class's precision.
void MixedPrecisionPass::retypeOps(func::FuncOp fb) {
  DenseMap<std::pair<Value, Type>, Value> cache;
  SmallVector<Operation *> ops;
  for (Operation &op : fb.front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : ops)
    retypeOp(op, cache);
}

void MixedPrecisionPass::retypeOp(
    Operation *op, DenseMap<std::pair<Value, Type>, Value> &cache) {
  // Casts and constants say their own type; a release only ends lives.
  if (isa<dsc::CastOp, dsc::ConstantOp, dsc::ReleaseOp>(op))
    return;
  OpBuilder b(op);
  dsc::PrecisionClass cls = dsc::precisionClassOf(op);
  bool anyLowered = false, anyMaster = false;
  for (Value v : op->getOperands()) {
    if (lowered.contains(v))
      anyLowered = true;
    else if (isa<RankedTensorType>(v.getType()) && elementOf(v) == f32)
      anyMaster = true;
  }
  if (cls == dsc::PrecisionClass::Follow && anyLowered && anyMaster)
    cls = dsc::PrecisionClass::F32; // mixed operands meet in fp32
  if (cls == dsc::PrecisionClass::Follow && !anyLowered)
    return;
  bool toLow = cls != dsc::PrecisionClass::F32;
  for (OpOperand &u : op->getOpOperands()) {
    Value v = u.get();
    if (keepsOwnType(op, v)) {
      if (lowered.contains(v))
        u.set(castTo(b, op->getLoc(), v, f32, cache));
      continue;
    }
    if (toLow && !lowered.contains(v) && isa<RankedTensorType>(v.getType()) &&
        elementOf(v) == f32) {
      u.set(cls == dsc::PrecisionClass::Low
                ? lowOperand(b, op->getLoc(), v, cache)
                : castTo(b, op->getLoc(), v, low, cache));
      eraseIfDead(v.getDefiningOp());
    } else if (!toLow && lowered.contains(v))
      u.set(castTo(b, op->getLoc(), v, f32, cache));
  }
  if (!toLow)
    return;
  for (Value r : op->getResults())
    if (!keepsOwnType(op, r) && isa<RankedTensorType>(r.getType()) &&
        elementOf(r) == f32) {
      r.setType(withElement(r.getType(), low));
      lowered.insert(r);
    }
}

/// Step 2b: a cast whose result both passes read would keep its result
/// alive from forward to backward beside its source. When the source lives
/// into the backward pass anyway (attention's fp32 probabilities, which
/// softmax_backward reads, cast to bf16 for the next matmul) or is the
/// smaller of the two (a bf16 matmul output widened for GELU, whose
/// backward reads the fp32 value), the backward gets its own cast of the
/// source and the forward's result dies in the forward pass, unless it
/// widens a parameter and is small (kKeptCastBytes). The copy is marked
/// `dsc.recompute`, which also keeps CSE from merging it back.
/// A parameter's widening of at most this many bytes is kept rather than
/// cast again for the backward pass.
constexpr int64_t kKeptCastBytes = int64_t(64) << 10;

void MixedPrecisionPass::recomputeCastsForBackward(func::FuncOp fb) {
  Block &body = fb.front();
  Operation *backwardBegin = backwardBeginOf(fb);
  if (!backwardBegin)
    return;
  auto inBackward = [&](Operation *user) {
    return backwardBegin->isBeforeInBlock(user) || isa<func::ReturnOp>(user);
  };
  // A cast keeps its shape: the wider element is the larger tensor.
  auto widthOf = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getElementTypeBitWidth();
  };
  SmallVector<dsc::CastOp> casts;
  for (Operation &op : body) {
    if (&op == backwardBegin)
      break;
    if (auto c = dyn_cast<dsc::CastOp>(&op))
      casts.push_back(c);
  }
  for (dsc::CastOp c : casts) {
    Value source = c.getInput(), result = c.getResult();
    if (!isa<FloatType>(elementOf(source)) ||
        !isa<FloatType>(elementOf(result)))
      continue;
    SmallVector<OpOperand *> backwardUses;
    bool forwardUse = false;
    for (OpOperand &u : result.getUses())
      (inBackward(u.getOwner()) ? backwardUses.push_back(&u)
                                : void(forwardUse = true));
    if (backwardUses.empty() || !forwardUse)
      continue;
    bool sourceLivesOn = llvm::any_of(source.getUsers(), [&](Operation *u) {
      return u != c && inBackward(u);
    });
    if (!sourceLivesOn && widthOf(source) >= widthOf(result))
      continue;
    // A parameter's small widening (a norm's weight from its compute copy:
    // GPT-2 has 25 of 3 KiB) costs less kept than a launch each step.
    if (auto t = dyn_cast<RankedTensorType>(result.getType());
        isa<BlockArgument>(source) && t && t.hasStaticShape() &&
        t.getNumElements() * widthOf(result) / 8 <= kKeptCastBytes)
      continue;
    OpBuilder b(earliestOwner(backwardUses));
    Operation *copy = b.clone(*c.getOperation());
    copy->setAttr("dsc.recompute", b.getUnitAttr());
    for (OpOperand *u : backwardUses)
      u->set(copy->getResult(0));
    if (lowered.contains(result))
      lowered.insert(copy->getResult(0));
  }
}

/// The elementwise math autocast runs in the precision of its inputs. Not
/// the ops on autocast's fp32 list (exp, log, pow, reciprocal, softplus):
/// their results can leave fp16's range, and autocast keeps them in fp32.
bool isElementwiseMath(Operation *op) {
  return op->getNumResults() == 1 &&
         isa<dsc::AddOp, dsc::SubOp, dsc::MulOp, dsc::DivOp, dsc::MaxOp,
             dsc::MinOp, dsc::NegOp, dsc::AbsOp, dsc::SqrtOp, dsc::TanhOp,
             dsc::ErfOp, dsc::SigmoidOp, dsc::ReluOp, dsc::GeluOp,
             dsc::LeakyReluOp, dsc::SwigluOp>(op);
}

bool isSplat(Value v) {
  auto k = v.getDefiningOp<dsc::ConstantOp>();
  auto attr = k ? dyn_cast<DenseElementsAttr>(k.getValue()) : nullptr;
  return attr && attr.isSplat();
}

/// Step 2c: an fp32 elementwise result computed from 16-bit values alone
/// (the bias add after a matmul, which is GELU's input; SwiGLU's sigmoid
/// and product) is kept for the backward pass in 16 bits, as autocast
/// keeps it: the forward reads the fp32 value, the backward a widening of
/// its 16-bit copy (marked `dsc.recompute`, so CSE does not merge it with
/// another). Half the bytes live from forward to backward; the fp32 value
/// dies in the forward pass. A value with an fp32 source of its own (an
/// fp32 input, a norm's statistics) stays fp32.
void MixedPrecisionPass::keepLowForBackward(func::FuncOp fb) {
  Operation *backwardBegin = backwardBeginOf(fb);
  if (!backwardBegin)
    return;
  // Analysis: the fp32 values of the forward pass that only 16-bit values
  // (and splat constants) flow into.
  llvm::DenseSet<Value> fromLow;
  SmallVector<Operation *> candidates;
  for (Operation &op : fb.front()) {
    if (&op == backwardBegin)
      break;
    if (auto c = dyn_cast<dsc::CastOp>(&op)) {
      if (isa<RankedTensorType>(c.getInput().getType()) &&
          elementOf(c.getInput()) == low && elementOf(c.getResult()) == f32)
        fromLow.insert(c.getResult());
      continue;
    }
    if (!isElementwiseMath(&op) ||
        !isa<RankedTensorType>(op.getResult(0).getType()) ||
        elementOf(op.getResult(0)) != f32)
      continue;
    bool anyLow = false, allLow = true;
    for (Value v : op.getOperands()) {
      if (fromLow.contains(v))
        anyLow = true;
      else if (!isSplat(v))
        allLow = false;
    }
    if (!anyLow || !allLow)
      continue;
    fromLow.insert(op.getResult(0));
    candidates.push_back(&op);
  }
  // Rewrite: the backward pass reads the 16-bit copy.
  for (Operation *op : candidates) {
    Value v = op->getResult(0);
    SmallVector<OpOperand *> backwardUses;
    // What the function returns keeps its fp32 bits; a release only ends
    // a life.
    for (OpOperand &u : v.getUses())
      if (backwardBegin->isBeforeInBlock(u.getOwner()) &&
          !isa<func::ReturnOp, dsc::ReleaseOp>(u.getOwner()))
        backwardUses.push_back(&u);
    if (backwardUses.empty())
      continue;
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    Value narrow = dsc::CastOp::create(b, op->getLoc(), v, TypeAttr::get(low));
    lowered.insert(narrow);
    b.setInsertionPoint(earliestOwner(backwardUses));
    auto wide =
        dsc::CastOp::create(b, op->getLoc(), narrow, TypeAttr::get(f32));
    wide->setAttr("dsc.recompute", b.getUnitAttr());
    for (OpOperand *u : backwardUses)
      u->set(wide);
  }
}

/// Step 2, end: what @forward_backward returns keeps its declared fp32 type.
void MixedPrecisionPass::castResults(func::FuncOp fb) {
  auto ret = cast<func::ReturnOp>(fb.front().getTerminator());
  OpBuilder b(ret);
  DenseMap<std::pair<Value, Type>, Value> cache;
  for (OpOperand &u : ret->getOpOperands())
    if (lowered.contains(u.get()))
      u.set(castTo(b, ret.getLoc(), u.get(), f32, cache));
}

/// The compute copy of `master` when it is a piece (slices, reshapes) of a
/// bucket the step gathers from a shard argument (dsc-zero-partition's
/// once-a-step gather at stages 1-2 with several calls): the same piece of
/// the bucket gathered from the shard's 16-bit copy, so the gather moves
/// 16 bits, as a stage-3 shard's does. Null when it is not. The fp32 ops
/// it stands for go to `replaced`, each after what it reads (erased once
/// nothing reads them).
Value MixedPrecisionPass::gatheredCopy(Value master,
                                       DenseMap<Operation *, Value> &lowGathers,
                                       SmallVectorImpl<Operation *> &replaced) {
  SmallVector<Operation *> chain; // the piece's views, outermost first
  Value v = master;
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<dsc::SliceOp, dsc::ReshapeOp>(def))
      break;
    chain.push_back(def);
    v = def->getOperand(0);
  }
  auto gather = v.getDefiningOp<shard::AllGatherOp>();
  auto input =
      gather ? gather->getOperand(0).getDefiningOp<dsc::CollectiveInputOp>()
             : dsc::CollectiveInputOp();
  if (!input || !isa<BlockArgument>(input->getOperand(0)) ||
      elementOf(input->getOperand(0)) != f32)
    return {};
  auto retyped = [&](OpBuilder &b, Operation *op, Value operand) {
    Operation *clone = b.clone(*op);
    clone->setOperand(0, operand);
    Value r = clone->getResult(0);
    r.setType(withElement(r.getType(), low));
    return r;
  };
  Value &bucket = lowGathers[gather];
  if (!bucket) {
    OpBuilder b(input);
    Value shard = input->getOperand(0);
    Value copy =
        dsc::CastOp::create(b, input.getLoc(), shard, TypeAttr::get(low));
    copy.getDefiningOp()->setAttr("dsc.compute_copy", b.getUnitAttr());
    Value in = retyped(b, input, copy);
    b.setInsertionPoint(gather);
    bucket = retyped(b, gather, in);
    replaced.append({input, gather});
  }
  Value piece = bucket;
  for (Operation *op : llvm::reverse(chain)) {
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    piece = retyped(b, op, piece);
    replaced.push_back(op);
  }
  return piece;
}

/// Step 1b: the call sites pass 16-bit copies, made once per step.
void MixedPrecisionPass::makeComputeCopies(func::FuncOp step, func::FuncOp fb,
                                           ArrayRef<unsigned> copied) {
  DenseMap<Value, Value> copyOf;
  DenseMap<Operation *, Value> lowGathers;
  SmallVector<Operation *> replaced;
  SmallVector<func::CallOp> calls;
  step.walk([&](func::CallOp c) {
    if (c.getCallee() == fb.getSymName())
      calls.push_back(c);
  });
  for (func::CallOp c : calls) {
    for (unsigned i : copied) {
      Value master = c.getOperand(i);
      Value &copy = copyOf[master];
      if (!copy)
        copy = gatheredCopy(master, lowGathers, replaced);
      if (!copy) {
        OpBuilder b(c);
        if (Operation *def = master.getDefiningOp())
          b.setInsertionPointAfter(def);
        else
          b.setInsertionPointToStart(&step.front());
        copy = dsc::CastOp::create(b, c.getLoc(), master, TypeAttr::get(low));
        copy.getDefiningOp()->setAttr("dsc.compute_copy", b.getUnitAttr());
      }
      c.setOperand(i, copy);
    }
  }
  // The fp32 gathers and their pieces, readers first (each was recorded
  // after what it reads).
  llvm::SetVector<Operation *> dead(replaced.begin(), replaced.end());
  for (Operation *op : llvm::reverse(dead))
    if (op->use_empty())
      op->erase();
}

/// Step 3a, in @forward_backward: the loss gradient starts at the scale
/// x * s for the f32 scalar s, in x's element type (a model may hold f16 or
/// bf16 parameters of its own, whose gradients and loss are not f32).
Value mulByScalar(OpBuilder &b, Location loc, Value x, Value s) {
  Type element = cast<RankedTensorType>(x.getType()).getElementType();
  if (cast<RankedTensorType>(s.getType()).getElementType() != element)
    s = dsc::CastOp::create(b, loc, s, TypeAttr::get(element));
  return dsc::MulOp::create(b, loc, x, s);
}

/// (an argument), and gradients leave divided by it, in fp32.
/// Multiplies the local gradient that the reductions ending in `reduced`
/// start from (through their dsc.collective_input, across a hybrid
/// reduce-scatter then all-reduce) by `factor`, before the first of them.
LogicalResult unscaleBeforeReduction(OpBuilder &b, Value reduced,
                                     Value factor) {
  Operation *reduction = reduced.getDefiningOp();
  while (reduction && reduction->hasAttr("dsc.gradient_reduction")) {
    auto entry =
        reduction->getOperand(0).getDefiningOp<dsc::CollectiveInputOp>();
    if (!entry)
      return failure();
    Value local = entry.getOperand();
    Operation *before = local.getDefiningOp();
    if (before && before->hasAttr("dsc.gradient_reduction")) {
      reduction = before;
      continue;
    }
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(entry);
    entry->setOperand(0, mulByScalar(b, entry.getLoc(), local, factor));
    return success();
  }
  return failure();
}

LogicalResult scaleGradients(func::FuncOp fb, Value &scale) {
  Block &body = fb.front();
  Operation *seed = backwardBeginOf(fb);
  if (!seed || seed->getNumResults() != 1)
    return fb.emitError("dsc-mixed-precision: fp16 needs the loss gradient "
                        "dsc-autodiff seeds (an op marked "
                        "dsc.backward_begin); none found");
  OpBuilder b(fb.getContext());
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  unsigned index = fb.getNumArguments();
  if (failed(fb.insertArgument(index, scalar,
                               b.getDictionaryAttr(b.getNamedAttr(
                                   "dsc.loss_scale", b.getUnitAttr())),
                               fb.getLoc())))
    return fb.emitError("dsc-mixed-precision: cannot add the scale argument");
  scale = body.getArgument(index);
  // A loss summed over the labels that count (dsc-global-mean-loss) is
  // divided by their number later, in @train_step; its gradients here are
  // that many times the mean's and would overflow fp16 at the usual
  // scales. The seed is therefore scale / count (count >= 1), and the
  // gradients leave multiplied by count / scale: the same values as
  // without scaling, with the fp16 range of a mean loss in between.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Value factor = scale;
  Operation *after = seed;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    if (!fb.getResultAttr(i, "dsc.loss_count"))
      continue;
    Value count = ret.getOperand(i);
    Operation *def = count.getDefiningOp();
    bool beforeUses = llvm::all_of(seed->getUsers(), [&](Operation *u) {
      return !def || def->isBeforeInBlock(u);
    });
    if (!beforeUses)
      break;
    if (def && seed->isBeforeInBlock(def))
      after = def;
    b.setInsertionPointAfter(after);
    Value atLeastOne = dsc::MaxOp::create(
        b, seed->getLoc(), count, dsc::scalarF32(b, seed->getLoc(), 1.0));
    factor = dsc::DivOp::create(b, seed->getLoc(), scale, atLeastOne);
    after = factor.getDefiningOp();
  }
  b.setInsertionPointAfter(after);
  Value seedValue = seed->getResult(0);
  Value scaled = mulByScalar(b, seed->getLoc(), seedValue, factor);
  seedValue.replaceAllUsesExcept(scaled, scaled.getDefiningOp());
  b.setInsertionPointAfter(scaled.getDefiningOp());
  Value inverse = dsc::ReciprocalOp::create(b, ret.getLoc(), factor);
  b.setInsertionPoint(ret);
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    if (fb.getResultAttr(i, "dsc.grad")) {
      ret.setOperand(i,
                     mulByScalar(b, ret.getLoc(), ret.getOperand(i), inverse));
    } else if (fb.getResultAttr(i, "dsc.bucket_grad")) {
      // A bucket reduced over ranks here (dsc-zero-partition): each rank's
      // factor is its own (scale / its label count), so the factor comes
      // off each rank's part before the sum, not off the sum.
      if (failed(unscaleBeforeReduction(b, ret.getOperand(i), inverse)))
        return fb.emitError("dsc-mixed-precision: result #")
               << i << " is a reduced gradient bucket whose reduction "
               << "(dsc.gradient_reduction) was not found";
    }
  }
  return success();
}

/// The argument of @train_step with attribute `attr` = `name`, or null.
Value argumentNamed(func::FuncOp step, StringRef attr, StringRef name) {
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (auto n = step.getArgAttrOfType<StringAttr>(i, attr))
      if (n.getValue() == name)
        return step.getArgument(i);
  return Value();
}

/// DeepSpeed's DynamicLossScaler.update_scale, as IR on scalars: on
/// overflow the scale halves (not below the minimum) once the hysteresis is
/// used up, else the hysteresis drops by one; after `window` steps without
/// overflow the scale doubles and the hysteresis is restored.
struct ScalerState {
  Value scale, hysteresis, goodSteps;
};
ScalerState updateScaler(OpBuilder &b, Location loc, Value finite,
                         const ScalerState &s, int64_t window,
                         int64_t hysteresis, double minScale) {
  auto c = [&](double v) { return dsc::scalarF32(b, loc, v); };
  Value overflow = dsc::NotOp::create(b, loc, finite);
  Value spent = dsc::LessEqualOp::create(b, loc, s.hysteresis, c(1));
  Value halved = dsc::MaxOp::create(
      b, loc, dsc::MulOp::create(b, loc, s.scale, c(0.5)), c(minScale));
  Value scaleOnOverflow = dsc::WhereOp::create(b, loc, spent, halved, s.scale);
  Value hystOnOverflow =
      dsc::WhereOp::create(b, loc, spent, s.hysteresis,
                           dsc::SubOp::create(b, loc, s.hysteresis, c(1)));
  Value good = dsc::AddOp::create(b, loc, s.goodSteps, c(1));
  Value grow = dsc::GreaterEqualOp::create(b, loc, good, c(double(window)));
  Value scaleOnGood = dsc::WhereOp::create(
      b, loc, grow, dsc::MulOp::create(b, loc, s.scale, c(2)), s.scale);
  Value hystOnGood =
      dsc::WhereOp::create(b, loc, grow, c(double(hysteresis)), s.hysteresis);
  Value goodOnGood = dsc::WhereOp::create(b, loc, grow, c(0), good);
  ScalerState next;
  next.scale =
      dsc::WhereOp::create(b, loc, overflow, scaleOnOverflow, scaleOnGood);
  next.hysteresis =
      dsc::WhereOp::create(b, loc, overflow, hystOnOverflow, hystOnGood);
  next.goodSteps = dsc::WhereOp::create(b, loc, overflow, c(0), goodOnGood);
  return next;
}

/// Step 3b, in @train_step: the scaler's state, the skip of a step whose
/// gradients overflowed, and the optimizer step that counts applied steps
/// only (DeepSpeed skips the optimizer and the LR scheduler together).
LogicalResult MixedPrecisionPass::addLossScaling(ModuleOp module,
                                                 func::FuncOp step,
                                                 func::FuncOp fb) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  Value fbScale;
  if (failed(scaleGradients(fb, fbScale)))
    return failure();
  Location loc = step.getLoc();
  auto scalarF32 = RankedTensorType::get({}, f32);
  auto scalarI64 = RankedTensorType::get({}, b.getI64Type());
  auto addState = [&](StringRef name, Type type) -> Value {
    unsigned index = step.getNumArguments();
    if (failed(step.insertArgument(index, type,
                                   b.getDictionaryAttr(b.getNamedAttr(
                                       "dsc.scaler", b.getStringAttr(name))),
                                   loc)))
      return Value();
    return step.getArgument(index);
  };
  bool dynamic = lossScale <= 0;
  ScalerState state;
  b.setInsertionPointToStart(&step.front());
  if (dynamic) {
    state.scale = addState("loss_scale", scalarF32);
    state.hysteresis = addState("hysteresis", scalarF32);
    state.goodSteps = addState("good_steps", scalarF32);
  } else {
    state.scale = dsc::scalarF32(b, loc, lossScale);
  }
  Value applied = addState("applied_steps", scalarI64);
  if (!applied || (dynamic && !state.goodSteps))
    return step.emitError("dsc-mixed-precision: cannot add the loss scaler's "
                          "state");

  // Calls pass the scale.
  SmallVector<func::CallOp> calls;
  step.walk([&](func::CallOp c) {
    if (c.getCallee() == fb.getSymName())
      calls.push_back(c);
  });
  for (func::CallOp c : calls) {
    SmallVector<Value> operands(c.getOperands());
    operands.push_back(state.scale);
    b.setInsertionPoint(c);
    auto nc = func::CallOp::create(b, c.getLoc(), fb.getSymName(),
                                   fb.getResultTypes(), operands);
    c.replaceAllUsesWith(nc.getResults());
    c.erase();
  }

  // The step's gradients are finite iff their global norm is (the norm is
  // already reduced over every rank): one flag, no extra collective.
  auto ret = cast<func::ReturnOp>(step.front().getTerminator());
  Value norm;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i)
    if (step.getResultAttr(i, "dsc.grad_norm"))
      norm = ret.getOperand(i);
  if (!norm)
    return step.emitError("dsc-mixed-precision: @train_step returns no "
                          "dsc.grad_norm; fp16 needs it to find overflows");
  b.setInsertionPoint(ret);
  Value finite = dsc::LessOp::create(
      b, loc, norm,
      dsc::scalarF32(b, loc, std::numeric_limits<double>::infinity()));

  // The optimizer and the schedule count applied steps: step = applied + 1.
  Value one = dsc::ConstantOp::create(
      b, loc, DenseElementsAttr::get(scalarI64, int64_t(1)));
  Value optStep = dsc::AddOp::create(b, loc, applied, one);
  Value stepArg;
  for (unsigned i = 0; i < step.getNumArguments(); ++i)
    if (step.getArgAttr(i, "dsc.step"))
      stepArg = step.getArgument(i);
  if (stepArg)
    for (OpOperand &u : llvm::make_early_inc_range(stepArg.getUses()))
      if (isa<dsc::AdamWOp, dsc::SgdOp, dsc::LrScheduleOp>(u.getOwner()))
        u.set(optStep);
  // Hoist what the updates now read above the first of them.
  Operation *firstUser = nullptr;
  for (Operation *user : optStep.getUsers())
    if (user != optStep.getDefiningOp() &&
        (!firstUser || user->isBeforeInBlock(firstUser)))
      firstUser = user;
  if (firstUser) {
    one.getDefiningOp()->moveBefore(firstUser);
    optStep.getDefiningOp()->moveBefore(firstUser);
  }

  // A skipped step keeps parameters and optimizer state.
  SmallVector<Value> results(ret.getOperands());
  for (unsigned i = 0; i < results.size(); ++i) {
    StringRef argAttr;
    StringAttr name;
    if ((name = step.getResultAttrOfType<StringAttr>(i, "dsc.param_update")))
      argAttr = "dsc.param";
    else if ((name = step.getResultAttrOfType<StringAttr>(
                  i, "dsc.opt_state_update")))
      argAttr = "dsc.opt_state";
    else
      continue;
    Value old = argumentNamed(step, argAttr, name.getValue());
    if (!old)
      return step.emitError("dsc-mixed-precision: no argument for result '")
             << name.getValue() << "'";
    results[i] = dsc::WhereOp::create(b, loc, finite, results[i], old);
  }
  SmallVector<Attribute> attrs;
  for (unsigned i = 0; i < step.getNumResults(); ++i)
    attrs.push_back(step.getResultAttrDict(i)
                        ? Attribute(step.getResultAttrDict(i))
                        : Attribute(b.getDictionaryAttr({})));
  auto named = [&](StringRef attr, Attribute v) {
    return b.getDictionaryAttr(b.getNamedAttr(attr, v));
  };
  // The scaler's next state, the overflow flag, applied steps.
  if (dynamic) {
    ScalerState next = updateScaler(b, loc, finite, state, lossScaleWindow,
                                    hysteresis, minLossScale);
    for (auto [v, n] : {std::pair{next.scale, "loss_scale"},
                        std::pair{next.hysteresis, "hysteresis"},
                        std::pair{next.goodSteps, "good_steps"}}) {
      results.push_back(v);
      attrs.push_back(named("dsc.scaler_update", b.getStringAttr(n)));
    }
  }
  Value appliedNext = dsc::AddOp::create(
      b, loc, applied,
      dsc::CastOp::create(b, loc, finite, TypeAttr::get(b.getI64Type())));
  results.push_back(appliedNext);
  attrs.push_back(named("dsc.scaler_update", b.getStringAttr("applied_steps")));
  Value overflow = dsc::CastOp::create(
      b, loc, dsc::NotOp::create(b, loc, finite), TypeAttr::get(f32));
  results.push_back(overflow);
  attrs.push_back(named("dsc.overflow", b.getUnitAttr()));
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  step.setType(FunctionType::get(ctx, step.front().getArgumentTypes(),
                                 TypeRange(ValueRange(results))));
  step.setAllResultAttrs(attrs);

  // What the program needs to start the scaler and to report it.
  module->setAttr(
      "dsc.loss_scaler",
      b.getDictionaryAttr(
          {b.getNamedAttr("dynamic", b.getBoolAttr(dynamic)),
           b.getNamedAttr(
               "initial_scale",
               b.getF64FloatAttr(dynamic ? std::ldexp(1.0, initialScalePower)
                                         : double(lossScale))),
           b.getNamedAttr("window", b.getI64IntegerAttr(lossScaleWindow)),
           b.getNamedAttr("hysteresis", b.getI64IntegerAttr(hysteresis)),
           b.getNamedAttr("min_scale", b.getF64FloatAttr(minLossScale))}));
  return success();
}

void MixedPrecisionPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  f32 = Float32Type::get(ctx);
  if (gradReduceDtype != "fp32" && gradReduceDtype != "bf16") {
    module.emitError("dsc-mixed-precision: grad-reduce-dtype must be fp32 or "
                     "bf16, not '")
        << gradReduceDtype << "'";
    return signalPassFailure();
  }
  if (precision == "bf16")
    low = BFloat16Type::get(ctx);
  else if (precision == "fp16")
    low = Float16Type::get(ctx);
  else if (precision != "fp32") {
    module.emitError("dsc-mixed-precision: precision must be bf16, fp16 or "
                     "fp32, not '")
        << precision << "'";
    return signalPassFailure();
  }
  if (precision == "fp32" && gradReduceDtype == "fp32")
    return; // fp32 programs stay exactly as they are
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  auto fb = module.lookupSymbol<func::FuncOp>("forward_backward");
  if (!step || !fb) {
    module.emitError("dsc-mixed-precision: needs @train_step and "
                     "@forward_backward; run dsc-optimizer first");
    return signalPassFailure();
  }
  if (module->hasAttr("dsc.precision")) {
    module.emitError("dsc-mixed-precision: the module is already in ")
        << module->getAttr("dsc.precision");
    return signalPassFailure();
  }

  SmallVector<unsigned> copied;
  if (low) {
    // 1. Parameters enter @forward_backward as 16-bit compute copies.
    copied = lowerArguments(fb);
    // 2. Every op in its class's precision; fp32 results.
    retypeOps(fb);
    castResults(fb);
    recomputeCastsForBackward(fb);
    keepLowForBackward(fb);
    makeComputeCopies(step, fb, copied);
    // 3. fp16: loss scaling.
    if (precision == "fp16" && failed(addLossScaling(module, step, fb)))
      return signalPassFailure();
  }
  // 4. Optionally, gradients reduced over ranks in bf16.
  if (gradReduceDtype == "bf16") {
    lowerGradientReductions(fb, BFloat16Type::get(ctx));
    lowerGradientReductions(step, BFloat16Type::get(ctx));
  }
  module->setAttr("dsc.precision", StringAttr::get(ctx, precision));
  if (gradReduceDtype != "fp32")
    module->setAttr("dsc.grad_reduce_dtype",
                    StringAttr::get(ctx, gradReduceDtype));
  LLVM_DEBUG(llvm::dbgs() << "dsc-mixed-precision: " << copied.size()
                          << " compute copies, " << lowered.size()
                          << " 16-bit values\n");
}

} // namespace
