//===- offload.cu - Host copies and host tasks on the offload stream -----===//
//
// cuda/kernels.h says what each call does. The offload stream is forked
// from the compute stream by an event before each copy, so the copy sees
// every kernel issued before it; the compute stream waits on the copy's
// event (offloadWait) or on the whole stream (offloadJoin). Host tasks run
// on CUDA's host-function thread, one stable HostTaskSite per call site.
//
//===----------------------------------------------------------------------===//

#include "cuda/context.h"
#include "cuda/kernels.h"

#include <string>
#include <utility>

namespace dsc::cuda {
namespace {

const char *nameOf(const char *what) { return what ? what : "?"; }

/// Prefixes a failed CUDA call with the offload call and its `what`.
Status named(const char *call, const char *what, Status s) {
  if (s.ok())
    return s;
  return Status::error(s.code(), std::string(call) + " " + nameOf(what) + ": " +
                                     s.message());
}

Status forkOffload(RankDevice &rd, Offload &o) {
  DSC_CUDA_CHECK(cudaEventRecord(o.fork, rd.compute));
  DSC_CUDA_CHECK(cudaStreamWaitEvent(o.stream, o.fork, 0));
  return Status();
}

/// Whether `p` is pinned host memory (host) or device memory (!host);
/// managed memory is both.
Status isMemoryOf(const void *p, bool host, bool &ok) {
  cudaPointerAttributes attr{};
  DSC_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  ok = attr.type == cudaMemoryTypeManaged ||
       attr.type == (host ? cudaMemoryTypeHost : cudaMemoryTypeDevice);
  return Status();
}

Status checkSides(const Tensor &src, const Tensor &dst, bool toHost,
                  const char *what) {
  for (bool isDst : {false, true}) {
    bool host = isDst == toHost, ok = false;
    if (Status s = isMemoryOf(isDst ? dst.data : src.data, host, ok); !s.ok())
      return s;
    if (!ok)
      return cpu::detail::offloadCopyError(
          src, dst, toHost, what,
          std::string(isDst ? "dst" : "src") + " is not " +
              (host ? "pinned host memory" : "device memory"));
  }
  return Status();
}

Status issueCopy(RankDevice &rd, const Tensor &src, const Tensor &dst,
                 unsigned long long capture) {
  Offload *o = nullptr;
  if (Status s = offloadOf(o); !s.ok())
    return s;
  Offload::Copy *c = nullptr;
  if (Status s = copyOf(*o, dst.data, c); !s.ok())
    return s;
  if (Status s = forkOffload(rd, *o); !s.ok())
    return s;
  if (size_t bytes = dst.nbytes())
    DSC_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDefault,
                                   o->stream));
  DSC_CUDA_CHECK(cudaEventRecord(c->done, o->stream));
  c->recorded = true;
  c->captureId = capture;
  return Status();
}

void keepFailure(Offload &o, Status s) {
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.failed.load(std::memory_order_acquire))
    return;
  std::swap(o.failure, s);
  o.failed.store(true, std::memory_order_release);
}

/// What CUDA calls on its host-function thread.
void CUDART_CB runSite(void *p) {
  auto *site = static_cast<HostTaskSite *>(p);
  Offload &o = *site->offload;
  if (!o.failed.load(std::memory_order_acquire)) {
    Status s = cpu::detail::runHostTask(site->fn);
    if (!s.ok())
      keepFailure(o, cpu::detail::hostTaskFailed(site->what.c_str(), s));
  }
  site->pending.store(false, std::memory_order_release);
}

HostTaskSite &siteOf(Offload &o, int site) {
  std::unique_ptr<HostTaskSite> &slot = o.sites[site];
  if (!slot) {
    slot = std::make_unique<HostTaskSite>();
    slot->offload = &o;
  }
  return *slot;
}

/// Before a site's fn is replaced: its last launch has run (outside a
/// capture, by waiting for it), and in a capture the offload stream is part
/// of it.
Status readySite(RankDevice &rd, Offload &o, HostTaskSite &hs,
                 unsigned long long capture) {
  if (!capture) {
    if (hs.pending.load(std::memory_order_acquire))
      DSC_CUDA_CHECK(cudaStreamSynchronize(o.stream));
    return Status();
  }
  if (hs.captureId == capture)
    return Status::error(StatusCode::Unimplemented,
                         "its call site runs twice in one captured step");
  if (hs.pending.load(std::memory_order_acquire))
    return Status::error(StatusCode::Unimplemented,
                         "its call site's last launch has not run yet");
  unsigned long long forked = 0;
  if (Status s = captureIdOf(o.stream, forked); !s.ok())
    return s;
  return forked == capture ? Status() : forkOffload(rd, o);
}

Status launchTask(int site, std::function<Status()> fn, const char *what) {
  RankDevice &rd = current();
  unsigned long long capture = 0;
  if (Status s = captureIdOf(rd.compute, capture); !s.ok())
    return s;
  Offload *o = nullptr;
  if (Status s = offloadOf(o); !s.ok())
    return s;
  HostTaskSite &hs = siteOf(*o, site);
  if (Status s = readySite(rd, *o, hs, capture); !s.ok())
    return s;
  hs.fn = std::move(fn);
  hs.what = nameOf(what);
  hs.pending.store(!capture, std::memory_order_release);
  if (Status s = check(cudaLaunchHostFunc(o->stream, runSite, &hs),
                       "cudaLaunchHostFunc");
      !s.ok()) {
    hs.pending.store(false, std::memory_order_release);
    return s;
  }
  hs.captureId = capture;
  return Status();
}

} // namespace

Status offloadCopy(const Tensor &src, const Tensor &dst, bool toHost,
                   const char *what) {
  if (Status s = cpu::detail::checkOffloadCopy(src, dst, toHost, what); !s.ok())
    return s;
  RankDevice &rd = current();
  unsigned long long capture = 0;
  if (Status s = captureIdOf(rd.compute, capture); !s.ok())
    return named("offload_copy", what, s);
  // A capture repeats a direct run with the same buffers, checked there.
  if (!capture)
    if (Status s = checkSides(src, dst, toHost, what); !s.ok())
      return s;
  return named("offload_copy", what, issueCopy(rd, src, dst, capture));
}

Status hostTask(int site, std::function<Status()> fn, const char *what) {
  return named("host_task", what, launchTask(site, std::move(fn), what));
}

Status offloadWait(const Tensor &dst, const char *what) {
  RankDevice &rd = current();
  const Offload::Copy *c = nullptr;
  if (rd.offload) {
    auto it = rd.offload->copies.find(dst.data);
    if (it != rd.offload->copies.end() && it->second.recorded)
      c = &it->second;
  }
  if (!c)
    return cpu::detail::offloadWaitError(
        dst, what, "no offload_copy into this tensor was issued");
  unsigned long long capture = 0;
  if (Status s = captureIdOf(rd.compute, capture); !s.ok())
    return named("offload_wait", what, s);
  if (c->captureId != capture)
    return cpu::detail::offloadWaitError(
        dst, what,
        capture ? "no offload_copy into this tensor was issued in this "
                  "captured step"
                : "the last offload_copy into this tensor was captured into "
                  "a CUDA graph, not issued");
  return named("offload_wait", what,
               check(cudaStreamWaitEvent(rd.compute, c->done, 0),
                     "cudaStreamWaitEvent"));
}

Status offloadJoin() {
  RankDevice &rd = current();
  if (!rd.offload)
    return Status();
  Offload &o = *rd.offload;
  unsigned long long capture = 0, forked = 0;
  if (Status s = captureIdOf(rd.compute, capture); !s.ok())
    return s;
  if (Status s = captureIdOf(o.stream, forked); !s.ok())
    return s;
  if (capture && forked != capture)
    return Status(); // this capture put nothing on the offload stream
  DSC_CUDA_CHECK(cudaEventRecord(o.join, o.stream));
  DSC_CUDA_CHECK(cudaStreamWaitEvent(rd.compute, o.join, 0));
  return Status();
}

Status awaitOffload() {
  RankDevice &rd = current();
  if (!rd.offload)
    return Status();
  Offload &o = *rd.offload;
  DSC_CUDA_CHECK(cudaStreamSynchronize(o.stream));
  if (!o.failed.load(std::memory_order_acquire))
    return Status();
  std::lock_guard<std::mutex> lock(o.mu);
  Status failure;
  std::swap(failure, o.failure);
  o.failed.store(false, std::memory_order_release);
  return failure;
}

} // namespace dsc::cuda
