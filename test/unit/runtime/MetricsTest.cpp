//===- MetricsTest.cpp - TensorBoard, MLflow and CSV metrics sinks --------===//
//
// What the sinks write, read back by hand: TFRecord framing and the Event
// protos field by field, the MLflow file store's folders and files, the
// csv_monitor rows. With DSC_METRICS_OUT=DIR set, WriteSampleForReaders
// leaves one run of each under DIR for test/tools/read_metrics.py.
//
//===----------------------------------------------------------------------===//

#include "io/metrics.h"
#include "GradCheck.h"
#include "TempDir.h"
#include "io/crc32c.h"
#include "io/metrics_internal.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

using namespace dsc;
using namespace dsc::io;
namespace fs = std::filesystem;

namespace {

/// A fresh folder for the test (TempDir.h).
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("dsc-metrics-test") {}
};

std::string readAll(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> entries(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(dir))
    out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

//--- A protobuf wire-format reader, enough for Event and Summary ----------//

struct Field {
  explicit Field(uint32_t type) : wireType(type) {}
  uint32_t wireType;
  uint64_t number = 0; // varint, fixed64 and fixed32 bits
  std::string bytes;   // length-delimited
};
using Message = std::multimap<uint32_t, Field>;

uint64_t readVarint(const std::string &s, size_t &pos) {
  uint64_t v = 0;
  for (int shift = 0; pos < s.size(); shift += 7) {
    auto b = static_cast<uint8_t>(s[pos++]);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80))
      return v;
  }
  ADD_FAILURE() << "truncated varint";
  return v;
}

uint64_t readLittleEndian(const std::string &s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  return v;
}

Message parse(const std::string &s) {
  Message m;
  size_t pos = 0;
  while (pos < s.size()) {
    uint64_t key = readVarint(s, pos);
    Field f{uint32_t(key & 7)};
    switch (f.wireType) {
    case 0:
      f.number = readVarint(s, pos);
      break;
    case 1:
      f.number = readLittleEndian(s, pos, 8);
      pos += 8;
      break;
    case 2: {
      size_t n = readVarint(s, pos);
      f.bytes = s.substr(pos, n);
      pos += n;
      break;
    }
    case 5:
      f.number = readLittleEndian(s, pos, 4);
      pos += 4;
      break;
    default:
      ADD_FAILURE() << "wire type " << f.wireType;
      return m;
    }
    m.emplace(uint32_t(key >> 3), f);
  }
  EXPECT_EQ(pos, s.size());
  return m;
}

const Field &only(const Message &m, uint32_t field, uint32_t wireType) {
  static const Field kMissing{99};
  EXPECT_EQ(m.count(field), 1u) << "field " << field;
  auto it = m.find(field);
  if (it == m.end())
    return kMissing;
  EXPECT_EQ(it->second.wireType, wireType) << "field " << field;
  return it->second;
}

double asDouble(const Field &f) {
  double d;
  std::memcpy(&d, &f.number, 8);
  return d;
}

float asFloat(const Field &f) {
  auto bits = uint32_t(f.number);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

/// The records of a TFRecord file, every length and CRC checked.
std::vector<std::string> readRecords(const std::string &file) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < file.size()) {
    if (pos + 12 > file.size()) {
      ADD_FAILURE() << "truncated header at " << pos;
      break;
    }
    uint64_t length = readLittleEndian(file, pos, 8);
    auto lengthCrc = uint32_t(readLittleEndian(file, pos + 8, 4));
    EXPECT_EQ(lengthCrc, maskCrc32c(crc32c(file.data() + pos, 8)));
    pos += 12;
    if (pos + length + 4 > file.size()) {
      ADD_FAILURE() << "truncated record at " << pos;
      break;
    }
    std::string data = file.substr(pos, length);
    auto dataCrc = uint32_t(readLittleEndian(file, pos + length, 4));
    EXPECT_EQ(dataCrc, maskCrc32c(crc32c(data.data(), data.size())));
    records.push_back(data);
    pos += length + 4;
  }
  return records;
}

std::vector<std::string> lines(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    out.push_back(line);
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// CRC-32C
//===----------------------------------------------------------------------===//

TEST(Metrics, Crc32cVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Continuing a CRC is the CRC of the concatenation.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu})
    EXPECT_EQ(unmaskCrc32c(maskCrc32c(c)), c);
  EXPECT_EQ(maskCrc32c(0), 0xa282ead8u);
}

//===----------------------------------------------------------------------===//
// TensorBoard
//===----------------------------------------------------------------------===//

TEST(Metrics, TensorBoardEventFile) {
  TempDir dir;
  fs::path logdir = dir.path / "tb" / "run1"; // made with its parents
  std::unique_ptr<MetricsSink> sink;
  DSC_ASSERT_OK(openTensorBoard(logdir.string(), RunInfo(), sink));
  DSC_ASSERT_OK(sink->scalar("train/loss", 0.25, 7, 1700000000.5));
  DSC_ASSERT_OK(sink->scalar("train/lr", 1e-4, 8, 1700000001.25));
  DSC_ASSERT_OK(sink->scalar("train/loss", -3, -1, 1700000002));
  DSC_ASSERT_OK(sink->flush());
  DSC_ASSERT_OK(sink->close(true));
  DSC_ASSERT_OK(sink->close(true)); // idempotent
  EXPECT_FALSE(sink->scalar("x", 1, 1, 1).ok());

  std::vector<fs::path> files = entries(logdir);
  ASSERT_EQ(files.size(), 1u);
  std::string name = files[0].filename().string();
  std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.compare(0, prefix.size(), prefix), 0) << name;
  std::string suffix = "." + std::to_string(::getpid()) + ".0";
  ASSERT_GT(name.size(), suffix.size());
  EXPECT_EQ(name.substr(name.size() - suffix.size()), suffix) << name;
  long long secs = std::atoll(name.c_str() + prefix.size());
  EXPECT_NEAR(double(secs), detail::nowSeconds(), 600);

  std::vector<std::string> records = readRecords(readAll(files[0]));
  ASSERT_EQ(records.size(), 4u);
  Message first = parse(records[0]);
  EXPECT_NEAR(asDouble(only(first, 1, 1)), double(secs), 1);
  EXPECT_EQ(only(first, 3, 2).bytes, "brain.Event:2");

  struct Expected {
    const char *tag;
    float value;
    int64_t step;
    double wallTime;
  } expected[] = {{"train/loss", 0.25f, 7, 1700000000.5},
                  {"train/lr", 1e-4f, 8, 1700000001.25},
                  {"train/loss", -3.0f, -1, 1700000002}};
  for (int i = 0; i < 3; ++i) {
    Message event = parse(records[i + 1]);
    EXPECT_EQ(event.size(), 3u);
    EXPECT_EQ(asDouble(only(event, 1, 1)), expected[i].wallTime);
    EXPECT_EQ(int64_t(only(event, 2, 0).number), expected[i].step);
    Message summary = parse(only(event, 5, 2).bytes);
    Message value = parse(only(summary, 1, 2).bytes);
    EXPECT_EQ(value.size(), 2u);
    EXPECT_EQ(only(value, 1, 2).bytes, expected[i].tag);
    EXPECT_EQ(asFloat(only(value, 2, 5)), expected[i].value);
  }
}

TEST(Metrics, TensorBoardTwoWritersInOneSecond) {
  TempDir dir;
  std::unique_ptr<MetricsSink> a, b;
  DSC_ASSERT_OK(openTensorBoard(dir.path.string(), RunInfo(), a));
  DSC_ASSERT_OK(openTensorBoard(dir.path.string(), RunInfo(), b));
  DSC_ASSERT_OK(a->scalar("a", 1, 1, 1));
  DSC_ASSERT_OK(b->scalar("b", 2, 1, 1));
  a.reset();
  b.reset();
  // Each has its own file (the counter goes up when the second repeats).
  std::vector<fs::path> files = entries(dir.path);
  ASSERT_EQ(files.size(), 2u);
  for (const fs::path &f : files)
    EXPECT_EQ(readRecords(readAll(f)).size(), 2u) << f;
}

//===----------------------------------------------------------------------===//
// MLflow
//===----------------------------------------------------------------------===//

namespace {

/// The experiment folders of an MLflow root, by name.
std::map<std::string, fs::path> experiments(const fs::path &root) {
  std::map<std::string, fs::path> out;
  for (const fs::path &p : entries(root)) {
    if (p.filename().string()[0] == '.')
      continue;
    std::string meta = readAll(p / "meta.yaml");
    out[detail::yamlValue(meta, "name")] = p;
  }
  return out;
}

std::vector<fs::path> runsOf(const fs::path &experiment) {
  std::vector<fs::path> runs;
  for (const fs::path &p : entries(experiment))
    if (fs::is_directory(p))
      runs.push_back(p);
  return runs;
}

} // namespace

TEST(Metrics, MlflowFileStoreLayout) {
  TempDir dir;
  fs::path root = dir.path / "mlruns";
  RunInfo info;
  info.experiment = "dsc gpt";
  info.runName = "gpt-zero3";
  info.params = {{"lr", "0.0003"}, {"model/layers", "12"}, {"bad key!", "x"}};
  info.tags = {{"dsc.version", "1.0"}};
  std::unique_ptr<MetricsSink> sink;
  DSC_ASSERT_OK(openMlflow(root.string(), info, sink));
  DSC_ASSERT_OK(sink->scalar("train/loss", 2.5, 1, 1700000000.1234));
  DSC_ASSERT_OK(sink->scalar("train/loss", 0.125, 2, 1700000001));
  DSC_ASSERT_OK(sink->scalar("time/step_s", 1e-05, 2, 1700000001));
  DSC_ASSERT_OK(sink->flush());

  EXPECT_TRUE(fs::is_directory(root / ".trash"));
  std::map<std::string, fs::path> exps = experiments(root);
  ASSERT_EQ(exps.size(), 2u);
  ASSERT_TRUE(exps.count("Default"));
  EXPECT_EQ(exps["Default"], root / "0");
  ASSERT_TRUE(exps.count("dsc gpt"));
  fs::path exp = exps["dsc gpt"];
  std::string id = exp.filename().string();
  EXPECT_EQ(id.size(), 18u);
  EXPECT_EQ(id.find_first_not_of("0123456789"), std::string::npos);
  std::string expMeta = readAll(exp / "meta.yaml");
  EXPECT_EQ(detail::yamlValue(expMeta, "experiment_id"), id);
  EXPECT_EQ(detail::yamlValue(expMeta, "lifecycle_stage"), "active");
  EXPECT_EQ(detail::yamlValue(expMeta, "artifact_location"),
            "file://" + exp.string());
  EXPECT_NE(expMeta.find("name: 'dsc gpt'\n"), std::string::npos) << expMeta;
  EXPECT_NE(expMeta.find("creation_time: "), std::string::npos);
  EXPECT_NE(expMeta.find("last_update_time: "), std::string::npos);

  std::vector<fs::path> runs = runsOf(exp);
  ASSERT_EQ(runs.size(), 1u);
  fs::path run = runs[0];
  std::string runId = run.filename().string();
  EXPECT_EQ(runId.size(), 32u);
  EXPECT_EQ(runId.find_first_not_of("0123456789abcdef"), std::string::npos);
  for (const char *sub : {"metrics", "params", "tags", "artifacts"})
    EXPECT_TRUE(fs::is_directory(run / sub)) << sub;

  std::string meta = readAll(run / "meta.yaml");
  EXPECT_EQ(detail::yamlValue(meta, "status"), "1");
  EXPECT_EQ(detail::yamlValue(meta, "end_time"), "null");
  EXPECT_EQ(detail::yamlValue(meta, "run_id"), runId);
  EXPECT_EQ(detail::yamlValue(meta, "run_uuid"), runId);
  EXPECT_EQ(detail::yamlValue(meta, "run_name"), "gpt-zero3");
  EXPECT_EQ(detail::yamlValue(meta, "experiment_id"), id);
  EXPECT_EQ(detail::yamlValue(meta, "source_type"), "4");
  EXPECT_EQ(detail::yamlValue(meta, "artifact_uri"),
            "file://" + (run / "artifacts").string());
  for (const char *key : {"entry_point_name: ''\n", "lifecycle_stage: active\n",
                          "source_name: ''\n", "source_version: ''\n",
                          "tags: []\n", "start_time: ", "user_id: "})
    EXPECT_NE(meta.find(key), std::string::npos) << key;

  std::vector<std::string> loss = lines(readAll(run / "metrics/train/loss"));
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss[0], "1700000000123 2.5 1");
  EXPECT_EQ(loss[1], "1700000001000 0.125 2");
  EXPECT_EQ(readAll(run / "metrics/time/step_s"), "1700000001000 1e-05 2\n");
  EXPECT_EQ(readAll(run / "params/lr"), "0.0003");
  EXPECT_EQ(readAll(run / "params/model/layers"), "12");
  EXPECT_EQ(readAll(run / "params/bad key_"), "x");
  EXPECT_EQ(readAll(run / "tags/mlflow.runName"), "gpt-zero3");
  EXPECT_EQ(readAll(run / "tags/mlflow.source.type"), "LOCAL");
  EXPECT_EQ(readAll(run / "tags/dsc.version"), "1.0");
  EXPECT_TRUE(fs::exists(run / "tags/mlflow.user"));

  DSC_ASSERT_OK(sink->close(true));
  DSC_ASSERT_OK(sink->close(false)); // idempotent: stays FINISHED
  meta = readAll(run / "meta.yaml");
  EXPECT_EQ(detail::yamlValue(meta, "status"), "3");
  EXPECT_NE(detail::yamlValue(meta, "end_time"), "null");
  EXPECT_FALSE(sink->scalar("train/loss", 1, 3, 1).ok());
  // No temporaries are left beside the YAML files.
  for (const fs::path &p : entries(run))
    EXPECT_EQ(p.filename().string().find(".tmp."), std::string::npos) << p;

  // A second run of the same experiment goes into the same folder; one
  // dropped without close() is FAILED.
  info.runName = "";
  DSC_ASSERT_OK(openMlflow(root.string(), info, sink));
  sink.reset();
  EXPECT_EQ(experiments(root).size(), 2u);
  runs = runsOf(exp);
  ASSERT_EQ(runs.size(), 2u);
  for (const fs::path &r : runs) {
    if (r == run)
      continue;
    meta = readAll(r / "meta.yaml");
    EXPECT_EQ(detail::yamlValue(meta, "status"), "4");
    std::string name = detail::yamlValue(meta, "run_name");
    EXPECT_EQ(name, "dsc-" + r.filename().string().substr(0, 8));
    EXPECT_EQ(readAll(r / "tags/mlflow.runName"), name);
  }
}

TEST(Metrics, MlflowDeletedExperimentIsRefused) {
  TempDir dir;
  RunInfo info;
  info.experiment = "gone";
  std::unique_ptr<MetricsSink> sink;
  DSC_ASSERT_OK(openMlflow(dir.path.string(), info, sink));
  DSC_ASSERT_OK(sink->close(true));
  fs::path exp = experiments(dir.path)["gone"];
  // What MLflow's delete_experiment does: lifecycle_stage deleted, moved.
  std::string meta = readAll(exp / "meta.yaml");
  size_t at = meta.find("lifecycle_stage: active");
  ASSERT_NE(at, std::string::npos);
  meta.replace(at, 23, "lifecycle_stage: deleted");
  std::ofstream(exp / "meta.yaml") << meta;
  fs::rename(exp, dir.path / ".trash" / exp.filename());
  Status st = openMlflow(dir.path.string(), info, sink);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'gone'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("deleted"), std::string::npos) << st.message();
}

TEST(Metrics, MlflowKeysAndYaml) {
  using detail::mlflowKey;
  EXPECT_EQ(mlflowKey("train/loss"), "train/loss");
  EXPECT_EQ(mlflowKey("/a//b/"), "a/b");
  EXPECT_EQ(mlflowKey("../x/./y"), "__/x/_/y");
  EXPECT_EQ(mlflowKey("a=b,c"), "a_b_c");
  EXPECT_EQ(mlflowKey(""), "_");
  for (std::string s : {"dsc", "a b", "it's", "yes", "123", "file:///x/y", "",
                        "tab\there", "new\nline \"q\" \\"}) {
    std::string yaml = "k: " + detail::yamlString(s) + "\nz: 1\n";
    EXPECT_EQ(detail::yamlValue(yaml, "k"), s) << yaml;
  }
  EXPECT_EQ(detail::yamlString("dsc"), "dsc");
  EXPECT_EQ(detail::yamlString("yes"), "'yes'");
  EXPECT_EQ(detail::yamlString("0"), "'0'");
  // PyYAML folds a long quoted string over lines.
  EXPECT_EQ(detail::yamlValue("name: 'a long\n  name'\nx: 1\n", "name"),
            "a long name");
}

//===----------------------------------------------------------------------===//
// CSV (DeepSpeed's csv_monitor)
//===----------------------------------------------------------------------===//

TEST(Metrics, CsvMonitorRows) {
  TempDir dir;
  RunInfo info;
  info.runName = "gpt";
  std::unique_ptr<MetricsSink> sink;
  DSC_ASSERT_OK(openCsvMonitor(dir.path.string(), info, sink));
  DSC_ASSERT_OK(sink->scalar("train/loss", 2.5, 1, 0));
  DSC_ASSERT_OK(sink->scalar("train/grad_norm", 0.75, 1, 0));
  DSC_ASSERT_OK(sink->scalar("train/loss", 0.1, 2, 0));
  DSC_ASSERT_OK(sink->scalar("odd tag,x", 3, 2, 0));
  // Every row is in the file before close.
  fs::path job = dir.path / "gpt";
  EXPECT_EQ(readAll(job / "Train_Steps_train_loss.csv"),
            "step,train_loss\r\n1,2.5\r\n2,0.1\r\n");
  DSC_ASSERT_OK(sink->close(true));
  EXPECT_EQ(readAll(job / "train_grad_norm.csv"),
            "step,grad_norm\r\n1,0.75\r\n");
  EXPECT_EQ(readAll(job / "odd_tag,x.csv"), "step,\"odd tag,x\"\r\n2,3\r\n");

  // A later run appends below the header it finds.
  DSC_ASSERT_OK(openCsvMonitor(dir.path.string(), info, sink));
  DSC_ASSERT_OK(sink->scalar("train/loss", 0.05, 3, 0));
  sink.reset();
  EXPECT_EQ(readAll(job / "Train_Steps_train_loss.csv"),
            "step,train_loss\r\n1,2.5\r\n2,0.1\r\n3,0.05\r\n");
  // DeepSpeed's default job name.
  DSC_ASSERT_OK(openCsvMonitor(dir.path.string(), RunInfo(), sink));
  EXPECT_TRUE(fs::is_directory(dir.path / "DeepSpeedJobName"));
}

TEST(Metrics, DeepSpeedTags) {
  EXPECT_EQ(deepspeedTag("train/loss"), "Train/Steps/train_loss");
  EXPECT_EQ(deepspeedTag("train/lr"), "Train/Steps/lr");
  EXPECT_EQ(deepspeedTag("train/loss_scale"), "Train/Steps/loss_scale");
  EXPECT_EQ(deepspeedTag("memory/peak_bytes"), "memory/peak_bytes");
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(Metrics, UnwritableDirectoryIsAStatus) {
  TempDir dir;
  fs::path file = dir.path / "plain-file";
  std::ofstream(file) << "x";
  std::string under = (file / "metrics").string(); // ENOTDIR on any uid
  std::unique_ptr<MetricsSink> sink;
  using Open = Status (*)(const std::string &, const RunInfo &,
                          std::unique_ptr<MetricsSink> &);
  for (Open open :
       {Open(openTensorBoard), Open(openMlflow), Open(openCsvMonitor)}) {
    Status st = open(under, RunInfo(), sink);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::IoError);
    EXPECT_NE(st.message().find(file.string()), std::string::npos)
        << st.message();
    EXPECT_EQ(sink, nullptr);
  }
  Status st = openTensorBoard("", RunInfo(), sink);
  EXPECT_FALSE(st.ok());
}

TEST(Metrics, ReadOnlyDirectoryIsAStatus) {
  using Open = Status (*)(const std::string &, const RunInfo &,
                          std::unique_ptr<MetricsSink> &);
  TempDir dir;
  std::unique_ptr<MetricsSink> sink;
  if (::geteuid() == 0)
    GTEST_SKIP() << "root writes into a read-only directory";
  fs::path ro = dir.path / "read-only";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  for (Open open :
       {Open(openTensorBoard), Open(openMlflow), Open(openCsvMonitor)}) {
    Status s = open((ro / "sub").string(), RunInfo(), sink);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(ro.string()), std::string::npos) << s.message();
  }
  fs::permissions(ro, fs::perms::owner_all);
}

//===----------------------------------------------------------------------===//
// Files for the real readers (test/tools/read_metrics.py)
//===----------------------------------------------------------------------===//

TEST(Metrics, WriteSampleForReaders) {
  const char *out = std::getenv("DSC_METRICS_OUT");
  if (!out || !*out)
    GTEST_SKIP() << "set DSC_METRICS_OUT=DIR to write sample runs there";
  RunInfo info;
  info.experiment = "dsc-sample";
  info.runName = "sample";
  info.params = {{"optimizer", "adamw"}, {"train/batch", "8"}};
  info.tags = {{"dsc.target", "cpu"}};
  std::string root = out;
  std::unique_ptr<MetricsSink> sinks[3];
  DSC_ASSERT_OK(openTensorBoard(root + "/tensorboard", info, sinks[0]));
  DSC_ASSERT_OK(openMlflow(root + "/mlruns", info, sinks[1]));
  DSC_ASSERT_OK(openCsvMonitor(root + "/csv", info, sinks[2]));
  double t0 = 1700000000.0;
  for (int step = 1; step <= 3; ++step)
    for (auto &sink : sinks) {
      double t = t0 + step;
      DSC_ASSERT_OK(sink->scalar("train/loss", 4.0 / step, step, t));
      DSC_ASSERT_OK(sink->scalar("train/lr", 0.001 * step, step, t));
      DSC_ASSERT_OK(sink->scalar("train/loss_scale", 65536, step, t));
      DSC_ASSERT_OK(sink->scalar("memory/peak_bytes", 1 << 20, step, t));
    }
  for (auto &sink : sinks)
    DSC_ASSERT_OK(sink->close(true));
}
