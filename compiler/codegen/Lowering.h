//===- Lowering.h - Shared pieces of the op lowerings -----------*- C++ -*-===//
//
// Internal to compiler/codegen. EmitCpp.cpp walks each function and, for
// every op, asks the op-family lowerings (Lower*.cpp) for the runtime call
// that computes it. A lowering sees the op and the C++ names of its operand
// and result views; it returns the call as a C++ expression of type
// dsc::Status (plus any lines that must precede it), and EmitCpp.cpp wraps
// it in the status check that names the op and its ONNX node.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_COMPILER_CODEGEN_LOWERING_H
#define DSC_COMPILER_CODEGEN_LOWERING_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace dsc::codegen {

/// A collective a lowered op issues, for the manifest (comm.h's
/// CollectiveSpec): EmitCpp.cpp adds the dtype and element counts.
struct CollectiveCall {
  std::string kind; // "all_reduce", "all_gather" or "reduce_scatter"
  std::string what; // the label every rank and message uses
  uint32_t axesMask = 0;
  mlir::Value input, output;
};

/// What a lowering may ask about the function being emitted.
struct LowerContext {
  /// The C++ expression naming the dsc::Tensor view of a value.
  std::function<std::string(mlir::Value)> view;
  /// The position of the op in its function (dropout seeds use it).
  int64_t opIndex = 0;
  /// The module's rank grid (`shard.grid`, replicas x group): its symbol
  /// and shape; empty when the module has none (a program for one rank).
  std::string gridName;
  llvm::ArrayRef<int64_t> gridShape;
  /// Told of every collective a lowered call issues (for the manifest).
  std::function<void(const CollectiveCall &)> collective;
};

/// One runtime call: `setup` lines (may be empty, each ending in '\n') and
/// the call expression itself.
struct LoweredCall {
  std::string setup;
  std::string call;
};

/// Each family returns std::nullopt when the op is not one of its own,
/// failure() after reporting an error on the op, or the call.
using LowerResult = mlir::FailureOr<std::optional<LoweredCall>>;

LowerResult lowerElementwise(mlir::Operation *op, const LowerContext &ctx);
/// The rt::UnaryOp / rt::BinaryOp enumerator of an elementwise dsc op
/// ("Tanh", "Add", ...), or null when it is not one.
const char *unaryKind(mlir::Operation *op);
const char *binaryKind(mlir::Operation *op);
LowerResult lowerLinalg(mlir::Operation *op, const LowerContext &ctx);
LowerResult lowerNormLoss(mlir::Operation *op, const LowerContext &ctx);
LowerResult lowerDataMovement(mlir::Operation *op, const LowerContext &ctx);
LowerResult lowerOptimizer(mlir::Operation *op, const LowerContext &ctx);
/// The `shard` dialect's collectives (all_reduce, all_gather,
/// reduce_scatter through the Communicator; all_slice as a local copy).
LowerResult lowerCollectives(mlir::Operation *op, const LowerContext &ctx);

//===----------------------------------------------------------------------===//
// C++ literals
//===----------------------------------------------------------------------===//

/// A double that reads back exactly: "0.1", "1e-05", "-inf" as an
/// expression (std::numeric_limits), "nan" likewise.
std::string cppDouble(double value);
/// A float literal with an f suffix that reads back exactly.
std::string cppFloat(float value);
/// An int64 literal ("-9223372036854775807 - 1" for the minimum).
std::string cppInt(int64_t value);
/// "{1, 2, 3}" (an I64s or std::vector<int64_t> initializer).
std::string cppInts(llvm::ArrayRef<int64_t> values);
/// "std::optional<double>(0.5)" or "std::nullopt".
std::string cppOptional(std::optional<double> value);
/// A quoted C++ string literal with escapes.
std::string cppString(llvm::StringRef text);
inline const char *cppBool(bool value) { return value ? "true" : "false"; }

/// "cpu::ConvAttrs{{strides}, {pads}, {dilations}, group}".
std::string cppConvAttrs(llvm::ArrayRef<int64_t> strides,
                         llvm::ArrayRef<int64_t> pads,
                         llvm::ArrayRef<int64_t> dilations, int64_t group);

/// Builds "callee(arg0, arg1, ...)" for a LoweredCall.
std::string cppCall(llvm::StringRef callee,
                    llvm::ArrayRef<std::string> arguments);

} // namespace dsc::codegen

#endif // DSC_COMPILER_CODEGEN_LOWERING_H
