//===- FuseElementwise.h - a dsc.fused op as one CUDA kernel ----*- C++ -*-===//
//
// Internal to compiler/codegen, for targets with generated kernels. The
// chains themselves are chosen by dsc-fuse-elementwise (passes/), which the
// IR shows as `dsc.fused "elementwise"` ops; this file only translates one
// such op into a kernel and its host launcher.
//
// The kernel computes each body op with the runtime's own device functions
// (runtime/cuda/elementwise_ops.cuh) in op order, so a fused chain gives the
// bits the same ops give one kernel at a time.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_COMPILER_CODEGEN_FUSEELEMENTWISE_H
#define DSC_COMPILER_CODEGEN_FUSEELEMENTWISE_H

#include "dialects/dsc/IR/DscOps.h"

#include <string>

namespace dsc::codegen {

/// The kernel and its host launcher for `op`, named `name` (the launcher is
/// `Status <name>(const Tensor &in0, ..., const Tensor &out0, ...)`, the
/// op's inputs first, then its results). Fails, with an error at the body
/// op, when an op of the body has no device expression.
mlir::FailureOr<std::string> emitFusedKernel(FusedOp op,
                                             const std::string &name);

} // namespace dsc::codegen

#endif // DSC_COMPILER_CODEGEN_FUSEELEMENTWISE_H
