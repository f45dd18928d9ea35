//===- StepMath.h - IR pieces the training-step passes share ----*- C++ -*-===//
//
// dsc-optimizer builds the gradient norm and clipping of one rank;
// dsc-zero-partition rebuilds them on the shards each rank holds. Both build
// them with these helpers, so the two stay the same arithmetic. The raise
// passes (dsc-raise-gelu, dsc-raise-rms-norm, dsc-raise-swiglu) read splat
// constants and clear the formulas they replaced; the two in-place passes
// share which ops may write a result over an operand.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_PASSES_STEPMATH_H
#define DSC_PASSES_STEPMATH_H

#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace dsc {

/// A scalar tensor<f32> constant.
mlir::Value scalarF32(mlir::OpBuilder &b, mlir::Location loc, double v);
/// The sum of the squares of every element of `values`, as tensor<f32> (0
/// when there are none): one dsc.sum_squares over the f32 tensors and one
/// over the f64 ones; a 16-bit tensor squares and sums in its own type.
mlir::Value sumOfSquaresF32(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::ValueRange values);
/// The factor torch.nn.utils.clip_grad_norm_ scales gradients by:
/// min(1, clip / (norm + 1e-6)) when clip > 0, else 1 (tensor<f32>).
mlir::Value clipCoefficient(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Value norm, mlir::Value clip);
/// The value of a splat float dsc.constant (of any shape), if `v` is one.
std::optional<double> splatFloat(mlir::Value v);
/// Ops whose every result element i is computed from element i of each
/// operand of the result's shape (other operands broadcast), every operand of
/// an element read before the element is written, on the CPU and the CUDA
/// kernels alike: the result may be that operand's storage
/// (dsc-in-place-updates, dsc-in-place-temporaries).
bool writesLaneByLane(mlir::Operation *op);
/// The ops of `v`'s block that read its storage (the block's ancestor of
/// each): users of `v` and of its views (reshapes, waits, collective
/// inputs, which the memory plan gives `v`'s storage), and the dsc.wait of
/// a collective that reads them (an asynchronous collective reads its input
/// until then).
llvm::SmallVector<mlir::Operation *> storageReaders(mlir::Value v);
/// The compute-copy cast of each of `params` (a dsc.cast of a dsc.param
/// argument for which `eligible` holds, one per parameter), when every
/// parameter has one and nothing reads a cast at or after `at`: the casts
/// may then become step state that an AdamW at `at` writes. Empty when not.
llvm::SmallVector<CastOp>
computeCopyCasts(mlir::ValueRange params, mlir::Operation *at,
                 llvm::function_ref<bool(CastOp)> eligible);
/// Each cast becomes step state: a new argument of `fn` marked
/// {dsc.compute_copy = its parameter's name} replaces it (the cast is
/// erased), and `updates[i]` is returned as that argument's next value
/// {dsc.compute_copy_update = name}.
mlir::LogicalResult castsToState(mlir::func::FuncOp fn,
                                 llvm::ArrayRef<CastOp> casts,
                                 mlir::ValueRange updates);
/// The elements an optimizer op (dsc.adamw, dsc.adamw_multi, dsc.sgd)
/// updates: its parameters' (whole ones or ZeRO shards); 0 for another op.
int64_t optimizerElements(mlir::Operation *op);
/// Erases the dsc ops without effects whose results nothing reads, in
/// every function of `module` (users first).
void eraseDeadOps(mlir::ModuleOp module);
/// `v` with the reshapes that view it removed (the value whose storage it
/// is, in the memory plan).
mlir::Value storageRoot(mlir::Value v);
/// Replaces the step's one call of @forward_backward by the callee's body
/// (dsc-offload's overlap, dsc-inline-step). Its random numbers (dropout)
/// are drawn as the call's were: it was the step's first call
/// (dsc.rng_call = 1 on the step).
void inlineStepCall(mlir::func::CallOp call);
/// Whether `copy` is `v` or dsc-recompute's clone of it (or of a view of
/// it): the same op on the same (or recomputed) operands, bitwise its value.
bool sameOrRecomputed(mlir::Value v, mlir::Value copy, unsigned depth = 0);

/// The calls of `f` when every use of its symbol in `module` is a
/// func.call, in the module's order; none when it has other uses (or none
/// at all).
llvm::SmallVector<mlir::func::CallOp> callsOf(mlir::func::FuncOp f,
                                              mlir::ModuleOp module);
/// The result number r when `sum` is the sum, in call order, of result r
/// of each of `calls` (dsc-optimizer's accumulation: add(add(c0#r, c1#r),
/// c2#r)), or with one call that result itself; else none.
std::optional<unsigned>
summedCallResult(mlir::Value sum,
                 llvm::MutableArrayRef<mlir::func::CallOp> calls);

} // namespace dsc

#endif // DSC_PASSES_STEPMATH_H
