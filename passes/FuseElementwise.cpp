//===- FuseElementwise.cpp - elementwise chains as dsc.fused ops ----------===//
//
// dsc-fuse-elementwise (Passes.td): the casts beside layer norms folded
// into them (the norm kernels read and write 16 bits) and rotate_half moved
// onto what the chains read from memory (RotateHalfSinker), then in two steps
// per function, as upstream fusion passes do: find the chains (analysis: which
// ops, which values come from memory, which are written), then build one
// dsc.fused op per chain where its last op stood and erase the chain
// (rewrite); last, the widening casts no chain took folded into the
// products they read (a GEMM that writes f32).
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/CallInterfaces.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace dsc {
#define GEN_PASS_DEF_DSCFUSEELEMENTWISE
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

RankedTensorType typeOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}
bool isF32(Value v) {
  auto t = typeOf(v);
  return t && t.getElementType().isF32();
}
bool isBool(Value v) {
  auto t = typeOf(v);
  return t && t.getElementType().isInteger(1);
}
bool isHalf(Value v) {
  auto t = typeOf(v);
  return t && (t.getElementType().isBF16() || t.getElementType().isF16());
}
bool isF32OrBool(Value v) { return isF32(v) || isBool(v); }

/// Whether `c` widens a product (a matmul, a weight-gradient GEMM) that
/// only it reads, for an add onto a running sum (dsc-accumulate-in-call's
/// dsc.accumulator argument). Step 3 folds such a cast into the GEMM (an
/// f32 epilogue), as it does where a one-call step returns the gradient:
/// the micro-batch's gradient is summed unrounded, and K micro-batches give
/// what one does; taken by a chain, it would be rounded to 16 bits first.
bool widensProductForSum(dsc::CastOp c) {
  auto product = dyn_cast<OpResult>(c.getInput());
  if (!product || product.getResultNumber() != 0 || !product.hasOneUse() ||
      !isa<dsc::MatMulOp, dsc::MatMulBiasGradOp>(product.getOwner()) ||
      !c.getResult().hasOneUse())
    return false;
  auto add = dyn_cast<dsc::AddOp>(*c.getResult().user_begin());
  if (!add)
    return false;
  auto fn = add->getParentOfType<func::FuncOp>();
  return llvm::any_of(add->getOperands(), [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && fn && arg.getOwner() == &fn.getBody().front() &&
           fn.getArgAttr(arg.getArgNumber(), "dsc.accumulator");
  });
}

/// What a generated elementwise kernel computes (in float or bool
/// registers; 16-bit floats are loaded and stored through casts).
bool isFusible(Operation *op) {
  // Host ops (dsc-offload) run on the CPU, not in a generated kernel.
  if (op->getNumResults() != 1 || op->getNumRegions() || !isPure(op) ||
      op->hasAttr("dsc.on_host"))
    return false;
  Value r = op->getResult(0);
  // Read from memory at the partner element (dsc.fused): never of a value
  // the chain computes (findChains), over an even last dim.
  if (isa<dsc::RotateHalfOp>(op)) {
    auto t = typeOf(r);
    return (isF32(r) || isHalf(r)) && t.hasStaticShape() && t.getRank() > 0 &&
           t.getShape().back() % 2 == 0;
  }
  if (auto c = dyn_cast<dsc::CastOp>(op)) {
    if (widensProductForSum(c))
      return false;
    Value in = c.getInput();
    bool halfCast = (isF32(in) && isHalf(r)) || (isHalf(in) && isF32(r));
    return halfCast || (isF32OrBool(in) && isF32OrBool(r));
  }
  if (!llvm::all_of(op->getOperands(), isF32OrBool) || !isF32OrBool(r))
    return false;
  if (isa<dsc::NotOp>(op))
    return isBool(r) && isBool(op->getOperand(0));
  if (isa<dsc::NegOp, dsc::AbsOp, dsc::ExpOp, dsc::LogOp, dsc::SqrtOp,
          dsc::ReciprocalOp, dsc::TanhOp, dsc::ErfOp, dsc::SigmoidOp,
          dsc::ReluOp, dsc::FloorOp, dsc::CeilOp, dsc::SinOp, dsc::CosOp,
          dsc::SoftplusOp, dsc::GeluOp, dsc::LeakyReluOp>(op))
    return isF32(r) && isF32(op->getOperand(0));
  if (isa<dsc::AddOp, dsc::SubOp, dsc::MulOp, dsc::DivOp, dsc::PowOp,
          dsc::MaxOp, dsc::MinOp, dsc::SwigluOp>(op))
    return llvm::all_of(op->getOperands(), isF32) && isF32(r);
  if (isa<dsc::EqualOp, dsc::LessOp, dsc::LessEqualOp, dsc::GreaterOp,
          dsc::GreaterEqualOp>(op))
    return isBool(r) && (llvm::all_of(op->getOperands(), isF32) ||
                         (isa<dsc::EqualOp>(op) &&
                          llvm::all_of(op->getOperands(), isBool)));
  if (isa<dsc::AndOp, dsc::OrOp, dsc::XorOp>(op))
    return isBool(r) && llvm::all_of(op->getOperands(), isBool);
  if (auto w = dyn_cast<dsc::WhereOp>(op))
    return isBool(w.getCond()) && isF32(w.getX()) && isF32(w.getY()) &&
           isF32(r);
  return false;
}

/// A splat f32 or bool constant: copied into the body, not read.
bool isSplatConstant(Value v) {
  auto c = v.getDefiningOp<dsc::ConstantOp>();
  auto attr = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
  return attr && attr.isSplat() && isF32OrBool(v);
}

/// One chain: its ops in block order and the values it writes (used
/// outside it). What it reads is taken when it is fused (inputsOf): an
/// earlier chain's fusion replaces the values it read.
struct Chain {
  SmallVector<Operation *> ops;
  SmallVector<Value> outputs;
};

/// The values `ops` read from memory, in first-use order: operands defined
/// outside them, splat constants aside (copied into the body).
llvm::SetVector<Value> inputsOf(ArrayRef<Operation *> ops) {
  llvm::DenseSet<Operation *> in(ops.begin(), ops.end());
  llvm::SetVector<Value> inputs;
  for (Operation *op : ops)
    for (Value v : op->getOperands())
      if (!in.contains(v.getDefiningOp()) && !isSplatConstant(v))
        inputs.insert(v);
  return inputs;
}

/// Step 1: the chains of `block` (two ops or more, with an output).
std::vector<Chain> findChains(Block &block) {
  struct Open {
    SmallVector<Operation *> ops;
    ArrayRef<int64_t> shape;
    bool open = true;
  };
  std::vector<Open> groups;
  llvm::DenseMap<Operation *, unsigned> member;
  for (Operation &opRef : block) {
    Operation *op = &opRef;
    // A released value (a stage-3 bucket) must be read before its release:
    // a chain that reads it ends here.
    if (auto release = dyn_cast<dsc::ReleaseOp>(op)) {
      for (Value v : release.getValues())
        for (Operation *user : v.getUsers())
          if (auto it = member.find(user); it != member.end())
            groups[it->second].open = false;
      continue;
    }
    // A call (the step's @forward_backward, once per micro-batch) closes
    // every chain: one that went on past it would be fused after it, and
    // what the chain read before the call would live through the call (a
    // gradient accumulation's sums, fused after the last micro-batch, held
    // every micro-batch's gradients at once).
    if (isa<CallOpInterface>(op)) {
      for (Open &g : groups)
        g.open = false;
      continue;
    }
    std::optional<unsigned> join;
    bool canFuse = isFusible(op);
    // A rotate_half reads its input from memory: it starts a chain of its
    // own and closes the one that computes its input (below).
    if (canFuse && !isa<dsc::RotateHalfOp>(op)) {
      // The op joins the first open chain of its shape it reads from, and
      // merges the other open ones it reads into it: none of their values
      // has been used outside yet, so one kernel at this op computes all.
      ArrayRef<int64_t> shape = typeOf(op->getResult(0)).getShape();
      for (Value v : op->getOperands()) {
        auto it = member.find(v.getDefiningOp());
        if (it == member.end() || !groups[it->second].open ||
            groups[it->second].shape != shape)
          continue;
        unsigned g = it->second;
        if (!join) {
          join = g;
        } else if (g != *join) {
          for (Operation *moved : groups[g].ops) {
            groups[*join].ops.push_back(moved);
            member[moved] = *join;
          }
          groups[g].ops.clear();
          groups[g].open = false;
        }
      }
      if (join)
        llvm::sort(groups[*join].ops, [](Operation *a, Operation *b) {
          return a->isBeforeInBlock(b);
        });
    }
    // Every other chain this op reads from has now been used outside:
    // closed, so its values are written before this op runs.
    for (Value v : op->getOperands()) {
      auto it = member.find(v.getDefiningOp());
      if (it != member.end() && (!join || it->second != *join))
        groups[it->second].open = false;
    }
    if (!canFuse)
      continue;
    if (!join) {
      join = groups.size();
      groups.push_back({{}, typeOf(op->getResult(0)).getShape(), true});
    }
    groups[*join].ops.push_back(op);
    member[op] = *join;
  }

  std::vector<Chain> chains;
  for (Open &g : groups) {
    if (g.ops.size() < 2)
      continue;
    Chain c;
    c.ops = g.ops;
    llvm::DenseSet<Operation *> in(g.ops.begin(), g.ops.end());
    for (Operation *op : g.ops) {
      Value r = op->getResult(0);
      if (llvm::any_of(r.getUsers(),
                       [&](Operation *user) { return !in.contains(user); }))
        c.outputs.push_back(r);
    }
    if (!c.outputs.empty()) // else nothing of it is used: dead code
      chains.push_back(std::move(c));
  }
  return chains;
}

/// The bytes of the tensor values `vs`.
int64_t bytesOf(ArrayRef<Value> vs) {
  int64_t n = 0;
  for (Value v : vs)
    if (auto t = typeOf(v))
      n += t.getNumElements() *
           std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
  return n;
}

/// A chain `b` that reads outputs of an earlier chain `a` of its shape,
/// where `a` was closed before `b` by another reader `closer` (a GEMM
/// between a gradient's two elementwise halves, as autodiff orders a
/// SwiGLU's backward: the up projection's matmuls between its two
/// products): `b` moves right before `closer` when everything else it
/// reads is ready there, so that it joins `a` and what it read of `a` is
/// never written. Only when that saves bytes: `b`'s outputs then live
/// from `closer` on, where the values it spares lived from `a` to `b`.
struct Pull {
  unsigned chain;    // b, by index
  Operation *closer; // where it goes
};

std::optional<Pull> findPull(ArrayRef<Chain> chains) {
  llvm::DenseMap<Operation *, unsigned> chainOf;
  for (auto [i, c] : llvm::enumerate(chains))
    for (Operation *op : c.ops)
      chainOf[op] = i;
  auto shapeOf = [](const Chain &c) {
    return typeOf(c.ops.back()->getResult(0)).getShape();
  };
  for (auto [bi, b] : llvm::enumerate(chains)) {
    llvm::SetVector<Value> inputs = inputsOf(b.ops);
    llvm::SetVector<unsigned> sources; // the other chains `b` reads
    for (Value v : inputs)
      if (auto it = chainOf.find(v.getDefiningOp());
          it != chainOf.end() && it->second != bi)
        sources.insert(it->second);
    llvm::DenseSet<Operation *> inB(b.ops.begin(), b.ops.end());
    for (unsigned ai : sources) {
      const Chain &a = chains[ai];
      if (shapeOf(a) != shapeOf(b))
        continue;
      // The first reader of `a` outside it and `b`.
      llvm::DenseSet<Operation *> inA(a.ops.begin(), a.ops.end());
      Operation *closer = nullptr;
      for (Value out : a.outputs)
        for (Operation *user : out.getUsers())
          if (!inA.contains(user) && !inB.contains(user) &&
              user->getBlock() == b.ops.front()->getBlock() &&
              (!closer || user->isBeforeInBlock(closer)))
            closer = user;
      if (!closer || !closer->isBeforeInBlock(b.ops.front()) ||
          isa<dsc::ReleaseOp>(closer))
        continue;
      // Everything else `b` reads is ready at `closer`.
      bool ready = llvm::all_of(inputs, [&](Value in) {
        Operation *def = in.getDefiningOp();
        return !def || inA.contains(def) || def->isBeforeInBlock(closer);
      });
      // `a`'s values that only `b` reads are spared.
      SmallVector<Value> spared;
      for (Value out : a.outputs)
        if (llvm::all_of(out.getUsers(), [&](Operation *user) {
              return inA.contains(user) || inB.contains(user);
            }))
          spared.push_back(out);
      if (ready && !spared.empty() && bytesOf(spared) >= bytesOf(b.outputs))
        return Pull{unsigned(bi), closer};
    }
  }
  return std::nullopt;
}

/// Step 1b: pull chains up into the chains they read (findPull), one at
/// a time, until none moves.
void pullChainsUp(Block &block) {
  for (unsigned round = 0; round < 4096; ++round) {
    std::vector<Chain> chains = findChains(block);
    std::optional<Pull> pull = findPull(chains);
    if (!pull)
      return;
    for (Operation *op : chains[pull->chain].ops)
      op->moveBefore(pull->closer);
  }
}

/// Step 2: the chain as one dsc.fused op where its last op stood (with
/// the widening casts of what it reads that no chain holds, `chained`). Its
/// inputs are read off the ops now, not at step 1: a chain fused before may
/// have replaced a value this one reads (its ops read the fused op's result
/// since), and the erased op's Value must not be looked at again — its
/// storage may already hold the fused op created since, whose result would
/// then alias another input.
LogicalResult fuse(const Chain &c, const llvm::DenseSet<Operation *> &chained) {
  Operation *last = c.ops.back();
  OpBuilder b(last);
  SmallVector<Location> locs;
  for (Operation *op : c.ops)
    locs.push_back(op->getLoc());
  SmallVector<Type> types;
  for (Value v : c.outputs)
    types.push_back(v.getType());
  // A 16-bit value the chain reads widened by a cast outside it (a bias
  // or a norm weight widened from its compute copy: a shape of its own, so
  // no chain took the cast) is read as it is and widened in registers,
  // exactly as the cast widens it; the cast goes when nothing else reads it.
  SmallVector<Operation *> widen;
  for (Value v : inputsOf(c.ops))
    if (auto cast = v.getDefiningOp<dsc::CastOp>();
        cast && isHalf(cast.getInput()) && isF32(v) &&
        !cast->hasAttr("dsc.on_host") && !chained.contains(cast))
      widen.push_back(cast);
  SmallVector<Operation *> ops(widen.begin(), widen.end());
  ops.append(c.ops.begin(), c.ops.end());
  llvm::SetVector<Value> inputs = inputsOf(ops);
  auto fused = dsc::FusedOp::create(b, FusedLoc::get(b.getContext(), locs),
                                    types, b.getStringAttr("elementwise"),
                                    inputs.getArrayRef());
  Block *body = new Block();
  fused.getBody().push_back(body);
  IRMapping map;
  for (Value v : inputs)
    map.map(v, body->addArgument(v.getType(), v.getLoc()));
  OpBuilder inner = OpBuilder::atBlockEnd(body);
  for (Operation *op : ops) {
    for (Value v : op->getOperands())
      if (!map.contains(v) && isSplatConstant(v))
        map.map(v, inner.clone(*v.getDefiningOp())->getResult(0));
    inner.clone(*op, map);
  }
  SmallVector<Value> yielded;
  for (Value v : c.outputs)
    yielded.push_back(map.lookup(v));
  dsc::YieldOp::create(inner, last->getLoc(), yielded);
  // Every input is read by one of the chain's ops: an unread argument means
  // two inputs were confused (the aliasing above), a wrong kernel.
  for (BlockArgument arg : body->getArguments())
    if (arg.use_empty())
      return fused.emitError("dsc-fuse-elementwise: internal error: input ")
             << arg.getArgNumber() << " of the fused chain is never read";
  for (auto [k, v] : llvm::enumerate(c.outputs))
    Value(v).replaceAllUsesWith(fused.getResult(k));
  for (Operation *op : llvm::reverse(c.ops))
    op->erase();
  for (Operation *cast : widen)
    if (cast->use_empty())
      cast->erase();
  return success();
}

/// Step 0: casts folded into the layer norms beside them, an exact
/// rewrite (the target's norm kernels read and write 16 bits as the casts
/// would): a norm whose only reader is a cast of its f32 result to 16 bits
/// writes the 16-bit value, and a norm backward reads a 16-bit input
/// rather than its f32 widening. Two launches and an f32 copy less each.
void foldNormCasts(Block &block) {
  SmallVector<Operation *> dead;
  for (Operation &op : block) {
    if (auto ln = dyn_cast<dsc::LayerNormOp>(&op)) {
      Value y = ln.getResult();
      if (!isF32(y) || !y.hasOneUse())
        continue;
      auto c = dyn_cast<dsc::CastOp>(*y.user_begin());
      if (!c || !isHalf(c.getResult()) || c->getBlock() != &block)
        continue;
      y.setType(c.getType());
      c.getResult().replaceAllUsesWith(y);
      dead.push_back(c);
    } else if (auto back = dyn_cast<dsc::LayerNormBackwardOp>(&op)) {
      auto c = back.getInput().getDefiningOp<dsc::CastOp>();
      if (!c || !isF32(back.getGrad()) || !isHalf(c.getInput()) ||
          !isF32(c.getResult()))
        continue;
      back.getInputMutable().assign(c.getInput());
      if (c->use_empty())
        dead.push_back(c);
    }
  }
  for (Operation *op : dead)
    op->erase();
}

/// Step 0b: rotate_half moved onto what the chains read from memory, an
/// exact rewrite (a move and a sign flip commute with elementwise math):
///
///   rotate_half(neg x)   -> neg(rotate_half x)
///   rotate_half(cast x)  -> cast(rotate_half x)
///   rotate_half(x * b)   -> rotate_half(x) * swap(b)   (b broadcast)
///
/// where swap(b) exchanges b's halves: b itself when its last dim is 1, else
/// rotate_half(b) * [-1 .. -1, 1 .. 1], one small tensor per b. A
/// rotate_half of a value in memory then joins the chain that reads it
/// (findChains): the fused kernel reads the partner element instead of a
/// kernel writing a rotated copy. Rotary's gradient,
/// rotate_half(-(g * sin)) + g * cos, becomes one kernel over g instead of
/// three that wrote two f32 copies of it.
class RotateHalfSinker {
public:
  explicit RotateHalfSinker(Block &block) : block(block) {}

  void run() {
    SmallVector<dsc::RotateHalfOp> work;
    for (auto rh : block.getOps<dsc::RotateHalfOp>())
      work.push_back(rh);
    while (!work.empty()) {
      dsc::RotateHalfOp rh = work.pop_back_val();
      if (std::optional<dsc::RotateHalfOp> next = sinkOnce(rh))
        work.push_back(*next);
    }
  }

private:
  /// The rewrite of `rh` through the op that defines its input, if one
  /// applies; returns the new rotate_half (one step nearer memory).
  std::optional<dsc::RotateHalfOp> sinkOnce(dsc::RotateHalfOp rh) {
    Operation *def = rh.getInput().getDefiningOp();
    if (!def || def->getBlock() != &block || def->getNumResults() != 1 ||
        def->hasAttr("dsc.on_host"))
      return std::nullopt;
    unsigned through = 0; // the operand the rotation moves onto
    Value swapped;        // the other factor's swap, for a product
    if (auto c = dyn_cast<dsc::CastOp>(def)) {
      if (!(isHalf(c.getInput()) || isF32(c.getInput())) ||
          !(isHalf(c.getResult()) || isF32(c.getResult())))
        return std::nullopt;
    } else if (isa<dsc::MulOp>(def)) {
      std::optional<unsigned> big = broadcastFactor(def);
      if (!big)
        return std::nullopt;
      through = *big;
      swapped = swapOf(def->getOperand(1 - through));
      if (!swapped)
        return std::nullopt;
    } else if (!isa<dsc::NegOp>(def)) {
      return std::nullopt;
    }
    OpBuilder b(rh);
    auto moved =
        dsc::RotateHalfOp::create(b, rh.getLoc(), def->getOperand(through));
    dsc::copyMarkers(rh, moved);
    Operation *outer = b.clone(*def);
    outer->setOperand(through, moved.getResult());
    if (swapped)
      outer->setOperand(1 - through, swapped);
    rh.getResult().replaceAllUsesWith(outer->getResult(0));
    rh.erase();
    if (def->use_empty())
      def->erase();
    return moved;
  }

  /// The operand of a two-operand product that has the product's shape
  /// while the other is broadcast to it (fewer elements, f32): the operand
  /// the rotation moves onto.
  static std::optional<unsigned> broadcastFactor(Operation *mul) {
    auto r = typeOf(mul->getResult(0));
    for (unsigned k = 0; k < 2; ++k) {
      auto big = typeOf(mul->getOperand(k)),
           small = typeOf(mul->getOperand(1 - k));
      if (big && small && r && big == r && isF32(mul->getOperand(1 - k)) &&
          small.hasStaticShape() && small.getNumElements() < r.getNumElements())
        return k;
    }
    return std::nullopt;
  }

  /// b with its last dim's halves exchanged (broadcast over the product's
  /// last dim when b's is 1), built once per b right after it.
  Value swapOf(Value v) {
    auto t = typeOf(v);
    if (!t || t.getRank() == 0 || t.getShape().back() == 1)
      return v;
    int64_t d = t.getShape().back();
    if (d % 2 != 0)
      return nullptr;
    if (Value known = swaps.lookup(v))
      return known;
    OpBuilder b(v.getContext());
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&block);
    SmallVector<float> sign(d, 1.f);
    std::fill(sign.begin(), sign.begin() + d / 2, -1.f);
    auto signType = RankedTensorType::get({d}, b.getF32Type());
    Value signs = dsc::ConstantOp::create(
        b, v.getLoc(), DenseElementsAttr::get(signType, ArrayRef(sign)));
    Value rotated = dsc::RotateHalfOp::create(b, v.getLoc(), v);
    Value swap = dsc::MulOp::create(b, v.getLoc(), rotated, signs);
    swaps[v] = swap;
    return swap;
  }

  Block &block;
  llvm::DenseMap<Value, Value> swaps;
};

/// Step 3: a widening cast left alone after fusion (no chain took it) of a
/// product read by nothing else becomes the product's epilogue: the GEMM
/// writes its f32 accumulator instead of rounding it to 16 bits, and no
/// cast kernel reads it back (a weight gradient, the input gradient a norm
/// backward reads in f32). One launch and a 16-bit copy less, and the
/// value more exact than before (MatMulOp in DscOps.td). A cast that
/// dsc-mixed-precision marked for recomputation stays: the product would
/// then be kept in f32 for backward. So does a product dsc-recompute cloned
/// (dsc.recomputed) and its original: the two must stay the same bits, and
/// one of them may have other readers. Every other product folds as it
/// does without recomputation, so a recomputing step computes what the
/// plain step does, bit for bit.
void foldProductCasts(Block &block,
                      const llvm::DenseSet<Operation *> &twinned) {
  SmallVector<Operation *> dead;
  for (Operation &op : block) {
    auto c = dyn_cast<dsc::CastOp>(&op);
    if (!c || !isHalf(c.getInput()) || !isF32(c.getResult()) ||
        c->hasAttr("dsc.recompute"))
      continue;
    // A matmul, or the weight-gradient GEMM of a dsc.matmul_bias_grad.
    auto product = dyn_cast_or_null<OpResult>(c.getInput());
    if (!product || product.getResultNumber() != 0 ||
        !isa<dsc::MatMulOp, dsc::MatMulBiasGradOp>(product.getOwner()) ||
        product.getOwner()->getBlock() != &block || !product.hasOneUse() ||
        twinned.contains(product.getOwner()))
      continue;
    product.setType(c.getType());
    c.getResult().replaceAllUsesWith(product);
    dead.push_back(c);
  }
  for (Operation *op : dead)
    op->erase();
}

/// The products (matmuls, weight-gradient GEMMs) dsc-recompute cloned and
/// their originals, found before fusion: a clone's operands may become
/// fused chains, which no longer carry the recomputation's marker.
llvm::DenseSet<Operation *> twinnedProducts(Block &block) {
  SmallVector<Operation *> products, clones;
  for (Operation &op : block) {
    if (!isa<dsc::MatMulOp, dsc::MatMulBiasGradOp>(op))
      continue;
    (op.hasAttr("dsc.recomputed") ? clones : products).push_back(&op);
  }
  llvm::DenseSet<Operation *> twinned(clones.begin(), clones.end());
  for (Operation *p : products)
    if (llvm::any_of(clones, [&](Operation *c) {
          return dsc::sameOrRecomputed(p->getResult(0), c->getResult(0));
        }))
      twinned.insert(p);
  return twinned;
}

struct FuseElementwise
    : dsc::impl::DscFuseElementwiseBase<FuseElementwise> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<dsc::TargetDescription> target =
        dsc::TargetDescription::of(module);
    if (failed(target))
      return signalPassFailure();
    if (!target->generatedKernels)
      return;
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      Block &block = fn.getBody().front();
      llvm::DenseSet<Operation *> twinned = twinnedProducts(block);
      foldNormCasts(block);
      RotateHalfSinker(block).run();
      pullChainsUp(block);
      std::vector<Chain> chains = findChains(block);
      llvm::DenseSet<Operation *> chained;
      for (const Chain &c : chains)
        chained.insert(c.ops.begin(), c.ops.end());
      for (const Chain &c : chains)
        if (failed(fuse(c, chained)))
          return signalPassFailure();
      foldProductCasts(block, twinned);
    }
  }
};

} // namespace
