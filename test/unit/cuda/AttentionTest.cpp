//===- AttentionTest.cpp - CUDA attention against cpu::attention ----------===//
//
// Every case of the CPU tests (test/unit/runtime/AttentionTest.cpp, same
// AttnCase inputs) run by cpu::attention / attentionBackward on the host and
// cuda:: on the device, for both CUDA paths: dsc's own kernel (f32, f64,
// bf16; cuDNN switched off) and cuDNN (bf16, f16). With dropout the own
// kernel must match the CPU's f64 results to 1e-10, which it can only do
// with the CPU's mask bit for bit. A cuDNN case the loaded cuDNN declines
// falls back to the own kernel (and says so); it is still compared.
//
//===----------------------------------------------------------------------===//

#include "../runtime/AttentionReference.h"
#include "TestUtil.h"
#include "cuda/attention_cudnn.h"

#include <cmath>
#include <string>
#include <vector>

namespace dsc::cuda::test {
namespace {

using dsc::test::AttnCase;
using dsc::test::AttnData;
using dsc::test::makeData;
using dsc::test::MaskKind;

enum class Path { Own, Cudnn };

struct Tol {
  double rtol, atol;
};

Tol tolOf(DType dt, Path path) {
  if (dt == DType::F64)
    return {1e-10, 1e-11};
  if (dt == DType::F32)
    return {1e-5, 2e-5};
  if (path == Path::Own) // f32 math, one rounding: at most an ulp apart
    return {1.0 / 64, 4e-3};
  return {3e-2, 3e-2}; // cuDNN rounds P to 16 bits before P V
}

DType lseTypeOf(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

/// The operands and results of one case on host and device.
struct AttnRun {
  DevTensor q, k, v, g, mask;
  DevTensor out[2], lse[2], gq[2], gk[2], gv[2]; // [0] CPU, [1] GPU
  bool hasMask = false;

  AttnRun(const AttnCase &c, const AttnData &x, DType dt)
      : q(dt, c.qShape()), k(dt, c.kShape()), v(dt, c.vShape()),
        g(dt, c.outShape()) {
    q.values(x.q), k.values(x.k), v.values(x.v), g.values(x.gradOut);
    hasMask = c.mask != MaskKind::None;
    if (hasMask) {
      DType mt =
          c.mask == MaskKind::Bool
              ? DType::Bool
              : (dt == DType::F64 ? DType::F64
                                  : (dt == DType::F32 ? DType::F32 : dt));
      mask = DevTensor(mt, c.maskShape);
      mask.values(x.mask);
    }
    for (int i = 0; i < 2; ++i) {
      out[i] = DevTensor(dt, c.outShape());
      lse[i] = DevTensor(lseTypeOf(dt), c.lseShape());
      gq[i] = DevTensor(dt, c.qShape());
      gk[i] = DevTensor(dt, c.kShape());
      gv[i] = DevTensor(dt, c.vShape());
      if (i == 1)
        for (DevTensor *t : {&out[i], &gq[i], &gk[i], &gv[i]})
          t->random(1e3, 2e3, 99); // junk: unwritten elements show
    }
  }
  Tensor maskHost() const { return hasMask ? mask.host() : Tensor(); }
  Tensor maskDev() const { return hasMask ? mask.dev() : Tensor(); }
};

void runCpu(AttnRun &r, const AttnCase &c) {
  DSC_ASSERT_OK(cpu::attention(r.q.host(), r.k.host(), r.v.host(), r.maskHost(),
                               c.attrs, r.out[0].host(), r.lse[0].host()));
  DSC_ASSERT_OK(cpu::attentionBackward(
      r.q.host(), r.k.host(), r.v.host(), r.maskHost(), r.out[0].host(),
      r.lse[0].host(), r.g.host(), c.attrs, r.gq[0].host(), r.gk[0].host(),
      r.gv[0].host()));
}

/// The GPU backward reads the GPU forward's out and lse.
void runGpu(AttnRun &r, const AttnCase &c) {
  DSC_ASSERT_OK(cuda::attention(r.q.dev(), r.k.dev(), r.v.dev(), r.maskDev(),
                                c.attrs, r.out[1].dev(), r.lse[1].dev()));
  DSC_ASSERT_OK(cuda::attentionBackward(
      r.q.dev(), r.k.dev(), r.v.dev(), r.maskDev(), r.out[1].dev(),
      r.lse[1].dev(), r.g.dev(), c.attrs, r.gq[1].dev(), r.gk[1].dev(),
      r.gv[1].dev()));
  ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
}

void checkCase(const AttnCase &c, DType dt, Path path,
               const std::string &name) {
  AttnData x = makeData(c, 7);
  AttnRun r(c, x, dt);
  runCpu(r, c);
  detail::setAttentionCudnnEnabled(path == Path::Cudnn);
  int64_t before = detail::attentionCudnnForwardRuns();
  runGpu(r, c);
  detail::setAttentionCudnnEnabled(true);
  bool cudnnRan = detail::attentionCudnnForwardRuns() > before;
  if (path == Path::Cudnn && !cudnnRan)
    std::printf("[ note ] %s: cuDNN declined, the own kernel ran\n",
                name.c_str());
  if (path == Path::Own) {
    EXPECT_FALSE(cudnnRan) << name;
  }
  Tol t = tolOf(dt, cudnnRan ? Path::Cudnn : Path::Own);
  std::string what =
      name + " " + dtypeName(dt) + (path == Path::Own ? " own" : " cudnn");
  expectClose(r.out[0], r.out[1], t.rtol, t.atol, what + " out");
  expectClose(r.lse[0], r.lse[1], t.rtol, t.atol, what + " lse");
  expectClose(r.gq[0], r.gq[1], t.rtol, t.atol, what + " grad_q");
  expectClose(r.gk[0], r.gk[1], t.rtol, t.atol, what + " grad_k");
  expectClose(r.gv[0], r.gv[1], t.rtol, t.atol, what + " grad_v");
}

/// The own kernel in f64, f32, bf16 and cuDNN in bf16, f16 (unless the case
/// has dropout or a bool mask, which cuDNN does not take).
void checkAll(const AttnCase &c, const std::string &name) {
  for (DType dt : {DType::F64, DType::F32, DType::BF16})
    checkCase(c, dt, Path::Own, name);
  for (DType dt : {DType::BF16, DType::F16})
    checkCase(c, dt, Path::Cudnn, name);
}

AttnCase basic(int64_t t, int64_t d) {
  AttnCase c;
  c.tq = c.tk = t;
  c.d = c.dv = d;
  c.attrs.scale = 1 / std::sqrt(double(d));
  return c;
}

/// Causal grouped-query attention (4 query heads on 2) over 96 tokens with a
/// float mask per batch element of large negatives.
AttnCase maskedCausalGroups(int64_t batch) {
  AttnCase c = basic(96, 64);
  c.b = batch, c.hq = 4, c.hkv = 2;
  c.mask = MaskKind::Float;
  c.maskShape = {batch, 1, 96, 96};
  c.maskNegative = -3.4e38;
  c.attrs.causal = true;
  return c;
}

} // namespace

TEST(CudaAttention, Plain) {
  DSC_REQUIRE_GPU();
  checkAll(basic(40, 64), "plain");
  checkAll(basic(128, 128), "plain d128");
}

TEST(CudaAttention, Causal) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(200, 64);
  c.b = 2;
  c.attrs.causal = true;
  checkAll(c, "causal");
}

TEST(CudaAttention, ValueDim) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(37, 64);
  c.dv = 32;
  c.attrs.causal = true;
  checkAll(c, "dv != d");
}

TEST(CudaAttention, FloatMasks) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(37, 64);
  c.b = 2;
  c.mask = MaskKind::Float;
  c.maskShape = {2, 1, 1, 37};
  checkAll(c, "mask [B,1,1,Tk] -inf");
  c.maskNegative = -3.4e38;
  checkAll(c, "mask [B,1,1,Tk] -3.4e38");
  c.maskShape = {1, 2, 37, 37};
  c.attrs.causal = true;
  checkAll(c, "mask [1,H,Tq,Tk] causal");
}

TEST(CudaAttention, BoolMask) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(65, 64);
  c.mask = MaskKind::Bool;
  c.maskShape = {1, 2, 65, 65};
  c.maskDensity = 0.4;
  checkAll(c, "bool mask");
}

TEST(CudaAttention, FullyMaskedRow) {
  DSC_REQUIRE_GPU();
  for (MaskKind kind : {MaskKind::Float, MaskKind::Bool}) {
    AttnCase c = basic(37, 64);
    c.mask = kind;
    c.maskShape = {1, 1, 37, 37};
    c.emptyRow = 5;
    checkAll(c, kind == MaskKind::Bool ? "empty row bool" : "empty row float");
  }
}

TEST(CudaAttention, GroupedQuery) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(100, 64);
  c.hq = 4, c.hkv = 2;
  c.attrs.causal = true;
  checkAll(c, "gqa 4/2");
  c.hkv = 1;
  checkAll(c, "gqa 4/1");
}

// A backward whose workspace exceeds its limit runs over slices of the
// batch (one element each here, the limit a byte), with a mask of its own
// per element: the same bits as the one call over the whole batch.
TEST(CudaAttention, BatchSlicedBackward) {
  DSC_REQUIRE_GPU();
  AttnCase c = maskedCausalGroups(3);
  AttnData x = makeData(c, 11);
  AttnRun whole(c, x, DType::BF16), sliced(c, x, DType::BF16);
  int64_t before = detail::attentionCudnnBackwardRuns();
  runGpu(whole, c);
  int64_t calls = detail::attentionCudnnBackwardCalls();
  AttnCase limited = c;
  limited.attrs.workspaceLimit = 1;
  runGpu(sliced, limited);
  if (detail::attentionCudnnBackwardRuns() < before + 2) {
    std::printf("[ note ] sliced backward: cuDNN declined\n");
    return;
  }
  EXPECT_EQ(detail::attentionCudnnBackwardCalls() - calls, c.b)
      << "one cuDNN call per batch element";
  EXPECT_TRUE(whole.gq[1].download() == sliced.gq[1].download()) << "grad_q";
  EXPECT_TRUE(whole.gk[1].download() == sliced.gk[1].download()) << "grad_k";
  EXPECT_TRUE(whole.gv[1].download() == sliced.gv[1].download()) << "grad_v";
  runCpu(sliced, c);
  Tol t = tolOf(DType::BF16, Path::Cudnn);
  expectClose(sliced.gq[0], sliced.gq[1], t.rtol, t.atol, "sliced vs cpu gq");
  expectClose(sliced.gk[0], sliced.gk[1], t.rtol, t.atol, "sliced vs cpu gk");
  expectClose(sliced.gv[0], sliced.gv[1], t.rtol, t.atol, "sliced vs cpu gv");
}

TEST(CudaAttention, SlidingWindow) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(150, 64);
  c.attrs.window = 33;
  checkAll(c, "window");
  c.attrs.causal = true;
  checkAll(c, "window causal");
}

TEST(CudaAttention, OddLengths) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(37, 64);
  c.attrs.causal = true;
  checkAll(c, "37 causal");
  c = basic(37, 128);
  c.tk = 91;
  checkAll(c, "37 x 91");
  c.tq = 130, c.tk = 3;
  checkAll(c, "130 x 3");
}

TEST(CudaAttention, DropoutMatchesTheCpuMask) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(77, 64);
  c.hq = 4, c.hkv = 2;
  c.attrs.causal = true;
  c.attrs.dropout = 0.3;
  c.attrs.seed = 1234;
  // cuDNN does not take dropout: both paths run the own kernel.
  checkAll(c, "dropout");
  c.attrs.causal = false, c.attrs.window = 20;
  checkCase(c, DType::F64, Path::Own, "dropout window");
}

TEST(CudaAttention, BadInputsFailAsOnTheCpu) {
  DSC_REQUIRE_GPU();
  AttnCase c = basic(8, 16);
  AttnRun r(c, makeData(c, 1), DType::F32);
  DevTensor badK(DType::F32, {1, 3, 8, 16});
  Status cpuSt = cpu::attention(r.q.host(), badK.host(), r.v.host(), Tensor(),
                                c.attrs, r.out[0].host(), r.lse[0].host());
  Status gpuSt = cuda::attention(r.q.dev(), badK.dev(), r.v.dev(), Tensor(),
                                 c.attrs, r.out[1].dev(), r.lse[1].dev());
  EXPECT_FALSE(cpuSt.ok());
  EXPECT_EQ(cpuSt.message(), gpuSt.message());
}

} // namespace dsc::cuda::test

namespace dsc::cuda::test {
namespace {

/// `x` ([B, H, T, D] on the device) as [B, T, H, D], or back.
DevTensor swappedOnDevice(const DevTensor &x) {
  Tensor h = x.host();
  std::vector<int64_t> s(h.shape, h.shape + h.rank);
  std::swap(s[1], s[2]);
  DevTensor y(h.dtype, s);
  EXPECT_TRUE(cuda::transpose(x.dev(), {0, 2, 1, 3}, y.dev()).ok());
  return y;
}

} // namespace

// seq_major ([B, T, H, D] operands and results, as dsc canonicalization
// leaves a projection's heads) on cuDNN (strides) and on the own kernel
// (heads-first copies) against the CPU's heads-first call; batch slices of
// the backward too.
TEST(CudaAttention, SeqMajor) {
  DSC_REQUIRE_GPU();
  AttnCase c = maskedCausalGroups(2);
  for (int64_t limit : {0, 1})
    for (Path path : {Path::Cudnn, Path::Own})
      for (bool masked : {true, false}) {
        AttnCase m = c;
        if (!masked)
          m.mask = MaskKind::None, m.maskShape.clear();
        m.attrs.workspaceLimit = limit;
        AttnData x = makeData(m, 13);
        AttnRun r(m, x, DType::BF16);
        runCpu(r, m);
        AttentionAttrs sm = m.attrs;
        sm.seqMajor = true;
        DevTensor q = swappedOnDevice(r.q), k = swappedOnDevice(r.k),
                  v = swappedOnDevice(r.v), g = swappedOnDevice(r.g);
        DevTensor out = swappedOnDevice(r.out[1]),
                  gq = swappedOnDevice(r.gq[1]), gk = swappedOnDevice(r.gk[1]),
                  gv = swappedOnDevice(r.gv[1]);
        detail::setAttentionCudnnEnabled(path == Path::Cudnn);
        int64_t before = detail::attentionCudnnForwardRuns();
        DSC_ASSERT_OK(cuda::attention(q.dev(), k.dev(), v.dev(), r.maskDev(),
                                      sm, out.dev(), r.lse[1].dev()));
        DSC_ASSERT_OK(cuda::attentionBackward(
            q.dev(), k.dev(), v.dev(), r.maskDev(), out.dev(), r.lse[1].dev(),
            g.dev(), sm, gq.dev(), gk.dev(), gv.dev()));
        ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
        detail::setAttentionCudnnEnabled(true);
        bool cudnnRan = detail::attentionCudnnForwardRuns() > before;
        std::string what = std::string(cudnnRan ? "cudnn" : "own") +
                           (masked ? " masked" : "") +
                           (limit ? " sliced" : "") + " seq_major";
        if (path == Path::Own) {
          EXPECT_FALSE(cudnnRan) << what;
        }
        Tol t = tolOf(DType::BF16, cudnnRan ? Path::Cudnn : Path::Own);
        expectClose(r.out[0], swappedOnDevice(out), t.rtol, t.atol,
                    what + " out");
        expectClose(r.lse[0], r.lse[1], t.rtol, t.atol, what + " lse");
        expectClose(r.gq[0], swappedOnDevice(gq), t.rtol, t.atol,
                    what + " grad_q");
        expectClose(r.gk[0], swappedOnDevice(gk), t.rtol, t.atol,
                    what + " grad_k");
        expectClose(r.gv[0], swappedOnDevice(gv), t.rtol, t.atol,
                    what + " grad_v");
      }
}

} // namespace dsc::cuda::test
