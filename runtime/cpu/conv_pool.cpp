//===- conv_pool.cpp - CPU kernels: N-d convolution and pooling -----------===//
//
// Both families walk a window table: for each output position and kernel
// position, the flat input position it reads (or -1 in the padding). Any
// number of spatial dims works the same way. Conv threads split work so each
// output element has one owner and a fixed summation order.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_layout.h"
#include "cpu/half_emulation.h"
#include "cpu/kernel_util.h"
#include "cpu/kernels.h"

#include <cmath>
#include <limits>

namespace dsc::cpu {

using namespace detail;

namespace detail {

void Windows::build() {
  inSize = kernelSize = outSize = 1;
  for (int d = 0; d < dims; ++d)
    inSize *= in[d], kernelSize *= kernel[d], outSize *= out[d];
  table.assign(outSize * kernelSize, -1);
  std::vector<int64_t> o(dims, 0), k(dims, 0);
  for (int64_t oi = 0; oi < outSize; ++oi) {
    std::fill(k.begin(), k.end(), 0);
    for (int64_t ki = 0; ki < kernelSize; ++ki) {
      int64_t flat = 0;
      bool inside = true;
      for (int d = 0; d < dims; ++d) {
        int64_t x = o[d] * strides[d] - padBegin[d] + k[d] * dilations[d];
        inside &= x >= 0 && x < in[d];
        flat = flat * in[d] + x;
      }
      table[oi * kernelSize + ki] = inside ? flat : -1;
      for (int d = dims - 1; d >= 0 && ++k[d] == kernel[d]; --d)
        k[d] = 0;
    }
    for (int d = dims - 1; d >= 0 && ++o[d] == out[d]; --d)
      o[d] = 0;
  }
}

int64_t Windows::paddedCount(int64_t oi) const {
  int64_t count = 1;
  for (int d = dims - 1; d >= 0; --d) {
    int64_t od = oi % out[d];
    oi /= out[d];
    int64_t c = 0;
    for (int64_t j = 0; j < kernel[d]; ++j) {
      int64_t x = od * strides[d] - padBegin[d] + j * dilations[d];
      c += x >= -padBegin[d] && x < in[d] + padEnd[d];
    }
    count *= c;
  }
  return count;
}

} // namespace detail

namespace {

/// Fills defaults and checks the per-dim attribute lists.
Status resolveAttrs(const Call &call, int dims, std::vector<int64_t> strides,
                    std::vector<int64_t> pads, std::vector<int64_t> dilations,
                    Windows &w) {
  if (strides.empty())
    strides.assign(dims, 1);
  if (dilations.empty())
    dilations.assign(dims, 1);
  if (pads.empty())
    pads.assign(2 * dims, 0);
  if (static_cast<int>(strides.size()) != dims ||
      static_cast<int>(dilations.size()) != dims ||
      static_cast<int>(pads.size()) != 2 * dims)
    return call.fail("strides and dilations need one entry per spatial dim, "
                     "pads two");
  for (int d = 0; d < dims; ++d)
    if (strides[d] < 1 || dilations[d] < 1 || pads[d] < 0 || pads[d + dims] < 0)
      return call.fail("strides and dilations must be >= 1, pads >= 0");
  w.dims = dims;
  w.strides = strides;
  w.dilations = dilations;
  w.padBegin.assign(pads.begin(), pads.begin() + dims);
  w.padEnd.assign(pads.begin() + dims, pads.end());
  return Status();
}

/// The checks and geometry of a convolution; the window table is left
/// unbuilt.
Status convLayout(const Call &call, const Tensor &input, const Tensor &weight,
                  const Tensor &bias, const ConvAttrs &attrs, const Tensor &out,
                  FloatTypes types, ConvLayout &l) {
  if (!validRank(input) || !validRank(weight) || !validRank(out))
    return call.fail("rank above 8");
  if (input.rank < 3 || weight.rank != input.rank)
    return call.fail("input [N, C, x...] and weight [M, C/group, k...] need "
                     "the same rank >= 3");
  if (input.dtype != weight.dtype || out.dtype != input.dtype ||
      (bias.present() && bias.dtype != input.dtype) ||
      !takesFloat(types, input.dtype))
    return call.fail(std::string("expects ") + floatNames(types) +
                     " operands of one dtype");
  int dims = input.rank - 2;
  l.n = input.shape[0], l.c = input.shape[1], l.m = weight.shape[0];
  l.group = attrs.group;
  if (l.group < 1 || l.c % l.group || l.m % l.group ||
      weight.shape[1] != l.c / l.group)
    return call.fail("channels " + std::to_string(l.c) + " and filters " +
                     std::to_string(l.m) + " must split into " +
                     std::to_string(l.group) + " groups");
  l.cPerGroup = l.c / l.group, l.mPerGroup = l.m / l.group;
  if (bias.present() && !shapeIs(bias, {l.m}))
    return call.fail("bias must be [" + std::to_string(l.m) + "]");
  if (Status st = resolveAttrs(call, dims, attrs.strides, attrs.pads,
                               attrs.dilations, l.w);
      !st.ok())
    return st;
  std::vector<int64_t> want = {l.n, l.m};
  for (int d = 0; d < dims; ++d) {
    l.w.in.push_back(input.shape[d + 2]);
    l.w.kernel.push_back(weight.shape[d + 2]);
    int64_t span = l.w.dilations[d] * (l.w.kernel[d] - 1) + 1;
    int64_t o =
        (l.w.in[d] + l.w.padBegin[d] + l.w.padEnd[d] - span) / l.w.strides[d] +
        1;
    if (o < 1)
      return call.fail("kernel larger than the padded input in dim " +
                       std::to_string(d));
    l.w.out.push_back(o);
    want.push_back(o);
  }
  if (!shapeIs(out, want))
    return call.fail("result shape must be " + describe(I64s(want)));
  return Status();
}

} // namespace

namespace detail {

Status checkConv(Call &call, const Tensor &input, const Tensor &weight,
                 const Tensor &bias, const ConvAttrs &attrs, const Tensor &out,
                 FloatTypes types, ConvLayout &layout) {
  call.arg("input", input)
      .arg("weight", weight)
      .arg("bias", bias)
      .arg("strides", attrs.strides)
      .arg("pads", attrs.pads)
      .arg("dilations", attrs.dilations)
      .arg("group", attrs.group)
      .arg("out", out);
  return convLayout(call, input, weight, bias, attrs, out, types, layout);
}

Status checkConvBackward(Call &call, const Tensor &input, const Tensor &weight,
                         const ConvAttrs &attrs, const Tensor &gradOut,
                         const Tensor &gradInput, const Tensor &gradWeight,
                         const Tensor &gradBias, FloatTypes types,
                         ConvLayout &l) {
  call.arg("input", input)
      .arg("weight", weight)
      .arg("strides", attrs.strides)
      .arg("pads", attrs.pads)
      .arg("dilations", attrs.dilations)
      .arg("group", attrs.group)
      .arg("grad_out", gradOut);
  if (Status st =
          convLayout(call, input, weight, Tensor(), attrs, gradOut, types, l);
      !st.ok())
    return st;
  if ((gradInput.present() &&
       (!sameShape(gradInput, input) || gradInput.dtype != input.dtype)) ||
      (gradWeight.present() &&
       (!sameShape(gradWeight, weight) || gradWeight.dtype != input.dtype)) ||
      (gradBias.present() &&
       (!shapeIs(gradBias, {l.m}) || gradBias.dtype != input.dtype)))
    return call.fail("gradients must have their operands' dtype and shape");
  return Status();
}

Status checkConvBackwardInput(Call &call, const Tensor &gradOut,
                              const Tensor &weight, const Tensor &gradInput) {
  call.arg("grad_out", gradOut).arg("weight", weight);
  if (!gradInput.present())
    return call.fail("grad_input must be present");
  return Status();
}

Status checkConvBackwardWeight(Call &call, const Tensor &gradOut,
                               const Tensor &input, const Tensor &gradWeight) {
  call.arg("grad_out", gradOut).arg("input", input);
  if (!gradWeight.present())
    return call.fail("grad_weight must be present");
  return Status();
}

} // namespace detail

Status conv(const Tensor &input, const Tensor &weight, const Tensor &bias,
            const ConvAttrs &attrs, const Tensor &out, int threads) {
  if (auto st =
          emulateHalf("conv", {input, weight, bias, out}, [&](HalfAsF32 &h) {
            return conv(h.in(input), h.in(weight), h.in(bias), attrs,
                        h.out(out), threads);
          }))
    return *st;
  Call call("conv");
  ConvLayout l;
  if (Status st = checkConv(call, input, weight, bias, attrs, out,
                            FloatTypes::F32F64, l);
      !st.ok())
    return st;
  l.w.build();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Windows &w = l.w;
    const T *x = input.as<T>(), *wt = weight.as<T>();
    T *y = out.as<T>();
    int64_t work = w.outSize * w.kernelSize * l.cPerGroup;
    // One work item per output plane (n, m).
    parallelFor(l.n * l.m, threads,
                std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work)),
                [&](int64_t p0, int64_t p1) {
                  for (int64_t p = p0; p < p1; ++p) {
                    int64_t n = p / l.m, m = p % l.m, g = m / l.mPerGroup;
                    T *plane = y + p * w.outSize;
                    T b0 = bias.present() ? bias.as<T>()[m] : T(0);
                    std::fill(plane, plane + w.outSize, b0);
                    for (int64_t c = 0; c < l.cPerGroup; ++c) {
                      const T *xin =
                          x + (n * l.c + g * l.cPerGroup + c) * w.inSize;
                      const T *wk = wt + (m * l.cPerGroup + c) * w.kernelSize;
                      for (int64_t o = 0; o < w.outSize; ++o) {
                        const int64_t *row = &w.table[o * w.kernelSize];
                        T acc = T(0);
                        for (int64_t k = 0; k < w.kernelSize; ++k)
                          if (row[k] >= 0)
                            acc += wk[k] * xin[row[k]];
                        plane[o] += acc;
                      }
                    }
                  }
                });
  });
  return Status();
}

Status convBackward(const Tensor &input, const Tensor &weight,
                    const ConvAttrs &attrs, const Tensor &gradOut,
                    const Tensor &gradInput, const Tensor &gradWeight,
                    const Tensor &gradBias, int threads) {
  Call call("conv_backward");
  ConvLayout l;
  if (Status st =
          checkConvBackward(call, input, weight, attrs, gradOut, gradInput,
                            gradWeight, gradBias, FloatTypes::F32F64, l);
      !st.ok())
    return st;
  l.w.build();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Windows &w = l.w;
    const T *x = input.as<T>(), *wt = weight.as<T>(), *g = gradOut.as<T>();
    if (gradInput.present()) {
      // Work item (n, group): it owns those input channels of sample n.
      T *gx = gradInput.as<T>();
      parallelFor(l.n * l.group, threads, 1, [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          int64_t n = u / l.group, grp = u % l.group;
          T *gin = gx + (n * l.c + grp * l.cPerGroup) * w.inSize;
          std::fill(gin, gin + l.cPerGroup * w.inSize, T(0));
          for (int64_t mm = 0; mm < l.mPerGroup; ++mm) {
            int64_t m = grp * l.mPerGroup + mm;
            const T *gp = g + (n * l.m + m) * w.outSize;
            for (int64_t c = 0; c < l.cPerGroup; ++c) {
              const T *wk = wt + (m * l.cPerGroup + c) * w.kernelSize;
              T *gc = gin + c * w.inSize;
              for (int64_t o = 0; o < w.outSize; ++o) {
                const int64_t *row = &w.table[o * w.kernelSize];
                for (int64_t k = 0; k < w.kernelSize; ++k)
                  if (row[k] >= 0)
                    gc[row[k]] += wk[k] * gp[o];
              }
            }
          }
        }
      });
    }
    if (gradWeight.present()) {
      // Work item m: it owns filter m.
      T *gw = gradWeight.as<T>();
      parallelFor(l.m, threads, 1, [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) {
          int64_t grp = m / l.mPerGroup;
          T *gf = gw + m * l.cPerGroup * w.kernelSize;
          std::fill(gf, gf + l.cPerGroup * w.kernelSize, T(0));
          for (int64_t n = 0; n < l.n; ++n) {
            const T *gp = g + (n * l.m + m) * w.outSize;
            for (int64_t c = 0; c < l.cPerGroup; ++c) {
              const T *xin = x + (n * l.c + grp * l.cPerGroup + c) * w.inSize;
              T *gk = gf + c * w.kernelSize;
              for (int64_t o = 0; o < w.outSize; ++o) {
                const int64_t *row = &w.table[o * w.kernelSize];
                for (int64_t k = 0; k < w.kernelSize; ++k)
                  if (row[k] >= 0)
                    gk[k] += gp[o] * xin[row[k]];
              }
            }
          }
        }
      });
    }
    if (gradBias.present()) {
      T *gb = gradBias.as<T>();
      for (int64_t m = 0; m < l.m; ++m) {
        T acc = T(0);
        for (int64_t n = 0; n < l.n; ++n) {
          const T *gp = g + (n * l.m + m) * w.outSize;
          for (int64_t o = 0; o < w.outSize; ++o)
            acc += gp[o];
        }
        gb[m] = acc;
      }
    }
  });
  return Status();
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

namespace {

Status poolLayout(const Call &call, const Tensor &input, const PoolAttrs &attrs,
                  Windows &w) {
  if (!validRank(input) || input.rank < 3)
    return call.fail("input must be [N, C, x...]");
  if (input.dtype != DType::F32 && input.dtype != DType::F64)
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  int dims = input.rank - 2;
  if (static_cast<int>(attrs.kernelShape.size()) != dims)
    return call.fail("kernel_shape needs one entry per spatial dim");
  if (Status st = resolveAttrs(call, dims, attrs.strides, attrs.pads,
                               attrs.dilations, w);
      !st.ok())
    return st;
  for (int d = 0; d < dims; ++d) {
    int64_t in = input.shape[d + 2], k = attrs.kernelShape[d];
    if (k < 1)
      return call.fail("kernel_shape entries must be >= 1");
    int64_t span = w.dilations[d] * (k - 1) + 1;
    int64_t padded = in + w.padBegin[d] + w.padEnd[d];
    if (padded < span)
      return call.fail("kernel larger than the padded input in dim " +
                       std::to_string(d));
    int64_t num = padded - span, s = w.strides[d];
    int64_t o = (attrs.ceilMode ? (num + s - 1) / s : num / s) + 1;
    // A last window that starts in the end padding is dropped.
    if (attrs.ceilMode && (o - 1) * s >= in + w.padBegin[d])
      --o;
    w.in.push_back(in);
    w.kernel.push_back(k);
    w.out.push_back(o);
  }
  return Status();
}

/// poolLayout and the result's shape; the window table is left unbuilt.
Status poolChecked(const Call &call, const Tensor &input,
                   const PoolAttrs &attrs, const Tensor &out, Windows &w) {
  if (Status st = poolLayout(call, input, attrs, w); !st.ok())
    return st;
  std::vector<int64_t> want = {input.shape[0], input.shape[1]};
  want.insert(want.end(), w.out.begin(), w.out.end());
  if (!shapeIs(out, want) || out.dtype != input.dtype)
    return call.fail("result must be " + std::string(dtypeName(input.dtype)) +
                     describe(I64s(want)));
  return Status();
}

Status checkGradIn(const Call &call, const Tensor &input,
                   const Tensor &gradIn) {
  if (!sameShape(gradIn, input) || gradIn.dtype != input.dtype)
    return call.fail("grad_in must have the input's dtype and shape");
  return Status();
}

/// The first maximum's flat input position in each window, or -1.
template <typename T>
int64_t argmaxWindow(const Windows &w, const T *plane, int64_t o) {
  const int64_t *row = &w.table[o * w.kernelSize];
  int64_t best = -1;
  for (int64_t k = 0; k < w.kernelSize; ++k) {
    int64_t at = row[k];
    if (at < 0)
      continue;
    if (best < 0 || plane[at] > plane[best] ||
        (std::isnan(plane[at]) && !std::isnan(plane[best])))
      best = at;
  }
  return best;
}

} // namespace

namespace detail {

Status checkMaxPool(Call &call, const Tensor &input, const PoolAttrs &attrs,
                    const Tensor &out, const Tensor &indices, Windows &w) {
  call.arg("input", input)
      .arg("kernel_shape", attrs.kernelShape)
      .arg("strides", attrs.strides)
      .arg("pads", attrs.pads)
      .arg("out", out);
  if (Status st = poolChecked(call, input, attrs, out, w); !st.ok())
    return st;
  if (indices.present() &&
      (indices.dtype != DType::I64 || !sameShape(indices, out)))
    return call.fail("indices must be i64 with the result's shape");
  return Status();
}

Status checkMaxPoolBackward(Call &call, const Tensor &input,
                            const PoolAttrs &attrs, const Tensor &gradOut,
                            const Tensor &gradIn, Windows &w) {
  call.arg("input", input)
      .arg("kernel_shape", attrs.kernelShape)
      .arg("grad_out", gradOut)
      .arg("grad_in", gradIn);
  if (Status st = poolChecked(call, input, attrs, gradOut, w); !st.ok())
    return st;
  return checkGradIn(call, input, gradIn);
}

Status checkAvgPool(Call &call, const Tensor &input, const PoolAttrs &attrs,
                    const Tensor &out, Windows &w) {
  call.arg("input", input)
      .arg("kernel_shape", attrs.kernelShape)
      .arg("strides", attrs.strides)
      .arg("pads", attrs.pads)
      .arg("out", out);
  return poolChecked(call, input, attrs, out, w);
}

Status checkAvgPoolBackward(Call &call, const Tensor &input,
                            const PoolAttrs &attrs, const Tensor &gradOut,
                            const Tensor &gradIn, Windows &w) {
  call.arg("input", input)
      .arg("kernel_shape", attrs.kernelShape)
      .arg("grad_out", gradOut)
      .arg("grad_in", gradIn);
  if (Status st = poolChecked(call, input, attrs, gradOut, w); !st.ok())
    return st;
  return checkGradIn(call, input, gradIn);
}

} // namespace detail

Status poolOutputShape(const Tensor &input, const PoolAttrs &attrs,
                       std::vector<int64_t> &outShape) {
  Call call("pool_output_shape");
  call.arg("input", input).arg("kernel_shape", attrs.kernelShape);
  Windows w;
  if (Status st = poolLayout(call, input, attrs, w); !st.ok())
    return st;
  outShape = {input.shape[0], input.shape[1]};
  outShape.insert(outShape.end(), w.out.begin(), w.out.end());
  return Status();
}

Status maxPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out,
               const Tensor &indices) {
  Call call("max_pool");
  Windows w;
  if (Status st = checkMaxPool(call, input, attrs, out, indices, w); !st.ok())
    return st;
  w.build();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t planes = input.shape[0] * input.shape[1];
    for (int64_t p = 0; p < planes; ++p) {
      const T *x = input.as<T>() + p * w.inSize;
      for (int64_t o = 0; o < w.outSize; ++o) {
        int64_t at = argmaxWindow(w, x, o);
        out.as<T>()[p * w.outSize + o] =
            at >= 0 ? x[at] : -std::numeric_limits<T>::infinity();
        if (indices.present())
          indices.as<int64_t>()[p * w.outSize + o] = at;
      }
    }
  });
  return Status();
}

Status maxPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn) {
  Call call("max_pool_backward");
  Windows w;
  if (Status st = checkMaxPoolBackward(call, input, attrs, gradOut, gradIn, w);
      !st.ok())
    return st;
  w.build();
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::fill(gradIn.as<T>(), gradIn.as<T>() + gradIn.numel(), T(0));
    int64_t planes = input.shape[0] * input.shape[1];
    for (int64_t p = 0; p < planes; ++p) {
      const T *x = input.as<T>() + p * w.inSize;
      T *gx = gradIn.as<T>() + p * w.inSize;
      const T *g = gradOut.as<T>() + p * w.outSize;
      for (int64_t o = 0; o < w.outSize; ++o) {
        int64_t at = argmaxWindow(w, x, o);
        if (at >= 0)
          gx[at] += g[o];
      }
    }
  });
  return Status();
}

namespace {

std::vector<int64_t> avgDivisors(const Windows &w, bool countIncludePad) {
  std::vector<int64_t> div(w.outSize);
  for (int64_t o = 0; o < w.outSize; ++o) {
    if (countIncludePad) {
      div[o] = w.paddedCount(o);
      continue;
    }
    int64_t c = 0;
    for (int64_t k = 0; k < w.kernelSize; ++k)
      c += w.table[o * w.kernelSize + k] >= 0;
    div[o] = c;
  }
  return div;
}

} // namespace

Status avgPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out) {
  Call call("avg_pool");
  Windows w;
  if (Status st = checkAvgPool(call, input, attrs, out, w); !st.ok())
    return st;
  w.build();
  std::vector<int64_t> div = avgDivisors(w, attrs.countIncludePad);
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t planes = input.shape[0] * input.shape[1];
    for (int64_t p = 0; p < planes; ++p) {
      const T *x = input.as<T>() + p * w.inSize;
      for (int64_t o = 0; o < w.outSize; ++o) {
        T acc = T(0);
        for (int64_t k = 0; k < w.kernelSize; ++k) {
          int64_t at = w.table[o * w.kernelSize + k];
          if (at >= 0)
            acc += x[at];
        }
        out.as<T>()[p * w.outSize + o] = acc / static_cast<T>(div[o]);
      }
    }
  });
  return Status();
}

Status avgPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn) {
  Call call("avg_pool_backward");
  Windows w;
  if (Status st = checkAvgPoolBackward(call, input, attrs, gradOut, gradIn, w);
      !st.ok())
    return st;
  w.build();
  std::vector<int64_t> div = avgDivisors(w, attrs.countIncludePad);
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::fill(gradIn.as<T>(), gradIn.as<T>() + gradIn.numel(), T(0));
    int64_t planes = input.shape[0] * input.shape[1];
    for (int64_t p = 0; p < planes; ++p) {
      T *gx = gradIn.as<T>() + p * w.inSize;
      const T *g = gradOut.as<T>() + p * w.outSize;
      for (int64_t o = 0; o < w.outSize; ++o) {
        T share = g[o] / static_cast<T>(div[o]);
        for (int64_t k = 0; k < w.kernelSize; ++k) {
          int64_t at = w.table[o * w.kernelSize + k];
          if (at >= 0)
            gx[at] += share;
        }
      }
    }
  });
  return Status();
}

namespace {

Status globalLayout(const Call &call, const Tensor &input, const Tensor &out,
                    int64_t &planes, int64_t &size) {
  if (!validRank(input) || input.rank < 3 || !validRank(out))
    return call.fail("input must be [N, C, x...]");
  if (input.dtype != DType::F32 && input.dtype != DType::F64)
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  std::vector<int64_t> want(input.rank, 1);
  want[0] = input.shape[0], want[1] = input.shape[1];
  if (!shapeIs(out, want) || out.dtype != input.dtype)
    return call.fail("result must be " + describe(I64s(want)));
  planes = input.shape[0] * input.shape[1];
  size = planes ? input.numel() / planes : 0;
  return Status();
}

} // namespace

namespace detail {

Status checkGlobalPool(Call &call, const Tensor &input, const Tensor &out,
                       int64_t &planes, int64_t &size) {
  call.arg("input", input).arg("out", out);
  return globalLayout(call, input, out, planes, size);
}

} // namespace detail

Status globalAvgPool(const Tensor &input, const Tensor &out) {
  Call call("global_avg_pool");
  int64_t planes, size;
  if (Status st = checkGlobalPool(call, input, out, planes, size); !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t p = 0; p < planes; ++p) {
      T acc = T(0);
      for (int64_t i = 0; i < size; ++i)
        acc += input.as<T>()[p * size + i];
      out.as<T>()[p] = acc / static_cast<T>(size);
    }
  });
  return Status();
}

Status globalMaxPool(const Tensor &input, const Tensor &out) {
  Call call("global_max_pool");
  int64_t planes, size;
  if (Status st = checkGlobalPool(call, input, out, planes, size); !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t p = 0; p < planes; ++p) {
      const T *x = input.as<T>() + p * size;
      out.as<T>()[p] = *std::max_element(x, x + size);
    }
  });
  return Status();
}

Status globalAvgPoolBackward(const Tensor &gradOut, const Tensor &gradIn) {
  Call call("global_avg_pool_backward");
  call.arg("grad_out", gradOut).arg("grad_in", gradIn);
  int64_t planes, size;
  if (Status st = globalLayout(call, gradIn, gradOut, planes, size); !st.ok())
    return st;
  dispatchFloat(gradIn.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < size; ++i)
        gradIn.as<T>()[p * size + i] =
            gradOut.as<T>()[p] / static_cast<T>(size);
  });
  return Status();
}

Status globalMaxPoolBackward(const Tensor &input, const Tensor &gradOut,
                             const Tensor &gradIn) {
  Call call("global_max_pool_backward");
  call.arg("input", input).arg("grad_out", gradOut).arg("grad_in", gradIn);
  int64_t planes, size;
  if (Status st = globalLayout(call, input, gradOut, planes, size); !st.ok())
    return st;
  if (Status st = checkGradIn(call, input, gradIn); !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t p = 0; p < planes; ++p) {
      const T *x = input.as<T>() + p * size;
      T *gx = gradIn.as<T>() + p * size;
      std::fill(gx, gx + size, T(0));
      gx[std::max_element(x, x + size) - x] = gradOut.as<T>()[p];
    }
  });
  return Status();
}

} // namespace dsc::cpu
