//===- FuseElementwise.h - Elementwise chains as one CUDA kernel -*- C++
//-*-===//
//
// Internal to compiler/codegen, for --target cuda. Groups the elementwise ops
// of a function (unary, binary, comparisons, where, f32/bool casts, gelu,
// leaky_relu on f32 and bool tensors) into chains computed by one generated
// kernel each: a value used only inside its chain is never stored, the
// others are written once. A chain's ops all have one result shape; their
// other operands broadcast to it and are read from memory (splat constants
// are inlined). An op joins the chain of an operand while no op outside the
// chain has used a value of it yet, so the chain can run at its last op.
//
// The kernel computes each op with the runtime's own device functions
// (runtime/cuda/elementwise_ops.cuh) in op order, so a fused chain gives the
// bits the same ops give one kernel at a time.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_COMPILER_CODEGEN_FUSEELEMENTWISE_H
#define DSC_COMPILER_CODEGEN_FUSEELEMENTWISE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include <string>
#include <vector>

namespace dsc::codegen {

struct FusionGroup {
  std::vector<mlir::Operation *> ops;  // in program order; the kernel runs
                                       // at the last
  llvm::SetVector<mlir::Value> inputs; // read from memory, in first-use order
  std::vector<mlir::Value> outputs;    // written (used outside the chain)
};

struct FusionPlan {
  std::vector<FusionGroup> groups; // of two ops or more
  llvm::DenseMap<mlir::Operation *, unsigned> groupOf;
  llvm::DenseSet<mlir::Value> internal; // computed in registers only

  bool fused(mlir::Operation *op) const { return groupOf.count(op); }
  const FusionGroup *group(mlir::Operation *op) const {
    auto it = groupOf.find(op);
    return it == groupOf.end() ? nullptr : &groups[it->second];
  }
};

/// Chains of `func`'s body; `skip` ops (dead, folded) are left out.
FusionPlan planFusion(mlir::func::FuncOp func,
                      const std::function<bool(mlir::Operation *)> &skip);

/// The kernel and its host launcher for `group`, named `name` (the
/// launcher is `Status <name>(const Tensor &in0, ..., const Tensor &out0,
/// ...)`, inputs first, outputs in group.outputs order).
std::string emitFusedKernel(const FusionGroup &group, const std::string &name);

} // namespace dsc::codegen

#endif // DSC_COMPILER_CODEGEN_FUSEELEMENTWISE_H
