//===- OnnxImporter.h - ONNX ModelProto to the dsc dialect ------*- C++ -*-===//
//
// Reads an ONNX training graph (model and scalar loss) and builds one
// `func.func @forward` in the dsc dialect with static shapes:
//   - float initializers that reach the loss differentiably become trainable
//     parameters (`dsc.param`), one argument per initializer, so a tied
//     weight stays one parameter;
//   - other initializers become constants (small, needed for folding) or
//     non-trainable buffers (`dsc.buffer`, read at run time);
//   - graph inputs become batch inputs (`dsc.input`);
//   - the scalar output is the loss, returned first (`dsc.output`); updated
//     batch-norm running statistics follow (`dsc.buffer_update`).
// Shape computations fold at import. ONNX node names become locations.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_COMPILER_IMPORT_ONNXIMPORTER_H
#define DSC_COMPILER_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsc {

struct ImportOptions {
  /// Sets dim 0 of every graph input whose dim 0 is symbolic.
  std::optional<int64_t> microBatch;
  /// Full static shapes for named graph inputs (`--input-shape x=4x64`).
  std::map<std::string, std::vector<int64_t>> inputShapes;
  /// Require a scalar loss output (training graph). Off: import any graph.
  bool requireLoss = true;
  /// Largest constant (in elements) that folding keeps; larger results are
  /// left to the op's handler.
  int64_t foldLimit = 1 << 22;
  /// Largest constant (in bytes) that folding may materialize at all; a
  /// node whose folded result would be larger is an error
  /// (`--max-constant-bytes`). It bounds the importer's memory.
  int64_t maxConstantBytes = 256 << 20;
};

/// Imports the model at `path`. Errors are reported through the context's
/// diagnostic engine, located at the ONNX node; returns null on error.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxFile(mlir::MLIRContext &ctx,
                                                 const std::string &path,
                                                 const ImportOptions &opts);

/// ONNX operator types (default domain) the importer converts, sorted.
std::vector<std::string> supportedOnnxOps();

/// Oldest and newest default-domain opset the importer reads.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 23;

} // namespace dsc

#endif // DSC_COMPILER_IMPORT_ONNXIMPORTER_H
