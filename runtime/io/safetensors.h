//===- safetensors.h - Read and write safetensors files ---------*- C++ -*-===//
//
// The format: an 8-byte little-endian header length, a JSON header mapping
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} (plus
// an optional "__metadata__" map of strings), then the raw little-endian
// data. Dtypes F32, F64, F16, BF16, I64, I32, I8, U8 and BOOL.
//
// Writes are atomic (io/output_file.h): a temporary file in the target's
// folder, fsync, rename, fsync of the folder, so a crash never leaves a
// half-written checkpoint under the name; the temporary is removed on every
// failure and on SIGINT/SIGTERM/SIGHUP.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_SAFETENSORS_H
#define DSC_RUNTIME_IO_SAFETENSORS_H

#include "dsc/runtime.h"
#include "io/output_file.h"

#include <map>
#include <string>
#include <vector>

namespace dsc::io {

/// A safetensors file read into memory. Tensors are views into its buffer,
/// valid while the object lives; data is 8-byte aligned when the writer laid
/// tensors out by decreasing element size (as this writer and Python's do).
class SafetensorsFile {
public:
  Status read(const std::string &path);
  /// Tensor names in file (data offset) order.
  const std::vector<std::string> &names() const { return names_; }
  bool contains(const std::string &name) const {
    return tensors_.count(name) != 0;
  }
  Status get(const std::string &name, Tensor &out) const;
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }

private:
  std::string path_;
  std::vector<uint64_t> data_; // the data section, 8-byte aligned
  std::vector<std::string> names_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

/// Writes `tensors` (names unique, not "__metadata__") to `path`: atomically,
/// or into an existing device or FIFO (WriteMode::Through).
Status writeSafetensors(const std::string &path,
                        const std::vector<NamedTensor> &tensors,
                        const std::map<std::string, std::string> &metadata = {},
                        WriteMode mode = WriteMode::Atomic);

/// "F32", "BF16", "I64", "BOOL", ... and back; false for unknown names.
const char *safetensorsDtypeName(DType dtype);
bool parseSafetensorsDtype(const std::string &name, DType &out);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_SAFETENSORS_H
