//===- common.cuh - Device-side helpers of the CUDA kernels -----*- C++ -*-===//
//
// Internal to runtime/cuda: index arithmetic over row-major shapes (passed
// to kernels by value), broadcast strides, launch geometry, and the
// deterministic block reductions every reducing kernel uses.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_COMMON_CUH
#define DSC_RUNTIME_CUDA_COMMON_CUH

#include "cpu/kernel_util.h"
#include "cuda/context.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace dsc::cuda::detail {

using cpu::detail::Call;
using cpu::detail::sameShape;
using cpu::detail::validRank;

/// A shape with per-dim element strides, by value into kernels. A stride of
/// 0 broadcasts that dim.
struct Dims {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};

/// Row-major dims of `t`.
inline Dims dimsOf(const Tensor &t) {
  Dims d;
  d.rank = t.rank;
  int64_t acc = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    d.size[i] = t.shape[i];
    d.stride[i] = acc;
    acc *= t.shape[i];
  }
  return d;
}

/// `in`'s strides seen from `out`'s shape under numpy broadcasting (in's
/// dims align to out's trailing dims; size-1 dims get stride 0). Callers
/// check broadcastability first.
inline Dims broadcastDims(const Tensor &in, const Tensor &out) {
  Dims d;
  d.rank = out.rank;
  Dims row = dimsOf(in);
  for (int i = 0; i < out.rank; ++i) {
    d.size[i] = out.shape[i];
    int j = i - (out.rank - in.rank);
    d.stride[i] = (j < 0 || in.shape[j] == 1) ? 0 : row.stride[j];
  }
  return d;
}

/// `d` with size-1 dims dropped, neighbours merged where the outer stride
/// continues the inner one, and outermost dims of stride 0 (broadcast)
/// dropped, whose index does not move the offset: the same offsets with
/// fewer divisions (a bias over [B, T, C] is one modulo).
inline Dims simplified(const Dims &d) {
  Dims r;
  for (int i = 0; i < d.rank; ++i) {
    if (d.size[i] == 1)
      continue;
    if (r.rank > 0 && r.stride[r.rank - 1] == d.stride[i] * d.size[i]) {
      r.size[r.rank - 1] *= d.size[i];
      r.stride[r.rank - 1] = d.stride[i];
      continue;
    }
    r.size[r.rank] = d.size[i];
    r.stride[r.rank] = d.stride[i];
    ++r.rank;
  }
  int lead = 0;
  while (lead < r.rank && r.stride[lead] == 0)
    ++lead;
  Dims out;
  for (int i = lead; i < r.rank; ++i) {
    out.size[out.rank] = r.size[i];
    out.stride[out.rank] = r.stride[i];
    ++out.rank;
  }
  return out;
}

/// offsetOf for shapes of fewer than 2^31 elements: 32-bit divisions.
__host__ __device__ inline int64_t offsetOf32(uint32_t linear, const Dims &d) {
  int64_t off = 0;
  for (int i = d.rank - 1; i >= 0; --i) {
    uint32_t n = static_cast<uint32_t>(d.size[i]);
    uint32_t idx = linear % n;
    linear /= n;
    off += int64_t(idx) * d.stride[i];
  }
  return off;
}

/// The offset in a strided operand of the element at row-major position
/// `linear` of the shape `d.size`.
__host__ __device__ inline int64_t offsetOf(int64_t linear, const Dims &d) {
  int64_t off = 0;
  for (int i = d.rank - 1; i >= 0; --i) {
    int64_t n = d.size[i];
    int64_t idx = linear % n;
    linear /= n;
    off += idx * d.stride[i];
  }
  return off;
}

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements.
inline unsigned blocksFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1)
    b = 1;
  if (b > 65535 * 8)
    b = 65535 * 8;
  return static_cast<unsigned>(b);
}

#define DSC_GRID_STRIDE(i, n)                                                  \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(blockDim.x) * gridDim.x)

/// Sum over the block in a fixed order (tree over a shared array of
/// blockDim.x entries, a power of two up to 1024); every thread gets it.
template <typename T> __device__ inline T blockSum(T v) {
  __shared__ unsigned char raw[1024 * sizeof(double)];
  T *buf = reinterpret_cast<T *>(raw);
  __syncthreads();
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  T r = buf[0];
  __syncthreads();
  return r;
}

/// Max over the block, as blockSum.
template <typename T> __device__ inline T blockMax(T v) {
  __shared__ unsigned char raw[1024 * sizeof(double)];
  T *buf = reinterpret_cast<T *>(raw);
  __syncthreads();
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && buf[threadIdx.x + s] > buf[threadIdx.x])
      buf[threadIdx.x] = buf[threadIdx.x + s];
    __syncthreads();
  }
  T r = buf[0];
  __syncthreads();
  return r;
}

//===----------------------------------------------------------------------===//
// Exact f16/bf16 conversions (the runtime's, core/runtime.cpp), not the
// intrinsics, so NaN payloads and rounding match the CPU
//===----------------------------------------------------------------------===//

__device__ inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) // inf or nan
    return __uint_as_float(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) { // zero or subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}

__device__ inline uint16_t floatToHalfBits(float f) {
  uint32_t u = __float_as_uint(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffff;
  if (absu >= 0x7f800000) // inf or nan (keep nan quiet)
    return sign | 0x7c00 | (absu > 0x7f800000 ? 0x200 : 0);
  if (absu >= 0x477ff000) // rounds to >= 65520: overflow to inf
    return sign | 0x7c00;
  if (absu < 0x38800000) { // below the smallest normal half, 2^-14
    // Subnormal: an integer count of 2^-24, rounded to even. Exact in f32.
    float a = __fmul_rn(__uint_as_float(absu), 16777216.0f);
    uint32_t m = static_cast<uint32_t>(a);
    float rem = __fsub_rn(a, static_cast<float>(m));
    if (rem > 0.5f || (rem == 0.5f && (m & 1)))
      ++m;
    return sign | static_cast<uint16_t>(m);
  }
  uint32_t mant = absu & 0x7fffff;
  uint32_t exp = (absu >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // may carry into the exponent, which is right
  return sign | static_cast<uint16_t>(h);
}

__device__ inline float bf16BitsToFloat(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__device__ inline uint16_t floatToBf16Bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffff) > 0x7f800000) // nan: keep it quiet
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

/// Element loads and stores of any dtype through double or int64, as
/// cpu::detail's functions of the same names (f16/bf16 through the exact
/// conversions above; float to int truncates, out-of-range clamps).
__device__ inline double loadAsDouble(const void *p, DType dt, int64_t i) {
  switch (dt) {
  case DType::F32:
    return static_cast<const float *>(p)[i];
  case DType::F64:
    return static_cast<const double *>(p)[i];
  case DType::F16:
    return halfBitsToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::BF16:
    return bf16BitsToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::I64:
    return static_cast<double>(static_cast<const int64_t *>(p)[i]);
  case DType::I32:
    return static_cast<const int32_t *>(p)[i];
  case DType::I8:
    return static_cast<const int8_t *>(p)[i];
  case DType::U8:
    return static_cast<const uint8_t *>(p)[i];
  case DType::Bool:
    return static_cast<const uint8_t *>(p)[i] != 0 ? 1.0 : 0.0;
  }
  return 0;
}

/// Integer dtypes only (the int-to-int cast path).
__device__ inline int64_t loadAsInt(const void *p, DType dt, int64_t i) {
  switch (dt) {
  case DType::I64:
    return static_cast<const int64_t *>(p)[i];
  case DType::I32:
    return static_cast<const int32_t *>(p)[i];
  case DType::I8:
    return static_cast<const int8_t *>(p)[i];
  case DType::U8:
    return static_cast<const uint8_t *>(p)[i];
  case DType::Bool:
    return static_cast<const uint8_t *>(p)[i] != 0;
  default:
    return 0;
  }
}

__device__ inline void storeInt(void *p, DType dt, int64_t i, int64_t v) {
  switch (dt) {
  case DType::I64:
    static_cast<int64_t *>(p)[i] = v;
    break;
  case DType::I32:
    static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v);
    break;
  case DType::I8:
    static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v);
    break;
  case DType::U8:
    static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(v);
    break;
  case DType::Bool:
    static_cast<uint8_t *>(p)[i] = v != 0;
    break;
  default:
    break;
  }
}

__device__ inline void storeDouble(void *p, DType dt, int64_t i, double v) {
  switch (dt) {
  case DType::F32:
    static_cast<float *>(p)[i] = static_cast<float>(v);
    break;
  case DType::F64:
    static_cast<double *>(p)[i] = v;
    break;
  case DType::F16:
    static_cast<uint16_t *>(p)[i] = floatToHalfBits(static_cast<float>(v));
    break;
  case DType::BF16:
    static_cast<uint16_t *>(p)[i] = floatToBf16Bits(static_cast<float>(v));
    break;
  case DType::Bool:
    static_cast<uint8_t *>(p)[i] = v != 0;
    break;
  default: // float to int truncates; out-of-range values are clamped
    if (v != v)
      v = 0;
    v = trunc(v);
    v = fmax(v, -9.2233720368547758e18);
    v = fmin(v, 9.2233720368547748e18);
    storeInt(p, dt, i, static_cast<int64_t>(v));
    break;
  }
}

/// The W elements of vector j of p (elements j * W .. j * W + W - 1) in
/// `lanes`, through the widest aligned accesses up to 16 bytes: p + j * W
/// must be aligned to min(16, W * sizeof(T)) (generated fused kernels).
template <int W, typename T>
__device__ __forceinline__ void loadLanes(const T *p, int64_t j,
                                          T (&lanes)[W]) {
  constexpr int kBytes = W * int(sizeof(T));
  const char *src = reinterpret_cast<const char *>(p + j * W);
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) {
      uint4 w = reinterpret_cast<const uint4 *>(src)[k];
      memcpy(reinterpret_cast<char *>(lanes) + 16 * k, &w, 16);
    }
  } else if constexpr (kBytes == 8) {
    uint2 w = *reinterpret_cast<const uint2 *>(src);
    memcpy(lanes, &w, 8);
  } else {
    static_assert(kBytes == 4, "a vector of 4, 8 or a multiple of 16 bytes");
    uint32_t w = *reinterpret_cast<const uint32_t *>(src);
    memcpy(lanes, &w, 4);
  }
}

/// Stores `lanes` as vector j of p, as loadLanes reads it.
template <int W, typename T>
__device__ __forceinline__ void storeLanes(T *p, int64_t j,
                                           const T (&lanes)[W]) {
  constexpr int kBytes = W * int(sizeof(T));
  char *dst = reinterpret_cast<char *>(p + j * W);
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int k = 0; k < kBytes / 16; ++k) {
      uint4 w;
      memcpy(&w, reinterpret_cast<const char *>(lanes) + 16 * k, 16);
      reinterpret_cast<uint4 *>(dst)[k] = w;
    }
  } else if constexpr (kBytes == 8) {
    uint2 w;
    memcpy(&w, lanes, 8);
    *reinterpret_cast<uint2 *>(dst) = w;
  } else {
    static_assert(kBytes == 4, "a vector of 4, 8 or a multiple of 16 bytes");
    uint32_t w;
    memcpy(&w, lanes, 4);
    *reinterpret_cast<uint32_t *>(dst) = w;
  }
}

} // namespace dsc::cuda::detail

#endif // DSC_RUNTIME_CUDA_COMMON_CUH
