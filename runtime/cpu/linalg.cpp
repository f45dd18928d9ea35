//===- linalg.cpp - CPU kernels: matmul and gemm, forward and backward ----===//
//
// Every product goes through one strided row kernel: C[m, :] (+)= sum over k
// in ascending order of A(m, k) * B(k, :). Threads split the rows of C, so
// each output element has one owner and one summation order.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_layout.h"
#include "cpu/gelu_math.h"
#include "cpu/half_emulation.h"
#include "cpu/kernel_util.h"
#include "cpu/kernels.h"
#include "cpu/linear_cross_entropy.h"

namespace dsc::cpu {

using namespace detail;

namespace {

/// A(m, k) = a[m * sm + k * sk]: a row-major matrix or its transpose.
template <typename T> struct MatView {
  const T *p;
  int64_t sm, sk;
  T at(int64_t m, int64_t k) const { return p[m * sm + k * sk]; }
};

/// C[m, n] (+)= sum_k A(m, k) * B(k, n) for rows m in [m0, m1); C is
/// row-major with N columns.
template <typename T>
void productRows(MatView<T> a, MatView<T> b, T *c, int64_t n, int64_t k,
                 int64_t m0, int64_t m1, bool accumulate) {
  for (int64_t m = m0; m < m1; ++m) {
    T *row = c + m * n;
    if (!accumulate)
      std::fill(row, row + n, T(0));
    for (int64_t kk = 0; kk < k; ++kk) {
      T s = a.at(m, kk);
      const T *brow = b.p + kk * b.sm;
      if (b.sk == 1)
        for (int64_t j = 0; j < n; ++j)
          row[j] += s * brow[j];
      else
        for (int64_t j = 0; j < n; ++j)
          row[j] += s * brow[j * b.sk];
    }
  }
}

template <typename T>
void product(MatView<T> a, MatView<T> b, T *c, int64_t m, int64_t n, int64_t k,
             bool accumulate, int threads) {
  int64_t minRows = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * k));
  parallelFor(m, threads, minRows, [&](int64_t m0, int64_t m1) {
    productRows(a, b, c, n, k, m0, m1, accumulate);
  });
}

/// Calls fn(batch, lhsBatch, rhsBatch) over the broadcast batch in order.
template <typename Fn> void forEachBatch(const MatmulLayout &l, Fn fn) {
  Walker<2> w{l.outBatch.rank, l.outBatch.shape, {}};
  broadcastStrides(l.lhsBatch, l.outBatch, w.strides[0]);
  broadcastStrides(l.rhsBatch, l.outBatch, w.strides[1]);
  for (int64_t b = 0, nb = l.outBatch.numel(); b < nb; ++b, w.next())
    fn(b, w.off[0], w.off[1]);
}

Status gemmLayout(const Call &call, const Tensor &a, const Tensor &b,
                  const Tensor &c, const GemmAttrs &attrs, const Tensor &out,
                  FloatTypes types, GemmLayout &l) {
  if (!validRank(a) || !validRank(b) || !validRank(c) || !validRank(out))
    return call.fail("rank above 8");
  if (a.rank != 2 || b.rank != 2)
    return call.fail("a and b must be matrices");
  if (a.dtype != b.dtype || out.dtype != a.dtype ||
      (c.present() && c.dtype != a.dtype) || !takesFloat(types, a.dtype))
    return call.fail(std::string("expects ") + floatNames(types) +
                     " operands of one dtype");
  l.m = attrs.transA ? a.shape[1] : a.shape[0];
  l.k = attrs.transA ? a.shape[0] : a.shape[1];
  int64_t k2 = attrs.transB ? b.shape[1] : b.shape[0];
  l.n = attrs.transB ? b.shape[0] : b.shape[1];
  if (l.k != k2)
    return call.fail("inner dims " + std::to_string(l.k) + " vs " +
                     std::to_string(k2));
  if (!shapeIs(out, {l.m, l.n}))
    return call.fail("result shape must be " + describe({l.m, l.n}));
  l.cStrides.fill(0);
  if (c.present() && !broadcastStrides(c, out, l.cStrides))
    return call.fail("c does not broadcast to [M, N]");
  return Status();
}

} // namespace

namespace detail {

Status matmulLayout(const Call &call, const Tensor &lhs, const Tensor &rhs,
                    const Tensor &out, FloatTypes types, MatmulLayout &l) {
  if (!validRank(lhs) || !validRank(rhs) || !validRank(out))
    return call.fail("rank above 8");
  if (lhs.rank < 1 || rhs.rank < 1)
    return call.fail("operands need rank >= 1");
  // A product of 16-bit operands may be written as its f32 accumulator.
  bool widened = (lhs.dtype == DType::BF16 || lhs.dtype == DType::F16) &&
                 out.dtype == DType::F32;
  if (lhs.dtype != rhs.dtype || (out.dtype != lhs.dtype && !widened) ||
      !takesFloat(types, lhs.dtype))
    return call.fail(std::string("expects ") + floatNames(types) +
                     " operands and result of one dtype (or an f32 result "
                     "of 16-bit operands)");
  l.m = lhs.rank >= 2 ? lhs.shape[lhs.rank - 2] : 1;
  l.k = lhs.shape[lhs.rank - 1];
  int64_t k2 = rhs.rank >= 2 ? rhs.shape[rhs.rank - 2] : rhs.shape[0];
  l.n = rhs.rank >= 2 ? rhs.shape[rhs.rank - 1] : 1;
  if (l.k != k2)
    return call.fail("inner dims " + std::to_string(l.k) + " vs " +
                     std::to_string(k2));
  l.lhsBatch = Tensor::of(nullptr, lhs.dtype,
                          I64s(lhs.shape, std::max(lhs.rank - 2, 0)));
  l.rhsBatch = Tensor::of(nullptr, rhs.dtype,
                          I64s(rhs.shape, std::max(rhs.rank - 2, 0)));
  std::vector<int64_t> batch;
  if (!broadcastShape(l.lhsBatch, l.rhsBatch, batch))
    return call.fail("batch dims do not broadcast");
  l.outBatch = Tensor::of(nullptr, out.dtype, batch);
  std::vector<int64_t> want = batch;
  if (lhs.rank >= 2)
    want.push_back(l.m);
  if (rhs.rank >= 2)
    want.push_back(l.n);
  if (!shapeIs(out, want))
    return call.fail("result shape must be " + describe(I64s(want)));
  return Status();
}

Status matmulTransposedLayout(const Call &call, const Tensor &lhs, bool tl,
                              const Tensor &rhs, bool tr, const Tensor &out,
                              FloatTypes types, Tensor &opLhs, Tensor &opRhs,
                              MatmulLayout &l) {
  if ((tl && lhs.rank < 2) || (tr && rhs.rank < 2))
    return call.fail("a transposed operand needs rank >= 2");
  // op(x): the stored data, its last two dims swapped (a transposed read).
  auto swapLastTwo = [](Tensor t) {
    if (t.rank >= 2 && t.rank <= kMaxRank)
      std::swap(t.shape[t.rank - 2], t.shape[t.rank - 1]);
    return t;
  };
  opLhs = tl ? swapLastTwo(lhs) : lhs;
  opRhs = tr ? swapLastTwo(rhs) : rhs;
  return matmulLayout(call, opLhs, opRhs, out, types, l);
}

Status checkMatmul(Call &call, const Tensor &lhs, const Tensor &rhs,
                   const Tensor &out, FloatTypes types, MatmulLayout &layout) {
  call.arg("lhs", lhs).arg("rhs", rhs).arg("out", out);
  return matmulLayout(call, lhs, rhs, out, types, layout);
}

Status checkGemm(Call &call, const Tensor &a, const Tensor &b, const Tensor &c,
                 const GemmAttrs &attrs, const Tensor &out, FloatTypes types,
                 GemmLayout &layout) {
  call.arg("a", a).arg("b", b).arg("c", c).arg("out", out);
  return gemmLayout(call, a, b, c, attrs, out, types, layout);
}

} // namespace detail

namespace {

/// The product of op(lhs) and op(rhs), already checked into `l`; `lhs` and
/// `rhs` are the views of op(x) (a transposed operand's view is its stored
/// data with the last two dims swapped, read with swapped strides).
Status matmulChecked(const Tensor &lhs, bool tl, const Tensor &rhs, bool tr,
                     const Tensor &out, const MatmulLayout &l, int threads) {
  dispatchFloat(lhs.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t nb = l.outBatch.numel();
    std::vector<int64_t> lo(nb), ro(nb);
    forEachBatch(
        l, [&](int64_t b, int64_t lb, int64_t rb) { lo[b] = lb, ro[b] = rb; });
    // One work item per output row, across batches.
    int64_t minRows =
        std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.n * l.k));
    parallelFor(nb * l.m, threads, minRows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1;) {
        int64_t b = r / l.m, m0 = r % l.m;
        int64_t m1 = std::min(l.m, m0 + (r1 - r));
        // A(m, k) is stored [m][k], or [k][m] when transposed.
        MatView<T> a{lhs.as<T>() + lo[b] * l.m * l.k, tl ? 1 : l.k,
                     tl ? l.m : 1};
        MatView<T> bv{rhs.as<T>() + ro[b] * l.k * l.n, tr ? 1 : l.n,
                      tr ? l.k : 1};
        productRows(a, bv, out.as<T>() + b * l.m * l.n, l.n, l.k, m0, m1,
                    false);
        r += m1 - m0;
      }
    });
  });
  return Status();
}

} // namespace

Status matmul(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
              int threads) {
  return matmulTransposed(lhs, false, rhs, false, out, threads);
}

Status matmulTransposed(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, const Tensor &out, int threads) {
  // 16-bit operands into an f32 result: the f32 product of their widened
  // values, not rounded (a GEMM's f32 accumulator written as it is).
  if (isHalf(lhs.dtype) && lhs.dtype == rhs.dtype && out.dtype == DType::F32) {
    HalfAsF32 h;
    return matmulTransposed(h.in(lhs), transLhs, h.in(rhs), transRhs, out,
                            threads);
  }
  if (auto st = emulateHalf("matmul", {lhs, rhs, out}, [&](HalfAsF32 &h) {
        return matmulTransposed(h.in(lhs), transLhs, h.in(rhs), transRhs,
                                h.out(out), threads);
      }))
    return *st;
  Call call("matmul");
  call.arg("lhs", lhs);
  if (transLhs)
    call.raw("trans_lhs", "true");
  call.arg("rhs", rhs);
  if (transRhs)
    call.raw("trans_rhs", "true");
  call.arg("out", out);
  Tensor opLhs, opRhs;
  MatmulLayout l;
  if (Status st = matmulTransposedLayout(call, lhs, transLhs, rhs, transRhs,
                                         out, FloatTypes::F32F64, opLhs,
                                         opRhs, l);
      !st.ok())
    return st;
  return matmulChecked(opLhs, transLhs, opRhs, transRhs, out, l, threads);
}

Status matmulBiasGrad(const Tensor &lhs, const Tensor &rhs, bool sumRhs,
                      const Tensor &out, const Tensor &biasGrad, int threads) {
  Call call("matmul_bias_grad");
  call.arg("lhs", lhs).arg("rhs", rhs);
  if (sumRhs)
    call.raw("sum_rhs", "true");
  call.arg("out", out).arg("bias_grad", biasGrad);
  if (Status st = checkMatmulBiasGrad(call, lhs, rhs, sumRhs, out, biasGrad,
                                      FloatTypes::F32F64F16BF16);
      !st.ok())
    return st;
  if (Status st = matmulTransposed(lhs, true, rhs, false, out, threads);
      !st.ok())
    return st;
  const int64_t rows[] = {0};
  return reduce(ReduceOp::Sum, sumRhs ? rhs : lhs, I64s(rows, 1), false,
                biasGrad);
}

namespace {

/// s = a @ op(b) in `storage`, summed in f32 (16-bit operands widened
/// exactly) or f64 and not rounded: what a GEMM's epilogue sees.
Status wideProduct(const Tensor &a, const Tensor &b, bool transB,
                   std::vector<double> &storage, Tensor &s, int threads) {
  HalfAsF32 h;
  Tensor wa = h.in(a), wb = h.in(b);
  int64_t m = a.shape[0], n = transB ? b.shape[0] : b.shape[1];
  storage.assign(size_t(m * n), 0.0); // room for f64 too
  s = Tensor::of(storage.data(), wa.dtype, {m, n});
  return matmulTransposed(wa, false, wb, transB, s, threads);
}

/// v[i] = fn(v[i], i) over the f32 or f64 elements of `s`.
template <typename Fn> void updateEach(const Tensor &s, int threads, Fn fn) {
  dispatchFloat(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *v = s.as<T>();
    parallelFor(s.numel(), threads, int64_t(1) << 14,
                [&](int64_t i0, int64_t i1) {
                  for (int64_t i = i0; i < i1; ++i)
                    v[i] = fn(v[i], i);
                });
  });
}

} // namespace

Status gemmGelu(const Tensor &a, const Tensor &b, bool transB,
                const Tensor &bias, const Tensor &out, const Tensor &pre,
                int threads) {
  Call call("gemm_gelu");
  if (Status st = checkGemmGelu(call, a, b, transB, bias, out, pre,
                                FloatTypes::F32F64F16BF16);
      !st.ok())
    return st;
  if (out.numel() == 0)
    return Status();
  std::vector<double> storage;
  Tensor s;
  if (Status st = wideProduct(a, b, transB, storage, s, threads); !st.ok())
    return st;
  HalfAsF32 h;
  if (bias.present()) {
    Tensor wideBias = h.in(bias);
    int64_t n = out.shape[1];
    updateEach(s, threads, [&](auto x, int64_t i) {
      return x + wideBias.as<decltype(x)>()[i % n];
    });
  }
  // pre and out each round s (or its GELU) once, as the epilogue does.
  if (Status st = cast(s, pre); !st.ok())
    return st;
  updateEach(s, threads, [](auto x, int64_t) { return geluOf(x, true); });
  return cast(s, out);
}

Status matmulGeluGrad(const Tensor &a, const Tensor &b, bool transB,
                      const Tensor &pre, const Tensor &out, int threads) {
  Call call("matmul_gelu_grad");
  if (Status st = checkMatmulGeluGrad(call, a, b, transB, pre, out,
                                      FloatTypes::F32F64F16BF16);
      !st.ok())
    return st;
  if (out.numel() == 0)
    return Status();
  std::vector<double> storage;
  Tensor s;
  if (Status st = wideProduct(a, b, transB, storage, s, threads); !st.ok())
    return st;
  HalfAsF32 h;
  Tensor x = h.in(pre);
  updateEach(s, threads, [&](auto v, int64_t i) {
    return v * geluDerivative(x.as<decltype(v)>()[i], true);
  });
  return cast(s, out);
}

Status matmulAccumulate(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, bool accumulate, const Tensor &out,
                        int threads) {
  Call call("matmul_accumulate");
  call.arg("lhs", lhs)
      .raw("trans_lhs", transLhs ? "true" : "false")
      .arg("rhs", rhs)
      .raw("trans_rhs", transRhs ? "true" : "false")
      .raw("accumulate", accumulate ? "true" : "false")
      .arg("out", out);
  if (Status st = checkMatmulAccumulate(call, lhs, transLhs, rhs, transRhs, out,
                                        FloatTypes::F32F64F16BF16);
      !st.ok())
    return st;
  // The product in f32 (or f64), added to out's values widened, rounded once
  // into out's dtype.
  HalfAsF32 h;
  Tensor a = h.in(lhs), b = h.in(rhs);
  Tensor acc = accumulate ? h.in(out) : h.out(out);
  if (!accumulate) {
    if (Status st = matmulTransposed(a, transLhs, b, transRhs, acc, threads);
        !st.ok())
      return st;
    return h.finish();
  }
  std::vector<double> storage(size_t(acc.numel()));
  Tensor prod = acc;
  prod.data = storage.data();
  if (Status st = matmulTransposed(a, transLhs, b, transRhs, prod, threads);
      !st.ok())
    return st;
  if (Status st = binary(BinaryOp::Add, acc, prod, acc); !st.ok())
    return st;
  return acc.data == out.data ? Status() : cast(acc, out);
}

namespace {
/// The kernels linearCrossEntropyChunks runs, on the host.
struct CpuKernels {
  static Status matmulTransposed(const Tensor &l, bool tl, const Tensor &r,
                                 bool tr, const Tensor &o) {
    return cpu::matmulTransposed(l, tl, r, tr, o);
  }
  static Status matmulAccumulate(const Tensor &l, bool tl, const Tensor &r,
                                 bool tr, bool acc, const Tensor &o) {
    return cpu::matmulAccumulate(l, tl, r, tr, acc, o);
  }
  /// The loss, then its gradient (the CUDA backend does both in one
  /// kernel, with these bits).
  static Status
  softmaxCrossEntropyWithBackward(const Tensor &scores, const Tensor &labels,
                                  std::optional<int64_t> ignoreIndex,
                                  const Tensor &seed, const Tensor &loss,
                                  const Tensor &grad) {
    if (Status st = cpu::softmaxCrossEntropy(scores, labels, Tensor(),
                                             Reduction::Sum, ignoreIndex, loss);
        !st.ok())
      return st;
    return cpu::softmaxCrossEntropyBackward(
        scores, labels, Tensor(), Reduction::Sum, ignoreIndex, seed, grad);
  }
  template <typename... A> static Status reduce(A &&...a) {
    return cpu::reduce(a...);
  }
  static Status reshape(const Tensor &in, const Tensor &out) {
    return cpu::reshape(in, out);
  }
};
} // namespace

Status linearCrossEntropy(const Tensor &input, const Tensor &weight,
                          bool transWeight, const Tensor &labels,
                          std::optional<int64_t> ignoreIndex,
                          const Tensor &seed, const Tensor &logits,
                          const Tensor &chunkLoss, const Tensor &loss,
                          const Tensor &gradInput, const Tensor &gradWeight,
                          const Tensor &init) {
  return detail::linearCrossEntropyChunks<CpuKernels>(
      "linear_cross_entropy", input, weight, transWeight, labels, ignoreIndex,
      seed, logits, chunkLoss, loss, gradInput, gradWeight, init);
}

Status matmulBackward(const Tensor &lhs, const Tensor &rhs,
                      const Tensor &gradOut, const Tensor &gradLhs,
                      const Tensor &gradRhs, int threads) {
  Call call("matmul_backward");
  call.arg("lhs", lhs)
      .arg("rhs", rhs)
      .arg("grad_out", gradOut)
      .arg("grad_lhs", gradLhs)
      .arg("grad_rhs", gradRhs);
  MatmulLayout l;
  if (Status st = matmulLayout(call, lhs, rhs, gradOut, FloatTypes::F32F64, l);
      !st.ok())
    return st;
  if ((gradLhs.present() &&
       (!sameShape(gradLhs, lhs) || gradLhs.dtype != lhs.dtype)) ||
      (gradRhs.present() &&
       (!sameShape(gradRhs, rhs) || gradRhs.dtype != rhs.dtype)))
    return call.fail("gradients must have their operands' dtype and shape");
  dispatchFloat(lhs.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t m = l.m, n = l.n, k = l.k;
    if (gradLhs.present())
      std::fill(gradLhs.as<T>(), gradLhs.as<T>() + gradLhs.numel(), T(0));
    if (gradRhs.present())
      std::fill(gradRhs.as<T>(), gradRhs.as<T>() + gradRhs.numel(), T(0));
    // Batches run in order and accumulate, so a broadcast operand's gradient
    // is summed over its batch copies in a fixed order.
    forEachBatch(l, [&](int64_t b, int64_t lb, int64_t rb) {
      const T *g = gradOut.as<T>() + b * m * n;
      const T *a = lhs.as<T>() + lb * m * k;
      const T *bm = rhs.as<T>() + rb * k * n;
      if (gradLhs.present()) // dA(m, k) = sum_n G(m, n) B(k, n)
        product(MatView<T>{g, n, 1}, MatView<T>{bm, 1, n},
                gradLhs.as<T>() + lb * m * k, m, k, n, true, threads);
      if (gradRhs.present()) // dB(k, n) = sum_m A(m, k) G(m, n)
        product(MatView<T>{a, 1, k}, MatView<T>{g, n, 1},
                gradRhs.as<T>() + rb * k * n, k, n, m, true, threads);
    });
  });
  return Status();
}

Status gemm(const Tensor &a, const Tensor &b, const Tensor &c,
            const GemmAttrs &attrs, const Tensor &out, int threads) {
  if (auto st = emulateHalf("gemm", {a, b, c, out}, [&](HalfAsF32 &h) {
        return gemm(h.in(a), h.in(b), h.in(c), attrs, h.out(out), threads);
      }))
    return *st;
  Call call("gemm");
  GemmLayout l;
  if (Status st = checkGemm(call, a, b, c, attrs, out, FloatTypes::F32F64, l);
      !st.ok())
    return st;
  int64_t m = l.m, n = l.n, k = l.k;
  dispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    MatView<T> av = attrs.transA ? MatView<T>{a.as<T>(), 1, m}
                                 : MatView<T>{a.as<T>(), k, 1};
    MatView<T> bv = attrs.transB ? MatView<T>{b.as<T>(), 1, k}
                                 : MatView<T>{b.as<T>(), n, 1};
    T *y = out.as<T>();
    product(av, bv, y, m, n, k, false, threads);
    T alpha = T(attrs.alpha), beta = T(attrs.beta);
    Walker<1> w{out.rank, out.shape, {}};
    if (c.present())
      broadcastStrides(c, out, w.strides[0]);
    for (int64_t i = 0; i < m * n; ++i, w.next())
      y[i] = alpha * y[i] + (c.present() ? beta * c.as<T>()[w.off[0]] : T(0));
  });
  return Status();
}

Status gemmBackward(const Tensor &a, const Tensor &b, const Tensor &c,
                    const GemmAttrs &attrs, const Tensor &gradOut,
                    const Tensor &gradA, const Tensor &gradB,
                    const Tensor &gradC, int threads) {
  Call call("gemm_backward");
  call.arg("a", a).arg("b", b).arg("c", c).arg("grad_out", gradOut);
  GemmLayout l;
  if (Status st =
          gemmLayout(call, a, b, c, attrs, gradOut, FloatTypes::F32F64, l);
      !st.ok())
    return st;
  int64_t m = l.m, n = l.n, k = l.k;
  if ((gradA.present() && (!sameShape(gradA, a) || gradA.dtype != a.dtype)) ||
      (gradB.present() && (!sameShape(gradB, b) || gradB.dtype != b.dtype)))
    return call.fail("gradients must have their operands' dtype and shape");
  if (gradC.present() && !c.present())
    return call.fail("grad_c without c");
  if (gradC.present())
    if (Status st = reduceToShape(gradOut, gradC); !st.ok())
      return call.fail(st.message());
  dispatchFloat(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    MatView<T> av = attrs.transA ? MatView<T>{a.as<T>(), 1, m}
                                 : MatView<T>{a.as<T>(), k, 1};
    MatView<T> bv = attrs.transB ? MatView<T>{b.as<T>(), 1, k}
                                 : MatView<T>{b.as<T>(), n, 1};
    MatView<T> g{gradOut.as<T>(), n, 1}, gt{gradOut.as<T>(), 1, n};
    auto trans = [](MatView<T> v) { return MatView<T>{v.p, v.sk, v.sm}; };
    auto scale = [](const Tensor &t, double s) {
      for (int64_t i = 0, e = t.numel(); i < e; ++i)
        t.as<T>()[i] *= T(s);
    };
    if (gradA.present()) {
      if (!attrs.transA) // dA(m, k) = sum_n G(m, n) B'(k, n)
        product(g, trans(bv), gradA.as<T>(), m, k, n, false, threads);
      else // dA(k, m) = sum_n B'(k, n) G(m, n)
        product(bv, gt, gradA.as<T>(), k, m, n, false, threads);
      scale(gradA, attrs.alpha);
    }
    if (gradB.present()) {
      if (!attrs.transB) // dB(k, n) = sum_m A'(m, k) G(m, n)
        product(trans(av), g, gradB.as<T>(), k, n, m, false, threads);
      else // dB(n, k) = sum_m G(m, n) A'(m, k)
        product(gt, av, gradB.as<T>(), n, k, m, false, threads);
      scale(gradB, attrs.alpha);
    }
    if (gradC.present())
      scale(gradC, attrs.beta);
  });
  return Status();
}

} // namespace dsc::cpu
