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
//   - lowers the `shard` collectives dsc-zero-partition inserts to
//     Communicator calls (comm.h) and lists them, in the order one rank
//     issues them, as the spec's collective manifest (also as JSON:
//     writeManifestJson);
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
  /// Where the caller writes EmitCppStats::constantBlob before the source
  /// is compiled (an absolute path). Set: constants of more than
  /// kInlineConstantElements elements are not written as literals; the
  /// source embeds that file's bytes with the assembler's `.incbin`. Empty:
  /// every constant is a literal array (one self-contained file).
  std::string constantsPath;
  /// Provenance and run-time defaults recorded in the spec (dsc/program.h:
  /// dscVersion, compileCommand, target, modelSha256, configJson,
  /// runDefaults); empty ones are null there.
  std::string dscVersion, compileCommand, target, modelSha256, configJson,
      runDefaults;
  /// The directory of the NVMe tier's files (dsc/program.h: nvmePath, the
  /// run's --nvme-path overrides it); empty: null there.
  std::string nvmePath;
  /// Fill EmitCppStats::timeline (every arena value of one step; off, it
  /// stays empty, as big models have tens of thousands of them).
  bool recordTimeline = false;
};

/// Constants up to this many elements are literals in the source.
constexpr int64_t kInlineConstantElements = 256;

/// One collective of the manifest (dsc::CollectiveSpec, comm.h): what one
/// rank issues, in order, in one execution of the entry.
struct CollectiveEntry {
  std::string kind;  // "all_reduce", "all_gather" or "reduce_scatter"
  std::string what;  // the op's NameLoc, else "op #k" (its position)
  std::string dtype; // "f32", ... (as computed: f64 under promoteF32ToF64)
  int64_t inNumel = 0;
  int64_t outNumel = 0;
  uint32_t axesMask = 0; // bit i: grid axis i (0 = replicas, 1 = group)
};

/// What an arena value is for, as `dsc compile --report` and
/// `--arena-svg` name it (EmitCppStats::PeakValue::kind and
/// ArenaBuffer::kind): the name, and a title for tables and legends.
struct ArenaKind {
  const char *name, *title;
};
inline constexpr ArenaKind kArenaKinds[] = {
    {"kept", "kept from forward for backward"},
    {"temporary", "temporaries"},
    {"collective", "collective buffers"},
    {"gradient", "gradients (forward_backward's results)"},
    {"optimizer", "optimizer temporaries"},
};

/// What the emitted program needs, for reports (e.g. `dsc compile -v`).
struct EmitCppStats {
  uint64_t arenaBytes = 0; // spec.arenaBytes
  uint64_t hostArenaBytes = 0; // spec.hostArenaBytes (dsc-offload)
  /// Per emitted function: its name and the arena bytes it needs, its own
  /// values and those of the calls it makes.
  std::vector<std::pair<std::string, uint64_t>> frameBytes;
  uint64_t constantBytes = 0; // static arrays in the source
  /// The bytes of the constants not written as literals (64-byte aligned
  /// each), for EmitCppOptions::constantsPath; empty when there are none.
  std::string constantBlob;
  /// Stage-3 gathered parameters (codegen::FramePlan): the most bytes of
  /// gathered buckets alive at once in any function, and the largest bucket.
  uint64_t gatheredPeakBytes = 0;
  uint64_t gatheredBucketBytes = 0;
  /// The arena at its peak, in the function whose own values peak highest
  /// (@forward_backward in a training step): where, and each value alive
  /// then, with the op and ONNX node that made it and whether the forward
  /// made it and the backward still needs it ("kept"), a collective
  /// ("collective") or neither ("temporary").
  struct PeakValue {
    std::string op, node, type, kind;
    uint64_t bytes = 0;
  };
  std::string peakFunction, peakAt;
  uint64_t peakBytes = 0;
  std::vector<PeakValue> peakValues;
  /// The arena over one execution of the entry (recordTimeline): every
  /// arena value with its range and the ops that make it and last need it,
  /// on one clock, the entry's op positions with each call's callee
  /// spliced in at the call (its frame at the call's offset). `phases`
  /// says where the forward, backward and optimizer begin on that clock.
  struct ArenaBuffer {
    uint64_t offset = 0, bytes = 0;
    int64_t first = 0, last = 0; // the clock's ops, both inclusive
    std::string kind, op, node, type, function;
  };
  struct PhaseMark {
    std::string name; // "forward", "backward" or "optimizer"
    int64_t at = 0;
  };
  std::vector<ArenaBuffer> timeline;
  std::vector<PhaseMark> phases;
  int64_t timelineOps = 0; // the clock's length
  /// Sharding, as in the spec (1, 1, 0 for a program for one rank).
  int64_t worldSize = 1;
  int64_t groupSize = 1;
  int64_t stage = 0;
  /// The collective manifest, in the order one rank issues them.
  std::vector<CollectiveEntry> collectives;
};

/// Writes the C++ program for `module` to `os`. On an op, type or attribute
/// it cannot lower, reports an error at that op (naming it) and returns
/// failure; nothing is written to `os` then.
mlir::LogicalResult emitCpp(mlir::ModuleOp module, llvm::raw_ostream &os,
                            const EmitCppOptions &options = {},
                            EmitCppStats *stats = nullptr);

/// Writes the collective manifest of an emitted program as JSON
/// (`<program>.collectives.json`):
///   {"world_size": 4, "group_size": 2, "stage": 2, "collectives": [
///     {"kind": "reduce_scatter", "what": "bucket0 gradients",
///      "dtype": "f32", "in_numel": 1024, "out_numel": 512, "axes_mask": 2},
///     ...]}
void writeManifestJson(const EmitCppStats &stats, llvm::raw_ostream &os);

/// emitCpp without the C++: writes only the manifest JSON. Fails (with the
/// errors emitCpp would report) when the module cannot be emitted.
mlir::LogicalResult emitManifestJson(mlir::ModuleOp module,
                                     llvm::raw_ostream &os,
                                     const EmitCppOptions &options = {});

} // namespace dsc

#endif // DSC_COMPILER_CODEGEN_EMITCPP_H
