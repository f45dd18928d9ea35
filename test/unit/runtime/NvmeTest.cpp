//===- NvmeTest.cpp - io/nvme.h, cpu::nvmeRead and cpu::nvmeWrite ---------===//
//
// A region of nvmeAllocate is a file unlinked at once and mapped: written
// through the mapping and evicted, it reads back the same; nvmeWrite and
// nvmeRead move tensors larger than one I/O piece, and parts of them at odd
// offsets, from several callers at once, in step with what the mapping
// shows, and count the bytes. Writes go behind: their source is free at
// once, reads and flushes wait for them, a failure stays with its file.
// Then the errors, each by its message, and isNvme at a region's edges.
//
//===----------------------------------------------------------------------===//

#include "io/nvme.h"
#include "GradCheck.h"
#include "TempDir.h"
#include "cpu/offload.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/resource.h>
#include <thread>
#include <vector>

namespace dsc::test {
namespace {

/// A region of nvmeAllocate, released at the end of the test.
struct NvmeBuffer {
  void *data = nullptr;
  Status status;
  NvmeBuffer(const std::string &dir, size_t bytes, const std::string &what) {
    status = io::nvmeAllocate(dir, bytes, what, &data);
  }
  ~NvmeBuffer() { io::nvmeRelease(data); }
  NvmeBuffer(const NvmeBuffer &) = delete;
  NvmeBuffer &operator=(const NvmeBuffer &) = delete;
  float *f32() const { return static_cast<float *>(data); }
};

size_t filesIn(const std::filesystem::path &dir) {
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator(dir);
       it != std::filesystem::directory_iterator(); ++it)
    ++n;
  return n;
}

/// A pattern that differs element by element and from `seed` to seed.
std::vector<float> pattern(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = seed + float(i % 65521) * 0.25f;
  return v;
}

Tensor f32(void *data, int64_t n) { return Tensor::of(data, DType::F32, {n}); }

/// The process's file size limit at `bytes` (a write past it fails with
/// EFBIG, SIGXFSZ ignored) until the end of the scope; `set` says whether
/// it took.
struct FileSizeLimit {
  struct rlimit old{};
  void (*oldHandler)(int) = SIG_DFL;
  bool set = false;
  explicit FileSizeLimit(rlim_t bytes) {
    if (getrlimit(RLIMIT_FSIZE, &old) != 0)
      return;
    struct rlimit small = old;
    small.rlim_cur = bytes;
    oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    set = setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);
  }
  FileSizeLimit(const FileSizeLimit &) = delete;
  FileSizeLimit &operator=(const FileSizeLimit &) = delete;
};

/// cpu::nvmeRead, then the wait a host task naming dst makes before it runs
/// (the read itself runs on the I/O threads).
Status readNow(const Tensor &src, const Tensor &dst, const char *what) {
  if (Status s = cpu::nvmeRead(src, dst, what); !s.ok())
    return s;
  return cpu::detail::awaitNvmeReads(&dst, 1);
}

TEST(Nvme, AMappedFileThatLeavesNothingBehind) {
  TempDir dir("dsc-nvme");
  const size_t bytes = 3 * 4096 + 1234; // not whole pages
  size_t before = io::nvmeBytes();
  {
    NvmeBuffer buf(dir.str(), bytes, "optimizer state 'w/exp_avg'");
    ASSERT_TRUE(buf.status.ok()) << buf.status.message();
    ASSERT_NE(buf.data, nullptr);
    EXPECT_EQ(filesIn(dir.path), 0u); // unlinked at once
    EXPECT_EQ(io::nvmeBytes(), before + bytes);
    EXPECT_TRUE(io::isNvme(buf.data, bytes));
    const unsigned char *p = static_cast<unsigned char *>(buf.data);
    for (size_t i = 0; i < bytes; ++i)
      ASSERT_EQ(p[i], 0) << i; // zero-filled
    std::vector<unsigned char> written(bytes);
    for (size_t i = 0; i < bytes; ++i)
      written[i] = static_cast<unsigned char>(i * 7 + 3);
    std::memcpy(buf.data, written.data(), bytes);
    DSC_EXPECT_OK(io::nvmeEvict(buf.data, bytes));
    EXPECT_EQ(std::memcmp(buf.data, written.data(), bytes), 0);
    // A part of it, at an offset inside a page.
    DSC_EXPECT_OK(io::nvmeEvict(p + 5000, 100));
    EXPECT_EQ(std::memcmp(buf.data, written.data(), bytes), 0);
  }
  EXPECT_EQ(io::nvmeBytes(), before);
  EXPECT_EQ(filesIn(dir.path), 0u);
  void *none = reinterpret_cast<void *>(1);
  DSC_EXPECT_OK(io::nvmeAllocate(dir.str(), 0, "empty", &none));
  EXPECT_EQ(none, nullptr);
  io::nvmeRelease(nullptr); // nothing
}

TEST(Nvme, WriteAndReadBackMorePiecesThanThreads) {
  TempDir dir("dsc-nvme");
  // 20 MiB and an odd tail: three 8 MiB pieces, the last short.
  const int64_t n = (int64_t(20) << 20) / 4 + 1237;
  const size_t bytes = size_t(n) * 4;
  NvmeBuffer buf(dir.str(), bytes, "master w");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  Tensor file = f32(buf.data, n);
  std::vector<float> src = pattern(size_t(n), 1.0f), dst(size_t(n), -1.0f);
  io::NvmeTraffic t0 = io::nvmeTraffic();
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(src.data(), n), file, "master w"));
  // Once flushed, the mapping shows what was written to the file.
  DSC_EXPECT_OK(io::nvmeFlush());
  EXPECT_EQ(std::memcmp(buf.data, src.data(), bytes), 0);
  DSC_EXPECT_OK(readNow(file, f32(dst.data(), n), "master w"));
  EXPECT_EQ(dst, src);
  io::NvmeTraffic t1 = io::nvmeTraffic();
  EXPECT_EQ(t1.writtenBytes - t0.writtenBytes, bytes);
  EXPECT_EQ(t1.readBytes - t0.readBytes, bytes);

  // A part at an offset that is no multiple of a page, across pieces.
  const int64_t at = 777, count = (int64_t(9) << 20) / 4 + 5;
  std::vector<float> part = pattern(size_t(count), 9000.0f);
  Tensor view = f32(buf.f32() + at, count);
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(part.data(), count), view, "part"));
  std::vector<float> expected = src;
  std::copy(part.begin(), part.end(), expected.begin() + at);
  DSC_EXPECT_OK(readNow(file, f32(dst.data(), n), "whole"));
  EXPECT_EQ(dst, expected);
  std::vector<float> back(static_cast<size_t>(count));
  DSC_EXPECT_OK(readNow(view, f32(back.data(), count), "part"));
  EXPECT_EQ(back, part);

  // What the shell writes through the mapping, nvmeRead reads.
  buf.f32()[n - 1] = 42.0f;
  float last = 0;
  DSC_EXPECT_OK(readNow(f32(buf.f32() + n - 1, 1), f32(&last, 1), "l"));
  EXPECT_EQ(last, 42.0f);
  io::NvmeTraffic t2 = io::nvmeTraffic();
  EXPECT_EQ(t2.writtenBytes - t1.writtenBytes, size_t(count) * 4);
  EXPECT_EQ(t2.readBytes - t1.readBytes, bytes + size_t(count) * 4 + 4);
}

TEST(Nvme, AReadIsWaitedForByWhatNextTouchesItsDestination) {
  // nvmeRead returns while the I/O threads still fill dst: the host task
  // that names dst (read or written), an offloadCopy into dst and
  // offloadJoin each wait for the read first.
  TempDir dir("dsc-nvme");
  const int64_t n = (int64_t(24) << 20) / 4 + 11; // four pieces
  NvmeBuffer buf(dir.str(), size_t(n) * 4, "exp_avg");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  Tensor file = f32(buf.data, n);
  std::vector<float> src = pattern(size_t(n), 3.0f);
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(src.data(), n), file, "exp_avg"));
  std::vector<float> dst(size_t(n), -1.0f);
  Tensor into = f32(dst.data(), n);
  for (bool asWrite : {false, true}) {
    std::fill(dst.begin(), dst.end(), -1.0f);
    DSC_EXPECT_OK(cpu::nvmeRead(file, into, "exp_avg"));
    bool same = false;
    auto check = [&] {
      same = dst == src;
      return Status();
    };
    DSC_EXPECT_OK(asWrite ? cpu::hostTask(0, check, "adamw", {}, {into})
                          : cpu::hostTask(0, check, "adamw", {into}, {}));
    EXPECT_TRUE(same) << (asWrite ? "named as written" : "named as read");
  }
  // A copy into the destination lands after the read, not under it.
  std::vector<float> other(size_t(n), 7.0f);
  DSC_EXPECT_OK(cpu::nvmeRead(file, into, "exp_avg"));
  DSC_EXPECT_OK(cpu::offloadCopy(f32(other.data(), n), into, true, "grad"));
  EXPECT_EQ(dst, other);
  std::fill(dst.begin(), dst.end(), -1.0f);
  DSC_EXPECT_OK(cpu::nvmeRead(file, into, "exp_avg"));
  DSC_EXPECT_OK(cpu::offloadJoin());
  EXPECT_EQ(dst, src);
}

TEST(Nvme, ADrainLeavesAReadForItsOwnWait) {
  // Another rank's join drains every read in flight; the host task that
  // reads the bytes still finds its read, finished, and the data whole.
  TempDir dir("dsc-nvme");
  const int64_t n = (int64_t(24) << 20) / 4 + 5;
  NvmeBuffer buf(dir.str(), size_t(n) * 4, "exp_avg");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  std::vector<float> src = pattern(size_t(n), 5.0f), dst(size_t(n), -1.0f);
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(src.data(), n), f32(buf.data, n), "m"));
  Tensor into = f32(dst.data(), n);
  DSC_EXPECT_OK(cpu::nvmeRead(f32(buf.data, n), into, "m"));
  std::thread other([] { io::nvmeDrain(); });
  other.join();
  bool same = false;
  DSC_EXPECT_OK(cpu::hostTask(0,
                              [&] {
                                same = dst == src;
                                return Status();
                              },
                              "adamw", {into}, {}));
  EXPECT_TRUE(same);
}

TEST(Nvme, SeveralCallersAtOnce) {
  TempDir dir("dsc-nvme");
  const int callers = 4;
  const int64_t each = (int64_t(10) << 20) / 4 + 3; // two pieces each
  NvmeBuffer buf(dir.str(), size_t(callers * each) * 4, "exp_avg_sq");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  std::vector<Status> st(callers);
  std::vector<std::vector<float>> out(callers);
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c)
    threads.emplace_back([&, c] {
      std::vector<float> in = pattern(size_t(each), float(c) * 100);
      Tensor slice = f32(buf.f32() + c * each, each);
      out[size_t(c)].assign(size_t(each), 0);
      st[size_t(c)] = cpu::nvmeWrite(f32(in.data(), each), slice, "w");
      if (st[size_t(c)].ok())
        st[size_t(c)] = readNow(slice, f32(out[size_t(c)].data(), each), "r");
    });
  for (std::thread &t : threads)
    t.join();
  for (int c = 0; c < callers; ++c) {
    EXPECT_TRUE(st[size_t(c)].ok()) << st[size_t(c)].message();
    EXPECT_EQ(out[size_t(c)], pattern(size_t(each), float(c) * 100)) << c;
  }
}

TEST(Nvme, AWriteBehindFreesItsSourceAtOnceAndIsReadInOrder) {
  // nvmeWrite returns once the bytes are copied aside: the source may be
  // overwritten at once (the memory plan reuses a host frame), and a read
  // of the file bytes started before the write is on the disk still reads
  // what was written, as does the mapping after the flush.
  TempDir dir("dsc-nvme");
  const int64_t n = (int64_t(24) << 20) / 4 + 7; // four pieces
  const size_t bytes = size_t(n) * 4;
  NvmeBuffer buf(dir.str(), bytes, "exp_avg");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  Tensor file = f32(buf.data, n);
  std::vector<float> first = pattern(size_t(n), 2.0f),
                     second = pattern(size_t(n), 4000.0f);
  std::vector<float> src = first, dst(size_t(n), -1.0f);
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(src.data(), n), file, "exp_avg"));
  std::fill(src.begin(), src.end(), -2.0f);
  DSC_EXPECT_OK(readNow(file, f32(dst.data(), n), "exp_avg"));
  EXPECT_EQ(dst, first);
  // Two writes of the same bytes land in their order.
  src = first;
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(src.data(), n), file, "exp_avg"));
  src = second;
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(src.data(), n), file, "exp_avg"));
  DSC_EXPECT_OK(io::nvmeFlush());
  EXPECT_EQ(std::memcmp(buf.data, second.data(), bytes), 0);
  // A budget smaller than one write: each waits for the one before.
  io::nvmeSetWriteBehind(size_t(1) << 20);
  for (float seed : {10.0f, 20.0f, 30.0f}) {
    src = pattern(size_t(n), seed);
    DSC_EXPECT_OK(cpu::nvmeWrite(f32(src.data(), n), file, "exp_avg"));
  }
  DSC_EXPECT_OK(readNow(file, f32(dst.data(), n), "exp_avg"));
  EXPECT_EQ(dst, pattern(size_t(n), 30.0f));
  // No budget: written through before nvmeWrite returns.
  io::nvmeSetWriteBehind(0);
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(first.data(), n), file, "exp_avg"));
  EXPECT_EQ(std::memcmp(buf.data, first.data(), bytes), 0);
  io::nvmeSetWriteBehind(size_t(1) << 30);
  // The step's end waits for every write.
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(second.data(), n), file, "exp_avg"));
  DSC_EXPECT_OK(cpu::offloadJoin());
  EXPECT_EQ(std::memcmp(buf.data, second.data(), bytes), 0);
}

TEST(Nvme, AFailedWriteBehindFailsTheStepsEndAndEveryLaterRead) {
  // A write past the file size limit fails on the I/O threads, after
  // nvmeWrite returned: the flush (the step's end) reports it, and so does
  // every later flush and read of that file, until it is released.
  TempDir dir("dsc-nvme");
  const int64_t n = (int64_t(16) << 20) / 4;
  NvmeBuffer buf(dir.str(), size_t(n) * 4, "exp_avg_sq");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  std::vector<float> src = pattern(size_t(n / 2), 1.0f);
  Tensor tail = f32(buf.f32() + n / 2, n / 2); // at 8 MiB
  Status wrote, flushed;
  {
    FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.set);
    wrote = cpu::nvmeWrite(f32(src.data(), n / 2), tail, "exp_avg_sq");
    flushed = io::nvmeFlush();
  }
  DSC_EXPECT_OK(wrote);
  ASSERT_FALSE(flushed.ok());
  EXPECT_EQ(flushed.code(), StatusCode::IoError);
  const std::string prefix =
      "nvme_write: writing " + dir.str() + "/dsc-nvme-exp_avg_sq-";
  EXPECT_EQ(flushed.message().rfind(prefix, 0), 0u) << flushed.message();
  EXPECT_NE(flushed.message().find(" at offset 8388608: File too large"),
            std::string::npos)
      << flushed.message();
  Status joined = cpu::offloadJoin();
  EXPECT_EQ(joined.message(), flushed.message());
  std::vector<float> back(size_t(n / 2));
  Status read = readNow(tail, f32(back.data(), n / 2), "exp_avg_sq");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.message().find(": an earlier write into it failed: writing "),
            std::string::npos)
      << read.message();
  io::nvmeRelease(buf.data);
  buf.data = nullptr;
  DSC_EXPECT_OK(io::nvmeFlush());
}

TEST(Nvme, ADirectoryThatIsMissingOrAFile) {
  TempDir dir("dsc-nvme");
  void *p = reinterpret_cast<void *>(1);
  std::string missing = dir.str() + "/missing";
  Status s = io::nvmeAllocate(missing, 4096, "optimizer state 'w'", &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::IoError);
  EXPECT_EQ(s.message(), "NVMe file for optimizer state 'w' in " + missing +
                             ": no such directory (No such file or "
                             "directory)");
  EXPECT_EQ(p, nullptr);
  std::string file = dir.str() + "/file";
  std::ofstream(file) << "x";
  s = io::nvmeAllocate(file, 4096, "master w", &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "NVMe file for master w in " + file + ": not a directory");
}

TEST(Nvme, AFileSizeLimitFailsAtAllocationNamingTheBytes) {
  // As a full disk: the blocks are reserved up front, so the allocation
  // fails, not a later write through the mapping.
  TempDir dir("dsc-nvme");
  void *p = nullptr;
  Status s;
  {
    FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.set);
    s = io::nvmeAllocate(dir.str(), 1 << 20, "exp_avg", &p);
  }
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "NVMe file for exp_avg in " + dir.str() +
                             ": cannot reserve 1048576 bytes (1.0 MiB) "
                             "(File too large)");
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(filesIn(dir.path), 0u);
}

TEST(Nvme, OperandsNotWhereTheyBelongAreErrors) {
  TempDir dir("dsc-nvme");
  NvmeBuffer buf(dir.str(), 64, "state");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  std::vector<float> a(4), b(5);
  std::vector<uint16_t> h(4);
  Status s = cpu::nvmeRead(f32(a.data(), 4), f32(b.data(), 4), "w");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(s.message(), "nvme_read(what=w, src=f32[4], dst=f32[4]): src "
                         "does not lie in an NVMe file");
  s = cpu::nvmeWrite(f32(a.data(), 4), f32(b.data(), 4), "w");
  EXPECT_EQ(s.message(), "nvme_write(what=w, src=f32[4], dst=f32[4]): dst "
                         "does not lie in an NVMe file");
  s = cpu::nvmeRead(f32(buf.data, 4), f32(buf.f32() + 8, 4), "w");
  EXPECT_EQ(s.message(), "nvme_read(what=w, src=f32[4], dst=f32[4]): dst "
                         "lies in an NVMe file; it must be host memory");
  s = cpu::nvmeRead(f32(buf.data, 4), Tensor::of(h.data(), DType::F16, {4}),
                    "w");
  EXPECT_EQ(s.message(), "nvme_read(what=w, src=f32[4], dst=f16[4]): dtypes "
                         "differ (f32 vs f16)");
  s = cpu::nvmeWrite(f32(a.data(), 4), f32(buf.data, 5), "w");
  EXPECT_EQ(s.message(), "nvme_write(what=w, src=f32[4], dst=f32[5]): "
                         "element counts differ (4 vs 5)");
  // Past the region's end.
  s = cpu::nvmeRead(f32(buf.f32() + 12, 5), f32(b.data(), 5), "w");
  EXPECT_EQ(s.message(), "nvme_read(what=w, src=f32[5], dst=f32[5]): src "
                         "does not lie in an NVMe file");
  // Zero elements: nothing to do, wherever they are.
  DSC_EXPECT_OK(readNow(f32(a.data(), 0), f32(b.data(), 0), "w"));
  DSC_EXPECT_OK(cpu::nvmeWrite(f32(a.data(), 0), f32(b.data(), 0), "w"));
  s = io::nvmeEvict(a.data(), 16);
  EXPECT_EQ(s.message(),
            "nvme_evict: 16 bytes that do not lie in an NVMe file");
}

TEST(Nvme, IsNvmeAtARegionsEdges) {
  TempDir dir("dsc-nvme");
  const size_t bytes = 10000;
  NvmeBuffer buf(dir.str(), bytes, "edges");
  ASSERT_TRUE(buf.status.ok()) << buf.status.message();
  const char *p = static_cast<const char *>(buf.data);
  EXPECT_TRUE(io::isNvme(p, bytes));
  EXPECT_FALSE(io::isNvme(p, bytes + 1)); // into the mapping's last page
  EXPECT_TRUE(io::isNvme(p + bytes - 1, 1));
  EXPECT_FALSE(io::isNvme(p + bytes - 1, 2));
  EXPECT_TRUE(io::isNvme(p + 5000, 0));
  EXPECT_FALSE(io::isNvme(p + bytes, 0));
  EXPECT_FALSE(io::isNvme(p - 1, 2));
  std::vector<char> host(16);
  EXPECT_FALSE(io::isNvme(host.data(), 16));
}

} // namespace
} // namespace dsc::test
