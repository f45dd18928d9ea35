//===- nvme.h - Optimizer state in files on a fast disk ---------*- C++ -*-===//
//
// The NVMe tier of an offloaded optimizer (DeepSpeed's offload_optimizer:
// nvme, dsc's ArgSpec::nvme): a tensor lives in a file under a directory on
// a fast local disk, mapped into memory. The mapping is what every ordinary
// reader of the tensor uses (initialization, checkpoints, dumps), so its
// pointer is a normal host pointer; the step itself moves the state between
// the file and host staging memory chunk by chunk with nvmeReadAsync and
// nvmeWriteAsync (cpu::nvmeRead and cpu::nvmeWrite: a chunk's read runs
// while the host updates the chunk before it, and the host task that
// reads the staged bytes waits for it first; a chunk's write is copied
// aside and goes to the disk while the host updates the next), which
// bypass the mapping and drop what they moved from the page cache: host
// memory holds only the chunks in flight. Linux's page cache is one for
// the mapping and the file, so both views always agree once the writes
// are flushed (nvmeFlush, at each step's end).
//
// Each file is unlinked as soon as it is created: nothing is left behind
// when the run ends, however it ends.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_NVME_H
#define DSC_RUNTIME_IO_NVME_H

#include "dsc/runtime.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dsc::io {

/// Creates a file of `bytes` in `dir` for the tensor `what` (its name reads
/// `dsc-nvme-<what>-XXXXXX`, unlinked at once), reserves its blocks (so that
/// a full disk fails here, before training), and maps it shared, read and
/// write, zero-filled. `*data` is the mapping; release it with nvmeRelease.
/// bytes == 0: `*data` is null. An error names `what`, `dir` and the
/// reason: a missing, non-directory or read-only `dir`, no room on its disk,
/// a failed mapping.
Status nvmeAllocate(const std::string &dir, size_t bytes,
                    const std::string &what, void **data);
/// Unmaps and closes what nvmeAllocate returned (null: nothing).
void nvmeRelease(void *data);
/// Whether [p, p + bytes) lies in one region of nvmeAllocate (for 0 bytes:
/// whether p does).
bool isNvme(const void *p, size_t bytes);
/// Writes back the dirty pages of [data, data + bytes) (an NVMe region the
/// shell wrote through the mapping), then drops them from memory, the
/// mapping's and the page cache's. Writes-behind into those bytes finish
/// first (their failure is returned).
Status nvmeEvict(const void *data, size_t bytes);

/// Copies `bytes` between host memory at `host` and the file behind `nvme`
/// (in an NVMe region): into the file with `write`, else out of it. The
/// bytes go in pieces of 8 MiB over a pool of I/O threads of their own;
/// what was moved is dropped from the page cache afterwards. An error names
/// the file, the offset and the reason. Every transfer of file bytes
/// starts after the writes-behind into them (and a write after the reads
/// out of them) still running.
Status nvmeTransfer(void *host, const void *nvme, size_t bytes, bool write);

/// nvmeTransfer's write, behind: the bytes are copied aside (in pieces, on
/// the I/O threads and this one) and this returns, so `host` may be reused
/// at once, while the copy goes to the disk. Reads of those file bytes wait
/// for it (on the I/O threads, not in the caller). At most the write-behind
/// budget (nvmeSetWriteBehind, 1 GiB by default) is held aside: beyond it
/// this waits for the oldest writes first. A failure is reported by
/// nvmeFlush (and by the reads of those bytes); an operand error at once.
Status nvmeWriteAsync(const void *host, void *nvme, size_t bytes);
/// Waits for every write-behind, any rank's; then the first failed write
/// into a file allocated now, "nvme_write: writing <path> at offset N:
/// <why>". A failure stays with its file until it is released: the file
/// no longer holds what the step computed, so every later flush fails, and
/// so does every read of that file.
Status nvmeFlush();
/// The bytes nvmeWriteAsync may hold aside; 0 writes through (as
/// nvmeTransfer). For benchmarks and tests.
void nvmeSetWriteBehind(size_t bytes);

/// nvmeTransfer's read, started on the I/O threads and not waited for:
/// [host, host + bytes) is being written until nvmeAwait of any byte of it
/// returns, which reports the read's failure (nvmeDrain waits for it too).
/// Nothing may touch those bytes before that. An operand error is returned at
/// once.
Status nvmeReadAsync(void *host, const void *nvme, size_t bytes);
/// Waits for the reads of nvmeReadAsync into any byte of
/// [host, host + bytes) (none: returns at once); their first failure.
Status nvmeAwait(const void *host, size_t bytes);
/// Waits until no read of nvmeReadAsync and no write-behind is running,
/// any rank's (before host memory a read may fill is freed or reused
/// outside the step's order). Reports nothing: a failed read stays for the
/// nvmeAwait of the host task that reads its bytes, a failed write for
/// nvmeFlush.
void nvmeDrain();

/// Bytes nvmeTransfer, nvmeReadAsync and nvmeWriteAsync moved (or set out
/// to move) since the process started.
struct NvmeTraffic {
  uint64_t readBytes = 0, writtenBytes = 0;
};
NvmeTraffic nvmeTraffic();
/// Bytes of the NVMe regions allocated now.
size_t nvmeBytes();

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_NVME_H
