//===- Compile.cpp - `dsc compile`: ONNX to a training program ------------===//
//
//   import -> dsc-global-mean-loss -> dsc-autodiff -> dsc-optimizer
//     [-> dsc-zero-partition] -> dsc-mixed-precision [-> dsc-schedule]
//     -> cse -> C++ -> c++ / nvcc -> program
//
//===----------------------------------------------------------------------===//
#include "tools/dsc/Compile.h"
#include "tools/dsc/ArenaPicture.h"
#include "tools/dsc/Common.h"
#include "tools/dsc/Config.h"
#include "tools/dsc/Env.h"
#include "tools/dsc/MemoryReport.h"

#include <map>
#include <mutex>

#include "compiler/codegen/EmitCpp.h"
#include "compiler/codegen/Workspaces.h"
#include "compiler/import/OnnxImporter.h"
#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"
#include "passes/Passes.h"

#include "io/sha256.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

using namespace mlir;

namespace dsc {
namespace {

const char *kCompileUsage =
    R"(usage: dsc compile [options] MODEL.onnx -o PROGRAM

Compiles the training step of MODEL.onnx (model + scalar loss) into a native
program: reverse-mode gradients, the optimizer update, the learning-rate
schedule, clipping and gradient accumulation, lowered to C++ (CPU) or CUDA
C++ (GPU) against the dsc runtime and built with the system C++ compiler or
nvcc. Weights are not compiled in: the program reads them from MODEL.onnx
(or --init) when it starts.

DeepSpeed config (docs/config.md):
  --config ds_config.json    read the compile options from a DeepSpeed config
                             (batch sizes, ZeRO, bf16/fp16, optimizer,
                             scheduler, clipping); "auto" values come from the
                             flags given beside it, and flags given beside it
                             override it (each override is noted)

target and output:
  --target cpu|cuda          the CPU backend, or NVIDIA GPUs through CUDA,
                             cuBLASLt, cuDNN and NCCL (default: cuda when this
                             dsc was built with its CUDA runtime and nvcc is
                             found, else cpu)
  --cuda-arch sm_XY[a]       the GPU code of the program (default sm_90a,
                             H100/H200), plus PTX for newer cards
  --host-opt N               the host compiler's -O level for the
                             program's generated host code (default 0: it
                             only calls the runtime's kernels, or enqueues
                             them on the GPU, which are always optimized;
                             gcc -O2 of GPT-2 124M's CUDA step takes 16 s of
                             21, and -O2 of a CPU step is 4x slower to build
                             and no faster to run)
  -o FILE                    the program (or the file --emit writes)
  --emit=exe|cpp|mlir        what to write: the program (default), its C++
                             (or CUDA C++) source, or the dsc IR after all
                             passes
  --print-ir-after-all       print the IR after every pass to stderr
  --cxx PATH                 C++ compiler (default: $CXX, else c++)
  --nvcc PATH                CUDA compiler (default: $NVCC, else the one dsc
                             was built with)
  --no-fuse                  cuda: one kernel per elementwise op (default:
                             chains of them are one generated kernel each)
                             and bias gradients summed on their own (default:
                             in the weight-gradient GEMM's epilogue)
  --no-fuse-attention        keep attention as the exporter wrote it
                             (matmul, mask, softmax, matmul) instead of one
                             dsc.attention per layer (dsc-fuse-attention)
  --classifier-chunk SIZE    logits one chunk of the fused classifier holds
                             (dsc-fuse-classifier: the classifier matmul,
                             its summed cross-entropy and their gradients
                             in one op, the [tokens, vocab] logits never
                             whole; default 1GiB, 0: not fused)
  --no-raise-gelu            keep a GELU the exporter wrote as a formula
                             (0.5 x (1 + tanh(...)) or erf) as it is
                             instead of one dsc.gelu (dsc-raise-gelu)
  --no-raise-rms-norm        keep an RMSNorm the exporter wrote as a formula
                             (w * x / sqrt(mean(x^2) + eps)) as it is
                             instead of one dsc.layer_norm {rms}
                             (dsc-raise-rms-norm)
  --nondeterministic-attention
                             cuda: cuDNN's attention backward adds the
                             query's gradient with atomics, as PyTorch's SDPA
                             does by default: shorter steps (GPT-2 124M by
                             0.2-0.6 ms, Llama-3.2-1B by 2.5 ms on an H100)
                             and less workspace, but a step's gradients may
                             differ in their last bits from run to run, and a
                             captured step's losses from the uncaptured one's
                             (default: deterministic, bit for bit)
  --no-fuse-norm-residual    cuda: add the residual stream's gradient to a
                             norm's input gradient in a kernel of its own
                             (default: in the norm backward's epilogue,
                             dsc-fuse-norm-residual; the same bits)
  --no-accumulate-in-call    with --accum-steps, sum each micro-batch's
                             gradients in the step after its call, held
                             beside the running sums (default: added to
                             them inside the call, over their storage,
                             dsc-accumulate-in-call; the same bits, but a
                             classifier's weight gradient, summed onto
                             them chunk by chunk)
  --no-raise-swiglu          keep SwiGLU's gate the exporter wrote as a
                             formula ((g * sigmoid(g)) * u) as it is instead
                             of one dsc.swiglu (dsc-raise-swiglu)
  --no-in-place-updates      double-buffer every updated parameter and
                             optimizer state (argument and result swapped
                             after each step) instead of writing those the
                             optimizer updates element by element into
                             their arguments (dsc-in-place-updates), and
                             give the loss's gradient its own buffer rather
                             than the logits' (dsc-in-place-temporaries)
  --recompute none|elementwise|selective|full|auto
                             activation recomputation (dsc-recompute):
                             elementwise computes elementwise values again
                             inside the backward kernels that read them
                             (SwiGLU's product, GELU's output, casts);
                             selective also norms
                             and softmax again in backward instead of
                             keeping them; full also the matmuls and
                             attention of each repeated block (ONNX names
                             /h.N/..., /layers.N/...), keeping what flows
                             into it; auto takes the least of them whose
                             compiled plan (step tensors and arena per
                             rank) fits --memory-budget (default none)
  --offload-optimizer none|cpu|nvme
                             cpu: the fp32 master parameters and the
                             optimizer state live in pinned host memory and
                             the optimizer runs there (multi-threaded), the
                             GPU keeping only the 16-bit compute copies;
                             gradients go down and compute copies up once a
                             step, on a copy stream (dsc-offload; DeepSpeed
                             offload_optimizer; stages 0 and 3, not with
                             fp16 loss scaling; default none). nvme: cpu,
                             with the masters and state in files under
                             --nvme-path, each chunk read into host memory
                             for its update and written back
  --nvme-path DIR            the directory (on a fast local disk) of
                             --offload-optimizer nvme's files, recorded as
                             the program's default (its --nvme-path
                             overrides it)
  --offload-param none|cpu   cpu (stage 3, with --offload-optimizer cpu):
                             the 16-bit parameter shards live in pinned
                             host memory too, each copied up one gather
                             ahead of its all-gather (DeepSpeed
                             offload_param; default none)
  --offload-chunk-elements N the host AdamW runs in chunks of about N
                             elements (whole parameters), each one's copies
                             overlapping the next one's work (33554432)
  --offload-copy-ahead N     a chunk's gradients come down while the chunk
                             N before it computes, so pinned host memory
                             holds about N + 2 chunks of them (0: each as
                             soon as it is made, all at once; default 2)
  --offload-ratio R|auto     the share of the optimizer's elements updated
                             on the host (DeepSpeed offload_optimizer.ratio,
                             ZeRO-Offload++'s Twin-Flow): the last
                             parameters, up to 1 - R of the elements, keep
                             their masters and state on the GPU and update
                             there while the host updates the rest (12
                             bytes of GPU memory per element kept); auto:
                             the least R, in steps of 0.05, whose plan fits
                             --memory-budget (default 1)
  --offload-overlap          the host AdamW runs during backward: each
                             chunk as soon as backward has made its
                             gradients (--offload-ratio then keeps on the
                             GPU those made last). Needs --clip 0, which it
                             fixes (the program has no --clip), and
                             --accum-steps 1; pinned host memory holds every
                             offloaded gradient at once
  --memory-budget SIZE       bytes a rank may hold, for --recompute auto
                             and --offload-ratio auto
                             (80GiB, 80GB, 512MiB or bytes; default for
                             --target cuda: the memory of the GPU this
                             machine sees, via nvidia-smi)

model (as for `dsc import`):
  --micro-batch N            examples per micro-batch (sets dim 0 of inputs)
  --input-shape NAME=AxB..   the whole shape of one input
  --max-constant-bytes N     bound on constants folded at import (256 MiB)

optimizer (defaults baked into the program; it can override the starred):
  --optimizer adamw|sgd      (default adamw)
  --lr X *                   base learning rate (1e-3)
  --beta1 X * --beta2 X *    AdamW betas (0.9, 0.999)
  --eps X *                  AdamW epsilon (1e-8)
  --weight-decay X *         decoupled for AdamW, L2 for SGD (0.01)
  --momentum X *             SGD momentum (0.9)
  --nesterov                 SGD with Nesterov momentum
  --no-decay REGEX           parameters whose name matches get no weight
                             decay, e.g. 'bias|norm|ln_'
  --schedule KIND            constant | warmup_cosine | warmup_linear
                             (DeepSpeed's WarmupCosineLR / WarmupDecayLR,
                             linear warm-up)
  --warmup-steps N --total-steps N --warmup-min-ratio R --min-ratio R
  --clip X *                 global gradient-norm clipping (0 = off)
  --accum-steps K            micro-batches per optimizer step (1); the
                             program's batch is micro-batch x K

sharding (ZeRO; the program runs world-size ranks, see README):
  --world-size N             ranks (default 1); --micro-batch is per rank
  --stage 0|1|2|3            ZeRO stage: 0 replicate all, 1 shard optimizer
                             state, 2 and gradients, 3 and parameters (in
                             bf16/fp16, stages 1-2 shard the fp32 masters
                             too and replicate the 16-bit copy, as
                             DeepSpeed does)
  --sharding NAME            FSDP names: NO_SHARD (stage 0), SHARD_GRAD_OP
                             (2), FULL_SHARD (3), HYBRID_SHARD (3 inside
                             groups of --hybrid-group ranks)
  --hybrid-group G           shard inside groups of G ranks, replicate
                             across groups
  --reduce-bucket-size N     elements per gradient bucket (DeepSpeed's
                             reduce_bucket_size, default 5e8)
  --stage3-param-persistence-threshold N
                             stage 3: smaller parameters stay replicated
  --keep-gathered            stage 3: gather parameters once per step
                             (FSDP reshard_after_forward=False)
  --allgather-bucket-size N  stages 1-2: elements per all-gather of updated
                             parameters (DeepSpeed allgather_bucket_size)
  --prefetch N               stage 3: buckets gathered ahead of use (1)
  --stage3-prefetch-bucket-size N   at most N elements in flight
  --stage3-max-live-parameters N    at most N gathered elements alive
  --sync-batchnorm           batch-norm statistics over the global batch
                             (default: each rank's own, as DDP)
  --report                   print the per-rank memory of every stage
  --arena-svg FILE.svg       draw the step's arena plan: every buffer's
                             offset and size over the ops that need it,
                             by kind, the forward, backward, optimizer and
                             the peak marked (open it in a browser)

numerics (docs/numerics.md):
  --precision bf16|fp16|fp32 mixed precision: matmuls and convolutions in
                             bf16 or fp16 (fp32 accumulation) on 16-bit
                             compute copies of the parameters, made once per
                             step from fp32 masters; norms, softmax, the loss,
                             reductions and elementwise math in fp32;
                             gradients accumulated, reduced over ranks and
                             clipped in fp32; the optimizer updates the fp32
                             masters (default fp32: everything in fp32)
  fp16 loss scaling (DeepSpeed's knobs and defaults; a step whose gradients
  hold an inf or nan on any rank is skipped and the scale lowered):
  --loss-scale X             a static scale; 0 = dynamic (default 0)
  --initial-scale-power N    the dynamic scale starts at 2^N (16)
  --loss-scale-window N      steps without overflow before it doubles (1000)
  --hysteresis N             overflows tolerated before it halves (2)
  --min-loss-scale X         it never goes below X (1); a run that overflows
                             there stops
  --grad-reduce-dtype fp32|bf16
                             the element type of the gradient reductions over
                             ranks (DeepSpeed communication_data_type;
                             default fp32). bf16 halves their bytes, but each
                             rank's partial sums are rounded to bf16 (8
                             significant bits) before they are added and the
                             sum once more: about 2^-8 = 0.4% relative error
                             per gradient element and reduction, more where
                             the ranks' contributions cancel; off by default
  --f64                      compute in float64 (float32 tensors of the model
                             are held as float64): for checking numerics
)";

struct CompileOptions {
  ImportOptions import;
  bool targetGiven = false; // --target on the command line
  std::string model, output, emit = "exe", target, cxx, nvcc,
                             cudaArch = "sm_90a", hostOpt = "0";
  bool printIRAfterAll = false, report = false, f64 = false, fuse = true;
  bool fuseAttention = true, raiseGelu = true, raiseRmsNorm = true,
       raiseSwiglu = true, inPlaceUpdates = true, fuseNormResidual = true,
       nondeterministicAttention = false, accumulateInCall = true;
  std::string optimizerPipeline; // dsc-optimizer options
  std::string partitionPipeline; // dsc-zero-partition options
  std::string prefetch = "1", prefetchSize = "0", maxLive = "0";
  std::string precision = "fp32", gradReduceDtype = "fp32";
  std::string recompute = "none"; // dsc-recompute mode, or "auto"
  std::string offloadOptimizer = "none"; // dsc-offload's optimizer=
  std::string offloadChunk = "33554432"; // dsc-offload's chunk-elements=
  std::string offloadCopyAhead = "2";    // dsc-offload's copy-ahead=
  std::string offloadParam = "none";     // dsc-offload's params=
  std::string nvmePath; // --nvme-path: the program's default directory
  double offloadRatio = 1.0;             // dsc-offload's ratio=
  bool offloadRatioAuto = false;         // --offload-ratio auto
  bool offloadOverlap = false;           // dsc-offload's overlap=
  std::optional<uint64_t> memoryBudget; // --memory-budget
  uint64_t classifierChunk =
      uint64_t(dsc::kDefaultClassifierChunkBytes); // --classifier-chunk
  std::string precisionPipeline;  // dsc-mixed-precision options
  bool partition = false, hybridRequested = false;
  std::string arenaSvg;   // --arena-svg
  std::string configPath; // --config
  ResolvedConfig config;  // what it resolved to (for --report)
};

/// Takes "--config FILE" out of `args` and puts the flags the file means in
/// front of the rest, so that the user's own flags are parsed after them.
/// Returns -1 to go on, else the exit status.
int applyConfig(std::vector<std::string> &args, CompileOptions &o) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef a = args[i];
    if (a == "--config") {
      if (i + 1 == args.size())
        return usageError("--config needs a file", kCompileUsage);
      o.configPath = args[++i];
    } else if (a.consume_front("--config=")) {
      o.configPath = a.str();
    } else {
      rest.push_back(args[i]);
    }
  }
  bool help =
      llvm::is_contained(rest, "-h") || llvm::is_contained(rest, "--help");
  if (o.configPath.empty() || help) {
    args = std::move(rest);
    return -1;
  }
  if (!resolveDeepSpeedConfig(o.configPath, rest, o.config, llvm::errs()))
    return 1;
  args = o.config.args;
  args.insert(args.end(), rest.begin(), rest.end());
  return -1;
}

/// The lowest compute capability (e.g. 90) the CUDA runtime has code for.
#ifdef DSC_RUNTIME_CUDA_LIBRARY
constexpr int kRuntimeMinArch = DSC_CUDA_MIN_ARCH;
#endif

/// "FLAG must be A, B or C, not 'V'" when `v` is none of `choices`; empty
/// when it is one.
std::string notOneOf(llvm::StringRef flag, const std::string &v,
                     llvm::ArrayRef<llvm::StringRef> choices) {
  if (llvm::is_contained(choices, v))
    return "";
  std::string list;
  for (auto [i, choice] : llvm::enumerate(choices))
    list += (i == 0                    ? ""
             : i + 1 == choices.size() ? " or "
                                       : ", ") +
            choice.str();
  return flag.str() + " must be " + list + ", not '" + v + "'";
}

/// 90 for "sm_90" and "sm_90a"; -1 when malformed.
[[maybe_unused]] int cudaArchNumber(const std::string &arch) {
  llvm::StringRef s(arch);
  if (!s.consume_front("sm_"))
    return -1;
  s.consume_back("a");
  int n = 0;
  if (s.empty() || s.getAsInteger(10, n) || n < 10)
    return -1;
  return n;
}

[[maybe_unused]] std::string findNvcc(const CompileOptions &o) {
  std::string nvcc = o.nvcc;
  if (nvcc.empty())
    if (const char *env = std::getenv("NVCC"))
      nvcc = env;
#ifdef DSC_NVCC
  if (nvcc.empty() && llvm::sys::fs::can_execute(DSC_NVCC))
    nvcc = DSC_NVCC;
#endif
  if (nvcc.empty())
    nvcc = "nvcc";
  auto found = llvm::sys::findProgramByName(nvcc);
  return found ? *found : std::string();
}

/// cuda when the CUDA runtime was built and nvcc is found, else cpu.
std::string defaultTarget(const CompileOptions &o) {
#ifdef DSC_RUNTIME_CUDA_LIBRARY
  if (!findNvcc(o).empty() && llvm::sys::fs::exists(DSC_RUNTIME_CUDA_LIBRARY))
    return "cuda";
#endif
  return "cpu";
}

/// The value of `key` among dsc-zero-partition's options ("stage=0
/// world-size=1 ..."), or `dflt` (the pass's default).
int64_t partitionOption(llvm::StringRef partitionOptions, llvm::StringRef key,
                        int64_t dflt) {
  int64_t v = dflt;
  llvm::SmallVector<llvm::StringRef> options;
  partitionOptions.split(options, ' ', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef option : options) {
    auto [k, value] = option.split('=');
    if (k == key)
      (void)value.getAsInteger(10, v);
  }
  return v;
}

/// Whether dsc-zero-partition's options ask for stage 0 on one rank (the
/// pass's defaults: stage 0, one rank).
bool isOneRankStageZero(llvm::StringRef partitionOptions) {
  return partitionOption(partitionOptions, "stage", 0) == 0 &&
         partitionOption(partitionOptions, "world-size", 1) == 1;
}

int parse(std::vector<std::string> args, CompileOptions &o) {
  if (int rc = applyConfig(args, o); rc >= 0)
    return rc;
  ArgCursor c(std::move(args));
  std::vector<std::string> optimizerOptions;
  // Options passed through to dsc-optimizer, with the value checked here.
  const std::pair<const char *, const char *> numeric[] = {
      {"--lr", "lr"},
      {"--beta1", "beta1"},
      {"--beta2", "beta2"},
      {"--eps", "eps"},
      {"--weight-decay", "weight-decay"},
      {"--momentum", "momentum"},
      {"--dampening", "dampening"},
      {"--warmup-steps", "warmup-steps"},
      {"--total-steps", "total-steps"},
      {"--warmup-min-ratio", "warmup-min-ratio"},
      {"--min-ratio", "min-ratio"},
      {"--clip", "clip"},
      {"--accum-steps", "accum-steps"}};
  while (!c.done()) {
    if (c.is("-h") || c.is("--help")) {
      llvm::outs() << kCompileUsage;
      return 0;
    }
    if (parseImportOption(c, o.import)) {
      if (!c.error.empty())
        return usageError(c.error, kCompileUsage);
      continue;
    }
    bool matched = false;
    for (auto [flag, name] : numeric) {
      if (auto v = c.take(flag)) {
        double d;
        if (llvm::StringRef(*v).getAsDouble(d))
          return usageError(std::string(flag) + " needs a number, not '" + *v +
                                "'",
                            kCompileUsage);
        optimizerOptions.push_back(std::string(name) + "=" + *v);
        matched = true;
        break;
      }
    }
    if (matched)
      continue;
    bool sharded = false;
    for (const char *flag :
         {"--stage", "--world-size", "--hybrid-group", "--reduce-bucket-size",
          "--stage3-param-persistence-threshold", "--allgather-bucket-size"}) {
      if (auto v = c.take(flag)) {
        int64_t n;
        if (llvm::StringRef(*v).getAsInteger(10, n) || n < 0)
          return usageError(std::string(flag) + " needs a count, not '" + *v +
                                "'",
                            kCompileUsage);
        if (llvm::StringRef(flag) == "--stage" && n > 3)
          return usageError("--stage must be 0, 1, 2 or 3", kCompileUsage);
        if (llvm::StringRef(flag) == "--world-size" && n < 1)
          return usageError("--world-size must be at least 1", kCompileUsage);
        o.partitionPipeline +=
            std::string(o.partitionPipeline.empty() ? "" : " ") + (flag + 2) +
            "=" + *v;
        o.partition = sharded = true;
        break;
      }
    }
    if (sharded)
      continue;
    if (auto v = c.take("--stage3-prefetch-bucket-size")) {
      int64_t n;
      if (llvm::StringRef(*v).getAsInteger(10, n) || n < 0)
        return usageError("--stage3-prefetch-bucket-size needs a count",
                          kCompileUsage);
      o.prefetchSize = *v;
      continue;
    }
    if (auto v = c.take("--stage3-max-live-parameters")) {
      int64_t n;
      if (llvm::StringRef(*v).getAsInteger(10, n) || n < 0)
        return usageError("--stage3-max-live-parameters needs a count",
                          kCompileUsage);
      o.maxLive = *v;
      continue;
    }
    if (auto v = c.take("--prefetch")) {
      int64_t n;
      if (llvm::StringRef(*v).getAsInteger(10, n) || n < 0)
        return usageError("--prefetch needs a count >= 0", kCompileUsage);
      o.prefetch = *v;
      continue;
    }
    if (auto v = c.take("--sharding")) {
      static const std::map<std::string, std::string> fsdp = {
          {"NO_SHARD", "stage=0"},
          {"SHARD_GRAD_OP", "stage=2"},
          {"FULL_SHARD", "stage=3"},
          {"HYBRID_SHARD", "stage=3"}};
      auto it = fsdp.find(*v);
      if (it == fsdp.end())
        return usageError("--sharding must be NO_SHARD, SHARD_GRAD_OP, "
                          "FULL_SHARD or HYBRID_SHARD, not '" +
                              *v + "'",
                          kCompileUsage);
      if (*v == "HYBRID_SHARD")
        o.hybridRequested = true;
      o.partitionPipeline +=
          (o.partitionPipeline.empty() ? "" : " ") + it->second;
      o.partition = true;
      continue;
    }
    if (auto v = c.take("--recompute")) {
      if (!llvm::is_contained(kRecomputeModes, *v) && *v != "auto")
        return usageError("--recompute must be none, elementwise, "
                          "selective, full or auto, not '" +
                              *v + "'",
                          kCompileUsage);
      o.recompute = *v;
      continue;
    }
    if (auto v = c.take("--offload-optimizer")) {
      if (std::string e =
              notOneOf("--offload-optimizer", *v, {"none", "cpu", "nvme"});
          !e.empty())
        return usageError(e, kCompileUsage);
      o.offloadOptimizer = *v;
      continue;
    }
    if (auto v = c.take("--nvme-path")) {
      if (v->empty())
        return usageError("--nvme-path needs a directory", kCompileUsage);
      o.nvmePath = *v;
      continue;
    }
    if (auto v = c.take("--offload-param")) {
      if (std::string e = notOneOf("--offload-param", *v, {"none", "cpu"});
          !e.empty())
        return usageError(e, kCompileUsage);
      o.offloadParam = *v;
      continue;
    }
    if (auto v = c.take("--offload-chunk-elements")) {
      int64_t n = 0;
      if (llvm::StringRef(*v).getAsInteger(10, n) || n < 1)
        return usageError("--offload-chunk-elements needs a positive count",
                          kCompileUsage);
      o.offloadChunk = *v;
      continue;
    }
    if (auto v = c.take("--offload-ratio")) {
      double r = 1.0;
      o.offloadRatioAuto = *v == "auto";
      if (!o.offloadRatioAuto &&
          (llvm::StringRef(*v).getAsDouble(r) || !(r >= 0.0 && r <= 1.0)))
        return usageError("--offload-ratio needs a share between 0 and 1, or "
                          "auto, not '" +
                              *v + "'",
                          kCompileUsage);
      o.offloadRatio = r;
      continue;
    }
    if (auto v = c.take("--offload-copy-ahead")) {
      unsigned n = 0;
      if (llvm::StringRef(*v).getAsInteger(10, n))
        return usageError("--offload-copy-ahead needs a count (0 or more)",
                          kCompileUsage);
      o.offloadCopyAhead = *v;
      continue;
    }
    if (auto v = c.take("--classifier-chunk")) {
      std::optional<uint64_t> size =
          *v == "0" ? std::optional<uint64_t>(0) : parseSize(*v);
      if (!size || *size > uint64_t(INT64_MAX))
        return usageError("--classifier-chunk needs a size such as 256MiB or "
                          "0, not '" +
                              *v + "'",
                          kCompileUsage);
      o.classifierChunk = *size;
      continue;
    }
    if (auto v = c.take("--memory-budget")) {
      o.memoryBudget = parseSize(*v);
      if (!o.memoryBudget)
        return usageError("--memory-budget needs a size such as 24GiB, 24GB, "
                          "512MiB or a count of bytes, not '" +
                              *v + "'",
                          kCompileUsage);
      continue;
    }
    if (auto v = c.take("--precision")) {
      if (std::string e = notOneOf("--precision", *v, {"bf16", "fp16", "fp32"});
          !e.empty())
        return usageError(e, kCompileUsage);
      o.precision = *v;
      continue;
    }
    if (auto v = c.take("--grad-reduce-dtype")) {
      if (std::string e = notOneOf("--grad-reduce-dtype", *v, {"fp32", "bf16"});
          !e.empty())
        return usageError(e, kCompileUsage);
      o.gradReduceDtype = *v;
      continue;
    }
    bool scaler = false;
    for (auto [flag, integer] : {std::pair{"--loss-scale", false},
                                 std::pair{"--initial-scale-power", true},
                                 std::pair{"--loss-scale-window", true},
                                 std::pair{"--hysteresis", true},
                                 std::pair{"--min-loss-scale", false}}) {
      if (auto v = c.take(flag)) {
        double d;
        int64_t n;
        bool bad = integer ? llvm::StringRef(*v).getAsInteger(10, n) || n < 1
                           : llvm::StringRef(*v).getAsDouble(d) || d < 0;
        if (bad)
          return usageError(std::string(flag) + " needs " +
                                (integer ? "a count >= 1" : "a number >= 0") +
                                ", not '" + *v + "'",
                            kCompileUsage);
        o.precisionPipeline += std::string(" ") + (flag + 2) + "=" + *v;
        scaler = true;
        break;
      }
    }
    if (scaler)
      continue;
    if (auto v = c.take("--optimizer")) {
      optimizerOptions.push_back("optimizer=" + *v);
      continue;
    }
    if (auto v = c.take("--schedule")) {
      optimizerOptions.push_back("schedule=" + *v);
      continue;
    }
    if (auto v = c.take("--no-decay")) {
      optimizerOptions.push_back("no-decay={" + *v + "}");
      continue;
    }
    if (auto v = c.take("--target")) {
      o.target = *v;
      o.targetGiven = true;
      continue;
    }
    if (auto v = c.take("--emit")) {
      o.emit = *v;
      continue;
    }
    if (auto v = c.take("--cxx")) {
      o.cxx = *v;
      continue;
    }
    if (auto v = c.take("--nvcc")) {
      o.nvcc = *v;
      continue;
    }
    if (auto v = c.take("--cuda-arch")) {
      o.cudaArch = *v;
      continue;
    }
    if (auto v = c.take("--host-opt")) {
      if (*v != "0" && *v != "1" && *v != "2" && *v != "3")
        return usageError("--host-opt expects 0, 1, 2 or 3, got '" + *v + "'",
                          kCompileUsage);
      o.hostOpt = *v;
      continue;
    }
    if (auto v = c.take("-o")) {
      o.output = *v;
      continue;
    }
    if (auto v = c.take("--arena-svg")) {
      o.arenaSvg = *v;
      continue;
    }
    if (!c.error.empty())
      return usageError(c.error, kCompileUsage);
    llvm::StringRef a = c.current();
    if (a == "--nesterov")
      optimizerOptions.push_back("nesterov=true");
    else if (a == "--print-ir-after-all")
      o.printIRAfterAll = true;
    else if (a == "--report")
      o.report = true;
    else if (a == "--f64")
      o.f64 = true;
    else if (a == "--no-fuse")
      o.fuse = false;
    else if (a == "--no-fuse-attention")
      o.fuseAttention = false;
    else if (a == "--no-raise-gelu")
      o.raiseGelu = false;
    else if (a == "--no-raise-rms-norm")
      o.raiseRmsNorm = false;
    else if (a == "--no-raise-swiglu")
      o.raiseSwiglu = false;
    else if (a == "--no-fuse-norm-residual")
      o.fuseNormResidual = false;
    else if (a == "--no-accumulate-in-call")
      o.accumulateInCall = false;
    else if (a == "--nondeterministic-attention")
      o.nondeterministicAttention = true;
    else if (a == "--no-in-place-updates")
      o.inPlaceUpdates = false;
    else if (a == "--offload-overlap")
      o.offloadOverlap = true;
    else if (a == "--sync-batchnorm") {
      o.partitionPipeline +=
          std::string(o.partitionPipeline.empty() ? "" : " ") +
          "sync-batchnorm=true";
      o.partition = true;
    } else if (a == "--keep-gathered") {
      o.partitionPipeline +=
          std::string(o.partitionPipeline.empty() ? "" : " ") +
          "keep-gathered=true";
      o.partition = true;
    } else if (a.starts_with("-"))
      return usageError("unknown option '" + a.str() + "'", kCompileUsage);
    else if (o.model.empty())
      o.model = a.str();
    else
      return usageError("more than one model given", kCompileUsage);
    c.next();
  }
  if (o.model.empty())
    return usageError("no model given", kCompileUsage);
  if (o.emit != "exe" && o.emit != "cpp" && o.emit != "mlir")
    return usageError("--emit must be exe, cpp or mlir", kCompileUsage);
  if (o.target.empty())
    o.target = defaultTarget(o);
  if (o.target != "cpu" && o.target != "cuda")
    return usageError("--target must be cpu or cuda, not '" + o.target + "'",
                      kCompileUsage);
  if (o.nondeterministicAttention && (o.target != "cuda" || !o.fuseAttention))
    llvm::errs() << "note: --nondeterministic-attention changes nothing here "
                    "(it applies to the fused attention of --target cuda): "
                    "the attention backward stays deterministic\n";
  if (o.target == "cuda") {
#ifndef DSC_RUNTIME_CUDA_LIBRARY
    llvm::errs() << "error: --target cuda: this dsc was built without its "
                    "CUDA runtime (no nvcc at build time); rebuild with CUDA "
                    "installed (/usr/local/cuda) or use --target cpu\n";
    return 1;
#else
    if (int arch = cudaArchNumber(o.cudaArch); arch < 0) {
      return usageError("--cuda-arch expects sm_XY or sm_XYa (e.g. sm_90a), "
                        "not '" +
                            o.cudaArch + "'",
                        kCompileUsage);
    } else if (arch < kRuntimeMinArch) {
      llvm::errs() << "error: --cuda-arch " << o.cudaArch
                   << ": the dsc CUDA runtime was built for "
                   << DSC_CUDA_ARCHITECTURES
                   << ", which does not run on older GPUs; rebuild dsc with "
                      "-DDSC_CUDA_ARCHITECTURES=\""
                   << arch << "-real;" << arch << "-virtual\"\n";
      return 1;
    }
#endif
  }
  if (o.hybridRequested &&
      o.partitionPipeline.find("hybrid-group=") == std::string::npos)
    return usageError("--sharding HYBRID_SHARD needs --hybrid-group G",
                      kCompileUsage);
  if (o.output.empty() && o.emit == "exe")
    return usageError("-o PROGRAM is required", kCompileUsage);
  if (o.f64 && o.precision != "fp32")
    return usageError("--f64 and --precision " + o.precision +
                          " contradict each other; give one",
                      kCompileUsage);
  if (o.gradReduceDtype != "fp32" && !o.partition)
    return usageError("--grad-reduce-dtype applies to sharded programs "
                      "(--world-size N > 1 with --stage or --sharding)",
                      kCompileUsage);
  if (!o.precisionPipeline.empty() && o.precision != "fp16")
    return usageError("the loss-scale options apply to --precision fp16 "
                      "only (bf16 needs no loss scaling)",
                      kCompileUsage);
  // Stage 0 on one rank is the unsharded step: dsc-zero-partition's flat
  // buckets would only add copies and hold the gradients twice.
  if (o.partition && isOneRankStageZero(o.partitionPipeline)) {
    o.partition = false;
    o.partitionPipeline.clear();
    o.gradReduceDtype = "fp32";
  }
  // ZeRO-1/2 in mixed precision shard the fp32 masters and replicate the
  // 16-bit model, as DeepSpeed does: 2 + 18/N bytes a parameter at stage
  // 2 (fp32 gradients), where replicated masters would take 6 + 12/N.
  if (int64_t stage = partitionOption(o.partitionPipeline, "stage", 0);
      o.partition && o.precision != "fp32" && (stage == 1 || stage == 2))
    o.partitionPipeline += " shard-masters=true";
  for (const auto &opt : optimizerOptions)
    o.optimizerPipeline += (o.optimizerPipeline.empty() ? "" : " ") + opt;
  return -1; // go on
}

int runBuild(const std::string &tool, const std::vector<std::string> &argv,
             const std::string &sourcePath) {
  std::vector<llvm::StringRef> refs(argv.begin(), argv.end());
  std::string err;
  int rc =
      llvm::sys::ExecuteAndWait(argv[0], refs, std::nullopt, {}, 0, 0, &err);
  if (rc != 0) {
    llvm::errs() << "error: building the program failed (" << tool
                 << " exited with " << rc << (err.empty() ? "" : ": ") << err
                 << "); the generated source is kept at " << sourcePath << "\n";
    return 1;
  }
  return 0;
}

/// nvcc: the generated CUDA C++ for --cuda-arch (SASS) plus PTX, linked with
/// the CUDA runtime of dsc, cuBLASLt, cuDNN and NCCL.
int buildCuda(const CompileOptions &o, const std::string &cuPath) {
#ifndef DSC_RUNTIME_CUDA_LIBRARY
  return 1;
#else
  std::string nvcc = findNvcc(o);
  if (nvcc.empty()) {
    llvm::errs() << "error: nvcc not found; install the CUDA toolkit "
                    "(/usr/local/cuda/bin), pass --nvcc PATH, or use --target "
                    "cpu\n";
    return 1;
  }
  std::string sm = o.cudaArch.substr(3); // "90a"
  std::string virt = std::to_string(cudaArchNumber(o.cudaArch));
  std::vector<std::string> argv = {
      // Device code is always optimized (cicc and ptxas default to -O3);
      // nvcc's -O would set the host compiler's level, which --host-opt does.
      nvcc, "-std=c++17", "-Xcompiler=-O" + o.hostOpt,
      // As the runtime's elementwise kernels: no contracted multiply-adds,
      // so a fused chain rounds as the ops do one by one.
      "-fmad=false", "--threads=0", // the SASS and PTX passes in parallel
      "-gencode=arch=compute_" + sm + ",code=sm_" + sm,
      "-gencode=arch=compute_" + virt + ",code=compute_" + virt,
      "-I" DSC_RUNTIME_INCLUDE_DIR, "-I" DSC_RUNTIME_SOURCE_DIR, cuPath,
      DSC_RUNTIME_CUDA_LIBRARY, DSC_RUNTIME_LIBRARY, "-L" DSC_CUDA_LIBRARY_DIR,
      "-lcublasLt", "-lcudnn", "-lnvrtc", "-lnccl", "-lpthread", "-ldl", "-o",
      o.output};
  return runBuild("nvcc", argv, cuPath);
#endif
}

int build(const CompileOptions &o, const std::string &cppPath) {
  std::string cxx = o.cxx;
  if (cxx.empty())
    if (const char *env = std::getenv("CXX"))
      cxx = env;
  if (cxx.empty())
    cxx = DSC_PROGRAM_CXX;
  auto found = llvm::sys::findProgramByName(cxx);
  if (!found) {
    llvm::errs() << "error: C++ compiler '" << cxx
                 << "' not found; install g++ or pass --cxx\n";
    return 1;
  }
  std::vector<std::string> argv = {*found,
                                   "-std=c++17",
                                   "-O" + o.hostOpt,
                                   "-I" DSC_RUNTIME_INCLUDE_DIR,
                                   "-I" DSC_RUNTIME_SOURCE_DIR,
                                   cppPath,
                                   DSC_RUNTIME_LIBRARY,
                                   "-lpthread",
                                   "-ldl", // runtime/core/env.cpp's dlopen
                                   "-o",
                                   o.output};
#ifdef DSC_PROGRAM_SANITIZE
  // A sanitizer build's runtime library is instrumented: the program links
  // the same sanitizer runtimes (and is checked by them too).
  argv.insert(argv.begin() + 1, {"-fsanitize=address,undefined",
                                 "-fno-sanitize-recover=undefined",
                                 "-fno-omit-frame-pointer", "-g1"});
#endif
  return runBuild(cxx, argv, cppPath);
}

} // namespace

/// Where the large constants of the generated source go: beside the
/// output (`<output>.consts.bin`, absolute), unless the output is stdout or
/// a device, where the source holds every constant itself.
std::string constantsFileFor(const CompileOptions &o) {
  if (o.output.empty() || o.emit == "mlir")
    return "";
  llvm::sys::fs::file_status st;
  if (!llvm::sys::fs::status(o.output, st) &&
      st.type() != llvm::sys::fs::file_type::regular_file)
    return "";
  llvm::SmallString<256> path(o.output);
  llvm::sys::fs::make_absolute(path);
  return (path + ".consts.bin").str();
}

/// The command line as a shell would take it back.
std::string commandLine(const std::vector<std::string> &args) {
  std::string line = "dsc compile";
  for (const std::string &a : args) {
    bool plain = !a.empty() &&
                 a.find_first_not_of(
                     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
                     "QRSTUVWXYZ0123456789-_=.,/:+@%") == std::string::npos;
    if (plain) {
      line += " " + a;
      continue;
    }
    line += " '";
    for (char c : a)
      line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += "'";
  }
  return line;
}

/// What the program records of its making (dsc/program.h), and the
/// run-time defaults the config gave.
void setProvenance(const CompileOptions &o, const std::string &command,
                   EmitCppOptions &options) {
  options.dscVersion = std::string("0.1 (MLIR ") + LLVM_VERSION_STRING +
                       ", commit " + dscBuildCommit() + ")";
  options.compileCommand = command;
  options.target = o.target == "cuda" ? "cuda " + o.cudaArch : "cpu";
  std::string hash;
  if (io::sha256File(o.model, hash).ok())
    options.modelSha256 = hash;
  options.configJson = o.config.json;
  options.nvmePath = o.nvmePath;
  for (const std::string &a : o.config.runArgs) {
    bool plain = a.find_first_of(" \t'") == std::string::npos && !a.empty();
    options.runDefaults +=
        (options.runDefaults.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
}

/// What the arena picture is of: the model and the step's configuration.
std::string pictureTitle(ModuleOp module, const CompileOptions &o) {
  auto i64 = [&](StringRef name, int64_t dflt) {
    auto a = module->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : dflt;
  };
  return llvm::formatv("{0}, stage {1}, {2} rank(s), {3}, recompute {4}",
                       llvm::sys::path::filename(o.model), i64("dsc.stage", 0),
                       i64("dsc.world_size", 1), o.precision, o.recompute)
      .str();
}

/// A `.mlir` file as the final IR (no passes run): code generation only,
/// for the target its `dsc.target` names (which --target must agree with).
OwningOpRef<ModuleOp> readIR(MLIRContext &ctx, CompileOptions &o) {
  ctx.loadDialect<DscDialect, func::FuncDialect, shard::ShardDialect>();
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(o.model, &ctx);
  if (!module)
    return nullptr;
  FailureOr<TargetDescription> target = TargetDescription::of(*module);
  if (failed(target))
    return nullptr;
  if (!(*module)->hasAttr("dsc.target")) {
    std::string error;
    target = TargetDescription::forName(o.target, o.cudaArch, error);
    setTarget(*module, *target);
  } else if (o.targetGiven && target->name != o.target) {
    llvm::errs() << "error: " << o.model << ": the IR is for target \""
                 << target->name << "\" (its dsc.target), not --target "
                 << o.target << "\n";
    return nullptr;
  } else {
    o.target = target->name;
    if (!target->arch.empty())
      o.cudaArch = target->arch;
  }
  return module;
}

/// The passes from the imported forward graph to the step code generation
/// translates: gradients, optimizer, sharding, precision, schedule,
/// recomputation, then canonicalization, CSE and (for a target with
/// generated kernels) elementwise fusion, and which updates are in place.
LogicalResult runPipeline(MLIRContext &ctx, ModuleOp module,
                          const CompileOptions &o) {
  PassManager pm(&ctx);
  if (o.printIRAfterAll) {
    ctx.disableMultithreading();
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
        /*shouldPrintAfterPass=*/[](Pass *, Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  auto add = [&](const std::string &pipeline, const char *what) {
    if (succeeded(parsePassPipeline(pipeline, pm, llvm::errs())))
      return true;
    llvm::errs() << "error: bad " << what << ": " << pipeline << "\n";
    return false;
  };
  if (o.fuseAttention) {
    dsc::DscFuseAttentionOptions attention;
    attention.nondeterministicBackward = o.nondeterministicAttention;
    pm.addPass(createDscFuseAttention(attention));
  }
  if (o.raiseGelu)
    pm.addPass(createDscRaiseGelu());
  if (o.raiseRmsNorm)
    pm.addPass(createDscRaiseRmsNorm());
  if (o.raiseSwiglu)
    pm.addPass(createDscRaiseSwiglu());
  pm.addPass(createDscRaiseRotateHalf());
  pm.addPass(createDscGlobalMeanLoss());
  pm.addPass(createDscAutodiff());
  if (!add("dsc-optimizer{" + o.optimizerPipeline + "}", "optimizer options"))
    return failure();
  if (o.partition &&
      !add("dsc-zero-partition{" + o.partitionPipeline + "}",
           "sharding options"))
    return failure();
  if (!add("dsc-mixed-precision{precision=" + o.precision +
               " grad-reduce-dtype=" + o.gradReduceDtype + o.precisionPipeline +
               "}",
           "precision options"))
    return failure();
  if (o.partition &&
      !add("dsc-schedule{prefetch=" + o.prefetch + " prefetch-bucket-size=" +
               o.prefetchSize + " max-live-parameters=" + o.maxLive + "}",
           "schedule options"))
    return failure();
  // On the final order of the step (its clones carry dsc.recomputed, so
  // CSE keeps them apart).
  if (o.recompute != "none" &&
      !add("dsc-recompute{mode=" + o.recompute + "}", "recompute options"))
    return failure();
  // The per-parameter gradients a sharded @forward_backward reduces inside
  // are not held across the call.
  pm.addPass(createDscDropUnusedResults());
  // Constants stay where they are (no constant CSE): autodiff's
  // dsc.backward_begin marker is a constant that must stay where backward
  // begins (the wall-clock breakdown and the report read it there).
  GreedyRewriteConfig canonicalize;
  canonicalize.enableConstantCSE(false);
  pm.addPass(createCanonicalizerPass(canonicalize));
  pm.addPass(createCSEPass());
  // On the canonical step (the precision pass's casts of the logits folded
  // into the loss ops).
  if (o.classifierChunk > 0 && !add("dsc-fuse-classifier{chunk-bytes=" +
                                        std::to_string(o.classifierChunk) + "}",
                                    "classifier options"))
    return failure();
  // Offloaded, a lone adamw is grouped too (dsc-offload's compute copies).
  dsc::DscMultiTensorAdamWOptions multi;
  multi.minGroup = o.offloadOptimizer != "none" ? 1 : 2;
  // The copies are state written over its argument: only with the in-place
  // passes (the program refuses a compute copy update that is not).
  multi.computeCopies = o.offloadOptimizer == "none" && o.inPlaceUpdates;
  pm.addPass(createDscMultiTensorAdamW(multi));
  if (o.offloadParam != "none" && o.offloadOptimizer == "none") {
    llvm::errs()
        << "error: --offload-param cpu needs --offload-optimizer cpu or nvme "
           "(the host AdamW writes the 16-bit parameters there)\n";
    return failure();
  }
  if (!o.nvmePath.empty() && o.offloadOptimizer != "nvme") {
    llvm::errs() << "error: --nvme-path names the directory of "
                    "--offload-optimizer nvme's files; add that option or "
                    "drop --nvme-path\n";
    return failure();
  }
  if (o.offloadOptimizer != "none" &&
      !add("dsc-offload{optimizer=" + o.offloadOptimizer + " chunk-elements=" +
               o.offloadChunk + " copy-ahead=" + o.offloadCopyAhead +
               " params=" + o.offloadParam +
               " ratio=" + formatNumber(o.offloadRatio) +
               (o.offloadOverlap ? " overlap=true" : "") + "}",
           "offload options"))
    return failure();
  // --accum-steps: each micro-batch's gradients are added to the running
  // sums inside the call, over their storage (not held beside them).
  if (o.accumulateInCall)
    pm.addPass(createDscAccumulateInCall());
  // Stages 0-1 on several ranks: the full gradient buckets live from when
  // backward fills them, not across the whole call.
  pm.addPass(createDscInlineStep());
  // Kernels are generated for the IR's f32 (not under --f64); the bias
  // gradients go into GEMM epilogues first, so that no chain writes the
  // f32 gradient only a sum read.
  if (o.fuse && !o.f64) {
    pm.addPass(createDscFuseGemmEpilogue());
    pm.addPass(createDscFuseElementwise());
    if (o.fuseNormResidual)
      pm.addPass(createDscFuseNormResidual());
  }
  // Last: they decide on the final order of the step.
  if (o.inPlaceUpdates) {
    pm.addPass(createDscInPlaceTemporaries());
    pm.addPass(createDscInPlaceUpdates());
  }
  return pm.run(module);
}

/// The imported model, through the pipeline for `o`'s target.
OwningOpRef<ModuleOp> compileOnnx(MLIRContext &ctx, const CompileOptions &o) {
  OwningOpRef<ModuleOp> module = importOnnxFile(ctx, o.model, o.import);
  if (!module)
    return nullptr;
  llvm::SmallString<256> abs(o.model);
  llvm::sys::fs::make_absolute(abs);
  (*module)->setAttr("dsc.model_path", StringAttr::get(&ctx, abs));
  std::string error;
  FailureOr<TargetDescription> target =
      TargetDescription::forName(o.target, o.cudaArch, error);
  if (failed(target)) {
    llvm::errs() << "error: " << error << "\n";
    return nullptr;
  }
  setTarget(*module, *target);
  if (failed(runPipeline(ctx, *module, o)))
    return nullptr;
  return module;
}

namespace {

/// The pass registry is global: filled once, before any compile reads it
/// (dsc estimate compiles on several threads).
void registerPassesOnce() {
  static std::once_flag once;
  std::call_once(once, [] { registerDscPasses(); });
}

/// The per-rank bytes of the compiled step: its tensors, the arena the code
/// generator plans for it and the library workspaces the runtime will take
/// (estimated); none when it does not compile (the errors are printed).
std::optional<uint64_t> planPeakBytes(ModuleOp module) {
  std::string source;
  llvm::raw_string_ostream discard(source);
  EmitCppStats stats;
  if (failed(emitCpp(module, discard, {}, &stats)))
    return std::nullopt;
  return uint64_t(stepTensorBytes(module)) + stats.arenaBytes +
         codegen::estimateWorkspaces(module).total();
}

/// The step compiled for `o` in `ctx`, quietly (no IR printing, no report).
OwningOpRef<ModuleOp> compileQuietly(MLIRContext &ctx, CompileOptions o) {
  o.emit = "mlir";
  o.report = o.printIRAfterAll = false;
  o.arenaSvg.clear();
  return compileOnnx(ctx, o);
}

std::optional<uint64_t> planPeakBytes(const CompileOptions &o,
                                      llvm::raw_ostream *diagnostics) {
  registerPassesOnce();
  // One compile of several at once (dsc estimate): no thread pool each.
  MLIRContext ctx(MLIRContext::Threading::DISABLED);
  installDiagnosticPrinter(ctx, diagnostics);
  OwningOpRef<ModuleOp> module = compileQuietly(ctx, o);
  if (!module)
    return std::nullopt;
  return planPeakBytes(*module);
}

/// The memory of GPU 0 as nvidia-smi reports it (none without one).
std::optional<uint64_t> localGpuMemory() {
  auto smi = llvm::sys::findProgramByName("nvidia-smi");
  if (!smi)
    return std::nullopt;
  llvm::SmallString<128> out;
  if (llvm::sys::fs::createTemporaryFile("dsc-gpu-memory", "txt", out))
    return std::nullopt;
  llvm::FileRemover remove(out);
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, out.str(),
                                                llvm::StringRef("")};
  std::string query = "--query-gpu=memory.total";
  llvm::StringRef argv[] = {*smi, query, "--format=csv,noheader,nounits",
                            "-i", "0"};
  if (llvm::sys::ExecuteAndWait(*smi, argv, std::nullopt, redirects, 20) != 0)
    return std::nullopt;
  auto text = llvm::MemoryBuffer::getFile(out);
  uint64_t mib = 0;
  if (!text || llvm::StringRef((*text)->getBuffer()).trim().getAsInteger(10, mib) ||
      mib == 0)
    return std::nullopt;
  return mib << 20;
}

/// The budget of the auto choices: --memory-budget, else under --target
/// cuda the memory of the GPU this machine sees.
std::optional<uint64_t> autoBudget(const CompileOptions &o) {
  if (o.memoryBudget || o.target != "cuda")
    return o.memoryBudget;
  return localGpuMemory();
}

/// One trial of an auto choice: the step compiled for `trial` and its plan's
/// peak per rank ("LABEL PEAK" appended to `tried`); no peak when it does
/// not compile.
std::optional<uint64_t> tryPlan(MLIRContext &ctx, const CompileOptions &trial,
                                llvm::StringRef label, std::string &tried,
                                OwningOpRef<ModuleOp> &module) {
  module = compileQuietly(ctx, trial);
  std::optional<uint64_t> peak = module ? planPeakBytes(*module) : std::nullopt;
  if (peak)
    tried += llvm::formatv("{0}{1} {2}", tried.empty() ? "" : ", ", label,
                           humanBytes(double(*peak)))
                 .str();
  return peak;
}

/// --offload-ratio auto: the least ratio, in twentieths, whose compiled
/// plan fits the budget, by bisection (the plan only grows as the ratio
/// falls: each element kept on the device adds its master and moments).
/// Sets o.offloadRatio and `chosen` as chooseRecompute does; the same
/// returns.
int chooseOffloadRatio(CompileOptions &o, MLIRContext &ctx,
                       OwningOpRef<ModuleOp> &chosen) {
  std::optional<uint64_t> budget = autoBudget(o);
  if (!budget)
    return usageError("--offload-ratio auto needs --memory-budget SIZE (no "
                      "GPU visible here to take its memory from)",
                      kCompileUsage);
  constexpr int kSteps = 20;
  auto ratio = [](int k) { return double(k) / kSteps; };
  std::string tried;
  OwningOpRef<ModuleOp> best;
  uint64_t bestPeak = 0;
  // Whether the step fits with ratio k / kSteps (kept in `best` if so);
  // nullopt when it does not compile.
  auto fits = [&](int k) -> std::optional<bool> {
    CompileOptions trial = o;
    trial.offloadRatio = ratio(k);
    OwningOpRef<ModuleOp> module;
    std::optional<uint64_t> peak =
        tryPlan(ctx, trial, formatNumber(ratio(k)), tried, module);
    if (!peak)
      return std::nullopt;
    if (*peak > *budget)
      return false;
    best = std::move(module);
    bestPeak = *peak;
    return true;
  };
  std::optional<bool> whole = fits(kSteps);
  if (!whole)
    return 1;
  if (!*whole) {
    llvm::errs() << "error: " << o.model << ": the step does not fit in "
                 << humanBytes(double(*budget)) << " per rank even with the "
                 << "whole optimizer on the host (" << tried << "); add "
                 << "--recompute auto, shard it over more ranks "
                 << "(--world-size, --stage 3), or lower --micro-batch\n";
    return 1;
  }
  int lo = -1, hi = kSteps; // hi fits; lo does not (or is below 0)
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    std::optional<bool> ok = fits(mid);
    if (!ok)
      return 1;
    (*ok ? hi : lo) = mid;
  }
  o.offloadRatio = ratio(hi);
  if (!o.printIRAfterAll)
    chosen = std::move(best);
  llvm::errs() << "note: --offload-ratio auto: "
               << formatNumber(o.offloadRatio) << " (per rank "
               << humanBytes(double(bestPeak)) << " of the "
               << humanBytes(double(*budget)) << " budget; tried " << tried
               << ")"
               << (hi == 0 ? "; nothing is offloaded: the step fits without "
                             "--offload-optimizer"
                           : "")
               << "\n";
  return -1;
}

/// --recompute auto: the least recomputation (kRecomputeModes, in order)
/// whose compiled plan fits the budget becomes o.recompute. -1 to go on,
/// else the exit code (nothing fits, or no budget known).
/// Sets o.recompute to the least recomputation whose plan fits the budget,
/// and `chosen` to that mode's step, compiled in `ctx` (kept unless the IR
/// is to be printed pass by pass: then it is compiled again, printing).
int chooseRecompute(CompileOptions &o, MLIRContext &ctx,
                    OwningOpRef<ModuleOp> &chosen) {
  std::optional<uint64_t> budget = autoBudget(o);
  if (!budget)
    return usageError("--recompute auto needs --memory-budget SIZE (no GPU "
                      "visible here to take its memory from)",
                      kCompileUsage);
  std::string tried;
  for (const char *mode : kRecomputeModes) {
    CompileOptions trial = o;
    trial.recompute = mode;
    OwningOpRef<ModuleOp> module;
    std::optional<uint64_t> peak = tryPlan(ctx, trial, mode, tried, module);
    if (!peak)
      return 1;
    if (*peak <= *budget) {
      o.recompute = mode;
      if (!o.printIRAfterAll)
        chosen = std::move(module);
      llvm::errs() << "note: --recompute auto: " << mode << " (per rank "
                   << humanBytes(double(*peak)) << " of the "
                   << humanBytes(double(*budget)) << " budget; tried " << tried
                   << ")\n";
      return -1;
    }
  }
  llvm::errs() << "error: " << o.model << ": the step does not fit in "
               << humanBytes(double(*budget)) << " per rank with any "
               << "recomputation (" << tried << "); shard it over more ranks "
               << "(--world-size, --stage 3), or lower --micro-batch\n";
  return 1;
}

} // namespace

bool compileOptionsAccepted(const std::string &model,
                            std::vector<std::string> flags) {
  CompileOptions o;
  flags.insert(flags.end(), {"--emit=mlir", model});
  return parse(std::move(flags), o) < 0;
}

std::optional<uint64_t> compiledPeakBytes(const std::string &model,
                                          const ImportOptions &import,
                                          std::vector<std::string> flags,
                                          llvm::raw_ostream *diagnostics) {
  CompileOptions o;
  flags.insert(flags.end(), {"--emit=mlir", model});
  if (parse(std::move(flags), o) >= 0)
    return std::nullopt;
  o.import = import;
  return planPeakBytes(o, diagnostics);
}

int runCompile(std::vector<std::string> args) {
  CompileOptions o;
  std::string command = commandLine(args);
  int rc = parse(std::move(args), o);
  if (rc >= 0)
    return rc;

  bool fromIR = llvm::StringRef(o.model).ends_with(".mlir");
  bool ratioAuto = o.offloadRatioAuto;
  if (o.memoryBudget && o.recompute != "auto" && !ratioAuto)
    return usageError("--memory-budget is the budget of --recompute auto "
                      "and --offload-ratio auto",
                      kCompileUsage);
  bool partialOffload = ratioAuto || o.offloadRatio != 1.0;
  if (partialOffload && o.offloadOptimizer == "none")
    return usageError("--offload-ratio needs --offload-optimizer cpu or nvme",
                      kCompileUsage);
  if (o.offloadOverlap && o.offloadOptimizer == "none")
    return usageError("--offload-overlap needs --offload-optimizer cpu or nvme",
                      kCompileUsage);
  if (partialOffload && o.offloadParam != "none")
    return usageError("--offload-ratio below 1 keeps part of the optimizer "
                      "on the GPU, which --offload-param cpu (parameters on "
                      "the host) does not support",
                      kCompileUsage);
  // Recomputation is chosen with the whole optimizer on the host, then the
  // ratio as low as the budget allows.
  o.offloadRatioAuto = false;
  registerPassesOnce();
  MLIRContext ctx;
  installDiagnosticPrinter(ctx);
  OwningOpRef<ModuleOp> module;
  if (o.recompute == "auto" && !fromIR)
    if (int rc = chooseRecompute(o, ctx, module); rc >= 0)
      return rc;
  if (ratioAuto && !fromIR)
    if (int rc = chooseOffloadRatio(o, ctx, module); rc >= 0)
      return rc;
  if (!module)
    module = fromIR ? readIR(ctx, o) : compileOnnx(ctx, o);
  if (!module)
    return 1;
  std::string source;
  EmitCppStats stats;
  std::string constantsPath = constantsFileFor(o);
  auto emitSource = [&]() {
    llvm::raw_string_ostream os(source);
    EmitCppOptions options;
    options.promoteF32ToF64 = o.f64;
    options.constantsPath = constantsPath;
    options.recordTimeline = !o.arenaSvg.empty();
    setProvenance(o, command, options);
    return emitCpp(*module, os, options, &stats);
  };
  // The report and the picture need the code generator's plan (the arena).
  bool emitted = false;
  if (o.report || !o.arenaSvg.empty()) {
    if (o.report && !o.configPath.empty())
      printResolvedConfig(o.configPath, o.config, llvm::outs());
    if (failed(emitSource()))
      return 1;
    emitted = true;
  }
  if (o.report) {
    printMemoryReport(*module, stats.arenaBytes, llvm::outs(),
                      stats.gatheredPeakBytes, stats.gatheredBucketBytes,
                      stats.hostArenaBytes);
    printArenaBreakdown(stats, llvm::outs());
  }
  if (!o.arenaSvg.empty() &&
      !writeAtomically(o.arenaSvg, [&](llvm::raw_ostream &os) {
        writeArenaSvg(stats, pictureTitle(*module, o), os);
      }))
    return 1;

  if (o.emit == "mlir") {
    auto write = [&](llvm::raw_ostream &os) { module->print(os); };
    if (o.output.empty()) {
      write(llvm::outs());
      return 0;
    }
    return writeAtomically(o.output, write) ? 0 : 1;
  }
  if (!emitted && failed(emitSource()))
    return 1;
  // The collective manifest beside the program: what every rank issues, in
  // order (the program checks itself against the same list).
  if (!stats.collectives.empty() && !o.output.empty()) {
    std::string manifest = o.output + ".collectives.json";
    if (!writeAtomically(manifest, [&](llvm::raw_ostream &os) {
          writeManifestJson(stats, os);
        }))
      return 1;
  }
  auto writeSource = [&](llvm::raw_ostream &os) { os << source; };
  // The large constants, which the source embeds from this file.
  bool wroteConstants = !stats.constantBlob.empty();
  if (wroteConstants &&
      !writeAtomically(constantsPath, [&](llvm::raw_ostream &os) {
        os << stats.constantBlob;
      }))
    return 1;
  if (o.emit == "cpp") {
    if (o.output.empty()) {
      llvm::outs() << source;
      return 0;
    }
    return writeAtomically(o.output, writeSource) ? 0 : 1;
  }
  std::string cppPath = o.output + (o.target == "cuda" ? ".cu" : ".cpp");
  if (!writeAtomically(cppPath, writeSource))
    return 1;
  if ((o.target == "cuda" ? buildCuda(o, cppPath) : build(o, cppPath)) != 0)
    return 1;
  llvm::sys::fs::remove(cppPath);
  if (wroteConstants)
    llvm::sys::fs::remove(constantsPath); // embedded in the program now
  return 0;
}

} // namespace dsc
