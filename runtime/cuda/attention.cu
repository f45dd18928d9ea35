//===- attention.cu - CUDA fused attention: cuDNN or dsc's own kernel -----===//
//
// cuda::attention and attentionBackward. The host checks are the CPU
// kernel's (cpu/checks_math.h: the same messages). Then:
//
//  1. bf16/f16 without dropout go to cuDNN's fused flash attention
//     (attention_cudnn.cu) when it supports the request: causal, an
//     additive float bias, grouped-query heads, a causal sliding window.
//  2. Everything else, and whatever cuDNN declines, runs dsc's own tiled
//     kernels (attention_flash.cuh): f32 and f64 in their type, f16/bf16
//     storage in f32, dropout drawn with cpu::attentionDropoutKeep so the
//     mask is the CPU's bit for bit. Float compute (f32, f16/bf16 storage)
//     with head dims up to 64 takes the register-tiled kernels of
//     attention_fast.cuh; f64 and larger head dims the generic ones.
//
// Both paths write the same lse (natural-log log-sum-exp of the masked
// scaled scores, -inf for an empty row), so the backward of either may
// follow the forward of the other.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_math.h"
#include "cuda/attention_cudnn.h"
#include "cuda/attention_fast.cuh"
#include "cuda/attention_flash.cuh"
#include "cuda/kernels.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dsc::cuda {

using namespace detail;
using cpu::detail::AttentionShape;
using cpu::detail::checkAttention;
using cpu::detail::checkAttentionBackward;

namespace {

constexpr int kAttnThreads = 256;
static_assert(kAttnThreads == kFastThreads);

int maxSharedBytes() {
  int device = 0, bytes = 48 << 10;
  if (cudaGetDevice(&device) == cudaSuccess)
    cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                           device);
  return bytes;
}

/// The largest square tile whose shared memory fits; 0 when none does.
template <typename T, typename SmemFn>
int pickTile(SmemFn smem, int64_t d, int64_t dv) {
  const int64_t limit = maxSharedBytes();
  for (int t : {64, 32, 16, 8})
    if (smem(t, t, d, dv) * int64_t(sizeof(T)) <= limit)
      return t;
  return 0;
}

template <typename T>
AttnParams<T> makeParams(const AttentionShape &s, const Tensor &q,
                         const Tensor &k, const Tensor &v, const Tensor &mask,
                         const AttentionAttrs &attrs) {
  AttnParams<T> p{};
  p.q = q.data, p.k = k.data, p.v = v.data;
  p.mask = mask.data, p.maskType = mask.dtype;
  p.hasMask = s.hasMask, p.boolMask = s.boolMask;
  std::copy(s.maskStride, s.maskStride + 4, p.maskStride);
  p.batch = s.batch, p.heads = s.heads, p.kvHeads = s.kvHeads;
  p.tq = s.queries, p.tk = s.keys, p.d = s.headDim, p.dv = s.valueDim;
  p.group = s.group();
  p.scale = T(attrs.scale);
  p.keepScale = attrs.dropout < 1 ? T(1 / (1 - attrs.dropout)) : T(0);
  p.causal = attrs.causal, p.window = attrs.window;
  p.drop = cpu::attentionDropoutOf(attrs.seed, attrs.dropout);
  return p;
}

/// Launches `kernel` with `bytes` of dynamic shared memory.
template <typename T, typename Kernel>
Status launchBytes(Kernel kernel, dim3 grid, int64_t bytes,
                   const AttnParams<T> &p, const char *name) {
  DSC_CUDA_CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<grid, kAttnThreads, size_t(bytes), stream()>>>(p);
  DSC_CUDA_LAUNCHED(name);
  return Status();
}

/// Launches `kernel` with `smemElems` elements of dynamic shared memory.
template <typename T, typename Kernel>
Status launch(Kernel kernel, dim3 grid, int64_t smemElems,
              const AttnParams<T> &p, const char *name) {
  return launchBytes(kernel, grid, smemElems * int64_t(sizeof(T)), p, name);
}

/// Whether the register-tiled kernels (attention_fast.cuh) take `p`.
template <typename T> bool useFast(const AttnParams<T> &p) {
  return std::is_same_v<T, float> && fastAttentionFits(p.d, p.dv) &&
         backwardKVFastSmemBytes() <= maxSharedBytes();
}

Status gridFits(const Call &call, int64_t x, int64_t y) {
  if (x > INT32_MAX || y > 65535)
    return call.fail("too many heads or tiles for one launch",
                     StatusCode::Unimplemented);
  return Status();
}

template <typename E>
Status ownForward(const Call &call, AttnParams<typename E::T> p) {
  using T = typename E::T;
  if constexpr (std::is_same_v<T, float>)
    if (useFast(p)) {
      int64_t tiles = (p.tq + kFastTile - 1) / kFastTile;
      if (Status st = gridFits(call, p.batch * p.heads, tiles); !st.ok())
        return st;
      return launchBytes(attnForwardFast<E>,
                         dim3(unsigned(p.batch * p.heads), unsigned(tiles)),
                         forwardFastSmemBytes(), p, "attnForwardFast");
    }
  int tile = pickTile<T>(forwardSmem, p.d, p.dv);
  if (!tile)
    return call.fail("head dims too large for the attention kernel",
                     StatusCode::Unimplemented);
  p.br = p.bc = tile;
  int64_t tiles = (p.tq + tile - 1) / tile;
  if (Status st = gridFits(call, p.batch * p.heads, tiles); !st.ok())
    return st;
  dim3 grid(unsigned(p.batch * p.heads), unsigned(tiles));
  return launch(attnForward<E>, grid, forwardSmem(tile, tile, p.d, p.dv), p,
                "attnForward");
}

/// The per-row scratch of the backward: delta, shift, inv.
template <typename T> Status rowScratch(AttnParams<T> &p) {
  int64_t rows = p.batch * p.heads * p.tq;
  void *buf = nullptr;
  if (Status st = scratch(size_t(3 * rows + 1) * sizeof(T), &buf,
                          "attention backward rows");
      !st.ok())
    return st;
  p.delta = static_cast<T *>(buf);
  p.shift = p.delta + rows, p.inv = p.shift + rows;
  return Status();
}

template <typename E>
Status ownBackward(const Call &call, AttnParams<typename E::T> p) {
  using T = typename E::T;
  int tileQ = pickTile<T>(backwardQSmem, p.d, p.dv);
  int tileKV = pickTile<T>(backwardKVSmem, p.d, p.dv);
  if (!tileQ || !tileKV)
    return call.fail("head dims too large for the attention kernel",
                     StatusCode::Unimplemented);
  if (Status st = rowScratch(p); !st.ok())
    return st;
  int64_t rows = p.batch * p.heads * p.tq;
  attnRowPrep<E><<<blocksFor(rows * 32), kThreads, 0, stream()>>>(p);
  DSC_CUDA_LAUNCHED("attnRowPrep");
  if constexpr (std::is_same_v<T, float>)
    if (useFast(p)) {
      int64_t qTiles = (p.tq + kFastTile - 1) / kFastTile;
      int64_t kTiles = (p.tk + kFastTile - 1) / kFastTile;
      if (Status st =
              gridFits(call, p.batch * p.heads, std::max(qTiles, kTiles));
          !st.ok())
        return st;
      if (Status st = launchBytes(
              attnBackwardQFast<E>,
              dim3(unsigned(p.batch * p.heads), unsigned(qTiles)),
              backwardQFastSmemBytes(), p, "attnBackwardQFast");
          !st.ok())
        return st;
      return launchBytes(attnBackwardKVFast<E>,
                         dim3(unsigned(p.batch * p.kvHeads), unsigned(kTiles)),
                         backwardKVFastSmemBytes(), p, "attnBackwardKVFast");
    }
  p.br = p.bc = tileQ;
  int64_t qTiles = (p.tq + tileQ - 1) / tileQ;
  int64_t kTiles = (p.tk + tileKV - 1) / tileKV;
  if (Status st = gridFits(call, p.batch * p.heads, std::max(qTiles, kTiles));
      !st.ok())
    return st;
  if (Status st = launch(
          attnBackwardQ<E>, dim3(unsigned(p.batch * p.heads), unsigned(qTiles)),
          backwardQSmem(tileQ, tileQ, p.d, p.dv), p, "attnBackwardQ");
      !st.ok())
    return st;
  p.br = p.bc = tileKV;
  return launch(attnBackwardKV<E>,
                dim3(unsigned(p.batch * p.kvHeads), unsigned(kTiles)),
                backwardKVSmem(tileKV, tileKV, p.d, p.dv), p, "attnBackwardKV");
}

/// Calls fn(Elem{}) with the storage type of `dtype`.
template <typename Fn> Status dispatchElem(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::F64:
    return fn(F64Elem());
  case DType::BF16:
    return fn(Bf16Elem());
  case DType::F16:
    return fn(F16Elem());
  default:
    return fn(F32Elem());
  }
}

/// Zeroes the gradients of k and v when there is no query to give them any
/// (the kernels are not launched for empty grids).
Status zeroResults(std::initializer_list<const Tensor *> ts) {
  for (const Tensor *t : ts)
    if (t->present() && t->numel() > 0)
      DSC_CUDA_CHECK(cudaMemsetAsync(t->data, 0, t->nbytes(), stream()));
  return Status();
}

Status ownAttentionForward(const Call &call, const AttentionShape &s,
                           const Tensor &q, const Tensor &k, const Tensor &v,
                           const Tensor &mask, const AttentionAttrs &attrs,
                           const Tensor &out, const Tensor &lse) {
  return dispatchElem(q.dtype, [&](auto elem) {
    using E = decltype(elem);
    auto p = makeParams<typename E::T>(s, q, k, v, mask, attrs);
    p.outW = out.data;
    p.lse = static_cast<typename E::T *>(lse.data);
    return ownForward<E>(call, p);
  });
}

Status ownAttentionBackward(const Call &call, const AttentionShape &s,
                            const Tensor &q, const Tensor &k, const Tensor &v,
                            const Tensor &mask, const Tensor &out,
                            const Tensor &lse, const Tensor &gradOut,
                            const AttentionAttrs &attrs, const Tensor &gradQ,
                            const Tensor &gradK, const Tensor &gradV) {
  return dispatchElem(q.dtype, [&](auto elem) {
    using E = decltype(elem);
    auto p = makeParams<typename E::T>(s, q, k, v, mask, attrs);
    p.out = out.data, p.gradOut = gradOut.data;
    p.lse = static_cast<typename E::T *>(lse.data);
    p.gradQ = gradQ.data, p.gradK = gradK.data, p.gradV = gradV.data;
    return ownBackward<E>(call, p);
  });
}

} // namespace

//===----------------------------------------------------------------------===//
// The cuDNN path's fix-ups (attention_cudnn.h)
//===----------------------------------------------------------------------===//

namespace {

/// The lse row of out's element row `r` (its index / dv): the same, or for
/// a seq_major out ([B, T, H, .] rows) the [B, H, T] row it belongs to.
__device__ int64_t lseRowOf(int64_t r, int64_t heads, int64_t queries,
                            bool seqMajor) {
  if (!seqMajor)
    return r;
  int64_t h = r % heads, t = r / heads % queries, b = r / (heads * queries);
  return (b * heads + h) * queries + t;
}

template <typename E>
__global__ void fixEmptyRowsKernel(void *out, float *lse, int64_t rows,
                                   int64_t heads, int64_t queries, int64_t dv,
                                   bool seqMajor) {
  DSC_GRID_STRIDE(i, rows * dv) {
    float l = lse[lseRowOf(i / dv, heads, queries, seqMajor)];
    if (!(l > negInf<float>())) // -inf or NaN: no key left
      E::store(out, i, 0.0f);
  }
}

__global__ void fixEmptyLseKernel(float *lse, int64_t rows) {
  DSC_GRID_STRIDE(i, rows) {
    if (!(lse[i] > negInf<float>()))
      lse[i] = negInf<float>();
  }
}

__global__ void statsForCudnnKernel(const float *lse, float *stats,
                                    int64_t rows) {
  DSC_GRID_STRIDE(i, rows) {
    float l = lse[i];
    stats[i] = l > negInf<float>() ? l : __int_as_float(0x7f800000);
  }
}

} // namespace

Status detail::attentionFixEmptyRows(void *out, DType dtype, float *lse,
                                     int64_t rows, int64_t heads,
                                     int64_t queries, int64_t dv,
                                     bool seqMajor) {
  if (rows * dv > 0) {
    if (dtype == DType::BF16)
      fixEmptyRowsKernel<Bf16Elem>
          <<<blocksFor(rows * dv), kThreads, 0, stream()>>>(
              out, lse, rows, heads, queries, dv, seqMajor);
    else
      fixEmptyRowsKernel<F16Elem>
          <<<blocksFor(rows * dv), kThreads, 0, stream()>>>(
              out, lse, rows, heads, queries, dv, seqMajor);
    DSC_CUDA_LAUNCHED("fixEmptyRowsKernel");
  }
  if (rows > 0) {
    fixEmptyLseKernel<<<blocksFor(rows), kThreads, 0, stream()>>>(lse, rows);
    DSC_CUDA_LAUNCHED("fixEmptyLseKernel");
  }
  return Status();
}

Status detail::attentionStatsForCudnn(const float *lse, float *stats,
                                      int64_t rows) {
  if (rows == 0)
    return Status();
  statsForCudnnKernel<<<blocksFor(rows), kThreads, 0, stream()>>>(lse, stats,
                                                                  rows);
  DSC_CUDA_LAUNCHED("statsForCudnnKernel");
  return Status();
}

//===----------------------------------------------------------------------===//
// seq_major for the own kernels
//===----------------------------------------------------------------------===//

namespace {

/// seq_major operands for the own kernels, which read [B, H, T, D] only:
/// heads-first copies in stream-ordered memory (cudaMallocAsync, which a
/// captured graph records too), the results transposed back, the copies
/// freed on the stream. dsc-canonicalize folds transposes into an attention
/// only where cuDNN takes the layout, so this runs only where the loaded
/// cuDNN declines a graph.
class HeadsFirstCopies {
public:
  HeadsFirstCopies() = default;
  HeadsFirstCopies(const HeadsFirstCopies &) = delete;
  HeadsFirstCopies &operator=(const HeadsFirstCopies &) = delete;
  ~HeadsFirstCopies() {
    for (void *p : buffers_)
      (void)cudaFreeAsync(p, stream());
  }
  Status in(const Tensor &t, Tensor &copy) {
    if (Status st = make(t, copy); !st.ok() || t.nbytes() == 0)
      return st;
    return cuda::transpose(t, {0, 2, 1, 3}, copy);
  }
  Status out(const Tensor &t, Tensor &copy) {
    if (Status st = make(t, copy); !st.ok())
      return st;
    results_.push_back({copy, t});
    return Status();
  }
  Status finish() {
    for (auto &[copy, result] : results_)
      if (result.nbytes() > 0)
        if (Status st = cuda::transpose(copy, {0, 2, 1, 3}, result); !st.ok())
          return st;
    return Status();
  }

private:
  Status make(const Tensor &t, Tensor &copy) {
    copy = cpu::detail::swapTokensAndHeads(t);
    if (t.nbytes() == 0)
      return Status(); // nothing to copy (the kernels read no element)
    DSC_CUDA_CHECK(cudaMallocAsync(&copy.data, t.nbytes(), stream()));
    buffers_.push_back(copy.data);
    return Status();
  }
  std::vector<void *> buffers_;
  std::vector<std::pair<Tensor, Tensor>> results_;
};

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                 const Tensor &mask, const AttentionAttrs &attrs,
                 const Tensor &out, const Tensor &lse) {
  Call call("attention");
  AttentionShape s;
  if (Status st = checkAttention(call, q, k, v, mask, attrs, out, lse, s);
      !st.ok())
    return st;
  if (s.batch * s.heads * s.queries == 0)
    return Status();
  if (std::optional<Status> st =
          cudnnAttentionForward(s, q, k, v, mask, attrs, out, lse))
    return *st;
  if (attrs.seqMajor) {
    HeadsFirstCopies c;
    Tensor hq, hk, hv, ho;
    for (auto [from, to] : {std::pair{&q, &hq}, {&k, &hk}, {&v, &hv}})
      if (Status st = c.in(*from, *to); !st.ok())
        return st;
    if (Status st = c.out(out, ho); !st.ok())
      return st;
    if (Status st =
            ownAttentionForward(call, s, hq, hk, hv, mask,
                                cpu::detail::headsFirstAttrs(attrs), ho, lse);
        !st.ok())
      return st;
    return c.finish();
  }
  return ownAttentionForward(call, s, q, k, v, mask, attrs, out, lse);
}

Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &mask, const Tensor &out,
                         const Tensor &lse, const Tensor &gradOut,
                         const AttentionAttrs &attrs, const Tensor &gradQ,
                         const Tensor &gradK, const Tensor &gradV) {
  Call call("attention_backward");
  AttentionShape s;
  if (Status st = checkAttentionBackward(call, q, k, v, mask, out, lse, gradOut,
                                         attrs, gradQ, gradK, gradV, s);
      !st.ok())
    return st;
  if (s.batch * s.heads * s.queries == 0 || s.keys == 0)
    return zeroResults({&gradQ, &gradK, &gradV});
  if (std::optional<Status> st = cudnnAttentionBackward(
          s, q, k, v, mask, out, lse, gradOut, attrs, gradQ, gradK, gradV))
    return *st;
  if (attrs.seqMajor) {
    HeadsFirstCopies c;
    Tensor hq, hk, hv, ho, hdo, dq, dk, dv;
    for (auto [from, to] : {std::pair{&q, &hq},
                            {&k, &hk},
                            {&v, &hv},
                            {&out, &ho},
                            {&gradOut, &hdo}})
      if (Status st = c.in(*from, *to); !st.ok())
        return st;
    for (auto [from, to] :
         {std::pair{&gradQ, &dq}, {&gradK, &dk}, {&gradV, &dv}})
      if (Status st = c.out(*from, *to); !st.ok())
        return st;
    if (Status st = ownAttentionBackward(
            call, s, hq, hk, hv, mask, ho, lse, hdo,
            cpu::detail::headsFirstAttrs(attrs), dq, dk, dv);
        !st.ok())
      return st;
    return c.finish();
  }
  return ownAttentionBackward(call, s, q, k, v, mask, out, lse, gradOut, attrs,
                              gradQ, gradK, gradV);
}

} // namespace dsc::cuda
