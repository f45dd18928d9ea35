//===- AttentionReference.h - Naive attention for the kernel tests -*- C++
//-*-===//
//
// The textbook definition of dsc.attention in double: the whole score
// matrix of a (batch, head), its softmax, the product with v; gradients by
// the softmax Jacobian (ds = p * (dp - sum_k p_k dp_k)), not by the flash
// recurrence the kernels use. Shared by the CPU tests (AttentionTest.cpp)
// and, through the same inputs, the CUDA tests.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_TEST_UNIT_RUNTIME_ATTENTIONREFERENCE_H
#define DSC_TEST_UNIT_RUNTIME_ATTENTIONREFERENCE_H

#include "cpu/attention_rng.h"
#include "cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dsc::test {

enum class MaskKind { None, Float, Bool };

/// One attention problem: sizes, attributes and how its mask looks.
struct AttnCase {
  int64_t b = 1, hq = 2, hkv = 2, tq = 8, tk = 8, d = 16, dv = 16;
  cpu::AttentionAttrs attrs;
  MaskKind mask = MaskKind::None;
  std::vector<int64_t> maskShape;  // rank 4, each dim 1 or full
  double maskNegative = -INFINITY; // the value of masked float entries
  double maskDensity = 0.2;        // fraction masked
  int64_t emptyRow = -1; // a query row the mask removes entirely (all b, h)

  std::vector<int64_t> qShape() const { return {b, hq, tq, d}; }
  std::vector<int64_t> kShape() const { return {b, hkv, tk, d}; }
  std::vector<int64_t> vShape() const { return {b, hkv, tk, dv}; }
  std::vector<int64_t> outShape() const { return {b, hq, tq, dv}; }
  std::vector<int64_t> lseShape() const { return {b, hq, tq}; }
};

inline int64_t numelOf(const std::vector<int64_t> &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

/// The case's operands in double (mask values: 0/1 for bool, additive for
/// float).
struct AttnData {
  std::vector<double> q, k, v, mask, gradOut;
};

inline std::vector<double> uniformValues(int64_t n, std::mt19937_64 &rng,
                                         double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> r(static_cast<size_t>(n));
  for (double &x : r)
    x = u(rng);
  return r;
}

inline std::vector<double> makeMask(const AttnCase &c, std::mt19937_64 &rng) {
  std::vector<double> m(static_cast<size_t>(numelOf(c.maskShape)));
  std::uniform_real_distribution<double> u(0, 1);
  const int64_t *s = c.maskShape.data();
  for (int64_t i = 0; i < int64_t(m.size()); ++i) {
    int64_t row = (i / s[3]) % s[2];
    bool masked =
        u(rng) < c.maskDensity || (c.emptyRow >= 0 && row == c.emptyRow);
    if (c.mask == MaskKind::Bool)
      m[i] = masked ? 0 : 1;
    else
      m[i] = masked ? c.maskNegative : u(rng) - 0.5;
  }
  return m;
}

inline AttnData makeData(const AttnCase &c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  AttnData d;
  d.q = uniformValues(numelOf(c.qShape()), rng, -1, 1);
  d.k = uniformValues(numelOf(c.kShape()), rng, -1, 1);
  d.v = uniformValues(numelOf(c.vShape()), rng, -1, 1);
  d.gradOut = uniformValues(numelOf(c.outShape()), rng, -1, 1);
  if (c.mask != MaskKind::None)
    d.mask = makeMask(c, rng);
  return d;
}

struct AttnResult {
  std::vector<double> out, lse, gradQ, gradK, gradV;
};

/// The naive reference: full scores, softmax, product; textbook gradients.
class NaiveAttention {
public:
  NaiveAttention(const AttnCase &c, const AttnData &x) : c_(c), x_(x) {}

  AttnResult run() const {
    AttnResult r;
    r.out.assign(numelOf(c_.outShape()), 0);
    r.lse.assign(numelOf(c_.lseShape()), 0);
    r.gradQ.assign(x_.q.size(), 0);
    r.gradK.assign(x_.k.size(), 0);
    r.gradV.assign(x_.v.size(), 0);
    for (int64_t b = 0; b < c_.b; ++b)
      for (int64_t h = 0; h < c_.hq; ++h)
        head(b, h, r);
    return r;
  }

private:
  double score(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const auto &a = c_.attrs;
    if ((a.causal && j > i) || (a.window > 0 && j <= i - a.window))
      return -INFINITY;
    int64_t g = h / (c_.hq / c_.hkv);
    double s = 0;
    for (int64_t e = 0; e < c_.d; ++e)
      s += x_.q[((b * c_.hq + h) * c_.tq + i) * c_.d + e] *
           x_.k[((b * c_.hkv + g) * c_.tk + j) * c_.d + e];
    s *= a.scale;
    if (c_.mask == MaskKind::None)
      return s;
    const auto &ms = c_.maskShape;
    int64_t idx[4] = {b, h, i, j}, off = 0;
    for (int dim = 0; dim < 4; ++dim)
      off = off * ms[dim] + (ms[dim] == 1 ? 0 : idx[dim]);
    double m = x_.mask[off];
    if (c_.mask == MaskKind::Bool)
      return m != 0 ? s : -INFINITY;
    return s + m;
  }

  double keep(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const auto &a = c_.attrs;
    if (a.dropout <= 0)
      return 1;
    bool kept = cpu::attentionDropoutKeep(a.seed, b, h, i, j, c_.hq, c_.tq,
                                          c_.tk, a.dropout);
    return kept ? 1 / (1 - a.dropout) : 0;
  }

  void head(int64_t b, int64_t h, AttnResult &r) const {
    const int64_t tq = c_.tq, tk = c_.tk, d = c_.d, dv = c_.dv;
    int64_t g = h / (c_.hq / c_.hkv);
    std::vector<double> p(tq * tk), z(tq * tk);
    for (int64_t i = 0; i < tq; ++i) {
      double m = -INFINITY;
      for (int64_t j = 0; j < tk; ++j) {
        p[i * tk + j] = score(b, h, i, j);
        z[i * tk + j] = keep(b, h, i, j);
        m = std::max(m, p[i * tk + j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j) {
        double e = m == -INFINITY ? 0 : std::exp(p[i * tk + j] - m);
        p[i * tk + j] = e;
        sum += e;
      }
      for (int64_t j = 0; j < tk; ++j)
        p[i * tk + j] = sum > 0 ? p[i * tk + j] / sum : 0;
      r.lse[(b * c_.hq + h) * tq + i] = sum > 0 ? m + std::log(sum) : -INFINITY;
    }
    auto qAt = [&](int64_t i) { return ((b * c_.hq + h) * tq + i); };
    auto kvAt = [&](int64_t j) { return ((b * c_.hkv + g) * tk + j); };
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j)
        for (int64_t e = 0; e < dv; ++e)
          r.out[qAt(i) * dv + e] +=
              p[i * tk + j] * z[i * tk + j] * x_.v[kvAt(j) * dv + e];
    // Gradients: dp = z * (dO . v), ds = p * (dp - sum_k p_k dp_k).
    for (int64_t i = 0; i < tq; ++i) {
      std::vector<double> dp(tk);
      double pdp = 0;
      for (int64_t j = 0; j < tk; ++j) {
        double acc = 0;
        for (int64_t e = 0; e < dv; ++e)
          acc += x_.gradOut[qAt(i) * dv + e] * x_.v[kvAt(j) * dv + e];
        dp[j] = z[i * tk + j] * acc;
        pdp += p[i * tk + j] * dp[j];
      }
      for (int64_t j = 0; j < tk; ++j) {
        double pij = p[i * tk + j];
        double ds = pij * (dp[j] - pdp) * c_.attrs.scale;
        for (int64_t e = 0; e < dv; ++e)
          r.gradV[kvAt(j) * dv + e] +=
              pij * z[i * tk + j] * x_.gradOut[qAt(i) * dv + e];
        for (int64_t e = 0; e < d; ++e) {
          r.gradQ[qAt(i) * d + e] += ds * x_.k[kvAt(j) * d + e];
          r.gradK[kvAt(j) * d + e] += ds * x_.q[qAt(i) * d + e];
        }
      }
    }
  }

  const AttnCase &c_;
  const AttnData &x_;
};

} // namespace dsc::test

#endif // DSC_TEST_UNIT_RUNTIME_ATTENTIONREFERENCE_H
