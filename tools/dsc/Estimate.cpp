//===- Estimate.cpp - `dsc estimate`: will it fit -------------------------===//
//
// Before any run: the ZeRO formulas of the model's states per stage, and,
// with --gpu-memory, the step compiled for every stage x recompute x offload
// choice (as `dsc compile` compiles it, with the user's own compile options
// after `--`), its per-rank peak against the budget and the fastest choice
// that fits. The choices compile independently, on several threads.
//
// Steps: parse the options; list the configurations; compile them; print.
//
//===----------------------------------------------------------------------===//

#include "tools/dsc/Estimate.h"
#include "tools/dsc/Common.h"
#include "tools/dsc/Compile.h"
#include "tools/dsc/MemoryReport.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

using namespace mlir;

namespace dsc {
namespace {

const char *kEstimateUsage =
    R"(usage: dsc estimate [options] MODEL.onnx [-- COMPILE-OPTIONS...]

Prints the model-state memory per rank (parameters, gradients, optimizer
state, collective buffers) of ZeRO stages 0-3 side by side, from the model's
shapes alone (no weights are read).

options:
  --world-size N             ranks (default 8)
  --hybrid-group G           shard inside groups of G ranks
  --optimizer adamw|sgd      (default adamw)
  --precision fp32|bf16|fp16 the step's precision, as for `dsc compile`
                             (default fp32): 16-bit compute copies beside
                             fp32 masters
  --micro-batch N, --input-shape NAME=AxB   as for `dsc import`
  --gpu-memory SIZE          will it fit: compile the step for every stage,
                             --recompute and --offload-optimizer choice and
                             print each one's per-rank peak (arguments,
                             results, the static arena plan and the library
                             workspaces) against SIZE (80GiB, 80GB, 512MiB
                             or bytes), and the fastest that fits
  --jobs N                   compile N configurations at once (default: the
                             machine's threads, at most 8; each takes about
                             as much memory as one `dsc compile`)
  -- COMPILE-OPTIONS...      passed to every compile of --gpu-memory (e.g.
                             -- --accum-steps 4 --classifier-chunk 256MiB);
                             the options estimate varies or sets itself are
                             refused there
)";

struct EstimateOptions {
  ImportOptions import;
  std::string model, optimizer = "adamw", precision = "fp32";
  int64_t world = 8, group = 0;
  std::optional<uint64_t> gpuMemory;
  unsigned jobs = 0; // 0: the machine's threads, at most 8
  std::vector<std::string> compileFlags;
};

/// Options estimate sets for every compile: not accepted after `--`. Some
/// are estimate's own options (given before `--`); the others it varies.
struct SetFlag {
  llvm::StringLiteral flag;
  bool ownOption;
};
constexpr SetFlag kSetFlags[] = {{"--stage", false},
                                 {"--recompute", false},
                                 {"--offload-optimizer", false},
                                 {"--offload-param", false},
                                 {"--offload-ratio", false},
                                 {"--memory-budget", false},
                                 {"--emit", false},
                                 {"-o", false},
                                 {"--world-size", true},
                                 {"--hybrid-group", true},
                                 {"--optimizer", true},
                                 {"--precision", true},
                                 {"--micro-batch", true},
                                 {"--input-shape", true},
                                 {"--max-constant-bytes", true},
                                 {"--no-loss", true}};

/// The compile options after `--`; an error message for one estimate sets.
std::optional<std::string> checkCompileFlags(ArrayRef<std::string> flags) {
  for (const std::string &f : flags)
    for (const SetFlag &set : kSetFlags)
      if (f == set.flag ||
          llvm::StringRef(f).starts_with((set.flag + "=").str()))
        return "'" + f + "' after -- is set by dsc estimate itself" +
               (set.ownOption ? "; give it before --"
                              : "; every choice of it is compiled");
  return std::nullopt;
}

/// Parses `args`; -1 to go on, else the exit status (usage printed).
int parse(std::vector<std::string> args, EstimateOptions &o) {
  auto dashes = llvm::find(args, "--");
  if (dashes != args.end()) {
    o.compileFlags.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
    if (auto error = checkCompileFlags(o.compileFlags))
      return usageError(*error, kEstimateUsage);
  }
  ArgCursor c(std::move(args));
  auto count = [&](const std::string &v, int64_t &out, const char *what) {
    if (llvm::StringRef(v).getAsInteger(10, out) || out < 1) {
      c.error = std::string(what) + " needs a positive count";
      return false;
    }
    return true;
  };
  while (!c.done()) {
    if (c.is("-h") || c.is("--help")) {
      llvm::outs() << kEstimateUsage;
      return 0;
    }
    if (parseImportOption(c, o.import)) {
      if (!c.error.empty())
        return usageError(c.error, kEstimateUsage);
      continue;
    }
    int64_t jobs = 0;
    if (auto v = c.take("--world-size")) {
      count(*v, o.world, "--world-size");
    } else if (auto v = c.take("--hybrid-group")) {
      count(*v, o.group, "--hybrid-group");
    } else if (auto v = c.take("--jobs")) {
      if (count(*v, jobs, "--jobs"))
        o.jobs = unsigned(std::min<int64_t>(jobs, 256));
    } else if (auto v = c.take("--optimizer")) {
      if (*v != "adamw" && *v != "sgd")
        c.error = "--optimizer must be adamw or sgd";
      o.optimizer = *v;
    } else if (auto v = c.take("--precision")) {
      if (*v != "fp32" && *v != "bf16" && *v != "fp16")
        c.error = "--precision must be fp32, bf16 or fp16";
      o.precision = *v;
    } else if (auto v = c.take("--gpu-memory")) {
      o.gpuMemory = parseSize(*v);
      if (!o.gpuMemory)
        c.error = "--gpu-memory needs a size such as 80GiB, 80GB, 512MiB or "
                  "a count of bytes, not '" +
                  *v + "'";
    } else if (c.error.empty()) {
      if (llvm::StringRef(c.current()).starts_with("-"))
        return usageError("unknown option '" + c.current() + "'",
                          kEstimateUsage);
      if (!o.model.empty())
        return usageError("two models given ('" + o.model + "' and '" +
                              c.current() + "'); estimate one at a time",
                          kEstimateUsage);
      o.model = c.current();
      c.next();
    }
    if (!c.error.empty())
      return usageError(c.error, kEstimateUsage);
  }
  if (o.model.empty())
    return usageError("no model given", kEstimateUsage);
  if (o.group == 0)
    o.group = o.world;
  if (o.world % o.group)
    return usageError("--hybrid-group must divide --world-size",
                      kEstimateUsage);
  if (!o.compileFlags.empty() && !o.gpuMemory)
    return usageError("compile options after -- are for --gpu-memory's "
                      "compiles; add --gpu-memory SIZE",
                      kEstimateUsage);
  return -1;
}

/// The configurations --gpu-memory compiles, fastest kind first: each
/// recompute choice at every stage, then with the optimizer on the host
/// (stages 0 and 3, and 1-2 in `mixed` precision, whose masters are
/// shards; in fp32 stages 1-2 slice their shard out of replicated
/// parameters, which dsc-offload refuses), and at stage 3 the parameters
/// there too.
std::vector<FitRow> configurations(bool mixed) {
  std::vector<FitRow> rows;
  auto add = [&](int stage, const char *recompute, bool offload,
                 bool offloadParam) {
    FitRow row;
    row.stage = stage;
    row.recompute = recompute;
    row.offload = offload;
    row.offloadParam = offloadParam;
    rows.push_back(std::move(row));
  };
  for (const char *recompute : kRecomputeModes)
    for (int stage = 0; stage <= 3; ++stage)
      add(stage, recompute, false, false);
  std::vector<int> offloadStages =
      mixed ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 3};
  for (const char *recompute : kRecomputeModes) {
    for (int stage : offloadStages)
      add(stage, recompute, true, false);
    add(3, recompute, true, true);
  }
  return rows;
}

/// `dsc compile`'s flags for row `r`.
std::vector<std::string> compileFlags(const FitRow &r,
                                      const EstimateOptions &o) {
#ifdef DSC_RUNTIME_CUDA_LIBRARY
  const char *target = "cuda"; // the plan of the GPU program
#else
  const char *target = "cpu";
#endif
  // The user's own options follow the target (a --target of theirs wins)
  // and precede the ones each configuration sets.
  std::vector<std::string> flags = {"--target", target};
  flags.insert(flags.end(), o.compileFlags.begin(), o.compileFlags.end());
  flags.insert(flags.end(),
               {"--world-size", std::to_string(o.world), "--stage",
                std::to_string(r.stage), "--recompute", r.recompute,
                "--optimizer", o.optimizer, "--precision", o.precision});
  if (o.group != o.world)
    flags.insert(flags.end(), {"--hybrid-group", std::to_string(o.group)});
  if (r.offload)
    flags.insert(flags.end(), {"--offload-optimizer", "cpu"});
  if (r.offloadParam)
    flags.insert(flags.end(), {"--offload-param", "cpu"});
  return flags;
}

/// The first line a failed compile printed (why a row is not available).
std::string firstLine(llvm::StringRef text) {
  llvm::StringRef line = text.split('\n').first.trim();
  line.consume_front("error: ");
  return line.str();
}

/// Compiles every row on `jobs` threads (each its own MLIRContext); a row
/// that does not compile keeps the reason, and falls back to the ZeRO
/// formula unless it offloads (then it is not available).
void compileRows(std::vector<FitRow> &rows, const EstimateOptions &o,
                 ModuleOp imported) {
  unsigned jobs =
      o.jobs ? o.jobs : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  jobs = std::min<unsigned>(jobs, rows.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < rows.size();) {
      FitRow &r = rows[i];
      std::string errors;
      llvm::raw_string_ostream diagnostics(errors);
      if (auto bytes = compiledPeakBytes(o.model, o.import, compileFlags(r, o),
                                         &diagnostics)) {
        r.bytes = double(*bytes);
        continue;
      }
      r.why = firstLine(errors);
      if (r.offload)
        r.available = false;
      else
        r.compiled = false;
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < jobs; ++t)
    threads.emplace_back(work);
  work();
  for (std::thread &t : threads)
    t.join();
  // The formula needs the imported module: filled in on this thread.
  for (FitRow &r : rows)
    if (!r.compiled)
      r.bytes = formulaStageBytes(imported, r.stage, o.world, o.group,
                                  o.optimizer, o.precision);
}

} // namespace

int runEstimate(std::vector<std::string> args) {
  EstimateOptions o;
  if (int rc = parse(std::move(args), o); rc >= 0)
    return rc;
  MLIRContext ctx;
  installDiagnosticPrinter(ctx);
  auto module = importOnnxFile(ctx, o.model, o.import);
  if (!module)
    return 1;
  printMemoryEstimate(*module, o.world, o.group, o.optimizer, o.precision,
                      llvm::outs());
  if (!o.gpuMemory)
    return 0;
  std::vector<FitRow> rows = configurations(o.precision != "fp32");
  // The user's compile options are checked once, before the threads (each
  // compile would print the same usage).
  if (!compileOptionsAccepted(o.model, compileFlags(rows.front(), o)))
    return 1;
  llvm::outs().flush(); // the ZeRO table, before any thread writes
  compileRows(rows, o, *module);
  printFitsTable(rows, *o.gpuMemory, o.world, llvm::outs());
  return 0;
}

} // namespace dsc
