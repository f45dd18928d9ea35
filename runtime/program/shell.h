//===- shell.h - The parts of the program shell, for each other -*- C++ -*-===//
//
// runProgram (program.cpp) runs a job in named steps, each in its own file:
//
//   spec_check.cpp  the spec the generated code hands over (Layout)
//   options.cpp     argv and the compile's run-time defaults (Options), --help
//   init.cpp        initial parameters and buffers (--init)
//   ranks.cpp       the ranks: their tensors, devices, the step on each
//   report.cpp      the banner, progress line, logs and metrics, summary
//   checkpointing.cpp  --save-dir, --resume
//   gradcheck.cpp   --gradcheck
//
// Internal to the runtime; tests include it.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_SHELL_H
#define DSC_RUNTIME_PROGRAM_SHELL_H

#include "dsc/program.h"
#include "io/output_file.h"
#include "io/safetensors.h"
#include "program/data.h"
#include "program/launch.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dsc::program {

//===----------------------------------------------------------------------===//
// Small helpers (util.cpp)
//===----------------------------------------------------------------------===//

Status fail(const std::string &message);
bool endsWith(const std::string &s, const std::string &suffix);
std::string lower(std::string s);
std::string baseName(const std::string &path);
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string humanBytes(double bytes);
std::string humanCount(double n);
/// A JSON number, or null for inf/nan (JSON has neither).
std::string jsonNumber(double v);
/// "--weight-decay" for "weight_decay".
std::string optionName(const std::string &hyper);
int64_t numelOf(const TensorSpec &t);
std::string describeSpec(const TensorSpec &t);
const char *argRoleName(ArgRole r);
const char *resultRoleName(ResultRole r);
bool sameType(const TensorSpec &a, const TensorSpec &b);
bool parseInt(const std::string &text, int64_t &out);
bool parseU64(const std::string &text, uint64_t &out);

/// Storage for one tensor: `alignment`-byte aligned (a power of two, at
/// least 64) and a multiple of it in size, zero-filled, never empty (a
/// zero-element tensor still gets a non-null pointer). kPageBytes for a
/// host tensor (ArgSpec::host), pinned on pages of its own. From 1 MiB on
/// it is mapped pages the kernel zeroes on first touch, so a host copy the
/// run never writes (a device program's gradients, read back only for
/// --dump-grads) costs address space, not memory.
struct FreeDeleter {
  size_t mappedBytes = 0; // mmap'ed (munmap), else malloc'ed (free)
  bool nvme = false;      // io::nvmeAllocate'd (io::nvmeRelease)
  void operator()(void *p) const;
};
using Memory = std::unique_ptr<void, FreeDeleter>;
constexpr size_t kPageBytes = 4096;
Status allocateTensor(const TensorSpec &type, const std::string &what,
                      Memory &mem, Tensor &out, size_t alignment = 64);
/// Storage for one tensor in a file under `dir` (ArgSpec::nvme:
/// io::nvmeAllocate), zero-filled and mapped on pages of its own; a tensor
/// of no elements gets allocateTensor's (nothing to keep in a file).
Status allocateNvmeTensor(const TensorSpec &type, const std::string &dir,
                          const std::string &what, Memory &mem, Tensor &out);

//===----------------------------------------------------------------------===//
// 1. The spec (spec_check.cpp)
//===----------------------------------------------------------------------===//

struct Layout {
  int loss = -1, gradNorm = -1, lr = -1;
  int gradNormalizer = -1; // the Grad results' factor, if the step has one
  int overflow = -1;                   // fp16: the skipped-step flag
  int lossScale = -1, hysteresis = -1; // fp16: Scaler args
  std::vector<int> scalerResults;      // fp16: Scaler results
  int lossScaleResult = -1, hysteresisResult = -1;
  std::vector<std::pair<int, int>> updates; // (result, arg) double-buffered
  std::vector<std::pair<int, int>> inPlace; // (result, arg) one storage
  std::vector<int> aliasOf; // per result: the arg whose storage it is, or -1
  std::vector<int> grads;                   // Grad results
  std::vector<int> inputs, params, buffers, optStates; // args
  std::vector<std::pair<int, int>> computeCopies;      // (arg, param arg)
  std::vector<int> nvme;                               // args in NVMe files
  int worldSize = 1, groupSize = 1;
};

Status checkSpec(const ProgramSpec &spec, Layout &layout);

//===----------------------------------------------------------------------===//
// 2. Options (options.cpp)
//===----------------------------------------------------------------------===//

struct Options {
  int64_t steps = 10;
  uint64_t seed = 0;
  std::string batch, data, init, dumpGrads, dumpParams, log;
  TokenType dataType = TokenType::U16;
  bool dataTypeGiven = false;
  bool help = false, quiet = false;
  bool overwriteSpecial = false; // write through links, devices and FIFOs
  // Where each output goes, checked before training (io/output_file.h).
  io::OutputTarget dumpGradsTo, dumpParamsTo, logTo;
  std::map<std::string, double> hypers; // spec name -> value
  int64_t printEvery = 1;               // progress line every N steps
  int64_t gradcheck = 0;                // elements per parameter; 0 = off
  double gradcheckTol = -1;             // < 0: by dtype
  bool version = false;                 // --version
  bool wallClockBreakdown = false;      // time the step's phases
  bool cudaGraph = true; // replay the step as a CUDA graph where it can
  bool cudaGraphGiven = false; // --cuda-graph or --no-cuda-graph given
  std::set<std::string> hypersGiven;    // on the command line
  bool seedGiven = false;
  // Checkpoints (checkpointing.h).
  std::string saveDir, resume;
  int64_t saveEvery = 0;            // 0: only at the end and on SIGTERM/SIGINT
  int64_t keepLast = 0;             // 0: keep all
  bool continueOnSaveError = false; // --on-save-error continue
  // Non-finite steps (fp32/bf16): stop after this many in a row; 0 never.
  int64_t maxBadSteps = 10;
  // Metrics sinks (io/metrics.h); rank 0 writes them.
  std::string tensorboard, mlflow, csv, runName;
  // The directory of the NVMe files (ArgSpec::nvme): --nvme-path, else the
  // compile's (spec.nvmePath).
  std::string nvmePath;
};

/// spec.runDefaults, then argv (which overrides them).
Status parseOptions(const ProgramSpec &spec, const Layout &layout, int argc,
                    char **argv, Options &o);
void printHelp(const ProgramSpec &spec, const Layout &layout,
               const std::string &program, std::FILE *out);

//===----------------------------------------------------------------------===//
// 3. Initial parameters and buffers (init.cpp)
//===----------------------------------------------------------------------===//

/// One tensor --init fills: a Param or Buffer argument of rank 0, or one
/// parameter of a sharded bucket (a view into the packed bucket, its full
/// shape), in spec order (a bucket's parameters in entry order).
struct InitTarget {
  ArgRole role;
  std::string name;
  TensorSpec type;
  Tensor dst;
};

Status initWeights(const ProgramSpec &spec, const Options &o,
                   const std::vector<InitTarget> &targets, std::string &what);

/// The full type of every parameter of every bucket: BucketEntry's shape,
/// else the model's initializer of that name, else [numel].
std::vector<std::vector<TensorSpec>> bucketShapes(const ProgramSpec &spec,
                                                  const std::string &model);
/// A view of each parameter of bucket `b` in the packed bucket at `flat`.
void unpackBucket(const ProgramSpec &spec,
                  const std::vector<std::vector<TensorSpec>> &shapes, int b,
                  void *flat, std::vector<io::NamedTensor> &out);

//===----------------------------------------------------------------------===//
// The job: what every part reads
//===----------------------------------------------------------------------===//

using Clock = std::chrono::steady_clock;
inline double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct Job {
  const ProgramSpec &spec;
  std::FILE *out, *err;
  Layout layout;
  Options o;
  std::string program; // argv[0]'s base name
  Clock::time_point start = Clock::now();
  Device *device = nullptr; // null: a CPU program
  launch::DistEnv env;
  bool distributed = false; // one rank per process (a launcher started it)
  int W = 1, G = 1;         // world and shard group size
  double timeout = 0;       // seconds a collective may wait; 0 = none

  Job(const ProgramSpec &spec, std::FILE *out, std::FILE *err)
      : spec(spec), out(out), err(err) {}
  void warn(const std::string &message) const;
  void note(const std::string &message) const;
};

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_SHELL_H
