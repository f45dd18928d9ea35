//===- elementwise.cu - CUDA kernels: elementwise, cast, fill, dropout ----===//
//
// The elementwise ops of kernels.h. Each call checks its operands on the
// host with its CPU reference's own checks (cpu/checks_math.h, and
// cpu/checks_layout.h for trilu: the same Call messages and status codes),
// returns at once for zero elements, and otherwise enqueues one grid-stride
// kernel on the rank's compute stream.
//
// Kernels are templated on the element type only; the op is a kernel
// argument (a warp-uniform switch), which keeps the instantiations few.
// Broadcasting operands are described by a Bcast: out's shape with size-1
// dims dropped and adjacent dims merged wherever every operand's strides
// allow it, so that a bias add or a scalar operand indexes with at most one
// division, and an operand of out's shape with none.
//
// Float math follows the CPU formulas in the element type (f32 in f32, f64
// in f64) with CUDA's libdevice functions, so transcendental results may
// differ from the host's libm in the last bits. Casts, fill, where, trilu,
// dropout and the integer ops give the CPU's bits exactly: the f16/bf16
// conversions below are the runtime's own (core/runtime.cpp), not the
// intrinsics, so NaN payloads and rounding match too.
//
// Integer division by zero is an error, as on the CPU: before an integer
// div, a small kernel scans the divisor for zeros and the call waits for
// its verdict (one stream synchronization), so a zero divisor returns
// OutOfRange "integer division by zero" and leaves out untouched. The only
// synchronizing call of this file; when the stream is being captured into
// a CUDA graph the scan is skipped and a zero divisor gives 0.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_layout.h"
#include "cpu/checks_math.h"
#include "cuda/common.cuh"
#include "cuda/graph.h"
#include "cuda/elementwise_ops.cuh"
#include "cuda/kernels.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dsc::cuda {

using namespace detail;
using namespace ops;
// The host-side checks are the CPU kernels' own (cpu/checks_math.h).
using cpu::detail::binaryName;
using cpu::detail::checkBinary;
using cpu::detail::checkCast;
using cpu::detail::checkClip;
using cpu::detail::checkDropout;
using cpu::detail::checkFill;
using cpu::detail::checkGelu;
using cpu::detail::checkLeakyRelu;
using cpu::detail::checkSwiglu;
using cpu::detail::checkUnary;
using cpu::detail::checkWhere;
using cpu::detail::unaryName;
using cpu::detail::UnaryPath;

namespace {

template <typename T> inline T *ptr(const Tensor &t) {
  return static_cast<T *>(t.data);
}

inline dim3 grid(int64_t n) { return dim3(blocksFor(n)); }

//===----------------------------------------------------------------------===//
// Broadcast indexing
//===----------------------------------------------------------------------===//

/// out's shape (outermost first) with K operands' element strides, after
/// dropping size-1 dims and merging adjacent dims that every operand walks
/// contiguously. `small`: every linear index fits 32 bits.
template <int K> struct Bcast {
  int rank = 0;
  bool small = true;
  int64_t size[kMaxRank] = {};
  int64_t stride[K][kMaxRank] = {};
};

template <int K>
Bcast<K> makeBcast(const Tensor &out, const Tensor *const (&ins)[K]) {
  Dims d[K];
  for (int k = 0; k < K; ++k)
    d[k] = broadcastDims(*ins[k], out);
  // Innermost first while merging.
  int64_t size[kMaxRank];
  int64_t stride[K][kMaxRank];
  int r = 0;
  for (int i = out.rank - 1; i >= 0; --i) {
    int64_t s = out.shape[i];
    if (s == 1)
      continue;
    if (r > 0) {
      bool merge = true;
      for (int k = 0; k < K; ++k)
        merge = merge && d[k].stride[i] == stride[k][r - 1] * size[r - 1];
      if (merge) {
        size[r - 1] *= s;
        continue;
      }
    }
    size[r] = s;
    for (int k = 0; k < K; ++k)
      stride[k][r] = d[k].stride[i];
    ++r;
  }
  Bcast<K> b;
  b.rank = r;
  b.small = out.numel() <= int64_t(UINT32_MAX);
  for (int j = 0; j < r; ++j) {
    b.size[j] = size[r - 1 - j];
    for (int k = 0; k < K; ++k)
      b.stride[k][j] = stride[k][r - 1 - j];
  }
  return b;
}

/// Whether every operand is laid out like out (offset == linear index).
template <int K> bool isFlat(const Bcast<K> &b) {
  if (b.rank == 0)
    return true;
  if (b.rank > 1)
    return false;
  for (int k = 0; k < K; ++k)
    if (b.stride[k][0] != 1)
      return false;
  return true;
}

/// The K operand offsets of out's element `linear`. The outermost dim takes
/// the remaining quotient, so rank 1 needs no division.
template <int K>
__device__ inline void offsetsAt(int64_t linear, const Bcast<K> &b,
                                 int64_t (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
    off[k] = 0;
  if (b.rank == 0)
    return;
  int64_t rest;
  if (b.small) {
    uint32_t rem = static_cast<uint32_t>(linear);
    for (int d = b.rank - 1; d > 0; --d) {
      uint32_t n = static_cast<uint32_t>(b.size[d]);
      uint32_t q = rem / n;
      int64_t idx = rem - q * n;
      rem = q;
#pragma unroll
      for (int k = 0; k < K; ++k)
        off[k] += idx * b.stride[k][d];
    }
    rest = rem;
  } else {
    rest = linear;
    for (int d = b.rank - 1; d > 0; --d) {
      int64_t q = rest / b.size[d];
      int64_t idx = rest - q * b.size[d];
      rest = q;
#pragma unroll
      for (int k = 0; k < K; ++k)
        off[k] += idx * b.stride[k][d];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k)
    off[k] += rest * b.stride[k][0];
}

//===----------------------------------------------------------------------===//
// Unary, activations, clip
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void unaryFloatKernel(UnaryOp op, const T *x, T *y, int64_t n) {
  DSC_GRID_STRIDE(i, n) { y[i] = applyUnary(op, x[i]); }
}

/// Neg and Abs on signed integers, wrapping like the CPU's static_cast.
template <typename T>
__global__ void unaryIntKernel(bool neg, const T *x, T *y, int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    T v = x[i];
    uint64_t minus = uint64_t(0) - static_cast<uint64_t>(int64_t(v));
    y[i] = (neg || v < 0) ? static_cast<T>(minus) : v;
  }
}

__global__ void notKernel(const uint8_t *x, uint8_t *y, int64_t n) {
  DSC_GRID_STRIDE(i, n) { y[i] = x[i] == 0; }
}

template <typename T>
__global__ void leakyReluKernel(const T *x, T *y, int64_t n, T alpha) {
  DSC_GRID_STRIDE(i, n) {
    T v = x[i];
    y[i] = v > 0 ? v : alpha * v;
  }
}

template <typename T>
__global__ void geluKernel(const T *x, T *y, int64_t n, bool tanhApprox) {
  DSC_GRID_STRIDE(i, n) { y[i] = geluOf(x[i], tanhApprox); }
}

template <typename T>
__global__ void swigluKernel(const T *x, const T *u, T *y, int64_t n) {
  DSC_GRID_STRIDE(i, n) { y[i] = swigluOf(x[i], u[i]); }
}

template <typename T>
__global__ void clipKernel(const T *x, T *y, int64_t n, double lo, double hi) {
  DSC_GRID_STRIDE(i, n) {
    T xi = x[i];
    double v = static_cast<double>(xi);
    if (v != v) {
      y[i] = xi; // nan passes through
      continue;
    }
    double c = v < lo ? lo : v > hi ? hi : v;
    if constexpr (std::is_floating_point_v<T>)
      y[i] = static_cast<T>(c);
    else
      y[i] = doubleToInt<T>(c);
  }
}

template <typename T>
Status launchClip(const Tensor &in, const Tensor &out, double lo, double hi) {
  int64_t n = in.numel();
  clipKernel<T><<<grid(n), kThreads, 0, stream()>>>(ptr<const T>(in),
                                                    ptr<T>(out), n, lo, hi);
  DSC_CUDA_LAUNCHED("clip");
  return Status();
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

/// out = op(lhs, rhs) over out's shape; bool operands are uint8 with
/// `isBool` set (read as 0/1); comparisons write bool.
template <typename T>
__global__ void binaryKernel(BinaryOp op, bool isBool, const T *a, const T *b,
                             void *out, int64_t n, Bcast<2> bc, bool flat) {
  const bool cmp = isCompare(op);
  DSC_GRID_STRIDE(i, n) {
    int64_t ia = i, ib = i;
    if (!flat) {
      int64_t off[2];
      offsetsAt(i, bc, off);
      ia = off[0];
      ib = off[1];
    }
    T x = a[ia], y = b[ib];
    if constexpr (std::is_same_v<T, uint8_t>) {
      if (isBool) {
        x = x != 0;
        y = y != 0;
      }
    }
    if (cmp)
      static_cast<uint8_t *>(out)[i] = compare(op, x, y);
    else
      static_cast<T *>(out)[i] = arith(op, x, y);
  }
}

template <typename T>
__global__ void anyZeroKernel(const T *b, int64_t n, int *flag) {
  DSC_GRID_STRIDE(i, n) {
    if (b[i] == T(0))
      *flag = 1; // every writer stores the same value
  }
}

/// The CPU's integer division check: an error if any element of rhs is
/// zero. Waits for the scan; in a step captured by replayStep the verdict
/// comes after the replay (graph.h); skipped while the stream is captured
/// by anyone else.
template <typename T>
Status checkNoZeroDivisor(const Call &call, const char *name,
                          const Tensor &rhs) {
  int64_t n = rhs.numel();
  if (n == 0)
    return Status();
  cudaStream_t s = stream();
  bool deferred = capturingStep();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DSC_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone && !deferred)
    return Status();
  void *buf = nullptr;
  if (deferred) {
    unsigned long long *word = nullptr;
    if (Status st = deferredWords(1, &word); !st.ok())
      return st;
    buf = word;
  } else if (Status st =
                 scratch(sizeof(unsigned long long), &buf, "division check");
             !st.ok()) {
    return st;
  }
  int *flag = static_cast<int *>(buf);
  DSC_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(unsigned long long), s));
  anyZeroKernel<T><<<grid(n), kThreads, 0, s>>>(ptr<const T>(rhs), n, flag);
  DSC_CUDA_LAUNCHED(name);
  auto verdict = [call](const int &found) {
    if (found)
      return call.fail("integer division by zero", StatusCode::OutOfRange);
    return Status();
  };
  if (deferred)
    return deferCheck(static_cast<unsigned long long *>(buf), 1,
                      [verdict](const unsigned long long *w) {
                        int found = 0;
                        std::memcpy(&found, w, sizeof found);
                        return verdict(found);
                      });
  int found = 0;
  DSC_CUDA_CHECK(
      cudaMemcpyAsync(&found, flag, sizeof(int), cudaMemcpyDeviceToHost, s));
  DSC_CUDA_CHECK(cudaStreamSynchronize(s));
  return verdict(found);
}

template <typename T>
Status launchBinary(const Call &call, BinaryOp op, bool isBool,
                    const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  if constexpr (std::is_integral_v<T>) {
    if (op == BinaryOp::Div && !isBool)
      if (Status st = checkNoZeroDivisor<T>(call, binaryName(op), rhs);
          !st.ok())
        return st;
  }
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  const Tensor *ins[2] = {&lhs, &rhs};
  Bcast<2> bc = makeBcast(out, ins);
  binaryKernel<T><<<grid(n), kThreads, 0, stream()>>>(
      op, isBool, ptr<const T>(lhs), ptr<const T>(rhs), out.data, n, bc,
      isFlat(bc));
  DSC_CUDA_LAUNCHED(binaryName(op));
  return Status();
}

//===----------------------------------------------------------------------===//
// Where, cast, fill, dropout, trilu
//===----------------------------------------------------------------------===//

/// T is an unsigned integer of the element size: where moves bytes.
template <typename T>
__global__ void whereKernel(const uint8_t *c, const T *x, const T *y, T *out,
                            int64_t n, Bcast<3> bc, bool flat) {
  DSC_GRID_STRIDE(i, n) {
    if (flat) {
      out[i] = c[i] ? x[i] : y[i];
    } else {
      int64_t off[3];
      offsetsAt(i, bc, off);
      out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
    }
  }
}

template <typename T>
Status launchWhere(const Tensor &cond, const Tensor &x, const Tensor &y,
                   const Tensor &out) {
  int64_t n = out.numel();
  const Tensor *ins[3] = {&cond, &x, &y};
  Bcast<3> bc = makeBcast(out, ins);
  whereKernel<T><<<grid(n), kThreads, 0, stream()>>>(
      ptr<const uint8_t>(cond), ptr<const T>(x), ptr<const T>(y), ptr<T>(out),
      n, bc, isFlat(bc));
  DSC_CUDA_LAUNCHED("where");
  return Status();
}

enum class CastMode : int { IntToInt, F32ToHalf, ViaDouble };

__global__ void castKernel(const void *in, DType inType, void *out,
                           DType outType, int64_t n, CastMode mode) {
  DSC_GRID_STRIDE(i, n) {
    switch (mode) {
    case CastMode::IntToInt:
      storeInt(out, outType, i, loadAsInt(in, inType, i));
      break;
    case CastMode::F32ToHalf: { // f32 -> f16/bf16 directly, one rounding
      float v = static_cast<const float *>(in)[i];
      static_cast<uint16_t *>(out)[i] =
          outType == DType::F16 ? floatToHalfBits(v) : floatToBf16Bits(v);
      break;
    }
    case CastMode::ViaDouble:
      storeDouble(out, outType, i, loadAsDouble(in, inType, i));
      break;
    }
  }
}

/// f32 <-> f16/bf16 four elements a thread (16-byte f32 and 8-byte 16-bit
/// accesses): the casts dsc-mixed-precision puts around fp32 ops move most
/// of a mixed-precision step's bytes, so they run at copy bandwidth. The
/// same conversions as castKernel, so the same bits.
template <bool ToHalf, bool Bf16>
__global__ void castHalfVec4Kernel(const void *in, void *out, int64_t n4) {
  DSC_GRID_STRIDE(i, n4) {
    if constexpr (ToHalf) {
      float4 v = static_cast<const float4 *>(in)[i];
      auto to = [](float f) {
        return Bf16 ? floatToBf16Bits(f) : floatToHalfBits(f);
      };
      static_cast<ushort4 *>(out)[i] =
          make_ushort4(to(v.x), to(v.y), to(v.z), to(v.w));
    } else {
      ushort4 h = static_cast<const ushort4 *>(in)[i];
      auto from = [](uint16_t b) {
        return Bf16 ? bf16BitsToFloat(b) : halfBitsToFloat(b);
      };
      static_cast<float4 *>(out)[i] =
          make_float4(from(h.x), from(h.y), from(h.z), from(h.w));
    }
  }
}

/// Launches castHalfVec4Kernel when the cast is f32 <-> f16/bf16, the count
/// a multiple of 4 and both pointers aligned for it; false otherwise.
bool castHalfVectorized(const Tensor &input, const Tensor &out, int64_t n) {
  bool toHalf = input.dtype == DType::F32 &&
                (out.dtype == DType::F16 || out.dtype == DType::BF16);
  bool fromHalf = out.dtype == DType::F32 &&
                  (input.dtype == DType::F16 || input.dtype == DType::BF16);
  auto aligned = [](const void *p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  if ((!toHalf && !fromHalf) || n % 4 != 0 || !aligned(input.data) ||
      !aligned(out.data))
    return false;
  bool bf16 = (toHalf ? out.dtype : input.dtype) == DType::BF16;
  int64_t n4 = n / 4;
  auto launch = [&](auto kernel) {
    kernel<<<grid(n4), kThreads, 0, stream()>>>(input.data, out.data, n4);
  };
  if (toHalf)
    bf16 ? launch(castHalfVec4Kernel<true, true>)
         : launch(castHalfVec4Kernel<true, false>);
  else
    bf16 ? launch(castHalfVec4Kernel<false, true>)
         : launch(castHalfVec4Kernel<false, false>);
  return true;
}

template <typename T> __global__ void fillKernel(T *out, int64_t n, T value) {
  DSC_GRID_STRIDE(i, n) { out[i] = value; }
}

template <typename T> Status launchFill(void *out, int64_t n, uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T)); // little-endian: the low bytes
  fillKernel<T>
      <<<grid(n), kThreads, 0, stream()>>>(static_cast<T *>(out), n, value);
  DSC_CUDA_LAUNCHED("fill");
  return Status();
}

/// cpu/norm_loss.cpp's splitmix64 and uniformAt, bit for bit.
__device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ inline double uniformAt(uint64_t seed, uint64_t index) {
  uint64_t h = splitmix64(splitmix64(seed) ^ index);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

template <typename T>
__global__ void dropoutKernel(const T *x, T *y, uint8_t *mask, int64_t n,
                              double ratio, uint64_t seed, T scale) {
  DSC_GRID_STRIDE(i, n) {
    bool keep = ratio < 1 && uniformAt(seed, static_cast<uint64_t>(i)) >= ratio;
    y[i] = keep ? x[i] * scale : T(0);
    if (mask)
      mask[i] = keep;
  }
}

template <typename T>
Status launchDropout(const Tensor &input, double ratio, uint64_t seed,
                     const Tensor &out, const Tensor &mask) {
  int64_t n = input.numel();
  T scale = ratio < 1 ? T(1 / (1 - ratio)) : T(0);
  dropoutKernel<T><<<grid(n), kThreads, 0, stream()>>>(
      ptr<const T>(input), ptr<T>(out),
      mask.present() ? ptr<uint8_t>(mask) : nullptr, n, ratio, seed, scale);
  DSC_CUDA_LAUNCHED("dropout");
  return Status();
}

template <typename T>
__global__ void triluKernel(const T *x, T *y, int64_t n, int64_t rows,
                            int64_t cols, bool upper, int64_t k) {
  DSC_GRID_STRIDE(e, n) {
    int64_t rc = e % (rows * cols);
    int64_t i = rc / cols, j = rc - i * cols;
    bool keep = upper ? j - i >= k : j - i <= k;
    y[e] = keep ? x[e] : T(0);
  }
}

template <typename T>
Status launchTrilu(const Tensor &input, bool upper, int64_t k,
                   const Tensor &out, int64_t rows, int64_t cols) {
  int64_t n = input.numel();
  triluKernel<T><<<grid(n), kThreads, 0, stream()>>>(
      ptr<const T>(input), ptr<T>(out), n, rows, cols, upper, k);
  DSC_CUDA_LAUNCHED("trilu");
  return Status();
}

/// rotate_half over lines of `d` elements (h = d / 2): element i of a line
/// is element i + h negated for i < h, element i - h otherwise. Bits only:
/// the negation flips the sign bit (`sign`, in T = the element's unsigned
/// integer), as dsc.neg does.
template <typename T>
__global__ void rotateHalfKernel(const T *__restrict__ x, T *__restrict__ y,
                                 int64_t n, int64_t d, T sign) {
  const int64_t h = d / 2;
  DSC_GRID_STRIDE(e, n) {
    int64_t col = e % d;
    y[e] = col < h ? T(x[e + h] ^ sign) : x[e - h];
  }
}

/// The same over 16-byte chunks (h a multiple of a chunk's elements, both
/// buffers 16-byte aligned): `sign` holds the sign bits of a chunk's 32-bit
/// words.
__global__ void rotateHalfChunkKernel(const uint4 *__restrict__ x,
                                      uint4 *__restrict__ y, int64_t chunks,
                                      int64_t perLine, uint4 sign) {
  const int64_t half = perLine / 2;
  DSC_GRID_STRIDE(c, chunks) {
    int64_t col = c % perLine;
    if (col < half) {
      uint4 v = x[c + half];
      y[c] = make_uint4(v.x ^ sign.x, v.y ^ sign.y, v.z ^ sign.z, v.w ^ sign.w);
    } else {
      y[c] = x[c - half];
    }
  }
}

/// One thread per line: the same sequential sum as the CPU kernel, so both
/// give the same bits. Lines are short in the models that use it (position
/// ids from a [batch, tokens] mask).
template <typename T>
__global__ void cumSumKernel(const T *x, T *y, int64_t lines, int64_t len,
                             int64_t inner, bool exclusive, bool reverse) {
  using Acc = typename cpu::detail::CumSumAcc<T>::type;
  DSC_GRID_STRIDE(line, lines) {
    int64_t base = (line / inner) * len * inner + line % inner;
    Acc acc = 0;
    for (int64_t k = 0; k < len; ++k) {
      int64_t e = base + (reverse ? len - 1 - k : k) * inner;
      Acc next = acc + static_cast<Acc>(x[e]);
      y[e] = static_cast<T>(exclusive ? acc : next);
      acc = next;
    }
  }
}

template <typename T>
Status launchCumSum(const Tensor &input, const Tensor &out,
                    const cpu::detail::CumSumLayout &l, bool exclusive,
                    bool reverse) {
  cumSumKernel<T><<<grid(l.lines), kThreads, 0, stream()>>>(
      ptr<const T>(input), ptr<T>(out), l.lines, l.len, l.inner, exclusive,
      reverse);
  DSC_CUDA_LAUNCHED("cumsum");
  return Status();
}

/// Calls fn(T{}) with T an unsigned integer of `bytes` (1, 2, 4 or 8).
template <typename Fn> Status dispatchBytes(size_t bytes, Fn &&fn) {
  switch (bytes) {
  case 1:
    return fn(uint8_t());
  case 2:
    return fn(uint16_t());
  case 4:
    return fn(uint32_t());
  default:
    return fn(uint64_t());
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Status unary(UnaryOp op, const Tensor &input, const Tensor &out) {
  const char *name = unaryName(op);
  Call call(name);
  UnaryPath path;
  if (Status st = checkUnary(call, op, input, out, path); !st.ok())
    return st;
  int64_t n = input.numel();
  if (n == 0)
    return Status();
  if (path == UnaryPath::Not) {
    notKernel<<<grid(n), kThreads, 0, stream()>>>(ptr<const uint8_t>(input),
                                                  ptr<uint8_t>(out), n);
    DSC_CUDA_LAUNCHED(name);
    return Status();
  }
  if (path == UnaryPath::SignedInt) {
    bool neg = op == UnaryOp::Neg;
    dim3 g = grid(n);
    cudaStream_t s = stream();
    if (input.dtype == DType::I64)
      unaryIntKernel<int64_t><<<g, kThreads, 0, s>>>(
          neg, ptr<const int64_t>(input), ptr<int64_t>(out), n);
    else if (input.dtype == DType::I32)
      unaryIntKernel<int32_t><<<g, kThreads, 0, s>>>(
          neg, ptr<const int32_t>(input), ptr<int32_t>(out), n);
    else
      unaryIntKernel<int8_t><<<g, kThreads, 0, s>>>(
          neg, ptr<const int8_t>(input), ptr<int8_t>(out), n);
    DSC_CUDA_LAUNCHED(name);
    return Status();
  }
  if (input.dtype == DType::F32)
    unaryFloatKernel<float><<<grid(n), kThreads, 0, stream()>>>(
        op, ptr<const float>(input), ptr<float>(out), n);
  else
    unaryFloatKernel<double><<<grid(n), kThreads, 0, stream()>>>(
        op, ptr<const double>(input), ptr<double>(out), n);
  DSC_CUDA_LAUNCHED(name);
  return Status();
}

Status leakyRelu(const Tensor &input, double alpha, const Tensor &out) {
  Call call("leaky_relu");
  if (Status st = checkLeakyRelu(call, input, alpha, out); !st.ok())
    return st;
  int64_t n = input.numel();
  if (n == 0)
    return Status();
  if (input.dtype == DType::F32)
    leakyReluKernel<float><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const float>(input), ptr<float>(out), n, float(alpha));
  else
    leakyReluKernel<double><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const double>(input), ptr<double>(out), n, alpha);
  DSC_CUDA_LAUNCHED("leaky_relu");
  return Status();
}

Status gelu(const Tensor &input, bool tanhApproximation, const Tensor &out) {
  Call call("gelu");
  if (Status st = checkGelu(call, input, out); !st.ok())
    return st;
  int64_t n = input.numel();
  if (n == 0)
    return Status();
  if (input.dtype == DType::F32)
    geluKernel<float><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const float>(input), ptr<float>(out), n, tanhApproximation);
  else
    geluKernel<double><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const double>(input), ptr<double>(out), n, tanhApproximation);
  DSC_CUDA_LAUNCHED("gelu");
  return Status();
}

Status swiglu(const Tensor &gate, const Tensor &up, const Tensor &out) {
  Call call("swiglu");
  if (Status st = checkSwiglu(call, gate, up, out); !st.ok())
    return st;
  int64_t n = gate.numel();
  if (n == 0)
    return Status();
  if (gate.dtype == DType::F32)
    swigluKernel<float><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const float>(gate), ptr<const float>(up), ptr<float>(out), n);
  else
    swigluKernel<double><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const double>(gate), ptr<const double>(up), ptr<double>(out), n);
  DSC_CUDA_LAUNCHED("swiglu");
  return Status();
}

Status clip(const Tensor &input, std::optional<double> min,
            std::optional<double> max, const Tensor &out) {
  Call call("clip");
  double lo, hi;
  if (Status st = checkClip(call, input, min, max, out, lo, hi); !st.ok())
    return st;
  if (input.numel() == 0)
    return Status();
  switch (input.dtype) {
  case DType::F32:
    return launchClip<float>(input, out, lo, hi);
  case DType::F64:
    return launchClip<double>(input, out, lo, hi);
  case DType::I64:
    return launchClip<int64_t>(input, out, lo, hi);
  case DType::I32:
    return launchClip<int32_t>(input, out, lo, hi);
  case DType::I8:
    return launchClip<int8_t>(input, out, lo, hi);
  default:
    return launchClip<uint8_t>(input, out, lo, hi);
  }
}

Status binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
              const Tensor &out) {
  Call call(binaryName(op));
  if (Status st = checkBinary(call, op, lhs, rhs, out); !st.ok())
    return st;
  if (lhs.dtype == DType::Bool)
    return launchBinary<uint8_t>(call, op, true, lhs, rhs, out);
  switch (lhs.dtype) {
  case DType::F32:
    return launchBinary<float>(call, op, false, lhs, rhs, out);
  case DType::F64:
    return launchBinary<double>(call, op, false, lhs, rhs, out);
  case DType::I64:
    return launchBinary<int64_t>(call, op, false, lhs, rhs, out);
  case DType::I32:
    return launchBinary<int32_t>(call, op, false, lhs, rhs, out);
  case DType::I8:
    return launchBinary<int8_t>(call, op, false, lhs, rhs, out);
  default:
    return launchBinary<uint8_t>(call, op, false, lhs, rhs, out);
  }
}

Status where(const Tensor &cond, const Tensor &x, const Tensor &y,
             const Tensor &out) {
  Call call("where");
  if (Status st = checkWhere(call, cond, x, y, out); !st.ok())
    return st;
  if (out.numel() == 0)
    return Status();
  return dispatchBytes(dtypeSize(out.dtype), [&](auto tag) {
    return launchWhere<decltype(tag)>(cond, x, y, out);
  });
}

Status cast(const Tensor &input, const Tensor &out) {
  Call call("cast");
  if (Status st = checkCast(call, input, out); !st.ok())
    return st;
  int64_t n = input.numel();
  if (n == 0)
    return Status();
  if (input.dtype == out.dtype) {
    if (input.data != out.data)
      DSC_CUDA_CHECK(cudaMemcpyAsync(out.data, input.data, input.nbytes(),
                                     cudaMemcpyDeviceToDevice, stream()));
    return Status();
  }
  if (castHalfVectorized(input, out, n)) {
    DSC_CUDA_LAUNCHED("cast");
    return Status();
  }
  CastMode mode = CastMode::ViaDouble;
  if (!isFloat(input.dtype) && !isFloat(out.dtype))
    mode = CastMode::IntToInt;
  else if (input.dtype == DType::F32 &&
           (out.dtype == DType::F16 || out.dtype == DType::BF16))
    mode = CastMode::F32ToHalf;
  castKernel<<<grid(n), kThreads, 0, stream()>>>(input.data, input.dtype,
                                                 out.data, out.dtype, n, mode);
  DSC_CUDA_LAUNCHED("cast");
  return Status();
}

Status fill(const Tensor &out, double value) {
  Call call("fill");
  if (Status st = checkFill(call, out, value); !st.ok())
    return st;
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  // The element's bits, from the CPU's own conversion.
  uint64_t bits = 0;
  cpu::detail::storeDouble(&bits, out.dtype, 0, value);
  size_t es = dtypeSize(out.dtype);
  if (es == 1) {
    DSC_CUDA_CHECK(cudaMemsetAsync(out.data, static_cast<int>(bits & 0xff),
                                   static_cast<size_t>(n), stream()));
    return Status();
  }
  return dispatchBytes(es, [&](auto tag) {
    return launchFill<decltype(tag)>(out.data, n, bits);
  });
}

Status dropout(const Tensor &input, double ratio, uint64_t seed,
               const Tensor &out, const Tensor &mask) {
  Call call("dropout");
  if (Status st = checkDropout(call, input, ratio, seed, out, mask); !st.ok())
    return st;
  if (input.numel() == 0)
    return Status();
  if (input.dtype == DType::F32)
    return launchDropout<float>(input, ratio, seed, out, mask);
  return launchDropout<double>(input, ratio, seed, out, mask);
}

Status cumsum(const Tensor &input, int64_t axis, bool exclusive, bool reverse,
              const Tensor &out) {
  Call call("cumsum");
  cpu::detail::CumSumLayout l;
  if (Status st = cpu::detail::checkCumSum(call, input, axis, out, l); !st.ok())
    return st;
  if (l.lines == 0)
    return Status();
  switch (input.dtype) {
  case DType::F32:
    return launchCumSum<float>(input, out, l, exclusive, reverse);
  case DType::F64:
    return launchCumSum<double>(input, out, l, exclusive, reverse);
  case DType::I32:
    return launchCumSum<int32_t>(input, out, l, exclusive, reverse);
  default:
    return launchCumSum<int64_t>(input, out, l, exclusive, reverse);
  }
}

Status rotateHalf(const Tensor &input, const Tensor &out) {
  Call call("rotate_half");
  if (Status st = cpu::detail::checkRotateHalf(call, input, out); !st.ok())
    return st;
  int64_t n = input.numel(), d = input.shape[input.rank - 1];
  if (n == 0)
    return Status();
  size_t es = dtypeSize(input.dtype);
  int64_t perChunk = int64_t(16 / es);
  bool aligned = reinterpret_cast<uintptr_t>(input.data) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(out.data) % 16 == 0;
  if (aligned && (d / 2) % perChunk == 0) {
    uint32_t s16 = 0x80008000u, s32 = 0x80000000u;
    uint4 sign = es == 2   ? make_uint4(s16, s16, s16, s16)
                 : es == 4 ? make_uint4(s32, s32, s32, s32)
                           : make_uint4(0, s32, 0, s32);
    int64_t chunks = n / perChunk;
    rotateHalfChunkKernel<<<grid(chunks), kThreads, 0, stream()>>>(
        ptr<const uint4>(input), ptr<uint4>(out), chunks, d / perChunk, sign);
  } else if (es == 2) {
    rotateHalfKernel<uint16_t><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const uint16_t>(input), ptr<uint16_t>(out), n, d, 0x8000);
  } else if (es == 4) {
    rotateHalfKernel<uint32_t><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const uint32_t>(input), ptr<uint32_t>(out), n, d, 0x80000000u);
  } else {
    rotateHalfKernel<uint64_t><<<grid(n), kThreads, 0, stream()>>>(
        ptr<const uint64_t>(input), ptr<uint64_t>(out), n, d,
        uint64_t(1) << 63);
  }
  DSC_CUDA_LAUNCHED("rotate_half");
  return Status();
}

Status trilu(const Tensor &input, bool upper, int64_t k, const Tensor &out) {
  Call call("trilu");
  if (Status st = cpu::detail::checkTrilu(call, input, k, out); !st.ok())
    return st;
  int64_t rows = input.shape[input.rank - 2],
          cols = input.shape[input.rank - 1];
  if (input.numel() == 0)
    return Status();
  return dispatchBytes(dtypeSize(input.dtype), [&](auto tag) {
    return launchTrilu<decltype(tag)>(input, upper, k, out, rows, cols);
  });
}

} // namespace dsc::cuda
