//===- ImportContext.h - state shared by the ONNX importer's parts -*- C++
//-*-===//
#ifndef DSC_COMPILER_IMPORT_IMPORTCONTEXT_H
#define DSC_COMPILER_IMPORT_IMPORTCONTEXT_H

#include "compiler/import/HostTensor.h"
#include "compiler/import/OnnxImporter.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

#include "llvm/ADT/StringMap.h"

#define ONNX_ML 1
#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dsc {

/// What an ONNX value name stands for during import: an SSA value, a host
/// constant (materialized as dsc.constant on first use), or a sequence.
struct ImportValue {
  mlir::Value value;
  std::optional<HostTensor> constant;
  std::optional<std::vector<ImportValue>> sequence;
};

class GraphImporter;

/// Result of trying to evaluate a node on host constants.
enum class FoldResult { Folded, NotFoldable, Error };

/// One ONNX node being converted: attribute and input accessors, output
/// setters, and a builder that infers result types.
class NodeContext {
public:
  NodeContext(GraphImporter &imp, const onnx::NodeProto &node,
              mlir::Location loc, int64_t opset);

  const onnx::NodeProto &node() const { return node_; }
  llvm::StringRef opType() const { return node_.op_type(); }
  int64_t opset() const { return opset_; }
  mlir::Location loc() const { return loc_; }
  mlir::OpBuilder &builder();
  mlir::MLIRContext *ctx();

  /// An error that names the node, its op type and the opset.
  mlir::InFlightDiagnostic error();

  // Attributes.
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  bool hasAttr(llvm::StringRef name) const { return attr(name) != nullptr; }
  int64_t attrInt(llvm::StringRef name, int64_t dflt) const;
  double attrFloat(llvm::StringRef name, double dflt) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef dflt) const;
  std::optional<std::vector<int64_t>> attrInts(llvm::StringRef name) const;

  // Inputs. Optional inputs may be absent (empty name or past the end).
  size_t numInputs() const { return node_.input_size(); }
  bool hasInput(size_t i) const;
  const ImportValue &input(size_t i) const;
  bool isConstant(size_t i) const;
  mlir::RankedTensorType type(size_t i);
  /// The SSA value of input i, materializing a constant if needed.
  mlir::FailureOr<mlir::Value> value(size_t i);
  /// Input i as a host constant; `what` says what it is for the error.
  mlir::FailureOr<HostTensor> constant(size_t i, llvm::StringRef what);
  /// Input i as a host constant holding exactly one value.
  mlir::FailureOr<HostTensor> scalarConstant(size_t i, llvm::StringRef what);
  /// Input i as a shape: a 1-D integer host constant, no dim negative.
  mlir::FailureOr<llvm::SmallVector<int64_t>>
  shapeConstant(size_t i, llvm::StringRef what);

  // Folding.
  /// The --max-constant-bytes limit.
  int64_t maxConstantBytes() const;
  /// Checks that a constant of `shape` and `kind` has a size that fits in
  /// 64 bits and stays within --max-constant-bytes; the error names both.
  mlir::LogicalResult checkConstantSize(llvm::ArrayRef<int64_t> shape,
                                        ElemKind kind);
  /// Called by a folder before it allocates a result of `shape` and `kind`:
  /// Folded when it may go on; NotFoldable when the result is larger than
  /// folding keeps (--max-constant-bytes, ImportOptions::foldLimit) and the
  /// op's handler can build it at run time instead; Error (emitted) when its
  /// size overflows, or when the op only folds (Range, Constant) and the
  /// result exceeds --max-constant-bytes.
  FoldResult checkFoldSize(llvm::ArrayRef<int64_t> shape, ElemKind kind);

  // Outputs.
  size_t numOutputs() const { return node_.output_size(); }
  bool outputUsed(size_t i) const;
  void setOutput(size_t i, mlir::Value v);
  void setOutput(size_t i, HostTensor t);
  void setOutput(size_t i, ImportValue v);

  /// Creates `opName` with result types inferred; inference errors are
  /// reported against this node. Fails without crashing on bad input.
  mlir::FailureOr<mlir::Operation *>
  create(llvm::StringRef opName, mlir::ValueRange operands,
         llvm::ArrayRef<mlir::NamedAttribute> attrs = {});
  mlir::FailureOr<mlir::Value>
  create1(llvm::StringRef opName, mlir::ValueRange operands,
          llvm::ArrayRef<mlir::NamedAttribute> attrs = {});
  /// A dsc.constant for a host tensor.
  mlir::Value materialize(const HostTensor &t);

  // Attribute builders.
  mlir::NamedAttribute named(llvm::StringRef name, mlir::Attribute a);
  mlir::NamedAttribute i64(llvm::StringRef name, int64_t v);
  mlir::NamedAttribute f64(llvm::StringRef name, double v);
  mlir::NamedAttribute boolean(llvm::StringRef name, bool v);
  mlir::NamedAttribute str(llvm::StringRef name, llvm::StringRef v);
  mlir::NamedAttribute array(llvm::StringRef name, llvm::ArrayRef<int64_t> v);

private:
  GraphImporter &imp_;
  const onnx::NodeProto &node_;
  mlir::Location loc_;
  int64_t opset_;
};

using NodeHandler = std::function<mlir::LogicalResult(NodeContext &)>;
using NodeFolder =
    std::function<FoldResult(NodeContext &, std::vector<HostTensor> &outputs)>;

/// The conversion table: ONNX op type to handler (builds dsc ops).
const llvm::StringMap<NodeHandler> &nodeHandlers();
/// The folding table: ONNX op type to host evaluation.
const llvm::StringMap<NodeFolder> &nodeFolders();

/// Parses an ONNX TensorProto's data (internal or external, confined to
/// `modelDir`). Returns std::nullopt with `*missing = true` when its external
/// file is absent; other problems are errors emitted at `loc`.
mlir::FailureOr<std::optional<HostTensor>>
readTensorData(const onnx::TensorProto &t, const std::string &modelDir,
               mlir::Location loc, bool *missing = nullptr);

/// Checks a stored tensor's dims: none negative, and its size in bytes fits
/// in 64 bits. Returns an error message that starts with `what` (e.g.
/// "initializer 'w'"), or "".
std::string checkTensorDims(const onnx::TensorProto &t, llvm::StringRef what);

/// Checks an external-data location; returns an error message or "".
std::string checkExternalLocation(const onnx::TensorProto &t,
                                  const std::string &modelDir);

} // namespace dsc

#endif // DSC_COMPILER_IMPORT_IMPORTCONTEXT_H
