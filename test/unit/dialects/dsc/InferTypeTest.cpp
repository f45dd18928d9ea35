//===- InferTypeTest.cpp - result types of dsc ops built in C++ -----------===//
//
// The importer builds ops programmatically: it fills an OperationState and
// asks the op's InferTypeOpInterface for the result types before it creates
// the op. These tests do the same: valid ops through the typed builders
// (which infer), invalid ones through inferReturnTypes, checking the
// diagnostic's message and that it sits at the location the op was given.
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include "gtest/gtest.h"

#include <string>

using namespace mlir;
using namespace dsc;

namespace {

std::string str(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

std::string str(TypeRange types) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(types, os);
  return s;
}

/// What inferReturnTypes said about an OperationState.
struct Inference {
  bool succeeded = false;
  SmallVector<Type> types;
  /// The diagnostics emitted, one per line.
  std::string diagnostics;
  /// Whether every diagnostic was attached to the op's location.
  bool atOpLocation = true;
};

class InferTypeTest : public ::testing::Test {
protected:
  InferTypeTest() : builder(&ctx) {
    ctx.loadDialect<DscDialect>();
    // As the importer does: the ONNX node name is the op's location.
    loc = NameLoc::get(StringAttr::get(&ctx, "/layer0/node_7"));
    builder.setInsertionPointToEnd(&block);
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape,
                                 element ? element : builder.getF32Type());
  }

  /// A value of the given type, as a block argument.
  Value arg(ArrayRef<int64_t> shape, Type element = {}) {
    return block.addArgument(tensor(shape, element), loc);
  }

  NamedAttribute attr(StringRef name, Attribute value) {
    return builder.getNamedAttr(name, value);
  }
  NamedAttribute i64s(StringRef name, ArrayRef<int64_t> values) {
    return attr(name, builder.getDenseI64ArrayAttr(values));
  }
  NamedAttribute i64(StringRef name, int64_t value) {
    return attr(name, builder.getI64IntegerAttr(value));
  }

  /// Fills an OperationState for `OpTy` and runs the inference of its
  /// registered InferTypeOpInterface, as the importer does, capturing the
  /// diagnostics.
  template <typename OpTy>
  Inference infer(ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    OperationState state(loc, OpTy::getOperationName());
    state.addOperands(operands);
    state.addAttributes(attrs);
    std::optional<RegisteredOperationName> info =
        state.name.getRegisteredInfo();
    EXPECT_TRUE(info.has_value());
    auto *iface = info ? info->getInterface<InferTypeOpInterface>() : nullptr;
    EXPECT_NE(iface, nullptr);
    Inference result;
    if (!iface)
      return result;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      result.diagnostics += diag.str() + "\n";
      result.atOpLocation &= diag.getLocation() == loc;
      return success();
    });
    result.succeeded = succeeded(iface->inferReturnTypes(
        &ctx, state.location, state.operands,
        state.attributes.getDictionary(&ctx), state.getRawProperties(),
        state.regions, result.types));
    return result;
  }

  /// Expects inference to fail with a diagnostic containing `message` at the
  /// op's location.
  template <typename OpTy>
  void expectError(ValueRange operands, ArrayRef<NamedAttribute> attrs,
                   StringRef message) {
    Inference r = infer<OpTy>(operands, attrs);
    EXPECT_FALSE(r.succeeded) << "inferred " << str(r.types);
    EXPECT_NE(r.diagnostics.find(message.str()), std::string::npos)
        << "diagnostics: " << r.diagnostics;
    EXPECT_TRUE(r.atOpLocation) << r.diagnostics;
  }

  /// Verifies `op`, returning the diagnostics ("" when it verifies).
  std::string verifyErrors(Operation *op) {
    std::string diagnostics;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      diagnostics += diag.str() + "\n";
      return success();
    });
    if (succeeded(verify(op)))
      EXPECT_TRUE(diagnostics.empty()) << diagnostics;
    else
      EXPECT_FALSE(diagnostics.empty());
    return diagnostics;
  }

  // Destroyed in reverse order: the block (and its ops) before the context.
  MLIRContext ctx;
  OpBuilder builder;
  Location loc = UnknownLoc::get(&ctx);
  Block block;
};

//===----------------------------------------------------------------------===//
// MatMul
//===----------------------------------------------------------------------===//

TEST_F(InferTypeTest, MatMulVectorOperandsDropTheirUnitDims) {
  Value v3 = arg({3});
  EXPECT_EQ(str(MatMulOp::create(builder, loc, v3, v3).getType()),
            "tensor<f32>");
  EXPECT_EQ(str(MatMulOp::create(builder, loc, v3, arg({3, 5})).getType()),
            "tensor<5xf32>");
  EXPECT_EQ(str(MatMulOp::create(builder, loc, arg({4, 3}), v3).getType()),
            "tensor<4xf32>");
  EXPECT_EQ(str(MatMulOp::create(builder, loc, v3, arg({2, 3, 5})).getType()),
            "tensor<2x5xf32>");
}

TEST_F(InferTypeTest, MatMulBroadcastsBatchDims) {
  auto mm =
      MatMulOp::create(builder, loc, arg({2, 1, 4, 3}, builder.getBF16Type()),
                       arg({5, 3, 6}, builder.getBF16Type()));
  EXPECT_EQ(str(mm.getType()), "tensor<2x5x4x6xbf16>");
  EXPECT_EQ(verifyErrors(mm), "");
}

TEST_F(InferTypeTest, MatMulRejectsContractingMismatch) {
  expectError<MatMulOp>({arg({4, 3}), arg({4, 5})}, {},
                        "contracting dims differ: [4,3] x [4,5]");
  expectError<MatMulOp>({arg({4}), arg({3})}, {},
                        "contracting dims differ: [4] x [3]");
}

TEST_F(InferTypeTest, MatMulRejectsBatchMismatch) {
  expectError<MatMulOp>({arg({2, 4, 3}), arg({3, 3, 5})}, {},
                        "batch dims do not broadcast: [2,4,3] x [3,3,5]");
}

TEST_F(InferTypeTest, MatMulRejectsScalarsAndMixedElementTypes) {
  expectError<MatMulOp>({arg({}), arg({3})}, {},
                        "matmul operands must have rank >= 1");
  expectError<MatMulOp>({arg({2, 3}), arg({3, 2}, builder.getF16Type())}, {},
                        "element types differ: f32 vs f16");
}

TEST_F(InferTypeTest, ExplicitResultTypeMustMatchTheInferredOne) {
  auto mm =
      MatMulOp::create(builder, loc, tensor({4, 4}), arg({4, 3}), arg({3, 5}));
  std::string errors = verifyErrors(mm);
  EXPECT_NE(errors.find("inferred type(s) 'tensor<4x5xf32>' are incompatible "
                        "with return type(s) of operation 'tensor<4x4xf32>'"),
            std::string::npos)
      << errors;
}

//===----------------------------------------------------------------------===//
// Conv
//===----------------------------------------------------------------------===//

TEST_F(InferTypeTest, ConvWithGroupsStridesAndPads) {
  // 4 input channels in 2 groups of 2; 8 filters; 9x9 -> (9+1+1-3)/2+1 = 5.
  auto conv = ConvOp::create(builder, loc, arg({1, 4, 9, 9}), arg({8, 2, 3, 3}),
                             arg({8}), /*strides=*/{2, 2},
                             /*pads=*/{1, 1, 1, 1}, /*dilations=*/{1, 1},
                             /*group=*/2);
  EXPECT_EQ(str(conv.getType()), "tensor<1x8x5x5xf32>");
  EXPECT_EQ(verifyErrors(conv), "");
}

TEST_F(InferTypeTest, ConvWithAsymmetricPadsAndDilations) {
  // H: span 2*(3-1)+1 = 5, (10+0+2-5)/1+1 = 8.
  // W: span 1*(2-1)+1 = 2, (7+1+0-2)/2+1 = 4.
  auto conv = ConvOp::create(builder, loc, arg({2, 3, 10, 7}),
                             arg({6, 3, 3, 2}), Value(), /*strides=*/{1, 2},
                             /*pads=*/{0, 1, 2, 0}, /*dilations=*/{2, 1});
  EXPECT_EQ(str(conv.getType()), "tensor<2x6x8x4xf32>");
}

TEST_F(InferTypeTest, Conv1d) {
  auto conv = ConvOp::create(builder, loc, arg({1, 2, 10}), arg({4, 2, 3}),
                             Value(), /*strides=*/{1}, /*pads=*/{0, 0},
                             /*dilations=*/{1});
  EXPECT_EQ(str(conv.getType()), "tensor<1x4x8xf32>");
}

TEST_F(InferTypeTest, ConvRejectsChannelMismatch) {
  SmallVector<NamedAttribute> attrs{i64s("strides", {1, 1}),
                                    i64s("pads", {0, 0, 0, 0}),
                                    i64s("dilations", {1, 1}), i64("group", 1)};
  expectError<ConvOp>({arg({1, 4, 9, 9}), arg({8, 3, 3, 3})}, attrs,
                      "channels do not match: input has 4, weight expects 3 "
                      "x group 1");
  // 5 filters do not split into 2 groups.
  attrs.back() = i64("group", 2);
  expectError<ConvOp>({arg({1, 4, 9, 9}), arg({5, 2, 3, 3})}, attrs,
                      "channels do not match: input has 4, weight expects 2 "
                      "x group 2");
}

TEST_F(InferTypeTest, ConvRejectsBadWindowAttributes) {
  expectError<ConvOp>({arg({1, 1, 5, 5}), arg({1, 1, 3, 3})},
                      {i64s("strides", {1}), i64s("pads", {0, 0, 0, 0}),
                       i64s("dilations", {1, 1}), i64("group", 1)},
                      "expected 2 strides, 2 dilations and 4 pads for 2 "
                      "spatial dims");
  expectError<ConvOp>({arg({1, 1, 2, 2}), arg({1, 1, 3, 3})},
                      {i64s("strides", {1, 1}), i64s("pads", {0, 0, 0, 0}),
                       i64s("dilations", {1, 1}), i64("group", 1)},
                      "kernel larger than padded input in spatial dim 0");
}

TEST_F(InferTypeTest, ConvRejectsBadBias) {
  expectError<ConvOp>({arg({1, 1, 5, 5}), arg({2, 1, 3, 3}), arg({1})},
                      {i64s("strides", {1, 1}), i64s("pads", {0, 0, 0, 0}),
                       i64s("dilations", {1, 1}), i64("group", 1)},
                      "conv bias must have shape [M]");
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

TEST_F(InferTypeTest, MaxPoolFloorAndCeilMode) {
  Value x = arg({1, 1, 5, 5});
  auto floor = MaxPoolOp::create(builder, loc, x, /*kernel_shape=*/{2, 2},
                                 /*strides=*/{2, 2}, /*pads=*/{0, 0, 0, 0},
                                 /*dilations=*/{1, 1});
  EXPECT_EQ(str(floor.getType()), "tensor<1x1x2x2xf32>");
  auto ceil = MaxPoolOp::create(builder, loc, x, {2, 2}, {2, 2}, {0, 0, 0, 0},
                                {1, 1}, /*ceil_mode=*/true);
  EXPECT_EQ(str(ceil.getType()), "tensor<1x1x3x3xf32>");
}

TEST_F(InferTypeTest, MaxPoolCeilModeDropsWindowStartingInPadding) {
  // 5 + 1 + 1 padded, window 3, stride 3: ceil gives 3 windows, but the third
  // would start at 6, in the end padding; PyTorch and ONNX drop it.
  auto pool = MaxPoolOp::create(builder, loc, arg({1, 1, 5}), {3}, {3}, {1, 1},
                                {1}, /*ceil_mode=*/true);
  EXPECT_EQ(str(pool.getType()), "tensor<1x1x2xf32>");
}

TEST_F(InferTypeTest, PoolRejectsBadShapes) {
  SmallVector<NamedAttribute> attrs{
      i64s("kernel_shape", {2}),
      i64s("strides", {1, 1}),
      i64s("pads", {0, 0, 0, 0}),
      i64s("dilations", {1, 1}),
      attr("ceil_mode", builder.getBoolAttr(false)),
      attr("count_include_pad", builder.getBoolAttr(false))};
  expectError<MaxPoolOp>({arg({1, 1, 4, 4})}, attrs, "expected 2 kernel dims");
  expectError<AvgPoolOp>({arg({4, 4})}, attrs,
                         "pooling expects input [N, C, spatial...]");
  attrs[0] = i64s("kernel_shape", {2, 5});
  expectError<AvgPoolOp>({arg({1, 1, 4, 4})}, attrs,
                         "window larger than padded input in spatial dim 1");
}

//===----------------------------------------------------------------------===//
// Gather, Slice, Split
//===----------------------------------------------------------------------===//

TEST_F(InferTypeTest, GatherReplacesTheAxisByTheIndexShape) {
  Type i64 = builder.getI64Type();
  EXPECT_EQ(str(GatherOp::create(builder, loc, arg({10, 4}), arg({2, 3}, i64),
                                 builder.getI64IntegerAttr(0))
                    .getType()),
            "tensor<2x3x4xf32>");
  EXPECT_EQ(str(GatherOp::create(builder, loc, arg({2, 5, 4}),
                                 arg({3}, builder.getI32Type()),
                                 builder.getI64IntegerAttr(-1))
                    .getType()),
            "tensor<2x5x3xf32>");
  // A scalar index removes the axis.
  EXPECT_EQ(str(GatherOp::create(builder, loc, arg({10, 4}), arg({}, i64),
                                 builder.getI64IntegerAttr(0))
                    .getType()),
            "tensor<4xf32>");
}

TEST_F(InferTypeTest, GatherRejectsBadAxisAndScalarData) {
  Value indices = arg({2}, builder.getI64Type());
  expectError<GatherOp>({arg({10, 4}), indices}, {i64("axis", 2)},
                        "gather axis out of range");
  expectError<GatherOp>({arg({10, 4}), indices}, {i64("axis", -3)},
                        "gather axis out of range");
  expectError<GatherOp>({arg({}), indices}, {i64("axis", 0)},
                        "gather expects ranked data of rank >= 1 and indices");
}

TEST_F(InferTypeTest, SliceWithNegativeStrides) {
  // Rows 7, 5, 3, 1 and columns 0, 2, 4.
  auto slice = SliceOp::create(builder, loc, arg({8, 6}), /*offsets=*/{7, 0},
                               /*sizes=*/{4, 3}, /*strides=*/{-2, 2});
  EXPECT_EQ(str(slice.getType()), "tensor<4x3xf32>");
  EXPECT_EQ(verifyErrors(slice), "");
  auto reversed = SliceOp::create(builder, loc, arg({6}), {5}, {6}, {-1});
  EXPECT_EQ(str(reversed.getType()), "tensor<6xf32>");
  // An empty slice reads nothing, wherever it starts.
  auto empty = SliceOp::create(builder, loc, arg({6}), {9}, {0}, {1});
  EXPECT_EQ(str(empty.getType()), "tensor<0xf32>");
}

TEST_F(InferTypeTest, SliceRejectsReadsOutsideTheInput) {
  // 5, 2, -1: the last element is before the start.
  expectError<SliceOp>(
      {arg({6})},
      {i64s("offsets", {5}), i64s("sizes", {3}), i64s("strides", {-3})},
      "slice reads outside dim 0 of size 6");
  expectError<SliceOp>(
      {arg({2, 6})},
      {i64s("offsets", {0, 4}), i64s("sizes", {2, 2}), i64s("strides", {1, 2})},
      "slice reads outside dim 1 of size 6");
}

TEST_F(InferTypeTest, SliceRejectsBadAttributes) {
  expectError<SliceOp>(
      {arg({6})},
      {i64s("offsets", {0}), i64s("sizes", {3}), i64s("strides", {0})},
      "bad slice size or zero stride in dim 0");
  expectError<SliceOp>(
      {arg({6, 2})},
      {i64s("offsets", {0}), i64s("sizes", {3}), i64s("strides", {1})},
      "offsets, sizes and strides need one entry per dim");
}

TEST_F(InferTypeTest, SplitGivesOneResultPerSize) {
  auto split = SplitOp::create(builder, loc, arg({4, 10}), /*axis=*/1,
                               /*sizes=*/{3, 0, 7});
  EXPECT_EQ(str(split.getResultTypes()),
            "tensor<4x3xf32>, tensor<4x0xf32>, tensor<4x7xf32>");
  EXPECT_EQ(verifyErrors(split), "");
  Inference r =
      infer<SplitOp>({arg({4, 10})}, {i64("axis", -2), i64s("sizes", {1, 3})});
  ASSERT_TRUE(r.succeeded) << r.diagnostics;
  EXPECT_EQ(str(r.types), "tensor<1x10xf32>, tensor<3x10xf32>");
}

TEST_F(InferTypeTest, SplitRejectsBadSizesAndAxis) {
  expectError<SplitOp>({arg({4, 10})}, {i64("axis", 1), i64s("sizes", {3, 6})},
                       "split sizes [3,6] do not add up to dim 10");
  expectError<SplitOp>({arg({4, 10})},
                       {i64("axis", 1), i64s("sizes", {12, -2})},
                       "negative split size");
  expectError<SplitOp>({arg({4, 10})}, {i64("axis", 2), i64s("sizes", {4})},
                       "split axis out of range");
}

TEST_F(InferTypeTest, SplitWithTooFewResultsFailsToVerify) {
  auto split = SplitOp::create(builder, loc, TypeRange{tensor({4, 3})},
                               arg({4, 10}), builder.getI64IntegerAttr(1),
                               builder.getDenseI64ArrayAttr({3, 7}));
  EXPECT_NE(verifyErrors(split).find("are incompatible with return type(s)"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// A few more families: broadcasting, reductions, losses, multi-result ops
//===----------------------------------------------------------------------===//

TEST_F(InferTypeTest, ElementwiseBroadcastsAndComparesGiveI1) {
  Value a = arg({4, 1, 3}), b = arg({5, 1});
  EXPECT_EQ(str(AddOp::create(builder, loc, a, b).getType()),
            "tensor<4x5x3xf32>");
  EXPECT_EQ(str(LessOp::create(builder, loc, a, b).getType()),
            "tensor<4x5x3xi1>");
  expectError<MulOp>({arg({2, 3}), arg({4, 3})}, {},
                     "operand shapes [2,3] and [4,3] do not broadcast");
  expectError<WhereOp>(
      {arg({3}, builder.getI1Type()), arg({3}), arg({3}, builder.getF16Type())},
      {}, "element types differ: f32 vs f16");
}

TEST_F(InferTypeTest, ReductionKeepsOrDropsDims) {
  Value x = arg({2, 3, 4});
  EXPECT_EQ(str(ReduceSumOp::create(builder, loc, x, {0, 2}).getType()),
            "tensor<1x3x1xf32>");
  EXPECT_EQ(str(ReduceMeanOp::create(builder, loc, x, {0, 2},
                                     /*keepdims=*/false)
                    .getType()),
            "tensor<3xf32>");
  NamedAttribute keepdims = attr("keepdims", builder.getBoolAttr(true));
  expectError<ReduceMaxOp>({x}, {i64s("axes", {-1}), keepdims},
                           "reduction axis -1 out of range for rank 3");
  expectError<ReduceMaxOp>({x}, {i64s("axes", {1, 1}), keepdims},
                           "duplicate reduction axis 1");
}

TEST_F(InferTypeTest, LossReductions) {
  Value scores = arg({8, 10, 5}), labels = arg({8, 5}, builder.getI64Type());
  auto sum = SoftmaxCrossEntropyOp::create(builder, loc, scores, labels,
                                           Value(), "sum",
                                           /*ignore_index=*/IntegerAttr());
  EXPECT_EQ(str(sum.getType()), "tensor<f32>");
  auto none = NllLossOp::create(builder, loc, scores, labels, arg({10}), "none",
                                builder.getI64IntegerAttr(-100));
  EXPECT_EQ(str(none.getType()), "tensor<8x5xf32>");
  expectError<NllLossOp>({scores, arg({8}, builder.getI64Type())},
                         {attr("reduction", builder.getStringAttr("mean"))},
                         "labels shape [8] does not match scores [8,10,5] "
                         "(expected [8,5])");
  expectError<NllLossOp>(
      {scores, labels}, {attr("reduction", builder.getStringAttr("avg"))},
      "reduction must be 'mean', 'sum' or 'none', not 'avg'");
}

TEST_F(InferTypeTest, MultiResultOps) {
  auto dropout = DropoutOp::create(builder, loc, arg({2, 3}),
                                   builder.getF64FloatAttr(0.1), IntegerAttr());
  EXPECT_EQ(str(dropout.getResultTypes()), "tensor<2x3xf32>, tensor<2x3xi1>");
  expectError<DropoutOp>({arg({2, 3})},
                         {attr("ratio", builder.getF64FloatAttr(1.0))},
                         "dropout ratio must be in [0, 1), got 1");
  Value c = arg({4});
  auto bn = BatchNormTrainOp::create(builder, loc, arg({2, 4, 3, 3}), c, c, c,
                                     c, builder.getF64FloatAttr(1e-5),
                                     builder.getF64FloatAttr(0.9));
  EXPECT_EQ(str(bn.getResultTypes()),
            "tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>");
}

TEST_F(InferTypeTest, PadGrowsAndCrops) {
  // pads: begin of each dim, then end of each dim; negative amounts crop.
  auto pad = PadOp::create(builder, loc, arg({2, 3}),
                           builder.getDenseI64ArrayAttr({1, -1, 2, 0}),
                           builder.getF64FloatAttr(0.0));
  EXPECT_EQ(str(pad.getType()), "tensor<5x2xf32>");
  NamedAttribute value = attr("value", builder.getF64FloatAttr(0.0));
  expectError<PadOp>({arg({2, 3})}, {i64s("pads", {1, 1}), value},
                     "pads needs two entries per dim");
  expectError<PadOp>({arg({2, 3})}, {i64s("pads", {0, -2, 0, -2}), value},
                     "padding crops dim 1 below zero");
}

TEST_F(InferTypeTest, ReshapeTransposeConcat) {
  Value x = arg({2, 3, 4});
  EXPECT_EQ(str(ReshapeOp::create(builder, loc, x, {6, 4}).getType()),
            "tensor<6x4xf32>");
  EXPECT_EQ(str(TransposeOp::create(builder, loc, x, {2, 0, 1}).getType()),
            "tensor<4x2x3xf32>");
  EXPECT_EQ(str(ConcatOp::create(builder, loc, ValueRange{x, arg({2, 5, 4})},
                                 builder.getI64IntegerAttr(-2))
                    .getType()),
            "tensor<2x8x4xf32>");
  expectError<ReshapeOp>({x}, {i64s("shape", {5, 5})},
                         "reshape of [2,3,4] to [5,5] changes the number of "
                         "elements");
  expectError<ReshapeOp>({x}, {i64s("shape", {-1, 4})},
                         "reshape target [-1,4] must be fully resolved");
  expectError<TransposeOp>({x}, {i64s("perm", {0, 0, 1})},
                           "perm [0,0,1] is not a permutation");
  expectError<ConcatOp>({x, arg({3, 3, 4})}, {i64("axis", 1)},
                        "concat inputs differ outside the axis: [2,3,4] vs "
                        "[3,3,4]");
}

// The ODS constraints keep unranked tensors out of parsed IR; an importer
// that builds from an OperationState gets an error instead.
TEST_F(InferTypeTest, UnrankedOperandsAreErrors) {
  Value unranked =
      block.addArgument(UnrankedTensorType::get(builder.getF32Type()), loc);
  expectError<AddOp>({unranked, arg({2})}, {},
                     "operands must be ranked tensors");
  expectError<ReshapeOp>({unranked}, {i64s("shape", {2})},
                         "input must be a ranked tensor");
  expectError<ConcatOp>({unranked}, {i64("axis", 0)},
                        "inputs must be ranked tensors");
}

//===----------------------------------------------------------------------===//
// Attributes checked before inference (formerly crashes)
//===----------------------------------------------------------------------===//

// The importer, the custom parsers and the attribute-form builders infer
// types from an OperationState, before any verifier has checked the
// attributes and before Operation::create fills in default values. With
// attributes in the dictionary (usePropertiesForAttributes = 0) the adaptor's
// getters neither check presence nor apply defaults, so today both cases
// dereference a null attribute (dsc-opt crashes on `dsc.softmax %x : ...`).
TEST_F(InferTypeTest, MissingRequiredAttributeIsAnError) {
  expectError<SoftmaxOp>({arg({2, 3})}, {}, "requires attribute 'axis'");
}

TEST_F(InferTypeTest, MissingDefaultValuedAttributeTakesItsDefault) {
  // No `group`: DefaultValuedAttr<I64Attr, "1">.
  Inference r =
      infer<ConvOp>({arg({1, 2, 5, 5}), arg({4, 2, 3, 3})},
                    {i64s("strides", {1, 1}), i64s("pads", {0, 0, 0, 0}),
                     i64s("dilations", {1, 1})});
  ASSERT_TRUE(r.succeeded) << r.diagnostics;
  EXPECT_EQ(str(r.types), "tensor<1x4x3x3xf32>");
}

} // namespace
