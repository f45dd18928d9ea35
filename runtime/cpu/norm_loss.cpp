//===- norm_loss.cpp - CPU kernels: norms, softmax, losses, dropout -------===//

#include "cpu/checks_math.h"
#include "cpu/kernel_util.h"
#include "cpu/kernels.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace dsc::cpu {

using namespace detail;

namespace {

Status checkFloat(const Call &call, std::initializer_list<const Tensor *> ts,
                  DType dtype) {
  if (dtype != DType::F32 && dtype != DType::F64)
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  for (const Tensor *t : ts)
    if (t->present() && (!validRank(*t) || t->dtype != dtype))
      return call.fail("operands and results must share one float dtype");
  return Status();
}

/// [N, C, rest...] as (N, C, rest) for per-channel statistics.
void channelLayout(const Tensor &x, int64_t &n, int64_t &c, int64_t &s) {
  n = x.shape[0], c = x.shape[1], s = 1;
  for (int d = 2; d < x.rank; ++d)
    s *= x.shape[d];
}

/// Per-channel mean and biased variance, summed in (n, s) order.
template <typename T>
void channelStats(const T *x, int64_t n, int64_t c, int64_t s,
                  std::vector<T> &mean, std::vector<T> &var) {
  mean.assign(c, T(0));
  var.assign(c, T(0));
  T count = static_cast<T>(n * s);
  for (int64_t ch = 0; ch < c; ++ch) {
    T acc = T(0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j)
        acc += x[(i * c + ch) * s + j];
    mean[ch] = acc / count;
    T sq = T(0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        T d = x[(i * c + ch) * s + j] - mean[ch];
        sq += d * d;
      }
    var[ch] = sq / count;
  }
}

} // namespace

Status detail::checkBatchNormTrain(
    Call &call, const Tensor &input, const Tensor &scale, const Tensor &bias,
    const Tensor &runningMean, const Tensor &runningVar, const Tensor &out,
    const Tensor &newRunningMean, const Tensor &newRunningVar,
    const Tensor &saveMean, const Tensor &saveInvStd, int64_t &n, int64_t &c,
    int64_t &s) {
  call.arg("input", input)
      .arg("scale", scale)
      .arg("bias", bias)
      .arg("running_mean", runningMean)
      .arg("running_var", runningVar)
      .arg("out", out);
  if (Status st =
          checkFloat(call,
                     {&input, &scale, &bias, &runningMean, &runningVar, &out,
                      &newRunningMean, &newRunningVar, &saveMean, &saveInvStd},
                     input.dtype);
      !st.ok())
    return st;
  if (input.rank < 2 || !sameShape(input, out))
    return call.fail("input must be [N, C, ...] and the result like it");
  channelLayout(input, n, c, s);
  for (const Tensor *t :
       {&scale, &bias, &runningMean, &runningVar, &newRunningMean,
        &newRunningVar, &saveMean, &saveInvStd})
    if (t->present() && !shapeIs(*t, {c}))
      return call.fail("per-channel operands must be [" + std::to_string(c) +
                       "]");
  if (!scale.present() || !bias.present() || !runningMean.present() ||
      !runningVar.present())
    return call.fail("scale, bias and running statistics are required");
  return Status();
}

Status batchNormTrain(const Tensor &input, const Tensor &scale,
                      const Tensor &bias, const Tensor &runningMean,
                      const Tensor &runningVar, double epsilon, double momentum,
                      const Tensor &out, const Tensor &newRunningMean,
                      const Tensor &newRunningVar, const Tensor &saveMean,
                      const Tensor &saveInvStd) {
  Call call("batch_norm_train");
  int64_t n, c, s;
  if (Status st = checkBatchNormTrain(
          call, input, scale, bias, runningMean, runningVar, out,
          newRunningMean, newRunningVar, saveMean, saveInvStd, n, c, s);
      !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> mean, var;
    channelStats(input.as<T>(), n, c, s, mean, var);
    T count = static_cast<T>(n * s), mom = T(momentum);
    for (int64_t ch = 0; ch < c; ++ch) {
      T inv = T(1) / std::sqrt(var[ch] + T(epsilon));
      T a = scale.as<T>()[ch] * inv, b = bias.as<T>()[ch];
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          int64_t at = (i * c + ch) * s + j;
          out.as<T>()[at] = (input.as<T>()[at] - mean[ch]) * a + b;
        }
      T unbiased = count > 1 ? var[ch] * count / (count - 1) : var[ch];
      if (newRunningMean.present())
        newRunningMean.as<T>()[ch] =
            mom * runningMean.as<T>()[ch] + (T(1) - mom) * mean[ch];
      if (newRunningVar.present())
        newRunningVar.as<T>()[ch] =
            mom * runningVar.as<T>()[ch] + (T(1) - mom) * unbiased;
      if (saveMean.present())
        saveMean.as<T>()[ch] = mean[ch];
      if (saveInvStd.present())
        saveInvStd.as<T>()[ch] = inv;
    }
  });
  return Status();
}

Status detail::checkBatchNormTrainBackward(
    Call &call, const Tensor &input, const Tensor &scale, const Tensor &gradOut,
    const Tensor &gradIn, const Tensor &gradScale, const Tensor &gradBias,
    int64_t &n, int64_t &c, int64_t &s) {
  call.arg("input", input).arg("scale", scale).arg("grad_out", gradOut);
  if (Status st = checkFloat(
          call, {&input, &scale, &gradOut, &gradIn, &gradScale, &gradBias},
          input.dtype);
      !st.ok())
    return st;
  if (input.rank < 2 || !sameShape(input, gradOut) ||
      (gradIn.present() && !sameShape(input, gradIn)))
    return call.fail("grad_out and grad_in must have the input's shape");
  channelLayout(input, n, c, s);
  for (const Tensor *t : {&scale, &gradScale, &gradBias})
    if (t->present() && !shapeIs(*t, {c}))
      return call.fail("per-channel operands must be [" + std::to_string(c) +
                       "]");
  return Status();
}

Status batchNormTrainBackward(const Tensor &input, const Tensor &scale,
                              double epsilon, const Tensor &gradOut,
                              const Tensor &gradIn, const Tensor &gradScale,
                              const Tensor &gradBias) {
  Call call("batch_norm_train_backward");
  int64_t n, c, s;
  if (Status st = checkBatchNormTrainBackward(
          call, input, scale, gradOut, gradIn, gradScale, gradBias, n, c, s);
      !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> mean, var;
    const T *x = input.as<T>(), *g = gradOut.as<T>();
    channelStats(x, n, c, s, mean, var);
    T count = static_cast<T>(n * s);
    for (int64_t ch = 0; ch < c; ++ch) {
      T inv = T(1) / std::sqrt(var[ch] + T(epsilon));
      T sumG = T(0), sumGX = T(0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          int64_t at = (i * c + ch) * s + j;
          sumG += g[at];
          sumGX += g[at] * (x[at] - mean[ch]) * inv;
        }
      if (gradScale.present())
        gradScale.as<T>()[ch] = sumGX;
      if (gradBias.present())
        gradBias.as<T>()[ch] = sumG;
      if (!gradIn.present())
        continue;
      T k = (scale.present() ? scale.as<T>()[ch] : T(1)) * inv / count;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          int64_t at = (i * c + ch) * s + j;
          T xhat = (x[at] - mean[ch]) * inv;
          gradIn.as<T>()[at] = k * (count * g[at] - sumG - xhat * sumGX);
        }
    }
  });
  return Status();
}

Status detail::checkBatchNorm(Call &call, const Tensor &input,
                              const Tensor &scale, const Tensor &bias,
                              const Tensor &mean, const Tensor &var,
                              const Tensor &out, int64_t &n, int64_t &c,
                              int64_t &s) {
  call.arg("input", input)
      .arg("scale", scale)
      .arg("bias", bias)
      .arg("mean", mean)
      .arg("var", var)
      .arg("out", out);
  if (Status st = checkFloat(call, {&input, &scale, &bias, &mean, &var, &out},
                             input.dtype);
      !st.ok())
    return st;
  if (input.rank < 2 || !sameShape(input, out))
    return call.fail("input must be [N, C, ...] and the result like it");
  channelLayout(input, n, c, s);
  for (const Tensor *t : {&scale, &bias, &mean, &var})
    if (!t->present() || !shapeIs(*t, {c}))
      return call.fail("per-channel operands must be [" + std::to_string(c) +
                       "]");
  return Status();
}

Status batchNorm(const Tensor &input, const Tensor &scale, const Tensor &bias,
                 const Tensor &mean, const Tensor &var, double epsilon,
                 const Tensor &out) {
  Call call("batch_norm");
  int64_t n, c, s;
  if (Status st =
          checkBatchNorm(call, input, scale, bias, mean, var, out, n, c, s);
      !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t ch = 0; ch < c; ++ch) {
      T a = scale.as<T>()[ch] / std::sqrt(var.as<T>()[ch] + T(epsilon));
      T m = mean.as<T>()[ch], b = bias.as<T>()[ch];
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          int64_t at = (i * c + ch) * s + j;
          out.as<T>()[at] = (input.as<T>()[at] - m) * a + b;
        }
    }
  });
  return Status();
}

Status batchNormBackward(const Tensor &input, const Tensor &scale,
                         const Tensor &mean, const Tensor &var, double epsilon,
                         const Tensor &gradOut, const Tensor &gradIn,
                         const Tensor &gradScale, const Tensor &gradBias) {
  Call call("batch_norm_backward");
  call.arg("input", input).arg("scale", scale).arg("grad_out", gradOut);
  if (Status st = checkFloat(call,
                             {&input, &scale, &mean, &var, &gradOut, &gradIn,
                              &gradScale, &gradBias},
                             input.dtype);
      !st.ok())
    return st;
  if (input.rank < 2 || !sameShape(input, gradOut) ||
      (gradIn.present() && !sameShape(input, gradIn)))
    return call.fail("grad_out and grad_in must have the input's shape");
  int64_t n, c, s;
  channelLayout(input, n, c, s);
  for (const Tensor *t : {&scale, &mean, &var})
    if (!t->present() || !shapeIs(*t, {c}))
      return call.fail("per-channel operands must be [" + std::to_string(c) +
                       "]");
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *x = input.as<T>(), *g = gradOut.as<T>();
    for (int64_t ch = 0; ch < c; ++ch) {
      T inv = T(1) / std::sqrt(var.as<T>()[ch] + T(epsilon));
      T m = mean.as<T>()[ch], sumG = T(0), sumGX = T(0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) {
          int64_t at = (i * c + ch) * s + j;
          sumG += g[at];
          sumGX += g[at] * (x[at] - m) * inv;
          if (gradIn.present())
            gradIn.as<T>()[at] = g[at] * scale.as<T>()[ch] * inv;
        }
      if (gradScale.present())
        gradScale.as<T>()[ch] = sumGX;
      if (gradBias.present())
        gradBias.as<T>()[ch] = sumG;
    }
  });
  return Status();
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

namespace {

Status layerNormLayout(const Call &call, const Tensor &input,
                       const Tensor &scale, const Tensor &bias, int64_t axis,
                       int64_t &rows, int64_t &cols) {
  if (!normalizeAxis(axis, input.rank))
    return call.fail("axis out of range");
  rows = 1, cols = 1;
  for (int d = 0; d < input.rank; ++d)
    (d < axis ? rows : cols) *= input.shape[d];
  for (const Tensor *t : {&scale, &bias})
    if (t->present() && t->numel() != cols)
      return call.fail("scale and bias must have the " + std::to_string(cols) +
                       " elements of dims [axis, rank)");
  return Status();
}

} // namespace

Status detail::checkLayerNorm(Call &call, const Tensor &input,
                              const Tensor &scale, const Tensor &bias,
                              int64_t axis, const Tensor &out, int64_t &rows,
                              int64_t &cols) {
  call.arg("input", input)
      .arg("scale", scale)
      .arg("bias", bias)
      .arg("axis", axis)
      .arg("out", out);
  if (Status st = checkFloat(call, {&input, &scale, &bias, &out}, input.dtype);
      !st.ok())
    return st;
  if (!sameShape(input, out) || !scale.present())
    return call.fail("scale is required; the result has the input's shape");
  return layerNormLayout(call, input, scale, bias, axis, rows, cols);
}

namespace {

/// A row's mean (zero for an RMS norm) and 1 / sqrt(var + eps), where var
/// is the mean square about it.
template <typename T>
void rowStats(const T *x, int64_t cols, double epsilon, bool rms, T &mean,
              T &inv) {
  mean = T(0);
  T var = T(0);
  if (!rms) {
    for (int64_t j = 0; j < cols; ++j)
      mean += x[j];
    mean /= static_cast<T>(cols);
  }
  for (int64_t j = 0; j < cols; ++j)
    var += (x[j] - mean) * (x[j] - mean);
  inv = T(1) / std::sqrt(var / static_cast<T>(cols) + T(epsilon));
}

Status normForward(const char *name, const Tensor &input, const Tensor &scale,
                   const Tensor &bias, int64_t axis, double epsilon, bool rms,
                   const Tensor &out) {
  Call call(name);
  int64_t rows, cols;
  if (Status st =
          checkLayerNorm(call, input, scale, bias, axis, out, rows, cols);
      !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t r = 0; r < rows; ++r) {
      const T *x = input.as<T>() + r * cols;
      T *y = out.as<T>() + r * cols;
      T mean, inv;
      rowStats(x, cols, epsilon, rms, mean, inv);
      for (int64_t j = 0; j < cols; ++j)
        y[j] = (x[j] - mean) * inv * scale.as<T>()[j] +
               (bias.present() ? bias.as<T>()[j] : T(0));
    }
  });
  return Status();
}

} // namespace

Status layerNorm(const Tensor &input, const Tensor &scale, const Tensor &bias,
                 int64_t axis, double epsilon, const Tensor &out) {
  return normForward("layer_norm", input, scale, bias, axis, epsilon,
                     /*rms=*/false, out);
}

Status rmsNorm(const Tensor &input, const Tensor &scale, int64_t axis,
               double epsilon, const Tensor &out) {
  return normForward("rms_norm", input, scale, Tensor(), axis, epsilon,
                     /*rms=*/true, out);
}

Status detail::checkLayerNormBackward(
    Call &call, const Tensor &input, const Tensor &scale, int64_t axis,
    const Tensor &gradOut, const Tensor &gradIn, const Tensor &gradScale,
    const Tensor &gradBias, int64_t &rows, int64_t &cols) {
  call.arg("input", input)
      .arg("scale", scale)
      .arg("axis", axis)
      .arg("grad_out", gradOut);
  if (Status st = checkFloat(
          call, {&input, &scale, &gradOut, &gradIn, &gradScale, &gradBias},
          input.dtype);
      !st.ok())
    return st;
  if (!sameShape(input, gradOut) ||
      (gradIn.present() && !sameShape(input, gradIn)) || !scale.present())
    return call.fail("scale is required; gradients have the input's shape");
  if (Status st =
          layerNormLayout(call, input, gradScale, gradBias, axis, rows, cols);
      !st.ok())
    return st;
  if (scale.numel() != cols)
    return call.fail("scale must have the elements of dims [axis, rank)");
  return Status();
}

Status detail::checkNormGradEpilogue(Call &call, const Tensor &gradOut,
                                     const Tensor &gradIn,
                                     const Tensor &residual,
                                     const Tensor &gradInCopy) {
  if (!residual.present() && !gradInCopy.present())
    return Status();
  call.arg("residual", residual).arg("grad_in_copy", gradInCopy);
  if (!gradIn.present() || gradOut.dtype != DType::F32)
    return call.fail("a residual or a 16-bit copy needs an f32 grad_in");
  if (residual.present() &&
      (residual.dtype != DType::F32 || !sameShape(residual, gradIn)))
    return call.fail("residual must be f32 of grad_in's shape");
  if (gradInCopy.present() &&
      ((gradInCopy.dtype != DType::BF16 && gradInCopy.dtype != DType::F16) ||
       !sameShape(gradInCopy, gradIn)))
    return call.fail("grad_in_copy must be bf16 or f16 of grad_in's shape");
  return Status();
}

namespace {

Status normBackward(const char *name, const Tensor &input, const Tensor &scale,
                    int64_t axis, double epsilon, bool rms,
                    const Tensor &gradOut, const Tensor &gradIn,
                    const Tensor &gradScale, const Tensor &gradBias,
                    const Tensor &residual, const Tensor &gradInCopy) {
  Call call(name);
  int64_t rows, cols;
  if (Status st =
          checkLayerNormBackward(call, input, scale, axis, gradOut, gradIn,
                                 gradScale, gradBias, rows, cols);
      !st.ok())
    return st;
  if (Status st =
          checkNormGradEpilogue(call, gradOut, gradIn, residual, gradInCopy);
      !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *w = scale.as<T>();
    std::vector<T> gs(cols, T(0)), gb(cols, T(0)), xhat(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const T *x = input.as<T>() + r * cols, *g = gradOut.as<T>() + r * cols;
      T mean, inv;
      rowStats(x, cols, epsilon, rms, mean, inv);
      T sumGW = T(0), sumGWX = T(0);
      for (int64_t j = 0; j < cols; ++j) {
        xhat[j] = (x[j] - mean) * inv;
        gs[j] += g[j] * xhat[j];
        gb[j] += g[j];
        sumGW += g[j] * w[j];
        sumGWX += g[j] * w[j] * xhat[j];
      }
      if (!gradIn.present())
        continue;
      // An RMS norm takes no mean out: no sum(g * w) term.
      T *gx = gradIn.as<T>() + r * cols, d = static_cast<T>(cols);
      if (rms)
        sumGW = T(0);
      // The epilogue (f32 only, checked): the residual's gradient added,
      // each element read before it is written (gradIn may be residual),
      // and the sum's 16-bit copy.
      const T *res = residual.present() ? residual.as<T>() + r * cols : nullptr;
      uint16_t *copy =
          gradInCopy.present() ? gradInCopy.as<uint16_t>() + r * cols : nullptr;
      bool bf16 = gradInCopy.dtype == DType::BF16;
      for (int64_t j = 0; j < cols; ++j) {
        T v = inv / d * (d * g[j] * w[j] - sumGW - xhat[j] * sumGWX);
        gx[j] = res ? res[j] + v : v;
        if (copy)
          copy[j] =
              bf16 ? floatToBfloat16(float(gx[j])) : floatToHalf(float(gx[j]));
      }
    }
    if (gradScale.present())
      std::copy(gs.begin(), gs.end(), gradScale.as<T>());
    if (gradBias.present())
      std::copy(gb.begin(), gb.end(), gradBias.as<T>());
  });
  return Status();
}

} // namespace

Status layerNormBackward(const Tensor &input, const Tensor &scale, int64_t axis,
                         double epsilon, const Tensor &gradOut,
                         const Tensor &gradIn, const Tensor &gradScale,
                         const Tensor &gradBias, const Tensor &residual,
                         const Tensor &gradInCopy) {
  return normBackward("layer_norm_backward", input, scale, axis, epsilon,
                      /*rms=*/false, gradOut, gradIn, gradScale, gradBias,
                      residual, gradInCopy);
}

Status rmsNormBackward(const Tensor &input, const Tensor &scale, int64_t axis,
                       double epsilon, const Tensor &gradOut,
                       const Tensor &gradIn, const Tensor &gradScale,
                       const Tensor &residual, const Tensor &gradInCopy) {
  return normBackward("rms_norm_backward", input, scale, axis, epsilon,
                      /*rms=*/true, gradOut, gradIn, gradScale, Tensor(),
                      residual, gradInCopy);
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

namespace {

/// (outer, dim, inner) of an axis.
Status axisLines(const Call &call, const Tensor &t, int64_t axis,
                 int64_t &outer, int64_t &dim, int64_t &inner) {
  if (!normalizeAxis(axis, t.rank))
    return call.fail("axis out of range");
  outer = 1;
  inner = 1;
  for (int d = 0; d < t.rank; ++d)
    if (d < axis)
      outer *= t.shape[d];
    else if (d > axis)
      inner *= t.shape[d];
  dim = t.shape[axis];
  return Status();
}

/// The first element of each of the outer * inner lines, whose elements are
/// base + i * inner.
std::vector<int64_t> lineBases(int64_t outer, int64_t dim, int64_t inner) {
  std::vector<int64_t> bases;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      bases.push_back(o * dim * inner + i);
  return bases;
}

/// 16-bit scores of the cross entropy: the bits, widened exactly to f32 on
/// load and rounded to nearest even on store (the conversions of cast), so
/// the f32 math runs on the values cast(scores -> f32) would give.
struct Bf16Bits {
  uint16_t bits;
};
struct HalfBits {
  uint16_t bits;
};
inline float widen(float v) { return v; }
inline double widen(double v) { return v; }
inline float widen(Bf16Bits v) { return bfloat16ToFloat(v.bits); }
inline float widen(HalfBits v) { return halfToFloat(v.bits); }
template <typename G, typename T> G narrow(T v) {
  if constexpr (std::is_same_v<G, Bf16Bits>)
    return {floatToBfloat16(v)};
  else if constexpr (std::is_same_v<G, HalfBits>)
    return {floatToHalf(v)};
  else
    return v;
}

/// A line x (storage S, widened to T on load) to y in T.
template <typename S, typename T>
void softmaxLine(const S *x, T *y, int64_t dim, int64_t inner, bool log) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < dim; ++i)
    mx = std::max(mx, T(widen(x[i * inner])));
  T sum = T(0);
  for (int64_t i = 0; i < dim; ++i)
    sum += std::exp(T(widen(x[i * inner])) - mx);
  T lse = std::log(sum);
  for (int64_t i = 0; i < dim; ++i) {
    T z = T(widen(x[i * inner])) - mx;
    y[i * inner] = log ? z - lse : std::exp(z) / sum;
  }
}

} // namespace

Status detail::checkSoftmax(Call &call, const Tensor &input, int64_t axis,
                            const Tensor &out, int64_t &outer, int64_t &dim,
                            int64_t &inner) {
  call.arg("input", input).arg("axis", axis).arg("out", out);
  if (Status st = checkFloat(call, {&input, &out}, input.dtype); !st.ok())
    return st;
  if (!sameShape(input, out))
    return call.fail("result must have the input's shape");
  return axisLines(call, input, axis, outer, dim, inner);
}

Status detail::checkSoftmaxBackward(Call &call, const Tensor &out, int64_t axis,
                                    const Tensor &gradOut, const Tensor &gradIn,
                                    int64_t &outer, int64_t &dim,
                                    int64_t &inner) {
  call.arg("out", out)
      .arg("axis", axis)
      .arg("grad_out", gradOut)
      .arg("grad_in", gradIn);
  if (Status st = checkFloat(call, {&out, &gradOut, &gradIn}, out.dtype);
      !st.ok())
    return st;
  if (!sameShape(out, gradOut) || !sameShape(out, gradIn))
    return call.fail("all three must have one shape");
  return axisLines(call, out, axis, outer, dim, inner);
}

namespace {

Status softmaxImpl(const char *name, const Tensor &input, int64_t axis,
                   const Tensor &out, bool log) {
  Call call(name);
  int64_t outer, dim, inner;
  if (Status st = checkSoftmax(call, input, axis, out, outer, dim, inner);
      !st.ok())
    return st;
  std::vector<int64_t> bases = lineBases(outer, dim, inner);
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t b : bases)
      softmaxLine(input.as<T>() + b, out.as<T>() + b, dim, inner, log);
  });
  return Status();
}

Status softmaxBackwardImpl(const char *name, const Tensor &out, int64_t axis,
                           const Tensor &gradOut, const Tensor &gradIn,
                           bool log) {
  Call call(name);
  int64_t outer, dim, inner;
  if (Status st = checkSoftmaxBackward(call, out, axis, gradOut, gradIn, outer,
                                       dim, inner);
      !st.ok())
    return st;
  std::vector<int64_t> bases = lineBases(outer, dim, inner);
  dispatchFloat(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t b : bases) {
      const T *y = out.as<T>() + b, *g = gradOut.as<T>() + b;
      T *gx = gradIn.as<T>() + b;
      T acc = T(0);
      for (int64_t i = 0; i < dim; ++i)
        acc += log ? g[i * inner] : g[i * inner] * y[i * inner];
      for (int64_t i = 0; i < dim; ++i) {
        int64_t at = i * inner;
        gx[at] = log ? g[at] - std::exp(y[at]) * acc : y[at] * (g[at] - acc);
      }
    }
  });
  return Status();
}

} // namespace

Status softmax(const Tensor &input, int64_t axis, const Tensor &out) {
  return softmaxImpl("softmax", input, axis, out, false);
}

Status logSoftmax(const Tensor &input, int64_t axis, const Tensor &out) {
  return softmaxImpl("log_softmax", input, axis, out, true);
}

Status softmaxBackward(const Tensor &out, int64_t axis, const Tensor &gradOut,
                       const Tensor &gradIn) {
  return softmaxBackwardImpl("softmax_backward", out, axis, gradOut, gradIn,
                             false);
}

Status logSoftmaxBackward(const Tensor &out, int64_t axis,
                          const Tensor &gradOut, const Tensor &gradIn) {
  return softmaxBackwardImpl("log_softmax_backward", out, axis, gradOut, gradIn,
                             true);
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

Status parseReduction(const std::string &name, Reduction &out) {
  if (name == "none")
    out = Reduction::None;
  else if (name == "sum")
    out = Reduction::Sum;
  else if (name == "mean")
    out = Reduction::Mean;
  else
    return Status::error(StatusCode::InvalidArgument,
                         "parse_reduction(" + name +
                             "): expected none, sum or mean");
  return Status();
}

namespace {

/// The shape of a loss over [N, C, d...] and its labels resolved: per
/// position (n, p) the class or -1 when ignored, and its weight.
struct LossLayout : LossShape, LossLabels {};

/// The checks every loss call starts with: shapes, then with `hostLabels`
/// the labels (see checks_math.h).
Status lossLayout(const Call &call, const Tensor &input, const Tensor &labels,
                  const Tensor &weights, Reduction reduction,
                  std::optional<int64_t> ignoreIndex, const Tensor &loss,
                  LossShape &l, LossLabels *hostLabels,
                  bool halfInput = false) {
  if (halfInput && (input.dtype == DType::BF16 || input.dtype == DType::F16)) {
    // 16-bit scores: the math, the weights and the loss are f32.
    if (!validRank(input))
      return call.fail("operands and results must share one float dtype");
    for (const Tensor *t : {&weights, &loss})
      if (t->present() && (!validRank(*t) || t->dtype != DType::F32))
        return call.fail("with f16/bf16 scores, weights, loss and grad_loss "
                         "must be f32");
  } else if (Status st =
                 checkFloat(call, {&input, &weights, &loss}, input.dtype);
             !st.ok()) {
    return st;
  }
  if (!validRank(labels) ||
      (labels.dtype != DType::I64 && labels.dtype != DType::I32))
    return call.fail("labels must be i32 or i64");
  if (input.rank < 2 || labels.rank != input.rank - 1 ||
      labels.shape[0] != input.shape[0])
    return call.fail("input must be [N, C, d...] and labels [N, d...]");
  for (int k = 1; k < labels.rank; ++k)
    if (labels.shape[k] != input.shape[k + 1])
      return call.fail("labels must be [N, d...] of input [N, C, d...]");
  l.n = input.shape[0], l.c = input.shape[1];
  l.d = labels.numel() / std::max<int64_t>(l.n, 1);
  if (weights.present() && !shapeIs(weights, {l.c}))
    return call.fail("weights must be [" + std::to_string(l.c) + "]");
  if (reduction == Reduction::None ? !sameShape(loss, labels) : loss.rank != 0)
    return call.fail(reduction == Reduction::None
                         ? "loss must have the labels' shape"
                         : "loss must be a scalar");
  if (!hostLabels)
    return Status();
  LossLabels &h = *hostLabels;
  int64_t count = labels.numel();
  h.label.resize(count);
  h.weight.resize(count);
  h.weightSum = 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t v = loadAsInt(labels.data, labels.dtype, i);
    if (ignoreIndex && v == *ignoreIndex) {
      h.label[i] = -1, h.weight[i] = 0;
      continue;
    }
    if (v < 0 || v >= l.c)
      return call.fail("label " + std::to_string(v) + " at " +
                           std::to_string(i) + " outside [0, " +
                           std::to_string(l.c) + ")",
                       StatusCode::OutOfRange);
    h.label[i] = v;
    h.weight[i] =
        weights.present() ? loadAsDouble(weights.data, weights.dtype, v) : 1.0;
    h.weightSum += h.weight[i];
  }
  return Status();
}

/// Per-position losses from log-probabilities (given, or computed from
/// scores by log-softmax over C), reduced.
template <typename T>
void lossForward(const LossLayout &l, const T *logp, Reduction reduction,
                 T *loss) {
  T total = T(0);
  for (int64_t i = 0; i < l.n; ++i)
    for (int64_t p = 0; p < l.d; ++p) {
      int64_t at = i * l.d + p, cls = l.label[at];
      T v = cls < 0 ? T(0) : -T(l.weight[at]) * logp[(i * l.c + cls) * l.d + p];
      if (reduction == Reduction::None)
        loss[at] = v;
      else
        total += v;
    }
  if (reduction == Reduction::Sum)
    *loss = total;
  else if (reduction == Reduction::Mean)
    *loss = total / T(l.weightSum); // nan when every label is ignored
}

/// The coefficient of position `at` in the reduced loss.
template <typename T>
T lossCoef(const LossLayout &l, Reduction reduction, const T *gradLoss,
           int64_t at) {
  if (reduction == Reduction::None)
    return gradLoss[at];
  if (reduction == Reduction::Sum)
    return gradLoss[0];
  return gradLoss[0] / T(l.weightSum);
}

template <typename S, typename T>
void logSoftmaxOverC(const Tensor &scores, const LossLayout &l,
                     std::vector<T> &logp) {
  logp.resize(scores.numel());
  for (int64_t i = 0; i < l.n; ++i)
    for (int64_t p = 0; p < l.d; ++p) {
      int64_t base = i * l.c * l.d + p;
      softmaxLine(scores.as<S>() + base, logp.data() + base, l.c, l.d, true);
    }
}

/// Calls fn(S{}, T{}) with the scores' storage S and math type T: float,
/// double, or Bf16Bits/HalfBits with float math.
template <typename Fn> void dispatchScores(DType dtype, Fn &&fn) {
  if (dtype == DType::BF16)
    fn(Bf16Bits(), float());
  else if (dtype == DType::F16)
    fn(HalfBits(), float());
  else
    dispatchFloat(dtype, [&](auto tag) { fn(tag, tag); });
}

/// The cross entropy's gradient over scores stored as S (math in T) into
/// gradScores stored as G.
template <typename S, typename T, typename G>
void crossEntropyGrad(const Tensor &scores, const LossLayout &l,
                      Reduction reduction, const Tensor &gradLoss,
                      const Tensor &gradScores) {
  std::vector<T> logp;
  logSoftmaxOverC<S>(scores, l, logp);
  G *gs = gradScores.as<G>();
  for (int64_t i = 0; i < l.n; ++i)
    for (int64_t p = 0; p < l.d; ++p) {
      int64_t at = i * l.d + p, cls = l.label[at];
      T k = cls < 0 ? T(0)
                    : lossCoef(l, reduction, gradLoss.as<T>(), at) *
                          T(l.weight[at]);
      for (int64_t ch = 0; ch < l.c; ++ch) {
        int64_t e = (i * l.c + ch) * l.d + p;
        gs[e] =
            narrow<G>(T(k * (std::exp(logp[e]) - (ch == cls ? T(1) : T(0)))));
      }
    }
}

} // namespace

Status detail::checkSoftmaxCrossEntropy(Call &call, const Tensor &scores,
                                        const Tensor &labels,
                                        const Tensor &weights,
                                        Reduction reduction,
                                        std::optional<int64_t> ignoreIndex,
                                        const Tensor &loss, LossShape &shape,
                                        LossLabels *hostLabels) {
  call.arg("scores", scores)
      .arg("labels", labels)
      .arg("weights", weights)
      .arg("loss", loss);
  return lossLayout(call, scores, labels, weights, reduction, ignoreIndex, loss,
                    shape, hostLabels, /*halfInput=*/true);
}

Status softmaxCrossEntropy(const Tensor &scores, const Tensor &labels,
                           const Tensor &weights, Reduction reduction,
                           std::optional<int64_t> ignoreIndex,
                           const Tensor &loss) {
  Call call("softmax_cross_entropy");
  LossLayout l;
  if (Status st = checkSoftmaxCrossEntropy(call, scores, labels, weights,
                                           reduction, ignoreIndex, loss, l, &l);
      !st.ok())
    return st;
  dispatchScores(scores.dtype, [&](auto stag, auto ttag) {
    using S = decltype(stag);
    using T = decltype(ttag);
    std::vector<T> logp;
    logSoftmaxOverC<S>(scores, l, logp);
    lossForward(l, logp.data(), reduction, loss.as<T>());
  });
  return Status();
}

Status detail::checkSoftmaxCrossEntropyBackward(
    Call &call, const Tensor &scores, const Tensor &labels,
    const Tensor &weights, Reduction reduction,
    std::optional<int64_t> ignoreIndex, const Tensor &gradLoss,
    const Tensor &gradScores, LossShape &shape, LossLabels *hostLabels) {
  call.arg("scores", scores)
      .arg("labels", labels)
      .arg("weights", weights)
      .arg("grad_loss", gradLoss)
      .arg("grad_scores", gradScores);
  if (Status st =
          lossLayout(call, scores, labels, weights, reduction, ignoreIndex,
                     gradLoss, shape, hostLabels, /*halfInput=*/true);
      !st.ok())
    return st;
  bool half = scores.dtype == DType::BF16 || scores.dtype == DType::F16;
  if (!sameShape(gradScores, scores) ||
      (gradScores.dtype != scores.dtype &&
       !(half && gradScores.dtype == DType::F32)))
    return call.fail(half ? "grad_scores must have the scores' shape and "
                            "their dtype or f32"
                          : "grad_scores must have the scores' dtype and "
                            "shape");
  return Status();
}

Status softmaxCrossEntropyBackward(const Tensor &scores, const Tensor &labels,
                                   const Tensor &weights, Reduction reduction,
                                   std::optional<int64_t> ignoreIndex,
                                   const Tensor &gradLoss,
                                   const Tensor &gradScores) {
  Call call("softmax_cross_entropy_backward");
  LossLayout l;
  if (Status st = checkSoftmaxCrossEntropyBackward(
          call, scores, labels, weights, reduction, ignoreIndex, gradLoss,
          gradScores, l, &l);
      !st.ok())
    return st;
  dispatchScores(scores.dtype, [&](auto stag, auto ttag) {
    using S = decltype(stag);
    using T = decltype(ttag);
    if (gradScores.dtype == scores.dtype)
      crossEntropyGrad<S, T, S>(scores, l, reduction, gradLoss, gradScores);
    else // 16-bit scores, f32 gradient
      crossEntropyGrad<S, T, T>(scores, l, reduction, gradLoss, gradScores);
  });
  return Status();
}

Status detail::checkNllLoss(Call &call, const Tensor &input,
                            const Tensor &labels, const Tensor &weights,
                            Reduction reduction,
                            std::optional<int64_t> ignoreIndex,
                            const Tensor &loss, LossShape &shape,
                            LossLabels *hostLabels) {
  call.arg("input", input)
      .arg("labels", labels)
      .arg("weights", weights)
      .arg("loss", loss);
  return lossLayout(call, input, labels, weights, reduction, ignoreIndex, loss,
                    shape, hostLabels);
}

Status nllLoss(const Tensor &input, const Tensor &labels, const Tensor &weights,
               Reduction reduction, std::optional<int64_t> ignoreIndex,
               const Tensor &loss) {
  Call call("nll_loss");
  LossLayout l;
  if (Status st = checkNllLoss(call, input, labels, weights, reduction,
                               ignoreIndex, loss, l, &l);
      !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    lossForward(l, input.as<T>(), reduction, loss.as<T>());
  });
  return Status();
}

Status detail::checkNllLossBackward(Call &call, const Tensor &input,
                                    const Tensor &labels, const Tensor &weights,
                                    Reduction reduction,
                                    std::optional<int64_t> ignoreIndex,
                                    const Tensor &gradLoss,
                                    const Tensor &gradInput, LossShape &shape,
                                    LossLabels *hostLabels) {
  call.arg("input", input)
      .arg("labels", labels)
      .arg("weights", weights)
      .arg("grad_loss", gradLoss)
      .arg("grad_input", gradInput);
  if (Status st = lossLayout(call, input, labels, weights, reduction,
                             ignoreIndex, gradLoss, shape, hostLabels);
      !st.ok())
    return st;
  if (!sameShape(gradInput, input) || gradInput.dtype != input.dtype)
    return call.fail("grad_input must have the input's dtype and shape");
  return Status();
}

Status nllLossBackward(const Tensor &input, const Tensor &labels,
                       const Tensor &weights, Reduction reduction,
                       std::optional<int64_t> ignoreIndex,
                       const Tensor &gradLoss, const Tensor &gradInput) {
  Call call("nll_loss_backward");
  LossLayout l;
  if (Status st = checkNllLossBackward(call, input, labels, weights, reduction,
                                       ignoreIndex, gradLoss, gradInput, l, &l);
      !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *gi = gradInput.as<T>();
    std::fill(gi, gi + gradInput.numel(), T(0));
    for (int64_t i = 0; i < l.n; ++i)
      for (int64_t p = 0; p < l.d; ++p) {
        int64_t at = i * l.d + p, cls = l.label[at];
        if (cls >= 0)
          gi[(i * l.c + cls) * l.d + p] =
              -lossCoef(l, reduction, gradLoss.as<T>(), at) * T(l.weight[at]);
      }
  });
  return Status();
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A uniform double in [0, 1) that depends only on (seed, index).
double uniformAt(uint64_t seed, uint64_t index) {
  uint64_t h = splitmix64(splitmix64(seed) ^ index);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

} // namespace

Status detail::checkDropout(Call &call, const Tensor &input, double ratio,
                            uint64_t seed, const Tensor &out,
                            const Tensor &mask) {
  call.arg("input", input)
      .raw("ratio", std::to_string(ratio))
      .raw("seed", std::to_string(seed))
      .arg("out", out)
      .arg("mask", mask);
  if (Status st = checkFloat(call, {&input, &out}, input.dtype); !st.ok())
    return st;
  if (!sameShape(input, out) || (mask.present() && (mask.dtype != DType::Bool ||
                                                    !sameShape(input, mask))))
    return call.fail("result and mask (bool) must have the input's shape");
  if (!(ratio >= 0 && ratio <= 1))
    return call.fail("ratio must be in [0, 1]");
  return Status();
}

Status dropout(const Tensor &input, double ratio, uint64_t seed,
               const Tensor &out, const Tensor &mask) {
  Call call("dropout");
  if (Status st = checkDropout(call, input, ratio, seed, out, mask); !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    T scale = ratio < 1 ? T(1 / (1 - ratio)) : T(0);
    for (int64_t i = 0, n = input.numel(); i < n; ++i) {
      bool keep = ratio < 1 && uniformAt(seed, i) >= ratio;
      out.as<T>()[i] = keep ? input.as<T>()[i] * scale : T(0);
      if (mask.present())
        mask.as<bool>()[i] = keep;
    }
  });
  return Status();
}

Status dropoutBackward(const Tensor &gradOut, const Tensor &mask, double ratio,
                       const Tensor &gradIn) {
  Call call("dropout_backward");
  call.arg("grad_out", gradOut).arg("mask", mask).arg("grad_in", gradIn);
  if (Status st = checkFloat(call, {&gradOut, &gradIn}, gradOut.dtype);
      !st.ok())
    return st;
  if (mask.dtype != DType::Bool || !sameShape(gradOut, mask) ||
      !sameShape(gradOut, gradIn))
    return call.fail("mask (bool) and gradients must share one shape");
  dispatchFloat(gradOut.dtype, [&](auto tag) {
    using T = decltype(tag);
    T scale = ratio < 1 ? T(1 / (1 - ratio)) : T(0);
    for (int64_t i = 0, n = gradOut.numel(); i < n; ++i)
      gradIn.as<T>()[i] =
          mask.as<bool>()[i] ? gradOut.as<T>()[i] * scale : T(0);
  });
  return Status();
}

} // namespace dsc::cpu
