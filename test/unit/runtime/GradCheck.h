//===- GradCheck.h - Buffers and finite-difference checks for the tests ---===//

#ifndef DSC_TEST_UNIT_RUNTIME_GRADCHECK_H
#define DSC_TEST_UNIT_RUNTIME_GRADCHECK_H

#include "dsc/runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace dsc::test {

/// An owning buffer with a view.
template <typename T> struct Buf {
  std::vector<T> v;
  std::vector<int64_t> shape;
  DType dtype;

  Buf() = default;
  Buf(std::vector<int64_t> s, DType dt, std::vector<T> values = {})
      : shape(std::move(s)), dtype(dt) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    v = values.empty() ? std::vector<T>(n, T(0)) : std::move(values);
  }
  Tensor t() { return Tensor::of(v.data(), dtype, shape); }
  T &operator[](size_t i) { return v[i]; }
};

using D = Buf<double>;
using F = Buf<float>;

inline D randD(std::vector<int64_t> shape, std::mt19937_64 &rng, double lo = -1,
               double hi = 1) {
  D b(std::move(shape), DType::F64);
  std::uniform_real_distribution<double> u(lo, hi);
  for (double &x : b.v)
    x = u(rng);
  return b;
}

inline D zerosD(std::vector<int64_t> shape) {
  return D(std::move(shape), DType::F64);
}

/// forward(inputs, out); backward(inputs, gradOut, grads): grads of the
/// unchecked inputs are absent views.
using Forward = std::function<Status(std::vector<Tensor> &, const Tensor &)>;
using Backward = std::function<Status(std::vector<Tensor> &, const Tensor &,
                                      std::vector<Tensor> &)>;

/// Central differences of L = sum(out * R) for random R against the analytic
/// gradients of the inputs listed in `check`; returns the largest
/// norm-wise relative error max|a - n| / max|n| over the checked inputs.
inline double gradCheck(std::vector<D> &inputs, std::vector<int64_t> outShape,
                        const Forward &forward, const Backward &backward,
                        std::vector<int> check, double h = 1e-6,
                        uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  D out = zerosD(outShape);
  D r = randD(outShape, rng);
  auto views = [&] {
    std::vector<Tensor> ts;
    for (D &b : inputs)
      ts.push_back(b.t());
    return ts;
  };
  auto loss = [&] {
    std::vector<Tensor> ts = views();
    Status st = forward(ts, out.t());
    EXPECT_TRUE(st.ok()) << st.message();
    double l = 0;
    for (size_t i = 0; i < out.v.size(); ++i)
      l += out.v[i] * r.v[i];
    return l;
  };
  std::vector<D> grads;
  std::vector<Tensor> gradViews(inputs.size());
  grads.reserve(inputs.size());
  for (D &b : inputs)
    grads.push_back(zerosD(b.shape));
  for (int i : check) {
    std::fill(grads[i].v.begin(), grads[i].v.end(), 12345.0); // overwritten?
    gradViews[i] = grads[i].t();
  }
  std::vector<Tensor> ts = views();
  Status st = backward(ts, r.t(), gradViews);
  EXPECT_TRUE(st.ok()) << st.message();
  double worst = 0;
  for (int i : check) {
    double maxDiff = 0, maxNum = 0;
    for (size_t j = 0; j < inputs[i].v.size(); ++j) {
      double keep = inputs[i].v[j];
      inputs[i].v[j] = keep + h;
      double lp = loss();
      inputs[i].v[j] = keep - h;
      double lm = loss();
      inputs[i].v[j] = keep;
      double num = (lp - lm) / (2 * h);
      maxDiff = std::max(maxDiff, std::abs(num - grads[i].v[j]));
      maxNum = std::max(maxNum, std::abs(num));
    }
    double rel = maxDiff / std::max(maxNum, 1e-12);
    EXPECT_LT(rel, 1e-6) << "input " << i << ": max |analytic - numeric| "
                         << maxDiff << ", max |numeric| " << maxNum;
    worst = std::max(worst, rel);
  }
  return worst;
}

#define DSC_ASSERT_OK(expr)                                                    \
  do {                                                                         \
    ::dsc::Status _st = (expr);                                                \
    ASSERT_TRUE(_st.ok()) << _st.message();                                    \
  } while (0)

#define DSC_EXPECT_OK(expr)                                                    \
  do {                                                                         \
    ::dsc::Status _st = (expr);                                                \
    EXPECT_TRUE(_st.ok()) << _st.message();                                    \
  } while (0)

} // namespace dsc::test

#endif // DSC_TEST_UNIT_RUNTIME_GRADCHECK_H
