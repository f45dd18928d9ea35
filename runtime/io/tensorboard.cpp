//===- tensorboard.cpp - TensorBoard event files, encoded by hand ---------===//
//
// An event file is a sequence of TFRecords, each
//
//   uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
//   data[length]                  | uint32 masked CRC32C of the data
//
// around one serialized tensorboard.Event (tensorboard/compat/proto/
// event.proto, summary.proto):
//
//   Event   { double wall_time = 1; int64 step = 2;
//             oneof what { string file_version = 3; Summary summary = 5; } }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; oneof value { float simple_value = 2; } }
//
// The first record carries file_version "brain.Event:2"; then one Event per
// scalar. Proto3 omits a field at its default value; we write wall_time and
// step always (readers take both either way).
//
//===----------------------------------------------------------------------===//

#include "io/crc32c.h"
#include "io/metrics.h"
#include "io/metrics_internal.h"
#include "io/output_file.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace dsc::io {

namespace {

using namespace detail;

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2,
                   kFixed32 = 5;

void putVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

void putKey(std::string &out, uint32_t field, uint32_t wireType) {
  putVarint(out, (uint64_t(field) << 3) | wireType);
}

void putLittleEndian(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(char(uint8_t(v >> (8 * i))));
}

void putDouble(std::string &out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(out, field, kFixed64);
  putLittleEndian(out, bits, 8);
}

void putFloat(std::string &out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(out, field, kFixed32);
  putLittleEndian(out, bits, 4);
}

void putInt64(std::string &out, uint32_t field, int64_t v) {
  putKey(out, field, kVarint);
  putVarint(out, uint64_t(v)); // negative int64: ten bytes, as protobuf does
}

void putBytes(std::string &out, uint32_t field, const std::string &bytes) {
  putKey(out, field, kLengthDelimited);
  putVarint(out, bytes.size());
  out += bytes;
}

// Field numbers of event.proto and summary.proto.
enum : uint32_t {
  kEventWallTime = 1,
  kEventStep = 2,
  kEventFileVersion = 3,
  kEventSummary = 5,
  kSummaryValue = 1,
  kValueTag = 1,
  kValueSimpleValue = 2,
};

std::string fileVersionEvent(double wallTime) {
  std::string event;
  putDouble(event, kEventWallTime, wallTime);
  putBytes(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string scalarEvent(const std::string &tag, double value, int64_t step,
                        double wallTime) {
  std::string v;
  putBytes(v, kValueTag, tag);
  putFloat(v, kValueSimpleValue, float(value));
  std::string summary;
  putBytes(summary, kSummaryValue, v);
  std::string event;
  putDouble(event, kEventWallTime, wallTime);
  putInt64(event, kEventStep, step);
  putBytes(event, kEventSummary, summary);
  return event;
}

std::string tfRecord(const std::string &data) {
  std::string record;
  record.reserve(data.size() + 16);
  putLittleEndian(record, data.size(), 8);
  putLittleEndian(record, maskCrc32c(crc32c(record.data(), 8)), 4);
  record += data;
  putLittleEndian(record, maskCrc32c(crc32c(data.data(), data.size())), 4);
  return record;
}

class TensorBoardSink : public MetricsSink {
public:
  Status open(const std::string &dir) {
    const char *who = "tensorboard";
    if (Status st = makeDirectories(who, dir); !st.ok())
      return st;
    double now = nowSeconds();
    // TensorFlow's name; a second writer in the same second of the same
    // process takes the next counter instead of appending to the first.
    std::string stem = dir + "/events.out.tfevents." +
                       std::to_string(int64_t(now)) + "." + hostName() + "." +
                       std::to_string(::getpid()) + ".";
    for (int counter = 0;; ++counter) {
      Status st = file_.open(who, stem + std::to_string(counter), true);
      if (st.ok())
        break;
      if (file_.lastErrno() != EEXIST || counter == 99)
        return st;
    }
    return file_.append(tfRecord(fileVersionEvent(now)));
  }

  Status scalar(const std::string &tag, double value, int64_t step,
                double wallTime) override {
    if (closed_)
      return Status::error(StatusCode::InvalidArgument,
                           "tensorboard: scalar '" + tag + "' after close of " +
                               file_.path());
    return file_.append(tfRecord(scalarEvent(tag, value, step, wallTime)));
  }

  Status flush() override { return file_.sync(); }

  Status close(bool) override {
    if (closed_)
      return Status();
    closed_ = true;
    Status st = file_.sync();
    file_.close();
    return st;
  }

  ~TensorBoardSink() override { (void)close(true); }

private:
  AppendFile file_;
  bool closed_ = false;
};

} // namespace

Status openTensorBoard(const std::string &dir, const RunInfo &,
                       std::unique_ptr<MetricsSink> &out) {
  auto sink = std::make_unique<TensorBoardSink>();
  if (Status st = sink->open(dir); !st.ok())
    return st;
  out = std::move(sink);
  return Status();
}

} // namespace dsc::io
