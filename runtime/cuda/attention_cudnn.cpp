//===- attention_cudnn.cpp - cuDNN SDPA graphs for cuda::attention --------===//
//
// bf16/f16 attention without dropout through cuDNN's fused flash attention,
// built with the cuDNN frontend (header-only, pip nvidia-cudnn-frontend;
// CMake finds its include dir). What cuDNN takes here:
//
//   causal (top-left), an additive float bias (any broadcast cuDNN accepts),
//   grouped-query heads (Hkv < Hq), a sliding window with causal when
//   Tq <= Tk (cuDNN's left bound keeps j + window > i, as dsc does).
//
// Bool masks, dropout (cuDNN's RNG is not dsc's hash), f32/f64 and any graph
// the loaded cuDNN rejects go to dsc's own kernel; a rejected graph prints
// one line to stderr naming the loaded and compiled cuDNN versions (once per
// process) and is remembered, so it is not built again.
//
// Graphs are cached per thread (a rank's thread: its handle and stream) by
// shape, dtype and attributes. cuDNN's "Stats" output is the natural-log
// log-sum-exp of the masked scaled scores, dsc's lse; empty rows are fixed up
// to out 0, lse -inf after the forward, and fed to the backward as +inf so
// they get no gradient.
//
//===----------------------------------------------------------------------===//

#include "cuda/attention_cudnn.h"
#include "cuda/context.h"

#include <cudnn_frontend.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace dsc::cuda::detail {

namespace fe = cudnn_frontend;

namespace {

//===----------------------------------------------------------------------===//
// Switches, counters, versions
//===----------------------------------------------------------------------===//

std::atomic<int> enabledFlag{-1}; // -1: not read from the environment yet
std::atomic<int64_t> forwardRuns{0}, backwardRuns{0}, backwardCalls{0};

std::string versionText(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

/// One line to stderr, the first time cuDNN declines a graph.
void reportFallback(const std::string &why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "dsc: cuDNN attention not used (%s; loaded cuDNN %s, built "
                 "against cuDNN %s, cudnn-frontend %s): running dsc's own "
                 "attention kernel instead\n",
                 why.c_str(), versionText(cudnnGetVersion()).c_str(),
                 versionText(CUDNN_VERSION).c_str(),
                 versionText(CUDNN_FRONTEND_VERSION).c_str());
  });
}

/// cuDNN versions (the loaded library's) the graphs need.
constexpr size_t kMinCudnn = 90000;           // SDPA fwd/bwd with GQA and bias
constexpr size_t kMinCudnnWindow = 90200;     // sliding window (left bound)
constexpr size_t kMinCudnnWindowBias = 91002; // window together with a bias

bool aligned(const Tensor &t) {
  return !t.present() || reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}

/// Whether the request is one cuDNN's graphs express (before building).
bool eligible(const AttentionShape &s, const Tensor &q, const Tensor &mask,
              const AttentionAttrs &attrs,
              std::initializer_list<const Tensor *> views) {
  if (!attentionCudnnEnabled())
    return false;
  if (q.dtype != DType::BF16 && q.dtype != DType::F16)
    return false;
  if (attrs.dropout > 0 || s.boolMask || s.keys == 0)
    return false;
  size_t loaded = cudnnGetVersion();
  if (loaded / 10000 != CUDNN_MAJOR || loaded < kMinCudnn)
    return false;
  if (attrs.window > 0) {
    bool supported =
        attrs.causal && s.queries <= s.keys &&
        attrs.window < (int64_t(1) << 30) &&
        loaded >= (s.hasMask ? kMinCudnnWindowBias : kMinCudnnWindow);
    if (!supported)
      return false;
  }
  for (const Tensor *t : views)
    if (!aligned(*t))
      return false;
  return true;
}

/// Whether a row can have no key left: only through a mask (an additive
/// -inf). Causal attention (top-left) keeps key 0 for every row, and a
/// window with it keeps the diagonal (eligible() takes queries <= keys), so
/// without a mask no row is empty and neither the forward's fix-up nor the
/// backward's stats copy runs.
bool mayHaveEmptyRows(const AttentionShape &s) { return s.hasMask; }

//===----------------------------------------------------------------------===//
// Graphs
//===----------------------------------------------------------------------===//

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kBias, kDO, kDQ, kDK, kDV };

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using GraphPtr = std::shared_ptr<fe::graph::Graph>;

std::vector<int64_t> contiguous(const std::vector<int64_t> &dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int i = int(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return strides;
}

fe::DataType_t feType(DType t) {
  switch (t) {
  case DType::BF16:
    return fe::DataType_t::BFLOAT16;
  case DType::F16:
    return fe::DataType_t::HALF;
  case DType::F64:
    return fe::DataType_t::DOUBLE;
  default:
    return fe::DataType_t::FLOAT;
  }
}

/// The strides of [B, H, T, D] `dims` stored [B, T, H, D] (seq_major), or
/// contiguous.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &dims,
                               bool seqMajor) {
  if (!seqMajor || dims.size() != 4)
    return contiguous(dims);
  int64_t h = dims[1], t = dims[2], d = dims[3];
  return {t * h * d, d, h * d, 1};
}

TensorPtr tensor(const GraphPtr &g, const char *name, Uid uid,
                 const std::vector<int64_t> &dims, bool seqMajor = false) {
  return g->tensor(fe::graph::Tensor_attributes()
                       .set_name(name)
                       .set_uid(uid)
                       .set_dim(dims)
                       .set_stride(stridesOf(dims, seqMajor)));
}

void markOutput(const TensorPtr &t, Uid uid, const std::vector<int64_t> &dims,
                bool seqMajor = false) {
  t->set_output(true).set_uid(uid).set_dim(dims).set_stride(
      stridesOf(dims, seqMajor));
}

/// What a graph depends on: dtypes, sizes, attributes, mask layout.
struct Request {
  const AttentionShape &s;
  DType dtype, maskType;
  const Tensor &mask;
  const AttentionAttrs &attrs;

  std::vector<int64_t> q() const {
    return {s.batch, s.heads, s.queries, s.headDim};
  }
  std::vector<int64_t> k() const {
    return {s.batch, s.kvHeads, s.keys, s.headDim};
  }
  std::vector<int64_t> v() const {
    return {s.batch, s.kvHeads, s.keys, s.valueDim};
  }
  std::vector<int64_t> o() const {
    return {s.batch, s.heads, s.queries, s.valueDim};
  }
  std::vector<int64_t> stats() const {
    return {s.batch, s.heads, s.queries, 1};
  }
  std::vector<int64_t> bias() const { return mask.dims(); }

  std::vector<int64_t> key(int64_t direction) const {
    int64_t scaleBits = 0;
    double scale = attrs.scale;
    std::memcpy(&scaleBits, &scale, sizeof scaleBits);
    std::vector<int64_t> k = {
        direction,  int64_t(dtype),    s.batch,        s.heads,
        s.kvHeads,  s.queries,         s.keys,         s.headDim,
        s.valueDim, attrs.causal,      attrs.window,   scaleBits,
        s.hasMask,  int64_t(maskType), attrs.seqMajor, attrs.deterministic};
    if (s.hasMask)
      for (int64_t d : mask.dims())
        k.push_back(d);
    return k;
  }
};

GraphPtr newGraph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(feType(dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

/// Causal, window and bias on either direction's options.
template <typename Options>
void applyMasking(Options &o, const Request &r, const GraphPtr &g) {
  if (r.attrs.causal)
    o.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
        .set_diagonal_band_right_bound(0);
  if (r.attrs.window > 0)
    o.set_diagonal_band_left_bound(int(r.attrs.window));
  if (r.s.hasMask) {
    TensorPtr bias = tensor(g, "bias", kBias, r.bias());
    bias->set_data_type(feType(r.maskType));
    o.set_bias(bias);
  }
}

std::string buildGraph(const GraphPtr &g, cudnnHandle_t handle) {
  fe::error_t err = g->build(handle, {fe::HeurMode_t::A});
  return err.is_good() ? std::string() : err.get_message();
}

std::string buildForward(const GraphPtr &g, const Request &r,
                         cudnnHandle_t handle) {
  bool sm = r.attrs.seqMajor;
  TensorPtr q = tensor(g, "q", kQ, r.q(), sm),
            k = tensor(g, "k", kK, r.k(), sm);
  TensorPtr v = tensor(g, "v", kV, r.v(), sm);
  auto o = fe::graph::SDPA_attributes()
               .set_name("dsc_attention")
               .set_generate_stats(true)
               .set_attn_scale(float(r.attrs.scale));
  applyMasking(o, r, g);
  auto [out, stats] = g->sdpa(q, k, v, o);
  markOutput(out, kO, r.o(), sm);
  markOutput(stats, kStats, r.stats());
  stats->set_data_type(fe::DataType_t::FLOAT);
  return buildGraph(g, handle);
}

std::string buildBackward(const GraphPtr &g, const Request &r,
                          cudnnHandle_t handle) {
  bool sm = r.attrs.seqMajor;
  TensorPtr q = tensor(g, "q", kQ, r.q(), sm),
            k = tensor(g, "k", kK, r.k(), sm);
  TensorPtr v = tensor(g, "v", kV, r.v(), sm),
            o = tensor(g, "o", kO, r.o(), sm);
  TensorPtr dO = tensor(g, "dO", kDO, r.o(), sm);
  TensorPtr stats = tensor(g, "stats", kStats, r.stats());
  stats->set_data_type(fe::DataType_t::FLOAT);
  // Deterministic (dQ without atomics, a separate dQ kernel), so that a
  // step repeats bit for bit, unless the program was compiled with
  // --nondeterministic-attention (attrs.deterministic false: dQ added with
  // atomics, PyTorch's default).
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("dsc_attention_backward")
                  .set_attn_scale(float(r.attrs.scale))
                  .set_deterministic_algorithm(r.attrs.deterministic);
  applyMasking(opts, r, g);
  auto [dQ, dK, dV] = g->sdpa_backward(q, k, v, o, dO, stats, opts);
  markOutput(dQ, kDQ, r.q(), sm);
  markOutput(dK, kDK, r.k(), sm);
  markOutput(dV, kDV, r.v(), sm);
  return buildGraph(g, handle);
}

constexpr size_t kMaxCachedGraphs = 64;

/// The built graph of (direction, request) for this thread, or null when
/// cuDNN declined it (remembered as such).
GraphPtr cachedGraph(int64_t direction, const Request &r) {
  thread_local std::map<std::vector<int64_t>, GraphPtr> cache;
  std::vector<int64_t> key = r.key(direction);
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  if (cache.size() >= kMaxCachedGraphs)
    cache.clear();
  GraphPtr g = newGraph(r.dtype);
  std::string why;
  try {
    why = direction == 0 ? buildForward(g, r, current().cudnn)
                         : buildBackward(g, r, current().cudnn);
  } catch (const std::exception &e) {
    why = e.what();
  }
  if (!why.empty()) {
    reportFallback(std::string(direction == 0 ? "forward" : "backward") +
                   " graph: " + why);
    g = nullptr;
  }
  cache.emplace(std::move(key), g);
  return g;
}

//===----------------------------------------------------------------------===//
// Execution
//===----------------------------------------------------------------------===//

/// Workspace (and `extraBytes` more, 256-byte aligned after it) from the
/// rank's scratch.
Status workspace(const GraphPtr &g, size_t extraBytes, void **ws, void **extra,
                 const char *what) {
  int64_t bytes = 0;
  if (!g->get_workspace_size(bytes).is_good())
    return callFailed("cudnn_frontend::Graph::get_workspace_size",
                      "no workspace size");
  size_t wsBytes = (size_t(bytes) + 255) & ~size_t(255);
  void *buf = nullptr;
  if (Status st = scratch(wsBytes + extraBytes + 1, &buf, what); !st.ok())
    return st;
  *ws = buf;
  *extra = static_cast<char *>(buf) + wsBytes;
  return Status();
}

/// Batch elements per backward call (dsc/workspaces.h): slices of the
/// batch share one smaller workspace. Each (batch, head) pair is computed
/// alone either way: the slices only change which call computes it.
int64_t backwardSlice(const GraphPtr &whole, int64_t batch, int64_t limit) {
  int64_t bytes = 0;
  if (limit <= 0 || !whole->get_workspace_size(bytes).is_good())
    return batch;
  return attentionBackwardSlice(batch, bytes, limit);
}

Status execute(const GraphPtr &g, std::unordered_map<int64_t, void *> &pack,
               void *ws, const char *what) {
  fe::error_t err = g->execute(current().cudnn, pack, ws);
  if (!err.is_good())
    return callFailed(what, "cuDNN: " + err.get_message());
  return Status();
}

} // namespace

bool attentionCudnnEnabled() {
  int flag = enabledFlag.load();
  if (flag < 0) {
    const char *env = std::getenv("DSC_ATTENTION_CUDNN");
    flag = env && std::strcmp(env, "0") == 0 ? 0 : 1;
    enabledFlag.store(flag);
  }
  return flag == 1;
}

void setAttentionCudnnEnabled(bool enabled) { enabledFlag.store(enabled); }
int64_t attentionCudnnForwardRuns() { return forwardRuns.load(); }
int64_t attentionCudnnBackwardRuns() { return backwardRuns.load(); }
int64_t attentionCudnnBackwardCalls() { return backwardCalls.load(); }

std::optional<Status> cudnnAttentionForward(const AttentionShape &s,
                                            const Tensor &q, const Tensor &k,
                                            const Tensor &v, const Tensor &mask,
                                            const AttentionAttrs &attrs,
                                            const Tensor &out,
                                            const Tensor &lse) {
  if (!eligible(s, q, mask, attrs, {&q, &k, &v, &mask, &out, &lse}))
    return std::nullopt;
  Request r{s, q.dtype, mask.dtype, mask, attrs};
  GraphPtr g = cachedGraph(0, r);
  if (!g)
    return std::nullopt;
  int64_t rows = s.batch * s.heads * s.queries;
  void *ws = nullptr, *statsBuf = nullptr;
  size_t statsBytes = lse.present() ? 0 : size_t(rows) * sizeof(float);
  if (Status st = workspace(g, statsBytes, &ws, &statsBuf,
                            "cuDNN attention forward workspace");
      !st.ok())
    return st;
  float *stats =
      lse.present() ? lse.as<float>() : static_cast<float *>(statsBuf);
  std::unordered_map<int64_t, void *> pack = {{kQ, q.data},
                                              {kK, k.data},
                                              {kV, v.data},
                                              {kO, out.data},
                                              {kStats, stats}};
  if (s.hasMask)
    pack[kBias] = mask.data;
  if (Status st = execute(g, pack, ws, "cudnn sdpa forward (attention)");
      !st.ok())
    return st;
  ++forwardRuns;
  if (!mayHaveEmptyRows(s))
    return Status();
  return attentionFixEmptyRows(out.data, q.dtype, stats, rows, s.heads,
                               s.queries, s.valueDim, attrs.seqMajor);
}

std::optional<Status> cudnnAttentionBackward(
    const AttentionShape &s, const Tensor &q, const Tensor &k, const Tensor &v,
    const Tensor &mask, const Tensor &out, const Tensor &lse,
    const Tensor &gradOut, const AttentionAttrs &attrs, const Tensor &gradQ,
    const Tensor &gradK, const Tensor &gradV) {
  if (!eligible(
          s, q, mask, attrs,
          {&q, &k, &v, &mask, &out, &lse, &gradOut, &gradQ, &gradK, &gradV}))
    return std::nullopt;
  // A bias broadcast over the queries ([B, 1, 1, Tk]: key padding) gives
  // wrong gradients through cuDNN 9.14's backward on an H200 (measured by
  // CudaAttention.FloatMasks, 2026-12-01); its forward is right. The own
  // kernel takes that backward (both read the same lse).
  if (s.hasMask && mask.dims().size() == 4 && mask.dims()[2] == 1 &&
      s.queries > 1)
    return std::nullopt;
  Request whole{s, q.dtype, mask.dtype, mask, attrs};
  GraphPtr g = cachedGraph(1, whole);
  if (!g)
    return std::nullopt;
  int64_t slice = backwardSlice(g, s.batch, attrs.workspaceLimit);
  AttentionShape part = s;
  part.batch = slice;
  Tensor partMask = mask;
  bool maskPerBatch = s.hasMask && mask.rank == 4 && mask.shape[0] == s.batch;
  if (maskPerBatch)
    partMask.shape[0] = slice;
  Request r{part, q.dtype, mask.dtype, partMask, attrs};
  if (slice != s.batch && !(g = cachedGraph(1, r)))
    return std::nullopt;
  int64_t rows = s.batch * s.heads * s.queries;
  // Without empty rows the forward's lse is cuDNN's stats as it is.
  bool empty = mayHaveEmptyRows(s);
  void *ws = nullptr, *statsBuf = nullptr;
  if (Status st = workspace(g, empty ? size_t(rows) * sizeof(float) : 0, &ws,
                            &statsBuf, "cuDNN attention backward workspace");
      !st.ok())
    return st;
  float *stats = lse.as<float>();
  if (empty) {
    stats = static_cast<float *>(statsBuf);
    if (Status st = attentionStatsForCudnn(lse.as<float>(), stats, rows);
        !st.ok())
      return st;
  }
  // Each slice's tensors start `first` batch elements in (contiguous
  // [B, ...] layouts; a mask broadcast over the batch is shared).
  auto at = [&](const Tensor &t, int64_t first) -> void * {
    size_t perElement = t.nbytes() / size_t(s.batch);
    return static_cast<char *>(t.data) + size_t(first) * perElement;
  };
  for (int64_t first = 0; first < s.batch; first += slice) {
    std::unordered_map<int64_t, void *> pack = {
        {kQ, at(q, first)},
        {kK, at(k, first)},
        {kV, at(v, first)},
        {kO, at(out, first)},
        {kDO, at(gradOut, first)},
        {kStats, stats + first * s.heads * s.queries},
        {kDQ, at(gradQ, first)},
        {kDK, at(gradK, first)},
        {kDV, at(gradV, first)}};
    if (s.hasMask)
      pack[kBias] = maskPerBatch ? at(mask, first) : mask.data;
    if (Status st = execute(g, pack, ws, "cudnn sdpa backward (attention)");
        !st.ok())
      return st;
    ++backwardCalls;
  }
  ++backwardRuns;
  return Status();
}

} // namespace dsc::cuda::detail
