//===- report.h - What a run tells its user and their tools ------*- C++
//-*-===//
//
// The banner before the first step, the progress line every --print-every
// steps (step/total, loss, lr, grad norm, loss scale, throughput, MFU where
// the step's FLOPs and the device's peak are known, peak memory, elapsed and
// ETA), one JSON object per step in --log, the same scalars in the metrics
// sinks (--tensorboard, --mlflow, --csv; rank 0 only), and the summary
// (with the NVMe files' size and traffic per step, io/nvme.h).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_REPORT_H
#define DSC_RUNTIME_PROGRAM_REPORT_H

#include "io/metrics.h"
#include "io/nvme.h"
#include "program/ranks.h"

namespace dsc::program {

/// What one step produced, as the host sees it.
struct StepRecord {
  int64_t step = 0;
  double loss = NAN, lr = NAN, gradNorm = NAN;
  double lossScale = NAN; // fp16
  bool skipped = false;   // fp16: the step overflowed
  int64_t skippedSteps = 0;
  double seconds = 0; // wall time of the step
  /// --wall-clock-breakdown (rank 0): forward, backward, optimizer and
  /// collective seconds; negative when not timed.
  double phase[3] = {-1, -1, -1};
  double comm = -1;
};

class Reporter {
public:
  Reporter(Job &job, Ranks &ranks) : job_(job), ranks_(ranks) {}
  ~Reporter();
  /// Opens --log and the metrics sinks (rank 0 only).
  Status open();
  void banner(const std::string &initWhat, const std::string &dataWhat,
              const std::string &deviceWhat, int64_t firstStep);
  /// The progress line (when due), the log line and the sinks' scalars.
  Status step(const StepRecord &r);
  /// Closes the log and the sinks; `ok`: the run finished.
  Status close(bool ok);
  void summary(int64_t steps, double trainSeconds, double lastLoss,
               int64_t nonFinite);
  /// Examples (or tokens) of one optimizer step.
  double perStep() const;
  bool tokenUnits() const { return job_.spec.tokensPerExample > 1; }

private:
  std::string progressLine(const StepRecord &r, double rate, size_t peak);
  Status logLine(const StepRecord &r, double rate);
  Status sinks(const StepRecord &r, double rate, size_t peak);
  size_t peakMemory() const;
  io::RunInfo runInfo() const;

  Job &job_;
  Ranks &ranks_;
  std::FILE *log_ = nullptr;
  std::vector<std::pair<const char *, std::unique_ptr<io::MetricsSink>>>
      sinks_; // (option, sink)
  int64_t firstStep_ = 1;
  double stepSeconds_ = 0; // of the steps run by this process
  int64_t stepsRun_ = 0;
  double peakTflops_ = 0;       // of the device, for MFU; 0: unknown
  io::NvmeTraffic nvmeAtStart_; // before the first step (io/nvme.h)
  io::NvmeTraffic nvmeLast_;    // at the last step's record
};

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_REPORT_H
