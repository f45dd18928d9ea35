//===- ShapeInference.cpp - result types of every dsc op ------------------===//
//
// Each op's inferReturnTypes both computes its static result type and checks
// its operands and attributes; the InferTypeOpInterface verifier therefore
// reports a malformed op at its location (the ONNX node it came from).
//
//===----------------------------------------------------------------------===//

#include "dialects/dsc/IR/DscOps.h"

#include "mlir/IR/TypeUtilities.h"
#include <cmath>
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace dsc;

using Shape = SmallVector<int64_t>;

FailureOr<Shape> dsc::broadcastShapes(ArrayRef<int64_t> a,
                                      ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

FailureOr<int64_t> dsc::normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return failure();
  return axis < 0 ? axis + rank : axis;
}

namespace {

std::string shapeStr(ArrayRef<int64_t> s) {
  std::string r = "[";
  for (auto [i, d] : llvm::enumerate(s))
    r += (i ? "," : "") + std::to_string(d);
  return r + "]";
}

RankedTensorType rankedType(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

LogicalResult fail(std::optional<Location> loc, const Twine &msg) {
  return emitOptionalError(loc, msg);
}

LogicalResult inferBroadcast(std::optional<Location> loc, ValueRange operands,
                             Type elementType, SmallVectorImpl<Type> &results) {
  Shape shape;
  for (Value v : operands) {
    auto t = rankedType(v);
    if (!t)
      return fail(loc, "operands must be ranked tensors");
    auto b = broadcastShapes(shape, t.getShape());
    if (failed(b))
      return fail(loc, "operand shapes " + shapeStr(shape) + " and " +
                           shapeStr(t.getShape()) + " do not broadcast");
    shape = *b;
  }
  results.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

LogicalResult sameElementTypes(std::optional<Location> loc, Value a, Value b) {
  if (getElementTypeOrSelf(a.getType()) != getElementTypeOrSelf(b.getType()))
    return fail(loc, llvm::formatv("element types differ: {0} vs {1}",
                                   getElementTypeOrSelf(a.getType()),
                                   getElementTypeOrSelf(b.getType()))
                         .str());
  return success();
}

LogicalResult inferSameAsInput(Value input, SmallVectorImpl<Type> &results) {
  results.push_back(input.getType());
  return success();
}

// Output length of one spatial dim of a window op (conv or pooling).
FailureOr<int64_t> windowOutput(int64_t in, int64_t k, int64_t stride,
                                int64_t padBegin, int64_t padEnd,
                                int64_t dilation, bool ceilMode) {
  // Every step checked: the sizes and attributes come from the model file
  // (a dim of 2^63 - 1 with a kernel of 1 overflowed `+ 1`, found by fuzzing).
  int64_t span, padded, numer, out, start;
  if (stride <= 0 || k < 1 || llvm::MulOverflow(dilation, k - 1, span) ||
      llvm::AddOverflow(span, int64_t(1), span) ||
      llvm::AddOverflow(in, padBegin, padded) ||
      llvm::AddOverflow(padded, padEnd, numer) ||
      llvm::SubOverflow(numer, span, numer) || numer < 0)
    return failure();
  out = ceilMode ? numer / stride + (numer % stride != 0) : numer / stride;
  if (llvm::AddOverflow(out, int64_t(1), out))
    return failure();
  // A window may not start in the end padding (PyTorch and ONNX agree).
  if (ceilMode &&
      (llvm::MulOverflow(out - 1, stride, start) || start >= padded))
    --out;
  return out;
}

LogicalResult checkWindowAttrs(std::optional<Location> loc, int64_t spatial,
                               ArrayRef<int64_t> strides,
                               ArrayRef<int64_t> pads,
                               ArrayRef<int64_t> dilations) {
  if ((int64_t)strides.size() != spatial ||
      (int64_t)dilations.size() != spatial ||
      (int64_t)pads.size() != 2 * spatial)
    return fail(loc, llvm::formatv("expected {0} strides, {0} dilations and "
                                   "{1} pads for {0} spatial dims",
                                   spatial, 2 * spatial)
                         .str());
  return success();
}

LogicalResult inferReduce(std::optional<Location> loc, Value input,
                          ArrayRef<int64_t> axes, bool keepdims,
                          SmallVectorImpl<Type> &results) {
  auto t = rankedType(input);
  if (!t)
    return fail(loc, "input must be a ranked tensor");
  int64_t rank = t.getRank();
  SmallVector<bool> reduced(rank, false);
  for (int64_t a : axes) {
    if (a < 0 || a >= rank)
      return fail(loc, llvm::formatv("reduction axis {0} out of range for "
                                     "rank {1} (axes are normalized)",
                                     a, rank)
                           .str());
    if (reduced[a])
      return fail(loc, "duplicate reduction axis " + Twine(a));
    reduced[a] = true;
  }
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d])
      shape.push_back(t.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  results.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

LogicalResult inferClassLoss(std::optional<Location> loc, Value scores,
                             Value labels, Value weights, StringRef reduction,
                             SmallVectorImpl<Type> &results,
                             bool f32LossOf16Bit = false) {
  auto s = rankedType(scores), l = rankedType(labels);
  if (!s || !l || s.getRank() < 2)
    return fail(loc, "scores must have shape [N, C, d...]");
  Shape expected{s.getDimSize(0)};
  llvm::append_range(expected, s.getShape().drop_front(2));
  if (l.getShape() != ArrayRef<int64_t>(expected))
    return fail(loc, "labels shape " + shapeStr(l.getShape()) +
                         " does not match scores " + shapeStr(s.getShape()) +
                         " (expected " + shapeStr(expected) + ")");
  // Softmax cross-entropy of 16-bit scores computes in f32 and returns it.
  Type lossType = s.getElementType();
  if (f32LossOf16Bit && (lossType.isBF16() || lossType.isF16()))
    lossType = Float32Type::get(s.getContext());
  if (weights) {
    auto w = rankedType(weights);
    if (!w || w.getShape() != ArrayRef<int64_t>{s.getDimSize(1)})
      return fail(loc, "class weights must have shape [C]");
    // The runtime weighs in the loss's type (f32 for 16-bit scores).
    if (w.getElementType() != lossType)
      return fail(loc, "class weights must have the loss's element type");
  }
  if (reduction == "none")
    results.push_back(RankedTensorType::get(expected, lossType));
  else if (reduction == "mean" || reduction == "sum")
    results.push_back(RankedTensorType::get({}, lossType));
  else
    return fail(loc, "reduction must be 'mean', 'sum' or 'none', not '" +
                         reduction + "'");
  return success();
}

} // namespace

/// Fills in default-valued attributes and checks that required ones are
/// present and of the right kind before inference reads them: the parser
/// infers result types before any verifier runs, so a missing attribute must
/// be an error here, not a null dereference.
template <typename OpTy>
static LogicalResult completeAttrs(MLIRContext *ctx,
                                   std::optional<Location> loc,
                                   typename OpTy::Adaptor &a) {
  NamedAttrList attrs(a.getAttributes());
  if (auto name =
          RegisteredOperationName::lookup(OpTy::getOperationName(), ctx))
    name->populateDefaultAttrs(attrs);
  typename OpTy::Adaptor full(a.getOperands(), attrs.getDictionary(ctx),
                              OpaqueProperties(nullptr), RegionRange());
  std::optional<ScopedDiagnosticHandler> silence;
  if (!loc)
    silence.emplace(ctx, [](Diagnostic &) { return success(); });
  if (failed(full.verify(loc.value_or(UnknownLoc::get(ctx)))))
    return failure();
  a = full;
  return success();
}

//===----------------------------------------------------------------------===//
// Constants and elementwise
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *ctx,
                                           std::optional<Location> loc,
                                           Adaptor a,
                                           SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ConstantOp>(ctx, loc, a)))
    return failure();
  auto value = a.getValueAttr();
  if (!value)
    return fail(loc, "missing value");
  results.push_back(value.getType());
  return success();
}

LogicalResult CastOp::inferReturnTypes(MLIRContext *ctx,
                                       std::optional<Location> loc, Adaptor a,
                                       SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<CastOp>(ctx, loc, a)))
    return failure();
  auto t = rankedType(a.getInput());
  if (!t)
    return fail(loc, "input must be a ranked tensor");
  results.push_back(t.clone(a.getTo()));
  return success();
}

#define DSC_SAME_AS_INPUT(OP)                                                  \
  LogicalResult OP::inferReturnTypes(MLIRContext *ctx,                         \
                                     std::optional<Location> loc, Adaptor a,   \
                                     SmallVectorImpl<Type> &results) {         \
    if (failed(completeAttrs<OP>(ctx, loc, a)))                                \
      return failure();                                                        \
    return inferSameAsInput(a.getInput(), results);                            \
  }
DSC_SAME_AS_INPUT(NegOp)
DSC_SAME_AS_INPUT(AbsOp)
DSC_SAME_AS_INPUT(ExpOp)
DSC_SAME_AS_INPUT(LogOp)
DSC_SAME_AS_INPUT(SqrtOp)
DSC_SAME_AS_INPUT(ReciprocalOp)
DSC_SAME_AS_INPUT(TanhOp)
DSC_SAME_AS_INPUT(ErfOp)
DSC_SAME_AS_INPUT(SigmoidOp)
DSC_SAME_AS_INPUT(ReluOp)
DSC_SAME_AS_INPUT(FloorOp)
DSC_SAME_AS_INPUT(CeilOp)
DSC_SAME_AS_INPUT(SinOp)
DSC_SAME_AS_INPUT(CosOp)
DSC_SAME_AS_INPUT(SoftplusOp)
DSC_SAME_AS_INPUT(NotOp)
DSC_SAME_AS_INPUT(LeakyReluOp)
DSC_SAME_AS_INPUT(GeluOp)
DSC_SAME_AS_INPUT(ClipOp)
#undef DSC_SAME_AS_INPUT

LogicalResult SwigluOp::inferReturnTypes(MLIRContext *ctx,
                                         std::optional<Location> loc, Adaptor a,
                                         SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<SwigluOp>(ctx, loc, a)))
    return failure();
  if (a.getGate().getType() != a.getUp().getType())
    return fail(loc, "gate and up must have one type");
  return inferSameAsInput(a.getGate(), results);
}

#define DSC_BINARY(OP, RESULT_ELEMENT)                                         \
  LogicalResult OP::inferReturnTypes(MLIRContext *ctx,                         \
                                     std::optional<Location> loc, Adaptor a,   \
                                     SmallVectorImpl<Type> &results) {         \
    if (failed(completeAttrs<OP>(ctx, loc, a)))                                \
      return failure();                                                        \
    if (failed(sameElementTypes(loc, a.getLhs(), a.getRhs())))                 \
      return failure();                                                        \
    Type element = getElementTypeOrSelf(a.getLhs().getType());                 \
    (void)element;                                                             \
    return inferBroadcast(loc, {a.getLhs(), a.getRhs()}, RESULT_ELEMENT,       \
                          results);                                            \
  }
DSC_BINARY(AddOp, element)
DSC_BINARY(SubOp, element)
DSC_BINARY(MulOp, element)
DSC_BINARY(DivOp, element)
DSC_BINARY(PowOp, element)
DSC_BINARY(MaxOp, element)
DSC_BINARY(MinOp, element)
DSC_BINARY(AndOp, element)
DSC_BINARY(OrOp, element)
DSC_BINARY(XorOp, element)
DSC_BINARY(EqualOp, IntegerType::get(ctx, 1))
DSC_BINARY(LessOp, IntegerType::get(ctx, 1))
DSC_BINARY(LessEqualOp, IntegerType::get(ctx, 1))
DSC_BINARY(GreaterOp, IntegerType::get(ctx, 1))
DSC_BINARY(GreaterEqualOp, IntegerType::get(ctx, 1))
#undef DSC_BINARY

LogicalResult WhereOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location> loc, Adaptor a,
                                        SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<WhereOp>(ctx, loc, a)))
    return failure();
  if (failed(sameElementTypes(loc, a.getX(), a.getY())))
    return failure();
  return inferBroadcast(loc, {a.getCond(), a.getX(), a.getY()},
                        getElementTypeOrSelf(a.getX().getType()), results);
}

//===----------------------------------------------------------------------===//
// Linear algebra, convolution and pooling
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *ctx,
                                         std::optional<Location> loc, Adaptor a,
                                         SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<MatMulOp>(ctx, loc, a)))
    return failure();
  auto l = rankedType(a.getLhs()), r = rankedType(a.getRhs());
  if (!l || !r || l.getRank() == 0 || r.getRank() == 0)
    return fail(loc, "matmul operands must have rank >= 1");
  if (failed(sameElementTypes(loc, a.getLhs(), a.getRhs())))
    return failure();
  Shape ls(l.getShape()), rs(r.getShape());
  // op(x): the last two dims swapped when x's flag is set.
  for (auto [flag, shape, name] :
       {std::make_tuple(a.getTransposeLhs(), &ls, "lhs"),
        std::make_tuple(a.getTransposeRhs(), &rs, "rhs")}) {
    if (!flag)
      continue;
    if (shape->size() < 2)
      return fail(loc, std::string("matmul: a transposed ") + name +
                           " needs rank >= 2");
    std::swap((*shape)[shape->size() - 1], (*shape)[shape->size() - 2]);
  }
  bool lVec = ls.size() == 1, rVec = rs.size() == 1;
  if (lVec)
    ls.insert(ls.begin(), 1);
  if (rVec)
    rs.push_back(1);
  int64_t m = ls[ls.size() - 2], k = ls.back();
  int64_t k2 = rs[rs.size() - 2], n = rs.back();
  if (k != k2)
    return fail(loc, "contracting dims differ: " + shapeStr(l.getShape()) +
                         " x " + shapeStr(r.getShape()));
  auto batch = broadcastShapes(ArrayRef<int64_t>(ls).drop_back(2),
                               ArrayRef<int64_t>(rs).drop_back(2));
  if (failed(batch))
    return fail(loc, "batch dims do not broadcast: " + shapeStr(l.getShape()) +
                         " x " + shapeStr(r.getShape()));
  Shape out = *batch;
  if (!lVec)
    out.push_back(m);
  if (!rVec)
    out.push_back(n);
  results.push_back(RankedTensorType::get(out, l.getElementType()));
  return success();
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *ctx,
                                       std::optional<Location> loc, Adaptor a,
                                       SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<GemmOp>(ctx, loc, a)))
    return failure();
  auto at = rankedType(a.getA()), bt = rankedType(a.getB());
  if (!at || !bt || at.getRank() != 2 || bt.getRank() != 2)
    return fail(loc, "gemm operands A and B must be 2-D");
  if (failed(sameElementTypes(loc, a.getA(), a.getB())))
    return failure();
  int64_t m = at.getDimSize(a.getTransA() ? 1 : 0);
  int64_t k = at.getDimSize(a.getTransA() ? 0 : 1);
  int64_t k2 = bt.getDimSize(a.getTransB() ? 1 : 0);
  int64_t n = bt.getDimSize(a.getTransB() ? 0 : 1);
  if (k != k2)
    return fail(loc, "gemm contracting dims differ: " + Twine(k) + " vs " +
                         Twine(k2));
  if (Value c = a.getC()) {
    auto ct = rankedType(c);
    FailureOr<Shape> b = failure();
    if (ct)
      b = broadcastShapes(ct.getShape(), {m, n});
    if (failed(b) || *b != Shape{m, n})
      return fail(loc, "gemm C does not broadcast to [" + Twine(m) + "," +
                           Twine(n) + "]");
  }
  results.push_back(RankedTensorType::get({m, n}, at.getElementType()));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *ctx,
                                       std::optional<Location> loc, Adaptor a,
                                       SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ConvOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput()), w = rankedType(a.getWeight());
  if (!x || !w || x.getRank() < 3 || w.getRank() != x.getRank())
    return fail(loc, "conv expects input [N, C, spatial...] and weight "
                     "[M, C/group, kernel...] of the same rank");
  int64_t spatial = x.getRank() - 2, group = a.getGroup();
  if (failed(checkWindowAttrs(loc, spatial, a.getStrides(), a.getPads(),
                              a.getDilations())))
    return failure();
  int64_t channels = 0;
  if (group <= 0 || llvm::MulOverflow(w.getDimSize(1), group, channels) ||
      x.getDimSize(1) != channels || w.getDimSize(0) % group != 0)
    return fail(loc, llvm::formatv("channels do not match: input has {0}, "
                                   "weight expects {1} x group {2}",
                                   x.getDimSize(1), w.getDimSize(1), group)
                         .str());
  if (Value b = a.getBias()) {
    auto bt = rankedType(b);
    if (!bt || bt.getShape() != ArrayRef<int64_t>{w.getDimSize(0)})
      return fail(loc, "conv bias must have shape [M]");
  }
  Shape out{x.getDimSize(0), w.getDimSize(0)};
  for (int64_t i = 0; i < spatial; ++i) {
    auto o = windowOutput(x.getDimSize(i + 2), w.getDimSize(i + 2),
                          a.getStrides()[i], a.getPads()[i],
                          a.getPads()[i + spatial], a.getDilations()[i], false);
    if (failed(o))
      return fail(loc,
                  "kernel larger than padded input in spatial dim " + Twine(i));
    out.push_back(*o);
  }
  results.push_back(RankedTensorType::get(out, x.getElementType()));
  return success();
}

template <typename Adaptor>
static LogicalResult inferPool(std::optional<Location> loc, Adaptor a,
                               SmallVectorImpl<Type> &results) {
  auto x = rankedType(a.getInput());
  if (!x || x.getRank() < 3)
    return fail(loc, "pooling expects input [N, C, spatial...]");
  int64_t spatial = x.getRank() - 2;
  if ((int64_t)a.getKernelShape().size() != spatial)
    return fail(loc, "expected " + Twine(spatial) + " kernel dims");
  if (failed(checkWindowAttrs(loc, spatial, a.getStrides(), a.getPads(),
                              a.getDilations())))
    return failure();
  Shape out{x.getDimSize(0), x.getDimSize(1)};
  for (int64_t i = 0; i < spatial; ++i) {
    auto o = windowOutput(x.getDimSize(i + 2), a.getKernelShape()[i],
                          a.getStrides()[i], a.getPads()[i],
                          a.getPads()[i + spatial], a.getDilations()[i],
                          a.getCeilMode());
    if (failed(o))
      return fail(loc,
                  "window larger than padded input in spatial dim " + Twine(i));
    out.push_back(*o);
  }
  results.push_back(RankedTensorType::get(out, x.getElementType()));
  return success();
}

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor a,
                                          SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<MaxPoolOp>(ctx, loc, a)))
    return failure();
  return inferPool(loc, a, results);
}

LogicalResult AvgPoolOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor a,
                                          SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<AvgPoolOp>(ctx, loc, a)))
    return failure();
  return inferPool(loc, a, results);
}

static LogicalResult inferGlobalPool(std::optional<Location> loc, Value input,
                                     SmallVectorImpl<Type> &results) {
  auto x = rankedType(input);
  if (!x || x.getRank() < 3)
    return fail(loc, "global pooling expects input [N, C, spatial...]");
  Shape out(x.getRank(), 1);
  out[0] = x.getDimSize(0);
  out[1] = x.getDimSize(1);
  results.push_back(RankedTensorType::get(out, x.getElementType()));
  return success();
}

LogicalResult
GlobalAvgPoolOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                  Adaptor a, SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<GlobalAvgPoolOp>(ctx, loc, a)))
    return failure();
  return inferGlobalPool(loc, a.getInput(), results);
}

LogicalResult
GlobalMaxPoolOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                  Adaptor a, SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<GlobalMaxPoolOp>(ctx, loc, a)))
    return failure();
  return inferGlobalPool(loc, a.getInput(), results);
}

//===----------------------------------------------------------------------===//
// Normalization, softmax, losses, dropout
//===----------------------------------------------------------------------===//

static LogicalResult checkChannelParams(std::optional<Location> loc,
                                        Value input, ValueRange params) {
  auto x = rankedType(input);
  if (!x || x.getRank() < 2)
    return fail(loc, "batch norm expects input [N, C, ...]");
  for (Value p : params) {
    auto t = rankedType(p);
    if (!t || t.getShape() != ArrayRef<int64_t>{x.getDimSize(1)})
      return fail(loc, "batch norm scale, bias, mean and variance must have "
                       "shape [" +
                           Twine(x.getDimSize(1)) + "]");
    // One element type: the backward's products mix them otherwise (the
    // importer converts ONNX's separate T1/T2 to X's type).
    if (t.getElementType() != x.getElementType())
      return fail(loc, "batch norm scale, bias, mean and variance must have "
                       "the input's element type");
  }
  return success();
}

LogicalResult
BatchNormTrainOp::inferReturnTypes(MLIRContext *ctx,
                                   std::optional<Location> loc, Adaptor a,
                                   SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<BatchNormTrainOp>(ctx, loc, a)))
    return failure();
  if (failed(checkChannelParams(
          loc, a.getInput(),
          {a.getScale(), a.getBias(), a.getRunningMean(), a.getRunningVar()})))
    return failure();
  results.push_back(a.getInput().getType());
  results.push_back(a.getRunningMean().getType());
  results.push_back(a.getRunningVar().getType());
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *ctx,
                                            std::optional<Location> loc,
                                            Adaptor a,
                                            SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<BatchNormOp>(ctx, loc, a)))
    return failure();
  if (failed(checkChannelParams(
          loc, a.getInput(),
          {a.getScale(), a.getBias(), a.getMean(), a.getVar()})))
    return failure();
  results.push_back(a.getInput().getType());
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *ctx,
                                            std::optional<Location> loc,
                                            Adaptor a,
                                            SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<LayerNormOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x)
    return fail(loc, "input must be a ranked tensor");
  auto axis = normalizeAxis((int64_t)a.getAxis(), x.getRank());
  if (failed(axis))
    return fail(loc, "axis out of range");
  ArrayRef<int64_t> normalized = x.getShape().drop_front(*axis);
  for (Value p : {a.getScale(), a.getBias()}) {
    if (!p)
      continue;
    auto t = rankedType(p);
    FailureOr<Shape> b = failure();
    if (t)
      b = broadcastShapes(t.getShape(), normalized);
    if (failed(b) || ArrayRef<int64_t>(*b) != normalized)
      return fail(loc, "layer norm scale and bias must broadcast to " +
                           shapeStr(normalized));
  }
  results.push_back(x);
  return success();
}

LogicalResult SoftmaxOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor a,
                                          SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<SoftmaxOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x || failed(normalizeAxis((int64_t)a.getAxis(), x.getRank())))
    return fail(loc, "softmax axis out of range");
  results.push_back(x);
  return success();
}

LogicalResult LogSoftmaxOp::inferReturnTypes(MLIRContext *ctx,
                                             std::optional<Location> loc,
                                             Adaptor a,
                                             SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<LogSoftmaxOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x || failed(normalizeAxis((int64_t)a.getAxis(), x.getRank())))
    return fail(loc, "log_softmax axis out of range");
  results.push_back(x);
  return success();
}

LogicalResult
SoftmaxBackwardOp::inferReturnTypes(MLIRContext *ctx,
                                    std::optional<Location> loc, Adaptor a,
                                    SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<SoftmaxBackwardOp>(ctx, loc, a)))
    return failure();
  auto g = rankedType(a.getGrad()), y = rankedType(a.getOutput());
  if (!g || !y || g != y)
    return fail(loc, "softmax_backward: grad and output must have one type");
  if (failed(normalizeAxis((int64_t)a.getAxis(), y.getRank())))
    return fail(loc, "softmax_backward axis out of range");
  results.push_back(g);
  return success();
}

LogicalResult
SoftmaxCrossEntropyOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location> loc, Adaptor a,
                                        SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<SoftmaxCrossEntropyOp>(ctx, loc, a)))
    return failure();
  return inferClassLoss(loc, a.getScores(), a.getLabels(), a.getWeights(),
                        a.getReduction(), results, /*f32LossOf16Bit=*/true);
}

LogicalResult NllLossOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor a,
                                          SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<NllLossOp>(ctx, loc, a)))
    return failure();
  return inferClassLoss(loc, a.getInput(), a.getLabels(), a.getWeights(),
                        a.getReduction(), results);
}

SmallVector<int64_t> dsc::attentionHeadsFirst(ArrayRef<int64_t> shape,
                                              bool seqMajor) {
  SmallVector<int64_t> r(shape);
  if (seqMajor && r.size() == 4)
    std::swap(r[1], r[2]);
  return r;
}

namespace {

/// The checks dsc.attention and its backward share; returns the result
/// shape [B, Hq, Tq, Dv] (heads first, whatever `seqMajor` says of the
/// operands' layout).
FailureOr<Shape> checkAttention(std::optional<Location> loc, Value query,
                                Value key, Value value, Value mask,
                                double scale, int64_t window, double dropout,
                                bool seqMajor) {
  auto q = rankedType(query), k = rankedType(key), v = rankedType(value);
  if (!q || !k || !v || q.getRank() != 4 || k.getRank() != 4 ||
      v.getRank() != 4) {
    (void)fail(loc, seqMajor ? "attention: query, key and value must be rank "
                               "4 [batch, tokens, heads, head dim]"
                             : "attention: query, key and value must be rank "
                               "4 [batch, heads, tokens, head dim]");
    return failure();
  }
  Shape qs = attentionHeadsFirst(q.getShape(), seqMajor),
        ks = attentionHeadsFirst(k.getShape(), seqMajor),
        vs = attentionHeadsFirst(v.getShape(), seqMajor);
  auto bad = [&](const Twine &what) -> FailureOr<Shape> {
    (void)fail(loc, "attention: " + what + " (query " + shapeStr(q.getShape()) +
                        ", key " + shapeStr(k.getShape()) + ", value " +
                        shapeStr(v.getShape()) + ")");
    return failure();
  };
  if (q.getElementType() != k.getElementType() ||
      q.getElementType() != v.getElementType())
    return bad("query, key and value must have one element type");
  if (qs[0] != ks[0] || ks[0] != vs[0])
    return bad("batch sizes differ");
  if (ks[1] != vs[1] || ks[2] != vs[2])
    return bad("key and value must have the same heads and tokens");
  if (ks[1] <= 0 || qs[1] % ks[1] != 0)
    return bad("query heads must be a multiple of key/value heads");
  if (qs[3] != ks[3])
    return bad("query and key head dims differ");
  if (!std::isfinite(scale))
    return bad("scale must be finite");
  if (window < 0)
    return bad("window must be >= 0");
  if (!(dropout >= 0.0 && dropout < 1.0))
    return bad("dropout must be in [0, 1)");
  Shape full{qs[0], qs[1], qs[2], ks[2]};
  if (mask) {
    auto m = rankedType(mask);
    if (!m || m.getRank() != 4)
      return bad("the mask must be rank 4 [batch, heads, queries, keys]");
    if (!isa<FloatType>(m.getElementType()) &&
        !m.getElementType().isInteger(1))
      return bad("the mask must be float (added) or i1 (kept where true)");
    for (int i = 0; i < 4; ++i)
      if (m.getDimSize(i) != 1 && m.getDimSize(i) != full[i])
        return bad("mask " + shapeStr(m.getShape()) +
                   " does not broadcast to " + shapeStr(full));
  }
  return Shape{qs[0], qs[1], qs[2], vs[3]};
}

/// dsc.attention's result and lse types, after checkAttention.
template <typename Adaptor>
FailureOr<std::pair<RankedTensorType, RankedTensorType>>
attentionTypes(MLIRContext *ctx, std::optional<Location> loc, Adaptor &a) {
  bool seqMajor = a.getSeqMajor();
  FailureOr<Shape> out =
      checkAttention(loc, a.getQuery(), a.getKey(), a.getValue(), a.getMask(),
                     a.getScale().convertToDouble(), a.getWindow(),
                     a.getDropout().convertToDouble(), seqMajor);
  if (failed(out))
    return failure();
  Type e = getElementTypeOrSelf(a.getQuery().getType());
  Type lse = e.isF64() ? e : Float32Type::get(ctx);
  return std::make_pair(
      RankedTensorType::get(attentionHeadsFirst(*out, seqMajor), e),
      RankedTensorType::get(ArrayRef<int64_t>(*out).drop_back(), lse));
}

} // namespace

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *ctx,
                                            std::optional<Location> loc,
                                            Adaptor a,
                                            SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<AttentionOp>(ctx, loc, a)))
    return failure();
  auto types = attentionTypes(ctx, loc, a);
  if (failed(types))
    return failure();
  results.push_back(types->first);
  results.push_back(types->second);
  return success();
}

LogicalResult
AttentionBackwardOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location> loc, Adaptor a,
                                      SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<AttentionBackwardOp>(ctx, loc, a)))
    return failure();
  auto types = attentionTypes(ctx, loc, a);
  if (failed(types))
    return failure();
  auto [resultType, lseType] = *types;
  if (a.getGrad().getType() != resultType ||
      a.getOutput().getType() != resultType)
    return fail(loc, "attention_backward: grad and output must be " +
                         shapeStr(resultType.getShape()) +
                         " of the query's element type");
  if (a.getLse().getType() != lseType)
    return fail(loc, "attention_backward: lse must be " +
                         shapeStr(lseType.getShape()) + " " +
                         (lseType.getElementType().isF64() ? "f64" : "f32"));
  for (Value v : {a.getQuery(), a.getKey(), a.getValue()})
    results.push_back(v.getType());
  return success();
}

LogicalResult DropoutOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor a,
                                          SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<DropoutOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  double ratio = a.getRatio().convertToDouble();
  if (!x)
    return fail(loc, "input must be a ranked tensor");
  if (!(ratio >= 0.0 && ratio < 1.0))
    return fail(
        loc,
        llvm::formatv("dropout ratio must be in [0, 1), got {0}", ratio).str());
  results.push_back(x);
  results.push_back(x.clone(IntegerType::get(ctx, 1)));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

#define DSC_REDUCE(OP)                                                         \
  LogicalResult OP::inferReturnTypes(MLIRContext *ctx,                         \
                                     std::optional<Location> loc, Adaptor a,   \
                                     SmallVectorImpl<Type> &results) {         \
    if (failed(completeAttrs<OP>(ctx, loc, a)))                                \
      return failure();                                                        \
    return inferReduce(loc, a.getInput(), a.getAxes(), a.getKeepdims(),        \
                       results);                                               \
  }
DSC_REDUCE(ReduceSumOp)
DSC_REDUCE(ReduceMeanOp)
DSC_REDUCE(ReduceMaxOp)
DSC_REDUCE(ReduceMinOp)
DSC_REDUCE(ReduceProdOp)
#undef DSC_REDUCE

namespace {
/// The inferred type, or (`widened`) the same shape in f32 for a 16-bit
/// inferred element type.
bool inferredOrWidened(TypeRange inferred, TypeRange actual, bool widened) {
  if (inferred == actual)
    return true;
  if (!widened || inferred.size() != 1 || actual.size() != 1)
    return false;
  auto i = dyn_cast<RankedTensorType>(inferred[0]);
  auto a = dyn_cast<RankedTensorType>(actual[0]);
  return i && a && i.getShape() == a.getShape() &&
         (i.getElementType().isBF16() || i.getElementType().isF16()) &&
         a.getElementType().isF32();
}
} // namespace

#define DSC_WIDENED_RESULT(OP, WIDENED)                                        \
  bool OP::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {     \
    return inferredOrWidened(inferred, actual, WIDENED);                       \
  }
DSC_WIDENED_RESULT(ReduceSumOp, true)
DSC_WIDENED_RESULT(ReduceMeanOp, true)
DSC_WIDENED_RESULT(ReduceMaxOp, false)
DSC_WIDENED_RESULT(ReduceMinOp, false)
DSC_WIDENED_RESULT(ReduceProdOp, false)
// A product of 16-bit operands may keep its f32 accumulator (DscOps.td).
DSC_WIDENED_RESULT(MatMulOp, true)
#undef DSC_WIDENED_RESULT

LogicalResult
MatMulBiasGradOp::inferReturnTypes(MLIRContext *ctx,
                                   std::optional<Location> loc, Adaptor a,
                                   SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<MatMulBiasGradOp>(ctx, loc, a)))
    return failure();
  auto l = rankedType(a.getLhs()), r = rankedType(a.getRhs());
  if (!l || !r || l.getRank() != 2 || r.getRank() != 2)
    return fail(loc, "matmul_bias_grad takes [T, M] and [T, N] operands");
  if (failed(sameElementTypes(loc, a.getLhs(), a.getRhs())))
    return failure();
  if (l.getDimSize(0) != r.getDimSize(0))
    return fail(loc, "matmul_bias_grad: lhs has " +
                         std::to_string(l.getDimSize(0)) + " rows, rhs " +
                         std::to_string(r.getDimSize(0)));
  results.push_back(RankedTensorType::get({l.getDimSize(1), r.getDimSize(1)},
                                          l.getElementType()));
  results.push_back(RankedTensorType::get(
      {(a.getSumRhs() ? r : l).getDimSize(1)}, Float32Type::get(ctx)));
  return success();
}

/// The [M, N] product of a GELU epilogue's `a` [M, K] and `b` ([K, N], or
/// [N, K] transposed), of their one element type; `what` names the op.
static FailureOr<RankedTensorType> geluProductType(std::optional<Location> loc,
                                                   const char *what, Value a,
                                                   Value b, bool transB) {
  auto at = rankedType(a), bt = rankedType(b);
  if (!at || !bt || at.getRank() != 2 || bt.getRank() != 2)
    return fail(loc, Twine(what) + " takes 2-D operands a and b");
  if (failed(sameElementTypes(loc, a, b)))
    return failure();
  int64_t k = bt.getDimSize(transB ? 1 : 0), n = bt.getDimSize(transB ? 0 : 1);
  if (at.getDimSize(1) != k)
    return fail(loc, Twine(what) + " contracting dims differ: " +
                         Twine(at.getDimSize(1)) + " vs " + Twine(k));
  return RankedTensorType::get({at.getDimSize(0), n}, at.getElementType());
}

LogicalResult GemmGeluOp::inferReturnTypes(MLIRContext *ctx,
                                           std::optional<Location> loc,
                                           Adaptor a,
                                           SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<GemmGeluOp>(ctx, loc, a)))
    return failure();
  FailureOr<RankedTensorType> t =
      geluProductType(loc, "gemm_gelu", a.getA(), a.getB(), a.getTransB());
  if (failed(t))
    return failure();
  if (Value bias = a.getBias()) {
    auto bt = rankedType(bias);
    if (!bt || bt.getRank() != 1 || bt.getDimSize(0) != t->getDimSize(1) ||
        bt.getElementType() != t->getElementType())
      return fail(loc, "gemm_gelu bias must be [" + Twine(t->getDimSize(1)) +
                           "] of the operands' element type");
  }
  results.append({*t, *t});
  return success();
}

LogicalResult
MatMulGeluGradOp::inferReturnTypes(MLIRContext *ctx,
                                   std::optional<Location> loc, Adaptor a,
                                   SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<MatMulGeluGradOp>(ctx, loc, a)))
    return failure();
  FailureOr<RankedTensorType> t = geluProductType(
      loc, "matmul_gelu_grad", a.getA(), a.getB(), a.getTransB());
  if (failed(t))
    return failure();
  if (rankedType(a.getPre()) != *t)
    return fail(loc, "matmul_gelu_grad pre must be the product's type");
  results.push_back(*t);
  return success();
}

bool MatMulBiasGradOp::isCompatibleReturnTypes(TypeRange inferred,
                                               TypeRange actual) {
  return inferred.size() == 2 && actual.size() == 2 &&
         inferred[1] == actual[1] &&
         inferredOrWidened(inferred.take_front(), actual.take_front(), true);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult RotateHalfOp::inferReturnTypes(MLIRContext *ctx,
                                             std::optional<Location> loc,
                                             Adaptor a,
                                             SmallVectorImpl<Type> &results) {
  auto x = rankedType(a.getInput());
  if (!x || x.getRank() < 1 || x.isDynamicDim(x.getRank() - 1) ||
      x.getShape().back() % 2 != 0)
    return fail(loc, "rotate_half needs a ranked input whose last dim is "
                     "static and even");
  results.push_back(x);
  return success();
}

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor a,
                                          SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ReshapeOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x)
    return fail(loc, "input must be a ranked tensor");
  int64_t n = 1;
  for (int64_t d : a.getShape()) {
    if (d < 0)
      return fail(loc, "reshape target " + shapeStr(a.getShape()) +
                           " must be fully resolved (no -1)");
    if (llvm::MulOverflow(n, d, n))
      return fail(loc, "reshape target " + shapeStr(a.getShape()) +
                           " has too many elements");
  }
  if (n != x.getNumElements())
    return fail(loc, "reshape of " + shapeStr(x.getShape()) + " to " +
                         shapeStr(a.getShape()) +
                         " changes the number of elements");
  results.push_back(RankedTensorType::get(a.getShape(), x.getElementType()));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *ctx,
                                            std::optional<Location> loc,
                                            Adaptor a,
                                            SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<TransposeOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  ArrayRef<int64_t> perm = a.getPerm();
  if (!x || (int64_t)perm.size() != x.getRank())
    return fail(loc, "perm must have one entry per dim");
  SmallVector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.getRank() || seen[p])
      return fail(loc, "perm " + shapeStr(perm) + " is not a permutation");
    seen[p] = true;
    out.push_back(x.getDimSize(p));
  }
  results.push_back(RankedTensorType::get(out, x.getElementType()));
  return success();
}

LogicalResult ExpandOp::inferReturnTypes(MLIRContext *ctx,
                                         std::optional<Location> loc, Adaptor a,
                                         SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ExpandOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x)
    return fail(loc, "input must be a ranked tensor");
  auto b = broadcastShapes(x.getShape(), a.getShape());
  if (failed(b))
    return fail(loc, "cannot expand " + shapeStr(x.getShape()) + " to " +
                         shapeStr(a.getShape()));
  results.push_back(RankedTensorType::get(*b, x.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location> loc, Adaptor a,
                                        SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<SliceOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  ArrayRef<int64_t> off = a.getOffsets(), size = a.getSizes(),
                    stride = a.getStrides();
  if (!x || (int64_t)off.size() != x.getRank() ||
      (int64_t)size.size() != x.getRank() ||
      (int64_t)stride.size() != x.getRank())
    return fail(loc, "offsets, sizes and strides need one entry per dim");
  for (int64_t d = 0; d < x.getRank(); ++d) {
    if (size[d] < 0 || stride[d] == 0)
      return fail(loc, "bad slice size or zero stride in dim " + Twine(d));
    if (size[d] == 0)
      continue;
    int64_t last;
    bool overflow = llvm::MulOverflow(size[d] - 1, stride[d], last) ||
                    llvm::AddOverflow(last, off[d], last);
    if (overflow || off[d] < 0 || off[d] >= x.getDimSize(d) || last < 0 ||
        last >= x.getDimSize(d))
      return fail(loc, "slice reads outside dim " + Twine(d) + " of size " +
                           Twine(x.getDimSize(d)));
  }
  results.push_back(RankedTensorType::get(size, x.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *ctx,
                                         std::optional<Location> loc, Adaptor a,
                                         SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ConcatOp>(ctx, loc, a)))
    return failure();
  if (a.getInputs().empty())
    return fail(loc, "concat needs at least one input");
  auto first = rankedType(a.getInputs()[0]);
  if (!first)
    return fail(loc, "inputs must be ranked tensors");
  auto axis = normalizeAxis((int64_t)a.getAxis(), first.getRank());
  if (failed(axis) || first.getRank() == 0)
    return fail(loc, "concat axis out of range");
  Shape out(first.getShape());
  out[*axis] = 0;
  for (Value v : a.getInputs()) {
    auto t = rankedType(v);
    if (!t || t.getRank() != first.getRank() ||
        t.getElementType() != first.getElementType())
      return fail(loc, "concat inputs must have one rank and element type");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != *axis && t.getDimSize(d) != first.getDimSize(d))
        return fail(loc, "concat inputs differ outside the axis: " +
                             shapeStr(first.getShape()) + " vs " +
                             shapeStr(t.getShape()));
    if (llvm::AddOverflow(out[*axis], t.getDimSize(*axis), out[*axis]))
      return fail(loc, "concat: the inputs' sizes along the axis overflow "
                       "int64 when summed");
  }
  results.push_back(RankedTensorType::get(out, first.getElementType()));
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location> loc, Adaptor a,
                                        SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<SplitOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x)
    return fail(loc, "input must be a ranked tensor");
  auto axis = normalizeAxis((int64_t)a.getAxis(), x.getRank());
  if (failed(axis) || x.getRank() == 0)
    return fail(loc, "split axis out of range");
  int64_t total = 0;
  for (int64_t s : a.getSizes()) {
    if (s < 0)
      return fail(loc, "negative split size");
    if (llvm::AddOverflow(total, s, total))
      return fail(loc, "split sizes " + shapeStr(a.getSizes()) +
                           " overflow int64 when summed");
    Shape shape(x.getShape());
    shape[*axis] = s;
    results.push_back(RankedTensorType::get(shape, x.getElementType()));
  }
  if (total != x.getDimSize(*axis))
    return fail(loc, "split sizes " + shapeStr(a.getSizes()) +
                         " do not add up to dim " + Twine(x.getDimSize(*axis)));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *ctx,
                                         std::optional<Location> loc, Adaptor a,
                                         SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<GatherOp>(ctx, loc, a)))
    return failure();
  auto d = rankedType(a.getData()), i = rankedType(a.getIndices());
  if (!d || !i || d.getRank() == 0)
    return fail(loc, "gather expects ranked data of rank >= 1 and indices");
  auto axis = normalizeAxis((int64_t)a.getAxis(), d.getRank());
  if (failed(axis))
    return fail(loc, "gather axis out of range");
  Shape out(d.getShape().take_front(*axis));
  llvm::append_range(out, i.getShape());
  llvm::append_range(out, d.getShape().drop_front(*axis + 1));
  results.push_back(RankedTensorType::get(out, d.getElementType()));
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location> loc, Adaptor a,
                                      SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<PadOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  ArrayRef<int64_t> pads = a.getPads();
  if (!x || (int64_t)pads.size() != 2 * x.getRank())
    return fail(loc, "pads needs two entries per dim");
  Shape out;
  for (int64_t d = 0; d < x.getRank(); ++d) {
    int64_t n = x.getDimSize(d) + pads[d] + pads[d + x.getRank()];
    if (n < 0)
      return fail(loc, "padding crops dim " + Twine(d) + " below zero");
    out.push_back(n);
  }
  results.push_back(RankedTensorType::get(out, x.getElementType()));
  return success();
}

LogicalResult TriluOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location> loc, Adaptor a,
                                        SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<TriluOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x || x.getRank() < 2)
    return fail(loc, "trilu expects rank >= 2");
  results.push_back(x);
  return success();
}

LogicalResult CumSumOp::inferReturnTypes(MLIRContext *ctx,
                                         std::optional<Location> loc, Adaptor a,
                                         SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<CumSumOp>(ctx, loc, a)))
    return failure();
  auto x = rankedType(a.getInput());
  if (!x || x.getRank() < 1)
    return fail(loc, "cumsum expects a tensor of rank >= 1");
  int64_t axis = a.getAxis();
  if (axis < 0 || axis >= x.getRank())
    return fail(loc, "cumsum axis " + Twine(axis) +
                         " is out of range for rank " + Twine(x.getRank()));
  Type e = x.getElementType();
  if (!e.isF32() && !e.isF64() && !e.isSignlessInteger(32) &&
      !e.isSignlessInteger(64))
    return fail(loc, "cumsum sums f32, f64, i32 or i64 elements");
  results.push_back(x);
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

static LogicalResult inferShaped(std::optional<Location> loc, Value like,
                                 ArrayRef<int64_t> shape,
                                 SmallVectorImpl<Type> &results) {
  auto t = rankedType(like);
  if (!t)
    return fail(loc, "operands must be ranked tensors");
  for (int64_t d : shape)
    if (d < 0)
      return fail(loc, "negative dim in " + shapeStr(shape));
  results.push_back(RankedTensorType::get(shape, t.getElementType()));
  return success();
}

LogicalResult
ConvBackwardInputOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location> loc, Adaptor a,
                                      SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ConvBackwardInputOp>(ctx, loc, a)))
    return failure();
  return inferShaped(loc, a.getGrad(), a.getInputShape(), results);
}

LogicalResult
ConvBackwardWeightOp::inferReturnTypes(MLIRContext *ctx,
                                       std::optional<Location> loc, Adaptor a,
                                       SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ConvBackwardWeightOp>(ctx, loc, a)))
    return failure();
  return inferShaped(loc, a.getGrad(), a.getWeightShape(), results);
}

LogicalResult PoolBackwardOp::inferReturnTypes(MLIRContext *ctx,
                                               std::optional<Location> loc,
                                               Adaptor a,
                                               SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<PoolBackwardOp>(ctx, loc, a)))
    return failure();
  if (a.getKind() != "max" && a.getKind() != "avg")
    return fail(loc, "pool kind must be 'max' or 'avg'");
  return inferSameAsInput(a.getInput(), results);
}

// Gradients of a normalization: the input's, the scale's and the bias's.
static LogicalResult inferNormBackward(std::optional<Location> loc, Value grad,
                                       Value input, Value scale,
                                       SmallVectorImpl<Type> &results) {
  if (grad.getType() != input.getType())
    return fail(loc, "grad and input types differ");
  results.append({input.getType(), scale.getType(), scale.getType()});
  return success();
}

LogicalResult BatchNormTrainBackwardOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location> loc, Adaptor a,
    SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<BatchNormTrainBackwardOp>(ctx, loc, a)))
    return failure();
  return inferNormBackward(loc, a.getGrad(), a.getInput(), a.getScale(),
                           results);
}

/// Whether `narrow` is `wide` (f32) with a 16-bit float element type.
static bool isNarrowedF32(Type wide, Type narrow) {
  auto w = dyn_cast<RankedTensorType>(wide);
  auto n = dyn_cast<RankedTensorType>(narrow);
  return w && n && w.getShape() == n.getShape() && w.getElementType().isF32() &&
         (n.getElementType().isBF16() || n.getElementType().isF16());
}

bool LayerNormOp::isCompatibleReturnTypes(TypeRange inferred,
                                          TypeRange actual) {
  return inferred.size() == actual.size() &&
         llvm::all_of(llvm::zip(inferred, actual), [](auto p) {
           auto [i, a] = p;
           return i == a || isNarrowedF32(i, a);
         });
}

LogicalResult
LayerNormBackwardOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location> loc, Adaptor a,
                                      SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<LayerNormBackwardOp>(ctx, loc, a)))
    return failure();
  Value grad = a.getGrad(), input = a.getInput();
  if (isNarrowedF32(grad.getType(), input.getType()))
    results.append(
        {grad.getType(), a.getScale().getType(), a.getScale().getType()});
  else if (failed(inferNormBackward(loc, grad, input, a.getScale(), results)))
    return failure();
  // The epilogue: residual + the input gradient, and its 16-bit copy.
  if (a.getResidual() && (a.getResidual().getType() != grad.getType() ||
                          !getElementTypeOrSelf(grad).isF32()))
    return fail(loc, "layer_norm_backward: the residual must have the "
                     "gradient's type, f32");
  if (auto copy = a.getCopyTypeAttr()) {
    auto g = rankedType(grad);
    Type half = copy.getValue();
    if (!g || !g.getElementType().isF32() || !(half.isBF16() || half.isF16()))
      return fail(loc, "layer_norm_backward: copy_type must be bf16 or f16, "
                       "of an f32 gradient");
    results.push_back(g.clone(half));
  }
  return success();
}

LogicalResult
ClassLossBackwardOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location> loc, Adaptor a,
                                      SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ClassLossBackwardOp>(ctx, loc, a)))
    return failure();
  if (a.getKind() != "softmax_cross_entropy" && a.getKind() != "nll")
    return fail(loc, "kind must be 'softmax_cross_entropy' or 'nll'");
  return inferSameAsInput(a.getInput(), results);
}

LogicalResult
LinearCrossEntropyOp::inferReturnTypes(MLIRContext *ctx,
                                       std::optional<Location> loc, Adaptor a,
                                       SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<LinearCrossEntropyOp>(ctx, loc, a)))
    return failure();
  auto input = rankedType(a.getInput()), weight = rankedType(a.getWeight());
  auto labels = rankedType(a.getLabels()), seed = rankedType(a.getSeed());
  if (!input || !weight || !labels || !seed || !input.hasStaticShape() ||
      !weight.hasStaticShape() || !labels.hasStaticShape() ||
      input.getRank() < 1 || weight.getRank() != 2 ||
      seed.getNumElements() != 1)
    return fail(loc, "input must be static [..., C], weight [V, C] or [C, V], "
                     "seed a single value");
  bool tw = a.getTransposeWeight();
  int64_t c = input.getShape().back();
  int64_t v = weight.getDimSize(tw ? 0 : 1);
  if (weight.getDimSize(tw ? 1 : 0) != c)
    return fail(loc, "weight " + shapeStr(weight.getShape()) +
                         " does not match input " + shapeStr(input.getShape()));
  if (input.getElementType() != weight.getElementType())
    return fail(loc, "input and weight must have one element type");
  int64_t n = c == 0 ? 0 : input.getNumElements() / c;
  int64_t rows = a.getChunkRows();
  if (labels.getNumElements() != n || rows < 1)
    return fail(loc, "labels must have one entry per row of input and "
                     "chunk_rows must be positive");
  Type f32 = Float32Type::get(ctx);
  Type gradWeight = a.getF32WeightGrad() ? f32 : weight.getElementType();
  auto gradWeightType = RankedTensorType::get(weight.getShape(), gradWeight);
  if (a.getInit() && a.getInit().getType() != gradWeightType)
    return fail(loc, "init must be grad_weight's type");
  results.append(
      {RankedTensorType::get({}, f32), input,
       RankedTensorType::get(weight.getShape(), gradWeight),
       RankedTensorType::get({std::min(rows, std::max<int64_t>(n, 1)), v},
                             input.getElementType()),
       RankedTensorType::get({(n + rows - 1) / rows}, f32)});
  return success();
}

LogicalResult ScatterAddOp::inferReturnTypes(MLIRContext *ctx,
                                             std::optional<Location> loc,
                                             Adaptor a,
                                             SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<ScatterAddOp>(ctx, loc, a)) ||
      failed(inferShaped(loc, a.getGrad(), a.getShape(), results)))
    return failure();
  if (a.getInit() && a.getInit().getType() != results.front())
    return emitOptionalError(loc, "scatter_add: init must be ", results.front(),
                             ", got ", a.getInit().getType());
  return success();
}

LogicalResult InsertSliceOp::inferReturnTypes(MLIRContext *ctx,
                                              std::optional<Location> loc,
                                              Adaptor a,
                                              SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<InsertSliceOp>(ctx, loc, a)))
    return failure();
  return inferShaped(loc, a.getGrad(), a.getShape(), results);
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

static LogicalResult checkScalars(std::optional<Location> loc,
                                  ValueRange scalars) {
  for (Value v : scalars) {
    auto t = rankedType(v);
    if (!t || t.getRank() != 0)
      return fail(loc, "hyperparameters and the step must be scalars");
  }
  return success();
}

static LogicalResult checkLike(std::optional<Location> loc, Value param,
                               ValueRange likes) {
  for (Value v : likes)
    if (v.getType() != param.getType())
      return fail(loc, "gradient and optimizer state must have the "
                       "parameter's type");
  return success();
}

LogicalResult AdamWMultiOp::inferReturnTypes(MLIRContext *ctx,
                                             std::optional<Location> loc,
                                             Adaptor a,
                                             SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<AdamWMultiOp>(ctx, loc, a)))
    return failure();
  ValueRange t = a.getTensors();
  size_t n = t.size() / 4;
  if (t.empty() || t.size() % 4 != 0)
    return fail(loc, "adamw_multi needs 4 x N tensors (params, grads, "
                     "exp_avgs, exp_avg_sqs), got " +
                         std::to_string(t.size()));
  if (failed(checkScalars(loc, {a.getLr(), a.getBeta1(), a.getBeta2(),
                                a.getEps(), a.getWeightDecay(), a.getStep(),
                                a.getGradScale(), a.getGradPrescale()})))
    return failure();
  for (size_t i = 0; i < n; ++i)
    if (failed(checkLike(loc, t[i], {t[n + i], t[2 * n + i], t[3 * n + i]})))
      return failure();
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < n; ++i)
      results.push_back(t[i].getType());
  return success();
}

bool AdamWMultiOp::isCompatibleReturnTypes(TypeRange inferred,
                                           TypeRange actual) {
  size_t n = inferred.size() / 3;
  if (actual.size() != 3 * n && actual.size() != 4 * n)
    return false;
  if (inferred != actual.take_front(3 * n))
    return false;
  for (size_t i = 0; i < actual.size() - 3 * n; ++i) {
    auto param = dyn_cast<RankedTensorType>(inferred[i]);
    auto copy = dyn_cast<RankedTensorType>(actual[3 * n + i]);
    if (!param || !copy || param.getShape() != copy.getShape() ||
        !(copy.getElementType().isBF16() || copy.getElementType().isF16()))
      return false;
  }
  return true;
}

LogicalResult AdamWOp::inferReturnTypes(MLIRContext *ctx,
                                        std::optional<Location> loc, Adaptor a,
                                        SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<AdamWOp>(ctx, loc, a)))
    return failure();
  if (failed(checkLike(loc, a.getParam(),
                       {a.getGrad(), a.getExpAvg(), a.getExpAvgSq()})) ||
      failed(checkScalars(loc, {a.getLr(), a.getBeta1(), a.getBeta2(),
                                a.getEps(), a.getWeightDecay(), a.getStep()})))
    return failure();
  results.append(3, a.getParam().getType());
  return success();
}

LogicalResult SgdOp::inferReturnTypes(MLIRContext *ctx,
                                      std::optional<Location> loc, Adaptor a,
                                      SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<SgdOp>(ctx, loc, a)))
    return failure();
  if (failed(
          checkLike(loc, a.getParam(), {a.getGrad(), a.getMomentumBuffer()})) ||
      failed(checkScalars(
          loc, {a.getLr(), a.getMomentum(), a.getWeightDecay(), a.getStep()})))
    return failure();
  results.append(2, a.getParam().getType());
  return success();
}

LogicalResult SumSquaresOp::inferReturnTypes(MLIRContext *ctx,
                                             std::optional<Location> loc,
                                             Adaptor a,
                                             SmallVectorImpl<Type> &results) {
  if (failed(checkScalars(loc, {a.getScale()})))
    return failure();
  ValueRange t = a.getTensors();
  if (t.empty())
    return fail(loc, "sum_squares needs at least one tensor");
  Type element =
      rankedType(t.front()) ? rankedType(t.front()).getElementType() : Type();
  if (!element || !(element.isF32() || element.isF64()))
    return fail(loc, "sum_squares takes f32 or f64 tensors");
  for (Value v : t)
    if (!rankedType(v) || rankedType(v).getElementType() != element)
      return fail(loc, "sum_squares' tensors must share one element type");
  results.push_back(RankedTensorType::get({}, Float32Type::get(ctx)));
  return success();
}

LogicalResult LrScheduleOp::inferReturnTypes(MLIRContext *ctx,
                                             std::optional<Location> loc,
                                             Adaptor a,
                                             SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<LrScheduleOp>(ctx, loc, a)))
    return failure();
  if (failed(checkScalars(loc, {a.getStep(), a.getBaseLr()})))
    return failure();
  StringRef kind = a.getKind();
  if (kind != "constant" && kind != "warmup_cosine" && kind != "warmup_linear")
    return fail(loc, "schedule kind must be constant, warmup_cosine or "
                     "warmup_linear");
  if (kind != "constant" &&
      (int64_t)a.getTotalSteps() <= (int64_t)a.getWarmupSteps())
    return fail(loc, "total_steps must exceed warmup_steps");
  results.push_back(RankedTensorType::get({}, Float32Type::get(ctx)));
  return success();
}

LogicalResult
CollectiveInputOp::inferReturnTypes(MLIRContext *ctx,
                                    std::optional<Location> loc, Adaptor a,
                                    SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<CollectiveInputOp>(ctx, loc, a)))
    return failure();
  return inferSameAsInput(a.getInput(), results);
}

LogicalResult WaitOp::inferReturnTypes(MLIRContext *ctx,
                                       std::optional<Location> loc, Adaptor a,
                                       SmallVectorImpl<Type> &results) {
  if (failed(completeAttrs<WaitOp>(ctx, loc, a)))
    return failure();
  return inferSameAsInput(a.getInput(), results);
}
