//===- checkpoint.h - Training checkpoints on disk ---------------*- C++
//-*-===//
//
// A checkpoint is one directory per saved step:
//
//   DIR/step_<N>/manifest.json          what the step holds (below)
//   DIR/step_<N>/rank_<RRRRR>.safetensors  one rank's tensors
//   DIR/latest                           "step_<N>\n", replaced atomically
//
// Every tensor has a logical name and its full shape, independent of how
// the program that wrote it was sharded:
//
//   param/<ONNX initializer>      a trainable parameter (fp32 master)
//   optim/<param>/<slot>          optimizer state (exp_avg, exp_avg_sq,
//                                 momentum_buffer)
//   buffer/<ONNX initializer>     non-trainable state (running stats)
//   scaler/<name>                 fp16 loss-scaler state
//
// A rank stores a logical tensor whole (the tensor in its file has the
// logical name and shape) or a piece of it: elements [offset, offset +
// numel) in row-major order, as a 1-D tensor named "<logical>@<offset>".
// A ZeRO shard of a flat bucket is the pieces of the parameters it
// overlaps, so a checkpoint can be read back at any world size or stage:
// the reader assembles any element range of any logical tensor.
//
// Writing is in two phases, so that several processes can write one step:
// each rank writes its file and a sidecar `rank_<R>.json` (its pieces and
// the file's size and SHA-256) into DIR/step_<N>.tmp and fsyncs both;
// rank 0 then waits for every sidecar, writes manifest.json, fsyncs, and
// renames step_<N>.tmp to step_<N> and updates `latest` (both atomic). A
// reader never sees a step without its manifest.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_CHECKPOINT_H
#define DSC_RUNTIME_IO_CHECKPOINT_H

#include "dsc/runtime.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dsc::io {

struct CheckpointPiece {
  int file = 0;       // index into CheckpointManifest::files
  std::string tensor; // its name in that file
  int64_t offset = 0; // first element of the logical tensor it holds
  int64_t numel = 0;
};

struct CheckpointTensor {
  std::string name; // logical name, see above
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<CheckpointPiece> pieces; // cover [0, numel) exactly once

  int64_t numel() const;
};

struct CheckpointFile {
  std::string name; // relative to the step directory
  int rank = 0;
  uint64_t bytes = 0;
  std::string sha256; // lower-case hex
};

/// manifest.json, as written and read back.
struct CheckpointManifest {
  int format = 1;
  int64_t step = 0;        // the optimizer steps taken
  std::string dscVersion;  // of the program that wrote it
  std::string modelPath;   // the ONNX model compiled from
  std::string modelSha256; // its hash at compile time
  std::string optimizer;   // "adamw", "sgd"
  std::string precision;   // "fp32", "bf16", "fp16"
  int worldSize = 1, groupSize = 1, stage = 0;
  std::string compileCommand; // the `dsc compile` command line
  std::string configJson;     // the resolved ds_config ("{}" if none)
  /// The run's scalar state besides tensors (seed, data RNG state, data
  /// position, samples seen, ...): name -> decimal text.
  std::map<std::string, std::string> state;
  std::vector<CheckpointFile> files;
  std::vector<CheckpointTensor> tensors; // sorted by name

  const CheckpointTensor *find(const std::string &name) const;
};

/// One tensor (or piece) a rank saves. `data` is host memory holding
/// `numel` elements of dtype `dtype`; `shape` is the logical tensor's full
/// shape. A whole tensor has offset 0 and numel == the shape's product.
struct ShardTensor {
  std::string name; // logical name
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
  const void *data = nullptr;
};

/// Phase 1, every rank: writes `<tmpDir>/rank_<R>.safetensors` and its
/// sidecar, both fsynced. `tmpDir` is created if missing.
Status writeCheckpointShard(const std::string &tmpDir, int rank,
                            const std::vector<ShardTensor> &tensors);

/// Phase 2, rank 0: waits (up to `timeoutSeconds`) for `numRanks` sidecars
/// in `tmpDir`, writes manifest.json from `base` (its files and tensors are
/// filled from the sidecars; a logical tensor whose pieces do not cover it
/// exactly once is an error), then renames `tmpDir` to `finalDir`, updates
/// `<root>/latest` and removes all but the newest `keepLast` steps of
/// `root` (keepLast <= 0: keep all).
Status commitCheckpoint(const std::string &root, const std::string &tmpDir,
                        const std::string &finalDir, int numRanks,
                        const CheckpointManifest &base, double timeoutSeconds,
                        int keepLast);

/// "DIR/step_<N>" and "DIR/step_<N>.tmp".
std::string checkpointStepDir(const std::string &root, int64_t step);
std::string checkpointTempDir(const std::string &root, int64_t step);

/// What an interrupted save left in `root`, for a run starting there: every
/// `step_<N>.tmp` (a step not committed) is removed; a `step_<N>.old` (a
/// re-save of step N killed between its two renames) is renamed back to
/// `step_<N>` when that is missing, else removed; `latest.tmp.*` nobody
/// writes is removed. `latest` then names a complete step (or none). The
/// paths handled, for a note.
std::vector<std::string> removeStaleCheckpoints(const std::string &root);

/// Removes the temporary folder of a save that failed (`step_<N>.tmp`);
/// true when there was one and it is gone.
bool removeCheckpointTemp(const std::string &tmpDir);

class CheckpointReader {
public:
  CheckpointReader();
  ~CheckpointReader();
  /// `path` is a checkpoint root (its `latest` is followed), or one step
  /// directory. Reads and checks manifest.json (every file present with its
  /// size; every tensor's pieces cover it once and lie within their file).
  Status open(const std::string &path);
  const CheckpointManifest &manifest() const { return manifest_; }
  const std::string &stepDir() const { return dir_; }
  /// Elements [offset, offset + dst.numel()) of logical tensor `name` into
  /// host tensor `dst`, whose dtype must be the logical tensor's.
  Status readRange(const std::string &name, int64_t offset, const Tensor &dst);
  /// The whole logical tensor into `dst` (same numel and dtype).
  Status read(const std::string &name, const Tensor &dst);
  /// Recomputes every file's size and SHA-256 against the manifest; one line
  /// per mismatch in `problems` (none: the checkpoint is intact).
  Status verify(std::vector<std::string> &problems) const;

private:
  struct Files;
  std::string dir_;
  CheckpointManifest manifest_;
  std::unique_ptr<Files> files_; // opened shard files, by index
};

/// The `step_<N>` directories of `root`, oldest (lowest N) first.
std::vector<std::string> checkpointSteps(const std::string &root);

/// What `dsc checkpoint list` prints for one step: step, world size, stage,
/// precision, files and bytes, model; with `withTensors` every tensor with
/// its shape and piece count.
std::string describeCheckpoint(const CheckpointReader &reader,
                               bool withTensors);

/// manifest.json text and back (tests and tools).
std::string manifestToJson(const CheckpointManifest &m);
Status manifestFromJson(const std::string &text, const std::string &what,
                        CheckpointManifest &out);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_CHECKPOINT_H
