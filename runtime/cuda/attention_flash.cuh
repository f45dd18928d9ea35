//===- attention_flash.cuh - dsc's own flash-attention kernels --*- C++ -*-===//
//
// Internal to runtime/cuda/attention.cu: the tiled kernels of dsc.attention
// for every dtype and feature (masks, causal, window, grouped-query heads,
// dropout), the CPU reference's algorithm (cpu/attention.cpp) on the GPU:
//
//  - attnForward: one block per (b, h, tile of Br queries). Q, K, V tiles,
//    the Br x Bc scores and the Br x Dv accumulator live in shared memory;
//    a warp per row keeps the running max and sum (butterfly reductions,
//    fixed order).
//  - attnRowPrep: a warp per query row: D_i = rowsum(dO_i * O_i), and the
//    (shift, inv) with P = exp(s - shift) * inv: (lse, 1), or the recomputed
//    max and 1 / sum when |lse| is too large to hold log(sum) (see
//    kExactLseBound in cpu/attention.cpp).
//  - attnBackwardQ: one block per (b, h, query tile): dQ over the key tiles.
//  - attnBackwardKV: one block per (b, kv head, key tile): dK and dV over the
//    query heads sharing it (in order) and their query tiles.
//
// No atomics: every output element is written by one block, summed in a
// fixed order, so results are deterministic. Compute is in E::T (float for
// f32, f16 and bf16 storage; double for f64).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_ATTENTION_FLASH_CUH
#define DSC_RUNTIME_CUDA_ATTENTION_FLASH_CUH

#include "cpu/attention_rng.h"
#include "cuda/common.cuh"

#include <cstdint>

namespace dsc::cuda::detail {

//===----------------------------------------------------------------------===//
// Element storage
//===----------------------------------------------------------------------===//

/// Storage that is its compute type (f32, f64).
template <typename V> struct PlainElem {
  using T = V;
  __device__ static T load(const void *p, int64_t i) {
    return static_cast<const V *>(p)[i];
  }
  __device__ static void store(void *p, int64_t i, T v) {
    static_cast<V *>(p)[i] = v;
  }
};
using F32Elem = PlainElem<float>;
using F64Elem = PlainElem<double>;
struct Bf16Elem {
  using T = float;
  __device__ static T load(const void *p, int64_t i) {
    return bf16BitsToFloat(static_cast<const uint16_t *>(p)[i]);
  }
  __device__ static void store(void *p, int64_t i, T v) {
    static_cast<uint16_t *>(p)[i] = floatToBf16Bits(v);
  }
};
struct F16Elem {
  using T = float;
  __device__ static T load(const void *p, int64_t i) {
    return halfBitsToFloat(static_cast<const uint16_t *>(p)[i]);
  }
  __device__ static void store(void *p, int64_t i, T v) {
    static_cast<uint16_t *>(p)[i] = floatToHalfBits(v);
  }
};

template <typename T> __device__ inline T negInf();
template <> __device__ inline float negInf<float>() {
  return __int_as_float(0xff800000);
}
template <> __device__ inline double negInf<double>() {
  return __longlong_as_double(0xfff0000000000000ull);
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

/// Everything a kernel needs, by value. Row-major contiguous operands.
template <typename T> struct AttnParams {
  const void *q, *k, *v, *out, *gradOut;
  void *outW, *gradQ, *gradK, *gradV;
  T *lse;         // forward: written (may be null); backward: read
  T *delta;       // backward scratch: [B*H*Tq] each
  T *shift, *inv; //
  const void *mask;
  DType maskType;
  bool hasMask, boolMask;
  int64_t maskStride[4];
  int64_t batch, heads, kvHeads, tq, tk, d, dv, group;
  T scale, keepScale;
  bool causal;
  int64_t window;
  cpu::AttentionDropout drop;
  int br, bc; // tile sizes (rows of queries, keys)
};

/// The masked scaled score of (b, h, i, j) from its dot product.
template <typename T>
__device__ inline T maskedScore(const AttnParams<T> &p, int64_t b, int64_t h,
                                int64_t i, int64_t j, T dot) {
  if (i >= p.tq || j >= p.tk || (p.causal && j > i) ||
      (p.window > 0 && j <= i - p.window))
    return negInf<T>();
  T s = p.scale * dot;
  if (!p.hasMask)
    return s;
  int64_t off = b * p.maskStride[0] + h * p.maskStride[1] +
                i * p.maskStride[2] + j * p.maskStride[3];
  if (p.boolMask)
    return static_cast<const uint8_t *>(p.mask)[off] ? s : negInf<T>();
  return s + T(loadAsDouble(p.mask, p.maskType, off));
}

template <typename T>
__device__ inline T dropFactor(const AttnParams<T> &p, int64_t b, int64_t h,
                               int64_t i, int64_t j) {
  if (!p.drop.active)
    return T(1);
  return cpu::attentionDropoutKeep(p.drop, b, h, i, j, p.heads, p.tq, p.tk)
             ? p.keepScale
             : T(0);
}

/// Keys [lo, hi) that causal and window leave to queries [i0, i1).
template <typename T>
__device__ inline void keyRange(const AttnParams<T> &p, int64_t i0, int64_t i1,
                                int64_t &lo, int64_t &hi) {
  lo = 0, hi = p.tk;
  if (p.causal)
    hi = hi < i1 ? hi : i1;
  if (p.window > 0)
    lo = i0 - p.window + 1 > 0 ? i0 - p.window + 1 : 0;
}

/// Queries [lo, hi) that causal and window leave to keys [j0, j1).
template <typename T>
__device__ inline void queryRange(const AttnParams<T> &p, int64_t j0,
                                  int64_t j1, int64_t &lo, int64_t &hi) {
  lo = 0, hi = p.tq;
  if (p.causal)
    lo = j0 < p.tq ? j0 : p.tq;
  if (p.window > 0) {
    int64_t last = j1 - 1 + p.window; // i < j + window
    hi = hi < last ? hi : last;
  }
}

template <typename T> __device__ inline T warpMax(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    T other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}

template <typename T> __device__ inline T warpSum(T v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// rows x cols of `src` (row stride `ld` elements in global memory, rows
/// from `row0`, at most `valid` of them) into shared `dst` (row stride
/// `lds`), zero beyond `valid`.
template <typename E>
__device__ inline void loadTile(typename E::T *dst, int lds, const void *src,
                                int64_t base, int64_t row0, int64_t valid,
                                int rows, int64_t cols) {
  using T = typename E::T;
  for (int64_t idx = threadIdx.x; idx < int64_t(rows) * cols;
       idx += blockDim.x) {
    int64_t r = idx / cols, c = idx % cols;
    dst[r * lds + c] =
        r < valid ? E::load(src, base + (row0 + r) * cols + c) : T(0);
  }
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// Shared-memory elements of attnForward.
inline int64_t forwardSmem(int br, int bc, int64_t d, int64_t dv) {
  return br * d + bc * (d + 1) + bc * dv + br * (bc + 1) + br * dv + 3 * br;
}

template <typename E> __global__ void attnForward(AttnParams<typename E::T> p) {
  using T = typename E::T;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  T *Qs = reinterpret_cast<T *>(smemRaw);
  T *Ks = Qs + p.br * p.d, *Vs = Ks + p.bc * (p.d + 1);
  T *Ss = Vs + p.bc * p.dv, *Os = Ss + p.br * (p.bc + 1);
  T *m = Os + p.br * p.dv, *l = m + p.br, *alpha = l + p.br;
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int64_t g = h / p.group, i0 = int64_t(blockIdx.y) * p.br;
  const int64_t i1 = i0 + p.br < p.tq ? i0 + p.br : p.tq;
  const int lds = p.bc + 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  loadTile<E>(Qs, int(p.d), p.q, bh * p.tq * p.d, i0, i1 - i0, p.br, p.d);
  for (int64_t idx = threadIdx.x; idx < int64_t(p.br) * p.dv; idx += blockDim.x)
    Os[idx] = T(0);
  for (int r = threadIdx.x; r < p.br; r += blockDim.x)
    m[r] = negInf<T>(), l[r] = T(0);
  int64_t lo, hi;
  keyRange(p, i0, i1, lo, hi);
  const int64_t kvBase = (b * p.kvHeads + g) * p.tk;
  for (int64_t j0 = lo; j0 < hi; j0 += p.bc) {
    int64_t valid = hi - j0 < p.bc ? hi - j0 : p.bc;
    __syncthreads();
    loadTile<E>(Ks, int(p.d + 1), p.k, kvBase * p.d, j0, valid, p.bc, p.d);
    loadTile<E>(Vs, int(p.dv), p.v, kvBase * p.dv, j0, valid, p.bc, p.dv);
    __syncthreads();
    // 1. Scores.
    for (int idx = threadIdx.x; idx < p.br * p.bc; idx += blockDim.x) {
      int r = idx / p.bc, c = idx % p.bc;
      T acc = T(0);
      for (int64_t e = 0; e < p.d; ++e)
        acc += Qs[r * p.d + e] * Ks[c * (p.d + 1) + e];
      Ss[r * lds + c] =
          c < valid ? maskedScore(p, b, h, i0 + r, j0 + c, acc) : negInf<T>();
    }
    __syncthreads();
    // 2. Running max and sum per row; probabilities (after dropout) in Ss.
    for (int r = warp; r < p.br; r += warps) {
      T mx = negInf<T>();
      for (int c = lane; c < p.bc; c += 32)
        mx = Ss[r * lds + c] > mx ? Ss[r * lds + c] : mx;
      T mNew = warpMax(mx), mOld = m[r];
      mNew = mOld > mNew ? mOld : mNew;
      T sum = T(0);
      for (int c = lane; c < p.bc; c += 32) {
        T e = mNew == negInf<T>() ? T(0) : exp(Ss[r * lds + c] - mNew);
        sum += e;
        Ss[r * lds + c] = e * dropFactor(p, b, h, i0 + r, j0 + c);
      }
      sum = warpSum(sum);
      __syncwarp();
      if (lane == 0) {
        T a = mNew == negInf<T>() ? T(1) : exp(mOld - mNew);
        alpha[r] = a, l[r] = l[r] * a + sum, m[r] = mNew;
      }
    }
    __syncthreads();
    // 3. Os = Os * alpha + P V.
    for (int64_t idx = threadIdx.x; idx < int64_t(p.br) * p.dv;
         idx += blockDim.x) {
      int r = int(idx / p.dv);
      int64_t c = idx % p.dv;
      T acc = Os[idx] * alpha[r];
      for (int j = 0; j < valid; ++j)
        acc += Ss[r * lds + j] * Vs[j * p.dv + c];
      Os[idx] = acc;
    }
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < int64_t(i1 - i0) * p.dv;
       idx += blockDim.x) {
    int r = int(idx / p.dv);
    T v = l[r] == T(0) ? T(0) : Os[idx] / l[r];
    E::store(p.outW, (bh * p.tq + i0) * p.dv + idx, v);
  }
  if (p.lse)
    for (int r = threadIdx.x; r < i1 - i0; r += blockDim.x)
      p.lse[bh * p.tq + i0 + r] = l[r] == T(0) ? negInf<T>() : m[r] + log(l[r]);
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// |lse| beyond which the row's max and sum are recomputed (as the CPU).
constexpr double kExactLseBound = 65536;

/// A warp per query row (b, h, i): delta, shift, inv.
template <typename E> __global__ void attnRowPrep(AttnParams<typename E::T> p) {
  using T = typename E::T;
  const int lane = threadIdx.x % 32;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= p.batch * p.heads * p.tq)
    return;
  const int64_t i = row % p.tq, bh = row / p.tq, b = bh / p.heads;
  const int64_t h = bh % p.heads, g = h / p.group;
  T acc = T(0);
  for (int64_t c = lane; c < p.dv; c += 32)
    acc += E::load(p.gradOut, row * p.dv + c) * E::load(p.out, row * p.dv + c);
  acc = warpSum(acc);
  T lse = p.lse[row], shift = lse, inv = T(1);
  if (fabs(double(lse)) > kExactLseBound && !isinf(lse)) {
    int64_t lo, hi;
    keyRange(p, i, i + 1, lo, hi);
    const int64_t kv = (b * p.kvHeads + g) * p.tk;
    T mx = negInf<T>(), sum = T(0);
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t j = lo + lane; j < hi; j += 32) {
        T dot = T(0);
        for (int64_t e = 0; e < p.d; ++e)
          dot += E::load(p.q, row * p.d + e) * E::load(p.k, (kv + j) * p.d + e);
        T s = maskedScore(p, b, h, i, j, dot);
        if (pass == 0)
          mx = s > mx ? s : mx;
        else if (mx != negInf<T>())
          sum += exp(s - mx);
      }
      if (pass == 0)
        mx = warpMax(mx);
    }
    sum = warpSum(sum);
    shift = mx, inv = sum > T(0) ? T(1) / sum : T(0);
  }
  if (lane == 0)
    p.delta[row] = acc, p.shift[row] = shift, p.inv[row] = inv;
}

/// Shared-memory elements of attnBackwardQ.
inline int64_t backwardQSmem(int br, int bc, int64_t d, int64_t dv) {
  return br * d + br * dv + bc * (d + 1) + bc * (dv + 1) + br * (bc + 1) +
         br * d + 3 * br;
}

template <typename E>
__global__ void attnBackwardQ(AttnParams<typename E::T> p) {
  using T = typename E::T;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  T *Qs = reinterpret_cast<T *>(smemRaw);
  T *dOs = Qs + p.br * p.d, *Ks = dOs + p.br * p.dv;
  T *Vs = Ks + p.bc * (p.d + 1), *dSs = Vs + p.bc * (p.dv + 1);
  T *dQs = dSs + p.br * (p.bc + 1), *rowD = dQs + p.br * p.d;
  T *rowShift = rowD + p.br, *rowInv = rowShift + p.br;
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int64_t g = h / p.group, i0 = int64_t(blockIdx.y) * p.br;
  const int64_t i1 = i0 + p.br < p.tq ? i0 + p.br : p.tq;
  const int lds = p.bc + 1;
  loadTile<E>(Qs, int(p.d), p.q, bh * p.tq * p.d, i0, i1 - i0, p.br, p.d);
  loadTile<E>(dOs, int(p.dv), p.gradOut, bh * p.tq * p.dv, i0, i1 - i0, p.br,
              p.dv);
  for (int64_t idx = threadIdx.x; idx < int64_t(p.br) * p.d; idx += blockDim.x)
    dQs[idx] = T(0);
  for (int r = threadIdx.x; r < p.br; r += blockDim.x) {
    bool in = i0 + r < p.tq;
    int64_t row = bh * p.tq + i0 + r;
    rowD[r] = in ? p.delta[row] : T(0);
    rowShift[r] = in ? p.shift[row] : negInf<T>();
    rowInv[r] = in ? p.inv[row] : T(0);
  }
  int64_t lo, hi;
  keyRange(p, i0, i1, lo, hi);
  const int64_t kvBase = (b * p.kvHeads + g) * p.tk;
  for (int64_t j0 = lo; j0 < hi; j0 += p.bc) {
    int64_t valid = hi - j0 < p.bc ? hi - j0 : p.bc;
    __syncthreads();
    loadTile<E>(Ks, int(p.d + 1), p.k, kvBase * p.d, j0, valid, p.bc, p.d);
    loadTile<E>(Vs, int(p.dv + 1), p.v, kvBase * p.dv, j0, valid, p.bc, p.dv);
    __syncthreads();
    // 1. dS = P * (z * dO.V - D) * scale per (r, c).
    for (int idx = threadIdx.x; idx < p.br * p.bc; idx += blockDim.x) {
      int r = idx / p.bc, c = idx % p.bc;
      T ds = T(0);
      if (c < valid && rowShift[r] != negInf<T>()) {
        T s = T(0), dp = T(0);
        for (int64_t e = 0; e < p.d; ++e)
          s += Qs[r * p.d + e] * Ks[c * (p.d + 1) + e];
        s = maskedScore(p, b, h, i0 + r, j0 + c, s);
        T prob = exp(s - rowShift[r]) * rowInv[r];
        if (prob != T(0)) {
          for (int64_t e = 0; e < p.dv; ++e)
            dp += dOs[r * p.dv + e] * Vs[c * (p.dv + 1) + e];
          dp *= dropFactor(p, b, h, i0 + r, j0 + c);
          ds = prob * (dp - rowD[r]) * p.scale;
        }
      }
      dSs[r * lds + c] = ds;
    }
    __syncthreads();
    // 2. dQ += dS K.
    for (int64_t idx = threadIdx.x; idx < int64_t(p.br) * p.d;
         idx += blockDim.x) {
      int r = int(idx / p.d);
      int64_t e = idx % p.d;
      T acc = dQs[idx];
      for (int c = 0; c < valid; ++c)
        acc += dSs[r * lds + c] * Ks[c * (p.d + 1) + e];
      dQs[idx] = acc;
    }
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < int64_t(i1 - i0) * p.d;
       idx += blockDim.x)
    E::store(p.gradQ, (bh * p.tq + i0) * p.d + idx, dQs[idx]);
}

/// Shared-memory elements of attnBackwardKV.
inline int64_t backwardKVSmem(int br, int bc, int64_t d, int64_t dv) {
  return bc * d + bc * dv + br * (d + 1) + br * (dv + 1) + 2 * br * (bc + 1) +
         bc * d + bc * dv + 3 * br;
}

template <typename E>
__global__ void attnBackwardKV(AttnParams<typename E::T> p) {
  using T = typename E::T;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  T *Ks = reinterpret_cast<T *>(smemRaw);
  T *Vs = Ks + p.bc * p.d, *Qs = Vs + p.bc * p.dv;
  T *dOs = Qs + p.br * (p.d + 1), *Ps = dOs + p.br * (p.dv + 1);
  T *dSs = Ps + p.br * (p.bc + 1), *dKs = dSs + p.br * (p.bc + 1);
  T *dVs = dKs + p.bc * p.d, *rowD = dVs + p.bc * p.dv;
  T *rowShift = rowD + p.br, *rowInv = rowShift + p.br;
  const int64_t bg = blockIdx.x, b = bg / p.kvHeads, g = bg % p.kvHeads;
  const int64_t j0 = int64_t(blockIdx.y) * p.bc;
  const int64_t j1 = j0 + p.bc < p.tk ? j0 + p.bc : p.tk;
  const int64_t kvBase = bg * p.tk, valid = j1 - j0;
  const int lds = p.bc + 1;
  loadTile<E>(Ks, int(p.d), p.k, kvBase * p.d, j0, valid, p.bc, p.d);
  loadTile<E>(Vs, int(p.dv), p.v, kvBase * p.dv, j0, valid, p.bc, p.dv);
  for (int64_t idx = threadIdx.x; idx < int64_t(p.bc) * p.d; idx += blockDim.x)
    dKs[idx] = T(0);
  for (int64_t idx = threadIdx.x; idx < int64_t(p.bc) * p.dv; idx += blockDim.x)
    dVs[idx] = T(0);
  int64_t lo, hi;
  queryRange(p, j0, j1, lo, hi);
  for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
    const int64_t bh = b * p.heads + h;
    for (int64_t i0 = lo; i0 < hi; i0 += p.br) {
      int64_t rows = hi - i0 < p.br ? hi - i0 : p.br;
      __syncthreads();
      loadTile<E>(Qs, int(p.d + 1), p.q, bh * p.tq * p.d, i0, rows, p.br, p.d);
      loadTile<E>(dOs, int(p.dv + 1), p.gradOut, bh * p.tq * p.dv, i0, rows,
                  p.br, p.dv);
      for (int r = threadIdx.x; r < p.br; r += blockDim.x) {
        int64_t row = bh * p.tq + i0 + r;
        rowD[r] = r < rows ? p.delta[row] : T(0);
        rowShift[r] = r < rows ? p.shift[row] : negInf<T>();
        rowInv[r] = r < rows ? p.inv[row] : T(0);
      }
      __syncthreads();
      // 1. P * z and dS per (r, c); consecutive threads take consecutive r.
      for (int idx = threadIdx.x; idx < p.br * p.bc; idx += blockDim.x) {
        int r = idx % p.br, c = idx / p.br;
        T pz = T(0), ds = T(0);
        if (c < valid && rowShift[r] != negInf<T>()) {
          T s = T(0);
          for (int64_t e = 0; e < p.d; ++e)
            s += Qs[r * (p.d + 1) + e] * Ks[c * p.d + e];
          s = maskedScore(p, b, h, i0 + r, j0 + c, s);
          T prob = exp(s - rowShift[r]) * rowInv[r];
          if (prob != T(0)) {
            T dp = T(0), z = dropFactor(p, b, h, i0 + r, j0 + c);
            for (int64_t e = 0; e < p.dv; ++e)
              dp += dOs[r * (p.dv + 1) + e] * Vs[c * p.dv + e];
            pz = prob * z;
            ds = prob * (dp * z - rowD[r]) * p.scale;
          }
        }
        Ps[r * lds + c] = pz, dSs[r * lds + c] = ds;
      }
      __syncthreads();
      // 2. dV += (P z)^T dO, dK += dS^T Q, rows in order.
      for (int64_t idx = threadIdx.x; idx < int64_t(p.bc) * p.dv;
           idx += blockDim.x) {
        int c = int(idx / p.dv);
        int64_t e = idx % p.dv;
        T acc = dVs[idx];
        for (int r = 0; r < rows; ++r)
          acc += Ps[r * lds + c] * dOs[r * (p.dv + 1) + e];
        dVs[idx] = acc;
      }
      for (int64_t idx = threadIdx.x; idx < int64_t(p.bc) * p.d;
           idx += blockDim.x) {
        int c = int(idx / p.d);
        int64_t e = idx % p.d;
        T acc = dKs[idx];
        for (int r = 0; r < rows; ++r)
          acc += dSs[r * lds + c] * Qs[r * (p.d + 1) + e];
        dKs[idx] = acc;
      }
    }
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < valid * p.d; idx += blockDim.x)
    E::store(p.gradK, (kvBase + j0) * p.d + idx, dKs[idx]);
  for (int64_t idx = threadIdx.x; idx < valid * p.dv; idx += blockDim.x)
    E::store(p.gradV, (kvBase + j0) * p.dv + idx, dVs[idx]);
}

} // namespace dsc::cuda::detail

#endif // DSC_RUNTIME_CUDA_ATTENTION_FLASH_CUH
