//===- runtime.cpp - Status, tensor views, host arena, half floats --------===//

#include "dsc/runtime.h"

#include <cstdlib>
#include <cstring>

namespace dsc {

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok:
    return "ok";
  case StatusCode::InvalidArgument:
    return "invalid argument";
  case StatusCode::OutOfRange:
    return "out of range";
  case StatusCode::OutOfMemory:
    return "out of memory";
  case StatusCode::IoError:
    return "i/o error";
  case StatusCode::Unimplemented:
    return "unimplemented";
  }
  return "unknown";
}

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I8:
  case DType::U8:
  case DType::Bool:
    return 1;
  }
  return 0;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::I8:
    return "i8";
  case DType::U8:
    return "u8";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

bool isFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::F16 ||
         dtype == DType::BF16;
}

Tensor Tensor::of(void *data, DType dtype, I64s shape) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    t.rank = kMaxRank + 1; // rejected by every kernel's checks
    return t;
  }
  t.rank = static_cast<int>(shape.size());
  for (int i = 0; i < t.rank; ++i)
    t.shape[i] = shape[i];
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i)
    n *= shape[i];
  return n;
}

std::string describe(I64s list) {
  std::string s = "[";
  for (size_t i = 0; i < list.size(); ++i) {
    if (i)
      s += ",";
    s += std::to_string(list[i]);
  }
  return s + "]";
}

std::string describe(const Tensor &t) {
  if (!t.present())
    return "none";
  if (t.rank < 0 || t.rank > kMaxRank)
    return std::string(dtypeName(t.dtype)) + "[rank " + std::to_string(t.rank) +
           "]";
  return dtypeName(t.dtype) + describe(I64s(t.shape, t.rank));
}

//===----------------------------------------------------------------------===//
// HostArena
//===----------------------------------------------------------------------===//

HostArena::~HostArena() {
  if (owned_)
    std::free(base_);
}

static std::string arenaCall(const char *call, size_t a, size_t b) {
  return std::string("HostArena::") + call + "(" + std::to_string(a) + ", " +
         std::to_string(b) + ")";
}

Status HostArena::adopt(void *base, size_t capacity, size_t alignment) {
  if (base_)
    return Status::error(StatusCode::InvalidArgument,
                         arenaCall("adopt", capacity, alignment) +
                             ": arena already initialized");
  if (alignment < 8 || (alignment & (alignment - 1)) ||
      reinterpret_cast<uintptr_t>(base) % alignment)
    return Status::error(StatusCode::InvalidArgument,
                         arenaCall("adopt", capacity, alignment) +
                             ": base and alignment must be aligned powers of "
                             "two >= 8");
  base_ = static_cast<char *>(base);
  capacity_ = capacity;
  alignment_ = alignment;
  owned_ = false;
  used_ = peak_ = 0;
  return Status();
}

Status HostArena::init(size_t capacity, size_t alignment) {
  if (base_)
    return Status::error(StatusCode::InvalidArgument,
                         arenaCall("init", capacity, alignment) +
                             ": arena already initialized");
  if (alignment < 8 || (alignment & (alignment - 1)))
    return Status::error(StatusCode::InvalidArgument,
                         arenaCall("init", capacity, alignment) +
                             ": alignment must be a power of two >= 8");
  size_t rounded = (capacity + alignment - 1) / alignment * alignment;
  void *p = rounded ? std::aligned_alloc(alignment, rounded) : nullptr;
  if (rounded && !p)
    return Status::error(StatusCode::OutOfMemory,
                         arenaCall("init", capacity, alignment) +
                             ": host allocation failed");
  if (p)
    std::memset(p, 0, rounded);
  base_ = static_cast<char *>(p);
  capacity_ = rounded;
  alignment_ = alignment;
  used_ = peak_ = 0;
  return Status();
}

Status HostArena::allocate(size_t bytes, void **out) {
  size_t rounded = (bytes + alignment_ - 1) / alignment_ * alignment_;
  if (rounded > capacity_ - used_)
    return Status::error(StatusCode::OutOfMemory,
                         "HostArena::allocate(" + std::to_string(bytes) +
                             "): " + std::to_string(used_) + " of " +
                             std::to_string(capacity_) + " bytes in use");
  *out = base_ + used_;
  used_ += rounded;
  if (used_ > peak_)
    peak_ = used_;
  return Status();
}

Status HostArena::at(size_t offset, size_t bytes, void **out) {
  if (offset > capacity_ || bytes > capacity_ - offset)
    return Status::error(StatusCode::OutOfRange,
                         arenaCall("at", offset, bytes) + ": beyond capacity " +
                             std::to_string(capacity_));
  if (offset % alignment_)
    return Status::error(StatusCode::InvalidArgument,
                         arenaCall("at", offset, bytes) +
                             ": offset not aligned to " +
                             std::to_string(alignment_));
  *out = base_ + offset;
  if (offset + bytes > peak_)
    peak_ = offset + bytes;
  return Status();
}

void HostArena::release(size_t mark) {
  if (mark < used_)
    used_ = mark;
}

//===----------------------------------------------------------------------===//
// Half floats
//===----------------------------------------------------------------------===//

static uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

static float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) // inf or nan
    return bitsFloat(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) { // zero or subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffff;
  if (absu >= 0x7f800000) // inf or nan (keep nan quiet)
    return sign | 0x7c00 | (absu > 0x7f800000 ? 0x200 : 0);
  if (absu >= 0x477ff000) // rounds to >= 65520: overflow to inf
    return sign | 0x7c00;
  if (absu < 0x38800000) { // below the smallest normal half, 2^-14
    // Subnormal: scale into an integer count of 2^-24 and round to even.
    float a = bitsFloat(absu) * 16777216.0f; // exact: power-of-two scaling
    uint32_t m = static_cast<uint32_t>(a);
    float rem = a - static_cast<float>(m);
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

float bfloat16ToFloat(uint16_t bits) {
  return bitsFloat(static_cast<uint32_t>(bits) << 16);
}

uint16_t floatToBfloat16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffff) > 0x7f800000) // nan: keep it quiet
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

} // namespace dsc
