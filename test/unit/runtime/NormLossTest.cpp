//===- NormLossTest.cpp - Norms, softmax, losses and dropout --------------===//

#include "GradCheck.h"
#include "cpu/kernels.h"

#include <cmath>

using namespace dsc;
using namespace dsc::cpu;
using namespace dsc::test;

TEST(BatchNormTrain, ForwardAndRunningStats) {
  // Channel 0 holds {1, 3, 5, 7}, channel 1 {2, 2, 2, 2}.
  D x(std::vector<int64_t>{2, 2, 2}, DType::F64, {1, 3, 2, 2, 5, 7, 2, 2});
  D scale(std::vector<int64_t>{2}, DType::F64, {2, 1});
  D bias(std::vector<int64_t>{2}, DType::F64, {0.5, -1});
  D rm(std::vector<int64_t>{2}, DType::F64, {1, 0});
  D rv(std::vector<int64_t>{2}, DType::F64, {1, 1});
  D y = zerosD({2, 2, 2}), nm = zerosD({2}), nv = zerosD({2});
  D sm = zerosD({2}), si = zerosD({2});
  DSC_ASSERT_OK(batchNormTrain(x.t(), scale.t(), bias.t(), rm.t(), rv.t(), 1e-5,
                               0.9, y.t(), nm.t(), nv.t(), sm.t(), si.t()));
  double inv0 = 1 / std::sqrt(5.0 + 1e-5); // biased var of {1,3,5,7} is 5
  EXPECT_NEAR(y[0], (1 - 4) * inv0 * 2 + 0.5, 1e-14);
  EXPECT_NEAR(y[5], (7 - 4) * inv0 * 2 + 0.5, 1e-14);
  EXPECT_NEAR(y[2], -1, 1e-14);
  EXPECT_NEAR(nm[0], 0.9 * 1 + 0.1 * 4, 1e-15);
  EXPECT_NEAR(nv[0], 0.9 * 1 + 0.1 * (20.0 / 3), 1e-15); // unbiased: 20/3
  EXPECT_NEAR(nm[1], 0.1 * 2, 1e-15);
  EXPECT_NEAR(nv[1], 0.9, 1e-15);
  EXPECT_NEAR(sm[0], 4, 1e-15);
  EXPECT_NEAR(si[0], inv0, 1e-15);
}

TEST(BatchNormTrain, BackwardFiniteDifferences) {
  std::mt19937_64 rng(1);
  std::vector<D> in = {randD({3, 2, 2, 3}, rng), randD({2}, rng, 0.5, 1.5),
                       randD({2}, rng)};
  D rm = zerosD({2}), rv = zerosD({2});
  gradCheck(
      in, {3, 2, 2, 3},
      [&](auto &x, const Tensor &o) {
        return batchNormTrain(x[0], x[1], x[2], rm.t(), rv.t(), 1e-3, 0.9, o,
                              Tensor(), Tensor());
      },
      [&](auto &x, const Tensor &g, auto &gr) {
        return batchNormTrainBackward(x[0], x[1], 1e-3, g, gr[0], gr[1], gr[2]);
      },
      {0, 1, 2});
}

TEST(BatchNorm, InferenceForwardAndBackward) {
  std::mt19937_64 rng(2);
  D mean = randD({3}, rng), var = randD({3}, rng, 0.5, 2);
  std::vector<D> in = {randD({2, 3, 4}, rng), randD({3}, rng), randD({3}, rng)};
  gradCheck(
      in, {2, 3, 4},
      [&](auto &x, const Tensor &o) {
        return batchNorm(x[0], x[1], x[2], mean.t(), var.t(), 1e-5, o);
      },
      [&](auto &x, const Tensor &g, auto &gr) {
        return batchNormBackward(x[0], x[1], mean.t(), var.t(), 1e-5, g, gr[0],
                                 gr[1], gr[2]);
      },
      {0, 1, 2});
}

TEST(LayerNorm, ForwardValues) {
  D x(std::vector<int64_t>{2, 2}, DType::F64, {1, 3, -2, 2});
  D s(std::vector<int64_t>{2}, DType::F64, {1, 2});
  D b(std::vector<int64_t>{2}, DType::F64, {0, 1});
  D y = zerosD({2, 2});
  DSC_ASSERT_OK(layerNorm(x.t(), s.t(), b.t(), -1, 0.0, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{-1, 3, -1, 3}));
}

TEST(LayerNorm, BackwardFiniteDifferences) {
  for (int64_t axis : {1, 2, -1}) {
    std::mt19937_64 rng(axis + 5);
    std::vector<int64_t> inner =
        axis == 1 ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{4};
    std::vector<D> in = {randD({2, 3, 4}, rng), randD(inner, rng),
                         randD(inner, rng)};
    gradCheck(
        in, {2, 3, 4},
        [&](auto &x, const Tensor &o) {
          return layerNorm(x[0], x[1], x[2], axis, 1e-5, o);
        },
        [&](auto &x, const Tensor &g, auto &gr) {
          return layerNormBackward(x[0], x[1], axis, 1e-5, g, gr[0], gr[1],
                                   gr[2]);
        },
        {0, 1, 2});
  }
}

// dsc-fuse-norm-residual's epilogue on the CPU: the residual added to the
// input gradient as one f32 add (in place over the residual or not), and
// the sum's bf16 copy, as the plain backward, an add and a cast give them.
TEST(LayerNorm, BackwardEpilogue) {
  std::mt19937_64 rng(12);
  auto rand = [&](std::vector<int64_t> shape) {
    F t(std::move(shape), DType::F32);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float &v : t.v)
      v = u(rng);
    return t;
  };
  F x = rand({3, 16}), w = rand({16}), g = rand({3, 16}), r = rand({3, 16});
  for (bool rms : {false, true}) {
    F gx({3, 16}, DType::F32), gs({16}, DType::F32), gb({16}, DType::F32);
    auto back = [&](const Tensor &gi, const Tensor &res, const Tensor &c) {
      return rms ? rmsNormBackward(x.t(), w.t(), -1, 1e-6, g.t(), gi, gs.t(),
                                   res, c)
                 : layerNormBackward(x.t(), w.t(), -1, 1e-5, g.t(), gi, gs.t(),
                                     gb.t(), res, c);
    };
    DSC_ASSERT_OK(back(gx.t(), Tensor(), Tensor()));
    F sum({3, 16}, DType::F32);
    Buf<uint16_t> copy({3, 16}, DType::BF16), copy2({3, 16}, DType::BF16);
    DSC_ASSERT_OK(binary(BinaryOp::Add, r.t(), gx.t(), sum.t()));
    DSC_ASSERT_OK(cast(sum.t(), copy.t()));
    F into({3, 16}, DType::F32), over = r;
    DSC_ASSERT_OK(back(into.t(), r.t(), copy2.t()));
    EXPECT_EQ(into.v, sum.v);
    EXPECT_EQ(copy2.v, copy.v);
    DSC_ASSERT_OK(back(over.t(), over.t(), Tensor()));
    EXPECT_EQ(over.v, sum.v);
  }
  // A copy needs an f32 gradient of 16 bits; a residual of grad_in's shape.
  F bad({3, 8}, DType::F32), gx({3, 16}, DType::F32);
  Buf<uint16_t> wrong({3, 16}, DType::I32);
  EXPECT_FALSE(layerNormBackward(x.t(), w.t(), -1, 1e-5, g.t(), gx.t(),
                                 Tensor(), Tensor(), bad.t())
                   .ok());
  EXPECT_FALSE(layerNormBackward(x.t(), w.t(), -1, 1e-5, g.t(), gx.t(),
                                 Tensor(), Tensor(), Tensor(), wrong.t())
                   .ok());
}

TEST(RmsNorm, ForwardValues) {
  // Rows {3, 4} and {1, 1}: root mean squares sqrt(12.5) and 1.
  D x(std::vector<int64_t>{2, 2}, DType::F64, {3, 4, 1, 1});
  D s(std::vector<int64_t>{2}, DType::F64, {1, 2});
  D y = zerosD({2, 2});
  DSC_ASSERT_OK(rmsNorm(x.t(), s.t(), -1, 0.0, y.t()));
  double r = std::sqrt(12.5);
  EXPECT_DOUBLE_EQ(y.v[0], 3 / r);
  EXPECT_DOUBLE_EQ(y.v[1], 8 / r);
  EXPECT_DOUBLE_EQ(y.v[2], 1);
  EXPECT_DOUBLE_EQ(y.v[3], 2);
}

TEST(RmsNorm, BackwardFiniteDifferences) {
  for (int64_t axis : {1, 2, -1}) {
    std::mt19937_64 rng(axis + 9);
    std::vector<int64_t> inner =
        axis == 1 ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{4};
    std::vector<D> in = {randD({2, 3, 4}, rng), randD(inner, rng)};
    gradCheck(
        in, {2, 3, 4},
        [&](auto &x, const Tensor &o) {
          return rmsNorm(x[0], x[1], axis, 1e-5, o);
        },
        [&](auto &x, const Tensor &g, auto &gr) {
          return rmsNormBackward(x[0], x[1], axis, 1e-5, g, gr[0], gr[1]);
        },
        {0, 1});
  }
}

TEST(Softmax, ForwardAndBackward) {
  D x(std::vector<int64_t>{1, 3}, DType::F64, {1000, 1001, 1002});
  D y = zerosD({1, 3});
  DSC_ASSERT_OK(softmax(x.t(), 1, y.t()));
  double z = 1 + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(y[0], 1 / z, 1e-15);
  DSC_ASSERT_OK(logSoftmax(x.t(), -1, y.t()));
  EXPECT_NEAR(y[2], 2 - std::log(z), 1e-13);
  for (int64_t axis : {0, 1, -1}) {
    for (bool log : {false, true}) {
      std::mt19937_64 rng(axis + 10);
      std::vector<D> in = {randD({3, 4, 2}, rng, -2, 2)};
      D out = zerosD({3, 4, 2});
      gradCheck(
          in, {3, 4, 2},
          [&](auto &v, const Tensor &o) {
            return log ? logSoftmax(v[0], axis, o) : softmax(v[0], axis, o);
          },
          [&](auto &v, const Tensor &g, auto &gr) {
            Status st = log ? logSoftmax(v[0], axis, out.t())
                            : softmax(v[0], axis, out.t());
            if (!st.ok())
              return st;
            return log ? logSoftmaxBackward(out.t(), axis, g, gr[0])
                       : softmaxBackward(out.t(), axis, g, gr[0]);
          },
          {0});
    }
  }
}

namespace {

/// Brute-force weighted cross-entropy of [N, C, D] scores.
double referenceLoss(D &scores, const std::vector<int64_t> &labels,
                     const std::vector<double> *weights, Reduction red,
                     std::optional<int64_t> ignore, bool fromLogProb) {
  int64_t n = scores.shape[0], c = scores.shape[1];
  int64_t d = scores.v.size() / (n * c);
  double total = 0, wsum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < d; ++p) {
      int64_t l = labels[i * d + p];
      if (ignore && l == *ignore)
        continue;
      double lse = 0;
      for (int64_t k = 0; k < c; ++k)
        lse += std::exp(scores[(i * c + k) * d + p]);
      double lp = fromLogProb ? scores[(i * c + l) * d + p]
                              : scores[(i * c + l) * d + p] - std::log(lse);
      double w = weights ? (*weights)[l] : 1.0;
      total += -w * lp;
      wsum += w;
    }
  return red == Reduction::Mean ? total / wsum : total;
}

} // namespace

TEST(Losses, ForwardAgainstBruteForce) {
  std::mt19937_64 rng(3);
  D scores = randD({3, 4, 2}, rng, -2, 2);
  Buf<int64_t> labels({3, 2}, DType::I64, {0, 3, 1, -100, 2, 2});
  std::vector<int64_t> lv = labels.v;
  D w(std::vector<int64_t>{4}, DType::F64, {0.5, 1, 2, 0.25});
  D loss = zerosD({});
  for (Reduction red : {Reduction::Sum, Reduction::Mean}) {
    DSC_ASSERT_OK(softmaxCrossEntropy(scores.t(), labels.t(), w.t(), red, -100,
                                      loss.t()));
    EXPECT_NEAR(loss[0], referenceLoss(scores, lv, &w.v, red, -100, false),
                1e-14);
    DSC_ASSERT_OK(softmaxCrossEntropy(scores.t(), labels.t(), Tensor(), red,
                                      -100, loss.t()));
    EXPECT_NEAR(loss[0], referenceLoss(scores, lv, nullptr, red, -100, false),
                1e-14);
    DSC_ASSERT_OK(nllLoss(scores.t(), labels.t(), w.t(), red, -100, loss.t()));
    EXPECT_NEAR(loss[0], referenceLoss(scores, lv, &w.v, red, -100, true),
                1e-14);
  }
  D none = zerosD({3, 2});
  DSC_ASSERT_OK(softmaxCrossEntropy(scores.t(), labels.t(), w.t(),
                                    Reduction::None, -100, none.t()));
  EXPECT_EQ(none[3], 0.0); // ignored
  // An out-of-range label that is not ignored is an error, not a crash.
  Status st = nllLoss(scores.t(), labels.t(), w.t(), Reduction::Mean,
                      std::nullopt, loss.t());
  EXPECT_EQ(st.code(), StatusCode::OutOfRange);
  EXPECT_NE(st.message().find("label -100 at 3 outside [0, 4)"),
            std::string::npos)
      << st.message();
  Reduction r;
  EXPECT_FALSE(parseReduction("avg", r).ok());
  DSC_ASSERT_OK(parseReduction("mean", r));
  EXPECT_EQ(r, Reduction::Mean);
}

TEST(Losses, BackwardFiniteDifferences) {
  Buf<int32_t> labels({3, 2}, DType::I32, {0, 3, 1, 1, 2, 2});
  D w(std::vector<int64_t>{4}, DType::F64, {0.5, 1, 2, 0.25});
  for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean})
    for (bool weighted : {false, true})
      for (bool sce : {false, true}) {
        SCOPED_TRACE(static_cast<int>(red) * 4 + weighted * 2 + sce);
        std::mt19937_64 rng(static_cast<int>(red) + 20);
        std::vector<D> in = {randD({3, 4, 2}, rng, -2, 2)};
        Tensor wt = weighted ? w.t() : Tensor();
        std::vector<int64_t> outShape = red == Reduction::None
                                            ? std::vector<int64_t>{3, 2}
                                            : std::vector<int64_t>{};
        gradCheck(
            in, outShape,
            [&](auto &x, const Tensor &o) {
              return sce ? softmaxCrossEntropy(x[0], labels.t(), wt, red, 1, o)
                         : nllLoss(x[0], labels.t(), wt, red, 1, o);
            },
            [&](auto &x, const Tensor &g, auto &gr) {
              return sce ? softmaxCrossEntropyBackward(x[0], labels.t(), wt,
                                                       red, 1, g, gr[0])
                         : nllLossBackward(x[0], labels.t(), wt, red, 1, g,
                                           gr[0]);
            },
            {0});
      }
}

TEST(Dropout, SeededMaskIndependentOfCallAndScaled) {
  F x({1000}, DType::F32), y1({1000}, DType::F32), y2({1000}, DType::F32);
  std::fill(x.v.begin(), x.v.end(), 1.0f);
  Buf<uint8_t> m1({1000}, DType::Bool), m2({1000}, DType::Bool);
  DSC_ASSERT_OK(dropout(x.t(), 0.25, 42, y1.t(), m1.t()));
  DSC_ASSERT_OK(dropout(x.t(), 0.25, 42, y2.t(), m2.t()));
  EXPECT_EQ(y1.v, y2.v);
  EXPECT_EQ(m1.v, m2.v);
  int kept = 0;
  for (int i = 0; i < 1000; ++i) {
    kept += m1[i];
    EXPECT_EQ(y1[i], m1[i] ? 1.0f / 0.75f : 0.0f);
  }
  EXPECT_GT(kept, 700);
  EXPECT_LT(kept, 800);
  // A prefix of a bigger tensor draws the same mask: element i depends only
  // on (seed, i).
  F small({10}, DType::F32, std::vector<float>(10, 1.0f)), ys({10}, DType::F32);
  Buf<uint8_t> ms({10}, DType::Bool);
  DSC_ASSERT_OK(dropout(small.t(), 0.25, 42, ys.t(), ms.t()));
  EXPECT_TRUE(std::equal(ms.v.begin(), ms.v.end(), m1.v.begin()));
  DSC_ASSERT_OK(dropout(x.t(), 0.25, 43, y2.t(), m2.t()));
  EXPECT_NE(m1.v, m2.v);
}

TEST(Dropout, BackwardFiniteDifferences) {
  std::mt19937_64 rng(4);
  std::vector<D> in = {randD({4, 5}, rng)};
  Buf<uint8_t> mask({4, 5}, DType::Bool);
  D scratch = zerosD({4, 5});
  DSC_ASSERT_OK(dropout(in[0].t(), 0.3, 7, scratch.t(), mask.t()));
  gradCheck(
      in, {4, 5},
      [&](auto &x, const Tensor &o) {
        return dropout(x[0], 0.3, 7, o, Tensor());
      },
      [&](auto &, const Tensor &g, auto &gr) {
        return dropoutBackward(g, mask.t(), 0.3, gr[0]);
      },
      {0});
}
