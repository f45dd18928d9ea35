//===- DataMovementTest.cpp - CUDA data movement and reductions vs CPU ----===//
//
// Every data-movement kernel and reduce on random inputs: the CPU reference
// on the host views, the CUDA kernel on the device views, compared element
// by element. Pure data movement (and gatherBackward, which sums in the CPU's
// order) must match exactly. Device results start as random garbage, so an
// element a kernel forgets to write shows up.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dsc::cuda::test {
namespace {

using Shape = std::vector<int64_t>;

/// Waits for every upload: DevTensor copies with cudaMemcpy, which for
/// pageable memory may return before the DMA lands, and the rank's stream
/// does not wait for the legacy stream.
void settle() { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

DevTensor randomTensor(DType dt, Shape shape, uint32_t seed, double lo = -4,
                       double hi = 4) {
  DevTensor t(dt, shape);
  t.random(lo, hi, seed);
  settle();
  return t;
}

/// A result tensor whose device copy starts as garbage.
DevTensor result(DType dt, Shape shape) {
  return randomTensor(dt, shape, 999, 1, 100);
}

void expectSame(const DevTensor &cpu, const DevTensor &gpu,
                const std::string &what = "") {
  expectClose(cpu, gpu, 0, 0, what);
}

const DType kMoveTypes[] = {DType::F32,  DType::I64, DType::Bool,
                            DType::BF16, DType::F64, DType::I8};

std::string name(DType dt) { return dtypeName(dt); }

//===----------------------------------------------------------------------===//
// Reshape, transpose, expand
//===----------------------------------------------------------------------===//

TEST(CudaDataMovement, Reshape) {
  DSC_REQUIRE_GPU();
  for (DType dt : kMoveTypes) {
    DevTensor in = randomTensor(dt, {3, 4, 5}, 1);
    DevTensor c = result(dt, {12, 5}), g = result(dt, {12, 5});
    DSC_ASSERT_OK(cpu::reshape(in.host(), c.host()));
    DSC_ASSERT_OK(cuda::reshape(in.dev(), g.dev()));
    expectSame(c, g, "reshape " + name(dt));
  }
  // Same data: a no-op.
  DevTensor in = randomTensor(DType::F32, {6}, 2);
  Tensor view = Tensor::of(in.dev().data, DType::F32, {2, 3});
  DSC_ASSERT_OK(cuda::reshape(in.dev(), view));
  DevTensor c = result(DType::F32, {2, 3});
  DSC_ASSERT_OK(cpu::reshape(in.host(), c.host()));
  expectSame(c, in, "in place");
  // Errors match the CPU's.
  DevTensor bad = result(DType::F32, {7});
  Status cs = cpu::reshape(in.host(), bad.host());
  Status gs = cuda::reshape(in.dev(), bad.dev());
  EXPECT_FALSE(gs.ok());
  EXPECT_EQ(cs.message(), gs.message());
}

Shape permuted(const Shape &s, const Shape &perm) {
  Shape o;
  for (int64_t p : perm)
    o.push_back(s[p]);
  return o;
}

TEST(CudaDataMovement, Transpose) {
  DSC_REQUIRE_GPU();
  struct Case {
    Shape shape, perm;
  };
  std::vector<Case> cases = {
      {{2, 3, 4, 5}, {0, 2, 1, 3}}, // innermost kept
      {{2, 3, 4, 5}, {3, 2, 1, 0}}, // full reversal (tiled)
      {{2, 67, 131}, {0, 2, 1}},    // tiles with ragged edges
      {{64, 48}, {1, 0}},
      {{3, 1, 40, 33, 5}, {0, 4, 2, 1, 3}}, // batch dims on both sides
      {{5, 7}, {0, 1}},                     // identity
      {{1, 9, 1}, {2, 1, 0}},               // only size-1 dims move
      {{4, 6, 8}, {1, 0, 2}},
  };
  for (DType dt : kMoveTypes)
    for (const Case &k : cases) {
      DevTensor in = randomTensor(dt, k.shape, 3);
      Shape os = permuted(k.shape, k.perm);
      DevTensor c = result(dt, os), g = result(dt, os);
      DSC_ASSERT_OK(cpu::transpose(in.host(), k.perm, c.host()));
      DSC_ASSERT_OK(cuda::transpose(in.dev(), k.perm, g.dev()));
      expectSame(c, g, "transpose " + name(dt));
    }
  DevTensor in = randomTensor(DType::F32, {2, 3}, 4);
  DevTensor out = result(DType::F32, {3, 2});
  Status cs = cpu::transpose(in.host(), {0, 0}, out.host());
  Status gs = cuda::transpose(in.dev(), {0, 0}, out.dev());
  EXPECT_FALSE(gs.ok());
  EXPECT_EQ(cs.message(), gs.message());
}

TEST(CudaDataMovement, Expand) {
  DSC_REQUIRE_GPU();
  struct Case {
    Shape in, out;
  };
  std::vector<Case> cases = {{{3, 1, 5}, {2, 3, 4, 5}},
                             {{1}, {7}},
                             {{4, 1}, {4, 6}},
                             {{8}, {3, 8}},
                             {{}, {2, 2}},
                             {{2, 3}, {2, 3}}};
  for (DType dt : kMoveTypes)
    for (const Case &k : cases) {
      DevTensor in = randomTensor(dt, k.in, 5);
      DevTensor c = result(dt, k.out), g = result(dt, k.out);
      DSC_ASSERT_OK(cpu::expand(in.host(), c.host()));
      DSC_ASSERT_OK(cuda::expand(in.dev(), g.dev()));
      expectSame(c, g, "expand " + name(dt));
    }
  DevTensor in = randomTensor(DType::F32, {3}, 6);
  DevTensor out = result(DType::F32, {4});
  Status cs = cpu::expand(in.host(), out.host());
  Status gs = cuda::expand(in.dev(), out.dev());
  EXPECT_FALSE(gs.ok());
  EXPECT_EQ(cs.message(), gs.message());
}

//===----------------------------------------------------------------------===//
// Slices
//===----------------------------------------------------------------------===//

struct SliceCase {
  Shape full, offsets, strides, part;
};

std::vector<SliceCase> sliceCases() {
  return {
      {{6, 7, 8}, {5, 1, 7}, {-1, 2, -3}, {3, 3, 3}}, // negative strides
      {{6, 7, 8}, {0, 0, 0}, {1, 1, 1}, {6, 7, 8}},   // everything
      {{4, 64}, {1, 16}, {1, 1}, {2, 32}},            // contiguous rows
      {{10, 12}, {2, 0}, {3, 1}, {3, 12}},            // strided rows
      {{9}, {8}, {-1}, {9}},                          // reversal
      {{5, 6}, {1, 2}, {1, 1}, {0, 3}},               // empty
      {{3, 4, 2}, {2, 3, 1}, {-2, -1, -1}, {2, 4, 2}},
  };
}

TEST(CudaDataMovement, Slice) {
  DSC_REQUIRE_GPU();
  for (DType dt : kMoveTypes)
    for (const SliceCase &k : sliceCases()) {
      DevTensor in = randomTensor(dt, k.full, 7);
      DevTensor c = result(dt, k.part), g = result(dt, k.part);
      DSC_ASSERT_OK(cpu::slice(in.host(), k.offsets, k.strides, c.host()));
      DSC_ASSERT_OK(cuda::slice(in.dev(), k.offsets, k.strides, g.dev()));
      expectSame(c, g, "slice " + name(dt));
    }
  // Out of range: same status as the CPU.
  DevTensor in = randomTensor(DType::F32, {4, 4}, 8);
  DevTensor out = result(DType::F32, {2, 2});
  Status cs = cpu::slice(in.host(), {3, 0}, {1, 1}, out.host());
  Status gs = cuda::slice(in.dev(), {3, 0}, {1, 1}, out.dev());
  EXPECT_FALSE(gs.ok());
  EXPECT_EQ(gs.code(), StatusCode::OutOfRange);
  EXPECT_EQ(cs.message(), gs.message());
}

TEST(CudaDataMovement, SliceBackward) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::I64, DType::BF16, DType::Bool})
    for (const SliceCase &k : sliceCases()) {
      DevTensor gradOut = randomTensor(dt, k.part, 9);
      DevTensor c = result(dt, k.full), g = result(dt, k.full);
      DSC_ASSERT_OK(
          cpu::sliceBackward(gradOut.host(), k.offsets, k.strides, c.host()));
      DSC_ASSERT_OK(
          cuda::sliceBackward(gradOut.dev(), k.offsets, k.strides, g.dev()));
      expectSame(c, g, "slice_backward " + name(dt));
    }
}

//===----------------------------------------------------------------------===//
// Concat, split
//===----------------------------------------------------------------------===//

struct StackCase {
  std::vector<Shape> parts;
  int64_t axis;
  Shape whole;
};

std::vector<StackCase> stackCases() {
  return {
      {{{2, 3, 4}, {2, 5, 4}, {2, 1, 4}}, 1, {2, 9, 4}},
      {{{1, 3}, {4, 3}}, 0, {5, 3}},
      {{{3, 3}, {3, 0}, {3, 5}}, -1, {3, 8}}, // odd widths, an empty piece
      {{{16, 64}, {16, 128}, {16, 64}}, 1, {16, 256}}, // qkv-like rows
      {{{7}}, 0, {7}},
  };
}

TEST(CudaDataMovement, Concat) {
  DSC_REQUIRE_GPU();
  for (DType dt : kMoveTypes)
    for (const StackCase &k : stackCases()) {
      std::vector<DevTensor> parts;
      std::vector<Tensor> hosts, devs;
      for (size_t i = 0; i < k.parts.size(); ++i)
        parts.push_back(randomTensor(dt, k.parts[i], 10 + uint32_t(i)));
      for (const DevTensor &p : parts) {
        hosts.push_back(p.host());
        devs.push_back(p.dev());
      }
      int n = static_cast<int>(parts.size());
      DevTensor c = result(dt, k.whole), g = result(dt, k.whole);
      DSC_ASSERT_OK(cpu::concat(hosts.data(), n, k.axis, c.host()));
      DSC_ASSERT_OK(cuda::concat(devs.data(), n, k.axis, g.dev()));
      expectSame(c, g, "concat " + name(dt));
    }
  DevTensor a = randomTensor(DType::F32, {2, 3}, 11),
            b = randomTensor(DType::F32, {3, 3}, 12);
  Tensor hosts[] = {a.host(), b.host()}, devs[] = {a.dev(), b.dev()};
  DevTensor out = result(DType::F32, {2, 6});
  Status cs = cpu::concat(hosts, 2, 1, out.host());
  Status gs = cuda::concat(devs, 2, 1, out.dev());
  EXPECT_FALSE(gs.ok());
  EXPECT_EQ(cs.message(), gs.message());
}

TEST(CudaDataMovement, Split) {
  DSC_REQUIRE_GPU();
  for (DType dt : kMoveTypes)
    for (const StackCase &k : stackCases()) {
      DevTensor in = randomTensor(dt, k.whole, 13);
      std::vector<DevTensor> cs, gs;
      std::vector<Tensor> hosts, devs;
      for (const Shape &s : k.parts) {
        cs.push_back(result(dt, s));
        gs.push_back(result(dt, s));
      }
      for (size_t i = 0; i < cs.size(); ++i) {
        hosts.push_back(cs[i].host());
        devs.push_back(gs[i].dev());
      }
      int n = static_cast<int>(cs.size());
      DSC_ASSERT_OK(cpu::split(in.host(), k.axis, hosts.data(), n));
      DSC_ASSERT_OK(cuda::split(in.dev(), k.axis, devs.data(), n));
      for (size_t i = 0; i < cs.size(); ++i)
        expectSame(cs[i], gs[i], "split " + name(dt));
    }
}

//===----------------------------------------------------------------------===//
// Gather and its backward
//===----------------------------------------------------------------------===//

Shape gatherShape(const Shape &data, const Shape &indices, int64_t axis) {
  Shape o(data.begin(), data.begin() + axis);
  o.insert(o.end(), indices.begin(), indices.end());
  o.insert(o.end(), data.begin() + axis + 1, data.end());
  return o;
}

struct GatherCase {
  Shape data, indices;
  int64_t axis;
  DType indexType;
};

std::vector<GatherCase> gatherCases() {
  return {
      {{10, 6}, {7}, 0, DType::I64},       // rows, negative indices
      {{4, 5, 6}, {2, 3}, 1, DType::I32},  // middle axis, 2-D indices
      {{4, 5, 6}, {3}, -1, DType::I64},    // last axis
      {{1000, 64}, {4096}, 0, DType::I64}, // embedding-like
      {{5, 3}, {}, 0, DType::I32},         // scalar index
      {{6, 4}, {0}, 0, DType::I64},        // no indices
  };
}

/// Indices in [-dim, dim) (negatives included), as doubles.
DevTensor indicesFor(DType it, const Shape &shape, int64_t dim, uint32_t seed) {
  return randomTensor(it, shape, seed, double(-dim), double(dim));
}

TEST(CudaDataMovement, Gather) {
  DSC_REQUIRE_GPU();
  for (DType dt : kMoveTypes)
    for (const GatherCase &k : gatherCases()) {
      int64_t axis = k.axis < 0 ? k.axis + int64_t(k.data.size()) : k.axis;
      DevTensor data = randomTensor(dt, k.data, 14);
      DevTensor idx = indicesFor(k.indexType, k.indices, k.data[axis], 15);
      Shape os = gatherShape(k.data, k.indices, axis);
      DevTensor c = result(dt, os), g = result(dt, os);
      DSC_ASSERT_OK(cpu::gather(data.host(), idx.host(), k.axis, c.host()));
      DSC_ASSERT_OK(cuda::gather(data.dev(), idx.dev(), k.axis, g.dev()));
      expectSame(c, g, "gather " + name(dt));
    }
}

TEST(CudaDataMovement, GatherOutOfRange) {
  DSC_REQUIRE_GPU();
  for (DType it : {DType::I64, DType::I32})
    for (double bad : {5.0, -6.0, 100.0}) {
      DevTensor data = randomTensor(DType::F32, {5, 3}, 16);
      DevTensor idx(it, {4});
      idx.values({0, -1, bad, bad});
      settle();
      DevTensor c = result(DType::F32, {4, 3}), g = result(DType::F32, {4, 3});
      Status cs = cpu::gather(data.host(), idx.host(), 0, c.host());
      Status gs = cuda::gather(data.dev(), idx.dev(), 0, g.dev());
      EXPECT_FALSE(gs.ok());
      EXPECT_EQ(gs.code(), StatusCode::OutOfRange);
      EXPECT_EQ(cs.message(), gs.message());
      // The backward validates its indices the same way.
      DevTensor gradOut = randomTensor(DType::F32, {4, 3}, 17);
      DevTensor cd = result(DType::F32, {5, 3}),
                gd = result(DType::F32, {5, 3});
      cs = cpu::gatherBackward(gradOut.host(), idx.host(), 0, cd.host());
      gs = cuda::gatherBackward(gradOut.dev(), idx.dev(), 0, gd.dev());
      EXPECT_FALSE(gs.ok());
      EXPECT_EQ(gs.code(), StatusCode::OutOfRange);
      EXPECT_EQ(cs.message(), gs.message());
    }
  // The stream is still usable afterwards.
  DevTensor data = randomTensor(DType::F32, {5, 3}, 18);
  DevTensor idx(DType::I64, {2});
  idx.values({4, -5});
  settle();
  DevTensor c = result(DType::F32, {2, 3}), g = result(DType::F32, {2, 3});
  DSC_ASSERT_OK(cpu::gather(data.host(), idx.host(), 0, c.host()));
  DSC_ASSERT_OK(cuda::gather(data.dev(), idx.dev(), 0, g.dev()));
  expectSame(c, g, "gather after an error");
}

TEST(CudaDataMovement, GatherBackward) {
  DSC_REQUIRE_GPU();
  struct Case {
    Shape data, indices;
    int64_t axis;
    DType indexType;
    int64_t range; // indices drawn from [-range, range): many repeats
  };
  std::vector<Case> cases = {
      {{10, 6}, {40}, 0, DType::I64, 3},
      {{4, 5, 6}, {2, 7}, 1, DType::I32, 5},
      {{4, 5, 3}, {9}, -1, DType::I64, 2},
      {{5000, 96}, {8192}, 0, DType::I64, 50},     // hot rows
      {{3000, 32}, {4, 512}, 0, DType::I32, 3000}, // mostly distinct
      {{6, 4}, {0}, 0, DType::I64, 1},             // no indices: zeros
      {{7, 3}, {}, 0, DType::I64, 7},              // scalar index
  };
  for (DType dt : {DType::F32, DType::F64})
    for (const Case &k : cases) {
      int64_t axis = k.axis < 0 ? k.axis + int64_t(k.data.size()) : k.axis;
      DevTensor idx = randomTensor(k.indexType, k.indices, 19, double(-k.range),
                                   double(k.range));
      Shape gs = gatherShape(k.data, k.indices, axis);
      DevTensor gradOut = randomTensor(dt, gs, 20);
      DevTensor c = result(dt, k.data), g = result(dt, k.data);
      DSC_ASSERT_OK(
          cpu::gatherBackward(gradOut.host(), idx.host(), k.axis, c.host()));
      DSC_ASSERT_OK(
          cuda::gatherBackward(gradOut.dev(), idx.dev(), k.axis, g.dev()));
      // Same order of additions as the CPU: bitwise equal.
      expectSame(c, g, "gather_backward " + name(dt));
      // Deterministic: a second run gives the same bits.
      DevTensor g2 = result(dt, k.data);
      DSC_ASSERT_OK(
          cuda::gatherBackward(gradOut.dev(), idx.dev(), k.axis, g2.dev()));
      std::vector<char> a = g.download(), b = g2.download();
      EXPECT_EQ(a, b);
      // Into init (a tied embedding's other gradient): into another tensor
      // and in place, the CPU's bits both ways.
      DevTensor init = randomTensor(dt, k.data, 22),
                same = randomTensor(dt, k.data, 22);
      DevTensor ci = result(dt, k.data), gi = result(dt, k.data);
      DSC_ASSERT_OK(cpu::gatherBackwardInto(gradOut.host(), idx.host(), k.axis,
                                            init.host(), ci.host()));
      DSC_ASSERT_OK(cuda::gatherBackwardInto(gradOut.dev(), idx.dev(), k.axis,
                                             init.dev(), gi.dev()));
      DSC_ASSERT_OK(cuda::gatherBackwardInto(gradOut.dev(), idx.dev(), k.axis,
                                             same.dev(), same.dev()));
      expectSame(ci, gi, "gather_backward_into " + name(dt));
      expectSame(ci, same, "gather_backward_into in place " + name(dt));
    }
  // bf16 is not summed: Unimplemented, as on the CPU.
  DevTensor idx(DType::I64, {2});
  idx.values({0, 1});
  settle();
  DevTensor gradOut = randomTensor(DType::BF16, {2, 3}, 21);
  DevTensor c = result(DType::BF16, {4, 3}), g = result(DType::BF16, {4, 3});
  Status cs = cpu::gatherBackward(gradOut.host(), idx.host(), 0, c.host());
  Status gs2 = cuda::gatherBackward(gradOut.dev(), idx.dev(), 0, g.dev());
  EXPECT_EQ(gs2.code(), StatusCode::Unimplemented);
  EXPECT_EQ(cs.message(), gs2.message());
}

//===----------------------------------------------------------------------===//
// Pad
//===----------------------------------------------------------------------===//

TEST(CudaDataMovement, Pad) {
  DSC_REQUIRE_GPU();
  struct Case {
    Shape in, pads;
  };
  std::vector<Case> cases = {
      {{3, 4}, {1, 2, 0, 3}},            // grow
      {{5, 6}, {-1, 0, -2, -3}},         // crop
      {{4, 5, 6}, {2, -1, 0, -1, 3, 1}}, // both
      {{7}, {0, 0}},                     // nothing
      {{2, 3}, {-2, 0, 0, 0}},           // crops everything away
  };
  for (DType dt : kMoveTypes)
    for (const Case &k : cases) {
      DevTensor in = randomTensor(dt, k.in, 22);
      int rank = static_cast<int>(k.in.size());
      Shape os;
      for (int d = 0; d < rank; ++d)
        os.push_back(k.in[d] + k.pads[d] + k.pads[d + rank]);
      DevTensor c = result(dt, os), g = result(dt, os);
      DSC_ASSERT_OK(cpu::pad(in.host(), k.pads, 1.5, c.host()));
      DSC_ASSERT_OK(cuda::pad(in.dev(), k.pads, 1.5, g.dev()));
      expectSame(c, g, "pad " + name(dt));
    }
  DevTensor in = randomTensor(DType::F32, {3}, 23);
  DevTensor out = result(DType::F32, {5});
  Status cs = cpu::pad(in.host(), {1, 2}, 0, out.host());
  Status gs = cuda::pad(in.dev(), {1, 2}, 0, out.dev());
  EXPECT_FALSE(gs.ok());
  EXPECT_EQ(cs.message(), gs.message());
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

Shape reducedShape(const Shape &in, const Shape &axes, bool keepdims) {
  int rank = static_cast<int>(in.size());
  std::vector<bool> red(rank, axes.empty());
  for (int64_t a : axes)
    red[a < 0 ? a + rank : a] = true;
  Shape o;
  for (int d = 0; d < rank; ++d)
    if (!red[d])
      o.push_back(in[d]);
    else if (keepdims)
      o.push_back(1);
  return o;
}

const char *opName(ReduceOp op) {
  static const char *names[] = {"sum", "mean", "max", "min", "prod"};
  return names[static_cast<int>(op)];
}

void checkReduce(ReduceOp op, const DevTensor &in, const Shape &shape,
                 const Shape &axes, bool keepdims, double rtol, double atol) {
  Shape os = reducedShape(shape, axes, keepdims);
  DType dt = in.host().dtype;
  DevTensor c = result(dt, os), g = result(dt, os);
  std::string what = std::string(opName(op)) + " " + name(dt) + " axes " +
                     describe(I64s(axes)) + (keepdims ? " keepdims" : "");
  DSC_ASSERT_OK(cpu::reduce(op, in.host(), axes, keepdims, c.host()));
  DSC_ASSERT_OK(cuda::reduce(op, in.dev(), axes, keepdims, g.dev()));
  expectClose(c, g, rtol, atol, what);
}

const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max,
                         ReduceOp::Min, ReduceOp::Prod};

TEST(CudaReduce, AxisSets) {
  DSC_REQUIRE_GPU();
  Shape shape = {4, 5, 6, 3};
  std::vector<Shape> axesSets = {{},     {0},    {1},          {3},
                                 {-1},   {0, 2}, {1, 3},       {0, 1},
                                 {2, 3}, {0, 3}, {0, 1, 2, 3}, {1, 2}};
  for (DType dt : {DType::F32, DType::F64})
    for (ReduceOp op : kOps) {
      // Products of values near 1 stay in range.
      DevTensor in = op == ReduceOp::Prod
                         ? randomTensor(dt, shape, 24, 0.8, 1.2)
                         : randomTensor(dt, shape, 24, -2, 2);
      for (const Shape &axes : axesSets)
        for (bool keep : {false, true})
          checkReduce(op, in, shape, axes, keep,
                      op == ReduceOp::Prod ? 1e-4 : 1e-5, 1e-5);
    }
  for (DType dt : {DType::I64, DType::I32})
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod}) {
      DevTensor in = op == ReduceOp::Prod
                         ? randomTensor(dt, shape, 25, -2, 3)
                         : randomTensor(dt, shape, 25, -1000, 1000);
      for (const Shape &axes : axesSets)
        for (bool keep : {false, true})
          checkReduce(op, in, shape, axes, keep, 0, 0);
    }
}

TEST(CudaReduce, Shapes) {
  DSC_REQUIRE_GPU();
  struct Case {
    Shape shape, axes;
  };
  // Long rows, long columns, a middle axis, a long full reduction, rows
  // just under and over the block threshold, and strided groups.
  std::vector<Case> cases = {
      {{64, 3000}, {1}},        {{3000, 5}, {0}},  {{7, 2000, 3}, {1}},
      {{1 << 18}, {}},          {{100, 63}, {1}},  {{100, 65}, {1}},
      {{8, 9, 10, 11}, {0, 2}}, {{2, 50000}, {0}}, {{3, 4, 5000}, {0, 2}},
  };
  for (const Case &k : cases)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max}) {
      DevTensor in = randomTensor(DType::F64, k.shape, 26, -1, 1);
      checkReduce(op, in, k.shape, k.axes, false, 1e-9, 1e-9);
      DevTensor in32 = randomTensor(DType::I32, k.shape, 27, -50, 50);
      if (op != ReduceOp::Mean)
        checkReduce(op, in32, k.shape, k.axes, true, 0, 0);
    }
}

/// The f64 copy of an f32 tensor's values.
DevTensor widened(const DevTensor &t) {
  DevTensor w(DType::F64, t.host().dims());
  std::vector<double> v(static_cast<size_t>(t.host().numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = DevTensor::get(t.host(), static_cast<int64_t>(i));
  w.values(v);
  settle();
  return w;
}

TEST(CudaReduce, BiasGradientAndRows) {
  DSC_REQUIRE_GPU();
  // f32 sums accumulate in f64: compare with the CPU's f64 result.
  struct Case {
    Shape shape, axes, out;
  };
  std::vector<Case> cases = {{{16384, 768}, {0}, {768}},
                             {{8, 2048, 768}, {0, 1}, {768}},
                             {{4096, 768}, {1}, {4096}},
                             {{16384 * 64}, {}, {}}};
  for (const Case &k : cases)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
      DevTensor in = randomTensor(DType::F32, k.shape, 28, -1, 1);
      DevTensor in64 = widened(in);
      DevTensor ref = result(DType::F64, k.out), g = result(DType::F32, k.out);
      DSC_ASSERT_OK(cpu::reduce(op, in64.host(), k.axes, false, ref.host()));
      DSC_ASSERT_OK(cuda::reduce(op, in.dev(), k.axes, false, g.dev()));
      std::vector<char> bytes = g.download();
      Tensor gv = g.host();
      gv.data = bytes.data();
      for (int64_t i = 0; i < gv.numel(); ++i) {
        double want = DevTensor::get(ref.host(), i);
        double got = DevTensor::get(gv, i);
        // One f32 rounding of the exact value.
        ASSERT_NEAR(got, want, 1e-6 * std::fabs(want) + 1e-9)
            << opName(op) << " " << describe(I64s(k.shape)) << " at " << i;
      }
      // And against the CPU's own f32 result, loosely (its sum is
      // sequential in f32).
      DevTensor c = result(DType::F32, k.out);
      DSC_ASSERT_OK(cpu::reduce(op, in.host(), k.axes, false, c.host()));
      expectClose(c, g, 1e-3, 1e-2, "vs f32 cpu");
      // Deterministic.
      DevTensor g2 = result(DType::F32, k.out);
      DSC_ASSERT_OK(cuda::reduce(op, in.dev(), k.axes, false, g2.dev()));
      EXPECT_EQ(g.download(), g2.download());
    }
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
    checkReduce(op, randomTensor(DType::F32, {16384, 768}, 29), {16384, 768},
                {0}, false, 0, 0);
  // A 16-bit input summed into f32: the bits of its f32 cast summed (the
  // canonicalization reduce_sum(cast(x)) -> reduce_sum(x) relies on it),
  // on the GPU and on the CPU.
  for (DType h : {DType::BF16, DType::F16})
    for (const Case &k : cases)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        DevTensor in = randomTensor(h, k.shape, 30, -1, 1);
        DevTensor wide = result(DType::F32, k.shape);
        DSC_ASSERT_OK(cuda::cast(in.dev(), wide.dev()));
        DevTensor viaCast = result(DType::F32, k.out),
                  direct = result(DType::F32, k.out);
        DSC_ASSERT_OK(
            cuda::reduce(op, wide.dev(), k.axes, false, viaCast.dev()));
        DSC_ASSERT_OK(cuda::reduce(op, in.dev(), k.axes, false, direct.dev()));
        EXPECT_EQ(viaCast.download(), direct.download())
            << opName(op) << " " << describe(I64s(k.shape));
        DevTensor cw = result(DType::F32, k.shape);
        DSC_ASSERT_OK(cpu::cast(in.host(), cw.host()));
        DevTensor cpuCast = result(DType::F32, k.out),
                  cpuDirect = result(DType::F32, k.out);
        DSC_ASSERT_OK(
            cpu::reduce(op, cw.host(), k.axes, false, cpuCast.host()));
        DSC_ASSERT_OK(
            cpu::reduce(op, in.host(), k.axes, false, cpuDirect.host()));
        EXPECT_EQ(0, std::memcmp(cpuCast.host().data, cpuDirect.host().data,
                                 cpuCast.host().nbytes()));
      }
}

TEST(CudaReduce, NanEmptyAndErrors) {
  DSC_REQUIRE_GPU();
  // NaN propagates through max and min.
  DevTensor in = randomTensor(DType::F32, {3, 200}, 30);
  in.set(250, std::numeric_limits<double>::quiet_NaN());
  in.upload();
  settle();
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum}) {
    checkReduce(op, in, {3, 200}, {1}, false, 1e-5, 1e-5);
    checkReduce(op, in, {3, 200}, {0}, true, 1e-5, 1e-5);
  }
  // A scalar reduces to itself.
  DevTensor scalar = randomTensor(DType::F32, {}, 33);
  for (ReduceOp op : kOps)
    checkReduce(op, scalar, {}, {}, false, 0, 0);
  // An empty reduced range: sum 0, mean NaN.
  DevTensor empty(DType::F32, {0, 3});
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean})
    checkReduce(op, empty, {0, 3}, {0}, false, 0, 0);
  // Errors match the CPU's.
  DevTensor out = result(DType::F32, {4});
  Status cs = cpu::reduce(ReduceOp::Sum, in.host(), {1}, false, out.host());
  Status gs = cuda::reduce(ReduceOp::Sum, in.dev(), {1}, false, out.dev());
  EXPECT_FALSE(gs.ok());
  EXPECT_EQ(cs.message(), gs.message());
  DevTensor bf = randomTensor(DType::BF16, {4}, 31),
            bo = result(DType::BF16, {});
  cs = cpu::reduce(ReduceOp::Sum, bf.host(), {}, false, bo.host());
  gs = cuda::reduce(ReduceOp::Sum, bf.dev(), {}, false, bo.dev());
  EXPECT_EQ(gs.code(), StatusCode::Unimplemented);
  EXPECT_EQ(cs.message(), gs.message());
  DevTensor i = randomTensor(DType::I64, {4}, 32), io = result(DType::I64, {});
  cs = cpu::reduce(ReduceOp::Mean, i.host(), {}, false, io.host());
  gs = cuda::reduce(ReduceOp::Mean, i.dev(), {}, false, io.dev());
  EXPECT_EQ(gs.code(), StatusCode::Unimplemented);
  EXPECT_EQ(cs.message(), gs.message());
}

// rotate_half on the device, bit for bit the CPU's: 16-byte chunks (halves
// of 32 bf16 or f32, 64 of a Llama head) and element by element (halves of
// 3), f32, f64, bf16 and f16; the CPU's error for an odd last dim.
TEST(CudaDataMovement, RotateHalf) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16})
    for (Shape shape : {Shape{2, 4, 5, 64}, Shape{3, 6}, Shape{7, 16}}) {
      DevTensor in = randomTensor(dt, shape, 31);
      DevTensor c = result(dt, shape), g = result(dt, shape);
      DSC_ASSERT_OK(cpu::rotateHalf(in.host(), c.host()));
      DSC_ASSERT_OK(cuda::rotateHalf(in.dev(), g.dev()));
      expectSame(c, g, name(dt) + " " + describe(in.host()));
    }
  DevTensor odd = randomTensor(DType::F32, {2, 3}, 32);
  DevTensor r = result(DType::F32, {2, 3});
  EXPECT_EQ(cuda::rotateHalf(odd.dev(), r.dev()).message(),
            cpu::rotateHalf(odd.host(), r.host()).message());
}

} // namespace
} // namespace dsc::cuda::test
