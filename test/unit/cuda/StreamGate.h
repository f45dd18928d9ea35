//===- StreamGate.h - Hold a stream until the host lets it go ---*- C++ -*-===//
//
// A one-thread kernel that spins on a flag in mapped pinned memory until
// the host (a test, or a host task of the code under test) opens it, or a
// time limit passes: so a test can hold the compute stream while it checks
// what else runs, and a wrong wait times out instead of hanging.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_TEST_UNIT_CUDA_STREAMGATE_H
#define DSC_TEST_UNIT_CUDA_STREAMGATE_H

#include "dsc/runtime.h"

#include <cuda_runtime.h>

namespace dsc::cuda::test {

class StreamGate {
public:
  StreamGate();
  StreamGate(const StreamGate &) = delete;
  StreamGate &operator=(const StreamGate &) = delete;
  ~StreamGate();

  /// Work issued on `stream` after this waits until open() or `seconds`.
  Status hold(cudaStream_t stream, double seconds);
  /// Lets the held stream go (any host thread).
  void open();
  /// Whether the limit passed before open(); read after the stream is done.
  bool timedOut() const;

private:
  int *flags_ = nullptr; // [0]: opened, [1]: timed out (mapped pinned)
  int *deviceFlags_ = nullptr;
};

} // namespace dsc::cuda::test

#endif // DSC_TEST_UNIT_CUDA_STREAMGATE_H
