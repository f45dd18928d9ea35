//===- OptimizerTest.cpp - optimizer.cu against the CPU kernels -----------===//
//
// AdamW and SGD over several steps, results written over their operands as
// a train step does, with the hyperparameters and the step as device
// scalars; lr_schedule for every schedule around warmup and the end;
// the CPU's errors for bad shapes and dtypes.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cmath>

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
