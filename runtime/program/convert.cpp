//===- convert.cpp - Element conversions between tensor dtypes ------------===//

#include "program/convert.h"

#include <cstring>
#include <limits>

namespace dsc::program {

namespace {

bool isInt(DType d) {
  return d == DType::I64 || d == DType::I32 || d == DType::I8 || d == DType::U8;
}

double loadFloat(const void *p, DType d, size_t i) {
  switch (d) {
  case DType::F32:
    return static_cast<const float *>(p)[i];
  case DType::F64:
    return static_cast<const double *>(p)[i];
  case DType::F16:
    return halfToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::BF16:
    return bfloat16ToFloat(static_cast<const uint16_t *>(p)[i]);
  default:
    return 0;
  }
}

void storeFloat(void *p, DType d, size_t i, double v) {
  switch (d) {
  case DType::F32:
    static_cast<float *>(p)[i] = static_cast<float>(v);
    break;
  case DType::F64:
    static_cast<double *>(p)[i] = v;
    break;
  case DType::F16:
    static_cast<uint16_t *>(p)[i] = floatToHalf(static_cast<float>(v));
    break;
  case DType::BF16:
    static_cast<uint16_t *>(p)[i] = floatToBfloat16(static_cast<float>(v));
    break;
  default:
    break;
  }
}

int64_t loadInt(const void *p, DType d, size_t i) {
  switch (d) {
  case DType::I64:
    return static_cast<const int64_t *>(p)[i];
  case DType::I32:
    return static_cast<const int32_t *>(p)[i];
  case DType::I8:
    return static_cast<const int8_t *>(p)[i];
  case DType::U8:
  case DType::Bool:
    return static_cast<const uint8_t *>(p)[i];
  default:
    return 0;
  }
}

template <typename T> bool fits(int64_t v) {
  return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         v <= static_cast<int64_t>(std::numeric_limits<T>::max());
}

bool storeInt(void *p, DType d, size_t i, int64_t v) {
  switch (d) {
  case DType::I64:
    static_cast<int64_t *>(p)[i] = v;
    return true;
  case DType::I32:
    static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v);
    return fits<int32_t>(v);
  case DType::I8:
    static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v);
    return fits<int8_t>(v);
  case DType::U8:
  case DType::Bool:
    static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(v);
    return fits<uint8_t>(v);
  default:
    return false;
  }
}

} // namespace

bool canConvert(DType from, DType to) {
  if (from == to)
    return true;
  if (isFloat(from) && isFloat(to))
    return true;
  return isInt(from) && isInt(to);
}

bool convertElements(const void *src, DType from, void *dst, DType to,
                     size_t count, size_t *badIndex) {
  if (from == to) {
    std::memcpy(dst, src, count * dtypeSize(to));
    return true;
  }
  if (isFloat(from)) {
    for (size_t i = 0; i < count; ++i)
      storeFloat(dst, to, i, loadFloat(src, from, i));
    return true;
  }
  for (size_t i = 0; i < count; ++i)
    if (!storeInt(dst, to, i, loadInt(src, from, i))) {
      if (badIndex)
        *badIndex = i;
      return false;
    }
  return true;
}

std::string describeType(DType dtype, const int64_t *shape, int rank) {
  return std::string(dtypeName(dtype)) +
         describe(I64s(shape, static_cast<size_t>(rank)));
}

Status copyInto(const Tensor &src, const Tensor &dst, const std::string &what) {
  bool sameShape = src.rank == dst.rank;
  for (int i = 0; sameShape && i < src.rank; ++i)
    sameShape = src.shape[i] == dst.shape[i];
  if (!sameShape)
    return Status::error(StatusCode::InvalidArgument,
                         what + " has shape " + describe(src) +
                             " but the program expects " + describe(dst));
  if (!canConvert(src.dtype, dst.dtype))
    return Status::error(StatusCode::InvalidArgument,
                         what + " has dtype " + dtypeName(src.dtype) +
                             " but the program expects " + describe(dst) +
                             " (no conversion from " + dtypeName(src.dtype) +
                             " to " + dtypeName(dst.dtype) + ")");
  size_t bad = 0;
  if (!convertElements(src.data, src.dtype, dst.data, dst.dtype,
                       static_cast<size_t>(dst.numel()), &bad))
    return Status::error(StatusCode::OutOfRange,
                         what + ": element " + std::to_string(bad) + " (" +
                             std::to_string(loadInt(src.data, src.dtype, bad)) +
                             ") does not fit " + dtypeName(dst.dtype));
  return Status();
}

double mulRounded(double x, double s, DType dtype) {
  return dtype == DType::F32 ? double(float(x) * float(s)) : x * s;
}

double scalarValue(const Tensor &t) {
  if (isFloat(t.dtype))
    return loadFloat(t.data, t.dtype, 0);
  return static_cast<double>(loadInt(t.data, t.dtype, 0));
}

void fillValue(const Tensor &t, double value) {
  size_t n = static_cast<size_t>(t.numel());
  for (size_t i = 0; i < n; ++i) {
    if (isFloat(t.dtype))
      storeFloat(t.data, t.dtype, i, value);
    else
      storeInt(t.data, t.dtype, i, static_cast<int64_t>(value));
  }
}

void setIntScalar(const Tensor &t, int64_t value) {
  if (isFloat(t.dtype))
    storeFloat(t.data, t.dtype, 0, static_cast<double>(value));
  else
    storeInt(t.data, t.dtype, 0, value);
}

} // namespace dsc::program
