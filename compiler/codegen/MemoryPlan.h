//===- MemoryPlan.h - Static storage of a function's values -----*- C++ -*-===//
//
// Internal to compiler/codegen. Gives each SSA value of a func.func its
// storage for the generated C++: an argument view, the caller's result
// storage (a value the function returns is computed straight into it), a
// static constant array, an alias of another value (a reshape, the
// dsc.wait of a collective or a dsc.collective_input, that move no data),
// or a byte range of the
// function's arena frame. Frame ranges are reused after a value's last use
// (first fit), never while an operand of the same op still needs them. A
// func.call's callee frame starts above everything live at the call, so nested
// frames stack without overlap.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_COMPILER_CODEGEN_MEMORYPLAN_H
#define DSC_COMPILER_CODEGEN_MEMORYPLAN_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace dsc::codegen {

struct Storage {
  enum class Kind {
    Argument, // args[index]
    Result,   // results[index], the caller's storage
    Constant, // a static array (see EmitCpp.cpp)
    Alias,    // the storage of `source` (which is never itself an Alias);
              // a returned alias's source may be computed into its result
    Arena,    // [offset, offset + bytes) of the function's frame
    HostArena, // [offset, offset + bytes) of the host frame: a value in
               // host memory (dsc-offload) of a program whose frame is in
               // device memory
  };
  Kind kind = Kind::Arena;
  unsigned index = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  mlir::Value source;
  /// Alias: the operand of the defining op whose storage it is (0 for a
  /// view; dsc.overwrites' operand for a result written over it).
  unsigned operand = 0;
  /// Arena: the positions in the block of the op that defines the value and
  /// of the last op that needs it (its range is free after that one).
  size_t firstOp = 0, lastOp = 0;
};

/// Ops whose result is their input's data as is: dsc.reshape, and dsc.wait
/// (the completion of an asynchronous collective; the CPU runtime's
/// collectives are synchronous, so it is the identity).
bool isViewOp(mlir::Operation *op);

/// A value in host memory under dsc-offload: an argument or result marked
/// `dsc.memory = "host"`, the result of a host op (`dsc.on_host`) or of a
/// dsc.offload_copy to the host.
bool isHostValue(mlir::Value v);

/// Ops whose results nobody needs: side-effect free (or dsc.wait and
/// dsc.collective_input, whose effects only order the IR), every result
/// unused or used only by such ops. Neither planned nor emitted.
llvm::DenseSet<mlir::Operation *> findDeadOps(mlir::func::FuncOp func);

struct PlanOptions {
  /// Reuse the range of a value after its last use; off, every value keeps
  /// its own range (for debugging a suspected planning bug).
  bool reuse = true;
  /// Let dsc.reshape (and dsc.wait) results share their input's storage.
  bool aliasReshapes = true;
  /// Collectives run asynchronously until their dsc.wait: a collective's
  /// input stays live up to the wait (a GPU's communication stream reads it
  /// meanwhile). Off, a collective is done when it returns (CPU).
  bool asyncCollectives = false;
  /// Host values (isHostValue) get a frame of their own (the program's frame
  /// is in device memory), each its own range; copies run asynchronously on
  /// a copy stream, so what a copy to the host reads stays live to the
  /// function's end.
  bool separateHost = false;
  /// Every range starts at a multiple of this.
  uint64_t alignment = 64;
  /// Bytes of a value's elements.
  std::function<uint64_t(mlir::Value)> bytes;
  /// Whether a dsc.constant becomes a static array (else it is filled into
  /// the frame where it is defined).
  std::function<bool(mlir::Operation *)> isStaticConstant;
  /// Arena bytes a call needs for its callee: its frame and its own calls'.
  std::function<uint64_t(mlir::func::CallOp)> calleeBytes;
};

struct FramePlan {
  llvm::DenseMap<mlir::Value, Storage> storage;
  /// Ops whose results are never used (directly or through other such
  /// ops); they are not computed.
  llvm::DenseSet<mlir::Operation *> dead;
  /// Where each func.call's callee frame starts, relative to this frame.
  llvm::DenseMap<mlir::Operation *, uint64_t> calleeOffset;
  /// High-water mark of this function's own values.
  uint64_t ownBytes = 0;
  /// With the frames of the calls it makes.
  uint64_t totalBytes = 0;
  /// The host frame (separateHost): host values other than arguments and
  /// results. Only the step function has them.
  uint64_t hostBytes = 0;
  /// Stage-3 gathered parameters: the most bytes of gathered buckets alive
  /// at once (a bucket counts from its all_gather's start to the last use
  /// of it or of a piece sliced from it), and the largest bucket. The
  /// prefetch window bounds the first by (prefetch + 1) buckets unless the
  /// buckets are kept gathered.
  uint64_t gatheredPeakBytes = 0;
  uint64_t gatheredBucketBytes = 0;
  /// The arena values alive when the most of them are (by bytes), and the
  /// op at whose position that is: what `dsc compile --report` breaks the
  /// arena down into.
  std::vector<mlir::Value> peakLive;
  mlir::Operation *peakOp = nullptr;
  uint64_t peakLiveBytes = 0;
};

/// Plans `func`, whose body is one block of ops without regions.
FramePlan planFrame(mlir::func::FuncOp func, const PlanOptions &options);

} // namespace dsc::codegen

#endif // DSC_COMPILER_CODEGEN_MEMORYPLAN_H
