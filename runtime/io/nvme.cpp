//===- nvme.cpp - Optimizer state in files on a fast disk -----------------===//
//
// A registry of the mapped files (one mutex; looked up by address), and a
// pool of I/O threads of its own that moves a transfer's 8 MiB pieces with
// pread and pwrite: a disk serves a few requests in flight far faster than
// one, and the compute pool (cpu/thread_pool.cpp) is busy with the host
// AdamW meanwhile.
//
//===----------------------------------------------------------------------===//

#include "io/nvme.h"
#include "core/env.h"
#include "io/metrics_internal.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <fcntl.h>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

namespace dsc::io {

namespace {

using detail::errnoText;

constexpr size_t kPieceBytes = size_t(8) << 20;
constexpr int kIoThreads = 4;

size_t pageBytes() {
  static const size_t page = [] {
    long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? size_t(p) : size_t(4096);
  }();
  return page;
}

size_t roundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

/// "1610612736 bytes (1.5 GiB)", for messages.
std::string bytesText(size_t bytes) {
  return std::to_string(bytes) + " bytes (" + formatBytes(bytes) + ")";
}

/// `what` as part of a file name: its letters, digits, '.' and '-', each
/// run of other characters one '_' ("optimizer state 'w/exp_avg'" ->
/// "optimizer_state_w_exp_avg").
std::string sanitize(const std::string &what) {
  std::string name;
  for (char c : what) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (plain)
      name += c;
    else if (!name.empty() && name.back() != '_')
      name += '_';
  }
  while (!name.empty() && name.back() == '_')
    name.pop_back();
  name = name.substr(0, 80);
  return name.empty() ? "tensor" : name;
}

/// One file of nvmeAllocate, mapped at `base`. The descriptor is closed
/// with the last reference: a transfer holds one while it runs.
struct Region {
  char *base = nullptr;
  size_t bytes = 0;  // the tensor's
  size_t mapped = 0; // the mapping's and the file's: whole pages
  int fd = -1;
  std::string path; // for messages (the file is unlinked)

  /// The first failed write into the file: it no longer holds what the
  /// step computed, so every later flush and read of it fails.
  void failWrite(const Status &s) {
    std::lock_guard<std::mutex> lock(m);
    if (writeFailure.ok())
      writeFailure = s;
  }
  Status failedWrite() {
    std::lock_guard<std::mutex> lock(m);
    return writeFailure;
  }

private:
  std::mutex m;
  Status writeFailure;

public:
  Region() = default;
  Region(const Region &) = delete;
  Region &operator=(const Region &) = delete;
  ~Region() {
    if (fd >= 0)
      ::close(fd);
  }
};

class Registry {
public:
  static Registry &get() {
    static Registry *registry = new Registry(); // used until exit
    return *registry;
  }

  void add(std::shared_ptr<Region> r) {
    std::lock_guard<std::mutex> lock(m_);
    total_ += r->bytes;
    regions_[key(r->base)] = std::move(r);
  }

  /// Removes and returns the region mapped at `base` (null: none).
  std::shared_ptr<Region> take(const void *base) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = regions_.find(key(base));
    if (it == regions_.end())
      return nullptr;
    std::shared_ptr<Region> r = std::move(it->second);
    regions_.erase(it);
    total_ -= r->bytes;
    return r;
  }

  /// The region [p, p + bytes) lies in (for 0 bytes: p), or null.
  std::shared_ptr<Region> find(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = regions_.upper_bound(key(p));
    if (it == regions_.begin())
      return nullptr;
    const std::shared_ptr<Region> &r = (--it)->second;
    size_t offset = key(p) - it->first;
    if (offset >= r->bytes || bytes > r->bytes - offset)
      return nullptr;
    return r;
  }

  size_t total() {
    std::lock_guard<std::mutex> lock(m_);
    return total_;
  }

  /// The first failed write of a region allocated now, by address.
  Status failedWrite() {
    std::lock_guard<std::mutex> lock(m_);
    for (auto &[base, r] : regions_)
      if (Status s = r->failedWrite(); !s.ok())
        return s;
    return Status();
  }

private:
  static uintptr_t key(const void *p) { return reinterpret_cast<uintptr_t>(p); }

  std::mutex m_;
  std::map<uintptr_t, std::shared_ptr<Region>> regions_; // by base
  size_t total_ = 0;
};

std::atomic<uint64_t> gReadBytes{0}, gWrittenBytes{0};

//===----------------------------------------------------------------------===//
// Allocation
//===----------------------------------------------------------------------===//

/// "NVMe file for <what> in <dir>: <why>".
Status allocError(const std::string &dir, const std::string &what,
                  const std::string &why) {
  return Status::error(StatusCode::IoError,
                       "NVMe file for " + what + " in " + dir + ": " + why);
}

/// `dir` exists, is a directory, and this process may create files in it.
Status checkDirectory(const std::string &dir, const std::string &what) {
  if (dir.empty())
    return allocError("(none)", what, "no directory given");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    int err = errno;
    return allocError(
        dir, what,
        std::string(err == ENOENT ? "no such directory" : "cannot reach it") +
            " (" + errnoText(err) + ")");
  }
  if (!S_ISDIR(st.st_mode))
    return allocError(dir, what, "not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return allocError(dir, what,
                      "cannot create files there (" + errnoText(errno) + ")");
  return Status();
}

/// Reserves the file's blocks, so that a full disk fails now and not as a
/// fault on a later write through the mapping. A filesystem that cannot
/// reserve gets a file of the size, sparse.
Status reserve(const Region &r, const std::string &dir,
               const std::string &what) {
  int err = ::posix_fallocate(r.fd, 0, off_t(r.mapped));
  if (err == EOPNOTSUPP)
    err = ::ftruncate(r.fd, off_t(r.mapped)) == 0 ? 0 : errno;
  if (err == ENOSPC || err == EDQUOT)
    return allocError(dir, what,
                      "no room for " + bytesText(r.mapped) + " (" +
                          errnoText(err) +
                          "); free space on that disk or choose a directory "
                          "on a disk with more room");
  if (err)
    return allocError(dir, what,
                      "cannot reserve " + bytesText(r.mapped) + " (" +
                          errnoText(err) + ")");
  return Status();
}

/// Each tensor on NVMe holds a file open for the whole run (a 7B model's
/// state is ~900 files a rank): the soft limit on open files is raised to
/// the hard one, once.
void raiseOpenFileLimit() {
  static const bool raised = [] {
    struct rlimit lim;
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = lim.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
    return true;
  }();
  (void)raised;
}

//===----------------------------------------------------------------------===//
// The I/O threads
//===----------------------------------------------------------------------===//

/// One transfer: its pieces are taken one at a time by whoever is free (an
/// I/O thread, the caller, or whoever waits for it), and its waiters wait
/// for the last. After a failure the pieces not yet started are skipped.
struct IoJob {
  std::function<Status(size_t)> piece;
  size_t pieces = 0, next = 0, done = 0;
  Status error; // the first failure (guarded by the pool's mutex)
  /// Set with the last piece: error is final then, read without the lock.
  std::atomic<bool> complete{false};
  /// Jobs submitted earlier that must finish before any piece of this one
  /// moves a byte (a read of a file range a write-behind still writes).
  std::vector<std::shared_ptr<IoJob>> after;
};

class IoPool {
public:
  static IoPool &get() {
    static IoPool *pool = new IoPool(); // never destroyed: threads may run
    return *pool;
  }

  /// Queues `job`'s pieces for the I/O threads.
  void submit(const std::shared_ptr<IoJob> &job) {
    std::lock_guard<std::mutex> lock(m_);
    if (job->pieces == 0)
      return;
    jobs_.push_back(job);
    wake_.notify_all();
  }

  /// Runs what is left of `job` on this thread too, waits for its last
  /// piece, and returns its first failure.
  Status wait(const std::shared_ptr<IoJob> &job) {
    std::unique_lock<std::mutex> lock(m_);
    while (job->next < job->pieces)
      step(job, lock);
    finished_.wait(lock, [&] { return job->done == job->pieces; });
    return job->error;
  }

private:
  IoPool() {
    for (int i = 0; i < kIoThreads; ++i) {
      try {
        std::thread([this] { work(); }).detach();
      } catch (const std::system_error &) {
        break; // the waiters move their pieces themselves
      }
    }
  }

  /// Waits for the jobs `job` comes after (running their pieces too: they
  /// were submitted earlier and depend on nothing later, so no wait
  /// closes a cycle), then moves piece i.
  Status runPiece(const IoJob &job, size_t i) {
    for (const std::shared_ptr<IoJob> &first : job.after)
      if (Status s = wait(first); !s.ok())
        return Status::error(s.code(), "an earlier write of these bytes "
                                       "failed: " +
                                           s.message());
    try {
      return job.piece(i);
    } catch (const std::exception &e) {
      return Status::error(StatusCode::IoError, e.what());
    }
  }

  /// Takes the next piece of `job` and runs it without the lock.
  void step(std::shared_ptr<IoJob> job, std::unique_lock<std::mutex> &lock) {
    size_t i = job->next++;
    if (job->next == job->pieces)
      if (auto it = std::find(jobs_.begin(), jobs_.end(), job);
          it != jobs_.end())
        jobs_.erase(it);
    bool skip = !job->error.ok();
    lock.unlock();
    Status s = skip ? Status() : runPiece(*job, i);
    lock.lock();
    if (!s.ok() && job->error.ok())
      job->error = s;
    if (++job->done == job->pieces) {
      // No piece runs any more: what the job holds goes now (a
      // write-behind's copy back to BounceBuffers), not with its last
      // reference.
      job->piece = nullptr;
      job->after.clear();
      job->complete.store(true, std::memory_order_release);
      finished_.notify_all();
    }
  }

  void work() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      wake_.wait(lock, [&] { return !jobs_.empty(); });
      step(jobs_.front(), lock);
    }
  }

  std::mutex m_;
  std::condition_variable wake_, finished_;
  std::deque<std::shared_ptr<IoJob>> jobs_;
};

/// The `job` of each of `entries` (a list of reads or writes).
template <typename Entries>
std::vector<std::shared_ptr<IoJob>> jobsOf(const Entries &entries) {
  std::vector<std::shared_ptr<IoJob>> jobs;
  for (const auto &e : entries)
    jobs.push_back(e.job);
  return jobs;
}

/// The reads started by nvmeReadAsync, by the host bytes they fill. A read
/// stays listed until a wait for its bytes has seen it finish (that wait
/// reports its failure), so a wait of another rank's, or of the step's
/// join, never takes it from under the host task that reads those bytes.
class PendingReads {
public:
  static PendingReads &get() {
    static PendingReads *pending = new PendingReads(); // used until exit
    return *pending;
  }

  /// A read into host bytes [begin, end) of the file bytes (by their
  /// address in its mapping) [fileBegin, fileEnd).
  void add(uintptr_t begin, uintptr_t end, uintptr_t fileBegin,
           uintptr_t fileEnd, std::shared_ptr<IoJob> job) {
    std::lock_guard<std::mutex> lock(m_);
    reads_.push_back({begin, end, fileBegin, fileEnd, std::move(job)});
    listed_.store(reads_.size(), std::memory_order_release);
  }

  /// The reads out of any file byte of [fileBegin, fileEnd) not finished.
  std::vector<std::shared_ptr<IoJob>> from(uintptr_t fileBegin,
                                           uintptr_t fileEnd) {
    std::vector<std::shared_ptr<IoJob>> found;
    if (listed_.load(std::memory_order_acquire) == 0)
      return found;
    std::lock_guard<std::mutex> lock(m_);
    for (const Read &r : reads_)
      if (r.fileBegin < fileEnd && fileBegin < r.fileEnd &&
          !r.job->complete.load(std::memory_order_acquire))
        found.push_back(r.job);
    return found;
  }

  /// The reads into any byte of [begin, end). Every host task asks, for
  /// each tensor it names: with none listed (no NVMe tier, or between
  /// chunks) it takes no lock. A read this caller must see was listed by a
  /// host task ordered before it.
  std::vector<std::shared_ptr<IoJob>> into(uintptr_t begin, uintptr_t end) {
    std::vector<std::shared_ptr<IoJob>> found;
    if (listed_.load(std::memory_order_acquire) == 0)
      return found;
    std::lock_guard<std::mutex> lock(m_);
    for (const Read &r : reads_)
      if (r.begin < end && begin < r.end)
        found.push_back(r.job);
    return found;
  }

  /// Every read listed.
  std::vector<std::shared_ptr<IoJob>> all() {
    std::lock_guard<std::mutex> lock(m_);
    return jobsOf(reads_);
  }

  /// Unlists `jobs`, which have finished: all of them, or (`failedToo`
  /// false) those that succeeded, keeping a failure for the wait of the
  /// host task that reads its bytes.
  void forget(const std::vector<std::shared_ptr<IoJob>> &jobs, bool failedToo) {
    std::lock_guard<std::mutex> lock(m_);
    auto gone = [&](const Read &r) {
      return std::find(jobs.begin(), jobs.end(), r.job) != jobs.end() &&
             (failedToo || r.job->error.ok());
    };
    reads_.erase(std::remove_if(reads_.begin(), reads_.end(), gone),
                 reads_.end());
    listed_.store(reads_.size(), std::memory_order_release);
  }

private:
  struct Read {
    uintptr_t begin, end, fileBegin, fileEnd;
    std::shared_ptr<IoJob> job;
  };

  std::mutex m_;
  std::vector<Read> reads_;
  std::atomic<size_t> listed_{0}; // reads_.size(), read without the lock
};

/// Waits for `jobs`; the first failure among them.
Status waitAll(const std::vector<std::shared_ptr<IoJob>> &jobs) {
  Status first;
  for (const std::shared_ptr<IoJob> &job : jobs)
    if (Status s = IoPool::get().wait(job); !s.ok() && first.ok())
      first = s;
  return first;
}

/// Host memory a write-behind copies its bytes into, kept for the next
/// write of its size: a fresh allocation of a chunk's size faults in every
/// page again. What is allocated, in use and kept, stays within the
/// write-behind budget, beside the writes in flight that makeRoomForWrite
/// bounds (one write larger than the budget goes alone).
class BounceBuffers {
public:
  static BounceBuffers &get() {
    static BounceBuffers *buffers = new BounceBuffers(); // used until exit
    return *buffers;
  }

  /// `bytes` of memory (null: out of memory), returned here when the last
  /// reference goes.
  std::shared_ptr<char> take(size_t bytes, size_t keep) {
    char *p = nullptr;
    size_t size = bytes;
    std::vector<char *> drop; // kept buffers that would pass the budget
    {
      std::lock_guard<std::mutex> lock(m_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first <= 2 * bytes) {
        size = it->first;
        p = it->second;
        free_.erase(it);
      } else {
        // A new buffer: the kept ones of other sizes go first, as far as
        // the budget needs.
        while (!free_.empty() && allocated_ + bytes > keep) {
          auto last = std::prev(free_.end()); // the largest
          allocated_ -= last->first;
          drop.push_back(last->second);
          free_.erase(last);
        }
        allocated_ += bytes;
      }
    }
    for (char *q : drop)
      delete[] q;
    if (!p) {
      p = new (std::nothrow) char[bytes];
      if (!p) {
        std::lock_guard<std::mutex> lock(m_);
        allocated_ -= bytes;
        return nullptr;
      }
    }
    return std::shared_ptr<char>(
        p, [this, size, keep](char *q) { give(q, size, keep); });
  }

private:
  void give(char *p, size_t size, size_t keep) {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (allocated_ <= keep) {
        free_.emplace(size, p);
        return;
      }
      allocated_ -= size;
    }
    delete[] p;
  }

  std::mutex m_;
  std::multimap<size_t, char *> free_; // by size
  size_t allocated_ = 0;               // free or in use
};

/// The writes of nvmeWriteAsync not yet seen finished, by the file bytes
/// they write (each holds as many bytes of host memory).
class PendingWrites {
public:
  static PendingWrites &get() {
    static PendingWrites *pending = new PendingWrites(); // used until exit
    return *pending;
  }

  void add(uintptr_t fileBegin, uintptr_t fileEnd, std::shared_ptr<IoJob> job) {
    std::lock_guard<std::mutex> lock(m_);
    inFlight_ += fileEnd - fileBegin;
    writes_.push_back({fileBegin, fileEnd, std::move(job)});
  }

  /// The writes into any file byte of [fileBegin, fileEnd) not finished.
  std::vector<std::shared_ptr<IoJob>> into(uintptr_t fileBegin,
                                           uintptr_t fileEnd) {
    std::vector<std::shared_ptr<IoJob>> found;
    std::lock_guard<std::mutex> lock(m_);
    prune();
    for (const Write &w : writes_)
      if (w.fileBegin < fileEnd && fileBegin < w.fileEnd)
        found.push_back(w.job);
    return found;
  }

  /// The bytes of the writes not finished, and the oldest of them.
  size_t inFlight(std::shared_ptr<IoJob> *oldest) {
    std::lock_guard<std::mutex> lock(m_);
    prune();
    if (oldest)
      *oldest = writes_.empty() ? nullptr : writes_.front().job;
    return inFlight_;
  }

  std::vector<std::shared_ptr<IoJob>> all() {
    std::lock_guard<std::mutex> lock(m_);
    return jobsOf(writes_);
  }

private:
  struct Write {
    uintptr_t fileBegin, fileEnd;
    std::shared_ptr<IoJob> job;
  };

  void prune() {
    auto finished = [&](const Write &w) {
      if (!w.job->complete.load(std::memory_order_acquire))
        return false;
      inFlight_ -= w.fileEnd - w.fileBegin;
      return true;
    };
    writes_.erase(std::remove_if(writes_.begin(), writes_.end(), finished),
                  writes_.end());
  }

  std::mutex m_;
  std::deque<Write> writes_; // in the order submitted
  size_t inFlight_ = 0;
};

std::atomic<size_t> gWriteBehindBytes{size_t(1) << 30};

/// "reading <path> at offset N: <why>".
Status ioError(const Region &r, bool write, off_t at, const std::string &why) {
  return Status::error(StatusCode::IoError,
                       std::string(write ? "writing " : "reading ") + r.path +
                           " at offset " + std::to_string(at) + ": " + why);
}

/// Moves one piece, then drops it from the page cache (written back first:
/// a dirty page is not dropped).
Status movePieceOnce(const Region &r, char *host, off_t at, size_t bytes,
                     bool write) {
  size_t done = 0;
  while (done < bytes) {
    off_t pos = at + off_t(done);
    ssize_t n = write ? ::pwrite(r.fd, host + done, bytes - done, pos)
                      : ::pread(r.fd, host + done, bytes - done, pos);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return ioError(r, write, pos, errnoText(errno));
    if (n == 0)
      return ioError(r, write, pos,
                     write ? "nothing was written" : "unexpected end of file");
    done += size_t(n);
  }
  if (write &&
      ::sync_file_range(r.fd, at, off_t(bytes),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER) != 0)
    return ioError(r, write, at, "writing back: " + errnoText(errno));
  if (int err = ::posix_fadvise(r.fd, at, off_t(bytes), POSIX_FADV_DONTNEED))
    return ioError(r, write, at, "dropping cached pages: " + errnoText(err));
  return Status();
}

/// movePieceOnce; a failed write stays with the file.
Status movePiece(Region &r, char *host, off_t at, size_t bytes, bool write) {
  Status s = movePieceOnce(r, host, at, bytes, write);
  if (write && !s.ok())
    r.failWrite(s);
  return s;
}

} // namespace

Status nvmeAllocate(const std::string &dir, size_t bytes,
                    const std::string &what, void **data) {
  *data = nullptr;
  if (!bytes)
    return Status();
  if (Status s = checkDirectory(dir, what); !s.ok())
    return s;
  std::string name = dir + (dir.back() == '/' ? "" : "/") + "dsc-nvme-" +
                     sanitize(what) + "-XXXXXX";
  std::vector<char> path(name.begin(), name.end());
  path.push_back('\0');
  raiseOpenFileLimit();
  int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0 && (errno == EMFILE || errno == ENFILE))
    return allocError(dir, what,
                      "too many open files (" + errnoText(errno) +
                          "): each tensor kept on NVMe holds its file open; "
                          "raise the limit (ulimit -n) or run fewer ranks "
                          "in one process");
  if (fd < 0)
    return allocError(dir, what,
                      "cannot create a file there (" + errnoText(errno) + ")");
  auto r = std::make_shared<Region>();
  r->fd = fd;
  r->path = path.data();
  // Gone with the process, however it ends.
  if (::unlink(path.data()) != 0)
    return allocError(dir, what,
                      "cannot remove the new file " + r->path +
                          " from the directory (" + errnoText(errno) +
                          "); it would outlive the run");
  r->bytes = bytes;
  r->mapped = roundUp(bytes, pageBytes());
  if (Status s = reserve(*r, dir, what); !s.ok())
    return s;
  void *p =
      ::mmap(nullptr, r->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    return allocError(dir, what,
                      "cannot map " + bytesText(r->mapped) + " (" +
                          errnoText(err) + ")");
  }
  r->base = static_cast<char *>(p);
  Registry::get().add(r);
  *data = p;
  return Status();
}

void nvmeRelease(void *data) {
  if (!data)
    return;
  if (std::shared_ptr<Region> r = Registry::get().take(data))
    ::munmap(r->base, r->mapped);
}

bool isNvme(const void *p, size_t bytes) {
  return Registry::get().find(p, bytes) != nullptr;
}

Status nvmeEvict(const void *data, size_t bytes) {
  std::shared_ptr<Region> r = Registry::get().find(data, bytes);
  if (!r)
    return Status::error(StatusCode::InvalidArgument,
                         "nvme_evict: " + std::to_string(bytes) +
                             " bytes that do not lie in an NVMe file");
  if (!bytes)
    return Status();
  // What the shell wrote through the mapping is not to be overwritten by a
  // write-behind of a step before.
  auto begin = reinterpret_cast<uintptr_t>(data);
  if (Status s = waitAll(PendingWrites::get().into(begin, begin + bytes));
      !s.ok())
    return s;
  size_t page = pageBytes();
  size_t offset = size_t(static_cast<const char *>(data) - r->base);
  size_t lo = offset / page * page;
  size_t hi = std::min(roundUp(offset + bytes, page), r->mapped);
  auto failed = [&](const char *doing, int err) {
    return Status::error(StatusCode::IoError,
                         std::string(doing) + " " + r->path + " at offset " +
                             std::to_string(lo) + ": " + errnoText(err));
  };
  if (::msync(r->base + lo, hi - lo, MS_SYNC) != 0)
    return failed("writing back", errno);
  if (::madvise(r->base + lo, hi - lo, MADV_DONTNEED) != 0)
    return failed("unmapping the pages of", errno);
  if (int err = ::posix_fadvise(r->fd, off_t(lo), off_t(hi - lo),
                                POSIX_FADV_DONTNEED))
    return failed("dropping the cached pages of", err);
  return Status();
}

namespace {

Status notInAFile(size_t bytes) {
  return Status::error(StatusCode::InvalidArgument,
                       "nvme_transfer: " + std::to_string(bytes) +
                           " bytes that do not lie in an NVMe file");
}

/// The job that moves [host, host + bytes) to or from the file behind
/// `nvme`, in pieces, after the writes-behind of those file bytes (and,
/// for a write, the reads of them) still running; `keep` lives as long as
/// the job (a write-behind's copy of its bytes). The traffic is counted
/// once it is made.
Status makeJob(void *host, const void *nvme, size_t bytes, bool write,
               std::shared_ptr<IoJob> &job,
               std::shared_ptr<char> keep = nullptr) {
  std::shared_ptr<Region> r = Registry::get().find(nvme, bytes);
  if (!r)
    return notInAFile(bytes);
  if (Status s = r->failedWrite(); !s.ok() && !write)
    return Status::error(
        s.code(), "reading " + r->path +
                      ": an earlier write into it failed: " + s.message());
  off_t offset = off_t(static_cast<const char *>(nvme) - r->base);
  char *buffer = static_cast<char *>(host);
  job = std::make_shared<IoJob>();
  job->pieces = (bytes + kPieceBytes - 1) / kPieceBytes;
  job->piece = [r, buffer, offset, bytes, write, keep](size_t i) {
    size_t from = i * kPieceBytes;
    return movePiece(*r, buffer + from, offset + off_t(from),
                     std::min(kPieceBytes, bytes - from), write);
  };
  auto begin = reinterpret_cast<uintptr_t>(nvme);
  job->after = PendingWrites::get().into(begin, begin + bytes);
  if (write)
    for (std::shared_ptr<IoJob> &read :
         PendingReads::get().from(begin, begin + bytes))
      job->after.push_back(std::move(read));
  (write ? gWrittenBytes : gReadBytes).fetch_add(bytes);
  return Status();
}

/// Copies [src, src + bytes) to dst in pieces on the I/O threads and this
/// one, and waits for the copy.
void copyInPieces(char *dst, const char *src, size_t bytes) {
  auto job = std::make_shared<IoJob>();
  job->pieces = (bytes + kPieceBytes - 1) / kPieceBytes;
  job->piece = [dst, src, bytes](size_t i) {
    size_t from = i * kPieceBytes;
    std::memcpy(dst + from, src + from, std::min(kPieceBytes, bytes - from));
    return Status();
  };
  IoPool::get().submit(job);
  (void)IoPool::get().wait(job);
}

/// Waits until the writes-behind hold no more than `budget` bytes with
/// `bytes` more (or none runs).
void makeRoomForWrite(size_t bytes, size_t budget) {
  for (;;) {
    std::shared_ptr<IoJob> oldest;
    size_t inFlight = PendingWrites::get().inFlight(&oldest);
    if (!oldest || inFlight + bytes <= budget)
      return;
    (void)IoPool::get().wait(oldest); // a failure stays for nvmeFlush
  }
}

} // namespace

Status nvmeTransfer(void *host, const void *nvme, size_t bytes, bool write) {
  if (!bytes)
    return Status();
  std::shared_ptr<IoJob> job;
  if (Status s = makeJob(host, nvme, bytes, write, job); !s.ok())
    return s;
  IoPool::get().submit(job);
  return IoPool::get().wait(job);
}

Status nvmeReadAsync(void *host, const void *nvme, size_t bytes) {
  if (!bytes)
    return Status();
  std::shared_ptr<IoJob> job;
  if (Status s = makeJob(host, nvme, bytes, /*write=*/false, job); !s.ok())
    return s;
  // Queued before it is listed: whoever finds it listed may wait for it.
  IoPool::get().submit(job);
  auto begin = reinterpret_cast<uintptr_t>(host);
  auto file = reinterpret_cast<uintptr_t>(nvme);
  PendingReads::get().add(begin, begin + bytes, file, file + bytes, job);
  return Status();
}

Status nvmeWriteAsync(const void *host, void *nvme, size_t bytes) {
  if (!bytes)
    return Status();
  size_t budget = gWriteBehindBytes.load(std::memory_order_relaxed);
  if (!budget)
    return nvmeTransfer(const_cast<void *>(host), nvme, bytes, true);
  if (!Registry::get().find(nvme, bytes))
    return notInAFile(bytes);
  // The bytes are whole before they are copied: a read still filling them
  // is waited for (none, in a step's order).
  if (Status s = nvmeAwait(host, bytes); !s.ok())
    return s;
  makeRoomForWrite(bytes, budget);
  std::shared_ptr<char> copy = BounceBuffers::get().take(bytes, budget);
  if (!copy) // no memory to write behind: write through
    return nvmeTransfer(const_cast<void *>(host), nvme, bytes, true);
  copyInPieces(copy.get(), static_cast<const char *>(host), bytes);
  std::shared_ptr<IoJob> job;
  if (Status s = makeJob(copy.get(), nvme, bytes, /*write=*/true, job, copy);
      !s.ok())
    return s;
  IoPool::get().submit(job);
  auto file = reinterpret_cast<uintptr_t>(nvme);
  PendingWrites::get().add(file, file + bytes, std::move(job));
  return Status();
}

Status nvmeFlush() {
  (void)waitAll(PendingWrites::get().all());
  Status s = Registry::get().failedWrite();
  return s.ok() ? s : Status::error(s.code(), "nvme_write: " + s.message());
}

void nvmeSetWriteBehind(size_t bytes) {
  gWriteBehindBytes.store(bytes, std::memory_order_relaxed);
}

Status nvmeAwait(const void *host, size_t bytes) {
  if (!bytes)
    return Status();
  auto begin = reinterpret_cast<uintptr_t>(host);
  std::vector<std::shared_ptr<IoJob>> jobs =
      PendingReads::get().into(begin, begin + bytes);
  if (jobs.empty())
    return Status();
  Status s = waitAll(jobs);
  PendingReads::get().forget(jobs, /*failedToo=*/true);
  return s;
}

void nvmeDrain() {
  std::vector<std::shared_ptr<IoJob>> jobs = PendingReads::get().all();
  (void)waitAll(jobs);
  PendingReads::get().forget(jobs, /*failedToo=*/false);
  (void)nvmeFlush();
}

NvmeTraffic nvmeTraffic() {
  NvmeTraffic t;
  t.readBytes = gReadBytes.load();
  t.writtenBytes = gWrittenBytes.load();
  return t;
}

size_t nvmeBytes() { return Registry::get().total(); }

} // namespace dsc::io
