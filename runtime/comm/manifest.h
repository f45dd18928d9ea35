//===- manifest.h - Collectives checked against the compiled manifest -*- C++
//-*-===//
//
// A compiled program lists the collectives one step issues, in order (its
// manifest, dsc/comm.h CollectiveSpec). Every communicator (the in-process
// world, NCCL) checks each call against the entry of the same index with a
// ManifestChecker: one per rank, reset at each step boundary, so call n of
// every step is compared with entry n (never entry n modulo the manifest's
// length: a step that issues one collective too many is an error).
//
// CPU code, no CUDA: runtime/cuda/comm.cu includes it too.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_COMM_MANIFEST_H
#define DSC_RUNTIME_COMM_MANIFEST_H

#include "dsc/comm.h"

#include <string>

namespace dsc::comm {

/// "all_reduce of 8 -> 4 f32 over the group axis (\"what\")".
std::string describeCollective(const char *kind, int64_t inNumel,
                               int64_t outNumel, DType dtype, uint32_t mask,
                               const char *what);
/// "no axis", "the replicas axis", "the group axis", "all ranks".
std::string axesName(uint32_t mask);

class ManifestChecker {
public:
  /// `manifest` may be null (nothing is checked, calls are still counted).
  ManifestChecker(const CollectiveSpec *manifest = nullptr,
                  int numCollectives = 0)
      : manifest_(manifest), size_(manifest ? numCollectives : 0) {}

  /// A new step: the next call is entry 0.
  void beginStep() { calls_ = 0; }
  /// Counts the call and checks it against its entry; `index` receives its
  /// index in the step. The error (without a rank prefix) names the index,
  /// the call and the entry.
  Status check(const char *kind, DType dtype, int64_t inNumel, int64_t outNumel,
               uint32_t axesMask, const char *what, int64_t &index);
  /// Calls since beginStep.
  int64_t calls() const { return calls_; }
  bool enabled() const { return manifest_ != nullptr; }
  int size() const { return size_; }
  /// The entry of index `index` (null when out of range or no manifest).
  const CollectiveSpec *entry(int64_t index) const {
    return manifest_ && index >= 0 && index < size_ ? &manifest_[index]
                                                    : nullptr;
  }

private:
  const CollectiveSpec *manifest_;
  int size_;
  int64_t calls_ = 0;
};

} // namespace dsc::comm

#endif // DSC_RUNTIME_COMM_MANIFEST_H
