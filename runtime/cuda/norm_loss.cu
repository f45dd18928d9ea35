//===- norm_loss.cu - CUDA kernels: norms, softmax, losses ----------------===//
//
// The CUDA versions of cpu/norm_loss.cpp, with its argument checks
// (cpu/checks_math.h, so the same messages). Numerics:
//
//  - Every reduction (batch statistics, row statistics, loss totals, column
//    sums of layer-norm gradients) accumulates in double, for f32 as for
//    f64, in a fixed order: per thread over a fixed stride, then a fixed
//    butterfly over the warp and the block, then fixed-order sums of
//    per-block partials kept in scratch(). The kernels are memory bound, so
//    the double adds cost nothing measurable. The one exception is the sum
//    of exponentials of softmax and cross entropy: a thread that shares a
//    line adds its few hundred terms in the element type (converting each
//    term to double cost about 10% of the cross entropy's speed), then the
//    threads' sums are combined in double.
//  - So f32 results carry about the rounding of the element-type math and no
//    more: for GPT-2's rows (50257 classes) the gradient of the cross
//    entropy is within 2.4e-6 of the CPU's f64 result on the same values,
//    where the CPU's f32 result (a sequential f32 sum) is 5e-5 from it.
//  - Elementwise math (centering, exp, the normalized output, per-position
//    losses and gradients) is done in the element type with the CPU's
//    formulas, on statistics rounded to the element type as the CPU has them.
//  - Softmax (and the log-sum-exp of the cross entropy) reads each line once
//    for its statistics: each thread keeps a running max and a sum of
//    exponentials rescaled when the max grows; the threads' pairs are
//    combined after a max over the group.
//
// Lines (softmax axes, cross-entropy classes) go to one thread each when
// they are strided (inner > 1) and many, to one block each when strided and
// few, else to one warp each up to 1024 elements and one block above. The
// cross entropy's contiguous lines of more than 1024 classes (a classifier's
// rows) have their own kernels (crossEntropyRowKernel and its backward): a
// block per row, the row in chunks of 8 at multiples of 8 from the tensor's
// start, 16-byte loads and stores where the buffers are 16-byte aligned, the
// forward reading the row once and the backward twice.
//
// The cross entropy takes bf16/f16 scores too: each element is widened
// exactly to f32 as it is loaded and the f32 kernel's arithmetic follows, in
// the same order (which depends on the shape alone), so the results are
// bitwise those of the f32 call on cast(scores -> f32); a 16-bit gradient is
// the f32 one rounded to nearest even (the runtime's cast). Weights, loss and
// grad_loss are then f32.
//
// Labels are checked on the device: a label outside [0, C) that is not the
// ignore index is treated as ignored by the kernels and its position is kept
// (the lowest, by an integer atomicMin) in a scratch flag. The forward losses
// copy that flag back and wait for the stream (one small copy per call) and
// fail with the CPU's OutOfRange message; the backward losses do the same only
// with DSC_CUDA_SYNC=1, since their forward has already checked the labels.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_math.h"
#include "cpu/half_emulation.h"
#include "cuda/common.cuh"
#include "cuda/graph.h"
#include "cuda/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

namespace dsc::cuda {

using namespace detail;
using cpu::detail::checkBatchNorm;
using cpu::detail::checkBatchNormTrain;
using cpu::detail::checkBatchNormTrainBackward;
using cpu::detail::checkLayerNorm;
using cpu::detail::checkLayerNormBackward;
using cpu::detail::checkNllLoss;
using cpu::detail::checkNllLossBackward;
using cpu::detail::checkSoftmax;
using cpu::detail::checkSoftmaxBackward;
using cpu::detail::checkSoftmaxCrossEntropy;
using cpu::detail::checkSoftmaxCrossEntropyBackward;
using cpu::detail::LossShape;

namespace {

//===----------------------------------------------------------------------===//
// Host-side helpers
//===----------------------------------------------------------------------===//

/// Carves one scratch() request into 256-byte aligned pieces.
struct ScratchPlan {
  size_t bytes = 0;
  size_t add(size_t n) {
    size_t at = bytes;
    bytes += (n + 255) & ~size_t(255);
    return at;
  }
};

template <typename P> P *carve(void *base, size_t offset) {
  return reinterpret_cast<P *>(static_cast<char *>(base) + offset);
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// Whether DSC_CUDA_SYNC=1 asks every call to wait for its kernels.
bool syncEveryCall() {
  static const bool on = [] {
    const char *v = std::getenv("DSC_CUDA_SYNC");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

constexpr unsigned kMaxGrid = 65535u * 8;

__host__ __device__ inline int64_t minI64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

unsigned gridFor(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(
      1, std::min<int64_t>(n, static_cast<int64_t>(kMaxGrid))));
}

//===----------------------------------------------------------------------===//
// Device-side helpers
//===----------------------------------------------------------------------===//

__device__ inline float dExp(float x) { return expf(x); }
__device__ inline double dExp(double x) { return exp(x); }
__device__ inline float dSqrt(float x) { return sqrtf(x); }
__device__ inline double dSqrt(double x) { return sqrt(x); }

/// 16-bit scores (and gradients) of the cross entropy: the bits, widened
/// exactly to f32 on load and rounded to nearest even on store, with the
/// runtime's conversions (common.cuh), so the f32 math runs on the values
/// cast(scores -> f32) gives and a 16-bit gradient is cast(f32 gradient).
struct Bf16S {
  uint16_t bits;
};
struct F16S {
  uint16_t bits;
};

/// The math type of a storage type: f32 for the 16-bit ones.
template <typename S> struct ComputeOf { using type = S; };
template <> struct ComputeOf<Bf16S> { using type = float; };
template <> struct ComputeOf<F16S> { using type = float; };
template <typename S> using Compute = typename ComputeOf<S>::type;

__device__ inline float widen(float v) { return v; }
__device__ inline double widen(double v) { return v; }
__device__ inline float widen(Bf16S v) { return bf16BitsToFloat(v.bits); }
__device__ inline float widen(F16S v) { return halfBitsToFloat(v.bits); }

template <typename G, typename T> __device__ inline G narrow(T v) {
  if constexpr (std::is_same_v<G, Bf16S>)
    return G{floatToBf16Bits(v)};
  else if constexpr (std::is_same_v<G, F16S>)
    return G{floatToHalfBits(v)};
  else
    return v;
}

/// Elements in chunks of kChunk = 8, one 16-byte access for 16-bit values
/// (two for f32, four for f64): the cross entropy's rows and the norms' fast
/// rows take their elements this way.
constexpr int kChunk = 8;

template <bool kStream> __device__ inline uint4 load16(const void *p) {
  const uint4 *q = static_cast<const uint4 *>(p);
  if constexpr (kStream)
    return __ldcs(q);
  else
    return __ldg(q);
}

/// The 8 elements at p (16-byte aligned), widened.
template <bool kStream, typename S>
__device__ inline void loadFullChunk(const S *p, Compute<S> (&v)[kChunk]) {
  if constexpr (sizeof(S) == 2) {
    uint4 q = load16<kStream>(p);
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) { // little endian: the low half comes first
      v[2 * k] = widen(S{static_cast<uint16_t>(w[k] & 0xffffu)});
      v[2 * k + 1] = widen(S{static_cast<uint16_t>(w[k] >> 16)});
    }
  } else {
    constexpr int kPer = 16 / sizeof(S);
#pragma unroll
    for (int k = 0; k < kChunk / kPer; ++k) {
      uint4 q = load16<kStream>(p + k * kPer);
      S part[kPer];
      memcpy(part, &q, sizeof(q));
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        v[k * kPer + j] = part[j];
    }
  }
}

/// Stores the 8 values v at p (16-byte aligned) in 16-byte stores,
/// evict-first (the value's last use is elsewhere) when kStream.
template <bool kStream, typename G>
__device__ inline void storeFullChunk(G *p, const G (&v)[kChunk]) {
  constexpr int kPer = 16 / sizeof(G);
#pragma unroll
  for (int q = 0; q < kChunk / kPer; ++q) {
    uint4 bits;
    memcpy(&bits, v + q * kPer, sizeof(bits));
    uint4 *dst = reinterpret_cast<uint4 *>(p + q * kPer);
    if constexpr (kStream)
      __stcs(dst, bits);
    else
      *dst = bits;
  }
}

/// Stores 8 values at p (16-byte aligned) as G, each rounded as narrow<G>.
template <typename G, typename T>
__device__ inline void storeNarrowChunk(G *p, const T (&v)[kChunk]) {
  G out[kChunk];
#pragma unroll
  for (int u = 0; u < kChunk; ++u)
    out[u] = narrow<G>(v[u]);
  storeFullChunk<false>(p, out);
}

/// Sum and max over a warp by a xor butterfly: every lane ends with the same
/// bits, since each step adds the same two values in either order.
template <typename A> __device__ inline A warpSum(A v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename A> __device__ inline A warpMax(A v) {
  for (int o = 16; o > 0; o >>= 1) {
    A u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

/// Over a block of a multiple of 32 threads (at most 1024): warps, then the
/// warps' results by every warp alike, so every thread gets the same bits.
template <bool kMax, typename A> __device__ inline A blockReduce(A v) {
  __shared__ A buf[32];
  v = kMax ? warpMax(v) : warpSum(v);
  unsigned lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads(); // a previous call may still be reading buf
  if (lane == 0)
    buf[threadIdx.x >> 5] = v;
  __syncthreads();
  A r = lane < warps ? buf[lane] : (kMax ? A(-INFINITY) : A(0));
  return kMax ? warpMax(r) : warpSum(r);
}

/// How a kernel over lines spreads them: one line per thread (strided), per
/// warp (contiguous), per block (contiguous) or per block (strided). The
/// contiguous modes know their stride of 1 at compile time.
enum LineMode : int {
  kThreadLine = 0,
  kWarpLine = 1,
  kBlockLine = 2,
  kStridedBlockLine = 3
};

/// Calls launch(std::integral_constant<int, mode>()).
template <typename Launch> void byLineMode(int mode, Launch &&launch) {
  switch (mode) {
  case kThreadLine:
    launch(std::integral_constant<int, kThreadLine>());
    break;
  case kWarpLine:
    launch(std::integral_constant<int, kWarpLine>());
    break;
  case kBlockLine:
    launch(std::integral_constant<int, kBlockLine>());
    break;
  default:
    launch(std::integral_constant<int, kStridedBlockLine>());
    break;
  }
}

template <int kMode, typename A> __device__ inline A groupSum(A v) {
  if constexpr (kMode == kThreadLine)
    return v;
  else if constexpr (kMode == kWarpLine)
    return warpSum(v);
  else
    return blockReduce<false>(v);
}

template <int kMode, typename A> __device__ inline A groupMax(A v) {
  if constexpr (kMode == kThreadLine)
    return v;
  else if constexpr (kMode == kWarpLine)
    return warpMax(v);
  else
    return blockReduce<true>(v);
}

/// The first line of this thread's group, the step to its next line, its
/// lane in the group and the group's size. Whole warps (blocks) share lines,
/// so their loops and reductions stay converged.
template <int kMode> struct LineGroup {
  int64_t first, step;
  int lane, size;
  __device__ LineGroup() {
    if constexpr (kMode == kThreadLine) {
      first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
      step = int64_t(gridDim.x) * blockDim.x;
      lane = 0, size = 1;
    } else if constexpr (kMode == kWarpLine) {
      int warps = blockDim.x / 32;
      first = int64_t(blockIdx.x) * warps + threadIdx.x / 32;
      step = int64_t(gridDim.x) * warps;
      lane = threadIdx.x & 31, size = 32;
    } else {
      first = blockIdx.x, step = gridDim.x;
      lane = threadIdx.x, size = blockDim.x;
    }
  }
};

/// Lines along one axis: line l = o * inner + i has its elements at
/// o * dim * inner + i + k * inner, k in [0, dim).
struct Lines {
  int64_t count, dim, inner;
  __device__ int64_t base(int64_t l) const {
    int64_t o = l / inner;
    return o * dim * inner + (l - o * inner);
  }
  /// The element stride, a constant 1 for the contiguous modes.
  template <int kMode> __device__ int64_t stride() const {
    if constexpr (kMode == kWarpLine || kMode == kBlockLine)
      return 1;
    else
      return inner;
  }
};

struct LineLaunch {
  int mode;
  unsigned grid, block;
};

LineLaunch pickLines(int64_t lines, int64_t dim, int64_t inner) {
  if (inner > 1 && (lines >= 16384 || (lines >= 1024 && dim <= 256)))
    return {kThreadLine, blocksFor(lines, 256), 256};
  if (inner > 1)
    return {kStridedBlockLine, gridFor(lines), dim <= 1024 ? 128u : 512u};
  if (dim <= 1024)
    return {kWarpLine, blocksFor(lines, 256 / 32), 256};
  return {kBlockLine, gridFor(lines), 512};
}

/// The max M and the sum S of exp(x - M) over a line, in every lane. Each
/// thread keeps a running max m and sum s of exp(x - m), rescaled when m
/// grows (once per four elements at most); an element of -inf adds nothing,
/// as exp(-inf - max) on the CPU (a line of -inf only ends as nan through
/// 0 / 0 there and here). A thread sums in T when it shares the line (a few
/// hundred elements at most for GPT-2's rows), in double when it has the
/// whole line; the threads' sums are combined in double.
template <typename S, int kMode, typename T = Compute<S>>
__device__ __forceinline__ void lineStats(const S *__restrict__ x, int64_t dim,
                                          int64_t stride, int lane, int size,
                                          T &maxOut, double &sumOut) {
  using A = std::conditional_t<kMode == kThreadLine, double, T>;
  T m = T(-INFINITY);
  A s = 0;
  for (int64_t k = lane; k < dim; k += int64_t(4) * size) {
    T v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      int64_t kk = k + int64_t(u) * size;
      v[u] = kk < dim ? T(widen(x[kk * stride])) : T(-INFINITY);
    }
    T vm = T(-INFINITY); // a nan never becomes the max; it makes s nan below
#pragma unroll
    for (int u = 0; u < 4; ++u)
      vm = v[u] > vm ? v[u] : vm;
    if (vm > m) {
      s = s * A(dExp(m - vm));
      m = vm;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      s += v[u] == T(-INFINITY) ? A(0) : A(dExp(v[u] - m));
  }
  T mx = groupMax<kMode>(m);
  double part = s == 0 ? 0.0 : double(s) * double(dExp(m - mx));
  maxOut = mx;
  sumOut = groupSum<kMode>(part);
}

//===----------------------------------------------------------------------===//
// Labels
//===----------------------------------------------------------------------===//

struct LabelView {
  const void *data;
  bool i64;
  int64_t classes;
  bool hasIgnore;
  int64_t ignore;
  /// Receives the lowest position of a label outside [0, classes), if set.
  unsigned long long *bad;

  __device__ int64_t raw(int64_t i) const {
    return i64 ? static_cast<const int64_t *>(data)[i]
               : int64_t(static_cast<const int32_t *>(data)[i]);
  }
  /// The class at position i, or -1 when ignored or out of range (which
  /// `report` records).
  __device__ int64_t resolve(int64_t i, bool report) const {
    int64_t v = raw(i);
    if (hasIgnore && v == ignore)
      return -1;
    if (v < 0 || v >= classes) {
      if (report && bad)
        atomicMin(bad, static_cast<unsigned long long>(i));
      return -1;
    }
    return v;
  }
};

__global__ void badLabelKernel(LabelView labels) {
  unsigned long long i = labels.bad[0];
  if (i != ~0ull)
    labels.bad[1] = static_cast<unsigned long long>(labels.raw(int64_t(i)));
}

/// The flag is two words: the position (~0 when every label is valid) and,
/// after badLabelKernel, its label.
Status initLabelFlag(LabelView &labels, unsigned long long *flag) {
  if (capturingStep()) // checkLabelFlag defers the verdict
    if (Status st = deferredWords(2, &flag); !st.ok())
      return st;
  labels.bad = flag;
  DSC_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, 2 * sizeof(*flag), stream()));
  return Status();
}

Status checkLabelFlag(const Call &call, const LabelView &labels) {
  badLabelKernel<<<1, 1, 0, stream()>>>(labels);
  DSC_CUDA_LAUNCHED("bad_label");
  int64_t classes = labels.classes;
  auto verdict = [call, classes](const unsigned long long *w) {
    if (w[0] == ~0ull)
      return Status();
    return call.fail("label " + std::to_string(static_cast<int64_t>(w[1])) +
                         " at " + std::to_string(w[0]) + " outside [0, " +
                         std::to_string(classes) + ")",
                     StatusCode::OutOfRange);
  };
  if (capturingStep())
    return deferCheck(labels.bad, 2, verdict);
  unsigned long long host[2];
  DSC_CUDA_CHECK(cudaMemcpyAsync(host, labels.bad, sizeof(host),
                                 cudaMemcpyDeviceToHost, stream()));
  DSC_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return verdict(host);
}

} // namespace

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

namespace {

enum BnPass : int { kBnSum = 0, kBnSquares = 1, kBnGrads = 2 };

/// Per-channel statistics in two steps: block (ch, part) sums its contiguous
/// share of the channel's N * S elements (in (n, s) order) into
/// partials[(ch * parts + part) * 2 + {0, 1}]; bnChannels sums the parts in
/// order. Sums: x; (x - mean)^2; g and g * (x - mean) * inv.
template <typename T>
__global__ void __launch_bounds__(256)
    bnPartialKernel(const T *__restrict__ x, const T *__restrict__ g, int64_t c,
                    int64_t s, int64_t count, int parts, int pass,
                    const T *__restrict__ mean, const T *__restrict__ inv,
                    double *__restrict__ partials) {
  int64_t ch = blockIdx.x;
  int part = blockIdx.y;
  int64_t per = (count + parts - 1) / parts;
  int64_t k = minI64(count, per * part) + threadIdx.x;
  int64_t end = minI64(count, per * (part + 1));
  double a = 0, b = 0;
  if (k < end) {
    T m = pass == kBnSum ? T(0) : mean[ch];
    T iv = pass == kBnGrads ? inv[ch] : T(0);
    int64_t n = k / s, j = k - n * s;
    int64_t stepN = blockDim.x / s, stepJ = blockDim.x - stepN * s;
    for (; k < end; k += blockDim.x) {
      int64_t e = (n * c + ch) * s + j;
      if (pass == kBnSum) {
        a += double(x[e]);
      } else if (pass == kBnSquares) {
        T d = x[e] - m;
        a += double(d) * double(d);
      } else {
        a += double(g[e]);
        b += double(g[e] * (x[e] - m) * iv);
      }
      n += stepN, j += stepJ;
      if (j >= s)
        j -= s, ++n;
    }
  }
  a = blockReduce<false>(a);
  if (pass == kBnGrads)
    b = blockReduce<false>(b);
  if (threadIdx.x == 0) {
    partials[(ch * parts + part) * 2] = a;
    partials[(ch * parts + part) * 2 + 1] = b;
  }
}

/// What bnChannelKernel writes per channel from the summed partials.
template <typename T> struct BnChannelOut {
  // kBnSum: mean = sum / count.
  T *mean = nullptr;
  // kBnSquares: var = sum / count, inv = 1 / sqrt(var + eps); with train set,
  // the forward's a = scale * inv, b = bias, the running statistics and the
  // saved statistics.
  T *inv = nullptr;
  bool train = false;
  const T *scale = nullptr, *bias = nullptr, *runningMean = nullptr,
          *runningVar = nullptr;
  T *a = nullptr, *b = nullptr, *newRunningMean = nullptr,
    *newRunningVar = nullptr, *saveMean = nullptr, *saveInvStd = nullptr;
  // kBnGrads: sumG, sumGX, k = scale * inv / count, gradScale, gradBias.
  T *sumG = nullptr, *sumGX = nullptr, *k = nullptr, *gradScale = nullptr,
    *gradBias = nullptr;
};

template <typename T>
__global__ void bnChannelKernel(const double *__restrict__ partials, int parts,
                                int64_t c, int64_t count, int pass, T eps,
                                T momentum, BnChannelOut<T> o) {
  LineGroup<kWarpLine> grp; // a warp per channel
  for (int64_t ch = grp.first; ch < c; ch += grp.step) {
    double a = 0, b = 0;
    for (int p = grp.lane; p < parts; p += 32) {
      a += partials[(ch * parts + p) * 2];
      b += partials[(ch * parts + p) * 2 + 1];
    }
    a = warpSum(a), b = warpSum(b);
    if (grp.lane != 0)
      continue;
    T cnt = static_cast<T>(count);
    if (pass == kBnSum) {
      o.mean[ch] = T(a / double(count));
    } else if (pass == kBnSquares) {
      T var = T(a / double(count));
      T inv = T(1) / dSqrt(var + eps);
      o.inv[ch] = inv;
      if (!o.train)
        continue;
      T mean = o.mean[ch];
      o.a[ch] = o.scale[ch] * inv;
      o.b[ch] = o.bias[ch];
      T unbiased = cnt > 1 ? var * cnt / (cnt - 1) : var;
      if (o.newRunningMean)
        o.newRunningMean[ch] =
            momentum * o.runningMean[ch] + (T(1) - momentum) * mean;
      if (o.newRunningVar)
        o.newRunningVar[ch] =
            momentum * o.runningVar[ch] + (T(1) - momentum) * unbiased;
      if (o.saveMean)
        o.saveMean[ch] = mean;
      if (o.saveInvStd)
        o.saveInvStd[ch] = inv;
    } else {
      T sumG = T(a), sumGX = T(b);
      o.sumG[ch] = sumG, o.sumGX[ch] = sumGX;
      o.k[ch] = (o.scale ? o.scale[ch] : T(1)) * o.inv[ch] / cnt;
      if (o.gradScale)
        o.gradScale[ch] = sumGX;
      if (o.gradBias)
        o.gradBias[ch] = sumG;
    }
  }
}

/// Inference: a = scale / sqrt(var + eps), b = bias, mean.
template <typename T>
__global__ void bnInferenceChannelKernel(const T *__restrict__ scale,
                                         const T *__restrict__ bias,
                                         const T *__restrict__ var, int64_t c,
                                         T eps, T *a, T *b) {
  DSC_GRID_STRIDE(ch, c) {
    a[ch] = scale[ch] / dSqrt(var[ch] + eps);
    b[ch] = bias[ch];
  }
}

/// out = (x - mean) * a + b per channel; I is the index type (32-bit where
/// it fits, which keeps the channel's division cheap).
template <typename T, typename I>
__global__ void bnApplyKernel(const T *__restrict__ x, T *__restrict__ y, I n,
                              I c, I s, const T *__restrict__ mean,
                              const T *__restrict__ a,
                              const T *__restrict__ b) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += I(blockDim.x) * gridDim.x) {
    I ch = (i / s) % c;
    y[i] = (x[i] - mean[ch]) * a[ch] + b[ch];
  }
}

template <typename T, typename I>
__global__ void
bnBackwardApplyKernel(const T *__restrict__ x, const T *__restrict__ g,
                      T *__restrict__ gx, I n, I c, I s, T count,
                      const T *__restrict__ mean, const T *__restrict__ inv,
                      const T *__restrict__ k, const T *__restrict__ sumG,
                      const T *__restrict__ sumGX) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += I(blockDim.x) * gridDim.x) {
    I ch = (i / s) % c;
    T xhat = (x[i] - mean[ch]) * inv[ch];
    gx[i] = k[ch] * (count * g[i] - sumG[ch] - xhat * sumGX[ch]);
  }
}

bool fits32(int64_t n) { return n < (int64_t(1) << 31); }

template <typename T>
Status bnApply(const Tensor &input, const Tensor &out, int64_t c, int64_t s,
               const T *mean, const T *a, const T *b) {
  int64_t n = input.numel();
  if (n == 0)
    return Status();
  if (fits32(n))
    bnApplyKernel<T, uint32_t><<<blocksFor(n), kThreads, 0, stream()>>>(
        input.as<T>(), out.as<T>(), uint32_t(n), uint32_t(c), uint32_t(s), mean,
        a, b);
  else
    bnApplyKernel<T, uint64_t><<<blocksFor(n), kThreads, 0, stream()>>>(
        input.as<T>(), out.as<T>(), uint64_t(n), uint64_t(c), uint64_t(s), mean,
        a, b);
  DSC_CUDA_LAUNCHED("batch_norm_apply");
  return Status();
}

/// Launches one statistics pass and its per-channel step.
template <typename T>
Status bnPass(const Tensor &input, const Tensor &gradOut, int64_t c, int64_t s,
              int64_t count, int parts, int pass, double *partials, T eps,
              T momentum, const BnChannelOut<T> &o) {
  bnPartialKernel<T><<<dim3(unsigned(c), unsigned(parts)), 256, 0, stream()>>>(
      input.as<T>(), gradOut.as<T>(), c, s, count, parts, pass, o.mean, o.inv,
      partials);
  DSC_CUDA_LAUNCHED("batch_norm_partials");
  bnChannelKernel<T><<<blocksFor(c, 8), 256, 0, stream()>>>(
      partials, parts, c, count, pass, eps, momentum, o);
  DSC_CUDA_LAUNCHED("batch_norm_channels");
  return Status();
}

/// Parts per channel: about 16K elements each, at most 256, fixed by the
/// shape alone so that results do not depend on the device.
int bnParts(int64_t count) {
  return static_cast<int>(
      std::clamp<int64_t>((count + 16383) / 16384, int64_t(1), int64_t(256)));
}

Status checkChannels(const Call &call, int64_t c) {
  if (c > 0x7fffffff)
    return call.fail("more channels than one launch covers",
                     StatusCode::Unimplemented);
  return Status();
}

template <typename T>
Status
batchNormTrainImpl(const Tensor &input, const Tensor &scale, const Tensor &bias,
                   const Tensor &runningMean, const Tensor &runningVar,
                   double epsilon, double momentum, const Tensor &out,
                   const Tensor &newRunningMean, const Tensor &newRunningVar,
                   const Tensor &saveMean, const Tensor &saveInvStd, int64_t n,
                   int64_t c, int64_t s) {
  if (c == 0)
    return Status();
  int64_t count = n * s;
  int parts = bnParts(count);
  ScratchPlan plan;
  size_t pPartials = plan.add(sizeof(double) * 2 * c * parts);
  size_t pMean = plan.add(sizeof(T) * c), pInv = plan.add(sizeof(T) * c);
  size_t pA = plan.add(sizeof(T) * c), pB = plan.add(sizeof(T) * c);
  void *base = nullptr;
  if (Status st = scratch(plan.bytes, &base, "batch norm partials"); !st.ok())
    return st;
  BnChannelOut<T> o;
  o.mean = carve<T>(base, pMean), o.inv = carve<T>(base, pInv);
  o.train = true;
  o.scale = scale.as<T>(), o.bias = bias.as<T>();
  o.runningMean = runningMean.as<T>(), o.runningVar = runningVar.as<T>();
  o.a = carve<T>(base, pA), o.b = carve<T>(base, pB);
  o.newRunningMean = newRunningMean.as<T>();
  o.newRunningVar = newRunningVar.as<T>();
  o.saveMean = saveMean.as<T>(), o.saveInvStd = saveInvStd.as<T>();
  double *partials = carve<double>(base, pPartials);
  T eps = T(epsilon), mom = T(momentum);
  for (int pass : {kBnSum, kBnSquares})
    if (Status st = bnPass<T>(input, input, c, s, count, parts, pass, partials,
                              eps, mom, o);
        !st.ok())
      return st;
  return bnApply<T>(input, out, c, s, o.mean, o.a, o.b);
}

template <typename T>
Status batchNormTrainBackwardImpl(const Tensor &input, const Tensor &scale,
                                  double epsilon, const Tensor &gradOut,
                                  const Tensor &gradIn, const Tensor &gradScale,
                                  const Tensor &gradBias, int64_t n, int64_t c,
                                  int64_t s) {
  if (c == 0)
    return Status();
  int64_t count = n * s;
  int parts = bnParts(count);
  ScratchPlan plan;
  size_t pPartials = plan.add(sizeof(double) * 2 * c * parts);
  size_t pMean = plan.add(sizeof(T) * c), pInv = plan.add(sizeof(T) * c);
  size_t pSumG = plan.add(sizeof(T) * c), pSumGX = plan.add(sizeof(T) * c);
  size_t pK = plan.add(sizeof(T) * c);
  void *base = nullptr;
  if (Status st = scratch(plan.bytes, &base, "batch norm backward partials");
      !st.ok())
    return st;
  BnChannelOut<T> o;
  o.mean = carve<T>(base, pMean), o.inv = carve<T>(base, pInv);
  o.scale = scale.as<T>();
  o.sumG = carve<T>(base, pSumG), o.sumGX = carve<T>(base, pSumGX);
  o.k = carve<T>(base, pK);
  o.gradScale = gradScale.as<T>(), o.gradBias = gradBias.as<T>();
  double *partials = carve<double>(base, pPartials);
  for (int pass : {kBnSum, kBnSquares, kBnGrads})
    if (Status st = bnPass<T>(input, gradOut, c, s, count, parts, pass,
                              partials, T(epsilon), T(0), o);
        !st.ok())
      return st;
  int64_t total = input.numel();
  if (!gradIn.present() || total == 0)
    return Status();
  T cnt = static_cast<T>(count);
  if (fits32(total))
    bnBackwardApplyKernel<T, uint32_t>
        <<<blocksFor(total), kThreads, 0, stream()>>>(
            input.as<T>(), gradOut.as<T>(), gradIn.as<T>(), uint32_t(total),
            uint32_t(c), uint32_t(s), cnt, o.mean, o.inv, o.k, o.sumG, o.sumGX);
  else
    bnBackwardApplyKernel<T, uint64_t>
        <<<blocksFor(total), kThreads, 0, stream()>>>(
            input.as<T>(), gradOut.as<T>(), gradIn.as<T>(), uint64_t(total),
            uint64_t(c), uint64_t(s), cnt, o.mean, o.inv, o.k, o.sumG, o.sumGX);
  DSC_CUDA_LAUNCHED("batch_norm_train_backward");
  return Status();
}

template <typename T>
Status batchNormImpl(const Tensor &input, const Tensor &scale,
                     const Tensor &bias, const Tensor &mean, const Tensor &var,
                     double epsilon, const Tensor &out, int64_t c, int64_t s) {
  if (c == 0 || input.numel() == 0)
    return Status();
  ScratchPlan plan;
  size_t pA = plan.add(sizeof(T) * c), pB = plan.add(sizeof(T) * c);
  void *base = nullptr;
  if (Status st = scratch(plan.bytes, &base, "batch norm partials"); !st.ok())
    return st;
  T *a = carve<T>(base, pA), *b = carve<T>(base, pB);
  bnInferenceChannelKernel<T><<<blocksFor(c), kThreads, 0, stream()>>>(
      scale.as<T>(), bias.as<T>(), var.as<T>(), c, T(epsilon), a, b);
  DSC_CUDA_LAUNCHED("batch_norm_channels");
  return bnApply<T>(input, out, c, s, mean.as<T>(), a, b);
}

} // namespace

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
  if (Status st = checkChannels(call, c); !st.ok())
    return st;
  if (input.dtype == DType::F32)
    return batchNormTrainImpl<float>(
        input, scale, bias, runningMean, runningVar, epsilon, momentum, out,
        newRunningMean, newRunningVar, saveMean, saveInvStd, n, c, s);
  return batchNormTrainImpl<double>(
      input, scale, bias, runningMean, runningVar, epsilon, momentum, out,
      newRunningMean, newRunningVar, saveMean, saveInvStd, n, c, s);
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
  if (Status st = checkChannels(call, c); !st.ok())
    return st;
  if (input.dtype == DType::F32)
    return batchNormTrainBackwardImpl<float>(
        input, scale, epsilon, gradOut, gradIn, gradScale, gradBias, n, c, s);
  return batchNormTrainBackwardImpl<double>(
      input, scale, epsilon, gradOut, gradIn, gradScale, gradBias, n, c, s);
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
  if (input.dtype == DType::F32)
    return batchNormImpl<float>(input, scale, bias, mean, var, epsilon, out, c,
                                s);
  return batchNormImpl<double>(input, scale, bias, mean, var, epsilon, out, c,
                               s);
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

namespace {

/// A row's mean (zero for an RMS norm) and 1 / sqrt(var + eps), rounded to
/// T as the CPU has them. A 16-bit input XS is widened exactly on load: the
/// bits of the same statistics of cast(x -> f32).
template <typename T, int kMode, typename XS>
__device__ inline void rowStats(const XS *__restrict__ x, int64_t cols,
                                int lane, int size, T eps, bool rms, T &mean,
                                T &inv) {
  mean = T(0);
  if (!rms) {
    double a = 0;
    for (int64_t j = lane; j < cols; j += size)
      a += double(widen(x[j]));
    mean = T(groupSum<kMode>(a) / double(cols));
  }
  double q = 0;
  for (int64_t j = lane; j < cols; j += size) {
    T d = T(widen(x[j])) - mean;
    q += double(d) * double(d);
  }
  inv = T(1) / dSqrt(T(groupSum<kMode>(q) / double(cols)) + eps);
}

/// y = layer_norm(x) in T, stored as YS: a 16-bit YS is the rounding
/// cast(y -> YS) would give, so a norm whose only reader was that cast
/// writes the 16-bit value itself.
template <typename T, int kMode, typename YS = T>
__global__ void __launch_bounds__(512)
    layerNormKernel(const T *__restrict__ x, const T *__restrict__ w,
                    const T *__restrict__ b, YS *__restrict__ y, int64_t rows,
                    int64_t cols, T eps, bool rms) {
  LineGroup<kMode> grp;
  for (int64_t r = grp.first; r < rows; r += grp.step) {
    const T *xr = x + r * cols;
    YS *yr = y + r * cols;
    T mean, inv;
    rowStats<T, kMode>(xr, cols, grp.lane, grp.size, eps, rms, mean, inv);
    for (int64_t j = grp.lane; j < cols; j += grp.size)
      yr[j] = narrow<YS>((xr[j] - mean) * inv * w[j] + (b ? b[j] : T(0)));
  }
}

/// dsc-fuse-norm-residual's epilogue of the input gradient (f32 math
/// only, which the calls check): the residual stream's gradient added to it
/// (read before the element is written: `residual` may be gx itself) and
/// the sum's 16-bit copy, each at the same offsets as gx. Absent: nulls.
struct GradEpilogue {
  const float *residual = nullptr;
  uint16_t *copy = nullptr;
  bool copyBf16 = true;

  /// The epilogue of the row starting at element `offset`.
  __host__ __device__ GradEpilogue at(int64_t offset) const {
    return {residual ? residual + offset : nullptr,
            copy ? copy + offset : nullptr, copyBf16};
  }
};

/// a + b rounded once: never contracted with the product that made b into
/// an FMA, so the sum has the bits of the separate add it replaces.
__device__ inline float addRn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double addRn(double a, double b) { return __dadd_rn(a, b); }

/// gx[j] (one element, T = float when the epilogue is there).
template <typename T>
__device__ inline void storeGrad(T *gx, int64_t j, T v, const GradEpilogue &e) {
  if (e.residual)
    v = addRn(T(e.residual[j]), v);
  gx[j] = v;
  if (e.copy)
    e.copy[j] =
        e.copyBf16 ? floatToBf16Bits(float(v)) : floatToHalfBits(float(v));
}

/// gx's chunk at j0 (16-byte aligned), as storeGrad.
__device__ inline void storeGradChunk(float *gx, int64_t j0, float (&v)[kChunk],
                                      const GradEpilogue &e) {
  if (e.residual) {
    float r[kChunk];
    loadFullChunk<true>(e.residual + j0, r);
#pragma unroll
    for (int u = 0; u < kChunk; ++u)
      v[u] = addRn(r[u], v[u]);
  }
  storeNarrowChunk(gx + j0, v);
  if (e.copy && e.copyBf16)
    storeNarrowChunk(reinterpret_cast<Bf16S *>(e.copy) + j0, v);
  else if (e.copy)
    storeNarrowChunk(reinterpret_cast<F16S *>(e.copy) + j0, v);
}

/// gradIn (if any) per row, and each row's statistics for the column sums.
template <typename T, int kMode, typename XS = T>
__global__ void __launch_bounds__(512)
    layerNormBackwardKernel(const XS *__restrict__ x, const T *__restrict__ w,
                            const T *__restrict__ g, T *gx, int64_t rows,
                            int64_t cols, T eps, bool rms,
                            T *__restrict__ rowMean, T *__restrict__ rowInv,
                            GradEpilogue e) {
  LineGroup<kMode> grp;
  for (int64_t r = grp.first; r < rows; r += grp.step) {
    const XS *xr = x + r * cols;
    const T *gr = g + r * cols;
    T mean, inv;
    rowStats<T, kMode>(xr, cols, grp.lane, grp.size, eps, rms, mean, inv);
    if (rowMean && grp.lane == 0)
      rowMean[r] = mean, rowInv[r] = inv;
    if (!gx)
      continue;
    double sw = 0, swx = 0;
    for (int64_t j = grp.lane; j < cols; j += grp.size) {
      T gw = gr[j] * w[j];
      sw += double(gw);
      swx += double(gw * ((T(widen(xr[j])) - mean) * inv));
    }
    // An RMS norm takes no mean out: no sum(g * w) term.
    T sumGW = rms ? T(0) : T(groupSum<kMode>(sw)),
      sumGWX = T(groupSum<kMode>(swx));
    T d = static_cast<T>(cols);
    T *gxr = gx + r * cols;
    GradEpilogue er = e.at(r * cols);
    for (int64_t j = grp.lane; j < cols; j += grp.size) {
      T xhat = (T(widen(xr[j])) - mean) * inv;
      storeGrad(gxr, j, inv / d * (d * gr[j] * w[j] - sumGW - xhat * sumGWX),
                er);
    }
  }
}

/// partials[{0, 1}][chunk][j] = sum over the chunk's rows of g * xhat, g.
template <typename T, typename XS = T>
__global__ void __launch_bounds__(256)
    layerNormColumnKernel(const XS *__restrict__ x, const T *__restrict__ g,
                          const T *__restrict__ rowMean,
                          const T *__restrict__ rowInv, int64_t rows,
                          int64_t cols, int64_t rowsPerChunk, int64_t chunks,
                          double *__restrict__ partials) {
  int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t chunk = blockIdx.y;
  if (j >= cols)
    return;
  int64_t r0 = chunk * rowsPerChunk, r1 = minI64(rows, r0 + rowsPerChunk);
  double s = 0, b = 0;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t e = r * cols + j;
    T xhat = (T(widen(x[e])) - rowMean[r]) * rowInv[r];
    s += double(g[e] * xhat);
    b += double(g[e]);
  }
  partials[chunk * cols + j] = s;
  partials[(chunks + chunk) * cols + j] = b;
}

/// gradScale[j] and gradBias[j] (those present) from `chunks` partial rows
/// of each, partials[{0, 1}][k][j]; the bias's are read only when wanted.
template <typename T>
__global__ void layerNormColumnSumKernel(const double *__restrict__ partials,
                                         int64_t cols, int64_t chunks,
                                         T *gradScale, T *gradBias) {
  LineGroup<kWarpLine> grp; // a warp per column
  for (int64_t j = grp.first; j < cols; j += grp.step) {
    double s = 0, b = 0;
    for (int64_t k = grp.lane; k < chunks; k += 32) {
      s += partials[k * cols + j];
      if (gradBias) // the held rows' kernel writes none otherwise
        b += partials[(chunks + k) * cols + j];
    }
    s = warpSum(s), b = warpSum(b);
    if (grp.lane != 0)
      continue;
    if (gradScale)
      gradScale[j] = T(s);
    if (gradBias)
      gradBias[j] = T(b);
  }
}

//===----------------------------------------------------------------------===//
// Layer norm over rows held in registers (f32 math, 8 | cols)
//===----------------------------------------------------------------------===//
//
// The kernels above read a row once per statistic and once more for the
// result (the backward twice more, and the column sums once again in their
// own kernel), element by element. When the math is f32, a row's length is
// a multiple of 8 and the buffers are 16-byte aligned, these take each row
// once, in chunks of 8 (16-byte loads; an f32 chunk is two), keep them in
// registers and write the result in 16-byte stores:
//  - rows up to 1024 columns (GPT-2's 768) go to a warp each, kN = 1..4
//    chunks a lane; the backward also sums the scale's and bias's column
//    partials of its rows in registers (kWarpRows rows a warp, the block's
//    warps added in order through shared memory), so the column pass that
//    read x and g once more is gone: one partial row per block of
//    kWarpRows * kWarpsPerBlock rows, summed by layerNormColumnSumKernel;
//  - longer rows (Llama's 2048-wide RMS norms, which took half the time
//    this way: bench/results/2026-12-04-h200-held-norm.md) go to a block
//    each, at most kRowChunks chunks a thread (32 * ceil(chunks / 128)
//    threads, so rows up to 16384 columns); the backward folds its column
//    sums in too: when they are wanted, a block takes kHeldRows rows in
//    turn, each thread summing the columns of the chunks it holds in shared
//    memory, one partial row (two with a bias) per block, summed by
//    layerNormColumnSumKernel.
// Chunk c of a row goes to lane c % size of the row's group, which takes its
// chunks in order: the statistics are summed in double per thread, then over
// the group, in an order fixed by the shape alone, so a 16-bit input gives
// bitwise what its f32 widening gives, and a 16-bit result is the f32 result
// rounded.

constexpr int kRowChunks = 4;
constexpr int kWarpRows = 8, kWarpsPerBlock = 4;
/// Rows a block of the held backward takes when it sums columns: 512
/// blocks for Llama's 8192 rows.
constexpr int kHeldRows = 16;

/// The launch of a held-row kernel: a warp per row holding warpChunks chunks
/// a lane (warpChunks > 0), a block of `threads` per row (threads > 0), or
/// neither when the rows do not fit one.
struct HeldRows {
  unsigned threads = 0;
  int warpChunks = 0;
};

HeldRows pickHeldRows(int64_t cols,
                      std::initializer_list<const void *> buffers) {
  if (cols == 0 || cols % kChunk != 0)
    return {};
  for (const void *p : buffers)
    if (p && !aligned16(p))
      return {};
  int64_t chunks = cols / kChunk;
  if (cols <= 1024)
    return {0, int((chunks + 31) / 32)};
  int64_t threads = (chunks + kRowChunks - 1) / kRowChunks;
  threads = (threads + 31) / 32 * 32;
  if (threads > 512)
    return {};
  return {unsigned(threads), 0};
}

/// Calls launch(std::integral_constant<int, n>()) for n in 1..4.
template <typename Launch> void byWarpChunks(int n, Launch &&launch) {
  switch (n) {
  case 1:
    launch(std::integral_constant<int, 1>());
    break;
  case 2:
    launch(std::integral_constant<int, 2>());
    break;
  case 3:
    launch(std::integral_constant<int, 3>());
    break;
  default:
    launch(std::integral_constant<int, 4>());
    break;
  }
}

/// The row's chunks this thread holds (widened), and their count: chunk
/// lane + k * size for k < kN.
template <int kN, typename XS>
__device__ inline int loadRowChunks(const XS *__restrict__ xr, int64_t chunks,
                                    int lane, int size,
                                    float (&v)[kN][kChunk]) {
  int n = 0;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    int64_t c = lane + int64_t(k) * size;
    if (c < chunks) {
      loadFullChunk<false>(xr + c * kChunk, v[k]);
      n = k + 1;
    }
  }
  return n;
}

/// mean (zero for an RMS norm) and 1 / sqrt(var + eps) of a row held in
/// registers over a group (a warp or the block), as rowStats computes them.
template <int kMode, int kN>
__device__ inline void heldRowStats(const float (&v)[kN][kChunk], int held,
                                    int64_t cols, float eps, bool rms,
                                    float &mean, float &inv) {
  mean = 0.f;
  if (!rms) {
    double a = 0;
#pragma unroll
    for (int k = 0; k < kN; ++k)
      if (k < held)
#pragma unroll
        for (int u = 0; u < kChunk; ++u)
          a += double(v[k][u]);
    mean = float(groupSum<kMode>(a) / double(cols));
  }
  double q = 0;
#pragma unroll
  for (int k = 0; k < kN; ++k)
    if (k < held)
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        float d = v[k][u] - mean;
        q += double(d) * double(d);
      }
  inv = 1.f / dSqrt(float(groupSum<kMode>(q) / double(cols)) + eps);
}

template <int kMode, int kN, typename YS>
__global__ void __launch_bounds__(512)
    layerNormHeldKernel(const float *__restrict__ x,
                        const float *__restrict__ w,
                        const float *__restrict__ b, YS *__restrict__ y,
                        int64_t rows, int64_t cols, float eps, bool rms) {
  LineGroup<kMode> grp;
  const int64_t chunks = cols / kChunk;
  for (int64_t r = grp.first; r < rows; r += grp.step) {
    float v[kN][kChunk];
    int held = loadRowChunks<kN>(x + r * cols, chunks, grp.lane, grp.size, v);
    float mean, inv;
    heldRowStats<kMode>(v, held, cols, eps, rms, mean, inv);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if (k >= held)
        continue;
      int64_t j0 = (grp.lane + int64_t(k) * grp.size) * kChunk;
      float wv[kChunk], bv[kChunk], out[kChunk];
      loadFullChunk<false>(w + j0, wv);
      if (b)
        loadFullChunk<false>(b + j0, bv);
#pragma unroll
      for (int u = 0; u < kChunk; ++u)
        out[u] = (v[k][u] - mean) * inv * wv[u] + (b ? bv[u] : 0.f);
      storeNarrowChunk(y + r * cols + j0, out);
    }
  }
}

/// What heldRowBackward hands each chunk k it holds: nothing.
struct NoChunkSink {
  template <typename... A> __device__ void operator()(A &&...) const {}
};

/// One row's backward, held: v (the row) becomes xhat, gv holds g; gx (if
/// any) written; mean and inv returned for the column sums. sink(k, gv[k],
/// v[k]) sees each chunk k held once its xhat is known (as gx's chunk is
/// written, if any: the chunk's last use).
template <int kMode, int kN, typename XS, typename Sink = NoChunkSink>
__device__ inline int
heldRowBackward(const XS *__restrict__ xr, const float *__restrict__ w,
                const float *__restrict__ gr, float *gxr,
                const GradEpilogue &er, int64_t cols, float eps, bool rms,
                int lane, int size, float (&v)[kN][kChunk],
                float (&gv)[kN][kChunk], float &mean, float &inv,
                Sink &&sink = {}) {
  const int64_t chunks = cols / kChunk;
  int held = loadRowChunks<kN>(xr, chunks, lane, size, v);
  heldRowStats<kMode>(v, held, cols, eps, rms, mean, inv);
  double sw = 0, swx = 0;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    if (k >= held)
      continue;
    int64_t j0 = (lane + int64_t(k) * size) * kChunk;
    float wv[kChunk];
    loadFullChunk<true>(gr + j0, gv[k]);
    loadFullChunk<false>(w + j0, wv);
#pragma unroll
    for (int u = 0; u < kChunk; ++u) {
      float gw = gv[k][u] * wv[u];
      v[k][u] = (v[k][u] - mean) * inv;
      sw += double(gw);
      swx += double(gw * v[k][u]);
    }
  }
  if (!gxr) {
#pragma unroll
    for (int k = 0; k < kN; ++k)
      if (k < held)
        sink(k, gv[k], v[k]);
    return held;
  }
  // An RMS norm takes no mean out: no sum(g * w) term.
  float sumGW = rms ? 0.f : float(groupSum<kMode>(sw)),
        sumGWX = float(groupSum<kMode>(swx));
  const float d = static_cast<float>(cols);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    if (k >= held)
      continue;
    int64_t j0 = (lane + int64_t(k) * size) * kChunk;
    float wv[kChunk], out[kChunk];
    loadFullChunk<false>(w + j0, wv);
#pragma unroll
    for (int u = 0; u < kChunk; ++u)
      out[u] = inv / d * (d * (gv[k][u] * wv[u]) - sumGW - v[k][u] * sumGWX);
    sink(k, gv[k], v[k]);
    storeGradChunk(gxr, j0, out, er);
  }
  return held;
}

/// Long rows, a block each, in chunks of `chunkRows` consecutive rows a
/// block: gradIn (if any) and, into partials (if any), the chunk's column
/// sums of g * xhat (and of g when kBias), in f32 over its rows in order,
/// stored as double: partials[{0, 1}][q][j] for the q-th chunk of rows. A
/// thread's columns are those of the chunks it holds, so each accumulates
/// its own, in dynamic shared memory (the registers keep to the row):
/// float4 h of chunk lane + k * size at acc[(2 * k + h) * size + lane],
/// the bias's sums after the scale's.
template <bool kBias, typename XS>
__global__ void __launch_bounds__(512)
    layerNormBackwardHeldKernel(const XS *__restrict__ x,
                                const float *__restrict__ w,
                                const float *__restrict__ g, float *gx,
                                int64_t rows, int64_t cols, float eps, bool rms,
                                int64_t chunkRows, int64_t rowChunks,
                                double *__restrict__ partials, GradEpilogue e) {
  extern __shared__ float4 heldAcc[];
  const int lane = threadIdx.x, size = blockDim.x;
  // This thread's chunks, lane + k * size for k < own, and its sums.
  const int own =
      int(minI64(kRowChunks, (cols / kChunk - lane + size - 1) / size));
  float4 *cs = heldAcc + lane, *cb = cs + 2 * kRowChunks * size;
  auto sum = [&](int k, const float(&a)[kChunk], const float(&xh)[kChunk]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float4 t = cs[(2 * k + h) * size];
      t.x = __fmaf_rn(a[4 * h], xh[4 * h], t.x);
      t.y = __fmaf_rn(a[4 * h + 1], xh[4 * h + 1], t.y);
      t.z = __fmaf_rn(a[4 * h + 2], xh[4 * h + 2], t.z);
      t.w = __fmaf_rn(a[4 * h + 3], xh[4 * h + 3], t.w);
      cs[(2 * k + h) * size] = t;
      if (kBias) {
        float4 u = cb[(2 * k + h) * size];
        u.x += a[4 * h], u.y += a[4 * h + 1];
        u.z += a[4 * h + 2], u.w += a[4 * h + 3];
        cb[(2 * k + h) * size] = u;
      }
    }
  };
  for (int64_t q = blockIdx.x; q < rowChunks; q += gridDim.x) {
    if (partials)
#pragma unroll
      for (int i = 0; i < 2 * kRowChunks; ++i)
        if (i / 2 < own) {
          cs[i * size] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (kBias)
            cb[i * size] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    int64_t r1 = minI64(rows, (q + 1) * chunkRows);
    for (int64_t r = q * chunkRows; r < r1; ++r) {
      float v[kRowChunks][kChunk], gv[kRowChunks][kChunk], mean, inv;
      const float *gr = g + r * cols;
      float *gxr = gx ? gx + r * cols : nullptr;
      if (partials)
        heldRowBackward<kBlockLine, kRowChunks>(
            x + r * cols, w, gr, gxr, e.at(r * cols), cols, eps, rms, lane,
            size, v, gv, mean, inv, sum);
      else
        heldRowBackward<kBlockLine, kRowChunks>(x + r * cols, w, gr, gxr,
                                                e.at(r * cols), cols, eps, rms,
                                                lane, size, v, gv, mean, inv);
    }
    if (!partials)
      continue;
#pragma unroll
    for (int i = 0; i < 2 * kRowChunks; ++i) {
      if (i / 2 >= own)
        continue;
      // Columns j .. j + 3: float4 i % 2 of chunk lane + (i / 2) * size.
      int64_t j = (lane + int64_t(i / 2) * size) * kChunk + 4 * (i % 2);
      float4 t = cs[i * size];
      double2 *ps = reinterpret_cast<double2 *>(partials + q * cols + j);
      ps[0] = make_double2(t.x, t.y), ps[1] = make_double2(t.z, t.w);
      if (kBias) {
        float4 u = cb[i * size];
        double2 *pb =
            reinterpret_cast<double2 *>(partials + (rowChunks + q) * cols + j);
        pb[0] = make_double2(u.x, u.y), pb[1] = make_double2(u.z, u.w);
      }
    }
  }
}

/// Rows up to 1024 columns, a warp each, kWarpRows rows a warp and
/// kWarpsPerBlock warps a block: gradIn (if any) and, into partials (if
/// any), the block's column sums of g * xhat and g: each warp's in f32 over
/// its rows (in shared memory, so the registers keep to the rows), then the
/// warps' added in order and stored as double: partials[{0, 1}][q][j] for
/// the block's q-th chunk of rows.
template <int kN, typename XS>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    layerNormBackwardWarpKernel(const XS *__restrict__ x,
                                const float *__restrict__ w,
                                const float *__restrict__ g, float *gx,
                                int64_t rows, int64_t cols, float eps, bool rms,
                                int64_t rowChunks,
                                double *__restrict__ partials, GradEpilogue e) {
  constexpr int kCols = kN * 32 * kChunk;
  __shared__ __align__(16) float acc[kWarpsPerBlock][2][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  constexpr int64_t kChunkRows = kWarpRows * kWarpsPerBlock;
  float(&cs)[kCols] = acc[warp][0];
  float(&cb)[kCols] = acc[warp][1];
  for (int64_t q = blockIdx.x; q < rowChunks; q += gridDim.x) {
    // Column j = chunk (lane + 32 k) * 8 + u is this lane's alone.
#pragma unroll
    for (int k = 0; k < kN; ++k)
#pragma unroll
      for (int u = 0; u < kChunk; ++u)
        cs[(lane + 32 * k) * kChunk + u] = cb[(lane + 32 * k) * kChunk + u] =
            0.f;
    int64_t r0 = q * kChunkRows + warp * kWarpRows;
    int64_t r1 = minI64(rows, r0 + kWarpRows);
    for (int64_t r = r0; r < r1; ++r) {
      float v[kN][kChunk], gv[kN][kChunk], mean, inv;
      int held = heldRowBackward<kWarpLine, kN>(
          x + r * cols, w, g + r * cols, gx ? gx + r * cols : nullptr,
          e.at(r * cols), cols, eps, rms, lane, 32, v, gv, mean, inv);
      if (!partials)
        continue;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        if (k >= held)
          continue;
        // 16-byte shared accesses: a lane's chunk is 32 contiguous bytes.
        float4 *ps = reinterpret_cast<float4 *>(cs + (lane + 32 * k) * kChunk);
        float4 *pb = reinterpret_cast<float4 *>(cb + (lane + 32 * k) * kChunk);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float *a = gv[k] + 4 * h, *xh = v[k] + 4 * h;
          float4 s4 = ps[h], b4 = pb[h];
          s4.x += a[0] * xh[0], s4.y += a[1] * xh[1];
          s4.z += a[2] * xh[2], s4.w += a[3] * xh[3];
          b4.x += a[0], b4.y += a[1], b4.z += a[2], b4.w += a[3];
          ps[h] = s4, pb[h] = b4;
        }
      }
    }
    if (!partials)
      continue;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float s = acc[0][0][j], b = acc[0][1][j];
#pragma unroll
      for (int k = 1; k < kWarpsPerBlock; ++k)
        s += acc[k][0][j], b += acc[k][1][j];
      partials[q * cols + j] = double(s);
      partials[(rowChunks + q) * cols + j] = double(b);
    }
    __syncthreads(); // acc is read before the next chunk clears it
  }
}

template <typename T, typename YS = T>
Status layerNormImpl(const Tensor &input, const Tensor &scale,
                     const Tensor &bias, double epsilon, bool rms,
                     const Tensor &out, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0)
    return Status();
  YS *y = static_cast<YS *>(out.data);
  if constexpr (std::is_same_v<T, float>) {
    HeldRows h =
        pickHeldRows(cols, {input.data, scale.data, bias.data, out.data});
    auto args = [&](auto kernel, unsigned grid, unsigned threads) {
      kernel<<<grid, threads, 0, stream()>>>(
          input.as<float>(), scale.as<float>(), bias.as<float>(), y, rows, cols,
          float(epsilon), rms);
    };
    if (h.warpChunks) {
      byWarpChunks(h.warpChunks, [&](auto n) {
        args(layerNormHeldKernel<kWarpLine, decltype(n)::value, YS>,
             blocksFor(rows, 8), 256);
      });
      DSC_CUDA_LAUNCHED("layer_norm");
      return Status();
    }
    if (h.threads) {
      args(layerNormHeldKernel<kBlockLine, kRowChunks, YS>, gridFor(rows),
           h.threads);
      DSC_CUDA_LAUNCHED("layer_norm");
      return Status();
    }
  }
  if (cols <= 1024)
    layerNormKernel<T, kWarpLine><<<blocksFor(rows, 8), 256, 0, stream()>>>(
        input.as<T>(), scale.as<T>(), bias.as<T>(), y, rows, cols, T(epsilon),
        rms);
  else
    layerNormKernel<T, kBlockLine><<<gridFor(rows), 512, 0, stream()>>>(
        input.as<T>(), scale.as<T>(), bias.as<T>(), y, rows, cols, T(epsilon),
        rms);
  DSC_CUDA_LAUNCHED("layer_norm");
  return Status();
}

/// The scale's and bias's gradients from `chunks` partial rows (in scratch).
template <typename T>
Status layerNormColumnSums(const double *partials, int64_t cols, int64_t chunks,
                           const Tensor &gradScale, const Tensor &gradBias) {
  layerNormColumnSumKernel<T><<<blocksFor(cols, 8), 256, 0, stream()>>>(
      partials, cols, chunks, gradScale.as<T>(), gradBias.as<T>());
  DSC_CUDA_LAUNCHED("layer_norm_backward_column_sums");
  return Status();
}

/// The warp-held backward (rows up to 1024 columns), column sums included.
template <typename XS>
Status layerNormBackwardWarp(const XS *x, const Tensor &scale, double epsilon,
                             bool rms, const Tensor &gradOut,
                             const Tensor &gradIn, const Tensor &gradScale,
                             const Tensor &gradBias, int64_t rows, int64_t cols,
                             int warpChunks, const GradEpilogue &e) {
  bool columns = gradScale.present() || gradBias.present();
  constexpr int64_t kChunkRows = kWarpRows * kWarpsPerBlock;
  int64_t rowChunks =
      std::max<int64_t>(1, (rows + kChunkRows - 1) / kChunkRows);
  double *partials = nullptr;
  if (columns) {
    void *base = nullptr;
    if (Status st = scratch(sizeof(double) * 2 * rowChunks * cols, &base,
                            "layer norm backward partials");
        !st.ok())
      return st;
    partials = static_cast<double *>(base);
  }
  byWarpChunks(warpChunks, [&](auto n) {
    layerNormBackwardWarpKernel<decltype(n)::value, XS>
        <<<gridFor(rowChunks), 32 * kWarpsPerBlock, 0, stream()>>>(
            x, scale.as<float>(), gradOut.as<float>(), gradIn.as<float>(), rows,
            cols, float(epsilon), rms, rowChunks, partials, e);
  });
  DSC_CUDA_LAUNCHED("layer_norm_backward");
  if (!columns)
    return Status();
  return layerNormColumnSums<float>(partials, cols, rowChunks, gradScale,
                                    gradBias);
}

/// The block-held backward (rows of more than 1024 columns), column sums
/// included: kHeldRows rows a block when they are wanted, else one.
template <typename XS>
Status layerNormBackwardHeld(const XS *x, const Tensor &scale, double epsilon,
                             bool rms, const Tensor &gradOut,
                             const Tensor &gradIn, const Tensor &gradScale,
                             const Tensor &gradBias, int64_t rows, int64_t cols,
                             unsigned threads, const GradEpilogue &e) {
  bool columns = gradScale.present() || gradBias.present(),
       bias = gradBias.present();
  // Summing columns, a block takes kHeldRows rows: a thread per chunk of a
  // row (up to 512), so that the fewer blocks still keep as many loads in
  // flight an SM as a block per row of `threads` did.
  if (columns)
    threads = unsigned(std::min<int64_t>(512, (cols / kChunk + 31) / 32 * 32));
  int64_t chunkRows = columns ? kHeldRows : 1;
  int64_t rowChunks = (rows + chunkRows - 1) / chunkRows;
  double *partials = nullptr;
  size_t smem = 0;
  if (columns) {
    void *base = nullptr;
    if (Status st = scratch(sizeof(double) * (bias ? 2 : 1) * rowChunks * cols,
                            &base, "layer norm backward partials");
        !st.ok())
      return st;
    partials = static_cast<double *>(base);
    smem = sizeof(float) * kChunk * kRowChunks * threads * (bias ? 2 : 1);
  }
  auto kernel = bias ? layerNormBackwardHeldKernel<true, XS>
                     : layerNormBackwardHeldKernel<false, XS>;
  // Over 48 KiB (kRowChunks chunks of sums a thread): rows of more than
  // 3072 columns, or 1536 with a bias.
  if (smem > 48 * 1024)
    DSC_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<gridFor(rowChunks), threads, smem, stream()>>>(
      x, scale.as<float>(), gradOut.as<float>(), gradIn.as<float>(), rows, cols,
      float(epsilon), rms, chunkRows, rowChunks, partials, e);
  DSC_CUDA_LAUNCHED("layer_norm_backward");
  if (!columns)
    return Status();
  return layerNormColumnSums<float>(partials, cols, rowChunks, gradScale,
                                    gradBias);
}

template <typename T, typename XS = T>
Status layerNormBackwardImpl(const Tensor &input, const Tensor &scale,
                             double epsilon, bool rms, const Tensor &gradOut,
                             const Tensor &gradIn, const Tensor &gradScale,
                             const Tensor &gradBias, int64_t rows, int64_t cols,
                             const GradEpilogue &e) {
  bool columns = gradScale.present() || gradBias.present();
  if (cols == 0 || (!columns && (rows == 0 || !gradIn.present())))
    return Status();
  const XS *x = static_cast<const XS *>(input.data);
  if constexpr (std::is_same_v<T, float>) {
    HeldRows h = pickHeldRows(cols, {input.data, scale.data, gradOut.data,
                                     gradIn.data, e.residual, e.copy});
    if (h.warpChunks && rows > 0)
      return layerNormBackwardWarp(x, scale, epsilon, rms, gradOut, gradIn,
                                   gradScale, gradBias, rows, cols,
                                   h.warpChunks, e);
    if (h.threads && rows > 0)
      return layerNormBackwardHeld(x, scale, epsilon, rms, gradOut, gradIn,
                                   gradScale, gradBias, rows, cols, h.threads,
                                   e);
  }
  // Fixed by the shape alone: about 32 rows per chunk, at most 1024 chunks.
  int64_t chunks = std::clamp<int64_t>((rows + 31) / 32, 1, 1024);
  int64_t rowsPerChunk = (rows + chunks - 1) / chunks;
  T *rowMean = nullptr, *rowInv = nullptr;
  double *partials = nullptr;
  if (columns) {
    ScratchPlan plan;
    size_t pMean = plan.add(sizeof(T) * rows),
           pInv = plan.add(sizeof(T) * rows);
    size_t pPartials = plan.add(sizeof(double) * 2 * chunks * cols);
    void *base = nullptr;
    if (Status st = scratch(plan.bytes, &base, "layer norm backward partials");
        !st.ok())
      return st;
    rowMean = carve<T>(base, pMean), rowInv = carve<T>(base, pInv);
    partials = carve<double>(base, pPartials);
  }
  if (rows > 0) {
    if (cols <= 1024)
      layerNormBackwardKernel<T, kWarpLine>
          <<<blocksFor(rows, 8), 256, 0, stream()>>>(
              x, scale.as<T>(), gradOut.as<T>(), gradIn.as<T>(), rows, cols,
              T(epsilon), rms, rowMean, rowInv, e);
    else
      layerNormBackwardKernel<T, kBlockLine>
          <<<gridFor(rows), 512, 0, stream()>>>(
              x, scale.as<T>(), gradOut.as<T>(), gradIn.as<T>(), rows, cols,
              T(epsilon), rms, rowMean, rowInv, e);
    DSC_CUDA_LAUNCHED("layer_norm_backward");
  }
  if (!columns)
    return Status();
  layerNormColumnKernel<T>
      <<<dim3(unsigned((cols + 255) / 256), unsigned(chunks)), 256, 0,
         stream()>>>(x, gradOut.as<T>(), rowMean, rowInv, rows, cols,
                     rowsPerChunk, chunks, partials);
  DSC_CUDA_LAUNCHED("layer_norm_backward_columns");
  return layerNormColumnSums<T>(partials, cols, chunks, gradScale, gradBias);
}

} // namespace

namespace {

Status normForward(const char *name, const Tensor &input, const Tensor &scale,
                   const Tensor &bias, int64_t axis, double epsilon, bool rms,
                   const Tensor &out) {
  Call call(name);
  int64_t rows, cols;
  // An f32 norm may write its result in 16 bits (dsc-fuse-elementwise
  // folds the cast that was its only reader): checked as the f32 result.
  bool narrowOut = input.dtype == DType::F32 && cpu::isHalf(out.dtype);
  Tensor checked = out;
  if (narrowOut)
    checked.dtype = DType::F32;
  if (Status st =
          checkLayerNorm(call, input, scale, bias, axis, checked, rows, cols);
      !st.ok())
    return st;
  if (narrowOut && out.dtype == DType::BF16)
    return layerNormImpl<float, Bf16S>(input, scale, bias, epsilon, rms, out,
                                       rows, cols);
  if (narrowOut)
    return layerNormImpl<float, F16S>(input, scale, bias, epsilon, rms, out,
                                      rows, cols);
  if (input.dtype == DType::F32)
    return layerNormImpl<float>(input, scale, bias, epsilon, rms, out, rows,
                                cols);
  return layerNormImpl<double>(input, scale, bias, epsilon, rms, out, rows,
                               cols);
}

Status normBackward(const char *name, const Tensor &input, const Tensor &scale,
                    int64_t axis, double epsilon, bool rms,
                    const Tensor &gradOut, const Tensor &gradIn,
                    const Tensor &gradScale, const Tensor &gradBias,
                    const Tensor &residual, const Tensor &gradInCopy) {
  Call call(name);
  int64_t rows, cols;
  // A 16-bit input to an f32 backward (the widening cast folded in):
  // checked as its f32 widening.
  bool wideIn = gradOut.dtype == DType::F32 && cpu::isHalf(input.dtype);
  Tensor checked = input;
  if (wideIn)
    checked.dtype = DType::F32;
  if (Status st =
          checkLayerNormBackward(call, checked, scale, axis, gradOut, gradIn,
                                 gradScale, gradBias, rows, cols);
      !st.ok())
    return st;
  if (Status st =
          checkNormGradEpilogue(call, gradOut, gradIn, residual, gradInCopy);
      !st.ok())
    return st;
  GradEpilogue e{residual.as<const float>(), gradInCopy.as<uint16_t>(),
                 gradInCopy.dtype == DType::BF16};
  if (wideIn && input.dtype == DType::BF16)
    return layerNormBackwardImpl<float, Bf16S>(input, scale, epsilon, rms,
                                               gradOut, gradIn, gradScale,
                                               gradBias, rows, cols, e);
  if (wideIn)
    return layerNormBackwardImpl<float, F16S>(input, scale, epsilon, rms,
                                              gradOut, gradIn, gradScale,
                                              gradBias, rows, cols, e);
  if (input.dtype == DType::F32)
    return layerNormBackwardImpl<float>(input, scale, epsilon, rms, gradOut,
                                        gradIn, gradScale, gradBias, rows, cols,
                                        e);
  return layerNormBackwardImpl<double>(input, scale, epsilon, rms, gradOut,
                                       gradIn, gradScale, gradBias, rows, cols,
                                       e);
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

template <typename T, int kMode>
__global__ void __launch_bounds__(512)
    softmaxKernel(const T *__restrict__ x, T *__restrict__ y, Lines lines,
                  bool log) {
  LineGroup<kMode> grp;
  const int64_t stride = lines.stride<kMode>();
  for (int64_t l = grp.first; l < lines.count; l += grp.step) {
    int64_t base = lines.base(l);
    const T *xl = x + base;
    T *yl = y + base;
    T mx;
    double sum;
    lineStats<T, kMode>(xl, lines.dim, stride, grp.lane, grp.size, mx, sum);
    T sumT = T(sum), lse = T(::log(sum));
    for (int64_t k = grp.lane; k < lines.dim; k += grp.size) {
      T z = xl[k * stride] - mx;
      yl[k * stride] = log ? z - lse : dExp(z) / sumT;
    }
  }
}

template <typename T>
void launchSoftmax(const LineLaunch &ll, const T *x, T *y, const Lines &lines,
                   bool log) {
  byLineMode(ll.mode, [&](auto mode) {
    softmaxKernel<T, decltype(mode)::value>
        <<<ll.grid, ll.block, 0, stream()>>>(x, y, lines, log);
  });
}

Status softmaxImpl(const char *name, const Tensor &input, int64_t axis,
                   const Tensor &out, bool log) {
  Call call(name);
  int64_t outer, dim, inner;
  if (Status st = checkSoftmax(call, input, axis, out, outer, dim, inner);
      !st.ok())
    return st;
  Lines lines{outer * inner, dim, inner};
  if (lines.count == 0 || lines.dim == 0)
    return Status();
  LineLaunch ll = pickLines(lines.count, lines.dim, lines.inner);
  if (input.dtype == DType::F32)
    launchSoftmax<float>(ll, input.as<float>(), out.as<float>(), lines, log);
  else
    launchSoftmax<double>(ll, input.as<double>(), out.as<double>(), lines, log);
  DSC_CUDA_LAUNCHED(name);
  return Status();
}

/// One pass over a line of y and g: the sum (of g * y, or of g with `log`)
/// in double in a fixed order, then the gradient.
template <typename T, int kMode>
__global__ void __launch_bounds__(512)
    softmaxBackwardKernel(const T *__restrict__ y, const T *__restrict__ g,
                          T *__restrict__ gi, Lines lines, bool log) {
  LineGroup<kMode> grp;
  const int64_t stride = lines.stride<kMode>();
  for (int64_t l = grp.first; l < lines.count; l += grp.step) {
    int64_t base = lines.base(l);
    const T *yl = y + base, *gl = g + base;
    T *il = gi + base;
    double part = 0;
    for (int64_t k = grp.lane; k < lines.dim; k += grp.size) {
      double gv = double(gl[k * stride]);
      part += log ? gv : gv * double(yl[k * stride]);
    }
    T dot = T(groupSum<kMode>(part));
    for (int64_t k = grp.lane; k < lines.dim; k += grp.size) {
      T yv = yl[k * stride], gv = gl[k * stride];
      il[k * stride] = log ? gv - dExp(yv) * dot : yv * (gv - dot);
    }
  }
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
  Lines lines{outer * inner, dim, inner};
  if (lines.count == 0 || lines.dim == 0)
    return Status();
  LineLaunch ll = pickLines(lines.count, lines.dim, lines.inner);
  byLineMode(ll.mode, [&](auto mode) {
    constexpr int kMode = decltype(mode)::value;
    if (out.dtype == DType::F32)
      softmaxBackwardKernel<float, kMode><<<ll.grid, ll.block, 0, stream()>>>(
          out.as<float>(), gradOut.as<float>(), gradIn.as<float>(), lines, log);
    else
      softmaxBackwardKernel<double, kMode><<<ll.grid, ll.block, 0, stream()>>>(
          out.as<double>(), gradOut.as<double>(), gradIn.as<double>(), lines,
          log);
  });
  DSC_CUDA_LAUNCHED(name);
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

namespace {

// The kernels take the checks' LossShape: lines (n, p) of C classes strided
// by d, and labels at n * d + p.

LabelView labelView(const Tensor &labels, int64_t classes,
                    std::optional<int64_t> ignoreIndex) {
  return {labels.data,
          labels.dtype == DType::I64,
          classes,
          ignoreIndex.has_value(),
          ignoreIndex.value_or(0),
          nullptr};
}

/// Where the per-position losses go: loss itself for None, else
/// lineLoss/lineWeight in scratch for lossTotalKernel.
template <typename T> struct LossOut {
  T *none;
  double *lineLoss, *lineWeight;
  __device__ void put(int64_t at, T v, T w) const {
    if (none) {
      none[at] = v;
    } else {
      lineLoss[at] = double(v);
      lineWeight[at] = double(w);
    }
  }
};

/// Sum, or Mean = sum / summed weight, of the per-position losses, in one
/// block in a fixed order.
template <typename T>
__global__ void __launch_bounds__(1024)
    lossTotalKernel(const double *__restrict__ lineLoss,
                    const double *__restrict__ lineWeight, int64_t count,
                    bool mean, T *loss) {
  double s = 0, w = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    s += lineLoss[i];
    w += lineWeight[i];
  }
  s = blockReduce<false>(s);
  w = blockReduce<false>(w);
  if (threadIdx.x == 0)
    *loss = mean ? T(s / w) : T(s); // nan when every label is ignored
}

/// The summed weight of the labels that are not ignored (for Mean's
/// backward), in one block in a fixed order.
template <typename T>
__global__ void __launch_bounds__(1024)
    weightSumKernel(LabelView labels, const T *__restrict__ weights,
                    int64_t count, double *out) {
  double w = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    int64_t cls = labels.resolve(i, true);
    if (cls >= 0)
      w += weights ? double(weights[cls]) : 1.0;
  }
  w = blockReduce<false>(w);
  if (threadIdx.x == 0)
    *out = w;
}

/// The coefficient of position `at` in the reduced loss.
template <typename T>
__device__ inline T lossCoef(Reduction reduction, const T *gradLoss,
                             const double *weightSum, int64_t at) {
  if (reduction == Reduction::None)
    return gradLoss[at];
  if (reduction == Reduction::Sum)
    return gradLoss[0];
  return gradLoss[0] / T(*weightSum);
}

template <typename S, int kMode>
__global__ void __launch_bounds__(512)
    crossEntropyKernel(const S *__restrict__ x, LabelView labels,
                       const Compute<S> *__restrict__ weights, Lines lines,
                       LossOut<Compute<S>> out) {
  using T = Compute<S>;
  LineGroup<kMode> grp;
  const int64_t stride = lines.stride<kMode>();
  for (int64_t l = grp.first; l < lines.count; l += grp.step) {
    const S *xl = x + lines.base(l);
    T mx;
    double sum;
    lineStats<S, kMode>(xl, lines.dim, stride, grp.lane, grp.size, mx, sum);
    if (grp.lane != 0)
      continue;
    int64_t cls = labels.resolve(l, true);
    T w = cls < 0 ? T(0) : weights ? weights[cls] : T(1);
    T v = T(0);
    if (cls >= 0) {
      T logp = (T(widen(xl[cls * stride])) - mx) - T(::log(sum));
      v = -w * logp;
    }
    out.put(l, v, w);
  }
}

template <typename S, typename G, int kMode>
__global__ void __launch_bounds__(512)
    crossEntropyBackwardKernel(const S *x, LabelView labels,
                               const Compute<S> *__restrict__ weights,
                               Lines lines, Reduction reduction,
                               const Compute<S> *__restrict__ gradLoss,
                               const double *__restrict__ weightSum, G *gx) {
  // (x and gx may be one buffer, dsc.overwrites: a line's elements are all
  // read for its statistics before any is written, each then read and
  // written by the same lane.)
  using T = Compute<S>;
  LineGroup<kMode> grp;
  const int64_t stride = lines.stride<kMode>();
  for (int64_t l = grp.first; l < lines.count; l += grp.step) {
    int64_t base = lines.base(l);
    const S *xl = x + base;
    G *gl = gx + base;
    T mx;
    double sum;
    lineStats<S, kMode>(xl, lines.dim, stride, grp.lane, grp.size, mx, sum);
    T lse = T(::log(sum));
    int64_t cls = labels.resolve(l, grp.lane == 0);
    T k = cls < 0 ? T(0)
                  : lossCoef(reduction, gradLoss, weightSum, l) *
                        (weights ? weights[cls] : T(1));
    for (int64_t ch = grp.lane; ch < lines.dim; ch += grp.size) {
      int64_t e = ch * stride;
      T logp = (T(widen(xl[e])) - mx) - lse;
      gl[e] = narrow<G>(T(k * (dExp(logp) - (ch == cls ? T(1) : T(0)))));
    }
  }
}

//===----------------------------------------------------------------------===//
// Cross entropy over contiguous rows of many classes (kBlockLine's lines)
//===----------------------------------------------------------------------===//
//
// A block per row. The elements are taken as chunks of kChunk = 8 at
// multiples of 8 from the start of the tensor (so a row's first and last
// chunks may be partial, the missing elements read as -inf), chunk c of a row
// going to thread (c - first) % blockDim.x, which takes its chunks in order.
// The arithmetic thus depends on the shape alone, not on the dtype nor on the
// alignment: bf16/f16 scores give bitwise what f32 scores give on their
// widened values. A full chunk is one 16-byte load of 8 16-bit values (two of
// f32, four of f64) when the buffers are 16-byte aligned, else element loads;
// partial chunks go element by element. The forward reads a row once (a
// running max and sum of exponentials); the backward reads it twice, the
// second time with an evict-first load (its last use) while the gradient is
// written with evict-first 16-byte stores.

/// Whether chunk c (elements [8c, 8c + 8)) lies inside [begin, end).
__device__ inline bool fullChunk(int64_t c, int64_t begin, int64_t end) {
  return c * kChunk >= begin && c * kChunk + kChunk <= end;
}

/// Chunk c of the row [begin, end) of x, widened; -inf outside the row.
template <bool kStream, bool kVec, typename S>
__device__ inline void loadChunk(const S *__restrict__ x, int64_t c,
                                 int64_t begin, int64_t end,
                                 Compute<S> (&v)[kChunk]) {
  using T = Compute<S>;
  int64_t e0 = c * kChunk;
  if (kVec && fullChunk(c, begin, end)) {
    loadFullChunk<kStream>(x + e0, v);
    return;
  }
#pragma unroll
  for (int u = 0; u < kChunk; ++u) {
    int64_t e = e0 + u;
    v[u] = e >= begin && e < end ? T(widen(x[e])) : T(-INFINITY);
  }
}

/// A product that is never fused into a later add (nvcc contracts a * b + c
/// by default), so each instantiation rounds the same way.
__device__ inline float mulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mulRn(double a, double b) { return __dmul_rn(a, b); }

/// Adds a chunk to a thread's running max m and sum s of exp(x - m):
/// rescaled once when the chunk's max is above m, then the chunk's
/// exponentials summed pairwise and added. -inf adds nothing (as on the CPU);
/// a nan never becomes the max and makes s nan.
template <typename T>
__device__ inline void addChunk(const T (&v)[kChunk], T &m, T &s) {
  T vm = T(-INFINITY);
#pragma unroll
  for (int u = 0; u < kChunk; ++u)
    vm = v[u] > vm ? v[u] : vm;
  if (vm > m) {
    s = mulRn(s, dExp(m - vm));
    m = vm;
  }
  T e[kChunk];
#pragma unroll
  for (int u = 0; u < kChunk; ++u)
    e[u] = v[u] == T(-INFINITY) ? T(0) : dExp(v[u] - m);
  s += ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
}

/// Chunks a thread loads before it adds them (more for the narrower types,
/// so a thread has as many bytes in flight; f64 one, in its registers). Only
/// the loads move: the chunks are added in the same order.
template <typename S> __host__ __device__ constexpr int rowAhead() {
  return sizeof(S) == 2 ? 4 : sizeof(S) == 4 ? 2 : 1;
}

/// The max M and the sum S of exp(x - M) over the row [begin, end), in every
/// thread: per thread over its chunks (rowAhead loaded ahead), then the
/// threads' pairs combined after a max over the block, in double (as
/// lineStats).
template <typename S, bool kVec>
__device__ __forceinline__ void rowStats(const S *__restrict__ x, int64_t begin,
                                         int64_t end, Compute<S> &maxOut,
                                         double &sumOut) {
  using T = Compute<S>;
  const int64_t last = (end + kChunk - 1) / kChunk, step = blockDim.x;
  constexpr int kAhead = rowAhead<S>();
  T m = T(-INFINITY), s = T(0);
  int64_t c = begin / kChunk + threadIdx.x;
  for (; c + (kAhead - 1) * step < last; c += kAhead * step) {
    T v[kAhead][kChunk];
#pragma unroll
    for (int a = 0; a < kAhead; ++a)
      loadChunk<false, kVec>(x, c + a * step, begin, end, v[a]);
#pragma unroll
    for (int a = 0; a < kAhead; ++a)
      addChunk(v[a], m, s);
  }
  for (; c < last; c += step) {
    T v[kChunk];
    loadChunk<false, kVec>(x, c, begin, end, v);
    addChunk(v, m, s);
  }
  T mx = blockReduce<true>(m);
  double part = s == 0 ? 0.0 : mulRn(double(s), double(dExp(m - mx)));
  maxOut = mx;
  sumOut = blockReduce<false>(part);
}

template <typename S> constexpr int rowMinBlocks();

template <typename S, bool kVec>
__global__ void __launch_bounds__(512, rowMinBlocks<S>())
    crossEntropyRowKernel(const S *__restrict__ x, LabelView labels,
                          const Compute<S> *__restrict__ weights, int64_t rows,
                          int64_t dim, LossOut<Compute<S>> out) {
  using T = Compute<S>;
  for (int64_t l = blockIdx.x; l < rows; l += gridDim.x) {
    int64_t begin = l * dim;
    T mx;
    double sum;
    rowStats<S, kVec>(x, begin, begin + dim, mx, sum);
    if (threadIdx.x != 0)
      continue;
    int64_t cls = labels.resolve(l, true);
    T w = cls < 0 ? T(0) : weights ? weights[cls] : T(1);
    T v = T(0);
    if (cls >= 0) {
      T logp = (T(widen(x[begin + cls])) - mx) - T(::log(sum));
      v = -w * logp;
    }
    out.put(l, v, w);
  }
}

/// The gradient of chunk c: k * (softmax - onehot(hot)), stored as G.
template <bool kVec, typename S, typename G>
__device__ inline void gradChunk(const Compute<S> (&v)[kChunk], int64_t c,
                                 int64_t begin, int64_t end, Compute<S> mx,
                                 Compute<S> lse, Compute<S> k, int64_t hot,
                                 G *__restrict__ gx) {
  using T = Compute<S>;
  const int64_t e0 = c * kChunk;
  // The label's place in this chunk, or -1 (a 32-bit compare per element).
  const int64_t rel = hot - e0;
  const int at = hot >= 0 && rel >= 0 && rel < kChunk ? int(rel) : -1;
  G g[kChunk];
#pragma unroll
  for (int u = 0; u < kChunk; ++u) {
    T logp = (v[u] - mx) - lse;
    g[u] = narrow<G>(T(k * (dExp(logp) - (u == at ? T(1) : T(0)))));
  }
  if (kVec && fullChunk(c, begin, end)) {
    storeFullChunk<true>(gx + e0, g);
    return;
  }
#pragma unroll
  for (int u = 0; u < kChunk; ++u)
    if (e0 + u >= begin && e0 + u < end)
      gx[e0 + u] = g[u];
}

/// Two blocks of 512 an SM (64 registers); f64 gets more registers.
template <typename S> constexpr int rowMinBlocks() {
  return sizeof(Compute<S>) == 4 ? 2 : 1;
}

/// The backward; with kLoss also the forward's per-row loss (into `out`,
/// the bits crossEntropyRowKernel writes), from the same statistics: the
/// row is read twice instead of three times.
template <typename S, typename G, bool kVec, bool kLoss = false>
__global__ void __launch_bounds__(512, rowMinBlocks<S>())
    crossEntropyBackwardRowKernel(const S *x, LabelView labels,
                                  const Compute<S> *__restrict__ weights,
                                  int64_t rows, int64_t dim,
                                  Reduction reduction,
                                  const Compute<S> *__restrict__ gradLoss,
                                  const double *__restrict__ weightSum, G *gx,
                                  LossOut<Compute<S>> out) {
  // (x and gx may be one buffer, dsc.overwrites: the row is read whole for
  // its statistics, a block-wide reduction, before any element is written;
  // each chunk is then read and written by the same thread.)
  using T = Compute<S>;
  for (int64_t l = blockIdx.x; l < rows; l += gridDim.x) {
    const int64_t begin = l * dim, end = begin + dim;
    // The label's score, read before the statistics' reductions (which
    // every thread passes before it writes).
    T picked = T(0);
    if (kLoss && threadIdx.x == 0) {
      int64_t c = labels.resolve(l, true);
      picked = c < 0 ? T(0) : T(widen(x[begin + c]));
    }
    T mx;
    double sum;
    rowStats<S, kVec>(x, begin, end, mx, sum);
    T lse = T(::log(sum));
    if (kLoss && threadIdx.x == 0) {
      int64_t c = labels.resolve(l, true);
      T w = c < 0 ? T(0) : weights ? weights[c] : T(1);
      out.put(l, c < 0 ? T(0) : -w * ((picked - mx) - lse), w);
    }
    int64_t cls = labels.resolve(l, threadIdx.x == 0);
    T k = cls < 0 ? T(0)
                  : lossCoef(reduction, gradLoss, weightSum, l) *
                        (weights ? weights[cls] : T(1));
    const int64_t hot = cls < 0 ? -1 : begin + cls;
    const int64_t last = (end + kChunk - 1) / kChunk, step = blockDim.x;
    constexpr int kAhead = rowAhead<S>();
    int64_t c = begin / kChunk + threadIdx.x;
    for (; c + (kAhead - 1) * step < last; c += kAhead * step) {
      T v[kAhead][kChunk];
#pragma unroll
      for (int a = 0; a < kAhead; ++a)
        loadChunk<true, kVec>(x, c + a * step, begin, end, v[a]);
#pragma unroll
      for (int a = 0; a < kAhead; ++a)
        gradChunk<kVec, S>(v[a], c + a * step, begin, end, mx, lse, k, hot, gx);
    }
    for (; c < last; c += step) {
      T v[kChunk];
      loadChunk<true, kVec>(x, c, begin, end, v);
      gradChunk<kVec, S>(v, c, begin, end, mx, lse, k, hot, gx);
    }
  }
}

/// Threads per block of the row kernels: from the row's length only, so
/// every dtype shares one schedule.
unsigned rowBlock(int64_t dim) {
  return dim <= 4096 ? 128u : dim <= 16384 ? 256u : 512u;
}

template <typename T>
__global__ void nllLossKernel(const T *__restrict__ input, LabelView labels,
                              const T *__restrict__ weights, LossShape l,
                              LossOut<T> out) {
  DSC_GRID_STRIDE(at, l.n * l.d) {
    int64_t i = at / l.d, p = at - i * l.d;
    int64_t cls = labels.resolve(at, true);
    T w = cls < 0 ? T(0) : weights ? weights[cls] : T(1);
    T v = cls < 0 ? T(0) : -w * input[(i * l.c + cls) * l.d + p];
    out.put(at, v, w);
  }
}

template <typename T>
__global__ void nllLossBackwardKernel(LabelView labels,
                                      const T *__restrict__ weights,
                                      LossShape l, Reduction reduction,
                                      const T *__restrict__ gradLoss,
                                      const double *__restrict__ weightSum,
                                      T *__restrict__ gi) {
  DSC_GRID_STRIDE(at, l.n * l.d) {
    int64_t i = at / l.d, p = at - i * l.d;
    int64_t cls = labels.resolve(at, true);
    if (cls >= 0)
      gi[(i * l.c + cls) * l.d + p] =
          -lossCoef(reduction, gradLoss, weightSum, at) *
          (weights ? weights[cls] : T(1));
  }
}

/// Scratch of a loss call: the label flag, the Mean's weight sum and, for a
/// reduced forward, the per-position losses and weights.
struct LossScratch {
  unsigned long long *flag = nullptr;
  double *weightSum = nullptr, *lineLoss = nullptr, *lineWeight = nullptr;
};

Status lossScratch(int64_t positions, bool perPosition, LossScratch &s) {
  ScratchPlan plan;
  size_t pFlag = plan.add(2 * sizeof(unsigned long long));
  size_t pSum = plan.add(sizeof(double));
  size_t pLoss = 0, pWeight = 0;
  if (perPosition) {
    pLoss = plan.add(sizeof(double) * positions);
    pWeight = plan.add(sizeof(double) * positions);
  }
  void *base = nullptr;
  if (Status st = scratch(plan.bytes, &base, "loss partials"); !st.ok())
    return st;
  s.flag = carve<unsigned long long>(base, pFlag);
  s.weightSum = carve<double>(base, pSum);
  if (perPosition) {
    s.lineLoss = carve<double>(base, pLoss);
    s.lineWeight = carve<double>(base, pWeight);
  }
  return Status();
}

/// The scalar of a reduced forward, from the per-position values.
template <typename T>
Status lossTotal(const LossScratch &s, int64_t positions, Reduction reduction,
                 const Tensor &loss) {
  if (reduction == Reduction::None)
    return Status();
  lossTotalKernel<T>
      <<<1, 1024, 0, stream()>>>(s.lineLoss, s.lineWeight, positions,
                                 reduction == Reduction::Mean, loss.as<T>());
  DSC_CUDA_LAUNCHED("loss_total");
  return Status();
}

/// Mean's summed weight, before a backward kernel.
template <typename T>
Status weightSum(const LabelView &labels, const Tensor &weights,
                 int64_t positions, Reduction reduction, const LossScratch &s) {
  if (reduction != Reduction::Mean)
    return Status();
  weightSumKernel<T><<<1, 1024, 0, stream()>>>(labels, weights.as<T>(),
                                               positions, s.weightSum);
  DSC_CUDA_LAUNCHED("loss_weight_sum");
  return Status();
}

template <typename S>
Status crossEntropyImpl(const Call &call, const Tensor &scores,
                        const Tensor &labels, const Tensor &weights,
                        Reduction reduction, std::optional<int64_t> ignoreIndex,
                        const Tensor &loss, const LossShape &l) {
  using T = Compute<S>;
  int64_t positions = l.n * l.d;
  bool reduced = reduction != Reduction::None;
  LossScratch s;
  if (Status st = lossScratch(positions, reduced, s); !st.ok())
    return st;
  LabelView lv = labelView(labels, l.c, ignoreIndex);
  if (Status st = initLabelFlag(lv, s.flag); !st.ok())
    return st;
  if (positions > 0) {
    Lines lines{positions, l.c, l.d};
    LossOut<T> out{reduced ? nullptr : loss.as<T>(), s.lineLoss, s.lineWeight};
    LineLaunch ll = pickLines(lines.count, lines.dim, lines.inner);
    const S *x = scores.as<S>();
    const T *w = weights.as<T>();
    if (ll.mode == kBlockLine) {
      auto launch = [&](auto kernel) {
        kernel<<<gridFor(positions), rowBlock(l.c), 0, stream()>>>(
            x, lv, w, positions, l.c, out);
      };
      if (aligned16(x))
        launch(crossEntropyRowKernel<S, true>);
      else
        launch(crossEntropyRowKernel<S, false>);
    } else {
      byLineMode(ll.mode, [&](auto mode) {
        if constexpr (decltype(mode)::value != kBlockLine)
          crossEntropyKernel<S, decltype(mode)::value>
              <<<ll.grid, ll.block, 0, stream()>>>(x, lv, w, lines, out);
      });
    }
    DSC_CUDA_LAUNCHED("softmax_cross_entropy");
  }
  if (Status st = lossTotal<T>(s, positions, reduction, loss); !st.ok())
    return st;
  return checkLabelFlag(call, lv);
}

template <typename S, typename G>
Status crossEntropyBackwardImpl(const Call &call, const Tensor &scores,
                                const Tensor &labels, const Tensor &weights,
                                Reduction reduction,
                                std::optional<int64_t> ignoreIndex,
                                const Tensor &gradLoss,
                                const Tensor &gradScores, const LossShape &l) {
  using T = Compute<S>;
  int64_t positions = l.n * l.d;
  bool check = syncEveryCall();
  LossScratch s;
  if (Status st = lossScratch(positions, false, s); !st.ok())
    return st;
  LabelView lv = labelView(labels, l.c, ignoreIndex);
  if (check)
    if (Status st = initLabelFlag(lv, s.flag); !st.ok())
      return st;
  if (Status st = weightSum<T>(lv, weights, positions, reduction, s); !st.ok())
    return st;
  if (positions > 0 && l.c > 0) {
    Lines lines{positions, l.c, l.d};
    LineLaunch ll = pickLines(lines.count, lines.dim, lines.inner);
    const S *x = scores.as<S>();
    const T *w = weights.as<T>(), *gl = gradLoss.as<T>();
    G *gs = gradScores.as<G>();
    if (ll.mode == kBlockLine) {
      auto launch = [&](auto kernel) {
        kernel<<<gridFor(positions), rowBlock(l.c), 0, stream()>>>(
            x, lv, w, positions, l.c, reduction, gl, s.weightSum, gs,
            LossOut<T>{});
      };
      if (aligned16(x) && aligned16(gs))
        launch(crossEntropyBackwardRowKernel<S, G, true>);
      else
        launch(crossEntropyBackwardRowKernel<S, G, false>);
    } else {
      byLineMode(ll.mode, [&](auto mode) {
        if constexpr (decltype(mode)::value != kBlockLine)
          crossEntropyBackwardKernel<S, G, decltype(mode)::value>
              <<<ll.grid, ll.block, 0, stream()>>>(x, lv, w, lines, reduction,
                                                   gl, s.weightSum, gs);
      });
    }
    DSC_CUDA_LAUNCHED("softmax_cross_entropy_backward");
  }
  return check ? checkLabelFlag(call, lv) : Status();
}

/// The summed loss of contiguous rows and its gradient in one kernel (see
/// softmaxCrossEntropyWithBackward); false in *done when the rows are not
/// one block's each (the caller then runs the two calls).
template <typename S, typename G>
Status crossEntropyWithBackwardImpl(const Call &call, const Tensor &scores,
                                    const Tensor &labels,
                                    std::optional<int64_t> ignoreIndex,
                                    const Tensor &gradLoss, const Tensor &loss,
                                    const Tensor &gradScores,
                                    const LossShape &l, bool *done) {
  using T = Compute<S>;
  int64_t positions = l.n * l.d;
  *done = false;
  if (positions == 0 || l.c == 0 || l.d != 1 ||
      pickLines(positions, l.c, l.d).mode != kBlockLine)
    return Status();
  LossScratch s;
  if (Status st = lossScratch(positions, true, s); !st.ok())
    return st;
  LabelView lv = labelView(labels, l.c, ignoreIndex);
  if (Status st = initLabelFlag(lv, s.flag); !st.ok())
    return st;
  LossOut<T> out{nullptr, s.lineLoss, s.lineWeight};
  const S *x = scores.as<S>();
  G *gs = gradScores.as<G>();
  auto launch = [&](auto kernel) {
    kernel<<<gridFor(positions), rowBlock(l.c), 0, stream()>>>(
        x, lv, nullptr, positions, l.c, Reduction::Sum, gradLoss.as<T>(),
        s.weightSum, gs, out);
  };
  if (aligned16(x) && aligned16(gs))
    launch(crossEntropyBackwardRowKernel<S, G, true, true>);
  else
    launch(crossEntropyBackwardRowKernel<S, G, false, true>);
  DSC_CUDA_LAUNCHED("softmax_cross_entropy_with_backward");
  if (Status st = lossTotal<T>(s, positions, Reduction::Sum, loss); !st.ok())
    return st;
  *done = true;
  return checkLabelFlag(call, lv);
}

template <typename T>
Status nllLossImpl(const Call &call, const Tensor &input, const Tensor &labels,
                   const Tensor &weights, Reduction reduction,
                   std::optional<int64_t> ignoreIndex, const Tensor &loss,
                   const LossShape &l) {
  int64_t positions = l.n * l.d;
  bool reduced = reduction != Reduction::None;
  LossScratch s;
  if (Status st = lossScratch(positions, reduced, s); !st.ok())
    return st;
  LabelView lv = labelView(labels, l.c, ignoreIndex);
  if (Status st = initLabelFlag(lv, s.flag); !st.ok())
    return st;
  if (positions > 0) {
    LossOut<T> out{reduced ? nullptr : loss.as<T>(), s.lineLoss, s.lineWeight};
    nllLossKernel<T><<<blocksFor(positions), kThreads, 0, stream()>>>(
        input.as<T>(), lv, weights.as<T>(), l, out);
    DSC_CUDA_LAUNCHED("nll_loss");
  }
  if (Status st = lossTotal<T>(s, positions, reduction, loss); !st.ok())
    return st;
  return checkLabelFlag(call, lv);
}

template <typename T>
Status
nllLossBackwardImpl(const Call &call, const Tensor &input, const Tensor &labels,
                    const Tensor &weights, Reduction reduction,
                    std::optional<int64_t> ignoreIndex, const Tensor &gradLoss,
                    const Tensor &gradInput, const LossShape &l) {
  int64_t positions = l.n * l.d;
  bool check = syncEveryCall();
  LossScratch s;
  if (Status st = lossScratch(positions, false, s); !st.ok())
    return st;
  LabelView lv = labelView(labels, l.c, ignoreIndex);
  if (check)
    if (Status st = initLabelFlag(lv, s.flag); !st.ok())
      return st;
  if (gradInput.numel() > 0)
    DSC_CUDA_CHECK(
        cudaMemsetAsync(gradInput.data, 0, gradInput.nbytes(), stream()));
  if (Status st = weightSum<T>(lv, weights, positions, reduction, s); !st.ok())
    return st;
  if (positions > 0) {
    nllLossBackwardKernel<T><<<blocksFor(positions), kThreads, 0, stream()>>>(
        lv, weights.as<T>(), l, reduction, gradLoss.as<T>(), s.weightSum,
        gradInput.as<T>());
    DSC_CUDA_LAUNCHED("nll_loss_backward");
  }
  return check ? checkLabelFlag(call, lv) : Status();
}

/// Calls f(S(), G()) with the scores' storage type S and the gradient's G:
/// 16-bit scores write a gradient of their dtype or f32 (the checks), f32
/// and f64 scores one of their own type.
template <typename F>
Status byScoreAndGradTypes(DType scores, DType grad, F &&f) {
  bool f32Grad = grad == DType::F32;
  switch (scores) {
  case DType::F32:
    return f(float(), float());
  case DType::BF16:
    return f32Grad ? f(Bf16S(), float()) : f(Bf16S(), Bf16S());
  case DType::F16:
    return f32Grad ? f(F16S(), float()) : f(F16S(), F16S());
  default:
    return f(double(), double());
  }
}

} // namespace

Status softmaxCrossEntropy(const Tensor &scores, const Tensor &labels,
                           const Tensor &weights, Reduction reduction,
                           std::optional<int64_t> ignoreIndex,
                           const Tensor &loss) {
  Call call("softmax_cross_entropy");
  LossShape l;
  if (Status st = checkSoftmaxCrossEntropy(call, scores, labels, weights,
                                           reduction, ignoreIndex, loss, l,
                                           /*hostLabels=*/nullptr);
      !st.ok())
    return st;
  switch (scores.dtype) {
  case DType::F32:
    return crossEntropyImpl<float>(call, scores, labels, weights, reduction,
                                   ignoreIndex, loss, l);
  case DType::BF16:
    return crossEntropyImpl<Bf16S>(call, scores, labels, weights, reduction,
                                   ignoreIndex, loss, l);
  case DType::F16:
    return crossEntropyImpl<F16S>(call, scores, labels, weights, reduction,
                                  ignoreIndex, loss, l);
  default:
    return crossEntropyImpl<double>(call, scores, labels, weights, reduction,
                                    ignoreIndex, loss, l);
  }
}

Status softmaxCrossEntropyBackward(const Tensor &scores, const Tensor &labels,
                                   const Tensor &weights, Reduction reduction,
                                   std::optional<int64_t> ignoreIndex,
                                   const Tensor &gradLoss,
                                   const Tensor &gradScores) {
  Call call("softmax_cross_entropy_backward");
  LossShape l;
  if (Status st = checkSoftmaxCrossEntropyBackward(
          call, scores, labels, weights, reduction, ignoreIndex, gradLoss,
          gradScores, l, /*hostLabels=*/nullptr);
      !st.ok())
    return st;
  return byScoreAndGradTypes(
      scores.dtype, gradScores.dtype, [&](auto s, auto g) {
        return crossEntropyBackwardImpl<decltype(s), decltype(g)>(
            call, scores, labels, weights, reduction, ignoreIndex, gradLoss,
            gradScores, l);
      });
}

Status softmaxCrossEntropyWithBackward(const Tensor &scores,
                                       const Tensor &labels,
                                       std::optional<int64_t> ignoreIndex,
                                       const Tensor &gradLoss,
                                       const Tensor &loss,
                                       const Tensor &gradScores) {
  Call call("softmax_cross_entropy_with_backward");
  LossShape l;
  // The forward's checks (the loss scalar's dtype among them), then the
  // backward's (the gradient's).
  if (Status st = checkSoftmaxCrossEntropy(call, scores, labels, Tensor(),
                                           Reduction::Sum, ignoreIndex, loss, l,
                                           /*hostLabels=*/nullptr);
      !st.ok())
    return st;
  if (Status st = checkSoftmaxCrossEntropyBackward(
          call, scores, labels, Tensor(), Reduction::Sum, ignoreIndex, gradLoss,
          gradScores, l, /*hostLabels=*/nullptr);
      !st.ok())
    return st;
  bool done = false;
  Status st =
      byScoreAndGradTypes(scores.dtype, gradScores.dtype, [&](auto s, auto g) {
        using S = decltype(s);
        if constexpr (std::is_same_v<S, double>)
          return Status(); // f64: the two calls
        else
          return crossEntropyWithBackwardImpl<S, decltype(g)>(
              call, scores, labels, ignoreIndex, gradLoss, loss, gradScores, l,
              &done);
      });
  if (!st.ok() || done)
    return st;
  if (Status st2 = cuda::softmaxCrossEntropy(scores, labels, Tensor(),
                                             Reduction::Sum, ignoreIndex, loss);
      !st2.ok())
    return st2;
  return cuda::softmaxCrossEntropyBackward(scores, labels, Tensor(),
                                           Reduction::Sum, ignoreIndex,
                                           gradLoss, gradScores);
}

Status nllLoss(const Tensor &input, const Tensor &labels, const Tensor &weights,
               Reduction reduction, std::optional<int64_t> ignoreIndex,
               const Tensor &loss) {
  Call call("nll_loss");
  LossShape l;
  if (Status st = checkNllLoss(call, input, labels, weights, reduction,
                               ignoreIndex, loss, l, /*hostLabels=*/nullptr);
      !st.ok())
    return st;
  if (input.dtype == DType::F32)
    return nllLossImpl<float>(call, input, labels, weights, reduction,
                              ignoreIndex, loss, l);
  return nllLossImpl<double>(call, input, labels, weights, reduction,
                             ignoreIndex, loss, l);
}

Status nllLossBackward(const Tensor &input, const Tensor &labels,
                       const Tensor &weights, Reduction reduction,
                       std::optional<int64_t> ignoreIndex,
                       const Tensor &gradLoss, const Tensor &gradInput) {
  Call call("nll_loss_backward");
  LossShape l;
  if (Status st = checkNllLossBackward(call, input, labels, weights, reduction,
                                       ignoreIndex, gradLoss, gradInput, l,
                                       /*hostLabels=*/nullptr);
      !st.ok())
    return st;
  if (input.dtype == DType::F32)
    return nllLossBackwardImpl<float>(call, input, labels, weights, reduction,
                                      ignoreIndex, gradLoss, gradInput, l);
  return nllLossBackwardImpl<double>(call, input, labels, weights, reduction,
                                     ignoreIndex, gradLoss, gradInput, l);
}

} // namespace dsc::cuda
