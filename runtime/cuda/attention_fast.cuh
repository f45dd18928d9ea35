//===- attention_fast.cuh - Register-tiled f32 flash attention --*- C++ -*-===//
//
// Internal to runtime/cuda/attention.cu: the fast path of dsc's own
// attention kernels for float compute (f32, and f16/bf16 storage) with head
// dims up to 64 (zero-padded to 64: the padded products add exact zeros).
// Same algorithm and features as attention_flash.cuh (masks, causal,
// window, grouped-query heads, dropout, empty rows, the (shift, inv) of
// attnRowPrep), but register-tiled:
//
//  - tiles of 64 queries x 64 keys, 256 threads; thread t owns the 4 x 4
//    block rows 4 * (t / 16) + i, columns 4 * (t % 16) + j of each 64 x 64
//    product, with float4 reads of shared operands laid out so that the
//    reduction index is the outer one (transposed where needed);
//  - the row statistics (max, sum) reduce over the 16 lanes of a row with
//    a fixed butterfly, so every lane holds the same bits;
//  - attnForwardFast: one block per (b, h, query tile), O in registers;
//  - attnBackwardQFast: one block per (b, h, query tile), dQ in registers;
//  - attnBackwardKVFast: one block per (b, kv head, key tile), dK and dV in
//    registers over the group's heads and their query tiles, in order.
//
// No atomics; every sum has a fixed order, so results are deterministic.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_ATTENTION_FAST_CUH
#define DSC_RUNTIME_CUDA_ATTENTION_FAST_CUH

#include "cuda/attention_flash.cuh"

namespace dsc::cuda::detail {

constexpr int kFastTile = 64;    // queries and keys per tile
constexpr int kFastDim = 64;     // head dims, padded
constexpr int kFastThreads = 256;
constexpr int kFastLd = 68;      // shared row stride (floats), 16-byte rows
constexpr int kFastPlane = kFastTile * kFastLd; // one 64 x 64 shared tile

/// Whether the fast kernels take this request.
inline bool fastAttentionFits(int64_t d, int64_t dv) {
  return d <= kFastDim && dv <= kFastDim;
}

/// rows [row0, row0 + valid) x cols [0, cols) of `src` into the 64 x 64
/// shared tile `dst`, zero elsewhere: transposed (dst[c][r]) or not.
template <typename E, bool Transpose>
__device__ inline void fastLoad(float *dst, const void *src, int64_t base,
                                int64_t row0, int64_t valid, int64_t cols) {
  for (int idx = threadIdx.x; idx < kFastTile * kFastDim; idx += kFastThreads) {
    int r = idx / kFastDim, c = idx % kFastDim;
    float v = r < valid && c < cols
                  ? float(E::load(src, base + (row0 + r) * cols + c))
                  : 0.0f;
    dst[Transpose ? c * kFastLd + r : r * kFastLd + c] = v;
  }
}

__device__ inline float4 ld4(const float *p) {
  return *reinterpret_cast<const float4 *>(p);
}
__device__ inline float at(const float4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/// acc[i][j] += sum_e A[e][ra + i] * B[e][cb + j] over e in [0, 64).
__device__ inline void fastMma(float (&acc)[4][4], const float *A,
                               const float *B, int ra, int cb) {
#pragma unroll 8
  for (int e = 0; e < kFastDim; ++e) {
    float4 a = ld4(A + e * kFastLd + ra), b = ld4(B + e * kFastLd + cb);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        acc[i][j] += at(a, i) * at(b, j);
  }
}

/// Max and sum over the 16 lanes of a row (a half warp), same bits in each.
/// A thread's 4x4 tile s[i][j] (rows tr+i, columns tc+j) into shared
/// memory transposed: dst[(tc + j) * kFastLd + tr + i], one float4 per j.
__device__ inline void storeTransposed(const float (&s)[4][4], float *dst,
                                       int tr, int tc) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
    *reinterpret_cast<float4 *>(dst + (tc + j) * kFastLd + tr) =
        make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
}

__device__ inline float rowMax16(float v) {
  for (int o = 8; o > 0; o >>= 1) {
    float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}
__device__ inline float rowSum16(float v) {
  for (int o = 8; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

inline int64_t forwardFastSmemBytes() {
  return 4 * int64_t(kFastPlane) * int64_t(sizeof(float));
}

template <typename E>
__global__ void __launch_bounds__(kFastThreads)
    attnForwardFast(AttnParams<float> p) {
  extern __shared__ __align__(16) unsigned char smemRaw[];
  float *Qt = reinterpret_cast<float *>(smemRaw);
  float *Kt = Qt + kFastPlane, *Vs = Kt + kFastPlane, *Pt = Vs + kFastPlane;
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int64_t g = h / p.group, i0 = int64_t(blockIdx.y) * kFastTile;
  const int64_t i1 = i0 + kFastTile < p.tq ? i0 + kFastTile : p.tq;
  const int tr = threadIdx.x / 16 * 4, tc = threadIdx.x % 16 * 4;
  const float ninf = negInf<float>();
  fastLoad<E, true>(Qt, p.q, bh * p.tq * p.d, i0, i1 - i0, p.d);
  float o[4][4] = {}, m[4], l[4];
  for (int i = 0; i < 4; ++i)
    m[i] = ninf, l[i] = 0.0f;
  int64_t lo, hi;
  keyRange(p, i0, i1, lo, hi);
  const int64_t kvBase = (b * p.kvHeads + g) * p.tk;
  for (int64_t j0 = lo; j0 < hi; j0 += kFastTile) {
    const int64_t valid = hi - j0 < kFastTile ? hi - j0 : kFastTile;
    __syncthreads();
    fastLoad<E, true>(Kt, p.k, kvBase * p.d, j0, valid, p.d);
    fastLoad<E, false>(Vs, p.v, kvBase * p.dv, j0, valid, p.dv);
    __syncthreads();
    float s[4][4] = {};
    fastMma(s, Qt, Kt, tr, tc);
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = ninf;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = tc + j < valid ? maskedScore(p, b, h, i0 + tr + i,
                                               j0 + tc + j, s[i][j])
                                 : ninf;
        mx = s[i][j] > mx ? s[i][j] : mx;
      }
      float mNew = rowMax16(mx), mOld = m[i];
      mNew = mOld > mNew ? mOld : mNew;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float e = mNew == ninf ? 0.0f : expf(s[i][j] - mNew);
        sum += e;
        s[i][j] = p.drop.active
                      ? e * dropFactor(p, b, h, i0 + tr + i, j0 + tc + j)
                      : e;
      }
      sum = rowSum16(sum);
      alpha[i] = mNew == ninf ? 1.0f : expf(mOld - mNew);
      l[i] = l[i] * alpha[i] + sum, m[i] = mNew;
    }
    storeTransposed(s, Pt, tr, tc);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        o[i][c] *= alpha[i];
    fastMma(o, Pt, Vs, tr, tc);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = i0 + tr + i;
    if (row >= p.tq)
      continue;
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (tc + c < p.dv)
        E::store(p.outW, (bh * p.tq + row) * p.dv + tc + c,
                 l[i] == 0.0f ? 0.0f : o[i][c] / l[i]);
    if (p.lse && tc == 0)
      p.lse[bh * p.tq + row] = l[i] == 0.0f ? ninf : m[i] + logf(l[i]);
  }
}

inline int64_t backwardQFastSmemBytes() {
  return 6 * int64_t(kFastPlane) * int64_t(sizeof(float));
}

template <typename E>
__global__ void __launch_bounds__(kFastThreads)
    attnBackwardQFast(AttnParams<float> p) {
  extern __shared__ __align__(16) unsigned char smemRaw[];
  float *Qt = reinterpret_cast<float *>(smemRaw);
  float *dOt = Qt + kFastPlane, *Kt = dOt + kFastPlane;
  float *Vt = Kt + kFastPlane, *Ks = Vt + kFastPlane, *dSt = Ks + kFastPlane;
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int64_t g = h / p.group, i0 = int64_t(blockIdx.y) * kFastTile;
  const int64_t i1 = i0 + kFastTile < p.tq ? i0 + kFastTile : p.tq;
  const int tr = threadIdx.x / 16 * 4, tc = threadIdx.x % 16 * 4;
  const float ninf = negInf<float>();
  fastLoad<E, true>(Qt, p.q, bh * p.tq * p.d, i0, i1 - i0, p.d);
  fastLoad<E, true>(dOt, p.gradOut, bh * p.tq * p.dv, i0, i1 - i0, p.dv);
  float rowD[4], rowShift[4], rowInv[4];
  for (int i = 0; i < 4; ++i) {
    const int64_t r = i0 + tr + i, row = bh * p.tq + r;
    bool in = r < p.tq;
    rowD[i] = in ? p.delta[row] : 0.0f;
    rowShift[i] = in ? p.shift[row] : ninf;
    rowInv[i] = in ? p.inv[row] : 0.0f;
  }
  float dq[4][4] = {};
  int64_t lo, hi;
  keyRange(p, i0, i1, lo, hi);
  const int64_t kvBase = (b * p.kvHeads + g) * p.tk;
  for (int64_t j0 = lo; j0 < hi; j0 += kFastTile) {
    const int64_t valid = hi - j0 < kFastTile ? hi - j0 : kFastTile;
    __syncthreads();
    fastLoad<E, true>(Kt, p.k, kvBase * p.d, j0, valid, p.d);
    fastLoad<E, false>(Ks, p.k, kvBase * p.d, j0, valid, p.d);
    fastLoad<E, true>(Vt, p.v, kvBase * p.dv, j0, valid, p.dv);
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    fastMma(s, Qt, Kt, tr, tc);
    fastMma(dp, dOt, Vt, tr, tc);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float ds = 0.0f;
        if (tc + j < valid && rowShift[i] != ninf) {
          float sc = maskedScore(p, b, h, i0 + tr + i, j0 + tc + j, s[i][j]);
          float prob = expf(sc - rowShift[i]) * rowInv[i];
          if (prob != 0.0f) {
            float d = dp[i][j];
            if (p.drop.active)
              d *= dropFactor(p, b, h, i0 + tr + i, j0 + tc + j);
            ds = prob * (d - rowD[i]) * p.scale;
          }
        }
        s[i][j] = ds;
      }
    storeTransposed(s, dSt, tr, tc);
    __syncthreads();
    fastMma(dq, dSt, Ks, tr, tc);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = i0 + tr + i;
    if (row >= p.tq)
      continue;
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (tc + c < p.d)
        E::store(p.gradQ, (bh * p.tq + row) * p.d + tc + c, dq[i][c]);
  }
}

inline int64_t backwardKVFastSmemBytes() {
  return (8 * int64_t(kFastPlane) + 3 * kFastTile) * int64_t(sizeof(float));
}

template <typename E>
__global__ void __launch_bounds__(kFastThreads)
    attnBackwardKVFast(AttnParams<float> p) {
  extern __shared__ __align__(16) unsigned char smemRaw[];
  float *Kt = reinterpret_cast<float *>(smemRaw);
  float *Vt = Kt + kFastPlane, *Qt = Vt + kFastPlane, *Qs = Qt + kFastPlane;
  float *dOt = Qs + kFastPlane, *dOs = dOt + kFastPlane;
  float *Ps = dOs + kFastPlane, *dSs = Ps + kFastPlane;
  float *rD = dSs + kFastPlane, *rShift = rD + kFastTile;
  float *rInv = rShift + kFastTile;
  const int64_t bg = blockIdx.x, b = bg / p.kvHeads, g = bg % p.kvHeads;
  const int64_t j0 = int64_t(blockIdx.y) * kFastTile;
  const int64_t j1 = j0 + kFastTile < p.tk ? j0 + kFastTile : p.tk;
  const int64_t kvBase = bg * p.tk, valid = j1 - j0;
  const int tr = threadIdx.x / 16 * 4, tc = threadIdx.x % 16 * 4;
  const float ninf = negInf<float>();
  fastLoad<E, true>(Kt, p.k, kvBase * p.d, j0, valid, p.d);
  fastLoad<E, true>(Vt, p.v, kvBase * p.dv, j0, valid, p.dv);
  float dk[4][4] = {}, dv[4][4] = {};
  int64_t lo, hi;
  queryRange(p, j0, j1, lo, hi);
  for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
    const int64_t bh = b * p.heads + h;
    for (int64_t i0 = lo; i0 < hi; i0 += kFastTile) {
      const int64_t rows = hi - i0 < kFastTile ? hi - i0 : kFastTile;
      __syncthreads();
      fastLoad<E, true>(Qt, p.q, bh * p.tq * p.d, i0, rows, p.d);
      fastLoad<E, false>(Qs, p.q, bh * p.tq * p.d, i0, rows, p.d);
      fastLoad<E, true>(dOt, p.gradOut, bh * p.tq * p.dv, i0, rows, p.dv);
      fastLoad<E, false>(dOs, p.gradOut, bh * p.tq * p.dv, i0, rows, p.dv);
      for (int r = threadIdx.x; r < kFastTile; r += kFastThreads) {
        const int64_t row = bh * p.tq + i0 + r;
        rD[r] = r < rows ? p.delta[row] : 0.0f;
        rShift[r] = r < rows ? p.shift[row] : ninf;
        rInv[r] = r < rows ? p.inv[row] : 0.0f;
      }
      __syncthreads();
      // Queries tr + i (rows), keys tc + j (columns).
      float s[4][4] = {}, dp[4][4] = {};
      fastMma(s, Qt, Kt, tr, tc);
      fastMma(dp, dOt, Vt, tr, tc);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float shift = rShift[tr + i], inv = rInv[tr + i];
        const float dRow = rD[tr + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float pz = 0.0f, ds = 0.0f;
          if (tc + j < valid && shift != ninf) {
            float sc =
                maskedScore(p, b, h, i0 + tr + i, j0 + tc + j, s[i][j]);
            float prob = expf(sc - shift) * inv;
            if (prob != 0.0f) {
              float z = p.drop.active
                            ? dropFactor(p, b, h, i0 + tr + i, j0 + tc + j)
                            : 1.0f;
              pz = prob * z;
              ds = prob * (dp[i][j] * z - dRow) * p.scale;
            }
          }
          s[i][j] = pz, dp[i][j] = ds;
        }
        *reinterpret_cast<float4 *>(Ps + (tr + i) * kFastLd + tc) =
            make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
        *reinterpret_cast<float4 *>(dSs + (tr + i) * kFastLd + tc) =
            make_float4(dp[i][0], dp[i][1], dp[i][2], dp[i][3]);
      }
      __syncthreads();
      // Keys tr + i (rows), head dims tc + c (columns), queries in order.
      fastMma(dv, Ps, dOs, tr, tc);
      fastMma(dk, dSs, Qs, tr, tc);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (tr + i >= valid)
      continue;
    const int64_t key = kvBase + j0 + tr + i;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (tc + c < p.d)
        E::store(p.gradK, key * p.d + tc + c, dk[i][c]);
      if (tc + c < p.dv)
        E::store(p.gradV, key * p.dv + tc + c, dv[i][c]);
    }
  }
}

} // namespace dsc::cuda::detail

#endif // DSC_RUNTIME_CUDA_ATTENTION_FAST_CUH
