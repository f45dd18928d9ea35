//===- graph.h - The step as a CUDA graph, and the checks it defers -*- C++
//-*-===//
//
// After its first step, a rank's step is captured into a CUDA graph and
// replayed: one launch instead of a thousand, no host work between kernels.
// A graph is keyed by the step's buffers (the arguments and results it is
// handed, which alternate between two sets while updates are
// double-buffered), so each set is captured once, on its second step: the
// first runs directly, and libraries choose their algorithms and grow their
// workspaces there.
//
// What a replay cannot repeat makes the capture fail, and that set of
// buffers then runs directly for good (the reason is returned once): a host
// synchronization or allocation inside the step, a value the host draws
// per step (dropout seeds), a communicator's host staging.
//
// Checks that read a device flag back on the host (labels, gather indices,
// integer division) cannot wait inside a graph. While capturing they take
// flag words from deferredWords, which outlive the step, and register a
// verdict with deferCheck; the graph copies the words back at its end, and
// the next synchronize() of the rank turns them into the call's error.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_GRAPH_H
#define DSC_RUNTIME_CUDA_GRAPH_H

#include "cuda/context.h"

#include <functional>
#include <string>
#include <vector>

namespace dsc::cuda {

/// Whether the calling thread is capturing its rank's step (replayStep).
bool capturingStep();
/// `n` device words that stay valid as long as the captured step (only
/// while capturingStep()); the check resets them inside the step.
Status deferredWords(size_t n, unsigned long long **out);
/// Registers the verdict on `n` words from deferredWords, run on their host
/// copy after each replay.
using Verdict = std::function<Status(const unsigned long long *words)>;
Status deferCheck(const unsigned long long *words, size_t n, Verdict verdict);

/// Device::replayStep for the bound rank (see dsc/device.h).
Status replayStep(const std::vector<const void *> &key,
                  const std::function<Status()> &enqueue, bool &ran,
                  std::string &why);
/// The verdicts of the deferred checks of the rank's last replay, once its
/// stream is idle (Device::synchronize calls it).
Status deferredVerdicts();

} // namespace dsc::cuda

#endif // DSC_RUNTIME_CUDA_GRAPH_H
