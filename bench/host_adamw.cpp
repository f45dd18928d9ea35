// host_adamw: the host AdamW of an offloaded step on this machine's CPU,
// without a GPU. Times dsc::cpu::adamwMulti over N fp32 elements in
// entries of ~32M elements (dsc-offload's chunks), with the bf16 compute
// copy written (what an offloaded bf16 step runs) and without, and the
// memory traffic each implies (param, grad, m, v read; param, m, v
// written; 2 more bytes with the copy).
//
//   c++ -O2 -std=c++17 -I runtime/include -I runtime bench/host_adamw.cpp \
//     build/runtime/libDscRuntime.a -lpthread -o host_adamw
//   ./host_adamw [N (default 67108864)] [threads (default 0: all)]
#include "cpu/step_kernels.h"
#include "dsc/runtime.h"

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
        if (dsc::Status r = dsc::cpu::adamwMulti(&e, 1, lr, b1, b2, eps, wd, st,
                                                 Tensor(), Tensor(), threads);
            !r.ok()) {
          std::fprintf(stderr, "adamw: %s\n", r.message().c_str());
          return 1;
        }
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
  return 0;
}
