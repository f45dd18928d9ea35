//===- inprocess.h - Ranks as threads of one process ------------*- C++ -*-===//
//
// An InProcessWorld is worldSize ranks living in one process (one thread
// per rank), laid out as a (worldSize / groupSize) x groupSize grid with
// row-major linear ranks: rank = replica * groupSize + groupPosition.
// `comm(r)` is rank r's Communicator (dsc/comm.h).
//
// Every collective is a rendezvous of its group (the ranks equal to the
// caller on the axes not in the mask, in linear-rank order): each member
// posts its input, waits until all have posted, computes its own output
// from everyone's inputs, and waits again until all have read before any
// returns (so no input is overwritten while a peer still reads it).
// Condition variables, no spinning.
//
// Deterministic: sums add the contributions in group order (group
// position 0 first), element by element, in the tensor's dtype (f16/bf16
// accumulate in f32 and round once), so every member gets bitwise the
// same result whatever the thread timing.
//
// Checks, each an error naming the rank and the collective (its index in
// the step, kind, size, dtype and `what`):
//   - the call against the manifest entry of the same index, when a
//     manifest is given (comm/manifest.h, the checker NCCL uses too);
//   - the members of a group against each other (kind, dtype, sizes);
//   - a timeout (DSC_COLLECTIVE_TIMEOUT seconds, default 300) naming the
//     ranks that have not arrived;
//   - a peer that finished its step without joining (`finishStep`).
// The first error aborts the world: every rank waiting, or calling later,
// gets "rank R failed: <its message>", never a hang. Steps are delimited
// by `beginStep` (called by the runner with no rank inside a collective),
// which resets the per-step call counters the manifest is indexed by.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_COMM_INPROCESS_H
#define DSC_RUNTIME_COMM_INPROCESS_H

#include "comm/manifest.h"
#include "dsc/comm.h"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace dsc::comm {

/// DSC_COLLECTIVE_TIMEOUT when set to a positive number of seconds, else
/// 300. `*warning` receives a message when the variable is set but invalid.
double collectiveTimeoutFromEnv(std::string *warning = nullptr);

class InProcessWorld {
public:
  /// `manifest` (may be null) holds `numCollectives` entries: call n of a
  /// step of every rank must match entry n. timeoutSeconds <= 0 means
  /// collectiveTimeoutFromEnv(). groupSize must divide worldSize (0 means
  /// worldSize).
  InProcessWorld(int worldSize, int groupSize,
                 const CollectiveSpec *manifest = nullptr,
                 int numCollectives = 0, double timeoutSeconds = 0);
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld &) = delete;
  InProcessWorld &operator=(const InProcessWorld &) = delete;

  int size() const { return worldSize_; }
  int groupSize() const { return groupSize_; }
  double timeoutSeconds() const { return timeout_; }
  Communicator *comm(int rank);

  /// Starts a step: per-rank call counters back to 0, finished flags
  /// cleared. Call only while no rank is inside a collective.
  void beginStep();
  /// Rank `rank` has returned from its step: a peer still waiting for it in
  /// a collective gets an error instead of waiting for the timeout.
  void finishStep(int rank);
  /// Rank `rank` failed with `message`: the world is aborted (the first
  /// abort wins); ranks waiting or calling later get "rank R failed: ...".
  void abort(int rank, const std::string &message);

  bool aborted() const;
  /// The rank whose failure aborted the world (-1 when none) and its
  /// message.
  int failedRank() const;
  std::string failure() const;
  /// Collectives rank `rank` issued since beginStep.
  int64_t callsThisStep(int rank) const;

  /// The linear ranks of `rank`'s group along `mask` (bit 0 replicas, bit 1
  /// group), in order.
  std::vector<int> groupOf(int rank, uint32_t mask) const;

  enum class Kind { AllReduce, AllGather, ReduceScatter };
  Status collective(int rank, Kind kind, const Tensor &in, const Tensor &out,
                    GridAxes axes, const char *what);

private:
  struct Slot;
  class RankComm;

  int worldSize_, groupSize_;
  double timeout_;
  std::vector<std::unique_ptr<RankComm>> comms_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // (mask, first rank of the group, the group's call number) -> rendezvous.
  std::map<std::tuple<uint32_t, int, int64_t>, std::shared_ptr<Slot>> slots_;
  std::vector<ManifestChecker> checkers_; // per rank: calls this step
  std::vector<std::map<std::pair<uint32_t, int>, int64_t>>
      groupCalls_; // per rank
  std::vector<bool> finished_;
  // Where each rank waits now (-1: not in a collective), for messages.
  std::vector<int64_t> waitingIn_;
  bool aborted_ = false;
  int failedRank_ = -1;
  std::string failure_;
};

} // namespace dsc::comm

#endif // DSC_RUNTIME_COMM_INPROCESS_H
