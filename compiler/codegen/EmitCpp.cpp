//===- EmitCpp.cpp - dsc IR to one C++ source calling the CPU runtime -----===//
//
// Walks the module in four steps:
//   1. order the functions so that callees come first (no recursion);
//   2. per function, plan the storage of every value (MemoryPlan.h) and
//      emit its body: one checked runtime call per op, the call named by
//      the op-family lowerings (Lower*.cpp), constants collected as static
//      arrays;
//   3. fill the ProgramSpec from the entry function's attributes;
//   4. print header, prelude, constants, functions, spec, entry and main.
// Nothing reaches the output stream unless every step succeeded.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/EmitCpp.h"
#include "compiler/codegen/FuseElementwise.h"
#include "compiler/codegen/Workspaces.h"

#include "compiler/codegen/Lowering.h"
#include "compiler/codegen/MemoryPlan.h"
#include "compiler/codegen/StepFlops.h"

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

using namespace mlir;

namespace dsc {

namespace {

using codegen::cppDouble;
using codegen::cppFloat;
using codegen::cppInt;
using codegen::cppInts;
using codegen::cppString;
using codegen::FramePlan;
using codegen::LowerContext;
using codegen::LoweredCall;
using codegen::Storage;

constexpr int kMaxRank = 8;         // dsc::kMaxRank of the runtime
constexpr int64_t kSmallSplat = 16; // splats up to this size stay arrays
constexpr uint64_t kAlignment = 64; // of constant arrays

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

enum class LiteralKind { F32, F64, Bits16, Signed, Unsigned, Bool };

struct ElementInfo {
  const char *dtype; // the runtime's DType enumerator
  const char *cType; // the C++ type of a constant array
  const char *name;  // for comments: "f32"
  unsigned bytes;
  LiteralKind literal;
};

std::optional<ElementInfo> elementInfo(Type type, bool promote) {
  if (type.isF32())
    return promote
               ? ElementInfo{"DType::F64", "double", "f64", 8, LiteralKind::F64}
               : ElementInfo{"DType::F32", "float", "f32", 4, LiteralKind::F32};
  if (type.isF64())
    return ElementInfo{"DType::F64", "double", "f64", 8, LiteralKind::F64};
  if (type.isF16())
    return ElementInfo{"DType::F16", "uint16_t", "f16", 2, LiteralKind::Bits16};
  if (type.isBF16())
    return ElementInfo{"DType::BF16", "uint16_t", "bf16", 2,
                       LiteralKind::Bits16};
  if (type.isInteger(1))
    return ElementInfo{"DType::Bool", "bool", "bool", 1, LiteralKind::Bool};
  if (auto it = dyn_cast<IntegerType>(type)) {
    bool isUnsigned = it.isUnsigned();
    switch (it.getWidth()) {
    case 64:
      if (!isUnsigned)
        return ElementInfo{"DType::I64", "int64_t", "i64", 8,
                           LiteralKind::Signed};
      break;
    case 32:
      if (!isUnsigned)
        return ElementInfo{"DType::I32", "int32_t", "i32", 4,
                           LiteralKind::Signed};
      break;
    case 8:
      return isUnsigned ? ElementInfo{"DType::U8", "uint8_t", "u8", 1,
                                      LiteralKind::Unsigned}
                        : ElementInfo{"DType::I8", "int8_t", "i8", 1,
                                      LiteralKind::Signed};
    default:
      break;
    }
  }
  return std::nullopt;
}

/// The runtime's DType enumerator of an element name ("f32").
const char *dtypeEnumerator(StringRef name) {
  static const std::pair<const char *, const char *> table[] = {
      {"f32", "DType::F32"},   {"f64", "DType::F64"},   {"f16", "DType::F16"},
      {"bf16", "DType::BF16"}, {"bool", "DType::Bool"}, {"i64", "DType::I64"},
      {"i32", "DType::I32"},   {"i8", "DType::I8"},     {"u8", "DType::U8"}};
  for (auto [n, e] : table)
    if (name == n)
      return e;
  llvm_unreachable("no DType for an element name");
}

//===----------------------------------------------------------------------===//
// Names and locations
//===----------------------------------------------------------------------===//

void collectNodeNames(Location loc, std::vector<std::string> &names) {
  if (auto name = dyn_cast<NameLoc>(loc)) {
    if (!llvm::is_contained(names, name.getName().strref()))
      names.push_back(name.getName().str());
  } else if (auto fused = dyn_cast<FusedLoc>(loc)) {
    for (Location inner : fused.getLocations())
      collectNodeNames(inner, names);
  } else if (auto site = dyn_cast<CallSiteLoc>(loc)) {
    collectNodeNames(site.getCallee(), names);
  }
}

/// The ONNX node(s) an op came from: the names of its NameLocs.
std::string nodeName(Location loc) {
  std::vector<std::string> names;
  collectNodeNames(loc, names);
  return llvm::join(names, ", ");
}

/// Text safe inside a // comment.
std::string commentText(StringRef text) {
  std::string s;
  for (char c : text)
    s += (c == '\n' || c == '\r') ? ' ' : c;
  return s;
}

/// A C++ identifier from an MLIR name ("%5" -> "v5", "%arg0" -> "v_arg0",
/// "%2#1" -> "v2_1").
std::string identifier(StringRef ssaName) {
  ssaName.consume_front("%");
  std::string s;
  for (char c : ssaName) {
    char d = llvm::isAlnum(c) ? c : '_';
    if (d == '_' && !s.empty() && s.back() == '_')
      continue; // no reserved "__"
    s += d;
  }
  if (s.empty() || !llvm::isDigit(s.front()))
    return "v_" + s;
  return "v" + s;
}

std::string functionIdentifier(StringRef symbol) {
  std::string s = "fn_";
  for (char c : symbol)
    s += (llvm::isAlnum(c) ? c : '_');
  return s;
}

std::string shapeText(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string bytesText(uint64_t bytes) {
  if (bytes >= (uint64_t(1) << 20))
    return llvm::formatv("{0:f1} MiB", bytes / double(1 << 20)).str();
  if (bytes >= 1024)
    return llvm::formatv("{0:f1} KiB", bytes / 1024.0).str();
  return std::to_string(bytes) + " B";
}

//===----------------------------------------------------------------------===//
// The prelude of every generated file
//===----------------------------------------------------------------------===//

constexpr const char *kCpuIncludes = R"cpp(#include "cpu/kernels.h"
#include "cpu/step_kernels.h"
)cpp";

constexpr const char *kCudaIncludes = R"cpp(#include "cuda/common.cuh"
#include "cuda/context.h"
#include "cuda/device.h"
#include "cuda/elementwise_ops.cuh"
#include "cuda/kernels.h"

#include <map>
#include <mutex>
#include <vector>
)cpp";

constexpr const char *kPrelude = R"cpp(#include "dsc/program.h"
#include "dsc/runtime.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace {

using dsc::DType;
using dsc::Status;
using dsc::Tensor;
/// What every generated function receives besides its tensors.
struct Context {
  uint64_t seed;  // the run's seed (dsc.seed)
  int64_t step;   // the optimizer step (dsc.step)
  int64_t call;   // which call of the step this is: micro-batches differ
  int64_t *calls; // calls made so far in this step
  char *frame;    // this call's range of the arena
  dsc::Communicator *comm; // the other ranks; null on one rank
  const void *const *consts; // the constants in device memory (CUDA)
  dsc::PhaseClock *clock;     // --wall-clock-breakdown; null: not timed
  char *hostFrame; // host values of a device program (dsc-offload)
};

/// The context of a call made from `ctx`, its frame at `offset` (a free
/// function: nvcc warns of an unused member of a local class, and a step
/// whose call was inlined makes none).
[[maybe_unused]] Context calleeOf(const Context &ctx, size_t offset) {
  return {ctx.seed, ctx.step,   ++*ctx.calls, ctx.calls, ctx.frame + offset,
          ctx.comm, ctx.consts, ctx.clock,    ctx.hostFrame};
}

/// Where the step's phases begin (dsc::Phase), for the program's timing.
inline void markPhase(const Context &ctx, dsc::Phase phase) {
  if (ctx.clock)
    ctx.clock->mark(phase);
}

/// A view of planned or static storage (kernels never write their inputs).
Tensor view(const void *data, DType dtype, dsc::I64s shape) {
  return Tensor::of(const_cast<void *>(data), dtype, shape);
}

/// A failed call's status, prefixed with the function, op and ONNX node.
Status failed(const Status &status, const char *function, const char *op,
              const char *node) {
  std::string where = std::string(function) + ": " + op;
  if (*node)
    where += std::string(" (ONNX node \"") + node + "\")";
  return Status::error(status.code(), where + ": " + status.message());
}

std::string describeSpec(const dsc::TensorSpec &spec) {
  return std::string(dsc::dtypeName(spec.dtype)) +
         dsc::describe(dsc::I64s(spec.shape, spec.rank));
}

/// The tensors handed to the step must match the spec.
template <typename Spec>
Status checkTensors(const char *what, const Spec *specs, int count,
                    const Tensor *tensors) {
  for (int i = 0; i < count; ++i) {
    const dsc::TensorSpec &want = specs[i].type;
    const Tensor &got = tensors[i];
    bool ok = (got.present() || got.numel() == 0) &&
              got.dtype == want.dtype && got.rank == want.rank;
    for (int d = 0; ok && d < want.rank; ++d)
      ok = got.shape[d] == want.shape[d];
    if (!ok)
      return Status::error(dsc::StatusCode::InvalidArgument,
                           std::string("train_step: ") + what + " " +
                               std::to_string(i) + " (" + specs[i].name +
                               ") must be " + describeSpec(want) + ", got " +
                               dsc::describe(got));
  }
  return Status();
}

/// Results are written while arguments are still read, so no result may
/// share memory with an argument or another result, but a result computed in
/// place (inPlaceOf) may be exactly its argument's storage.
Status checkDisjoint(const dsc::ArgSpec *argSpecs, const Tensor *args,
                     int numArgs, const dsc::ResultSpec *resultSpecs,
                     const Tensor *results, int numResults) {
  for (int r = 0; r < numResults; ++r) {
    const char *rb = results[r].as<char>(), *re = rb + results[r].nbytes();
    auto clash = [&](const Tensor &t) {
      const char *b = t.as<char>(), *e = b + t.nbytes();
      return rb != re && b != e && b < re && rb < e;
    };
    for (int a = 0; a < numArgs; ++a)
      if (clash(args[a]) &&
          !(resultSpecs[r].inPlaceOf == a && args[a].data == results[r].data))
        return Status::error(dsc::StatusCode::InvalidArgument,
                             std::string("train_step: result ") +
                                 resultSpecs[r].name +
                                 " shares memory with argument " +
                                 argSpecs[a].name);
    for (int o = 0; o < r; ++o)
      if (clash(results[o]))
        return Status::error(dsc::StatusCode::InvalidArgument,
                             std::string("train_step: results ") +
                                 resultSpecs[o].name + " and " +
                                 resultSpecs[r].name + " share memory");
  }
  return Status();
}
)cpp";

/// The name a fused kernel is generated under before it gets its own.
constexpr const char *kFusedPlaceholder = "dsc_fused_kernel_name_";

std::string replaceAll(std::string text, llvm::StringRef from,
                       llvm::StringRef to) {
  for (size_t at = text.find(from.str()); at != std::string::npos;
       at = text.find(from.str(), at + to.size()))
    text.replace(at, from.size(), to.str());
  return text;
}

/// Constant arrays are named kConst0, kConst1, ... in order.
constexpr const char *kConstPrefix = "kConst";

/// The file of large constants, embedded by the assembler (host code only:
/// nvcc's device pass skips it) as the hidden symbol dsc_constant_blob.
std::string blobPrelude(llvm::StringRef path) {
  std::string quoted; // for the assembler's string syntax
  for (char ch : path) {
    if (ch == '"' || ch == '\\')
      quoted.push_back('\\');
    quoted.push_back(ch);
  }
  std::string asmText = ".pushsection .rodata\n.balign 64\n"
                        ".globl dsc_constant_blob\n"
                        ".hidden dsc_constant_blob\n"
                        "dsc_constant_blob:\n.incbin \"" +
                        quoted + "\"\n.byte 0\n.popsection\n";
  return "// Constants of more than " +
         std::to_string(kInlineConstantElements) + " elements: the bytes of " +
         commentText(path) +
         ", embedded at build time.\n#ifndef __CUDA_ARCH__\n__asm__(" +
         cppString(asmText) +
         ");\n#endif\nextern \"C\" const unsigned char "
         "dsc_constant_blob[];\n\n";
}

/// After the constants of a CUDA program: their copies in each GPU's memory,
/// made on first use.
constexpr const char *kCudaConstants = R"cpp(
/// The constants in the memory of the calling thread's GPU, copied there on
/// first use (one table per GPU; in-process ranks may share one).
Status deviceConstants(const void *const **out) {
  static std::mutex mu;
  static std::map<int, std::vector<void *>> perDevice;
  int device = 0;
  if (Status s = dsc::cuda::check(cudaGetDevice(&device), "cudaGetDevice");
      !s.ok())
    return s;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<void *> &table = perDevice[device];
  if (table.empty()) {
    for (int i = 0; i < kNumConstants; ++i) {
      void *p = nullptr;
      if (Status s = dsc::cuda::check(cudaMalloc(&p, kConstantBytes[i]),
                                      "cudaMalloc (constants)");
          !s.ok())
        return s;
      if (Status s = dsc::cuda::check(
              cudaMemcpy(p, kConstantArrays[i], kConstantBytes[i],
                         cudaMemcpyHostToDevice),
              "cudaMemcpy (constants)");
          !s.ok())
        return s;
      table.push_back(p);
    }
    table.push_back(nullptr); // never empty once made
  }
  *out = table.data();
  return Status();
}
)cpp";

/// The prelude's part for a module with a rank grid (collectives).
constexpr const char *kCommPrelude = R"cpp(
/// A collective reached without a Communicator (run on one rank).
[[maybe_unused]] Status noCommunicator(const char *op, const char *what) {
  return Status::error(dsc::StatusCode::InvalidArgument,
                       std::string(op) + " \"" + what +
                           "\": this program was compiled for " +
                           std::to_string(kWorldSize) +
                           " ranks and runs without a communicator");
}

/// shard.all_slice: this rank's slice of dim 0 among the group along `axes`
/// (a local copy, no communication; on one rank, without a communicator,
/// the whole).
[[maybe_unused]] Status allSlice(const Context &ctx, const Tensor &in,
                                 const Tensor &out, dsc::GridAxes axes,
                                 const char *what) {
  if (!ctx.comm && kWorldSize != 1)
    return noCommunicator("shard.all_slice", what);
  const int64_t n = ctx.comm ? ctx.comm->groupSize(axes) : 1;
  if (in.rank < 1 || out.rank != in.rank || in.shape[0] != out.shape[0] * n)
    return Status::error(dsc::StatusCode::InvalidArgument,
                         std::string("shard.all_slice \"") + what + "\": " +
                             dsc::describe(in) + " -> " + dsc::describe(out) +
                             " over a group of " + std::to_string(n));
  int64_t offsets[dsc::kMaxRank] = {}, strides[dsc::kMaxRank] = {};
  offsets[0] = (ctx.comm ? ctx.comm->groupRank(axes) : 0) * out.shape[0];
  for (int d = 0; d < in.rank; ++d)
    strides[d] = 1;
  return rt::slice(in, dsc::I64s(offsets, in.rank),
                    dsc::I64s(strides, in.rank), out);
}
)cpp";

/// The entry's check of a Communicator against the grid compiled for.
constexpr const char *kCheckCommunicator =
    R"cpp(  if (rank.comm && (rank.comm->size() != kWorldSize ||
                    rank.comm->groupSize(dsc::GridAxes{2u}) != kGroupSize))
    return Status::error(
        dsc::StatusCode::InvalidArgument,
        "train_step: compiled for " + std::to_string(kWorldSize) +
            " ranks in groups of " + std::to_string(kGroupSize) +
            ", but the communicator has " +
            std::to_string(rank.comm->size()) + " in groups of " +
            std::to_string(rank.comm->groupSize(dsc::GridAxes{2u})));
)cpp";

//===----------------------------------------------------------------------===//
// The emitter
//===----------------------------------------------------------------------===//

/// What the generated file needs of one runtime: its headers, its
/// namespace, the title in the file's header and the spec's device hook.
struct RuntimeFlavor {
  const char *includes, *ns, *title, *device;
};

const RuntimeFlavor &runtimeFor(const TargetDescription &target) {
  static const RuntimeFlavor cpu{kCpuIncludes, "dsc::cpu", "CPU", "nullptr"};
  static const RuntimeFlavor cuda{kCudaIncludes, "dsc::cuda", "CUDA",
                                  "dsc::cuda::device"};
  return target.name == "cuda" ? cuda : cpu;
}

/// Where a function's phases turn: autodiff's dsc.backward_begin marker,
/// the last call of @forward_backward, and the first op of the optimizer:
/// the op after that call, or, in a step whose call was inlined, its first
/// host op (dsc-offload's overlap) or else its learning-rate schedule
/// (dsc-inline-step), after backward began.
struct PhaseOps {
  Operation *backward = nullptr, *lastCall = nullptr, *optimizer = nullptr;
};

PhaseOps phaseOps(func::FuncOp func) {
  PhaseOps marks;
  for (Operation &op : func.getBody().front()) {
    if (!marks.backward && op.hasAttr("dsc.backward_begin"))
      marks.backward = &op;
    if (auto call = dyn_cast<func::CallOp>(op))
      if (call.getCallee() == "forward_backward")
        marks.lastCall = &op;
  }
  if (marks.lastCall) {
    marks.optimizer = marks.lastCall->getNextNode();
  } else if (marks.backward) {
    Operation *schedule = nullptr;
    for (Operation *op = marks.backward->getNextNode(); op;
         op = op->getNextNode()) {
      if (op->hasAttr("dsc.on_host") && !isa<ConstantOp>(op)) {
        marks.optimizer = op;
        break;
      }
      if (!schedule && isa<LrScheduleOp>(op))
        schedule = op;
    }
    if (!marks.optimizer)
      marks.optimizer = schedule;
  }
  return marks;
}

/// What the arena value made by `def` is (kArenaKinds) while it is alive at
/// `at`: a collective's buffer, a gradient (a call's result), an optimizer
/// temporary (made once the optimizer began), kept (made by the forward,
/// needed at or after the backward marker) or a temporary.
const char *arenaKind(Operation *def, Operation *at, const PhaseOps &marks) {
  if (isa_and_nonnull<shard::ShardDialect>(def->getDialect()) ||
      isa<WaitOp>(def))
    return "collective";
  if (isa<func::CallOp>(def))
    return "gradient";
  if (marks.optimizer && !def->isBeforeInBlock(marks.optimizer))
    return "optimizer";
  if (marks.backward && def->isBeforeInBlock(marks.backward) &&
      !at->isBeforeInBlock(marks.backward))
    return "kept";
  return "temporary";
}

/// One function's arena values on its own clock (block positions), and its
/// calls, for EmitCppStats::timeline.
struct FrameTimeline {
  int64_t ops = 0;
  std::vector<EmitCppStats::ArenaBuffer> buffers;
  struct Call {
    int64_t at;
    uint64_t offset;
    std::string callee;
  };
  std::vector<Call> calls;
  int64_t backwardAt = -1, optimizerAt = -1;
};

class Emitter {
public:
  Emitter(ModuleOp module, const EmitCppOptions &options,
          const TargetDescription &target)
      : module_(module), options_(options), target_(target),
        runtime_(runtimeFor(target)), asmState_(module) {}

  LogicalResult run(raw_ostream &os, EmitCppStats *stats);

private:
  // Step 0: the rank grid and the sharding attributes.
  LogicalResult checkGrid();
  // Step 1.
  LogicalResult orderFunctions();
  // Step 2.
  LogicalResult emitFunction(func::FuncOp func);
  /// The kernels of `func`'s dsc.fused ops (a kernel that recurs, as every
  /// layer's do, is generated once).
  LogicalResult emitFusedKernels(func::FuncOp func);
  /// The values alive at `plan`'s peak, for the report.
  void recordPeak(func::FuncOp func, const codegen::FramePlan &plan);
  /// Every arena value of `func` (EmitCppOptions::recordTimeline).
  void recordTimeline(func::FuncOp func, const codegen::FramePlan &plan);
  /// Appends function `name`'s timeline to `out` from `clock` on, its
  /// frame at `base`, its calls' callees spliced in.
  void spliceTimeline(StringRef name, uint64_t base, int64_t &clock,
                      EmitCppStats &out);
  LogicalResult emitOp(Operation *op, size_t index, const FramePlan &plan,
                       StringRef function, raw_ostream &os);
  LogicalResult onHost(Operation *op, LoweredCall &lowered);
  LogicalResult emitLowered(Operation *op, const LoweredCall &lowered,
                            StringRef node, StringRef function,
                            raw_ostream &os);
  LogicalResult emitReturn(Operation *op, const FramePlan &plan,
                           StringRef function, raw_ostream &os);
  FailureOr<std::string> constantArray(ConstantOp op);
  void appendBlobConstant(ConstantOp op, DenseElementsAttr attr,
                          const ElementInfo &info, const std::string &name);
  bool isStaticConstant(Operation *op);
  // Step 3.
  LogicalResult emitSpec(func::FuncOp entry, raw_ostream &os);
  FailureOr<std::string> emitBuckets(func::FuncOp entry, int &numBuckets);

  FailureOr<ElementInfo> element(Value v, Operation *at);
  /// The type of a value as a checked static tensor.
  FailureOr<RankedTensorType> tensorType(Value v, Operation *at);
  std::string typeText(Value v);
  std::string ssaName(Value v);
  std::string viewDecl(Value v, const Storage &s, const std::string &name,
                       const std::string &sourceName);

  ModuleOp module_;
  const EmitCppOptions &options_;
  const TargetDescription &target_;
  const RuntimeFlavor &runtime_;
  AsmState asmState_;

  llvm::SmallVector<func::FuncOp> order_; // callees first
  llvm::DenseMap<Operation *, uint64_t> totalBytes_;
  llvm::DenseMap<Value, std::string> names_;
  /// The launcher of each dsc.fused op, and every fused kernel's text.
  llvm::DenseMap<Operation *, std::string> fusedNames_;
  std::string fusedText_;
  /// Each distinct fused kernel (its text, named kFusedPlaceholder) by name.
  llvm::StringMap<std::string> fusedByText_;
  unsigned fusedCount_ = 0;
  llvm::DenseMap<Attribute, std::string> constants_;
  std::string constantsText_, functionsText_;
  uint64_t constantBytes_ = 0;
  std::vector<uint64_t> constantSizes_; // bytes of kConst<i>
  std::string constantBlob_;            // EmitCppOptions::constantsPath's
  std::string blobConstantsText_;       // pointers into it
  std::vector<std::pair<std::string, uint64_t>> frames_;
  uint64_t gatheredPeakBytes_ = 0, gatheredBucketBytes_ = 0;
  uint64_t hostBytes_ = 0; // the host frame (dsc-offload)
  int hostSites_ = 0;       // host tasks emitted so far (their site ids)
  EmitCppStats peak_; // its peak* fields: the highest frame peak so far
  llvm::StringMap<FrameTimeline> timelines_; // by function

  // Sharding: the grid (empty name: none) and the module's attributes.
  std::string gridName_;
  llvm::SmallVector<int64_t, 2> gridShape_;
  int64_t worldSize_ = 1, groupSize_ = 1, stage_ = 0;
  // The collectives each emitted function issues, its calls' expanded.
  llvm::DenseMap<Operation *, std::vector<CollectiveEntry>> manifests_;
  std::vector<CollectiveEntry> current_; // of the function being emitted
  std::vector<int64_t> bucketPadded_;    // paddedNumel of each bucket
};

LogicalResult Emitter::checkGrid() {
  shard::GridOp grid;
  for (auto g : module_.getOps<shard::GridOp>()) {
    if (grid)
      return g.emitError("codegen: a second rank grid @")
             << g.getSymName() << "; a module has one (@" << grid.getSymName()
             << ")";
    grid = g;
  }
  auto optionalInt = [&](StringRef name) -> FailureOr<std::optional<int64_t>> {
    Attribute a = module_->getAttr(name);
    if (!a)
      return std::optional<int64_t>();
    auto i = dyn_cast<IntegerAttr>(a);
    if (!i)
      return module_.emitError("codegen: ")
             << name << " must be an integer, got " << a;
    return std::optional<int64_t>(i.getInt());
  };
  auto world = optionalInt("dsc.world_size");
  auto group = optionalInt("dsc.group_size");
  auto stage = optionalInt("dsc.stage");
  if (failed(world) || failed(group) || failed(stage))
    return failure();
  if (grid) {
    ArrayRef<int64_t> shape = grid.getShape();
    if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0)
      return grid.emitError("codegen: the rank grid must be 2-D and static "
                            "(replicas x group), got shape [")
             << llvm::make_range(shape.begin(), shape.end()) << "]";
    gridName_ = grid.getSymName().str();
    gridShape_.assign(shape.begin(), shape.end());
    worldSize_ = shape[0] * shape[1];
    groupSize_ = shape[1];
    if (*world && **world != worldSize_)
      return grid.emitError("codegen: dsc.world_size = ")
             << **world << ", but the grid has " << shape[0] << " x "
             << shape[1] << " ranks";
    if (*group && **group != groupSize_)
      return grid.emitError("codegen: dsc.group_size = ")
             << **group << ", but the grid's group axis has " << shape[1]
             << " ranks";
  } else {
    if ((*world && **world > 1) || (*group && **group > 1))
      return module_.emitError("codegen: dsc.world_size/dsc.group_size say "
                               "several ranks, but the module has no rank "
                               "grid (shard.grid)");
  }
  stage_ = stage->value_or(0);
  if (stage_ < 0 || stage_ > 3)
    return module_.emitError("codegen: dsc.stage must be 0..3, got ") << stage_;
  return success();
}

FailureOr<RankedTensorType> Emitter::tensorType(Value v, Operation *at) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !type.hasStaticShape()) {
    at->emitError("codegen needs tensors of static shape, got ") << v.getType();
    return failure();
  }
  if (type.getRank() > kMaxRank) {
    at->emitError("codegen supports tensors of rank up to ")
        << kMaxRank << ", got " << v.getType();
    return failure();
  }
  return type;
}

FailureOr<ElementInfo> Emitter::element(Value v, Operation *at) {
  FailureOr<RankedTensorType> type = tensorType(v, at);
  if (failed(type))
    return failure();
  std::optional<ElementInfo> info =
      elementInfo(type->getElementType(), options_.promoteF32ToF64);
  if (!info) {
    at->emitError("codegen has no runtime dtype for element type ")
        << type->getElementType()
        << " (supported: f32, f64, f16, bf16, i64, i32, i8, ui8, i1)";
    return failure();
  }
  return *info;
}

std::string Emitter::typeText(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  auto info = elementInfo(type.getElementType(), options_.promoteF32ToF64);
  return std::string(info ? info->name : "?") + shapeText(type.getShape());
}

std::string Emitter::ssaName(Value v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  v.printAsOperand(os, asmState_);
  return s;
}

LogicalResult Emitter::orderFunctions() {
  SymbolTable symbols(module_);
  auto entry = symbols.lookup<func::FuncOp>(options_.entry);
  if (!entry) {
    module_.emitError("codegen: no function @")
        << options_.entry << " to emit as the training step";
    return failure();
  }
  // Depth-first, post-order; a function on the stack seen again is a cycle.
  llvm::DenseMap<Operation *, int> state; // 1: on the stack, 2: done
  std::function<LogicalResult(func::FuncOp)> visit =
      [&](func::FuncOp f) -> LogicalResult {
    int &s = state[f];
    if (s == 2)
      return success();
    if (s == 1)
      return f.emitError("codegen: recursive call of @") << f.getSymName();
    s = 1;
    if (f.isExternal())
      return f.emitError("codegen: @")
             << f.getSymName() << " has no body to emit";
    if (!f.getBody().hasOneBlock())
      return f.emitError("codegen: @")
             << f.getSymName() << " must be a single block";
    WalkResult walk = f.walk([&](func::CallOp call) {
      auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
      if (!callee) {
        call.emitError("codegen: call of unknown function @")
            << call.getCallee();
        return WalkResult::interrupt();
      }
      return failed(visit(callee)) ? WalkResult::interrupt()
                                   : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    state[f] = 2;
    order_.push_back(f);
    return success();
  };
  if (failed(visit(entry)))
    return failure();
  // Only what the entry calls: @forward beside @train_step would double the
  // source (and nvcc's time) for code the program never runs.
  return success();
}

bool Emitter::isStaticConstant(Operation *op) {
  auto attr = dyn_cast<DenseElementsAttr>(cast<ConstantOp>(op).getValue());
  if (!attr || !attr.isSplat() || attr.getNumElements() <= kSmallSplat)
    return true;
  // A fill goes through a double: integers beyond 2^53 stay arrays.
  if (auto it = dyn_cast<IntegerType>(attr.getElementType());
      it && it.getWidth() > 32) {
    APInt v = attr.getSplatValue<APInt>();
    return it.isUnsigned() ? v.getActiveBits() > 53
                           : v.getSignificantBits() > 54;
  }
  return false;
}

/// Double value of a splat constant (for rt::fill).
double splatValue(DenseElementsAttr attr) {
  Type et = attr.getElementType();
  if (isa<FloatType>(et))
    return attr.getSplatValue<APFloat>().convertToDouble();
  APInt v = attr.getSplatValue<APInt>();
  if (et.isInteger(1) || cast<IntegerType>(et).isUnsigned())
    return static_cast<double>(v.getZExtValue());
  return static_cast<double>(v.getSExtValue());
}

FailureOr<std::string> Emitter::constantArray(ConstantOp op) {
  auto attr = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!attr) {
    op.emitError("codegen supports dense constants only, got ")
        << op.getValue();
    return failure();
  }
  if (auto it = constants_.find(attr); it != constants_.end())
    return it->second;
  FailureOr<ElementInfo> info = element(op.getResult(), op);
  if (failed(info))
    return failure();
  std::string name = kConstPrefix + std::to_string(constants_.size());
  int64_t n = attr.getNumElements();
  constants_[attr] = name;
  constantSizes_.push_back(static_cast<uint64_t>(std::max<int64_t>(n, 1)) *
                           info->bytes);
  constantBytes_ += static_cast<uint64_t>(n) * info->bytes;
  if (!options_.constantsPath.empty() && n > kInlineConstantElements) {
    appendBlobConstant(op, attr, *info, name);
    return name;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "// " << typeText(op.getResult());
  if (std::string node = nodeName(op.getLoc()); !node.empty())
    os << ", ONNX node " << commentText(node);
  os << "\nalignas(" << kAlignment << ") const " << info->cType << " " << name
     << "[" << std::max<int64_t>(n, 1) << "] = {";
  std::vector<std::string> items;
  items.reserve(n);
  if (isa<FloatType>(attr.getElementType())) {
    for (const APFloat &v : attr.getValues<APFloat>()) {
      switch (info->literal) {
      case LiteralKind::F32:
        items.push_back(cppFloat(v.convertToFloat()));
        break;
      case LiteralKind::F64: {
        APFloat d = v;
        bool lost = false;
        d.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
        items.push_back(cppDouble(d.convertToDouble()));
        break;
      }
      default:
        char bits[16];
        std::snprintf(bits, sizeof bits, "0x%04x",
                      static_cast<unsigned>(v.bitcastToAPInt().getZExtValue()));
        items.push_back(bits);
      }
    }
  } else {
    for (const APInt &v : attr.getValues<APInt>()) {
      switch (info->literal) {
      case LiteralKind::Bool:
        items.push_back(v.isZero() ? "false" : "true");
        break;
      case LiteralKind::Unsigned:
        items.push_back(std::to_string(v.getZExtValue()));
        break;
      default:
        items.push_back(cppInt(v.getSExtValue()));
      }
    }
  }
  const size_t perLine = info->literal == LiteralKind::Bool ? 16 : 8;
  for (size_t i = 0; i < items.size(); ++i)
    os << (i % perLine ? " " : "\n    ") << items[i] << ",";
  os << "\n};\n\n";
  constantsText_ += text;
  return name;
}

/// The bytes of one element as the program's C++ type holds it.
static void appendElementBytes(std::string &out, const ElementInfo &info,
                               const APInt &bits, const APFloat *value) {
  auto put = [&](uint64_t v, unsigned bytes) {
    for (unsigned i = 0; i < bytes; ++i)
      out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  if (value && info.literal == LiteralKind::F64) {
    APFloat d = *value;
    bool lost = false;
    d.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
    put(d.bitcastToAPInt().getZExtValue(), 8);
    return;
  }
  if (info.literal == LiteralKind::Bool) {
    put(bits.isZero() ? 0 : 1, 1);
    return;
  }
  put(bits.getBitWidth() > 64 ? 0 : bits.getZExtValue(), info.bytes);
}

void Emitter::appendBlobConstant(ConstantOp op, DenseElementsAttr attr,
                                 const ElementInfo &info,
                                 const std::string &name) {
  while (constantBlob_.size() % kAlignment)
    constantBlob_.push_back(0);
  size_t offset = constantBlob_.size();
  if (isa<FloatType>(attr.getElementType())) {
    for (const APFloat &v : attr.getValues<APFloat>())
      appendElementBytes(constantBlob_, info, v.bitcastToAPInt(), &v);
  } else {
    for (const APInt &v : attr.getValues<APInt>())
      appendElementBytes(constantBlob_, info, v, nullptr);
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "// " << typeText(op.getResult());
  if (std::string node = nodeName(op.getLoc()); !node.empty())
    os << ", ONNX node " << commentText(node);
  os << ": bytes [" << offset << ", " << constantBlob_.size()
     << ") of the constants file\nconst " << info.cType << " *const " << name
     << " = reinterpret_cast<const " << info.cType << " *>(dsc_constant_blob + "
     << offset << ");\n\n";
  blobConstantsText_ += text;
}

std::string Emitter::viewDecl(Value v, const Storage &s,
                              const std::string &name,
                              const std::string &sourceName) {
  auto type = cast<RankedTensorType>(v.getType());
  auto info = *elementInfo(type.getElementType(), options_.promoteF32ToF64);
  std::string shape = cppInts(type.getShape());
  switch (s.kind) {
  case Storage::Kind::Argument:
    return "const Tensor &" + name + " = args[" + std::to_string(s.index) +
           "];";
  case Storage::Kind::Result: {
    std::string result = "results[" + std::to_string(s.index) + "]";
    auto func = cast<func::FuncOp>(v.getParentBlock()->getParentOp());
    if (func.getResultTypes()[s.index] == v.getType())
      return "const Tensor &" + name + " = " + result + ";";
    // The source of a returned reshape: the result's bytes, its own shape.
    return "const Tensor " + name + " = view(" + result + ".data, " +
           info.dtype + ", " + shape + ");";
  }
  case Storage::Kind::Constant:
    // On a GPU, the copy of array kConst<i> in the device's memory (a host
    // op's constant: the array itself).
    return "const Tensor " + name + " = view(" +
           (target_.deviceMemory && !codegen::isHostValue(v)
                ? "ctx.consts[" + sourceName.substr(strlen(kConstPrefix)) + "]"
                : sourceName) +
           ", " + info.dtype + ", " + shape + ");";
  case Storage::Kind::Alias:
    return "const Tensor " + name + " = view(" + sourceName + ".data, " +
           info.dtype + ", " + shape + ");";
  case Storage::Kind::Arena:
    return "const Tensor " + name + " = view(ctx.frame + " +
           std::to_string(s.offset) + ", " + info.dtype + ", " + shape + ");";
  case Storage::Kind::HostArena:
    return "const Tensor " + name + " = view(ctx.hostFrame + " +
           std::to_string(s.offset) + ", " + info.dtype + ", " + shape + ");";
  }
  llvm_unreachable("unknown storage kind");
}

LogicalResult Emitter::emitFusedKernels(func::FuncOp func) {
  for (auto fused : func.getBody().front().getOps<FusedOp>()) {
    if (!target_.generatedKernels)
      return fused.emitOpError("needs a target with generated kernels; "
                               "dsc.target \"")
             << target_.name << "\" has none (compile for cuda)";
    if (options_.promoteF32ToF64)
      return fused.emitOpError("fused kernels compute in the IR's float32: "
                               "not available when computing in float64");
    FailureOr<std::string> text =
        codegen::emitFusedKernel(fused, kFusedPlaceholder);
    if (failed(text))
      return failure();
    auto [it, isNew] = fusedByText_.try_emplace(*text, "");
    if (isNew) {
      it->second = "fused" + std::to_string(fusedCount_++);
      fusedText_ += replaceAll(*text, kFusedPlaceholder, it->second);
    }
    fusedNames_[fused] = it->second;
  }
  return success();
}

void Emitter::recordPeak(func::FuncOp func, const codegen::FramePlan &plan) {
  PhaseOps marks = phaseOps(func);
  peak_.peakFunction = func.getSymName().str();
  peak_.peakBytes = plan.peakLiveBytes;
  peak_.peakAt = plan.peakOp->getName().getStringRef().str();
  if (std::string node = nodeName(plan.peakOp->getLoc()); !node.empty())
    peak_.peakAt += " [" + node + "]";
  peak_.peakValues.clear();
  for (Value v : plan.peakLive) {
    Operation *def = v.getDefiningOp();
    EmitCppStats::PeakValue p;
    p.op = def->getName().getStringRef().str();
    p.node = nodeName(def->getLoc());
    p.type = typeText(v);
    p.bytes = plan.storage.lookup(v).bytes;
    p.kind = arenaKind(def, plan.peakOp, marks);
    peak_.peakValues.push_back(std::move(p));
  }
}

void Emitter::recordTimeline(func::FuncOp func,
                             const codegen::FramePlan &plan) {
  PhaseOps marks = phaseOps(func);
  FrameTimeline &t = timelines_[func.getSymName()];
  std::vector<Operation *> ops;
  for (Operation &op : func.getBody().front())
    ops.push_back(&op);
  t.ops = static_cast<int64_t>(ops.size());
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (plan.dead.contains(op))
      continue;
    if (op == marks.backward)
      t.backwardAt = static_cast<int64_t>(i);
    if (op == marks.lastCall)
      t.optimizerAt = static_cast<int64_t>(i) + 1;
    if (auto call = dyn_cast<func::CallOp>(op))
      t.calls.push_back({static_cast<int64_t>(i), plan.calleeOffset.lookup(op),
                         call.getCallee().str()});
    for (Value r : op->getResults()) {
      const Storage &s = plan.storage.lookup(r);
      if (s.kind != Storage::Kind::Arena)
        continue;
      EmitCppStats::ArenaBuffer b;
      b.offset = s.offset;
      b.bytes = s.bytes;
      b.first = static_cast<int64_t>(s.firstOp);
      b.last = static_cast<int64_t>(s.lastOp);
      b.kind = arenaKind(op, ops[s.lastOp], marks);
      b.op = op->getName().getStringRef().str();
      b.node = nodeName(op->getLoc());
      b.type = typeText(r);
      b.function = func.getSymName().str();
      t.buffers.push_back(std::move(b));
    }
  }
}

void Emitter::spliceTimeline(StringRef name, uint64_t base, int64_t &clock,
                             EmitCppStats &out) {
  auto it = timelines_.find(name);
  if (it == timelines_.end()) {
    ++clock; // a function that is not emitted here
    return;
  }
  const FrameTimeline &t = it->second;
  // Each op's first and last tick: one, or its callee's whole run.
  std::vector<int64_t> start(t.ops), end(t.ops);
  size_t nextCall = 0;
  for (int64_t i = 0; i < t.ops; ++i) {
    start[i] = clock;
    if (i == t.backwardAt)
      out.phases.push_back({"forward", start[0]});
    if (i == t.backwardAt)
      out.phases.push_back({"backward", clock});
    if (i == t.optimizerAt)
      out.phases.push_back({"optimizer", clock});
    if (nextCall < t.calls.size() && t.calls[nextCall].at == i) {
      const FrameTimeline::Call &call = t.calls[nextCall++];
      spliceTimeline(call.callee, base + call.offset, clock, out);
    } else {
      ++clock;
    }
    end[i] = clock - 1;
  }
  for (const EmitCppStats::ArenaBuffer &b : t.buffers) {
    EmitCppStats::ArenaBuffer &o = out.timeline.emplace_back(b);
    o.offset += base;
    o.first = start[b.first];
    o.last = end[b.last];
  }
}

/// The state a dsc.nvme_read or dsc.nvme_write moves, for its messages:
/// the name its argument or result has ("'h.0.w/exp_avg'"), else
/// `fallback` (its operand's SSA name).
static std::string nvmeStateName(Operation *op, const std::string &fallback) {
  auto fn = op->getParentOfType<func::FuncOp>();
  StringAttr name;
  auto named = [&](DictionaryAttr attrs) {
    for (const char *role : {"dsc.param", "dsc.opt_state", "dsc.param_update",
                             "dsc.opt_state_update"})
      if (auto n = attrs ? attrs.getAs<StringAttr>(role) : StringAttr())
        return n;
    return StringAttr();
  };
  if (auto arg = dyn_cast<BlockArgument>(op->getOperand(0)); arg && fn)
    name = named(fn.getArgAttrDict(arg.getArgNumber()));
  for (OpOperand &use : op->getResult(0).getUses())
    if (isa<func::ReturnOp>(use.getOwner()) && fn && !name)
      name = named(fn.getResultAttrDict(use.getOperandNumber()));
  std::string what = name ? "'" + name.getValue().str() + "'" : fallback;
  return isa<NvmeReadOp>(op) ? what + " from its file"
                             : what + " into its file";
}

/// Whether `func` copies between host and device (dsc-offload): its copy
/// stream then joins the compute stream before it returns.
static bool usesOffload(func::FuncOp func) {
  return llvm::any_of(func.getBody().front(), [](Operation &op) {
    return isa<OffloadCopyOp>(op);
  });
}

/// `text` with the generated code's runtime alias `rt::` as `ns::` (a host
/// op of a device program calls the CPU runtime).
static std::string onRuntime(std::string text, StringRef ns) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    bool word = i == 0 || !(isalnum(text[i - 1]) || text[i - 1] == '_' ||
                            text[i - 1] == ':');
    if (word && text.compare(i, 4, "rt::") == 0) {
      out += ns.str() + "::";
      i += 3;
      continue;
    }
    out += text[i];
  }
  return out;
}

LogicalResult Emitter::emitFunction(func::FuncOp func) {
  StringRef fname = func.getSymName();
  std::string label = ("@" + fname).str();

  // Every value must be a static tensor of a supported dtype.
  Block &body = func.getBody().front();
  for (BlockArgument arg : body.getArguments())
    if (failed(element(arg, func)))
      return failure();
  for (Operation &op : body)
    for (Value r : op.getResults())
      if (failed(element(r, &op)))
        return failure();

  codegen::PlanOptions planOptions;
  planOptions.reuse = options_.reuseMemory;
  planOptions.aliasReshapes = options_.aliasReshapes;
  planOptions.alignment = target_.bufferAlignment;
  planOptions.asyncCollectives = target_.asyncCollectives;
  planOptions.separateHost = target_.deviceMemory;
  if (failed(emitFusedKernels(func)))
    return failure();
  planOptions.bytes = [&](Value v) -> uint64_t {
    auto type = cast<RankedTensorType>(v.getType());
    auto info = *elementInfo(type.getElementType(), options_.promoteF32ToF64);
    return static_cast<uint64_t>(type.getNumElements()) * info.bytes;
  };
  planOptions.isStaticConstant = [&](Operation *op) {
    return isStaticConstant(op);
  };
  planOptions.calleeBytes = [&](func::CallOp call) -> uint64_t {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    return totalBytes_.lookup(callee);
  };
  FramePlan plan = codegen::planFrame(func, planOptions);
  current_.clear();
  totalBytes_[func] = plan.totalBytes;
  hostBytes_ = std::max(hostBytes_, plan.hostBytes);
  frames_.emplace_back(fname.str(), plan.totalBytes);
  gatheredPeakBytes_ = std::max(gatheredPeakBytes_, plan.gatheredPeakBytes);
  if (plan.peakLiveBytes > peak_.peakBytes)
    recordPeak(func, plan);
  if (options_.recordTimeline)
    recordTimeline(func, plan);
  gatheredBucketBytes_ =
      std::max(gatheredBucketBytes_, plan.gatheredBucketBytes);

  std::string text;
  llvm::raw_string_ostream os(text);
  auto count = [](size_t n, const char *noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
  };
  os << "// " << label << ": " << count(func.getNumArguments(), "argument")
     << ", " << count(func.getNumResults(), "result") << "; arena frame "
     << bytesText(plan.totalBytes) << " (its own values "
     << bytesText(plan.ownBytes) << ")\n";
  os << "Status " << functionIdentifier(fname)
     << "([[maybe_unused]] const Context &ctx,\n"
     << "    [[maybe_unused]] const Tensor *args,\n"
     << "    [[maybe_unused]] const Tensor *results) {\n";

  for (BlockArgument arg : body.getArguments()) {
    std::string name = identifier(ssaName(arg));
    names_[arg] = name;
    bool used = llvm::any_of(arg.getUsers(), [&](Operation *user) {
      return !plan.dead.contains(user);
    });
    if (!used)
      continue;
    os << "  " << viewDecl(arg, plan.storage.lookup(arg), name, "") << " // "
       << typeText(arg);
    if (DictionaryAttr attrs = func.getArgAttrDict(arg.getArgNumber()))
      for (NamedAttribute a : attrs)
        if (a.getName().strref().starts_with("dsc.")) {
          os << " " << a.getName().strref();
          if (auto s = dyn_cast<StringAttr>(a.getValue()))
            os << " \"" << commentText(s.getValue()) << "\"";
        }
    os << "\n";
  }

  // Op numbers (in comments and unlabelled collectives' manifest entries)
  // do not count dsc.collective_input: it runs nothing, and the manifest
  // stays what it was before the op existed.
  // The phases the program times (dsc::Phase): forward_backward's start
  // and its backward_begin; in the entry, the optimizer (phaseOps) and the
  // end.
  bool isEntry = fname == options_.entry;
  PhaseOps marks = phaseOps(func);
  auto mark = [&](const char *phase) {
    os << "\n  markPhase(ctx, dsc::Phase::" << phase << ");\n";
  };
  // An entry with forward and backward in its body (dsc-inline-step or
  // dsc-offload's overlap inlined the call): its phases are its own.
  bool inlinedStep = isEntry && !marks.lastCall && marks.backward;
  Operation *optimizerBegin = isEntry ? marks.optimizer : nullptr;
  if (fname == "forward_backward" || inlinedStep)
    mark("Forward");
  size_t i = 0;
  for (Operation &op : body) {
    if (&op == optimizerBegin)
      mark("Optimizer");
    if (auto in = dyn_cast<CollectiveInputOp>(op)) {
      // The collective reads the operand itself.
      names_[in.getResult()] = names_.lookup(in.getInput());
      continue;
    }
    size_t index = i++;
    if (op.hasTrait<OpTrait::IsTerminator>()) {
      if (usesOffload(func))
        os << "\n  // The copy stream's work (dsc-offload) ends with the "
              "step.\n  if (Status s = rt::offloadJoin(); !s.ok())\n"
              "    return s;\n";
      if (isEntry)
        mark("End");
      if (failed(emitReturn(&op, plan, label, os)))
        return failure();
      continue;
    }
    if (op.hasAttr("dsc.backward_begin"))
      mark("Backward");
    if (!plan.dead.contains(&op) && failed(emitOp(&op, index, plan, label, os)))
      return failure();
  }
  os << "  return Status();\n}\n\n";
  functionsText_ += text;
  manifests_[func] = std::move(current_);
  return success();
}

LogicalResult Emitter::emitOp(Operation *op, size_t index,
                              const FramePlan &plan, StringRef function,
                              raw_ostream &os) {
  if (op->getNumRegions() != 0 && !isa<FusedOp>(op))
    return op->emitError("codegen cannot lower op with regions: ")
           << op->getName();
  // The ONNX node(s) an op came from; a collective's NameLoc is its label
  // instead, which the Communicator's messages carry.
  std::string node = isa_and_nonnull<shard::ShardDialect>(op->getDialect())
                         ? std::string()
                         : nodeName(op->getLoc());

  // The comment: the op as in the IR, its result types and its node.
  os << "\n  // ";
  for (auto [i, r] : llvm::enumerate(op->getResults()))
    os << (i ? ", " : "") << ssaName(r);
  if (op->getNumResults())
    os << " = ";
  os << op->getName();
  if (auto call = dyn_cast<func::CallOp>(op))
    os << " @" << call.getCallee();
  os << "(";
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    os << (i ? ", " : "") << ssaName(v);
  os << ")";
  if (op->getNumResults()) {
    os << " -> ";
    for (auto [i, r] : llvm::enumerate(op->getResults()))
      os << (i ? ", " : "") << typeText(r);
  }
  if (!node.empty())
    os << "  [" << commentText(node) << "]";
  else if (auto label = dyn_cast<NameLoc>(op->getLoc());
           label && isa_and_nonnull<shard::ShardDialect>(op->getDialect()))
    os << "  [" << commentText(label.getName().strref()) << "]";
  os << "\n";

  // The result views.
  for (Value r : op->getResults()) {
    std::string name = identifier(ssaName(r));
    names_[r] = name;
    const Storage &s = plan.storage.lookup(r);
    std::string source, prefix;
    if (s.kind == Storage::Kind::Constant) {
      FailureOr<std::string> array = constantArray(cast<ConstantOp>(op));
      if (failed(array))
        return failure();
      source = *array;
    } else if (s.kind == Storage::Kind::Alias) {
      // A reshape returned where its source was computed: nothing to do.
      // (A result written over its operand is computed: it needs its view.)
      const Storage &root = plan.storage.lookup(s.source);
      // Written over an operand (dsc.overwrites, a call's result over its
      // running sum, a classifier's weight gradient over its init): any
      // alias that is not a view.
      bool writesOver = !codegen::isViewOp(op) && !isa<CollectiveInputOp>(op);
      if (!writesOver && r.hasOneUse() &&
          isa<func::ReturnOp>(*r.user_begin()) &&
          root.kind == Storage::Kind::Result &&
          r.use_begin()->getOperandNumber() == root.index) {
        os << "  // (results[" << root.index << "] already holds it)\n";
        continue;
      }
      // The reshape's own operand (same data as s.source), so that every
      // view of a chain is used; for a result written over an operand
      // (dsc.overwrites), that operand.
      source = names_.lookup(op->getOperand(s.operand));
      // ... except the link before a returned reshape that needs no view.
      // (Not a result written over an operand, s.operand > 0: the op
      // computes into it.)
      if (!writesOver && llvm::all_of(r.getUsers(), [](Operation *user) {
            return codegen::isViewOp(user);
          }))
        prefix = "[[maybe_unused]] ";
    }
    os << "  " << prefix << viewDecl(r, s, name, source) << "\n";
  }

  // The call that computes them.
  LoweredCall lowered;
  LowerContext ctx;
  ctx.view = [&](Value v) { return names_.lookup(v); };
  ctx.opIndex = static_cast<int64_t>(index);
  ctx.gridName = gridName_;
  ctx.gridShape = gridShape_;
  ctx.collective = [&](const codegen::CollectiveCall &c) {
    auto in = cast<RankedTensorType>(c.input.getType());
    auto out = cast<RankedTensorType>(c.output.getType());
    auto info = *elementInfo(in.getElementType(), options_.promoteF32ToF64);
    current_.push_back(CollectiveEntry{c.kind, c.what, info.name,
                                       in.getNumElements(),
                                       out.getNumElements(), c.axesMask});
  };
  if (auto constant = dyn_cast<ConstantOp>(op)) {
    if (plan.storage.lookup(constant.getResult()).kind ==
        Storage::Kind::Constant)
      return success();
    auto attr = cast<DenseElementsAttr>(constant.getValue());
    lowered.call =
        codegen::cppCall("rt::fill", {names_.lookup(constant.getResult()),
                                      cppDouble(splatValue(attr))});
  } else if (auto fused = dyn_cast<FusedOp>(op)) {
    // One generated kernel reads the inputs and writes the results.
    std::vector<std::string> operands;
    for (Value v : fused.getInputs())
      operands.push_back(names_.lookup(v));
    for (Value v : fused.getResults())
      operands.push_back(names_.lookup(v));
    lowered.call = codegen::cppCall(fusedNames_.lookup(op), operands);
  } else if (codegen::isViewOp(op) &&
             plan.storage.lookup(op->getResult(0)).kind ==
                 Storage::Kind::Alias) {
    // On a GPU a collective runs on its own stream: its completion is an
    // event the compute stream waits for.
    if (auto wait = dyn_cast<OffloadWaitOp>(op)) {
      lowered.call = "rt::offloadWait(" + names_.lookup(wait.getInput()) +
                     ", " + cppString(ssaName(wait.getInput())) + ")";
      return emitLowered(op, lowered, node, function, os);
    }
    auto wait = dyn_cast<WaitOp>(op);
    if (!target_.asyncCollectives || !wait)
      return success();
    std::string what;
    if (auto label = dyn_cast<NameLoc>(op->getLoc()))
      what = label.getName().str();
    lowered.call = "ctx.comm ? ctx.comm->wait(" +
                   names_.lookup(wait.getInput()) + ", " + cppString(what) +
                   ") : Status()";
  } else if (auto call = dyn_cast<func::CallOp>(op)) {
    std::string base = "call" + std::to_string(index);
    auto list = [&](ValueRange values) {
      std::string s = "{";
      for (auto [i, v] : llvm::enumerate(values))
        s += (i ? ", " : "") + names_.lookup(v);
      return s + "}";
    };
    std::string argsName = "nullptr", resultsName = "nullptr";
    if (call.getNumOperands()) {
      argsName = base + "_args";
      lowered.setup += "const Tensor " + argsName +
                       "[] = " + list(call.getOperands()) + ";\n";
    }
    if (call.getNumResults()) {
      resultsName = base + "_results";
      lowered.setup += "const Tensor " + resultsName +
                       "[] = " + list(call.getResults()) + ";\n";
    }
    // The callee's collectives, in order, each time it is called.
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    const std::vector<CollectiveEntry> &inner = manifests_[callee];
    current_.insert(current_.end(), inner.begin(), inner.end());
    lowered.call = functionIdentifier(call.getCallee()) + "(calleeOf(ctx, " +
                   std::to_string(plan.calleeOffset.lookup(op)) + "), " +
                   argsName + ", " + resultsName + ")";
  } else if (isa<NvmeReadOp, NvmeWriteOp>(op)) {
    if (!op->hasAttr("dsc.on_host"))
      return op->emitError("codegen: ")
             << op->getName()
             << " runs on the host: it needs dsc.on_host, which dsc-offload "
                "optimizer=nvme sets";
    bool read = isa<NvmeReadOp>(op);
    lowered.call = codegen::cppCall(
        read ? "rt::nvmeRead" : "rt::nvmeWrite",
        {names_.lookup(op->getOperand(0)), names_.lookup(op->getResult(0)),
         cppString(nvmeStateName(op, ssaName(op->getOperand(0))))});
  } else if (auto copy = dyn_cast<OffloadCopyOp>(op)) {
    lowered.call = codegen::cppCall(
        "rt::offloadCopy",
        {names_.lookup(copy.getInput()), names_.lookup(copy.getResult()),
         copy.getTo() == "host" ? "true" : "false",
         cppString(ssaName(copy.getInput()) + " to the " +
                   copy.getTo().str())});
  } else {
    if (auto wait = dyn_cast<OffloadWaitOp>(op))
      // Not aliased (--no-alias-reshapes): wait, then copy.
      lowered.call = "[&] { Status w = rt::offloadWait(" +
                     names_.lookup(wait.getInput()) +
                     ", \"\"); return w.ok() ? rt::reshape(" +
                     names_.lookup(wait.getInput()) + ", " +
                     names_.lookup(wait.getResult()) + ") : w; }()";
    if (auto wait = dyn_cast<WaitOp>(op); wait && target_.asyncCollectives) {
      // Not aliased (--no-alias-reshapes): wait, then copy.
      lowered.call = "[&] { Status w = ctx.comm ? ctx.comm->wait(" +
                     names_.lookup(wait.getInput()) +
                     ", \"\") : Status(); return w.ok() ? rt::reshape(" +
                     names_.lookup(wait.getInput()) + ", " +
                     names_.lookup(wait.getResult()) + ") : w; }()";
    }
    using LowerFn = codegen::LowerResult (*)(Operation *, const LowerContext &);
    static const LowerFn families[] = {
        codegen::lowerElementwise, codegen::lowerLinalg,
        codegen::lowerNormLoss,    codegen::lowerDataMovement,
        codegen::lowerOptimizer,   codegen::lowerCollectives};
    bool handled = !lowered.call.empty();
    for (LowerFn lower : families) {
      if (handled)
        break;
      codegen::LowerResult result = lower(op, ctx);
      if (failed(result))
        return failure();
      if (*result) {
        lowered = **result;
        handled = true;
        break;
      }
    }
    if (!handled)
      return op->emitError("codegen has no runtime lowering for ")
             << op->getName();
  }

  if (op->hasAttr("dsc.on_host") && failed(onHost(op, lowered)))
    return failure();
  return emitLowered(op, lowered, node, function, os);
}

/// A host op (dsc-offload's dsc.on_host): the CPU runtime's kernel, as a
/// task that runs after the copies before it (on a GPU, on the copy
/// stream). Its tensors are captured by value: they are views of storage
/// that outlives the step.
LogicalResult Emitter::onHost(Operation *op, LoweredCall &lowered) {
  for (Value v : op->getOperands())
    if (!codegen::isHostValue(v))
      return op->emitError("codegen: the host op reads ")
             << ssaName(v) << ", which is not in host memory (dsc-offload "
                              "copies what a host op reads to the host)";
  std::string body;
  for (StringRef line :
       llvm::split(StringRef(lowered.setup).rtrim('\n'), '\n'))
    if (!line.empty())
      body += "    " + line.str() + "\n";
  lowered.setup.clear();
  // What it reads (copies into those finish first) and writes (copies from
  // those wait for it).
  auto list = [&](auto values) {
    std::string text = "{";
    llvm::SmallDenseSet<Value> seen;
    for (Value v : values)
      if (seen.insert(v).second)
        text += (text.size() > 1 ? ", " : "") + names_.lookup(v);
    return text + "}";
  };
  lowered.call = "rt::hostTask(" + std::to_string(hostSites_++) +
                 ", [=]() -> Status {\n" +
                 onRuntime(body, "dsc::cpu") + "    return " +
                 onRuntime(lowered.call, "dsc::cpu") + ";\n  }, " +
                 cppString(op->getName().getStringRef()) + ",\n      " +
                 list(op->getOperands()) + ",\n      " +
                 list(op->getResults()) + ")";
  return success();
}

LogicalResult Emitter::emitLowered(Operation *op, const LoweredCall &lowered,
                                   StringRef node, StringRef function,
                                   raw_ostream &os) {
  std::string opName = op->getName().getStringRef().str();
  if (auto call = dyn_cast<func::CallOp>(op))
    opName = ("call @" + call.getCallee()).str();
  for (StringRef line : llvm::split(StringRef(lowered.setup).rtrim('\n'), '\n'))
    if (!line.empty())
      os << "  " << line << "\n";
  os << "  if (Status s = " << lowered.call << "; !s.ok())\n"
     << "    return failed(s, " << cppString(function) << ", "
     << cppString(opName) << ", " << cppString(node) << ");\n";
  return success();
}

LogicalResult Emitter::emitReturn(Operation *op, const FramePlan &plan,
                                  StringRef function, raw_ostream &os) {
  if (!isa<func::ReturnOp>(op))
    return op->emitError("codegen cannot lower terminator ") << op->getName();
  bool first = true;
  for (auto [k, v] : llvm::enumerate(op->getOperands())) {
    const Storage &s = plan.storage.lookup(v);
    if (s.kind == Storage::Kind::Result && s.index == k)
      continue;
    if (s.kind == Storage::Kind::Alias) {
      const Storage &source = plan.storage.lookup(s.source);
      if (source.kind == Storage::Kind::Result && source.index == k)
        continue; // the reshape of a value computed into this result
    }
    if (first)
      os << "\n  // Results not computed in place: copied.\n";
    first = false;
    os << "  if (Status s = rt::reshape(" << names_.lookup(v) << ", results["
       << k << "]); !s.ok())\n"
       << "    return failed(s, " << cppString(function) << ", "
       << cppString("return " + ssaName(v)) << ", \"\");\n";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Step 3: the ProgramSpec
//===----------------------------------------------------------------------===//

struct Role {
  const char *role;
  std::string name;
};

std::optional<Role> argRole(DictionaryAttr attrs) {
  if (!attrs)
    return std::nullopt;
  static const std::pair<const char *, const char *> named[] = {
      {"dsc.param", "Param"},
      {"dsc.opt_state", "OptState"},
      {"dsc.buffer", "Buffer"},
      {"dsc.input", "Input"},
      {"dsc.hyper", "Hyper"},
      {"dsc.compute_copy", "ComputeCopy"}};
  for (auto [attr, role] : named)
    if (auto s = attrs.getAs<StringAttr>(attr))
      return Role{role, s.getValue().str()};
  if (attrs.get("dsc.step"))
    return Role{"Step", "step"};
  if (attrs.get("dsc.seed"))
    return Role{"Seed", "seed"};
  if (auto s = attrs.getAs<StringAttr>("dsc.scaler"))
    return Role{"Scaler", s.getValue().str()};
  return std::nullopt;
}

std::optional<Role> resultRole(DictionaryAttr attrs) {
  if (!attrs)
    return std::nullopt;
  static const std::pair<const char *, const char *> named[] = {
      {"dsc.output", "Loss"},
      {"dsc.param_update", "Param"},
      {"dsc.opt_state_update", "OptState"},
      {"dsc.buffer_update", "BufferUpdate"},
      {"dsc.grad", "Grad"},
      {"dsc.compute_copy_update", "ComputeCopy"}};
  for (auto [attr, role] : named)
    if (auto s = attrs.getAs<StringAttr>(attr))
      return Role{role, s.getValue().str()};
  if (attrs.get("dsc.grad_norm"))
    return Role{"GradNorm", "grad_norm"};
  if (attrs.get("dsc.grad_normalizer"))
    return Role{"GradNormalizer", "grad_normalizer"};
  if (attrs.get("dsc.lr"))
    return Role{"Lr", "lr"};
  if (auto s = attrs.getAs<StringAttr>("dsc.scaler_update"))
    return Role{"Scaler", s.getValue().str()};
  if (attrs.get("dsc.overflow"))
    return Role{"Overflow", "overflow"};
  return std::nullopt;
}

/// The argument result `i` of the step is computed in place of
/// (dsc-in-place-updates' dsc.in_place), or -1.
FailureOr<int64_t> inPlaceArgument(func::FuncOp entry, unsigned i) {
  Attribute attr = entry.getResultAttr(i, "dsc.in_place");
  if (!attr)
    return -1;
  auto index = dyn_cast<IntegerAttr>(attr);
  if (!index || index.getInt() < 0 ||
      index.getInt() >= int64_t(entry.getNumArguments()) ||
      entry.getArgumentTypes()[index.getInt()] != entry.getResultTypes()[i])
    return entry.emitError("codegen: result ")
           << i << " of @" << entry.getSymName()
           << " is in place of no argument of its type (dsc.in_place = " << attr
           << ")";
  return index.getInt();
}

FailureOr<std::string> Emitter::emitBuckets(func::FuncOp entry,
                                            int &numBuckets) {
  bucketPadded_.clear();
  numBuckets = 0;
  Attribute attr = module_->getAttr("dsc.buckets");
  if (!attr)
    return std::string("const dsc::BucketSpec *const kBuckets = nullptr;\n");
  auto list = dyn_cast<ArrayAttr>(attr);
  if (!list)
    return module_.emitError("codegen: dsc.buckets must be an array of "
                             "dictionaries, got ")
           << attr;
  // The element type of each bucket's shards (arguments and results).
  std::map<int64_t, Type> shardTypes;
  auto noteShard = [&](DictionaryAttr attrs, Type type) {
    if (auto i = attrs ? attrs.getAs<IntegerAttr>("dsc.bucket") : nullptr)
      shardTypes.try_emplace(i.getInt(),
                             cast<ShapedType>(type).getElementType());
  };
  for (unsigned i = 0; i < entry.getNumArguments(); ++i)
    noteShard(entry.getArgAttrDict(i), entry.getArgumentTypes()[i]);
  for (unsigned i = 0; i < entry.getNumResults(); ++i)
    noteShard(entry.getResultAttrDict(i), entry.getResultTypes()[i]);

  std::string entriesText, specsText;
  for (auto [b, a] : llvm::enumerate(list)) {
    auto bad = [&, b = b]() {
      return module_.emitError("codegen: dsc.buckets[")
             << b << "] must be {name = \"bucketN\", padded = N : i64, "
             << "entries = [[param, offset, numel(, shape)], ...]} (and "
             << "optionally dtype = \"f32\"), got " << list[b];
    };
    auto dict = dyn_cast<DictionaryAttr>(a);
    if (!dict)
      return bad();
    auto name = dict.getAs<StringAttr>("name");
    auto paddedAttr = dict.getAs<IntegerAttr>("padded");
    auto entries = dict.getAs<ArrayAttr>("entries");
    if (!name || !paddedAttr || !entries)
      return bad();
    int64_t padded = paddedAttr.getInt();
    if (padded <= 0 || padded % groupSize_ != 0)
      return module_.emitError("codegen: bucket ")
             << name << " has " << padded
             << " elements, not a positive multiple of the group size "
             << groupSize_;
    Type type;
    Builder builder(module_.getContext());
    if (auto d = dict.get("dtype")) {
      auto text = dyn_cast<StringAttr>(d);
      StringRef t = text ? text.getValue() : "";
      type = t == "f32"    ? Type(builder.getF32Type())
             : t == "f64"  ? Type(builder.getF64Type())
             : t == "f16"  ? Type(builder.getF16Type())
             : t == "bf16" ? Type(builder.getBF16Type())
                           : Type();
      if (!type)
        return module_.emitError("codegen: bucket ")
               << name << " has dtype " << d
               << "; supported: \"f32\", \"f64\", \"f16\", \"bf16\"";
    }
    if (auto it = shardTypes.find(b); it != shardTypes.end()) {
      if (type && type != it->second)
        return module_.emitError("codegen: bucket ")
               << name << " says dtype " << type << " but its shards are "
               << it->second;
      type = it->second;
    }
    if (!type)
      type = builder.getF32Type();
    std::optional<ElementInfo> info =
        elementInfo(type, options_.promoteF32ToF64);
    if (!info)
      return module_.emitError("codegen: bucket ")
             << name << " has no runtime dtype for " << type;

    std::string entriesName = "nullptr";
    if (!entries.empty()) {
      entriesName = "kBucket" + std::to_string(b) + "Entries";
      entriesText += "const dsc::BucketEntry " + entriesName + "[] = {\n";
    }
    for (Attribute e : entries) {
      // [param, offset, numel] or [param, offset, numel, shape].
      auto triple = dyn_cast<ArrayAttr>(e);
      StringAttr param;
      IntegerAttr offset, numel;
      std::optional<SmallVector<int64_t>> shape;
      if (triple && (triple.size() == 3 || triple.size() == 4)) {
        param = dyn_cast<StringAttr>(triple[0]);
        offset = dyn_cast<IntegerAttr>(triple[1]);
        numel = dyn_cast<IntegerAttr>(triple[2]);
        if (triple.size() == 4) {
          shape.emplace();
          if (auto dense = dyn_cast<DenseI64ArrayAttr>(triple[3])) {
            shape->assign(dense.asArrayRef().begin(), dense.asArrayRef().end());
          } else if (auto dims = dyn_cast<ArrayAttr>(triple[3])) {
            for (Attribute d : dims)
              if (auto i = dyn_cast<IntegerAttr>(d))
                shape->push_back(i.getInt());
              else
                return bad();
          } else {
            return bad();
          }
        }
      }
      if (!param || !offset || !numel)
        return bad();
      if (shape) {
        int64_t n = 1;
        for (int64_t d : *shape)
          n *= d;
        if (shape->size() > static_cast<size_t>(kMaxRank) ||
            llvm::any_of(*shape, [](int64_t d) { return d < 0; }) ||
            n != numel.getInt())
          return module_.emitError("codegen: bucket ")
                 << name << ": " << param << " has " << numel.getInt()
                 << " elements, but its shape says " << shapeText(*shape);
      }
      if (offset.getInt() < 0 || numel.getInt() < 0 ||
          offset.getInt() + numel.getInt() > padded)
        return module_.emitError("codegen: bucket ")
               << name << ": " << param << " at [" << offset.getInt() << ", "
               << offset.getInt() + numel.getInt() << ") is outside its "
               << padded << " elements";
      entriesText += "    {" + cppString(param.getValue()) + ", " +
                     std::to_string(offset.getInt()) + ", " +
                     std::to_string(numel.getInt());
      if (shape)
        entriesText +=
            ", " + std::to_string(shape->size()) + ", " + cppInts(*shape);
      entriesText += "},\n";
    }
    if (!entries.empty())
      entriesText += "};\n";
    specsText += "    {" + cppString(name.getValue()) + ", " + info->dtype +
                 ", " + std::to_string(padded) + ", " +
                 std::to_string(entries.size()) + ", " + entriesName + "},\n";
    bucketPadded_.push_back(padded);
  }
  numBuckets = static_cast<int>(list.size());
  if (list.empty())
    return std::string("const dsc::BucketSpec *const kBuckets = nullptr;\n");
  return entriesText + "const dsc::BucketSpec kBuckets[] = {\n" + specsText +
         "};\n";
}

LogicalResult Emitter::emitSpec(func::FuncOp entry, raw_ostream &os) {
  auto tensorSpec = [&](Type type) {
    auto t = cast<RankedTensorType>(type);
    auto info = *elementInfo(t.getElementType(), options_.promoteF32ToF64);
    return std::string("{") + info.dtype + ", " + std::to_string(t.getRank()) +
           ", " + cppInts(t.getShape()) + "}";
  };
  auto isScalarI64 = [](Type type) {
    auto t = cast<RankedTensorType>(type);
    return t.getNumElements() == 1 && t.getElementType().isSignlessInteger(64);
  };

  // The buckets first: arguments and results name them.
  int numBuckets = 0;
  FailureOr<std::string> bucketsText = emitBuckets(entry, numBuckets);
  if (failed(bucketsText))
    return failure();
  // `dsc.bucket = i`: a shard of bucket i, [paddedNumel / groupSize].
  auto bucketOf = [&](DictionaryAttr attrs, Type type,
                      const std::string &what) -> FailureOr<int64_t> {
    Attribute a = attrs ? attrs.get("dsc.bucket") : Attribute();
    if (!a)
      return int64_t(-1);
    auto i = dyn_cast<IntegerAttr>(a);
    if (!i || i.getInt() < 0 || i.getInt() >= numBuckets)
      return entry.emitError("codegen: ")
             << what << " of @" << entry.getSymName() << ": dsc.bucket = " << a
             << " names no bucket (the module has " << numBuckets << ")";
    int64_t padded = bucketPadded_[i.getInt()];
    auto t = cast<RankedTensorType>(type);
    if (t.getRank() != 1 || t.getDimSize(0) * groupSize_ != padded)
      return entry.emitError("codegen: ")
             << what << " of @" << entry.getSymName() << " is a shard of "
             << "bucket " << i.getInt() << " (" << padded
             << " elements over a group of " << groupSize_ << "), so it must "
             << "be 1-D of " << padded / groupSize_ << " elements, got "
             << type;
    return i.getInt();
  };

  int stepArg = -1, seedArg = -1;
  int64_t firstInputDim0 = 0;
  std::string argsText, resultsText;
  for (unsigned i = 0; i < entry.getNumArguments(); ++i) {
    std::optional<Role> role = argRole(entry.getArgAttrDict(i));
    if (!role)
      return entry.emitError("codegen: argument ")
             << i << " of @" << entry.getSymName()
             << " has no role (dsc.param, dsc.opt_state, dsc.buffer, "
                "dsc.input, dsc.hyper, dsc.step or dsc.seed)";
    Type type = entry.getArgumentTypes()[i];
    if (StringRef(role->role) == "Step" || StringRef(role->role) == "Seed") {
      if (!isScalarI64(type))
        return entry.emitError("codegen: the ")
               << role->name << " argument must be tensor<i64>, got " << type;
      (StringRef(role->role) == "Step" ? stepArg : seedArg) = i;
    }
    if (StringRef(role->role) == "Input" && !firstInputDim0) {
      auto t = cast<RankedTensorType>(type);
      firstInputDim0 = t.getRank() ? t.getDimSize(0) : 1;
    }
    FailureOr<int64_t> bucket = bucketOf(entry.getArgAttrDict(i), type,
                                         "argument " + std::to_string(i));
    if (failed(bucket))
      return failure();
    auto memory = entry.getArgAttrOfType<StringAttr>(i, "dsc.memory");
    bool nvme = memory && memory.getValue() == "nvme";
    argsText +=
        "    {dsc::ArgRole::" + std::string(role->role) + ", " +
        cppString(role->name) + ", " + tensorSpec(type) + ", " +
        std::to_string(*bucket) +
        (codegen::isHostValue(entry.getArgument(i)) ? ", /*host=*/true" : "") +
        (nvme ? ", /*nvme=*/true" : "") + "},\n";
  }
  for (unsigned i = 0; i < entry.getNumResults(); ++i) {
    std::optional<Role> role = resultRole(entry.getResultAttrDict(i));
    if (!role)
      return entry.emitError("codegen: result ")
             << i << " of @" << entry.getSymName()
             << " has no role (dsc.output, dsc.param_update, "
                "dsc.opt_state_update, dsc.buffer_update, dsc.grad, "
                "dsc.grad_norm, dsc.grad_normalizer or dsc.lr)";
    Type type = entry.getResultTypes()[i];
    FailureOr<int64_t> bucket = bucketOf(entry.getResultAttrDict(i), type,
                                         "result " + std::to_string(i));
    if (failed(bucket))
      return failure();
    FailureOr<int64_t> inPlaceOf = inPlaceArgument(entry, i);
    if (failed(inPlaceOf))
      return failure();
    auto memory = entry.getResultAttrOfType<StringAttr>(i, "dsc.memory");
    bool nvme = memory && memory.getValue() == "nvme";
    bool host = nvme || (memory && memory.getValue() == "host");
    if (host && *inPlaceOf < 0 && (target_.deviceMemory || nvme))
      return entry.emitError("codegen: result ")
             << i << " of @" << entry.getSymName() << " is in "
             << (nvme ? "an NVMe file" : "host memory")
             << " (dsc-offload) but not computed in place of its argument "
                "(dsc-in-place-updates); offload needs in-place updates "
                "(drop --no-in-place-updates)";
    resultsText +=
        "    {dsc::ResultRole::" + std::string(role->role) + ", " +
        cppString(role->name) + ", " + tensorSpec(type) + ", " +
        std::to_string(*bucket) +
        (*inPlaceOf >= 0 || host ? ", " + std::to_string(*inPlaceOf) : "") +
        (host ? ", /*host=*/true" : "") + (nvme ? ", /*nvme=*/true" : "") +
        "},\n";
  }

  // Module attributes, with defaults for a module dsc-optimizer has not seen.
  auto intAttr = [&](StringRef name, int64_t fallback) {
    if (auto a = module_->getAttrOfType<IntegerAttr>(name))
      return a.getInt();
    return fallback;
  };
  std::string optimizer = "none";
  if (auto a = module_->getAttrOfType<StringAttr>("dsc.optimizer"))
    optimizer = a.getValue().str();
  std::string modelPath = options_.modelPath;
  if (auto a = module_->getAttrOfType<StringAttr>("dsc.model_path"))
    modelPath = a.getValue().str();
  else if (auto a = module_->getAttrOfType<StringAttr>("dsc.source");
           a && modelPath.empty())
    modelPath = a.getValue().str();
  std::string hypersText;
  int numHypers = 0;
  if (auto hypers = module_->getAttrOfType<DictionaryAttr>("dsc.hypers")) {
    for (NamedAttribute h : hypers) {
      auto value = dyn_cast<FloatAttr>(h.getValue());
      if (!value)
        return module_.emitError("codegen: dsc.hypers entry ")
               << h.getName() << " must be a float, got " << h.getValue();
      hypersText += "    {" + cppString(h.getName().strref()) + ", " +
                    cppDouble(value.getValueAsDouble()) + "},\n";
      ++numHypers;
    }
  }

  std::string precision = "fp32";
  if (auto a = module_->getAttrOfType<StringAttr>("dsc.precision"))
    precision = a.getValue().str();
  std::string lossScaler = "{}";
  if (auto a = module_->getAttrOfType<DictionaryAttr>("dsc.loss_scaler")) {
    auto f = [&](StringRef k) {
      auto v = a.getAs<FloatAttr>(k);
      return cppDouble(v ? v.getValueAsDouble() : 0.0);
    };
    auto i = [&](StringRef k) {
      auto v = a.getAs<IntegerAttr>(k);
      return std::to_string(v ? v.getInt() : 0);
    };
    auto dynamic = a.getAs<BoolAttr>("dynamic");
    lossScaler = std::string("{true, ") +
                 codegen::cppBool(dynamic && dynamic.getValue()) + ", " +
                 f("initial_scale") + ", " + i("window") + ", " +
                 i("hysteresis") + ", " + f("min_scale") + "}";
  }

  uint64_t arenaBytes = totalBytes_.lookup(entry);
  os << "//===- The program spec and its TrainStepFn "
        "------------------------------===//\n\n";
  if (entry.getNumArguments())
    os << "const dsc::ArgSpec kArgs[] = {\n" << argsText << "};\n";
  else
    os << "const dsc::ArgSpec *const kArgs = nullptr;\n";
  if (entry.getNumResults())
    os << "const dsc::ResultSpec kResults[] = {\n" << resultsText << "};\n";
  else
    os << "const dsc::ResultSpec *const kResults = nullptr;\n";
  if (numHypers)
    os << "const dsc::HyperDefault kHypers[] = {\n" << hypersText << "};\n";
  else
    os << "const dsc::HyperDefault *const kHypers = nullptr;\n";
  os << *bucketsText;
  // The manifest: the collectives one rank issues, in order.
  const std::vector<CollectiveEntry> &collectives = manifests_[entry];
  if (collectives.empty()) {
    os << "const dsc::CollectiveSpec *const kCollectives = nullptr;\n";
  } else {
    os << "// The collectives every rank issues in one step, in order.\n"
       << "const dsc::CollectiveSpec kCollectives[] = {\n";
    for (const CollectiveEntry &c : collectives) {
      os << "    {" << cppString(c.kind) << ", " << cppString(c.what) << ", "
         << dtypeEnumerator(c.dtype) << ", " << c.inNumel << ", " << c.outNumel
         << ", " << c.axesMask << "u},\n";
    }
    os << "};\n";
  }
  os << "constexpr int kNumArgs = " << entry.getNumArguments() << ";\n"
     << "constexpr int kNumResults = " << entry.getNumResults() << ";\n"
     << "constexpr size_t kArenaBytes = " << arenaBytes << "; // "
     << bytesText(arenaBytes) << "\n\n";

  os << "/// Checks what it is handed, then runs @" << entry.getSymName()
     << " at the start of the arena.\n"
     << "Status trainStep(const dsc::RankContext &rank, const Tensor *args,\n"
     << "                 const Tensor *results) {\n"
     << "  if (!rank.arena)\n"
     << "    return Status::error(dsc::StatusCode::InvalidArgument,\n"
     << "                         \"train_step: no arena\");\n"
     << "  if (Status s = checkTensors(\"argument\", kArgs, kNumArgs, args);"
        " !s.ok())\n    return s;\n"
     << "  if (Status s = checkTensors(\"result\", kResults, kNumResults, "
        "results);\n      !s.ok())\n    return s;\n"
     << "  if (Status s = checkDisjoint(kArgs, args, kNumArgs, kResults, "
        "results,\n                              kNumResults);\n"
     << "      !s.ok())\n    return s;\n"
     << (gridName_.empty() ? "" : kCheckCommunicator)
     << "  void *frame = nullptr;\n"
     << "  if (Status s = rank.arena->at(0, kArenaBytes, &frame); !s.ok())\n"
     << "    return s;\n"
     << (hostBytes_
             ? "  void *hostFrame = nullptr; // dsc-offload's host values\n"
               "  if (!rank.hostArena)\n"
               "    return Status::error(dsc::StatusCode::InvalidArgument,\n"
               "                         \"train_step: no host arena\");\n"
               "  if (Status s = rank.hostArena->at(0, " +
                   std::to_string(hostBytes_) +
                   ", &hostFrame); !s.ok())\n"
                   "    return s;\n"
             : std::string())
     << "  int64_t calls = 0;\n"
     << (target_.deviceMemory ? "  const void *const *consts = nullptr;\n"
                         "  if (Status s = deviceConstants(&consts); !s.ok())\n"
                         "    return s;\n"
                       : "")
     << "  const Context ctx{"
     << (target_.deviceMemory // the host's copies from the context
             ? std::string("static_cast<uint64_t>(rank.seed)")
             : seedArg >= 0 ? "static_cast<uint64_t>(*args[" +
                                  std::to_string(seedArg) + "].as<int64_t>())"
                            : std::string("0"))
     << ", "
     << (target_.deviceMemory ? std::string("rank.step")
         : stepArg >= 0 ? "*args[" + std::to_string(stepArg) + "].as<int64_t>()"
                        : std::string("0"))
     << ", 0, &calls,\n                    static_cast<char *>(frame), "
        "rank.comm, "
     << (target_.deviceMemory ? "consts" : "nullptr") << ", rank.clock, "
     << (hostBytes_ ? "static_cast<char *>(hostFrame)" : "nullptr")
     << "};\n"
     << "  return " << functionIdentifier(entry.getSymName())
     << "(ctx, args, results);\n}\n\n"
     << "} // namespace\n\n";

  os << "extern const dsc::ProgramSpec " << options_.specName << ";\n"
     << "const dsc::ProgramSpec " << options_.specName << " = {\n"
     << "    /*modelPath=*/" << cppString(modelPath) << ",\n"
     << "    /*optimizer=*/" << cppString(optimizer) << ",\n"
     << "    /*microBatch=*/"
     << intAttr("dsc.micro_batch", firstInputDim0 ? firstInputDim0 : 1) << ",\n"
     << "    /*accumSteps=*/" << intAttr("dsc.accum_steps", 1) << ",\n"
     << "    /*tokensPerExample=*/" << intAttr("dsc.tokens_per_example", 1)
     << ",\n"
     << "    kNumArgs,\n    kArgs,\n    kNumResults,\n    kResults,\n"
     << "    /*numHypers=*/" << numHypers << ",\n    kHypers,\n"
     << "    kArenaBytes,\n    trainStep,\n"
     << "    /*worldSize=*/" << worldSize_ << ",\n"
     << "    /*groupSize=*/" << groupSize_ << ",\n"
     << "    /*stage=*/" << stage_ << ",\n"
     << "    /*numBuckets=*/" << numBuckets << ",\n    kBuckets,\n"
     << "    /*numCollectives=*/" << collectives.size()
     << ",\n    kCollectives,\n"
     << "    /*device=*/" << runtime_.device << ",\n"
     << "    /*precision=*/" << cppString(precision) << ",\n"
     << "    /*lossScaler=*/" << lossScaler << ",\n";
  auto text = [](const std::string &v) {
    return v.empty() ? std::string("nullptr") : cppString(v);
  };
  os << "    /*dscVersion=*/" << text(options_.dscVersion) << ",\n"
     << "    /*compileCommand=*/" << text(options_.compileCommand) << ",\n"
     << "    /*target=*/" << text(options_.target) << ",\n"
     << "    /*modelSha256=*/" << text(options_.modelSha256) << ",\n"
     << "    /*configJson=*/" << text(options_.configJson) << ",\n"
     << "    /*runDefaults=*/" << text(options_.runDefaults) << ",\n"
     << "    /*flopsPerStep=*/"
     << llvm::formatv("{0:e}", codegen::stepFlops(module_, entry)).str()
     << ",\n"
     << "    /*hostArenaBytes=*/" << hostBytes_ << ",\n"
     << "    /*workspaceBytes=*/"
     << codegen::estimateWorkspaces(module_).total() << ",\n"
     << "    /*nvmePath=*/" << text(options_.nvmePath) << ",\n};\n";
  return success();
}

LogicalResult Emitter::run(raw_ostream &out, EmitCppStats *stats) {
  if (failed(checkGrid()) || failed(orderFunctions()))
    return failure();
  for (func::FuncOp f : order_)
    if (failed(emitFunction(f)))
      return failure();
  auto entry = SymbolTable(module_).lookup<func::FuncOp>(options_.entry);
  std::string specText;
  llvm::raw_string_ostream spec(specText);
  if (failed(emitSpec(entry, spec)))
    return failure();

  std::string source = "?";
  if (auto a = module_->getAttrOfType<StringAttr>("dsc.source"))
    source = a.getValue().str();
  uint64_t arenaBytes = totalBytes_.lookup(entry);
  out << "//===- Generated by dsc from " << commentText(source)
      << ": do not edit ---===//\n"
      << "//\n"
      << "// @" << entry.getSymName() << " as calls to the dsc "
      << runtime_.title
      << " runtime. Every value lives at a\n"
      << "// static offset of one arena of " << arenaBytes << " bytes ("
      << bytesText(arenaBytes) << "); constants take "
      << bytesText(constantBytes_) << ".\n"
      << (options_.promoteF32ToF64
              ? "// Computes in float64 where the model says float32.\n"
              : "")
      << "//\n"
      << "//===------------------------------------------------------------"
         "----------===//\n\n"
      << runtime_.includes << kPrelude << "namespace rt = " << runtime_.ns
      << "; // the runtime's kernels\n";
  if (!gridName_.empty())
    out << "\n// The rank grid @" << gridName_ << ": " << gridShape_[0]
        << " replicas x groups of " << gridShape_[1] << ".\n"
        << "constexpr int64_t kWorldSize = " << worldSize_ << ";\n"
        << "constexpr int64_t kGroupSize = " << groupSize_ << ";\n"
        << kCommPrelude;
  out << "\n";
  if (!constantsText_.empty() || !blobConstantsText_.empty())
    out << "//===- Constants "
           "----------------------------------------------------------===//"
           "\n\n"
        << constantsText_;
  if (!blobConstantsText_.empty())
    out << blobPrelude(options_.constantsPath) << blobConstantsText_;
  if (target_.deviceMemory) {
    out << "constexpr int kNumConstants = " << constants_.size() << ";\n";
    std::vector<std::string> byIndex(constants_.size());
    for (auto &[attr, name] : constants_)
      byIndex[std::stoul(name.substr(strlen(kConstPrefix)))] = name;
    out << "const void *const kConstantArrays[] = {";
    for (const std::string &name : byIndex)
      out << name << ", ";
    out << "nullptr};\nconst size_t kConstantBytes[] = {";
    for (uint64_t bytes : constantSizes_)
      out << bytes << ", ";
    out << "0};\n" << kCudaConstants << "\n";
  }
  if (!fusedText_.empty())
    out << "//===- Fused elementwise kernels "
           "-------------------------------------------===//\n\n"
        << "namespace ops = dsc::cuda::ops;\n"
        << "namespace detail = dsc::cuda::detail;\n"
        << "using ops::BinaryOp;\nusing ops::UnaryOp;\n\n"
        << fusedText_;
  out << "//===- Functions, callees first "
         "-------------------------------------------===//\n\n"
      << functionsText_ << specText;
  if (options_.emitMain)
    out << "\nint main(int argc, char **argv) {\n"
        << "  return dsc::runProgram(" << options_.specName
        << ", argc, argv);\n}\n";

  if (stats) {
    stats->arenaBytes = arenaBytes;
    stats->hostArenaBytes = hostBytes_;
    stats->frameBytes = frames_;
    stats->gatheredPeakBytes = gatheredPeakBytes_;
    stats->gatheredBucketBytes = gatheredBucketBytes_;
    stats->peakFunction = peak_.peakFunction;
    stats->peakAt = peak_.peakAt;
    stats->peakBytes = peak_.peakBytes;
    stats->peakValues = peak_.peakValues;
    stats->constantBytes = constantBytes_;
    stats->constantBlob = constantBlob_;
    stats->worldSize = worldSize_;
    stats->groupSize = groupSize_;
    stats->stage = stage_;
    stats->collectives = manifests_.lookup(entry);
    if (options_.recordTimeline) {
      int64_t clock = 0;
      spliceTimeline(entry.getSymName(), 0, clock, *stats);
      stats->timelineOps = clock;
    }
  }
  return success();
}

} // namespace

LogicalResult emitCpp(ModuleOp module, raw_ostream &os,
                      const EmitCppOptions &options, EmitCppStats *stats) {
  FailureOr<TargetDescription> target = TargetDescription::of(module);
  if (failed(target))
    return failure();
  return Emitter(module, options, *target).run(os, stats);
}

void writeManifestJson(const EmitCppStats &stats, raw_ostream &os) {
  llvm::json::OStream json(os, /*IndentSize=*/2);
  json.object([&] {
    json.attribute("world_size", stats.worldSize);
    json.attribute("group_size", stats.groupSize);
    json.attribute("stage", stats.stage);
    json.attributeArray("collectives", [&] {
      for (const CollectiveEntry &c : stats.collectives)
        json.object([&] {
          json.attribute("kind", c.kind);
          json.attribute("what", c.what);
          json.attribute("dtype", c.dtype);
          json.attribute("in_numel", c.inNumel);
          json.attribute("out_numel", c.outNumel);
          json.attribute("axes_mask", static_cast<int64_t>(c.axesMask));
        });
    });
  });
  os << "\n";
}

LogicalResult emitManifestJson(ModuleOp module, raw_ostream &os,
                               const EmitCppOptions &options) {
  std::string source;
  llvm::raw_string_ostream discard(source);
  EmitCppStats stats;
  if (failed(emitCpp(module, discard, options, &stats)))
    return failure();
  writeManifestJson(stats, os);
  return success();
}

} // namespace dsc
