//===- metrics.h - Scalars in the formats other tools read ------*- C++ -*-===//
//
// The program's metrics (loss, lr, grad norm, loss scale, throughput,
// memory, phase times) go to its JSON lines log and, beside it, to sinks
// that TensorBoard, MLflow and DeepSpeed's csv_monitor readers open:
//
//   TensorBoard  DIR/events.out.tfevents.<time>.<host>.<pid>.0: TFRecord
//                framing (length, masked CRC32C of the length, data, masked
//                CRC32C of the data) around Event protos (a file_version
//                event first, then one Summary scalar per value), encoded
//                by hand (no protobuf in the runtime)
//   MLflow       an MLflow file store rooted at DIR: DIR/<experiment id>/
//                meta.yaml and DIR/<experiment id>/<run id>/{meta.yaml,
//                metrics/, params/, tags/, artifacts/}
//   CSV          DeepSpeed's csv_monitor: DIR/<job name>/<tag>.csv
//
// Only rank 0 writes. Every write is flushed, so a killed run leaves what
// it logged readable.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_METRICS_H
#define DSC_RUNTIME_IO_METRICS_H

#include "dsc/runtime.h"

#include <map>
#include <memory>
#include <string>

namespace dsc::io {

class MetricsSink {
public:
  virtual ~MetricsSink();
  /// One value of `tag` (e.g. "train/loss") at optimizer step `step`;
  /// `wallTime` in seconds since the Unix epoch.
  virtual Status scalar(const std::string &tag, double value, int64_t step,
                        double wallTime) = 0;
  /// Everything written so far reaches the file system.
  virtual Status flush() = 0;
  /// Ends the run (MLflow: status FINISHED, or FAILED when !ok). Idempotent.
  virtual Status close(bool ok) = 0;
};

/// What a run is, for the sinks that record it (MLflow params and tags).
struct RunInfo {
  std::string experiment = "dsc"; // MLflow experiment name
  std::string runName;            // MLflow run name / CSV job name
  std::map<std::string, std::string> params; // compile options, config
  std::map<std::string, std::string> tags;
};

/// The name DeepSpeed's monitor gives what `tag` measures, for the sinks
/// that follow DeepSpeed's layout (the CSV monitor): "train/loss" ->
/// "Train/Steps/train_loss", "train/lr" -> "Train/Steps/lr",
/// "train/loss_scale" -> "Train/Steps/loss_scale". DeepSpeed's own names
/// are "Train/Samples/..." because its x-axis is the global sample count;
/// ours is the optimizer step, so the middle part says so. Tags DeepSpeed
/// has no name for are returned unchanged. See docs/metrics.md.
std::string deepspeedTag(const std::string &tag);

Status openTensorBoard(const std::string &dir, const RunInfo &info,
                       std::unique_ptr<MetricsSink> &out);
Status openMlflow(const std::string &dir, const RunInfo &info,
                  std::unique_ptr<MetricsSink> &out);
Status openCsvMonitor(const std::string &dir, const RunInfo &info,
                      std::unique_ptr<MetricsSink> &out);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_METRICS_H
