//===- offload.cpp - Optimizer state in host memory, on the CPU -----------===//

#include "cpu/offload.h"
#include "cpu/kernel_util.h"
#include "io/nvme.h"

#include <cstring>
#include <exception>
#include <new>
#include <unordered_set>

namespace dsc::cpu {

using detail::Call;

namespace {

/// The destinations this thread (a rank's step) has copied into.
std::unordered_set<const void *> &copiedInto() {
  thread_local std::unordered_set<const void *> set;
  return set;
}

} // namespace

namespace detail {

Status offloadCopyError(const Tensor &src, const Tensor &dst, bool toHost,
                        const char *what, const std::string &reason) {
  return Call("offload_copy")
      .raw("what", what ? what : "?")
      .arg("src", src)
      .arg("dst", dst)
      .raw("to", toHost ? "host" : "device")
      .fail(reason);
}

Status offloadWaitError(const Tensor &dst, const char *what,
                        const std::string &reason) {
  return Call("offload_wait")
      .raw("what", what ? what : "?")
      .arg("dst", dst)
      .fail(reason);
}

std::string copyMismatch(const Tensor &src, const Tensor &dst) {
  if (!validRank(src) || !validRank(dst))
    return "rank above 8";
  if (src.dtype != dst.dtype)
    return std::string("dtypes differ (") + dtypeName(src.dtype) + " vs " +
           dtypeName(dst.dtype) + ")";
  if (src.numel() != dst.numel())
    return "element counts differ (" + std::to_string(src.numel()) + " vs " +
           std::to_string(dst.numel()) + ")";
  return "";
}

Status checkOffloadCopy(const Tensor &src, const Tensor &dst, bool toHost,
                        const char *what) {
  if (!src.present() || !dst.present())
    return offloadCopyError(src, dst, toHost, what, "an operand is absent");
  if (std::string why = copyMismatch(src, dst); !why.empty())
    return offloadCopyError(src, dst, toHost, what, why);
  return Status();
}

Status hostTaskFailed(const char *what, const Status &s) {
  return Status::error(s.code(), std::string("host task ") +
                                     (what ? what : "?") + ": " + s.message());
}

Status awaitNvmeReads(const Tensor *tensors, size_t count) {
  Status first;
  for (size_t i = 0; i < count; ++i) {
    const Tensor &t = tensors[i];
    if (Status s = t.present() ? io::nvmeAwait(t.data, t.nbytes()) : Status();
        !s.ok() && first.ok())
      first = Status::error(s.code(), "nvme_read into " + describe(t) + ": " +
                                          s.message());
  }
  return first;
}

Status runHostTask(const std::function<Status()> &fn) {
  try {
    return fn();
  } catch (const std::bad_alloc &) {
    return Status::error(StatusCode::OutOfMemory, "out of host memory");
  } catch (const std::exception &e) {
    return Status::error(StatusCode::InvalidArgument, e.what());
  }
}

} // namespace detail

Status offloadCopy(const Tensor &src, const Tensor &dst, bool toHost,
                   const char *what) {
  if (Status s = detail::checkOffloadCopy(src, dst, toHost, what); !s.ok())
    return s;
  if (Status s = detail::awaitNvmeReads(&dst, 1); !s.ok())
    return detail::offloadCopyError(src, dst, toHost, what, s.message());
  if (src.data != dst.data)
    std::memmove(dst.data, src.data, dst.nbytes());
  copiedInto().insert(dst.data);
  return Status();
}

Status hostTask(int site, std::function<Status()> fn, const char *what,
                std::initializer_list<Tensor> reads,
                std::initializer_list<Tensor> writes) {
  (void)site;
  Status s = detail::awaitNvmeReads(reads.begin(), reads.size());
  if (Status w = detail::awaitNvmeReads(writes.begin(), writes.size()); s.ok())
    s = w;
  if (s.ok())
    s = detail::runHostTask(fn);
  return s.ok() ? s : detail::hostTaskFailed(what, s);
}

Status offloadWait(const Tensor &dst, const char *what) {
  if (copiedInto().count(dst.data))
    return Status();
  return detail::offloadWaitError(dst, what,
                                  "no offload_copy into this tensor was "
                                  "issued");
}

Status offloadJoin() {
  io::nvmeDrain();
  return io::nvmeFlush();
}

namespace {

/// nvmeRead (`write` false: src in the file) and nvmeWrite (dst in it).
Status nvmeCopy(const Tensor &src, const Tensor &dst, const char *what,
                bool write) {
  auto fail = [&](const std::string &reason,
                  StatusCode code = StatusCode::InvalidArgument) {
    return Call(write ? "nvme_write" : "nvme_read")
        .raw("what", what ? what : "?")
        .arg("src", src)
        .arg("dst", dst)
        .fail(reason, code);
  };
  if (std::string why = detail::copyMismatch(src, dst); !why.empty())
    return fail(why);
  size_t bytes = src.nbytes();
  if (!bytes)
    return Status();
  if (!src.present() || !dst.present())
    return fail("an operand is absent");
  const Tensor &file = write ? dst : src, &host = write ? src : dst;
  std::string fileName = write ? "dst" : "src",
              hostName = write ? "src" : "dst";
  if (!io::isNvme(file.data, bytes))
    return fail(fileName + " does not lie in an NVMe file");
  if (io::isNvme(host.data, 0) ||
      io::isNvme(static_cast<const char *>(host.data) + bytes - 1, 0))
    return fail(hostName + " lies in an NVMe file; it must be host memory");
  Status s = write ? io::nvmeWriteAsync(host.data, file.data, bytes)
                   : io::nvmeReadAsync(host.data, file.data, bytes);
  return s.ok() ? s : fail(s.message(), s.code());
}

} // namespace

Status nvmeRead(const Tensor &src, const Tensor &dst, const char *what) {
  return nvmeCopy(src, dst, what, /*write=*/false);
}

Status nvmeWrite(const Tensor &src, const Tensor &dst, const char *what) {
  return nvmeCopy(src, dst, what, /*write=*/true);
}

} // namespace dsc::cpu
