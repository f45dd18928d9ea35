//===- StepFlops.h - The floating-point work of a step ----------*- C++ -*-===//
//
// What one call of a function computes in the ops that dominate training
// (matmuls, GEMMs, convolutions and their gradients, attention forward and
// backward), counted from their static shapes, calls included: the "model
// FLOPs" that MFU divides by. Elementwise work, norms and the optimizer are
// left out (they are memory-bound and a few percent of a transformer's).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_COMPILER_CODEGEN_STEPFLOPS_H
#define DSC_COMPILER_CODEGEN_STEPFLOPS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace dsc::codegen {

/// FLOPs of one call of `fn` (multiply-adds count two).
double stepFlops(mlir::ModuleOp module, mlir::func::FuncOp fn);

} // namespace dsc::codegen

#endif // DSC_COMPILER_CODEGEN_STEPFLOPS_H
