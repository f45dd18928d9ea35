//===- StepMath.cpp - IR pieces the training-step passes share ------------===//
#include "passes/StepMath.h"
#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;

namespace dsc {

Value scalarF32(OpBuilder &b, Location loc, double v) {
  auto t = RankedTensorType::get({}, b.getF32Type());
  return ConstantOp::create(
      b, loc, SplatElementsAttr::get(t, b.getF32FloatAttr((float)v)));
}

/// sum(v * v) in v's own type, as tensor<f32>: the per-tensor path of the
/// 16-bit types, which dsc.sum_squares does not take.
static Value sumOfSquaresOne(OpBuilder &b, Location loc, Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> axes;
  for (int64_t d = 0; d < t.getRank(); ++d)
    axes.push_back(d);
  Value s = MulOp::create(b, loc, v, v);
  if (!axes.empty())
    s = ReduceSumOp::create(b, loc, s, b.getDenseI64ArrayAttr(axes),
                            b.getBoolAttr(false));
  if (t.getElementType() != b.getF32Type())
    s = CastOp::create(b, loc, s, TypeAttr::get(b.getF32Type()));
  return s;
}

Value sumOfSquaresF32(OpBuilder &b, Location loc, ValueRange values) {
  SmallVector<Value> f32s, f64s;
  Value sum;
  auto accumulate = [&](Value s) {
    sum = sum ? AddOp::create(b, loc, sum, s).getResult() : s;
  };
  for (Value v : values) {
    Type e = cast<RankedTensorType>(v.getType()).getElementType();
    if (e.isF32())
      f32s.push_back(v);
    else if (e.isF64())
      f64s.push_back(v);
    else
      accumulate(sumOfSquaresOne(b, loc, v));
  }
  for (ArrayRef<Value> group : {ArrayRef<Value>(f32s), ArrayRef<Value>(f64s)})
    if (!group.empty())
      accumulate(SumSquaresOp::create(b, loc, scalarF32(b, loc, 1.0), group));
  return sum ? sum : scalarF32(b, loc, 0.0);
}

Value clipCoefficient(OpBuilder &b, Location loc, Value norm, Value clip) {
  Value one = scalarF32(b, loc, 1.0);
  Value coef = MinOp::create(
      b, loc, one,
      DivOp::create(b, loc, clip,
                    AddOp::create(b, loc, norm, scalarF32(b, loc, 1e-6))));
  Value on = GreaterOp::create(b, loc, clip, scalarF32(b, loc, 0.0));
  return WhereOp::create(b, loc, on, coef, one);
}

SmallVector<Operation *> storageReaders(Value v) {
  Block *body = v.getParentBlock();
  SmallVector<Operation *> readers;
  SmallVector<Value> worklist = {v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!worklist.empty()) {
    Value w = worklist.pop_back_val();
    for (Operation *user : w.getUsers()) {
      Operation *op = body->findAncestorOpInBlock(*user);
      if (!op || !seen.insert(op).second)
        continue;
      readers.push_back(op);
      if (isa<ReshapeOp, WaitOp, CollectiveInputOp>(op)) {
        worklist.append(op->result_begin(), op->result_end());
        continue;
      }
      for (Value r : op->getResults())
        for (Operation *wait : r.getUsers())
          if (isa<WaitOp>(wait) && seen.insert(wait).second)
            readers.push_back(wait);
    }
  }
  return readers;
}

SmallVector<CastOp> computeCopyCasts(ValueRange params, Operation *at,
                                     function_ref<bool(CastOp)> eligible) {
  SmallVector<CastOp> casts;
  for (Value param : params) {
    auto arg = dyn_cast<BlockArgument>(param);
    auto fn = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                  : func::FuncOp();
    if (!fn || !fn.getArgAttr(arg.getArgNumber(), "dsc.param"))
      return {};
    CastOp found;
    for (Operation *user : param.getUsers()) {
      auto c = dyn_cast<CastOp>(user);
      if (!c || !eligible(c))
        continue;
      if (found)
        return {};
      found = c;
    }
    // Its copy becomes the parameter's state, overwritten at `at`: nothing
    // may read it there or later.
    if (!found || found->getBlock() != at->getBlock() ||
        llvm::any_of(storageReaders(found.getResult()),
                     [&](Operation *r) { return !r->isBeforeInBlock(at); }))
      return {};
    casts.push_back(found);
  }
  return casts;
}

LogicalResult castsToState(func::FuncOp fn, ArrayRef<CastOp> casts,
                           ValueRange updates) {
  Operation *ret = fn.getBody().front().getTerminator();
  for (auto [cast0, update] : llvm::zip_equal(casts, updates)) {
    CastOp c = cast0;
    unsigned param = cast<BlockArgument>(c.getInput()).getArgNumber();
    auto name = fn.getArgAttrOfType<StringAttr>(param, "dsc.param");
    NamedAttrList argAttrs;
    argAttrs.set("dsc.compute_copy", name);
    unsigned a = fn.getNumArguments();
    if (failed(fn.insertArgument(a, c.getType(),
                                 argAttrs.getDictionary(fn.getContext()),
                                 c.getLoc())))
      return failure();
    c.getResult().replaceAllUsesWith(fn.getArgument(a));
    c.erase();
    NamedAttrList resultAttrs;
    resultAttrs.set("dsc.compute_copy_update", name);
    unsigned r = fn.getNumResults();
    if (failed(fn.insertResult(r, update.getType(),
                               resultAttrs.getDictionary(fn.getContext()))))
      return failure();
    ret->insertOperands(ret->getNumOperands(), update);
  }
  return success();
}

std::optional<double> splatFloat(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  auto attr = c ? dyn_cast<DenseFPElementsAttr>(c.getValue()) : nullptr;
  if (!attr || !attr.isSplat())
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

bool writesLaneByLane(Operation *op) {
  return isa<NegOp, AbsOp, ExpOp, LogOp, SqrtOp, ReciprocalOp, TanhOp, ErfOp,
             SigmoidOp, ReluOp, FloorOp, CeilOp, SinOp, CosOp, SoftplusOp,
             NotOp, LeakyReluOp, GeluOp, SwigluOp, ClipOp, AddOp, SubOp, MulOp,
             DivOp, PowOp, MaxOp, MinOp, AndOp, OrOp, XorOp, WhereOp>(op);
}

void eraseDeadOps(ModuleOp module) {
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(fn.getBody().front())))
      if (isa<DscDialect>(op.getDialect()) && isPure(&op) &&
          op.getNumResults() > 0 && op.use_empty())
        op.erase();
  }
}

int64_t optimizerElements(Operation *op) {
  ValueRange params;
  if (auto multi = dyn_cast<AdamWMultiOp>(op))
    params = multi.getTensors().take_front(multi.getTensors().size() / 4);
  else if (isa<AdamWOp, SgdOp>(op))
    params = op->getOperands().take_front(1);
  int64_t n = 0;
  for (Value v : params)
    n += cast<RankedTensorType>(v.getType()).getNumElements();
  return n;
}

Value storageRoot(Value v) {
  while (auto r = v.getDefiningOp<ReshapeOp>())
    v = r.getInput();
  return v;
}

bool sameOrRecomputed(Value v, Value copy, unsigned depth) {
  v = storageRoot(v);
  copy = storageRoot(copy);
  if (v == copy)
    return true;
  Operation *a = v.getDefiningOp(), *b = copy.getDefiningOp();
  if (!a || !b || depth > 64 || !b->hasAttr("dsc.recomputed") ||
      a->getName() != b->getName() ||
      a->getNumOperands() != b->getNumOperands() || a->getNumRegions() != 0 ||
      b->getNumRegions() != 0 || a->getResultTypes() != b->getResultTypes() ||
      cast<OpResult>(v).getResultNumber() !=
          cast<OpResult>(copy).getResultNumber())
    return false;
  NamedAttrList attrs(b->getAttrDictionary());
  attrs.erase("dsc.recomputed");
  if (attrs.getDictionary(a->getContext()) != a->getAttrDictionary())
    return false;
  for (auto [x, y] : llvm::zip(a->getOperands(), b->getOperands()))
    if (x != y && !sameOrRecomputed(x, y, depth + 1))
      return false;
  return true;
}

void inlineStepCall(func::CallOp call) {
  auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
      call, call.getCalleeAttr());
  Block &body = callee.getBody().front();
  IRMapping map;
  map.map(body.getArguments(), call.getOperands());
  OpBuilder b(call);
  for (Operation &op : body.without_terminator())
    b.clone(op, map);
  for (auto [result, returned] :
       llvm::zip(call.getResults(), body.getTerminator()->getOperands()))
    result.replaceAllUsesWith(map.lookupOrDefault(returned));
  call->getParentOp()->setAttr("dsc.rng_call", b.getI64IntegerAttr(1));
  call.erase();
}

SmallVector<func::CallOp> callsOf(func::FuncOp f, ModuleOp module) {
  SmallVector<func::CallOp> calls;
  std::optional<SymbolTable::UseRange> uses =
      SymbolTable::getSymbolUses(f, module);
  if (!uses)
    return {};
  for (const SymbolTable::SymbolUse &use : *uses) {
    auto call = dyn_cast<func::CallOp>(use.getUser());
    if (!call)
      return {};
    calls.push_back(call);
  }
  return calls;
}

std::optional<unsigned> summedCallResult(Value sum,
                                         MutableArrayRef<func::CallOp> calls) {
  std::optional<unsigned> index;
  for (size_t k = calls.size(); k-- > 0;) {
    Value leaf = sum;
    if (k > 0) {
      auto add = sum.getDefiningOp<AddOp>();
      if (!add)
        return std::nullopt;
      leaf = add.getRhs();
      sum = add.getLhs();
    }
    auto r = dyn_cast<OpResult>(leaf);
    if (!r || r.getOwner() != calls[k].getOperation() ||
        (index && *index != r.getResultNumber()))
      return std::nullopt;
    index = r.getResultNumber();
  }
  return index;
}

} // namespace dsc
