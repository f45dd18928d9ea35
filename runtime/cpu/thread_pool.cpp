//===- thread_pool.cpp - The CPU kernels' worker threads ------------------===//
//
// parallelFor's chunks run on workers started once per process instead of
// threads created per call: a host task of an offloaded step calls the CPU
// kernels a hundred times a step, and creating 16 threads each time cost
// more than small kernels' work.
//
//===----------------------------------------------------------------------===//

#include "cpu/kernel_util.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>

namespace dsc::cpu::detail {

namespace {

/// One runChunks call: its chunks are taken one at a time by whoever is
/// free (a worker or the caller), and the caller waits for the last.
struct Job {
  const std::function<void(int64_t)> *chunk = nullptr;
  int64_t chunks = 0;
  int64_t next = 1; // chunk 0 is the caller's
  int64_t done = 0;
  std::exception_ptr error; // the first chunk that threw (guarded by m_)
};

/// Runs one chunk; what it throws is kept for the caller, who rethrows it
/// once every chunk is done (the job lives on the caller's stack).
void runOne(Job &job, int64_t c, std::mutex &m) {
  try {
    (*job.chunk)(c);
  } catch (...) {
    std::lock_guard<std::mutex> lock(m);
    if (!job.error)
      job.error = std::current_exception();
  }
}

class Pool {
public:
  static Pool &get() {
    static Pool *pool = new Pool(); // never destroyed: workers may run at exit
    return *pool;
  }

  void run(int64_t chunks, const std::function<void(int64_t)> &chunk) {
    if (chunks <= 1 || inWorker() || workers_ == 0) {
      for (int64_t c = 0; c < chunks; ++c)
        chunk(c);
      return;
    }
    Job job;
    job.chunk = &chunk;
    job.chunks = chunks;
    {
      std::lock_guard<std::mutex> lock(m_);
      jobs_.push_back(&job);
    }
    wake_.notify_all();
    runOne(job, 0, m_);
    std::unique_lock<std::mutex> lock(m_);
    ++job.done;
    // Help with this job's chunks until none is left, then wait for the rest.
    while (job.next < job.chunks) {
      int64_t c = job.next++;
      if (job.next == job.chunks)
        remove(&job);
      lock.unlock();
      runOne(job, c, m_);
      lock.lock();
      ++job.done;
    }
    finished_.wait(lock, [&] { return job.done == job.chunks; });
    if (job.error)
      std::rethrow_exception(job.error);
  }

private:
  /// DSC_HOST_THREADS threads in all (the caller among them), else one per
  /// hardware thread: fewer leave cores to the process's other threads (the
  /// CUDA driver's, the step's own) while an offloaded AdamW runs.
  Pool() {
    unsigned hw = std::thread::hardware_concurrency();
    if (const char *env = std::getenv("DSC_HOST_THREADS")) {
      char *end = nullptr;
      long n = std::strtol(env, &end, 10);
      if (end != env && !*end && n >= 1 && n <= 4096)
        hw = unsigned(n);
    }
    workers_ = hw > 1 ? int(hw) - 1 : 0;
    for (int i = 0; i < workers_; ++i)
      std::thread([this] { work(); }).detach();
  }

  static bool &inWorker() {
    static thread_local bool worker = false;
    return worker;
  }

  void remove(Job *job) {
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
      if (*it == job) {
        jobs_.erase(it);
        return;
      }
  }

  void work() {
    inWorker() = true;
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      wake_.wait(lock, [&] { return !jobs_.empty(); });
      Job *job = jobs_.front();
      int64_t c = job->next++;
      if (job->next == job->chunks)
        remove(job);
      lock.unlock();
      runOne(*job, c, m_);
      lock.lock();
      if (++job->done == job->chunks)
        finished_.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable wake_, finished_;
  std::deque<Job *> jobs_;
  int workers_ = 0;
};

} // namespace

void runChunks(int64_t chunks, const std::function<void(int64_t)> &chunk) {
  Pool::get().run(chunks, chunk);
}

} // namespace dsc::cpu::detail
