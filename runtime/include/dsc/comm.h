//===- comm.h - collectives between the ranks of a training step -*- C++
//-*-===//
//
// Generated code calls these for the collectives dsc-zero-partition inserts
// (shard.all_reduce / all_gather / reduce_scatter). The ranks form a 2-D grid
// (replicas x groupSize): ZeRO shards inside a group along axis 1 and
// replicates across groups along axis 0 (hybrid sharding); without hybrid
// sharding the grid is 1 x worldSize. `GridAxes` says which axes a
// collective spans; its group is the ranks that agree with this one on the
// other axes, ordered by linear rank.
//
// Implementations: in-process ranks as threads (runtime/comm/inprocess.*,
// deterministic: reductions add in rank order, so every rank gets bitwise the
// same result), the same through host memory for ranks on GPUs, and NCCL
// with one process per GPU (runtime/cuda/comm.cu). Every implementation checks
// each call against the compiled manifest (the ordered list of collectives
// every rank issues) when one is given, and names the collective in every
// error, so a mismatch or a hang says which collective it is.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_COMM_H
#define DSC_COMM_H

#include "dsc/runtime.h"

#include <cstdint>

namespace dsc {

/// Bit i set: the collective spans grid axis i (0 = replicas, 1 = group).
struct GridAxes {
  uint32_t mask = 0;
};

/// One entry of the compiled collective manifest.
struct CollectiveSpec {
  const char *kind; // "all_reduce", "all_gather" or "reduce_scatter"
  const char *what; // e.g. "bucket 0 gradients", for messages
  DType dtype;
  int64_t inNumel;  // elements this rank sends
  int64_t outNumel; // elements this rank receives
  uint32_t axesMask;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// This rank's position in, and the size of, its group along `axes`.
  virtual int groupRank(GridAxes axes) const = 0;
  virtual int groupSize(GridAxes axes) const = 0;

  /// out = sum over the group of in (same shape).
  virtual Status allReduce(const Tensor &in, const Tensor &out, GridAxes axes,
                           const char *what) = 0;
  /// out = the group's inputs concatenated along dim 0, in group order.
  virtual Status allGather(const Tensor &in, const Tensor &out, GridAxes axes,
                           const char *what) = 0;
  /// out = slice g (this rank's group position) along dim 0 of the sum over
  /// the group of in; in's dim 0 is groupSize times out's.
  virtual Status reduceScatter(const Tensor &in, const Tensor &out,
                               GridAxes axes, const char *what) = 0;

  /// The completion of the collective that writes `out` (dsc.wait): work
  /// issued after it may read `out`, and the collective's input may be
  /// overwritten. Collectives on a GPU run asynchronously on a stream of
  /// their own and this makes the compute stream wait for them; the
  /// synchronous implementations need nothing.
  virtual Status wait(const Tensor &out, const char *what) { return Status(); }

  /// Between steps, outside the compiled manifest: `any` is true on every
  /// process when `local` is true on any of them (a stop was requested, a
  /// save failed), so that all ranks take the same decision. One process
  /// (every rank a thread of it) decides alone: `any` = `local`.
  virtual Status anyRank(bool local, bool &any) {
    any = local;
    return Status();
  }
};

} // namespace dsc

#endif // DSC_COMM_H
