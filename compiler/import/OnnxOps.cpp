//===- OnnxOps.cpp - the table from ONNX operators to dsc ops -------------===//
//
// Most operators map one to one and share a generic handler (unary,
// broadcasting binary); the rest have a small handler each, grouped by family
// as in docs/ops.md. Shape-like inputs are read as host constants and become
// static attributes.
//
//===----------------------------------------------------------------------===//
#include "compiler/import/OnnxOps.h"
#include "dialects/dsc/IR/DscOps.h"

#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

using namespace mlir;

namespace dsc {

//===----------------------------------------------------------------------===//
// Canonical parameters
//===----------------------------------------------------------------------===//

/// An ONNX axis in [-r, r - 1], made non-negative: a scalar has none.
/// (normalizeAxis takes axis 0 of a scalar, and the handlers index the
/// shape with the result.)
static FailureOr<int64_t> onnxAxis(int64_t axis, int64_t rank) {
  auto n = normalizeAxis(axis, rank);
  if (failed(n) || *n >= rank)
    return failure();
  return *n;
}

FailureOr<int64_t> axisAttr(NodeContext &c, llvm::StringRef name, int64_t dflt,
                            int64_t rank) {
  int64_t axis = c.attrInt(name, dflt);
  auto n = onnxAxis(axis, rank);
  if (failed(n))
    return c.error() << name << " " << axis << " is out of range for rank "
                     << rank;
  return *n;
}

FailureOr<SliceParams> sliceParams(NodeContext &c, ArrayRef<int64_t> shape) {
  auto starts = c.constant(1, "starts");
  auto ends = c.constant(2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  int64_t rank = shape.size();
  std::vector<int64_t> axes, steps;
  if (c.hasInput(3)) {
    auto a = c.constant(3, "axes");
    if (failed(a))
      return failure();
    axes = a->asInts();
  } else {
    for (int64_t i = 0; i < starts->numElements(); ++i)
      axes.push_back(i);
  }
  if (c.hasInput(4)) {
    auto s = c.constant(4, "steps");
    if (failed(s))
      return failure();
    steps = s->asInts();
  } else {
    steps.assign(axes.size(), 1);
  }
  if ((int64_t)axes.size() != starts->numElements() ||
      (int64_t)axes.size() != ends->numElements() ||
      axes.size() != steps.size())
    return c.error() << "starts, ends, axes and steps differ in length";
  SliceParams p;
  p.offsets.assign(rank, 0);
  p.sizes.assign(shape.begin(), shape.end());
  p.strides.assign(rank, 1);
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto axis = normalizeAxis(axes[i], rank);
    if (failed(axis) || rank == 0)
      return c.error() << "slice axis " << axes[i] << " out of range for rank "
                       << rank;
    if (seen[*axis])
      return c.error() << "slice axis " << axes[i]
                       << " is given more than once; each axis may be sliced "
                          "once";
    seen[*axis] = true;
    int64_t dim = shape[*axis], step = steps[i];
    if (step == 0)
      return c.error() << "slice step is 0";
    int64_t start = starts->intAt(i), end = ends->intAt(i);
    if (start < 0)
      start += dim;
    if (end < 0 && end > INT64_MIN / 2)
      end += dim;
    // Sizes as 1 + (distance - 1) / |step|: no step, however large, can
    // overflow (the distance is at most dim + 1).
    int64_t size;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      size = end > start ? 1 + (end - start - 1) / step : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      int64_t magnitude = step == INT64_MIN ? INT64_MAX : -step;
      size = start > end ? 1 + (start - end - 1) / magnitude : 0;
    }
    p.offsets[*axis] = size ? start : 0;
    p.sizes[*axis] = size;
    p.strides[*axis] = step;
  }
  return p;
}

FailureOr<SmallVector<int64_t>> reshapeTarget(NodeContext &c,
                                              ArrayRef<int64_t> shape) {
  auto target = c.constant(1, "shape");
  if (failed(target))
    return failure();
  bool allowZero = c.attrInt("allowzero", 0) != 0;
  SmallVector<int64_t> out;
  int64_t known = 1, inferAt = -1;
  // The input's size was checked when it was made.
  int64_t total = checkedNumElements(shape).value_or(0);
  for (int64_t i = 0; i < target->numElements(); ++i) {
    int64_t d = target->intAt(i);
    if (d == 0 && !allowZero) {
      if (i >= (int64_t)shape.size())
        return c.error() << "shape entry " << i
                         << " is 0 (copy) but the input has rank "
                         << shape.size();
      d = shape[i];
    }
    if (d == -1) {
      if (inferAt >= 0)
        return c.error() << "shape has more than one -1";
      inferAt = i;
      out.push_back(1);
      continue;
    }
    if (d < 0)
      return c.error() << "shape entry " << d << " is negative";
    if (llvm::MulOverflow(known, d, known))
      return c.error() << "the target shape's size overflows 64 bits";
    out.push_back(d);
  }
  if (inferAt >= 0) {
    if (known == 0 || total % known)
      return c.error() << "cannot infer the -1 of the target shape: " << total
                       << " elements are not a multiple of " << known;
    out[inferAt] = total / known;
  }
  return out;
}

FailureOr<SmallVector<int64_t>> reshapeLikeTarget(NodeContext &c,
                                                  ArrayRef<int64_t> shape) {
  int64_t rank = shape.size();
  SmallVector<int64_t> out;
  llvm::StringRef op = c.opType();
  if (op == "Flatten") {
    int64_t axis = c.attrInt("axis", 1);
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis > rank)
      return c.error() << "axis out of range";
    int64_t a = 1, b = 1;
    for (int64_t i = 0; i < rank; ++i)
      (i < axis ? a : b) *= shape[i];
    return SmallVector<int64_t>{a, b};
  }
  std::vector<int64_t> axes;
  bool haveAxes = false;
  if (c.hasInput(1)) {
    auto t = c.constant(1, "axes");
    if (failed(t))
      return failure();
    axes = t->asInts();
    haveAxes = true;
  }
  // (The `axes` attribute is opset 11's; from 13 axes are an input.)
  if (op == "Squeeze") {
    SmallVector<bool> drop(rank, false);
    if (!haveAxes) {
      for (int64_t i = 0; i < rank; ++i)
        drop[i] = shape[i] == 1;
    } else {
      for (int64_t a : axes) {
        auto n = onnxAxis(a, rank);
        if (failed(n) || shape[*n] != 1)
          return c.error() << "cannot squeeze axis " << a << " of shape with "
                           << "rank " << rank;
        drop[*n] = true;
      }
    }
    for (int64_t i = 0; i < rank; ++i)
      if (!drop[i])
        out.push_back(shape[i]);
    return out;
  }
  // Unsqueeze.
  if (!haveAxes)
    return c.error() << "Unsqueeze needs axes";
  int64_t outRank = rank + axes.size();
  SmallVector<bool> inserted(outRank, false);
  for (int64_t a : axes) {
    auto n = normalizeAxis(a, outRank);
    if (failed(n) || inserted[*n])
      return c.error() << "bad unsqueeze axis " << a;
    inserted[*n] = true;
  }
  for (int64_t i = 0, j = 0; i < outRank; ++i)
    out.push_back(inserted[i] ? 1 : shape[j++]);
  return out;
}

FailureOr<std::optional<SmallVector<int64_t>>> reduceAxes(NodeContext &c,
                                                          int64_t rank) {
  std::vector<int64_t> axes;
  // ReduceSum takes axes as an input from opset 13, the others from 18.
  if (c.hasInput(1)) {
    auto t = c.constant(1, "axes");
    if (failed(t))
      return failure();
    axes = t->asInts();
  } else if (auto a = c.attrInts("axes")) {
    axes = *a;
  }
  if (axes.empty()) {
    if (c.attrInt("noop_with_empty_axes", 0))
      return std::optional<SmallVector<int64_t>>();
    SmallVector<int64_t> all;
    for (int64_t i = 0; i < rank; ++i)
      all.push_back(i);
    return std::optional(all);
  }
  SmallVector<int64_t> out;
  for (int64_t a : axes) {
    auto n = onnxAxis(a, rank);
    if (failed(n))
      return c.error() << "reduction axis " << a << " out of range for rank "
                       << rank;
    if (!llvm::is_contained(out, *n))
      out.push_back(*n);
  }
  llvm::sort(out);
  return std::optional(out);
}

FailureOr<SmallVector<int64_t>> transposePerm(NodeContext &c, int64_t rank) {
  SmallVector<int64_t> perm;
  if (auto p = c.attrInts("perm"))
    perm.assign(p->begin(), p->end());
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  if ((int64_t)perm.size() != rank)
    return c.error() << "perm has " << perm.size() << " entries for rank "
                     << rank;
  SmallVector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank)
      return c.error() << "perm entry " << p << " is out of range for rank "
                       << rank << "; perm must be a permutation of 0.."
                       << rank - 1;
    if (seen[p])
      return c.error() << "perm entry " << p
                       << " is repeated; perm must be a permutation of 0.."
                       << rank - 1;
    seen[p] = true;
  }
  return perm;
}

// Given split sizes must be non-negative, sum to the dim and match the
// node's outputs; handler and folder both rely on that.
// A split makes one SSA value per piece, and a sequence one per element;
// this bounds how many one node makes. Each is planned and emitted on its
// own, in work that grows with the square of the values alive at once: a
// 1.2 KB model's SplitToSequence of a [2, 65536] tensor into 65536 pieces kept
// dsc-fuzz's memory plan busy for minutes.
constexpr int64_t kMaxPieces = 4096;

static LogicalResult checkSplitSizes(NodeContext &c, ArrayRef<int64_t> sizes,
                                     int64_t dim, size_t numOutputs) {
  if (int64_t(sizes.size()) > kMaxPieces)
    return c.error() << "split into " << sizes.size() << " pieces, more than "
                     << kMaxPieces << " (one value each), which dsc does not "
                     << "take: split into fewer, larger pieces";
  int64_t total = 0;
  for (int64_t s : sizes)
    if (s < 0 || llvm::AddOverflow(total, s, total))
      return c.error() << "split sizes " << formatShape(sizes)
                       << " hold a negative size; give sizes >= 0 that add up "
                          "to dim "
                       << dim;
  if (total != dim)
    return c.error() << "split sizes " << formatShape(sizes) << " add up to "
                     << total << ", not to the split dim " << dim;
  if (sizes.size() != numOutputs)
    return c.error() << "split into " << sizes.size() << " pieces but the "
                     << "node has " << numOutputs << " outputs";
  return success();
}

FailureOr<SmallVector<int64_t>> splitSizes(NodeContext &c,
                                           ArrayRef<int64_t> shape,
                                           int64_t axis, size_t numOutputs) {
  int64_t dim = shape[axis];
  SmallVector<int64_t> sizes;
  if (c.hasInput(1)) {
    auto t = c.constant(1, "split");
    if (failed(t))
      return failure();
    for (int64_t s : t->asInts())
      sizes.push_back(s);
  } else {
    // (The `split` attribute is opset 11's; from 13 sizes are an input.)
    int64_t n = c.attrInt("num_outputs", (int64_t)numOutputs);
    if (n <= 0 || n > kMaxPieces)
      return c.error() << "split into " << n << " pieces; dsc takes 1 to "
                       << kMaxPieces;
    // Opset 18: pieces of ceil(dim / n), the last one smaller.
    int64_t chunk = dim / n + (dim % n != 0);
    if (!c.hasAttr("num_outputs") && dim % n)
      return c.error() << "dim " << dim << " does not split evenly into " << n;
    for (int64_t i = 0, left = dim; i < n; ++i) {
      sizes.push_back(std::min(chunk, left));
      left -= sizes.back();
    }
  }
  if (failed(checkSplitSizes(c, sizes, dim, numOutputs)))
    return failure();
  return sizes;
}

FailureOr<HostTensor> constantOfShapeValue(NodeContext &c) {
  const auto *a = c.attr("value");
  if (!a)
    return HostTensor::ofFloats({0.0}, {}, ElemKind::F32);
  std::string err = checkTensorDims(a->t(), "attribute 'value'");
  if (!err.empty())
    return c.error() << err;
  if (a->t().data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
    return c.error() << "attribute 'value' has external data; dsc reads it "
                        "from the model file only";
  auto t = readTensorData(a->t(), ".", c.loc());
  if (failed(t))
    return failure();
  if (!*t || (*t)->numElements() != 1)
    return c.error() << "attribute 'value' must hold exactly one value";
  return **t;
}

FailureOr<int64_t> gatherAxis(NodeContext &c, int64_t rank) {
  if (rank == 0)
    return c.error() << "data is a scalar (rank 0); Gather needs data of "
                        "rank >= 1";
  return axisAttr(c, "axis", 0, rank);
}

FailureOr<std::vector<int64_t>>
gatherElementsSources(NodeContext &c, ArrayRef<int64_t> dataShape,
                      const HostTensor &indices) {
  int64_t rank = dataShape.size();
  if (rank == 0 || (int64_t)indices.shape.size() != rank)
    return c.error() << "indices " << formatShape(indices.shape)
                     << " must have the rank of data "
                     << formatShape(dataShape) << " (>= 1)";
  auto axis = axisAttr(c, "axis", 0, rank);
  if (failed(axis))
    return failure();
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indices.shape[d] > dataShape[d])
      return c.error() << "indices " << formatShape(indices.shape)
                       << " exceed data " << formatShape(dataShape)
                       << " in dim " << d;
  std::vector<int64_t> sources(indices.numElements());
  SmallVector<int64_t> pos(rank, 0);
  for (size_t e = 0; e < sources.size(); ++e) {
    int64_t i = indices.intAt(e);
    if (i < 0)
      i += dataShape[*axis];
    if (i < 0 || i >= dataShape[*axis])
      return c.error() << "index " << indices.intAt(e) << " out of range [-"
                       << dataShape[*axis] << ", " << dataShape[*axis]
                       << ") of axis " << *axis;
    int64_t flat = 0;
    for (int64_t d = 0; d < rank; ++d)
      flat = flat * dataShape[d] + (d == *axis ? i : pos[d]);
    sources[e] = flat;
    for (int64_t d = rank - 1; d >= 0 && ++pos[d] == indices.shape[d]; --d)
      pos[d] = 0;
  }
  return sources;
}

/// Wraps a negative index; fails (with the node's error) out of range.
static FailureOr<int64_t> wrapIndex(NodeContext &c, int64_t i, int64_t dim,
                                    int64_t d) {
  if (i < -dim || i >= dim)
    return c.error() << "index " << i << " out of range [-" << dim << ", "
                     << dim << ") of data dim " << d;
  return i < 0 ? i + dim : i;
}

/// ScatterND: indices [..., k] name slices of data's last rank - k dims.
static LogicalResult scatterNDDestinations(NodeContext &c,
                                           ArrayRef<int64_t> dataShape,
                                           const HostTensor &indices,
                                           ArrayRef<int64_t> updatesShape,
                                           std::vector<int64_t> &dests) {
  int64_t rank = dataShape.size(), q = indices.shape.size();
  int64_t k = q ? indices.shape.back() : -1;
  if (q < 1 || k < 0 || k > rank)
    return c.error() << "indices " << formatShape(indices.shape)
                     << " must have rank >= 1 and a last dim of at most the "
                        "data's rank "
                     << rank;
  SmallVector<int64_t> expected(indices.shape.begin(), indices.shape.end() - 1);
  expected.append(dataShape.begin() + k, dataShape.end());
  if (ArrayRef<int64_t>(expected) != updatesShape)
    return c.error() << "updates " << formatShape(updatesShape)
                     << " must have shape " << formatShape(expected)
                     << " (indices' leading dims, then data's past "
                        "the indexed ones)";
  int64_t slice = checkedNumElements(dataShape.drop_front(k)).value_or(0);
  int64_t writes =
      checkedNumElements(ArrayRef<int64_t>(indices.shape).drop_back())
          .value_or(0);
  for (int64_t w = 0; w < writes; ++w) {
    int64_t base = 0;
    for (int64_t d = 0; d < k; ++d) {
      auto i = wrapIndex(c, indices.intAt(w * k + d), dataShape[d], d);
      if (failed(i))
        return failure();
      base = base * dataShape[d] + *i;
    }
    for (int64_t e = 0; e < slice; ++e)
      dests.push_back(base * slice + e);
  }
  return success();
}

/// ScatterElements: updates[p] goes where GatherElements with the same
/// indices would read element p from.
static LogicalResult scatterElementsDestinations(NodeContext &c,
                                                 ArrayRef<int64_t> dataShape,
                                                 const HostTensor &indices,
                                                 ArrayRef<int64_t> updatesShape,
                                                 std::vector<int64_t> &dests) {
  if (ArrayRef<int64_t>(indices.shape) != updatesShape)
    return c.error() << "indices " << formatShape(indices.shape)
                     << " and updates " << formatShape(updatesShape)
                     << " must have one shape";
  auto flat = gatherElementsSources(c, dataShape, indices);
  if (failed(flat))
    return failure();
  dests = std::move(*flat);
  return success();
}

FailureOr<std::vector<int64_t>> scatterSources(NodeContext &c,
                                               ArrayRef<int64_t> dataShape,
                                               const HostTensor &indices,
                                               ArrayRef<int64_t> updatesShape) {
  std::string reduction = c.attrString("reduction", "none");
  if (reduction != "none")
    return c.error() << c.opType() << " reduction '" << reduction
                     << "' is not supported (only 'none')";
  // The source map is a constant of data's size, built from one entry per
  // update: both within --max-constant-bytes before anything is allocated
  // (data and updates may be run-time values of any static size).
  if (failed(c.checkConstantSize(dataShape, ElemKind::I64)) ||
      failed(c.checkConstantSize(updatesShape, ElemKind::I64)))
    return failure();
  std::vector<int64_t> dests;
  LogicalResult ok =
      c.opType() == "ScatterND"
          ? scatterNDDestinations(c, dataShape, indices, updatesShape, dests)
          : scatterElementsDestinations(c, dataShape, indices, updatesShape,
                                        dests);
  if (failed(ok))
    return failure();
  int64_t total = checkedNumElements(dataShape).value_or(0);
  std::vector<int64_t> sources(total);
  for (int64_t i = 0; i < total; ++i)
    sources[i] = i;
  for (auto [u, dest] : llvm::enumerate(dests))
    sources[dest] = total + (int64_t)u;
  return sources;
}

FailureOr<SmallVector<int64_t>> expandTarget(NodeContext &c,
                                             ArrayRef<int64_t> shape) {
  auto given = c.shapeConstant(1, "shape");
  if (failed(given))
    return failure();
  auto target = broadcastShapes(shape, *given);
  if (failed(target))
    return c.error() << "cannot expand " << formatShape(shape) << " to "
                     << formatShape(*given)
                     << "; the shapes must broadcast (each dim equal or 1)";
  return *target;
}

FailureOr<CumSumParams> cumSumParams(NodeContext &c, int64_t rank) {
  auto axis = c.scalarConstant(1, "axis");
  if (failed(axis))
    return failure();
  if (rank < 1)
    return c.error() << "CumSum needs an input of rank >= 1";
  auto n = normalizeAxis(axis->intAt(0), rank);
  if (failed(n))
    return c.error() << "axis " << axis->intAt(0)
                     << " is out of range for rank " << rank;
  CumSumParams p;
  p.axis = *n;
  p.exclusive = c.attrInt("exclusive", 0) != 0;
  p.reverse = c.attrInt("reverse", 0) != 0;
  return p;
}

FailureOr<TileParams> tileParams(NodeContext &c, ArrayRef<int64_t> shape) {
  auto repeats = c.constant(1, "repeats");
  if (failed(repeats))
    return failure();
  if (repeats->shape.size() != 1 ||
      repeats->numElements() != (int64_t)shape.size())
    return c.error() << "repeats must be 1-D with one count per input dim ("
                     << shape.size() << "), got shape "
                     << formatShape(repeats->shape);
  TileParams p;
  auto counts = repeats->asInts();
  p.repeats.assign(counts.begin(), counts.end());
  for (auto [d, r] : llvm::enumerate(p.repeats)) {
    if (r < 0)
      return c.error() << "repeats[" << d << "] is " << r
                       << "; counts must be >= 0";
    int64_t n;
    if (llvm::MulOverflow(shape[d], r, n))
      return c.error() << "tiled dim " << d << " (" << shape[d] << " x " << r
                       << ") overflows int64";
    p.shape.push_back(n);
  }
  if (!checkedNumElements(p.shape))
    return c.error() << "tiled shape " << formatShape(p.shape)
                     << " has more elements than int64 holds";
  return p;
}

//===----------------------------------------------------------------------===//
// Handlers
//===----------------------------------------------------------------------===//

namespace {

using Shape = SmallVector<int64_t>;

// Converts a host constant to `type`'s element kind (e.g. Pow's exponent).
FailureOr<Value> valueAs(NodeContext &c, size_t i, Type element) {
  if (c.isConstant(i)) {
    auto k = fromMlirType(element);
    if (k && c.input(i).constant->kind != *k)
      return c.materialize(c.input(i).constant->castTo(*k));
  }
  return c.value(i);
}

// The SSA values of inputs 0..n-1 that are present (optional ones may be
// absent), in order.
FailureOr<SmallVector<Value>> presentOperands(NodeContext &c, size_t n) {
  SmallVector<Value> operands;
  for (size_t i = 0; i < n; ++i) {
    if (!c.hasInput(i))
      continue;
    auto v = c.value(i);
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  return operands;
}

NodeHandler unary(llvm::StringRef opName) {
  std::string name = opName.str();
  return [name](NodeContext &c) -> LogicalResult {
    auto x = c.value(0);
    if (failed(x))
      return failure();
    auto r = c.create1(name, {*x});
    if (failed(r))
      return failure();
    c.setOutput(0, *r);
    return success();
  };
}

// Broadcasting binary ops; variadic ONNX forms (Max, Min, Sum) chain.
NodeHandler binary(llvm::StringRef opName) {
  std::string name = opName.str();
  return [name](NodeContext &c) -> LogicalResult {
    if (c.numInputs() == 0)
      return c.error() << "needs at least one input";
    // Constants take the other operand's element type (ONNX Pow allows an
    // exponent of another type; exporters write float scalars as f32).
    size_t ref = 0;
    for (size_t i = 0; i < c.numInputs(); ++i)
      if (!c.isConstant(i)) {
        ref = i;
        break;
      }
    Type element = c.type(ref).getElementType();
    auto acc = valueAs(c, 0, element);
    if (failed(acc))
      return failure();
    Value result = *acc;
    for (size_t i = 1; i < c.numInputs(); ++i) {
      auto rhs = valueAs(c, i, element);
      if (failed(rhs))
        return failure();
      // ONNX Pow takes an exponent of another type: convert it.
      if (name == "dsc.pow" &&
          getElementTypeOrSelf(rhs->getType()) != element) {
        auto cast = c.create1("dsc.cast", {*rhs},
                              {c.named("to", TypeAttr::get(element))});
        if (failed(cast))
          return failure();
        rhs = *cast;
      }
      auto r = c.create1(name, {result, *rhs});
      if (failed(r))
        return failure();
      result = *r;
    }
    c.setOutput(0, result);
    return success();
  };
}

LogicalResult identity(NodeContext &c) {
  c.setOutput(0, ImportValue(c.input(0)));
  return success();
}

LogicalResult castOp(NodeContext &c) {
  Type to;
  if (c.opType() == "CastLike") {
    to = c.type(1).getElementType();
  } else {
    auto k = fromOnnxDataType((int)c.attrInt("to", 0));
    if (!k)
      return c.error() << "cast to unsupported type "
                       << onnxDataTypeName((int)c.attrInt("to", 0));
    to = toMlirType(c.ctx(), *k);
  }
  auto x = c.value(0);
  if (failed(x))
    return failure();
  if (c.type(0).getElementType() == to) {
    c.setOutput(0, *x);
    return success();
  }
  auto r = c.create1("dsc.cast", {*x}, {c.named("to", TypeAttr::get(to))});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult whereOp(NodeContext &c) {
  auto cond = c.value(0);
  if (failed(cond))
    return failure();
  Type element = (c.isConstant(1) ? c.type(2) : c.type(1)).getElementType();
  auto x = valueAs(c, 1, element), y = valueAs(c, 2, element);
  if (failed(x) || failed(y))
    return failure();
  auto r = c.create1("dsc.where", {*cond, *x, *y});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult clipOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  // Constant scalar bounds become attributes; bounds computed at run time
  // become max/min ops.
  bool constantBounds = (!c.hasInput(1) || c.isConstant(1)) &&
                        (!c.hasInput(2) || c.isConstant(2));
  const char *names[] = {"min", "max"};
  if (!constantBounds) {
    Value result = *x;
    Type element = c.type(0).getElementType();
    for (int i = 1; i <= 2; ++i) {
      if (!c.hasInput(i))
        continue;
      auto bound = valueAs(c, i, element);
      if (failed(bound))
        return failure();
      auto r = c.create1(i == 1 ? "dsc.max" : "dsc.min", {result, *bound});
      if (failed(r))
        return failure();
      result = *r;
    }
    c.setOutput(0, result);
    return success();
  }
  SmallVector<NamedAttribute> attrs;
  for (int i = 1; i <= 2; ++i) {
    if (!c.hasInput(i))
      continue;
    auto t = c.constant(i, names[i - 1]);
    if (failed(t))
      return failure();
    if (t->numElements() != 1)
      return c.error() << names[i - 1] << " must be a scalar";
    attrs.push_back(c.f64(names[i - 1], t->floatAt(0)));
  }
  auto r = c.create1("dsc.clip", {*x}, attrs);
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult leakyReluOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto r = c.create1("dsc.leaky_relu", {*x},
                     {c.f64("alpha", c.attrFloat("alpha", 0.01))});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult geluOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  std::string approx = c.attrString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return c.error() << "unknown approximate '" << approx << "'";
  auto r = c.create1("dsc.gelu", {*x},
                     {c.boolean("tanh_approximation", approx == "tanh")});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult dropoutOp(NodeContext &c) {
  double ratio = 0.5;
  bool training = false;
  if (c.hasInput(2)) {
    auto t = c.scalarConstant(2, "training_mode");
    if (failed(t))
      return failure();
    training = t->intAt(0) != 0;
  }
  // The ratio matters only in training mode.
  if (training && c.hasInput(1)) {
    auto t = c.scalarConstant(1, "ratio");
    if (failed(t))
      return failure();
    ratio = t->floatAt(0);
  }
  auto x = c.value(0);
  if (failed(x))
    return failure();
  if (!training || ratio == 0.0) {
    // Inference mode or p = 0: the identity, and a mask of all true.
    c.setOutput(0, *x);
    if (c.outputUsed(1)) {
      // The all-true mask is a constant of the input's shape: bounded like
      // every constant the import materializes.
      ArrayRef<int64_t> shape = c.type(0).getShape();
      if (failed(c.checkConstantSize(shape, ElemKind::Bool)))
        return failure();
      c.setOutput(1, HostTensor::generate(ElemKind::Bool, shape,
                                          [](int64_t) { return 1.0; }));
    }
    return success();
  }
  SmallVector<NamedAttribute> attrs{c.f64("ratio", ratio)};
  if (c.hasAttr("seed"))
    attrs.push_back(c.i64("seed", c.attrInt("seed", 0)));
  auto op = c.create("dsc.dropout", {*x}, attrs);
  if (failed(op))
    return failure();
  c.setOutput(0, (*op)->getResult(0));
  c.setOutput(1, (*op)->getResult(1));
  return success();
}

LogicalResult matmulOp(NodeContext &c) {
  auto a = c.value(0), b = c.value(1);
  if (failed(a) || failed(b))
    return failure();
  auto r = c.create1("dsc.matmul", {*a, *b});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult gemmOp(NodeContext &c) {
  SmallVector<Value> operands;
  for (size_t i = 0; i < 3; ++i) {
    if (!c.hasInput(i))
      continue;
    auto v = i == 2 ? valueAs(c, i, c.type(0).getElementType()) : c.value(i);
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  auto r = c.create1("dsc.gemm", operands,
                     {c.f64("alpha", c.attrFloat("alpha", 1.0)),
                      c.f64("beta", c.attrFloat("beta", 1.0)),
                      c.boolean("trans_a", c.attrInt("transA", 0)),
                      c.boolean("trans_b", c.attrInt("transB", 0))});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

// Window sizes come from the file. Bounding each below 2^31 keeps every
// window computation downstream (in + pads, (kernel - 1) * dilation, ...)
// inside int64.
constexpr int64_t kMaxWindowValue = int64_t(1) << 31;

LogicalResult checkWindowValues(NodeContext &c, llvm::StringRef what,
                                ArrayRef<int64_t> values, int64_t lowest) {
  for (int64_t v : values)
    if (v < lowest || v >= kMaxWindowValue)
      return c.error() << what << " " << formatShape(values) << " holds " << v
                       << "; each entry must be in [" << lowest << ", 2^31)";
  return success();
}

// Explicit pads of a window op, from `pads` or `auto_pad`.
FailureOr<Shape> windowPads(NodeContext &c, ArrayRef<int64_t> in,
                            ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                            ArrayRef<int64_t> dilations) {
  size_t n = in.size();
  std::string autoPad = c.attrString("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    auto pads = c.attrInts("pads");
    if (!pads)
      return Shape(2 * n, 0);
    if (pads->size() != 2 * n)
      return c.error() << "expected " << 2 * n << " pads";
    Shape result(pads->begin(), pads->end());
    if (failed(checkWindowValues(c, "pads", result, 0)))
      return failure();
    return result;
  }
  if (autoPad == "VALID")
    return Shape(2 * n, 0);
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return c.error() << "unknown auto_pad '" << autoPad << "'";
  Shape pads(2 * n, 0);
  for (size_t i = 0; i < n; ++i) {
    int64_t out = (in[i] + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(
        0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in[i]);
    int64_t small = total / 2, large = total - small;
    pads[i] = autoPad == "SAME_UPPER" ? small : large;
    pads[i + n] = autoPad == "SAME_UPPER" ? large : small;
  }
  return pads;
}

Shape intsOr(NodeContext &c, llvm::StringRef name, size_t n, int64_t dflt) {
  auto v = c.attrInts(name);
  if (!v)
    return Shape(n, dflt);
  return Shape(v->begin(), v->end());
}

LogicalResult convOp(NodeContext &c) {
  RankedTensorType x = c.type(0), w = c.type(1);
  if (x.getRank() < 3 || w.getRank() != x.getRank())
    return c.error() << "expects input [N, C, spatial...] and a weight of the "
                        "same rank";
  size_t n = x.getRank() - 2;
  Shape kernel(w.getShape().drop_front(2));
  if (auto k = c.attrInts("kernel_shape"))
    if (Shape(k->begin(), k->end()) != kernel)
      return c.error() << "kernel_shape disagrees with the weight's shape";
  Shape strides = intsOr(c, "strides", n, 1);
  Shape dilations = intsOr(c, "dilations", n, 1);
  if (strides.size() != n || dilations.size() != n)
    return c.error() << "expected " << n << " strides and dilations";
  if (failed(checkWindowValues(c, "kernel_shape", kernel, 1)) ||
      failed(checkWindowValues(c, "strides", strides, 1)) ||
      failed(checkWindowValues(c, "dilations", dilations, 1)))
    return failure();
  auto pads =
      windowPads(c, x.getShape().drop_front(2), kernel, strides, dilations);
  if (failed(pads))
    return failure();
  auto present = presentOperands(c, 3);
  if (failed(present))
    return failure();
  SmallVector<Value> operands = std::move(*present);
  auto r = c.create1("dsc.conv", operands,
                     {c.array("strides", strides), c.array("pads", *pads),
                      c.array("dilations", dilations),
                      c.i64("group", c.attrInt("group", 1))});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult poolOp(NodeContext &c) {
  RankedTensorType x = c.type(0);
  if (x.getRank() < 3)
    return c.error() << "expects input [N, C, spatial...]";
  size_t n = x.getRank() - 2;
  auto kernel = c.attrInts("kernel_shape");
  if (!kernel || kernel->size() != n)
    return c.error() << "needs kernel_shape with " << n << " entries";
  Shape k(kernel->begin(), kernel->end());
  Shape strides = intsOr(c, "strides", n, 1);
  Shape dilations = intsOr(c, "dilations", n, 1);
  if (strides.size() != n || dilations.size() != n)
    return c.error() << "expected " << n << " strides and dilations";
  if (failed(checkWindowValues(c, "kernel_shape", k, 1)) ||
      failed(checkWindowValues(c, "strides", strides, 1)) ||
      failed(checkWindowValues(c, "dilations", dilations, 1)))
    return failure();
  auto pads = windowPads(c, x.getShape().drop_front(2), k, strides, dilations);
  if (failed(pads))
    return failure();
  auto v = c.value(0);
  if (failed(v))
    return failure();
  bool isMax = c.opType() == "MaxPool";
  auto r = c.create1(
      isMax ? "dsc.max_pool" : "dsc.avg_pool", {*v},
      {c.array("kernel_shape", k), c.array("strides", strides),
       c.array("pads", *pads), c.array("dilations", dilations),
       c.boolean("ceil_mode", c.attrInt("ceil_mode", 0)),
       c.boolean("count_include_pad", c.attrInt("count_include_pad", 0))});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult batchNormOp(NodeContext &c) {
  auto present = presentOperands(c, 5);
  if (failed(present))
    return failure();
  SmallVector<Value> operands = std::move(*present);
  // ONNX lets scale/bias (T1) and mean/var (T2) have their own float type
  // (opset 15); dsc's batch-norm ops take one, X's: convert them here.
  Type element = cast<RankedTensorType>(operands[0].getType()).getElementType();
  for (unsigned i = 1; i < operands.size(); ++i) {
    if (cast<RankedTensorType>(operands[i].getType()).getElementType() ==
        element)
      continue;
    auto converted = c.create1("dsc.cast", {operands[i]},
                               {c.named("to", TypeAttr::get(element))});
    if (failed(converted))
      return failure();
    operands[i] = *converted;
  }
  double eps = c.attrFloat("epsilon", 1e-5);
  bool training = c.attrInt("training_mode", 0) != 0;
  if (!training) {
    auto r = c.create1("dsc.batch_norm", operands, {c.f64("epsilon", eps)});
    if (failed(r))
      return failure();
    c.setOutput(0, *r);
    return success();
  }
  auto op = c.create(
      "dsc.batch_norm_train", operands,
      {c.f64("epsilon", eps), c.f64("momentum", c.attrFloat("momentum", 0.9))});
  if (failed(op))
    return failure();
  for (unsigned i = 0; i < 3; ++i)
    c.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult layerNormOp(NodeContext &c) {
  auto present = presentOperands(c, 3);
  if (failed(present))
    return failure();
  SmallVector<Value> operands = std::move(*present);
  int64_t rank = c.type(0).getRank();
  auto axis = axisAttr(c, "axis", -1, rank);
  if (failed(axis))
    return failure();
  double eps = c.attrFloat("epsilon", 1e-5);
  auto r = c.create1("dsc.layer_norm", operands,
                     {c.i64("axis", *axis), c.f64("epsilon", eps)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  if (!c.outputUsed(1) && !c.outputUsed(2))
    return success();
  // The optional Mean and InvStdDev outputs, spelled out in dsc ops.
  Shape axes;
  for (int64_t d = *axis; d < rank; ++d)
    axes.push_back(d);
  auto reduce = [&](Value v) {
    return c.create1("dsc.reduce_mean", {v},
                     {c.array("axes", axes), c.boolean("keepdims", true)});
  };
  auto mean = reduce(operands[0]);
  if (failed(mean))
    return failure();
  c.setOutput(1, *mean);
  auto centered = c.create1("dsc.sub", {operands[0], *mean});
  if (failed(centered))
    return failure();
  auto sq = c.create1("dsc.mul", {*centered, *centered});
  if (failed(sq))
    return failure();
  auto var = reduce(*sq);
  if (failed(var))
    return failure();
  Type element = c.type(0).getElementType();
  Value epsV =
      c.materialize(HostTensor::ofFloats({eps}, {}, *fromMlirType(element)));
  auto shifted = c.create1("dsc.add", {*var, epsV});
  if (failed(shifted))
    return failure();
  auto root = c.create1("dsc.sqrt", {*shifted});
  if (failed(root))
    return failure();
  auto inv = c.create1("dsc.reciprocal", {*root});
  if (failed(inv))
    return failure();
  c.setOutput(2, *inv);
  return success();
}

LogicalResult softmaxOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto axis = axisAttr(c, "axis", -1, c.type(0).getRank());
  if (failed(axis))
    return failure();
  auto r =
      c.create1(c.opType() == "Softmax" ? "dsc.softmax" : "dsc.log_softmax",
                {*x}, {c.i64("axis", *axis)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult classLossOp(NodeContext &c) {
  auto present = presentOperands(c, 3);
  if (failed(present))
    return failure();
  SmallVector<Value> operands = std::move(*present);
  SmallVector<NamedAttribute> attrs{
      c.str("reduction", c.attrString("reduction", "mean"))};
  if (c.hasAttr("ignore_index"))
    attrs.push_back(c.i64("ignore_index", c.attrInt("ignore_index", 0)));
  bool sce = c.opType() == "SoftmaxCrossEntropyLoss";
  // dsc.softmax_cross_entropy of 16-bit scores weighs its classes in f32, the
  // type it computes the loss in; ONNX gives the weights the scores' type.
  Type scoresType = getElementTypeOrSelf(operands[0].getType());
  if (sce && operands.size() > 2 &&
      (scoresType.isBF16() || scoresType.isF16()) &&
      getElementTypeOrSelf(operands[2].getType()) == scoresType) {
    auto w =
        c.create1("dsc.cast", {operands[2]},
                  {c.named("to", TypeAttr::get(Float32Type::get(c.ctx())))});
    if (failed(w))
      return failure();
    operands[2] = *w;
  }
  auto r = c.create1(sce ? "dsc.softmax_cross_entropy" : "dsc.nll_loss",
                     operands, attrs);
  if (failed(r))
    return failure();
  // dsc.softmax_cross_entropy of 16-bit scores computes and returns an f32
  // loss; ONNX's is of the scores' type.
  if (getElementTypeOrSelf(r->getType()) != scoresType) {
    r = c.create1("dsc.cast", {*r}, {c.named("to", TypeAttr::get(scoresType))});
    if (failed(r))
      return failure();
  }
  c.setOutput(0, *r);
  if (sce && c.outputUsed(1)) {
    auto lp = c.create1("dsc.log_softmax", {operands[0]}, {c.i64("axis", 1)});
    if (failed(lp))
      return failure();
    c.setOutput(1, *lp);
  }
  return success();
}

LogicalResult reduceOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto axes = reduceAxes(c, c.type(0).getRank());
  if (failed(axes))
    return failure();
  if (!*axes) {
    c.setOutput(0, *x);
    return success();
  }
  static const llvm::StringMap<const char *> names = {
      {"ReduceSum", "dsc.reduce_sum"},
      {"ReduceMean", "dsc.reduce_mean"},
      {"ReduceMax", "dsc.reduce_max"},
      {"ReduceMin", "dsc.reduce_min"},
      {"ReduceProd", "dsc.reduce_prod"}};
  auto r = c.create1(names.lookup(c.opType()), {*x},
                     {c.array("axes", **axes),
                      c.boolean("keepdims", c.attrInt("keepdims", 1))});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

FailureOr<Value> reshapeTo(NodeContext &c, Value x, ArrayRef<int64_t> shape) {
  if (cast<RankedTensorType>(x.getType()).getShape() == shape)
    return x;
  return c.create1("dsc.reshape", {x}, {c.array("shape", shape)});
}

LogicalResult reshapeOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto shape = c.opType() == "Reshape"
                   ? reshapeTarget(c, c.type(0).getShape())
                   : reshapeLikeTarget(c, c.type(0).getShape());
  if (failed(shape))
    return failure();
  auto r = reshapeTo(c, *x, *shape);
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult transposeOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto perm = transposePerm(c, c.type(0).getRank());
  if (failed(perm))
    return failure();
  auto r = c.create1("dsc.transpose", {*x}, {c.array("perm", *perm)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult expandOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto target = expandTarget(c, c.type(0).getShape());
  if (failed(target))
    return failure();
  if (*target == Shape(c.type(0).getShape())) {
    c.setOutput(0, *x);
    return success();
  }
  auto r = c.create1("dsc.expand", {*x}, {c.array("shape", *target)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult sliceOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto p = sliceParams(c, c.type(0).getShape());
  if (failed(p))
    return failure();
  bool whole = p->sizes == Shape(c.type(0).getShape()) &&
               llvm::all_of(p->strides, [](int64_t s) { return s == 1; });
  if (whole) {
    c.setOutput(0, *x);
    return success();
  }
  auto r =
      c.create1("dsc.slice", {*x},
                {c.array("offsets", p->offsets), c.array("sizes", p->sizes),
                 c.array("strides", p->strides)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult concatOp(NodeContext &c) {
  SmallVector<Value> operands;
  Type element;
  for (size_t i = 0; i < c.numInputs(); ++i)
    if (c.hasInput(i) && !c.isConstant(i))
      element = c.type(i).getElementType();
  for (size_t i = 0; i < c.numInputs(); ++i) {
    if (!c.hasInput(i))
      continue;
    // Empty pieces contribute nothing.
    if (c.type(i).getNumElements() == 0 && c.numInputs() > 1)
      continue;
    auto v = element ? valueAs(c, i, element) : c.value(i);
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  if (operands.size() == 1) {
    c.setOutput(0, operands[0]);
    return success();
  }
  auto axis = axisAttr(c, "axis", 0, c.type(0).getRank());
  if (failed(axis))
    return failure();
  auto r = c.create1("dsc.concat", operands, {c.i64("axis", *axis)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult splitOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto shape = c.type(0).getShape();
  auto axis = axisAttr(c, "axis", 0, shape.size());
  if (failed(axis))
    return failure();
  auto sizes = splitSizes(c, shape, *axis, c.numOutputs());
  if (failed(sizes))
    return failure();
  auto op = c.create("dsc.split", {*x},
                     {c.i64("axis", *axis), c.array("sizes", *sizes)});
  if (failed(op))
    return failure();
  for (unsigned i = 0; i < (*op)->getNumResults(); ++i)
    c.setOutput(i, (*op)->getResult(i));
  return success();
}

// A sequence becomes one SSA value per element; this bounds how many.
constexpr int64_t kMaxSequenceLength = kMaxPieces;

LogicalResult splitToSequenceOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  Shape shape(c.type(0).getShape());
  auto axis = axisAttr(c, "axis", 0, shape.size());
  if (failed(axis))
    return failure();
  bool keepdims = c.attrInt("keepdims", 1) != 0;
  Shape sizes;
  int64_t dim = shape[*axis];
  if (c.hasInput(1)) {
    auto t = c.constant(1, "split");
    if (failed(t))
      return failure();
    if (t->shape.empty()) {
      int64_t chunk = t->intAt(0);
      if (chunk <= 0)
        return c.error() << "split size must be positive";
      if (dim / chunk >= kMaxSequenceLength)
        return c.error() << "splits dim " << dim << " into pieces of " << chunk
                         << ": more than " << kMaxSequenceLength
                         << " pieces, which dsc does not unroll";
      for (int64_t left = dim; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    } else {
      for (int64_t s : t->asInts())
        sizes.push_back(s);
      // The sizes Split checks (the piece count is the list's own).
      if (failed(checkSplitSizes(c, sizes, dim, sizes.size())))
        return failure();
      if (int64_t(sizes.size()) > kMaxSequenceLength)
        return c.error() << "splits dim " << dim << " into " << sizes.size()
                         << " pieces, more than " << kMaxSequenceLength
                         << ", which dsc does not unroll";
    }
    keepdims = true; // keepdims is ignored when split is given
  } else {
    if (dim > kMaxSequenceLength)
      return c.error() << "splits dim " << dim << " into " << dim
                       << " pieces, more than " << kMaxSequenceLength
                       << ", which dsc does not unroll";
    sizes.assign(dim, 1);
  }
  auto op = c.create("dsc.split", {*x},
                     {c.i64("axis", *axis), c.array("sizes", sizes)});
  if (failed(op))
    return failure();
  std::vector<ImportValue> seq;
  for (Value piece : (*op)->getResults()) {
    Value v = piece;
    if (!keepdims) {
      Shape squeezed(cast<RankedTensorType>(piece.getType()).getShape());
      squeezed.erase(squeezed.begin() + *axis);
      auto r = reshapeTo(c, piece, squeezed);
      if (failed(r))
        return failure();
      v = *r;
    }
    seq.push_back(ImportValue{v, std::nullopt, std::nullopt});
  }
  c.setOutput(0, ImportValue{Value(), std::nullopt, std::move(seq)});
  return success();
}

LogicalResult sequenceAtOp(NodeContext &c) {
  const ImportValue &in = c.input(0);
  if (!in.sequence)
    return c.error() << "input #0 is not a sequence";
  auto pos = c.scalarConstant(1, "position");
  if (failed(pos))
    return failure();
  int64_t n = in.sequence->size(), p = pos->intAt(0);
  if (p < -n || p >= n)
    return c.error() << "position " << p << " out of range for a sequence of "
                     << n;
  c.setOutput(0, ImportValue((*in.sequence)[p < 0 ? p + n : p]));
  return success();
}

LogicalResult gatherOp(NodeContext &c) {
  auto data = c.value(0);
  if (failed(data))
    return failure();
  RankedTensorType dt = c.type(0);
  auto axis = gatherAxis(c, dt.getRank());
  if (failed(axis))
    return failure();
  Value indices;
  if (c.isConstant(1)) {
    // Constant indices are checked and made non-negative here.
    HostTensor idx = *c.input(1).constant;
    int64_t dim = dt.getDimSize(*axis);
    HostTensor norm = idx.castTo(ElemKind::I64);
    for (auto &v : norm.ints) {
      if (v < -dim || v >= dim)
        return c.error() << "index " << v << " out of range for dim of size "
                         << dim;
      if (v < 0)
        v += dim;
    }
    indices = c.materialize(norm);
  } else {
    auto v = c.value(1);
    if (failed(v))
      return failure();
    indices = *v;
  }
  auto r = c.create1("dsc.gather", {*data, indices}, {c.i64("axis", *axis)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult triluOp(NodeContext &c) {
  int64_t k = 0;
  if (c.hasInput(1)) {
    auto t = c.scalarConstant(1, "k");
    if (failed(t))
      return failure();
    k = t->intAt(0);
  }
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto r = c.create1(
      "dsc.trilu", {*x},
      {c.boolean("upper", c.attrInt("upper", 1) != 0), c.i64("k", k)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult cumSumOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto p = cumSumParams(c, c.type(0).getRank());
  if (failed(p))
    return failure();
  NamedAttribute attrs[] = {c.i64("axis", p->axis),
                            c.boolean("exclusive", p->exclusive),
                            c.boolean("reverse", p->reverse)};
  auto r = c.create1("dsc.cumsum", {*x}, attrs);
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

/// Tile as data movement dsc already has: each dim d of size n repeated r
/// times is a new dim of size r in front of it (reshape to [.., 1, n, ..],
/// expand to [.., r, n, ..]), then the pairs merge (reshape to r * n).
/// Its gradient is then expand's (a sum over the copies).
LogicalResult tileOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = c.type(0).getShape();
  auto p = tileParams(c, shape);
  if (failed(p))
    return failure();
  if (p->shape == Shape(shape)) {
    c.setOutput(0, *x);
    return success();
  }
  Shape split, expanded;
  for (auto [n, r] : llvm::zip(shape, p->repeats)) {
    split.append({int64_t(1), n});
    expanded.append({r, n});
  }
  auto s = reshapeTo(c, *x, split);
  if (failed(s))
    return failure();
  auto e = c.create1("dsc.expand", {*s}, {c.array("shape", expanded)});
  if (failed(e))
    return failure();
  auto r = reshapeTo(c, *e, p->shape);
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

/// ScatterND and ScatterElements with constant indices as data movement
/// dsc has: the result gathers each element from concat(flatten(data),
/// flatten(updates)) (so the gradient of both is the gather's scatter-add).
/// T5's and BART's shift of the labels into decoder inputs write it so.
LogicalResult scatterOp(NodeContext &c) {
  auto data = c.value(0), updates = c.value(2);
  if (failed(data) || failed(updates))
    return failure();
  auto idx = c.constant(1, "indices");
  if (failed(idx))
    return failure();
  auto dataType = c.type(0), updatesType = c.type(2);
  if (dataType.getElementType() != updatesType.getElementType())
    return c.error() << "data and updates differ in element type";
  auto sources =
      scatterSources(c, dataType.getShape(), *idx, updatesType.getShape());
  if (failed(sources))
    return failure();
  int64_t n = dataType.getNumElements();
  auto flatData = reshapeTo(c, *data, {n});
  auto flatUpdates = reshapeTo(c, *updates, {updatesType.getNumElements()});
  if (failed(flatData) || failed(flatUpdates))
    return failure();
  auto both =
      c.create1("dsc.concat", {*flatData, *flatUpdates}, {c.i64("axis", 0)});
  if (failed(both))
    return failure();
  Value indices = c.materialize(HostTensor::ofInts(*sources, {n}));
  auto picked = c.create1("dsc.gather", {*both, indices}, {c.i64("axis", 0)});
  if (failed(picked))
    return failure();
  auto r = reshapeTo(c, *picked, dataType.getShape());
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult padOp(NodeContext &c) {
  std::string mode = c.attrString("mode", "constant");
  if (mode != "constant")
    return c.error() << "pad mode '" << mode
                     << "' is not supported; only 'constant'";
  auto x = c.value(0);
  if (failed(x))
    return failure();
  int64_t rank = c.type(0).getRank();
  auto given = c.constant(1, "pads");
  if (failed(given))
    return failure();
  std::vector<int64_t> padsIn = given->asInts();
  // Opset 18 may name the axes the pads apply to.
  std::vector<int64_t> axes;
  if (c.hasInput(3)) {
    auto a = c.constant(3, "axes");
    if (failed(a))
      return failure();
    axes = a->asInts();
  } else {
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  if (padsIn.size() != 2 * axes.size())
    return c.error() << "pads has " << padsIn.size() << " entries for "
                     << axes.size() << " axes";
  Shape pads(2 * rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto axis = onnxAxis(axes[i], rank);
    if (failed(axis))
      return c.error() << "pad axis " << axes[i] << " out of range";
    pads[*axis] = padsIn[i];
    pads[*axis + rank] = padsIn[i + axes.size()];
  }
  // Pads may be negative (a crop) but, like window sizes, stay below 2^31 in
  // magnitude so that dim + begin + end cannot overflow.
  for (int64_t p : pads)
    if (p <= -kMaxWindowValue || p >= kMaxWindowValue)
      return c.error() << "pads " << formatShape(pads) << " holds " << p
                       << "; each entry must be in (-2^31, 2^31)";
  double value = 0.0;
  if (c.hasInput(2)) {
    auto v = c.scalarConstant(2, "constant_value");
    if (failed(v))
      return failure();
    value = v->floatAt(0);
  }
  auto r = c.create1("dsc.pad", {*x},
                     {c.array("pads", pads), c.f64("value", value)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

// GatherND with constant indices (what exporters write for advanced
// indexing) becomes a gather on the flattened leading dims.
LogicalResult gatherNDOp(NodeContext &c) {
  if (c.attrInt("batch_dims", 0) != 0)
    return c.error() << "batch_dims != 0 is not supported";
  auto idx = c.constant(1, "indices");
  if (failed(idx))
    return failure();
  auto data = c.value(0);
  if (failed(data))
    return failure();
  ArrayRef<int64_t> shape = c.type(0).getShape();
  int64_t m = idx->shape.empty() ? 0 : idx->shape.back();
  if (m < 1 || m > (int64_t)shape.size())
    return c.error() << "index tuples of length " << m << " for rank "
                     << shape.size();
  int64_t lead = productOf(shape.take_front(m));
  Shape flatShape{lead};
  flatShape.append(shape.begin() + m, shape.end());
  Shape lookupShape(idx->shape.begin(), idx->shape.end() - 1);
  std::vector<int64_t> flat;
  int64_t tuples = idx->numElements() / m;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t f = 0;
    for (int64_t d = 0; d < m; ++d) {
      int64_t i = idx->intAt(t * m + d);
      if (i < 0)
        i += shape[d];
      if (i < 0 || i >= shape[d])
        return c.error() << "index " << idx->intAt(t * m + d)
                         << " out of range for dim " << d;
      f = f * shape[d] + i;
    }
    flat.push_back(f);
  }
  auto flatData = reshapeTo(c, *data, flatShape);
  if (failed(flatData))
    return failure();
  Value indices = c.materialize(HostTensor::ofInts(flat, lookupShape));
  auto r = c.create1("dsc.gather", {*flatData, indices}, {c.i64("axis", 0)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

// GatherElements is a gather from the flattened data: with constant indices
// (HF's BERT gathers its token-type buffer by position) the flat indices
// are computed here; with indices computed at run time (a loss that gathers
// log-probabilities by label) by a few integer ops, an index out of range
// made one that the gather rejects. Its gradient is the gather's
// scatter-add either way.
FailureOr<Value> runtimeGatherElementsIndices(NodeContext &c, Value indices,
                                              ArrayRef<int64_t> dataShape) {
  OpBuilder &b = c.builder();
  auto idxType = cast<RankedTensorType>(indices.getType());
  int64_t rank = dataShape.size();
  if (idxType.getRank() != rank || rank == 0)
    return c.error() << "indices must have the rank of data (>= 1)";
  auto axis = axisAttr(c, "axis", 0, rank);
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> is = idxType.getShape();
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && is[d] > dataShape[d])
      return c.error() << "indices " << formatShape(is) << " exceed data "
                       << formatShape(dataShape) << " in dim " << d;
  // Flat offset of every position without its axis coordinate.
  Shape strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dataShape[d + 1];
  std::vector<int64_t> base;
  SmallVector<int64_t> pos(rank, 0);
  for (int64_t e = 0, n = idxType.getNumElements(); e < n; ++e) {
    int64_t flat = 0;
    for (int64_t d = 0; d < rank; ++d)
      flat += d == *axis ? 0 : pos[d] * strides[d];
    base.push_back(flat);
    for (int64_t d = rank - 1; d >= 0 && ++pos[d] == is[d]; --d)
      pos[d] = 0;
  }
  auto i64 = [&](int64_t v) {
    return c.materialize(HostTensor::ofInts({v}, {}));
  };
  Value idx = indices;
  if (!idxType.getElementType().isInteger(64))
    idx = dsc::CastOp::create(b, c.loc(), idx, TypeAttr::get(b.getI64Type()));
  int64_t dim = dataShape[*axis];
  int64_t total = strides[0] * dataShape[0];
  Value negative = dsc::LessOp::create(b, c.loc(), idx, i64(0));
  Value wrapped = dsc::WhereOp::create(
      b, c.loc(), negative, dsc::AddOp::create(b, c.loc(), idx, i64(dim)), idx);
  Value outside = dsc::OrOp::create(
      b, c.loc(), dsc::LessOp::create(b, c.loc(), wrapped, i64(0)),
      dsc::GreaterEqualOp::create(b, c.loc(), wrapped, i64(dim)));
  Value flat = dsc::AddOp::create(
      b, c.loc(), dsc::MulOp::create(b, c.loc(), wrapped, i64(strides[*axis])),
      c.materialize(HostTensor::ofInts(base, is)));
  // -(total + 1) is outside every gather range: the gather reports it.
  return Value(dsc::WhereOp::create(b, c.loc(), outside, i64(-(total + 1)),
                                    flat));
}

LogicalResult gatherElementsOp(NodeContext &c) {
  auto data = c.value(0);
  if (failed(data))
    return failure();
  ArrayRef<int64_t> shape = c.type(0).getShape();
  FailureOr<Value> indices = failure();
  if (c.isConstant(1)) {
    auto idx = c.constant(1, "indices");
    if (failed(idx))
      return failure();
    auto sources = gatherElementsSources(c, shape, *idx);
    if (failed(sources))
      return failure();
    indices = c.materialize(HostTensor::ofInts(*sources, idx->shape));
  } else {
    auto idx = c.value(1);
    if (failed(idx))
      return failure();
    indices = runtimeGatherElementsIndices(c, *idx, shape);
  }
  if (failed(indices))
    return failure();
  auto flat = reshapeTo(c, *data, {c.type(0).getNumElements()});
  if (failed(flat))
    return failure();
  auto r = c.create1("dsc.gather", {*flat, *indices}, {c.i64("axis", 0)});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

// IsNaN(x) is x != x; IsInf compares with the infinities it detects.
LogicalResult isNaNOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  auto same = c.create1("dsc.equal", {*x, *x}, {});
  if (failed(same))
    return failure();
  auto r = c.create1("dsc.not", {*same}, {});
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult isInfOp(NodeContext &c) {
  auto x = c.value(0);
  if (failed(x))
    return failure();
  bool neg = c.attrInt("detect_negative", 1) != 0;
  bool pos = c.attrInt("detect_positive", 1) != 0;
  Type elem = c.type(0).getElementType();
  if (!isa<FloatType>(elem))
    return c.error() << "IsInf of a non-float tensor";
  auto inf = [&](bool negative) {
    auto t = RankedTensorType::get({}, elem);
    double v = negative ? -std::numeric_limits<double>::infinity()
                        : std::numeric_limits<double>::infinity();
    return dsc::ConstantOp::create(
        c.builder(), c.loc(),
        SplatElementsAttr::get(t, FloatAttr::get(elem, v)));
  };
  FailureOr<Value> r = failure();
  if (pos && neg) {
    auto a = c.create1("dsc.abs", {*x}, {});
    if (failed(a))
      return failure();
    r = c.create1("dsc.equal", {*a, inf(false)}, {});
  } else if (pos || neg) {
    r = c.create1("dsc.equal", {*x, inf(neg)}, {});
  } else {
    // Detects nothing: all false.
    auto t = RankedTensorType::get(c.type(0).getShape(), c.builder().getI1Type());
    r = Value(dsc::ConstantOp::create(
        c.builder(), c.loc(),
        SplatElementsAttr::get(t, c.builder().getBoolAttr(false))));
  }
  if (failed(r))
    return failure();
  c.setOutput(0, *r);
  return success();
}

LogicalResult constantOfShapeOp(NodeContext &c) {
  // Reached only when the result is too large to fold: a splat constant.
  // The program will hold it, so it is bounded as a folded one is.
  auto shape = c.shapeConstant(0, "shape");
  if (failed(shape))
    return failure();
  auto value = constantOfShapeValue(c);
  if (failed(value) || failed(c.checkConstantSize(*shape, value->kind)))
    return failure();
  auto type = RankedTensorType::get(*shape, toMlirType(c.ctx(), value->kind));
  Attribute elem =
      value->isFloat()
          ? (Attribute)FloatAttr::get(type.getElementType(), value->floatAt(0))
          : (Attribute)IntegerAttr::get(type.getElementType(), value->intAt(0));
  Value v = dsc::ConstantOp::create(c.builder(), c.loc(),
                                    SplatElementsAttr::get(type, elem));
  c.setOutput(0, v);
  return success();
}

} // namespace

bool isFoldOnlyOp(llvm::StringRef op) {
  return op == "Shape" || op == "Size" || op == "Range" || op == "Constant";
}

namespace {

// Shape computations fold on the host; reaching a handler means an input
// was computed at run time, or the result exceeded the folding limits.
LogicalResult mustFold(NodeContext &c) {
  for (size_t i = 0; i < c.numInputs(); ++i)
    if (c.hasInput(i) && !c.isConstant(i))
      return c.error() << "input #" << i << " '" << c.node().input(i)
                       << "' is computed at run time, but this op must be "
                          "evaluated at compile time (dsc compiles static "
                          "shapes)";
  return c.error() << "its result is larger than dsc folds at compile time";
}

} // namespace

const llvm::StringMap<NodeHandler> &nodeHandlers() {
  static const llvm::StringMap<NodeHandler> table = [] {
    llvm::StringMap<NodeHandler> t;
    // Elementwise.
    for (auto [onnx, dsc] :
         std::initializer_list<std::pair<const char *, const char *>>{
             {"Neg", "dsc.neg"},
             {"Abs", "dsc.abs"},
             {"Exp", "dsc.exp"},
             {"Log", "dsc.log"},
             {"Sqrt", "dsc.sqrt"},
             {"Reciprocal", "dsc.reciprocal"},
             {"Tanh", "dsc.tanh"},
             {"Erf", "dsc.erf"},
             {"Sigmoid", "dsc.sigmoid"},
             {"Relu", "dsc.relu"},
             {"Floor", "dsc.floor"},
             {"Ceil", "dsc.ceil"},
             {"Sin", "dsc.sin"},
             {"Cos", "dsc.cos"},
             {"Softplus", "dsc.softplus"},
             {"Not", "dsc.not"}})
      t[onnx] = unary(dsc);
    for (auto [onnx, dsc] :
         std::initializer_list<std::pair<const char *, const char *>>{
             {"Add", "dsc.add"},
             {"Sub", "dsc.sub"},
             {"Mul", "dsc.mul"},
             {"Div", "dsc.div"},
             {"Pow", "dsc.pow"},
             {"Max", "dsc.max"},
             {"Min", "dsc.min"},
             {"Sum", "dsc.add"},
             {"And", "dsc.and"},
             {"Or", "dsc.or"},
             {"Xor", "dsc.xor"},
             {"Equal", "dsc.equal"},
             {"Less", "dsc.less"},
             {"LessOrEqual", "dsc.less_equal"},
             {"Greater", "dsc.greater"},
             {"GreaterOrEqual", "dsc.greater_equal"}})
      t[onnx] = binary(dsc);
    t["Identity"] = identity;
    t["Cast"] = castOp;
    t["CastLike"] = castOp;
    t["Where"] = whereOp;
    t["Clip"] = clipOp;
    t["LeakyRelu"] = leakyReluOp;
    t["Gelu"] = geluOp;
    t["Dropout"] = dropoutOp;
    // Linear algebra, convolution, pooling.
    t["MatMul"] = matmulOp;
    t["Gemm"] = gemmOp;
    t["Conv"] = convOp;
    t["MaxPool"] = poolOp;
    t["AveragePool"] = poolOp;
    t["GlobalAveragePool"] = unary("dsc.global_avg_pool");
    t["GlobalMaxPool"] = unary("dsc.global_max_pool");
    // Normalization, softmax, losses.
    t["BatchNormalization"] = batchNormOp;
    t["LayerNormalization"] = layerNormOp;
    t["Softmax"] = softmaxOp;
    t["LogSoftmax"] = softmaxOp;
    t["SoftmaxCrossEntropyLoss"] = classLossOp;
    t["NegativeLogLikelihoodLoss"] = classLossOp;
    // Reductions.
    for (const char *r :
         {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})
      t[r] = reduceOp;
    // Data movement.
    t["Reshape"] = reshapeOp;
    t["Flatten"] = reshapeOp;
    t["Squeeze"] = reshapeOp;
    t["Unsqueeze"] = reshapeOp;
    t["Transpose"] = transposeOp;
    t["Expand"] = expandOp;
    t["Slice"] = sliceOp;
    t["Concat"] = concatOp;
    t["Split"] = splitOp;
    t["SplitToSequence"] = splitToSequenceOp;
    t["SequenceAt"] = sequenceAtOp;
    t["Gather"] = gatherOp;
    t["Trilu"] = triluOp;
    t["CumSum"] = cumSumOp;
    t["Tile"] = tileOp;
    t["ScatterND"] = scatterOp;
    t["ScatterElements"] = scatterOp;
    t["Pad"] = padOp;
    t["GatherND"] = gatherNDOp;
    t["GatherElements"] = gatherElementsOp;
    t["IsNaN"] = isNaNOp;
    t["IsInf"] = isInfOp;
    t["ConstantOfShape"] = constantOfShapeOp;
    // Evaluated at compile time only.
    for (const char *f : {"Shape", "Size", "Range", "Constant"}) {
      assert(isFoldOnlyOp(f) && "isFoldOnlyOp lists the ops of mustFold");
      t[f] = mustFold;
    }
    return t;
  }();
  return table;
}

//===----------------------------------------------------------------------===//
// Signatures
//===----------------------------------------------------------------------===//
//
// What a node of each op may look like, as the ONNX schemas declare it: input
// and output counts, and every attribute with its type. Where a signature
// changed between opsets 13 and 23 the entry is the union (Reduce* take
// `axes` as an input from opset 18, Split gains `num_outputs`); the handlers
// read either form. The table is written out rather than asked of libonnx's
// OpSchemaRegistry because the libonnx Debian ships (1.12) knows opsets up to
// 17 only (no Gelu, the opset-18 Reduce* and Split); it follows
// onnx.defs.get_schema of ONNX 1.23.

namespace {

using AttrType = onnx::AttributeProto::AttributeType;
constexpr int kUnbounded = std::numeric_limits<int>::max();

struct AttrSpec {
  const char *name;
  AttrType type;
  bool required = false;
};

struct OpSignature {
  int minInputs, maxInputs;
  int minOutputs, maxOutputs;
  std::vector<AttrSpec> attrs;
  /// Variadic ops (Concat, Max, Min, Sum) take one homogeneous list: every
  /// input in it is required. Otherwise only the first minInputs are.
  bool variadic() const { return maxInputs == kUnbounded; }
};

AttrSpec attrInt(const char *n) { return {n, onnx::AttributeProto::INT}; }
AttrSpec attrFloat(const char *n) { return {n, onnx::AttributeProto::FLOAT}; }
AttrSpec attrString(const char *n) { return {n, onnx::AttributeProto::STRING}; }
AttrSpec attrInts(const char *n) { return {n, onnx::AttributeProto::INTS}; }
AttrSpec attrTensor(const char *n) { return {n, onnx::AttributeProto::TENSOR}; }
AttrSpec required(AttrSpec a) {
  a.required = true;
  return a;
}

const llvm::StringMap<OpSignature> &opSignatures() {
  static const llvm::StringMap<OpSignature> table = [] {
    llvm::StringMap<OpSignature> t;
    for (const char *op : {"Neg",           "Abs",      "Exp",
                           "Log",           "Sqrt",     "Reciprocal",
                           "Tanh",          "Erf",      "Sigmoid",
                           "Relu",          "Floor",    "Ceil",
                           "Sin",           "Cos",      "Softplus",
                           "Not",           "Identity", "GlobalAveragePool",
                           "GlobalMaxPool", "Size"})
      t[op] = {1, 1, 1, 1, {}};
    for (const char *op :
         {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal",
          "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "MatMul"})
      t[op] = {2, 2, 1, 1, {}};
    for (const char *op : {"Max", "Min", "Sum"})
      t[op] = {1, kUnbounded, 1, 1, {}};
    t["Cast"] = {1, 1, 1, 1, {required(attrInt("to")), attrInt("saturate")}};
    t["CastLike"] = {2, 2, 1, 1, {attrInt("saturate")}};
    t["Where"] = {3, 3, 1, 1, {}};
    t["Clip"] = {1, 3, 1, 1, {}};
    t["LeakyRelu"] = {1, 1, 1, 1, {attrFloat("alpha")}};
    t["Gelu"] = {1, 1, 1, 1, {attrString("approximate")}};
    t["Dropout"] = {1, 3, 1, 2, {attrInt("seed")}};
    t["Gemm"] = {2,
                 3,
                 1,
                 1,
                 {attrFloat("alpha"), attrFloat("beta"), attrInt("transA"),
                  attrInt("transB")}};
    t["Conv"] = {2,
                 3,
                 1,
                 1,
                 {attrString("auto_pad"), attrInts("dilations"),
                  attrInt("group"), attrInts("kernel_shape"), attrInts("pads"),
                  attrInts("strides")}};
    std::vector<AttrSpec> pool = {
        attrString("auto_pad"), attrInt("ceil_mode"),
        attrInts("dilations"),  required(attrInts("kernel_shape")),
        attrInts("pads"),       attrInts("strides")};
    t["AveragePool"] = {1, 1, 1, 1, pool};
    t["AveragePool"].attrs.push_back(attrInt("count_include_pad"));
    t["MaxPool"] = {1, 1, 1, 2, pool};
    t["MaxPool"].attrs.push_back(attrInt("storage_order"));
    t["BatchNormalization"] = {5,
                               5,
                               1,
                               5,
                               {attrFloat("epsilon"), attrFloat("momentum"),
                                attrInt("training_mode")}};
    t["LayerNormalization"] = {
        2,
        3,
        1,
        3,
        {attrInt("axis"), attrFloat("epsilon"), attrInt("stash_type")}};
    t["Softmax"] = {1, 1, 1, 1, {attrInt("axis")}};
    t["LogSoftmax"] = {1, 1, 1, 1, {attrInt("axis")}};
    t["SoftmaxCrossEntropyLoss"] = {
        2, 3, 1, 2, {attrInt("ignore_index"), attrString("reduction")}};
    t["NegativeLogLikelihoodLoss"] = {
        2, 3, 1, 1, {attrInt("ignore_index"), attrString("reduction")}};
    for (const char *op :
         {"ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd"})
      t[op] = {1,
               2,
               1,
               1,
               {attrInts("axes"), attrInt("keepdims"),
                attrInt("noop_with_empty_axes")}};
    t["ReduceSum"] = {
        1, 2, 1, 1, {attrInt("keepdims"), attrInt("noop_with_empty_axes")}};
    t["Reshape"] = {2, 2, 1, 1, {attrInt("allowzero")}};
    t["Flatten"] = {1, 1, 1, 1, {attrInt("axis")}};
    t["Squeeze"] = {1, 2, 1, 1, {}};
    t["Unsqueeze"] = {2, 2, 1, 1, {}};
    t["Transpose"] = {1, 1, 1, 1, {attrInts("perm")}};
    t["Expand"] = {2, 2, 1, 1, {}};
    t["Slice"] = {3, 5, 1, 1, {}};
    t["Concat"] = {1, kUnbounded, 1, 1, {required(attrInt("axis"))}};
    t["Split"] = {
        1, 2, 1, kUnbounded, {attrInt("axis"), attrInt("num_outputs")}};
    t["SplitToSequence"] = {1, 2, 1, 1, {attrInt("axis"), attrInt("keepdims")}};
    t["SequenceAt"] = {2, 2, 1, 1, {}};
    t["Gather"] = {2, 2, 1, 1, {attrInt("axis")}};
    t["GatherND"] = {2, 2, 1, 1, {attrInt("batch_dims")}};
    t["GatherElements"] = {2, 2, 1, 1, {attrInt("axis")}};
    t["IsNaN"] = {1, 1, 1, 1, {}};
    t["IsInf"] = {1, 1, 1, 1, {attrInt("detect_negative"),
                               attrInt("detect_positive")}};
    t["Trilu"] = {1, 2, 1, 1, {attrInt("upper")}};
    t["CumSum"] = {2, 2, 1, 1, {attrInt("exclusive"), attrInt("reverse")}};
    t["Tile"] = {2, 2, 1, 1, {}};
    t["ScatterND"] = {3, 3, 1, 1, {attrString("reduction")}};
    t["ScatterElements"] = {
        3, 3, 1, 1, {attrInt("axis"), attrString("reduction")}};
    t["Pad"] = {2, 4, 1, 1, {attrString("mode")}};
    t["ConstantOfShape"] = {1, 1, 1, 1, {attrTensor("value")}};
    t["Shape"] = {1, 1, 1, 1, {attrInt("end"), attrInt("start")}};
    t["Range"] = {3, 3, 1, 1, {}};
    // Constant's value attributes; which one is given is checked by its
    // folder (exactly one, strings and sparse tensors unsupported).
    t["Constant"] = {0,
                     0,
                     1,
                     1,
                     {attrTensor("value"),
                      {"sparse_value", onnx::AttributeProto::SPARSE_TENSOR},
                      attrFloat("value_float"),
                      {"value_floats", onnx::AttributeProto::FLOATS},
                      attrInt("value_int"),
                      attrInts("value_ints"),
                      attrString("value_string"),
                      {"value_strings", onnx::AttributeProto::STRINGS}}};
    return t;
  }();
  return table;
}

// The value fields an attribute fills, as AttributeProto types.
llvm::SmallVector<AttrType> storedTypes(const onnx::AttributeProto &a) {
  llvm::SmallVector<AttrType> r;
  if (a.has_f())
    r.push_back(onnx::AttributeProto::FLOAT);
  if (a.has_i())
    r.push_back(onnx::AttributeProto::INT);
  if (a.has_s())
    r.push_back(onnx::AttributeProto::STRING);
  if (a.has_t())
    r.push_back(onnx::AttributeProto::TENSOR);
  if (a.has_g())
    r.push_back(onnx::AttributeProto::GRAPH);
  if (a.has_sparse_tensor())
    r.push_back(onnx::AttributeProto::SPARSE_TENSOR);
  if (a.floats_size())
    r.push_back(onnx::AttributeProto::FLOATS);
  if (a.ints_size())
    r.push_back(onnx::AttributeProto::INTS);
  if (a.strings_size())
    r.push_back(onnx::AttributeProto::STRINGS);
  if (a.tensors_size())
    r.push_back(onnx::AttributeProto::TENSORS);
  if (a.graphs_size())
    r.push_back(onnx::AttributeProto::GRAPHS);
  if (a.sparse_tensors_size())
    r.push_back(onnx::AttributeProto::SPARSE_TENSORS);
  return r;
}

bool isListType(AttrType t) {
  return t == onnx::AttributeProto::FLOATS || t == onnx::AttributeProto::INTS ||
         t == onnx::AttributeProto::STRINGS ||
         t == onnx::AttributeProto::TENSORS ||
         t == onnx::AttributeProto::GRAPHS ||
         t == onnx::AttributeProto::SPARSE_TENSORS;
}

const char *attrTypeName(int t) {
  if (!onnx::AttributeProto::AttributeType_IsValid(t))
    return "UNKNOWN";
  return onnx::AttributeProto::AttributeType_Name((AttrType)t).c_str();
}

LogicalResult checkAttribute(NodeContext &c, const onnx::AttributeProto &a,
                             const AttrSpec &spec) {
  if (a.type() != spec.type)
    return c.error() << "attribute '" << a.name() << "' has type "
                     << attrTypeName(a.type()) << ", but ONNX declares "
                     << attrTypeName(spec.type) << " for " << c.opType()
                     << "; re-export the model";
  // The declared type must also be where the value is: a scalar fills its
  // one field, a list fills no other field (an empty list is allowed).
  llvm::SmallVector<AttrType> stored = storedTypes(a);
  bool ok =
      isListType(spec.type)
          ? llvm::all_of(stored, [&](AttrType t) { return t == spec.type; })
          : stored.size() == 1 && stored[0] == spec.type;
  if (!ok) {
    auto diag = c.error() << "attribute '" << a.name() << "' is declared "
                          << attrTypeName(spec.type) << " but holds ";
    if (stored.empty())
      diag << "no value";
    for (auto [i, t] : llvm::enumerate(stored))
      diag << (i ? " and " : "") << attrTypeName(t);
    return diag << "; the model file is corrupt: re-export it";
  }
  return success();
}

} // namespace

LogicalResult checkNodeSignature(NodeContext &c) {
  const auto &table = opSignatures();
  auto it = table.find(c.opType());
  if (it == table.end())
    return c.error() << "has no signature in dsc's table (a dsc bug: add "
                        "one next to its handler in OnnxOps.cpp)";
  const OpSignature &sig = it->second;
  const onnx::NodeProto &n = c.node();
  auto range = [](int lo, int hi) {
    if (lo == hi)
      return std::to_string(lo);
    if (hi == kUnbounded)
      return std::to_string(lo) + " or more";
    return std::to_string(lo) + " to " + std::to_string(hi);
  };
  auto count = [](int k, const char *what) {
    return std::to_string(k) + " " + what + (k == 1 ? "" : "s");
  };
  if (n.input_size() < sig.minInputs || n.input_size() > sig.maxInputs)
    return c.error() << "has " << count(n.input_size(), "input") << "; "
                     << c.opType() << " takes "
                     << range(sig.minInputs, sig.maxInputs);
  if (n.output_size() < sig.minOutputs || n.output_size() > sig.maxOutputs)
    return c.error() << "has " << count(n.output_size(), "output") << "; "
                     << c.opType() << " gives "
                     << range(sig.minOutputs, sig.maxOutputs);
  int requiredInputs = sig.variadic() ? n.input_size() : sig.minInputs;
  for (int i = 0; i < requiredInputs; ++i)
    if (n.input(i).empty())
      return c.error() << "input #" << i << " is required but its name is "
                       << "empty (''); only optional inputs may be omitted";
  llvm::StringSet<> seen;
  for (const auto &a : n.attribute()) {
    if (!seen.insert(a.name()).second)
      return c.error() << "attribute '" << a.name() << "' is given twice";
    auto spec = llvm::find_if(
        sig.attrs, [&](const AttrSpec &s) { return a.name() == s.name; });
    if (spec == sig.attrs.end())
      return c.error() << "has attribute '" << a.name()
                       << "', which ONNX does not define for " << c.opType()
                       << " (opsets 13 to 23); remove it or re-export";
    if (failed(checkAttribute(c, a, *spec)))
      return failure();
  }
  for (const AttrSpec &spec : sig.attrs)
    if (spec.required && !seen.contains(spec.name))
      return c.error() << "needs attribute '" << spec.name << "' ("
                       << attrTypeName(spec.type) << ")";
  return success();
}

} // namespace dsc
