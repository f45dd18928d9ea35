//===- attention.cpp - CPU kernels: fused scaled dot-product attention ----===//
//
// The reference of dsc.attention and its backward, tiled as flash attention
// is (Dao et al., FlashAttention-2): no [Tq, Tk] matrix of a (batch, head) is
// held beyond one tile of kTile x kTile scores.
//
//  - Forward, per (b, h) and tile of queries: a running max m, sum l and
//    unnormalized output per row over tiles of keys; out = acc / l and
//    lse = m + log(l) (-inf and a zero row when no key is left).
//  - Backward, per (b, kv head): for each query head sharing it (in order)
//    and each tile of queries and keys, P = exp(s - lse) is recomputed from
//    the forward's lse, D_i = rowsum(dO_i * O_i), dS = P * (dP - D_i); dQ
//    rows, dK and dV accumulate in that fixed order, so any thread count
//    gives the same bits. Rows whose |lse| is too large to hold log(l)
//    (huge negative masks) recompute their max and sum (rowStats).
//
// Dropout keeps probability (b, h, i, j) by attentionDropoutKeep
// (attention_rng.h, shared with CUDA) and scales it by 1 / (1 - p); the
// backward draws the same mask. f16/bf16 operands are widened to f32
// (half_emulation.h) and the results rounded once.
//
//===----------------------------------------------------------------------===//

#include "cpu/attention_rng.h"
#include "cpu/checks_math.h"
#include "cpu/half_emulation.h"
#include "cpu/kernel_util.h"
#include "cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace dsc::cpu {

using namespace detail;

//===----------------------------------------------------------------------===//
// Checks (shared with cuda/attention.cu)
//===----------------------------------------------------------------------===//

namespace {

void describeAttrs(Call &call, const AttentionAttrs &attrs) {
  call.raw("scale", std::to_string(attrs.scale))
      .raw("causal", attrs.causal ? "true" : "false")
      .arg("window", attrs.window)
      .raw("dropout", std::to_string(attrs.dropout))
      .raw("seed", std::to_string(attrs.seed));
}

Status checkDTypes(const Call &call, const Tensor &q, const Tensor &k,
                   const Tensor &v, const Tensor &mask, const Tensor &lse) {
  if (!isFloat(q.dtype))
    return call.fail("q must be f32, f64, f16 or bf16");
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    return call.fail("q, k and v must share one dtype");
  if (mask.present() && mask.dtype != DType::Bool && !isFloat(mask.dtype))
    return call.fail("mask must be bool or a float dtype");
  DType lseType = q.dtype == DType::F64 ? DType::F64 : DType::F32;
  if (lse.present() && lse.dtype != lseType)
    return call.fail(std::string("lse must be ") + dtypeName(lseType) +
                     " for " + dtypeName(q.dtype) + " q");
  return Status();
}

Status checkOperandShapes(const Call &call, const Tensor &q, const Tensor &k,
                          const Tensor &v, AttentionShape &s) {
  if (q.rank != 4 || k.rank != 4 || v.rank != 4)
    return call.fail("q, k and v must be rank 4 ([batch, heads, seq, dim])");
  s.batch = q.shape[0], s.heads = q.shape[1], s.queries = q.shape[2];
  s.headDim = q.shape[3], s.kvHeads = k.shape[1], s.keys = k.shape[2];
  s.valueDim = v.shape[3];
  if (k.shape[0] != s.batch || v.shape[0] != s.batch)
    return call.fail("q, k and v must share the batch dim");
  if (k.shape[3] != s.headDim)
    return call.fail("k's head dim must equal q's");
  if (v.shape[1] != s.kvHeads || v.shape[2] != s.keys)
    return call.fail("v must have k's heads and sequence length");
  if (s.kvHeads <= 0 || s.heads % s.kvHeads != 0)
    return call.fail("q's heads must be a multiple of k's heads "
                     "(grouped-query attention)");
  return Status();
}

Status checkMaskShape(const Call &call, const Tensor &mask, AttentionShape &s) {
  s.hasMask = mask.present();
  s.boolMask = s.hasMask && mask.dtype == DType::Bool;
  if (!s.hasMask)
    return Status();
  const int64_t full[4] = {s.batch, s.heads, s.queries, s.keys};
  if (mask.rank != 4)
    return call.fail("mask must be rank 4 (each dim 1 or that of "
                     "[batch, heads, q seq, k seq])");
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    if (mask.shape[d] != 1 && mask.shape[d] != full[d])
      return call.fail("mask dim " + std::to_string(d) + " must be 1 or " +
                       std::to_string(full[d]));
    s.maskStride[d] = mask.shape[d] == 1 ? 0 : stride;
    stride *= mask.shape[d];
  }
  return Status();
}

Status checkAttrs(const Call &call, const AttentionAttrs &attrs) {
  if (!std::isfinite(attrs.scale))
    return call.fail("scale must be finite");
  if (attrs.window < 0)
    return call.fail("window must be >= 0 (0: no window)");
  if (!(attrs.dropout >= 0 && attrs.dropout <= 1))
    return call.fail("dropout must be in [0, 1]");
  return Status();
}

bool shapeIs4(const Tensor &t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return shapeIs(t, {a, b, c, d});
}

/// What forward and backward check alike: dtypes, operand and mask shapes,
/// attributes; fills `s`.
Status checkOperands(Call &call, const Tensor &q, const Tensor &k,
                     const Tensor &v, const Tensor &mask, const Tensor &lse,
                     const AttentionAttrs &attrs, AttentionShape &s) {
  if (Status st = checkDTypes(call, q, k, v, mask, lse); !st.ok())
    return st;
  if (Status st = checkOperandShapes(call, q, k, v, s); !st.ok())
    return st;
  if (Status st = checkMaskShape(call, mask, s); !st.ok())
    return st;
  return checkAttrs(call, attrs);
}

} // namespace

Status detail::checkAttention(Call &call, const Tensor &q, const Tensor &k,
                              const Tensor &v, const Tensor &mask,
                              const AttentionAttrs &attrs, const Tensor &out,
                              const Tensor &lse, AttentionShape &s) {
  call.arg("q", q).arg("k", k).arg("v", v).arg("mask", mask);
  describeAttrs(call, attrs);
  call.arg("out", out).arg("lse", lse);
  if (attrs.seqMajor)
    call.raw("seq_major", "true");
  // seq_major: the [B, T, H, D] views checked as [B, H, T, D].
  auto view = [&](const Tensor &t) {
    return attrs.seqMajor ? swapTokensAndHeads(t) : t;
  };
  if (Status st =
          checkOperands(call, view(q), view(k), view(v), mask, lse, attrs, s);
      !st.ok())
    return st;
  if (out.dtype != q.dtype ||
      !shapeIs4(view(out), s.batch, s.heads, s.queries, s.valueDim))
    return call.fail(attrs.seqMajor
                         ? "out must be q's dtype with shape [batch, q seq, "
                           "heads, v dim]"
                         : "out must be q's dtype with shape [batch, heads, "
                           "q seq, v dim]");
  if (lse.present() && !shapeIs(lse, {s.batch, s.heads, s.queries}))
    return call.fail("lse must have shape [batch, heads, q seq]");
  return Status();
}

Status detail::checkAttentionBackward(Call &call, const Tensor &q,
                                      const Tensor &k, const Tensor &v,
                                      const Tensor &mask, const Tensor &out,
                                      const Tensor &lse, const Tensor &gradOut,
                                      const AttentionAttrs &attrs,
                                      const Tensor &gradQ, const Tensor &gradK,
                                      const Tensor &gradV, AttentionShape &s) {
  call.arg("q", q).arg("k", k).arg("v", v).arg("mask", mask);
  call.arg("out", out).arg("lse", lse).arg("grad_out", gradOut);
  describeAttrs(call, attrs);
  call.arg("grad_q", gradQ).arg("grad_k", gradK).arg("grad_v", gradV);
  if (attrs.seqMajor)
    call.raw("seq_major", "true");
  if (!lse.present() || !out.present())
    return call.fail("needs the forward's out and lse");
  auto view = [&](const Tensor &t) {
    return attrs.seqMajor ? swapTokensAndHeads(t) : t;
  };
  if (Status st =
          checkOperands(call, view(q), view(k), view(v), mask, lse, attrs, s);
      !st.ok())
    return st;
  for (const Tensor *t : {&out, &gradOut})
    if (t->dtype != q.dtype ||
        !shapeIs4(view(*t), s.batch, s.heads, s.queries, s.valueDim))
      return call.fail(attrs.seqMajor
                           ? "out and grad_out must be q's dtype with shape "
                             "[batch, q seq, heads, v dim]"
                           : "out and grad_out must be q's dtype with shape "
                             "[batch, heads, q seq, v dim]");
  if (!shapeIs(lse, {s.batch, s.heads, s.queries}))
    return call.fail("lse must have shape [batch, heads, q seq]");
  if (gradQ.dtype != q.dtype || gradK.dtype != q.dtype ||
      gradV.dtype != q.dtype || !sameShape(gradQ, q) || !sameShape(gradK, k) ||
      !sameShape(gradV, v))
    return call.fail("grad_q, grad_k and grad_v must have the dtype and "
                     "shapes of q, k and v");
  return Status();
}

//===----------------------------------------------------------------------===//
// Tiles
//===----------------------------------------------------------------------===//

namespace {

constexpr int64_t kTile = 32;

template <typename T> struct Problem {
  AttentionShape s;
  const T *q, *k, *v;
  const void *mask;
  DType maskType;
  T scale;
  bool causal;
  int64_t window;
  AttentionDropout drop;
  T keepScale; // 1 / (1 - p), 0 when p == 1

  const T *qRow(int64_t b, int64_t h, int64_t i) const {
    return q + ((b * s.heads + h) * s.queries + i) * s.headDim;
  }
  const T *kRow(int64_t b, int64_t g, int64_t j) const {
    return k + ((b * s.kvHeads + g) * s.keys + j) * s.headDim;
  }
  const T *vRow(int64_t b, int64_t g, int64_t j) const {
    return v + ((b * s.kvHeads + g) * s.keys + j) * s.valueDim;
  }
  /// The keys [lo, hi) that causal and window leave to queries [i0, i1).
  void keyRange(int64_t i0, int64_t i1, int64_t &lo, int64_t &hi) const {
    lo = 0, hi = s.keys;
    if (causal)
      hi = std::min(hi, i1);
    if (window > 0)
      lo = std::max<int64_t>(0, i0 - window + 1);
  }
  /// The dropout factor of probability (b, h, i, j): 0 or 1 / (1 - p).
  T dropFactor(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!drop.active)
      return T(1);
    return attentionDropoutKeep(drop, b, h, i, j, s.heads, s.queries, s.keys)
               ? keepScale
               : T(0);
  }
};

template <typename T>
Problem<T> makeProblem(const AttentionShape &s, const Tensor &q,
                       const Tensor &k, const Tensor &v, const Tensor &mask,
                       const AttentionAttrs &attrs) {
  Problem<T> p;
  p.s = s;
  p.q = q.as<T>(), p.k = k.as<T>(), p.v = v.as<T>();
  p.mask = mask.data, p.maskType = mask.dtype;
  p.scale = T(attrs.scale);
  p.causal = attrs.causal, p.window = attrs.window;
  p.drop = attentionDropoutOf(attrs.seed, attrs.dropout);
  p.keepScale = attrs.dropout < 1 ? T(1 / (1 - attrs.dropout)) : T(0);
  return p;
}

template <typename T> T dot(const T *a, const T *b, int64_t n) {
  T acc = T(0);
  for (int64_t d = 0; d < n; ++d)
    acc += a[d] * b[d];
  return acc;
}

/// Masked scaled scores of queries [i0, i1) against keys [j0, j1) of (b, h)
/// into S (row stride kTile); -inf where masked.
template <typename T>
void scoreTile(const Problem<T> &p, int64_t b, int64_t h, int64_t i0,
               int64_t i1, int64_t j0, int64_t j1, T *S) {
  const AttentionShape &s = p.s;
  const T inf = std::numeric_limits<T>::infinity();
  int64_t g = h / s.group();
  for (int64_t i = i0; i < i1; ++i) {
    const T *qi = p.qRow(b, h, i);
    T *row = S + (i - i0) * kTile;
    for (int64_t j = j0; j < j1; ++j) {
      T &out = row[j - j0];
      if ((p.causal && j > i) || (p.window > 0 && j <= i - p.window)) {
        out = -inf;
        continue;
      }
      out = p.scale * dot(qi, p.kRow(b, g, j), s.headDim);
      if (!s.hasMask)
        continue;
      int64_t off = b * s.maskStride[0] + h * s.maskStride[1] +
                    i * s.maskStride[2] + j * s.maskStride[3];
      if (s.boolMask)
        out = static_cast<const uint8_t *>(p.mask)[off] ? out : -inf;
      else
        out += T(loadAsDouble(p.mask, p.maskType, off));
    }
  }
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// The running state of a tile of query rows.
template <typename T> struct RowState {
  std::vector<T> m, l, acc, S;
  explicit RowState(int64_t dv)
      : m(kTile), l(kTile), acc(kTile * dv), S(kTile * kTile) {}
  void reset() {
    std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
    std::fill(l.begin(), l.end(), T(0));
    std::fill(acc.begin(), acc.end(), T(0));
  }
};

/// Folds one tile of keys [j0, j1) into row i of the running state.
template <typename T>
void foldRow(const Problem<T> &p, RowState<T> &st, int64_t b, int64_t h,
             int64_t i, int64_t r, int64_t j0, int64_t j1) {
  const int64_t dv = p.s.valueDim;
  T *row = st.S.data() + r * kTile;
  T tileMax = -std::numeric_limits<T>::infinity();
  for (int64_t j = j0; j < j1; ++j)
    tileMax = std::max(tileMax, row[j - j0]);
  T mNew = std::max(st.m[r], tileMax);
  if (mNew == -std::numeric_limits<T>::infinity())
    return; // nothing kept so far
  T alpha = std::exp(st.m[r] - mNew);
  T *acc = st.acc.data() + r * dv;
  for (int64_t c = 0; c < dv; ++c)
    acc[c] *= alpha;
  T sum = T(0);
  int64_t g = h / p.s.group();
  for (int64_t j = j0; j < j1; ++j) {
    T e = std::exp(row[j - j0] - mNew);
    sum += e;
    T w = e * p.dropFactor(b, h, i, j);
    if (w == T(0))
      continue;
    const T *vj = p.vRow(b, g, j);
    for (int64_t c = 0; c < dv; ++c)
      acc[c] += w * vj[c];
  }
  st.l[r] = st.l[r] * alpha + sum;
  st.m[r] = mNew;
}

template <typename T>
void finishRows(const Problem<T> &p, const RowState<T> &st, int64_t b,
                int64_t h, int64_t i0, int64_t i1, T *out, T *lse) {
  const int64_t dv = p.s.valueDim;
  for (int64_t i = i0; i < i1; ++i) {
    int64_t r = i - i0, row = (b * p.s.heads + h) * p.s.queries + i;
    bool empty = st.l[r] == T(0);
    for (int64_t c = 0; c < dv; ++c)
      out[row * dv + c] = empty ? T(0) : st.acc[r * dv + c] / st.l[r];
    if (lse)
      lse[row] = empty ? -std::numeric_limits<T>::infinity()
                       : st.m[r] + std::log(st.l[r]);
  }
}

template <typename T>
void forwardHead(const Problem<T> &p, int64_t b, int64_t h, T *out, T *lse) {
  RowState<T> st(p.s.valueDim);
  for (int64_t i0 = 0; i0 < p.s.queries; i0 += kTile) {
    int64_t i1 = std::min(p.s.queries, i0 + kTile), lo, hi;
    p.keyRange(i0, i1, lo, hi);
    st.reset();
    for (int64_t j0 = lo; j0 < hi; j0 += kTile) {
      int64_t j1 = std::min(hi, j0 + kTile);
      scoreTile(p, b, h, i0, i1, j0, j1, st.S.data());
      for (int64_t i = i0; i < i1; ++i)
        foldRow(p, st, b, h, i, i - i0, j0, j1);
    }
    finishRows(p, st, b, h, i0, i1, out, lse);
  }
}

template <typename T>
void forward(const Problem<T> &p, const Tensor &out, const Tensor &lse) {
  int64_t heads = p.s.batch * p.s.heads;
  parallelFor(heads, 0, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u)
      forwardHead(p, u / p.s.heads, u % p.s.heads, out.as<T>(),
                  lse.present() ? lse.as<T>() : nullptr);
  });
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

template <typename T> struct Grads {
  const T *out, *gradOut, *lse;
  T *gradQ, *gradK, *gradV;
};

/// Per query row of a tile: D_i = rowsum(dO_i * O_i), and the shift and
/// factor that give P = exp(s - shift) * inv.
template <typename T> struct RowStats {
  std::vector<T> delta, shift, inv;
  RowStats() : delta(kTile), shift(kTile), inv(kTile) {}
};

/// Beyond this |lse|, m + log(l) may have lost log(l) (a mask of -3.4e38
/// gives lse = -3.4e38 whatever l is), and P = exp(s - lse) would be off by
/// the factor l: such rows get their max and sum recomputed instead.
constexpr double kExactLseBound = 65536;

/// shift and inv of query row i: (lse, 1), or the recomputed (m, 1 / l).
template <typename T>
void rowStats(const Problem<T> &p, int64_t b, int64_t h, int64_t i, T lse,
              T &shift, T &inv, T *S) {
  shift = lse, inv = T(1);
  if (!(std::fabs(double(lse)) > kExactLseBound) || std::isinf(lse))
    return;
  int64_t lo, hi;
  p.keyRange(i, i + 1, lo, hi);
  T m = -std::numeric_limits<T>::infinity(), l = T(0);
  for (int64_t j0 = lo; j0 < hi; j0 += kTile) {
    int64_t j1 = std::min(hi, j0 + kTile);
    scoreTile(p, b, h, i, i + 1, j0, j1, S);
    for (int64_t j = j0; j < j1; ++j)
      m = std::max(m, S[j - j0]);
  }
  for (int64_t j0 = lo; j0 < hi && m > -std::numeric_limits<T>::infinity();
       j0 += kTile) {
    int64_t j1 = std::min(hi, j0 + kTile);
    scoreTile(p, b, h, i, i + 1, j0, j1, S);
    for (int64_t j = j0; j < j1; ++j)
      l += std::exp(S[j - j0] - m);
  }
  shift = m, inv = l > T(0) ? T(1) / l : T(0);
}

/// Gradients of one tile: queries [i0, i1) of head h against keys [j0, j1).
/// `delta` holds D_i of the tile's rows, S its scores.
template <typename T>
void backwardTile(const Problem<T> &p, const Grads<T> &gr, int64_t b, int64_t h,
                  int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                  const RowStats<T> &rows, const T *S) {
  const AttentionShape &s = p.s;
  const int64_t d = s.headDim, dv = s.valueDim, g = h / s.group();
  for (int64_t i = i0; i < i1; ++i) {
    int64_t row = (b * s.heads + h) * s.queries + i, r = i - i0;
    if (rows.shift[r] == -std::numeric_limits<T>::infinity())
      continue; // an empty row: no gradient
    const T *dOi = gr.gradOut + row * dv, *qi = p.qRow(b, h, i);
    T *dQi = gr.gradQ + row * d;
    for (int64_t j = j0; j < j1; ++j) {
      T prob = std::exp(S[r * kTile + (j - j0)] - rows.shift[r]) * rows.inv[r];
      if (prob == T(0))
        continue;
      T z = p.dropFactor(b, h, i, j);
      int64_t kv = (b * s.kvHeads + g) * s.keys + j;
      T *dVj = gr.gradV + kv * dv, *dKj = gr.gradK + kv * d;
      T dP = z * dot(dOi, p.vRow(b, g, j), dv);
      T dS = prob * (dP - rows.delta[r]) * p.scale;
      const T *kj = p.kRow(b, g, j);
      for (int64_t c = 0; c < dv; ++c)
        dVj[c] += prob * z * dOi[c];
      for (int64_t c = 0; c < d; ++c) {
        dQi[c] += dS * kj[c];
        dKj[c] += dS * qi[c];
      }
    }
  }
}

template <typename T>
void backwardQueryTile(const Problem<T> &p, const Grads<T> &gr, int64_t b,
                       int64_t h, int64_t i0, int64_t i1, RowStats<T> &rows,
                       T *S) {
  const int64_t dv = p.s.valueDim;
  for (int64_t i = i0; i < i1; ++i) {
    int64_t row = (b * p.s.heads + h) * p.s.queries + i;
    rows.delta[i - i0] = dot(gr.gradOut + row * dv, gr.out + row * dv, dv);
    rowStats(p, b, h, i, gr.lse[row], rows.shift[i - i0], rows.inv[i - i0], S);
  }
  int64_t lo, hi;
  p.keyRange(i0, i1, lo, hi);
  for (int64_t j0 = lo; j0 < hi; j0 += kTile) {
    int64_t j1 = std::min(hi, j0 + kTile);
    scoreTile(p, b, h, i0, i1, j0, j1, S);
    backwardTile(p, gr, b, h, i0, i1, j0, j1, rows, S);
  }
}

/// All gradients that involve kv head g of batch b: its query heads in
/// order, each over its tiles of queries.
template <typename T>
void backwardKvHead(const Problem<T> &p, const Grads<T> &gr, int64_t b,
                    int64_t g) {
  const AttentionShape &s = p.s;
  RowStats<T> rows;
  std::vector<T> S(kTile * kTile);
  int64_t kv0 = (b * s.kvHeads + g) * s.keys;
  std::fill(gr.gradK + kv0 * s.headDim, gr.gradK + (kv0 + s.keys) * s.headDim,
            T(0));
  std::fill(gr.gradV + kv0 * s.valueDim, gr.gradV + (kv0 + s.keys) * s.valueDim,
            T(0));
  for (int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
    int64_t q0 = (b * s.heads + h) * s.queries;
    std::fill(gr.gradQ + q0 * s.headDim,
              gr.gradQ + (q0 + s.queries) * s.headDim, T(0));
    for (int64_t i0 = 0; i0 < s.queries; i0 += kTile)
      backwardQueryTile(p, gr, b, h, i0, std::min(s.queries, i0 + kTile), rows,
                        S.data());
  }
}

template <typename T> void backward(const Problem<T> &p, const Grads<T> &gr) {
  int64_t units = p.s.batch * p.s.kvHeads;
  parallelFor(units, 0, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u)
      backwardKvHead(p, gr, u / p.s.kvHeads, u % p.s.kvHeads);
  });
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

template <typename T>
void runForward(const AttentionShape &s, const Tensor &q, const Tensor &k,
                const Tensor &v, const Tensor &mask,
                const AttentionAttrs &attrs, const Tensor &out,
                const Tensor &lse) {
  forward(makeProblem<T>(s, q, k, v, mask, attrs), out, lse);
}

/// The lse of a 16-bit call is f32 and is not widened: T is float there.
template <typename T>
void runBackward(const AttentionShape &s, const Tensor &q, const Tensor &k,
                 const Tensor &v, const Tensor &mask, const Tensor &out,
                 const Tensor &lse, const Tensor &gradOut,
                 const AttentionAttrs &attrs, const Tensor &gradQ,
                 const Tensor &gradK, const Tensor &gradV) {
  Grads<T> gr{out.as<T>(),   gradOut.as<T>(), lse.as<T>(),
              gradQ.as<T>(), gradK.as<T>(),   gradV.as<T>()};
  backward(makeProblem<T>(s, q, k, v, mask, attrs), gr);
}

} // namespace

namespace {

/// seq_major on the CPU: [B, T, H, D] operands copied heads-first, the
/// kernel run on the copies, its results copied back (a transpose by
/// [0, 2, 1, 3] is its own inverse).
class HeadsFirstCopies {
public:
  Tensor in(const Tensor &t) {
    Tensor c = make(t);
    (void)transpose(t, {0, 2, 1, 3}, c); // shapes checked before
    return c;
  }
  Tensor out(const Tensor &t) {
    Tensor c = make(t);
    results_.push_back({c, t});
    return c;
  }
  Status finish() {
    for (auto &[copy, result] : results_)
      if (Status st = transpose(copy, {0, 2, 1, 3}, result); !st.ok())
        return st;
    return Status();
  }

private:
  Tensor make(const Tensor &t) {
    Tensor c = swapTokensAndHeads(t);
    storage_.push_back(std::make_unique<char[]>(t.nbytes()));
    c.data = storage_.back().get();
    return c;
  }
  std::vector<std::unique_ptr<char[]>> storage_;
  std::vector<std::pair<Tensor, Tensor>> results_;
};

} // namespace

Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                 const Tensor &mask, const AttentionAttrs &attrs,
                 const Tensor &out, const Tensor &lse) {
  Call call("attention");
  AttentionShape s;
  if (Status st = checkAttention(call, q, k, v, mask, attrs, out, lse, s);
      !st.ok())
    return st;
  if (attrs.seqMajor) {
    HeadsFirstCopies c;
    if (Status st = attention(c.in(q), c.in(k), c.in(v), mask,
                              headsFirstAttrs(attrs), c.out(out), lse);
        !st.ok())
      return st;
    return c.finish();
  }
  if (isHalf(q.dtype)) {
    HalfAsF32 h;
    runForward<float>(s, h.in(q), h.in(k), h.in(v), mask, attrs, h.out(out),
                      lse);
    return h.finish();
  }
  dispatchFloat(q.dtype, [&](auto tag) {
    runForward<decltype(tag)>(s, q, k, v, mask, attrs, out, lse);
  });
  return Status();
}

Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &mask, const Tensor &out,
                         const Tensor &lse, const Tensor &gradOut,
                         const AttentionAttrs &attrs, const Tensor &gradQ,
                         const Tensor &gradK, const Tensor &gradV) {
  Call call("attention_backward");
  AttentionShape s;
  if (Status st = checkAttentionBackward(call, q, k, v, mask, out, lse, gradOut,
                                         attrs, gradQ, gradK, gradV, s);
      !st.ok())
    return st;
  if (attrs.seqMajor) {
    HeadsFirstCopies c;
    if (Status st = attentionBackward(
            c.in(q), c.in(k), c.in(v), mask, c.in(out), lse, c.in(gradOut),
            headsFirstAttrs(attrs), c.out(gradQ), c.out(gradK), c.out(gradV));
        !st.ok())
      return st;
    return c.finish();
  }
  if (isHalf(q.dtype)) {
    HalfAsF32 h;
    runBackward<float>(s, h.in(q), h.in(k), h.in(v), mask, h.in(out), lse,
                       h.in(gradOut), attrs, h.out(gradQ), h.out(gradK),
                       h.out(gradV));
    return h.finish();
  }
  dispatchFloat(q.dtype, [&](auto tag) {
    runBackward<decltype(tag)>(s, q, k, v, mask, out, lse, gradOut, attrs,
                               gradQ, gradK, gradV);
  });
  return Status();
}

} // namespace dsc::cpu
