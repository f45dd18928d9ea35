//===- HostTensor.cpp - small constant tensors known at import ------------===//
#include "compiler/import/HostTensor.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <functional>

using namespace mlir;

namespace dsc {

bool isFloatKind(ElemKind k) {
  return k == ElemKind::F32 || k == ElemKind::F64 || k == ElemKind::F16 ||
         k == ElemKind::BF16;
}

Type toMlirType(MLIRContext *ctx, ElemKind k) {
  switch (k) {
  case ElemKind::F32:
    return Float32Type::get(ctx);
  case ElemKind::F64:
    return Float64Type::get(ctx);
  case ElemKind::F16:
    return Float16Type::get(ctx);
  case ElemKind::BF16:
    return BFloat16Type::get(ctx);
  case ElemKind::I64:
    return IntegerType::get(ctx, 64);
  case ElemKind::I32:
    return IntegerType::get(ctx, 32);
  case ElemKind::I16:
    return IntegerType::get(ctx, 16);
  case ElemKind::I8:
    return IntegerType::get(ctx, 8);
  case ElemKind::U8:
    return IntegerType::get(ctx, 8, IntegerType::Unsigned);
  case ElemKind::Bool:
    return IntegerType::get(ctx, 1);
  }
  return {};
}

std::optional<ElemKind> fromMlirType(Type t) {
  if (t.isF32())
    return ElemKind::F32;
  if (t.isF64())
    return ElemKind::F64;
  if (t.isF16())
    return ElemKind::F16;
  if (t.isBF16())
    return ElemKind::BF16;
  if (auto i = dyn_cast<IntegerType>(t)) {
    if (i.isUnsigned())
      return i.getWidth() == 8 ? std::optional(ElemKind::U8) : std::nullopt;
    switch (i.getWidth()) {
    case 1:
      return ElemKind::Bool;
    case 8:
      return ElemKind::I8;
    case 16:
      return ElemKind::I16;
    case 32:
      return ElemKind::I32;
    case 64:
      return ElemKind::I64;
    }
  }
  return std::nullopt;
}

// Numbers from onnx.proto's TensorProto.DataType.
std::optional<ElemKind> fromOnnxDataType(int dataType) {
  switch (dataType) {
  case 1:
    return ElemKind::F32;
  case 2:
    return ElemKind::U8;
  case 3:
    return ElemKind::I8;
  case 5:
    return ElemKind::I16;
  case 6:
    return ElemKind::I32;
  case 7:
    return ElemKind::I64;
  case 9:
    return ElemKind::Bool;
  case 10:
    return ElemKind::F16;
  case 11:
    return ElemKind::F64;
  case 16:
    return ElemKind::BF16;
  }
  return std::nullopt;
}

const char *onnxDataTypeName(int dataType) {
  static const char *names[] = {
      "UNDEFINED",      "FLOAT",        "UINT8",          "INT8",
      "UINT16",         "INT16",        "INT32",          "INT64",
      "STRING",         "BOOL",         "FLOAT16",        "DOUBLE",
      "UINT32",         "UINT64",       "COMPLEX64",      "COMPLEX128",
      "BFLOAT16",       "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
      "FLOAT8E5M2FNUZ", "UINT4",        "INT4",           "FLOAT4E2M1"};
  if (dataType >= 0 && dataType < (int)(sizeof(names) / sizeof(names[0])))
    return names[dataType];
  return "UNKNOWN";
}

const char *elemKindName(ElemKind k) {
  switch (k) {
  case ElemKind::F32:
    return "f32";
  case ElemKind::F64:
    return "f64";
  case ElemKind::F16:
    return "f16";
  case ElemKind::BF16:
    return "bf16";
  case ElemKind::I64:
    return "i64";
  case ElemKind::I32:
    return "i32";
  case ElemKind::I16:
    return "i16";
  case ElemKind::I8:
    return "i8";
  case ElemKind::U8:
    return "u8";
  case ElemKind::Bool:
    return "i1";
  }
  return "?";
}

int64_t elemKindBytes(ElemKind k) {
  switch (k) {
  case ElemKind::F64:
  case ElemKind::I64:
    return 8;
  case ElemKind::F32:
  case ElemKind::I32:
    return 4;
  case ElemKind::F16:
  case ElemKind::BF16:
  case ElemKind::I16:
    return 2;
  case ElemKind::I8:
  case ElemKind::U8:
  case ElemKind::Bool:
    return 1;
  }
  return 8;
}

std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return std::nullopt;
  return n;
}

std::optional<int64_t> checkedByteSize(llvm::ArrayRef<int64_t> shape,
                                       ElemKind kind) {
  auto n = checkedNumElements(shape);
  int64_t bytes;
  if (!n || llvm::MulOverflow(*n, elemKindBytes(kind), bytes) ||
      bytes > kMaxTensorBytes)
    return std::nullopt;
  return bytes;
}

std::string formatShape(llvm::ArrayRef<int64_t> shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    r += (i ? "," : "") + std::to_string(shape[i]);
  return r + "]";
}

int64_t saturatingToInt64(double v) {
  if (std::isnan(v))
    return 0;
  // 2^63 is exactly representable; every double below it converts.
  if (v >= 9223372036854775808.0)
    return INT64_MAX;
  if (v < -9223372036854775808.0)
    return INT64_MIN;
  return (int64_t)v;
}

int64_t productOf(llvm::ArrayRef<int64_t> dims) {
  if (llvm::is_contained(dims, 0))
    return 0;
  int64_t n = 1;
  for (int64_t d : dims)
    if (llvm::MulOverflow(n, d, n))
      return INT64_MAX;
  return n;
}

// An empty tensor may have dims whose product overflows ([3, 2^63-1, 0]):
// it has no elements, whatever the others are. (A tensor with elements holds
// them, so its product fits.)
int64_t HostTensor::numElements() const { return productOf(shape); }

int64_t HostTensor::intAt(size_t i) const {
  return isFloat() ? saturatingToInt64(floats[i]) : ints[i];
}

double HostTensor::floatAt(size_t i) const {
  return isFloat() ? floats[i] : (double)ints[i];
}

std::vector<int64_t> HostTensor::asInts() const {
  std::vector<int64_t> r(numElements());
  for (size_t i = 0; i < r.size(); ++i)
    r[i] = intAt(i);
  return r;
}

HostTensor HostTensor::ofInts(llvm::ArrayRef<int64_t> values,
                              llvm::ArrayRef<int64_t> shape, ElemKind kind) {
  HostTensor t;
  t.kind = kind;
  t.shape.assign(shape.begin(), shape.end());
  t.ints.assign(values.begin(), values.end());
  return t;
}

HostTensor HostTensor::ofFloats(llvm::ArrayRef<double> values,
                                llvm::ArrayRef<int64_t> shape, ElemKind kind) {
  HostTensor t;
  t.kind = kind;
  t.shape.assign(shape.begin(), shape.end());
  t.floats.assign(values.begin(), values.end());
  return t;
}

HostTensor HostTensor::generate(ElemKind kind, llvm::ArrayRef<int64_t> shape,
                                const std::function<double(int64_t)> &f) {
  HostTensor t;
  t.kind = kind;
  t.shape.assign(shape.begin(), shape.end());
  int64_t n = t.numElements();
  if (t.isFloat()) {
    t.floats.resize(n);
    for (int64_t i = 0; i < n; ++i)
      t.floats[i] = f(i);
  } else {
    t.ints.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      double v = f(i);
      t.ints[i] = kind == ElemKind::Bool ? (v != 0.0) : saturatingToInt64(v);
    }
  }
  return t;
}

// An integer as a value of kind `k`: narrowing wraps, as C++ and ONNX Cast
// do, so a host constant never holds a value its IR type cannot.
static int64_t wrapToKind(int64_t v, ElemKind k) {
  switch (k) {
  case ElemKind::I32:
    return (int32_t)(uint32_t)(uint64_t)v;
  case ElemKind::I16:
    return (int16_t)(uint16_t)(uint64_t)v;
  case ElemKind::I8:
    return (int8_t)(uint8_t)(uint64_t)v;
  case ElemKind::U8:
    return (uint8_t)(uint64_t)v;
  default:
    return v;
  }
}

HostTensor HostTensor::castTo(ElemKind to) const {
  HostTensor t;
  t.kind = to;
  t.shape = shape;
  int64_t n = numElements();
  if (isFloatKind(to)) {
    t.floats.resize(n);
    for (int64_t i = 0; i < n; ++i)
      t.floats[i] = floatAt(i);
    if (to == ElemKind::F32)
      for (double &v : t.floats)
        v = (double)(float)v;
  } else {
    t.ints.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      if (to == ElemKind::Bool)
        t.ints[i] = isFloat() ? floats[i] != 0.0 : ints[i] != 0;
      else
        t.ints[i] = wrapToKind(
            isFloat() ? saturatingToInt64(std::trunc(floats[i])) : ints[i], to);
    }
  }
  return t;
}

RankedTensorType HostTensor::type(MLIRContext *ctx) const {
  return RankedTensorType::get(shape, toMlirType(ctx, kind));
}

DenseElementsAttr HostTensor::toAttr(MLIRContext *ctx) const {
  RankedTensorType ty = type(ctx);
  int64_t n = numElements();
  switch (kind) {
  case ElemKind::F32: {
    std::vector<float> v(floats.begin(), floats.end());
    return DenseElementsAttr::get(ty, llvm::ArrayRef<float>(v));
  }
  case ElemKind::F64:
    return DenseElementsAttr::get(ty, llvm::ArrayRef<double>(floats));
  case ElemKind::F16:
  case ElemKind::BF16: {
    const llvm::fltSemantics &sem = kind == ElemKind::F16
                                        ? llvm::APFloat::IEEEhalf()
                                        : llvm::APFloat::BFloat();
    std::vector<llvm::APFloat> v;
    v.reserve(n);
    for (double d : floats) {
      llvm::APFloat f(d);
      bool lost;
      f.convert(sem, llvm::APFloat::rmNearestTiesToEven, &lost);
      v.push_back(f);
    }
    return DenseElementsAttr::get(ty, v);
  }
  case ElemKind::Bool: {
    std::vector<char> v(ints.begin(), ints.end());
    llvm::SmallVector<bool> b(v.begin(), v.end());
    return DenseElementsAttr::get(ty, llvm::ArrayRef<bool>(b));
  }
  default: {
    unsigned width = ty.getElementType().getIntOrFloatBitWidth();
    std::vector<llvm::APInt> v;
    v.reserve(n);
    for (int64_t x : ints)
      v.emplace_back(width, (uint64_t)x, /*isSigned=*/kind != ElemKind::U8,
                     /*implicitTrunc=*/true);
    return DenseElementsAttr::get(ty, v);
  }
  }
}

llvm::SmallVector<int64_t> stridesOf(llvm::ArrayRef<int64_t> shape) {
  // Strides past INT64_MAX saturate: only a shape with no elements gets
  // there ([0, 3, 2^63-1], found by fuzzing), and its strides index nothing.
  llvm::SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t i = (int64_t)shape.size() - 2; i >= 0; --i)
    if (llvm::MulOverflow(s[i + 1], shape[i + 1], s[i]))
      s[i] = INT64_MAX;
  return s;
}

} // namespace dsc
