//===- OptimizerTest.cpp - optimizer.cu against the CPU kernels -----------===//
//
// AdamW and SGD over several steps, results written over their operands as
// a train step does, with the hyperparameters and the step as device
// scalars; adamwMulti bitwise against the CPU's and against mul + adamw +
// cast on the device (aligned and not, several launches, in a CUDA graph);
// sumSquares against the CPU's (several launches, misaligned, in a graph);
// lr_schedule for every schedule around warmup and the end; the CPU's errors
// for bad shapes and dtypes.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <optional>

namespace dsc::cuda::test {
namespace {

using Shape = std::vector<int64_t>;

/// Waits for every stream of the device (see ElementwiseTest.cpp).
void settle() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

void expectSameError(const Status &cpu, const Status &gpu,
                     const std::string &callName) {
  EXPECT_FALSE(cpu.ok());
  ASSERT_FALSE(gpu.ok()) << "expected the CPU's error: " << cpu.message();
  EXPECT_EQ(cpu.code(), gpu.code());
  EXPECT_EQ(cpu.message(), gpu.message());
  EXPECT_NE(gpu.message().find(callName + "("), std::string::npos)
      << gpu.message();
}

DevTensor scalar(DType dt, double v, Shape shape = {}) {
  DevTensor t(dt, shape);
  t.values({v});
  return t;
}

double rtolOf(DType dt) { return dt == DType::F64 ? 1e-12 : 2e-6; }
double atolOf(DType dt) { return dt == DType::F64 ? 1e-14 : 1e-7; }

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

struct AdamwState {
  DevTensor p, g, m, v;
  AdamwState(DType dt, const Shape &s)
      : p(dt, s), g(dt, s), m(dt, s), v(dt, s) {
    p.random(-1, 1, 1);
    g.random(-1, 1, 2);
    m.random(-0.1, 0.1, 3);
    v.random(0, 0.01, 4);
  }
};

void checkAdamwSteps(DType dt, DType hyper, const Shape &shape) {
  AdamwState s(dt, shape);
  DevTensor lr = scalar(hyper, 1e-2), b1 = scalar(hyper, 0.9),
            b2 = scalar(hyper, 0.999, {1}), eps = scalar(hyper, 1e-8),
            wd = scalar(hyper, 0.01);
  DevTensor step = scalar(DType::I64, 1);
  for (int t = 1; t <= 3; ++t) {
    settle();
    step.values({double(t)});
    s.g.random(-1, 1, 10 + t); // a new gradient every step
    settle();
    // Results over the operands, as the generated step writes them.
    DSC_ASSERT_OK(cpu::adamw(s.p.host(), s.g.host(), s.m.host(), s.v.host(),
                             lr.host(), b1.host(), b2.host(), eps.host(),
                             wd.host(), step.host(), s.p.host(), s.m.host(),
                             s.v.host()));
    DSC_ASSERT_OK(cuda::adamw(s.p.dev(), s.g.dev(), s.m.dev(), s.v.dev(),
                              lr.dev(), b1.dev(), b2.dev(), eps.dev(), wd.dev(),
                              step.dev(), s.p.dev(), s.m.dev(), s.v.dev()));
    std::string what = std::string("adamw ") + dtypeName(dt) + " hyper " +
                       dtypeName(hyper) + " step " + std::to_string(t);
    expectClose(s.p, s.p, rtolOf(dt), atolOf(dt), what + " param");
    expectClose(s.m, s.m, rtolOf(dt), atolOf(dt), what + " exp_avg");
    expectClose(s.v, s.v, rtolOf(dt), atolOf(dt), what + " exp_avg_sq");
  }
}

TEST(CudaOptimizer, AdamwInPlaceOverThreeSteps) {
  DSC_REQUIRE_GPU();
  checkAdamwSteps(DType::F32, DType::F32, {1000});
  checkAdamwSteps(DType::F32, DType::F64, {3, 37});
  checkAdamwSteps(DType::F64, DType::F64, {4099});
  checkAdamwSteps(DType::F64, DType::F32, {});
}

TEST(CudaOptimizer, AdamwSeparateResults) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64}) {
    AdamwState s(dt, {257});
    DevTensor np(dt, {257}), nm(dt, {257}), nv(dt, {257});
    DevTensor lr = scalar(DType::BF16, 0.0625), b1 = scalar(DType::F32, 0.8),
              b2 = scalar(DType::F64, 0.99), eps = scalar(DType::F16, 1e-3),
              wd = scalar(DType::F32, 0);
    DevTensor step = scalar(DType::I32, 7);
    DSC_ASSERT_OK(cpu::adamw(s.p.host(), s.g.host(), s.m.host(), s.v.host(),
                             lr.host(), b1.host(), b2.host(), eps.host(),
                             wd.host(), step.host(), np.host(), nm.host(),
                             nv.host()));
    settle();
    DSC_ASSERT_OK(cuda::adamw(s.p.dev(), s.g.dev(), s.m.dev(), s.v.dev(),
                              lr.dev(), b1.dev(), b2.dev(), eps.dev(), wd.dev(),
                              step.dev(), np.dev(), nm.dev(), nv.dev()));
    expectClose(np, np, rtolOf(dt), atolOf(dt), "adamw new param");
    expectClose(nm, nm, rtolOf(dt), atolOf(dt), "adamw new exp_avg");
    expectClose(nv, nv, rtolOf(dt), atolOf(dt), "adamw new exp_avg_sq");
    // The operands are untouched.
    expectClose(s.p, s.p, 0, 0, "adamw param");
    expectClose(s.m, s.m, 0, 0, "adamw exp_avg");
  }
}

//===----------------------------------------------------------------------===//
// adamw_multi
//===----------------------------------------------------------------------===//

/// The bytes of the device copy of `t` against its host bytes (the CUDA
/// result against the CPU's when each ran on its side).
void expectSameBits(const DevTensor &t, const std::string &what) {
  std::vector<char> dev = t.download();
  const char *host = static_cast<const char *>(t.host().data);
  size_t es = dtypeSize(t.host().dtype), n = t.host().nbytes();
  for (size_t i = 0; i < n; i += es)
    if (std::memcmp(dev.data() + i, host + i, es) != 0) {
      ADD_FAILURE() << what << " element " << i / es << " of " << n / es
                    << ": cpu " << DevTensor::get(t.host(), int64_t(i / es))
                    << ", cuda " << [&] {
                         Tensor d = t.host();
                         d.data = dev.data();
                         return DevTensor::get(d, int64_t(i / es));
                       }();
      return;
    }
}

/// The device bytes of two tensors (two CUDA computations) against each
/// other.
void expectSameDeviceBits(const DevTensor &a, const DevTensor &b,
                          const std::string &what) {
  std::vector<char> x = a.download(), y = b.download();
  size_t es = dtypeSize(a.host().dtype), n = a.host().nbytes();
  ASSERT_EQ(n, b.host().nbytes()) << what;
  for (size_t i = 0; i < n; i += es)
    if (std::memcmp(x.data() + i, y.data() + i, es) != 0) {
      ADD_FAILURE() << what << " element " << i / es << " of " << n / es
                    << " differs";
      return;
    }
}

enum class CopyMode { None, Bf16, F16, Mixed };

std::optional<DType> copyTypeOf(CopyMode mode, size_t entry) {
  switch (mode) {
  case CopyMode::None:
    return std::nullopt;
  case CopyMode::Bf16:
    return DType::BF16;
  case CopyMode::F16:
    return DType::F16;
  case CopyMode::Mixed:
    if (entry % 3 == 1)
      return std::nullopt;
    return entry % 3 == 0 ? DType::BF16 : DType::F16;
  }
  return std::nullopt;
}

/// One parameter's tensors; `shift` elements of each buffer come before
/// the view (1: misaligned for 16-byte access), the copy's `copyShift`.
struct MultiBufs {
  DevTensor p, g, m, v, np, nm, nv, copy;
  std::optional<DType> copyType;
  int64_t n = 0, shift = 0, copyShift = 0;

  MultiBufs(DType dt, int64_t n, std::optional<DType> copyType, uint32_t seed,
            int64_t shift = 0, int64_t copyShift = 0)
      : p(dt, {n + shift}), g(dt, {n + shift}), m(dt, {n + shift}),
        v(dt, {n + shift}), np(dt, {n + shift}), nm(dt, {n + shift}),
        nv(dt, {n + shift}),
        copy(copyType.value_or(DType::BF16), {n + copyShift}),
        copyType(copyType), n(n), shift(shift), copyShift(copyShift) {
    p.random(-1, 1, seed);
    m.random(-0.1, 0.1, seed + 1);
    v.random(0, 0.01, seed + 2);
  }

  Tensor view(const Tensor &t, int64_t skip) const {
    Tensor r = t;
    r.data = static_cast<char *>(t.data) + skip * dtypeSize(t.dtype);
    r.rank = 1;
    r.shape[0] = n;
    return r;
  }
  /// Results over the operands (inPlace) or into np, nm, nv.
  cpu::AdamwTensors entry(bool device, bool inPlace) const {
    auto of = [&](const DevTensor &t) {
      return view(device ? t.dev() : t.host(), shift);
    };
    cpu::AdamwTensors e{of(p),  of(g),  of(m),  of(v),
                        of(np), of(nm), of(nv), Tensor()};
    if (inPlace)
      e.newParam = e.param, e.newExpAvg = e.expAvg, e.newExpAvgSq = e.expAvgSq;
    if (copyType)
      e.computeCopy = view(device ? copy.dev() : copy.host(), copyShift);
    return e;
  }
};

struct MultiHyper {
  DevTensor lr, b1, b2, eps, wd, step, scale, prescale;
  explicit MultiHyper(DType dt)
      : lr(scalar(dt, 3e-3)), b1(scalar(dt, 0.9)), b2(scalar(dt, 0.95)),
        eps(scalar(dt, 1e-8)), wd(scalar(dt, 0.1)), step(scalar(DType::I64, 1)),
        scale(scalar(dt, 1.0 / 7.0)), prescale(scalar(dt, 1.0 / 3.0)) {}
};

std::vector<cpu::AdamwTensors> entriesOf(const std::vector<MultiBufs> &bufs,
                                         bool device, bool inPlace) {
  std::vector<cpu::AdamwTensors> es;
  for (const MultiBufs &b : bufs)
    es.push_back(b.entry(device, inPlace));
  return es;
}

/// `scales`: bit 0 the gradient scale, bit 1 the prescale (applied first).
Status runCpu(const std::vector<MultiBufs> &bufs, const MultiHyper &h,
              int scales, bool inPlace) {
  std::vector<cpu::AdamwTensors> es = entriesOf(bufs, false, inPlace);
  return cpu::adamwMulti(es.data(), es.size(), h.lr.host(), h.b1.host(),
                         h.b2.host(), h.eps.host(), h.wd.host(), h.step.host(),
                         scales & 1 ? h.scale.host() : Tensor(),
                         scales & 2 ? h.prescale.host() : Tensor());
}

Status runCuda(const std::vector<MultiBufs> &bufs, const MultiHyper &h,
               int scales, bool inPlace) {
  std::vector<cpu::AdamwTensors> es = entriesOf(bufs, true, inPlace);
  return cuda::adamwMulti(es.data(), es.size(), h.lr.dev(), h.b1.dev(),
                          h.b2.dev(), h.eps.dev(), h.wd.dev(), h.step.dev(),
                          scales & 1 ? h.scale.dev() : Tensor(),
                          scales & 2 ? h.prescale.dev() : Tensor());
}

/// cuda::mul + cuda::adamw + cuda::cast, entry by entry, on the device.
void runCudaComposition(const std::vector<MultiBufs> &bufs, const MultiHyper &h,
                        int scales, bool inPlace) {
  for (const MultiBufs &b : bufs) {
    if (b.n == 0)
      continue;
    cpu::AdamwTensors e = b.entry(true, inPlace);
    DevTensor scaledGrad(e.grad.dtype, {b.n});
    Tensor grad = e.grad;
    for (int bit : {2, 1})
      if (scales & bit) {
        const DevTensor &s = bit == 2 ? h.prescale : h.scale;
        DSC_ASSERT_OK(
            cuda::binary(BinaryOp::Mul, grad, s.dev(), scaledGrad.dev()));
        grad = scaledGrad.dev();
      }
    DSC_ASSERT_OK(cuda::adamw(e.param, grad, e.expAvg, e.expAvgSq, h.lr.dev(),
                              h.b1.dev(), h.b2.dev(), h.eps.dev(), h.wd.dev(),
                              h.step.dev(), e.newParam, e.newExpAvg,
                              e.newExpAvgSq));
    if (e.computeCopy.present()) {
      DSC_ASSERT_OK(cuda::cast(e.newParam, e.computeCopy));
    }
    settle(); // scaledGrad is freed at the end of the iteration
  }
}

/// CUDA adamwMulti against the CPU's (bitwise for f32; f64 within adamw's
/// tolerance, the device's double pow being allowed its last bit) and
/// against the CUDA composition mul + adamw + cast (bitwise), over three
/// steps.
void checkAdamwMulti(DType dt, const std::vector<int64_t> &sizes, int scales,
                     CopyMode copyMode, bool inPlace, int64_t shift = 0,
                     int64_t copyShift = 0) {
  std::vector<MultiBufs> multi, ref;
  for (size_t i = 0; i < sizes.size(); ++i) {
    uint32_t seed = 100 + 10 * uint32_t(i);
    multi.emplace_back(dt, sizes[i], copyTypeOf(copyMode, i), seed, shift,
                       copyShift);
    ref.emplace_back(dt, sizes[i], copyTypeOf(copyMode, i), seed, shift,
                     copyShift);
  }
  MultiHyper h(dt);
  for (int t = 1; t <= 3; ++t) {
    settle();
    h.step.values({double(t)});
    for (size_t i = 0; i < sizes.size(); ++i) {
      multi[i].g.random(-3, 3, 1000 * uint32_t(t) + uint32_t(i));
      ref[i].g.random(-3, 3, 1000 * uint32_t(t) + uint32_t(i));
    }
    settle();
    DSC_ASSERT_OK(runCpu(multi, h, scales, inPlace));
    DSC_ASSERT_OK(runCuda(multi, h, scales, inPlace));
    runCudaComposition(ref, h, scales, inPlace);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const MultiBufs &a = multi[i], &r = ref[i];
      std::string what = std::string("adamw_multi ") + dtypeName(dt) +
                         " entry " + std::to_string(i) + " (" +
                         std::to_string(sizes[i]) + ") step " +
                         std::to_string(t);
      const DevTensor *outs[] = {inPlace ? &a.p : &a.np, inPlace ? &a.m : &a.nm,
                                 inPlace ? &a.v : &a.nv};
      const DevTensor *refs[] = {inPlace ? &r.p : &r.np, inPlace ? &r.m : &r.nm,
                                 inPlace ? &r.v : &r.nv};
      const char *names[] = {" param", " exp_avg", " exp_avg_sq"};
      for (int k = 0; k < 3; ++k) {
        if (dt == DType::F32)
          expectSameBits(*outs[k], what + names[k]);
        else
          expectClose(*outs[k], *outs[k], rtolOf(dt), atolOf(dt),
                      what + names[k]);
        expectSameDeviceBits(*outs[k], *refs[k], what + names[k] + " vs mul");
      }
      expectSameBits(a.g, what + " grad (untouched)");
      if (a.copyType) {
        if (dt == DType::F32)
          expectSameBits(a.copy, what + " compute copy");
        expectSameDeviceBits(a.copy, r.copy, what + " compute copy vs cast");
      }
    }
  }
}

const std::vector<int64_t> kOddSizes = {1, 3, 1000, 4097, 0, 257};

TEST(CudaOptimizer, AdamwMultiMatchesCpuAndComposition) {
  DSC_REQUIRE_GPU();
  for (int scales : {0, 1, 2, 3})
    for (CopyMode copy :
         {CopyMode::None, CopyMode::Bf16, CopyMode::F16, CopyMode::Mixed})
      for (bool inPlace : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "scales " << scales << " copy " << int(copy)
                     << " in place " << inPlace);
        checkAdamwMulti(DType::F32, kOddSizes, scales, copy, inPlace);
      }
  for (int scales : {0, 1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "f64 scales " << scales);
    checkAdamwMulti(DType::F64, kOddSizes, scales, CopyMode::Mixed, true);
  }
}

TEST(CudaOptimizer, AdamwMultiMisalignedTakesTheScalarPath) {
  DSC_REQUIRE_GPU();
  // Every pointer 4 bytes past 16-byte alignment, then only the copy 4
  // bytes past 8-byte alignment (f32) or 2 past 4 (f64).
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtypeName(dt));
    checkAdamwMulti(dt, {5, 1001, 4099}, true, CopyMode::Bf16, true, 1, 1);
    checkAdamwMulti(dt, {5, 1001, 4099}, true, CopyMode::F16, false, 0,
                    dt == DType::F32 ? 2 : 1);
  }
}

TEST(CudaOptimizer, AdamwMultiMoreEntriesThanOneLaunch) {
  DSC_REQUIRE_GPU();
  // Past the 360 entries of one kernel's table: three launches.
  std::vector<int64_t> sizes;
  for (int i = 0; i < 800; ++i)
    sizes.push_back(i == 400 ? 20000 : (i * 37) % 11); // zeros among them
  checkAdamwMulti(DType::F32, sizes, true, CopyMode::Mixed, true);
}

TEST(CudaOptimizer, AdamwMultiInACudaGraph) {
  DSC_REQUIRE_GPU();
  std::vector<MultiBufs> bufs;
  for (size_t i = 0; i < kOddSizes.size(); ++i)
    bufs.emplace_back(DType::F32, kOddSizes[i], copyTypeOf(CopyMode::Mixed, i),
                      300 + 10 * uint32_t(i));
  MultiHyper h(DType::F32);
  // Step 0 writes nothing: a first launch outside the capture, so the
  // module is loaded.
  h.step.values({0});
  DSC_ASSERT_OK(runCuda(bufs, h, true, true));
  settle();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeGlobal),
            cudaSuccess);
  Status st = runCuda(bufs, h, true, true);
  ASSERT_EQ(cudaStreamEndCapture(stream(), &graph), cudaSuccess);
  DSC_ASSERT_OK(st);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int t = 1; t <= 2; ++t) {
    settle();
    h.step.values({double(t)}); // the graph reads the step on the device
    for (size_t i = 0; i < bufs.size(); ++i)
      bufs[i].g.random(-3, 3, 50 * uint32_t(t) + uint32_t(i));
    settle();
    DSC_ASSERT_OK(runCpu(bufs, h, true, true));
    ASSERT_EQ(cudaGraphLaunch(exec, stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    for (size_t i = 0; i < bufs.size(); ++i) {
      std::string what =
          "graph step " + std::to_string(t) + " entry " + std::to_string(i);
      expectSameBits(bufs[i].p, what + " param");
      expectSameBits(bufs[i].m, what + " exp_avg");
      expectSameBits(bufs[i].v, what + " exp_avg_sq");
      if (bufs[i].copyType)
        expectSameBits(bufs[i].copy, what + " compute copy");
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(CudaOptimizer, AdamwMultiErrorsAreTheCpus) {
  DSC_REQUIRE_GPU();
  MultiHyper h(DType::F32);
  DevTensor p(DType::F32, {8}), g7(DType::F32, {7}), d(DType::F64, {8});
  DevTensor bf7(DType::BF16, {7}), f8(DType::F32, {8}), vec(DType::F32, {2});
  auto entry = [](const DevTensor &t, const DevTensor &g, bool device,
                  const DevTensor *copy = nullptr) {
    const Tensor &x = device ? t.dev() : t.host();
    cpu::AdamwTensors e{x,       device ? g.dev() : g.host(), x, x, x, x, x,
                        Tensor()};
    if (copy)
      e.computeCopy = device ? copy->dev() : copy->host();
    return e;
  };
  auto both = [&](auto makeEntries, const DevTensor *scale) {
    std::vector<cpu::AdamwTensors> he = makeEntries(false),
                                   de = makeEntries(true);
    expectSameError(
        cpu::adamwMulti(he.data(), he.size(), h.lr.host(), h.b1.host(),
                        h.b2.host(), h.eps.host(), h.wd.host(), h.step.host(),
                        scale ? scale->host() : Tensor()),
        cuda::adamwMulti(de.data(), de.size(), h.lr.dev(), h.b1.dev(),
                         h.b2.dev(), h.eps.dev(), h.wd.dev(), h.step.dev(),
                         scale ? scale->dev() : Tensor()),
        "adamw_multi");
  };
  both(
      [&](bool dev) {
        return std::vector<cpu::AdamwTensors>{entry(p, p, dev),
                                              entry(p, g7, dev)};
      },
      nullptr);
  both(
      [&](bool dev) {
        return std::vector<cpu::AdamwTensors>{entry(p, p, dev),
                                              entry(d, d, dev)};
      },
      nullptr);
  both(
      [&](bool dev) {
        return std::vector<cpu::AdamwTensors>{entry(p, p, dev, &bf7)};
      },
      nullptr);
  both(
      [&](bool dev) {
        return std::vector<cpu::AdamwTensors>{entry(p, p, dev, &f8)};
      },
      nullptr);
  both(
      [&](bool dev) {
        return std::vector<cpu::AdamwTensors>{entry(p, p, dev)};
      },
      &vec);
  DevTensor scale64 = scalar(DType::F64, 0.5);
  both(
      [&](bool dev) {
        return std::vector<cpu::AdamwTensors>{entry(p, p, dev)};
      },
      &scale64);
}

/// As adamw: a step below 1 cannot be reported on the device, so nothing is
/// written, the compute copy included.
TEST(CudaOptimizer, AdamwMultiStepBelowOneLeavesResultsUntouched) {
  DSC_REQUIRE_GPU();
  std::vector<MultiBufs> bufs;
  for (size_t i = 0; i < kOddSizes.size(); ++i)
    bufs.emplace_back(DType::F32, kOddSizes[i], DType::BF16,
                      500 + 10 * uint32_t(i));
  MultiHyper h(DType::F32);
  h.step.values({0});
  settle();
  DSC_ASSERT_OK(runCuda(bufs, h, true, true));
  for (const MultiBufs &b : bufs) {
    expectSameBits(b.p, "param");
    expectSameBits(b.m, "exp_avg");
    expectSameBits(b.v, "exp_avg_sq");
    expectSameBits(b.copy, "compute copy");
  }
}

//===----------------------------------------------------------------------===//
// SGD
//===----------------------------------------------------------------------===//

void checkSgdSteps(DType dt, DType hyper, double momentum, double dampening,
                   bool nesterov, double weightDecay) {
  Shape shape = {5, 203};
  DevTensor p(dt, shape), g(dt, shape), buf(dt, shape);
  p.random(-1, 1, 5);
  buf.random(-1, 1, 6); // garbage before step 1, which must ignore it
  DevTensor lr = scalar(hyper, 0.05), mom = scalar(hyper, momentum),
            wd = scalar(hyper, weightDecay);
  DevTensor step = scalar(DType::I64, 1);
  for (int t = 1; t <= 3; ++t) {
    settle();
    step.values({double(t)});
    g.random(-1, 1, 20 + t);
    settle();
    DSC_ASSERT_OK(cpu::sgd(p.host(), g.host(), buf.host(), lr.host(),
                           mom.host(), wd.host(), step.host(), dampening,
                           nesterov, p.host(), buf.host()));
    DSC_ASSERT_OK(cuda::sgd(p.dev(), g.dev(), buf.dev(), lr.dev(), mom.dev(),
                            wd.dev(), step.dev(), dampening, nesterov, p.dev(),
                            buf.dev()));
    std::string what =
        std::string("sgd ") + dtypeName(dt) + " momentum " +
        std::to_string(momentum) + " dampening " + std::to_string(dampening) +
        (nesterov ? " nesterov" : "") + " step " + std::to_string(t);
    expectClose(p, p, rtolOf(dt), atolOf(dt), what + " param");
    expectClose(buf, buf, rtolOf(dt), atolOf(dt), what + " buffer");
  }
}

//===----------------------------------------------------------------------===//
// sum_squares
//===----------------------------------------------------------------------===//

/// sumSquares over tensors of `sizes` (offset by `misalign` elements from
/// their allocation, so the scalar path runs) on the device against the
/// CPU's: within the reordering of double additions (the f64 result to
/// 1e-13, the f32 one to 1 ulp), and the same bits on a second run.
void checkSumSquares(DType dt, const std::vector<int64_t> &sizes, bool scaled,
                     int64_t misalign = 0) {
  std::vector<DevTensor> bufs;
  std::vector<Tensor> host, dev;
  for (size_t i = 0; i < sizes.size(); ++i) {
    bufs.emplace_back(dt, Shape{sizes[i] + misalign});
    bufs.back().random(-3, 3, 700 + uint32_t(i));
  }
  size_t es = dt == DType::F64 ? 8 : 4;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor h = bufs[i].host(), d = bufs[i].dev();
    h.shape[0] = d.shape[0] = sizes[i];
    h.data = static_cast<char *>(h.data) + misalign * es;
    d.data = static_cast<char *>(d.data) + misalign * es;
    host.push_back(h), dev.push_back(d);
  }
  DevTensor scale = scalar(DType::F32, 1.0 / 7.0);
  Tensor hs = scaled ? scale.host() : Tensor(),
         ds = scaled ? scale.dev() : Tensor();
  for (DType out : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtypeName(out));
    DevTensor c(out, {}), g(out, {}), again(out, {});
    DSC_ASSERT_OK(cpu::sumSquares(host.data(), host.size(), hs, c.host()));
    DSC_ASSERT_OK(sumSquares(dev.data(), dev.size(), ds, g.dev()));
    DSC_ASSERT_OK(sumSquares(dev.data(), dev.size(), ds, again.dev()));
    expectClose(c, g, out == DType::F64 ? 1e-13 : 1.2e-7, 0);
    EXPECT_EQ(g.download(), again.download()) << "not the same bits twice";
  }
}

TEST(CudaSumSquares, MatchesCpu) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64})
    for (bool scaled : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << dtypeName(dt) << " scaled " << scaled);
      checkSumSquares(dt, {1, 3, 1000, 4097, 0, 257, 70001, 16384}, scaled);
      checkSumSquares(dt, {5, 1001, 40999}, scaled, /*misalign=*/1);
    }
}

TEST(CudaSumSquares, SameBitsWhateverTheAlignment) {
  DSC_REQUIRE_GPU();
  // The same 50001 values at a 16-byte aligned address and 4 bytes past
  // one: the vector and the scalar paths sum them in the same order.
  const int64_t n = 50001;
  DevTensor a(DType::F32, {n}), b(DType::F32, {n + 1});
  a.random(-3, 3, 77);
  std::vector<double> shifted(size_t(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i)
    shifted[size_t(i + 1)] = DevTensor::get(a.host(), i);
  b.values(shifted);
  Tensor ta = a.dev(), tb = b.dev();
  tb.shape[0] = n;
  tb.data = static_cast<float *>(tb.data) + 1;
  DevTensor ra(DType::F64, {}), rb(DType::F64, {});
  DSC_ASSERT_OK(sumSquares(&ta, 1, Tensor(), ra.dev()));
  DSC_ASSERT_OK(sumSquares(&tb, 1, Tensor(), rb.dev()));
  EXPECT_EQ(ra.download(), rb.download());
}

TEST(CudaSumSquares, ManyTensorsAndLargeOnes) {
  DSC_REQUIRE_GPU();
  // Past the 1024 tensors of one launch (three launches), and 2^24 + 3
  // elements (chunks of sumSquaresChunk past its minimum).
  std::vector<int64_t> sizes;
  for (int i = 0; i < 2500; ++i)
    sizes.push_back(i == 1200 ? 20000 : (i * 37) % 11);
  checkSumSquares(DType::F32, sizes, true);
  checkSumSquares(DType::F32, {(int64_t(1) << 24) + 3, 7}, false);
}

TEST(CudaSumSquares, InACudaGraph) {
  DSC_REQUIRE_GPU();
  std::vector<DevTensor> bufs;
  std::vector<Tensor> host, dev;
  for (int64_t n : {4097, 1, 30000}) {
    bufs.emplace_back(DType::F32, Shape{n});
    bufs.back().random(-1, 1, uint32_t(n));
  }
  for (DevTensor &b : bufs)
    host.push_back(b.host()), dev.push_back(b.dev());
  DevTensor scale = scalar(DType::F32, 0.5), c(DType::F32, {}),
            g(DType::F32, {});
  // A first call outside the capture loads the module and sizes scratch.
  DSC_ASSERT_OK(sumSquares(dev.data(), dev.size(), scale.dev(), g.dev()));
  settle();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeGlobal),
            cudaSuccess);
  Status st = sumSquares(dev.data(), dev.size(), scale.dev(), g.dev());
  ASSERT_EQ(cudaStreamEndCapture(stream(), &graph), cudaSuccess);
  DSC_ASSERT_OK(st);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int t = 1; t <= 2; ++t) {
    for (size_t i = 0; i < bufs.size(); ++i)
      bufs[i].random(-2, 2, 90 * uint32_t(t) + uint32_t(i));
    scale.values({0.25 * t}); // read on the device at replay
    DSC_ASSERT_OK(
        cpu::sumSquares(host.data(), host.size(), scale.host(), c.host()));
    ASSERT_EQ(cudaGraphLaunch(exec, stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    expectClose(c, g, 1.2e-7, 0, "graph replay " + std::to_string(t));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(CudaSumSquares, ErrorsAreTheCpus) {
  DSC_REQUIRE_GPU();
  DevTensor f(DType::F32, {3}), d(DType::F64, {2}), out(DType::F32, {}),
      bad(DType::I64, {});
  std::vector<Tensor> mixedH = {f.host(), d.host()},
                      mixedD = {f.dev(), d.dev()};
  expectSameError(cpu::sumSquares(mixedH.data(), 2, Tensor(), out.host()),
                  sumSquares(mixedD.data(), 2, Tensor(), out.dev()),
                  "sum_squares");
  Tensor fh = f.host(), fd = f.dev();
  expectSameError(cpu::sumSquares(&fh, 1, f.host(), out.host()),
                  sumSquares(&fd, 1, f.dev(), out.dev()), "sum_squares");
  expectSameError(cpu::sumSquares(&fh, 1, Tensor(), bad.host()),
                  sumSquares(&fd, 1, Tensor(), bad.dev()), "sum_squares");
  // No tensors: 0.
  out.values({5});
  DSC_ASSERT_OK(sumSquares(nullptr, 0, Tensor(), out.dev()));
  DevTensor zero(DType::F32, {});
  expectClose(zero, out, 0, 0);
}

TEST(CudaOptimizer, SgdInPlaceOverThreeSteps) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64}) {
    checkSgdSteps(dt, DType::F32, 0.9, 0, false, 0.01);
    checkSgdSteps(dt, DType::F64, 0.9, 0.1, true, 0);
    checkSgdSteps(dt, DType::F32, 0, 0, false, 0.01); // buffer untouched
    checkSgdSteps(dt, DType::BF16, 0.5, 0.5, false, 0.25);
  }
}

//===----------------------------------------------------------------------===//
// lr_schedule
//===----------------------------------------------------------------------===//

TEST(CudaOptimizer, LrScheduleEverySchedule) {
  DSC_REQUIRE_GPU();
  struct Counts {
    int64_t warmup, total;
  };
  const Counts counts[] = {{10, 100}, {0, 50}, {10, 5}, {10, 10}};
  const int64_t steps[] = {1, 3, 9, 10, 11, 40, 99, 100, 101, 250};
  for (LrSchedule kind : {LrSchedule::Constant, LrSchedule::WarmupCosine,
                          LrSchedule::WarmupLinear})
    for (const Counts &c : counts)
      for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
        DevTensor base = scalar(dt == DType::BF16 ? DType::F32 : dt, 3e-4,
                                dt == DType::F64 ? Shape{1} : Shape{});
        DevTensor lr(dt, {});
        DevTensor step = scalar(DType::I64, 1);
        for (int64_t t : steps) {
          settle();
          step.values({double(t)});
          settle();
          DSC_ASSERT_OK(cpu::lrSchedule(step.host(), base.host(), kind,
                                        c.warmup, c.total, 0.1, 0.05,
                                        lr.host()));
          DSC_ASSERT_OK(cuda::lrSchedule(step.dev(), base.dev(), kind, c.warmup,
                                         c.total, 0.1, 0.05, lr.dev()));
          expectClose(
              lr, lr, dt == DType::F64 ? 1e-14 : 1e-6, 0,
              "lr_schedule kind " + std::to_string(static_cast<int>(kind)) +
                  " " + dtypeName(dt) + " warmup " + std::to_string(c.warmup) +
                  " total " + std::to_string(c.total) + " step " +
                  std::to_string(t));
        }
      }
}

TEST(CudaOptimizer, LrScheduleReadsAnI32Step) {
  DSC_REQUIRE_GPU();
  DevTensor base = scalar(DType::F64, 1.0), lr(DType::F64, {});
  DevTensor step = scalar(DType::I32, 30);
  DSC_ASSERT_OK(cpu::lrSchedule(step.host(), base.host(),
                                LrSchedule::WarmupCosine, 10, 50, 0.0, 0.0,
                                lr.host()));
  settle();
  DSC_ASSERT_OK(cuda::lrSchedule(step.dev(), base.dev(),
                                 LrSchedule::WarmupCosine, 10, 50, 0.0, 0.0,
                                 lr.dev()));
  expectClose(lr, lr, 1e-14, 0, "lr_schedule i32 step");
}

//===----------------------------------------------------------------------===//
// Errors, zero elements, a step below 1
//===----------------------------------------------------------------------===//

TEST(CudaOptimizer, ErrorsAreTheCpus) {
  DSC_REQUIRE_GPU();
  DevTensor p(DType::F32, {8}), g7(DType::F32, {7}), m(DType::F32, {8}),
      v(DType::F32, {8}), gd(DType::F64, {8});
  DevTensor h(DType::F16, {8});
  DevTensor lr = scalar(DType::F32, 0.1), vec(DType::F32, {2}),
            ilr = scalar(DType::I64, 1);
  DevTensor step = scalar(DType::I64, 1), fstep = scalar(DType::F32, 1),
            vstep(DType::I64, {2});
  const DevTensor &l = lr;
  expectSameError(cpu::adamw(p.host(), g7.host(), m.host(), v.host(), l.host(),
                             l.host(), l.host(), l.host(), l.host(),
                             step.host(), p.host(), m.host(), v.host()),
                  cuda::adamw(p.dev(), g7.dev(), m.dev(), v.dev(), l.dev(),
                              l.dev(), l.dev(), l.dev(), l.dev(), step.dev(),
                              p.dev(), m.dev(), v.dev()),
                  "adamw");
  expectSameError(cpu::adamw(p.host(), gd.host(), m.host(), v.host(), l.host(),
                             l.host(), l.host(), l.host(), l.host(),
                             step.host(), p.host(), m.host(), v.host()),
                  cuda::adamw(p.dev(), gd.dev(), m.dev(), v.dev(), l.dev(),
                              l.dev(), l.dev(), l.dev(), l.dev(), step.dev(),
                              p.dev(), m.dev(), v.dev()),
                  "adamw");
  expectSameError(cpu::adamw(h.host(), h.host(), h.host(), h.host(), l.host(),
                             l.host(), l.host(), l.host(), l.host(),
                             step.host(), h.host(), h.host(), h.host()),
                  cuda::adamw(h.dev(), h.dev(), h.dev(), h.dev(), l.dev(),
                              l.dev(), l.dev(), l.dev(), l.dev(), step.dev(),
                              h.dev(), h.dev(), h.dev()),
                  "adamw");
  expectSameError(cpu::adamw(p.host(), p.host(), m.host(), v.host(), vec.host(),
                             l.host(), l.host(), l.host(), l.host(),
                             step.host(), p.host(), m.host(), v.host()),
                  cuda::adamw(p.dev(), p.dev(), m.dev(), v.dev(), vec.dev(),
                              l.dev(), l.dev(), l.dev(), l.dev(), step.dev(),
                              p.dev(), m.dev(), v.dev()),
                  "adamw");
  expectSameError(cpu::adamw(p.host(), p.host(), m.host(), v.host(), l.host(),
                             l.host(), ilr.host(), l.host(), l.host(),
                             step.host(), p.host(), m.host(), v.host()),
                  cuda::adamw(p.dev(), p.dev(), m.dev(), v.dev(), l.dev(),
                              l.dev(), ilr.dev(), l.dev(), l.dev(), step.dev(),
                              p.dev(), m.dev(), v.dev()),
                  "adamw");
  expectSameError(cpu::adamw(p.host(), p.host(), m.host(), v.host(), l.host(),
                             l.host(), l.host(), l.host(), l.host(),
                             fstep.host(), p.host(), m.host(), v.host()),
                  cuda::adamw(p.dev(), p.dev(), m.dev(), v.dev(), l.dev(),
                              l.dev(), l.dev(), l.dev(), l.dev(), fstep.dev(),
                              p.dev(), m.dev(), v.dev()),
                  "adamw");
  expectSameError(cpu::adamw(p.host(), p.host(), m.host(), v.host(), l.host(),
                             l.host(), l.host(), l.host(), l.host(),
                             vstep.host(), p.host(), m.host(), v.host()),
                  cuda::adamw(p.dev(), p.dev(), m.dev(), v.dev(), l.dev(),
                              l.dev(), l.dev(), l.dev(), l.dev(), vstep.dev(),
                              p.dev(), m.dev(), v.dev()),
                  "adamw");
  // An absent result.
  expectSameError(cpu::adamw(p.host(), p.host(), m.host(), v.host(), l.host(),
                             l.host(), l.host(), l.host(), l.host(),
                             step.host(), p.host(), Tensor(), v.host()),
                  cuda::adamw(p.dev(), p.dev(), m.dev(), v.dev(), l.dev(),
                              l.dev(), l.dev(), l.dev(), l.dev(), step.dev(),
                              p.dev(), Tensor(), v.dev()),
                  "adamw");

  expectSameError(cpu::sgd(p.host(), g7.host(), m.host(), l.host(), l.host(),
                           l.host(), step.host(), 0, false, p.host(), m.host()),
                  cuda::sgd(p.dev(), g7.dev(), m.dev(), l.dev(), l.dev(),
                            l.dev(), step.dev(), 0, false, p.dev(), m.dev()),
                  "sgd");
  expectSameError(cpu::sgd(h.host(), h.host(), h.host(), l.host(), l.host(),
                           l.host(), step.host(), 0, false, h.host(), h.host()),
                  cuda::sgd(h.dev(), h.dev(), h.dev(), l.dev(), l.dev(),
                            l.dev(), step.dev(), 0, false, h.dev(), h.dev()),
                  "sgd");
  expectSameError(cpu::sgd(p.host(), p.host(), m.host(), l.host(), vec.host(),
                           l.host(), step.host(), 0, false, p.host(), m.host()),
                  cuda::sgd(p.dev(), p.dev(), m.dev(), l.dev(), vec.dev(),
                            l.dev(), step.dev(), 0, false, p.dev(), m.dev()),
                  "sgd");
  expectSameError(cpu::sgd(p.host(), p.host(), m.host(), l.host(), l.host(),
                           l.host(), fstep.host(), 0, false, p.host(),
                           m.host()),
                  cuda::sgd(p.dev(), p.dev(), m.dev(), l.dev(), l.dev(),
                            l.dev(), fstep.dev(), 0, false, p.dev(), m.dev()),
                  "sgd");

  DevTensor out(DType::F32, {});
  expectSameError(cpu::lrSchedule(step.host(), l.host(), LrSchedule::Constant,
                                  -1, 10, 0, 0, out.host()),
                  cuda::lrSchedule(step.dev(), l.dev(), LrSchedule::Constant,
                                   -1, 10, 0, 0, out.dev()),
                  "lr_schedule");
  expectSameError(cpu::lrSchedule(step.host(), vec.host(), LrSchedule::Constant,
                                  1, 10, 0, 0, out.host()),
                  cuda::lrSchedule(step.dev(), vec.dev(), LrSchedule::Constant,
                                   1, 10, 0, 0, out.dev()),
                  "lr_schedule");
  expectSameError(cpu::lrSchedule(fstep.host(), l.host(), LrSchedule::Constant,
                                  1, 10, 0, 0, out.host()),
                  cuda::lrSchedule(fstep.dev(), l.dev(), LrSchedule::Constant,
                                   1, 10, 0, 0, out.dev()),
                  "lr_schedule");
  DevTensor iout(DType::I64, {});
  expectSameError(cpu::lrSchedule(step.host(), l.host(), LrSchedule::Constant,
                                  1, 10, 0, 0, iout.host()),
                  cuda::lrSchedule(step.dev(), l.dev(), LrSchedule::Constant, 1,
                                   10, 0, 0, iout.dev()),
                  "lr_schedule");
}

TEST(CudaOptimizer, ZeroElementsAreOk) {
  DSC_REQUIRE_GPU();
  DevTensor p(DType::F32, {0, 4});
  DevTensor lr = scalar(DType::F32, 0.1), step = scalar(DType::I64, 1);
  settle();
  DSC_ASSERT_OK(cuda::adamw(p.dev(), p.dev(), p.dev(), p.dev(), lr.dev(),
                            lr.dev(), lr.dev(), lr.dev(), lr.dev(), step.dev(),
                            p.dev(), p.dev(), p.dev()));
  DSC_ASSERT_OK(cuda::sgd(p.dev(), p.dev(), p.dev(), lr.dev(), lr.dev(),
                          lr.dev(), step.dev(), 0, false, p.dev(), p.dev()));
  settle();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

/// The one documented difference: the CPU rejects a step below 1, which the
/// CUDA kernels cannot report (the step is read on the device); they leave
/// every result as it was.
TEST(CudaOptimizer, StepBelowOneLeavesResultsUntouched) {
  DSC_REQUIRE_GPU();
  AdamwState s(DType::F32, {100});
  DevTensor lr = scalar(DType::F32, 0.1), step = scalar(DType::I64, 0);
  EXPECT_FALSE(cpu::adamw(s.p.host(), s.g.host(), s.m.host(), s.v.host(),
                          lr.host(), lr.host(), lr.host(), lr.host(), lr.host(),
                          step.host(), s.p.host(), s.m.host(), s.v.host())
                   .ok());
  settle();
  DSC_ASSERT_OK(cuda::adamw(s.p.dev(), s.g.dev(), s.m.dev(), s.v.dev(),
                            lr.dev(), lr.dev(), lr.dev(), lr.dev(), lr.dev(),
                            step.dev(), s.p.dev(), s.m.dev(), s.v.dev()));
  DSC_ASSERT_OK(cuda::sgd(s.p.dev(), s.g.dev(), s.m.dev(), lr.dev(), lr.dev(),
                          lr.dev(), step.dev(), 0, false, s.p.dev(),
                          s.m.dev()));
  DevTensor out = scalar(DType::F32, 7);
  settle();
  DSC_ASSERT_OK(cuda::lrSchedule(step.dev(), lr.dev(), LrSchedule::Constant, 0,
                                 10, 0, 0, out.dev()));
  expectClose(s.p, s.p, 0, 0, "param");
  expectClose(s.m, s.m, 0, 0, "exp_avg");
  expectClose(s.v, s.v, 0, 0, "exp_avg_sq");
  expectClose(out, out, 0, 0, "lr");
}

} // namespace
} // namespace dsc::cuda::test
