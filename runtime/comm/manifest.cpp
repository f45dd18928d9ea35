//===- manifest.cpp - Collectives checked against the compiled manifest ---===//

#include "comm/manifest.h"

#include <cstring>

namespace dsc::comm {

std::string axesName(uint32_t mask) {
  switch (mask) {
  case 0:
    return "no axis";
  case 1:
    return "the replicas axis";
  case 2:
    return "the group axis";
  case 3:
    return "all ranks";
  }
  return "axes mask " + std::to_string(mask);
}

std::string describeCollective(const char *kind, int64_t inNumel,
                               int64_t outNumel, DType dtype, uint32_t mask,
                               const char *what) {
  std::string s =
      std::string(kind ? kind : "(none)") + " of " + std::to_string(inNumel);
  if (outNumel != inNumel)
    s += " -> " + std::to_string(outNumel);
  s += std::string(" ") + dtypeName(dtype) + " over " + axesName(mask);
  if (what && *what)
    s += std::string(" (\"") + what + "\")";
  return s;
}

Status ManifestChecker::check(const char *kind, DType dtype, int64_t inNumel,
                              int64_t outNumel, uint32_t axesMask,
                              const char *what, int64_t &index) {
  index = calls_++;
  if (!manifest_)
    return Status();
  std::string call =
      describeCollective(kind, inNumel, outNumel, dtype, axesMask, what);
  if (index >= size_)
    return Status::error(StatusCode::InvalidArgument,
                         "collective #" + std::to_string(index) + " (" + call +
                             ") is one more than the manifest's " +
                             std::to_string(size_) + " collectives per step");
  const CollectiveSpec &m = manifest_[index];
  if (!m.kind || !kind || std::strcmp(m.kind, kind) != 0 || m.dtype != dtype ||
      m.inNumel != inNumel || m.outNumel != outNumel || m.axesMask != axesMask)
    return Status::error(StatusCode::InvalidArgument,
                         "collective #" + std::to_string(index) + " is " +
                             call + " but the manifest says " +
                             describeCollective(m.kind, m.inNumel, m.outNumel,
                                                m.dtype, m.axesMask, m.what));
  return Status();
}

} // namespace dsc::comm
