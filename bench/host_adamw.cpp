// host_adamw: the host AdamW of an offloaded step on this machine's CPU,
// without a GPU. Times dsc::cpu::adamwMulti over N fp32 elements in
// entries of ~32M elements (dsc-offload's chunks), with the bf16 compute
// copy written (what an offloaded bf16 step runs) and without, and the
// memory traffic each implies (param, grad, m, v read; param, m, v
// written; 2 more bytes with the copy). With a directory, the same update
// with param, m and v in NVMe files (--offload-optimizer nvme) in chunks of
// 8M elements, staged through host memory as the generated step does:
// each chunk read, updated and written through in turn; with the next
// chunk's read started before the chunk updates (the step's prefetch);
// and with that and the writes behind (the step's default), each run
// ending when every write is on the disk.
//
//   c++ -O2 -std=c++17 -I runtime/include -I runtime bench/host_adamw.cpp
//     build/runtime/libDscRuntime.a -lpthread -ldl -o host_adamw   (one line)
//   ./host_adamw [N (default 67108864)] [threads (default 0: all)] [DIR]
#include "cpu/offload.h"
#include "cpu/step_kernels.h"
#include "dsc/runtime.h"
#include "io/nvme.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

dsc::Tensor scalar(float *p, float v) {
  *p = v;
  return dsc::Tensor::of(p, dsc::DType::F32, {});
}

void check(const dsc::Status &s, const char *what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

/// The update of n elements whose param, m and v live in NVMe files under
/// `dir`, in chunks, staged through two sets of host buffers; with
/// `prefetch` chunk k + 1's reads start before chunk k updates. Returns the
/// median seconds of 5 runs after a warm-up.
double nvmeRun(const std::string &dir, int64_t n, int threads, bool prefetch,
               const std::vector<float> &g, const dsc::Tensor (&h)[5],
               const dsc::Tensor &st) {
  using dsc::DType;
  using dsc::Tensor;
  const int64_t chunk = int64_t(1) << 23;
  float *file[3];
  for (int i = 0; i < 3; ++i) {
    void *p = nullptr;
    check(dsc::io::nvmeAllocate(dir, size_t(n) * 4, "state", &p), "allocate");
    file[i] = static_cast<float *>(p);
    for (int64_t e = 0; e < n; ++e)
      file[i][e] = i == 0 ? 0.01f * float(e % 97) : 0.0f;
    check(dsc::io::nvmeEvict(p, size_t(n) * 4), "evict");
  }
  std::vector<float> stage[2][3];
  for (auto &set : stage)
    for (auto &b : set)
      b.assign(size_t(chunk), 0.0f);
  auto view = [](float *p, int64_t k) {
    return Tensor::of(p, DType::F32, {k});
  };
  auto read = [&](int64_t b, int set) {
    int64_t k = std::min(chunk, n - b);
    for (int i = 0; i < 3; ++i)
      check(dsc::cpu::nvmeRead(view(file[i] + b, k),
                               view(stage[set][i].data(), k), "read"),
            "read");
  };
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    double t0 = now();
    if (prefetch)
      read(0, 0);
    for (int64_t b = 0, c = 0; b < n; b += chunk, ++c) {
      int set = prefetch ? int(c % 2) : 0;
      int64_t k = std::min(chunk, n - b);
      if (!prefetch)
        read(b, set);
      Tensor t[3] = {view(stage[set][0].data(), k),
                     view(stage[set][1].data(), k),
                     view(stage[set][2].data(), k)};
      check(dsc::cpu::detail::awaitNvmeReads(t, 3), "await");
      if (prefetch && b + chunk < n)
        read(b + chunk, 1 - set);
      dsc::cpu::AdamwTensors e{t[0], view(const_cast<float *>(&g[b]), k),
                               t[1], t[2],
                               t[0], t[1],
                               t[2], Tensor()};
      check(dsc::cpu::adamwMulti(&e, 1, h[0], h[1], h[2], h[3], h[4], st,
                                 Tensor(), Tensor(), threads),
            "adamw");
      for (int i = 0; i < 3; ++i)
        check(dsc::cpu::nvmeWrite(t[i], view(file[i] + b, k), "write"),
              "write");
    }
    // The step's end: every write is on the disk.
    check(dsc::cpu::offloadJoin(), "join");
    times.push_back(now() - t0);
  }
  for (float *p : file)
    dsc::io::nvmeRelease(p);
  std::sort(times.begin() + 1, times.end());
  return times[times.size() / 2 + 1];
}

} // namespace

int main(int argc, char **argv) {
  using dsc::DType;
  using dsc::Tensor;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t(1) << 26;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  const int64_t chunk = int64_t(1) << 25;
  std::vector<float> p(n), g(n), m(n), v(n);
  std::vector<uint16_t> c(n);
  for (int64_t i = 0; i < n; ++i)
    p[i] = 0.01f * float(i % 97), g[i] = 1e-3f * float(i % 13);
  float s[5];
  int64_t step = 1;
  Tensor lr = scalar(&s[0], 1e-3f), b1 = scalar(&s[1], 0.9f),
         b2 = scalar(&s[2], 0.999f), eps = scalar(&s[3], 1e-8f),
         wd = scalar(&s[4], 0.01f);
  Tensor st = Tensor::of(&step, DType::I64, {});
  for (bool withCopy : {true, false}) {
    std::vector<dsc::cpu::AdamwTensors> entries;
    for (int64_t b = 0; b < n; b += chunk) {
      int64_t k = std::min(chunk, n - b);
      Tensor tp = Tensor::of(&p[b], DType::F32, {k}),
             tg = Tensor::of(&g[b], DType::F32, {k}),
             tm = Tensor::of(&m[b], DType::F32, {k}),
             tv = Tensor::of(&v[b], DType::F32, {k}),
             tc = withCopy ? Tensor::of(&c[b], DType::BF16, {k}) : Tensor();
      entries.push_back({tp, tg, tm, tv, tp, tm, tv, tc});
    }
    std::vector<double> times;
    for (int rep = 0; rep < 6; ++rep) {
      double t0 = now();
      for (auto &e : entries) // one call per chunk, as the host tasks
        check(dsc::cpu::adamwMulti(&e, 1, lr, b1, b2, eps, wd, st, Tensor(),
                                   Tensor(), threads),
              "adamw");
      times.push_back(now() - t0);
    }
    std::sort(times.begin() + 1, times.end()); // rep 0: warm-up
    double t = times[times.size() / 2 + 1];
    double bytes = (withCopy ? 30.0 : 28.0) * double(n);
    std::printf("%s: median %.1f ms over 5 reps (%.2f ns/element, %.1f GB/s "
                "of %s B/element)\n",
                withCopy ? "adamw + bf16 copy" : "adamw alone", t * 1e3,
                t * 1e9 / double(n), bytes / t / 1e9, withCopy ? "30" : "28");
  }
  if (argc > 3) {
    const Tensor hypers[5] = {lr, b1, b2, eps, wd};
    struct Mode {
      bool prefetch, behind;
      const char *what;
    } modes[] = {
        {false, false, "read, update, write through, in turn"},
        {true, false, "next chunk read while one updates, write through"},
        {true, true, "next chunk read while one updates, write behind"}};
    for (const Mode &mode : modes) {
      dsc::io::nvmeSetWriteBehind(mode.behind ? size_t(1) << 30 : 0);
      double t = nvmeRun(argv[3], n, threads, mode.prefetch, g, hypers, st);
      std::printf("nvme (%s), chunks of 8M: median %.1f ms over 5 reps "
                  "(%.2f ns/element, %.2f GB/s of file traffic, 24 B/element)"
                  "\n",
                  mode.what, t * 1e3, t * 1e9 / double(n),
                  24.0 * double(n) / t / 1e9);
    }
  }
  return 0;
}
