//===- util.cpp - Small helpers of the program shell ----------------------===//

#include "io/nvme.h"
#include "program/convert.h"
#include "program/shell.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

namespace dsc::program {

Status fail(const std::string &message) {
  return Status::error(StatusCode::InvalidArgument, message);
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string format(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string humanBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4)
    bytes /= 1024, ++u;
  return u == 0 ? format("%.0f B", bytes) : format("%.1f %s", bytes, units[u]);
}

std::string humanCount(double n) {
  if (n >= 1e9)
    return format("%.2fB", n / 1e9);
  if (n >= 1e6)
    return format("%.2fM", n / 1e6);
  if (n >= 1e3)
    return format("%.1fK", n / 1e3);
  return format("%.0f", n);
}

std::string jsonNumber(double v) {
  return std::isfinite(v) ? format("%.9g", v) : "null";
}

std::string optionName(const std::string &hyper) {
  std::string s = hyper;
  std::replace(s.begin(), s.end(), '_', '-');
  return "--" + s;
}

int64_t numelOf(const TensorSpec &t) {
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i)
    n *= t.shape[i];
  return n;
}

std::string describeSpec(const TensorSpec &t) {
  return describeType(t.dtype, t.shape, t.rank);
}

const char *argRoleName(ArgRole r) {
  switch (r) {
  case ArgRole::Param:
    return "parameter";
  case ArgRole::OptState:
    return "optimizer state";
  case ArgRole::Buffer:
    return "buffer";
  case ArgRole::Input:
    return "input";
  case ArgRole::Hyper:
    return "hyperparameter";
  case ArgRole::Step:
    return "step";
  case ArgRole::Seed:
    return "seed";
  case ArgRole::Scaler:
    return "loss scaler state";
  case ArgRole::ComputeCopy:
    return "compute copy";
  }
  return "argument";
}

const char *resultRoleName(ResultRole r) {
  switch (r) {
  case ResultRole::Loss:
    return "loss";
  case ResultRole::Param:
    return "parameter";
  case ResultRole::OptState:
    return "optimizer state";
  case ResultRole::BufferUpdate:
    return "buffer update";
  case ResultRole::Grad:
    return "gradient";
  case ResultRole::GradNorm:
    return "gradient norm";
  case ResultRole::GradNormalizer:
    return "gradient normalizer";
  case ResultRole::Lr:
    return "learning rate";
  case ResultRole::Scaler:
    return "loss scaler state";
  case ResultRole::Overflow:
    return "overflow flag";
  case ResultRole::ComputeCopy:
    return "compute copy";
  }
  return "result";
}

bool sameType(const TensorSpec &a, const TensorSpec &b) {
  if (a.dtype != b.dtype || a.rank != b.rank)
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i])
      return false;
  return true;
}

void FreeDeleter::operator()(void *p) const {
  if (nvme)
    io::nvmeRelease(p);
  else if (mappedBytes)
    munmap(p, mappedBytes);
  else
    std::free(p);
}

Status allocateTensor(const TensorSpec &type, const std::string &what,
                      Memory &mem, Tensor &out, size_t alignment) {
  size_t bytes = static_cast<size_t>(numelOf(type)) * dtypeSize(type.dtype);
  size_t rounded =
      std::max(alignment, (bytes + alignment - 1) / alignment * alignment);
  constexpr size_t kMapFrom = size_t(1) << 20;
  void *p = nullptr;
  if (rounded >= kMapFrom && alignment <= kPageBytes) {
    p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      p = nullptr;
    else
      mem = Memory(p, FreeDeleter{rounded});
  } else {
    p = std::aligned_alloc(alignment, rounded);
    if (p) {
      std::memset(p, 0, rounded);
      mem = Memory(p);
    }
  }
  if (!p)
    return Status::error(StatusCode::OutOfMemory,
                         "cannot allocate " + humanBytes(double(rounded)) +
                             " for " + what + " " + describeSpec(type));
  out = Tensor::of(p, type.dtype, I64s(type.shape, size_t(type.rank)));
  return Status();
}

Status allocateNvmeTensor(const TensorSpec &type, const std::string &dir,
                          const std::string &what, Memory &mem, Tensor &out) {
  size_t bytes = static_cast<size_t>(numelOf(type)) * dtypeSize(type.dtype);
  if (!bytes) // nothing to keep in a file
    return allocateTensor(type, what, mem, out, kPageBytes);
  void *p = nullptr;
  if (Status s = io::nvmeAllocate(dir, bytes, what, &p); !s.ok())
    return s;
  mem = Memory(p, FreeDeleter{0, /*nvme=*/true});
  out = Tensor::of(p, type.dtype, I64s(type.shape, size_t(type.rank)));
  return Status();
}

//===----------------------------------------------------------------------===//
// 1. The spec
//===----------------------------------------------------------------------===//

bool parseInt(const std::string &text, int64_t &out) {
  if (text.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end || errno)
    return false;
  out = v;
  return true;
}

bool parseU64(const std::string &text, uint64_t &out) {
  if (text.empty() || text[0] == '-')
    return false;
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (*end || errno)
    return false;
  out = v;
  return true;
}

void Job::warn(const std::string &message) const {
  std::fprintf(err, "warning: %s\n", message.c_str());
  std::fflush(err);
}

void Job::note(const std::string &message) const {
  std::fprintf(err, "note: %s\n", message.c_str());
  std::fflush(err);
}

} // namespace dsc::program
