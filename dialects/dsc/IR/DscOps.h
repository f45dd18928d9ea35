//===- DscOps.h - the dsc dialect and its ops -------------------*- C++ -*-===//
#ifndef DSC_DIALECTS_DSC_IR_DSCOPS_H
#define DSC_DIALECTS_DSC_IR_DSCOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/dsc/IR/DscDialect.h.inc"

namespace dsc {
/// What collectives, their waits and stage-3 releases read and write: the
/// state shared with the other ranks (buffers in flight on the
/// communication stream). Effects on it keep those ops ordered and unmerged
/// under generic passes, which would otherwise see Pure tensor ops.
struct CollectiveResource
    : public mlir::SideEffects::Resource::Base<CollectiveResource> {
  llvm::StringRef getName() final { return "dsc::Collective"; }
};
/// Memory copied between host and device by dsc-offload's copies, and the
/// host work ordered after them (the copy stream's order).
struct OffloadResource
    : public mlir::SideEffects::Resource::Base<OffloadResource> {
  llvm::StringRef getName() final { return "dsc::Offload"; }
};
} // namespace dsc
#include "dialects/dsc/IR/DscInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/dsc/IR/DscOps.h.inc"

namespace dsc {

/// Shape that numpy-style broadcasting of `a` and `b` gives, or failure.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// Normalizes a possibly negative axis against `rank`; failure if out of
/// range. Axis 0 of a rank-0 tensor is accepted (ops that treat a scalar as
/// one element), so a caller that indexes the shape with the result checks
/// it against the rank itself.
mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank);

/// An attention operand's shape heads first, [B, H, T, D]: `shape` as it
/// is, or with dims 1 and 2 swapped when `seqMajor` (the op's [B, T, H, D]
/// layout). The swap is its own inverse.
llvm::SmallVector<int64_t> attentionHeadsFirst(llvm::ArrayRef<int64_t> shape,
                                               bool seqMajor);

/// `v` = dsc.mul(x, s) or dsc.mul(s, x) with s a scalar f32 (rank 0) and x
/// of v's type: {x, s}; else {null, null}.
std::pair<mlir::Value, mlir::Value> scaledByScalar(mlir::Value v);

/// Copies the markers passes leave on an op (its `dsc.` attributes:
/// dsc.recompute, dsc.recomputed, ...), not its own attributes, onto its
/// replacement.
void copyMarkers(mlir::Operation *from, mlir::Operation *to);

} // namespace dsc

#endif // DSC_DIALECTS_DSC_IR_DSCOPS_H
