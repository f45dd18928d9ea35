//===- CrossEntropyHalfTest.cpp - Cross entropy on 16-bit scores ----------===//
//
// softmaxCrossEntropy and its backward take bf16/f16 scores directly: the
// loss must be bitwise the f32 call's on cast(scores -> f32), an f32
// gradient bitwise the f32 call's, and a 16-bit gradient bitwise
// cast(f32 gradient -> bf16/f16).
//
//===----------------------------------------------------------------------===//

#include "cpu/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace dsc;
using namespace dsc::cpu;

namespace {

#define DSC_ASSERT_OK(expr)                                                    \
  do {                                                                         \
    ::dsc::Status st_ = (expr);                                                \
    ASSERT_TRUE(st_.ok()) << st_.message();                                    \
  } while (0)

using Shape = std::vector<int64_t>;

/// A tensor with its own storage, zeroed.
struct Buf {
  std::vector<char> bytes;
  Tensor t;
  Buf(DType dtype, const Shape &shape) {
    t = Tensor::of(nullptr, dtype, shape);
    bytes.assign(std::max<size_t>(t.nbytes(), 1), 0);
    t.data = bytes.data();
  }
  bool sameBits(const Buf &o) const {
    return t.nbytes() == o.t.nbytes() &&
           std::memcmp(t.data, o.t.data, t.nbytes()) == 0;
  }
};

/// The first element whose bits differ, or -1.
int64_t firstDiff(const Buf &a, const Buf &b) {
  size_t es = a.t.nbytes() / std::max<int64_t>(a.t.numel(), 1);
  for (int64_t i = 0; i < a.t.numel(); ++i)
    if (std::memcmp(a.bytes.data() + i * es, b.bytes.data() + i * es, es))
      return i;
  return -1;
}

Buf randomScores(DType dtype, const Shape &shape, uint32_t seed) {
  Buf f32(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  float *p = f32.t.as<float>();
  for (int64_t i = 0; i < f32.t.numel(); ++i)
    p[i] = u(rng);
  // Repeated maxima and a very negative score in the first line.
  if (f32.t.numel() > 3)
    p[0] = p[1] = 30.0f, p[2] = -1e4f;
  Buf out(dtype, shape);
  EXPECT_TRUE(cast(f32.t, out.t).ok());
  return out;
}

struct Case {
  Shape shape;
  DType labelType;
  bool weighted;
  std::optional<int64_t> ignore;
};

std::string caseName(DType dt, const Case &c) {
  std::string r = std::string(dtypeName(dt)) + "[";
  for (size_t i = 0; i < c.shape.size(); ++i)
    r += (i ? "," : "") + std::to_string(c.shape[i]);
  r += "] " + std::string(dtypeName(c.labelType));
  r += c.weighted ? " weighted" : "";
  if (c.ignore)
    r += " ignore " + std::to_string(*c.ignore);
  return r;
}

Buf makeLabels(const Case &c, uint32_t seed) {
  Shape ls = c.shape;
  ls.erase(ls.begin() + 1);
  Buf labels(c.labelType, ls);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> u(0, c.shape[1] - 1);
  for (int64_t i = 0; i < labels.t.numel(); ++i) {
    int64_t v = u(rng);
    if (c.ignore && i % 3 == 1)
      v = *c.ignore;
    if (c.labelType == DType::I64)
      labels.t.as<int64_t>()[i] = v;
    else
      labels.t.as<int32_t>()[i] = int32_t(v);
  }
  return labels;
}

Buf randomF32(const Shape &shape, float lo, float hi, uint32_t seed) {
  Buf b(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < b.t.numel(); ++i)
    b.t.as<float>()[i] = u(rng);
  return b;
}

void checkCase(DType dt, const Case &c) {
  SCOPED_TRACE(caseName(dt, c));
  Buf scores = randomScores(dt, c.shape, 11);
  Buf wide(DType::F32, c.shape);
  DSC_ASSERT_OK(cast(scores.t, wide.t));
  Buf labels = makeLabels(c, 12);
  Buf weights = randomF32({c.shape[1]}, 0.5f, 2.0f, 13);
  Tensor w = c.weighted ? weights.t : Tensor();
  Shape labelShape = c.shape;
  labelShape.erase(labelShape.begin() + 1);
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    SCOPED_TRACE(r == Reduction::None  ? "none"
                 : r == Reduction::Sum ? "sum"
                                       : "mean");
    Shape lossShape = r == Reduction::None ? labelShape : Shape{};
    Buf loss16(DType::F32, lossShape), loss32(DType::F32, lossShape);
    DSC_ASSERT_OK(
        softmaxCrossEntropy(scores.t, labels.t, w, r, c.ignore, loss16.t));
    DSC_ASSERT_OK(
        softmaxCrossEntropy(wide.t, labels.t, w, r, c.ignore, loss32.t));
    EXPECT_TRUE(loss16.sameBits(loss32))
        << "loss differs at " << firstDiff(loss16, loss32);

    Buf gradLoss = randomF32(lossShape, 0.5f, 1.5f, 14);
    Buf grad32(DType::F32, c.shape), gradWide(DType::F32, c.shape);
    Buf grad16(dt, c.shape), want16(dt, c.shape);
    DSC_ASSERT_OK(softmaxCrossEntropyBackward(wide.t, labels.t, w, r, c.ignore,
                                              gradLoss.t, grad32.t));
    DSC_ASSERT_OK(softmaxCrossEntropyBackward(
        scores.t, labels.t, w, r, c.ignore, gradLoss.t, gradWide.t));
    DSC_ASSERT_OK(softmaxCrossEntropyBackward(scores.t, labels.t, w, r,
                                              c.ignore, gradLoss.t, grad16.t));
    DSC_ASSERT_OK(cast(grad32.t, want16.t));
    EXPECT_TRUE(gradWide.sameBits(grad32))
        << "f32 gradient differs at " << firstDiff(gradWide, grad32);
    EXPECT_TRUE(grad16.sameBits(want16))
        << "16-bit gradient differs at " << firstDiff(grad16, want16);
  }
}

std::vector<Case> cases() {
  return {
      {{3, 5}, DType::I64, false, std::nullopt},
      {{3, 5}, DType::I32, true, -100},
      {{7, 1000}, DType::I64, true, -100},
      {{7, 1000}, DType::I64, false, 3}, // an ignore index inside [0, C)
      {{2, 50257}, DType::I64, false, -100},
      {{2, 50257}, DType::I32, true, std::nullopt},
      {{2, 5, 3}, DType::I32, true, -1}, // spatial: classes strided
      {{1, 1}, DType::I64, false, std::nullopt},
  };
}

TEST(CrossEntropyHalf, Bf16BitwiseF32Path) {
  for (const Case &c : cases())
    checkCase(DType::BF16, c);
}

TEST(CrossEntropyHalf, F16BitwiseF32Path) {
  for (const Case &c : cases())
    checkCase(DType::F16, c);
}

TEST(CrossEntropyHalf, AllIgnoredMeanIsNan) {
  Buf scores = randomScores(DType::BF16, {4, 6}, 21);
  Buf labels(DType::I64, {4});
  for (int i = 0; i < 4; ++i)
    labels.t.as<int64_t>()[i] = -100;
  Buf loss(DType::F32, {});
  DSC_ASSERT_OK(softmaxCrossEntropy(scores.t, labels.t, Tensor(),
                                    Reduction::Mean, -100, loss.t));
  EXPECT_TRUE(std::isnan(*loss.t.as<float>()));
}

TEST(CrossEntropyHalf, DtypeErrors) {
  Buf bf(DType::BF16, {4, 5}), f16(DType::F16, {4, 5}), f32(DType::F32, {4, 5});
  Buf labels(DType::I64, {4});
  Buf lossF32(DType::F32, {}), lossBf(DType::BF16, {}), lossF64(DType::F64, {});
  Buf wBf(DType::BF16, {5});
  auto fwd = [&](const Buf &s, const Tensor &w, const Buf &loss) {
    return softmaxCrossEntropy(s.t, labels.t, w, Reduction::Mean, {}, loss.t);
  };
  auto bwd = [&](const Buf &s, const Buf &gl, const Buf &gs) {
    return softmaxCrossEntropyBackward(s.t, labels.t, Tensor(), Reduction::Mean,
                                       {}, gl.t, gs.t);
  };
  EXPECT_TRUE(fwd(bf, Tensor(), lossF32).ok());
  EXPECT_FALSE(fwd(bf, Tensor(), lossBf).ok());  // loss stays f32
  EXPECT_FALSE(fwd(bf, Tensor(), lossF64).ok()); // loss stays f32
  EXPECT_FALSE(fwd(bf, wBf.t, lossF32).ok());    // weights are f32
  EXPECT_FALSE(fwd(f32, Tensor(), lossBf).ok());
  EXPECT_TRUE(bwd(bf, lossF32, bf).ok());
  EXPECT_TRUE(bwd(bf, lossF32, f32).ok());
  EXPECT_TRUE(bwd(f16, lossF32, f16).ok());
  EXPECT_TRUE(bwd(f16, lossF32, f32).ok());
  EXPECT_FALSE(bwd(bf, lossF32, f16).ok()); // another 16-bit type
  EXPECT_FALSE(bwd(bf, lossBf, bf).ok());   // gradLoss is f32
  EXPECT_FALSE(bwd(f32, lossF32, bf).ok()); // f32 scores keep f32 gradients
  Status st = bwd(bf, lossF32, f16);
  EXPECT_NE(st.message().find("grad_scores"), std::string::npos)
      << st.message();
  // NLL stays f32/f64.
  Buf logp(DType::BF16, {4, 5});
  EXPECT_FALSE(
      nllLoss(logp.t, labels.t, Tensor(), Reduction::Mean, {}, lossF32.t).ok());
}

} // namespace
