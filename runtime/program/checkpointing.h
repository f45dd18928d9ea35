//===- checkpointing.h - --save-dir, --resume ---------------------*- C++
//-*-===//
//
// A rank saves what it owns, by logical name (io/checkpoint.h): rank 0 the
// replicated parameters, optimizer state, buffers and loss-scaler state;
// each rank of shard group 0 the pieces of the parameters its bucket
// shards overlap. A resume reads every tensor a rank holds back by logical
// name and element range, so it works at any world size, stage or bucket
// size the checkpoint's model was compiled with.
//
// Besides tensors, a checkpoint holds the run's state: the step, the seed,
// the data RNG (the next --data windows), the hyperparameters in force.
// A resumed run takes them unless an option overrides them (and says so).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_CHECKPOINTING_H
#define DSC_RUNTIME_PROGRAM_CHECKPOINTING_H

#include "program/feed.h"
#include "program/ranks.h"

namespace dsc::program {

class Checkpointer {
public:
  Checkpointer(Job &job, Ranks &ranks, DataFeed &feed)
      : job_(job), spec_(job.spec), ranks_(ranks), feed_(feed) {}
  /// SIGTERM and SIGINT act as before prepare() again.
  ~Checkpointer();
  Checkpointer(const Checkpointer &) = delete;
  Checkpointer &operator=(const Checkpointer &) = delete;

  /// Before training: the save directory exists and is writable (created if
  /// missing); temporaries of an interrupted save are removed; SIGTERM and
  /// SIGINT finish the step, save and exit 0.
  Status prepare();
  /// --resume: reads the checkpoint into every rank's host tensors (the
  /// ranks are allocated, not yet on a device) and the feed; `nextStep` is
  /// the first step to run. `what` describes it for the banner.
  Status resume(int64_t &nextStep, std::string &what);
  /// Saves step `step` (every rank's part, then rank 0 commits). A failed
  /// save removes the step's temporary folder (the previous checkpoint and
  /// `latest` stay as they were) and returns the error, which names the file
  /// and the errno text.
  Status save(int64_t step);
  /// Saves that failed so far (--on-save-error continue goes on after them).
  int64_t failedSaves() const { return failedSaves_; }
  /// The last step saved (-1: none yet).
  int64_t lastSaved() const { return lastSaved_; }
  /// Whether step `step` is due for a save by --save-every.
  bool due(int64_t step) const;
  bool saved(int64_t step) const { return lastSaved_ == step; }
  /// The last save attempted was of `step` and failed.
  bool failed(int64_t step) const { return lastFailed_ == step; }
  /// A SIGTERM or SIGINT arrived since prepare().
  static bool stopRequested();
  /// The hyperparameters as they are in force, for the manifest.
  void setHypers(const std::map<std::string, double> &h) { hypers_ = h; }

private:
  struct Entry; // one tensor (or piece) of one rank
  Status saveImpl(int64_t step);
  void entriesOf(const RankState &rs, std::vector<Entry> &out) const;
  Status restoreState(const std::map<std::string, std::string> &state,
                      int64_t step);

  Job &job_;
  const ProgramSpec &spec_;
  Ranks &ranks_;
  DataFeed &feed_;
  std::map<std::string, double> hypers_;
  int64_t lastSaved_ = -1;
  int64_t failedSaves_ = 0, lastFailed_ = -1;
  bool armed_ = false; // SIGTERM/SIGINT stop gracefully while it lives
};

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_CHECKPOINTING_H
