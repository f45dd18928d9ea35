//===- StreamGate.cu - Hold a stream until the host lets it go ------------===//

#include "StreamGate.h"

#include "cuda/context.h"

namespace dsc::cuda::test {
namespace {

__device__ unsigned long long nanoseconds() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spinUntilOpen(volatile int *flags, unsigned long long limit) {
  unsigned long long start = nanoseconds();
  while (!flags[0])
    if (nanoseconds() - start > limit) {
      flags[1] = 1;
      break;
    }
  __threadfence_system();
}

} // namespace

StreamGate::StreamGate() {
  void *p = nullptr;
  if (cudaHostAlloc(&p, 2 * sizeof(int), cudaHostAllocMapped) != cudaSuccess)
    return;
  flags_ = static_cast<int *>(p);
  flags_[0] = flags_[1] = 0;
  void *d = nullptr;
  if (cudaHostGetDevicePointer(&d, p, 0) == cudaSuccess)
    deviceFlags_ = static_cast<int *>(d);
}

StreamGate::~StreamGate() {
  if (flags_)
    cudaFreeHost(flags_);
}

Status StreamGate::hold(cudaStream_t stream, double seconds) {
  if (!deviceFlags_)
    return Status::error(StatusCode::InvalidArgument,
                         "StreamGate: no mapped pinned memory");
  spinUntilOpen<<<1, 1, 0, stream>>>(deviceFlags_,
                                     (unsigned long long)(seconds * 1e9));
  return check(cudaGetLastError(), "spinUntilOpen");
}

void StreamGate::open() { *static_cast<volatile int *>(flags_) = 1; }

bool StreamGate::timedOut() const {
  return static_cast<volatile const int *>(flags_)[1] != 0;
}

} // namespace dsc::cuda::test
