//===- program.h - what a compiled training program hands the runtime -*- C++
//-*-===//
//
// `dsc compile` generates C++ that fills a ProgramSpec (the tensors of the
// train step, their roles and shapes, the optimizer's default
// hyperparameters) and a train_step function that calls the kernels; its
// main() is one line: `return dsc::runProgram(spec, argc, argv);`.
// runProgram owns everything a user touches: command-line options, initial
// parameters (the ONNX model's initializers, --init), batches (--batch,
// --data), the step loop and its progress line, and the dumps.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_PROGRAM_H
#define DSC_PROGRAM_H

#include "dsc/comm.h"
#include "dsc/device.h"
#include "dsc/runtime.h"

namespace dsc {

/// The static type of one tensor of the step.
struct TensorSpec {
  DType dtype;
  int rank;
  int64_t shape[kMaxRank];
};

/// What an argument of train_step is.
enum class ArgRole : uint8_t {
  Param,    // a trainable parameter; name = ONNX initializer name
  OptState, // optimizer state of a parameter; name = "<param>/<slot>",
            // slot "exp_avg", "exp_avg_sq" or "momentum_buffer"; starts at 0
  Buffer,   // non-trainable state (e.g. BatchNorm running stats); ONNX name
  Input,    // a batch input for the whole global batch; ONNX graph input name
  Hyper,    // a scalar f32 hyperparameter; name as in HyperDefault
  Step,     // scalar i64: the optimizer step, 1 for the first
  Seed,     // scalar i64: the run's seed (dropout)
  Scaler,   // fp16 loss scaler state (spec.lossScaler): "loss_scale",
            // "hysteresis", "good_steps" (f32), "applied_steps" (i64)
  ComputeCopy, // the 16-bit compute copy of the Param of the same name
               // (bf16 or f16, same shape), kept between steps: the program
               // fills it with the parameter rounded to its dtype (round to
               // nearest even, as dsc::cpu::cast) whenever the parameters
               // are set (initial weights, --init, a resumed checkpoint),
               // and the step updates it in place; never saved in
               // checkpoints or dumps
};

/// What a result of train_step is.
enum class ResultRole : uint8_t {
  Loss,         // scalar: the loss averaged over the accumulated micro-batches
  Param,        // updated parameter (same name as its argument)
  OptState,     // updated optimizer state (same name as its argument)
  BufferUpdate, // updated buffer (same name as its argument)
  Grad,         // gradient of a parameter (name = param), before clipping
  GradNorm,     // scalar: global gradient norm before clipping
  GradNormalizer, // scalar f32: the Grad results are to be multiplied by
                  // it, each product rounded to f32 (a loss normalized by
                  // its label count); absent: they are final
  Lr,             // scalar: the learning rate used at this step
  Scaler,         // the loss scaler's next state (same name as its argument)
  Overflow,       // scalar f32: 1 when the gradients held an inf or nan on
                  // some rank and the step was skipped (fp16), else 0
  ComputeCopy,    // the compute copy's update (same name as its argument),
                  // always computed in place of its argument
};

struct ArgSpec {
  ArgRole role;
  const char *name;
  TensorSpec type;
  /// >= 0: this argument is the rank's shard of flat bucket `bucket`
  /// (spec.buckets): a Param of stage 3, or an OptState of stage 1-3
  /// ("<bucket name>/exp_avg"). Its type is [paddedNumel / groupSize].
  int bucket = -1;
  /// The tensor lives in host memory even in a device program (offloaded
  /// optimizer state and fp32 master parameters, DeepSpeed's
  /// offload_optimizer): the step reads and writes it there (the shell pins
  /// it). Never an Input.
  bool host = false;
  /// With host: the tensor lives in a file under the run's NVMe directory
  /// (--nvme-path), mapped into memory; the step stages it into host memory
  /// chunk by chunk (dsc-offload optimizer=nvme: cpu::nvmeRead and
  /// cpu::nvmeWrite). Param or OptState only.
  bool nvme = false;
};

struct ResultSpec {
  ResultRole role;
  const char *name;
  TensorSpec type;
  int bucket = -1; // as in ArgSpec
  /// >= 0: an updated Param, OptState, Buffer or Scaler that the step may
  /// compute into the storage of its argument, this one
  /// (dsc-in-place-updates): the caller may hand both the same tensor, and
  /// holds the state once. -1: it must be storage of its own. A
  /// ComputeCopy update always has it.
  int inPlaceOf = -1;
  /// In host memory even in a device program, as ArgSpec::host; an updated
  /// state is host exactly when its argument is, and computed in place.
  bool host = false;
  /// In an NVMe file, as ArgSpec::nvme: an updated state is nvme exactly
  /// when its argument is, and always computed in place.
  bool nvme = false;
};

/// Where a parameter sits in a flat bucket (elements, row-major).
struct BucketEntry {
  const char *param; // ONNX initializer name
  int64_t offset;
  int64_t numel;
  /// The parameter's full shape, for --init and the per-parameter dumps.
  /// rank -1 (left out): taken from the model's initializer of that name,
  /// else [numel].
  int rank = -1;
  int64_t shape[kMaxRank] = {};
};

/// A flat bucket of parameters (and of their gradients and optimizer state),
/// padded with zeros to a multiple of the group size so it shards evenly.
/// Padding never reaches the user: dumps and checkpoints are per parameter.
struct BucketSpec {
  const char *name; // "bucket0"
  DType dtype;
  int64_t paddedNumel;
  int numEntries;
  const BucketEntry *entries;
};

/// Default of a hyperparameter, baked in at compile time; the program's
/// option `--<name with _ as ->` overrides it (e.g. --weight-decay).
struct HyperDefault {
  const char *name; // lr, beta1, beta2, eps, weight_decay, momentum, clip
  double value;
};

/// fp16 dynamic loss scaling, DeepSpeed's knobs (dsc-mixed-precision).
struct LossScalerSpec {
  bool enabled;        // the step has Scaler arguments and an Overflow result
  bool dynamic;        // false: a static scale, no Scaler state but steps
  double initialScale; // 2^initial_scale_power, or the static scale
  int64_t window;      // loss_scale_window
  int64_t hysteresis;  // hysteresis
  double minScale;     // min_loss_scale
};

struct ProgramSpec;

/// The parts of a step as the generated code marks them: forward_backward's
/// start (Forward) and its backward_begin (Backward), per micro-batch, then
/// the optimizer after the last micro-batch (Optimizer) and the step's end
/// (End). The program's --wall-clock-breakdown times the spans between.
enum class Phase : int { Forward = 0, Backward = 1, Optimizer = 2, End = 3 };

struct PhaseClock {
  virtual ~PhaseClock() = default;
  virtual void mark(Phase phase) = 0;
};

/// The generated step: reads `args` (in spec order), writes `results` (in
/// spec order, storage provided by the caller). Scratch memory comes from
/// `arena`, sized by the compiler (spec.arenaBytes).
/// What one rank's step runs with. `comm` is null for a program compiled
/// for one rank.
struct RankContext {
  HostArena *arena;
  Communicator *comm;
  /// The Step and Seed arguments' values, for a step whose tensors are in
  /// device memory (the host cannot read them there).
  int64_t step = 0;
  int64_t seed = 0;
  /// Set: the step marks its phases on it (--wall-clock-breakdown).
  PhaseClock *clock = nullptr;
  /// Host scratch of spec.hostArenaBytes, pinned in a device program; the
  /// step addresses it from base() (null for 0 bytes on the CPU).
  HostArena *hostArena = nullptr;
};

using TrainStepFn = Status (*)(const RankContext &ctx, const Tensor *args,
                               const Tensor *results);

struct ProgramSpec {
  const char *modelPath;    // the ONNX file compiled from (absolute path)
  const char *optimizer;    // "adamw" or "sgd"
  int64_t microBatch;       // examples per micro-batch
  int64_t accumSteps;       // micro-batches per optimizer step
  int64_t tokensPerExample; // sequence length for language models, else 1
  int numArgs;
  const ArgSpec *args;
  int numResults;
  const ResultSpec *results;
  int numHypers;
  const HyperDefault *hypers;
  size_t arenaBytes;
  TrainStepFn trainStep;
  // Sharding (dsc-zero-partition); a program for one rank leaves these 0.
  int64_t worldSize; // ranks the step was compiled for (0 = 1)
  int64_t groupSize; // ranks that shard state (hybrid); else worldSize
  int stage;         // ZeRO stage 0..3
  int numBuckets;
  const BucketSpec *buckets;
  int numCollectives; // the manifest, in the order every rank issues
  const CollectiveSpec *collectives;
  /// The device the step's tensors live on (--target cuda); null: host
  /// memory (--target cpu). A function, so that a static spec need not
  /// construct it.
  Device *(*device)() = nullptr;
  /// The step's compute precision (dsc-mixed-precision): "fp32", "bf16" or
  /// "fp16"; parameters and optimizer state are fp32 masters in all three.
  const char *precision = "fp32";
  LossScalerSpec lossScaler = {};
  /// What the program was built from and with (`./train --version`, the
  /// checkpoint manifest). Null when not known.
  const char *dscVersion = nullptr;     // "0.1 (MLIR 22.1.0)"
  const char *compileCommand = nullptr; // the `dsc compile ...` line
  const char *target = nullptr;         // "cpu", "cuda sm_90a"
  const char *modelSha256 = nullptr;    // of the ONNX file, at compile time
  const char *configJson = nullptr;     // the resolved ds_config, or null
  /// Options the program reads before its own argv, as one line
  /// ("--print-every 10 --tensorboard runs/"): run-time settings that came
  /// from the compile (ds_config's steps_per_print, monitors, checkpoint).
  /// argv overrides them.
  const char *runDefaults = nullptr;
  /// The floating-point work of one step on one rank (matmuls, attention,
  /// convolutions, forward and backward; codegen/StepFlops.h), for MFU.
  /// 0: not counted.
  double flopsPerStep = 0;
  /// Host scratch the step uses beside its arena (RankContext::hostArena):
  /// pinned host memory in a device program, for offloaded optimizer work.
  size_t hostArenaBytes = 0;
  /// The library workspaces the compiler estimates the step takes on its
  /// device beside its tensors and arena (cuBLASLt's, the shared scratch:
  /// compiler/codegen/Workspaces.h); 0: not estimated (the GEMM workspace
  /// is then assumed).
  size_t workspaceBytes = 0;
  /// The directory `dsc compile --nvme-path` named for the state the spec
  /// marks nvme (ArgSpec::nvme); the run's --nvme-path overrides it. Null:
  /// none named.
  const char *nvmePath = nullptr;
};

/// The whole program: parses argv, runs the steps, returns the exit code.
int runProgram(const ProgramSpec &spec, int argc, char **argv);

} // namespace dsc

#endif // DSC_PROGRAM_H
