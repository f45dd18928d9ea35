//===- runtime.h - The dsc runtime: status, tensors, host arena -*- C++ -*-===//
//
// The public API a compiled training step calls. Plain C++17: status returns,
// no exceptions across the API, no global state, and no MLIR, LLVM or
// protobuf. Kernels (cpu/kernels.h) and checkpoint I/O
// (io/safetensors.h) build on the three things declared here:
//
//   Status     what went wrong, naming the call and its arguments
//   Tensor     a non-owning view: dtype, shape (rank <= 8), data pointer
//   HostArena  one host allocation handed out by bump offsets, peak tracked
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_H
#define DSC_RUNTIME_H

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace dsc {

//===----------------------------------------------------------------------===//
// Status
//===----------------------------------------------------------------------===//

enum class StatusCode : int {
  Ok = 0,
  InvalidArgument, // shapes, dtypes or attributes the call cannot take
  OutOfRange,      // an index or label outside its dimension
  OutOfMemory,     // an allocation or arena request that does not fit
  IoError,         // a file that cannot be opened, read, written or parsed
  Unimplemented,   // a valid request this backend does not support yet
};

/// The result of every runtime call. An error's message names the call and
/// its arguments, e.g. "matmul(lhs=f32[2,3], rhs=f32[4,5]): inner dims 3 vs
/// 4", so that a failure in a generated program can be traced to its op.
class [[nodiscard]] Status {
public:
  Status() = default;
  static Status error(StatusCode code, std::string message) {
    Status s;
    s.code_ = code;
    s.message_ = std::move(message);
    return s;
  }
  bool ok() const { return code_ == StatusCode::Ok; }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }

private:
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

const char *statusCodeName(StatusCode code);

//===----------------------------------------------------------------------===//
// Element types and tensor views
//===----------------------------------------------------------------------===//

enum class DType : uint8_t { F32, F64, F16, BF16, I64, I32, I8, U8, Bool };

size_t dtypeSize(DType dtype);      // bytes per element; Bool is one byte
const char *dtypeName(DType dtype); // "f32", "bf16", "i64", "bool", ...
bool isFloat(DType dtype);          // f32, f64, f16, bf16

constexpr int kMaxRank = 8;

/// A small non-owning list of int64 (shapes, strides, perms, axes). Build it
/// from a braced list, a std::vector or a pointer and a size. A braced list
/// lives until the end of the full expression, which covers a call.
class I64s {
public:
  I64s() = default;
  I64s(std::initializer_list<int64_t> list) : size_(list.size()) {
    data_ = list.begin(); // lives as long as the call's full expression
  }
  I64s(const std::vector<int64_t> &vec)
      : data_(vec.data()), size_(vec.size()) {}
  I64s(const int64_t *data, size_t size) : data_(data), size_(size) {}
  const int64_t *begin() const { return data_; }
  const int64_t *end() const { return data_ + size_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](size_t i) const { return data_[i]; }

private:
  const int64_t *data_ = nullptr;
  size_t size_ = 0;
};

/// A dense row-major view. The runtime never owns tensor memory: data points
/// into an arena, a mapped checkpoint or caller storage. A view with a null
/// data pointer stands for an absent optional operand or result.
struct Tensor {
  void *data = nullptr;
  DType dtype = DType::F32;
  int rank = 0;
  int64_t shape[kMaxRank] = {};

  /// A view of `data` with `shape`; rank over kMaxRank is clamped and caught
  /// by the kernels' checks (rank stays kMaxRank + 1 as a marker).
  static Tensor of(void *data, DType dtype, I64s shape);

  int64_t numel() const;
  size_t nbytes() const {
    return static_cast<size_t>(numel()) * dtypeSize(dtype);
  }
  bool present() const { return data != nullptr; }
  template <typename T> T *as() const { return static_cast<T *>(data); }
  std::vector<int64_t> dims() const { return {shape, shape + rank}; }
};

/// "f32[2,3]" (or "none" for an absent view), for messages.
std::string describe(const Tensor &t);
/// "[1,2,3]", for messages.
std::string describe(I64s list);

//===----------------------------------------------------------------------===//
// Host memory arena
//===----------------------------------------------------------------------===//

/// One host allocation handed out by bump offsets. The memory planner gives
/// static offsets (use `at`); `allocate` bumps for anything not planned, and
/// `mark`/`release` pop back to a mark. `peak` is the high-water mark in bytes.
class HostArena {
public:
  HostArena() = default;
  ~HostArena();
  HostArena(const HostArena &) = delete;
  HostArena &operator=(const HostArena &) = delete;

  /// Allocates `capacity` bytes aligned to `alignment` (a power of two, at
  /// least 8), zero-filled. Fails if already initialized.
  Status init(size_t capacity, size_t alignment = 64);
  /// Hands out [base, base + capacity) of memory owned elsewhere (a device
  /// allocation the host never touches): not zero-filled, not freed.
  Status adopt(void *base, size_t capacity, size_t alignment = 64);
  /// Bumps `bytes` rounded up to the alignment; `*out` receives the pointer.
  Status allocate(size_t bytes, void **out);
  /// The planned range [offset, offset + bytes): checked against capacity and
  /// counted in the peak.
  Status at(size_t offset, size_t bytes, void **out);

  size_t mark() const { return used_; }
  void release(size_t mark);
  void reset() { used_ = 0; }

  char *base() const { return base_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }

private:
  char *base_ = nullptr;
  size_t capacity_ = 0;
  size_t alignment_ = 64;
  size_t used_ = 0;
  size_t peak_ = 0;
  bool owned_ = true;
};

//===----------------------------------------------------------------------===//
// Half-precision conversions (round to nearest even)
//===----------------------------------------------------------------------===//

float halfToFloat(uint16_t bits);
uint16_t floatToHalf(float value);
float bfloat16ToFloat(uint16_t bits);
uint16_t floatToBfloat16(float value);

} // namespace dsc

/// The name generated code uses for a call's result.
using dsc_status = dsc::Status;

#endif // DSC_RUNTIME_H
