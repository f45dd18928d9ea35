//===- data_movement.cpp - CPU kernels: reshape, transpose, slice, ... ----===//
//
// Dtype-agnostic: elements are moved as bytes, except the scatter-add of
// gatherBackward and the pad value, which need the element type.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_layout.h"
#include "cpu/kernel_util.h"
#include "cpu/kernels.h"

#include <cstring>
#include <type_traits>

namespace dsc::cpu {

using namespace detail;

namespace {

/// Copies out[i] = in[w.off[0]] for every out element, es bytes each.
void gatherBytes(const Tensor &in, const Tensor &out, Walker<1> &w,
                 int64_t base) {
  size_t es = dtypeSize(out.dtype);
  const char *src = in.as<char>();
  char *dst = out.as<char>();
  int64_t n = out.numel();
  switch (es) {
  case 8:
    for (int64_t i = 0; i < n; ++i, w.next())
      std::memcpy(dst + 8 * i, src + 8 * (base + w.off[0]), 8);
    break;
  case 4:
    for (int64_t i = 0; i < n; ++i, w.next())
      std::memcpy(dst + 4 * i, src + 4 * (base + w.off[0]), 4);
    break;
  default:
    for (int64_t i = 0; i < n; ++i, w.next())
      std::memcpy(dst + es * i, src + es * (base + w.off[0]), es);
  }
}

Status checkRanks(const Call &call, std::initializer_list<const Tensor *> ts) {
  for (const Tensor *t : ts)
    if (!validRank(*t))
      return call.fail("rank above 8");
  return Status();
}

bool validPerm(I64s perm, int rank, std::array<int64_t, kMaxRank> &inverse) {
  if (static_cast<int>(perm.size()) != rank)
    return false;
  bool seen[kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    int64_t p = perm[i];
    if (p < 0 || p >= rank || seen[p])
      return false;
    seen[p] = true;
    inverse[p] = i;
  }
  return true;
}

} // namespace

namespace detail {

Status checkReshape(Call &call, const Tensor &input, const Tensor &out) {
  call.arg("input", input).arg("out", out);
  if (Status st = checkRanks(call, {&input, &out}); !st.ok())
    return st;
  if (input.dtype != out.dtype || input.numel() != out.numel())
    return call.fail("dtype and element count must be kept");
  return Status();
}

Status checkTranspose(Call &call, const Tensor &input, I64s perm,
                      const Tensor &out,
                      std::array<int64_t, kMaxRank> &strides) {
  call.arg("input", input).arg("perm", perm).arg("out", out);
  if (Status st = checkRanks(call, {&input, &out}); !st.ok())
    return st;
  std::array<int64_t, kMaxRank> inverse{};
  if (!validPerm(perm, input.rank, inverse))
    return call.fail("perm is not a permutation of the input dims");
  if (out.dtype != input.dtype || out.rank != input.rank)
    return call.fail("result must have the input's dtype and rank");
  auto inStrides = stridesOf(input);
  strides.fill(0);
  for (int i = 0; i < out.rank; ++i) {
    if (out.shape[i] != input.shape[perm[i]])
      return call.fail("result dim " + std::to_string(i) + " must be " +
                       std::to_string(input.shape[perm[i]]));
    strides[i] = inStrides[perm[i]];
  }
  return Status();
}

Status checkExpand(Call &call, const Tensor &input, const Tensor &out,
                   std::array<int64_t, kMaxRank> &strides) {
  call.arg("input", input).arg("out", out);
  if (Status st = checkRanks(call, {&input, &out}); !st.ok())
    return st;
  if (input.dtype != out.dtype || !broadcastStrides(input, out, strides))
    return call.fail("input must broadcast to the result, same dtype");
  return Status();
}

} // namespace detail

Status reshape(const Tensor &input, const Tensor &out) {
  Call call("reshape");
  if (Status st = checkReshape(call, input, out); !st.ok())
    return st;
  if (input.data != out.data)
    std::memmove(out.data, input.data, input.nbytes());
  return Status();
}

Status transpose(const Tensor &input, I64s perm, const Tensor &out) {
  Call call("transpose");
  Walker<1> w{out.rank, out.shape, {}};
  if (Status st = checkTranspose(call, input, perm, out, w.strides[0]);
      !st.ok())
    return st;
  gatherBytes(input, out, w, 0);
  return Status();
}

Status transposeBackward(const Tensor &gradOut, I64s perm,
                         const Tensor &gradIn) {
  std::array<int64_t, kMaxRank> inverse{};
  if (!validRank(gradOut) || !validPerm(perm, gradOut.rank, inverse))
    return Call("transpose_backward")
        .arg("grad_out", gradOut)
        .arg("perm", perm)
        .fail("perm is not a permutation of the dims");
  return transpose(gradOut, I64s(inverse.data(), gradOut.rank), gradIn);
}

Status expand(const Tensor &input, const Tensor &out) {
  Call call("expand");
  Walker<1> w{out.rank, out.shape, {}};
  if (Status st = checkExpand(call, input, out, w.strides[0]); !st.ok())
    return st;
  gatherBytes(input, out, w, 0);
  return Status();
}

namespace {

/// Checks a strided slice and gives the strides and base offset of the
/// sliced elements inside `full`.
Status sliceLayout(const Call &call, const Tensor &full, I64s offsets,
                   I64s strides, const Tensor &part, SliceLayout &l) {
  if (Status st = checkRanks(call, {&full, &part}); !st.ok())
    return st;
  int rank = full.rank;
  if (part.rank != rank || static_cast<int>(offsets.size()) != rank ||
      static_cast<int>(strides.size()) != rank)
    return call.fail("offsets, strides and the slice need the input's rank");
  if (part.dtype != full.dtype)
    return call.fail("dtypes differ");
  auto fs = stridesOf(full);
  l = SliceLayout();
  for (int d = 0; d < rank; ++d) {
    int64_t size = part.shape[d];
    if (strides[d] == 0)
      return call.fail("stride of dim " + std::to_string(d) + " is zero");
    if (size == 0)
      continue;
    int64_t last = offsets[d] + (size - 1) * strides[d];
    if (offsets[d] < 0 || offsets[d] >= full.shape[d] || last < 0 ||
        last >= full.shape[d])
      return call.fail("dim " + std::to_string(d) + " reads outside [0, " +
                           std::to_string(full.shape[d]) + ")",
                       StatusCode::OutOfRange);
    l.base += offsets[d] * fs[d];
    l.strides[d] = strides[d] * fs[d];
  }
  return Status();
}

} // namespace

namespace detail {

Status checkSlice(Call &call, const Tensor &input, I64s offsets, I64s strides,
                  const Tensor &out, SliceLayout &layout) {
  call.arg("input", input)
      .arg("offsets", offsets)
      .arg("strides", strides)
      .arg("out", out);
  return sliceLayout(call, input, offsets, strides, out, layout);
}

Status checkSliceBackward(Call &call, const Tensor &gradOut, I64s offsets,
                          I64s strides, const Tensor &gradIn,
                          SliceLayout &layout) {
  call.arg("grad_out", gradOut)
      .arg("offsets", offsets)
      .arg("strides", strides)
      .arg("grad_in", gradIn);
  return sliceLayout(call, gradIn, offsets, strides, gradOut, layout);
}

} // namespace detail

Status slice(const Tensor &input, I64s offsets, I64s strides,
             const Tensor &out) {
  Call call("slice");
  SliceLayout l;
  if (Status st = checkSlice(call, input, offsets, strides, out, l); !st.ok())
    return st;
  Walker<1> w{out.rank, out.shape, {l.strides}};
  if (out.numel() > 0)
    gatherBytes(input, out, w, l.base);
  return Status();
}

Status sliceBackward(const Tensor &gradOut, I64s offsets, I64s strides,
                     const Tensor &gradIn) {
  Call call("slice_backward");
  SliceLayout l;
  if (Status st =
          checkSliceBackward(call, gradOut, offsets, strides, gradIn, l);
      !st.ok())
    return st;
  Walker<1> w{gradOut.rank, gradOut.shape, {l.strides}};
  std::memset(gradIn.data, 0, gradIn.nbytes());
  size_t es = dtypeSize(gradIn.dtype);
  const char *src = gradOut.as<char>();
  char *dst = gradIn.as<char>();
  // A slice reads each element at most once, so a plain scatter suffices.
  for (int64_t i = 0, n = gradOut.numel(); i < n; ++i, w.next())
    std::memcpy(dst + es * (l.base + w.off[0]), src + es * i, es);
  return Status();
}

namespace {

/// Checks that `parts` stack along `axis` into `whole`.
Status checkStack(const Call &call, const Tensor *parts, int count,
                  int64_t &axis, const Tensor &whole) {
  if (!validRank(whole) || count < 1 || !parts)
    return call.fail("needs at least one piece");
  if (!normalizeAxis(axis, whole.rank))
    return call.fail("axis out of range");
  int64_t total = 0;
  for (int k = 0; k < count; ++k) {
    const Tensor &p = parts[k];
    if (!validRank(p) || p.rank != whole.rank || p.dtype != whole.dtype)
      return call.fail("piece " + std::to_string(k) + " (" + describe(p) +
                       ") differs in rank or dtype");
    for (int d = 0; d < whole.rank; ++d)
      if (d != axis && p.shape[d] != whole.shape[d])
        return call.fail("piece " + std::to_string(k) + " (" + describe(p) +
                         ") differs off the axis");
    total += p.shape[axis];
  }
  if (total != whole.shape[axis])
    return call.fail("pieces add up to " + std::to_string(total) +
                     " along the axis");
  return Status();
}

/// Copies between the pieces and the whole: toWhole picks the direction.
void stack(const Tensor *parts, int count, int64_t axis, const Tensor &whole,
           bool toWhole) {
  size_t es = dtypeSize(whole.dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d)
    outer *= whole.shape[d];
  for (int d = static_cast<int>(axis) + 1; d < whole.rank; ++d)
    inner *= whole.shape[d];
  char *w = whole.as<char>();
  size_t rowBytes = static_cast<size_t>(whole.shape[axis] * inner) * es;
  for (int64_t o = 0; o < outer; ++o) {
    size_t at = o * rowBytes;
    for (int k = 0; k < count; ++k) {
      size_t bytes = static_cast<size_t>(parts[k].shape[axis] * inner) * es;
      char *p = parts[k].as<char>() + o * bytes;
      if (bytes) {
        if (toWhole)
          std::memcpy(w + at, p, bytes);
        else
          std::memcpy(p, w + at, bytes);
      }
      at += bytes;
    }
  }
}

} // namespace

namespace detail {

Status checkConcat(Call &call, const Tensor *inputs, int count, int64_t &axis,
                   const Tensor &out) {
  call.arg("count", count).arg("axis", axis).arg("out", out);
  return checkStack(call, inputs, count, axis, out);
}

Status checkSplit(Call &call, const Tensor &input, int64_t &axis,
                  const Tensor *outs, int count) {
  call.arg("input", input).arg("axis", axis).arg("count", count);
  return checkStack(call, outs, count, axis, input);
}

} // namespace detail

Status concat(const Tensor *inputs, int count, int64_t axis,
              const Tensor &out) {
  Call call("concat");
  if (Status st = checkConcat(call, inputs, count, axis, out); !st.ok())
    return st;
  stack(inputs, count, axis, out, true);
  return Status();
}

Status split(const Tensor &input, int64_t axis, const Tensor *outs, int count) {
  Call call("split");
  if (Status st = checkSplit(call, input, axis, outs, count); !st.ok())
    return st;
  stack(outs, count, axis, input, false);
  return Status();
}

Status concatBackward(const Tensor &gradOut, int64_t axis,
                      const Tensor *gradInputs, int count) {
  return split(gradOut, axis, gradInputs, count);
}

Status splitBackward(const Tensor *gradOuts, int count, int64_t axis,
                     const Tensor &gradIn) {
  return concat(gradOuts, count, axis, gradIn);
}

namespace {

/// Checks a gather's shapes and dtypes (not the index values).
Status gatherLayout(const Call &call, const Tensor &data, const Tensor &indices,
                    int64_t axis, const Tensor &out, GatherLayout &l) {
  if (Status st = checkRanks(call, {&data, &indices, &out}); !st.ok())
    return st;
  if (indices.dtype != DType::I64 && indices.dtype != DType::I32)
    return call.fail("indices must be i32 or i64");
  if (!normalizeAxis(axis, data.rank))
    return call.fail("axis out of range");
  std::vector<int64_t> want(data.shape, data.shape + axis);
  want.insert(want.end(), indices.shape, indices.shape + indices.rank);
  want.insert(want.end(), data.shape + axis + 1, data.shape + data.rank);
  if (!shapeIs(out, want) || out.dtype != data.dtype)
    return call.fail("result must be " + std::string(dtypeName(data.dtype)) +
                     describe(I64s(want)));
  l.dim = data.shape[axis];
  l.outer = 1, l.inner = 1;
  for (int d = 0; d < axis; ++d)
    l.outer *= data.shape[d];
  for (int d = static_cast<int>(axis) + 1; d < data.rank; ++d)
    l.inner *= data.shape[d];
  return Status();
}

/// Reads the indices (host memory) wrapped into [0, dim); fails on the first
/// outside [-dim, dim).
Status resolveIndices(const Call &call, const Tensor &indices, int64_t dim,
                      std::vector<int64_t> &idx) {
  idx.resize(indices.numel());
  for (size_t j = 0; j < idx.size(); ++j) {
    int64_t v = loadAsInt(indices.data, indices.dtype, j);
    if (v < -dim || v >= dim)
      return gatherIndexError(call, v, static_cast<int64_t>(j), dim);
    idx[j] = v < 0 ? v + dim : v;
  }
  return Status();
}

} // namespace

namespace detail {

Status checkGather(Call &call, const Tensor &data, const Tensor &indices,
                   int64_t axis, const Tensor &out, GatherLayout &layout) {
  call.arg("data", data)
      .arg("indices", indices)
      .arg("axis", axis)
      .arg("out", out);
  return gatherLayout(call, data, indices, axis, out, layout);
}

Status checkGatherBackward(Call &call, const Tensor &gradOut,
                           const Tensor &indices, int64_t axis,
                           const Tensor &gradData, GatherLayout &layout,
                           const Tensor *init) {
  call.arg("grad_out", gradOut)
      .arg("indices", indices)
      .arg("axis", axis)
      .arg("grad_data", gradData);
  if (init) {
    call.arg("init", *init);
    if (init->dtype != gradData.dtype || !sameShape(*init, gradData) ||
        (init->numel() > 0 && !init->data))
      return call.fail("init must be a tensor of grad_data's dtype and shape");
  }
  return gatherLayout(call, gradData, indices, axis, gradOut, layout);
}

Status gatherIndexError(const Call &call, int64_t value, int64_t at,
                        int64_t dim) {
  return call.fail("index " + std::to_string(value) + " at " +
                       std::to_string(at) + " outside [-" +
                       std::to_string(dim) + ", " + std::to_string(dim) + ")",
                   StatusCode::OutOfRange);
}

} // namespace detail

Status gather(const Tensor &data, const Tensor &indices, int64_t axis,
              const Tensor &out) {
  Call call("gather");
  GatherLayout l;
  if (Status st = checkGather(call, data, indices, axis, out, l); !st.ok())
    return st;
  std::vector<int64_t> idx;
  if (Status st = resolveIndices(call, indices, l.dim, idx); !st.ok())
    return st;
  size_t es = dtypeSize(data.dtype), row = static_cast<size_t>(l.inner) * es;
  int64_t dim = l.dim, m = static_cast<int64_t>(idx.size());
  const char *src = data.as<char>();
  char *dst = out.as<char>();
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(dst + (o * m + j) * row, src + (o * dim + idx[j]) * row, row);
  return Status();
}

namespace {

/// gradData = (init or zeros) + the scatter-add of gradOut: each indexed
/// slice summed from zero in index order, then added to init's (an
/// unindexed slice is init's as it is).
Status scatterAdd(Call &call, const Tensor &gradOut, const Tensor &indices,
                  int64_t axis, const Tensor *init, const Tensor &gradData) {
  GatherLayout l;
  if (Status st =
          checkGatherBackward(call, gradOut, indices, axis, gradData, l, init);
      !st.ok())
    return st;
  std::vector<int64_t> idx;
  if (Status st = resolveIndices(call, indices, l.dim, idx); !st.ok())
    return st;
  int64_t outer = l.outer, inner = l.inner, dim = l.dim;
  int64_t m = static_cast<int64_t>(idx.size());
  // The positions of each index in increasing order (a counting sort).
  std::vector<int64_t> begin(static_cast<size_t>(dim) + 1, 0), order(m);
  for (int64_t j = 0; j < m; ++j)
    ++begin[idx[j] + 1];
  for (int64_t d = 0; d < dim; ++d)
    begin[d + 1] += begin[d];
  std::vector<int64_t> next(begin.begin(), begin.end() - 1);
  for (int64_t j = 0; j < m; ++j)
    order[next[idx[j]]++] = j;
  if (!dispatchFloat(gradData.dtype, [&](auto tag) {
        using T = decltype(tag);
        T *gd = gradData.as<T>();
        const T *g = gradOut.as<T>();
        if (!init)
          std::fill(gd, gd + gradData.numel(), T(0));
        else if (init->data != gradData.data)
          std::memmove(gd, init->data, gradData.nbytes());
        std::vector<T> sum(static_cast<size_t>(inner));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t d = 0; d < dim; ++d) {
            if (begin[d] == begin[d + 1])
              continue;
            std::fill(sum.begin(), sum.end(), T(0));
            for (int64_t k = begin[d]; k < begin[d + 1]; ++k) {
              const T *src = g + (o * m + order[k]) * inner;
              for (int64_t i = 0; i < inner; ++i)
                sum[i] += src[i];
            }
            T *dst = gd + (o * dim + d) * inner;
            for (int64_t i = 0; i < inner; ++i)
              dst[i] = init ? dst[i] + sum[i] : sum[i];
          }
      }))
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  return Status();
}

} // namespace

Status gatherBackward(const Tensor &gradOut, const Tensor &indices,
                      int64_t axis, const Tensor &gradData) {
  Call call("gather_backward");
  return scatterAdd(call, gradOut, indices, axis, nullptr, gradData);
}

Status gatherBackwardInto(const Tensor &gradOut, const Tensor &indices,
                          int64_t axis, const Tensor &init,
                          const Tensor &gradData) {
  Call call("gather_backward_into");
  return scatterAdd(call, gradOut, indices, axis, &init, gradData);
}

namespace {

Status padLayout(const Call &call, const Tensor &small, I64s pads,
                 const Tensor &big) {
  if (Status st = checkRanks(call, {&small, &big}); !st.ok())
    return st;
  int rank = small.rank;
  if (static_cast<int>(pads.size()) != 2 * rank || big.rank != rank ||
      big.dtype != small.dtype)
    return call.fail("pads needs 2 * rank entries; dtypes and ranks agree");
  for (int d = 0; d < rank; ++d)
    if (big.shape[d] != small.shape[d] + pads[d] + pads[d + rank] ||
        big.shape[d] < 0)
      return call.fail(
          "padded dim " + std::to_string(d) + " must be " +
          std::to_string(small.shape[d] + pads[d] + pads[d + rank]));
  return Status();
}

} // namespace

namespace detail {

Status checkPad(Call &call, const Tensor &input, I64s pads, const Tensor &out) {
  call.arg("input", input).arg("pads", pads).arg("out", out);
  return padLayout(call, input, pads, out);
}

Status checkRotateHalf(Call &call, const Tensor &input, const Tensor &out) {
  call.arg("input", input).arg("out", out);
  if (Status st = checkRanks(call, {&input, &out}); !st.ok())
    return st;
  if (!isFloat(input.dtype) || input.rank < 1 || !sameShape(input, out) ||
      input.dtype != out.dtype || input.shape[input.rank - 1] % 2 != 0)
    return call.fail("needs a float tensor whose last dim is even and a "
                     "result like it");
  return Status();
}

Status checkTrilu(Call &call, const Tensor &input, int64_t k,
                  const Tensor &out) {
  call.arg("input", input).arg("k", k).arg("out", out);
  if (Status st = checkRanks(call, {&input, &out}); !st.ok())
    return st;
  if (input.rank < 2 || !sameShape(input, out) || input.dtype != out.dtype)
    return call.fail("needs rank >= 2 and a result like the input");
  return Status();
}

Status checkCumSum(Call &call, const Tensor &input, int64_t axis,
                   const Tensor &out, CumSumLayout &layout) {
  call.arg("input", input).arg("axis", axis).arg("out", out);
  if (Status st = checkRanks(call, {&input, &out}); !st.ok())
    return st;
  if (input.rank < 1 || axis < 0 || axis >= input.rank)
    return call.fail("needs rank >= 1 and an axis in [0, rank)");
  if (!sameShape(input, out) || input.dtype != out.dtype)
    return call.fail("the result must be like the input");
  if (input.dtype != DType::F32 && input.dtype != DType::F64 &&
      input.dtype != DType::I32 && input.dtype != DType::I64)
    return call.fail("sums f32, f64, i32 or i64 elements");
  layout.len = input.shape[axis];
  layout.inner = 1;
  for (int d = axis + 1; d < input.rank; ++d)
    layout.inner *= input.shape[d];
  layout.lines = layout.len ? input.numel() / layout.len : 0;
  return Status();
}

} // namespace detail

namespace {

/// One line of a cumsum: `len` elements `inner` apart from `x` and `y`.
/// The sum runs in CumSumAcc<T>.
template <typename T>
void cumSumLine(const T *x, T *y, int64_t len, int64_t inner, bool exclusive,
                bool reverse) {
  using Acc = typename detail::CumSumAcc<T>::type;
  Acc acc = 0;
  for (int64_t k = 0; k < len; ++k) {
    int64_t e = (reverse ? len - 1 - k : k) * inner;
    Acc next = acc + static_cast<Acc>(x[e]);
    y[e] = static_cast<T>(exclusive ? acc : next);
    acc = next;
  }
}

template <typename T>
void cumSumAll(const Tensor &input, const Tensor &out,
               const detail::CumSumLayout &l, bool exclusive, bool reverse) {
  for (int64_t line = 0; line < l.lines; ++line) {
    int64_t base = (line / l.inner) * l.len * l.inner + line % l.inner;
    cumSumLine(input.as<T>() + base, out.as<T>() + base, l.len, l.inner,
               exclusive, reverse);
  }
}

} // namespace

Status cumsum(const Tensor &input, int64_t axis, bool exclusive, bool reverse,
              const Tensor &out) {
  Call call("cumsum");
  detail::CumSumLayout l;
  if (Status st = detail::checkCumSum(call, input, axis, out, l); !st.ok())
    return st;
  switch (input.dtype) {
  case DType::F32:
    cumSumAll<float>(input, out, l, exclusive, reverse);
    break;
  case DType::F64:
    cumSumAll<double>(input, out, l, exclusive, reverse);
    break;
  case DType::I32:
    cumSumAll<int32_t>(input, out, l, exclusive, reverse);
    break;
  default:
    cumSumAll<int64_t>(input, out, l, exclusive, reverse);
    break;
  }
  return Status();
}

Status pad(const Tensor &input, I64s pads, double value, const Tensor &out) {
  Call call("pad");
  if (Status st = checkPad(call, input, pads, out); !st.ok())
    return st;
  size_t es = dtypeSize(out.dtype);
  char fill[8];
  storeDouble(fill, out.dtype, 0, value);
  auto inStrides = stridesOf(input);
  const char *src = input.as<char>();
  char *dst = out.as<char>();
  Walker<1> w{out.rank, out.shape, {}};
  for (int64_t i = 0, n = out.numel(); i < n; ++i, w.next()) {
    int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < out.rank && inside; ++d) {
      int64_t c = w.idx[d] - pads[d];
      inside = c >= 0 && c < input.shape[d];
      off += c * inStrides[d];
    }
    std::memcpy(dst + es * i, inside ? src + es * off : fill, es);
  }
  return Status();
}

Status padBackward(const Tensor &gradOut, I64s pads, const Tensor &gradIn) {
  Call call("pad_backward");
  call.arg("grad_out", gradOut).arg("pads", pads).arg("grad_in", gradIn);
  if (Status st = padLayout(call, gradIn, pads, gradOut); !st.ok())
    return st;
  size_t es = dtypeSize(gradIn.dtype);
  auto outStrides = stridesOf(gradOut);
  const char *src = gradOut.as<char>();
  char *dst = gradIn.as<char>();
  Walker<1> w{gradIn.rank, gradIn.shape, {}};
  for (int64_t i = 0, n = gradIn.numel(); i < n; ++i, w.next()) {
    int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < gradIn.rank && inside; ++d) {
      int64_t c = w.idx[d] + pads[d];
      inside = c >= 0 && c < gradOut.shape[d];
      off += c * outStrides[d];
    }
    if (inside)
      std::memcpy(dst + es * i, src + es * off, es);
    else
      std::memset(dst + es * i, 0, es); // cropped away: no gradient
  }
  return Status();
}

Status rotateHalf(const Tensor &input, const Tensor &out) {
  Call call("rotate_half");
  if (Status st = checkRotateHalf(call, input, out); !st.ok())
    return st;
  size_t es = dtypeSize(input.dtype);
  int64_t d = input.shape[input.rank - 1], h = d / 2;
  int64_t lines = d != 0 ? input.numel() / d : 0;
  const unsigned char *src = input.as<unsigned char>();
  unsigned char *dst = out.as<unsigned char>();
  // The halves swap places; the sign bit, the top bit of an element's last
  // byte (little endian), flips in the first half.
  const size_t halfBytes = size_t(h) * es;
  for (int64_t l = 0; l < lines; ++l) {
    const unsigned char *x = src + size_t(l * d) * es;
    unsigned char *y = dst + size_t(l * d) * es;
    std::memmove(y, x + halfBytes, halfBytes);
    std::memmove(y + halfBytes, x, halfBytes);
    for (int64_t i = 0; i < h; ++i)
      y[size_t(i) * es + es - 1] ^= 0x80;
  }
  return Status();
}

Status trilu(const Tensor &input, bool upper, int64_t k, const Tensor &out) {
  Call call("trilu");
  if (Status st = checkTrilu(call, input, k, out); !st.ok())
    return st;
  size_t es = dtypeSize(input.dtype);
  int64_t rows = input.shape[input.rank - 2],
          cols = input.shape[input.rank - 1];
  int64_t mats = rows * cols != 0 ? input.numel() / (rows * cols) : 0;
  const char *src = input.as<char>();
  char *dst = out.as<char>();
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        size_t at = ((m * rows + i) * cols + j) * es;
        bool keep = upper ? j - i >= k : j - i <= k;
        if (keep)
          std::memmove(dst + at, src + at, es);
        else
          std::memset(dst + at, 0, es);
      }
  return Status();
}

} // namespace dsc::cpu
