//===- VJP.cpp - the vector-Jacobian product of every differentiable op ---===//
//
// Each op builds the gradients of its operands from the gradients of its
// results with ordinary dsc ops (and, where composing would be slow or
// unclear, with the gradient ops at the end of DscOps.td). Gradients of
// broadcast operands are summed back to the operand's shape. Conventions
// follow PyTorch: relu'(0) = 0, max/min send a tie to the first operand,
// max_pool to the first maximum of a window.
//
//===----------------------------------------------------------------------===//
#include "dialects/dsc/IR/DscOps.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace dsc;

namespace {

using Shape = SmallVector<int64_t>;

/// Small builder of the ops gradients are made of.
struct GradBuilder {
  OpBuilder &b;
  Location loc;

  static RankedTensorType ty(Value v) {
    return cast<RankedTensorType>(v.getType());
  }
  Type elem(Value v) { return ty(v).getElementType(); }

  Value splat(RankedTensorType t, double v) {
    Attribute a =
        isa<FloatType>(t.getElementType())
            ? (Attribute)FloatAttr::get(t.getElementType(), v)
            : (Attribute)IntegerAttr::get(t.getElementType(), (int64_t)v);
    return ConstantOp::create(b, loc, SplatElementsAttr::get(t, a));
  }
  Value scalar(Value like, double v) {
    return splat(RankedTensorType::get({}, elem(like)), v);
  }
  Value zerosLike(Value v) { return splat(ty(v), 0.0); }

  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value mulS(Value x, double s) { return mul(x, scalar(x, s)); }
  Value neg(Value x) { return NegOp::create(b, loc, x); }
  Value exp(Value x) { return ExpOp::create(b, loc, x); }
  Value where(Value c, Value x, Value y) {
    return WhereOp::create(b, loc, c, x, y);
  }
  /// g where `c`, else 0.
  Value mask(Value c, Value g) { return where(c, g, scalar(g, 0.0)); }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    if (ty(x).getShape() == shape)
      return x;
    return ReshapeOp::create(b, loc, x, b.getDenseI64ArrayAttr(shape));
  }
  Value expand(Value x, ArrayRef<int64_t> shape) {
    if (ty(x).getShape() == shape)
      return x;
    return ExpandOp::create(b, loc, x, b.getDenseI64ArrayAttr(shape));
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    return TransposeOp::create(b, loc, x, b.getDenseI64ArrayAttr(perm));
  }
  /// Swaps the last two dims.
  Value transposeLast2(Value x) {
    int64_t r = ty(x).getRank();
    Shape perm;
    for (int64_t i = 0; i < r; ++i)
      perm.push_back(i);
    std::swap(perm[r - 1], perm[r - 2]);
    return transpose(x, perm);
  }
  Value reduceSum(Value x, ArrayRef<int64_t> axes, bool keep) {
    return ReduceSumOp::create(b, loc, x, b.getDenseI64ArrayAttr(axes),
                               b.getBoolAttr(keep));
  }
  Value matmul(Value x, Value y) { return MatMulOp::create(b, loc, x, y); }

  /// Sums a gradient of a broadcast result back to `shape`.
  Value sumTo(Value g, ArrayRef<int64_t> shape) {
    ArrayRef<int64_t> gs = ty(g).getShape();
    if (gs == shape)
      return g;
    int64_t lead = gs.size() - shape.size();
    Shape axes;
    for (int64_t i = 0; i < (int64_t)gs.size(); ++i)
      if (i < lead || (shape[i - lead] == 1 && gs[i] != 1))
        axes.push_back(i);
    Value r = axes.empty() ? g : reduceSum(g, axes, /*keep=*/true);
    return reshape(r, shape);
  }
  Value sumToLike(Value g, Value like) { return sumTo(g, ty(like).getShape()); }

  /// Shape of `x` with the dims in `axes` set to 1.
  static Shape keptShape(Value x, ArrayRef<int64_t> axes) {
    Shape s(ty(x).getShape());
    for (int64_t a : axes)
      s[a] = 1;
    return s;
  }
};

LogicalResult noGrad(SmallVectorImpl<Value> &operandGrads, unsigned n) {
  operandGrads.assign(n, Value());
  return success();
}

} // namespace

#define DSC_VJP(OP)                                                            \
  LogicalResult OP::buildVJP(OpBuilder &builder, ArrayRef<Value> resultGrads,  \
                             SmallVectorImpl<Value> &operandGrads)

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

DSC_VJP(NegOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.neg(resultGrads[0])});
  return success();
}

DSC_VJP(AbsOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0];
  Value negative =
      LessOp::create(builder, getLoc(), getInput(), g.scalar(getInput(), 0.0));
  operandGrads.assign({g.where(negative, g.neg(gy), gy)});
  return success();
}

DSC_VJP(ExpOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.mul(resultGrads[0], getResult())});
  return success();
}

DSC_VJP(LogOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.div(resultGrads[0], getInput())});
  return success();
}

DSC_VJP(SqrtOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.div(resultGrads[0], g.mulS(getResult(), 2.0))});
  return success();
}

DSC_VJP(ReciprocalOp) {
  GradBuilder g{builder, getLoc()};
  Value y = getResult();
  operandGrads.assign({g.neg(g.mul(resultGrads[0], g.mul(y, y)))});
  return success();
}

DSC_VJP(TanhOp) {
  GradBuilder g{builder, getLoc()};
  Value y = getResult();
  Value d = g.sub(g.scalar(y, 1.0), g.mul(y, y));
  operandGrads.assign({g.mul(resultGrads[0], d)});
  return success();
}

DSC_VJP(ErfOp) {
  GradBuilder g{builder, getLoc()};
  Value x = getInput();
  Value d = g.mulS(g.exp(g.neg(g.mul(x, x))), 2.0 / std::sqrt(M_PI));
  operandGrads.assign({g.mul(resultGrads[0], d)});
  return success();
}

DSC_VJP(SigmoidOp) {
  GradBuilder g{builder, getLoc()};
  Value y = getResult();
  Value d = g.mul(y, g.sub(g.scalar(y, 1.0), y));
  operandGrads.assign({g.mul(resultGrads[0], d)});
  return success();
}

DSC_VJP(ReluOp) {
  GradBuilder g{builder, getLoc()};
  Value positive = GreaterOp::create(builder, getLoc(), getResult(),
                                     g.scalar(getResult(), 0.0));
  operandGrads.assign({g.mask(positive, resultGrads[0])});
  return success();
}

DSC_VJP(SinOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign(
      {g.mul(resultGrads[0], CosOp::create(builder, getLoc(), getInput()))});
  return success();
}

DSC_VJP(CosOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.neg(
      g.mul(resultGrads[0], SinOp::create(builder, getLoc(), getInput())))});
  return success();
}

DSC_VJP(SoftplusOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.mul(
      resultGrads[0], SigmoidOp::create(builder, getLoc(), getInput()))});
  return success();
}

DSC_VJP(LeakyReluOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0];
  Value positive = GreaterOp::create(builder, getLoc(), getInput(),
                                     g.scalar(getInput(), 0.0));
  operandGrads.assign(
      {g.where(positive, gy, g.mulS(gy, getAlpha().convertToDouble()))});
  return success();
}

DSC_VJP(GeluOp) {
  GradBuilder g{builder, getLoc()};
  Value x = getInput(), gy = resultGrads[0];
  Value d;
  if (!getTanhApproximation()) {
    // Phi(x) + x * phi(x)
    Value cdf =
        g.mulS(g.add(g.scalar(x, 1.0),
                     ErfOp::create(builder, getLoc(), g.mulS(x, M_SQRT1_2))),
               0.5);
    Value pdf =
        g.mulS(g.exp(g.mulS(g.mul(x, x), -0.5)), 1.0 / std::sqrt(2 * M_PI));
    d = g.add(cdf, g.mul(x, pdf));
  } else {
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    Value x2 = g.mul(x, x);
    Value u = g.mulS(g.add(x, g.mulS(g.mul(x2, x), c)), k);
    Value t = TanhOp::create(builder, getLoc(), u);
    Value du = g.mulS(g.add(g.scalar(x, 1.0), g.mulS(x2, 3 * c)), k);
    Value one = g.scalar(x, 1.0);
    d = g.add(g.mulS(g.add(one, t), 0.5),
              g.mul(g.mulS(x, 0.5), g.mul(g.sub(one, g.mul(t, t)), du)));
  }
  operandGrads.assign({g.mul(gy, d)});
  return success();
}

// y = x * s(x) * u: dx = dy * u * s * (1 + x * (1 - s)), du = dy * x * s,
// with s = sigmoid(x) computed here from x.
DSC_VJP(SwigluOp) {
  GradBuilder g{builder, getLoc()};
  Value x = getGate(), u = getUp(), gy = resultGrads[0];
  Value s = SigmoidOp::create(builder, getLoc(), x);
  Value one = g.scalar(x, 1.0);
  Value silu = g.mul(x, s);
  Value dSilu = g.mul(s, g.add(one, g.mul(x, g.sub(one, s))));
  operandGrads.assign({g.mul(g.mul(gy, u), dSilu), g.mul(gy, silu)});
  return success();
}

DSC_VJP(ClipOp) {
  GradBuilder g{builder, getLoc()};
  Value x = getInput(), gy = resultGrads[0];
  Value keep;
  if (auto lo = getMin())
    keep = GreaterEqualOp::create(builder, getLoc(), x,
                                  g.scalar(x, lo->convertToDouble()));
  if (auto hi = getMax()) {
    Value le = LessEqualOp::create(builder, getLoc(), x,
                                   g.scalar(x, hi->convertToDouble()));
    keep = keep ? AndOp::create(builder, getLoc(), keep, le).getResult() : le;
  }
  operandGrads.assign({keep ? g.mask(keep, gy) : gy});
  return success();
}

DSC_VJP(CastOp) {
  auto in = cast<RankedTensorType>(getInput().getType());
  if (!isa<FloatType>(in.getElementType()))
    return noGrad(operandGrads, 1);
  operandGrads.assign({CastOp::create(builder, getLoc(), resultGrads[0],
                                      TypeAttr::get(in.getElementType()))});
  return success();
}

DSC_VJP(AddOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.sumToLike(resultGrads[0], getLhs()),
                       g.sumToLike(resultGrads[0], getRhs())});
  return success();
}

DSC_VJP(SubOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.sumToLike(resultGrads[0], getLhs()),
                       g.sumToLike(g.neg(resultGrads[0]), getRhs())});
  return success();
}

DSC_VJP(MulOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0];
  operandGrads.assign({g.sumToLike(g.mul(gy, getRhs()), getLhs()),
                       g.sumToLike(g.mul(gy, getLhs()), getRhs())});
  return success();
}

DSC_VJP(DivOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0];
  Value gl = g.div(gy, getRhs());
  operandGrads.assign({g.sumToLike(gl, getLhs()),
                       g.sumToLike(g.neg(g.mul(gl, getResult())), getRhs())});
  return success();
}

DSC_VJP(PowOp) {
  GradBuilder g{builder, getLoc()};
  Value x = getLhs(), e = getRhs(), gy = resultGrads[0];
  Value xe1 = PowOp::create(builder, getLoc(), x, g.sub(e, g.scalar(e, 1.0)));
  Value gx = g.mul(gy, g.mul(e, xe1));
  Value ge = g.mul(gy, g.mul(getResult(), LogOp::create(builder, getLoc(), x)));
  operandGrads.assign({g.sumToLike(gx, x), g.sumToLike(ge, e)});
  return success();
}

DSC_VJP(MaxOp) {
  GradBuilder g{builder, getLoc()};
  Value first = GreaterEqualOp::create(builder, getLoc(), getLhs(), getRhs());
  Value gy = resultGrads[0];
  Value zero = g.scalar(gy, 0.0);
  operandGrads.assign({g.sumToLike(g.where(first, gy, zero), getLhs()),
                       g.sumToLike(g.where(first, zero, gy), getRhs())});
  return success();
}

DSC_VJP(MinOp) {
  GradBuilder g{builder, getLoc()};
  Value first = LessEqualOp::create(builder, getLoc(), getLhs(), getRhs());
  Value gy = resultGrads[0];
  Value zero = g.scalar(gy, 0.0);
  operandGrads.assign({g.sumToLike(g.where(first, gy, zero), getLhs()),
                       g.sumToLike(g.where(first, zero, gy), getRhs())});
  return success();
}

DSC_VJP(WhereOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0];
  Value zero = g.scalar(gy, 0.0);
  operandGrads.assign({Value(),
                       g.sumToLike(g.where(getCond(), gy, zero), getX()),
                       g.sumToLike(g.where(getCond(), zero, gy), getY())});
  return success();
}

//===----------------------------------------------------------------------===//
// Linear algebra, convolution, pooling
//===----------------------------------------------------------------------===//

DSC_VJP(MatMulOp) {
  GradBuilder g{builder, getLoc()};
  // The gradients of op(lhs) and op(rhs), transposed back at the end for a
  // flagged operand (canonicalization folds those transposes again).
  Value a = getTransposeLhs() ? g.transposeLast2(getLhs()) : getLhs();
  Value bm = getTransposeRhs() ? g.transposeLast2(getRhs()) : getRhs();
  Value gy = resultGrads[0];
  Shape as(g.ty(a).getShape()), bs(g.ty(bm).getShape());
  // Promote vectors to matrices as numpy does, then undo it.
  Shape ap = as, bp = bs;
  if (ap.size() == 1)
    ap.insert(ap.begin(), 1);
  if (bp.size() == 1)
    bp.push_back(1);
  Value a2 = g.reshape(a, ap), b2 = g.reshape(bm, bp);
  Shape yp(g.ty(g.matmul(a2, b2)).getShape());
  Value gy2 = g.reshape(gy, yp);
  Value ga = g.sumTo(g.matmul(gy2, g.transposeLast2(b2)), ap);
  Value gb;
  if (bp.size() == 2 && ap.size() > 2) {
    // A matrix shared by every batch (a linear layer's weight): one product
    // over all rows, [K, rows] x [rows, N], instead of a batched product
    // and a sum over the batch (which held a [batch, K, N] temporary).
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < ap.size(); ++i)
      rows *= ap[i];
    Value aRows = g.reshape(a2, {rows, ap.back()});
    Value gyRows = g.reshape(gy2, {rows, yp.back()});
    gb = g.matmul(g.transposeLast2(aRows), gyRows);
  } else {
    gb = g.sumTo(g.matmul(g.transposeLast2(a2), gy2), bp);
  }
  ga = g.reshape(ga, as);
  gb = g.reshape(gb, bs);
  operandGrads.assign({getTransposeLhs() ? g.transposeLast2(ga) : ga,
                       getTransposeRhs() ? g.transposeLast2(gb) : gb});
  return success();
}

DSC_VJP(GemmOp) {
  GradBuilder g{builder, getLoc()};
  Value a = getA(), bm = getB(), gy = resultGrads[0];
  double alpha = getAlpha().convertToDouble();
  if (alpha != 1.0)
    gy = g.mulS(gy, alpha);
  Value opA = getTransA() ? g.transposeLast2(a) : a;
  Value opB = getTransB() ? g.transposeLast2(bm) : bm;
  Value dOpA = g.matmul(gy, g.transposeLast2(opB));
  Value dOpB = g.matmul(g.transposeLast2(opA), gy);
  operandGrads.assign({getTransA() ? g.transposeLast2(dOpA) : dOpA,
                       getTransB() ? g.transposeLast2(dOpB) : dOpB});
  if (Value c = getC()) {
    Value gc = resultGrads[0];
    double beta = getBeta().convertToDouble();
    if (beta != 1.0)
      gc = g.mulS(gc, beta);
    operandGrads.push_back(g.sumToLike(gc, c));
  }
  return success();
}

DSC_VJP(ConvOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0];
  auto x = g.ty(getInput()), w = g.ty(getWeight());
  Value gx = ConvBackwardInputOp::create(
      builder, getLoc(), gy, getWeight(),
      builder.getDenseI64ArrayAttr(x.getShape()), getStridesAttr(),
      getPadsAttr(), getDilationsAttr(), getGroupAttr());
  Value gw = ConvBackwardWeightOp::create(
      builder, getLoc(), gy, getInput(),
      builder.getDenseI64ArrayAttr(w.getShape()), getStridesAttr(),
      getPadsAttr(), getDilationsAttr(), getGroupAttr());
  operandGrads.assign({gx, gw});
  if (getBias()) {
    Shape axes{0};
    for (int64_t d = 2; d < x.getRank(); ++d)
      axes.push_back(d);
    operandGrads.push_back(g.reduceSum(gy, axes, /*keep=*/false));
  }
  return success();
}

template <typename PoolOp>
static LogicalResult poolVJP(PoolOp op, OpBuilder &builder, StringRef kind,
                             ArrayRef<Value> resultGrads,
                             SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign({PoolBackwardOp::create(
      builder, op.getLoc(), resultGrads[0], op.getInput(),
      builder.getStringAttr(kind), op.getKernelShapeAttr(), op.getStridesAttr(),
      op.getPadsAttr(), op.getDilationsAttr(), op.getCeilModeAttr(),
      op.getCountIncludePadAttr())});
  return success();
}

DSC_VJP(MaxPoolOp) {
  return poolVJP(*this, builder, "max", resultGrads, operandGrads);
}

DSC_VJP(AvgPoolOp) {
  return poolVJP(*this, builder, "avg", resultGrads, operandGrads);
}

DSC_VJP(GlobalAvgPoolOp) {
  GradBuilder g{builder, getLoc()};
  auto x = g.ty(getInput());
  // The mean's count is the spatial extent. An input of zero elements (any
  // dim 0; found by dsc-fuzz dividing by N x C = 0) has an empty gradient,
  // whatever the factor.
  int64_t n = 1;
  for (int64_t d : x.getShape().drop_front(2))
    n *= d;
  double scale = n > 0 ? 1.0 / double(n) : 0.0;
  operandGrads.assign({g.expand(g.mulS(resultGrads[0], scale), x.getShape())});
  return success();
}

DSC_VJP(GlobalMaxPoolOp) {
  GradBuilder g{builder, getLoc()};
  auto x = g.ty(getInput());
  Value isMax = EqualOp::create(builder, getLoc(), getInput(),
                                g.expand(getResult(), x.getShape()));
  operandGrads.assign({g.mask(isMax, g.expand(resultGrads[0], x.getShape()))});
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization, softmax, losses, dropout
//===----------------------------------------------------------------------===//

DSC_VJP(BatchNormTrainOp) {
  if (!resultGrads[0])
    return noGrad(operandGrads, 5);
  auto op = BatchNormTrainBackwardOp::create(builder, getLoc(), resultGrads[0],
                                             getInput(), getScale(),
                                             getEpsilonAttr());
  operandGrads.assign({op.getGradInput(), op.getGradScale(), op.getGradBias(),
                       Value(), Value()});
  return success();
}

DSC_VJP(BatchNormOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0], x = getInput();
  auto xt = g.ty(x);
  Shape bshape(xt.getRank(), 1);
  bshape[1] = xt.getDimSize(1);
  Value invStd = g.reshape(
      ReciprocalOp::create(
          builder, getLoc(),
          SqrtOp::create(
              builder, getLoc(),
              g.add(getVar(),
                    g.scalar(getVar(), getEpsilon().convertToDouble())))),
      bshape);
  Value xhat = g.mul(g.sub(x, g.reshape(getMean(), bshape)), invStd);
  Shape axes{0};
  for (int64_t d = 2; d < xt.getRank(); ++d)
    axes.push_back(d);
  operandGrads.assign({g.mul(gy, g.mul(g.reshape(getScale(), bshape), invStd)),
                       g.reduceSum(g.mul(gy, xhat), axes, false),
                       g.reduceSum(gy, axes, false), Value(), Value()});
  return success();
}

DSC_VJP(LayerNormOp) {
  auto x = cast<RankedTensorType>(getInput().getType());
  auto s = cast<RankedTensorType>(getScale().getType());
  int64_t axis = (int64_t)getAxis() < 0 ? getAxis() + x.getRank() : getAxis();
  if (s.getShape() != x.getShape().drop_front(axis))
    return emitOpError("gradient needs a scale of the normalized shape");
  auto op = LayerNormBackwardOp::create(
      builder, getLoc(), resultGrads[0], getInput(), getScale(), Value(),
      builder.getI64IntegerAttr(axis), getEpsilonAttr(), getRmsAttr(),
      TypeAttr());
  operandGrads.assign({op.getGradInput(), op.getGradScale()});
  if (getBias())
    operandGrads.push_back(op.getGradBias());
  return success();
}

// y * (gy - sum(gy * y)) and gy - exp(y) * sum(gy): dsc.softmax_backward.
DSC_VJP(SoftmaxOp) {
  operandGrads.assign(
      {SoftmaxBackwardOp::create(builder, getLoc(), resultGrads[0], getResult(),
                                 getAxisAttr(), builder.getBoolAttr(false))
           .getResult()});
  return success();
}

DSC_VJP(LogSoftmaxOp) {
  operandGrads.assign(
      {SoftmaxBackwardOp::create(builder, getLoc(), resultGrads[0], getResult(),
                                 getAxisAttr(), builder.getBoolAttr(true))
           .getResult()});
  return success();
}

DSC_VJP(SoftmaxCrossEntropyOp) {
  operandGrads.assign(
      {ClassLossBackwardOp::create(
           builder, getLoc(), resultGrads[0], getScores(), getLabels(),
           getWeights(), builder.getStringAttr("softmax_cross_entropy"),
           getReductionAttr(), getIgnoreIndexAttr()),
       Value()});
  if (getWeights())
    operandGrads.push_back(Value());
  return success();
}

DSC_VJP(NllLossOp) {
  operandGrads.assign(
      {ClassLossBackwardOp::create(builder, getLoc(), resultGrads[0],
                                   getInput(), getLabels(), getWeights(),
                                   builder.getStringAttr("nll"),
                                   getReductionAttr(), getIgnoreIndexAttr()),
       Value()});
  if (getWeights())
    operandGrads.push_back(Value());
  return success();
}

DSC_VJP(DropoutOp) {
  GradBuilder g{builder, getLoc()};
  if (!resultGrads[0])
    return noGrad(operandGrads, 1);
  double keep = 1.0 - getRatio().convertToDouble();
  operandGrads.assign({g.mask(getMask(), g.mulS(resultGrads[0], 1.0 / keep))});
  return success();
}

// Flash attention's backward from the forward's result and statistics; no
// gradient for the mask (dsc-fuse-attention fuses only masks that do not
// depend on a parameter).
DSC_VJP(AttentionOp) {
  unsigned n = getMask() ? 4 : 3;
  if (!resultGrads[0])
    return noGrad(operandGrads, n);
  auto op = AttentionBackwardOp::create(
      builder, getLoc(), resultGrads[0], getQuery(), getKey(), getValue(),
      getResult(), getLse(), getMask(), getScaleAttr(), getCausalAttr(),
      getWindowAttr(), getDropoutAttr(), getSeedIdAttr(),
      /*workspace_limit=*/builder.getI64IntegerAttr(0), getSeqMajorAttr(),
      // dsc-fuse-attention's marker (--nondeterministic-attention).
      builder.getBoolAttr(!(*this)->hasAttr("dsc.nondeterministic_backward")));
  operandGrads.assign(
      {op.getGradQuery(), op.getGradKey(), op.getGradValue()});
  if (getMask())
    operandGrads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// The result gradient broadcast back over the input of a reduction.
template <typename ReduceOp>
static Value spreadBack(GradBuilder &g, ReduceOp op, Value gy) {
  Shape kept = GradBuilder::keptShape(op.getInput(), op.getAxes());
  return g.expand(g.reshape(gy, kept), g.ty(op.getInput()).getShape());
}

DSC_VJP(ReduceSumOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({spreadBack(g, *this, resultGrads[0])});
  return success();
}

DSC_VJP(ReduceMeanOp) {
  GradBuilder g{builder, getLoc()};
  auto x = g.ty(getInput());
  int64_t n = 1;
  for (int64_t a : getAxes())
    n *= x.getDimSize(a);
  operandGrads.assign({spreadBack(g, *this, g.mulS(resultGrads[0], 1.0 / n))});
  return success();
}

template <typename ReduceOp>
static void extremumVJP(ReduceOp op, OpBuilder &builder,
                        ArrayRef<Value> resultGrads,
                        SmallVectorImpl<Value> &operandGrads) {
  GradBuilder g{builder, op.getLoc()};
  Value isExtremum = EqualOp::create(builder, op.getLoc(), op.getInput(),
                                     spreadBack(g, op, op.getResult()));
  operandGrads.assign({g.mask(isExtremum, spreadBack(g, op, resultGrads[0]))});
}

DSC_VJP(ReduceMaxOp) {
  extremumVJP(*this, builder, resultGrads, operandGrads);
  return success();
}

DSC_VJP(ReduceMinOp) {
  extremumVJP(*this, builder, resultGrads, operandGrads);
  return success();
}

DSC_VJP(ReduceProdOp) {
  GradBuilder g{builder, getLoc()};
  Value prod = spreadBack(g, *this, g.mul(resultGrads[0], getResult()));
  operandGrads.assign({g.div(prod, getInput())});
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

DSC_VJP(ReshapeOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.reshape(resultGrads[0], g.ty(getInput()).getShape())});
  return success();
}

DSC_VJP(RotateHalfOp) {
  // rotate_half is linear and its transpose is its negation.
  GradBuilder g{builder, getLoc()};
  operandGrads.assign(
      {RotateHalfOp::create(builder, getLoc(), g.neg(resultGrads[0]))});
  return success();
}

DSC_VJP(TransposeOp) {
  GradBuilder g{builder, getLoc()};
  ArrayRef<int64_t> perm = getPerm();
  Shape inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  operandGrads.assign({g.transpose(resultGrads[0], inverse)});
  return success();
}

DSC_VJP(ExpandOp) {
  GradBuilder g{builder, getLoc()};
  operandGrads.assign({g.sumToLike(resultGrads[0], getInput())});
  return success();
}

DSC_VJP(SliceOp) {
  operandGrads.assign({InsertSliceOp::create(
      builder, getLoc(), resultGrads[0],
      builder.getDenseI64ArrayAttr(
          cast<RankedTensorType>(getInput().getType()).getShape()),
      getOffsetsAttr(), getStridesAttr())});
  return success();
}

DSC_VJP(ConcatOp) {
  GradBuilder g{builder, getLoc()};
  Value gy = resultGrads[0];
  auto yt = g.ty(gy);
  int64_t axis = (int64_t)getAxis() < 0 ? getAxis() + yt.getRank() : getAxis();
  int64_t offset = 0;
  operandGrads.clear();
  for (Value in : getInputs()) {
    auto it = g.ty(in);
    Shape offsets(yt.getRank(), 0), strides(yt.getRank(), 1);
    offsets[axis] = offset;
    offset += it.getDimSize(axis);
    operandGrads.push_back(SliceOp::create(
        builder, getLoc(), gy, builder.getDenseI64ArrayAttr(offsets),
        builder.getDenseI64ArrayAttr(it.getShape()),
        builder.getDenseI64ArrayAttr(strides)));
  }
  return success();
}

DSC_VJP(SplitOp) {
  GradBuilder g{builder, getLoc()};
  SmallVector<Value> pieces;
  for (auto [r, gr] : llvm::zip(getResults(), resultGrads))
    pieces.push_back(gr ? gr : g.zerosLike(r));
  int64_t axis = (int64_t)getAxis() < 0 ? getAxis() + g.ty(getInput()).getRank()
                                        : getAxis();
  if (pieces.size() == 1)
    operandGrads.assign({pieces[0]});
  else
    operandGrads.assign({ConcatOp::create(builder, getLoc(), pieces,
                                          builder.getI64IntegerAttr(axis))});
  return success();
}

DSC_VJP(GatherOp) {
  auto data = cast<RankedTensorType>(getData().getType());
  int64_t axis =
      (int64_t)getAxis() < 0 ? getAxis() + data.getRank() : getAxis();
  operandGrads.assign(
      {ScatterAddOp::create(builder, getLoc(), resultGrads[0], getIndices(),
                            Value(), builder.getI64IntegerAttr(axis),
                            builder.getDenseI64ArrayAttr(data.getShape())),
       Value()});
  return success();
}

DSC_VJP(PadOp) {
  Shape crop;
  for (int64_t p : getPads())
    crop.push_back(-p);
  operandGrads.assign({PadOp::create(builder, getLoc(), resultGrads[0],
                                     builder.getDenseI64ArrayAttr(crop),
                                     builder.getF64FloatAttr(0.0))});
  return success();
}

DSC_VJP(CumSumOp) {
  // d(result[i]) / d(input[j]) is 1 exactly where result[i] sums input[j]:
  // the input's gradient sums the result's over the same pairs, the other
  // way along the axis.
  operandGrads.assign({CumSumOp::create(builder, getLoc(), resultGrads[0],
                                        getAxisAttr(), getExclusiveAttr(),
                                        builder.getBoolAttr(!getReverse()))});
  return success();
}

DSC_VJP(TriluOp) {
  operandGrads.assign({TriluOp::create(builder, getLoc(), resultGrads[0],
                                       getUpperAttr(), getKAttr())});
  return success();
}
