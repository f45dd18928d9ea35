//===- TestUtil.h - CUDA kernels against their CPU references ---*- C++ -*-===//
//
// A DevTensor is a host tensor (random or given values) with a device copy;
// run the CPU kernel on the host views and the CUDA kernel on the device
// views, then compare with expectClose. Every test starts with
// DSC_REQUIRE_GPU(), which skips it where no GPU is visible.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_TEST_UNIT_CUDA_TESTUTIL_H
#define DSC_TEST_UNIT_CUDA_TESTUTIL_H

#include "cuda/context.h"
#include "cuda/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace dsc::cuda::test {

inline bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define DSC_REQUIRE_GPU()                                                      \
  do {                                                                         \
    if (!::dsc::cuda::test::haveGpu())                                         \
      GTEST_SKIP() << "no GPU visible";                                        \
  } while (0)

#define DSC_ASSERT_OK(expr)                                                    \
  do {                                                                         \
    ::dsc::Status s_ = (expr);                                                 \
    ASSERT_TRUE(s_.ok()) << s_.message();                                      \
  } while (0)

/// A tensor with host storage and a device copy of the same bytes.
class DevTensor {
public:
  DevTensor() = default;
  DevTensor(DType dtype, std::vector<int64_t> shape) : shape_(shape) {
    host_ = Tensor::of(nullptr, dtype, I64s(shape_));
    bytes_.assign(std::max<size_t>(host_.nbytes(), 1), 0);
    host_.data = bytes_.data();
    void *p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes_.size()), cudaSuccess);
    dev_.reset(p);
    device_ = host_;
    device_.data = p;
    upload();
  }
  /// Uniform values in [lo, hi) (floats) or integers in [lo, hi).
  DevTensor &random(double lo, double hi, uint32_t seed = 1) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; i < host_.numel(); ++i) {
      double v = u(rng);
      set(i, isFloat(host_.dtype) ? v : std::floor(v));
    }
    upload();
    return *this;
  }
  DevTensor &values(const std::vector<double> &v) {
    for (int64_t i = 0; i < host_.numel() && i < int64_t(v.size()); ++i)
      set(i, v[size_t(i)]);
    upload();
    return *this;
  }
  void set(int64_t i, double v) {
    switch (host_.dtype) {
    case DType::F32:
      host_.as<float>()[i] = float(v);
      break;
    case DType::F64:
      host_.as<double>()[i] = v;
      break;
    case DType::F16:
      host_.as<uint16_t>()[i] = floatToHalf(float(v));
      break;
    case DType::BF16:
      host_.as<uint16_t>()[i] = floatToBfloat16(float(v));
      break;
    case DType::I64:
      host_.as<int64_t>()[i] = int64_t(v);
      break;
    case DType::I32:
      host_.as<int32_t>()[i] = int32_t(v);
      break;
    case DType::I8:
      host_.as<int8_t>()[i] = int8_t(v);
      break;
    case DType::U8:
      host_.as<uint8_t>()[i] = uint8_t(v);
      break;
    case DType::Bool:
      host_.as<uint8_t>()[i] = v != 0;
      break;
    }
  }
  static double get(const Tensor &t, int64_t i) {
    switch (t.dtype) {
    case DType::F32:
      return t.as<float>()[i];
    case DType::F64:
      return t.as<double>()[i];
    case DType::F16:
      return halfToFloat(t.as<uint16_t>()[i]);
    case DType::BF16:
      return bfloat16ToFloat(t.as<uint16_t>()[i]);
    case DType::I64:
      return double(t.as<int64_t>()[i]);
    case DType::I32:
      return t.as<int32_t>()[i];
    case DType::I8:
      return t.as<int8_t>()[i];
    case DType::U8:
      return t.as<uint8_t>()[i];
    case DType::Bool:
      return t.as<uint8_t>()[i] != 0;
    }
    return 0;
  }
  /// Host bytes to the device; returns when they are there (the kernels
  /// run on a non-blocking stream that does not wait for cudaMemcpy).
  void upload() {
    EXPECT_EQ(cudaMemcpy(device_.data, bytes_.data(), host_.nbytes(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  /// The device bytes, copied back after the compute stream is done.
  std::vector<char> download() const {
    std::vector<char> out(bytes_.size());
    EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), device_.data, host_.nbytes(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }
  const Tensor &host() const { return host_; }
  const Tensor &dev() const { return device_; }

private:
  struct CudaFree {
    void operator()(void *p) const { cudaFree(p); }
  };
  std::vector<int64_t> shape_;
  std::vector<char> bytes_;
  Tensor host_, device_;
  std::unique_ptr<void, CudaFree> dev_;
};

/// The device result of `gpu` equals the host result of `cpu` within
/// |g - c| <= atol + rtol * |c| element by element (NaN only where NaN, an
/// infinity only where the same infinity).
inline void expectClose(const DevTensor &cpu, const DevTensor &gpu,
                        double rtol = 1e-5, double atol = 1e-6,
                        const std::string &what = "") {
  std::vector<char> bytes = gpu.download();
  Tensor g = gpu.host();
  g.data = bytes.data();
  ASSERT_EQ(cpu.host().numel(), g.numel()) << what;
  int reported = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    double c = DevTensor::get(cpu.host(), i), d = DevTensor::get(g, i);
    bool ok = (std::isnan(c) && std::isnan(d)) || (std::isinf(c) && c == d) ||
              std::fabs(c - d) <= atol + rtol * std::fabs(c);
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": cpu " << c << ", cuda "
                    << d;
  }
}

} // namespace dsc::cuda::test

#endif // DSC_TEST_UNIT_CUDA_TESTUTIL_H
