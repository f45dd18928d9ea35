//===- MemoryReport.h - per-rank memory of every ZeRO stage -----*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_MEMORYREPORT_H
#define DSC_TOOLS_DSC_MEMORYREPORT_H

#include "compiler/codegen/EmitCpp.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

namespace dsc {

/// "512 B", "37.54 KiB", "1.25 GiB".
std::string humanBytes(double bytes);

/// Model-state bytes per rank of a compiled module (after dsc-optimizer and,
/// if it ran, dsc-zero-partition), measured from @train_step's arguments,
/// next to the ZeRO formula of every stage for the same model; then what
/// the compiled step holds per rank: its arguments and results plus
/// `arenaBytes`, the code generator's static plan of everything else (what
/// the program will allocate, known before it starts). At stage 3,
/// `gatheredPeakBytes` and `gatheredBucketBytes` (codegen's plan) say how
/// much of the arena gathered parameters take at most at once.
/// Under dsc-offload, what lives in host memory (the offloaded state and
/// `hostArenaBytes` of host scratch) and the bytes copied each way per step.
void printMemoryReport(mlir::ModuleOp module, uint64_t arenaBytes,
                       llvm::raw_ostream &os, uint64_t gatheredPeakBytes = 0,
                       uint64_t gatheredBucketBytes = 0,
                       uint64_t hostArenaBytes = 0);

/// What @train_step's arguments and results take per rank in device memory
/// (those updated in place counted once; not those dsc-offload keeps on the
/// host), as printMemoryReport counts them.
double stepTensorBytes(mlir::ModuleOp module);

/// The table for an imported model (@forward only): every stage's ZeRO
/// figures for `worldSize` ranks sharding in groups of `groupSize`.
/// The arena at its peak, from code generation's plan: what the forward
/// keeps for the backward, temporaries and collective buffers, by op, and
/// the largest values with their ONNX nodes.
void printArenaBreakdown(const EmitCppStats &stats, llvm::raw_ostream &os);

/// ZeRO's formulas for the imported `module` at every stage; `precision`
/// is the step's (fp32, or bf16/fp16: 16-bit compute copies beside fp32
/// masters).
void printMemoryEstimate(mlir::ModuleOp module, int64_t worldSize,
                         int64_t groupSize, llvm::StringRef optimizer,
                         llvm::StringRef precision, llvm::raw_ostream &os);

/// ZeRO's model-state bytes per rank at `stage` (printMemoryEstimate's
/// total), for a configuration that does not compile.
double formulaStageBytes(mlir::ModuleOp module, int stage, int64_t worldSize,
                         int64_t groupSize, llvm::StringRef optimizer,
                         llvm::StringRef precision);

/// One configuration of `dsc estimate --gpu-memory`: its per-rank bytes
/// from the compiled step (else the formula's), or not available.
struct FitRow {
  int stage = 0;
  std::string recompute;
  bool available = true, compiled = true;
  double bytes = 0;
  bool offload = false;      // --offload-optimizer cpu (device bytes only)
  bool offloadParam = false; // and --offload-param cpu (stage 3)
  std::string why;           // the compile's first error, if it failed
};

/// The rows against `budget` bytes per GPU, in order (least recomputation,
/// then lowest stage, first; offloaded ones last), and the first that fits:
/// the fastest.
void printFitsTable(llvm::ArrayRef<FitRow> rows, uint64_t budget,
                    int64_t worldSize, llvm::raw_ostream &os);

} // namespace dsc

#endif // DSC_TOOLS_DSC_MEMORYREPORT_H
