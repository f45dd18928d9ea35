//===- metrics_internal.h - What the metrics sinks share --------*- C++ -*-===//
//
// Helpers of tensorboard.cpp, mlflow.cpp and csv_monitor.cpp (and of their
// tests): folders made with their parents, append-only files whose every
// write reaches the kernel, numbers printed the way Python prints them back,
// clocks, random hex ids.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_METRICS_INTERNAL_H
#define DSC_RUNTIME_IO_METRICS_INTERNAL_H

#include "dsc/runtime.h"

#include <cstdint>
#include <string>

namespace dsc::io::detail {

std::string errnoText(int e);

/// `path` made absolute against the working directory (not resolved).
std::string absolutePath(const std::string &path);

/// The shortest text that reads back as `v` (std::to_chars): "0.1", "1e-05",
/// "3", "nan", "inf", "-inf"; Python's float() reads every one of them.
std::string formatNumber(double v);

int64_t nowMillis();
double nowSeconds();

/// `chars` lower-case hex digits from std::random_device.
std::string randomHex(size_t chars);

/// gethostname(), or "localhost" when it fails.
std::string hostName();

/// A file opened for appending. append() hands every byte to the kernel
/// before it returns (write(2), no user-space buffer), so a killed process
/// leaves all it appended; sync() makes it durable (fsync).
class AppendFile {
public:
  AppendFile() = default;
  AppendFile(const AppendFile &) = delete;
  AppendFile &operator=(const AppendFile &) = delete;
  ~AppendFile() { close(); }

  /// Opens (creating) `path`; with `exclusive`, fails with EEXIST when it
  /// is there already. Errors read "<who>: cannot open 'P': why".
  Status open(const std::string &who, const std::string &path,
              bool exclusive = false);
  Status append(const void *data, size_t bytes);
  Status append(const std::string &text) {
    return append(text.data(), text.size());
  }
  Status sync();
  void close();

  bool isOpen() const { return fd_ >= 0; }
  /// The file's size when it was opened.
  int64_t sizeAtOpen() const { return sizeAtOpen_; }
  /// errno of the last failed open() (EEXIST for an exclusive open).
  int lastErrno() const { return lastErrno_; }
  const std::string &path() const { return path_; }

private:
  std::string who_, path_;
  int fd_ = -1;
  int64_t sizeAtOpen_ = 0;
  int lastErrno_ = 0;
};

/// Writes `text` as the whole of `path`: a temporary beside it, fsync,
/// rename (readers see the old or the new file, never a partial one).
Status writeFileAtomically(const std::string &who, const std::string &path,
                           const std::string &text);

/// A metric, param or tag key as MLflow accepts it: characters outside
/// [A-Za-z0-9_-. :/] become '_', empty and "."/".." parts are dropped or
/// replaced, at most 250 characters.
std::string mlflowKey(const std::string &key);

/// `s` as a YAML scalar that reads back as the same string: plain where
/// PyYAML would write it plain, else quoted.
std::string yamlString(const std::string &s);

/// The string value of top-level `key` in YAML as MLflow writes its
/// meta.yaml files (plain, single- or double-quoted); "" when absent.
std::string yamlValue(const std::string &text, const std::string &key);

} // namespace dsc::io::detail

#endif // DSC_RUNTIME_IO_METRICS_INTERNAL_H
