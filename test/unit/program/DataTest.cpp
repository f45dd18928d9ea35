//===- DataTest.cpp - --batch checks and --data windows -------------------===//

#include "program/data.h"
#include "TestUtil.h"

#include <set>

using namespace dsc;
using namespace dsc::program;
using namespace dsc::program::test;

namespace {

template <typename T> Tensor viewOf(std::vector<T> &v, DType d, I64s shape) {
  return Tensor::of(v.data(), d, shape);
}

//===----------------------------------------------------------------------===//
// --batch
//===----------------------------------------------------------------------===//

struct BatchFixture : ::testing::Test {
  TempDir dir;
  std::vector<float> x = std::vector<float>(8 * 3);
  std::vector<int64_t> y = std::vector<int64_t>(8);
  std::vector<InputSlot> slots;
  BatchShape batch{4, 2};
  void SetUp() override {
    slots = {{"x", viewOf(x, DType::F32, {8, 3})},
             {"y", viewOf(y, DType::I64, {8})}};
  }
  std::string write(const std::vector<io::NamedTensor> &tensors) {
    std::string path = dir / "batch.safetensors";
    Status s = io::writeSafetensors(path, tensors);
    EXPECT_TRUE(s.ok()) << s.message();
    return path;
  }
};

TEST_F(BatchFixture, LoadsAndConvertsIntegers) {
  std::vector<float> fx(24);
  for (int i = 0; i < 24; ++i)
    fx[i] = 0.5f * i;
  std::vector<int32_t> iy = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<uint8_t> extra(2);
  std::string path = write({{"y", viewOf(iy, DType::I32, {8})},
                            {"x", viewOf(fx, DType::F32, {8, 3})},
                            {"mask", viewOf(extra, DType::U8, {2})}});
  std::vector<std::string> unused;
  Status s = loadBatchFile(path, slots, batch, &unused);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(x, fx);
  EXPECT_EQ(y, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(unused, (std::vector<std::string>{"mask"}));
}

TEST_F(BatchFixture, MissingTensorNamesWhatTheFileHas) {
  std::vector<float> fx(24);
  std::string path = write({{"inputs", viewOf(fx, DType::F32, {8, 3})}});
  Status s = loadBatchFile(path, slots, batch);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "has no tensor 'x'")) << s.message();
  EXPECT_TRUE(contains(s.message(), "inputs are x, y")) << s.message();
  EXPECT_TRUE(contains(s.message(), "the file has inputs")) << s.message();
}

TEST_F(BatchFixture, WrongBatchSizeExplainsTheGlobalBatch) {
  std::vector<float> fx(12);
  std::vector<int64_t> iy(4);
  std::string path = write({{"x", viewOf(fx, DType::F32, {4, 3})},
                            {"y", viewOf(iy, DType::I64, {4})}});
  Status s = loadBatchFile(path, slots, batch);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "tensor 'x' has shape f32[4,3] but the "
                                    "program expects f32[8,3]"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), "global batch, 8 (micro-batch 4 x 2 "
                                    "accumulation steps)"))
      << s.message();
}

TEST_F(BatchFixture, WrongShapeOrDtypeIsAnError) {
  std::vector<float> fx(24);
  std::vector<float> fy(8);
  std::string path = write({{"x", viewOf(fx, DType::F32, {8, 3})},
                            {"y", viewOf(fy, DType::F32, {8})}});
  Status s = loadBatchFile(path, slots, batch);
  EXPECT_TRUE(contains(s.message(), "'y' has dtype f32 but the program "
                                    "expects i64[8]"))
      << s.message();
  path = write({{"x", viewOf(fx, DType::F32, {8, 1, 3})},
                {"y", viewOf(y, DType::I64, {8})}});
  s = loadBatchFile(path, slots, batch);
  EXPECT_TRUE(contains(s.message(), "'x' has shape f32[8,1,3]")) << s.message();
}

TEST_F(BatchFixture, NarrowingOutOfRangeIsAnError) {
  std::vector<int32_t> small(8);
  std::vector<InputSlot> narrow = {{"y", viewOf(small, DType::I32, {8})}};
  std::vector<int64_t> big = {0, 1, 2, 3, 4, 5, 6, int64_t(1) << 40};
  std::string path = write({{"y", viewOf(big, DType::I64, {8})}});
  Status s = loadBatchFile(path, narrow, batch);
  EXPECT_TRUE(contains(s.message(), "element 7 (1099511627776) does not fit "
                                    "i32"))
      << s.message();
}

TEST_F(BatchFixture, NotASafetensorsFile) {
  writeFile(dir / "bad.safetensors", "hello");
  Status s = loadBatchFile(dir / "bad.safetensors", slots, batch);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "--batch")) << s.message();
  s = loadBatchFile(dir / "absent.safetensors", slots, batch);
  EXPECT_FALSE(s.ok());
}

//===----------------------------------------------------------------------===//
// --data
//===----------------------------------------------------------------------===//

/// A token file whose token k is k (mod 65536 for uint16).
std::string tokenFile(const TempDir &dir, size_t count, TokenType type) {
  std::string bytes;
  for (size_t k = 0; k < count; ++k) {
    if (type == TokenType::U16) {
      uint16_t v = static_cast<uint16_t>(k);
      bytes.append(reinterpret_cast<const char *>(&v), 2);
    } else {
      int32_t v = static_cast<int32_t>(k);
      bytes.append(reinterpret_cast<const char *>(&v), 4);
    }
  }
  std::string path = dir / "tokens.bin";
  writeFile(path, bytes);
  return path;
}

TEST(TokenData, WindowsAndShiftedTargets) {
  TempDir dir;
  std::string path = tokenFile(dir, 1000, TokenType::U16);
  std::vector<int64_t> idx(4 * 8), targets(4 * 8);
  std::vector<InputSlot> slots = {
      {"idx", viewOf(idx, DType::I64, {4, 8})},
      {"targets", viewOf(targets, DType::I64, {4, 8})}};
  TokenData data;
  Status s = data.open(path, TokenType::U16, slots, {2, 2});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(data.numTokens(), 1000u);
  Rng rng(0, 2);
  for (int rep = 0; rep < 50; ++rep) {
    ASSERT_TRUE(data.sample(rng, slots).ok());
    for (int r = 0; r < 4; ++r) {
      int64_t start = idx[r * 8];
      EXPECT_GE(start, 0);
      EXPECT_LE(start, 1000 - 8 - 1);
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(idx[r * 8 + j], start + j);
        EXPECT_EQ(targets[r * 8 + j], start + j + 1);
      }
    }
  }
}

TEST(TokenData, EveryStartIsReachableAndNoneBeyond) {
  TempDir dir;
  std::string path = tokenFile(dir, 8 + 3, TokenType::I32); // starts 0, 1, 2
  std::vector<int32_t> idx(16 * 8), tgt(16 * 8);
  std::vector<InputSlot> slots = {{"idx", viewOf(idx, DType::I32, {16, 8})},
                                  {"tgt", viewOf(tgt, DType::I32, {16, 8})}};
  TokenData data;
  ASSERT_TRUE(data.open(path, TokenType::I32, slots, {16, 1}).ok());
  std::set<int32_t> starts;
  Rng rng(5, 2);
  for (int rep = 0; rep < 20; ++rep) {
    ASSERT_TRUE(data.sample(rng, slots).ok());
    for (int r = 0; r < 16; ++r) {
      starts.insert(idx[r * 8]);
      EXPECT_EQ(tgt[r * 8 + 7], idx[r * 8] + 8); // the last token is in range
    }
  }
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1, 2}));
}

TEST(TokenData, SameSeedSameWindowsOtherSeedOthers) {
  TempDir dir;
  std::string path = tokenFile(dir, 5000, TokenType::U16);
  std::vector<int64_t> a(8 * 4), b(8 * 4), c(8 * 4);
  TokenData data;
  std::vector<InputSlot> sa = {{"idx", viewOf(a, DType::I64, {8, 4})}};
  std::vector<InputSlot> sb = {{"idx", viewOf(b, DType::I64, {8, 4})}};
  std::vector<InputSlot> sc = {{"idx", viewOf(c, DType::I64, {8, 4})}};
  ASSERT_TRUE(data.open(path, TokenType::U16, sa, {8, 1}).ok());
  Rng r1(3, 2), r2(3, 2), r3(4, 2);
  ASSERT_TRUE(data.sample(r1, sa).ok());
  ASSERT_TRUE(data.sample(r2, sb).ok());
  ASSERT_TRUE(data.sample(r3, sc).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(TokenData, InputsThatCannotBeFedAreErrors) {
  TempDir dir;
  std::string path = tokenFile(dir, 100, TokenType::U16);
  std::vector<float> f(4 * 8);
  std::vector<int64_t> i(4 * 8), j(4 * 8), k(4 * 8), flat(4);
  auto openWith = [&](std::vector<InputSlot> slots, BatchShape batch = {4, 1}) {
    TokenData data;
    return data.open(path, TokenType::U16, slots, batch);
  };
  Status s = openWith({{"x", viewOf(f, DType::F32, {4, 8})}});
  EXPECT_TRUE(contains(s.message(), "input 'x' is f32[4,8]")) << s.message();
  EXPECT_TRUE(contains(s.message(), "--batch")) << s.message();
  s = openWith({{"a", viewOf(i, DType::I64, {4, 8})},
                {"b", viewOf(j, DType::I64, {4, 8})},
                {"c", viewOf(k, DType::I64, {4, 8})}});
  EXPECT_TRUE(contains(s.message(), "takes 3 (a, b, c)")) << s.message();
  s = openWith({{"y", viewOf(flat, DType::I64, {4})}});
  EXPECT_TRUE(contains(s.message(), "[batch, sequence]")) << s.message();
  s = openWith({{"a", viewOf(i, DType::I64, {4, 8})},
                {"b", viewOf(j, DType::I64, {8, 4})}});
  EXPECT_FALSE(s.ok());
  s = openWith({}, {4, 1});
  EXPECT_TRUE(contains(s.message(), "takes no inputs")) << s.message();
}

TEST(TokenData, FilesThatCannotFeedAreErrors) {
  TempDir dir;
  std::vector<int64_t> i(4 * 8);
  std::vector<InputSlot> slots = {{"idx", viewOf(i, DType::I64, {4, 8})}};
  TokenData a;
  Status s =
      a.open(tokenFile(dir, 8, TokenType::U16), TokenType::U16, slots, {4, 1});
  EXPECT_TRUE(contains(s.message(), "holds 8 tokens")) << s.message();
  EXPECT_TRUE(contains(s.message(), "need at least 9")) << s.message();
  writeFile(dir / "odd.bin", "abc");
  TokenData b;
  s = b.open(dir / "odd.bin", TokenType::U16, slots, {4, 1});
  EXPECT_TRUE(contains(s.message(), "not a whole number of uint16 tokens"))
      << s.message();
  TokenData c;
  s = c.open(dir / "absent.bin", TokenType::U16, slots, {4, 1});
  EXPECT_TRUE(contains(s.message(), "cannot open")) << s.message();

  std::string neg(4 * 20, '\xff'); // int32 -1 everywhere
  writeFile(dir / "neg.bin", neg);
  TokenData d;
  ASSERT_TRUE(d.open(dir / "neg.bin", TokenType::I32, slots, {4, 1}).ok());
  Rng rng(0, 2);
  s = d.sample(rng, slots);
  EXPECT_TRUE(contains(s.message(), "is -1, not a token id")) << s.message();
}

TEST(TokenData, ParsesTokenTypes) {
  TokenType t;
  EXPECT_TRUE(parseTokenType("uint16", t));
  EXPECT_EQ(t, TokenType::U16);
  EXPECT_TRUE(parseTokenType("int32", t));
  EXPECT_EQ(t, TokenType::I32);
  EXPECT_FALSE(parseTokenType("int64", t));
}

} // namespace

// --init random's threads start their generators anywhere in the sequence:
// skip(n) is n draws, so a skipped generator draws what the sequential one
// draws there.
TEST(Rng, SkipIsThatManyDraws) {
  Rng seq(7, 1), jump(7, 1);
  for (int i = 0; i < 2 * 1000; ++i)
    seq.next();
  jump.skip(2 * 1000);
  EXPECT_EQ(seq.state(), jump.state());
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(seq.normal(), jump.normal());
}
