//===- ShapeHelpersTest.cpp - broadcastShapes and normalizeAxis -----------===//
#include "dialects/dsc/IR/DscOps.h"

#include "gtest/gtest.h"

#include <vector>

using dsc::broadcastShapes;
using dsc::normalizeAxis;

namespace {

/// The broadcast shape as a std::vector (gtest prints those), or {-99} on
/// failure so that a failure never equals a shape.
std::vector<int64_t> bcast(std::vector<int64_t> a, std::vector<int64_t> b) {
  auto r = broadcastShapes(a, b);
  if (mlir::failed(r))
    return {-99};
  return std::vector<int64_t>(r->begin(), r->end());
}

TEST(BroadcastShapes, EqualShapes) {
  EXPECT_EQ(bcast({2, 3}, {2, 3}), (std::vector<int64_t>{2, 3}));
}

TEST(BroadcastShapes, ScalarsBroadcastToAnything) {
  EXPECT_EQ(bcast({}, {}), (std::vector<int64_t>{}));
  EXPECT_EQ(bcast({}, {4, 5}), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(bcast({4, 5}, {}), (std::vector<int64_t>{4, 5}));
}

TEST(BroadcastShapes, OnesStretchAndRanksAlignRight) {
  EXPECT_EQ(bcast({8, 1, 6, 1}, {7, 1, 5}), (std::vector<int64_t>{8, 7, 6, 5}));
  EXPECT_EQ(bcast({5}, {3, 1}), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(bcast({1, 1}, {1}), (std::vector<int64_t>{1, 1}));
}

TEST(BroadcastShapes, EmptyDimsBroadcastWithOneOnly) {
  EXPECT_EQ(bcast({0, 3}, {1, 3}), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(bcast({1}, {0}), (std::vector<int64_t>{0}));
  EXPECT_EQ(bcast({0}, {2}), (std::vector<int64_t>{-99}));
}

TEST(BroadcastShapes, MismatchFails) {
  EXPECT_TRUE(mlir::failed(broadcastShapes({3}, {4})));
  EXPECT_TRUE(mlir::failed(broadcastShapes({2, 3}, {3, 3})));
  EXPECT_TRUE(mlir::failed(broadcastShapes({2, 1, 3}, {4, 2})));
}

TEST(NormalizeAxis, NonNegativeAxesStay) {
  EXPECT_EQ(*normalizeAxis(0, 3), 0);
  EXPECT_EQ(*normalizeAxis(2, 3), 2);
}

TEST(NormalizeAxis, NegativeAxesCountFromTheEnd) {
  EXPECT_EQ(*normalizeAxis(-1, 3), 2);
  EXPECT_EQ(*normalizeAxis(-3, 3), 0);
}

TEST(NormalizeAxis, OutOfRangeFails) {
  EXPECT_TRUE(mlir::failed(normalizeAxis(3, 3)));
  EXPECT_TRUE(mlir::failed(normalizeAxis(-4, 3)));
  EXPECT_TRUE(mlir::failed(normalizeAxis(1, 1)));
}

TEST(NormalizeAxis, ScalarAcceptsOnlyAxisZero) {
  EXPECT_EQ(*normalizeAxis(0, 0), 0);
  EXPECT_TRUE(mlir::failed(normalizeAxis(-1, 0)));
  EXPECT_TRUE(mlir::failed(normalizeAxis(1, 0)));
}

} // namespace
