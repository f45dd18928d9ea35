//===- FuseAttention.cpp - attention subgraphs become dsc.attention -------===//
//
// Every exporter writes attention as matmul -> scale -> mask -> softmax ->
// matmul, in its own dialect of ops: nanoGPT's masked_fill, the legacy
// exporter's SDPA (q and k each scaled by sqrt(scale), a folded causal mask
// added), HF's sdpa path (the IsNaN/Where guard for fully masked rows),
// GQA's repeat_kv (reshape/expand/reshape), multi-query keys and values of
// one head that the matmuls broadcast (Falcon), Mistral's sliding window,
// BERT's padding mask from its attention_mask input. This pass recognizes them
// on the imported forward function and replaces each by one dsc.attention, so
// no [B, H, T, T] score or probability tensor is computed or kept for
// backward.
//
// It is an optimization, never a change of result: a chain matches only when
// it computes softmax(scale * q k^T + mask) v with the softmax over the keys;
// a constant mask becomes `causal` / `window` only when it is exactly that
// pattern (0 where kept, <= -1e30 where masked), else it stays an operand.
//
// Steps: (1) match, from each softmax, the probabilities' consumer and the
// scores' producers into an AttentionMatch; (2) analyze the mask terms;
// (3) rewrite.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/bit.h"

#include <cmath>
#include <map>
#include <optional>

namespace dsc {
#define GEN_PASS_DEF_DSCFUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

using Shape = SmallVector<int64_t>;

RankedTensorType typeOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// A scalar float constant (any shape of one element), as a double.
std::optional<double> scalarConstant(Value v) {
  auto c = v.getDefiningOp<dsc::ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || dense.getNumElements() != 1 ||
      !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return (*dense.getValues<APFloat>().begin()).convertToDouble();
}

/// `x op c` where c is a scalar constant that leaves x's shape as it is.
std::optional<std::pair<Value, double>> scaledBy(Value v) {
  Operation *op = v.getDefiningOp();
  if (!op || !isa<dsc::MulOp, dsc::DivOp>(op))
    return std::nullopt;
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  auto factor = [&](Value x, Value c) -> std::optional<std::pair<Value, double>> {
    std::optional<double> s = scalarConstant(c);
    if (!s || typeOf(x).getShape() != typeOf(v).getShape() ||
        typeOf(c).getRank() > typeOf(x).getRank())
      return std::nullopt;
    if (isa<dsc::DivOp>(op))
      return std::make_pair(x, 1.0 / *s);
    return std::make_pair(x, *s);
  };
  if (auto r = factor(lhs, rhs))
    return r;
  if (isa<dsc::MulOp>(op))
    return factor(rhs, lhs);
  return std::nullopt;
}

/// One additive term of the mask: `value * factor` (value broadcasts to the
/// scores), or, for a boolean term, where(value, 0, fill) * factor.
struct MaskTerm {
  Value value;
  double factor = 1.0;
  std::optional<double> fill; // set: value is i1, kept where true
  bool negate = false;        // i1 kept where false
};

struct AttentionMatch {
  dsc::MatMulOp root; // probabilities x value
  Value query, keyT, value;
  double scale = 1.0;
  SmallVector<MaskTerm> masks;
  double dropout = 0.0;
};

//===----------------------------------------------------------------------===//
// Step 1: matching
//===----------------------------------------------------------------------===//

/// Peels the IsNaN guard HF's sdpa export writes after the softmax:
/// where(not(equal(p, p)), 0, p) is p for every p the softmax gives but NaN.
Value peelNaNGuard(Value p) {
  for (Operation *user : p.getUsers()) {
    auto w = dyn_cast<dsc::WhereOp>(user);
    if (!w || w.getY() != p || typeOf(w.getResult()) != typeOf(p))
      continue;
    auto n = w.getCond().getDefiningOp<dsc::NotOp>();
    auto eq = n ? n.getInput().getDefiningOp<dsc::EqualOp>() : nullptr;
    std::optional<double> zero = scalarConstant(w.getX());
    if (eq && eq.getLhs() == p && eq.getRhs() == p && zero && *zero == 0.0)
      return w.getResult();
  }
  return Value();
}

/// Keys and values with `kv` heads serve `heads` query heads: as many, or
/// one broadcast by the matmul itself (multi-query attention written
/// without repeat_kv, as Falcon does).
bool sharesHeads(int64_t kv, int64_t heads) { return kv == heads || kv == 1; }

/// The matmul that multiplies the probabilities (after an optional NaN
/// guard and dropout) with the values; fills root, value, dropout.
bool matchConsumer(dsc::SoftmaxOp softmax, AttentionMatch &m) {
  Value p = softmax.getResult();
  if (Value guarded = peelNaNGuard(p))
    p = guarded;
  for (int step = 0; step < 2; ++step) {
    if (!p.hasOneUse())
      return false;
    Operation *user = *p.user_begin();
    if (auto d = dyn_cast<dsc::DropoutOp>(user)) {
      if (m.dropout != 0.0)
        return false;
      m.dropout = d.getRatio().convertToDouble();
      p = d.getResult();
      continue;
    }
    auto mm = dyn_cast<dsc::MatMulOp>(user);
    if (!mm || mm.getLhs() != p)
      return false;
    auto v = typeOf(mm.getRhs());
    auto pt = typeOf(p);
    if (v.getRank() != 4 || v.getDimSize(0) != pt.getDimSize(0) ||
        !sharesHeads(v.getDimSize(1), pt.getDimSize(1)) ||
        v.getDimSize(2) != pt.getDimSize(3))
      return false;
    m.root = mm;
    m.value = mm.getRhs();
    return true;
  }
  return false;
}

/// Walks up from the softmax input through scalings and mask terms to
/// q @ k^T; fills query, keyT, scale, masks.
bool matchScores(Value scores, AttentionMatch &m) {
  double factor = 1.0;
  ArrayRef<int64_t> shape = typeOf(scores).getShape();
  auto broadcastsTo = [&](Value t) {
    auto tt = typeOf(t);
    if (tt.getRank() > 4)
      return false;
    for (int64_t i = 0; i < tt.getRank(); ++i) {
      int64_t d = tt.getDimSize(tt.getRank() - 1 - i);
      if (d != 1 && d != shape[3 - i])
        return false;
    }
    return true;
  };
  Value x = scores;
  for (int guard = 0; guard < 16; ++guard) {
    if (typeOf(x).getShape() != shape)
      return false;
    if (auto mm = x.getDefiningOp<dsc::MatMulOp>()) {
      auto q = typeOf(mm.getLhs()), kt = typeOf(mm.getRhs());
      if (q.getRank() != 4 || kt.getRank() != 4 ||
          q.getShape().take_front(2) != shape.take_front(2) ||
          kt.getDimSize(0) != shape[0] ||
          !sharesHeads(kt.getDimSize(1), shape[1]))
        return false;
      m.query = mm.getLhs();
      m.keyT = mm.getRhs();
      m.scale = factor;
      return true;
    }
    if (auto s = scaledBy(x)) {
      factor *= s->second;
      x = s->first;
      continue;
    }
    if (auto add = x.getDefiningOp<dsc::AddOp>()) {
      Value a = add.getLhs(), b = add.getRhs();
      if (typeOf(a).getShape() != shape ||
          (a.getDefiningOp<dsc::ConstantOp>() && typeOf(b).getShape() == shape))
        std::swap(a, b);
      if (typeOf(a).getShape() != shape || !broadcastsTo(b))
        return false;
      m.masks.push_back({b, factor, std::nullopt});
      x = a;
      continue;
    }
    if (auto w = x.getDefiningOp<dsc::WhereOp>()) {
      // where(c, x, fill) keeps x where c; where(c, fill, x) where !c.
      std::optional<double> fillY = scalarConstant(w.getY());
      std::optional<double> fillX = scalarConstant(w.getX());
      Value kept, cond = w.getCond();
      std::optional<double> fill;
      bool negate = false;
      if (fillY && typeOf(w.getX()).getShape() == shape) {
        kept = w.getX();
        fill = fillY;
      } else if (fillX && typeOf(w.getY()).getShape() == shape) {
        kept = w.getY();
        fill = fillX;
        negate = true;
      } else {
        return false;
      }
      if (!broadcastsTo(cond) || !(*fill <= -1e30))
        return false;
      m.masks.push_back({cond, factor, fill, negate});
      x = kept;
      continue;
    }
    return false;
  }
  return false;
}

/// Peels scalar factors off an operand of q @ k^T into `scale`.
Value peelScale(Value v, double &scale) {
  while (auto s = scaledBy(v)) {
    scale *= s->second;
    v = s->first;
  }
  return v;
}

//===----------------------------------------------------------------------===//
// Step 2: the mask
//===----------------------------------------------------------------------===//

/// Whether `root` is computed from a function argument for which `pred`
/// holds (every argument when pred is null).
bool dependsOnArgument(Value root,
                       function_ref<bool(BlockArgument)> pred = nullptr) {
  SmallVector<Value> work{root};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (!pred || pred(arg))
        return true;
      continue;
    }
    for (Value operand : v.getDefiningOp()->getOperands())
      work.push_back(operand);
  }
  return false;
}

bool dependsOnParameter(Value root) {
  return dependsOnArgument(root, [](BlockArgument arg) {
    auto f = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    return f && f.getArgAttr(arg.getArgNumber(), "dsc.param");
  });
}

/// Host values of a small mask subgraph (constants, and the trilu, not,
/// where, cast, reshape, expand and arithmetic exporters build masks with),
/// row-major; bools as 0/1. Anything else, or more than kMaxMaskElements
/// elements, is not evaluated: the mask then stays an operand.
struct HostValue {
  Shape shape;
  std::vector<double> data;
};
constexpr int64_t kMaxMaskElements = int64_t(1) << 26;

/// Index into `from` (broadcast, numpy rules) of element `flat` of `to`.
int64_t broadcastIndex(ArrayRef<int64_t> from, ArrayRef<int64_t> to,
                       int64_t flat) {
  int64_t index = 0, stride = 1;
  for (int64_t d = (int64_t)to.size() - 1; d >= 0; --d) {
    int64_t coord = flat % to[d];
    flat /= to[d];
    int64_t fd = d - ((int64_t)to.size() - (int64_t)from.size());
    if (fd >= 0) {
      if (from[fd] != 1)
        index += coord * stride;
      stride *= from[fd];
    }
  }
  return index;
}

/// ONNX Gather on host values: out = data.shape[:axis] + indices.shape +
/// data.shape[axis+1:], negative indices counted from the end; an index out
/// of range is not evaluated (the op's own check reports it at run time).
std::optional<HostValue> evaluateGather(dsc::GatherOp g,
                                        std::optional<HostValue> data,
                                        std::optional<HostValue> indices) {
  if (!data || !indices)
    return std::nullopt;
  int64_t rank = (int64_t)data->shape.size();
  int64_t axis = static_cast<int64_t>(g.getAxis());
  axis = axis < 0 ? axis + rank : axis;
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  int64_t outer = 1, inner = 1, dim = data->shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= data->shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= data->shape[d];
  int64_t m = (int64_t)indices->data.size();
  HostValue out{Shape(typeOf(g.getResult()).getShape()), {}};
  out.data.reserve(outer * m * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < m; ++j) {
      int64_t k = (int64_t)indices->data[j];
      k = k < 0 ? k + dim : k;
      if (k < 0 || k >= dim)
        return std::nullopt;
      for (int64_t i = 0; i < inner; ++i)
        out.data.push_back(data->data[(o * dim + k) * inner + i]);
    }
  return out;
}

std::optional<HostValue> evaluateHost(Value v, int depth = 0) {
  auto type = typeOf(v);
  if (depth > 32 || type.getNumElements() > kMaxMaskElements)
    return std::nullopt;
  Shape shape(type.getShape());
  Operation *op = v.getDefiningOp();
  if (!op)
    return std::nullopt;
  auto operand = [&](unsigned i) { return evaluateHost(op->getOperand(i), depth + 1); };
  // Elementwise with broadcasting, from operand values to this value.
  auto map = [&](auto f) -> std::optional<HostValue> {
    SmallVector<HostValue> in;
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      auto x = operand(i);
      if (!x)
        return std::nullopt;
      in.push_back(std::move(*x));
    }
    HostValue out{shape, std::vector<double>(type.getNumElements())};
    SmallVector<double> args(in.size());
    // An operand of the result's shape, or of one element, needs no
    // broadcast index (most of a mask's ops).
    auto index = [&](const HostValue &x, int64_t e) -> int64_t {
      if (x.data.size() == out.data.size())
        return e;
      return x.data.size() == 1 ? 0 : broadcastIndex(x.shape, shape, e);
    };
    for (int64_t e = 0; e < (int64_t)out.data.size(); ++e) {
      for (size_t i = 0; i < in.size(); ++i)
        args[i] = in[i].data[index(in[i], e)];
      out.data[e] = f(args);
    }
    return out;
  };
  if (auto c = dyn_cast<dsc::ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!dense)
      return std::nullopt;
    HostValue out{shape, {}};
    out.data.reserve(type.getNumElements());
    if (isa<FloatType>(dense.getElementType())) {
      if (dense.isSplat())
        out.data.assign(type.getNumElements(),
                        dense.getSplatValue<APFloat>().convertToDouble());
      else
        for (APFloat f : dense.getValues<APFloat>())
          out.data.push_back(f.convertToDouble());
    } else if (dense.getElementType().isInteger(1)) {
      if (dense.isSplat())
        out.data.assign(type.getNumElements(), dense.getSplatValue<bool>());
      else
        for (bool b : dense.getValues<bool>())
          out.data.push_back(b);
    } else if (dense.getElementType().isInteger()) {
      // Indices and the exporters' integer attention_mask constants.
      if (dense.isSplat())
        out.data.assign(type.getNumElements(),
                        double(dense.getSplatValue<APInt>().getSExtValue()));
      else
        for (const APInt &i : dense.getValues<APInt>())
          out.data.push_back(double(i.getSExtValue()));
    } else {
      return std::nullopt;
    }
    return out;
  }
  if (auto g = dyn_cast<dsc::GatherOp>(op))
    return evaluateGather(g, operand(0), operand(1));
  if (isa<dsc::ReshapeOp>(op)) {
    auto x = operand(0);
    if (x)
      x->shape = shape;
    return x;
  }
  if (isa<dsc::ExpandOp, dsc::CastOp>(op)) {
    if (isa<dsc::CastOp>(op) && !isa<FloatType>(type.getElementType()) &&
        !type.getElementType().isInteger(1))
      return std::nullopt;
    bool toBool = type.getElementType().isInteger(1);
    return map([&](ArrayRef<double> a) { return toBool ? double(a[0] != 0) : a[0]; });
  }
  if (isa<dsc::AndOp>(op))
    return map(
        [](ArrayRef<double> a) { return double(a[0] != 0 && a[1] != 0); });
  if (isa<dsc::OrOp>(op))
    return map(
        [](ArrayRef<double> a) { return double(a[0] != 0 || a[1] != 0); });
  if (isa<dsc::NotOp>(op))
    return map([](ArrayRef<double> a) { return double(a[0] == 0); });
  if (isa<dsc::WhereOp>(op))
    return map([](ArrayRef<double> a) { return a[0] != 0 ? a[1] : a[2]; });
  if (isa<dsc::AddOp>(op))
    return map([](ArrayRef<double> a) { return a[0] + a[1]; });
  if (isa<dsc::SubOp>(op))
    return map([](ArrayRef<double> a) { return a[0] - a[1]; });
  if (isa<dsc::MulOp>(op))
    return map([](ArrayRef<double> a) { return a[0] * a[1]; });
  if (isa<dsc::EqualOp>(op))
    return map([](ArrayRef<double> a) { return double(a[0] == a[1]); });
  if (auto t = dyn_cast<dsc::TriluOp>(op)) {
    auto x = operand(0);
    if (!x || shape.size() < 2)
      return std::nullopt;
    int64_t rows = shape[shape.size() - 2], cols = shape.back();
    int64_t k = t.getK();
    for (int64_t e = 0; e < (int64_t)x->data.size(); ++e) {
      int64_t j = e % cols, i = (e / cols) % rows;
      bool keep = t.getUpper() ? j - i >= k : j - i <= k;
      if (!keep)
        x->data[e] = 0;
    }
    return x;
  }
  return std::nullopt;
}

/// A mask term's values on the host, broadcast to `shape` (rank 4).
std::optional<std::vector<double>> evaluate(const MaskTerm &t,
                                            ArrayRef<int64_t> shape) {
  std::optional<HostValue> v = evaluateHost(t.value);
  if (!v)
    return std::nullopt;
  int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
  std::vector<double> out(n);
  for (int64_t e = 0; e < n; ++e) {
    double x = v->data[broadcastIndex(v->shape, shape, e)];
    if (t.fill)
      out[e] = (x != 0) != t.negate ? 0.0 : *t.fill * t.factor;
    else
      out[e] = x * t.factor;
  }
  return out;
}

struct MaskPlan {
  bool causal = false;
  int64_t window = 0;
  SmallVector<MaskTerm> operandTerms; // summed into the mask operand
};

/// Whether the combined constant mask [Bm, Hm, Tq, Tk] is exactly causal,
/// optionally with a sliding window: 0 where kept, <= -1e30 elsewhere, the
/// same in every batch and head. Returns the window (0: none).
std::optional<int64_t> causalWindow(const std::vector<double> &mask,
                                    ArrayRef<int64_t> shape) {
  int64_t tq = shape[2], tk = shape[3], slices = shape[0] * shape[1];
  if (tq == 0 || tk == 0)
    return std::nullopt;
  int64_t kept = 0;
  for (int64_t j = 0; j < tk; ++j)
    kept += mask[(tq - 1) * tk + j] == 0.0;
  int64_t window = kept >= tq ? 0 : kept;
  if (window == 0 && tq != tk)
    return std::nullopt;
  for (int64_t s = 0; s < slices; ++s)
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j) {
        double v = mask[(s * tq + i) * tk + j];
        bool keep = j <= i && (window == 0 || j > i - window);
        if (keep ? v != 0.0 : !(v <= -1e30))
          return std::nullopt;
      }
  return window;
}

/// What a set of constant mask terms amounts to: the causal pattern (with
/// its window), nothing (all zero), or neither (the terms stay an operand).
struct ConstantMask {
  enum Kind { Causal, Zero, Operand } kind = Operand;
  int64_t window = 0;
};

/// The constant masks already evaluated in this pass, by their terms and
/// shape: every layer of a model reads the same mask, which is evaluated
/// once (a [B, 1, T, T] mask is B * T * T elements on the host).
using ConstantMaskCache = std::map<std::vector<uint64_t>, ConstantMask>;

std::vector<uint64_t> cacheKey(ArrayRef<MaskTerm> terms,
                               ArrayRef<int64_t> shape) {
  std::vector<uint64_t> key(shape.begin(), shape.end());
  for (const MaskTerm &t : terms) {
    key.push_back(reinterpret_cast<uintptr_t>(t.value.getAsOpaquePointer()));
    key.push_back(llvm::bit_cast<uint64_t>(t.factor));
    key.push_back(t.fill.has_value());
    key.push_back(llvm::bit_cast<uint64_t>(t.fill.value_or(0.0)));
    key.push_back(t.negate);
  }
  return key;
}

/// The sum of the constant terms, broadcast to `shape`, classified.
ConstantMask evaluateConstantMask(ArrayRef<MaskTerm> constants,
                                  ArrayRef<int64_t> shape) {
  std::vector<double> sum(shape[0] * shape[1] * shape[2] * shape[3], 0.0);
  for (const MaskTerm &t : constants) {
    auto values = evaluate(t, shape);
    if (!values)
      return {};
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] += (*values)[i];
  }
  if (std::optional<int64_t> window = causalWindow(sum, shape))
    return {ConstantMask::Causal, *window};
  if (llvm::all_of(sum, [](double v) { return v == 0.0; }))
    return {ConstantMask::Zero, 0};
  return {};
}

MaskPlan planMask(const AttentionMatch &m, ConstantMaskCache &cache) {
  MaskPlan plan;
  SmallVector<MaskTerm> constants;
  // Terms that do not depend on a function argument are evaluated on the
  // host (constants and the ops that build masks from them).
  for (const MaskTerm &t : m.masks)
    (dependsOnArgument(t.value) ? plan.operandTerms : constants).push_back(t);
  if (constants.empty())
    return plan;
  auto probabilities = typeOf(m.root->getOperand(0));
  Shape shape{1, 1, probabilities.getDimSize(2), probabilities.getDimSize(3)};
  for (const MaskTerm &t : constants) {
    auto tt = typeOf(t.value);
    for (int64_t k = 0; k < 2; ++k)
      if (int64_t d = k - (4 - tt.getRank()); d >= 0)
        shape[k] = std::max(shape[k], tt.getDimSize(d));
  }
  std::vector<uint64_t> key = cacheKey(constants, shape);
  auto cached = cache.find(key);
  if (cached == cache.end())
    cached = cache.emplace(key, evaluateConstantMask(constants, shape)).first;
  switch (cached->second.kind) {
  case ConstantMask::Causal:
    plan.causal = true;
    plan.window = cached->second.window;
    break;
  case ConstantMask::Zero:
    break;
  case ConstantMask::Operand:
    plan.operandTerms.append(constants.begin(), constants.end());
    break;
  }
  return plan;
}

/// The sum of the operand terms as a rank-4 float mask (null when none).
Value buildMask(OpBuilder &b, Location loc, ArrayRef<MaskTerm> terms,
                Type element) {
  Value sum;
  auto scalar = [&](double v) -> Value {
    auto t = RankedTensorType::get({}, element);
    return dsc::ConstantOp::create(
        b, loc, SplatElementsAttr::get(t, FloatAttr::get(element, v)));
  };
  for (const MaskTerm &t : terms) {
    Value v = t.value;
    if (t.fill) {
      double masked = *t.fill * t.factor;
      v = t.negate ? dsc::WhereOp::create(b, loc, v, scalar(masked), scalar(0.0))
                   : dsc::WhereOp::create(b, loc, v, scalar(0.0), scalar(masked));
    } else if (typeOf(v).getElementType() != element) {
      v = dsc::CastOp::create(b, loc, v, TypeAttr::get(element));
    }
    if (t.factor != 1.0 && !t.fill)
      v = dsc::MulOp::create(b, loc, v, scalar(t.factor));
    sum = sum ? Value(dsc::AddOp::create(b, loc, sum, v)) : v;
  }
  if (!sum)
    return sum;
  auto st = typeOf(sum);
  if (st.getRank() < 4) {
    Shape s(4 - st.getRank(), 1);
    s.append(st.getShape().begin(), st.getShape().end());
    sum = dsc::ReshapeOp::create(b, loc, sum, b.getDenseI64ArrayAttr(s));
  }
  return sum;
}

//===----------------------------------------------------------------------===//
// Step 3: rewrite
//===----------------------------------------------------------------------===//

/// k from k^T: composes with the transpose that made k^T, if any.
Value untransposeKey(OpBuilder &b, Location loc, Value keyT) {
  Shape perm{0, 1, 3, 2};
  Value src = keyT;
  if (auto t = keyT.getDefiningOp<dsc::TransposeOp>()) {
    ArrayRef<int64_t> p = t.getPerm();
    perm = {p[0], p[1], p[3], p[2]};
    src = t.getInput();
  }
  if (perm == Shape{0, 1, 2, 3})
    return src;
  return dsc::TransposeOp::create(b, loc, src, b.getDenseI64ArrayAttr(perm));
}

/// GQA's repeat_kv: reshape([B,Hkv,1,T,D]) -> expand([B,Hkv,n,T,D]) ->
/// reshape([B,Hkv*n,T,D]) of x0 [B,Hkv,T,D]; returns x0, or null.
Value unrepeatHeads(Value x) {
  auto r2 = x.getDefiningOp<dsc::ReshapeOp>();
  auto e = r2 ? r2.getInput().getDefiningOp<dsc::ExpandOp>() : nullptr;
  auto r1 = e ? e.getInput().getDefiningOp<dsc::ReshapeOp>() : nullptr;
  if (!r1)
    return Value();
  auto x0 = typeOf(r1.getInput()), u = typeOf(e.getInput()),
       ex = typeOf(e.getResult());
  if (x0.getRank() != 4 || u.getRank() != 5)
    return Value();
  Shape unsq{x0.getDimSize(0), x0.getDimSize(1), 1, x0.getDimSize(2),
             x0.getDimSize(3)};
  if (u.getShape() != ArrayRef<int64_t>(unsq))
    return Value();
  Shape exp = unsq;
  exp[2] = ex.getDimSize(2);
  if (ex.getShape() != ArrayRef<int64_t>(exp))
    return Value();
  return r1.getInput();
}

void rewrite(AttentionMatch &m, int64_t seedId, ConstantMaskCache &masks) {
  OpBuilder b(m.root);
  Location loc = m.root.getLoc();
  Value query = peelScale(m.query, m.scale);
  Value keyT = peelScale(m.keyT, m.scale);
  Value key = untransposeKey(b, loc, keyT), value = m.value;
  Value k0 = unrepeatHeads(key), v0 = unrepeatHeads(value);
  if (k0 && v0 && typeOf(k0).getDimSize(1) == typeOf(v0).getDimSize(1)) {
    key = k0;
    value = v0;
  }
  MaskPlan plan = planMask(m, masks);
  Value mask = buildMask(b, loc, plan.operandTerms,
                         typeOf(query).getElementType());
  auto attention = dsc::AttentionOp::create(
      b, loc, query, key, value, mask, b.getF64FloatAttr(m.scale),
      b.getBoolAttr(plan.causal), b.getI64IntegerAttr(plan.window),
      b.getF64FloatAttr(m.dropout),
      b.getI64IntegerAttr(seedId));
  m.root.getResult().replaceAllUsesWith(attention.getResult());
}

/// Erases the ops the rewrite left without users (the old scores chain).
void eraseDead(func::FuncOp f) {
  SmallVector<Operation *> ops;
  f.walk([&](Operation *op) { ops.push_back(op); });
  for (Operation *op : llvm::reverse(ops))
    if (op->getNumResults() > 0 && op->use_empty() && isPure(op))
      op->erase();
}

struct FuseAttentionPass
    : public dsc::impl::DscFuseAttentionBase<FuseAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    auto forward = getOperation().lookupSymbol<func::FuncOp>(function);
    if (!forward || forward.isExternal())
      return;
    SmallVector<dsc::SoftmaxOp> softmaxes;
    forward.walk([&](dsc::SoftmaxOp s) { softmaxes.push_back(s); });
    int64_t seedId = 0, fused = 0;
    ConstantMaskCache masks;
    for (dsc::SoftmaxOp s : softmaxes) {
      auto t = typeOf(s.getResult());
      int64_t axis = (int64_t)s.getAxis();
      if (t.getRank() != 4 || (axis != 3 && axis != -1))
        continue; // a softmax over another axis is not attention
      AttentionMatch m;
      if (!matchConsumer(s, m) || !matchScores(s.getInput(), m))
        continue;
      if (llvm::any_of(m.masks, [](const MaskTerm &t) {
            return dependsOnParameter(t.value);
          }))
        continue; // a learned bias needs its gradient: left unfused
      if (typeOf(m.keyT).getDimSize(1) != typeOf(m.value).getDimSize(1))
        continue; // one broadcast head for keys but not values (or back)
      rewrite(m, m.dropout > 0 ? seedId++ : 0, masks);
      ++fused;
    }
    eraseDead(forward);
    if (nondeterministicBackward)
      forward.walk([&](dsc::AttentionOp a) {
        a->setAttr("dsc.nondeterministic_backward",
                   UnitAttr::get(a.getContext()));
      });
    if (fused)
      getOperation()->setAttr(
          "dsc.fused_attention",
          IntegerAttr::get(IntegerType::get(&getContext(), 64), fused));
  }
};

} // namespace
