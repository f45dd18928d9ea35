//===- Summary.h - what an imported model holds, for people and tools -----===//
#ifndef DSC_TOOLS_DSC_SUMMARY_H
#define DSC_TOOLS_DSC_SUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace dsc {

/// Bytes of a tensor type (booleans count one byte).
int64_t tensorBytes(mlir::Type tensorType);

/// Parameters, buffers, inputs, outputs and an op histogram, as text.
void printSummary(mlir::ModuleOp module, llvm::raw_ostream &os);
/// The same as one JSON object.
void printSummaryJson(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace dsc

#endif // DSC_TOOLS_DSC_SUMMARY_H
