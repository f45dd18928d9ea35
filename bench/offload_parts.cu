// offload_parts: what an offloaded AdamW step is made of, on this machine.
// Times, over N fp32 elements in pinned host memory: the runtime's host
// AdamW (dsc::cpu::adamwMulti, with the bf16 compute copy, in entries of
// ~32M elements as dsc-offload's chunks), the copies of N fp32 gradients
// down and N bf16 copies up, and both copy directions while the AdamW runs
// (what the host's memory bandwidth allows at once).
//
//   nvcc -O2 -std=c++17 -I runtime/include -I runtime bench/offload_parts.cu \
//     build/runtime/libDscRuntime.a -o offload_parts
//   ./offload_parts [N (default 536870912)]
#include "cpu/step_kernels.h"
#include "dsc/runtime.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void *pinned(size_t bytes) {
  void *p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  std::memset(p, 0, bytes);
  return p;
}

dsc::Tensor scalar(float *p, float v) {
  *p = v;
  return dsc::Tensor::of(p, dsc::DType::F32, {});
}

} // namespace

int main(int argc, char **argv) {
  using dsc::DType;
  using dsc::Tensor;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t(1) << 29;
  const int64_t chunk = int64_t(1) << 25;
  float *p = static_cast<float *>(pinned(n * 4));
  float *g = static_cast<float *>(pinned(n * 4));
  float *m = static_cast<float *>(pinned(n * 4));
  float *v = static_cast<float *>(pinned(n * 4));
  uint16_t *c = static_cast<uint16_t *>(pinned(n * 2));
  for (int64_t i = 0; i < n; ++i)
    p[i] = 0.01f * float(i % 97), g[i] = 1e-3f * float(i % 13);
  float s[7];
  int64_t step = 1;
  Tensor lr = scalar(&s[0], 1e-3f), b1 = scalar(&s[1], 0.9f),
         b2 = scalar(&s[2], 0.999f), eps = scalar(&s[3], 1e-8f),
         wd = scalar(&s[4], 0.01f);
  Tensor st = Tensor::of(&step, DType::I64, {});
  std::vector<dsc::cpu::AdamwTensors> entries;
  for (int64_t b = 0; b < n; b += chunk) {
    int64_t k = std::min(chunk, n - b);
    Tensor tp = Tensor::of(p + b, DType::F32, {k}),
           tg = Tensor::of(g + b, DType::F32, {k}),
           tm = Tensor::of(m + b, DType::F32, {k}),
           tv = Tensor::of(v + b, DType::F32, {k}),
           tc = Tensor::of(c + b, DType::BF16, {k});
    entries.push_back({tp, tg, tm, tv, tp, tm, tv, tc});
  }
  auto adamw = [&] {
    for (auto &e : entries) // one call per chunk, as the host tasks
      if (dsc::Status r = dsc::cpu::adamwMulti(&e, 1, lr, b1, b2, eps, wd, st);
          !r.ok()) {
        std::fprintf(stderr, "adamw: %s\n", r.message().c_str());
        std::exit(1);
      }
  };
  void *dg = nullptr, *dc = nullptr;
  check(cudaMalloc(&dg, n * 4), "cudaMalloc");
  check(cudaMalloc(&dc, n * 2), "cudaMalloc");
  cudaStream_t down, up;
  check(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking), "stream");
  check(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking), "stream");
  const double gb = 1e9;
  std::printf("N = %lld elements, %u host threads\n", (long long)n,
              std::thread::hardware_concurrency());
  adamw(); // warm-up (pages, workers)
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = now();
    adamw();
    double ta = now() - t0;
    t0 = now();
    check(cudaMemcpyAsync(g, dg, n * 4, cudaMemcpyDeviceToHost, down), "d2h");
    check(cudaStreamSynchronize(down), "sync");
    double td = now() - t0;
    t0 = now();
    check(cudaMemcpyAsync(dc, c, n * 2, cudaMemcpyHostToDevice, up), "h2d");
    check(cudaStreamSynchronize(up), "sync");
    double tu = now() - t0;
    // All three at once: the copies run while the AdamW does.
    t0 = now();
    check(cudaMemcpyAsync(g, dg, n * 4, cudaMemcpyDeviceToHost, down), "d2h");
    check(cudaMemcpyAsync(dc, c, n * 2, cudaMemcpyHostToDevice, up), "h2d");
    adamw();
    double tAdam = now() - t0;
    check(cudaStreamSynchronize(down), "sync");
    check(cudaStreamSynchronize(up), "sync");
    double tAll = now() - t0;
    std::printf(
        "rep %d: adamw %.1f ms (%.2f ns/elem, %.1f GB/s of 30 B/elem) | "
        "down %.1f ms (%.1f GB/s) | up %.1f ms (%.1f GB/s) | all at once "
        "%.1f ms (adamw done at %.1f) vs sum %.1f\n",
        rep, ta * 1e3, ta * 1e9 / double(n), 30.0 * double(n) / ta / gb,
        td * 1e3, 4.0 * double(n) / td / gb, tu * 1e3,
        2.0 * double(n) / tu / gb, tAll * 1e3, tAdam * 1e3,
        (ta + td + tu) * 1e3);
  }
  return 0;
}
