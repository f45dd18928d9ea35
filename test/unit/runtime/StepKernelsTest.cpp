//===- StepKernelsTest.cpp - step_kernels.h against references ------------===//
//
// AdamW against PyTorch's float64 step on the MLP fixture and against a
// scalar loop over several steps; adamwMulti bitwise against mul + adamw +
// cast; sumSquares against a long double sum, whatever the thread count; SGD
// and the LR schedules against their formulas; the conv-gradient halves against
// convBackward and finite differences; fill; dropout seeds.
//
//===----------------------------------------------------------------------===//

#include "cpu/step_kernels.h"
#include "io/safetensors.h"

#include "GradCheck.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <set>

namespace dsc::test {
namespace {

D scalarD(double v) { return D({}, DType::F64, {v}); }

Buf<int64_t> stepTensor(int64_t t) { return Buf<int64_t>({}, DType::I64, {t}); }

//===----------------------------------------------------------------------===//
// fill
//===----------------------------------------------------------------------===//

TEST(StepKernels, FillAnyDtype) {
  F f({2, 3}, DType::F32);
  DSC_ASSERT_OK(cpu::fill(f.t(), 0.25));
  for (float v : f.v)
    EXPECT_EQ(v, 0.25f);
  Buf<int64_t> i({4}, DType::I64);
  DSC_ASSERT_OK(cpu::fill(i.t(), -3));
  for (int64_t v : i.v)
    EXPECT_EQ(v, -3);
  Buf<uint8_t> b({3}, DType::Bool);
  DSC_ASSERT_OK(cpu::fill(b.t(), 1));
  for (uint8_t v : b.v)
    EXPECT_EQ(v, 1);
}

//===----------------------------------------------------------------------===//
// conv_backward_input / conv_backward_weight
//===----------------------------------------------------------------------===//

cpu::ConvAttrs convAttrs() { return {{2, 1}, {1, 0, 1, 1}, {1, 2}, 2}; }

TEST(StepKernels, ConvBackwardHalvesMatchConvBackward) {
  std::mt19937_64 rng(3);
  D x = randD({2, 4, 7, 6}, rng), w = randD({6, 2, 3, 2}, rng);
  cpu::ConvAttrs attrs = convAttrs();
  // Output spatial dims: (7 + 2 - 3) / 2 + 1 = 4, (6 + 1 - 3) / 1 + 1 = 5.
  D g = randD({2, 6, 4, 5}, rng);
  D gx = zerosD({2, 4, 7, 6}), gw = zerosD({6, 2, 3, 2});
  D gxRef = zerosD({2, 4, 7, 6}), gwRef = zerosD({6, 2, 3, 2});
  DSC_ASSERT_OK(cpu::convBackward(x.t(), w.t(), attrs, g.t(), gxRef.t(),
                                  gwRef.t(), Tensor()));
  DSC_ASSERT_OK(cpu::convBackwardInput(g.t(), w.t(), attrs, gx.t()));
  DSC_ASSERT_OK(cpu::convBackwardWeight(g.t(), x.t(), attrs, gw.t()));
  EXPECT_EQ(gx.v, gxRef.v);
  EXPECT_EQ(gw.v, gwRef.v);
}

TEST(StepKernels, ConvBackwardHalvesFiniteDifferences) {
  std::mt19937_64 rng(5);
  std::vector<D> in = {randD({2, 4, 7, 6}, rng), randD({6, 2, 3, 2}, rng)};
  cpu::ConvAttrs attrs = convAttrs();
  double err = gradCheck(
      in, {2, 6, 4, 5},
      [&](std::vector<Tensor> &ts, const Tensor &out) {
        return cpu::conv(ts[0], ts[1], Tensor(), attrs, out);
      },
      [&](std::vector<Tensor> &ts, const Tensor &g,
          std::vector<Tensor> &grads) {
        if (grads[0].present())
          if (Status st = cpu::convBackwardInput(g, ts[1], attrs, grads[0]);
              !st.ok())
            return st;
        if (grads[1].present())
          return cpu::convBackwardWeight(g, ts[0], attrs, grads[1]);
        return Status();
      },
      {0, 1});
  EXPECT_LT(err, 1e-8);
}

TEST(StepKernels, ConvBackwardHalvesCheckShapes) {
  D g = zerosD({1, 2, 3, 3}), w = zerosD({2, 1, 2, 2}), bad = zerosD({1, 1});
  Status st = cpu::convBackwardInput(g.t(), w.t(), {}, bad.t());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("conv_backward"), std::string::npos);
  st = cpu::convBackwardWeight(g.t(), w.t(), {}, Tensor());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("conv_backward_weight"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// adamw
//===----------------------------------------------------------------------===//

/// The dsc.adamw description, one element at a time, in double.
void adamwReference(std::vector<double> &p, const std::vector<double> &g,
                    std::vector<double> &m, std::vector<double> &v, double lr,
                    double b1, double b2, double eps, double wd, int64_t t) {
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr / (1 - std::pow(b1, double(t))) * m[i] /
            (std::sqrt(v[i] / (1 - std::pow(b2, double(t)))) + eps);
  }
}

TEST(StepKernels, AdamWMatchesPyTorchFixture) {
  // test/fixtures/ref/mlp: one torch.optim.AdamW step in float64 from the
  // fixture's parameters and float64 gradients (adamw.json).
  std::string ref = std::string(DSC_SOURCE_DIR) + "/test/fixtures/ref/mlp/";
  io::SafetensorsFile params, grads, want;
  DSC_ASSERT_OK(params.read(ref + "params.safetensors"));
  DSC_ASSERT_OK(grads.read(ref + "grads_f64.safetensors"));
  DSC_ASSERT_OK(want.read(ref + "adamw_step1_f64.safetensors"));
  D lr = scalarD(1e-3), b1 = scalarD(0.9), b2 = scalarD(0.999),
    eps = scalarD(1e-8), wd = scalarD(0.01);
  auto step = stepTensor(1);
  ASSERT_FALSE(params.names().empty());
  for (const std::string &name : params.names()) {
    Tensor p32, g, w;
    DSC_ASSERT_OK(params.get(name, p32));
    DSC_ASSERT_OK(grads.get(name, g));
    DSC_ASSERT_OK(want.get(name, w));
    D p(p32.dims(), DType::F64), m(p32.dims(), DType::F64),
        v(p32.dims(), DType::F64), np(p32.dims(), DType::F64),
        nm(p32.dims(), DType::F64), nv(p32.dims(), DType::F64);
    DSC_ASSERT_OK(cpu::cast(p32, p.t()));
    DSC_ASSERT_OK(cpu::adamw(p.t(), g, m.t(), v.t(), lr.t(), b1.t(), b2.t(),
                             eps.t(), wd.t(), step.t(), np.t(), nm.t(),
                             nv.t()));
    double maxDiff = 0, maxUpdate = 0;
    for (size_t i = 0; i < np.v.size(); ++i) {
      maxDiff = std::max(maxDiff, std::abs(np.v[i] - w.as<double>()[i]));
      maxUpdate = std::max(maxUpdate, std::abs(w.as<double>()[i] - p.v[i]));
    }
    EXPECT_LT(maxDiff / maxUpdate, 1e-12) << name;
  }
}

TEST(StepKernels, AdamWMatchesReferenceOverSteps) {
  std::mt19937_64 rng(11);
  const double lr = 3e-3, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.1;
  D p = randD({5, 7}, rng), m = zerosD({5, 7}), v = zerosD({5, 7});
  std::vector<double> rp = p.v, rm = m.v, rv = v.v;
  // float32 copies updated alongside.
  F p32({5, 7}, DType::F32), m32({5, 7}, DType::F32), v32({5, 7}, DType::F32);
  for (size_t i = 0; i < p.v.size(); ++i)
    p32.v[i] = float(p.v[i]);
  F lrF({}, DType::F32, {float(lr)});
  D lrD = scalarD(lr), b1D = scalarD(b1), b2D = scalarD(b2),
    epsD = scalarD(eps), wdD = scalarD(wd);
  for (int64_t t = 1; t <= 4; ++t) {
    D g = randD({5, 7}, rng);
    F g32({5, 7}, DType::F32);
    for (size_t i = 0; i < g.v.size(); ++i)
      g32.v[i] = float(g.v[i]);
    auto step = stepTensor(t);
    adamwReference(rp, g.v, rm, rv, lr, b1, b2, eps, wd, t);
    // In place: results are the operands' own storage.
    DSC_ASSERT_OK(cpu::adamw(p.t(), g.t(), m.t(), v.t(), lrD.t(), b1D.t(),
                             b2D.t(), epsD.t(), wdD.t(), step.t(), p.t(), m.t(),
                             v.t()));
    // Mixed: f32 tensors, an f32 lr scalar and f64 other scalars.
    DSC_ASSERT_OK(cpu::adamw(p32.t(), g32.t(), m32.t(), v32.t(), lrF.t(),
                             b1D.t(), b2D.t(), epsD.t(), wdD.t(), step.t(),
                             p32.t(), m32.t(), v32.t()));
  }
  for (size_t i = 0; i < rp.size(); ++i) {
    EXPECT_NEAR(p.v[i], rp[i], 1e-14);
    EXPECT_NEAR(m.v[i], rm[i], 1e-14);
    EXPECT_NEAR(v.v[i], rv[i], 1e-14);
    EXPECT_NEAR(p32.v[i], rp[i], 2e-6);
  }
}

TEST(StepKernels, AdamWChecksOperands) {
  D p = zerosD({3}), g = zerosD({4}), s = scalarD(0.1);
  auto step = stepTensor(1);
  Status st = cpu::adamw(p.t(), g.t(), p.t(), p.t(), s.t(), s.t(), s.t(), s.t(),
                         s.t(), step.t(), p.t(), p.t(), p.t());
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("adamw("), std::string::npos);
  auto zero = stepTensor(0);
  st = cpu::adamw(p.t(), p.t(), p.t(), p.t(), s.t(), s.t(), s.t(), s.t(), s.t(),
                  zero.t(), p.t(), p.t(), p.t());
  EXPECT_EQ(st.code(), StatusCode::OutOfRange);
  D notScalar = zerosD({2});
  st = cpu::adamw(p.t(), p.t(), p.t(), p.t(), notScalar.t(), s.t(), s.t(),
                  s.t(), s.t(), step.t(), p.t(), p.t(), p.t());
  EXPECT_FALSE(st.ok());
}

//===----------------------------------------------------------------------===//
// adamw_multi
//===----------------------------------------------------------------------===//

/// Which entries get a compute copy: none, all bf16, all f16, or a mix
/// (bf16, none, f16, bf16, ...).
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

/// One parameter's buffers.
template <typename T> struct MultiParam {
  Buf<T> p, g, m, v, np, nm, nv;
  Buf<uint16_t> copy;
  std::optional<DType> copyType;
};

template <typename T>
void fillRandom(Buf<T> &b, std::mt19937_64 &rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (T &x : b.v)
    x = T(u(rng));
}

template <typename T>
::testing::AssertionResult sameBits(const std::vector<T> &want,
                                    const std::vector<T> &got) {
  if (want.size() != got.size())
    return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure()
             << "element " << i << " of " << want.size() << ": want "
             << double(want[i]) << ", got " << double(got[i]);
  return ::testing::AssertionSuccess();
}

/// adamwMulti against binary(mul) + adamw + cast, entry by entry, over three
/// steps: bitwise the same parameters, states and compute copies, and the
/// gradients untouched. `scales`: bit 0 a gradScale, bit 1 a gradPrescale
/// (multiplied first).
template <typename T>
void checkAdamwMulti(DType dt, const std::vector<int64_t> &sizes, int scales,
                     CopyMode copyMode, bool inPlace, int threads = 0) {
  const bool scaled = scales & 1, prescaled = scales & 2;
  std::mt19937_64 rng(29);
  std::vector<MultiParam<T>> multi(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    MultiParam<T> &e = multi[i];
    std::vector<int64_t> s = {sizes[i]};
    e.p = e.g = e.m = e.v = e.np = e.nm = e.nv = Buf<T>(s, dt);
    fillRandom(e.p, rng, -1, 1);
    fillRandom(e.m, rng, -0.1, 0.1);
    fillRandom(e.v, rng, 0, 0.01);
    e.copyType = copyTypeOf(copyMode, i);
    if (e.copyType)
      e.copy = Buf<uint16_t>(s, *e.copyType);
  }
  std::vector<MultiParam<T>> ref = multi;
  Buf<T> lr({}, dt, {T(3e-3)}), b1({}, dt, {T(0.9)}), b2({}, dt, {T(0.95)}),
      eps({}, dt, {T(1e-8)}), wd({}, dt, {T(0.1)});
  Buf<T> scale({}, dt, {T(1.0 / 7.0)}); // rounds in every product
  Buf<T> prescale({}, dt, {T(1.0 / 3.0)});
  for (int64_t t = 1; t <= 3; ++t) {
    auto step = stepTensor(t);
    for (size_t i = 0; i < sizes.size(); ++i) {
      fillRandom(multi[i].g, rng, -3, 3);
      ref[i].g = multi[i].g;
    }
    // The composition: mul, adamw, cast.
    for (MultiParam<T> &e : ref) {
      Buf<T> scaledGrad = e.g;
      if (prescaled)
        DSC_ASSERT_OK(cpu::binary(cpu::BinaryOp::Mul, scaledGrad.t(),
                                  prescale.t(), scaledGrad.t()));
      if (scaled)
        DSC_ASSERT_OK(cpu::binary(cpu::BinaryOp::Mul, scaledGrad.t(), scale.t(),
                                  scaledGrad.t()));
      Buf<T> &np = inPlace ? e.p : e.np, &nm = inPlace ? e.m : e.nm,
             &nv = inPlace ? e.v : e.nv;
      DSC_ASSERT_OK(cpu::adamw(e.p.t(), scaledGrad.t(), e.m.t(), e.v.t(),
                               lr.t(), b1.t(), b2.t(), eps.t(), wd.t(),
                               step.t(), np.t(), nm.t(), nv.t()));
      if (e.copyType) {
        DSC_ASSERT_OK(cpu::cast(np.t(), e.copy.t()));
      }
    }
    std::vector<cpu::AdamwTensors> entries;
    std::vector<std::vector<T>> grads;
    for (MultiParam<T> &e : multi) {
      grads.push_back(e.g.v);
      Buf<T> &np = inPlace ? e.p : e.np, &nm = inPlace ? e.m : e.nm,
             &nv = inPlace ? e.v : e.nv;
      entries.push_back({e.p.t(), e.g.t(), e.m.t(), e.v.t(), np.t(), nm.t(),
                         nv.t(), e.copyType ? e.copy.t() : Tensor()});
    }
    DSC_ASSERT_OK(cpu::adamwMulti(
        entries.data(), entries.size(), lr.t(), b1.t(), b2.t(), eps.t(), wd.t(),
        step.t(), scaled ? scale.t() : Tensor(),
        prescaled ? prescale.t() : Tensor(), threads));
    for (size_t i = 0; i < sizes.size(); ++i) {
      MultiParam<T> &e = multi[i], &r = ref[i];
      std::string what = "entry " + std::to_string(i) + " (" +
                         std::to_string(sizes[i]) + " elements), step " +
                         std::to_string(t);
      EXPECT_TRUE(sameBits(grads[i], e.g.v)) << what << ": grad changed";
      if (inPlace) {
        EXPECT_TRUE(sameBits(r.p.v, e.p.v)) << what << ": param";
        EXPECT_TRUE(sameBits(r.m.v, e.m.v)) << what << ": exp_avg";
        EXPECT_TRUE(sameBits(r.v.v, e.v.v)) << what << ": exp_avg_sq";
      } else {
        EXPECT_TRUE(sameBits(r.np.v, e.np.v)) << what << ": new param";
        EXPECT_TRUE(sameBits(r.nm.v, e.nm.v)) << what << ": new exp_avg";
        EXPECT_TRUE(sameBits(r.nv.v, e.nv.v)) << what << ": new exp_avg_sq";
        EXPECT_TRUE(sameBits(r.p.v, e.p.v)) << what << ": param";
        // The next step starts from the results.
        std::swap(e.p, e.np), std::swap(e.m, e.nm), std::swap(e.v, e.nv);
        std::swap(r.p, r.np), std::swap(r.m, r.nm), std::swap(r.v, r.nv);
      }
      if (e.copyType) {
        EXPECT_TRUE(sameBits(r.copy.v, e.copy.v)) << what << ": compute copy";
      }
    }
  }
}

const std::vector<int64_t> kOddSizes = {1, 3, 1000, 4097};

TEST(StepKernels, AdamwMultiMatchesMulAdamwCastF32) {
  for (int scales : {0, 1, 2, 3})
    for (CopyMode copy :
         {CopyMode::None, CopyMode::Bf16, CopyMode::F16, CopyMode::Mixed})
      for (bool inPlace : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "scales " << scales << " copy " << int(copy)
                     << " in place " << inPlace);
        checkAdamwMulti<float>(DType::F32, kOddSizes, scales, copy, inPlace);
      }
}

TEST(StepKernels, AdamwMultiMatchesMulAdamwCastF64) {
  for (int scales : {0, 1, 2, 3})
    for (CopyMode copy : {CopyMode::None, CopyMode::Mixed}) {
      SCOPED_TRACE(::testing::Message()
                   << "scales " << scales << " copy " << int(copy));
      checkAdamwMulti<double>(DType::F64, kOddSizes, scales, copy, true);
    }
}

TEST(StepKernels, AdamwMultiSplitOverThreads) {
  // Over 2^16 elements in all, so the entries are split between threads
  // (one range ends inside an entry, the next starts there).
  const std::vector<int64_t> sizes = {70001, 1, 3, 131071, 4097, 65536};
  for (int threads : {1, 3, 8}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    checkAdamwMulti<float>(DType::F32, sizes, 3, CopyMode::Mixed, true,
                           threads);
  }
}

TEST(StepKernels, AdamwMultiBf16CopyRoundsAsFloatToBfloat16) {
  // lr = 0 and no decay leave each parameter as it is, so the compute copy
  // is the bf16 rounding of the given values: ties to even both ways, a
  // carry into the exponent, overflow to infinity, signed zeros,
  // subnormals, infinities and NaNs (made quiet, the sign kept), over
  // enough elements for the vector loop and its tail.
  const uint32_t special[] = {
      0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu, 0x7f7fffffu,
      0xff7fffffu, 0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu,
      0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00001u, 0x7fc00000u,
      0x3f800000u, 0xc0490fdbu};
  std::vector<float> p;
  for (int rep = 0; rep < 5; ++rep)
    for (uint32_t bits : special) {
      float f;
      std::memcpy(&f, &bits, sizeof f);
      p.push_back(f);
    }
  const int64_t n = static_cast<int64_t>(p.size());
  std::vector<float> g(size_t(n), 0.5f), m(size_t(n), 0.0f), v(size_t(n), 0.0f);
  std::vector<uint16_t> copy(size_t(n), 0);
  F lr({}, DType::F32, {0.0f}), b1({}, DType::F32, {0.9f}),
      b2({}, DType::F32, {0.999f}), eps({}, DType::F32, {1e-8f}),
      wd({}, DType::F32, {0.0f});
  auto step = stepTensor(1);
  auto view = [&](auto &xs, DType dtype) {
    return Tensor::of(xs.data(), dtype, {n});
  };
  cpu::AdamwTensors e{view(p, DType::F32), view(g, DType::F32),
                      view(m, DType::F32), view(v, DType::F32),
                      view(p, DType::F32), view(m, DType::F32),
                      view(v, DType::F32), view(copy, DType::BF16)};
  DSC_ASSERT_OK(cpu::adamwMulti(&e, 1, lr.t(), b1.t(), b2.t(), eps.t(), wd.t(),
                                step.t()));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &p[size_t(i)], sizeof bits);
    EXPECT_EQ(copy[size_t(i)], floatToBfloat16(p[size_t(i)]))
        << "element " << i << ", param bits 0x" << std::hex << bits;
  }
}

TEST(StepKernels, AdamwMultiChecksEntries) {
  F p3({3}, DType::F32), p4({4}, DType::F32), s({}, DType::F32, {0.1f});
  D d3({3}, DType::F64);
  Buf<uint16_t> bf3({3}, DType::BF16), bf4({4}, DType::BF16);
  F f3({3}, DType::F32);
  auto step = stepTensor(1);
  auto entry = [](const Tensor &p, const Tensor &g,
                  const Tensor &copy = Tensor()) {
    return cpu::AdamwTensors{p, g, p, p, p, p, p, copy};
  };
  auto run = [&](std::vector<cpu::AdamwTensors> es,
                 const Tensor &scale = Tensor(), const Tensor &st = Tensor()) {
    return cpu::adamwMulti(es.data(), es.size(), s.t(), s.t(), s.t(), s.t(),
                           s.t(), st.present() ? st : step.t(), scale);
  };
  auto expectError = [](const Status &st, StatusCode code,
                        const std::string &prefix, const std::string &reason) {
    EXPECT_EQ(st.code(), code) << st.message();
    EXPECT_EQ(st.message().rfind(prefix, 0), 0u) << st.message();
    EXPECT_NE(st.message().find(reason), std::string::npos) << st.message();
  };
  // adamw's own checks, naming the entry.
  expectError(run({entry(p3.t(), p3.t()), entry(p4.t(), p4.t()),
                   entry(p3.t(), p4.t())}),
              StatusCode::InvalidArgument,
              "adamw_multi(entry=2, param=f32[3], grad=f32[4], ",
              "operands and results must share one dtype and shape");
  expectError(run({entry(p3.t(), p3.t()), entry(d3.t(), d3.t())}),
              StatusCode::InvalidArgument, "adamw_multi(entry=1, param=f64[3]",
              "every entry must have entry 0's dtype, f32");
  expectError(run({entry(p3.t(), p3.t(), bf4.t())}),
              StatusCode::InvalidArgument,
              "adamw_multi(entry=0, param=f32[3], grad=f32[3], exp_avg=f32[3], "
              "exp_avg_sq=f32[3], step=i64[], compute_copy=bf16[4]): ",
              "compute_copy must be bf16 or f16 of param's shape");
  expectError(
      run({entry(p3.t(), p3.t(), bf3.t()), entry(p3.t(), p3.t(), f3.t())}),
      StatusCode::InvalidArgument, "adamw_multi(entry=1, ",
      "compute_copy must be bf16 or f16");
  expectError(run({entry(p3.t(), p3.t())}, p3.t()), StatusCode::InvalidArgument,
              "adamw_multi(grad_scale=f32[3]): ",
              "grad_scale must be a scalar of the parameters' dtype, f32");
  D sd({}, DType::F64, {0.5});
  expectError(run({entry(p3.t(), p3.t())}, sd.t()), StatusCode::InvalidArgument,
              "adamw_multi(grad_scale=f64[]): ", "grad_scale must be a scalar");
  std::vector<cpu::AdamwTensors> one = {entry(p3.t(), p3.t())};
  expectError(cpu::adamwMulti(one.data(), 1, s.t(), s.t(), s.t(), s.t(), s.t(),
                              step.t(), s.t(), sd.t()),
              StatusCode::InvalidArgument, "adamw_multi(grad_prescale=f64[]): ",
              "grad_prescale must be a scalar of the parameters' dtype, f32");
  auto zero = stepTensor(0);
  expectError(run({entry(p3.t(), p3.t())}, Tensor(), zero.t()),
              StatusCode::OutOfRange, "adamw_multi(entry=0, ",
              "step must be at least 1, got 0");
  expectError(
      cpu::adamwMulti(nullptr, 2, s.t(), s.t(), s.t(), s.t(), s.t(), step.t()),
      StatusCode::InvalidArgument,
      "adamw_multi(count=2): ", "the entries are missing");
  // An absent result.
  cpu::AdamwTensors absent = entry(p3.t(), p3.t());
  absent.newExpAvg = Tensor();
  expectError(run({entry(p3.t(), p3.t()), absent}), StatusCode::InvalidArgument,
              "adamw_multi(entry=1, ",
              "operands and results must share one dtype and shape");
  // Nothing to do is fine; a failed call writes nothing.
  DSC_EXPECT_OK(
      cpu::adamwMulti(nullptr, 0, s.t(), s.t(), s.t(), s.t(), s.t(), step.t()));
  p3.v = {1, 2, 3};
  const std::vector<float> before = p3.v;
  EXPECT_FALSE(run({entry(p3.t(), p3.t()), entry(p3.t(), p4.t())}).ok());
  EXPECT_EQ(p3.v, before);
}

//===----------------------------------------------------------------------===//
// sum_squares
//===----------------------------------------------------------------------===//

/// The sum of double(v)^2, v = x * scale rounded to T, in long double.
template <typename T>
long double squaresReference(const std::vector<Buf<T>> &xs,
                             std::optional<T> scale) {
  long double sum = 0;
  for (const Buf<T> &x : xs)
    for (T e : x.v) {
      T v = scale ? T(e * *scale) : e;
      sum += (long double)(double(v) * double(v));
    }
  return sum;
}

template <typename T> std::vector<Tensor> tensorsOf(std::vector<Buf<T>> &xs) {
  std::vector<Tensor> ts;
  for (Buf<T> &x : xs)
    ts.push_back(x.t());
  return ts;
}

/// sumSquares over tensors of `sizes` against the long double reference,
/// plain and scaled, and the same bits whatever the thread count.
template <typename T>
void checkSumSquares(DType dt, const std::vector<int64_t> &sizes) {
  std::mt19937_64 rng(41);
  std::vector<Buf<T>> xs;
  for (int64_t n : sizes) {
    xs.emplace_back(std::vector<int64_t>{n}, dt);
    fillRandom(xs.back(), rng, -3, 3);
  }
  std::vector<Tensor> ts = tensorsOf(xs);
  F scale({}, DType::F32, {1.0f / 7.0f}); // rounds in every product
  for (bool scaled : {false, true}) {
    std::optional<T> s;
    if (scaled)
      s = T(scale.v[0]);
    long double want = squaresReference(xs, s);
    std::optional<uint32_t> bits;
    for (int threads : {1, 3, 8}) {
      SCOPED_TRACE(::testing::Message()
                   << "scaled " << scaled << ", " << threads << " threads");
      F out({}, DType::F32);
      D outD({}, DType::F64);
      DSC_ASSERT_OK(cpu::sumSquares(ts.data(), ts.size(),
                                    scaled ? scale.t() : Tensor(), out.t(),
                                    threads));
      DSC_ASSERT_OK(cpu::sumSquares(ts.data(), ts.size(),
                                    scaled ? scale.t() : Tensor(), outD.t(),
                                    threads));
      // Double accumulation: far within one f32 rounding of the exact sum.
      EXPECT_NEAR(outD.v[0], double(want), 1e-12 * double(want));
      EXPECT_EQ(out.v[0], float(outD.v[0]));
      uint32_t b;
      std::memcpy(&b, &out.v[0], 4);
      if (bits) {
        EXPECT_EQ(*bits, b) << "the result depends on the thread count";
      }
      bits = b;
    }
  }
}

TEST(StepKernels, SumSquaresF32) {
  // Past several chunks of sumSquaresChunk (8192 elements at least), an
  // empty tensor among them.
  checkSumSquares<float>(DType::F32, {1, 3, 0, 70001, 4097, 8192, 16385});
}

TEST(StepKernels, SumSquaresF64WithF32Scale) {
  checkSumSquares<double>(DType::F64, {5, 40000, 1});
}

TEST(StepKernels, SumSquaresScaleRoundsAsMul) {
  // v = x * scale rounds to f32 before it is squared, as dsc.mul would:
  // 3 * (1/3 in f32) is 1 in f32, not 0.99999997.
  F x({1}, DType::F32, {3.0f}), scale({}, DType::F32, {1.0f / 3.0f});
  D out({}, DType::F64);
  Tensor t = x.t();
  DSC_ASSERT_OK(cpu::sumSquares(&t, 1, scale.t(), out.t()));
  float v = 3.0f * (1.0f / 3.0f);
  EXPECT_EQ(out.v[0], double(v) * double(v));
}

TEST(StepKernels, SumSquaresChecks) {
  F f3({3}, DType::F32), s({}, DType::F32, {0.5f}), out({}, DType::F32);
  D d2({2}, DType::F64);
  Buf<uint16_t> bf({2}, DType::BF16);
  Buf<int64_t> i64({}, DType::I64);
  auto expectError = [](const Status &st, const std::string &prefix,
                        const std::string &reason) {
    EXPECT_EQ(st.code(), StatusCode::InvalidArgument) << st.message();
    EXPECT_EQ(st.message().rfind(prefix, 0), 0u) << st.message();
    EXPECT_NE(st.message().find(reason), std::string::npos) << st.message();
  };
  std::vector<Tensor> mixed = {f3.t(), d2.t()};
  expectError(cpu::sumSquares(mixed.data(), 2, Tensor(), out.t()),
              "sum_squares(entry=1, tensor=f64[2]): ",
              "every tensor must have entry 0's dtype, f32");
  Tensor half = bf.t();
  expectError(
      cpu::sumSquares(&half, 1, Tensor(), out.t()),
      "sum_squares(entry=0, tensor=bf16[2]): ", "tensors must be f32 or f64");
  Tensor t = f3.t();
  expectError(cpu::sumSquares(&t, 1, f3.t(), out.t()),
              "sum_squares(scale=f32[3]): ", "scale must be a scalar of f32");
  expectError(cpu::sumSquares(&t, 1, Tensor(), i64.t()),
              "sum_squares(out=i64[]): ", "out must be an f32 or f64 scalar");
  expectError(cpu::sumSquares(nullptr, 2, Tensor(), out.t()),
              "sum_squares(count=2): ", "the tensors are missing");
  Tensor missing = f3.t();
  missing.data = nullptr;
  expectError(cpu::sumSquares(&missing, 1, Tensor(), out.t()),
              "sum_squares(entry=0, ", "data is missing");
  // No tensors: 0.
  out.v[0] = 5;
  DSC_EXPECT_OK(cpu::sumSquares(nullptr, 0, s.t(), out.t()));
  EXPECT_EQ(out.v[0], 0.0f);
}

//===----------------------------------------------------------------------===//
// sgd
//===----------------------------------------------------------------------===//

struct SgdCase {
  double momentum, dampening;
  bool nesterov;
};

class SgdTest : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SgdTest, MatchesPyTorchFormula) {
  const SgdCase c = GetParam();
  const double lr = 0.05, wd = 0.01;
  std::mt19937_64 rng(17);
  D p = randD({11}, rng), buf = zerosD({11});
  std::vector<double> rp = p.v, rb = buf.v;
  D lrD = scalarD(lr), momD = scalarD(c.momentum), wdD = scalarD(wd);
  for (int64_t t = 1; t <= 3; ++t) {
    D g = randD({11}, rng);
    for (size_t i = 0; i < rp.size(); ++i) {
      double gi = g.v[i] + wd * rp[i];
      if (c.momentum != 0) {
        rb[i] = t == 1 ? gi : c.momentum * rb[i] + (1 - c.dampening) * gi;
        gi = c.nesterov ? gi + c.momentum * rb[i] : rb[i];
      }
      rp[i] -= lr * gi;
    }
    auto step = stepTensor(t);
    D np = zerosD({11}), nb = zerosD({11});
    DSC_ASSERT_OK(cpu::sgd(p.t(), g.t(), buf.t(), lrD.t(), momD.t(), wdD.t(),
                           step.t(), c.dampening, c.nesterov, np.t(), nb.t()));
    p = np, buf = nb;
  }
  for (size_t i = 0; i < rp.size(); ++i) {
    EXPECT_NEAR(p.v[i], rp[i], 1e-15);
    EXPECT_NEAR(buf.v[i], rb[i], 1e-15);
  }
}

INSTANTIATE_TEST_SUITE_P(StepKernels, SgdTest,
                         ::testing::Values(SgdCase{0.9, 0.0, false},
                                           SgdCase{0.9, 0.1, false},
                                           SgdCase{0.9, 0.0, true},
                                           SgdCase{0.0, 0.0, false}));

//===----------------------------------------------------------------------===//
// lr_schedule
//===----------------------------------------------------------------------===//

double scheduled(cpu::LrSchedule kind, int64_t t, int64_t w, int64_t total,
                 double wmr, double minRatio) {
  auto step = stepTensor(t);
  D base = scalarD(0.5), lr = scalarD(0);
  Status st = cpu::lrSchedule(step.t(), base.t(), kind, w, total, wmr, minRatio,
                              lr.t());
  EXPECT_TRUE(st.ok()) << st.message();
  return lr.v[0] / 0.5;
}

TEST(StepKernels, LrSchedules) {
  using K = cpu::LrSchedule;
  const double pi = std::acos(-1.0);
  // Warm-up from warmup_min_ratio, linear in t.
  EXPECT_DOUBLE_EQ(scheduled(K::WarmupCosine, 1, 4, 12, 0.2, 0.1),
                   0.2 + 0.8 * 0.25);
  EXPECT_DOUBLE_EQ(scheduled(K::Constant, 4, 4, 12, 0.2, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(scheduled(K::Constant, 100, 4, 12, 0.2, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(scheduled(K::Constant, 1, 0, 0, 0, 0), 1.0);
  // Cosine decay to min_ratio at T, and held there after.
  EXPECT_DOUBLE_EQ(scheduled(K::WarmupCosine, 6, 4, 12, 0.2, 0.1),
                   0.1 + 0.9 * 0.5 * (1 + std::cos(pi * 2 / 8)));
  EXPECT_NEAR(scheduled(K::WarmupCosine, 12, 4, 12, 0.2, 0.1), 0.1, 1e-15);
  EXPECT_NEAR(scheduled(K::WarmupCosine, 30, 4, 12, 0.2, 0.1), 0.1, 1e-15);
  // Linear decay.
  EXPECT_DOUBLE_EQ(scheduled(K::WarmupLinear, 9, 4, 12, 0.0, 0.0),
                   (12.0 - 9) / 8);
  EXPECT_DOUBLE_EQ(scheduled(K::WarmupLinear, 13, 4, 12, 0.0, 0.25), 0.25);
  // No decay span (T <= w): min_ratio after the warm-up.
  EXPECT_DOUBLE_EQ(scheduled(K::WarmupLinear, 5, 4, 4, 0.0, 0.3), 0.3);

  // An f32 lr from an f32 base.
  auto step = stepTensor(2);
  F base({}, DType::F32, {1e-3f}), lr({}, DType::F32, {0});
  DSC_ASSERT_OK(
      cpu::lrSchedule(step.t(), base.t(), K::WarmupLinear, 4, 8, 0, 0, lr.t()));
  EXPECT_FLOAT_EQ(lr.v[0], 0.5e-3f);

  auto zero = stepTensor(0);
  Status st =
      cpu::lrSchedule(zero.t(), base.t(), K::Constant, 0, 0, 0, 0, lr.t());
  EXPECT_EQ(st.code(), StatusCode::OutOfRange);
  cpu::LrSchedule kind;
  DSC_EXPECT_OK(cpu::parseLrSchedule("warmup_cosine", kind));
  EXPECT_EQ(kind, K::WarmupCosine);
  EXPECT_FALSE(cpu::parseLrSchedule("cosine", kind).ok());
}

//===----------------------------------------------------------------------===//
// dropout seeds
//===----------------------------------------------------------------------===//

TEST(StepKernels, DropoutSeedsDifferPerStepCallAndOp) {
  std::set<uint64_t> seen;
  for (int64_t step = 1; step <= 3; ++step)
    for (int64_t call = 0; call < 4; ++call)
      for (int64_t op = 0; op < 5; ++op)
        EXPECT_TRUE(seen.insert(cpu::dropoutSeed(42, step, call, op)).second);
  EXPECT_EQ(cpu::dropoutSeed(42, 1, 2, 3), cpu::dropoutSeed(42, 1, 2, 3));
  EXPECT_NE(cpu::dropoutSeed(42, 1, 2, 3), cpu::dropoutSeed(43, 1, 2, 3));
}

} // namespace
} // namespace dsc::test
