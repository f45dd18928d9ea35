//===- onnx_weights.h - Initializers of an ONNX model, no protobuf -*- C++
//-*-===//
//
// A compiled program starts from the weights of the model it was compiled
// from, but links no protobuf. This reads the few fields it needs straight
// from the wire format:
//
//   ModelProto  7 graph
//   GraphProto  5 initializer (repeated TensorProto)
//   TensorProto 1 dims, 2 data_type, 4 float_data, 5 int32_data,
//               7 int64_data, 8 name, 9 raw_data, 10 double_data,
//               13 external_data (key/value: location, offset, length),
//               14 data_location (1 = EXTERNAL)
//
// The model file is memory-mapped; `open` only indexes the initializers
// (name, type, where the data lives) and `read` copies one of them into
// caller storage, from the map or with pread from its external file, so a
// model is never held in memory twice. External files must lie inside the
// model's folder: absolute locations, `..` and symbolic links that resolve
// outside are rejected.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_ONNX_WEIGHTS_H
#define DSC_RUNTIME_PROGRAM_ONNX_WEIGHTS_H

#include "dsc/runtime.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace dsc::program {

/// TensorProto.DataType as the DType it maps to; false for the ones a
/// training program does not take (strings, complex, 4-bit, fp8, ...).
bool dtypeFromOnnx(int32_t onnxType, DType &out);
/// "FLOAT", "INT64", ... or "data type N".
std::string onnxDataTypeName(int32_t onnxType);

/// One initializer as indexed by OnnxWeights::open.
struct OnnxInitializer {
  std::string name;
  int32_t dataType = 0; // TensorProto.DataType
  std::vector<int64_t> dims;
  size_t begin = 0, size = 0; // the TensorProto's bytes in the model file
  bool external = false;
  std::string location; // external_data entries
  uint64_t offset = 0, length = 0;
  bool hasLength = false;

  int64_t numel() const;
  /// "f32[128,64]" (or "FLOAT16[...]"-like text for unmapped types).
  std::string describe() const;
};

class OnnxWeights {
public:
  OnnxWeights() = default;
  ~OnnxWeights();
  OnnxWeights(const OnnxWeights &) = delete;
  OnnxWeights &operator=(const OnnxWeights &) = delete;

  /// Maps `modelPath` and indexes the graph's initializers.
  Status open(const std::string &modelPath);

  const std::string &path() const { return path_; }
  const std::vector<OnnxInitializer> &initializers() const { return inits_; }
  const OnnxInitializer *find(const std::string &name) const;

  /// Reads initializer `name` into `dst` (caller storage). The shape must
  /// equal dst's; the dtype must equal it or convert (see convert.h).
  Status read(const std::string &name, const Tensor &dst) const;

private:
  Status readExternal(const OnnxInitializer &init, DType type,
                      const Tensor &dst) const;
  Status error(const std::string &message) const;

  std::string path_; // as given
  std::string dir_;  // its folder ("." when none)
  const uint8_t *map_ = nullptr;
  size_t mapSize_ = 0;
  std::vector<OnnxInitializer> inits_;
  std::unordered_map<std::string, size_t> byName_;
};

/// Checks that external-data `location` of initializer `name` stays inside
/// `modelDir` and exists; `*fullPath` receives the path to open. Errors
/// name the initializer and the file.
Status resolveExternalLocation(const std::string &modelDir,
                               const std::string &name,
                               const std::string &location,
                               std::string *fullPath);

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_ONNX_WEIGHTS_H
