//===- ranks.h - The ranks this process runs, and the step on each -*- C++
//-*-===//
//
// Every rank of the world as a thread of this process (a program compiled
// for the CPU, or for a device without a launcher), or one rank per process
// talking over NCCL. Each rank owns its arguments, results and scratch
// arena; on a device, a mirror of them in GPU memory. Param, OptState,
// Buffer and Scaler results the step computes in place (ResultSpec::
// inPlaceOf) are their argument's storage; the others are double-buffered
// with their argument (swapped after a step, never copied). Tensors the
// spec marks host (ArgSpec::host) are their host storage on a device too,
// pinned there, and never double-buffered; those it marks nvme
// (ArgSpec::nvme) are files under --nvme-path mapped into memory, never
// pinned.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_RANKS_H
#define DSC_RUNTIME_PROGRAM_RANKS_H

#include "comm/inprocess.h"
#include "program/shell.h"

#include <functional>

namespace dsc::program {

/// A rank's arguments, results and arena in device memory (a program
/// compiled for a device): the host ones keep the initial values and
/// receive what is printed, dumped or saved. An argument or result the spec
/// marks host is the host tensor itself, pinned (in an NVMe file: as it
/// is); the host arena (spec.hostArenaBytes) is pinned host memory.
struct DeviceMirror {
  Device *device = nullptr;
  std::vector<Tensor> args, results;
  std::vector<void *> memory; // device allocations
  std::vector<void *> pinned; // host tensors pinned in place
  void *hostMemory = nullptr; // the host arena's (Device::allocateHost)
  size_t pinnedBytes = 0;     // both together
  HostArena arena, hostArena;

  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror &) = delete;
  DeviceMirror &operator=(const DeviceMirror &) = delete;
  ~DeviceMirror();
  /// A result with aliasOf[i] >= 0 gets that argument's storage.
  Status create(Device *d, const ProgramSpec &spec,
                const std::vector<Tensor> &hostArgs,
                const std::vector<Tensor> &hostResults,
                const std::vector<int> &aliasOf);
  /// Host argument i to the device (nothing for a host argument).
  Status upload(const std::vector<Tensor> &hostArgs, size_t i);
  /// Device tensor `d` into host tensor `h` (same type); when they are one
  /// host tensor, waits for the device's work on it.
  Status download(const Tensor &d, const Tensor &h);

private:
  Status mirror(const Tensor &h, bool onHost, bool inFile, Tensor &out);
  Status pin(const Tensor &h);
  Status allocateArenas(size_t arenaBytes, size_t hostArenaBytes);
};

/// --wall-clock-breakdown: the time of each phase of one rank's step
/// (dsc::Phase marks), and of its collectives. On a device every mark
/// synchronizes it first, so that the GPU's work lands in its phase.
class StepClock final : public PhaseClock {
public:
  explicit StepClock(Device *device) : device_(device) {}
  void mark(Phase phase) override;
  /// Seconds per phase since the last reset: forward, backward, optimizer.
  double seconds[3] = {0, 0, 0};
  double commSeconds = 0; // inside collectives (host time)
  void reset() { seconds[0] = seconds[1] = seconds[2] = commSeconds = 0; }

private:
  Device *device_;
  int current_ = -1;
  Clock::time_point since_;
};

/// One rank's tensors and scratch. Its Input arguments are views of its
/// rows of the global batch; everything else is its own.
struct RankState {
  int id = 0;               // the global rank
  int gpu = -1;             // its GPU (-1: rank % visible GPUs)
  std::vector<Tensor> args; // in spec order
  std::vector<Memory> argMemory;
  std::vector<Tensor> results;
  std::vector<Memory> resultMemory;
  HostArena arena;
  HostArena hostArena;                     // a CPU program's host scratch
  std::unique_ptr<DeviceMirror> dev;       // a device program's tensors
  std::unique_ptr<StepClock> clock;        // --wall-clock-breakdown
  std::unique_ptr<Communicator> timedComm; // its communicator, timed
};

struct WorldStep;

class Ranks {
public:
  explicit Ranks(Job &job) : job_(job), spec_(job.spec) {}

  /// The global batch (one tensor per Input with W times a rank's rows)
  /// and every rank's tensors and arena.
  Status allocate();
  /// Parameters and buffers (--init) unless `weights` is false (a resumed
  /// run reads them from its checkpoint), then setScalars().
  Status initialize(std::string &initWhat, bool weights);
  /// Hyperparameters and the seed from the options; with `scaler`, the loss
  /// scaler's first state.
  void setScalars(bool scaler);
  /// Every rank's tensors in NVMe files (ArgSpec::nvme) out of host memory
  /// (io::nvmeEvict) after the shell wrote or read them through their
  /// mappings: the initial state, a resumed or saved checkpoint, a dump.
  Status evictNvme();
  /// Every rank's ComputeCopy arguments from their parameters, rounded
  /// (cpu::cast): after the parameters are set, before they go to the
  /// device.
  Status fillComputeCopies();
  /// The NCCL communicator of a distributed run, then (a device program)
  /// will-it-fit, and every rank's tensors in its GPU's memory.
  Status placeOnDevice(std::string &deviceWhat);
  /// The in-process world of a multi-rank run without a launcher.
  void startWorld();

  /// Runs rank `rs`'s step on the calling thread. On a device: binds the
  /// thread, uploads the batch and the step (every argument when `all`),
  /// and brings back the scalars the progress line prints.
  Status stepOn(RankState &rs, int64_t step, bool all);
  /// One step on every rank; the error lines, empty when all went well.
  std::vector<std::string> runStep(int64_t step);
  /// Sets every rank's Step argument.
  void setStep(int64_t step);
  /// After a step: updated results become the next step's arguments (those
  /// computed in place already are). A host one not computed in place is
  /// an error (host tensors are never swapped).
  Status swapUpdates();
  /// All arguments to the device again (after the host ones were changed).
  Status uploadAll();

  /// On a device: results `which` (or, with args, arguments) of every rank
  /// back into the host tensors.
  Status fetch(const std::vector<int> &which, bool args);
  /// Per-parameter tensors of a sharded bucket: the shards of group 0 (the
  /// ranks of replica 0) in order, unpacked by BucketEntry without padding.
  /// The packed copy lives until clearScratch().
  Status gatherBucket(int b, const std::function<Tensor(int)> &shardOf,
                      std::vector<io::NamedTensor> &list);
  /// Every gradient of the last step by parameter name (fetched first).
  Status collectGrads(std::vector<io::NamedTensor> &grads);
  /// Every parameter and buffer by ONNX name (fetched first).
  Status collectParams(std::vector<io::NamedTensor> &tensors);
  /// fp16, on a skipped step: ", in <params>" naming the gradients that
  /// hold an inf or nan (and their bucket).
  Status nonFiniteGrads(std::string &where);
  void clearScratch() { scratch_.clear(); }

  size_t arenaPeak() const;
  /// Device peak bytes over the ranks, and the bytes of one rank's tensors
  /// in device memory.
  void deviceMemory(size_t &peak, size_t &tensorBytes) const;
  /// Rank 0's library workspaces (Device::workspaces).
  void deviceWorkspaces(size_t &fixedBytes, size_t &scratchBytes,
                        std::string &scratchFor) const;
  /// A device program's pinned host bytes of one rank: its host tensors
  /// and host arena (0 for a CPU program).
  void pinnedMemory(size_t &tensorBytes, size_t &arenaBytes) const;

  RankState &rank0() { return *ranks_[0]; }
  std::vector<std::unique_ptr<RankState>> &all() { return ranks_; }
  const std::vector<InputSlot> &slots() const { return slots_; }
  const std::vector<std::vector<TensorSpec>> &shapes() const { return shapes_; }
  /// --wall-clock-breakdown: rank 0's phase times of the last step, then
  /// reset (null when not timed).
  const StepClock *clock0() const { return ranks_[0]->clock.get(); }
  void resetClocks();
  /// True on every process when `local` is on any (Communicator::anyRank):
  /// a stop or a failed save decided by all ranks of a distributed run.
  Status anyRank(bool local, bool &any);
  /// The learning rate hyperparameter (NaN without one).
  double lrHyper() const { return lrHyper_; }

private:
  Status checkFit(size_t rankBytes);
  bool onHost(bool arg, size_t i) const;
  /// One rank's step tensors in device memory (arguments, and results not
  /// computed in place; not those kept on the host).
  size_t deviceTensorBytes() const;
  Status allocateBucket(int b, Memory &m, Tensor &flat) const;
  Status collect(const std::vector<int> &which, bool args,
                 std::vector<io::NamedTensor> &list);
  std::vector<std::string> runWorldStep(int64_t step);
  std::vector<int> waitForRanks(WorldStep &ws);
  [[noreturn]] void exitWithHungRanks(std::vector<std::string> &lines,
                                      const std::vector<int> &hung,
                                      const std::string &at);
  Communicator *commOf(RankState &rs);
  Status runOnDevice(RankState &rs, const RankContext &ctx);

  Job &job_;
  const ProgramSpec &spec_;
  std::vector<InputSlot> slots_;
  std::vector<Memory> inputMemory_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  std::vector<std::vector<TensorSpec>> shapes_;
  std::unique_ptr<Communicator> nccl_;
  std::unique_ptr<comm::InProcessWorld> world_;
  std::vector<std::unique_ptr<Communicator>> staged_; // on a device
  std::vector<Memory> scratch_;
  /// Per result: the argument whose storage it shares (computed in place),
  /// or -1 (its own storage).
  std::vector<int> aliasOf_;
  double lrHyper_ = 0;
  bool graphWarned_ = false;
};

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_RANKS_H
