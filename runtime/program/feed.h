//===- feed.h - The batches of the steps (--batch, --data) --------*- C++
//-*-===//

#ifndef DSC_RUNTIME_PROGRAM_FEED_H
#define DSC_RUNTIME_PROGRAM_FEED_H

#include "program/ranks.h"
#include "program/rng.h"

namespace dsc::program {

/// Fills the global batch: once from --batch, or before every step with
/// random windows of --data (stream 2 of the seed, so a checkpoint's RNG
/// state continues the same windows).
class DataFeed {
public:
  explicit DataFeed(Job &job) : job_(job), rng_(job.o.seed, /*stream=*/2) {}
  Status open(const std::vector<InputSlot> &slots);
  /// The next step's batch (a fixed batch stays).
  Status next(const std::vector<InputSlot> &slots);
  const std::string &what() const { return what_; }
  /// What a checkpoint saves and a resume restores.
  uint64_t rngState() const { return rng_.state(); }
  void setRngState(uint64_t s) { rng_.setState(s); }

private:
  Job &job_;
  TokenData tokens_;
  Rng rng_;
  std::string what_ = "none needed";
};

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_FEED_H
