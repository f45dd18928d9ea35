//===- TensorData.cpp - initializer data, internal or external ------------===//
//
// External data is confined to the model's own directory: absolute paths and
// paths that climb out with `..` (or through a symbolic link) are rejected.
// An external file that is absent is not an error here: compiling needs only
// shapes, and the program reads the weights on the cluster.
//
//===----------------------------------------------------------------------===//
#include "compiler/import/ImportContext.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstring>

using namespace mlir;

namespace dsc {

static std::string externalKey(const onnx::TensorProto &t,
                               llvm::StringRef key) {
  for (const auto &kv : t.external_data())
    if (kv.key() == key)
      return kv.value();
  return "";
}

std::string checkExternalLocation(const onnx::TensorProto &t,
                                  const std::string &modelDir) {
  std::string location = externalKey(t, "location");
  if (location.empty())
    return "external data of initializer '" + t.name() + "' has no 'location'";
  if (llvm::sys::path::is_absolute(location) || location.front() == '/' ||
      location.front() == '\\')
    return "external data of initializer '" + t.name() +
           "' has the absolute path '" + location +
           "'; only paths inside the model's folder are read (move the "
           "file next to the model and use a relative location)";
  for (auto it = llvm::sys::path::begin(location),
            e = llvm::sys::path::end(location);
       it != e; ++it)
    if (*it == "..")
      return "external data of initializer '" + t.name() + "' at '" + location +
             "' is outside the model's folder; only files inside it are read";
  // A symbolic link may still lead out; compare real paths when it exists.
  llvm::SmallString<256> full(modelDir);
  llvm::sys::path::append(full, location);
  llvm::SmallString<256> realFile, realDir;
  if (!llvm::sys::fs::real_path(full, realFile) &&
      !llvm::sys::fs::real_path(modelDir, realDir)) {
    std::string dir = std::string(realDir.str()) + "/";
    if (!llvm::StringRef(realFile).starts_with(dir))
      return "external data of initializer '" + t.name() + "' at '" + location +
             "' resolves outside the model's folder";
  }
  return "";
}

std::string checkTensorDims(const onnx::TensorProto &t, llvm::StringRef what) {
  llvm::SmallVector<int64_t> shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0)
      return what.str() + " has shape " + formatShape(shape) +
             " with a negative dim; a stored tensor has a static, "
             "non-negative shape: re-export the model";
  auto kind = fromOnnxDataType(t.data_type());
  if (kind && !checkedByteSize(shape, *kind))
    return what.str() + " has shape " + formatShape(shape) + ", " +
           kTensorTooLarge + "; the model file is corrupt: re-export it";
  return "";
}

template <typename T>
static void readRaw(const std::string &raw, size_t n, std::vector<T> &out) {
  out.resize(n);
  // An empty vector's data() may be null, and memcpy from or to null is
  // undefined even for 0 bytes (UBSan, on a model with an empty tensor).
  if (n)
    std::memcpy(out.data(), raw.data(), n * sizeof(T));
}

static double halfToDouble(uint16_t h, bool bf16) {
  if (bf16) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  llvm::APFloat f(llvm::APFloat::IEEEhalf(), llvm::APInt(16, h));
  return f.convertToDouble();
}

FailureOr<std::optional<HostTensor>> readTensorData(const onnx::TensorProto &t,
                                                    const std::string &modelDir,
                                                    Location loc,
                                                    bool *missing) {
  if (missing)
    *missing = false;
  auto kind = fromOnnxDataType(t.data_type());
  if (!kind)
    return emitError(loc) << "initializer '" << t.name()
                          << "' has unsupported data type "
                          << onnxDataTypeName(t.data_type());
  HostTensor h;
  h.kind = *kind;
  for (int64_t d : t.dims())
    h.shape.push_back(d);
  std::string sizeErr = checkTensorDims(t, "initializer '" + t.name() + "'");
  if (!sizeErr.empty())
    return emitError(loc) << sizeErr;
  size_t n = h.numElements();
  size_t elemBytes = elemKindBytes(h.kind);

  std::string raw;
  bool hasRaw = false;
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    std::string err = checkExternalLocation(t, modelDir);
    if (!err.empty())
      return emitError(loc) << err;
    llvm::SmallString<256> full(modelDir);
    llvm::sys::path::append(full, externalKey(t, "location"));
    if (!llvm::sys::fs::exists(full)) {
      if (missing)
        *missing = true;
      return std::optional<HostTensor>();
    }
    auto buf = llvm::MemoryBuffer::getFile(full, /*IsText=*/false);
    if (!buf)
      return emitError(loc) << "cannot read external data file '" << full
                            << "': " << buf.getError().message();
    uint64_t offset = 0, length = 0;
    std::string off = externalKey(t, "offset"), len = externalKey(t, "length");
    if (!off.empty() && llvm::StringRef(off).getAsInteger(10, offset))
      return emitError(loc) << "bad external data offset '" << off << "'";
    if (!len.empty() && llvm::StringRef(len).getAsInteger(10, length))
      return emitError(loc) << "bad external data length '" << len << "'";
    if (len.empty())
      length = n * elemBytes; // checkTensorDims bounded it
    // offset + length may wrap around 2^64 and pass a plain bounds check.
    uint64_t end;
    uint64_t fileSize = (*buf)->getBufferSize();
    if (__builtin_add_overflow(offset, length, &end))
      return emitError(loc)
             << "external data of initializer '" << t.name() << "' has offset "
             << offset << " and length " << length
             << ", which overflow 64 bits; the model file is corrupt: "
                "re-export it";
    if (end > fileSize || length < n * elemBytes)
      return emitError(loc)
             << "external data of initializer '" << t.name()
             << "' needs bytes [" << offset << ", " << end << ") but '" << full
             << "' has " << fileSize << " bytes (file truncated?)";
    raw.assign((*buf)->getBufferStart() + offset, length);
    hasRaw = true;
  } else if (t.has_raw_data()) {
    raw = t.raw_data();
    hasRaw = true;
  }

  auto fail = [&](size_t have) -> FailureOr<std::optional<HostTensor>> {
    return emitError(loc) << "initializer '" << t.name() << "' holds " << have
                          << " values for shape of " << n << " elements";
  };
  if (hasRaw) {
    if (raw.size() < n * elemBytes)
      return fail(raw.size() / elemBytes);
    switch (h.kind) {
    case ElemKind::F32: {
      std::vector<float> v;
      readRaw(raw, n, v);
      h.floats.assign(v.begin(), v.end());
      break;
    }
    case ElemKind::F64:
      readRaw(raw, n, h.floats);
      break;
    case ElemKind::F16:
    case ElemKind::BF16: {
      std::vector<uint16_t> v;
      readRaw(raw, n, v);
      for (uint16_t x : v)
        h.floats.push_back(halfToDouble(x, h.kind == ElemKind::BF16));
      break;
    }
    case ElemKind::I64:
      readRaw(raw, n, h.ints);
      break;
    case ElemKind::I32: {
      std::vector<int32_t> v;
      readRaw(raw, n, v);
      h.ints.assign(v.begin(), v.end());
      break;
    }
    case ElemKind::I16: {
      std::vector<int16_t> v;
      readRaw(raw, n, v);
      h.ints.assign(v.begin(), v.end());
      break;
    }
    case ElemKind::I8: {
      std::vector<int8_t> v;
      readRaw(raw, n, v);
      h.ints.assign(v.begin(), v.end());
      break;
    }
    case ElemKind::U8:
    case ElemKind::Bool: {
      std::vector<uint8_t> v;
      readRaw(raw, n, v);
      h.ints.assign(v.begin(), v.end());
      break;
    }
    }
    return std::optional<HostTensor>(std::move(h));
  }

  // Typed fields (onnx.proto: which field holds which type).
  switch (h.kind) {
  case ElemKind::F32:
    if ((size_t)t.float_data_size() != n)
      return fail(t.float_data_size());
    h.floats.assign(t.float_data().begin(), t.float_data().end());
    break;
  case ElemKind::F64:
    if ((size_t)t.double_data_size() != n)
      return fail(t.double_data_size());
    h.floats.assign(t.double_data().begin(), t.double_data().end());
    break;
  case ElemKind::I64:
    if ((size_t)t.int64_data_size() != n)
      return fail(t.int64_data_size());
    h.ints.assign(t.int64_data().begin(), t.int64_data().end());
    break;
  case ElemKind::F16:
  case ElemKind::BF16:
    if ((size_t)t.int32_data_size() != n)
      return fail(t.int32_data_size());
    for (int32_t x : t.int32_data())
      h.floats.push_back(halfToDouble((uint16_t)x, h.kind == ElemKind::BF16));
    break;
  default:
    if ((size_t)t.int32_data_size() != n)
      return fail(t.int32_data_size());
    h.ints.assign(t.int32_data().begin(), t.int32_data().end());
    break;
  }
  return std::optional<HostTensor>(std::move(h));
}

} // namespace dsc
