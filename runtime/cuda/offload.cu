//===- offload.cu - Host copies and host tasks beside the compute stream --===//
//
// cuda/kernels.h says what each call does. Copies run on the rank's copy
// stream, forked from the compute stream by an event before each one, so a
// copy sees every kernel issued before it; host tasks run on its host
// stream (CUDA's host-function thread, one stable HostTaskSite per call
// site), which waits for the copies into the tensors a task names and for
// the copies up out of the tensors it writes. A copy to the device waits
// for the host task that last wrote its source. The memory plan reuses the
// host frame, so writes are also ordered by byte range: a copy into host
// memory waits for the host tasks that last read or wrote any of its
// bytes, and a host task for the copies up that last read what it writes.
// The compute stream waits on a copy's event (offloadWait) or on both
// streams (offloadJoin). So, a step's optimizer split into chunks
// pipelines: copies down of chunk i+1, the host update of chunk i and the
// copies up of chunk i-1 run at once.
//
//===----------------------------------------------------------------------===//

#include "cuda/context.h"
#include "cuda/kernels.h"
#include "io/nvme.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

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

/// `lane` waits for all compute-stream work issued so far.
Status forkFromCompute(RankDevice &rd, Offload &o, cudaStream_t lane) {
  DSC_CUDA_CHECK(cudaEventRecord(o.fork, rd.compute));
  DSC_CUDA_CHECK(cudaStreamWaitEvent(lane, o.fork, 0));
  return Status();
}

/// The mark of `key`, if one was recorded where the caller issues: in this
/// capture, or outside any (capture 0). One recorded elsewhere belongs to
/// an earlier step, which the step's offloadJoin has ordered.
const Offload::Mark *markIn(const Offload::Marks &marks, const void *key,
                            unsigned long long capture) {
  auto it = marks.find(key);
  if (it == marks.end() || !it->second.recorded ||
      it->second.captureId != capture)
    return nullptr;
  return &it->second;
}

Status waitForMark(cudaStream_t lane, const Offload::Mark *m) {
  if (m)
    DSC_CUDA_CHECK(cudaStreamWaitEvent(lane, m->done, 0));
  return Status();
}

Status recordMark(Offload::Mark &m, cudaStream_t lane,
                  unsigned long long capture) {
  DSC_CUDA_CHECK(cudaEventRecord(m.done, lane));
  m.recorded = true;
  m.captureId = capture;
  return Status();
}

/// The spans of `spans` that share a byte with [begin, end).
template <typename Fn>
void forOverlapping(Offload::Spans &spans, uintptr_t begin, uintptr_t end,
                    Fn fn) {
  auto it = spans.upper_bound(begin);
  if (it != spans.begin() && std::prev(it)->second.end > begin)
    --it;
  for (; it != spans.end() && it->first < end; ++it)
    fn(it);
}

/// `t`'s bytes were last accessed on a lane by the work before `m`'s event:
/// it replaces what the spans said of those bytes (an earlier access on the
/// same lane finished before it).
void recordSpan(Offload::Spans &spans, const Tensor &t,
                const Offload::Mark &m) {
  auto begin = reinterpret_cast<uintptr_t>(t.data);
  uintptr_t end = begin + t.nbytes();
  if (begin == end)
    return;
  std::vector<std::pair<uintptr_t, Offload::Span>> kept; // the parts outside
  std::vector<uintptr_t> covered;
  forOverlapping(spans, begin, end, [&](Offload::Spans::iterator it) {
    covered.push_back(it->first);
    if (it->first < begin)
      kept.push_back({it->first, Offload::Span{begin, it->second.done,
                                               it->second.captureId}});
    if (it->second.end > end)
      kept.push_back({end, it->second});
  });
  for (uintptr_t key : covered)
    spans.erase(key);
  for (auto &[key, span] : kept)
    spans[key] = span;
  spans[begin] = Offload::Span{end, m.done, m.captureId};
}

/// `lane` waits for the accesses the spans record to `t`'s bytes in this
/// capture (or outside any).
Status waitForSpans(cudaStream_t lane, Offload::Spans &spans, const Tensor &t,
                    unsigned long long capture) {
  auto begin = reinterpret_cast<uintptr_t>(t.data);
  std::vector<cudaEvent_t> events;
  forOverlapping(spans, begin, begin + t.nbytes(),
                 [&](Offload::Spans::iterator it) {
                   if (it->second.captureId == capture &&
                       std::find(events.begin(), events.end(),
                                 it->second.done) == events.end())
                     events.push_back(it->second.done);
                 });
  for (cudaEvent_t e : events)
    DSC_CUDA_CHECK(cudaStreamWaitEvent(lane, e, 0));
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

/// On the copy stream, after the compute stream's work so far and (to the
/// device) the host task that last wrote src.
Status issueCopy(RankDevice &rd, const Tensor &src, const Tensor &dst,
                 bool toHost, unsigned long long capture) {
  Offload *o = nullptr;
  if (Status s = offloadOf(o); !s.ok())
    return s;
  Offload::Mark *done = nullptr, *read = nullptr;
  if (Status s = markOf(o->copies, dst.data, "an offload copy's event", done);
      !s.ok())
    return s;
  if (!toHost)
    if (Status s = markOf(o->copiesUp, src.data, "an offload copy's event",
                          read);
        !s.ok())
      return s;
  cudaStream_t lane = o->copy.stream;
  if (Status s = forkFromCompute(rd, *o, lane); !s.ok())
    return s;
  if (!toHost)
    if (Status s = waitForMark(lane, markIn(o->hostWrites, src.data, capture));
        !s.ok())
      return s;
  // Into host memory a host task may still read or write (a value that lay
  // in this range of the frame before).
  if (toHost)
    if (Status s = waitForSpans(lane, o->hostTaskSpans, dst, capture); !s.ok())
      return s;
  if (size_t bytes = dst.nbytes())
    DSC_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDefault, lane));
  if (read) {
    if (Status s = recordMark(*read, lane, capture); !s.ok())
      return s;
    recordSpan(o->copyUpSpans, src, *read);
  }
  return recordMark(*done, lane, capture);
}

void keepFailure(Offload &o, Status s) {
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.failed.load(std::memory_order_acquire))
    return;
  std::swap(o.failure, s);
  o.failed.store(true, std::memory_order_release);
}

/// What CUDA calls on its host-function thread. The NVMe reads into what
/// the task names are waited for even after a failure: nothing may still
/// write those bytes once the host stream has drained.
void CUDART_CB runSite(void *p) {
  auto *site = static_cast<HostTaskSite *>(p);
  Offload &o = *site->offload;
  Status s =
      cpu::detail::awaitNvmeReads(site->named.data(), site->named.size());
  if (!o.failed.load(std::memory_order_acquire)) {
    Status ran = s.ok() ? cpu::detail::runHostTask(site->fn) : s;
    if (!ran.ok())
      keepFailure(o, cpu::detail::hostTaskFailed(site->what.c_str(), ran));
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
/// capture, by waiting for it), and in a capture it was not launched by this
/// capture yet.
Status readySite(Offload &o, HostTaskSite &hs, unsigned long long capture) {
  if (!capture) {
    if (hs.pending.load(std::memory_order_acquire))
      DSC_CUDA_CHECK(cudaStreamSynchronize(o.host.stream));
    return Status();
  }
  if (hs.captureId == capture)
    return Status::error(StatusCode::Unimplemented,
                         "its call site runs twice in one captured step");
  if (hs.pending.load(std::memory_order_acquire))
    return Status::error(StatusCode::Unimplemented,
                         "its call site's last launch has not run yet");
  return Status();
}

/// The host stream waits for the copies into `tensors` issued so far.
Status waitForCopies(Offload &o, std::initializer_list<Tensor> tensors,
                     unsigned long long capture) {
  for (const Tensor &t : tensors)
    if (Status s =
            waitForMark(o.host.stream, markIn(o.copies, t.data, capture));
        !s.ok())
      return s;
  return Status();
}

/// In a capture, the host stream becomes part of it (forked from the
/// compute stream) unless a wait already made it so.
Status joinCapture(RankDevice &rd, Offload &o, unsigned long long capture) {
  if (!capture)
    return Status();
  unsigned long long forked = 0;
  if (Status s = captureIdOf(o.host.stream, forked); !s.ok())
    return s;
  return forked == capture ? Status() : forkFromCompute(rd, o, o.host.stream);
}

/// The marks a host task records after it, one per tensor of `writes`.
Status writeMarksOf(Offload &o, std::initializer_list<Tensor> writes,
                    std::vector<Offload::Mark *> &out) {
  for (const Tensor &t : writes) {
    Offload::Mark *m = nullptr;
    if (Status s = markOf(o.hostWrites, t.data, "a host task's write event", m);
        !s.ok())
      return s;
    out.push_back(m);
  }
  return Status();
}

Status launchSite(Offload &o, HostTaskSite &hs, std::function<Status()> fn,
                  const char *what, std::initializer_list<Tensor> reads,
                  std::initializer_list<Tensor> writes,
                  unsigned long long capture) {
  hs.fn = std::move(fn);
  hs.what = nameOf(what);
  hs.named.assign(reads.begin(), reads.end());
  hs.named.insert(hs.named.end(), writes.begin(), writes.end());
  hs.pending.store(!capture, std::memory_order_release);
  if (Status s = check(cudaLaunchHostFunc(o.host.stream, runSite, &hs),
                       "cudaLaunchHostFunc");
      !s.ok()) {
    hs.pending.store(false, std::memory_order_release);
    return s;
  }
  hs.captureId = capture;
  return Status();
}

/// The host stream waits for the copies into what a task reads and writes,
/// and for the copies up still reading what it writes (a parameter shard
/// that backward's re-gather copied up, or a value that lay in this range
/// of the host frame before).
Status waitBeforeTask(Offload &o, std::initializer_list<Tensor> reads,
                      std::initializer_list<Tensor> writes,
                      unsigned long long capture) {
  for (std::initializer_list<Tensor> tensors : {reads, writes})
    if (Status s = waitForCopies(o, tensors, capture); !s.ok())
      return s;
  for (const Tensor &t : writes)
    if (Status s = waitForSpans(o.host.stream, o.copyUpSpans, t, capture);
        !s.ok())
      return s;
  return Status();
}

/// After a launched task: the marks of what it wrote, its own mark, and the
/// byte ranges it touched.
Status recordAfterTask(Offload &o, const std::vector<Offload::Mark *> &written,
                       Offload::Mark &ran, std::initializer_list<Tensor> reads,
                       std::initializer_list<Tensor> writes,
                       unsigned long long capture) {
  for (Offload::Mark *m : written)
    if (Status s = recordMark(*m, o.host.stream, capture); !s.ok())
      return s;
  if (Status s = recordMark(ran, o.host.stream, capture); !s.ok())
    return s;
  for (std::initializer_list<Tensor> tensors : {reads, writes})
    for (const Tensor &t : tensors)
      recordSpan(o.hostTaskSpans, t, ran);
  return Status();
}

Status launchTask(int site, std::function<Status()> fn, const char *what,
                  std::initializer_list<Tensor> reads,
                  std::initializer_list<Tensor> writes) {
  RankDevice &rd = current();
  unsigned long long capture = 0;
  if (Status s = captureIdOf(rd.compute, capture); !s.ok())
    return s;
  Offload *o = nullptr;
  if (Status s = offloadOf(o); !s.ok())
    return s;
  HostTaskSite &hs = siteOf(*o, site);
  if (Status s = readySite(*o, hs, capture); !s.ok())
    return s;
  std::vector<Offload::Mark *> written; // made before anything is issued
  if (Status s = writeMarksOf(*o, writes, written); !s.ok())
    return s;
  Offload::Mark *ran = nullptr;
  if (Status s = markOf(o->hostTasks, &hs, "a host task's event", ran); !s.ok())
    return s;
  if (Status s = waitBeforeTask(*o, reads, writes, capture); !s.ok())
    return s;
  if (Status s = joinCapture(rd, *o, capture); !s.ok())
    return s;
  if (Status s =
          launchSite(*o, hs, std::move(fn), what, reads, writes, capture);
      !s.ok())
    return s;
  return recordAfterTask(*o, written, *ran, reads, writes, capture);
}

/// The compute stream waits for `lane`, unless capturing a step that put
/// nothing on it.
Status joinLane(RankDevice &rd, Offload::Lane &lane,
                unsigned long long capture) {
  unsigned long long forked = 0;
  if (Status s = captureIdOf(lane.stream, forked); !s.ok())
    return s;
  if (capture && forked != capture)
    return Status();
  DSC_CUDA_CHECK(cudaEventRecord(lane.join, lane.stream));
  DSC_CUDA_CHECK(cudaStreamWaitEvent(rd.compute, lane.join, 0));
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
  return named("offload_copy", what, issueCopy(rd, src, dst, toHost, capture));
}

Status hostTask(int site, std::function<Status()> fn, const char *what,
                std::initializer_list<Tensor> reads,
                std::initializer_list<Tensor> writes) {
  return named("host_task", what,
               launchTask(site, std::move(fn), what, reads, writes));
}

Status offloadWait(const Tensor &dst, const char *what) {
  RankDevice &rd = current();
  const Offload::Mark *c = nullptr;
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
  unsigned long long capture = 0;
  if (Status s = captureIdOf(rd.compute, capture); !s.ok())
    return s;
  for (Offload::Lane *lane : {&o.copy, &o.host})
    if (Status s = joinLane(rd, *lane, capture); !s.ok())
      return s;
  return Status();
}

Status awaitOffload() {
  RankDevice &rd = current();
  if (!rd.offload)
    return Status();
  Offload &o = *rd.offload;
  for (cudaStream_t lane : {o.copy.stream, o.host.stream})
    DSC_CUDA_CHECK(cudaStreamSynchronize(lane));
  // Every NVMe read has a host task that waits for it; one whose task never
  // ran (a launch that failed) is waited for here, before host memory is
  // reused outside the step's order.
  io::nvmeDrain();
  // The step's writes-behind are on the disk; a failed one fails the step.
  Status written = io::nvmeFlush();
  if (!o.failed.load(std::memory_order_acquire))
    return written;
  std::lock_guard<std::mutex> lock(o.mu);
  Status failure;
  std::swap(failure, o.failure);
  o.failed.store(false, std::memory_order_release);
  return failure;
}

} // namespace dsc::cuda
