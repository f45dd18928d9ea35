//===- MemoryReport.cpp - per-rank memory of every ZeRO stage -------------===//
//
// Per parameter, with s bytes per element and k optimizer slots of s bytes
// (AdamW 2, SGD-momentum 1), in groups of G ranks sharing state, and Psi'
// the parameter count padded per bucket to a multiple of G:
//   stage 0: params s*Psi   grads s*Psi    state k*s*Psi
//   stage 1: params s*Psi   grads s*Psi    state k*s*Psi'/G
//   stage 2: params s*Psi   grads s*Psi'/G state k*s*Psi'/G
//   stage 3: params s*Psi'/G grads s*Psi'/G state k*s*Psi'/G
// which for fp32 AdamW (s = 4, k = 2) are ZeRO's 16 Psi, 8 Psi + 8 Psi/N,
// 4 Psi + 12 Psi/N and 16 Psi/N. Mixed precision (dsc-mixed-precision)
// keeps all of that in fp32 (masters, state, gradients accumulated and
// reduced in fp32) and adds the c = 2-byte compute copy: c*Psi at stages
// 0-2, c*Psi'/G at stage 3 (the shard's copy; the gathered copy is a
// communication buffer). So bf16 AdamW at stage 0 holds 2 + 4 + 8 + 4 =
// 18 Psi, ZeRO's 16 Psi being the same with 16-bit gradients.
//
//===----------------------------------------------------------------------===//
#include "tools/dsc/MemoryReport.h"

#include "passes/StepMath.h"

#include "compiler/codegen/Workspaces.h"

#include <map>
#include <vector>
#include "tools/dsc/Summary.h"

#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace mlir;

namespace dsc {

std::string humanBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return llvm::formatv(u ? "{0:f2} {1}" : "{0:f0} {1}", bytes, units[u]).str();
}

namespace {

struct StageBytes {
  double params = 0, copy = 0, grads = 0, state = 0, buffers = 0;
  double total() const { return params + copy + grads + state + buffers; }
};

/// The model states per rank at `stage` (ZeRO's formulas for dsc's
/// layout). `shardMasters`: stages 1-2 in mixed precision shard the fp32
/// masters and their compute copies as stage 3 does, and hold the whole
/// 16-bit model gathered through the step (dsc-zero-partition
/// shard-masters, what `dsc compile` does): at stage 2, 2 + 18/N bytes a
/// parameter, ZeRO's 2 + 14/N with fp32 gradient shards (+2/N) and the
/// shard's 16-bit copy the gather reads (+2/N).
StageBytes formula(int stage, double psi, double padded, double g, double s,
                   double k, double c, double largestBucket,
                   bool shardMasters) {
  StageBytes b;
  bool shardedParams = stage == 3 || (shardMasters && stage >= 1);
  b.params = shardedParams ? s * padded / g : s * psi;
  b.copy = shardedParams ? c * padded / g : c * psi;
  b.grads = stage >= 2 ? s * padded / g : s * psi;
  b.state = stage >= 1 ? k * s * padded / g : k * s * psi;
  // The flat bucket a collective works on (and its shard) at a time.
  b.buffers = g > 1 ? s * largestBucket * (stage >= 2 ? 1 + 1 / g : 1) : 0;
  // Stage 3 gathers the bucket's compute copy (or the fp32 bucket); stages
  // 1-2 with sharded masters keep every bucket's gathered.
  if (stage == 3 && g > 1)
    b.buffers += (c > 0 ? c : s) * largestBucket;
  else if (shardedParams && stage < 3 && g > 1)
    b.buffers += c * padded;
  return b;
}

/// `chosenShardsMasters`: whether the compiled stage (`chosen`) shards
/// its masters; the other rows take what `dsc compile` does (in mixed
/// precision, stages 1-2 shard them).
void printTable(llvm::raw_ostream &os, double psi, double padded, int64_t n,
                int64_t g, double s, double k, double c, double largestBucket,
                int chosen, const StageBytes *measured,
                bool chosenShardsMasters = false) {
  bool mixed = c > 0;
  os << llvm::formatv("{0,-6} {1,12} ", "stage", mixed ? "masters" : "params")
     << (mixed ? llvm::formatv("{0,12} ", "copy").str() : std::string())
     << llvm::formatv("{0,12} {1,14} {2,12} {3,12}\n", "grads", "optimizer",
                      "buffers", "total");
  for (int st = 0; st <= 3; ++st) {
    StageBytes f = formula(st, psi, padded, g, s, k, c, largestBucket,
                           st == chosen ? chosenShardsMasters : mixed);
    std::string compiled;
    if (st == chosen && measured) {
      bool same = measured->params == f.params && measured->state == f.state &&
                  measured->copy == f.copy;
      compiled = llvm::formatv("   (compiled: params {0}, {1}optimizer {2}{3})",
                               humanBytes(measured->params),
                               mixed ? "compute copy " +
                                           humanBytes(measured->copy) + ", "
                                     : std::string(),
                               humanBytes(measured->state),
                               same ? ", = formula" : ", DIFFERS from formula")
                     .str();
    }
    os << llvm::formatv("{0,-6} {1,12} ",
                        std::to_string(st) + (st == chosen ? " *" : ""),
                        humanBytes(f.params))
       << (mixed ? llvm::formatv("{0,12} ", humanBytes(f.copy)).str()
                 : std::string())
       << llvm::formatv("{0,12} {1,14} {2,12} {3,12}{4}\n", humanBytes(f.grads),
                        humanBytes(f.state), humanBytes(f.buffers),
                        humanBytes(f.total()), compiled);
  }
  os << llvm::formatv(
      "per rank, {0} rank(s){1}; model states only: "
      "activations and temporaries are the program's arena\n",
      n, g != n ? llvm::formatv(" in groups of {0}", g).str() : std::string());
}

/// The step's arguments and results. A result computed in place
/// (dsc-in-place-updates) is its argument's storage; the other updated
/// state is held twice (swapped after a step).
struct StepTensors {
  double bytes = 0;     // in device memory (or the only memory, CPU)
  double hostBytes = 0; // in host memory (dsc-offload's dsc.memory)
  double nvmeBytes = 0; // in files (dsc-offload optimizer=nvme)
  int inPlace = 0, doubled = 0;
};

bool hasMemory(DictionaryAttr attrs, StringRef kind) {
  auto memory = attrs ? attrs.getAs<StringAttr>("dsc.memory") : StringAttr();
  return memory && memory.getValue() == kind;
}

bool onHost(DictionaryAttr attrs) { return hasMemory(attrs, "host"); }

StepTensors stepTensors(func::FuncOp step) {
  StepTensors held;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    DictionaryAttr attrs = step.getArgAttrDict(i);
    (hasMemory(attrs, "nvme") ? held.nvmeBytes
     : onHost(attrs) ? held.hostBytes
                     : held.bytes) += tensorBytes(step.getArgumentTypes()[i]);
  }
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    if (step.getResultAttr(i, "dsc.in_place")) {
      ++held.inPlace;
      continue;
    }
    (onHost(step.getResultAttrDict(i)) ? held.hostBytes : held.bytes) +=
        tensorBytes(step.getResultTypes()[i]);
    if (step.getResultAttr(i, "dsc.param_update") ||
        step.getResultAttr(i, "dsc.opt_state_update") ||
        step.getResultAttr(i, "dsc.buffer_update") ||
        step.getResultAttr(i, "dsc.scaler_update"))
      ++held.doubled;
  }
  return held;
}

} // namespace

double stepTensorBytes(ModuleOp module) {
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  return step ? stepTensors(step).bytes : 0;
}

/// What dsc-offload keeps on the host and copies each way per step.
void printOffload(func::FuncOp step, const StepTensors &held,
                  uint64_t hostArenaBytes, llvm::raw_ostream &os) {
  double down = 0, up = 0;
  int copies = 0;
  auto count = [&](func::FuncOp fn) {
    fn.walk([&](dsc::OffloadCopyOp copy) {
      (copy.getTo() == "host" ? down : up) += tensorBytes(copy.getType());
      ++copies;
    });
  };
  // The step's copies, and those of each call it makes (parameter offload
  // copies the shards up where the callee gathers them, from host
  // arguments).
  count(step);
  bool params = false;
  step.walk([&](func::CallOp call) {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    if (!callee)
      return;
    count(callee);
    for (unsigned i = 0; i < callee.getNumArguments(); ++i)
      params |= onHost(callee.getArgAttrDict(i));
  });
  if (!copies && held.hostBytes == 0 && held.nvmeBytes == 0)
    return;
  // --offload-ratio below 1: the optimizer's share the GPU updates.
  int64_t hostElems = 0, deviceElems = 0;
  step.walk([&](Operation *op) {
    (op->hasAttr("dsc.on_host") ? hostElems : deviceElems) +=
        dsc::optimizerElements(op);
  });
  os << llvm::formatv(
      "offload (dsc-offload), per rank: pinned host memory holds {0} ({7}fp32 "
      "masters and optimizer state, updated there{6}) + {1} host scratch "
      "(gradients as they come down, compute copies on their way up) = {2}; "
      "per step {3} device -> host and {4} host -> device in {5} copies\n",
      humanBytes(held.hostBytes), humanBytes(double(hostArenaBytes)),
      humanBytes(held.hostBytes + double(hostArenaBytes)), humanBytes(down),
      humanBytes(up), copies,
      params ? ", and the parameter shards, copied up where they are "
               "gathered"
             : "",
      held.nvmeBytes > 0 ? "what is not on NVMe of the " : "");
  if (held.nvmeBytes > 0) {
    double read = 0, written = 0;
    step.walk([&](Operation *op) {
      if (isa<dsc::NvmeReadOp>(op))
        read += tensorBytes(op->getResult(0).getType());
      if (isa<dsc::NvmeWriteOp>(op))
        written += tensorBytes(op->getResult(0).getType());
    });
    os << llvm::formatv(
        "offload to NVMe (--offload-optimizer nvme), per rank: files under "
        "--nvme-path hold {0} (fp32 masters and optimizer state), read into "
        "the host scratch chunk by chunk for the host AdamW; per step {1} "
        "read and {2} written, the writes behind through up to {3} of host "
        "memory beside the plan\n",
        humanBytes(held.nvmeBytes), humanBytes(read), humanBytes(written),
        // The runtime's write-behind budget (io::nvmeSetWriteBehind's
        // default): no more is held aside than a step writes.
        humanBytes(std::min(written, double(int64_t(1) << 30))));
  }
  if (deviceElems > 0)
    os << llvm::formatv(
        "offload ratio: the host updates {0} of the optimizer's {1} "
        "elements ({2:P}), the GPU the other {3}, whose masters and state "
        "it holds\n",
        hostElems, hostElems + deviceElems,
        double(hostElems) / double(hostElems + deviceElems), deviceElems);
}

void printMemoryReport(ModuleOp module, uint64_t arenaBytes,
                       llvm::raw_ostream &os, uint64_t gatheredPeakBytes,
                       uint64_t gatheredBucketBytes, uint64_t hostArenaBytes) {
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  auto fwd = module.lookupSymbol<func::FuncOp>("forward_backward");
  if (!step || !fwd)
    return;
  auto i64 = [&](StringRef name, int64_t dflt) {
    auto a = module->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : dflt;
  };
  int64_t n = i64("dsc.world_size", 1), g = i64("dsc.group_size", n);
  int stage = (int)i64("dsc.stage", 0);
  auto opt = module->getAttrOfType<StringAttr>("dsc.optimizer");
  double k = opt && opt.getValue() == "sgd" ? 1 : 2;
  double psi = 0, s = 4;
  StageBytes measured;
  // The 16-bit compute copies: dsc-mixed-precision's casts, once per step,
  // or the step's state (dsc.compute_copy arguments, written by the grouped
  // AdamW or the host's).
  double c = 0;
  auto countCopy = [&](Type t) {
    measured.copy += tensorBytes(t);
    c = std::max<double>(
        c,
        cast<RankedTensorType>(t).getElementType().getIntOrFloatBitWidth() / 8);
  };
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    Type t = step.getArgument(i).getType();
    if (step.getArgAttr(i, "dsc.param"))
      measured.params += tensorBytes(t);
    if (step.getArgAttr(i, "dsc.opt_state"))
      measured.state += tensorBytes(t);
    if (step.getArgAttr(i, "dsc.compute_copy"))
      countCopy(t);
  }
  step.walk([&](Operation *op) {
    if (op->hasAttr("dsc.compute_copy") && op->getNumResults() == 1)
      countCopy(op->getResult(0).getType());
  });
  // The model's parameters: @forward's (after dsc-zero-partition the step
  // functions take bucket shards instead).
  func::FuncOp model = module.lookupSymbol<func::FuncOp>("forward");
  if (!model)
    model = fwd;
  for (unsigned i = 0; i < model.getNumArguments(); ++i)
    if (model.getArgAttr(i, "dsc.param")) {
      auto t = cast<RankedTensorType>(model.getArgument(i).getType());
      psi += t.getNumElements();
      s = std::max<int64_t>(1, t.getElementType().getIntOrFloatBitWidth() / 8);
    }
  StepTensors held = stepTensors(step);
  double padded = 0, largest = 0;
  if (auto buckets = module->getAttrOfType<ArrayAttr>("dsc.buckets")) {
    for (Attribute a : buckets) {
      auto d = cast<DictionaryAttr>(a);
      auto p = cast<IntegerAttr>(d.get("padded")).getInt();
      padded += p;
      largest = std::max<double>(largest, p);
    }
  } else {
    padded = psi;
    largest = psi;
  }
  // Stage 3 keeps the parameters of sharded buckets only as shards.
  os << llvm::formatv("memory per rank: {0} parameters of {1} bytes, {2} "
                      "optimizer state slot(s) each",
                      (int64_t)psi, (int64_t)s, (int64_t)k);
  if (auto p = module->getAttrOfType<StringAttr>("dsc.precision"))
    os << llvm::formatv("; {0} compute copies of {1} bytes, fp32 gradients",
                        p.getValue(), (int64_t)c);
  os << "\n";
  printTable(os, psi, padded, n, g, s, k, c, largest, stage, &measured,
             module->hasAttr("dsc.shard_masters"));
  codegen::WorkspaceEstimate ws = codegen::estimateWorkspaces(module);
  std::string workspaces;
  if (ws.total())
    workspaces = llvm::formatv(" + library workspaces {0} (estimated: "
                               "cuBLASLt {1}, scratch {2} for the {3})",
                               humanBytes(double(ws.total())),
                               humanBytes(double(ws.fixed)),
                               humanBytes(double(ws.scratch)), ws.scratchFor)
                     .str();
  os << llvm::formatv(
      "the compiled step, per rank: arguments and results {0} (parameters "
      "and optimizer state: {3} updated in place, {4} double-buffered; "
      "gradients, the batch) + arena {1} (activations and temporaries, "
      "static plan){5} = {2}\n",
      humanBytes(held.bytes), humanBytes(double(arenaBytes)),
      humanBytes(held.bytes + double(arenaBytes) + double(ws.total())),
      held.inPlace, held.doubled, workspaces);
  printOffload(step, held, hostArenaBytes, os);
  // What the stage-3 release and the prefetch window buy: gathered buckets
  // alive at once (all of them with --keep-gathered).
  if (gatheredBucketBytes)
    os << llvm::formatv(
        "gathered parameters in the arena: at most {0} ({1} B) alive at "
        "once, {2:F1} x the largest gathered bucket ({3} B)\n",
        humanBytes(double(gatheredPeakBytes)), gatheredPeakBytes,
        double(gatheredPeakBytes) / double(gatheredBucketBytes),
        gatheredBucketBytes);
}

void printArenaBreakdown(const EmitCppStats &stats, llvm::raw_ostream &os) {
  if (stats.peakValues.empty())
    return;
  os << llvm::formatv("arena at its peak: {0} alive in @{1} at {2}\n",
                      humanBytes(double(stats.peakBytes)), stats.peakFunction,
                      stats.peakAt);
  struct Sum {
    uint64_t bytes = 0;
    int64_t count = 0;
  };
  for (const ArenaKind &kind : kArenaKinds) {
    Sum total;
    std::map<std::string, Sum> byOp;
    for (const EmitCppStats::PeakValue &v : stats.peakValues)
      if (v.kind == kind.name) {
        total.bytes += v.bytes, ++total.count;
        Sum &o = byOp[v.op];
        o.bytes += v.bytes, ++o.count;
      }
    if (!total.count)
      continue;
    std::vector<std::pair<std::string, Sum>> ops(byOp.begin(), byOp.end());
    llvm::sort(ops, [](auto &a, auto &b) { return a.second.bytes > b.second.bytes; });
    std::string list;
    for (size_t i = 0; i < ops.size() && i < 5; ++i)
      list += llvm::formatv("{0}{1} {2} ({3})", i ? ", " : "", ops[i].first,
                            humanBytes(double(ops[i].second.bytes)),
                            ops[i].second.count)
                  .str();
    os << llvm::formatv("  {0,-31} {1,10} in {2} values: {3}\n", kind.title,
                        humanBytes(double(total.bytes)), total.count, list);
  }
  std::vector<const EmitCppStats::PeakValue *> largest;
  for (const EmitCppStats::PeakValue &v : stats.peakValues)
    largest.push_back(&v);
  llvm::sort(largest, [](auto *a, auto *b) { return a->bytes > b->bytes; });
  os << "  largest:\n";
  for (size_t i = 0; i < largest.size() && i < 8; ++i)
    os << llvm::formatv("    {0,10}  {1}  {2} [{3}] ({4})\n",
                        humanBytes(double(largest[i]->bytes)), largest[i]->type,
                        largest[i]->op, largest[i]->node, largest[i]->kind);
}

namespace {

/// An imported model's parameter count and bytes per element (@forward's).
std::pair<double, double> modelParameters(ModuleOp module) {
  double psi = 0, s = 4;
  if (auto fwd = module.lookupSymbol<func::FuncOp>("forward"))
    for (unsigned i = 0; i < fwd.getNumArguments(); ++i)
      if (fwd.getArgAttr(i, "dsc.param")) {
        auto t = cast<RankedTensorType>(fwd.getArgument(i).getType());
        psi += t.getNumElements();
        s = std::max<int64_t>(1,
                              t.getElementType().getIntOrFloatBitWidth() / 8);
      }
  return {psi, s};
}

} // namespace

/// The bytes of a compute copy's element at `precision` (0: none).
static double computeCopyBytes(StringRef precision) {
  return precision == "bf16" || precision == "fp16" ? 2 : 0;
}

double formulaStageBytes(ModuleOp module, int stage, int64_t worldSize,
                         int64_t groupSize, StringRef optimizer,
                         StringRef precision) {
  auto [psi, s] = modelParameters(module);
  double padded = std::ceil(psi / groupSize) * groupSize;
  double c = computeCopyBytes(precision);
  return formula(stage, psi, padded, groupSize, s, optimizer == "sgd" ? 1 : 2,
                 c, padded, /*shardMasters=*/c > 0)
      .total();
}

void printFitsTable(llvm::ArrayRef<FitRow> rows, uint64_t budget,
                    int64_t worldSize, llvm::raw_ostream &os) {
  os << llvm::formatv("will it fit in {0} per GPU ({1} rank(s)): the "
                      "compiled step per configuration (its arguments, "
                      "results, arena and library workspaces)\n",
                      humanBytes(double(budget)), worldSize);
  os << llvm::formatv("{0,-6} {1,-11} {2,-9} {3,14}  {4}\n", "stage",
                      "recompute", "offload", "per rank", "fits");
  const FitRow *fastest = nullptr;
  for (const FitRow &r : rows) {
    const char *offload = r.offloadParam ? "cpu+param"
                          : r.offload    ? "cpu"
                                         : "-";
    if (!r.available) {
      os << llvm::formatv("{0,-6} {1,-11} {2,-9} {3,14}  -\n", r.stage,
                          r.recompute, offload, "not available");
      continue;
    }
    bool fits = r.bytes <= double(budget);
    if (fits && !fastest)
      fastest = &r;
    os << llvm::formatv("{0,-6} {1,-11} {2,-9} {3,14}  {4}{5}\n", r.stage,
                        r.recompute, offload, humanBytes(r.bytes),
                        fits ? "yes" : "no",
                        r.compiled ? ""
                                   : "  (ZeRO formula, model states only: "
                                     "this configuration did not compile)");
  }
  os << "offload cpu: the fp32 masters and optimizer state in pinned host "
        "memory (not counted above), the optimizer run there; cpu+param: "
        "the parameter shards there too, copied up where they are "
        "gathered\n";
  // Why a configuration did not compile, once for each reason.
  std::vector<std::string> reasons;
  for (const FitRow &r : rows)
    if (!r.why.empty() && !llvm::is_contained(reasons, r.why))
      reasons.push_back(r.why);
  for (const std::string &why : reasons) {
    os << "not compiled:";
    for (const FitRow &r : rows)
      if (r.why == why)
        os << llvm::formatv(" {0}/{1}{2}", r.stage, r.recompute,
                            r.offloadParam ? "/cpu+param"
                            : r.offload    ? "/cpu"
                                           : "");
    os << ": " << why << "\n";
  }
  if (fastest)
    os << llvm::formatv("fastest that fits: stage {0}, recompute {1}{2} ({3} "
                        "of {4})\n",
                        fastest->stage, fastest->recompute,
                        fastest->offloadParam
                            ? ", --offload-optimizer cpu --offload-param cpu"
                        : fastest->offload ? ", --offload-optimizer cpu"
                                           : "",
                        humanBytes(fastest->bytes), humanBytes(double(budget)));
  else
    os << "nothing fits: more ranks, a smaller micro-batch or a smaller "
          "model\n";
}

void printMemoryEstimate(ModuleOp module, int64_t worldSize, int64_t groupSize,
                         StringRef optimizer, StringRef precision,
                         llvm::raw_ostream &os) {
  if (!module.lookupSymbol<func::FuncOp>("forward"))
    return;
  auto [psi, s] = modelParameters(module);
  double padded = std::ceil(psi / groupSize) * groupSize;
  double k = optimizer == "sgd" ? 1 : 2, c = computeCopyBytes(precision);
  os << llvm::formatv("memory per rank: {0} parameters of {1} bytes, {2} "
                      "optimizer state slot(s) each ({3})",
                      (int64_t)psi, (int64_t)s, (int64_t)k, optimizer);
  if (c > 0)
    os << llvm::formatv("; {0} compute copies of {1} bytes, fp32 gradients",
                        precision, (int64_t)c);
  os << "\n";
  printTable(os, psi, padded, worldSize, groupSize, s, k, c, padded, -1,
             nullptr);
}

} // namespace dsc
