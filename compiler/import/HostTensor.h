//===- HostTensor.h - small constant tensors known at import ----*- C++ -*-===//
//
// The importer evaluates shape computations (Shape, Gather, Concat, Range,
// ConstantOfShape, ...) on host tensors so that no shape arithmetic reaches
// the IR. A HostTensor keeps integers exactly (int64) and floats as double.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_COMPILER_IMPORT_HOSTTENSOR_H
#define DSC_COMPILER_IMPORT_HOSTTENSOR_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsc {

/// Element kinds the importer understands, named as in the IR.
enum class ElemKind { F32, F64, F16, BF16, I64, I32, I16, I8, U8, Bool };

bool isFloatKind(ElemKind k);
mlir::Type toMlirType(mlir::MLIRContext *ctx, ElemKind k);
std::optional<ElemKind> fromMlirType(mlir::Type t);
/// ONNX TensorProto::DataType number to ElemKind.
std::optional<ElemKind> fromOnnxDataType(int dataType);
const char *onnxDataTypeName(int dataType);
const char *elemKindName(ElemKind k);
/// Bytes of one element of `k` in the IR (a bool takes one byte).
int64_t elemKindBytes(ElemKind k);

/// Elements of a tensor of `shape`, or std::nullopt when a dim is negative
/// or the product does not fit in int64. Every size the importer derives
/// from a file goes through this (or checkedByteSize) before it is used.
std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape);
/// The most bytes a tensor may take: 2^48 (256 TiB), beyond the memory of
/// any machine, and small enough that every later size computation (bits
/// = bytes * 8, sums over the tensors of a step, aligned offsets) stays
/// far from int64's limit.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 48;
/// The reason a size fails checkedByteSize, for messages after a shape.
constexpr const char *kTensorTooLarge =
    "whose size in bytes is more than 2^48 (256 TiB)";
/// Bytes of a tensor of `shape` and `kind`; std::nullopt as above, or when
/// it is more than kMaxTensorBytes.
std::optional<int64_t> checkedByteSize(llvm::ArrayRef<int64_t> shape,
                                       ElemKind kind);
/// "[2,3]", for messages.
std::string formatShape(llvm::ArrayRef<int64_t> shape);
/// `v` as int64 without undefined behaviour: NaN is 0, out-of-range values
/// saturate (a float used as a shape or index is then rejected by range
/// checks instead of wrapping).
int64_t saturatingToInt64(double v);

struct HostTensor {
  ElemKind kind = ElemKind::I64;
  llvm::SmallVector<int64_t> shape;
  std::vector<int64_t> ints;  // integer and bool kinds
  std::vector<double> floats; // float kinds

  /// Only for tensors built through checked sizes (all host tensors are).
  int64_t numElements() const;
  bool isFloat() const { return isFloatKind(kind); }
  /// Value i as int64 / double regardless of kind.
  int64_t intAt(size_t i) const;
  double floatAt(size_t i) const;
  std::vector<int64_t> asInts() const;

  static HostTensor ofInts(llvm::ArrayRef<int64_t> values,
                           llvm::ArrayRef<int64_t> shape,
                           ElemKind kind = ElemKind::I64);
  static HostTensor ofFloats(llvm::ArrayRef<double> values,
                             llvm::ArrayRef<int64_t> shape,
                             ElemKind kind = ElemKind::F32);
  /// A tensor of `kind` and `shape` filled by f(i) (as double).
  static HostTensor generate(ElemKind kind, llvm::ArrayRef<int64_t> shape,
                             const std::function<double(int64_t)> &f);
  /// Converts to another element kind with C++ cast semantics.
  HostTensor castTo(ElemKind to) const;

  mlir::RankedTensorType type(mlir::MLIRContext *ctx) const;
  mlir::DenseElementsAttr toAttr(mlir::MLIRContext *ctx) const;
};

/// Row-major strides of `shape`.
llvm::SmallVector<int64_t> stridesOf(llvm::ArrayRef<int64_t> shape);
/// The product of `dims`: 0 when one of them is 0 (before any other could
/// overflow), INT64_MAX when it overflows. Folders loop over such products;
/// a shape with no elements may have other dims near 2^63.
int64_t productOf(llvm::ArrayRef<int64_t> dims);

} // namespace dsc

#endif // DSC_COMPILER_IMPORT_HOSTTENSOR_H
