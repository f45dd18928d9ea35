//===- conv_pool.cu - CUDA kernels: convolution (cuDNN) and pooling -------===//
//
// Convolutions go through cuDNN's convolution API with 1 to 3 spatial dims
// (1-D as 2-D with a unit height), NCHW packed, groups native. cuDNN pads
// symmetrically: asymmetric ONNX pads keep the common part in cuDNN and the
// rest is padded explicitly into scratch (forward, weight gradient) or
// cropped away from a padded input gradient (input gradient). Algorithms
// come from cuDNN's heuristics, restricted to deterministic ones (and to
// FMA math for f32 unless TF32 is allowed), and are cached per thread and
// shape with their descriptors.
//
// Pooling kernels follow the CPU reference window by window: one thread per
// output element forward, and one thread per input element backward that
// visits the windows covering it in ascending order, so gradients are
// accumulated in the CPU's order without atomics (bit-identical results).
// maxPoolBackward first writes each window's argmax into scratch (i32).
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_layout.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dsc::cuda {

using namespace detail;
using cpu::detail::checkAvgPool;
using cpu::detail::checkAvgPoolBackward;
using cpu::detail::checkConv;
using cpu::detail::checkConvBackward;
using cpu::detail::checkConvBackwardInput;
using cpu::detail::checkConvBackwardWeight;
using cpu::detail::checkGlobalPool;
using cpu::detail::checkMaxPool;
using cpu::detail::checkMaxPoolBackward;
using cpu::detail::ConvLayout;
using cpu::detail::FloatTypes;
using cpu::detail::Windows;

namespace {

//===----------------------------------------------------------------------===//
// Small device kernels: explicit padding / cropping, bias
//===----------------------------------------------------------------------===//

/// dst[i] = src[i - off] per dim, zero where that is outside src (a pad when
/// off >= 0, a crop when off <= 0).
struct CopyGeom {
  int rank = 0;
  int64_t dst[kMaxRank] = {}, src[kMaxRank] = {}, off[kMaxRank] = {};
};

template <typename W>
__global__ void padCopyKernel(const W *src, W *dst, CopyGeom g, int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    int64_t rem = i, at = 0, stride = 1;
    bool inside = true;
    for (int d = g.rank - 1; d >= 0; --d) {
      int64_t c = rem % g.dst[d] - g.off[d];
      rem /= g.dst[d];
      inside = inside && c >= 0 && c < g.src[d];
      at += c * stride;
      stride *= g.src[d];
    }
    dst[i] = inside ? src[at] : W(0);
  }
}

Status padCopy(const void *src, void *dst, const CopyGeom &g, DType dtype) {
  int64_t n = 1;
  for (int d = 0; d < g.rank; ++d)
    n *= g.dst[d];
  if (n == 0)
    return Status();
  unsigned blocks = blocksFor(n);
  cudaStream_t s = stream();
  switch (dtypeSize(dtype)) {
  case 2:
    padCopyKernel<<<blocks, kThreads, 0, s>>>(
        static_cast<const uint16_t *>(src), static_cast<uint16_t *>(dst), g, n);
    break;
  case 4:
    padCopyKernel<<<blocks, kThreads, 0, s>>>(
        static_cast<const uint32_t *>(src), static_cast<uint32_t *>(dst), g, n);
    break;
  default:
    padCopyKernel<<<blocks, kThreads, 0, s>>>(
        static_cast<const uint64_t *>(src), static_cast<uint64_t *>(dst), g, n);
    break;
  }
  DSC_CUDA_LAUNCHED("conv_explicit_pad");
  return Status();
}

__device__ inline float toAcc(float v) { return v; }
__device__ inline double toAcc(double v) { return v; }
__device__ inline float toAcc(__half v) { return __half2float(v); }
__device__ inline float toAcc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline void storeAcc(float *p, float v) { *p = v; }
__device__ inline void storeAcc(double *p, double v) { *p = v; }
__device__ inline void storeAcc(__half *p, float v) { *p = __float2half_rn(v); }
__device__ inline void storeAcc(__nv_bfloat16 *p, float v) {
  *p = __float2bfloat16_rn(v);
}

/// y[n, m, ...] += bias[m].
template <typename T>
__global__ void addBiasKernel(T *y, const T *bias, int64_t m, int64_t spatial,
                              int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    storeAcc(&y[i], toAcc(y[i]) + toAcc(bias[(i / spatial) % m]));
  }
}

Status addBias(const Tensor &out, const Tensor &bias) {
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  int64_t m = out.shape[1], spatial = n / (out.shape[0] * m);
  unsigned blocks = blocksFor(n);
  cudaStream_t s = stream();
  switch (out.dtype) {
  case DType::F32:
    addBiasKernel<<<blocks, kThreads, 0, s>>>(
        out.as<float>(), bias.as<const float>(), m, spatial, n);
    break;
  case DType::F64:
    addBiasKernel<<<blocks, kThreads, 0, s>>>(
        out.as<double>(), bias.as<const double>(), m, spatial, n);
    break;
  case DType::F16:
    addBiasKernel<<<blocks, kThreads, 0, s>>>(
        out.as<__half>(), bias.as<const __half>(), m, spatial, n);
    break;
  default:
    addBiasKernel<<<blocks, kThreads, 0, s>>>(
        out.as<__nv_bfloat16>(), bias.as<const __nv_bfloat16>(), m, spatial, n);
    break;
  }
  DSC_CUDA_LAUNCHED("conv_add_bias");
  return Status();
}

/// cuDNN's dtypes, beyond the CPU's f32 and f64.
constexpr FloatTypes kConvTypes = FloatTypes::F32F64F16BF16;

//===----------------------------------------------------------------------===//
// cuDNN plans
//===----------------------------------------------------------------------===//

enum class ConvKind { Forward, BackwardData, BackwardFilter };

/// The problem as cuDNN sees it: 4-D or 5-D, symmetric pads, the input
/// already padded by the asymmetric remainder.
struct CudnnConv {
  DType dtype = DType::F32;
  int nb = 4; // tensor rank
  int x[5] = {}, w[5] = {}, y[5] = {};
  int pad[3] = {}, stride[3] = {}, dil[3] = {};
  int group = 1;
  // The explicit padding of the input: extra[d] at the begin and
  // extraEnd[d] at the end of each ONNX spatial dim.
  std::vector<int64_t> extraBegin, extraEnd, paddedIn;
  bool explicitPad = false;
};

Status describeConv(const Call &call, const ConvLayout &g, DType dtype,
                    CudnnConv &cc) {
  if (g.w.dims > 3)
    return call.fail("cuDNN convolutions take 1 to 3 spatial dims",
                     StatusCode::Unimplemented);
  cc.dtype = dtype;
  int sd = std::max(g.w.dims, 2), lead = sd - g.w.dims;
  cc.nb = sd + 2;
  cc.group = int(g.group);
  std::vector<int64_t> x = {g.n, g.c}, w = {g.m, g.cPerGroup}, y = {g.n, g.m};
  std::vector<int64_t> pad, stride, dil;
  for (int d = 0; d < lead; ++d) {
    x.push_back(1), w.push_back(1), y.push_back(1);
    pad.push_back(0), stride.push_back(1), dil.push_back(1);
  }
  cc.extraBegin.assign(g.w.dims, 0);
  cc.extraEnd.assign(g.w.dims, 0);
  cc.paddedIn = g.w.in;
  for (int d = 0; d < g.w.dims; ++d) {
    int64_t common = std::min(g.w.padBegin[d], g.w.padEnd[d]);
    cc.extraBegin[d] = g.w.padBegin[d] - common;
    cc.extraEnd[d] = g.w.padEnd[d] - common;
    cc.explicitPad |= cc.extraBegin[d] || cc.extraEnd[d];
    cc.paddedIn[d] = g.w.in[d] + cc.extraBegin[d] + cc.extraEnd[d];
    x.push_back(cc.paddedIn[d]), w.push_back(g.w.kernel[d]);
    y.push_back(g.w.out[d]);
    pad.push_back(common), stride.push_back(g.w.strides[d]);
    dil.push_back(g.w.dilations[d]);
  }
  auto fits = [](const std::vector<int64_t> &v) {
    int64_t total = 1;
    for (int64_t e : v) {
      if (e > INT_MAX)
        return false;
      total *= e;
    }
    return total <= INT_MAX;
  };
  if (!fits(x) || !fits(w) || !fits(y) || !fits(pad) || !fits(stride) ||
      !fits(dil))
    return call.fail("cuDNN convolutions take tensors of at most 2^31 - 1 "
                     "elements",
                     StatusCode::Unimplemented);
  for (int i = 0; i < cc.nb; ++i)
    cc.x[i] = int(x[i]), cc.w[i] = int(w[i]), cc.y[i] = int(y[i]);
  for (int i = 0; i < sd; ++i)
    cc.pad[i] = int(pad[i]), cc.stride[i] = int(stride[i]),
    cc.dil[i] = int(dil[i]);
  return Status();
}

cudnnDataType_t cudnnTypeOf(DType t) {
  switch (t) {
  case DType::F64:
    return CUDNN_DATA_DOUBLE;
  case DType::F16:
    return CUDNN_DATA_HALF;
  case DType::BF16:
    return CUDNN_DATA_BFLOAT16;
  default:
    return CUDNN_DATA_FLOAT;
  }
}

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t workspace = 0;

  ConvPlan() = default;
  ConvPlan(const ConvPlan &) = delete;
  ConvPlan &operator=(const ConvPlan &) = delete;
  ~ConvPlan() {
    if (conv)
      cudnnDestroyConvolutionDescriptor(conv);
    if (w)
      cudnnDestroyFilterDescriptor(w);
    if (y)
      cudnnDestroyTensorDescriptor(y);
    if (x)
      cudnnDestroyTensorDescriptor(x);
  }
};

constexpr size_t kPreferredWorkspace = size_t(256) << 20;
constexpr size_t kMaxCachedPlans = 256;

bool isFft(ConvKind kind, int algo) {
  switch (kind) {
  case ConvKind::Forward:
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
  case ConvKind::BackwardData:
    return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING;
  case ConvKind::BackwardFilter:
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING;
  }
  return false;
}

/// The first of cuDNN's ranked results that is deterministic and keeps the
/// requested precision; FFT algorithms (less accurate) and workspaces above
/// kPreferredWorkspace only when nothing else qualifies.
template <typename Perf>
bool pickAlgo(ConvKind kind, const Perf *perf, int count, DType dtype,
              bool tf32, Perf &chosen) {
  bool precise = dtype == DType::F32 || dtype == DType::F64;
  for (int pass = 0; pass < 3; ++pass)
    for (int i = 0; i < count; ++i) {
      const Perf &r = perf[i];
      if (r.status != CUDNN_STATUS_SUCCESS ||
          r.determinism != CUDNN_DETERMINISTIC)
        continue;
      if (precise && r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
        continue;
      if (dtype == DType::F32 && !tf32 && r.mathType == CUDNN_TENSOR_OP_MATH)
        continue;
      if (pass < 2 && precise && isFft(kind, int(r.algo)))
        continue;
      if (pass < 1 && r.memory > kPreferredWorkspace)
        continue;
      chosen = r;
      return true;
    }
  return false;
}

Status buildConvPlan(const Call &call, ConvKind kind, const CudnnConv &cc,
                     ConvPlan &plan) {
  cudnnHandle_t h = current().cudnn;
  cudnnDataType_t type = cudnnTypeOf(cc.dtype);
  bool tf32 = cc.dtype == DType::F32 && allowTf32();
  DSC_CUDA_CHECK(cudnnCreateTensorDescriptor(&plan.x));
  DSC_CUDA_CHECK(cudnnCreateTensorDescriptor(&plan.y));
  DSC_CUDA_CHECK(cudnnCreateFilterDescriptor(&plan.w));
  DSC_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&plan.conv));
  DSC_CUDA_CHECK(cudnnSetTensorNdDescriptorEx(plan.x, CUDNN_TENSOR_NCHW, type,
                                              cc.nb, cc.x));
  DSC_CUDA_CHECK(cudnnSetTensorNdDescriptorEx(plan.y, CUDNN_TENSOR_NCHW, type,
                                              cc.nb, cc.y));
  DSC_CUDA_CHECK(
      cudnnSetFilterNdDescriptor(plan.w, type, CUDNN_TENSOR_NCHW, cc.nb, cc.w));
  DSC_CUDA_CHECK(cudnnSetConvolutionNdDescriptor(
      plan.conv, cc.nb - 2, cc.pad, cc.stride, cc.dil, CUDNN_CROSS_CORRELATION,
      cc.dtype == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
  DSC_CUDA_CHECK(cudnnSetConvolutionGroupCount(plan.conv, cc.group));
  // CUDNN_DEFAULT_MATH would let f32 run as TF32 on Ampere and later.
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  if (cc.dtype == DType::F32)
    math = tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  else if (cc.dtype != DType::F64)
    math = CUDNN_TENSOR_OP_MATH;
  DSC_CUDA_CHECK(cudnnSetConvolutionMathType(plan.conv, math));
  int ydims[5] = {};
  DSC_CUDA_CHECK(cudnnGetConvolutionNdForwardOutputDim(plan.conv, plan.x,
                                                       plan.w, cc.nb, ydims));
  if (!std::equal(ydims, ydims + cc.nb, cc.y))
    return call.fail("cuDNN computes another output shape",
                     StatusCode::Unimplemented);

  auto noAlgo = [&] {
    return call.fail("cuDNN has no deterministic algorithm for this "
                     "convolution",
                     StatusCode::Unimplemented);
  };
  cudnnMathType_t chosenMath = math;
  switch (kind) {
  case ConvKind::Forward: {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT],
        chosen;
    int count = 0;
    DSC_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, plan.x, plan.w, plan.conv, plan.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
        &count, perf));
    if (!pickAlgo(kind, perf, count, cc.dtype, tf32, chosen))
      return noAlgo();
    plan.algo = int(chosen.algo);
    chosenMath = chosen.mathType;
    break;
  }
  case ConvKind::BackwardData: {
    cudnnConvolutionBwdDataAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT],
        chosen;
    int count = 0;
    DSC_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, plan.w, plan.y, plan.conv, plan.x,
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    if (!pickAlgo(kind, perf, count, cc.dtype, tf32, chosen))
      return noAlgo();
    plan.algo = int(chosen.algo);
    chosenMath = chosen.mathType;
    break;
  }
  case ConvKind::BackwardFilter: {
    cudnnConvolutionBwdFilterAlgoPerf_t
        perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT],
        chosen;
    int count = 0;
    DSC_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, plan.x, plan.y, plan.conv, plan.w,
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
    if (!pickAlgo(kind, perf, count, cc.dtype, tf32, chosen))
      return noAlgo();
    plan.algo = int(chosen.algo);
    chosenMath = chosen.mathType;
    break;
  }
  }
  // Strict f32 stays on FMA math whatever the result reports.
  if (!(cc.dtype == DType::F32 && !tf32))
    DSC_CUDA_CHECK(cudnnSetConvolutionMathType(plan.conv, chosenMath));
  switch (kind) {
  case ConvKind::Forward:
    DSC_CUDA_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
        h, plan.x, plan.w, plan.conv, plan.y,
        cudnnConvolutionFwdAlgo_t(plan.algo), &plan.workspace));
    break;
  case ConvKind::BackwardData:
    DSC_CUDA_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, plan.w, plan.y, plan.conv, plan.x,
        cudnnConvolutionBwdDataAlgo_t(plan.algo), &plan.workspace));
    break;
  case ConvKind::BackwardFilter:
    DSC_CUDA_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, plan.x, plan.y, plan.conv, plan.w,
        cudnnConvolutionBwdFilterAlgo_t(plan.algo), &plan.workspace));
    break;
  }
  return Status();
}

/// The cached plan of (kind, problem) for the calling thread's rank.
Status convPlan(const Call &call, ConvKind kind, const CudnnConv &cc,
                ConvPlan *&out) {
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<ConvPlan>> cache;
  std::vector<int64_t> key = {current().device,
                              int64_t(kind),
                              int64_t(cc.dtype),
                              cc.dtype == DType::F32 && allowTf32(),
                              cc.nb,
                              cc.group};
  for (int i = 0; i < cc.nb; ++i)
    key.insert(key.end(), {cc.x[i], cc.w[i], cc.y[i]});
  for (int i = 0; i < cc.nb - 2; ++i)
    key.insert(key.end(), {cc.pad[i], cc.stride[i], cc.dil[i]});
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxCachedPlans)
      cache.clear();
    auto plan = std::make_unique<ConvPlan>();
    if (Status st = buildConvPlan(call, kind, cc, *plan); !st.ok())
      return st;
    it = cache.emplace(std::move(key), std::move(plan)).first;
  }
  out = it->second.get();
  return Status();
}

/// The scaling factors cuDNN reads: double for f64 data, float otherwise.
struct Scales {
  float f[2] = {0.f, 1.f};
  double d[2] = {0.0, 1.0};
  const void *get(DType t, int v) const {
    return t == DType::F64 ? static_cast<const void *>(&d[v])
                           : static_cast<const void *>(&f[v]);
  }
};

size_t alignUp(size_t v) { return (v + 255) / 256 * 256; }

/// The explicit padding (off >= 0) or cropping (off <= 0) between the ONNX
/// input shape and cuDNN's padded one.
CopyGeom padGeom(const ConvLayout &g, const CudnnConv &cc, bool crop) {
  CopyGeom p;
  p.rank = g.w.dims + 2;
  std::vector<int64_t> in = {g.n, g.c}, padded = {g.n, g.c};
  in.insert(in.end(), g.w.in.begin(), g.w.in.end());
  padded.insert(padded.end(), cc.paddedIn.begin(), cc.paddedIn.end());
  for (int d = 0; d < p.rank; ++d) {
    int64_t extra = d < 2 ? 0 : cc.extraBegin[d - 2];
    p.dst[d] = crop ? in[d] : padded[d];
    p.src[d] = crop ? padded[d] : in[d];
    p.off[d] = crop ? -extra : extra;
  }
  return p;
}

/// Splits one scratch buffer into the padded tensor (first) and cuDNN's
/// workspace.
Status convScratch(size_t paddedBytes, size_t workspace, void **padded,
                   void **ws) {
  *padded = *ws = nullptr;
  size_t total = alignUp(paddedBytes) + workspace;
  if (total == 0)
    return Status();
  void *base = nullptr;
  if (Status st = scratch(total, &base, "convolution padding and workspace");
      !st.ok())
    return st;
  *padded = paddedBytes ? base : nullptr;
  *ws = workspace ? static_cast<char *>(base) + alignUp(paddedBytes) : nullptr;
  return Status();
}

size_t paddedBytes(const ConvLayout &g, const CudnnConv &cc, DType dtype) {
  if (!cc.explicitPad)
    return 0;
  size_t n = size_t(g.n * g.c);
  for (int64_t d : cc.paddedIn)
    n *= size_t(d);
  return n * dtypeSize(dtype);
}

Status convBackwardImpl(const Tensor &input, const Tensor &weight,
                        const ConvAttrs &attrs, const Tensor &gradOut,
                        const Tensor &gradInput, const Tensor &gradWeight) {
  Call call("conv_backward");
  ConvLayout g;
  if (Status st =
          checkConvBackward(call, input, weight, attrs, gradOut, gradInput,
                            gradWeight, Tensor(), kConvTypes, g);
      !st.ok())
    return st;
  const Tensor &result = gradInput.present() ? gradInput : gradWeight;
  if (result.numel() == 0)
    return Status();
  if (gradOut.numel() == 0 || input.numel() == 0 || weight.numel() == 0) {
    DSC_CUDA_CHECK(cudaMemsetAsync(result.data, 0, result.nbytes(), stream()));
    return Status();
  }
  CudnnConv cc;
  if (Status st = describeConv(call, g, input.dtype, cc); !st.ok())
    return st;
  ConvKind kind =
      gradInput.present() ? ConvKind::BackwardData : ConvKind::BackwardFilter;
  ConvPlan *plan = nullptr;
  if (Status st = convPlan(call, kind, cc, plan); !st.ok())
    return st;
  void *padded = nullptr, *ws = nullptr;
  if (Status st = convScratch(paddedBytes(g, cc, input.dtype), plan->workspace,
                              &padded, &ws);
      !st.ok())
    return st;
  cudnnHandle_t h = current().cudnn;
  DSC_CUDA_CHECK(cudnnSetStream(h, stream()));
  Scales sc;
  DType t = input.dtype;
  if (kind == ConvKind::BackwardData) {
    void *dx = padded ? padded : gradInput.data;
    DSC_CUDA_CHECK(cudnnConvolutionBackwardData(
        h, sc.get(t, 1), plan->w, weight.data, plan->y, gradOut.data,
        plan->conv, cudnnConvolutionBwdDataAlgo_t(plan->algo), ws,
        plan->workspace, sc.get(t, 0), plan->x, dx));
    DSC_CUDA_LAUNCHED("cudnnConvolutionBackwardData");
    if (padded)
      return padCopy(padded, gradInput.data, padGeom(g, cc, true), t);
    return Status();
  }
  const void *x = input.data;
  if (padded) {
    if (Status st = padCopy(input.data, padded, padGeom(g, cc, false), t);
        !st.ok())
      return st;
    x = padded;
  }
  DSC_CUDA_CHECK(cudnnConvolutionBackwardFilter(
      h, sc.get(t, 1), plan->x, x, plan->y, gradOut.data, plan->conv,
      cudnnConvolutionBwdFilterAlgo_t(plan->algo), ws, plan->workspace,
      sc.get(t, 0), plan->w, gradWeight.data));
  DSC_CUDA_LAUNCHED("cudnnConvolutionBackwardFilter");
  return Status();
}

} // namespace

Status conv(const Tensor &input, const Tensor &weight, const Tensor &bias,
            const ConvAttrs &attrs, const Tensor &out) {
  Call call("conv");
  ConvLayout g;
  if (Status st =
          checkConv(call, input, weight, bias, attrs, out, kConvTypes, g);
      !st.ok())
    return st;
  if (out.numel() == 0)
    return Status();
  if (input.numel() == 0 || weight.numel() == 0) {
    DSC_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), stream()));
    return bias.present() ? addBias(out, bias) : Status();
  }
  CudnnConv cc;
  if (Status st = describeConv(call, g, input.dtype, cc); !st.ok())
    return st;
  ConvPlan *plan = nullptr;
  if (Status st = convPlan(call, ConvKind::Forward, cc, plan); !st.ok())
    return st;
  void *padded = nullptr, *ws = nullptr;
  if (Status st = convScratch(paddedBytes(g, cc, input.dtype), plan->workspace,
                              &padded, &ws);
      !st.ok())
    return st;
  const void *x = input.data;
  if (padded) {
    if (Status st =
            padCopy(input.data, padded, padGeom(g, cc, false), input.dtype);
        !st.ok())
      return st;
    x = padded;
  }
  cudnnHandle_t h = current().cudnn;
  DSC_CUDA_CHECK(cudnnSetStream(h, stream()));
  Scales sc;
  DSC_CUDA_CHECK(cudnnConvolutionForward(
      h, sc.get(input.dtype, 1), plan->x, x, plan->w, weight.data, plan->conv,
      cudnnConvolutionFwdAlgo_t(plan->algo), ws, plan->workspace,
      sc.get(input.dtype, 0), plan->y, out.data));
  DSC_CUDA_LAUNCHED("cudnnConvolutionForward");
  return bias.present() ? addBias(out, bias) : Status();
}

Status convBackwardInput(const Tensor &gradOut, const Tensor &weight,
                         const ConvAttrs &attrs, const Tensor &gradInput) {
  Call call("conv_backward_input");
  if (Status st = checkConvBackwardInput(call, gradOut, weight, gradInput);
      !st.ok())
    return st;
  // As the CPU's: the input is described by a view with its shape, no data.
  Tensor input = gradInput;
  input.data = nullptr;
  return convBackwardImpl(input, weight, attrs, gradOut, gradInput, Tensor());
}

Status convBackwardWeight(const Tensor &gradOut, const Tensor &input,
                          const ConvAttrs &attrs, const Tensor &gradWeight) {
  Call call("conv_backward_weight");
  if (Status st = checkConvBackwardWeight(call, gradOut, input, gradWeight);
      !st.ok())
    return st;
  Tensor weight = gradWeight;
  weight.data = nullptr;
  return convBackwardImpl(input, weight, attrs, gradOut, Tensor(), gradWeight);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

namespace {

constexpr int kMaxSpatial = kMaxRank - 2;

/// Window geometry over the spatial dims, by value into the kernels.
struct PoolGeom {
  int dims = 0;
  int64_t in[kMaxSpatial] = {}, out[kMaxSpatial] = {}, kernel[kMaxSpatial] = {},
          stride[kMaxSpatial] = {}, padBegin[kMaxSpatial] = {},
          padEnd[kMaxSpatial] = {}, dil[kMaxSpatial] = {};
  int64_t inSize = 1, outSize = 1, planes = 0;
  bool countIncludePad = false;
};

/// The kernels' geometry of the checked windows `w` of `input`.
PoolGeom poolGeom(const Tensor &input, const PoolAttrs &attrs,
                  const Windows &w) {
  PoolGeom g;
  g.dims = w.dims;
  g.planes = input.shape[0] * input.shape[1];
  g.countIncludePad = attrs.countIncludePad;
  for (int d = 0; d < w.dims; ++d) {
    g.in[d] = w.in[d];
    g.out[d] = w.out[d];
    g.kernel[d] = w.kernel[d];
    g.stride[d] = w.strides[d];
    g.dil[d] = w.dilations[d];
    g.padBegin[d] = w.padBegin[d];
    g.padEnd[d] = w.padEnd[d];
    g.inSize *= g.in[d];
    g.outSize *= g.out[d];
  }
  return g;
}

/// Calls f(at) for each kernel position of window o in row-major order, with
/// at the flat input position within the plane or -1 in the padding.
template <typename F>
__device__ inline void forWindow(const PoolGeom &g, int64_t o, F &&f) {
  int64_t start[kMaxSpatial], k[kMaxSpatial];
  for (int d = g.dims - 1; d >= 0; --d) {
    start[d] = (o % g.out[d]) * g.stride[d] - g.padBegin[d];
    o /= g.out[d];
    k[d] = 0;
  }
  while (true) {
    int64_t flat = 0;
    bool inside = true;
    for (int d = 0; d < g.dims; ++d) {
      int64_t x = start[d] + k[d] * g.dil[d];
      inside = inside && x >= 0 && x < g.in[d];
      flat = flat * g.in[d] + x;
    }
    f(inside ? flat : int64_t(-1));
    int d = g.dims - 1;
    for (; d >= 0 && ++k[d] == g.kernel[d]; --d)
      k[d] = 0;
    if (d < 0)
      return;
  }
}

/// Calls f(o, coords) for each window o that covers input position `pos`
/// (flat within the plane), in ascending o; coords are o's per-dim indices.
template <typename F>
__device__ inline void forCoveringWindows(const PoolGeom &g, int64_t pos,
                                          F &&f) {
  int64_t xs[kMaxSpatial], lo[kMaxSpatial], hi[kMaxSpatial], o[kMaxSpatial];
  for (int d = g.dims - 1; d >= 0; --d) {
    // Window od covers x when x + padBegin - od * stride is a multiple of
    // the dilation in [0, (kernel - 1) * dilation].
    xs[d] = pos % g.in[d] + g.padBegin[d];
    pos /= g.in[d];
    int64_t first = xs[d] - (g.kernel[d] - 1) * g.dil[d];
    lo[d] = first <= 0 ? 0 : (first + g.stride[d] - 1) / g.stride[d];
    hi[d] = min(g.out[d] - 1, xs[d] / g.stride[d]);
    if (lo[d] > hi[d])
      return;
    o[d] = lo[d];
  }
  while (true) {
    bool hit = true;
    int64_t flat = 0;
    for (int d = 0; d < g.dims; ++d) {
      hit = hit &&
            (g.dil[d] == 1 || (xs[d] - o[d] * g.stride[d]) % g.dil[d] == 0);
      flat = flat * g.out[d] + o[d];
    }
    if (hit)
      f(flat, o);
    int d = g.dims - 1;
    for (; d >= 0 && ++o[d] > hi[d]; --d)
      o[d] = lo[d];
    if (d < 0)
      return;
  }
}

/// The first maximum's flat input position in window o, or -1 (NaN wins).
template <typename T>
__device__ inline int64_t argmaxWindow(const PoolGeom &g, const T *plane,
                                       int64_t o) {
  int64_t best = -1;
  T bv = T(0);
  forWindow(g, o, [&](int64_t at) {
    if (at < 0)
      return;
    T v = plane[at];
    if (best < 0 || v > bv || (isnan(v) && !isnan(bv)))
      best = at, bv = v;
  });
  return best;
}

/// The divisor of the window at per-dim indices `od`, as the CPU's
/// avgDivisors.
__device__ inline int64_t avgDivisor(const PoolGeom &g, const int64_t *od) {
  int64_t count = 1;
  for (int d = 0; d < g.dims; ++d) {
    int64_t c = 0;
    for (int64_t j = 0; j < g.kernel[d]; ++j) {
      int64_t x = od[d] * g.stride[d] - g.padBegin[d] + j * g.dil[d];
      c += g.countIncludePad
               ? (x >= -g.padBegin[d] && x < g.in[d] + g.padEnd[d])
               : (x >= 0 && x < g.in[d]);
    }
    count *= c;
  }
  return count;
}

template <typename T>
__global__ void maxPoolKernel(const T *x, T *y, int64_t *indices, PoolGeom g,
                              int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    int64_t p = i / g.outSize, o = i % g.outSize;
    const T *plane = x + p * g.inSize;
    int64_t at = argmaxWindow(g, plane, o);
    y[i] = at >= 0 ? plane[at] : -static_cast<T>(INFINITY);
    if (indices)
      indices[i] = at;
  }
}

template <typename T>
__global__ void maxPoolBackwardKernel(const T *x, const T *gy, T *gx,
                                      PoolGeom g, int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    int64_t p = i / g.inSize, pos = i % g.inSize;
    const T *plane = x + p * g.inSize;
    const T *grad = gy + p * g.outSize;
    T acc = T(0);
    forCoveringWindows(g, pos, [&](int64_t o, const int64_t *) {
      if (argmaxWindow(g, plane, o) == pos)
        acc += grad[o];
    });
    gx[i] = acc;
  }
}

/// Pass one of the backward: each window's first maximum (or -1).
template <typename T>
__global__ void maxPoolArgmaxKernel(const T *x, int32_t *arg, PoolGeom g,
                                    int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    int64_t p = i / g.outSize, o = i % g.outSize;
    arg[i] = static_cast<int32_t>(argmaxWindow(g, x + p * g.inSize, o));
  }
}

/// Pass two: each input element sums the gradients of the windows whose
/// maximum it is, in ascending window order.
template <typename T>
__global__ void maxPoolRouteKernel(const int32_t *arg, const T *gy, T *gx,
                                   PoolGeom g, int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    int64_t p = i / g.inSize, pos = i % g.inSize;
    const int32_t *best = arg + p * g.outSize;
    const T *grad = gy + p * g.outSize;
    T acc = T(0);
    forCoveringWindows(g, pos, [&](int64_t o, const int64_t *) {
      if (best[o] == pos)
        acc += grad[o];
    });
    gx[i] = acc;
  }
}

template <typename T>
__global__ void avgPoolKernel(const T *x, T *y, PoolGeom g, int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    int64_t p = i / g.outSize, o = i % g.outSize;
    const T *plane = x + p * g.inSize;
    T acc = T(0);
    forWindow(g, o, [&](int64_t at) {
      if (at >= 0)
        acc += plane[at];
    });
    int64_t od[kMaxSpatial];
    for (int d = g.dims - 1; d >= 0; --d) {
      od[d] = o % g.out[d];
      o /= g.out[d];
    }
    y[i] = acc / static_cast<T>(avgDivisor(g, od));
  }
}

template <typename T>
__global__ void avgPoolBackwardKernel(const T *gy, T *gx, PoolGeom g,
                                      int64_t n) {
  DSC_GRID_STRIDE(i, n) {
    int64_t p = i / g.inSize, pos = i % g.inSize;
    const T *grad = gy + p * g.outSize;
    T acc = T(0);
    forCoveringWindows(g, pos, [&](int64_t o, const int64_t *od) {
      acc += grad[o] / static_cast<T>(avgDivisor(g, od));
    });
    gx[i] = acc;
  }
}

template <typename T>
__global__ void globalAvgPoolKernel(const T *x, T *y, int64_t planes,
                                    int64_t size) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    T acc = T(0);
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x)
      acc += x[p * size + i];
    acc = blockSum(acc);
    if (threadIdx.x == 0)
      y[p] = acc / static_cast<T>(size);
  }
}

/// The CPU's std::max_element: the largest non-NaN value, or NaN when the
/// first element is NaN.
template <typename T>
__global__ void globalMaxPoolKernel(const T *x, T *y, int64_t planes,
                                    int64_t size) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    T best = -static_cast<T>(INFINITY);
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
      T v = x[p * size + i];
      if (v > best)
        best = v;
    }
    best = blockMax(best);
    if (threadIdx.x == 0)
      y[p] = size > 0 && isnan(x[p * size]) ? x[p * size] : best;
  }
}

/// Threads per block of the per-plane kernels: a power of two in [32, 256].
int planeThreads(int64_t size) {
  int t = 32;
  while (t < 256 && t < size)
    t *= 2;
  return t;
}

unsigned planeBlocks(int64_t planes) {
  return static_cast<unsigned>(std::min<int64_t>(planes, 65535 * 8));
}

} // namespace

Status maxPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out,
               const Tensor &indices) {
  Call call("max_pool");
  Windows w;
  if (Status st = checkMaxPool(call, input, attrs, out, indices, w); !st.ok())
    return st;
  PoolGeom g = poolGeom(input, attrs, w);
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  unsigned blocks = blocksFor(n);
  if (input.dtype == DType::F32)
    maxPoolKernel<<<blocks, kThreads, 0, stream()>>>(
        input.as<const float>(), out.as<float>(), indices.as<int64_t>(), g, n);
  else
    maxPoolKernel<<<blocks, kThreads, 0, stream()>>>(
        input.as<const double>(), out.as<double>(), indices.as<int64_t>(), g,
        n);
  DSC_CUDA_LAUNCHED("max_pool");
  return Status();
}

Status maxPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn) {
  Call call("max_pool_backward");
  Windows w;
  if (Status st = checkMaxPoolBackward(call, input, attrs, gradOut, gradIn, w);
      !st.ok())
    return st;
  PoolGeom g = poolGeom(input, attrs, w);
  int64_t n = gradIn.numel();
  if (n == 0)
    return Status();
  unsigned blocks = blocksFor(n);
  int64_t outs = gradOut.numel();
  bool f32 = input.dtype == DType::F32;
  if (g.inSize <= INT32_MAX) {
    // Each window's argmax once (into scratch), then routed per input.
    void *arg = nullptr;
    if (Status st =
            scratch(size_t(outs) * sizeof(int32_t), &arg, "max pool argmax");
        !st.ok())
      return st;
    int32_t *best = static_cast<int32_t *>(arg);
    if (outs > 0) {
      if (f32)
        maxPoolArgmaxKernel<<<blocksFor(outs), kThreads, 0, stream()>>>(
            input.as<const float>(), best, g, outs);
      else
        maxPoolArgmaxKernel<<<blocksFor(outs), kThreads, 0, stream()>>>(
            input.as<const double>(), best, g, outs);
      DSC_CUDA_LAUNCHED("max_pool_backward_argmax");
    }
    if (f32)
      maxPoolRouteKernel<<<blocks, kThreads, 0, stream()>>>(
          best, gradOut.as<const float>(), gradIn.as<float>(), g, n);
    else
      maxPoolRouteKernel<<<blocks, kThreads, 0, stream()>>>(
          best, gradOut.as<const double>(), gradIn.as<double>(), g, n);
    DSC_CUDA_LAUNCHED("max_pool_backward");
    return Status();
  }
  // Planes of 2^31 elements and more: recompute each argmax per input.
  if (f32)
    maxPoolBackwardKernel<<<blocks, kThreads, 0, stream()>>>(
        input.as<const float>(), gradOut.as<const float>(), gradIn.as<float>(),
        g, n);
  else
    maxPoolBackwardKernel<<<blocks, kThreads, 0, stream()>>>(
        input.as<const double>(), gradOut.as<const double>(),
        gradIn.as<double>(), g, n);
  DSC_CUDA_LAUNCHED("max_pool_backward");
  return Status();
}

Status avgPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out) {
  Call call("avg_pool");
  Windows w;
  if (Status st = checkAvgPool(call, input, attrs, out, w); !st.ok())
    return st;
  PoolGeom g = poolGeom(input, attrs, w);
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  unsigned blocks = blocksFor(n);
  if (input.dtype == DType::F32)
    avgPoolKernel<<<blocks, kThreads, 0, stream()>>>(input.as<const float>(),
                                                     out.as<float>(), g, n);
  else
    avgPoolKernel<<<blocks, kThreads, 0, stream()>>>(input.as<const double>(),
                                                     out.as<double>(), g, n);
  DSC_CUDA_LAUNCHED("avg_pool");
  return Status();
}

Status avgPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn) {
  Call call("avg_pool_backward");
  Windows w;
  if (Status st = checkAvgPoolBackward(call, input, attrs, gradOut, gradIn, w);
      !st.ok())
    return st;
  PoolGeom g = poolGeom(input, attrs, w);
  int64_t n = gradIn.numel();
  if (n == 0)
    return Status();
  unsigned blocks = blocksFor(n);
  if (input.dtype == DType::F32)
    avgPoolBackwardKernel<<<blocks, kThreads, 0, stream()>>>(
        gradOut.as<const float>(), gradIn.as<float>(), g, n);
  else
    avgPoolBackwardKernel<<<blocks, kThreads, 0, stream()>>>(
        gradOut.as<const double>(), gradIn.as<double>(), g, n);
  DSC_CUDA_LAUNCHED("avg_pool_backward");
  return Status();
}

namespace {

/// global_avg_pool or (kMax) global_max_pool: one block per (n, c) plane.
template <bool kMax>
Status globalPool(const char *name, const Tensor &input, const Tensor &out) {
  Call call(name);
  int64_t planes, size;
  if (Status st = checkGlobalPool(call, input, out, planes, size); !st.ok())
    return st;
  if (planes == 0)
    return Status();
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    auto kernel = kMax ? globalMaxPoolKernel<T> : globalAvgPoolKernel<T>;
    kernel<<<planeBlocks(planes), planeThreads(size), 0, stream()>>>(
        input.as<const T>(), out.as<T>(), planes, size);
  };
  if (input.dtype == DType::F32)
    launch(float());
  else
    launch(double());
  DSC_CUDA_LAUNCHED(name);
  return Status();
}

} // namespace

Status globalAvgPool(const Tensor &input, const Tensor &out) {
  return globalPool<false>("global_avg_pool", input, out);
}

Status globalMaxPool(const Tensor &input, const Tensor &out) {
  return globalPool<true>("global_max_pool", input, out);
}

} // namespace dsc::cuda
