//===- ThreadPoolTest.cpp - parallelFor on the persistent workers ---------===//

#include "cpu/kernel_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <thread>
#include <vector>

using dsc::cpu::detail::parallelFor;

namespace {

/// Every index of [0, n) is visited exactly once, by chunks of the split.
void expectOnce(int64_t n, int threads, int64_t minChunk) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  parallelFor(n, threads, minChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      seen[size_t(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(seen[size_t(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, EveryIndexOnce) {
  for (int64_t n : {0, 1, 7, 1000, 100003})
    for (int threads : {0, 1, 3, 16, 64})
      expectOnce(n, threads, 1);
}

// Several threads at once (in-process ranks, a host task beside the main
// thread), and a parallelFor inside a chunk: all finish, each index once.
TEST(ThreadPool, ConcurrentAndNestedCalls) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 6; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep)
        parallelFor(64, 0, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            parallelFor(100, 0, 1, [&](int64_t b2, int64_t e2) {
              total.fetch_add(e2 - b2);
            });
        });
    });
  for (auto &c : callers)
    c.join();
  EXPECT_EQ(total.load(), int64_t(6) * 20 * 64 * 100);
}

// A chunk that throws (out of memory in a kernel): every other chunk still
// finishes, and the caller gets the exception once they have.
TEST(ThreadPool, AThrowingChunkReachesTheCaller) {
  std::atomic<int64_t> ran{0};
  bool caught = false;
  try {
    parallelFor(64, 0, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        ran.fetch_add(1);
        if (i == 37)
          throw std::bad_alloc();
      }
    });
  } catch (const std::bad_alloc &) {
    caught = true;
  }
  EXPECT_TRUE(caught);
  EXPECT_GE(ran.load(), 38);
  // The pool still works.
  expectOnce(1000, 0, 1);
}

} // namespace
