//===- graph.cu - The step as a CUDA graph, and the checks it defers ------===//

#include "cpu/step_kernels.h"
#include "cuda/graph.h"
#include "cuda/kernels.h"

#include <map>

namespace dsc::cuda {

namespace {

/// Flag words per rank for every captured step together (one or two per
/// check; a capture that would need more runs directly).
constexpr size_t kDeferredWords = 4096;

struct Deferred {
  size_t offset = 0; // into StepGraphs::words
  Verdict verdict;
};

struct StepGraph {
  bool ranDirectly = false; // the first step with these buffers has run
  bool never = false;       // the capture failed: run directly for good
  cudaGraphExec_t exec = nullptr;
  uint64_t scratchGeneration = 0;
  size_t wordsBegin = 0, wordsEnd = 0;
  std::vector<Deferred> checks;
};

} // namespace

struct StepGraphs {
  std::map<std::vector<const void *>, StepGraph> byKey;
  unsigned long long *words = nullptr;     // device
  unsigned long long *hostWords = nullptr; // pinned, the graphs copy here
  size_t used = 0;
  StepGraph *capturing = nullptr;
  StepGraph *pending = nullptr; // replayed; its verdicts not yet taken

  StepGraphs() = default;
  StepGraphs(const StepGraphs &) = delete;
  StepGraphs &operator=(const StepGraphs &) = delete;
  ~StepGraphs() {
    for (auto &entry : byKey)
      if (entry.second.exec)
        cudaGraphExecDestroy(entry.second.exec);
    cudaFree(words);
    cudaFreeHost(hostWords);
  }
};

namespace {

Status graphsOf(RankDevice &rd, StepGraphs *&out) {
  if (!rd.graphs) {
    auto g = std::make_shared<StepGraphs>();
    size_t bytes = kDeferredWords * sizeof(unsigned long long);
    DSC_CUDA_CHECK(cudaMalloc(&g->words, bytes));
    DSC_CUDA_CHECK(cudaMallocHost(&g->hostWords, bytes));
    DSC_CUDA_CHECK(cudaMemsetAsync(g->words, 0, bytes, rd.compute));
    rd.graphs = std::move(g);
  }
  out = rd.graphs.get();
  return Status();
}

/// Captures `enqueue` into `g`; on any failure `why` says what stopped it
/// and the stream is left as it was (nothing ran).
Status capture(RankDevice &rd, StepGraphs &gs, StepGraph &g,
               const std::function<Status()> &enqueue, std::string &why) {
  g.checks.clear();
  g.wordsBegin = g.wordsEnd = gs.used;
  int64_t draws = cpu::stepVaryingDraws();
  DSC_CUDA_CHECK(
      cudaStreamBeginCapture(rd.compute, cudaStreamCaptureModeThreadLocal));
  gs.capturing = &g;
  Status s = enqueue();
  gs.capturing = nullptr;
  // A capture ends joined: whatever the step forked onto the copy or the
  // host stream (offload.cu) is waited for at the graph's end.
  Status joined = offloadJoin();
  if (s.ok())
    s = joined;
  size_t words = g.wordsEnd - g.wordsBegin;
  Status copied =
      !s.ok() || !words
          ? Status()
          : check(cudaMemcpyAsync(gs.hostWords + g.wordsBegin,
                                  gs.words + g.wordsBegin,
                                  words * sizeof(*gs.words),
                                  cudaMemcpyDeviceToHost, rd.compute),
                  "cudaMemcpyAsync (deferred checks)");
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(rd.compute, &graph);
  bool drew = cpu::stepVaryingDraws() != draws;
  Status result =
      !s.ok()                ? s
      : !copied.ok()         ? copied
      : ended != cudaSuccess ? check(ended, "cudaStreamEndCapture")
      : drew ? Status::error(StatusCode::InvalidArgument,
                             "the step draws dropout seeds on the host")
             : check(cudaGraphInstantiate(&g.exec, graph, 0),
                     "cudaGraphInstantiate");
  if (graph)
    cudaGraphDestroy(graph);
  if (result.ok()) {
    g.scratchGeneration = rd.scratchGeneration;
    return Status();
  }
  (void)cudaGetLastError(); // a failed capture is not the next call's error
  g.exec = nullptr;
  g.checks.clear();
  g.never = true;
  why = result.message();
  return Status();
}

} // namespace

bool capturingStep() {
  RankDevice &rd = current();
  return rd.graphs && rd.graphs->capturing;
}

Status deferredWords(size_t n, unsigned long long **out) {
  RankDevice &rd = current();
  StepGraphs *gs = rd.graphs.get();
  if (!gs || !gs->capturing)
    return Status::error(StatusCode::InvalidArgument,
                         "deferredWords: no step is being captured");
  if (gs->used + n > kDeferredWords)
    return Status::error(StatusCode::OutOfMemory,
                         "deferredWords: more than " +
                             std::to_string(kDeferredWords) +
                             " words of deferred checks");
  *out = gs->words + gs->used;
  gs->used += n;
  gs->capturing->wordsEnd = gs->used;
  return Status();
}

Status deferCheck(const unsigned long long *words, size_t n, Verdict verdict) {
  StepGraphs *gs = current().graphs.get();
  if (!gs || !gs->capturing || words < gs->words ||
      words + n > gs->words + gs->used)
    return Status::error(StatusCode::InvalidArgument,
                         "deferCheck: words not from deferredWords");
  gs->capturing->checks.push_back(
      Deferred{size_t(words - gs->words), std::move(verdict)});
  return Status();
}

Status replayStep(const std::vector<const void *> &key,
                  const std::function<Status()> &enqueue, bool &ran,
                  std::string &why) {
  ran = false;
  RankDevice &rd = current();
  StepGraphs *gs = nullptr;
  if (Status s = graphsOf(rd, gs); !s.ok())
    return s;
  StepGraph &g = gs->byKey[key];
  if (g.never)
    return Status();
  if (g.exec && g.scratchGeneration != rd.scratchGeneration) {
    cudaGraphExecDestroy(g.exec);
    g.exec = nullptr;
  }
  if (!g.exec) {
    if (!g.ranDirectly) {
      g.ranDirectly = true;
      return Status();
    }
    if (Status s = capture(rd, *gs, g, enqueue, why); !s.ok() || !g.exec)
      return s;
  }
  DSC_CUDA_CHECK(cudaGraphLaunch(g.exec, rd.compute));
  gs->pending = g.checks.empty() ? nullptr : &g;
  ran = true;
  return Status();
}

Status deferredVerdicts() {
  RankDevice &rd = current();
  StepGraphs *gs = rd.graphs.get();
  if (!gs || !gs->pending)
    return Status();
  StepGraph &g = *gs->pending;
  gs->pending = nullptr;
  for (const Deferred &d : g.checks)
    if (Status s = d.verdict(gs->hostWords + d.offset); !s.ok())
      return s;
  return Status();
}

} // namespace dsc::cuda
