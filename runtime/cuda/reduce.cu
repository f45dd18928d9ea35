//===- reduce.cu - CUDA kernels: reduce sum, mean, max, min, prod ---------===//
//
// The input is viewed as M outputs (the kept dims, in output order) times R
// reduced elements (the reduced dims); adjacent dims of one kind merge and
// size-1 dims drop, so the common cases become [M, R] (rows: the reduced
// elements are contiguous) or [R, M] (columns: the outputs are contiguous).
//
//  - Rows with R >= 32: a warp per output (a group of up to 8 warps for
//    R > 1024), each thread combining a strided subsequence, then a fixed
//    tree (warp shuffles, then the group's warps in order).
//  - Everything else: one thread per output (coalesced across outputs),
//    with up to 8 threads of a block splitting the reduced range (fixed
//    tree over them).
//  - When there are few outputs for a long reduction (a bias gradient
//    [16384, 768] -> [768], or a full reduction), the reduced range is cut
//    into S chunks; a first pass writes S partials per output to scratch and
//    a second pass combines them in chunk order.
//
// Every choice (block shapes, S) depends only on the shapes, so a result is
// the same bits on every run and every GPU. Accumulators: f32 sums, means
// and products accumulate in f64 and round once at the end (more accurate
// than the CPU reference's sequential f32 sum, and well within 1e-5 of
// PyTorch's f32 tree sums); f64 in f64; f32 max/min in f32; i64/i32 in their
// own type with wrap-around, so integer results are bitwise the CPU's. NaN
// propagates through max and min as on the CPU.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_math.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace dsc::cuda {

using namespace detail;

namespace {

enum : int { kSum, kProd, kMax, kMin };

constexpr int kBlock = 256; // threads of every reduce block

template <typename A> __device__ __forceinline__ bool isNan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return v != v;
  else
    return false;
}

/// a op b, as the CPU reference folds an element into its accumulator;
/// integers wrap around (through their unsigned type), NaN sticks.
template <typename A> __device__ __forceinline__ A combine(int op, A a, A b) {
  switch (op) {
  case kSum:
    if constexpr (std::is_integral_v<A>) {
      using UA = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<UA>(a) + static_cast<UA>(b));
    } else {
      return a + b;
    }
  case kProd:
    if constexpr (std::is_integral_v<A>) {
      using UA = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<UA>(a) * static_cast<UA>(b));
    } else {
      return a * b;
    }
  case kMax:
    return isNan(a) ? a : (b > a || isNan(b)) ? b : a;
  default:
    return isNan(a) ? a : (b < a || isNan(b)) ? b : a;
  }
}

/// The offset of row-major position `linear` of `d.size` under `d.stride`,
/// unrolled so that the arrays stay in registers; rank 1 is one multiply.
__device__ __forceinline__ int64_t offsetIn(int64_t linear, const Dims &d) {
  if (d.rank == 1)
    return linear * d.stride[0];
  int64_t off = 0;
#pragma unroll
  for (int k = kMaxRank - 1; k >= 0; --k) {
    if (k < d.rank) {
      int64_t n = d.size[k];
      off += (linear % n) * d.stride[k];
      linear /= n;
    }
  }
  return off;
}

/// What the kernels do with a combined value: `final` stores it as T at
/// `out[at]` (divided by `count` for a mean); otherwise it is a partial,
/// stored as A.
template <typename A> struct Finish {
  int op = kSum;
  A init{};
  bool final = true, mean = false;
  double count = 1;
};

template <typename A, typename T>
__device__ __forceinline__ void store(void *out, int64_t at, A acc,
                                      const Finish<A> &f) {
  if (!f.final) {
    static_cast<A *>(out)[at] = acc;
    return;
  }
  if constexpr (std::is_floating_point_v<A>)
    if (f.mean)
      acc = acc / static_cast<A>(f.count);
  static_cast<T *>(out)[at] = static_cast<T>(acc);
}

/// Folds the elements i, i + step, ... below `end` into acc in that order,
/// issuing kUnroll loads before combining them (the order of the combines
/// is the plain loop's).
constexpr int kUnroll = 8;

template <int U, typename In, typename A, typename Off>
__device__ __forceinline__ A foldBy(const In *__restrict__ base, Off offset,
                                    int64_t i, int64_t end, int64_t step,
                                    int op, A acc) {
  for (; i + (U - 1) * step < end; i += U * step) {
    A v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      v[u] = static_cast<A>(base[offset(i + u * step)]);
#pragma unroll
    for (int u = 0; u < U; ++u)
      acc = combine(op, acc, v[u]);
  }
  for (; i < end; i += step)
    acc = combine(op, acc, static_cast<A>(base[offset(i)]));
  return acc;
}

template <typename In, typename A>
__device__ __forceinline__ A fold(const In *__restrict__ base, const Dims &red,
                                  int64_t i, int64_t end, int64_t step, int op,
                                  A acc) {
  if (red.rank <= 1) {
    int64_t st = red.rank ? red.stride[0] : 0;
    return foldBy<kUnroll>(
        base, [st](int64_t k) { return k * st; }, i, end, step, op, acc);
  }
  return foldBy<2>(
      base, [&red](int64_t k) { return offsetIn(k, red); }, i, end, step, op,
      acc);
}

template <typename A> __device__ __forceinline__ A shuffleDown(A v, int by) {
  if constexpr (std::is_floating_point_v<A>)
    return __shfl_down_sync(0xffffffffu, v, by);
  else if constexpr (sizeof(A) == 8)
    return static_cast<A>(
        __shfl_down_sync(0xffffffffu, static_cast<long long>(v), by));
  else
    return static_cast<A>(
        __shfl_down_sync(0xffffffffu, static_cast<int>(v), by));
}

/// Groups of blockDim.x threads (32 to 256, a power of two), blockDim.y
/// groups a block; each group reduces one item b = j * S + s over
/// [0, M * S): r in [s * chunk, (s + 1) * chunk) of output j, and writes
/// out[b]. A fixed tree: shuffles within each warp, then the warps of the
/// group in order.
template <typename In, typename A, typename T>
__global__ void __launch_bounds__(kBlock)
    reduceGroupsKernel(const In *__restrict__ in, void *__restrict__ out,
                       Dims kept, Dims red, int64_t m, int64_t r, int64_t s,
                       int64_t chunk, Finish<A> f) {
  __shared__ A warpAcc[kBlock / 32];
  unsigned tx = threadIdx.x, lane = tx % 32;
  unsigned warps = blockDim.x / 32, firstWarp = threadIdx.y * warps;
  int64_t items = m * s;
  for (int64_t round = blockIdx.x; round * blockDim.y < items;
       round += gridDim.x) {
    int64_t b = round * blockDim.y + threadIdx.y;
    A acc = f.init;
    if (b < items) {
      int64_t j = b / s, r0 = (b - j * s) * chunk;
      int64_t r1 = r0 + chunk < r ? r0 + chunk : r;
      acc =
          fold(in + offsetIn(j, kept), red, r0 + tx, r1, blockDim.x, f.op, acc);
    }
    for (int o = 16; o > 0; o >>= 1)
      acc = combine(f.op, acc, shuffleDown(acc, o));
    if (warps > 1) {
      if (lane == 0)
        warpAcc[firstWarp + tx / 32] = acc;
      __syncthreads();
      if (tx == 0)
        for (unsigned w = 1; w < warps; ++w)
          acc = combine(f.op, acc, warpAcc[firstWarp + w]);
      __syncthreads();
    }
    if (tx == 0 && b < items)
      store<A, T>(out, b, acc, f);
  }
}

/// One thread per output j (x; tiles of blockDim.x outputs over grid x);
/// blockDim.y threads split chunk blockIdx.y of the reduced range and
/// combine in a fixed tree. Writes out[blockIdx.y * M + j].
template <typename In, typename A, typename T>
__global__ void __launch_bounds__(kBlock)
    reduceThreadsKernel(const In *__restrict__ in, void *__restrict__ out,
                        Dims kept, Dims red, int64_t m, int64_t r,
                        int64_t chunk, Finish<A> f) {
  __shared__ A buf[kBlock];
  unsigned tid = threadIdx.y * blockDim.x + threadIdx.x;
  int64_t r0 = int64_t(blockIdx.y) * chunk;
  int64_t r1 = r0 + chunk < r ? r0 + chunk : r;
  for (int64_t tile = blockIdx.x; tile * blockDim.x < m; tile += gridDim.x) {
    int64_t j = tile * blockDim.x + threadIdx.x;
    A acc = f.init;
    if (j < m) {
      acc = fold(in + offsetIn(j, kept), red, r0 + threadIdx.y, r1, blockDim.y,
                 f.op, acc);
    }
    if (blockDim.y > 1) {
      buf[tid] = acc;
      __syncthreads();
      for (unsigned h = blockDim.y / 2; h > 0; h >>= 1) {
        if (threadIdx.y < h)
          buf[tid] = combine(f.op, buf[tid], buf[tid + h * blockDim.x]);
        __syncthreads();
      }
      acc = buf[tid];
      __syncthreads();
    }
    if (threadIdx.y == 0 && j < m)
      store<A, T>(out, int64_t(blockIdx.y) * m + j, acc, f);
  }
}

unsigned pow2AtMost(int64_t v, unsigned cap) {
  unsigned p = 1;
  while (p * 2 <= cap && static_cast<int64_t>(p * 2) <= v)
    p *= 2;
  return p;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kTargetBlocks = 1024; // enough to fill an H200 and more
constexpr int64_t kMaxGrid = int64_t(1) << 20;

Dims dims1(int64_t size, int64_t stride) {
  Dims d;
  d.rank = 1;
  d.size[0] = size;
  d.stride[0] = stride;
  return d;
}

/// Launches the reduction of `in` (M x R as kept x red) into `out`;
/// `split` allows a two-pass reduction through scratch.
template <typename In, typename A, typename T>
Status launchReduce(const In *in, void *out, const Dims &kept, const Dims &red,
                    int64_t m, int64_t r, Finish<A> f, bool split) {
  bool rows = red.rank > 0 && red.stride[red.rank - 1] == 1;
  if (rows && r >= 32) {
    // Threads per output: a warp up to 1024 elements, up to a block beyond.
    unsigned group = 32;
    while (group < kBlock && int64_t(group) * 32 < r)
      group *= 2;
    unsigned per = kBlock / group; // outputs (or chunks) per block
    int64_t s = 1;
    if (split && m < kTargetBlocks * per && r >= 32 * int64_t(group))
      s = std::min<int64_t>({ceilDiv(kTargetBlocks * per, m),
                             ceilDiv(r, 16 * int64_t(group)), 1024});
    int64_t chunk = ceilDiv(r, s);
    s = ceilDiv(r, chunk);
    void *partial = out;
    Finish<A> first = f;
    if (s > 1) {
      if (Status st = scratch(sizeof(A) * static_cast<size_t>(m * s), &partial,
                              "reduction partials");
          !st.ok())
        return st;
      first.final = false;
    }
    unsigned grid =
        static_cast<unsigned>(std::min(ceilDiv(m * s, per), kMaxGrid));
    reduceGroupsKernel<In, A, T><<<grid, dim3(group, per), 0, stream()>>>(
        in, partial, kept, red, m, r, s, chunk, first);
    DSC_CUDA_LAUNCHED("reduce_groups");
    if (s == 1)
      return Status();
    // Partials are [M, S]: rows again, combined in chunk order.
    return launchReduce<A, A, T>(static_cast<const A *>(partial), out,
                                 dims1(m, s), dims1(s, 1), m, s, f, false);
  }
  unsigned by = rows ? 1 : pow2AtMost(r / 8, 8);
  unsigned bx = kBlock / by;
  int64_t tiles = ceilDiv(m, bx);
  int64_t s = 1;
  if (split && !rows && tiles < kTargetBlocks && r >= 32 * int64_t(by))
    s = std::min<int64_t>(
        {ceilDiv(kTargetBlocks, tiles), ceilDiv(r, 16 * int64_t(by)), 512});
  int64_t chunk = std::max<int64_t>(ceilDiv(r, s), 1);
  s = std::max<int64_t>(ceilDiv(r, chunk), 1);
  void *partial = out;
  Finish<A> first = f;
  if (s > 1) {
    if (Status st = scratch(sizeof(A) * static_cast<size_t>(m * s), &partial,
                            "reduction partials");
        !st.ok())
      return st;
    first.final = false;
  }
  dim3 grid(static_cast<unsigned>(std::min(tiles, kMaxGrid)),
            static_cast<unsigned>(s));
  reduceThreadsKernel<In, A, T><<<grid, dim3(bx, by), 0, stream()>>>(
      in, partial, kept, red, m, r, chunk, first);
  DSC_CUDA_LAUNCHED("reduce_threads");
  if (s == 1)
    return Status();
  // Partials are [S, M]: columns again, combined in chunk order.
  return launchReduce<A, A, T>(static_cast<const A *>(partial), out,
                               dims1(m, 1), dims1(s, m), m, s, f, false);
}

/// A 16-bit float as the reductions load it: widened exactly to f32 (and
/// on to the accumulator), so the sum of a bf16 input is bitwise the sum of
/// its f32 cast.
struct Bf16In {
  uint16_t bits;
  __device__ operator float() const { return bf16BitsToFloat(bits); }
};
struct HalfIn {
  uint16_t bits;
  __device__ operator float() const { return halfBitsToFloat(bits); }
};

/// The reduction of `input` (elements In) into `out` (elements T).
template <typename In, typename A, typename T = In>
Status runReduce(ReduceOp op, const Tensor &input, const Tensor &out,
                 const Dims &kept, const Dims &red, int64_t m, int64_t r) {
  Finish<A> f;
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Mean:
    f.op = kSum;
    f.init = A(0);
    break;
  case ReduceOp::Prod:
    f.op = kProd;
    f.init = A(1);
    break;
  case ReduceOp::Max:
    f.op = kMax;
    f.init = std::numeric_limits<A>::has_infinity
                 ? -std::numeric_limits<A>::infinity()
                 : std::numeric_limits<A>::lowest();
    break;
  case ReduceOp::Min:
    f.op = kMin;
    f.init = std::numeric_limits<A>::has_infinity
                 ? std::numeric_limits<A>::infinity()
                 : std::numeric_limits<A>::max();
    break;
  }
  f.mean = op == ReduceOp::Mean;
  f.count = static_cast<double>(r);
  return launchReduce<In, A, T>(static_cast<const In *>(input.data), out.data,
                                kept, red, m, r, f, true);
}

} // namespace

Status reduce(ReduceOp op, const Tensor &input, I64s axes, bool keepdims,
              const Tensor &out) {
  // The CPU reference's checks (cpu/checks_math.h), dtypes included.
  Call call(cpu::detail::reduceName(op));
  bool reduced[kMaxRank];
  Tensor keptShape; // unused here
  if (Status st = cpu::detail::checkReduce(call, op, input, axes, keepdims, out,
                                           reduced, keptShape);
      !st.ok())
    return st;
  DType dt = input.dtype;

  // Merge runs of kept / reduced dims (row-major, so any run merges) and
  // drop size-1 dims.
  Dims kept, red;
  int64_t m = 1, r = 1;
  Dims rowMajor = dimsOf(input);
  int lastKind = -1; // 0 kept, 1 reduced
  for (int d = 0; d < input.rank; ++d) {
    int64_t n = input.shape[d];
    (reduced[d] ? r : m) *= n;
    if (n == 1)
      continue;
    int kind = reduced[d] ? 1 : 0;
    Dims &g = reduced[d] ? red : kept;
    if (kind == lastKind) {
      g.size[g.rank - 1] *= n;
      g.stride[g.rank - 1] = rowMajor.stride[d];
    } else {
      g.size[g.rank] = n;
      g.stride[g.rank] = rowMajor.stride[d];
      ++g.rank;
    }
    lastKind = kind;
  }
  if (m == 0)
    return Status();
  // A 16-bit input's sum or mean goes into f32 or f64 (checkReduce).
  auto sixteenBit = [&](auto in) {
    using In = decltype(in);
    return out.dtype == DType::F64
               ? runReduce<In, double, double>(op, input, out, kept, red, m, r)
               : runReduce<In, double, float>(op, input, out, kept, red, m, r);
  };
  switch (dt) {
  case DType::BF16:
    return sixteenBit(Bf16In{});
  case DType::F16:
    return sixteenBit(HalfIn{});
  case DType::F32:
    if (op == ReduceOp::Max || op == ReduceOp::Min)
      return runReduce<float, float>(op, input, out, kept, red, m, r);
    return runReduce<float, double>(op, input, out, kept, red, m, r);
  case DType::F64:
    return runReduce<double, double>(op, input, out, kept, red, m, r);
  case DType::I64:
    return runReduce<int64_t, int64_t>(op, input, out, kept, red, m, r);
  default:
    return runReduce<int32_t, int32_t>(op, input, out, kept, red, m, r);
  }
}

} // namespace dsc::cuda
