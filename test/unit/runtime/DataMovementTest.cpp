//===- DataMovementTest.cpp - Reshape, transpose, slice, gather, ... ------===//

#include "GradCheck.h"
#include "cpu/kernels.h"

#include <numeric>

using namespace dsc;
using namespace dsc::cpu;
using namespace dsc::test;

namespace {

D iota(std::vector<int64_t> shape) {
  D b = zerosD(std::move(shape));
  std::iota(b.v.begin(), b.v.end(), 0.0);
  return b;
}

} // namespace

TEST(DataMovement, TransposeForwardAndBackward) {
  D x = iota({2, 3, 4}), y = zerosD({4, 2, 3});
  DSC_ASSERT_OK(transpose(x.t(), {2, 0, 1}, y.t()));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(y[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 4 + k]);
  EXPECT_FALSE(transpose(x.t(), {0, 0, 1}, y.t()).ok());
  std::mt19937_64 rng(1);
  std::vector<D> in = {randD({2, 3, 4}, rng)};
  gradCheck(
      in, {4, 2, 3},
      [](auto &v, const Tensor &o) {
        return transpose(v[0], {2, 0, 1}, o);
      },
      [](auto &, const Tensor &g, auto &gr) {
        return transposeBackward(g, {2, 0, 1}, gr[0]);
      },
      {0});
  // Byte-generic: i64 and bool move the same way.
  Buf<int64_t> xi({2, 2}, DType::I64, {1, 2, 3, 4}), yi({2, 2}, DType::I64);
  DSC_ASSERT_OK(transpose(xi.t(), {1, 0}, yi.t()));
  EXPECT_EQ(yi.v, (std::vector<int64_t>{1, 3, 2, 4}));
}

TEST(DataMovement, ReshapeAndExpand) {
  D x = iota({2, 3}), y = zerosD({3, 2});
  DSC_ASSERT_OK(reshape(x.t(), y.t()));
  EXPECT_EQ(x.v, y.v);
  D bad = zerosD({4});
  EXPECT_FALSE(reshape(x.t(), bad.t()).ok());
  D e = zerosD({2, 2, 3});
  DSC_ASSERT_OK(expand(x.t(), e.t()));
  EXPECT_EQ(e[7], x[1]);
}

TEST(DataMovement, SliceWithNegativeStrides) {
  D x = iota({4, 5}), y = zerosD({2, 3});
  // Rows 3, 1 (stride -2); columns 0, 2, 4 (stride 2).
  DSC_ASSERT_OK(slice(x.t(), {3, 0}, {-2, 2}, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{15, 17, 19, 5, 7, 9}));
  Status st = slice(x.t(), {3, 0}, {2, 2}, y.t());
  EXPECT_EQ(st.code(), StatusCode::OutOfRange);
  std::mt19937_64 rng(2);
  std::vector<D> in = {randD({4, 5}, rng)};
  gradCheck(
      in, {2, 3},
      [](auto &v, const Tensor &o) {
        return slice(v[0], {3, 0}, {-2, 2}, o);
      },
      [](auto &, const Tensor &g, auto &gr) {
        return sliceBackward(g, {3, 0}, {-2, 2}, gr[0]);
      },
      {0});
}

TEST(DataMovement, ConcatSplit) {
  std::mt19937_64 rng(3);
  std::vector<D> in = {randD({2, 1, 3}, rng), randD({2, 2, 3}, rng)};
  D out = zerosD({2, 3, 3});
  Tensor parts[2] = {in[0].t(), in[1].t()};
  DSC_ASSERT_OK(concat(parts, 2, 1, out.t()));
  EXPECT_EQ(out[3], in[1][0]);
  EXPECT_EQ(out[9], in[0][3]);
  D a = zerosD({2, 1, 3}), b = zerosD({2, 2, 3});
  Tensor back[2] = {a.t(), b.t()};
  DSC_ASSERT_OK(split(out.t(), -2, back, 2));
  EXPECT_EQ(a.v, in[0].v);
  EXPECT_EQ(b.v, in[1].v);
  gradCheck(
      in, {2, 3, 3},
      [](auto &v, const Tensor &o) {
        Tensor p[2] = {v[0], v[1]};
        return concat(p, 2, 1, o);
      },
      [](auto &, const Tensor &g, auto &gr) {
        Tensor p[2] = {gr[0], gr[1]};
        return concatBackward(g, 1, p, 2);
      },
      {0, 1});
  // splitBackward is concat of the pieces' gradients.
  D ga = zerosD({2, 1, 3}), gb = zerosD({2, 2, 3}), gin = zerosD({2, 3, 3});
  std::fill(ga.v.begin(), ga.v.end(), 1.0);
  Tensor gp[2] = {ga.t(), gb.t()};
  DSC_ASSERT_OK(splitBackward(gp, 2, 1, gin.t()));
  EXPECT_EQ(gin[0], 1.0);
  EXPECT_EQ(gin[3], 0.0);
  D wrong = zerosD({2, 4, 3});
  EXPECT_FALSE(concat(parts, 2, 1, wrong.t()).ok());
}

TEST(DataMovement, GatherWithNegativeIndicesAndScatterAdd) {
  D x = iota({3, 4});
  Buf<int64_t> idx({2, 2}, DType::I64, {0, -1, 2, 0});
  D y = zerosD({3, 2, 2});
  DSC_ASSERT_OK(gather(x.t(), idx.t(), 1, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{0, 3, 2, 0, 4, 7, 6, 4, 8, 11, 10, 8}));
  Buf<int32_t> rows({3}, DType::I32, {2, -3, 2});
  D r = zerosD({3, 4});
  DSC_ASSERT_OK(gather(x.t(), rows.t(), 0, r.t()));
  EXPECT_EQ(r[4], 0.0);
  EXPECT_EQ(r[8], 8.0);
  Buf<int64_t> bad({1}, DType::I64, {4});
  D rb = zerosD({3, 1});
  Status st = gather(x.t(), bad.t(), 1, rb.t());
  EXPECT_EQ(st.code(), StatusCode::OutOfRange);
  std::mt19937_64 rng(4);
  std::vector<D> in = {randD({3, 4}, rng)};
  gradCheck(
      in, {3, 2, 2},
      [&](auto &v, const Tensor &o) { return gather(v[0], idx.t(), 1, o); },
      [&](auto &, const Tensor &g, auto &gr) {
        return gatherBackward(g, idx.t(), 1, gr[0]);
      },
      {0});
  // Repeated indices accumulate.
  D g(std::vector<int64_t>{3, 4}, DType::F64, std::vector<double>(12, 1.0));
  D gd = zerosD({3, 4});
  DSC_ASSERT_OK(gatherBackward(g.t(), rows.t(), 0, gd.t()));
  EXPECT_EQ(gd[8], 2.0);
  EXPECT_EQ(gd[0], 1.0);
  EXPECT_EQ(gd[4], 0.0);
}

// init + scatter_add(g), the bits of that add: each indexed row summed from
// zero in index order, then added to init's; unindexed rows are init's. Into
// another tensor and in place (init is the result) alike.
TEST(DataMovement, ScatterAddInto) {
  std::mt19937_64 rng(7);
  Buf<int64_t> idx({2, 3}, DType::I64, {4, 1, 4, -1, 0, 4});
  D g = randD({2, 3, 5}, rng), init = randD({5, 5}, rng);
  D scattered = zerosD({5, 5}), out = zerosD({5, 5});
  DSC_ASSERT_OK(gatherBackward(g.t(), idx.t(), 0, scattered.t()));
  DSC_ASSERT_OK(gatherBackwardInto(g.t(), idx.t(), 0, init.t(), out.t()));
  for (int64_t i = 0; i < 25; ++i) {
    bool indexed = i / 5 != 2 && i / 5 != 3;
    EXPECT_EQ(out[i], indexed ? init[i] + scattered[i] : init[i]) << i;
  }
  D same = init;
  DSC_ASSERT_OK(gatherBackwardInto(g.t(), idx.t(), 0, same.t(), same.t()));
  EXPECT_EQ(same.v, out.v);
  D wrong = zerosD({5, 4});
  EXPECT_FALSE(gatherBackwardInto(g.t(), idx.t(), 0, wrong.t(), out.t()).ok());
}

TEST(DataMovement, PadConstantAndCrop) {
  D x = iota({2, 3}), y = zerosD({3, 4});
  // One row before, one column after, and crop nothing else.
  DSC_ASSERT_OK(pad(x.t(), {1, 0, 0, 1}, -1.0, y.t()));
  EXPECT_EQ(y.v,
            (std::vector<double>{-1, -1, -1, -1, 0, 1, 2, -1, 3, 4, 5, -1}));
  D c = zerosD({2, 1});
  DSC_ASSERT_OK(pad(x.t(), {0, -1, 0, -1}, 0.0, c.t())); // crop both sides
  EXPECT_EQ(c.v, (std::vector<double>{1, 4}));
  Buf<int32_t> xi({2}, DType::I32, {5, 6}), yi({4}, DType::I32);
  DSC_ASSERT_OK(pad(xi.t(), {1, 1}, 7.0, yi.t()));
  EXPECT_EQ(yi.v, (std::vector<int32_t>{7, 5, 6, 7}));
  std::mt19937_64 rng(5);
  std::vector<D> in = {randD({2, 3}, rng)};
  for (auto pads :
       {std::vector<int64_t>{1, 0, 0, 2}, std::vector<int64_t>{0, -1, 1, 1}}) {
    std::vector<int64_t> outShape = {2 + pads[0] + pads[2],
                                     3 + pads[1] + pads[3]};
    gradCheck(
        in, outShape,
        [&](auto &v, const Tensor &o) { return pad(v[0], pads, 0.0, o); },
        [&](auto &, const Tensor &g, auto &gr) {
          return padBackward(g, pads, gr[0]);
        },
        {0});
  }
}

TEST(DataMovement, CumSumInEveryDirection) {
  D x = iota({2, 3}), y = zerosD({2, 3});
  // axis 1 of [[0, 1, 2], [3, 4, 5]]: plain, exclusive, reverse, both.
  DSC_ASSERT_OK(cumsum(x.t(), 1, false, false, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{0, 1, 3, 3, 7, 12}));
  DSC_ASSERT_OK(cumsum(x.t(), 1, true, false, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{0, 0, 1, 0, 3, 7}));
  DSC_ASSERT_OK(cumsum(x.t(), 1, false, true, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{3, 3, 2, 12, 9, 5}));
  DSC_ASSERT_OK(cumsum(x.t(), 1, true, true, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{3, 2, 0, 9, 5, 0}));
  DSC_ASSERT_OK(cumsum(x.t(), 0, false, false, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{0, 1, 2, 3, 5, 7}));
  // Position ids from a padding mask, as RoBERTa makes them (int64, the
  // middle axis of three).
  Buf<int64_t> m({1, 4, 2}, DType::I64, {1, 1, 1, 0, 1, 1, 0, 1}),
      p({1, 4, 2}, DType::I64);
  DSC_ASSERT_OK(cumsum(m.t(), 1, false, false, p.t()));
  EXPECT_EQ(p.v, (std::vector<int64_t>{1, 1, 2, 1, 3, 2, 3, 3}));
  // An int32 sum past INT32_MAX wraps as two's complement, as ONNX
  // runtimes do, instead of being undefined.
  Buf<int32_t> big({2}, DType::I32, {INT32_MAX, 1}), wrapped({2}, DType::I32);
  DSC_ASSERT_OK(cumsum(big.t(), 0, false, false, wrapped.t()));
  EXPECT_EQ(wrapped.v, (std::vector<int32_t>{INT32_MAX, INT32_MIN}));
  // Its gradient is the cumsum of the result's gradient the other way.
  std::mt19937_64 rng(9);
  for (bool exclusive : {false, true})
    for (bool reverse : {false, true}) {
      std::vector<D> in = {randD({2, 3, 4}, rng)};
      gradCheck(
          in, {2, 3, 4},
          [&](auto &v, const Tensor &o) {
            return cumsum(v[0], 2, exclusive, reverse, o);
          },
          [&](auto &, const Tensor &g, auto &gr) {
            return cumsum(g, 2, exclusive, !reverse, gr[0]);
          },
          {0});
    }
  // Bad calls: an axis past the rank, a bool tensor, a result of another
  // shape.
  Buf<uint8_t> b({3}, DType::Bool), b2({3}, DType::Bool);
  EXPECT_FALSE(cumsum(x.t(), 2, false, false, y.t()).ok());
  EXPECT_FALSE(cumsum(b.t(), 0, false, false, b2.t()).ok());
  D wrong = zerosD({3, 2});
  EXPECT_FALSE(cumsum(x.t(), 1, false, false, wrong.t()).ok());
}

TEST(DataMovement, Trilu) {
  D x = iota({3, 3}), y = zerosD({3, 3});
  DSC_ASSERT_OK(trilu(x.t(), true, 0, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{0, 1, 2, 0, 4, 5, 0, 0, 8}));
  DSC_ASSERT_OK(trilu(x.t(), false, -1, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{0, 0, 0, 3, 0, 0, 6, 7, 0}));
  std::mt19937_64 rng(6);
  std::vector<D> in = {randD({2, 3, 4}, rng)};
  gradCheck(
      in, {2, 3, 4},
      [](auto &v, const Tensor &o) { return trilu(v[0], true, 1, o); },
      [](auto &, const Tensor &g, auto &gr) {
        return trilu(g, true, 1, gr[0]);
      },
      {0});
}

// rotate_half: bit for bit the exported form (the halves of the last dim,
// the second negated, concatenated first), -0 and nan included, in f32 and
// f64; bf16 (which the CPU negates only through f32) as the f32 result
// rounded, exact; an odd last dim or a result of another shape is an error.
TEST(DataMovement, RotateHalfIsSliceNegConcat) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-3, 3);
  const std::vector<int64_t> shape = {2, 3, 8}, half = {2, 3, 4};
  auto exported = [&](const Tensor &x, DType dt,
                      std::vector<unsigned char> &out) {
    size_t es = dtypeSize(dt);
    std::vector<unsigned char> a(24 * es), b(24 * es), nb(24 * es);
    Tensor at = Tensor::of(a.data(), dt, half),
           bt = Tensor::of(b.data(), dt, half),
           nbt = Tensor::of(nb.data(), dt, half);
    DSC_ASSERT_OK(slice(x, {0, 0, 0}, {1, 1, 1}, at));
    DSC_ASSERT_OK(slice(x, {0, 0, 4}, {1, 1, 1}, bt));
    DSC_ASSERT_OK(unary(UnaryOp::Neg, bt, nbt));
    const Tensor parts[] = {nbt, at};
    DSC_ASSERT_OK(concat(parts, 2, 2, Tensor::of(out.data(), dt, shape)));
  };
  for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
    size_t es = dtypeSize(dt);
    F wide({2, 3, 8}, DType::F32);
    for (float &v : wide.v)
      v = u(rng);
    wide.v[1] = -0.0f;
    if (dt != DType::BF16)
      wide.v[6] = std::numeric_limits<float>::quiet_NaN();
    std::vector<unsigned char> x(48 * es), y(48 * es), want(48 * es);
    Tensor xt = Tensor::of(x.data(), dt, shape),
           yt = Tensor::of(y.data(), dt, shape);
    DSC_ASSERT_OK(cast(wide.t(), xt));
    DSC_ASSERT_OK(rotateHalf(xt, yt));
    if (dt == DType::BF16) {
      F back({2, 3, 8}, DType::F32);
      DSC_ASSERT_OK(cast(xt, back.t()));
      std::vector<unsigned char> w32(48 * 4);
      exported(back.t(), DType::F32, w32);
      DSC_ASSERT_OK(cast(Tensor::of(w32.data(), DType::F32, shape),
                         Tensor::of(want.data(), dt, shape)));
    } else {
      exported(xt, dt, want);
    }
    EXPECT_EQ(y, want) << dtypeName(dt);
  }
  F odd({2, 3}, DType::F32), r({2, 3}, DType::F32);
  EXPECT_EQ(rotateHalf(odd.t(), r.t()).message(),
            "rotate_half(input=f32[2,3], out=f32[2,3]): needs a float tensor "
            "whose last dim is even and a result like it");
  F even({3, 2}, DType::F32), bad({2, 3}, DType::F32);
  EXPECT_FALSE(rotateHalf(even.t(), bad.t()).ok());
}
