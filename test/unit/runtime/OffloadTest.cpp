//===- OffloadTest.cpp - cpu/offload.h, and cast over threads -------------===//
//
// On the CPU offloadCopy is a memcpy, hostTask runs its function at once
// (its reads and writes lists, empty or not, are the CUDA backend's
// business) and returns its failure ("host task <what>: ..."), offloadWait
// checks a copy into the tensor was made, offloadJoin does nothing. Their
// checks and messages are the CUDA backend's. Then cast, split over threads
// past 1 << 16 elements, element for element the single loop's.
//
//===----------------------------------------------------------------------===//

#include "GradCheck.h"
#include "cpu/step_kernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <new>
#include <stdexcept>
#include <vector>

namespace dsc::test {
namespace {

Tensor f32(std::vector<float> &v, I64s shape) {
  return Tensor::of(v.data(), DType::F32, shape);
}

TEST(Offload, CopiesBothWaysThenWaits) {
  std::vector<float> grad = {1, 2, 3, 4, 5, 6}, host(6, 0), back(6, 0);
  // Same dtype and element count; the shapes may differ.
  DSC_EXPECT_OK(
      cpu::offloadCopy(f32(grad, {2, 3}), f32(host, {6}), true, "grad w"));
  EXPECT_EQ(host, grad);
  DSC_EXPECT_OK(cpu::offloadWait(f32(host, {6}), "grad w"));
  DSC_EXPECT_OK(
      cpu::offloadCopy(f32(host, {6}), f32(back, {3, 2}), false, "param w"));
  EXPECT_EQ(back, grad);
  DSC_EXPECT_OK(cpu::offloadWait(f32(back, {3, 2}), "param w"));
  DSC_EXPECT_OK(cpu::offloadJoin());
  // Zero elements copy nothing.
  std::vector<float> none(1, 7), none2(1, 9);
  DSC_EXPECT_OK(cpu::offloadCopy(f32(none, {0}), f32(none2, {0}), true, "e"));
  EXPECT_EQ(none2[0], 9);
}

TEST(Offload, ADtypeOrSizeMismatchNamesBoth) {
  std::vector<float> a(4), b(5);
  std::vector<uint16_t> h(4);
  Tensor half = Tensor::of(h.data(), DType::F16, {4});
  Status s = cpu::offloadCopy(f32(a, {4}), half, true, "grad w");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(s.message(), "offload_copy(what=grad w, src=f32[4], dst=f16[4], "
                         "to=host): dtypes differ (f32 vs f16)");
  s = cpu::offloadCopy(f32(a, {4}), f32(b, {5}), false, "param w");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "offload_copy(what=param w, src=f32[4], dst=f32[5], "
                         "to=device): element counts differ (4 vs 5)");
  s = cpu::offloadCopy(Tensor(), f32(a, {4}), true, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("an operand is absent"), std::string::npos)
      << s.message();
}

TEST(Offload, AWaitWithoutACopyIsAnError) {
  static float never[3]; // no copy has been made into it
  Status s = cpu::offloadWait(Tensor::of(never, DType::F32, {3}), "master w");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "offload_wait(what=master w, dst=f32[3]): no "
                         "offload_copy into this tensor was issued");
}

TEST(Offload, AHostTaskRunsAtOnceAndReturnsItsFailure) {
  int runs = 0;
  DSC_EXPECT_OK(cpu::hostTask(0,
                              [&] {
                                ++runs;
                                return Status();
                              },
                              "adamw", {}, {}));
  EXPECT_EQ(runs, 1);
  Status s = cpu::hostTask(1,
                           [] {
                             return Status::error(StatusCode::OutOfRange,
                                                  "adamw_multi(...): bad");
                           },
                           "adamw bucket0", {}, {});
  EXPECT_EQ(s.code(), StatusCode::OutOfRange);
  EXPECT_EQ(s.message(), "host task adamw bucket0: adamw_multi(...): bad");
  s = cpu::hostTask(2, []() -> Status { throw std::runtime_error("boom"); },
                    "cast", {}, {});
  EXPECT_EQ(s.message(), "host task cast: boom");
  s = cpu::hostTask(3, []() -> Status { throw std::bad_alloc(); }, "cast", {},
                    {});
  EXPECT_EQ(s.code(), StatusCode::OutOfMemory);
  EXPECT_EQ(s.message(), "host task cast: out of host memory");
  s = cpu::hostTask(4, std::function<Status()>(), "empty", {}, {});
  EXPECT_FALSE(s.ok());
}

TEST(Offload, AHostTaskTakesItsReadsAndWritesOrNone) {
  // As the generated code calls it (rt: the backend's namespace), with
  // tensor lists or empty ones; the CPU runs fn at once either way.
  namespace rt = dsc::cpu;
  std::vector<float> g0 = {1, 2}, g1 = {3, 4}, out(2, 0);
  Tensor v1 = f32(g0, {2}), v2 = f32(g1, {2}), v3 = f32(out, {2});
  DSC_EXPECT_OK(rt::hostTask(3,
                             [=]() -> Status {
                               for (int64_t i = 0; i < 2; ++i)
                                 v3.as<float>()[i] =
                                     v1.as<float>()[i] + v2.as<float>()[i];
                               return Status();
                             },
                             "dsc.adamw_multi", {v1, v2}, {v3}));
  EXPECT_EQ(out, (std::vector<float>{4, 6}));
  int runs = 0;
  DSC_EXPECT_OK(rt::hostTask(4,
                             [&]() -> Status {
                               ++runs;
                               return Status();
                             },
                             "no tensors", {}, {}));
  DSC_EXPECT_OK(rt::hostTask(5,
                             [&]() -> Status {
                               ++runs;
                               return Status();
                             },
                             "writes only", {}, {v3}));
  EXPECT_EQ(runs, 2);
  Status s = rt::hostTask(
      6, [] { return Status::error(StatusCode::InvalidArgument, "bad"); },
      "reads only", {v1}, {});
  EXPECT_EQ(s.message(), "host task reads only: bad");
}

TEST(Offload, AnOptimizerStepOnTheHost) {
  // The offloaded step's shape: the gradient to the host, the update there,
  // the new parameter back, the compute side waits for it.
  std::vector<float> grad = {1, -2, 4}, hostGrad(3), master = {10, 20, 30},
                     param(3);
  DSC_EXPECT_OK(
      cpu::offloadCopy(f32(grad, {3}), f32(hostGrad, {3}), true, "grad w"));
  DSC_EXPECT_OK(cpu::hostTask(
      7,
      [&] {
        for (int i = 0; i < 3; ++i)
          master[size_t(i)] -= 0.5f * hostGrad[size_t(i)];
        return Status();
      },
      "sgd", {f32(hostGrad, {3}), f32(master, {3})}, {f32(master, {3})}));
  DSC_EXPECT_OK(
      cpu::offloadCopy(f32(master, {3}), f32(param, {3}), false, "param w"));
  DSC_EXPECT_OK(cpu::offloadWait(f32(param, {3}), "param w"));
  DSC_EXPECT_OK(cpu::offloadJoin());
  EXPECT_EQ(param, (std::vector<float>{9.5f, 21, 28}));
}

TEST(CastOverThreads, SameBitsAsOneLoop) {
  const int64_t n = (int64_t(1) << 18) + 13; // several chunks
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[size_t(i)] = float(i % 1000) * 0.001953125f - 1.0f + float(i) * 1e-7f;
  Tensor in = Tensor::of(x.data(), DType::F32, {n});
  for (DType dt : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> y(static_cast<size_t>(n));
    DSC_EXPECT_OK(cpu::cast(in, Tensor::of(y.data(), dt, {n})));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(y[size_t(i)], dt == DType::F16 ? floatToHalf(x[size_t(i)])
                                               : floatToBfloat16(x[size_t(i)]))
          << i;
  }
  std::vector<double> d(static_cast<size_t>(n));
  DSC_EXPECT_OK(cpu::cast(in, Tensor::of(d.data(), DType::F64, {n})));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(d[size_t(i)], double(x[size_t(i)])) << i;
  std::vector<int64_t> w(static_cast<size_t>(n));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[size_t(i)] = i * 7 - 3;
  DSC_EXPECT_OK(cpu::cast(Tensor::of(w.data(), DType::I64, {n}),
                          Tensor::of(v.data(), DType::I32, {n})));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(v[size_t(i)], int32_t(i * 7 - 3)) << i;
}

} // namespace
} // namespace dsc::test
