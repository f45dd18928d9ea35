//===- optimizer.cu - CUDA kernels: adamw, sgd, lr_schedule ---------------===//
//
// The optimizer ops of step_kernels.h. Hyperparameters and the step are
// device scalars (the step a program counts on the GPU, the rate an
// lr_schedule wrote there), so the kernels read them: the host checks only
// shapes and dtypes and never waits for the device.
//
// The arithmetic is the CPU reference's, in the same order and precision:
// bias corrections, step size and decay in double (one thread per block
// computes them into shared memory), elements in their own dtype. Element
// math uses the _rn intrinsics, which the compiler never contracts into
// FMAs, so each element sees the CPU's roundings; only CUDA's double pow
// and cos (bias corrections, cosine schedule) may differ from the host's
// libm in the last bit.
//
// The host-side checks are the CPU reference's (cpu/checks_math.h), with one
// difference: a step below 1 cannot be reported, since the step is not read
// on the host (no stepValue is passed). The kernels then write nothing (the
// results keep their contents, as they would after the CPU's error).
//
// Results may be their operands' storage (newParam == param, ...): each
// element reads all its operands before writing, and nothing is
// __restrict__.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_math.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#include <cstdint>

namespace dsc::cuda {

using namespace detail;
using cpu::detail::checkAdamw;
using cpu::detail::checkLrSchedule;
using cpu::detail::checkSgd;

namespace {

/// A device scalar and its dtype, by value into kernels.
struct Scalar {
  const void *data;
  DType dtype;
};

Scalar scalarOf(const Tensor &t) { return {t.data, t.dtype}; }

/// A float scalar hyperparameter.
__device__ inline double loadScalar(Scalar s) {
  return loadAsDouble(s.data, s.dtype, 0);
}

/// The step (i64 or i32).
__device__ inline int64_t loadStep(Scalar s) {
  if (s.dtype == DType::I32)
    return *static_cast<const int32_t *>(s.data);
  return *static_cast<const int64_t *>(s.data);
}

/// A float scalar result (the learning rate).
__device__ inline void storeScalar(void *p, DType dt, double v) {
  storeDouble(p, dt, 0, v);
}

// Uncontracted arithmetic: each op rounds once, as on the host.
__device__ inline float add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float quo(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double quo(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float root(float a) { return __fsqrt_rn(a); }
__device__ inline double root(double a) { return __dsqrt_rn(a); }

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

struct AdamwScalars {
  Scalar lr, beta1, beta2, eps, weightDecay, step;
};

template <typename T>
__global__ void adamwKernel(const T *p, const T *g, const T *m, const T *v,
                            T *np, T *nm, T *nv, int64_t n, AdamwScalars s) {
  // tB1, tB2, tDecay, tStep, tBc2, tEps of the CPU code.
  __shared__ T c[6];
  __shared__ bool run;
  if (threadIdx.x == 0) {
    int64_t t = loadStep(s.step);
    run = t >= 1;
    double lrV = loadScalar(s.lr), b1 = loadScalar(s.beta1),
           b2 = loadScalar(s.beta2), epsV = loadScalar(s.eps),
           wd = loadScalar(s.weightDecay);
    double bc1 = sub(1.0, pow(b1, static_cast<double>(t)));
    double bc2Sqrt = root(sub(1.0, pow(b2, static_cast<double>(t))));
    double stepSize = quo(lrV, bc1), decay = sub(1.0, mul(lrV, wd));
    c[0] = T(b1), c[1] = T(b2), c[2] = T(decay), c[3] = T(stepSize);
    c[4] = T(bc2Sqrt), c[5] = T(epsV);
  }
  __syncthreads();
  if (!run)
    return;
  const T tB1 = c[0], tB2 = c[1], tDecay = c[2], tStep = c[3], tBc2 = c[4],
          tEps = c[5];
  const T oneB1 = sub(T(1), tB1), oneB2 = sub(T(1), tB2);
  DSC_GRID_STRIDE(i, n) {
    T gi = g[i];
    T pi = mul(p[i], tDecay);
    T mi = add(mul(tB1, m[i]), mul(oneB1, gi));
    T vi = add(mul(tB2, v[i]), mul(mul(oneB2, gi), gi));
    pi = sub(pi, quo(mul(tStep, mi), add(quo(root(vi), tBc2), tEps)));
    np[i] = pi;
    nm[i] = mi;
    nv[i] = vi;
  }
}

struct SgdScalars {
  Scalar lr, momentum, weightDecay, step;
};

template <typename T>
__global__ void sgdKernel(const T *p, const T *g, const T *b, T *np, T *nb,
                          int64_t n, SgdScalars s, T tDamp, bool nesterov) {
  // tLr, tMom, tWd of the CPU code; whether momentum != 0; step == 1.
  __shared__ T c[3];
  __shared__ bool run, useMomentum, first;
  if (threadIdx.x == 0) {
    int64_t t = loadStep(s.step);
    double mom = loadScalar(s.momentum);
    run = t >= 1;
    first = t == 1;
    useMomentum = mom != 0;
    c[0] = T(loadScalar(s.lr)), c[1] = T(mom);
    c[2] = T(loadScalar(s.weightDecay));
  }
  __syncthreads();
  if (!run)
    return;
  const T tLr = c[0], tMom = c[1], tWd = c[2];
  const bool withMomentum = useMomentum, firstStep = first;
  DSC_GRID_STRIDE(i, n) {
    T pi = p[i], gi = add(g[i], mul(tWd, pi)), bi = b[i];
    if (withMomentum) {
      bi = firstStep ? gi : add(mul(tMom, bi), mul(tDamp, gi));
      gi = nesterov ? add(gi, mul(tMom, bi)) : bi;
    }
    np[i] = sub(pi, mul(tLr, gi));
    nb[i] = bi;
  }
}

constexpr double kPi = 3.14159265358979323846;

__global__ void lrScheduleKernel(Scalar step, Scalar baseLr, LrSchedule kind,
                                 int64_t warmupSteps, int64_t totalSteps,
                                 double warmupMinRatio, double minRatio,
                                 void *lr, DType lrType) {
  int64_t t = loadStep(step);
  if (t < 1)
    return;
  double ratio = 1;
  if (t <= warmupSteps) {
    ratio = add(warmupMinRatio,
                quo(mul(sub(1.0, warmupMinRatio), static_cast<double>(t)),
                    static_cast<double>(warmupSteps)));
  } else if (kind != LrSchedule::Constant) {
    double p = 1;
    if (totalSteps > warmupSteps)
      p = fmin(1.0, quo(static_cast<double>(t - warmupSteps),
                        static_cast<double>(totalSteps - warmupSteps)));
    double shape = kind == LrSchedule::WarmupCosine
                       ? mul(0.5, add(1.0, cos(mul(kPi, p))))
                       : sub(1.0, p);
    ratio = add(minRatio, mul(sub(1.0, minRatio), shape));
  }
  storeScalar(lr, lrType, mul(loadScalar(baseLr), ratio));
}

template <typename T> T *ptr(const Tensor &t) {
  return static_cast<T *>(t.data);
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Status adamw(const Tensor &param, const Tensor &grad, const Tensor &expAvg,
             const Tensor &expAvgSq, const Tensor &lr, const Tensor &beta1,
             const Tensor &beta2, const Tensor &eps, const Tensor &weightDecay,
             const Tensor &step, const Tensor &newParam,
             const Tensor &newExpAvg, const Tensor &newExpAvgSq) {
  Call call("adamw");
  if (Status st = checkAdamw(call, param, grad, expAvg, expAvgSq, lr, beta1,
                             beta2, eps, weightDecay, step, newParam, newExpAvg,
                             newExpAvgSq, /*stepValue=*/nullptr);
      !st.ok())
    return st;
  int64_t n = param.numel();
  if (n == 0)
    return Status();
  AdamwScalars s{scalarOf(lr),  scalarOf(beta1),       scalarOf(beta2),
                 scalarOf(eps), scalarOf(weightDecay), scalarOf(step)};
  dim3 grid(blocksFor(n));
  if (param.dtype == DType::F32)
    adamwKernel<float><<<grid, kThreads, 0, stream()>>>(
        ptr<const float>(param), ptr<const float>(grad),
        ptr<const float>(expAvg), ptr<const float>(expAvgSq),
        ptr<float>(newParam), ptr<float>(newExpAvg), ptr<float>(newExpAvgSq), n,
        s);
  else
    adamwKernel<double><<<grid, kThreads, 0, stream()>>>(
        ptr<const double>(param), ptr<const double>(grad),
        ptr<const double>(expAvg), ptr<const double>(expAvgSq),
        ptr<double>(newParam), ptr<double>(newExpAvg), ptr<double>(newExpAvgSq),
        n, s);
  DSC_CUDA_LAUNCHED("adamw");
  return Status();
}

Status sgd(const Tensor &param, const Tensor &grad,
           const Tensor &momentumBuffer, const Tensor &lr,
           const Tensor &momentum, const Tensor &weightDecay,
           const Tensor &step, double dampening, bool nesterov,
           const Tensor &newParam, const Tensor &newMomentumBuffer) {
  Call call("sgd");
  if (Status st = checkSgd(call, param, grad, momentumBuffer, lr, momentum,
                           weightDecay, step, newParam, newMomentumBuffer,
                           /*stepValue=*/nullptr);
      !st.ok())
    return st;
  int64_t n = param.numel();
  if (n == 0)
    return Status();
  SgdScalars s{scalarOf(lr), scalarOf(momentum), scalarOf(weightDecay),
               scalarOf(step)};
  dim3 grid(blocksFor(n));
  if (param.dtype == DType::F32)
    sgdKernel<float><<<grid, kThreads, 0, stream()>>>(
        ptr<const float>(param), ptr<const float>(grad),
        ptr<const float>(momentumBuffer), ptr<float>(newParam),
        ptr<float>(newMomentumBuffer), n, s, float(1 - dampening), nesterov);
  else
    sgdKernel<double><<<grid, kThreads, 0, stream()>>>(
        ptr<const double>(param), ptr<const double>(grad),
        ptr<const double>(momentumBuffer), ptr<double>(newParam),
        ptr<double>(newMomentumBuffer), n, s, 1 - dampening, nesterov);
  DSC_CUDA_LAUNCHED("sgd");
  return Status();
}

Status lrSchedule(const Tensor &step, const Tensor &baseLr, LrSchedule kind,
                  int64_t warmupSteps, int64_t totalSteps,
                  double warmupMinRatio, double minRatio, const Tensor &lr) {
  Call call("lr_schedule");
  if (Status st = checkLrSchedule(call, step, baseLr, warmupSteps, totalSteps,
                                  lr, /*stepValue=*/nullptr);
      !st.ok())
    return st;
  lrScheduleKernel<<<1, 1, 0, stream()>>>(
      scalarOf(step), scalarOf(baseLr), kind, warmupSteps, totalSteps,
      warmupMinRatio, minRatio, lr.data, lr.dtype);
  DSC_CUDA_LAUNCHED("lr_schedule");
  return Status();
}

} // namespace dsc::cuda
