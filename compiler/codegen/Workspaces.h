//===- Workspaces.h - Library workspaces a compiled step will take -*- C++
//-*-===//
//
// Internal to compiler/codegen and the memory report. Beside the tensors
// and the arena the code generator plans, the CUDA runtime holds library
// workspaces: cuBLASLt's, and a scratch buffer its kernels share, sized by
// the largest call that needs one. Estimated here from the step's ops with
// the runtime's own rules (dsc/workspaces.h), so that the plan a report
// prints, and the budget `--recompute auto` checks, hold what the program
// will take; the program prints what it took.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_COMPILER_CODEGEN_WORKSPACES_H
#define DSC_COMPILER_CODEGEN_WORKSPACES_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>

namespace dsc::codegen {

struct WorkspaceEstimate {
  uint64_t fixed = 0;     // cuBLASLt's
  uint64_t scratch = 0;   // the shared scratch buffer at its largest
  std::string scratchFor; // the call that sizes it
  uint64_t total() const { return fixed + scratch; }
};

/// The library workspaces of `module`'s step per rank; none for a target
/// without device memory (the CPU's kernels take theirs from the heap).
WorkspaceEstimate estimateWorkspaces(mlir::ModuleOp module);

} // namespace dsc::codegen

#endif // DSC_COMPILER_CODEGEN_WORKSPACES_H
