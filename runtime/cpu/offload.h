//===- offload.h - Optimizer state in host memory ---------------*- C++ -*-===//
//
// The calls a step makes to keep part of its state in host memory
// (DeepSpeed's offload_optimizer: cpu, dsc's ArgSpec::host): copies between
// device and host memory, tasks that run on the host in order with them,
// and the waits that bring their results back into the compute stream's
// order. On the CPU every tensor is host memory and every call acts at
// once; the CUDA backend (cuda/kernels.h, same names, operands and
// errors) runs copies on the rank's copy stream and tasks on its host
// stream, beside its compute stream, ordered by the tensors each names.
// State kept in files on a fast disk (offload_optimizer: nvme) is staged
// into host memory and back by nvmeRead and nvmeWrite, from host tasks.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_OFFLOAD_H
#define DSC_RUNTIME_CPU_OFFLOAD_H

#include "dsc/runtime.h"

#include <functional>
#include <initializer_list>
#include <string>

namespace dsc::cpu {

/// Copies src into dst (same dtype and element count, else an error naming
/// both). toHost: src is device memory and dst (pinned) host memory; else
/// the reverse. CUDA: after all compute-stream work issued so far (and, to
/// the device, after the host task that last wrote src), on the copy
/// stream; offloadWait(dst) orders the compute stream after it. CPU: a
/// memcpy, now.
Status offloadCopy(const Tensor &src, const Tensor &dst, bool toHost,
                   const char *what);
/// Runs fn on the host after the copies into `reads` (those that were
/// offloadCopy destinations) and the host tasks before it. `writes`: the
/// host tensors it writes, which later offloadCopy calls from them wait
/// for. CPU: runs fn now, ignores the lists. `site` names the call site
/// (one per hostTask call of the generated code); a CUDA graph captured
/// from an earlier step calls fn again on each replay, so fn reads
/// everything that changes per step from memory, never from values it
/// captured. A failure (or an exception) of fn is "host task <what>:
/// <message>": CPU returns it; CUDA keeps the rank's first one, skips its
/// later host tasks and reports it from Device::synchronize.
Status hostTask(int site, std::function<Status()> fn, const char *what,
                std::initializer_list<Tensor> reads,
                std::initializer_list<Tensor> writes);
/// The compute stream waits until the last offloadCopy into dst (by
/// dst.data) is done; no such copy is an error naming `what`. CPU: checks
/// that a copy into dst was made on this thread.
Status offloadWait(const Tensor &dst, const char *what);
/// The compute stream waits for all offload work issued so far, copies and
/// host tasks (the step's end). CPU: waits until no NVMe read or write
/// runs (io::nvmeDrain), and returns a failed write's error
/// (io::nvmeFlush).
Status offloadJoin();

/// Copies the optimizer state `src`, which lies in an NVMe file
/// (io/nvme.h: an argument the spec marks nvme, or a part of one), into
/// host memory `dst` (same dtype and element count; dst not in a file),
/// reading the file directly: the page cache does not keep it. The read
/// runs on the I/O threads after this returns (operand errors come at
/// once): the host task that next names dst among its reads or writes
/// (hostTask, on the CPU and on a device) waits for it first and fails
/// with the read's error; on the CPU an offloadCopy into dst waits too (on
/// a device the memory plan keeps copies off bytes a read may fill, and a
/// later copy there is ordered after the host task that read them). So a
/// chunk's state comes in while the host updates the chunk before it. The
/// generated code calls it inside a hostTask, on the CPU and on a device
/// alike (there is no device version). Zero elements: nothing.
Status nvmeRead(const Tensor &src, const Tensor &dst, const char *what);
/// The reverse: host memory `src` into the NVMe file behind `dst`, behind
/// (io::nvmeWriteAsync): src is copied aside before this returns, so the
/// memory plan may reuse it at once, and the copy goes to the disk while
/// the host goes on; a later nvmeRead of those file bytes waits for it, and
/// the step's end (offloadJoin on the CPU, the device's synchronize) for
/// all, reporting a failure. Errors read "nvme_write(what=..., src=f32[4],
/// dst=f32[4]): <reason>" (nvme_read for nvmeRead).
Status nvmeWrite(const Tensor &src, const Tensor &dst, const char *what);

namespace detail {
/// offloadCopy's operand checks, shared by the CPU and CUDA backends.
Status checkOffloadCopy(const Tensor &src, const Tensor &dst, bool toHost,
                        const char *what);
/// "offload_copy(what=..., src=f32[4], dst=f32[4], to=host): <reason>".
Status offloadCopyError(const Tensor &src, const Tensor &dst, bool toHost,
                        const char *what, const std::string &reason);
/// The dtype and element-count checks of offloadCopy and nvmeRead/Write:
/// "" when src and dst agree, else the reason they do not.
std::string copyMismatch(const Tensor &src, const Tensor &dst);
/// "offload_wait(what=..., dst=f32[4]): <reason>".
Status offloadWaitError(const Tensor &dst, const char *what,
                        const std::string &reason);
/// "host task <what>: <message>" of a failed host task's status.
Status hostTaskFailed(const char *what, const Status &s);
/// Waits for the NVMe reads (nvmeRead) into the tensors a host task names,
/// before it runs; the first failure, as "nvme_read into <tensor>: ...".
Status awaitNvmeReads(const Tensor *tensors, size_t count);
/// Runs fn, turning an exception into an error.
Status runHostTask(const std::function<Status()> &fn);
} // namespace detail

} // namespace dsc::cpu

#endif // DSC_RUNTIME_CPU_OFFLOAD_H
