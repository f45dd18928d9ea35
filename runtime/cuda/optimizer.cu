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
#include "dsc/workspaces.h"

#include <algorithm>
#include <cstdint>

namespace dsc::cuda {

using namespace detail;
using cpu::detail::checkAdamw;
using cpu::detail::checkAdamwMulti;
using cpu::detail::checkLrSchedule;
using cpu::detail::checkSgd;
using cpu::detail::checkSumSquares;

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

/// The step's constants from the device scalars, in double as the CPU
/// code computes them: c[0..5] = beta1, beta2, 1 - lr * weight_decay,
/// lr / (1 - beta1^t), sqrt(1 - beta2^t), eps. False when the step is
/// below 1 (nothing is updated).
template <typename T>
__device__ bool adamwStepConstants(const AdamwScalars &s, T *c) {
  int64_t t = loadStep(s.step);
  double lrV = loadScalar(s.lr), b1 = loadScalar(s.beta1),
         b2 = loadScalar(s.beta2), epsV = loadScalar(s.eps),
         wd = loadScalar(s.weightDecay);
  double bc1 = sub(1.0, pow(b1, static_cast<double>(t)));
  double bc2Sqrt = root(sub(1.0, pow(b2, static_cast<double>(t))));
  double stepSize = quo(lrV, bc1), decay = sub(1.0, mul(lrV, wd));
  c[0] = T(b1), c[1] = T(b2), c[2] = T(decay), c[3] = T(stepSize);
  c[4] = T(bc2Sqrt), c[5] = T(epsV);
  return t >= 1;
}

template <typename T>
__global__ void adamwKernel(const T *p, const T *g, const T *m, const T *v,
                            T *np, T *nm, T *nv, int64_t n, AdamwScalars s) {
  // tB1, tB2, tDecay, tStep, tBc2, tEps of the CPU code.
  __shared__ T c[6];
  __shared__ bool run;
  if (threadIdx.x == 0)
    run = adamwStepConstants(s, c);
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

//===----------------------------------------------------------------------===//
// Multi-tensor AdamW
//===----------------------------------------------------------------------===//

/// Elements per chunk of the flattened index space: each entry is cut into
/// chunks of this many elements (its last one shorter), and a block works
/// on one chunk at a time, so a chunk never spans two entries. A multiple
/// of 4 * kThreads: every chunk of a 16-byte aligned entry starts aligned.
constexpr int64_t kMultiChunk = 4 * kThreads * 2;

/// Entries per launch: the table below is one kernel parameter, which may
/// be up to 32764 bytes (CUDA 12.1+, Volta and later); more entries take
/// several launches.
constexpr int kMultiMaxEntries = 360;

enum : uint8_t {
  kEntryVector = 1, ///< every pointer 16-byte aligned (the copy's half that)
  kEntryCopy = 2,   ///< computeCopy present
  kEntryBf16 = 4,   ///< computeCopy is bf16 (else f16)
};

template <typename T> struct MultiEntry {
  const T *p, *g, *m, *v;
  T *np, *nm, *nv;
  uint16_t *copy;
  int64_t n;
  uint32_t flags;
};

template <typename T> struct AdamwMultiArgs {
  AdamwScalars s;
  Scalar gradScale;    ///< data == nullptr: none
  Scalar gradPrescale; ///< data == nullptr: none
  int count;
  /// chunkEnd[i]: the chunks of entries 0..i; the last is the total.
  int64_t chunkEnd[kMultiMaxEntries];
  MultiEntry<T> entry[kMultiMaxEntries];
};
static_assert(sizeof(AdamwMultiArgs<double>) <= 32764,
              "the entry table must fit in the kernel parameters");

/// 16 bytes of T (V) and the 16-bit copies of those elements (H), taken
/// apart and put together by value so that loads and stores stay single
/// vector instructions.
template <typename T> struct Pack;
template <> struct Pack<float> {
  using V = float4;
  using H = ushort4;
  static constexpr int N = 4;
  __device__ static void split(V v, float *x) {
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  }
  __device__ static V join(const float *x) {
    return make_float4(x[0], x[1], x[2], x[3]);
  }
  __device__ static H joinHalf(const uint16_t *x) {
    return make_ushort4(x[0], x[1], x[2], x[3]);
  }
};
template <> struct Pack<double> {
  using V = double2;
  using H = ushort2;
  static constexpr int N = 2;
  __device__ static void split(V v, double *x) { x[0] = v.x, x[1] = v.y; }
  __device__ static V join(const double *x) { return make_double2(x[0], x[1]); }
  __device__ static H joinHalf(const uint16_t *x) {
    return make_ushort2(x[0], x[1]);
  }
};

/// The per-step constants of adamwKernel, plus the gradient's scales
/// (prescale first).
template <typename T> struct AdamwConsts {
  T b1, b2, oneB1, oneB2, decay, step, bc2, eps, scale, prescale;
  bool scaled, prescaled;
};

/// One element: adamwKernel's arithmetic after the gradient is scaled (one
/// rounding, as the elementwise mul).
template <typename T>
__device__ inline void adamwElement(const AdamwConsts<T> &k, T p, T g, T m, T v,
                                    T &np, T &nm, T &nv) {
  if (k.prescaled)
    g = mul(g, k.prescale);
  if (k.scaled)
    g = mul(g, k.scale);
  T pi = mul(p, k.decay);
  T mi = add(mul(k.b1, m), mul(k.oneB1, g));
  T vi = add(mul(k.b2, v), mul(mul(k.oneB2, g), g));
  np = sub(pi, quo(mul(k.step, mi), add(quo(root(vi), k.bc2), k.eps)));
  nm = mi;
  nv = vi;
}

/// newParam rounded to the copy's dtype, as castKernel rounds f32 (and f64
/// through f32, as storeDouble).
__device__ inline uint16_t roundCopy(float f, bool bf16) {
  return bf16 ? floatToBf16Bits(f) : floatToHalfBits(f);
}

/// Elements [begin, end) of entry e: 16-byte loads and stores of Pack<T>
/// while Vector, scalar after (the entry's last n % N elements, or all of
/// them when not aligned). Every operand of an element (or of a pack) is
/// read before any result is written.
template <typename T, bool Vector>
__device__ void adamwMultiChunk(const AdamwConsts<T> &k, const MultiEntry<T> &e,
                                int64_t begin, int64_t end) {
  using P = Pack<T>;
  using V = typename P::V;
  using H = typename P::H;
  constexpr int N = P::N;
  const bool copy = e.flags & kEntryCopy, bf16 = e.flags & kEntryBf16;
  int64_t tail = begin;
  if constexpr (Vector) {
    int64_t packs = (end - begin) / N;
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      int64_t i = begin + j * N;
      T p[N], g[N], m[N], v[N], np[N], nm[N], nv[N];
      uint16_t h[N];
      P::split(*reinterpret_cast<const V *>(e.p + i), p);
      P::split(*reinterpret_cast<const V *>(e.g + i), g);
      P::split(*reinterpret_cast<const V *>(e.m + i), m);
      P::split(*reinterpret_cast<const V *>(e.v + i), v);
#pragma unroll
      for (int l = 0; l < N; ++l) {
        adamwElement(k, p[l], g[l], m[l], v[l], np[l], nm[l], nv[l]);
        if (copy)
          h[l] = roundCopy(static_cast<float>(np[l]), bf16);
      }
      // __stwb is a plain store (write-back, the default policy) that stays
      // one 16-byte (8 for the copy) instruction.
      __stwb(reinterpret_cast<V *>(e.np + i), P::join(np));
      __stwb(reinterpret_cast<V *>(e.nm + i), P::join(nm));
      __stwb(reinterpret_cast<V *>(e.nv + i), P::join(nv));
      if (copy)
        __stwb(reinterpret_cast<H *>(e.copy + i), P::joinHalf(h));
    }
    tail = begin + packs * N;
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += blockDim.x) {
    T np, nm, nv;
    adamwElement(k, e.p[i], e.g[i], e.m[i], e.v[i], np, nm, nv);
    e.np[i] = np;
    e.nm[i] = nm;
    e.nv[i] = nv;
    if (copy)
      e.copy[i] = roundCopy(static_cast<float>(np), bf16);
  }
}

/// The entry of a multi-tensor table that holds `chunk`: the first one
/// whose chunkEnd (chunks of entries 0..i) exceeds it.
__device__ inline int entryOfChunk(const int64_t *chunkEnd, int count,
                                   int64_t chunk) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (chunkEnd[mid] > chunk)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/// Grid-stride over the chunks of every entry of the table: a block finds
/// its chunk's entry by a binary search over chunkEnd (the same for all its
/// threads, so the parameter reads broadcast) and updates that chunk.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    adamwMultiKernel(const __grid_constant__ AdamwMultiArgs<T> a) {
  // As adamwKernel: thread 0 reads the device scalars once per block.
  __shared__ T c[8];
  __shared__ bool run;
  if (threadIdx.x == 0) {
    run = adamwStepConstants(a.s, c);
    c[6] = a.gradScale.data ? *static_cast<const T *>(a.gradScale.data) : T(1);
    c[7] = a.gradPrescale.data ? *static_cast<const T *>(a.gradPrescale.data)
                               : T(1);
  }
  __syncthreads();
  if (!run)
    return;
  AdamwConsts<T> k;
  k.b1 = c[0], k.b2 = c[1], k.decay = c[2], k.step = c[3], k.bc2 = c[4];
  k.eps = c[5], k.scale = c[6], k.prescale = c[7];
  k.oneB1 = sub(T(1), k.b1), k.oneB2 = sub(T(1), k.b2);
  k.scaled = a.gradScale.data != nullptr;
  k.prescaled = a.gradPrescale.data != nullptr;
  const int64_t chunks = a.chunkEnd[a.count - 1];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int lo = entryOfChunk(a.chunkEnd, a.count, chunk);
    const MultiEntry<T> &e = a.entry[lo];
    int64_t first = lo ? a.chunkEnd[lo - 1] : 0;
    int64_t begin = (chunk - first) * kMultiChunk;
    int64_t end = begin + kMultiChunk < e.n ? begin + kMultiChunk : e.n;
    if (e.flags & kEntryVector)
      adamwMultiChunk<T, true>(k, e, begin, end);
    else
      adamwMultiChunk<T, false>(k, e, begin, end);
  }
}

//===----------------------------------------------------------------------===//
// Multi-tensor sum of squares
//===----------------------------------------------------------------------===//

/// Tensors per sumSquaresKernel launch (one kernel parameter table, as for
/// adamw_multi).
constexpr int kSquaresMaxEntries = 1024;

template <typename T> struct SumSquaresArgs {
  Scalar scale;    ///< data == nullptr: none
  double *partial; ///< one per chunk of this table
  int64_t chunk;   ///< elements per chunk (dsc::sumSquaresChunk)
  int count;
  int64_t chunkEnd[kSquaresMaxEntries];
  const T *x[kSquaresMaxEntries];
  int64_t n[kSquaresMaxEntries];
};
static_assert(sizeof(SumSquaresArgs<double>) <= 32764,
              "the tensor table must fit in the kernel parameters");

template <typename T, bool Scaled>
__device__ inline double squareOf(T x, T scale) {
  T v = Scaled ? mul(x, scale) : x;
  return double(v) * double(v);
}

/// The chunk [begin, end) of x: thread t takes the packs of Pack<T>::N
/// elements t, t + blockDim.x, ... (one 16-byte load each when aligned,
/// N scalar loads else: the same elements in the same order either way, so
/// the bits do not depend on the alignment), then the last (end - begin) %
/// N elements one per thread, then the block's fixed tree.
template <typename T, bool Scaled>
__device__ double chunkSquares(const T *x, int64_t begin, int64_t end,
                               T scale) {
  using P = Pack<T>;
  double acc = 0;
  const int64_t packs = (end - begin) / P::N;
  const bool vector = reinterpret_cast<uintptr_t>(x + begin) % 16 == 0;
  const auto *v = reinterpret_cast<const typename P::V *>(x + begin);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    T e[P::N];
    if (vector)
      P::split(v[p], e);
    else
      for (int j = 0; j < P::N; ++j)
        e[j] = x[begin + p * P::N + j];
    for (int j = 0; j < P::N; ++j)
      acc += squareOf<T, Scaled>(e[j], scale);
  }
  for (int64_t j = begin + packs * P::N + threadIdx.x; j < end; j += blockDim.x)
    acc += squareOf<T, Scaled>(x[j], scale);
  return blockSum(acc);
}

/// Grid-stride over the chunks of the table; block b writes the partial of
/// each chunk it takes.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sumSquaresKernel(const __grid_constant__ SumSquaresArgs<T> a) {
  const bool scaled = a.scale.data != nullptr;
  const T scale = scaled ? T(loadScalar(a.scale)) : T(1);
  const int64_t chunks = a.chunkEnd[a.count - 1];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int e = entryOfChunk(a.chunkEnd, a.count, chunk);
    int64_t first = e ? a.chunkEnd[e - 1] : 0;
    int64_t begin = (chunk - first) * a.chunk;
    int64_t end = begin + a.chunk < a.n[e] ? begin + a.chunk : a.n[e];
    double sum = scaled ? chunkSquares<T, true>(a.x[e], begin, end, scale)
                        : chunkSquares<T, false>(a.x[e], begin, end, scale);
    if (threadIdx.x == 0)
      a.partial[chunk] = sum;
  }
}

/// The partials added up by one block (each thread a strided subsequence,
/// then the fixed tree) and rounded once to out's type.
template <typename Out>
__global__ void __launch_bounds__(1024)
    sumPartialsKernel(const double *partial, int64_t n, Out *out) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += partial[i];
  acc = blockSum(acc);
  if (threadIdx.x == 0)
    *out = static_cast<Out>(acc);
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

namespace {

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// How many blocks of kThreads threads of `kernel` the GPU runs at once.
/// Host queries only (no stream work).
template <typename Kernel>
Status residentBlocks(Kernel kernel, int64_t &blocks) {
  int sms = 0, perSm = 0;
  DSC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount,
                                        current().device));
  DSC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel,
                                                               kThreads, 0));
  blocks = int64_t(std::max(sms, 1)) * std::max(perSm, 1);
  return Status();
}

template <typename T>
Status launchAdamwMulti(const AdamwTensors *tensors, size_t count,
                        const AdamwScalars &s, const Tensor &gradScale,
                        const Tensor &gradPrescale) {
  // As many blocks as the GPU holds at once: each reads the scalars once,
  // then strides over the chunks.
  int64_t maxBlocks = 0;
  if (Status st = residentBlocks(adamwMultiKernel<T>, maxBlocks); !st.ok())
    return st;
  AdamwMultiArgs<T> a;
  a.s = s;
  a.gradScale =
      gradScale.present() ? scalarOf(gradScale) : Scalar{nullptr, DType::F32};
  a.gradPrescale = gradPrescale.present() ? scalarOf(gradPrescale)
                                          : Scalar{nullptr, DType::F32};
  size_t i = 0;
  while (i < count) {
    // The next table: up to kMultiMaxEntries entries with elements.
    a.count = 0;
    int64_t chunks = 0;
    for (; i < count && a.count < kMultiMaxEntries; ++i) {
      const AdamwTensors &t = tensors[i];
      int64_t n = t.param.numel();
      if (n == 0)
        continue;
      MultiEntry<T> &e = a.entry[a.count];
      e.p = ptr<const T>(t.param), e.g = ptr<const T>(t.grad);
      e.m = ptr<const T>(t.expAvg), e.v = ptr<const T>(t.expAvgSq);
      e.np = ptr<T>(t.newParam), e.nm = ptr<T>(t.newExpAvg);
      e.nv = ptr<T>(t.newExpAvgSq);
      e.copy = ptr<uint16_t>(t.computeCopy);
      e.n = n;
      bool vector = aligned16(e.p) && aligned16(e.g) && aligned16(e.m) &&
                    aligned16(e.v) && aligned16(e.np) && aligned16(e.nm) &&
                    aligned16(e.nv);
      e.flags = 0;
      if (e.copy) {
        // Pack<T>::N 16-bit elements: 8 bytes for f32, 4 for f64.
        vector = vector &&
                 reinterpret_cast<uintptr_t>(e.copy) % (2 * Pack<T>::N) == 0;
        e.flags |= kEntryCopy;
        if (t.computeCopy.dtype == DType::BF16)
          e.flags |= kEntryBf16;
      }
      if (vector)
        e.flags |= kEntryVector;
      chunks += (n + kMultiChunk - 1) / kMultiChunk;
      a.chunkEnd[a.count++] = chunks;
    }
    if (a.count == 0)
      break;
    unsigned blocks = static_cast<unsigned>(std::min(chunks, maxBlocks));
    adamwMultiKernel<T><<<blocks, kThreads, 0, stream()>>>(a);
    DSC_CUDA_LAUNCHED("adamw_multi");
  }
  return Status();
}

} // namespace

Status adamwMulti(const AdamwTensors *tensors, size_t count, const Tensor &lr,
                  const Tensor &beta1, const Tensor &beta2, const Tensor &eps,
                  const Tensor &weightDecay, const Tensor &step,
                  const Tensor &gradScale, const Tensor &gradPrescale) {
  if (Status st = checkAdamwMulti(tensors, count, lr, beta1, beta2, eps,
                                  weightDecay, step, gradScale, gradPrescale,
                                  /*stepValue=*/nullptr);
      !st.ok())
    return st;
  if (count == 0)
    return Status();
  AdamwScalars s{scalarOf(lr),  scalarOf(beta1),       scalarOf(beta2),
                 scalarOf(eps), scalarOf(weightDecay), scalarOf(step)};
  if (tensors[0].param.dtype == DType::F32)
    return launchAdamwMulti<float>(tensors, count, s, gradScale, gradPrescale);
  return launchAdamwMulti<double>(tensors, count, s, gradScale, gradPrescale);
}

namespace {

/// The sumSquaresKernel launches over `tensors` (one per table of up to
/// kSquaresMaxEntries non-empty tensors), each writing its chunks'
/// partials after the previous table's. Returns the partials' count.
template <typename T>
Status launchSumSquares(const Tensor *tensors, size_t count,
                        const Tensor &scale, int64_t chunk, double *partial,
                        int64_t &written) {
  int64_t maxBlocks = 0;
  if (Status st = residentBlocks(sumSquaresKernel<T>, maxBlocks); !st.ok())
    return st;
  SumSquaresArgs<T> a;
  a.scale = scale.present() ? scalarOf(scale) : Scalar{nullptr, DType::F32};
  a.chunk = chunk;
  written = 0;
  size_t i = 0;
  while (i < count) {
    a.count = 0;
    int64_t chunks = 0;
    for (; i < count && a.count < kSquaresMaxEntries; ++i) {
      int64_t n = tensors[i].numel();
      if (n == 0)
        continue;
      a.x[a.count] = ptr<const T>(tensors[i]);
      a.n[a.count] = n;
      chunks += (n + chunk - 1) / chunk;
      a.chunkEnd[a.count++] = chunks;
    }
    if (a.count == 0)
      break;
    a.partial = partial + written;
    unsigned blocks = static_cast<unsigned>(std::min(chunks, maxBlocks));
    sumSquaresKernel<T><<<blocks, kThreads, 0, stream()>>>(a);
    DSC_CUDA_LAUNCHED("sum_squares");
    written += chunks;
  }
  return Status();
}

} // namespace

Status sumSquares(const Tensor *tensors, size_t count, const Tensor &scale,
                  const Tensor &out) {
  if (Status st = checkSumSquares(tensors, count, scale, out); !st.ok())
    return st;
  int64_t total = 0, chunks = 0;
  for (size_t i = 0; i < count; ++i)
    total += tensors[i].numel();
  const int64_t chunk = sumSquaresChunk(total);
  for (size_t i = 0; i < count; ++i)
    chunks += (tensors[i].numel() + chunk - 1) / chunk;
  void *partial = nullptr;
  if (chunks > 0) {
    if (Status st = scratch(sizeof(double) * static_cast<size_t>(chunks),
                            &partial, "sum of squares partials");
        !st.ok())
      return st;
    int64_t written = 0;
    Status st =
        tensors[0].dtype == DType::F32
            ? launchSumSquares<float>(tensors, count, scale, chunk,
                                      static_cast<double *>(partial), written)
            : launchSumSquares<double>(tensors, count, scale, chunk,
                                       static_cast<double *>(partial), written);
    if (!st.ok())
      return st;
  }
  const double *p = static_cast<const double *>(partial);
  if (out.dtype == DType::F32)
    sumPartialsKernel<float>
        <<<1, 1024, 0, stream()>>>(p, chunks, ptr<float>(out));
  else
    sumPartialsKernel<double>
        <<<1, 1024, 0, stream()>>>(p, chunks, ptr<double>(out));
  DSC_CUDA_LAUNCHED("sum_squares_partials");
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
