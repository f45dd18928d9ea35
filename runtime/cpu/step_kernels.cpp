//===- step_kernels.cpp - Optimizer, conv-gradient and fill kernels -------===//
//
// Reference implementations of step_kernels.h. Scalars of the optimizer math
// (bias corrections, step sizes) are computed in double, elements in their
// own dtype, in a fixed order.
//
//===----------------------------------------------------------------------===//

#include "cpu/step_kernels.h"
#include "cpu/half_emulation.h"

#include "cpu/checks_layout.h"
#include "cpu/checks_math.h"
#include "cpu/kernel_util.h"

#include "dsc/workspaces.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

namespace dsc::cpu {

using namespace detail;

namespace {

constexpr double kPi = 3.14159265358979323846;

bool isScalar(const Tensor &t) { return t.present() && t.numel() == 1; }

/// Checks that every hyperparameter is a present float scalar.
Status checkScalars(const Call &call,
                    std::initializer_list<const Tensor *> scalars) {
  for (const Tensor *t : scalars)
    if (!isScalar(*t) || !validRank(*t) || !isFloat(t->dtype))
      return call.fail("hyperparameters must be float scalars");
  return Status();
}

/// An integer scalar; with `value` (host memory) read into it and at least 1.
Status checkStep(const Call &call, const Tensor &step, int64_t *value) {
  if (!isScalar(step) || !validRank(step) ||
      (step.dtype != DType::I64 && step.dtype != DType::I32))
    return call.fail("step must be an integer scalar");
  if (!value)
    return Status();
  int64_t t = *value = loadAsInt(step.data, step.dtype, 0);
  if (t < 1)
    return call.fail("step must be at least 1, got " + std::to_string(t),
                     StatusCode::OutOfRange);
  return Status();
}

/// Every tensor present, of `like`'s float dtype and shape.
Status checkLike(const Call &call, const Tensor &like,
                 std::initializer_list<const Tensor *> ts) {
  if (!validRank(like) ||
      (like.dtype != DType::F32 && like.dtype != DType::F64))
    return call.fail("expects f32 or f64 tensors", StatusCode::Unimplemented);
  for (const Tensor *t : ts)
    if (!t->present() || !validRank(*t) || t->dtype != like.dtype ||
        !sameShape(*t, like))
      return call.fail("operands and results must share one dtype and shape");
  return Status();
}

double scalar(const Tensor &t) { return loadAsDouble(t.data, t.dtype, 0); }

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

} // namespace

Status detail::checkFill(Call &call, const Tensor &out, double value) {
  call.arg("out", out).raw("value", std::to_string(value));
  if (!validRank(out))
    return call.fail("rank above 8");
  if (!out.present() && out.numel() != 0)
    return call.fail("result must be present");
  return Status();
}

Status fill(const Tensor &out, double value) {
  Call call("fill");
  if (Status st = checkFill(call, out, value); !st.ok())
    return st;
  for (int64_t i = 0, n = out.numel(); i < n; ++i)
    storeDouble(out.data, out.dtype, i, value);
  return Status();
}

Status convBackwardInput(const Tensor &gradOut, const Tensor &weight,
                         const ConvAttrs &attrs, const Tensor &gradInput,
                         int threads) {
  if (auto st = emulateHalf("conv_backward_input", {gradOut, weight, gradInput},
                            [&](HalfAsF32 &h) {
                              return convBackwardInput(
                                  h.in(gradOut), h.in(weight), attrs,
                                  h.out(gradInput), threads);
                            }))
    return *st;
  Call call("conv_backward_input");
  if (Status st =
          detail::checkConvBackwardInput(call, gradOut, weight, gradInput);
      !st.ok())
    return st;
  // convBackward reads the input only for the weight gradient: a view with
  // the input's shape and no data describes it.
  Tensor input = gradInput;
  input.data = nullptr;
  return convBackward(input, weight, attrs, gradOut, gradInput, Tensor(),
                      Tensor(), threads);
}

Status convBackwardWeight(const Tensor &gradOut, const Tensor &input,
                          const ConvAttrs &attrs, const Tensor &gradWeight,
                          int threads) {
  if (auto st = emulateHalf("conv_backward_weight",
                            {gradOut, input, gradWeight}, [&](HalfAsF32 &h) {
                              return convBackwardWeight(
                                  h.in(gradOut), h.in(input), attrs,
                                  h.out(gradWeight), threads);
                            }))
    return *st;
  Call call("conv_backward_weight");
  if (Status st =
          detail::checkConvBackwardWeight(call, gradOut, input, gradWeight);
      !st.ok())
    return st;
  // Likewise the weight is read only for the input gradient.
  Tensor weight = gradWeight;
  weight.data = nullptr;
  return convBackward(input, weight, attrs, gradOut, Tensor(), gradWeight,
                      Tensor(), threads);
}

Status detail::checkAdamw(Call &call, const Tensor &param, const Tensor &grad,
                          const Tensor &expAvg, const Tensor &expAvgSq,
                          const Tensor &lr, const Tensor &beta1,
                          const Tensor &beta2, const Tensor &eps,
                          const Tensor &weightDecay, const Tensor &step,
                          const Tensor &newParam, const Tensor &newExpAvg,
                          const Tensor &newExpAvgSq, int64_t *stepValue) {
  call.arg("param", param)
      .arg("grad", grad)
      .arg("exp_avg", expAvg)
      .arg("exp_avg_sq", expAvgSq)
      .arg("step", step);
  if (Status st = checkLike(
          call, param,
          {&grad, &expAvg, &expAvgSq, &newParam, &newExpAvg, &newExpAvgSq});
      !st.ok())
    return st;
  if (Status st = checkScalars(call, {&lr, &beta1, &beta2, &eps, &weightDecay});
      !st.ok())
    return st;
  return checkStep(call, step, stepValue);
}

namespace {

/// The per-step scalars of adamw's element loop, in the element dtype.
template <typename T> struct AdamwConsts {
  T b1, b2, decay, stepSize, bc2Sqrt, eps;
};

/// Bias corrections, step size and decay in double, then rounded to T.
template <typename T>
AdamwConsts<T> adamwConsts(const Tensor &lr, const Tensor &beta1,
                           const Tensor &beta2, const Tensor &eps,
                           const Tensor &weightDecay, int64_t t) {
  const double lrV = scalar(lr), b1 = scalar(beta1), b2 = scalar(beta2),
               epsV = scalar(eps), wd = scalar(weightDecay);
  const double bc1 = 1 - std::pow(b1, static_cast<double>(t));
  const double bc2Sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(t)));
  const double stepSize = lrV / bc1, decay = 1 - lrV * wd;
  return {T(b1), T(b2), T(decay), T(stepSize), T(bc2Sqrt), T(epsV)};
}

/// floatToBfloat16's bits (round to nearest even; a NaN kept quiet), with
/// no branch, so that a loop writing them vectorizes.
inline uint16_t bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet
                                                               : rounded);
}

/// The AdamW update of n elements, in T, with no branch in the loop so that
/// it is vectorized (sqrt without errno: this file is built with
/// -fno-math-errno; the values are the scalar ones, IEEE per lane, and no
/// multiply-add is contracted: the clones are AVX2 without FMA and SSE2).
/// The gradient is first multiplied by the first `Scales` of (s0, s1), in
/// that order, each product rounded to T. With `copy` (T = float) the new
/// parameter's bf16 rounding is written there in the same pass, while the
/// value is in a register.
template <typename T, int Scales, bool Bf16Copy = false>
inline void adamwLoop(const AdamwConsts<T> &k, T s0, T s1, const T *p,
                      const T *g, const T *m, const T *v, T *np, T *nm, T *nv,
                      int64_t n, uint16_t *copy = nullptr) {
  const T tB1 = k.b1, tB2 = k.b2, tDecay = k.decay, tStep = k.stepSize,
          tBc2 = k.bc2Sqrt, tEps = k.eps, oB1 = T(1) - k.b1,
          oB2 = T(1) - k.b2;
  // Element i reads all its operands before writing, so results may be the
  // operands' own storage (element for element: no dependence between
  // iterations, which ivdep tells the vectorizer).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC ivdep
#endif
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if constexpr (Scales >= 1)
      gi = T(gi * s0);
    if constexpr (Scales >= 2)
      gi = T(gi * s1);
    T pi = p[i] * tDecay;
    T mi = tB1 * m[i] + oB1 * gi;
    T vi = tB2 * v[i] + oB2 * gi * gi;
    pi -= tStep * mi / (std::sqrt(vi) / tBc2 + tEps);
    np[i] = pi, nm[i] = mi, nv[i] = vi;
    if constexpr (Bf16Copy)
      copy[i] = bf16Bits(pi);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DSC_ADAMW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DSC_ADAMW_CLONES
#endif

DSC_ADAMW_CLONES
void adamwF32(const AdamwConsts<float> &k, float s0, float s1, int scales,
              const float *p, const float *g, const float *m, const float *v,
              float *np, float *nm, float *nv, int64_t n) {
  if (scales == 2)
    adamwLoop<float, 2>(k, s0, s1, p, g, m, v, np, nm, nv, n);
  else if (scales == 1)
    adamwLoop<float, 1>(k, s0, s1, p, g, m, v, np, nm, nv, n);
  else
    adamwLoop<float, 0>(k, s0, s1, p, g, m, v, np, nm, nv, n);
}

/// adamwF32 writing the new parameters' bf16 compute copy in the same loop.
DSC_ADAMW_CLONES
void adamwF32Bf16(const AdamwConsts<float> &k, float s0, float s1, int scales,
                  const float *p, const float *g, const float *m,
                  const float *v, float *np, float *nm, float *nv,
                  uint16_t *copy, int64_t n) {
  if (scales == 2)
    adamwLoop<float, 2, true>(k, s0, s1, p, g, m, v, np, nm, nv, n, copy);
  else if (scales == 1)
    adamwLoop<float, 1, true>(k, s0, s1, p, g, m, v, np, nm, nv, n, copy);
  else
    adamwLoop<float, 0, true>(k, s0, s1, p, g, m, v, np, nm, nv, n, copy);
}

/// Elements [begin, end) of one parameter's adamw. The gradient is first
/// multiplied by the first `Scales` of (s0, s1), each product rounded to T
/// as binary's mul rounds it; with a compute copy newParam is also written
/// rounded to bf16 or f16, through f32 as cast rounds it (f32 to bf16 in
/// the update's own loop; otherwise block by block, while it is in cache).
template <typename T, int Scales>
void adamwElements(const AdamwConsts<T> &k, T s0, T s1, const AdamwTensors &e,
                   int64_t begin, int64_t end) {
  const T *p = e.param.as<T>(), *g = e.grad.as<T>(), *m = e.expAvg.as<T>(),
          *v = e.expAvgSq.as<T>();
  T *np = e.newParam.as<T>(), *nm = e.newExpAvg.as<T>(),
    *nv = e.newExpAvgSq.as<T>();
  uint16_t *copy = e.computeCopy.as<uint16_t>();
  const bool copyBf16 = e.computeCopy.dtype == DType::BF16;
  if constexpr (std::is_same_v<T, float>)
    if (copy && copyBf16) {
      adamwF32Bf16(k, s0, s1, Scales, p + begin, g + begin, m + begin,
                   v + begin, np + begin, nm + begin, nv + begin, copy + begin,
                   end - begin);
      return;
    }
  constexpr int64_t kBlock = 4096;
  for (int64_t b = begin; b < end; b += kBlock) {
    int64_t n = std::min(kBlock, end - b);
    if constexpr (std::is_same_v<T, float>)
      adamwF32(k, s0, s1, Scales, p + b, g + b, m + b, v + b, np + b, nm + b,
               nv + b, n);
    else
      adamwLoop<T, Scales>(k, s0, s1, p + b, g + b, m + b, v + b, np + b,
                           nm + b, nv + b, n);
    if (!copy)
      continue;
    for (int64_t i = b; i < b + n; ++i) {
      float f = static_cast<float>(np[i]);
      copy[i] = copyBf16 ? floatToBfloat16(f) : floatToHalf(f);
    }
  }
}

} // namespace

Status adamw(const Tensor &param, const Tensor &grad, const Tensor &expAvg,
             const Tensor &expAvgSq, const Tensor &lr, const Tensor &beta1,
             const Tensor &beta2, const Tensor &eps, const Tensor &weightDecay,
             const Tensor &step, const Tensor &newParam,
             const Tensor &newExpAvg, const Tensor &newExpAvgSq) {
  Call call("adamw");
  int64_t t = 0;
  if (Status st =
          checkAdamw(call, param, grad, expAvg, expAvgSq, lr, beta1, beta2, eps,
                     weightDecay, step, newParam, newExpAvg, newExpAvgSq, &t);
      !st.ok())
    return st;
  const AdamwTensors e{param,    grad,      expAvg,      expAvgSq,
                       newParam, newExpAvg, newExpAvgSq, Tensor()};
  dispatchFloat(param.dtype, [&](auto tag) {
    using T = decltype(tag);
    adamwElements<T, 0>(adamwConsts<T>(lr, beta1, beta2, eps, weightDecay, t),
                        T(1), T(1), e, 0, param.numel());
  });
  return Status();
}

Status detail::checkAdamwMulti(const AdamwTensors *tensors, size_t count,
                               const Tensor &lr, const Tensor &beta1,
                               const Tensor &beta2, const Tensor &eps,
                               const Tensor &weightDecay, const Tensor &step,
                               const Tensor &gradScale,
                               const Tensor &gradPrescale, int64_t *stepValue) {
  if (count == 0)
    return Status();
  if (!tensors)
    return Call("adamw_multi")
        .raw("count", std::to_string(count))
        .fail("the entries are missing (null pointer)");
  const DType dtype = tensors[0].param.dtype;
  for (size_t i = 0; i < count; ++i) {
    const AdamwTensors &e = tensors[i];
    Call call("adamw_multi");
    call.raw("entry", std::to_string(i));
    if (Status st = checkAdamw(call, e.param, e.grad, e.expAvg, e.expAvgSq, lr,
                               beta1, beta2, eps, weightDecay, step, e.newParam,
                               e.newExpAvg, e.newExpAvgSq, stepValue);
        !st.ok())
      return st;
    if (e.param.dtype != dtype)
      return call.fail(std::string("every entry must have entry 0's dtype, ") +
                       dtypeName(dtype));
    if (e.computeCopy.present()) {
      call.arg("compute_copy", e.computeCopy);
      if (!validRank(e.computeCopy) ||
          (e.computeCopy.dtype != DType::BF16 &&
           e.computeCopy.dtype != DType::F16) ||
          !sameShape(e.computeCopy, e.param))
        return call.fail("compute_copy must be bf16 or f16 of param's shape");
    }
  }
  for (auto [name, scale] :
       {std::pair<const char *, const Tensor *>{"grad_scale", &gradScale},
        {"grad_prescale", &gradPrescale}})
    if (scale->present() &&
        (!isScalar(*scale) || !validRank(*scale) || scale->dtype != dtype))
      return Call("adamw_multi")
          .arg(name, *scale)
          .fail(std::string(name) +
                " must be a scalar of the parameters' dtype, " +
                dtypeName(dtype));
  return Status();
}

Status adamwMulti(const AdamwTensors *tensors, size_t count, const Tensor &lr,
                  const Tensor &beta1, const Tensor &beta2, const Tensor &eps,
                  const Tensor &weightDecay, const Tensor &step,
                  const Tensor &gradScale, const Tensor &gradPrescale,
                  int threads) {
  int64_t t = 0;
  if (Status st =
          checkAdamwMulti(tensors, count, lr, beta1, beta2, eps, weightDecay,
                          step, gradScale, gradPrescale, &t);
      !st.ok())
    return st;
  if (count == 0)
    return Status();
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i)
    total += tensors[i].param.numel();
  dispatchFloat(tensors[0].param.dtype, [&](auto tag) {
    using T = decltype(tag);
    const AdamwConsts<T> k =
        adamwConsts<T>(lr, beta1, beta2, eps, weightDecay, t);
    // The scales present, in the order they apply: prescale, then scale.
    T s[2] = {T(1), T(1)};
    int scales = 0;
    for (const Tensor *scale : {&gradPrescale, &gradScale})
      if (scale->present())
        s[scales++] = *scale->as<T>();
    // The entries laid end to end; each thread takes a contiguous range of
    // that and updates the parts of the entries it covers.
    parallelFor(total, threads, int64_t(1) << 16,
                [&](int64_t begin, int64_t end) {
                  int64_t offset = 0;
                  for (size_t i = 0; i < count && offset < end; ++i) {
                    const AdamwTensors &e = tensors[i];
                    int64_t n = e.param.numel();
                    int64_t lo = std::max(begin, offset) - offset;
                    int64_t hi = std::min(end, offset + n) - offset;
                    offset += n;
                    if (lo >= hi)
                      continue;
                    if (scales == 2)
                      adamwElements<T, 2>(k, s[0], s[1], e, lo, hi);
                    else if (scales == 1)
                      adamwElements<T, 1>(k, s[0], s[1], e, lo, hi);
                    else
                      adamwElements<T, 0>(k, s[0], s[1], e, lo, hi);
                  }
                });
  });
  return Status();
}

Status detail::checkSumSquares(const Tensor *tensors, size_t count,
                               const Tensor &scale, const Tensor &out) {
  if (count > 0 && !tensors)
    return Call("sum_squares")
        .raw("count", std::to_string(count))
        .fail("the tensors are missing (null pointer)");
  const DType dtype = count ? tensors[0].dtype : DType::F32;
  for (size_t i = 0; i < count; ++i) {
    const Tensor &t = tensors[i];
    Call call("sum_squares");
    call.raw("entry", std::to_string(i)).arg("tensor", t);
    if (!validRank(t) || (t.dtype != DType::F32 && t.dtype != DType::F64))
      return call.fail("tensors must be f32 or f64");
    if (t.dtype != dtype)
      return call.fail(std::string("every tensor must have entry 0's dtype, ") +
                       dtypeName(dtype));
    for (int d = 0; d < t.rank; ++d)
      if (t.shape[d] < 0)
        return call.fail("dims must not be negative");
    if (!t.present() && t.numel() > 0)
      return call.fail("the tensor's data is missing (null pointer)");
  }
  if (scale.present() && (!isScalar(scale) || !validRank(scale) ||
                          (scale.dtype != DType::F32 && scale.dtype != dtype)))
    return Call("sum_squares")
        .arg("scale", scale)
        .fail(std::string("scale must be a scalar of f32 or ") +
              dtypeName(dtype));
  if (!isScalar(out) || !validRank(out) ||
      (out.dtype != DType::F32 && out.dtype != DType::F64))
    return Call("sum_squares")
        .arg("out", out)
        .fail("out must be an f32 or f64 scalar");
  return Status();
}

namespace {

/// The sum of double(v)^2 over x[begin, end), v = x * scale in T.
template <typename T, bool Scaled>
double sumSquaresRange(const T *x, int64_t begin, int64_t end, T scale) {
  double acc = 0;
  for (int64_t i = begin; i < end; ++i) {
    T v = Scaled ? x[i] * scale : x[i];
    acc += double(v) * double(v);
  }
  return acc;
}

} // namespace

Status sumSquares(const Tensor *tensors, size_t count, const Tensor &scale,
                  const Tensor &out, int threads) {
  if (Status st = checkSumSquares(tensors, count, scale, out); !st.ok())
    return st;
  // The chunks of every tensor, laid end to end: (tensor, first element).
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i)
    total += tensors[i].numel();
  const int64_t chunk = sumSquaresChunk(total);
  std::vector<std::pair<size_t, int64_t>> chunks;
  for (size_t i = 0; i < count; ++i)
    for (int64_t b = 0; b < tensors[i].numel(); b += chunk)
      chunks.emplace_back(i, b);
  std::vector<double> partial(chunks.size(), 0.0);
  if (count)
    dispatchFloat(tensors[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      const bool scaled = scale.present();
      const T s = !scaled                     ? T(1)
                  : scale.dtype == DType::F32 ? T(*scale.as<float>())
                                              : T(*scale.as<double>());
      const int64_t n = static_cast<int64_t>(chunks.size());
      parallelFor(n, threads, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t c = lo; c < hi; ++c) {
          const Tensor &t = tensors[chunks[c].first];
          int64_t b = chunks[c].second;
          int64_t e = std::min(b + chunk, t.numel());
          partial[c] = scaled ? sumSquaresRange<T, true>(t.as<T>(), b, e, s)
                              : sumSquaresRange<T, false>(t.as<T>(), b, e, s);
        }
      });
    });
  double sum = 0;
  for (double p : partial)
    sum += p;
  if (out.dtype == DType::F32)
    *out.as<float>() = static_cast<float>(sum);
  else
    *out.as<double>() = sum;
  return Status();
}

Status detail::checkSgd(Call &call, const Tensor &param, const Tensor &grad,
                        const Tensor &momentumBuffer, const Tensor &lr,
                        const Tensor &momentum, const Tensor &weightDecay,
                        const Tensor &step, const Tensor &newParam,
                        const Tensor &newMomentumBuffer, int64_t *stepValue) {
  call.arg("param", param)
      .arg("grad", grad)
      .arg("momentum_buffer", momentumBuffer)
      .arg("step", step);
  if (Status st = checkLike(
          call, param, {&grad, &momentumBuffer, &newParam, &newMomentumBuffer});
      !st.ok())
    return st;
  if (Status st = checkScalars(call, {&lr, &momentum, &weightDecay}); !st.ok())
    return st;
  return checkStep(call, step, stepValue);
}

Status sgd(const Tensor &param, const Tensor &grad,
           const Tensor &momentumBuffer, const Tensor &lr,
           const Tensor &momentum, const Tensor &weightDecay,
           const Tensor &step, double dampening, bool nesterov,
           const Tensor &newParam, const Tensor &newMomentumBuffer) {
  Call call("sgd");
  int64_t t = 0;
  if (Status st = checkSgd(call, param, grad, momentumBuffer, lr, momentum,
                           weightDecay, step, newParam, newMomentumBuffer, &t);
      !st.ok())
    return st;
  const double lrV = scalar(lr), mom = scalar(momentum),
               wd = scalar(weightDecay);
  dispatchFloat(param.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *p = param.as<T>(), *g = grad.as<T>(), *b = momentumBuffer.as<T>();
    T *np = newParam.as<T>(), *nb = newMomentumBuffer.as<T>();
    const T tLr = T(lrV), tMom = T(mom), tWd = T(wd), tDamp = T(1 - dampening);
    for (int64_t i = 0, n = param.numel(); i < n; ++i) {
      T pi = p[i], gi = g[i] + tWd * pi, bi = b[i];
      if (mom != 0) {
        bi = t == 1 ? gi : tMom * bi + tDamp * gi;
        gi = nesterov ? gi + tMom * bi : bi;
      }
      np[i] = pi - tLr * gi, nb[i] = bi;
    }
  });
  return Status();
}

Status parseLrSchedule(const std::string &name, LrSchedule &out) {
  if (name == "constant")
    out = LrSchedule::Constant;
  else if (name == "warmup_cosine")
    out = LrSchedule::WarmupCosine;
  else if (name == "warmup_linear")
    out = LrSchedule::WarmupLinear;
  else
    return Status::error(StatusCode::InvalidArgument,
                         "lr_schedule(kind=" + name +
                             "): kind must be constant, warmup_cosine or "
                             "warmup_linear");
  return Status();
}

Status detail::checkLrSchedule(Call &call, const Tensor &step,
                               const Tensor &baseLr, int64_t warmupSteps,
                               int64_t totalSteps, const Tensor &lr,
                               int64_t *stepValue) {
  call.arg("step", step)
      .arg("base_lr", baseLr)
      .arg("warmup_steps", warmupSteps)
      .arg("total_steps", totalSteps)
      .arg("lr", lr);
  if (Status st = checkScalars(call, {&baseLr, &lr}); !st.ok())
    return st;
  if (Status st = checkStep(call, step, stepValue); !st.ok())
    return st;
  if (warmupSteps < 0 || totalSteps < 0)
    return call.fail("step counts must not be negative");
  return Status();
}

Status lrSchedule(const Tensor &step, const Tensor &baseLr, LrSchedule kind,
                  int64_t warmupSteps, int64_t totalSteps,
                  double warmupMinRatio, double minRatio, const Tensor &lr) {
  Call call("lr_schedule");
  int64_t t = 0;
  if (Status st =
          checkLrSchedule(call, step, baseLr, warmupSteps, totalSteps, lr, &t);
      !st.ok())
    return st;
  double ratio = 1;
  if (t <= warmupSteps) {
    ratio = warmupMinRatio + (1 - warmupMinRatio) * static_cast<double>(t) /
                                 static_cast<double>(warmupSteps);
  } else if (kind != LrSchedule::Constant) {
    double p = 1;
    if (totalSteps > warmupSteps)
      p = std::min(1.0, static_cast<double>(t - warmupSteps) /
                            static_cast<double>(totalSteps - warmupSteps));
    double shape = kind == LrSchedule::WarmupCosine
                       ? 0.5 * (1 + std::cos(kPi * p))
                       : 1 - p;
    ratio = minRatio + (1 - minRatio) * shape;
  }
  storeDouble(lr.data, lr.dtype, 0, scalar(baseLr) * ratio);
  return Status();
}

namespace {
thread_local int64_t draws = 0;
} // namespace

int64_t stepVaryingDraws() { return draws; }

uint64_t dropoutSeed(uint64_t runSeed, int64_t step, int64_t call, int64_t op) {
  ++draws;
  uint64_t h = splitmix64(runSeed);
  h = splitmix64(h ^ static_cast<uint64_t>(step));
  h = splitmix64(h ^ static_cast<uint64_t>(call));
  return splitmix64(h ^ static_cast<uint64_t>(op));
}

} // namespace dsc::cpu
