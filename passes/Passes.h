//===- Passes.h - dsc pass declarations and registration --------*- C++ -*-===//
#ifndef DSC_PASSES_PASSES_H
#define DSC_PASSES_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace dsc

#endif // DSC_PASSES_PASSES_H
