//===- ArenaTest.cpp - Status, tensor views, host arena, half floats ------===//

#include "dsc/runtime.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace dsc;

TEST(Arena, BumpMarkReleasePeak) {
  HostArena arena;
  ASSERT_TRUE(arena.init(1000, 64).ok());
  EXPECT_EQ(arena.capacity(), 1024u);
  void *a = nullptr, *b = nullptr;
  ASSERT_TRUE(arena.allocate(10, &a).ok());
  size_t mark = arena.mark();
  ASSERT_TRUE(arena.allocate(100, &b).ok());
  EXPECT_EQ(static_cast<char *>(b) - static_cast<char *>(a), 64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  EXPECT_EQ(arena.used(), 64u + 128u);
  arena.release(mark);
  EXPECT_EQ(arena.used(), 64u);
  EXPECT_EQ(arena.peak(), 192u);
  void *c = nullptr;
  Status st = arena.allocate(2000, &c);
  EXPECT_EQ(st.code(), StatusCode::OutOfMemory);
  EXPECT_NE(st.message().find("HostArena::allocate(2000)"), std::string::npos)
      << st.message();
  ASSERT_TRUE(arena.at(512, 512, &c).ok());
  EXPECT_EQ(arena.peak(), 1024u);
  EXPECT_EQ(arena.at(512, 513, &c).code(), StatusCode::OutOfRange);
  EXPECT_EQ(arena.at(1, 1, &c).code(), StatusCode::InvalidArgument);
  EXPECT_FALSE(arena.init(10).ok());
}

TEST(Tensor, DescribeAndSizes) {
  float buf[6];
  Tensor t = Tensor::of(buf, DType::F32, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_EQ(describe(t), "f32[2,3]");
  EXPECT_EQ(describe(Tensor()), "none");
  Tensor s = Tensor::of(buf, DType::BF16, {});
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(describe(s), "bf16[]");
  Tensor big = Tensor::of(buf, DType::F32, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(big.rank, kMaxRank + 1);
  EXPECT_EQ(dtypeSize(DType::Bool), 1u);
  EXPECT_EQ(dtypeSize(DType::I64), 8u);
}

TEST(HalfFloat, RoundTripsAndRounding) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f,
                  5.9604644775390625e-08f, 0.333251953125f})
    EXPECT_EQ(halfToFloat(floatToHalf(v)), v) << v;
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);           // rounds up to inf
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00); // tie to even
  EXPECT_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_EQ(floatToHalf(2.98023223876953125e-08f), 0x0000); // tie to even: 0
  EXPECT_EQ(floatToHalf(8.940696716308594e-08f), 0x0002);   // 1.5 ulp -> 2
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(bfloat16ToFloat(floatToBfloat16(3.140625f)), 3.140625f);
  EXPECT_EQ(floatToBfloat16(1.0f + 1.0f / 256), 0x3f80); // tie to even
  EXPECT_EQ(floatToBfloat16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBfloat16(NAN))));
}
