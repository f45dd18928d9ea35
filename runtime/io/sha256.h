//===- sha256.h - SHA-256 of buffers and files ------------------*- C++ -*-===//
//
// SHA-256 as FIPS 180-4 defines it, fed incrementally, for the checksums of
// checkpoint files (io/checkpoint.h). Digests are lower-case hex.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_SHA256_H
#define DSC_RUNTIME_IO_SHA256_H

#include "dsc/runtime.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace dsc::io {

class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t bytes);
  /// The digest of everything fed so far, as 64 lower-case hex digits. The
  /// object starts over afterwards.
  std::string finish();

private:
  void block(const unsigned char *p);

  uint32_t h_[8];
  unsigned char buf_[64];
  size_t used_ = 0;    // bytes in buf_
  uint64_t total_ = 0; // bytes fed
};

/// The SHA-256 of the file at `path` (read in 1 MiB chunks).
Status sha256File(const std::string &path, std::string &hex);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_SHA256_H
