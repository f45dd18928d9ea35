//===- attention_bench.cpp - Times cuda::attention forward and backward ---===//
//
// dsc-attention-bench: median milliseconds over 20 iterations (after 3 of
// warm-up, CUDA events on the rank's compute stream) of cuda::attention and
// cuda::attentionBackward at the layer shapes of GPT-2 124M and
// Llama-3.2-1B, causal, through cuDNN (bf16) and dsc's own kernel (bf16,
// f32). Achieved TFLOP/s use the causal count: 4 * B * H * T^2 * D / 2 for
// the forward, 2.5 times that for the backward. Not run by the tests.
//
//===----------------------------------------------------------------------===//

#include "cuda/attention_cudnn.h"
#include "cuda/context.h"
#include "cuda/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace dsc;

namespace {

struct Shape {
  const char *name;
  int64_t b, hq, hkv, t, d;
};

struct Case {
  Shape shape;
  DType dtype;
  bool cudnn;
};

/// A device tensor of uniform values in [-1, 1) (zeros for results).
struct Buffer {
  Tensor t;
  Buffer(DType dtype, std::vector<int64_t> shape, bool random) {
    t = Tensor::of(nullptr, dtype, I64s(shape));
    cudaMalloc(&t.data, std::max<size_t>(t.nbytes(), 1));
    std::vector<char> host(t.nbytes(), 0);
    if (random)
      fill(host);
    cudaMemcpy(t.data, host.data(), t.nbytes(), cudaMemcpyHostToDevice);
  }
  ~Buffer() { cudaFree(t.data); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

private:
  void fill(std::vector<char> &host) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v = u(rng);
      if (t.dtype == DType::F32)
        reinterpret_cast<float *>(host.data())[i] = v;
      else if (t.dtype == DType::BF16)
        reinterpret_cast<uint16_t *>(host.data())[i] = floatToBfloat16(v);
      else
        reinterpret_cast<uint16_t *>(host.data())[i] = floatToHalf(v);
    }
  }
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Median ms of `fn` (which returns a Status) over `iters` runs.
template <typename Fn> double timeMs(Fn fn, int warmup, int iters) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < warmup; ++i)
    if (Status st = fn(); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return -1;
    }
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, cuda::stream());
    (void)fn();
    cudaEventRecord(stop, cuda::stream());
    cudaEventSynchronize(stop);
    float m = 0;
    cudaEventElapsedTime(&m, start, stop);
    ms.push_back(m);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(ms);
}

void runCase(const Case &c) {
  const Shape &s = c.shape;
  Buffer q(c.dtype, {s.b, s.hq, s.t, s.d}, true);
  Buffer k(c.dtype, {s.b, s.hkv, s.t, s.d}, true);
  Buffer v(c.dtype, {s.b, s.hkv, s.t, s.d}, true);
  Buffer g(c.dtype, {s.b, s.hq, s.t, s.d}, true);
  Buffer out(c.dtype, {s.b, s.hq, s.t, s.d}, false);
  Buffer lse(DType::F32, {s.b, s.hq, s.t}, false);
  Buffer gq(c.dtype, {s.b, s.hq, s.t, s.d}, false);
  Buffer gk(c.dtype, {s.b, s.hkv, s.t, s.d}, false);
  Buffer gv(c.dtype, {s.b, s.hkv, s.t, s.d}, false);
  cuda::AttentionAttrs attrs;
  attrs.scale = 1 / std::sqrt(double(s.d));
  attrs.causal = true;
  cuda::detail::setAttentionCudnnEnabled(c.cudnn);
  int64_t runs = cuda::detail::attentionCudnnForwardRuns();
  double fwd = timeMs(
      [&] {
        return cuda::attention(q.t, k.t, v.t, Tensor(), attrs, out.t, lse.t);
      },
      3, 20);
  bool usedCudnn = cuda::detail::attentionCudnnForwardRuns() > runs;
  double bwd = timeMs(
      [&] {
        return cuda::attentionBackward(q.t, k.t, v.t, Tensor(), out.t, lse.t,
                                       g.t, attrs, gq.t, gk.t, gv.t);
      },
      3, 20);
  double flops = 4.0 * s.b * s.hq * double(s.t) * s.t * s.d / 2;
  std::printf("%-14s %-5s %-6s fwd %8.3f ms %7.2f TFLOP/s   bwd %8.3f ms "
              "%7.2f TFLOP/s\n",
              s.name, dtypeName(c.dtype), usedCudnn ? "cudnn" : "own", fwd,
              flops / fwd * 1e-9, bwd, 2.5 * flops / bwd * 1e-9);
  cuda::detail::setAttentionCudnnEnabled(true);
}

} // namespace

int main() {
  if (Status st = cuda::bindRank(0); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  const Shape gpt2{"gpt2-124m", 16, 12, 12, 1024, 64};
  const Shape llama{"llama3.2-1b", 4, 32, 8, 2048, 64};
  for (const Shape &s : {gpt2, llama})
    for (Case c : {Case{s, DType::BF16, true}, Case{s, DType::BF16, false},
                   Case{s, DType::F32, false}})
      runCase(c);
  return 0;
}
