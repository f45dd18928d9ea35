//===- NormLossTest.cpp - CUDA norms, softmax, losses against the CPU -----===//
//
// Each case runs the CPU kernel on host views and the CUDA kernel on device
// views of the same random data and compares the results. GPU results start
// as junk, so an element a kernel fails to write shows up. The shapes reach
// every launch shape of norm_loss.cu: a line per thread, warp and block,
// contiguous and strided, several partial sums per channel and per column.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace dsc::cuda::test {
namespace {

using Shape = std::vector<int64_t>;
constexpr DType kFloats[] = {DType::F32, DType::F64};

/// A result computed twice: by the CPU (host view) and the GPU (device
/// view, junk until the kernel writes it).
struct Out {
  DevTensor cpu, gpu;
  Out(DType dtype, const Shape &shape) : cpu(dtype, shape), gpu(dtype, shape) {
    gpu.random(1e3, 2e3, 12345);
  }
};

DevTensor randomTensor(DType dtype, const Shape &shape, double lo, double hi,
                       uint32_t seed) {
  DevTensor t(dtype, shape);
  t.random(lo, hi, seed);
  return t;
}

/// f32 within 1e-5 relative (plus `atol32`), f64 within 1e-9.
void close(const DevTensor &cpu, const DevTensor &gpu, DType dtype,
           const std::string &what, double atol32 = 1e-6) {
  bool f32 = dtype == DType::F32;
  expectClose(cpu, gpu, f32 ? 1e-5 : 1e-9, f32 ? atol32 : 1e-12,
              what + " " + dtypeName(dtype));
}

void close(const Out &o, DType dtype, const std::string &what,
           double atol32 = 1e-6) {
  close(o.cpu, o.gpu, dtype, what, atol32);
}

void expectSameError(const Status &cpu, const Status &gpu) {
  EXPECT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.code(), gpu.code());
  EXPECT_EQ(cpu.message(), gpu.message());
}

std::string shapeName(DType dtype, const Shape &shape) {
  std::string r = std::string(dtypeName(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i)
    r += (i ? "," : "") + std::to_string(shape[i]);
  return r + "]";
}

/// The absolute tolerance of an f32 sum of `count` terms of about one: the
/// CPU adds them one by one in f32 (an error growing with the count), the
/// GPU in double.
double sumTol(int64_t count) { return std::max(1e-5, 1e-7 * double(count)); }

Shape without(Shape shape, size_t dim) {
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(dim));
  return shape;
}

//===----------------------------------------------------------------------===//
// Batch norm
//===----------------------------------------------------------------------===//

void checkBatchNormTrain(DType dt, const Shape &shape) {
  SCOPED_TRACE(shapeName(dt, shape));
  Shape ch{shape[1]};
  DevTensor x = randomTensor(dt, shape, -2, 3, 1);
  DevTensor scale = randomTensor(dt, ch, 0.5, 1.5, 2);
  DevTensor bias = randomTensor(dt, ch, -1, 1, 3);
  DevTensor rm = randomTensor(dt, ch, -1, 1, 4);
  DevTensor rv = randomTensor(dt, ch, 0.5, 2, 5);
  Out out(dt, shape), nrm(dt, ch), nrv(dt, ch), sm(dt, ch), sis(dt, ch);
  DSC_ASSERT_OK(
      cpu::batchNormTrain(x.host(), scale.host(), bias.host(), rm.host(),
                          rv.host(), 1e-5, 0.9, out.cpu.host(), nrm.cpu.host(),
                          nrv.cpu.host(), sm.cpu.host(), sis.cpu.host()));
  DSC_ASSERT_OK(cuda::batchNormTrain(x.dev(), scale.dev(), bias.dev(), rm.dev(),
                                     rv.dev(), 1e-5, 0.9, out.gpu.dev(),
                                     nrm.gpu.dev(), nrv.gpu.dev(), sm.gpu.dev(),
                                     sis.gpu.dev()));
  close(out, dt, "out", 1e-5);
  close(nrm, dt, "new_running_mean");
  close(nrv, dt, "new_running_var");
  close(sm, dt, "save_mean");
  close(sis, dt, "save_inv_std");

  // Without the optional results.
  Out out2(dt, shape);
  DSC_ASSERT_OK(cuda::batchNormTrain(x.dev(), scale.dev(), bias.dev(), rm.dev(),
                                     rv.dev(), 1e-5, 0.9, out2.gpu.dev(),
                                     Tensor(), Tensor()));
  close(out.cpu, out2.gpu, dt, "out without running stats", 1e-5);
}

TEST(CudaNormLoss, BatchNormTrain) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats) {
    checkBatchNormTrain(dt, {4, 3, 5, 6});
    checkBatchNormTrain(dt, {64, 7});         // one element per plane
    checkBatchNormTrain(dt, {16, 3, 48, 48}); // three parts per channel
    checkBatchNormTrain(dt, {2, 5, 3, 4, 2}); // two spatial dims
  }
}

void checkBatchNormTrainBackward(DType dt, const Shape &shape, bool withScale) {
  SCOPED_TRACE(shapeName(dt, shape) + (withScale ? " scale" : " no scale"));
  Shape ch{shape[1]};
  DevTensor x = randomTensor(dt, shape, -2, 3, 11);
  DevTensor g = randomTensor(dt, shape, -1, 1, 12);
  DevTensor scale = randomTensor(dt, ch, 0.5, 1.5, 13);
  Tensor sh = withScale ? scale.host() : Tensor();
  Tensor sd = withScale ? scale.dev() : Tensor();
  Out gx(dt, shape), gs(dt, ch), gb(dt, ch);
  DSC_ASSERT_OK(cpu::batchNormTrainBackward(x.host(), sh, 1e-5, g.host(),
                                            gx.cpu.host(), gs.cpu.host(),
                                            gb.cpu.host()));
  DSC_ASSERT_OK(cuda::batchNormTrainBackward(
      x.dev(), sd, 1e-5, g.dev(), gx.gpu.dev(), gs.gpu.dev(), gb.gpu.dev()));
  int64_t count = x.host().numel() / shape[1];
  close(gx, dt, "grad_in", 1e-5);
  close(gs, dt, "grad_scale", sumTol(count));
  close(gb, dt, "grad_bias", sumTol(count));

  // Only the parameter gradients.
  Out gs2(dt, ch);
  DSC_ASSERT_OK(cuda::batchNormTrainBackward(
      x.dev(), sd, 1e-5, g.dev(), Tensor(), gs2.gpu.dev(), Tensor()));
  close(gs.cpu, gs2.gpu, dt, "grad_scale alone", sumTol(count));
}

TEST(CudaNormLoss, BatchNormTrainBackward) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats) {
    checkBatchNormTrainBackward(dt, {4, 3, 5, 6}, true);
    checkBatchNormTrainBackward(dt, {4, 3, 5, 6}, false);
    checkBatchNormTrainBackward(dt, {64, 7}, true);
    checkBatchNormTrainBackward(dt, {16, 3, 48, 48}, true);
  }
}

TEST(CudaNormLoss, BatchNormInference) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats)
    for (const Shape &shape : {Shape{4, 3, 5, 6}, Shape{33, 9}}) {
      Shape ch{shape[1]};
      DevTensor x = randomTensor(dt, shape, -2, 3, 21);
      DevTensor scale = randomTensor(dt, ch, 0.5, 1.5, 22);
      DevTensor bias = randomTensor(dt, ch, -1, 1, 23);
      DevTensor mean = randomTensor(dt, ch, -1, 1, 24);
      DevTensor var = randomTensor(dt, ch, 0.5, 2, 25);
      Out out(dt, shape);
      DSC_ASSERT_OK(cpu::batchNorm(x.host(), scale.host(), bias.host(),
                                   mean.host(), var.host(), 1e-5,
                                   out.cpu.host()));
      DSC_ASSERT_OK(cuda::batchNorm(x.dev(), scale.dev(), bias.dev(),
                                    mean.dev(), var.dev(), 1e-5,
                                    out.gpu.dev()));
      close(out, dt, "batch_norm");
    }
}

TEST(CudaNormLoss, BatchNormErrors) {
  DSC_REQUIRE_GPU();
  DevTensor x(DType::F32, {4, 3, 5}), wrong(DType::F32, {4});
  DevTensor out(DType::F32, {4, 3, 5}), x64(DType::F64, {4, 3, 5});
  expectSameError(cpu::batchNormTrain(x.host(), wrong.host(), wrong.host(),
                                      wrong.host(), wrong.host(), 1e-5, 0.9,
                                      out.host(), Tensor(), Tensor()),
                  cuda::batchNormTrain(x.dev(), wrong.dev(), wrong.dev(),
                                       wrong.dev(), wrong.dev(), 1e-5, 0.9,
                                       out.dev(), Tensor(), Tensor()));
  expectSameError(
      cpu::batchNormTrainBackward(x.host(), Tensor(), 1e-5, x64.host(),
                                  out.host(), Tensor(), Tensor()),
      cuda::batchNormTrainBackward(x.dev(), Tensor(), 1e-5, x64.dev(),
                                   out.dev(), Tensor(), Tensor()));
  expectSameError(cpu::batchNorm(x.host(), Tensor(), Tensor(), Tensor(),
                                 Tensor(), 1e-5, out.host()),
                  cuda::batchNorm(x.dev(), Tensor(), Tensor(), Tensor(),
                                  Tensor(), 1e-5, out.dev()));
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

Shape tail(const Shape &shape, int64_t axis) {
  if (axis < 0)
    axis += static_cast<int64_t>(shape.size());
  return Shape(shape.begin() + axis, shape.end());
}

void checkLayerNorm(DType dt, const Shape &shape, int64_t axis, bool withBias) {
  SCOPED_TRACE(shapeName(dt, shape) + " axis " + std::to_string(axis) +
               (withBias ? " bias" : " no bias"));
  Shape params = tail(shape, axis);
  DevTensor x = randomTensor(dt, shape, -2, 3, 31);
  DevTensor scale = randomTensor(dt, params, 0.5, 1.5, 32);
  DevTensor bias = randomTensor(dt, params, -1, 1, 33);
  Out out(dt, shape);
  DSC_ASSERT_OK(cpu::layerNorm(x.host(), scale.host(),
                               withBias ? bias.host() : Tensor(), axis, 1e-5,
                               out.cpu.host()));
  DSC_ASSERT_OK(cuda::layerNorm(x.dev(), scale.dev(),
                                withBias ? bias.dev() : Tensor(), axis, 1e-5,
                                out.gpu.dev()));
  close(out, dt, "layer_norm", 1e-5);
}

TEST(CudaNormLoss, LayerNorm) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats) {
    checkLayerNorm(dt, {6, 5, 40}, -1, true);
    checkLayerNorm(dt, {6, 5, 40}, 2, false);
    checkLayerNorm(dt, {6, 5, 40}, 1, true); // rank - 2
    checkLayerNorm(dt, {6, 5, 40}, -2, false);
    checkLayerNorm(dt, {64, 768}, -1, true);   // GPT-2's rows
    checkLayerNorm(dt, {3, 2000}, 1, true);    // a block per row
    checkLayerNorm(dt, {4, 3, 700}, 1, false); // 2100 columns, rank - 2
  }
}

/// The norm with a 16-bit result (dsc-fuse-elementwise's folded cast) is
/// the f32 norm cast to 16 bits, bit for bit; the backward of a 16-bit
/// input is the backward of its f32 widening, bit for bit.
void checkLayerNorm16(DType half, const Shape &shape, int64_t axis) {
  SCOPED_TRACE(shapeName(half, shape) + " axis " + std::to_string(axis));
  Shape params = tail(shape, axis);
  DevTensor x = randomTensor(DType::F32, shape, -2, 3, 51);
  DevTensor scale = randomTensor(DType::F32, params, 0.5, 1.5, 52);
  DevTensor bias = randomTensor(DType::F32, params, -1, 1, 53);
  DevTensor y32(DType::F32, shape), viaCast(half, shape), direct(half, shape);
  DSC_ASSERT_OK(
      cuda::layerNorm(x.dev(), scale.dev(), bias.dev(), axis, 1e-5, y32.dev()));
  DSC_ASSERT_OK(cuda::cast(y32.dev(), viaCast.dev()));
  DSC_ASSERT_OK(cuda::layerNorm(x.dev(), scale.dev(), bias.dev(), axis, 1e-5,
                                direct.dev()));
  EXPECT_EQ(viaCast.download(), direct.download()) << "layer_norm -> 16 bits";

  DevTensor xh(half, shape), xw(DType::F32, shape);
  DSC_ASSERT_OK(cuda::cast(x.dev(), xh.dev()));
  DSC_ASSERT_OK(cuda::cast(xh.dev(), xw.dev()));
  DevTensor g = randomTensor(DType::F32, shape, -1, 1, 54);
  DevTensor gxW(DType::F32, shape), gsW(DType::F32, params),
      gbW(DType::F32, params);
  DevTensor gxH(DType::F32, shape), gsH(DType::F32, params),
      gbH(DType::F32, params);
  DSC_ASSERT_OK(cuda::layerNormBackward(xw.dev(), scale.dev(), axis, 1e-5,
                                        g.dev(), gxW.dev(), gsW.dev(),
                                        gbW.dev()));
  DSC_ASSERT_OK(cuda::layerNormBackward(xh.dev(), scale.dev(), axis, 1e-5,
                                        g.dev(), gxH.dev(), gsH.dev(),
                                        gbH.dev()));
  EXPECT_EQ(gxW.download(), gxH.download()) << "grad input";
  EXPECT_EQ(gsW.download(), gsH.download()) << "grad scale";
  EXPECT_EQ(gbW.download(), gbH.download()) << "grad bias";
  DSC_ASSERT_OK(cuda::rmsNormBackward(xw.dev(), scale.dev(), axis, 1e-6,
                                      g.dev(), gxW.dev(), gsW.dev()));
  DSC_ASSERT_OK(cuda::rmsNormBackward(xh.dev(), scale.dev(), axis, 1e-6,
                                      g.dev(), gxH.dev(), gsH.dev()));
  EXPECT_EQ(gxW.download(), gxH.download()) << "rms grad input";
  EXPECT_EQ(gsW.download(), gsH.download()) << "rms grad scale";
}

TEST(CudaNormLoss, LayerNormIn16Bits) {
  DSC_REQUIRE_GPU();
  for (DType half : {DType::BF16, DType::F16}) {
    checkLayerNorm16(half, {64, 768}, -1);  // a warp per row
    checkLayerNorm16(half, {3, 2000}, 1);   // a block per row
    checkLayerNorm16(half, {8, 4104}, -1);  // held rows, the last chunks short
    checkLayerNorm16(half, {4, 3, 700}, 1); // rank - 2
    // Held rows, 16 a block for the column sums, the last block short.
    checkLayerNorm16(half, {100, 2048}, -1);
  }
  // Other mixes are not: a 16-bit input with an f32 result is refused as
  // before.
  DevTensor xh(DType::BF16, {4, 6}), s(DType::F32, {6}),
      out(DType::F32, {4, 6});
  EXPECT_FALSE(
      cuda::layerNorm(xh.dev(), s.dev(), Tensor(), -1, 1e-5, out.dev()).ok());
}

/// dsc.linear_cross_entropy on the GPU against the CPU, in `rows`-row
/// chunks (the last one partial), 16-bit operands with an f32 weight
/// gradient or all f32, w [V, C] read transposed or [C, V].
void checkLinearCrossEntropy(DType dt, bool transWeight, int64_t rows) {
  const int64_t n = 150, c = 24, v = 37;
  SCOPED_TRACE(std::string(dtypeName(dt)) +
               (transWeight ? " w[V,C]" : " w[C,V]") + " chunk " +
               std::to_string(rows));
  DevTensor x = randomTensor(dt, {3, 50, c}, -1, 1, 71);
  DevTensor w =
      randomTensor(dt, transWeight ? Shape{v, c} : Shape{c, v}, -1, 1, 72);
  DevTensor labels(DType::I64, {n});
  labels.random(0, double(v), 73);
  for (int64_t i = 0; i < n; i += 7)
    labels.set(i, -100.0);
  labels.upload();
  DevTensor seed(DType::F32, {});
  seed.values({0.5});
  int64_t chunks = (n + rows - 1) / rows;
  Out logits(dt, {std::min(rows, n), v}), chunkLoss(DType::F32, {chunks}),
      loss(DType::F32, {}), gx(dt, {3, 50, c}),
      gw(DType::F32, transWeight ? Shape{v, c} : Shape{c, v});
  DSC_ASSERT_OK(cpu::linearCrossEntropy(
      x.host(), w.host(), transWeight, labels.host(), int64_t(-100),
      seed.host(), logits.cpu.host(), chunkLoss.cpu.host(), loss.cpu.host(),
      gx.cpu.host(), gw.cpu.host()));
  DSC_ASSERT_OK(cuda::linearCrossEntropy(
      x.dev(), w.dev(), transWeight, labels.dev(), int64_t(-100), seed.dev(),
      logits.gpu.dev(), chunkLoss.gpu.dev(), loss.gpu.dev(), gx.gpu.dev(),
      gw.gpu.dev()));
  bool half = dt != DType::F32;
  expectClose(loss.cpu, loss.gpu, half ? 1e-4 : 1e-5, 1e-5, "loss");
  expectClose(chunkLoss.cpu, chunkLoss.gpu, half ? 1e-4 : 1e-5, 1e-5,
              "chunk loss");
  expectClose(gx.cpu, gx.gpu, half ? 2e-2 : 1e-4, half ? 2e-3 : 1e-6,
              "grad input");
  expectClose(gw.cpu, gw.gpu, half ? 1e-2 : 1e-4, half ? 1e-3 : 1e-6,
              "grad weight");
}

TEST(CudaNormLoss, LinearCrossEntropyChunks) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (bool tw : {true, false})
      for (int64_t rows : {int64_t(64), int64_t(150)})
        checkLinearCrossEntropy(dt, tw, rows);
}

// With init (dsc-accumulate-in-call's running sum), written over in place:
// the GPU's weight gradient against the CPU's, for 16-bit and f32 operands.
TEST(CudaNormLoss, LinearCrossEntropyOntoInit) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtypeName(dt));
    const int64_t n = 150, c = 24, v = 37, rows = 64;
    DevTensor x = randomTensor(dt, {n, c}, -1, 1, 91);
    DevTensor w = randomTensor(dt, {v, c}, -1, 1, 92);
    DevTensor labels(DType::I64, {n});
    labels.random(0, double(v), 93);
    labels.upload();
    DevTensor seed(DType::F32, {});
    seed.values({0.5});
    DevTensor start = randomTensor(DType::F32, {v, c}, -1, 1, 94);
    int64_t chunks = (n + rows - 1) / rows;
    Out logits(dt, {rows, v}), chunkLoss(DType::F32, {chunks}),
        loss(DType::F32, {}), gx(dt, {n, c}), gw(DType::F32, {v, c});
    std::memcpy(gw.cpu.host().data, start.host().data, start.host().nbytes());
    ASSERT_EQ(cudaMemcpy(gw.gpu.dev().data, start.dev().data,
                         start.host().nbytes(), cudaMemcpyDeviceToDevice),
              cudaSuccess);
    DSC_ASSERT_OK(cpu::linearCrossEntropy(
        x.host(), w.host(), true, labels.host(), std::nullopt, seed.host(),
        logits.cpu.host(), chunkLoss.cpu.host(), loss.cpu.host(), gx.cpu.host(),
        gw.cpu.host(), gw.cpu.host()));
    DSC_ASSERT_OK(cuda::linearCrossEntropy(
        x.dev(), w.dev(), true, labels.dev(), std::nullopt, seed.dev(),
        logits.gpu.dev(), chunkLoss.gpu.dev(), loss.gpu.dev(), gx.gpu.dev(),
        gw.gpu.dev(), gw.gpu.dev()));
    bool half = dt != DType::F32;
    expectClose(gw.cpu, gw.gpu, half ? 1e-2 : 1e-4, half ? 1e-3 : 1e-6,
                "grad weight onto init");
    // init in storage of its own: copied into grad_weight first, the same
    // bits as in place.
    Out apart(DType::F32, {v, c});
    DSC_ASSERT_OK(cuda::linearCrossEntropy(
        x.dev(), w.dev(), true, labels.dev(), std::nullopt, seed.dev(),
        logits.gpu.dev(), chunkLoss.gpu.dev(), loss.gpu.dev(), gx.gpu.dev(),
        apart.gpu.dev(), start.dev()));
    EXPECT_EQ(apart.gpu.download(), gw.gpu.download()) << "init apart";
  }
}

TEST(CudaNormLoss, MatmulAccumulateIntoF32) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    DevTensor a = randomTensor(dt, {40, 24}, -1, 1, 81);
    DevTensor b = randomTensor(dt, {40, 16}, -1, 1, 82);
    Out out(DType::F32, {24, 16});
    DevTensor start = randomTensor(DType::F32, {24, 16}, -1, 1, 83);
    std::memcpy(out.cpu.host().data, start.host().data, start.host().nbytes());
    ASSERT_EQ(cudaMemcpy(out.gpu.dev().data, start.dev().data,
                         start.host().nbytes(), cudaMemcpyDeviceToDevice),
              cudaSuccess);
    // out += a^T b, twice, then once more without accumulating.
    for (bool acc : {true, true}) {
      DSC_ASSERT_OK(cpu::matmulAccumulate(a.host(), true, b.host(), false, acc,
                                          out.cpu.host()));
      DSC_ASSERT_OK(cuda::matmulAccumulate(a.dev(), true, b.dev(), false, acc,
                                           out.gpu.dev()));
    }
    expectClose(out.cpu, out.gpu, 1e-4, 1e-4, "accumulated");
    DSC_ASSERT_OK(cpu::matmulAccumulate(a.host(), true, b.host(), false, false,
                                        out.cpu.host()));
    DSC_ASSERT_OK(cuda::matmulAccumulate(a.dev(), true, b.dev(), false, false,
                                         out.gpu.dev()));
    expectClose(out.cpu, out.gpu, 1e-4, 1e-4, "overwritten");
  }
  // A 16-bit product into another 16-bit type is refused, on both.
  DevTensor a(DType::BF16, {4, 4}), o(DType::F16, {4, 4});
  expectSameError(
      cpu::matmulAccumulate(a.host(), false, a.host(), false, false, o.host()),
      cuda::matmulAccumulate(a.dev(), false, a.dev(), false, false, o.dev()));
}

TEST(CudaNormLoss, LayerNormErrors) {
  DSC_REQUIRE_GPU();
  DevTensor x(DType::F32, {4, 6}), scale(DType::F32, {6}), bad(DType::F32, {5});
  DevTensor out(DType::F32, {4, 6});
  // Absent scale.
  expectSameError(
      cpu::layerNorm(x.host(), Tensor(), Tensor(), -1, 1e-5, out.host()),
      cuda::layerNorm(x.dev(), Tensor(), Tensor(), -1, 1e-5, out.dev()));
  expectSameError(
      cpu::layerNorm(x.host(), scale.host(), Tensor(), 2, 1e-5, out.host()),
      cuda::layerNorm(x.dev(), scale.dev(), Tensor(), 2, 1e-5, out.dev()));
  expectSameError(
      cpu::layerNorm(x.host(), scale.host(), bad.host(), 1, 1e-5, out.host()),
      cuda::layerNorm(x.dev(), scale.dev(), bad.dev(), 1, 1e-5, out.dev()));
  expectSameError(cpu::layerNormBackward(x.host(), Tensor(), -1, 1e-5, x.host(),
                                         out.host(), Tensor(), Tensor()),
                  cuda::layerNormBackward(x.dev(), Tensor(), -1, 1e-5, x.dev(),
                                          out.dev(), Tensor(), Tensor()));
  expectSameError(
      cpu::layerNormBackward(x.host(), scale.host(), -1, 1e-5, x.host(),
                             out.host(), bad.host(), Tensor()),
      cuda::layerNormBackward(x.dev(), scale.dev(), -1, 1e-5, x.dev(),
                              out.dev(), bad.dev(), Tensor()));
}

/// Which of gradIn, gradScale, gradBias are asked for.
struct LnGrads {
  bool in, scale, bias;
};

void checkLayerNormBackward(DType dt, const Shape &shape, int64_t axis,
                            LnGrads want) {
  SCOPED_TRACE(shapeName(dt, shape) + " axis " + std::to_string(axis) +
               " grads " + std::to_string(want.in) +
               std::to_string(want.scale) + std::to_string(want.bias));
  Shape params = tail(shape, axis);
  DevTensor x = randomTensor(dt, shape, -2, 3, 41);
  DevTensor g = randomTensor(dt, shape, -1, 1, 42);
  DevTensor scale = randomTensor(dt, params, 0.5, 1.5, 43);
  Out gx(dt, shape), gs(dt, params), gb(dt, params);
  auto h = [](bool on, const DevTensor &t) { return on ? t.host() : Tensor(); };
  auto d = [](bool on, const DevTensor &t) { return on ? t.dev() : Tensor(); };
  DSC_ASSERT_OK(cpu::layerNormBackward(
      x.host(), scale.host(), axis, 1e-5, g.host(), h(want.in, gx.cpu),
      h(want.scale, gs.cpu), h(want.bias, gb.cpu)));
  DSC_ASSERT_OK(cuda::layerNormBackward(
      x.dev(), scale.dev(), axis, 1e-5, g.dev(), d(want.in, gx.gpu),
      d(want.scale, gs.gpu), d(want.bias, gb.gpu)));
  if (want.in)
    close(gx, dt, "grad_in", 1e-5);
  int64_t rows = x.host().numel() / gs.cpu.host().numel();
  if (want.scale)
    close(gs, dt, "grad_scale", sumTol(rows));
  if (want.bias)
    close(gb, dt, "grad_bias", sumTol(rows));
}

TEST(CudaNormLoss, LayerNormBackward) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats) {
    checkLayerNormBackward(dt, {6, 5, 40}, -1, {true, true, true});
    checkLayerNormBackward(dt, {6, 5, 40}, 1, {true, true, true});
    checkLayerNormBackward(dt, {6, 5, 40}, -1, {true, false, false});
    checkLayerNormBackward(dt, {6, 5, 40}, -1, {false, true, false});
    checkLayerNormBackward(dt, {6, 5, 40}, -1, {false, false, true});
    checkLayerNormBackward(dt, {300, 40}, -1, {true, true, true});  // 10 chunks
    checkLayerNormBackward(dt, {512, 768}, -1, {true, true, true}); // GPT-2
    checkLayerNormBackward(dt, {5, 3000}, 1, {true, true, true});   // blocks
    checkLayerNormBackward(dt, {4, 3, 700}, 1, {true, true, false});
    // Held rows of a block, 16 rows a block for the column sums, the last
    // block's rows short; and the widest held rows (128 KiB of sums).
    checkLayerNormBackward(dt, {100, 2048}, -1, {true, true, true});
    checkLayerNormBackward(dt, {100, 2048}, -1, {true, false, false});
    checkLayerNormBackward(dt, {100, 2048}, -1, {false, true, false});
    checkLayerNormBackward(dt, {100, 2048}, -1, {false, false, true});
    checkLayerNormBackward(dt, {3, 16384}, -1, {true, true, true});
  }
}

/// dsc-fuse-norm-residual's epilogue: the backward with a residual (f32)
/// and a 16-bit copy is, bit for bit, the plain backward followed by the
/// f32 add of the residual and the cast the step did before (a 16-bit
/// input, as the step has it), into another buffer or over the residual;
/// and on the CPU too, the CPU's plain backward, add and cast.
void checkNormEpilogue(DType half, const Shape &shape, int64_t axis, bool rms,
                       bool inPlace) {
  SCOPED_TRACE(shapeName(half, shape) + " axis " + std::to_string(axis) +
               (rms ? " rms" : "") + (inPlace ? " in place" : ""));
  Shape params = tail(shape, axis);
  DevTensor x32 = randomTensor(DType::F32, shape, -2, 3, 81);
  DevTensor xh(half, shape);
  DSC_ASSERT_OK(cuda::cast(x32.dev(), xh.dev()));
  DevTensor scale = randomTensor(DType::F32, params, 0.5, 1.5, 82);
  DevTensor g = randomTensor(DType::F32, shape, -1, 1, 83);
  DevTensor r = randomTensor(DType::F32, shape, -1, 1, 84);
  DevTensor gx(DType::F32, shape), gs(DType::F32, params),
      gb(DType::F32, params), sum(DType::F32, shape), copy(half, shape);
  auto backward = [&](const Tensor &gradIn, const Tensor &gradScale,
                      const Tensor &gradBias, const Tensor &res,
                      const Tensor &c) {
    return rms ? cuda::rmsNormBackward(xh.dev(), scale.dev(), axis, 1e-6,
                                       g.dev(), gradIn, gradScale, res, c)
               : cuda::layerNormBackward(xh.dev(), scale.dev(), axis, 1e-5,
                                         g.dev(), gradIn, gradScale, gradBias,
                                         res, c);
  };
  DSC_ASSERT_OK(backward(gx.dev(), gs.dev(), rms ? Tensor() : gb.dev(),
                         Tensor(), Tensor()));
  DSC_ASSERT_OK(cuda::binary(BinaryOp::Add, r.dev(), gx.dev(), sum.dev()));
  DSC_ASSERT_OK(cuda::cast(sum.dev(), copy.dev()));

  DevTensor r2 = randomTensor(DType::F32, shape, -1, 1, 84);
  DevTensor gx2(DType::F32, shape), gs2(DType::F32, params),
      gb2(DType::F32, params), copy2(half, shape);
  const DevTensor &into = inPlace ? r2 : gx2;
  DSC_ASSERT_OK(backward(into.dev(), gs2.dev(), rms ? Tensor() : gb2.dev(),
                         r2.dev(), copy2.dev()));
  EXPECT_EQ(sum.download(), into.download()) << "grad input + residual";
  EXPECT_EQ(copy.download(), copy2.download()) << "16-bit copy";
  EXPECT_EQ(gs.download(), gs2.download()) << "grad scale";
  if (!rms) {
    EXPECT_EQ(gb.download(), gb2.download()) << "grad bias";
  }
  // The residual alone (no copy).
  DevTensor r3 = randomTensor(DType::F32, shape, -1, 1, 84);
  DSC_ASSERT_OK(backward(r3.dev(), Tensor(), Tensor(), r3.dev(), Tensor()));
  EXPECT_EQ(sum.download(), r3.download()) << "residual alone";

  // The CPU, on the f32 widening of the 16-bit input.
  DevTensor xw(DType::F32, shape);
  DSC_ASSERT_OK(cuda::cast(xh.dev(), xw.dev()));
  std::vector<char> wide = xw.download();
  Tensor xc = xw.host();
  xc.data = wide.data();
  std::vector<float> cgx(size_t(xc.numel())), csum(cgx.size()),
      cres(cgx.size()), cs(size_t(scale.host().numel())), cb(cs.size());
  std::vector<uint16_t> ccopy(cgx.size()), ccopy2(cgx.size());
  for (size_t i = 0; i < cres.size(); ++i)
    cres[i] = float(DevTensor::get(r.host(), int64_t(i)));
  auto view = [&](void *p, DType t) { return Tensor::of(p, t, shape); };
  auto cpuBackward = [&](const Tensor &gradIn, const Tensor &res,
                         const Tensor &c) {
    Tensor sv = Tensor::of(cs.data(), DType::F32, params),
           bv = Tensor::of(cb.data(), DType::F32, params);
    return rms ? cpu::rmsNormBackward(xc, scale.host(), axis, 1e-6, g.host(),
                                      gradIn, sv, res, c)
               : cpu::layerNormBackward(xc, scale.host(), axis, 1e-5, g.host(),
                                        gradIn, sv, bv, res, c);
  };
  DSC_ASSERT_OK(cpuBackward(view(cgx.data(), DType::F32), Tensor(), Tensor()));
  DSC_ASSERT_OK(cpu::binary(BinaryOp::Add, r.host(),
                            view(cgx.data(), DType::F32),
                            view(csum.data(), DType::F32)));
  DSC_ASSERT_OK(
      cpu::cast(view(csum.data(), DType::F32), view(ccopy.data(), half)));
  DSC_ASSERT_OK(cpuBackward(view(cres.data(), DType::F32),
                            view(cres.data(), DType::F32),
                            view(ccopy2.data(), half)));
  EXPECT_EQ(csum, cres) << "cpu: grad input + residual";
  EXPECT_EQ(ccopy, ccopy2) << "cpu: 16-bit copy";
}

TEST(CudaNormLoss, NormBackwardEpilogue) {
  DSC_REQUIRE_GPU();
  for (DType half : {DType::BF16, DType::F16})
    for (bool rms : {false, true})
      for (bool inPlace : {false, true}) {
        checkNormEpilogue(half, {64, 768}, -1, rms, inPlace);  // warp rows
        checkNormEpilogue(half, {8, 2048}, -1, rms, inPlace);  // block rows
        checkNormEpilogue(half, {6, 5, 40}, -1, rms, inPlace); // short rows
        checkNormEpilogue(half, {4, 3, 700}, 1, rms, inPlace); // not held
      }
  // Refused: a copy of an f64 gradient, a residual of another shape.
  DevTensor x = randomTensor(DType::F64, {4, 8}, -1, 1, 85);
  DevTensor s = randomTensor(DType::F64, {8}, 0.5, 1.5, 86);
  DevTensor gx(DType::F64, {4, 8}), c(DType::BF16, {4, 8});
  EXPECT_FALSE(cuda::layerNormBackward(x.dev(), s.dev(), -1, 1e-5, x.dev(),
                                       gx.dev(), Tensor(), Tensor(), Tensor(),
                                       c.dev())
                   .ok());
  DevTensor xf = randomTensor(DType::F32, {4, 8}, -1, 1, 87);
  DevTensor sf = randomTensor(DType::F32, {8}, 0.5, 1.5, 88);
  DevTensor gf(DType::F32, {4, 8}), rf(DType::F32, {4, 4});
  Status st = cuda::layerNormBackward(xf.dev(), sf.dev(), -1, 1e-5, xf.dev(),
                                      gf.dev(), Tensor(), Tensor(), rf.dev());
  Status sc = cpu::layerNormBackward(xf.host(), sf.host(), -1, 1e-5, xf.host(),
                                     gf.host(), Tensor(), Tensor(), rf.host());
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), sc.message());
}

/// RMSNorm (dsc.layer_norm {rms}) on the GPU against the CPU: the result,
/// the input's and the scale's gradients, and the 16-bit result as the
/// f32 one cast, bit for bit.
void checkRmsNorm(DType dt, const Shape &shape, int64_t axis) {
  SCOPED_TRACE(shapeName(dt, shape) + " axis " + std::to_string(axis));
  Shape params = tail(shape, axis);
  DevTensor x = randomTensor(dt, shape, -2, 3, 61);
  DevTensor scale = randomTensor(dt, params, 0.5, 1.5, 62);
  DevTensor g = randomTensor(dt, shape, -1, 1, 63);
  Out out(dt, shape), gx(dt, shape), gs(dt, params);
  DSC_ASSERT_OK(
      cpu::rmsNorm(x.host(), scale.host(), axis, 1e-6, out.cpu.host()));
  DSC_ASSERT_OK(cuda::rmsNorm(x.dev(), scale.dev(), axis, 1e-6, out.gpu.dev()));
  close(out, dt, "rms_norm", 1e-5);
  DSC_ASSERT_OK(cpu::rmsNormBackward(x.host(), scale.host(), axis, 1e-6,
                                     g.host(), gx.cpu.host(), gs.cpu.host()));
  DSC_ASSERT_OK(cuda::rmsNormBackward(x.dev(), scale.dev(), axis, 1e-6, g.dev(),
                                      gx.gpu.dev(), gs.gpu.dev()));
  close(gx, dt, "grad_in", 1e-5);
  close(gs, dt, "grad_scale", sumTol(x.host().numel() / gs.cpu.host().numel()));
  if (dt != DType::F32)
    return;
  DevTensor viaCast(DType::BF16, shape), direct(DType::BF16, shape);
  DSC_ASSERT_OK(cuda::cast(out.gpu.dev(), viaCast.dev()));
  DSC_ASSERT_OK(cuda::rmsNorm(x.dev(), scale.dev(), axis, 1e-6, direct.dev()));
  EXPECT_EQ(viaCast.download(), direct.download()) << "rms_norm -> bf16";
}

TEST(CudaNormLoss, RmsNorm) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats) {
    checkRmsNorm(dt, {6, 5, 40}, -1);
    checkRmsNorm(dt, {300, 40}, -1);  // 10 chunks of column sums
    checkRmsNorm(dt, {64, 2048}, -1); // Llama's rows: a block per row
    checkRmsNorm(dt, {3, 16384}, -1); // the widest rows held: 512 threads
    checkRmsNorm(dt, {2, 16392}, -1); // wider: the block kernels again
    checkRmsNorm(dt, {4, 3, 700}, 1); // rank - 2
    // 16 rows a block for the column sums, the last block short.
    checkRmsNorm(dt, {100, 2048}, -1);
  }
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

void checkSoftmax(DType dt, const Shape &shape, int64_t axis, bool log,
                  bool masked = false) {
  SCOPED_TRACE(shapeName(dt, shape) + " axis " + std::to_string(axis) +
               (log ? " log" : ""));
  DevTensor x = randomTensor(dt, shape, -8, 8, 51);
  if (masked) { // -inf in every third element, as attention masks do
    for (int64_t i = 0; i < x.host().numel(); i += 3)
      x.set(i, -INFINITY);
    x.upload();
  }
  Out out(dt, shape);
  if (log) {
    DSC_ASSERT_OK(cpu::logSoftmax(x.host(), axis, out.cpu.host()));
    DSC_ASSERT_OK(cuda::logSoftmax(x.dev(), axis, out.gpu.dev()));
  } else {
    DSC_ASSERT_OK(cpu::softmax(x.host(), axis, out.cpu.host()));
    DSC_ASSERT_OK(cuda::softmax(x.dev(), axis, out.gpu.dev()));
  }
  close(out, dt, log ? "log_softmax" : "softmax", log ? 1e-5 : 1e-7);
}

TEST(CudaNormLoss, Softmax) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats)
    for (bool log : {false, true}) {
      checkSoftmax(dt, {7, 33}, -1, log);     // a warp per row
      checkSoftmax(dt, {3, 5000}, 1, log);    // a block per row
      checkSoftmax(dt, {2, 3, 1024}, 2, log); // a full warp row
      checkSoftmax(dt, {4, 50, 30}, 1, log);  // middle axis, warps
      checkSoftmax(dt, {64, 20, 40}, 1, log); // middle axis, threads
      checkSoftmax(dt, {2, 3000, 3}, 1, log); // middle axis, blocks
      checkSoftmax(dt, {40, 6}, 0, log);      // first axis
      checkSoftmax(dt, {5}, 0, log);          // rank 1
    }
  for (DType dt : kFloats) {
    checkSoftmax(dt, {16, 100}, -1, false, true);
    checkSoftmax(dt, {4, 2000}, -1, false, true);
    checkSoftmax(dt, {64, 30, 40}, 1, false, true);
  }
}

/// dsc.softmax_backward: from the forward result y and a random gradient.
void checkSoftmaxBackward(DType dt, const Shape &shape, int64_t axis,
                          bool log) {
  SCOPED_TRACE(shapeName(dt, shape) + " axis " + std::to_string(axis) +
               (log ? " log" : ""));
  DevTensor x = randomTensor(dt, shape, -4, 4, 61);
  DevTensor g = randomTensor(dt, shape, -1, 1, 62);
  DevTensor y(dt, shape);
  if (log)
    DSC_ASSERT_OK(cpu::logSoftmax(x.host(), axis, y.host()));
  else
    DSC_ASSERT_OK(cpu::softmax(x.host(), axis, y.host()));
  y.upload();
  Out gi(dt, shape);
  if (log) {
    DSC_ASSERT_OK(
        cpu::logSoftmaxBackward(y.host(), axis, g.host(), gi.cpu.host()));
    DSC_ASSERT_OK(
        cuda::logSoftmaxBackward(y.dev(), axis, g.dev(), gi.gpu.dev()));
  } else {
    DSC_ASSERT_OK(
        cpu::softmaxBackward(y.host(), axis, g.host(), gi.cpu.host()));
    DSC_ASSERT_OK(cuda::softmaxBackward(y.dev(), axis, g.dev(), gi.gpu.dev()));
  }
  close(gi, dt, log ? "log_softmax_backward" : "softmax_backward", 1e-6);
}

TEST(CudaNormLoss, SoftmaxBackward) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats)
    for (bool log : {false, true}) {
      checkSoftmaxBackward(dt, {7, 33}, -1, log);    // a warp per row
      checkSoftmaxBackward(dt, {3, 5000}, 1, log);   // a block per row
      checkSoftmaxBackward(dt, {4, 50, 30}, 1, log); // middle axis
      checkSoftmaxBackward(dt, {40, 6}, 0, log);     // first axis
    }
  DevTensor y(DType::F32, {4, 6}), g(DType::F32, {6, 4}),
      gi(DType::F32, {4, 6});
  expectSameError(cpu::softmaxBackward(y.host(), 1, g.host(), gi.host()),
                  cuda::softmaxBackward(y.dev(), 1, g.dev(), gi.dev()));
  expectSameError(cpu::softmaxBackward(y.host(), 3, y.host(), gi.host()),
                  cuda::softmaxBackward(y.dev(), 3, y.dev(), gi.dev()));
}

TEST(CudaNormLoss, SoftmaxErrors) {
  DSC_REQUIRE_GPU();
  DevTensor x(DType::F32, {4, 6}), out(DType::F32, {4, 6}),
      other(DType::F32, {6, 4}), ints(DType::I32, {4, 6});
  expectSameError(cpu::softmax(x.host(), 2, out.host()),
                  cuda::softmax(x.dev(), 2, out.dev()));
  expectSameError(cpu::logSoftmax(x.host(), -3, out.host()),
                  cuda::logSoftmax(x.dev(), -3, out.dev()));
  expectSameError(cpu::softmax(x.host(), 1, other.host()),
                  cuda::softmax(x.dev(), 1, other.dev()));
  expectSameError(cpu::softmax(ints.host(), 1, ints.host()),
                  cuda::softmax(ints.dev(), 1, ints.dev()));
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

struct LossCase {
  Shape shape; // [N, C, d...]
  DType labels;
  bool weighted;
  std::optional<int64_t> ignore;
};

std::string caseName(DType dt, const LossCase &c) {
  return shapeName(dt, c.shape) + " labels " + dtypeName(c.labels) +
         (c.weighted ? " weighted" : "") +
         (c.ignore ? " ignore " + std::to_string(*c.ignore) : "");
}

/// Labels in [0, C), every fifth the ignore index when there is one.
DevTensor makeLabels(const LossCase &c, uint32_t seed) {
  DevTensor labels(c.labels, without(c.shape, 1));
  labels.random(0, double(c.shape[1]), seed);
  if (c.ignore) {
    for (int64_t i = 0; i < labels.host().numel(); i += 5)
      labels.set(i, double(*c.ignore));
    labels.upload();
  }
  return labels;
}

constexpr Reduction kReductions[] = {Reduction::None, Reduction::Sum,
                                     Reduction::Mean};

const char *reductionName(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Sum ? "sum" : "mean";
}

/// Forward and backward of softmax_cross_entropy (nll = false) or nll_loss.
void checkLoss(DType dt, const LossCase &c, bool nll) {
  SCOPED_TRACE(std::string(nll ? "nll_loss " : "softmax_cross_entropy ") +
               caseName(dt, c));
  Shape labelShape = without(c.shape, 1);
  DevTensor x = nll ? randomTensor(dt, c.shape, -6, 0, 61)
                    : randomTensor(dt, c.shape, -4, 4, 61);
  DevTensor labels = makeLabels(c, 62);
  DevTensor weights = randomTensor(dt, {c.shape[1]}, 0.5, 2, 63);
  Tensor wh = c.weighted ? weights.host() : Tensor();
  Tensor wd = c.weighted ? weights.dev() : Tensor();
  for (Reduction r : kReductions) {
    SCOPED_TRACE(reductionName(r));
    Shape lossShape = r == Reduction::None ? labelShape : Shape{};
    Out loss(dt, lossShape);
    DevTensor gradLoss = randomTensor(dt, lossShape, 0.5, 1.5, 64);
    Out grad(dt, c.shape);
    if (nll) {
      DSC_ASSERT_OK(cpu::nllLoss(x.host(), labels.host(), wh, r, c.ignore,
                                 loss.cpu.host()));
      DSC_ASSERT_OK(cuda::nllLoss(x.dev(), labels.dev(), wd, r, c.ignore,
                                  loss.gpu.dev()));
      DSC_ASSERT_OK(cpu::nllLossBackward(x.host(), labels.host(), wh, r,
                                         c.ignore, gradLoss.host(),
                                         grad.cpu.host()));
      DSC_ASSERT_OK(cuda::nllLossBackward(x.dev(), labels.dev(), wd, r,
                                          c.ignore, gradLoss.dev(),
                                          grad.gpu.dev()));
    } else {
      DSC_ASSERT_OK(cpu::softmaxCrossEntropy(x.host(), labels.host(), wh, r,
                                             c.ignore, loss.cpu.host()));
      DSC_ASSERT_OK(cuda::softmaxCrossEntropy(x.dev(), labels.dev(), wd, r,
                                              c.ignore, loss.gpu.dev()));
      DSC_ASSERT_OK(cpu::softmaxCrossEntropyBackward(
          x.host(), labels.host(), wh, r, c.ignore, gradLoss.host(),
          grad.cpu.host()));
      DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
          x.dev(), labels.dev(), wd, r, c.ignore, gradLoss.dev(),
          grad.gpu.dev()));
      // Written over the scores (dsc.overwrites): the same bits.
      DevTensor y = randomTensor(dt, c.shape, -4, 4, 61);
      DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
          y.dev(), labels.dev(), wd, r, c.ignore, gradLoss.dev(), y.dev()));
      EXPECT_TRUE(y.download() == grad.gpu.download())
          << "the gradient written over its scores differs";
    }
    close(loss, dt, "loss",
          r == Reduction::Sum ? sumTol(labels.host().numel()) : 1e-6);
    close(grad, dt, "grad", 1e-7);
  }
}

std::vector<LossCase> lossCases() {
  return {
      {{37, 11}, DType::I64, false, std::nullopt},
      {{37, 11}, DType::I64, true, std::nullopt},
      {{37, 11}, DType::I32, true, -100},
      {{37, 11}, DType::I64, false, 3},     // an ignore index inside [0, C)
      {{64, 5000}, DType::I64, true, -100}, // a block per row
      {{4, 7, 5, 3}, DType::I32, true, -1}, // spatial, a warp per line
      {{8, 10, 16, 16}, DType::I64, false, -100}, // spatial, a thread per line
      {{2, 1500, 6}, DType::I64, true, std::nullopt}, // spatial, blocks
  };
}

TEST(CudaNormLoss, SoftmaxCrossEntropy) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats)
    for (const LossCase &c : lossCases())
      checkLoss(dt, c, false);
}

TEST(CudaNormLoss, NllLoss) {
  DSC_REQUIRE_GPU();
  for (DType dt : kFloats)
    for (const LossCase &c : lossCases())
      checkLoss(dt, c, true);
}

TEST(CudaNormLoss, LossAllIgnored) {
  DSC_REQUIRE_GPU();
  // Mean over no labels is 0 / 0 on both.
  DevTensor x = randomTensor(DType::F32, {6, 4}, -2, 2, 71);
  DevTensor labels(DType::I64, {6});
  labels.values(std::vector<double>(6, -100));
  for (bool nll : {false, true}) {
    Out loss(DType::F32, {});
    if (nll) {
      DSC_ASSERT_OK(cpu::nllLoss(x.host(), labels.host(), Tensor(),
                                 Reduction::Mean, -100, loss.cpu.host()));
      DSC_ASSERT_OK(cuda::nllLoss(x.dev(), labels.dev(), Tensor(),
                                  Reduction::Mean, -100, loss.gpu.dev()));
    } else {
      DSC_ASSERT_OK(cpu::softmaxCrossEntropy(x.host(), labels.host(), Tensor(),
                                             Reduction::Mean, -100,
                                             loss.cpu.host()));
      DSC_ASSERT_OK(cuda::softmaxCrossEntropy(x.dev(), labels.dev(), Tensor(),
                                              Reduction::Mean, -100,
                                              loss.gpu.dev()));
    }
    close(loss, DType::F32, nll ? "nll mean" : "cross entropy mean");
  }
}

TEST(CudaNormLoss, LabelOutOfRange) {
  DSC_REQUIRE_GPU();
  const int64_t n = 40, c = 11;
  DevTensor x = randomTensor(DType::F32, {n, c}, -2, 2, 81);
  DevTensor labels = randomTensor(DType::I64, {n}, 0, double(c), 82);
  labels.set(7, -3); // the first bad one
  labels.set(9, -100);
  labels.set(23, double(c));
  labels.upload();
  DevTensor gradLoss = randomTensor(DType::F32, {}, 1, 2, 83);
  for (Reduction r : kReductions) {
    SCOPED_TRACE(reductionName(r));
    Shape lossShape = r == Reduction::None ? Shape{n} : Shape{};
    DevTensor loss(DType::F32, lossShape);
    Status cpuStatus = cpu::softmaxCrossEntropy(x.host(), labels.host(),
                                                Tensor(), r, -100, loss.host());
    EXPECT_EQ(cpuStatus.code(), StatusCode::OutOfRange);
    expectSameError(cpuStatus,
                    cuda::softmaxCrossEntropy(x.dev(), labels.dev(), Tensor(),
                                              r, -100, loss.dev()));
    expectSameError(
        cpu::nllLoss(x.host(), labels.host(), Tensor(), r, -100, loss.host()),
        cuda::nllLoss(x.dev(), labels.dev(), Tensor(), r, -100, loss.dev()));
  }
  // Without an ignore index, -100 is out of range too; 7 is still first.
  DevTensor loss(DType::F32, {});
  expectSameError(
      cpu::softmaxCrossEntropy(x.host(), labels.host(), Tensor(),
                               Reduction::Sum, std::nullopt, loss.host()),
      cuda::softmaxCrossEntropy(x.dev(), labels.dev(), Tensor(), Reduction::Sum,
                                std::nullopt, loss.dev()));
  // i32 labels, a spatial case: the message gives the flat position.
  DevTensor xs = randomTensor(DType::F64, {2, 5, 3}, -2, 2, 84);
  DevTensor ls(DType::I32, {2, 3});
  ls.values({0, 1, 2, 3, 4, 5});
  DevTensor ws = randomTensor(DType::F64, {5}, 0.5, 2, 85);
  DevTensor lossS(DType::F64, {2, 3});
  expectSameError(cpu::nllLoss(xs.host(), ls.host(), ws.host(), Reduction::None,
                               std::nullopt, lossS.host()),
                  cuda::nllLoss(xs.dev(), ls.dev(), ws.dev(), Reduction::None,
                                std::nullopt, lossS.dev()));
  // The backward kernels check only with DSC_CUDA_SYNC=1 (the forward has
  // checked the same labels); either way they stay inside their buffers.
  DevTensor grad(DType::F32, {n, c});
  Status cpuBack = cpu::softmaxCrossEntropyBackward(
      x.host(), labels.host(), Tensor(), Reduction::Mean, -100, gradLoss.host(),
      grad.host());
  Status gpuBack = cuda::softmaxCrossEntropyBackward(
      x.dev(), labels.dev(), Tensor(), Reduction::Mean, -100, gradLoss.dev(),
      grad.dev());
  if (!gpuBack.ok()) {
    expectSameError(cpuBack, gpuBack);
  }
  gpuBack =
      cuda::nllLossBackward(x.dev(), labels.dev(), Tensor(), Reduction::Mean,
                            -100, gradLoss.dev(), grad.dev());
  if (!gpuBack.ok()) {
    EXPECT_EQ(gpuBack.code(), StatusCode::OutOfRange);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
}

TEST(CudaNormLoss, LossErrors) {
  DSC_REQUIRE_GPU();
  DevTensor x(DType::F32, {4, 5}), fl(DType::F32, {4}), l(DType::I64, {4}),
      l3(DType::I64, {3}), w(DType::F32, {4}), scalar(DType::F32, {}),
      vec(DType::F32, {4});
  expectSameError(cpu::softmaxCrossEntropy(x.host(), fl.host(), Tensor(),
                                           Reduction::Mean, {}, scalar.host()),
                  cuda::softmaxCrossEntropy(x.dev(), fl.dev(), Tensor(),
                                            Reduction::Mean, {}, scalar.dev()));
  expectSameError(cpu::softmaxCrossEntropy(x.host(), l3.host(), Tensor(),
                                           Reduction::Mean, {}, scalar.host()),
                  cuda::softmaxCrossEntropy(x.dev(), l3.dev(), Tensor(),
                                            Reduction::Mean, {}, scalar.dev()));
  expectSameError(cpu::nllLoss(x.host(), l.host(), w.host(), Reduction::Mean,
                               {}, scalar.host()),
                  cuda::nllLoss(x.dev(), l.dev(), w.dev(), Reduction::Mean, {},
                                scalar.dev()));
  expectSameError(cpu::nllLoss(x.host(), l.host(), Tensor(), Reduction::None,
                               {}, scalar.host()),
                  cuda::nllLoss(x.dev(), l.dev(), Tensor(), Reduction::None, {},
                                scalar.dev()));
  expectSameError(cpu::softmaxCrossEntropyBackward(x.host(), l.host(), Tensor(),
                                                   Reduction::Sum, {},
                                                   scalar.host(), vec.host()),
                  cuda::softmaxCrossEntropyBackward(x.dev(), l.dev(), Tensor(),
                                                    Reduction::Sum, {},
                                                    scalar.dev(), vec.dev()));
  expectSameError(
      cpu::nllLossBackward(x.host(), l.host(), Tensor(), Reduction::Sum, {},
                           scalar.host(), vec.host()),
      cuda::nllLossBackward(x.dev(), l.dev(), Tensor(), Reduction::Sum, {},
                            scalar.dev(), vec.dev()));
}

//===----------------------------------------------------------------------===//
// Cross entropy on 16-bit scores
//===----------------------------------------------------------------------===//

/// A copy of `t`'s device bytes as a host tensor of the same dtype/shape.
struct Downloaded {
  std::vector<char> bytes;
  Tensor t;
  explicit Downloaded(const DevTensor &d) : bytes(d.download()), t(d.host()) {
    t.data = bytes.data();
  }
  bool sameBits(const Downloaded &o) const {
    return t.nbytes() == o.t.nbytes() &&
           std::memcmp(t.data, o.t.data, t.nbytes()) == 0;
  }
};

/// The first element whose bits differ, or -1.
int64_t firstDiff(const Downloaded &a, const Downloaded &b) {
  size_t es = a.t.nbytes() / std::max<int64_t>(a.t.numel(), 1);
  for (int64_t i = 0; i < a.t.numel(); ++i)
    if (std::memcmp(a.bytes.data() + i * es, b.bytes.data() + i * es, es))
      return i;
  return -1;
}

/// bf16/f16 scores and their exact f32 widening, on host and device.
struct HalfScores {
  DevTensor half, wide;
  HalfScores(DType dt, const Shape &shape, double lo, double hi, uint32_t seed)
      : half(randomTensor(dt, shape, lo, hi, seed)), wide(DType::F32, shape) {
    EXPECT_TRUE(cpu::cast(half.host(), wide.host()).ok());
    wide.upload();
  }
};

/// For 16-bit scores, the CUDA results are bitwise the CUDA f32 path's on
/// the widened scores (loss, f32 gradient; a 16-bit gradient is the f32 one
/// cast with round to nearest even), and the CPU's within the f32 tests'
/// tolerances (the CPU and the GPU sum in different orders; a 16-bit
/// gradient within one 16-bit rounding of the CPU's).
void checkHalfLoss(DType dt, const LossCase &c) {
  SCOPED_TRACE("softmax_cross_entropy " + caseName(dt, c));
  Shape labelShape = without(c.shape, 1);
  HalfScores x(dt, c.shape, -8, 8, 61);
  DevTensor labels = makeLabels(c, 62);
  DevTensor weights = randomTensor(DType::F32, {c.shape[1]}, 0.5, 2, 63);
  Tensor wh = c.weighted ? weights.host() : Tensor();
  Tensor wd = c.weighted ? weights.dev() : Tensor();
  double halfTol = dt == DType::BF16 ? 1.0 / 128 : 1.0 / 1024;
  for (Reduction r : kReductions) {
    SCOPED_TRACE(reductionName(r));
    Shape lossShape = r == Reduction::None ? labelShape : Shape{};
    Out loss(DType::F32, lossShape);
    DevTensor loss32(DType::F32, lossShape);
    DevTensor gradLoss = randomTensor(DType::F32, lossShape, 0.5, 1.5, 64);
    Out grad(DType::F32, c.shape), grad16(dt, c.shape);
    DevTensor grad32(DType::F32, c.shape);
    DSC_ASSERT_OK(cpu::softmaxCrossEntropy(x.half.host(), labels.host(), wh, r,
                                           c.ignore, loss.cpu.host()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropy(x.half.dev(), labels.dev(), wd, r,
                                            c.ignore, loss.gpu.dev()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropy(x.wide.dev(), labels.dev(), wd, r,
                                            c.ignore, loss32.dev()));
    DSC_ASSERT_OK(cpu::softmaxCrossEntropyBackward(
        x.half.host(), labels.host(), wh, r, c.ignore, gradLoss.host(),
        grad.cpu.host()));
    DSC_ASSERT_OK(cpu::softmaxCrossEntropyBackward(
        x.half.host(), labels.host(), wh, r, c.ignore, gradLoss.host(),
        grad16.cpu.host()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
        x.half.dev(), labels.dev(), wd, r, c.ignore, gradLoss.dev(),
        grad.gpu.dev()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
        x.half.dev(), labels.dev(), wd, r, c.ignore, gradLoss.dev(),
        grad16.gpu.dev()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
        x.wide.dev(), labels.dev(), wd, r, c.ignore, gradLoss.dev(),
        grad32.dev()));

    Downloaded l16(loss.gpu), l32(loss32), g16(grad.gpu), g32(grad32),
        h16(grad16.gpu);
    EXPECT_TRUE(l16.sameBits(l32)) << "loss differs at " << firstDiff(l16, l32);
    EXPECT_TRUE(g16.sameBits(g32))
        << "f32 gradient differs at " << firstDiff(g16, g32);
    DevTensor want16(dt, c.shape);
    DSC_ASSERT_OK(cpu::cast(g32.t, want16.host()));
    want16.upload();
    Downloaded w16(want16);
    EXPECT_TRUE(h16.sameBits(w16))
        << "16-bit gradient differs at " << firstDiff(h16, w16);

    close(loss, DType::F32, "loss",
          r == Reduction::Sum ? sumTol(labels.host().numel()) : 1e-6);
    // Scores in [-8, 8] (wider than the f32 tests'): the strided kernel
    // and the CPU differ by up to ~5e-5 relative in an f32 gradient there
    // (measured on the H200, 2026-12-01).
    expectClose(grad.cpu, grad.gpu, 1e-4, 1e-7, "grad f32");
    expectClose(grad16.cpu, grad16.gpu, halfTol, 1e-7,
                std::string("grad ") + dtypeName(dt));
  }
}

TEST(CudaNormLoss, SoftmaxCrossEntropyHalf) {
  DSC_REQUIRE_GPU();
  std::vector<LossCase> cases = lossCases();
  cases.push_back({{3, 5}, DType::I64, false, std::nullopt});
  cases.push_back({{7, 1000}, DType::I64, true, -100});
  cases.push_back({{5, 1031}, DType::I32, false, -100}); // odd rows, blocks
  cases.push_back({{3, 20001}, DType::I64, true, 7});
  cases.push_back({{2, 50257}, DType::I64, false, -100});
  for (DType dt : {DType::BF16, DType::F16})
    for (const LossCase &c : cases)
      checkHalfLoss(dt, c);
}

/// Scores and gradients that do not start 16 bytes aligned take the row
/// kernels' element loads and stores, with the same arithmetic: bitwise the
/// aligned results.
TEST(CudaNormLoss, SoftmaxCrossEntropyHalfUnaligned) {
  DSC_REQUIRE_GPU();
  const int64_t n = 5, c = 5001;
  LossCase lc{{n, c}, DType::I64, true, -100};
  DevTensor labels = makeLabels(lc, 72);
  DevTensor weights = randomTensor(DType::F32, {c}, 0.5, 2, 73);
  DevTensor gradLoss = randomTensor(DType::F32, {}, 0.5, 1.5, 74);
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtypeName(dt));
    DevTensor x = randomTensor(dt, {n, c}, -8, 8, 71);
    // The same values one element in.
    DevTensor padded(dt, {n * c + 1});
    std::memcpy(static_cast<char *>(padded.host().data) + dtypeSize(dt),
                x.host().data, x.host().nbytes());
    padded.upload();
    Tensor xu = x.dev();
    xu.data = static_cast<char *>(padded.dev().data) + dtypeSize(dt);
    DevTensor loss(DType::F32, {}), lossU(DType::F32, {});
    DSC_ASSERT_OK(cuda::softmaxCrossEntropy(x.dev(), labels.dev(),
                                            weights.dev(), Reduction::Mean,
                                            -100, loss.dev()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropy(
        xu, labels.dev(), weights.dev(), Reduction::Mean, -100, lossU.dev()));
    EXPECT_TRUE(Downloaded(loss).sameBits(Downloaded(lossU)));
    DevTensor grad(dt, {n, c}), gradPad(dt, {n * c + 1});
    Tensor gu = grad.dev();
    gu.data = static_cast<char *>(gradPad.dev().data) + dtypeSize(dt);
    DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
        x.dev(), labels.dev(), weights.dev(), Reduction::Mean, -100,
        gradLoss.dev(), grad.dev()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
        xu, labels.dev(), weights.dev(), Reduction::Mean, -100, gradLoss.dev(),
        gu));
    Downloaded a(grad), b(gradPad);
    EXPECT_EQ(0, std::memcmp(a.bytes.data(), b.bytes.data() + dtypeSize(dt),
                             a.t.nbytes()));
  }
}

TEST(CudaNormLoss, SoftmaxCrossEntropyHalfErrors) {
  DSC_REQUIRE_GPU();
  DevTensor bf(DType::BF16, {4, 5}), f16(DType::F16, {4, 5}),
      f32(DType::F32, {4, 5}), l(DType::I64, {4}), lossF32(DType::F32, {}),
      lossBf(DType::BF16, {}), wBf(DType::BF16, {5});
  expectSameError(cpu::softmaxCrossEntropy(bf.host(), l.host(), Tensor(),
                                           Reduction::Mean, {}, lossBf.host()),
                  cuda::softmaxCrossEntropy(bf.dev(), l.dev(), Tensor(),
                                            Reduction::Mean, {}, lossBf.dev()));
  expectSameError(cpu::softmaxCrossEntropy(bf.host(), l.host(), wBf.host(),
                                           Reduction::Mean, {}, lossF32.host()),
                  cuda::softmaxCrossEntropy(bf.dev(), l.dev(), wBf.dev(),
                                            Reduction::Mean, {},
                                            lossF32.dev()));
  expectSameError(cpu::softmaxCrossEntropyBackward(
                      bf.host(), l.host(), Tensor(), Reduction::Mean, {},
                      lossF32.host(), f16.host()),
                  cuda::softmaxCrossEntropyBackward(bf.dev(), l.dev(), Tensor(),
                                                    Reduction::Mean, {},
                                                    lossF32.dev(), f16.dev()));
  expectSameError(cpu::softmaxCrossEntropyBackward(
                      f32.host(), l.host(), Tensor(), Reduction::Mean, {},
                      lossF32.host(), bf.host()),
                  cuda::softmaxCrossEntropyBackward(
                      f32.dev(), l.dev(), Tensor(), Reduction::Mean, {},
                      lossF32.dev(), bf.dev()));
}

/// GPT-2's rows in bf16: bitwise the f32 path on the widened values, and
/// (with DSC_CE_BENCH=1, at the full 16384 x 50257 of a bf16 GPT-2 step) the
/// kernels' times, f32 against bf16.
TEST(CudaNormLoss, CrossEntropyGpt2RowsBf16) {
  DSC_REQUIRE_GPU();
  const char *bench = std::getenv("DSC_CE_BENCH");
  const bool timing = bench && std::strcmp(bench, "1") == 0;
  const int64_t n = timing ? 16384 : 1024, c = 50257;
  const Shape shape{n, c};
  HalfScores x(DType::BF16, shape, -10, 10, 93);
  LossCase lc{shape, DType::I64, false, -100};
  DevTensor labels = makeLabels(lc, 94);
  DevTensor gradLoss(DType::F32, {});
  gradLoss.values({1.0});
  DevTensor loss16(DType::F32, {}), loss32(DType::F32, {});
  DevTensor grad16(DType::BF16, shape), grad32(DType::F32, shape),
      gradWide(DType::F32, shape);
  auto fwd = [&](const DevTensor &s, const DevTensor &out) {
    return cuda::softmaxCrossEntropy(s.dev(), labels.dev(), Tensor(),
                                     Reduction::Mean, -100, out.dev());
  };
  auto bwd = [&](const DevTensor &s, const DevTensor &out) {
    return cuda::softmaxCrossEntropyBackward(s.dev(), labels.dev(), Tensor(),
                                             Reduction::Mean, -100,
                                             gradLoss.dev(), out.dev());
  };
  DSC_ASSERT_OK(fwd(x.half, loss16));
  DSC_ASSERT_OK(fwd(x.wide, loss32));
  DSC_ASSERT_OK(bwd(x.half, grad16));
  DSC_ASSERT_OK(bwd(x.half, gradWide));
  DSC_ASSERT_OK(bwd(x.wide, grad32));
  EXPECT_TRUE(Downloaded(loss16).sameBits(Downloaded(loss32)));
  Downloaded g32(grad32), gw(gradWide), g16(grad16);
  EXPECT_TRUE(gw.sameBits(g32))
      << "f32 gradient differs at " << firstDiff(gw, g32);
  DevTensor want16(DType::BF16, shape);
  DSC_ASSERT_OK(cpu::cast(g32.t, want16.host()));
  want16.upload();
  Downloaded w16(want16);
  EXPECT_TRUE(g16.sameBits(w16))
      << "bf16 gradient differs at " << firstDiff(g16, w16);
  if (!timing)
    return;
  cudaEvent_t t0, t1;
  ASSERT_EQ(cudaEventCreate(&t0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&t1), cudaSuccess);
  auto time = [&](auto &&call) {
    const int reps = 20;
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(call().ok());
    EXPECT_EQ(cudaEventRecord(t0, stream()), cudaSuccess);
    for (int i = 0; i < reps; ++i)
      EXPECT_TRUE(call().ok());
    EXPECT_EQ(cudaEventRecord(t1, stream()), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(t1), cudaSuccess);
    float ms = 0;
    EXPECT_EQ(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
    return ms / reps;
  };
  // The forward includes its label check (one small copy and a wait).
  std::printf("cross entropy %lld x %lld: forward f32 %.3f ms, bf16 %.3f ms; "
              "backward f32 -> f32 %.3f ms, bf16 -> f32 %.3f ms, "
              "bf16 -> bf16 %.3f ms\n",
              static_cast<long long>(n), static_cast<long long>(c),
              time([&] { return fwd(x.wide, loss32); }),
              time([&] { return fwd(x.half, loss16); }),
              time([&] { return bwd(x.wide, grad32); }),
              time([&] { return bwd(x.half, gradWide); }),
              time([&] { return bwd(x.half, grad16); }));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

// The classifier's summed loss and its gradient in one kernel (what
// linearCrossEntropy runs per chunk): bitwise the two calls, for f32 and
// bf16 scores, a bf16 or f32 gradient, written over the scores as the
// classifier does (and to another buffer), with ignored labels; a layout
// that is not a block per row (few classes) runs the two calls.
TEST(CudaNormLoss, CrossEntropyWithBackwardIsTheTwoCalls) {
  DSC_REQUIRE_GPU();
  for (int64_t c : {int64_t(50304), int64_t(37)})
    for (DType dt : {DType::F32, DType::BF16})
      for (bool inPlace : {true, false}) {
        SCOPED_TRACE(std::string(dtypeName(dt)) + " classes " +
                     std::to_string(c) + (inPlace ? " in place" : ""));
        const Shape shape{96, c};
        LossCase lc{shape, DType::I64, false, -100};
        DevTensor labels = makeLabels(lc, 95);
        DevTensor seed(DType::F32, {});
        seed.values({0.25});
        DevTensor x = randomTensor(dt, shape, -10, 10, 96);
        DevTensor x2 = randomTensor(dt, shape, -10, 10, 96);
        DevTensor lossA(DType::F32, {}), lossB(DType::F32, {});
        DevTensor gradA(dt, shape), gradB(dt, shape);
        DSC_ASSERT_OK(cuda::softmaxCrossEntropy(x.dev(), labels.dev(), Tensor(),
                                                Reduction::Sum, -100,
                                                lossA.dev()));
        DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
            x.dev(), labels.dev(), Tensor(), Reduction::Sum, -100, seed.dev(),
            gradA.dev()));
        const DevTensor &into = inPlace ? x2 : gradB;
        DSC_ASSERT_OK(cuda::softmaxCrossEntropyWithBackward(
            x2.dev(), labels.dev(), -100, seed.dev(), lossB.dev(), into.dev()));
        EXPECT_TRUE(Downloaded(lossA).sameBits(Downloaded(lossB)));
        Downloaded ga(gradA), gb(into);
        EXPECT_TRUE(ga.sameBits(gb))
            << "gradient differs at " << firstDiff(ga, gb);
      }
  // A label out of range is the forward's error.
  DevTensor x = randomTensor(DType::F32, {4, 50304}, -1, 1, 97);
  DevTensor labels(DType::I64, {4}), seed(DType::F32, {}), loss(DType::F32, {});
  labels.values({1, 2, 50304, 3});
  seed.values({1.0});
  Status st = cuda::softmaxCrossEntropyWithBackward(
      x.dev(), labels.dev(), -100, seed.dev(), loss.dev(), x.dev());
  EXPECT_EQ(st.code(), StatusCode::OutOfRange) << st.message();
}

/// The largest |a - b| / |b| over the elements (b the reference).
double maxRelDiff(const Tensor &a, const Tensor &b) {
  double worst = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    double r = DevTensor::get(b, i), d = std::fabs(DevTensor::get(a, i) - r);
    worst = std::max(worst, r == 0 ? d : d / std::fabs(r));
  }
  return worst;
}

/// GPT-2's logits for a 2048-token slice of a batch: a block per row of
/// 50257 classes, and bit-identical results when run again. The CPU's f32
/// sum of 50257 exponentials drifts by a few 1e-5 (relative), which shows in
/// the probabilities: the GPU's f32 results are checked within 1e-5 of the
/// CPU's f64 results on the same values, and within 1e-4 of its f32 ones.
TEST(CudaNormLoss, CrossEntropyGpt2Rows) {
  DSC_REQUIRE_GPU();
  const int64_t n = 2048, c = 50257;
  const Shape shape{n, c};
  DevTensor x = randomTensor(DType::F32, shape, -10, 10, 91);
  DevTensor x64(DType::F64, shape);
  for (int64_t i = 0; i < n * c; ++i)
    x64.set(i, DevTensor::get(x.host(), i));
  LossCase lc{shape, DType::I64, false, -100};
  DevTensor labels = makeLabels(lc, 92);
  DevTensor gradLoss(DType::F32, {}), gradLoss64(DType::F64, {});
  gradLoss.values({1.0});
  gradLoss64.values({1.0});

  Out none(DType::F32, {n}), mean(DType::F32, {}), grad(DType::F32, shape);
  DevTensor none64(DType::F64, {n}), mean64(DType::F64, {}),
      grad64(DType::F64, shape);
  for (Reduction r : {Reduction::None, Reduction::Mean}) {
    Out &o = r == Reduction::None ? none : mean;
    DevTensor &ref = r == Reduction::None ? none64 : mean64;
    DSC_ASSERT_OK(cpu::softmaxCrossEntropy(x.host(), labels.host(), Tensor(), r,
                                           -100, o.cpu.host()));
    DSC_ASSERT_OK(cpu::softmaxCrossEntropy(x64.host(), labels.host(), Tensor(),
                                           r, -100, ref.host()));
    DSC_ASSERT_OK(cuda::softmaxCrossEntropy(x.dev(), labels.dev(), Tensor(), r,
                                            -100, o.gpu.dev()));
    expectClose(ref, o.gpu, 1e-5, 0, "gpt-2 loss vs f64");
    expectClose(o.cpu, o.gpu, 1e-5, 0, "gpt-2 loss vs f32");
  }
  DSC_ASSERT_OK(cpu::softmaxCrossEntropyBackward(
      x.host(), labels.host(), Tensor(), Reduction::Mean, -100, gradLoss.host(),
      grad.cpu.host()));
  DSC_ASSERT_OK(cpu::softmaxCrossEntropyBackward(
      x64.host(), labels.host(), Tensor(), Reduction::Mean, -100,
      gradLoss64.host(), grad64.host()));
  DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
      x.dev(), labels.dev(), Tensor(), Reduction::Mean, -100, gradLoss.dev(),
      grad.gpu.dev()));
  // Probabilities / N: about 1e-13 to 1e-4.
  expectClose(grad64, grad.gpu, 1e-5, 1e-15, "gpt-2 grad vs f64");
  expectClose(grad.cpu, grad.gpu, 1e-4, 1e-15, "gpt-2 grad vs f32");

  std::vector<char> first = grad.gpu.download();
  Tensor gpuGrad = grad.gpu.host();
  gpuGrad.data = first.data();
  std::printf("gpt-2 rows: largest relative difference of the gradient: "
              "cuda f32 vs cpu f64 %.3g, cpu f32 vs cpu f64 %.3g, "
              "cuda f32 vs cpu f32 %.3g\n",
              maxRelDiff(gpuGrad, grad64.host()),
              maxRelDiff(grad.cpu.host(), grad64.host()),
              maxRelDiff(gpuGrad, grad.cpu.host()));
  DSC_ASSERT_OK(cuda::softmaxCrossEntropyBackward(
      x.dev(), labels.dev(), Tensor(), Reduction::Mean, -100, gradLoss.dev(),
      grad.gpu.dev()));
  std::vector<char> second = grad.gpu.download();
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size()))
      << "two runs differ";
}

} // namespace
} // namespace dsc::cuda::test
