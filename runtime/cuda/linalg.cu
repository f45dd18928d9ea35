//===- linalg.cu - CUDA kernels: matmul and gemm through cuBLASLt ---------===//
//
// Every product is one or more cuBLASLt calls on row-major operands, seen
// column-major: row-major C[M, N] = A @ B is column-major C^T = B^T A^T, so
// cuBLASLt's A is our B and its B our A, with no data moved. A numpy matmul's
// batch dims become a strided batch where each operand is either full or
// broadcast (batch stride 0) along them, and a loop of strided batches for
// other broadcast patterns; a weight shared by every batch folds the batch
// into M (one large GEMM). Descriptors and the chosen algorithm are cached
// per thread and problem, since a training step repeats its shapes.
//
// f16/bf16 (and TF32) products with rows that are not 16-byte aligned, such
// as a GPT-2 LM head over 50257 tokens, run on padded copies in scratch
// (see Staging): 3 to 4 times faster on an H200, at the price of scratch
// growing to the size of the largest staged matrix (1.6 GB for a bf16
// [16384, 50257] result).
//
// gemm adds c through cuBLASLt's C (same shape), its bias epilogue (a row
// vector with beta = 1), or after broadcasting it into the result. With
// beta = 0, c is not read (no 0 * inf = NaN, unlike the CPU reference).
// matmulBiasGrad sums an operand over K with its own column-sum kernels, or
// in the BGRADB/BGRADA epilogue where those cannot (a linear layer's bias
// gradient beside its weight gradient). gemmGelu and
// matmulGeluGrad run the GELU_AUX(_BIAS) and DGELU epilogues, whose aux
// matrix is the GELU input (pre, [M, N] with ld N). Where the heuristic has
// no algorithm for an epilogue, its work runs apart.
//
// cuBLASLt reduces each output element in an order fixed by the algorithm,
// which depends on the problem only, so results are deterministic.
//
//===----------------------------------------------------------------------===//

#include "cpu/checks_layout.h"
#include "cpu/linear_cross_entropy.h"
#include "cuda/common.cuh"
#include "cuda/elementwise_ops.cuh"
#include "cuda/kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

namespace dsc::cuda {

using namespace detail;
using cpu::detail::checkGemm;
using cpu::detail::checkMatmul;
using cpu::detail::FloatTypes;
using cpu::detail::GemmLayout;
using cpu::detail::MatmulLayout;

namespace {

/// cuBLASLt's dtypes, beyond the CPU's f32 and f64.
constexpr FloatTypes kGemmTypes = FloatTypes::F32F64F16BF16;

cudaDataType_t cudaTypeOf(DType t) {
  switch (t) {
  case DType::F64:
    return CUDA_R_64F;
  case DType::F16:
    return CUDA_R_16F;
  case DType::BF16:
    return CUDA_R_16BF;
  default:
    return CUDA_R_32F;
  }
}

/// The largest power of two up to 256 that divides `v` (256 for 0).
uint32_t alignmentOf(uint64_t v) {
  uint32_t a = 256;
  while (a > 1 && v % a)
    a >>= 1;
  return a;
}

uint32_t alignmentOf(const void *p) {
  return alignmentOf(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
}

/// A row-major product D[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for
/// b < batch, D [M, N] contiguous per batch. A is [M, K] ([K, M] with
/// transA), B [K, N] ([N, K] with transB); C has D's layout.
struct Problem {
  DType dtype = DType::F32;
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  int64_t batch = 1;
  int64_t strideA = 0, strideB = 0; // elements between batch matrices
  bool bias = false;                // epilogue adds bias[N] to every row
  // Epilogue writes f32 sums over K into the bias vector: of our A ([M],
  // cuBLASLt's B: BGRADB) or of our B ([N], cuBLASLt's A: BGRADA).
  enum class BiasGrad { None, OfA, OfB } biasGrad = BiasGrad::None;
  bool summing() const { return biasGrad != BiasGrad::None; }
  bool wideOut = false;             // C and D f32 (A and B 16-bit)
  // A GELU epilogue with an aux matrix of D's layout and dtype: Forward
  // writes aux = the sum (bias added) and D = its GELU; Backward writes
  // D = product * gelu'(aux).
  enum class Gelu { None, Forward, Backward } gelu = Gelu::None;
  bool epilogue() const { return bias || summing() || gelu != Gelu::None; }
};

int64_t rowsA(const Problem &p) { return p.transA ? p.k : p.m; }
int64_t colsA(const Problem &p) { return p.transA ? p.m : p.k; }
int64_t rowsB(const Problem &p) { return p.transB ? p.n : p.k; }
int64_t colsB(const Problem &p) { return p.transB ? p.k : p.n; }

/// One cuBLASLt call's pointers.
struct Launch {
  const void *a, *b, *c;
  void *d;
  const void *aux = nullptr; // a GELU epilogue's aux matrix
};

/// The cached cuBLASLt state of one problem. `found` is false when the
/// heuristic had no algorithm (cached too, so fallbacks stay cheap).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;

  LtPlan() = default;
  LtPlan(const LtPlan &) = delete;
  LtPlan &operator=(const LtPlan &) = delete;
  ~LtPlan() {
    if (d)
      cublasLtMatrixLayoutDestroy(d);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p)
      cublasLtMatmulPreferenceDestroy(p);
  }
};

/// Per thread (a thread drives one rank at a time); keyed by everything the
/// descriptors and the heuristic see, including the device.
std::map<std::vector<int64_t>, std::unique_ptr<LtPlan>> &planCache() {
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<LtPlan>> cache;
  return cache;
}

constexpr size_t kMaxCachedPlans = 512;

/// A column-major layout of `rows` x `cols`, strided batch.
Status makeLayout(cublasLtMatrixLayout_t *out, cudaDataType_t type,
                  int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                  int64_t stride) {
  DSC_CUDA_CHECK(cublasLtMatrixLayoutCreate(out, type, uint64_t(rows),
                                            uint64_t(cols), ld));
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    DSC_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(
        *out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    DSC_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(
        *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
        sizeof(stride)));
  }
  return Status();
}

struct Alignments {
  uint32_t a = 256, b = 256, c = 256, d = 256;
  uint32_t aux = 256; // of a GELU epilogue's aux matrix (256 without one)
};

/// cuBLASLt's epilogue for `p`. Our A is cuBLASLt's B and our B its A (see
/// the file comment).
uint32_t epilogueOf(const Problem &p) {
  if (p.gelu == Problem::Gelu::Forward)
    return p.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                  : CUBLASLT_EPILOGUE_GELU_AUX;
  if (p.gelu == Problem::Gelu::Backward)
    return CUBLASLT_EPILOGUE_DGELU;
  if (p.bias)
    return CUBLASLT_EPILOGUE_BIAS;
  return p.biasGrad == Problem::BiasGrad::OfA ? CUBLASLT_EPILOGUE_BGRADB
                                              : CUBLASLT_EPILOGUE_BGRADA;
}

/// Sets the epilogue of `p` (if any) on `op`. The heuristic reads the
/// alignment of the bias and aux pointers; runProduct sets them again per
/// call.
Status setEpilogue(const Problem &p, cudaDataType_t type, const void *bias,
                   const void *aux, cublasLtMatmulDesc_t op) {
  if (!p.epilogue())
    return Status();
  uint32_t epilogue = epilogueOf(p);
  DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (p.summing()) {
    int32_t biasType = CUDA_R_32F;
    DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
        op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType, sizeof(biasType)));
  }
  if (p.bias || p.summing())
    DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
        op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (p.gelu == Problem::Gelu::None)
    return Status();
  // The aux matrix is laid out as D: N x M column-major, ld N.
  int64_t ld = p.n;
  int32_t auxType = type;
  DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &auxType,
      sizeof(auxType)));
  DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  return Status();
}

/// Builds the descriptors of `p` and asks the heuristic for an algorithm.
Status buildPlan(const Problem &p, const Alignments &al, const void *bias,
                 const void *aux, LtPlan &plan) {
  RankDevice &rd = current();
  cudaDataType_t type = cudaTypeOf(p.dtype);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  if (p.dtype == DType::F64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
  } else if (p.dtype == DType::F32 && allowTf32()) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  cudaDataType_t outType = p.wideOut ? CUDA_R_32F : type;
  DSC_CUDA_CHECK(cublasLtMatmulDescCreate(&plan.op, compute, scale));
  // cuBLASLt's A is our B: column-major N x K (or K x N, transposed).
  int32_t opA = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t opB = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
      plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
      plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
  if (Status st = setEpilogue(p, type, bias, aux, plan.op); !st.ok())
    return st;
  // Row-major R x C with pitch ld is column-major C x R with that ld.
  if (Status st = makeLayout(&plan.a, type, colsB(p), rowsB(p), colsB(p),
                             p.batch, p.strideB);
      !st.ok())
    return st;
  if (Status st = makeLayout(&plan.b, type, colsA(p), rowsA(p), colsA(p),
                             p.batch, p.strideA);
      !st.ok())
    return st;
  if (Status st =
          makeLayout(&plan.d, outType, p.n, p.m, p.n, p.batch, p.m * p.n);
      !st.ok())
    return st;

  Preference pref;
  DSC_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
  uint64_t workspace = kGemmWorkspaceBytes;
  DSC_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
      sizeof(workspace)));
  // Our B is cuBLASLt's A and the other way round.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al.a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al.c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al.d}};
  for (const auto &[attr, value] : aligns)
    DSC_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &value,
                                                        sizeof(value)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(rd.lt, plan.op, plan.a, plan.b, plan.d,
                                     plan.d, pref.p, 1, &result, &returned);
  // No algorithm: found stays false. For an epilogue cuBLASLt also
  // answers INVALID_VALUE where it has none (an f16 BGRADB with an f32
  // bias vector, small bf16 ones on an H100): the caller then runs the
  // product and the epilogue's work apart.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
      (st == CUBLAS_STATUS_INVALID_VALUE && p.epilogue()))
    return Status();
  if (st != CUBLAS_STATUS_SUCCESS)
    return check(st, "cublasLtMatmulAlgoGetHeuristic");
  if (returned > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
      result.workspaceSize <= kGemmWorkspaceBytes) {
    plan.algo = result.algo;
    plan.found = true;
  }
  return Status();
}

/// A single large product whose matrices have rows that are not 16-byte
/// aligned (a vocabulary of 50257) misses cuBLASLt's fast tensor-core
/// kernels and runs several times slower. It then runs on copies in scratch
/// whose contiguous extents are rounded up (m, n, k -> m2, n2, k2): the
/// extra K entries are zero, extra M rows and N columns hold anything and
/// only feed result entries that are not copied back. Done only when each
/// copy is small against the product.
struct Staging {
  int64_t m = 0, n = 0, k = 0; // the padded extents
  bool a = false, b = false, d = false;
  bool any() const { return a || b || d; }
};

constexpr int64_t kStageMinWork = int64_t(1) << 26; // M * N * K
constexpr int64_t kStageMinOther = 256;

Staging stagingFor(const Problem &p, size_t launches) {
  Staging s;
  s.m = p.m, s.n = p.n, s.k = p.k;
  bool tensorCores = p.dtype == DType::F16 || p.dtype == DType::BF16 ||
                     (p.dtype == DType::F32 && allowTf32());
  // A wide (f32) D is not staged: its copies would need D's element size;
  // nor a bias gradient (the padded rows would be summed), nor a GELU
  // epilogue (its aux matrix would need a copy too).
  if (!tensorCores || p.wideOut || p.summing() ||
      p.gelu != Problem::Gelu::None || launches != 1 || p.batch != 1 ||
      p.m * p.n * p.k < kStageMinWork)
    return s;
  int64_t q = int64_t(16 / dtypeSize(p.dtype));
  auto up = [q](int64_t v) { return (v + q - 1) / q * q; };
  // Each matrix's contiguous extent: A's m or k, B's k or n, D's n.
  if (p.transA)
    s.m = up(p.m);
  if (!p.transA || p.transB)
    s.k = up(p.k);
  s.n = up(p.n);
  s.a = s.m != p.m || s.k != p.k;
  s.b = s.k != p.k || s.n != p.n;
  s.d = s.m != p.m || s.n != p.n;
  if ((s.a && p.n < kStageMinOther) || (s.b && p.m < kStageMinOther) ||
      (s.d && p.k < kStageMinOther))
    return Staging{p.m, p.n, p.k, false, false, false};
  return s;
}

size_t alignUp256(size_t v) { return (v + 255) / 256 * 256; }

/// Copies a rows x cols row-major matrix between pitches (in elements).
Status copyRows(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
                int64_t rows, int64_t cols, size_t es) {
  DSC_CUDA_CHECK(cudaMemcpy2DAsync(
      dst, size_t(dstPitch) * es, src, size_t(srcPitch) * es, size_t(cols) * es,
      size_t(rows), cudaMemcpyDeviceToDevice, stream()));
  return Status();
}

/// Zeroes rows [r0, rows) x cols [c0, cols) of a rows x cols matrix.
Status zeroTail(char *m, int64_t rows, int64_t cols, int64_t r0, int64_t c0,
                size_t es) {
  if (c0 < cols)
    DSC_CUDA_CHECK(cudaMemset2DAsync(m + size_t(c0) * es, size_t(cols) * es, 0,
                                     size_t(cols - c0) * es, size_t(rows),
                                     stream()));
  if (r0 < rows)
    DSC_CUDA_CHECK(cudaMemsetAsync(m + size_t(r0 * cols) * es, 0,
                                   size_t((rows - r0) * cols) * es, stream()));
  return Status();
}

/// Runs `p` once per launch (all with the same descriptors). `*ran` is false,
/// with nothing enqueued, when cuBLASLt has no algorithm for the problem.
Status runProduct(const Problem &problem, std::vector<Launch> launches,
                  double alpha, double beta, const void *bias, bool *ran) {
  *ran = false;
  if (problem.batch > INT32_MAX)
    return Status::error(StatusCode::Unimplemented,
                         "cuBLASLt batch count above 2^31");
  RankDevice &rd = current();
  size_t es = dtypeSize(problem.dtype);
  Staging stage = stagingFor(problem, launches.size());
  Problem p = problem;
  p.m = stage.m, p.n = stage.n, p.k = stage.k;
  bool stageBias = p.bias && stage.n != problem.n;
  // Staged copies live in scratch at 256-byte aligned offsets.
  Alignments al;
  for (const Launch &l : launches) {
    al.a = std::min(al.a, stage.a ? 256u : alignmentOf(l.a));
    al.b = std::min(al.b, stage.b ? 256u : alignmentOf(l.b));
    al.c = std::min(al.c, stage.d ? 256u : alignmentOf(l.c));
    al.d = std::min(al.d, stage.d ? 256u : alignmentOf(l.d));
    al.aux = std::min(al.aux, alignmentOf(l.aux));
  }
  if (p.batch > 1) {
    // Every matrix of a strided batch must be as aligned as the first.
    al.a = std::min(al.a, alignmentOf(uint64_t(p.strideA) * es));
    al.b = std::min(al.b, alignmentOf(uint64_t(p.strideB) * es));
    al.c = std::min(al.c, alignmentOf(uint64_t(p.m * p.n) * es));
    al.d = std::min(al.d, alignmentOf(uint64_t(p.m * p.n) * es));
  }
  int64_t biasAlign = !(p.bias || p.summing()) ? 0
                      : stageBias              ? 256
                                               : alignmentOf(bias);
  std::vector<int64_t> key = {rd.device,
                              int64_t(p.dtype),
                              p.dtype == DType::F32 && allowTf32(),
                              p.m,
                              p.n,
                              p.k,
                              p.transA,
                              p.transB,
                              p.batch,
                              p.strideA,
                              p.strideB,
                              p.bias,
                              int64_t(p.biasGrad),
                              p.wideOut,
                              al.a,
                              al.b,
                              al.c,
                              al.d,
                              biasAlign,
                              int64_t(p.gelu),
                              al.aux};
  auto &cache = planCache();
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxCachedPlans)
      cache.clear();
    auto plan = std::make_unique<LtPlan>();
    if (Status st = buildPlan(p, al, bias, launches[0].aux, *plan); !st.ok())
      return st;
    it = cache.emplace(std::move(key), std::move(plan)).first;
  }
  LtPlan &plan = *it->second;
  if (!plan.found)
    return Status();

  const Launch orig = launches[0];
  if (stage.any() || stageBias) {
    const Problem &o = problem;
    size_t bytesA = stage.a ? alignUp256(size_t(p.m * p.k) * es) : 0;
    size_t bytesB = stage.b ? alignUp256(size_t(p.k * p.n) * es) : 0;
    size_t bytesD = stage.d ? alignUp256(size_t(p.m * p.n) * es) : 0;
    size_t bytesBias = stageBias ? alignUp256(size_t(p.n) * es) : 0;
    void *base = nullptr;
    if (Status st = scratch(bytesA + bytesB + bytesD + bytesBias, &base,
                            "GEMM staging copies");
        !st.ok())
      return st;
    char *at = static_cast<char *>(base);
    Launch &l = launches[0];
    if (stage.a) {
      // Row-major rowsA x colsA, the extra K entries zero.
      if (Status st =
              copyRows(at, colsA(p), orig.a, colsA(o), rowsA(o), colsA(o), es);
          !st.ok())
        return st;
      if (Status st = p.transA
                          ? zeroTail(at, rowsA(p), colsA(p), o.k, colsA(p), es)
                          : zeroTail(at, rowsA(p), colsA(p), rowsA(p), o.k, es);
          !st.ok())
        return st;
      l.a = at;
      at += bytesA;
    }
    if (stage.b) {
      if (Status st =
              copyRows(at, colsB(p), orig.b, colsB(o), rowsB(o), colsB(o), es);
          !st.ok())
        return st;
      if (Status st = p.transB
                          ? zeroTail(at, rowsB(p), colsB(p), rowsB(p), o.k, es)
                          : zeroTail(at, rowsB(p), colsB(p), o.k, colsB(p), es);
          !st.ok())
        return st;
      l.b = at;
      at += bytesB;
    }
    if (stage.d) {
      // C shares D's layout: read from the staged D.
      if (beta != 0)
        if (Status st = copyRows(at, p.n, orig.c, o.n, o.m, o.n, es); !st.ok())
          return st;
      l.c = l.d = at;
      at += bytesD;
    }
    if (stageBias) {
      DSC_CUDA_CHECK(cudaMemcpyAsync(at, bias, size_t(o.n) * es,
                                     cudaMemcpyDeviceToDevice, stream()));
      bias = at;
    }
  }
  if (p.bias || p.summing())
    DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  float alphaF = float(alpha), betaF = float(beta);
  const void *alphaP = &alphaF, *betaP = &betaF;
  if (p.dtype == DType::F64)
    alphaP = &alpha, betaP = &beta;
  for (const Launch &l : launches) {
    if (p.gelu != Problem::Gelu::None)
      DSC_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
          plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &l.aux,
          sizeof(l.aux)));
    DSC_CUDA_CHECK(cublasLtMatmul(rd.lt, plan.op, alphaP, l.b, plan.a, l.a,
                                  plan.b, betaP, l.c, plan.d, l.d, plan.d,
                                  &plan.algo, rd.ltWorkspace,
                                  kGemmWorkspaceBytes, rd.compute));
  }
  DSC_CUDA_LAUNCHED("cublasLtMatmul");
  if (stage.d)
    if (Status st = copyRows(orig.d, problem.n, launches[0].d, p.n, problem.m,
                             problem.n, es);
        !st.ok())
      return st;
  *ran = true;
  return Status();
}

Status noAlgorithm(const Call &call, const Problem &p) {
  return call.fail("cuBLASLt has no algorithm for M=" + std::to_string(p.m) +
                       " N=" + std::to_string(p.n) +
                       " K=" + std::to_string(p.k) +
                       " batch=" + std::to_string(p.batch),
                   StatusCode::Unimplemented);
}

__device__ inline double toDouble(float v) { return v; }
__device__ inline double toDouble(double v) { return v; }
__device__ inline double toDouble(__half v) { return __half2float(v); }
__device__ inline double toDouble(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T> __device__ inline T fromDouble(double v) {
  return static_cast<T>(v);
}
template <> __device__ inline __half fromDouble(double v) {
  return __float2half_rn(static_cast<float>(v));
}
template <> __device__ inline __nv_bfloat16 fromDouble(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}

/// out[i] = scale * c[broadcast(i)], or 0 without c.
template <typename T>
__global__ void broadcastScaleKernel(const T *c, Dims cd, T *out, int64_t n,
                                     double scale) {
  DSC_GRID_STRIDE(i, n) {
    if (!c)
      out[i] = fromDouble<T>(0.0);
    else if (scale == 1)
      out[i] = c[offsetOf(i, cd)];
    else
      out[i] = fromDouble<T>(scale * toDouble(c[offsetOf(i, cd)]));
  }
}

/// out (rank 2) = scale * broadcast(c), or zeros when c is absent.
Status broadcastScale(const Tensor &c, const Tensor &out, double scale) {
  int64_t n = out.numel();
  if (n == 0)
    return Status();
  Dims cd = c.present() ? broadcastDims(c, out) : Dims();
  cudaStream_t s = stream();
  unsigned blocks = blocksFor(n);
  switch (out.dtype) {
  case DType::F32:
    broadcastScaleKernel<<<blocks, kThreads, 0, s>>>(c.as<const float>(), cd,
                                                     out.as<float>(), n, scale);
    break;
  case DType::F64:
    broadcastScaleKernel<<<blocks, kThreads, 0, s>>>(
        c.as<const double>(), cd, out.as<double>(), n, scale);
    break;
  case DType::F16:
    broadcastScaleKernel<<<blocks, kThreads, 0, s>>>(
        c.as<const __half>(), cd, out.as<__half>(), n, scale);
    break;
  default:
    broadcastScaleKernel<<<blocks, kThreads, 0, s>>>(
        c.as<const __nv_bfloat16>(), cd, out.as<__nv_bfloat16>(), n, scale);
    break;
  }
  DSC_CUDA_LAUNCHED("gemm_broadcast_c");
  return Status();
}

/// numpy matmul of lhs and rhs, checked into `l`: each the view of a stored
/// operand, transposed in its last two dims where tl / tr say so (cuBLASLt
/// reads the stored operand transposed).
Status matmulImpl(const Call &call, const Tensor &lhs, bool tl,
                  const Tensor &rhs, bool tr, const Tensor &out,
                  const MatmulLayout &l) {
  if (out.numel() == 0)
    return Status();
  if (l.k == 0) {
    DSC_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), stream()));
    return Status();
  }
  // Batch strides in matrices over the output's batch dims (0: broadcast),
  // leaving out dims of size 1.
  std::array<int64_t, kMaxRank> ls{}, rs{};
  cpu::detail::broadcastStrides(l.lhsBatch, l.outBatch, ls);
  cpu::detail::broadcastStrides(l.rhsBatch, l.outBatch, rs);
  std::vector<int64_t> size, sl, sr;
  for (int d = 0; d < l.outBatch.rank; ++d)
    if (l.outBatch.shape[d] != 1) {
      size.push_back(l.outBatch.shape[d]);
      sl.push_back(ls[d]);
      sr.push_back(rs[d]);
    }
  // The longest suffix of batch dims along which each operand's offset is
  // linear in the flat batch index (coefficient cl, cr: 0 broadcasts) is
  // one strided batch; the dims before it are looped over.
  size_t split = size.size();
  int64_t inner = 1, cl = 0, cr = 0;
  if (!size.empty()) {
    split = size.size() - 1;
    inner = size.back(), cl = sl.back(), cr = sr.back();
    while (split > 0 && sl[split - 1] == cl * inner &&
           sr[split - 1] == cr * inner)
      inner *= size[--split];
  }
  Problem p;
  p.dtype = lhs.dtype;
  p.m = l.m, p.n = l.n, p.k = l.k;
  p.transA = tl, p.transB = tr;
  p.batch = inner;
  p.strideA = cl * l.m * l.k;
  p.strideB = cr * l.k * l.n;
  p.wideOut = out.dtype != lhs.dtype; // f32 out of 16-bit operands
  if (inner > 1 && cr == 0 && cl == 1 && !tl) {
    // One rhs for the whole batch: the lhs batch is just more rows.
    p.m *= inner;
    p.batch = 1;
    p.strideA = 0;
  }
  int64_t outer = 1;
  for (size_t d = 0; d < split; ++d)
    outer *= size[d];
  size_t es = dtypeSize(lhs.dtype), outEs = dtypeSize(out.dtype);
  const char *a = static_cast<const char *>(lhs.data);
  const char *b = static_cast<const char *>(rhs.data);
  char *y = static_cast<char *>(out.data);
  std::vector<Launch> launches;
  launches.reserve(size_t(outer));
  std::vector<int64_t> idx(split, 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t lo = 0, ro = 0;
    for (size_t d = 0; d < split; ++d)
      lo += idx[d] * sl[d], ro += idx[d] * sr[d];
    char *dst = y + size_t(o * inner * l.m * l.n) * outEs;
    launches.push_back({a + size_t(lo * l.m * l.k) * es,
                        b + size_t(ro * l.k * l.n) * es, dst, dst});
    for (size_t dd = split; dd-- > 0;) {
      if (++idx[dd] < size[dd])
        break;
      idx[dd] = 0;
    }
  }
  bool ran = false;
  if (Status st = runProduct(p, launches, 1.0, 0.0, nullptr, &ran); !st.ok())
    return st;
  return ran ? Status() : noAlgorithm(call, p);
}

} // namespace

Status matmul(const Tensor &lhs, const Tensor &rhs, const Tensor &out) {
  Call call("matmul");
  MatmulLayout l;
  if (Status st = checkMatmul(call, lhs, rhs, out, kGemmTypes, l); !st.ok())
    return st;
  return matmulImpl(call, lhs, false, rhs, false, out, l);
}

Status matmulTransposed(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, const Tensor &out) {
  Call call("matmul");
  call.arg("lhs", lhs)
      .raw("trans_lhs", transLhs ? "true" : "false")
      .arg("rhs", rhs)
      .raw("trans_rhs", transRhs ? "true" : "false")
      .arg("out", out);
  Tensor opLhs, opRhs;
  MatmulLayout l;
  if (Status st = cpu::detail::matmulTransposedLayout(
          call, lhs, transLhs, rhs, transRhs, out, kGemmTypes, opLhs, opRhs, l);
      !st.ok())
    return st;
  return matmulImpl(call, opLhs, transLhs, opRhs, transRhs, out, l);
}

Status gemm(const Tensor &a, const Tensor &b, const Tensor &c,
            const GemmAttrs &attrs, const Tensor &out) {
  Call call("gemm");
  GemmLayout l;
  if (Status st = checkGemm(call, a, b, c, attrs, out, kGemmTypes, l); !st.ok())
    return st;
  int64_t m = l.m, n = l.n, k = l.k;
  const std::array<int64_t, kMaxRank> &cs = l.cStrides;
  if (m == 0 || n == 0)
    return Status();
  // beta == 0 ignores c (as BLAS does): no 0 * inf.
  bool useC = c.present() && attrs.beta != 0;
  if (k == 0)
    return broadcastScale(useC ? c : Tensor(), out, attrs.beta);

  Problem p;
  p.dtype = a.dtype;
  p.m = m, p.n = n, p.k = k;
  p.transA = attrs.transA, p.transB = attrs.transB;
  bool ran = false;
  if (!useC) {
    if (Status st = runProduct(p, {{a.data, b.data, out.data, out.data}},
                               attrs.alpha, 0.0, nullptr, &ran);
        !st.ok())
      return st;
    return ran ? Status() : noAlgorithm(call, p);
  }
  if (cpu::detail::sameShape(c, out)) {
    if (Status st = runProduct(p, {{a.data, b.data, c.data, out.data}},
                               attrs.alpha, attrs.beta, nullptr, &ran);
        !st.ok())
      return st;
    return ran ? Status() : noAlgorithm(call, p);
  }
  // A row vector c (one value per column) with beta 1 is a bias epilogue.
  if (attrs.beta == 1 && a.dtype != DType::F64 && cs[0] == 0 &&
      (n == 1 || cs[1] == 1)) {
    Problem pb = p;
    pb.bias = true;
    if (Status st = runProduct(pb, {{a.data, b.data, out.data, out.data}},
                               attrs.alpha, 0.0, c.data, &ran);
        !st.ok())
      return st;
    if (ran)
      return Status();
  }
  // Otherwise c is broadcast into out first and read back as C.
  if (Status st = broadcastScale(c, out, 1.0); !st.ok())
    return st;
  if (Status st = runProduct(p, {{a.data, b.data, out.data, out.data}},
                             attrs.alpha, attrs.beta, nullptr, &ran);
      !st.ok())
    return st;
  return ran ? Status() : noAlgorithm(call, p);
}

namespace {

/// Column sums of a 16-bit [rows, cols] matrix into f32 [cols] (a bias
/// gradient): a thread takes 8 adjacent columns (one 16-byte load a row)
/// over its share of a chunk of kColRows rows, summing in f32; the block's
/// kColGroups row groups are added in order through shared memory and each
/// chunk's sums stored as double; columnChunkSumKernel adds the chunks in
/// order. Fixed by the shape: the same bits on every run.
constexpr int kColGroups = 8, kColRows = 256;

template <bool kBf16> __device__ __forceinline__ float widen16(uint32_t bits) {
  return kBf16 ? bf16BitsToFloat(uint16_t(bits))
               : halfBitsToFloat(uint16_t(bits));
}

template <bool kBf16>
__global__ void __launch_bounds__(32 * kColGroups)
    columnChunkKernel(const uint16_t *__restrict__ x, int64_t rows,
                      int64_t cols, double *__restrict__ partials) {
  __shared__ float part[kColGroups][32 * 8];
  const int lane = threadIdx.x % 32, group = threadIdx.x / 32;
  const int64_t c0 = (int64_t(blockIdx.x) * 32 + lane) * 8;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * kColRows, r1 = min(rows, r0 + kColRows);
  float acc[8] = {};
  if (c0 < cols)
    for (int64_t r = r0 + group; r < r1; r += kColGroups) {
      uint4 w = __ldcs(reinterpret_cast<const uint4 *>(x + r * cols + c0));
      const uint32_t h[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        acc[2 * k] += widen16<kBf16>(h[k] & 0xffffu);
        acc[2 * k + 1] += widen16<kBf16>(h[k] >> 16);
      }
    }
#pragma unroll
  for (int u = 0; u < 8; ++u)
    part[group][lane * 8 + u] = acc[u];
  __syncthreads();
  // Thread t sums column t of the block's 256 over the groups, in order.
  int64_t c = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (c < cols) {
    float sum = part[0][threadIdx.x];
#pragma unroll
    for (int g = 1; g < kColGroups; ++g)
      sum += part[g][threadIdx.x];
    partials[chunk * cols + c] = double(sum);
  }
}

__global__ void columnChunkSumKernel(const double *__restrict__ partials,
                                     int64_t cols, int64_t chunks,
                                     float *__restrict__ out) {
  DSC_GRID_STRIDE(c, cols) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k)
      s += partials[k * cols + c];
    out[c] = float(s);
  }
}

/// Whether a bias gradient that columnSums16 can sum still takes cuBLASLt's
/// BGRAD epilogue (DSC_BIAS_GRAD_EPILOGUE=1: a measurement, device_run.sh
/// gpt2-bgrad). By default it does not: GPT-2 124M's step took 35.35 ms
/// against 35.76 with the epilogue (H100, call C) and 35.53 against 35.90
/// (call D; bench/results/2026-12-07-h100-norm-residual.md), although one
/// step's kernels under Nsight Compute give the column sums 1.53 ms (1.05
/// + 0.48) against 1.35 ms for the epilogue's reduction kernels.
bool biasGradEpilogue() {
  static const bool on = [] {
    const char *v = std::getenv("DSC_BIAS_GRAD_EPILOGUE");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

/// The row chunks columnSums16 sums x's columns in, or 0 when it cannot
/// take x: a 16-bit matrix with 8 | cols and 16-byte rows, an f32 out.
int64_t columnSumChunks(const Tensor &x, const Tensor &out) {
  if ((x.dtype != DType::BF16 && x.dtype != DType::F16) || x.rank != 2 ||
      out.dtype != DType::F32 || x.shape[1] % 8 != 0 ||
      reinterpret_cast<uintptr_t>(x.data) % 16 != 0)
    return 0;
  int64_t chunks = std::max<int64_t>(1, (x.shape[0] + kColRows - 1) / kColRows);
  return chunks > 65535 ? 0 : chunks;
}

/// out[c] = sum over rows of x[r, c] (16-bit x, f32 out), or false in
/// *done when columnSumChunks cannot take x.
Status columnSums16(const Tensor &x, const Tensor &out, bool *done) {
  *done = false;
  int64_t chunks = columnSumChunks(x, out);
  if (chunks == 0)
    return Status();
  int64_t rows = x.shape[0], cols = x.shape[1];
  void *base = nullptr;
  if (Status st = scratch(sizeof(double) * chunks * cols, &base,
                          "bias gradient partials");
      !st.ok())
    return st;
  double *partials = static_cast<double *>(base);
  dim3 grid(unsigned((cols + 255) / 256), unsigned(chunks));
  auto kernel = x.dtype == DType::BF16 ? columnChunkKernel<true>
                                       : columnChunkKernel<false>;
  kernel<<<grid, 32 * kColGroups, 0, stream()>>>(x.as<const uint16_t>(), rows,
                                                 cols, partials);
  DSC_CUDA_LAUNCHED("bias_grad_columns");
  columnChunkSumKernel<<<blocksFor(cols), kThreads, 0, stream()>>>(
      partials, cols, chunks, out.as<float>());
  DSC_CUDA_LAUNCHED("bias_grad_column_sums");
  *done = true;
  return Status();
}

} // namespace

Status matmulBiasGrad(const Tensor &lhs, const Tensor &rhs, bool sumRhs,
                      const Tensor &out, const Tensor &biasGrad) {
  Call call("matmul_bias_grad");
  call.arg("lhs", lhs).arg("rhs", rhs);
  if (sumRhs)
    call.raw("sum_rhs", "true");
  call.arg("out", out).arg("bias_grad", biasGrad);
  if (Status st = cpu::detail::checkMatmulBiasGrad(call, lhs, rhs, sumRhs, out,
                                                   biasGrad, kGemmTypes);
      !st.ok())
    return st;
  Problem p;
  p.dtype = lhs.dtype;
  p.m = out.shape[0], p.n = out.shape[1], p.k = lhs.shape[0];
  p.transA = true;
  p.wideOut = out.dtype != lhs.dtype;
  p.biasGrad = sumRhs ? Problem::BiasGrad::OfB : Problem::BiasGrad::OfA;
  bool ran = false;
  bool epilogue =
      biasGradEpilogue() || columnSumChunks(sumRhs ? rhs : lhs, biasGrad) == 0;
  if (p.m != 0 && p.n != 0 && p.k != 0 && p.dtype != DType::F64 && epilogue) {
    if (Status st = runProduct(p, {{lhs.data, rhs.data, out.data, out.data}},
                               1.0, 0.0, biasGrad.data, &ran);
        !st.ok())
      return st;
  }
  if (ran)
    return Status();
  // No epilogue for this problem: the product, then the column sums.
  if (Status st = matmulTransposed(lhs, true, rhs, false, out); !st.ok())
    return st;
  bool done = false;
  if (Status st = columnSums16(sumRhs ? rhs : lhs, biasGrad, &done);
      !st.ok() || done)
    return st;
  const int64_t rows[] = {0};
  return cuda::reduce(ReduceOp::Sum, sumRhs ? rhs : lhs, I64s(rows, 1), false,
                      biasGrad);
}

namespace {

/// out = round(gelu(f32(pre))), or with `backward` out = round(f32(out) *
/// gelu'(f32(pre))): a GELU epilogue's work where cuBLASLt has none. This
/// file is not built with -fmad=false (unlike elementwise.cu), so the f32
/// math may contract multiply-adds: within an f32 ulp or so of the CPU's.
template <typename T>
__global__ void geluEpilogueKernel(const T *pre, T *out, int64_t n,
                                   bool backward) {
  DSC_GRID_STRIDE(i, n) {
    float x = float(toDouble(pre[i]));
    float y = backward ? float(toDouble(out[i])) * ops::geluDerivative(x, true)
                       : ops::geluOf(x, true);
    out[i] = fromDouble<T>(y);
  }
}

Status geluEpilogue(const Tensor &pre, const Tensor &out, bool backward) {
  int64_t n = out.numel();
  cudaStream_t s = stream();
  unsigned blocks = blocksFor(n);
  switch (out.dtype) {
  case DType::F32:
    geluEpilogueKernel<<<blocks, kThreads, 0, s>>>(
        pre.as<const float>(), out.as<float>(), n, backward);
    break;
  case DType::F16:
    geluEpilogueKernel<<<blocks, kThreads, 0, s>>>(
        pre.as<const __half>(), out.as<__half>(), n, backward);
    break;
  default:
    geluEpilogueKernel<<<blocks, kThreads, 0, s>>>(
        pre.as<const __nv_bfloat16>(), out.as<__nv_bfloat16>(), n, backward);
    break;
  }
  DSC_CUDA_LAUNCHED("gemm_gelu_epilogue");
  return Status();
}

/// The checked product of gemmGelu / matmulGeluGrad: a [M, K] @ op(b).
Problem geluProblem(const Tensor &a, bool transB, const Tensor &out,
                    Problem::Gelu gelu) {
  Problem p;
  p.dtype = a.dtype;
  p.m = out.shape[0], p.n = out.shape[1], p.k = a.shape[1];
  p.transB = transB;
  p.gelu = gelu;
  return p;
}

/// One cuBLASLt call with the GELU epilogue of `p` (aux = pre), where
/// cuBLASLt takes it: its aux ld (N) must be a multiple of 8. `*ran` is
/// false otherwise.
Status runGeluEpilogue(const Problem &p, const Tensor &a, const Tensor &b,
                       const void *bias, const Tensor &pre, const Tensor &out,
                       bool *ran) {
  *ran = false;
  if (p.k == 0 || p.n % 8 != 0)
    return Status();
  return runProduct(p, {{a.data, b.data, out.data, out.data, pre.data}}, 1.0,
                    0.0, bias, ran);
}

} // namespace

Status gemmGelu(const Tensor &a, const Tensor &b, bool transB,
                const Tensor &bias, const Tensor &out, const Tensor &pre) {
  Call call("gemm_gelu");
  if (Status st = cpu::detail::checkGemmGelu(call, a, b, transB, bias, out, pre,
                                             kGemmTypes);
      !st.ok())
    return st;
  Problem p = geluProblem(a, transB, out, Problem::Gelu::Forward);
  p.bias = bias.present();
  if (p.dtype == DType::F64)
    return noAlgorithm(call, p); // cuBLASLt has no f64 GELU epilogue
  if (p.m == 0 || p.n == 0)
    return Status();
  bool ran = false;
  if (Status st = runGeluEpilogue(p, a, b, bias.data, pre, out, &ran);
      !st.ok() || ran)
    return st;
  // The product plus bias into pre, as gemm adds a row vector c, then the
  // GELU of its rounded values.
  GemmAttrs attrs;
  attrs.transB = transB;
  if (Status st = cuda::gemm(a, b, bias, attrs, pre); !st.ok())
    return st;
  return geluEpilogue(pre, out, false);
}

Status matmulGeluGrad(const Tensor &a, const Tensor &b, bool transB,
                      const Tensor &pre, const Tensor &out) {
  Call call("matmul_gelu_grad");
  if (Status st = cpu::detail::checkMatmulGeluGrad(call, a, b, transB, pre, out,
                                                   kGemmTypes);
      !st.ok())
    return st;
  Problem p = geluProblem(a, transB, out, Problem::Gelu::Backward);
  if (p.dtype == DType::F64)
    return noAlgorithm(call, p); // cuBLASLt has no f64 GELU epilogue
  if (p.m == 0 || p.n == 0)
    return Status();
  bool ran = false;
  if (Status st = runGeluEpilogue(p, a, b, nullptr, pre, out, &ran);
      !st.ok() || ran)
    return st;
  // The product rounded into out, then scaled there in place.
  if (Status st = matmulTransposed(a, false, b, transB, out); !st.ok())
    return st;
  return geluEpilogue(pre, out, true);
}

Status matmulAccumulate(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, bool accumulate, const Tensor &out) {
  Call call("matmul_accumulate");
  call.arg("lhs", lhs)
      .raw("trans_lhs", transLhs ? "true" : "false")
      .arg("rhs", rhs)
      .raw("trans_rhs", transRhs ? "true" : "false")
      .raw("accumulate", accumulate ? "true" : "false")
      .arg("out", out);
  if (Status st = cpu::detail::checkMatmulAccumulate(call, lhs, transLhs, rhs,
                                                     transRhs, out, kGemmTypes);
      !st.ok())
    return st;
  Problem p;
  p.dtype = lhs.dtype;
  p.m = out.shape[0], p.n = out.shape[1];
  p.k = transLhs ? lhs.shape[0] : lhs.shape[1];
  p.transA = transLhs, p.transB = transRhs;
  p.wideOut = out.dtype != lhs.dtype;
  if (p.m == 0 || p.n == 0)
    return Status();
  if (p.k == 0 && !accumulate)
    DSC_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), stream()));
  if (p.k == 0)
    return Status();
  bool ran = false;
  if (Status st = runProduct(p, {{lhs.data, rhs.data, out.data, out.data}}, 1.0,
                             accumulate ? 1.0 : 0.0, nullptr, &ran);
      !st.ok())
    return st;
  return ran ? Status() : noAlgorithm(call, p);
}

namespace {
/// The kernels linearCrossEntropyChunks runs, on the device.
struct CudaKernels {
  template <typename... A> static Status matmulTransposed(A &&...a) {
    return cuda::matmulTransposed(a...);
  }
  template <typename... A> static Status matmulAccumulate(A &&...a) {
    return cuda::matmulAccumulate(a...);
  }
  template <typename... A>
  static Status softmaxCrossEntropyWithBackward(A &&...a) {
    return cuda::softmaxCrossEntropyWithBackward(a...);
  }
  template <typename... A> static Status reduce(A &&...a) {
    return cuda::reduce(a...);
  }
  static Status reshape(const Tensor &in, const Tensor &out) {
    return cuda::reshape(in, out);
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
  return cpu::detail::linearCrossEntropyChunks<CudaKernels>(
      "linear_cross_entropy", input, weight, transWeight, labels, ignoreIndex,
      seed, logits, chunkLoss, loss, gradInput, gradWeight, init);
}

} // namespace dsc::cuda
