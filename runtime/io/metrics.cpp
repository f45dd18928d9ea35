//===- metrics.cpp - What the metrics sinks share -------------------------===//

#include "io/metrics.h"
#include "io/metrics_internal.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace dsc::io {

MetricsSink::~MetricsSink() = default;

std::string deepspeedTag(const std::string &tag) {
  // DeepSpeed's engine logs these three at every gradient accumulation
  // boundary, keyed by global_samples (deepspeed/runtime/engine.py).
  static const struct {
    const char *ours, *deepspeed;
  } kNames[] = {
      {"train/loss", "Train/Steps/train_loss"},
      {"train/lr", "Train/Steps/lr"},
      {"train/loss_scale", "Train/Steps/loss_scale"},
  };
  for (const auto &n : kNames)
    if (tag == n.ours)
      return n.deepspeed;
  return tag;
}

namespace detail {

std::string errnoText(int e) { return std::strerror(e); }

std::string absolutePath(const std::string &path) {
  if (!path.empty() && path[0] == '/')
    return path;
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd))
    return path;
  std::string rel = path;
  while (rel.compare(0, 2, "./") == 0)
    rel.erase(0, 2);
  if (rel == "." || rel.empty())
    return cwd;
  return std::string(cwd) + "/" + rel;
}

std::string formatNumber(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

int64_t nowMillis() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
      .count();
}

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string randomHex(size_t chars) {
  static const char kDigits[] = "0123456789abcdef";
  std::random_device rd;
  std::string out;
  out.reserve(chars);
  while (out.size() < chars) {
    uint32_t bits = rd();
    for (int k = 0; k < 8 && out.size() < chars; ++k, bits >>= 4)
      out.push_back(kDigits[bits & 15]);
  }
  return out;
}

std::string hostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || !name[0])
    return "localhost";
  return name;
}

Status AppendFile::open(const std::string &who, const std::string &path,
                        bool exclusive) {
  close();
  who_ = who;
  path_ = path;
  int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY;
  if (exclusive)
    flags |= O_EXCL;
  fd_ = ::open(path.c_str(), flags, 0666);
  if (fd_ < 0) {
    lastErrno_ = errno;
    return Status::error(StatusCode::IoError,
                         who + ": cannot open '" + path +
                             "': " + errnoText(lastErrno_));
  }
  struct stat st;
  sizeAtOpen_ = ::fstat(fd_, &st) == 0 ? int64_t(st.st_size) : 0;
  return Status();
}

Status AppendFile::append(const void *data, size_t bytes) {
  if (fd_ < 0)
    return Status::error(StatusCode::IoError,
                         who_ + ": '" + path_ + "' is not open");
  const char *p = static_cast<const char *>(data);
  while (bytes) {
    ssize_t w = ::write(fd_, p, bytes);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return Status::error(StatusCode::IoError,
                           who_ + ": cannot write '" + path_ +
                               "': " + errnoText(w == 0 ? EIO : errno));
    p += w, bytes -= size_t(w);
  }
  return Status();
}

Status AppendFile::sync() {
  if (fd_ >= 0 && ::fsync(fd_) != 0 && errno != EINVAL)
    return Status::error(StatusCode::IoError, who_ + ": cannot fsync '" +
                                                  path_ +
                                                  "': " + errnoText(errno));
  return Status();
}

void AppendFile::close() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

Status writeFileAtomically(const std::string &who, const std::string &path,
                           const std::string &text) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  auto fail = [&](const std::string &what, int e) {
    if (fd >= 0)
      ::close(fd);
    ::unlink(tmp.c_str());
    return Status::error(StatusCode::IoError, who + ": cannot " + what + " '" +
                                                  path + "': " + errnoText(e));
  };
  if (fd < 0)
    return Status::error(StatusCode::IoError, who + ": cannot write '" + path +
                                                  "': " + errnoText(errno));
  const char *p = text.data();
  size_t left = text.size();
  while (left) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return fail("write", w == 0 ? EIO : errno);
    p += w, left -= size_t(w);
  }
  // mkstemp creates 0600; the file gets the usual 0666 less the umask.
  mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0)
    return fail("chmod", errno);
  if (::fsync(fd) != 0 && errno != EINVAL)
    return fail("fsync", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return fail("rename over", errno);
  ::close(fd);
  return Status();
}

} // namespace detail
} // namespace dsc::io
