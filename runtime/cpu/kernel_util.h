//===- kernel_util.h - Shared helpers of the CPU kernels --------*- C++ -*-===//
//
// Internal to runtime/cpu: argument checks that build the error message,
// float dispatch, broadcast strides, and a deterministic parallel-for.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_KERNEL_UTIL_H
#define DSC_RUNTIME_CPU_KERNEL_UTIL_H

#include "dsc/runtime.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace dsc::cpu::detail {

/// Builds "call(a=f32[2,3], b=none): reason" messages.
class Call {
public:
  explicit Call(const char *name) : text_(std::string(name) + "(") {}
  Call &arg(const char *name, const Tensor &t) {
    return raw(name, describe(t));
  }
  Call &arg(const char *name, I64s list) { return raw(name, describe(list)); }
  Call &arg(const char *name, int64_t v) {
    return raw(name, std::to_string(v));
  }
  Call &raw(const char *name, const std::string &value) {
    text_ += (first_ ? "" : ", ");
    text_ += std::string(name) + "=" + value;
    first_ = false;
    return *this;
  }
  Status fail(const std::string &reason,
              StatusCode code = StatusCode::InvalidArgument) const {
    return Status::error(code, text_ + "): " + reason);
  }

private:
  std::string text_;
  bool first_ = true;
};

inline bool validRank(const Tensor &t) {
  return t.rank >= 0 && t.rank <= kMaxRank;
}

inline bool sameShape(const Tensor &a, const Tensor &b) {
  if (a.rank != b.rank)
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i])
      return false;
  return true;
}

inline bool shapeIs(const Tensor &t, const std::vector<int64_t> &shape) {
  if (t.rank != static_cast<int>(shape.size()))
    return false;
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] != shape[i])
      return false;
  return true;
}

/// Row-major strides in elements.
inline std::array<int64_t, kMaxRank> stridesOf(const Tensor &t) {
  std::array<int64_t, kMaxRank> s{};
  int64_t acc = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= t.shape[i];
  }
  return s;
}

/// Strides of `in` laid over `out` by numpy broadcasting (0 along broadcast
/// dims); false if `in` does not broadcast to `out`.
inline bool broadcastStrides(const Tensor &in, const Tensor &out,
                             std::array<int64_t, kMaxRank> &strides) {
  strides.fill(0);
  if (in.rank > out.rank)
    return false;
  auto inStrides = stridesOf(in);
  int shift = out.rank - in.rank;
  for (int i = 0; i < in.rank; ++i) {
    int64_t d = in.shape[i], o = out.shape[i + shift];
    if (d == o)
      strides[i + shift] = d == 1 ? 0 : inStrides[i];
    else if (d == 1)
      strides[i + shift] = 0;
    else
      return false;
  }
  return true;
}

/// The numpy broadcast of two shapes; false if they do not broadcast.
inline bool broadcastShape(const Tensor &a, const Tensor &b,
                           std::vector<int64_t> &shape) {
  int rank = std::max(a.rank, b.rank);
  shape.assign(rank, 1);
  for (int i = 0; i < rank; ++i) {
    int ia = i - (rank - a.rank), ib = i - (rank - b.rank);
    int64_t da = ia >= 0 ? a.shape[ia] : 1, db = ib >= 0 ? b.shape[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return false;
    shape[i] = da == 1 ? db : da;
  }
  return true;
}

/// Walks a multi-index over `shape` in row-major order, keeping up to three
/// linear offsets in step with their strides. Cheaper than div/mod per
/// element.
template <int K> struct Walker {
  int rank;
  const int64_t *shape;
  std::array<std::array<int64_t, kMaxRank>, K> strides;
  std::array<int64_t, kMaxRank> idx{};
  std::array<int64_t, K> off{};

  void next() {
    for (int d = rank - 1; d >= 0; --d) {
      for (int k = 0; k < K; ++k)
        off[k] += strides[k][d];
      if (++idx[d] < shape[d])
        return;
      for (int k = 0; k < K; ++k)
        off[k] -= strides[k][d] * shape[d];
      idx[d] = 0;
    }
  }
};

/// Wraps a possibly negative axis into [0, rank); false if out of range.
inline bool normalizeAxis(int64_t &axis, int rank) {
  if (axis < -rank || axis >= rank)
    return false;
  if (axis < 0)
    axis += rank;
  return true;
}

inline int resolveThreads(int threads) {
  if (threads > 0)
    return threads;
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

/// Runs chunk(c) for every c in [1, chunks) on the process's worker threads
/// (started once, hardware concurrency - 1 of them) while the caller runs
/// chunk 0, and returns when all are done. Called from a worker (a kernel
/// inside a kernel), it runs every chunk itself, so it never deadlocks.
/// Several threads may call it at once (in-process ranks, host tasks).
void runChunks(int64_t chunks, const std::function<void(int64_t)> &chunk);

/// Runs fn(begin, end) over [0, n) split into contiguous chunks. Each index is
/// handled by exactly one call, so kernels that give each index its own
/// outputs stay deterministic for any thread count. Up to 4 chunks per
/// thread, taken by whichever thread is free: a thread that shares its core
/// (a spinning CUDA synchronize, another rank) does not hold up the rest.
template <typename Fn>
void parallelFor(int64_t n, int threads, int64_t minChunk, Fn &&fn) {
  int t = resolveThreads(threads);
  int64_t chunks = std::min<int64_t>(
      t == 1 ? 1 : int64_t(4) * t,
      (n + minChunk - 1) / std::max<int64_t>(minChunk, 1));
  if (chunks <= 1) {
    if (n > 0)
      fn(int64_t(0), n);
    return;
  }
  int64_t per = (n + chunks - 1) / chunks;
  runChunks(chunks, [&](int64_t c) {
    int64_t b = c * per, e = std::min(n, b + per);
    if (b < e)
      fn(b, e);
  });
}

/// Calls fn(T{}) with T = float or double for the dtype; false otherwise.
template <typename Fn> bool dispatchFloat(DType dtype, Fn &&fn) {
  if (dtype == DType::F32) {
    fn(float());
    return true;
  }
  if (dtype == DType::F64) {
    fn(double());
    return true;
  }
  return false;
}

/// Element i of a buffer of any dtype, read as a double / int64, or written
/// from a double (float to int truncates; f16/bf16 round to nearest even).
double loadAsDouble(const void *p, DType dt, int64_t i);
int64_t loadAsInt(const void *p, DType dt, int64_t i);
void storeDouble(void *p, DType dt, int64_t i, double v);

} // namespace dsc::cpu::detail

#endif // DSC_RUNTIME_CPU_KERNEL_UTIL_H
