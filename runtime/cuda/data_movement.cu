//===- data_movement.cu - CUDA kernels: reshape, transpose, slice, ... ----===//
//
// Dtype-agnostic: elements move as unsigned words of their size, or of a
// wider size (up to 16 bytes) where a contiguous run and the alignment allow
// it; only the scatter-add of gatherBackward needs the element type. Index
// math is 32-bit where every offset fits, 64-bit otherwise.
//
// Gather indices: the CPU reference fails with OutOfRange on an index
// outside [-dim, dim). Here a small kernel checks every index (recording the
// first bad position with an integer atomicMin, deterministic in value) and
// the call waits for it (one 8-byte copy and a stream synchronization per
// gather and gatherBackward), so a bad index is reported by the call, with
// the CPU's message, and no kernel reads outside `data`. The gather kernel
// still guards each index and writes zeros for one out of range, so memory
// stays safe even if the indices were changed behind the stream's back.
//
// gatherBackward is a deterministic scatter-add without float atomics: the
// (wrapped index, position) pairs are sorted by index with
// cub::DeviceRadixSort (stable, so positions of one index stay in increasing
// order), each index's run [begin, end) is recorded, and every gradData
// element sums its gradOut elements in position order from zero, exactly as
// the CPU reference does (same order, same element-type arithmetic, so the
// results are bitwise equal).
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_layout.h"
#include "cuda/common.cuh"
#include "cuda/graph.h"
#include "cuda/kernels.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

namespace dsc::cuda {

using namespace detail;

namespace {

using cpu::detail::checkConcat;
using cpu::detail::checkExpand;
using cpu::detail::checkGather;
using cpu::detail::checkGatherBackward;
using cpu::detail::checkPad;
using cpu::detail::checkReshape;
using cpu::detail::checkSlice;
using cpu::detail::checkSliceBackward;
using cpu::detail::checkSplit;
using cpu::detail::checkTranspose;
using cpu::detail::GatherLayout;
using cpu::detail::SliceLayout;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// The unsigned word that moves N bytes.
template <int N> struct WordOf;
template <> struct WordOf<1> { using type = uint8_t; };
template <> struct WordOf<2> { using type = uint16_t; };
template <> struct WordOf<4> { using type = uint32_t; };
template <> struct WordOf<8> { using type = uint64_t; };
template <> struct WordOf<16> { using type = uint4; };
template <int N> using Word = typename WordOf<N>::type;

/// Dims with the index type of a kernel (int32_t where everything fits).
template <typename I> struct Layout {
  int rank = 0;
  I size[kMaxRank] = {};
  I stride[kMaxRank] = {};
};

template <typename I> Layout<I> narrow(const Dims &d) {
  Layout<I> l;
  l.rank = d.rank;
  for (int k = 0; k < d.rank; ++k) {
    l.size[k] = static_cast<I>(d.size[k]);
    l.stride[k] = static_cast<I>(d.stride[k]);
  }
  return l;
}

/// The offset of row-major position `linear` of `l.size` under `l.stride`.
/// Unrolled over kMaxRank so that the arrays stay in registers.
template <typename I>
__device__ __forceinline__ I offsetIn(I linear, const Layout<I> &l) {
  I off = 0;
#pragma unroll
  for (int k = kMaxRank - 1; k >= 0; --k) {
    if (k < l.rank) {
      I n = l.size[k];
      off += (linear % n) * l.stride[k];
      linear /= n;
    }
  }
  return off;
}

/// 32-bit index math is used when counts and offsets stay below this (half
/// of INT32_MAX, so that a grid-stride step past the end cannot overflow).
constexpr int64_t kNarrowLimit = INT32_MAX / 2;

int64_t absl(int64_t v) { return v < 0 ? -v : v; }

/// Drops size-1 dims and merges dims that are contiguous in the strided
/// operand (the row-major side merges anywhere). Callers ensure no size is 0.
Dims collapse(const Dims &in) {
  Dims o;
  for (int i = 0; i < in.rank; ++i) {
    if (in.size[i] == 1)
      continue;
    if (o.rank > 0 && o.stride[o.rank - 1] == in.stride[i] * in.size[i]) {
      o.size[o.rank - 1] *= in.size[i];
      o.stride[o.rank - 1] = in.stride[i];
    } else {
      o.size[o.rank] = in.size[i];
      o.stride[o.rank] = in.stride[i];
      ++o.rank;
    }
  }
  return o;
}

/// |base| plus the largest distance a strided walk over `d` moves from it.
int64_t reach(const Dims &d, int64_t base) {
  int64_t r = absl(base);
  for (int k = 0; k < d.rank; ++k)
    r += (d.size[k] - 1) * absl(d.stride[k]);
  return r;
}

bool aligned(const void *p, size_t unit) {
  return reinterpret_cast<uintptr_t>(p) % unit == 0;
}

/// Launch shape for a loop over rows x cols: up to 256 threads along the
/// columns (a power of two), the rest of the block along the rows.
struct RowsCols {
  dim3 grid, block;
};

constexpr int64_t kColsPerThread = 4;

RowsCols rowsCols(int64_t rows, int64_t cols) {
  // Below a warp's width, the smallest power of two that covers a row;
  // above, the widest of 32..256 threads that wastes the fewest lanes.
  unsigned bx = 1;
  while (bx < 32 && static_cast<int64_t>(bx) < cols)
    bx <<= 1;
  if (bx == 32)
    for (unsigned w = 64; w <= 256; w *= 2)
      if ((cols + w - 1) / w * w <= (cols + bx - 1) / bx * bx)
        bx = w;
  unsigned by = 256 / bx;
  int64_t gx = std::min<int64_t>((cols + bx * kColsPerThread - 1) /
                                     (bx * kColsPerThread),
                                 int64_t(1) << 20);
  int64_t gy = std::min<int64_t>((rows + by - 1) / by, 65535);
  RowsCols rc;
  rc.grid = dim3(static_cast<unsigned>(std::max<int64_t>(gx, 1)),
                 static_cast<unsigned>(std::max<int64_t>(gy, 1)));
  rc.block = dim3(bx, by);
  return rc;
}

/// The rows of a rows x cols launch a thread visits, and in each row its
/// columns (several per thread: rowsCols gives each about kColsPerThread).
#define DSC_ROWS(r, rows)                                                      \
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < (rows); \
       r += int64_t(blockDim.y) * gridDim.y)
#define DSC_COLS(c, cols)                                                      \
  _Pragma("unroll 4") for (int64_t c =                                         \
                               int64_t(blockIdx.x) * blockDim.x + threadIdx.x; \
                           c < (cols); c += int64_t(blockDim.x) * gridDim.x)

//===----------------------------------------------------------------------===//
// Strided copies: transpose, expand, slice, sliceBackward
//===----------------------------------------------------------------------===//

/// gather: dst[i] = src[base + off(i)]; scatter: dst[base + off(i)] = src[i].
template <typename U, typename I>
__global__ void stridedCopyKernel(const U *__restrict__ src,
                                  U *__restrict__ dst, I n, Layout<I> l, I base,
                                  bool scatter) {
  for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<I>(blockDim.x * gridDim.x)) {
    I off = base + offsetIn(i, l);
    if (scatter)
      dst[off] = src[i];
    else
      dst[i] = src[off];
  }
}

template <int N>
Status launchStrided(const void *src, void *dst, int64_t n, const Dims &d,
                     int64_t base, bool scatter) {
  using U = Word<N>;
  unsigned blocks = blocksFor(n);
  if (n <= kNarrowLimit && reach(d, base) <= kNarrowLimit)
    stridedCopyKernel<U, int32_t><<<blocks, kThreads, 0, stream()>>>(
        static_cast<const U *>(src), static_cast<U *>(dst),
        static_cast<int32_t>(n), narrow<int32_t>(d), static_cast<int32_t>(base),
        scatter);
  else
    stridedCopyKernel<U, int64_t><<<blocks, kThreads, 0, stream()>>>(
        static_cast<const U *>(src), static_cast<U *>(dst), n,
        narrow<int64_t>(d), base, scatter);
  DSC_CUDA_LAUNCHED(scatter ? "strided_scatter" : "strided_gather");
  return Status();
}

/// Copies n elements of es bytes between a row-major operand (out's shape
/// d.size) and a strided one (d.stride, element base): gathers into `dst`,
/// or scatters from `src` when `scatter`. n > 0, every size > 0.
Status copyStrided(const void *src, void *dst, size_t es, Dims d, int64_t base,
                   int64_t n, bool scatter) {
  d = collapse(d);
  if (d.rank == 0 || (d.rank == 1 && d.stride[0] == 1)) {
    size_t at = static_cast<size_t>(base) * es;
    const char *s = static_cast<const char *>(src) + (scatter ? 0 : at);
    char *t = static_cast<char *>(dst) + (scatter ? at : 0);
    DSC_CUDA_CHECK(cudaMemcpyAsync(t, s, static_cast<size_t>(n) * es,
                                   cudaMemcpyDeviceToDevice, stream()));
    return Status();
  }
  // Move wider words when the innermost dim is a contiguous run.
  size_t unit = es;
  if (d.stride[d.rank - 1] == 1) {
    for (size_t u = 16; u > es; u /= 2) {
      bool ok = (static_cast<size_t>(d.size[d.rank - 1]) * es) % u == 0 &&
                (static_cast<size_t>(absl(base)) * es) % u == 0 &&
                aligned(src, u) && aligned(dst, u);
      for (int k = 0; k + 1 < d.rank && ok; ++k)
        ok = (static_cast<size_t>(absl(d.stride[k])) * es) % u == 0;
      if (ok) {
        unit = u;
        break;
      }
    }
  }
  if (unit != es) {
    int64_t f = static_cast<int64_t>(unit / es);
    d.size[d.rank - 1] /= f;
    for (int k = 0; k + 1 < d.rank; ++k)
      d.stride[k] /= f;
    base /= f;
    n /= f;
  }
  switch (unit) {
  case 1:
    return launchStrided<1>(src, dst, n, d, base, scatter);
  case 2:
    return launchStrided<2>(src, dst, n, d, base, scatter);
  case 4:
    return launchStrided<4>(src, dst, n, d, base, scatter);
  case 8:
    return launchStrided<8>(src, dst, n, d, base, scatter);
  default:
    return launchStrided<16>(src, dst, n, d, base, scatter);
  }
}

/// A transpose that moves the innermost dim, as a batch of 2-D transposes
/// between the output's innermost dim L and the dim K that is contiguous in
/// the input, through 32x32 tiles in shared memory (coalesced both ways).
struct TileArgs {
  int64_t sizeK = 0, sizeL = 0, inStrideL = 0, outStrideK = 0;
  int64_t batches = 1;
  int batchRank = 0;
  int64_t batchSize[kMaxRank] = {}, batchIn[kMaxRank] = {},
          batchOut[kMaxRank] = {};
};

/// Tiles of kTile x kTile elements, moved by blocks of 32 x kTileRows
/// threads (16 elements a thread, all loads issued before the barrier).
constexpr int kTile = 64, kTileCols = 32, kTileRows = 8;

template <typename U>
__global__ void transposeTilesKernel(const U *__restrict__ in,
                                     U *__restrict__ out, TileArgs a) {
  __shared__ U tile[kTile][kTile + 1];
  int64_t l0 = int64_t(blockIdx.x) * kTile, k0 = int64_t(blockIdx.y) * kTile;
  for (int64_t b = blockIdx.z; b < a.batches; b += gridDim.z) {
    int64_t inOff = 0, outOff = 0, rest = b;
    for (int k = a.batchRank - 1; k >= 0; --k) {
      int64_t idx = rest % a.batchSize[k];
      rest /= a.batchSize[k];
      inOff += idx * a.batchIn[k];
      outOff += idx * a.batchOut[k];
    }
#pragma unroll
    for (int r = threadIdx.y; r < kTile; r += kTileRows)
#pragma unroll
      for (int c = threadIdx.x; c < kTile; c += kTileCols) {
        int64_t l = l0 + r, k = k0 + c;
        if (l < a.sizeL && k < a.sizeK)
          tile[r][c] = in[inOff + k + l * a.inStrideL];
      }
    __syncthreads();
#pragma unroll
    for (int r = threadIdx.y; r < kTile; r += kTileRows)
#pragma unroll
      for (int c = threadIdx.x; c < kTile; c += kTileCols) {
        int64_t k = k0 + r, l = l0 + c;
        if (l < a.sizeL && k < a.sizeK)
          out[outOff + k * a.outStrideK + l] = tile[c][r];
      }
    __syncthreads();
  }
}

/// Fills `a` and returns true when the collapsed transpose `d` (out's shape,
/// input strides) suits the tiled kernel.
bool tiledTranspose(const Dims &d, TileArgs &a) {
  int last = d.rank - 1;
  if (d.rank < 2 || d.stride[last] == 1)
    return false;
  int kDim = -1;
  for (int i = 0; i < last; ++i)
    if (d.stride[i] == 1)
      kDim = i;
  if (kDim < 0 || (d.size[kDim] + kTile - 1) / kTile > 65535)
    return false;
  int64_t outStride[kMaxRank];
  int64_t acc = 1;
  for (int i = last; i >= 0; --i) {
    outStride[i] = acc;
    acc *= d.size[i];
  }
  a.sizeK = d.size[kDim];
  a.sizeL = d.size[last];
  a.inStrideL = d.stride[last];
  a.outStrideK = outStride[kDim];
  for (int i = 0; i < last; ++i) {
    if (i == kDim)
      continue;
    a.batchSize[a.batchRank] = d.size[i];
    a.batchIn[a.batchRank] = d.stride[i];
    a.batchOut[a.batchRank] = outStride[i];
    a.batches *= d.size[i];
    ++a.batchRank;
  }
  return true;
}

template <int N> Status launchTiles(const void *in, void *out, TileArgs a) {
  using U = Word<N>;
  dim3 grid(static_cast<unsigned>((a.sizeL + kTile - 1) / kTile),
            static_cast<unsigned>((a.sizeK + kTile - 1) / kTile),
            static_cast<unsigned>(std::min<int64_t>(a.batches, 65535)));
  transposeTilesKernel<U><<<grid, dim3(kTileCols, kTileRows), 0, stream()>>>(
      static_cast<const U *>(in), static_cast<U *>(out), a);
  DSC_CUDA_LAUNCHED("transpose_tiles");
  return Status();
}

//===----------------------------------------------------------------------===//
// Row copies: concat, split
//===----------------------------------------------------------------------===//

template <typename U>
__global__ void copyRowsKernel(const U *__restrict__ src, U *__restrict__ dst,
                               int64_t rows, int64_t width, int64_t srcPitch,
                               int64_t dstPitch) {
  DSC_ROWS(r, rows) {
    const U *s = src + r * srcPitch;
    U *d = dst + r * dstPitch;
    DSC_COLS(c, width)
    d[c] = s[c];
  }
}

template <int N>
Status launchRows(const void *src, void *dst, int64_t rows, int64_t width,
                  int64_t srcPitch, int64_t dstPitch) {
  using U = Word<N>;
  RowsCols rc = rowsCols(rows, width);
  copyRowsKernel<U><<<rc.grid, rc.block, 0, stream()>>>(
      static_cast<const U *>(src), static_cast<U *>(dst), rows, width, srcPitch,
      dstPitch);
  DSC_CUDA_LAUNCHED("copy_rows");
  return Status();
}

/// Copies `rows` rows of `width` bytes between pitched buffers (in bytes).
Status copyRows(const char *src, char *dst, int64_t rows, int64_t width,
                int64_t srcPitch, int64_t dstPitch) {
  if (rows == 1 || (width == srcPitch && width == dstPitch)) {
    DSC_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(rows * width),
                                   cudaMemcpyDeviceToDevice, stream()));
    return Status();
  }
  int64_t unit = 16;
  while (unit > 1 && (width % unit || srcPitch % unit || dstPitch % unit ||
                      !aligned(src, unit) || !aligned(dst, unit)))
    unit /= 2;
  int64_t w = width / unit, sp = srcPitch / unit, dp = dstPitch / unit;
  switch (unit) {
  case 1:
    return launchRows<1>(src, dst, rows, w, sp, dp);
  case 2:
    return launchRows<2>(src, dst, rows, w, sp, dp);
  case 4:
    return launchRows<4>(src, dst, rows, w, sp, dp);
  case 8:
    return launchRows<8>(src, dst, rows, w, sp, dp);
  default:
    return launchRows<16>(src, dst, rows, w, sp, dp);
  }
}

/// Copies between the pieces and the whole: toWhole picks the direction.
Status stack(const Tensor *parts, int count, int64_t axis, const Tensor &whole,
             bool toWhole) {
  int64_t es = static_cast<int64_t>(dtypeSize(whole.dtype));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d)
    outer *= whole.shape[d];
  for (int d = static_cast<int>(axis) + 1; d < whole.rank; ++d)
    inner *= whole.shape[d];
  if (outer == 0 || inner == 0)
    return Status();
  int64_t rowBytes = whole.shape[axis] * inner * es, at = 0;
  char *w = whole.as<char>();
  for (int k = 0; k < count; ++k) {
    int64_t bytes = parts[k].shape[axis] * inner * es;
    if (bytes) {
      char *p = parts[k].as<char>();
      Status st = toWhole ? copyRows(p, w + at, outer, bytes, bytes, rowBytes)
                          : copyRows(w + at, p, outer, bytes, rowBytes, bytes);
      if (!st.ok())
        return st;
    }
    at += bytes;
  }
  return Status();
}

//===----------------------------------------------------------------------===//
// Gather and its scatter-add backward
//===----------------------------------------------------------------------===//

__device__ __forceinline__ int64_t loadIndex(const void *p, bool wide,
                                             int64_t j) {
  return wide ? static_cast<const int64_t *>(p)[j]
              : static_cast<const int32_t *>(p)[j];
}

/// Records the first index outside [-dim, dim) in *firstBad (which starts
/// at ~0); when `keys` is given, also writes the wrapped indices and the
/// positions 0..m-1 (the sort's input).
__global__ void checkIndicesKernel(const void *__restrict__ indices, bool wide,
                                   int64_t m, int64_t dim,
                                   unsigned long long *firstBad,
                                   uint32_t *__restrict__ keys,
                                   uint32_t *__restrict__ positions) {
  DSC_GRID_STRIDE(j, m) {
    int64_t v = loadIndex(indices, wide, j);
    bool bad = v < -dim || v >= dim;
    if (bad)
      atomicMin(firstBad, static_cast<unsigned long long>(j));
    if (keys) {
      keys[j] = bad ? 0u : static_cast<uint32_t>(v < 0 ? v + dim : v);
      positions[j] = static_cast<uint32_t>(j);
    }
  }
}

/// A word of pinned host memory per thread, for the index check's answer
/// (a copy to pageable memory would go through a staging buffer).
struct PinnedWord {
  unsigned long long *p = nullptr;
  ~PinnedWord() {
    if (p)
      (void)cudaFreeHost(p);
  }
};

Status pinnedWord(unsigned long long **out) {
  static thread_local PinnedWord word;
  if (!word.p)
    DSC_CUDA_CHECK(cudaMallocHost(&word.p, sizeof(*word.p)));
  *out = word.p;
  return Status();
}

/// After checkIndicesKernel, inside a captured step: the bad index itself
/// into the flag's second word.
__global__ void badIndexKernel(const void *indices, bool wide,
                               unsigned long long *flag) {
  unsigned long long j = flag[0];
  if (j != ~0ull)
    flag[1] = static_cast<unsigned long long>(
        loadIndex(indices, wide, static_cast<int64_t>(j)));
}

/// Inside a captured step the answer cannot be waited for: the flag is two
/// deferred words (graph.h) and the verdict comes after the replay.
Status deferIndexCheck(const Call &call, const Tensor &indices, int64_t dim,
                       uint32_t *keys, uint32_t *positions) {
  int64_t m = indices.numel();
  bool wide = indices.dtype == DType::I64;
  unsigned long long *flag = nullptr;
  if (Status st = deferredWords(2, &flag); !st.ok())
    return st;
  DSC_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, 2 * sizeof(*flag), stream()));
  checkIndicesKernel<<<blocksFor(m), kThreads, 0, stream()>>>(
      indices.data, wide, m, dim, flag, keys, positions);
  DSC_CUDA_LAUNCHED("check_indices");
  badIndexKernel<<<1, 1, 0, stream()>>>(indices.data, wide, flag);
  DSC_CUDA_LAUNCHED("bad_index");
  return deferCheck(flag, 2, [call, dim](const unsigned long long *w) {
    if (w[0] == ~0ull)
      return Status();
    return cpu::detail::gatherIndexError(call, static_cast<int64_t>(w[1]),
                                         static_cast<int64_t>(w[0]), dim);
  });
}

/// Checks every index on the device and waits for the answer (in a
/// captured step: after the replay); an index out of range fails the call
/// with the CPU reference's message. `flag` is 8 bytes of scratch; keys and
/// positions are as in checkIndicesKernel.
Status checkIndices(const Call &call, const Tensor &indices, int64_t dim,
                    unsigned long long *flag, uint32_t *keys,
                    uint32_t *positions) {
  int64_t m = indices.numel();
  if (m == 0)
    return Status();
  if (capturingStep())
    return deferIndexCheck(call, indices, dim, keys, positions);
  bool wide = indices.dtype == DType::I64;
  DSC_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof(*flag), stream()));
  checkIndicesKernel<<<blocksFor(m), kThreads, 0, stream()>>>(
      indices.data, wide, m, dim, flag, keys, positions);
  DSC_CUDA_LAUNCHED("check_indices");
  unsigned long long *answer = nullptr;
  if (Status st = pinnedWord(&answer); !st.ok())
    return st;
  DSC_CUDA_CHECK(cudaMemcpyAsync(answer, flag, sizeof(*answer),
                                 cudaMemcpyDeviceToHost, stream()));
  DSC_CUDA_CHECK(cudaStreamSynchronize(stream()));
  unsigned long long first = *answer;
  if (first == ~0ull)
    return Status();
  int64_t j = static_cast<int64_t>(first), v = 0;
  if (wide) {
    DSC_CUDA_CHECK(cudaMemcpyAsync(&v, indices.as<int64_t>() + j, sizeof(v),
                                   cudaMemcpyDeviceToHost, stream()));
  } else {
    int32_t v32 = 0;
    DSC_CUDA_CHECK(cudaMemcpyAsync(&v32, indices.as<int32_t>() + j, sizeof(v32),
                                   cudaMemcpyDeviceToHost, stream()));
    DSC_CUDA_CHECK(cudaStreamSynchronize(stream()));
    v = v32;
  }
  DSC_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return cpu::detail::gatherIndexError(call, v, j, dim);
}

/// out[o, j, :] = data[o, wrap(indices[j]), :], rows of `inner` words.
template <typename U>
__global__ void gatherKernel(const U *__restrict__ data,
                             const void *__restrict__ indices, bool wide,
                             U *__restrict__ out, int64_t outer, int64_t m,
                             int64_t dim, int64_t inner) {
  DSC_ROWS(r, outer * m) {
    int64_t o = r / m, v = loadIndex(indices, wide, r - o * m);
    if (v < 0)
      v += dim;
    U *dst = out + r * inner;
    if (v >= 0 && v < dim) {
      const U *src = data + (o * dim + v) * inner;
      DSC_COLS(c, inner)
      dst[c] = src[c];
    } else {
      DSC_COLS(c, inner)
      dst[c] = U{};
    }
  }
}

template <int N>
Status launchGather(const Tensor &data, const Tensor &indices,
                    const Tensor &out, int64_t outer, int64_t m, int64_t dim,
                    int64_t inner) {
  using U = Word<N>;
  RowsCols rc = rowsCols(outer * m, inner);
  gatherKernel<U><<<rc.grid, rc.block, 0, stream()>>>(
      data.as<const U>(), indices.data, indices.dtype == DType::I64,
      out.as<U>(), outer, m, dim, inner);
  DSC_CUDA_LAUNCHED("gather");
  return Status();
}

/// For each key k present in the sorted keys, [begin[k], end[k]) is its run.
__global__ void runBoundsKernel(const uint32_t *__restrict__ keys, int64_t m,
                                uint32_t *__restrict__ begin,
                                uint32_t *__restrict__ end) {
  DSC_GRID_STRIDE(k, m) {
    uint32_t key = keys[k];
    if (k == 0 || keys[k - 1] != key)
      begin[key] = static_cast<uint32_t>(k);
    if (k == m - 1 || keys[k + 1] != key)
      end[key] = static_cast<uint32_t>(k + 1);
  }
}

/// V elements of T moved and added together (16-byte accesses).
template <typename T, int V> struct alignas(sizeof(T) * V) Vec { T v[V]; };

/// gradData[o, d, c] = sum over the run of d, in position order, of
/// gradOut[o, position, c]; zero where d has no index. Rows of `inner`
/// vectors of V elements, each element summed on its own (the CPU's order).
/// kInto: the sum is added to gradData's element (which holds init's), and
/// a row without index is left as it is.
template <typename T, int V, bool kInto>
__global__ void scatterAddKernel(const Vec<T, V> *__restrict__ gradOut,
                                 const uint32_t *__restrict__ positions,
                                 const uint32_t *__restrict__ begin,
                                 const uint32_t *__restrict__ end,
                                 Vec<T, V> *__restrict__ gradData,
                                 int64_t outer, int64_t m, int64_t dim,
                                 int64_t inner) {
  DSC_ROWS(r, outer * dim) {
    int64_t o = r / dim, d = r - o * dim;
    uint32_t first = begin[d], last = end[d];
    if (kInto && first == last)
      continue;
    const Vec<T, V> *src = gradOut + o * m * inner;
    Vec<T, V> *dst = gradData + r * inner;
    DSC_COLS(c, inner) {
      Vec<T, V> acc;
#pragma unroll
      for (int u = 0; u < V; ++u)
        acc.v[u] = T(0);
      for (uint32_t k = first; k < last; ++k) {
        Vec<T, V> x = src[int64_t(positions[k]) * inner + c];
#pragma unroll
        for (int u = 0; u < V; ++u)
          acc.v[u] += x.v[u];
      }
      if (kInto) {
        Vec<T, V> y = dst[c];
#pragma unroll
        for (int u = 0; u < V; ++u)
          acc.v[u] = y.v[u] + acc.v[u];
      }
      dst[c] = acc;
    }
  }
}

template <typename T, int V, bool kInto>
Status launchScatterAddAs(const Tensor &gradOut, const uint32_t *positions,
                          const uint32_t *begin, const uint32_t *end,
                          const Tensor &gradData, int64_t outer, int64_t m,
                          int64_t dim, int64_t inner) {
  RowsCols rc = rowsCols(outer * dim, inner / V);
  scatterAddKernel<T, V, kInto><<<rc.grid, rc.block, 0, stream()>>>(
      gradOut.as<const Vec<T, V>>(), positions, begin, end,
      gradData.as<Vec<T, V>>(), outer, m, dim, inner / V);
  DSC_CUDA_LAUNCHED("gather_backward");
  return Status();
}

template <typename T, bool kInto>
Status launchScatterAdd(const Tensor &gradOut, const uint32_t *positions,
                        const uint32_t *begin, const uint32_t *end,
                        const Tensor &gradData, int64_t outer, int64_t m,
                        int64_t dim, int64_t inner) {
  constexpr int V = 16 / sizeof(T);
  if (inner % V == 0 && aligned(gradOut.data, 16) && aligned(gradData.data, 16))
    return launchScatterAddAs<T, V, kInto>(gradOut, positions, begin, end,
                                           gradData, outer, m, dim, inner);
  return launchScatterAddAs<T, 1, kInto>(gradOut, positions, begin, end,
                                         gradData, outer, m, dim, inner);
}

template <bool kInto>
Status launchScatterAddOf(const Tensor &gradOut, const uint32_t *positions,
                          const uint32_t *begin, const uint32_t *end,
                          const Tensor &gradData, int64_t outer, int64_t m,
                          int64_t dim, int64_t inner) {
  if (gradData.dtype == DType::F32)
    return launchScatterAdd<float, kInto>(gradOut, positions, begin, end,
                                          gradData, outer, m, dim, inner);
  return launchScatterAdd<double, kInto>(gradOut, positions, begin, end,
                                         gradData, outer, m, dim, inner);
}

size_t alignUp(size_t n) { return (n + 255) & ~size_t(255); }

//===----------------------------------------------------------------------===//
// Pad
//===----------------------------------------------------------------------===//

template <typename I> struct PadShape {
  I begin[kMaxRank] = {};
  I inSize[kMaxRank] = {};
};

/// out[i] = input[i's position - begin] where inside the input, else fill.
/// l has out's sizes and the input's strides.
template <typename U, typename I>
__global__ void padKernel(const U *__restrict__ in, U *__restrict__ out, I n,
                          Layout<I> l, PadShape<I> p, U fill) {
  for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<I>(blockDim.x * gridDim.x)) {
    I linear = i, off = 0;
    bool inside = true;
#pragma unroll
    for (int k = kMaxRank - 1; k >= 0; --k) {
      if (k < l.rank) {
        I c = linear % l.size[k] - p.begin[k];
        linear /= l.size[k];
        inside = inside && c >= 0 && c < p.inSize[k];
        off += inside ? c * l.stride[k] : I(0);
      }
    }
    out[i] = inside ? in[off] : fill;
  }
}

template <typename U, typename I>
Status launchPadAs(const Tensor &input, I64s pads, const Tensor &out,
                   const char (&fillBytes)[8]) {
  Dims d = dimsOf(input);
  Layout<I> l;
  PadShape<I> p;
  l.rank = out.rank;
  for (int k = 0; k < out.rank; ++k) {
    l.size[k] = static_cast<I>(out.shape[k]);
    l.stride[k] = static_cast<I>(d.stride[k]);
    p.begin[k] = static_cast<I>(pads[k]);
    p.inSize[k] = static_cast<I>(input.shape[k]);
  }
  U fill;
  std::memcpy(&fill, fillBytes, sizeof(U));
  int64_t n = out.numel();
  padKernel<U, I><<<blocksFor(n), kThreads, 0, stream()>>>(
      input.as<const U>(), out.as<U>(), static_cast<I>(n), l, p, fill);
  DSC_CUDA_LAUNCHED("pad");
  return Status();
}

template <int N>
Status launchPad(const Tensor &input, I64s pads, const Tensor &out,
                 const char (&fillBytes)[8]) {
  bool narrowOk = out.numel() <= kNarrowLimit && input.numel() <= kNarrowLimit;
  for (int k = 0; k < out.rank && narrowOk; ++k)
    narrowOk = absl(pads[k]) <= kNarrowLimit;
  if (narrowOk)
    return launchPadAs<Word<N>, int32_t>(input, pads, out, fillBytes);
  return launchPadAs<Word<N>, int64_t>(input, pads, out, fillBytes);
}

//===----------------------------------------------------------------------===//
// Slices
//===----------------------------------------------------------------------===//

/// The strided walk over a slice `part` laid out by `l` (sizes of part,
/// strides in the full tensor).
Dims sliceDims(const Tensor &part, const SliceLayout &l) {
  Dims d;
  d.rank = part.rank;
  for (int k = 0; k < part.rank; ++k) {
    d.size[k] = part.shape[k];
    d.stride[k] = l.strides[k];
  }
  return d;
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Status reshape(const Tensor &input, const Tensor &out) {
  Call call("reshape");
  if (Status st = checkReshape(call, input, out); !st.ok())
    return st;
  if (input.data != out.data && input.nbytes() > 0)
    DSC_CUDA_CHECK(cudaMemcpyAsync(out.data, input.data, input.nbytes(),
                                   cudaMemcpyDeviceToDevice, stream()));
  return Status();
}

Status transpose(const Tensor &input, I64s perm, const Tensor &out) {
  Call call("transpose");
  std::array<int64_t, kMaxRank> strides;
  if (Status st = checkTranspose(call, input, perm, out, strides); !st.ok())
    return st;
  Dims d;
  d.rank = out.rank;
  for (int i = 0; i < out.rank; ++i) {
    d.size[i] = out.shape[i];
    d.stride[i] = strides[i];
  }
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  size_t es = dtypeSize(out.dtype);
  TileArgs tiles;
  if (tiledTranspose(collapse(d), tiles)) {
    switch (es) {
    case 1:
      return launchTiles<1>(input.data, out.data, tiles);
    case 2:
      return launchTiles<2>(input.data, out.data, tiles);
    case 4:
      return launchTiles<4>(input.data, out.data, tiles);
    default:
      return launchTiles<8>(input.data, out.data, tiles);
    }
  }
  return copyStrided(input.data, out.data, es, d, 0, n, false);
}

Status expand(const Tensor &input, const Tensor &out) {
  Call call("expand");
  std::array<int64_t, kMaxRank> strides;
  if (Status st = checkExpand(call, input, out, strides); !st.ok())
    return st;
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  Dims d;
  d.rank = out.rank;
  for (int i = 0; i < out.rank; ++i) {
    d.size[i] = out.shape[i];
    d.stride[i] = strides[i];
  }
  return copyStrided(input.data, out.data, dtypeSize(out.dtype), d, 0, n,
                     false);
}

Status slice(const Tensor &input, I64s offsets, I64s strides,
             const Tensor &out) {
  Call call("slice");
  SliceLayout l;
  if (Status st = checkSlice(call, input, offsets, strides, out, l); !st.ok())
    return st;
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  return copyStrided(input.data, out.data, dtypeSize(out.dtype),
                     sliceDims(out, l), l.base, n, false);
}

Status sliceBackward(const Tensor &gradOut, I64s offsets, I64s strides,
                     const Tensor &gradIn) {
  Call call("slice_backward");
  SliceLayout l;
  if (Status st =
          checkSliceBackward(call, gradOut, offsets, strides, gradIn, l);
      !st.ok())
    return st;
  if (gradIn.nbytes() > 0)
    DSC_CUDA_CHECK(cudaMemsetAsync(gradIn.data, 0, gradIn.nbytes(), stream()));
  int64_t n = gradOut.numel();
  if (n == 0)
    return Status();
  // A slice reads each element at most once (nonzero strides, in-range
  // positions), so the scatter writes every gradIn element at most once.
  return copyStrided(gradOut.data, gradIn.data, dtypeSize(gradIn.dtype),
                     sliceDims(gradOut, l), l.base, n, true);
}

Status concat(const Tensor *inputs, int count, int64_t axis,
              const Tensor &out) {
  Call call("concat");
  if (Status st = checkConcat(call, inputs, count, axis, out); !st.ok())
    return st;
  return stack(inputs, count, axis, out, true);
}

Status split(const Tensor &input, int64_t axis, const Tensor *outs, int count) {
  Call call("split");
  if (Status st = checkSplit(call, input, axis, outs, count); !st.ok())
    return st;
  return stack(outs, count, axis, input, false);
}

Status gather(const Tensor &data, const Tensor &indices, int64_t axis,
              const Tensor &out) {
  Call call("gather");
  GatherLayout l;
  if (Status st = checkGather(call, data, indices, axis, out, l); !st.ok())
    return st;
  int64_t outer = l.outer, dim = l.dim, inner = l.inner;
  int64_t m = indices.numel();
  if (m > 0) {
    void *flag = nullptr;
    if (Status st = scratch(sizeof(unsigned long long), &flag, "index check");
        !st.ok())
      return st;
    if (Status st = checkIndices(call, indices, dim,
                                 static_cast<unsigned long long *>(flag),
                                 nullptr, nullptr);
        !st.ok())
      return st;
  }
  if (out.numel() == 0)
    return Status();
  // Rows of inner elements move as the widest word that divides them.
  int64_t es = static_cast<int64_t>(dtypeSize(data.dtype));
  int64_t unit = 16;
  while (unit > es && ((inner * es) % unit || !aligned(data.data, unit) ||
                       !aligned(out.data, unit)))
    unit /= 2;
  int64_t words = inner * es / unit;
  switch (unit) {
  case 1:
    return launchGather<1>(data, indices, out, outer, m, dim, words);
  case 2:
    return launchGather<2>(data, indices, out, outer, m, dim, words);
  case 4:
    return launchGather<4>(data, indices, out, outer, m, dim, words);
  case 8:
    return launchGather<8>(data, indices, out, outer, m, dim, words);
  default:
    return launchGather<16>(data, indices, out, outer, m, dim, words);
  }
}

namespace {

/// gradData = (init or zeros) + the scatter-add of gradOut (cpu::
/// gatherBackward and gatherBackwardInto). With init, only the indexed rows
/// are touched once init is in gradData.
Status scatterAdd(Call &call, const Tensor &gradOut, const Tensor &indices,
                  int64_t axis, const Tensor *init, const Tensor &gradData) {
  GatherLayout l;
  if (Status st =
          checkGatherBackward(call, gradOut, indices, axis, gradData, l, init);
      !st.ok())
    return st;
  int64_t outer = l.outer, dim = l.dim, inner = l.inner;
  int64_t m = indices.numel();
  // The sort runs on 32-bit keys and positions.
  if (m > INT32_MAX || dim > static_cast<int64_t>(UINT32_MAX))
    return call.fail("more than 2^31 - 1 indices or 2^32 - 1 rows",
                     StatusCode::Unimplemented);
  int endBit = 1;
  while (endBit < 32 && (int64_t(1) << endBit) < dim)
    ++endBit;
  size_t sortBytes = 0;
  if (m > 0)
    DSC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, sortBytes, static_cast<const uint32_t *>(nullptr),
        static_cast<uint32_t *>(nullptr),
        static_cast<const uint32_t *>(nullptr),
        static_cast<uint32_t *>(nullptr), static_cast<int>(m), 0, endBit,
        stream()));
  size_t idxBytes = alignUp(sizeof(uint32_t) * static_cast<size_t>(m));
  size_t runBytes = alignUp(sizeof(uint32_t) * static_cast<size_t>(dim));
  size_t total = alignUp(sizeof(unsigned long long)) + 4 * idxBytes +
                 2 * runBytes + alignUp(sortBytes);
  char *base = nullptr;
  if (m > 0) {
    void *p = nullptr;
    if (Status st = scratch(total, &p, "gather backward sort"); !st.ok())
      return st;
    base = static_cast<char *>(p);
  }
  auto *flag = reinterpret_cast<unsigned long long *>(base);
  auto *keys =
      reinterpret_cast<uint32_t *>(base + alignUp(sizeof(unsigned long long)));
  uint32_t *sortedKeys =
      reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(keys) + idxBytes);
  uint32_t *positions = reinterpret_cast<uint32_t *>(
      reinterpret_cast<char *>(sortedKeys) + idxBytes);
  uint32_t *sortedPositions = reinterpret_cast<uint32_t *>(
      reinterpret_cast<char *>(positions) + idxBytes);
  uint32_t *begin = reinterpret_cast<uint32_t *>(
      reinterpret_cast<char *>(sortedPositions) + idxBytes);
  uint32_t *end =
      reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(begin) + runBytes);
  void *sortTemp = reinterpret_cast<char *>(end) + runBytes;
  if (m > 0)
    if (Status st = checkIndices(call, indices, dim, flag, keys, positions);
        !st.ok())
      return st;
  if (gradData.dtype != DType::F32 && gradData.dtype != DType::F64)
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  if (gradData.numel() == 0)
    return Status();
  if (init && init->data != gradData.data)
    DSC_CUDA_CHECK(cudaMemcpyAsync(gradData.data, init->data, gradData.nbytes(),
                                   cudaMemcpyDeviceToDevice, stream()));
  if (m == 0) {
    if (!init)
      DSC_CUDA_CHECK(
          cudaMemsetAsync(gradData.data, 0, gradData.nbytes(), stream()));
    return Status();
  }
  DSC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      sortTemp, sortBytes, static_cast<const uint32_t *>(keys), sortedKeys,
      static_cast<const uint32_t *>(positions), sortedPositions,
      static_cast<int>(m), 0, endBit, stream()));
  DSC_CUDA_CHECK(cudaMemsetAsync(begin, 0, 2 * runBytes, stream()));
  runBoundsKernel<<<blocksFor(m), kThreads, 0, stream()>>>(sortedKeys, m, begin,
                                                           end);
  DSC_CUDA_LAUNCHED("gather_backward_runs");
  if (init)
    return launchScatterAddOf<true>(gradOut, sortedPositions, begin, end,
                                    gradData, outer, m, dim, inner);
  return launchScatterAddOf<false>(gradOut, sortedPositions, begin, end,
                                   gradData, outer, m, dim, inner);
}

} // namespace

Status gatherBackward(const Tensor &gradOut, const Tensor &indices,
                      int64_t axis, const Tensor &gradData) {
  Call call("gather_backward");
  return scatterAdd(call, gradOut, indices, axis, nullptr, gradData);
}

Status gatherBackwardInto(const Tensor &gradOut, const Tensor &indices,
                          int64_t axis, const Tensor &init,
                          const Tensor &gradData) {
  Call call("gather_backward_into");
  return scatterAdd(call, gradOut, indices, axis, &init, gradData);
}

Status pad(const Tensor &input, I64s pads, double value, const Tensor &out) {
  Call call("pad");
  if (Status st = checkPad(call, input, pads, out); !st.ok())
    return st;
  if (out.numel() == 0)
    return Status();
  char fill[8] = {};
  cpu::detail::storeDouble(fill, out.dtype, 0, value); // on the host
  switch (dtypeSize(out.dtype)) {
  case 1:
    return launchPad<1>(input, pads, out, fill);
  case 2:
    return launchPad<2>(input, pads, out, fill);
  case 4:
    return launchPad<4>(input, pads, out, fill);
  default:
    return launchPad<8>(input, pads, out, fill);
  }
}

} // namespace dsc::cuda
