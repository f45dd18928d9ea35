//===- csv_monitor.cpp - DeepSpeed's csv_monitor layout -------------------===//
//
// As deepspeed/monitor/csv_monitor.py writes it: DIR/<job name>/ holds one
// file per tag, named after the tag with '/' and ' ' replaced by '_' plus
// ".csv"; its first row is "step,<last '/'-part of the tag>", then one
// "step,value" row per value, each line ended by "\r\n" (Python's csv
// writer). The tag is first renamed by deepspeedTag(), so "train/loss"
// lands in Train_Steps_train_loss.csv under the header "step,train_loss".
//
// One difference: DeepSpeed writes the header row the first time a process
// writes a file, even when it appends to one a previous run left; we write
// it only into an empty file, so a resumed run's rows follow the old ones.
//
//===----------------------------------------------------------------------===//

#include "io/metrics.h"
#include "io/metrics_internal.h"
#include "io/output_file.h"

#include <map>

namespace dsc::io {

namespace {

using namespace detail;

/// A field as Python's csv writer quotes it (QUOTE_MINIMAL): in double
/// quotes, inner quotes doubled, when it holds ',', '"', '\r' or '\n'.
std::string csvField(const std::string &text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos)
    return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"')
      out += '"';
    out += c;
  }
  return out + "\"";
}

class CsvMonitorSink : public MetricsSink {
public:
  Status open(const std::string &dir, const RunInfo &info) {
    // DeepSpeed's default job_name (deepspeed/monitor/config.py).
    std::string job = info.runName.empty() ? "DeepSpeedJobName" : info.runName;
    for (char &c : job)
      if (c == '/')
        c = '_';
    dir_ = dir + "/" + job;
    return makeDirectories("csv monitor", dir_);
  }

  Status scalar(const std::string &tag, double value, int64_t step,
                double) override {
    if (closed_)
      return Status::error(StatusCode::InvalidArgument,
                           "csv monitor: scalar '" + tag + "' after close");
    AppendFile *file = nullptr;
    if (Status st = fileOf(tag, &file); !st.ok())
      return st;
    return file->append(std::to_string(step) + "," + formatNumber(value) +
                        "\r\n");
  }

  Status flush() override {
    for (auto &[tag, file] : files_)
      if (Status st = file.sync(); !st.ok())
        return st;
    return Status();
  }

  Status close(bool) override {
    if (closed_)
      return Status();
    closed_ = true;
    Status st = flush();
    files_.clear();
    return st;
  }

  ~CsvMonitorSink() override { (void)close(true); }

private:
  Status fileOf(const std::string &tag, AppendFile **out) {
    auto it = files_.find(tag);
    if (it != files_.end()) {
      *out = &it->second;
      return Status();
    }
    std::string name = deepspeedTag(tag);
    size_t slash = name.rfind('/');
    std::string header =
        slash == std::string::npos ? name : name.substr(slash + 1);
    std::string fileName = name;
    for (char &c : fileName)
      if (c == '/' || c == ' ')
        c = '_';
    AppendFile &file = files_[tag];
    Status st = file.open("csv monitor", dir_ + "/" + fileName + ".csv");
    if (st.ok() && file.sizeAtOpen() == 0)
      st = file.append("step," + csvField(header) + "\r\n");
    if (!st.ok()) {
      files_.erase(tag);
      return st;
    }
    *out = &file;
    return Status();
  }

  std::string dir_;
  std::map<std::string, AppendFile> files_;
  bool closed_ = false;
};

} // namespace

Status openCsvMonitor(const std::string &dir, const RunInfo &info,
                      std::unique_ptr<MetricsSink> &out) {
  auto sink = std::make_unique<CsvMonitorSink>();
  if (Status st = sink->open(dir, info); !st.ok())
    return st;
  out = std::move(sink);
  return Status();
}

} // namespace dsc::io
