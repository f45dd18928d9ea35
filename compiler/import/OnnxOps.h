//===- OnnxOps.h - ONNX attribute canonicalization shared by import and
//===- folding --------------------------------------------------*- C++ -*-===//
//
// Both the dsc-op handlers and the host folders of an ONNX op need the same
// canonical parameters (a Slice's offsets, a Reshape's resolved shape, a
// reduction's axes). They are computed here once.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_COMPILER_IMPORT_ONNXOPS_H
#define DSC_COMPILER_IMPORT_ONNXOPS_H

#include "compiler/import/ImportContext.h"

namespace dsc {

struct SliceParams {
  llvm::SmallVector<int64_t> offsets, sizes, strides;
};

mlir::FailureOr<SliceParams> sliceParams(NodeContext &c,
                                         llvm::ArrayRef<int64_t> shape);
mlir::FailureOr<llvm::SmallVector<int64_t>>
reshapeTarget(NodeContext &c, llvm::ArrayRef<int64_t> shape);
/// Output shape of Flatten, Squeeze or Unsqueeze (all become dsc.reshape).
mlir::FailureOr<llvm::SmallVector<int64_t>>
reshapeLikeTarget(NodeContext &c, llvm::ArrayRef<int64_t> shape);
/// Sorted, normalized reduction axes; std::nullopt means "no-op".
mlir::FailureOr<std::optional<llvm::SmallVector<int64_t>>>
reduceAxes(NodeContext &c, int64_t rank);
mlir::FailureOr<llvm::SmallVector<int64_t>> transposePerm(NodeContext &c,
                                                          int64_t rank);
mlir::FailureOr<llvm::SmallVector<int64_t>>
splitSizes(NodeContext &c, llvm::ArrayRef<int64_t> shape, int64_t axis,
           size_t numOutputs);
mlir::FailureOr<int64_t> axisAttr(NodeContext &c, llvm::StringRef name,
                                  int64_t dflt, int64_t rank);
/// ConstantOfShape's fill value (the `value` attribute, one element).
mlir::FailureOr<HostTensor> constantOfShapeValue(NodeContext &c);
/// Gather's axis; data of rank 0 is an error.
mlir::FailureOr<int64_t> gatherAxis(NodeContext &c, int64_t rank);
/// Expand's result shape: input 1 (non-negative dims) broadcast with `shape`.
mlir::FailureOr<llvm::SmallVector<int64_t>>
expandTarget(NodeContext &c, llvm::ArrayRef<int64_t> shape);

/// CumSum's canonical parameters: the axis (input 1, a scalar constant,
/// normalized for `rank`) and the exclusive and reverse attributes.
struct CumSumParams {
  int64_t axis = 0;
  bool exclusive = false, reverse = false;
};
mlir::FailureOr<CumSumParams> cumSumParams(NodeContext &c, int64_t rank);
/// Tile's repeats (input 1: one non-negative count per dim of `shape`)
/// and the tiled shape, sizes checked.
struct TileParams {
  llvm::SmallVector<int64_t> repeats, shape;
};
mlir::FailureOr<TileParams> tileParams(NodeContext &c,
                                       llvm::ArrayRef<int64_t> shape);

/// GatherElements: the flat (row-major) index into `data` of every output
/// element, for constant `indices` of data's rank; negative indices wrap.
/// An index out of range or a shape mismatch is an error on the node.
mlir::FailureOr<std::vector<int64_t>>
gatherElementsSources(NodeContext &c, llvm::ArrayRef<int64_t> dataShape,
                      const HostTensor &indices);

/// ScatterND or ScatterElements (the node's op) with constant `indices`
/// and reduction "none": for every element of the result, where it comes
/// from in concat(flatten(data), flatten(updates)): its own index below
/// numElements(data), or that plus the update's flat index where an update
/// writes it (the last write wins where indices repeat). Negative indices
/// wrap; one out of range, or updates of the wrong shape, is an error on
/// the node.
mlir::FailureOr<std::vector<int64_t>>
scatterSources(NodeContext &c, llvm::ArrayRef<int64_t> dataShape,
               const HostTensor &indices, llvm::ArrayRef<int64_t> updatesShape);

/// Ops that dsc evaluates at compile time only (no run-time dsc op).
bool isFoldOnlyOp(llvm::StringRef op);

/// Checks a node against its op's ONNX signature (input and output counts,
/// required inputs present, attributes known and of the declared type).
/// Runs on every node before any handler or folder sees it.
mlir::LogicalResult checkNodeSignature(NodeContext &c);

} // namespace dsc

#endif // DSC_COMPILER_IMPORT_ONNXOPS_H
