//===- program.h - what a compiled training program hands the runtime -*- C++ -*-===//
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
};

/// What a result of train_step is.
enum class ResultRole : uint8_t {
  Loss,        // scalar: the loss averaged over the accumulated micro-batches
  Param,       // updated parameter (same name as its argument)
  OptState,    // updated optimizer state (same name as its argument)
  BufferUpdate,// updated buffer (same name as its argument)
  Grad,        // gradient of a parameter (name = param), before clipping
  GradNorm,    // scalar: global gradient norm before clipping
  Lr,          // scalar: the learning rate used at this step
};

struct ArgSpec {
  ArgRole role;
  const char *name;
  TensorSpec type;
};

struct ResultSpec {
  ResultRole role;
  const char *name;
  TensorSpec type;
};

/// Default of a hyperparameter, baked in at compile time; the program's
/// option `--<name with _ as ->` overrides it (e.g. --weight-decay).
struct HyperDefault {
  const char *name; // lr, beta1, beta2, eps, weight_decay, momentum, clip
  double value;
};

struct ProgramSpec;

/// The generated step: reads `args` (in spec order), writes `results` (in
/// spec order, storage provided by the caller). Scratch memory comes from
/// `arena`, sized by the compiler (spec.arenaBytes).
using TrainStepFn = Status (*)(HostArena &arena, const Tensor *args,
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
};

/// The whole program: parses argv, runs the steps, returns the exit code.
int runProgram(const ProgramSpec &spec, int argc, char **argv);

} // namespace dsc

#endif // DSC_PROGRAM_H
