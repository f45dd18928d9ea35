//===- EmitCpp.h - dsc IR to C++ calling the CPU runtime --------*- C++ -*-===//
//
// The last step of `dsc compile`: a module in the dsc dialect (every shape
// static) becomes one readable C++17 file that
//
//   - defines each func.func as a function calling runtime kernels
//     (cpu/kernels.h, cpu/step_kernels.h), every call checked, a failure
//     naming the function, the op and its ONNX node;
//   - places every value at a static offset of one HostArena, planned at
//     compile time with liveness-based reuse (MemoryPlan.h);
//   - turns constants into static arrays;
//   - fills a dsc::ProgramSpec (runtime/include/dsc/program.h) from the
//     entry function's argument and result attributes and the module's
//     dsc.optimizer, dsc.micro_batch, ... attributes, with the entry as its
//     TrainStepFn;
//   - optionally ends in `int main` returning dsc::runProgram(spec, ...).
//
// Compile it with the runtime's headers and link libDscRuntime:
//   c++ -std=c++17 -O2 -I runtime/include -I runtime step.cpp libDscRuntime.a
//
//===----------------------------------------------------------------------===//

#ifndef DSC_COMPILER_CODEGEN_EMITCPP_H
#define DSC_COMPILER_CODEGEN_EMITCPP_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsc {

struct EmitCppOptions {
  /// The function that becomes the program's TrainStepFn. "train_step" is
  /// dsc-optimizer's; "forward_backward" gives a program that only computes
  /// the loss and gradients (its spec has no optimizer: "none").
  std::string entry = "train_step";
  /// Name of the dsc::ProgramSpec the file defines (external linkage, so a
  /// test can link the file and call spec.trainStep itself).
  std::string specName = "dsc_program";
  /// End the file in `int main` calling dsc::runProgram.
  bool emitMain = true;
  /// Compute in float64 wherever the IR says f32 (tensors, constants and
  /// the spec): a variant for checking numerics against float64 references.
  bool promoteF32ToF64 = false;
  /// Reuse the arena range of a value after its last use.
  bool reuseMemory = true;
  /// Let reshapes share their input's storage instead of copying.
  bool aliasReshapes = true;
  /// Recorded in the spec when the module has no `dsc.model_path`.
  std::string modelPath;
};

/// What the emitted program needs, for reports (e.g. `dsc compile -v`).
struct EmitCppStats {
  uint64_t arenaBytes = 0; // spec.arenaBytes
  /// Per emitted function: its name and the arena bytes it needs, its own
  /// values and those of the calls it makes.
  std::vector<std::pair<std::string, uint64_t>> frameBytes;
  uint64_t constantBytes = 0; // static arrays in the source
};

/// Writes the C++ program for `module` to `os`. On an op, type or attribute
/// it cannot lower, reports an error at that op (naming it) and returns
/// failure; nothing is written to `os` then.
mlir::LogicalResult emitCpp(mlir::ModuleOp module, llvm::raw_ostream &os,
                            const EmitCppOptions &options = {},
                            EmitCppStats *stats = nullptr);

} // namespace dsc

#endif // DSC_COMPILER_CODEGEN_EMITCPP_H
