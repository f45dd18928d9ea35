//===- onnx_weights.cpp - Initializers of an ONNX model, no protobuf ------===//
//
// 1. `open` maps the file and walks ModelProto -> GraphProto ->
//    TensorProto, keeping per initializer its name, type, dims, external
//    data entries and the byte range of its TensorProto.
// 2. `read` walks that one TensorProto again for its data fields and
//    converts into the caller's tensor; external data is read with pread.
//
// Every length and varint is bounds-checked: a truncated or foreign file is
// an error naming the byte offset, never a crash. Data is little-endian, as
// ONNX stores it; the hosts dsc targets (x86-64, AArch64) are too.
//
//===----------------------------------------------------------------------===//

#include "program/onnx_weights.h"
#include "program/convert.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsc::program {

//===----------------------------------------------------------------------===//
// ONNX data types
//===----------------------------------------------------------------------===//

namespace {
enum : int32_t {
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kBfloat16 = 16,
};
} // namespace

bool dtypeFromOnnx(int32_t onnxType, DType &out) {
  switch (onnxType) {
  case kFloat:
    out = DType::F32;
    return true;
  case kUint8:
    out = DType::U8;
    return true;
  case kInt8:
    out = DType::I8;
    return true;
  case kInt32:
    out = DType::I32;
    return true;
  case kInt64:
    out = DType::I64;
    return true;
  case kBool:
    out = DType::Bool;
    return true;
  case kFloat16:
    out = DType::F16;
    return true;
  case kDouble:
    out = DType::F64;
    return true;
  case kBfloat16:
    out = DType::BF16;
    return true;
  default:
    return false;
  }
}

std::string onnxDataTypeName(int32_t onnxType) {
  static const char *names[] = {
      "UNDEFINED",      "FLOAT",        "UINT8",          "INT8",
      "UINT16",         "INT16",        "INT32",          "INT64",
      "STRING",         "BOOL",         "FLOAT16",        "DOUBLE",
      "UINT32",         "UINT64",       "COMPLEX64",      "COMPLEX128",
      "BFLOAT16",       "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
      "FLOAT8E5M2FNUZ", "UINT4",        "INT4",           "FLOAT4E2M1"};
  if (onnxType >= 0 &&
      onnxType < static_cast<int32_t>(sizeof(names) / sizeof(names[0])))
    return names[onnxType];
  return "data type " + std::to_string(onnxType);
}

int64_t OnnxInitializer::numel() const {
  int64_t n = 1; // saturates instead of overflowing on absurd dims
  for (int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n))
      return INT64_MAX;
  return n;
}

std::string OnnxInitializer::describe() const {
  DType t;
  std::string s =
      dtypeFromOnnx(dataType, t) ? dtypeName(t) : onnxDataTypeName(dataType);
  return s + dsc::describe(I64s(dims));
}

//===----------------------------------------------------------------------===//
// Protobuf wire format
//===----------------------------------------------------------------------===//

namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

/// A cursor over one message's bytes; `base` is the offset of `p` in the
/// file, for messages.
class Wire {
public:
  Wire(const uint8_t *p, size_t n, size_t base)
      : begin_(p), p_(p), end_(p + n), base_(base) {}

  bool done() const { return p_ >= end_; }
  size_t offset() const { return base_ + static_cast<size_t>(p_ - begin_); }

  bool varint(uint64_t &v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_)
        return false;
      uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return true;
    }
    return false; // more than 10 bytes
  }

  bool tag(uint32_t &field, int &wireType) {
    uint64_t t;
    if (!varint(t) || (t >> 3) == 0 || (t >> 3) > 0x1fffffff)
      return false;
    field = static_cast<uint32_t>(t >> 3);
    wireType = static_cast<int>(t & 7);
    return true;
  }

  /// A length-delimited payload: `*data`, `*size` and its file offset.
  bool bytes(const uint8_t *&data, size_t &size, size_t &at) {
    uint64_t n;
    if (!varint(n) || n > static_cast<uint64_t>(end_ - p_))
      return false;
    data = p_;
    size = static_cast<size_t>(n);
    at = offset();
    p_ += n;
    return true;
  }

  bool fixed(void *out, size_t n) {
    if (static_cast<size_t>(end_ - p_) < n)
      return false;
    std::memcpy(out, p_, n);
    p_ += n;
    return true;
  }

  bool skip(int wireType) {
    uint64_t v;
    const uint8_t *d;
    size_t n, at;
    switch (wireType) {
    case kVarint:
      return varint(v);
    case kFixed64:
      return fixed(&v, 8);
    case kLen:
      return bytes(d, n, at);
    case kFixed32:
      return fixed(&v, 4);
    default:
      return false; // groups (3, 4) are not used by ONNX
    }
  }

private:
  const uint8_t *begin_, *p_, *end_;
  size_t base_;
};

std::string parentDir(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

/// Writes element `i` of `dst` from one value of type `from`.
void putOne(const Tensor &dst, size_t i, const void *value, DType from) {
  size_t es = dtypeSize(dst.dtype);
  convertElements(value, from, static_cast<char *>(dst.data) + i * es,
                  dst.dtype, 1);
}

/// Converts `count` elements at possibly unaligned `src` into dst starting
/// at element `first`, through an aligned bounce buffer.
bool convertUnaligned(const uint8_t *src, DType from, const Tensor &dst,
                      size_t first, size_t count, size_t *badIndex) {
  if (from == dst.dtype) {
    std::memcpy(static_cast<char *>(dst.data) + first * dtypeSize(from), src,
                count * dtypeSize(from));
    return true;
  }
  constexpr size_t kChunk = 8192;
  uint64_t bounce[kChunk]; // 8-byte aligned, kChunk elements of <= 8 bytes
  size_t es = dtypeSize(from), ds = dtypeSize(dst.dtype);
  for (size_t done = 0; done < count;) {
    size_t n = std::min(kChunk, count - done);
    std::memcpy(bounce, src + done * es, n * es);
    size_t bad = 0;
    if (!convertElements(bounce, from,
                         static_cast<char *>(dst.data) + (first + done) * ds,
                         dst.dtype, n, &bad)) {
      if (badIndex)
        *badIndex = first + done + bad;
      return false;
    }
    done += n;
  }
  return true;
}

} // namespace

//===----------------------------------------------------------------------===//
// External data confinement
//===----------------------------------------------------------------------===//

Status resolveExternalLocation(const std::string &modelDir,
                               const std::string &name,
                               const std::string &location,
                               std::string *fullPath) {
  auto fail = [&](const std::string &why) {
    return Status::error(StatusCode::IoError,
                         "external data of initializer '" + name + "' " + why);
  };
  if (location.empty())
    return fail("has no 'location'");
  if (location[0] == '/' || location[0] == '\\' ||
      (location.size() >= 2 && location[1] == ':'))
    return fail("has the absolute path '" + location +
                "'; only files inside the model's folder are read (move the "
                "file next to the model and use a relative location)");
  for (size_t start = 0; start <= location.size();) {
    size_t end = location.find_first_of("/\\", start);
    if (end == std::string::npos)
      end = location.size();
    if (location.compare(start, end - start, "..") == 0 && end - start == 2)
      return fail("at '" + location +
                  "' is outside the model's folder; only files inside it "
                  "are read");
    start = end + 1;
  }
  std::string full = modelDir + "/" + location;
  struct stat st;
  if (::stat(full.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return fail("is missing: file '" + location +
                  "' not found (looked for '" + full +
                  "'); copy it next to the model");
    return fail("cannot be accessed: '" + full + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode))
    return fail("at '" + full + "' is not a regular file");
  char realFile[PATH_MAX], realDir[PATH_MAX];
  if (!::realpath(full.c_str(), realFile) ||
      !::realpath(modelDir.c_str(), realDir))
    return fail("cannot be resolved: '" + full + "': " + std::strerror(errno));
  std::string dir = realDir;
  if (dir != "/")
    dir += "/";
  if (std::strncmp(realFile, dir.c_str(), dir.size()) != 0)
    return fail("at '" + location + "' resolves to '" + realFile +
                "', outside the model's folder '" + realDir + "'");
  *fullPath = full;
  return Status();
}

//===----------------------------------------------------------------------===//
// OnnxWeights
//===----------------------------------------------------------------------===//

OnnxWeights::~OnnxWeights() {
  if (map_)
    ::munmap(const_cast<uint8_t *>(map_), mapSize_);
}

Status OnnxWeights::error(const std::string &message) const {
  return Status::error(StatusCode::IoError, path_ + ": " + message);
}

const OnnxInitializer *OnnxWeights::find(const std::string &name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &inits_[it->second];
}

Status OnnxWeights::open(const std::string &modelPath) {
  if (map_)
    return Status::error(StatusCode::InvalidArgument,
                         "OnnxWeights::open(" + modelPath +
                             "): already open on " + path_);
  path_ = modelPath;
  dir_ = parentDir(modelPath);
  int fd = ::open(modelPath.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return error(std::string("cannot open the ONNX model: ") +
                 std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return error("not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return error("empty file, not an ONNX model");
  }
  void *m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                   MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED)
    return error(std::string("cannot map the file: ") + std::strerror(errno));
  map_ = static_cast<const uint8_t *>(m);
  mapSize_ = static_cast<size_t>(st.st_size);

  auto malformed = [&](const Wire &w, const char *in) {
    return error(std::string("malformed protobuf in ") + in + " at byte " +
                 std::to_string(w.offset()) +
                 " (truncated or not an ONNX model?)");
  };

  // 1. ModelProto: field 7 is the graph (several occurrences merge).
  bool sawGraph = false;
  Wire model(map_, mapSize_, 0);
  while (!model.done()) {
    uint32_t field;
    int wt;
    if (!model.tag(field, wt))
      return malformed(model, "ModelProto");
    if (field != 7 || wt != kLen) {
      if (!model.skip(wt))
        return malformed(model, "ModelProto");
      continue;
    }
    const uint8_t *g;
    size_t gn, gAt;
    if (!model.bytes(g, gn, gAt))
      return malformed(model, "ModelProto");
    sawGraph = true;

    // 2. GraphProto: field 5 is an initializer.
    Wire graph(g, gn, gAt);
    while (!graph.done()) {
      if (!graph.tag(field, wt))
        return malformed(graph, "GraphProto");
      if (field != 5 || wt != kLen) {
        if (!graph.skip(wt))
          return malformed(graph, "GraphProto");
        continue;
      }
      const uint8_t *t;
      size_t tn, tAt;
      if (!graph.bytes(t, tn, tAt))
        return malformed(graph, "GraphProto");

      // 3. TensorProto: everything but the data.
      OnnxInitializer init;
      init.begin = tAt;
      init.size = tn;
      std::string offsetText, lengthText;
      Wire tensor(t, tn, tAt);
      while (!tensor.done()) {
        if (!tensor.tag(field, wt))
          return malformed(tensor, "TensorProto");
        uint64_t v;
        const uint8_t *d;
        size_t dn, dAt;
        bool ok = true;
        if (field == 1 && wt == kVarint) {
          ok = tensor.varint(v);
          init.dims.push_back(static_cast<int64_t>(v));
        } else if (field == 1 && wt == kLen) {
          ok = tensor.bytes(d, dn, dAt);
          Wire packed(d, dn, dAt);
          while (ok && !packed.done()) {
            ok = packed.varint(v);
            init.dims.push_back(static_cast<int64_t>(v));
          }
        } else if (field == 2 && wt == kVarint) {
          ok = tensor.varint(v);
          init.dataType = static_cast<int32_t>(v);
        } else if (field == 8 && wt == kLen) {
          ok = tensor.bytes(d, dn, dAt);
          if (ok)
            init.name.assign(reinterpret_cast<const char *>(d), dn);
        } else if (field == 14 && wt == kVarint) {
          ok = tensor.varint(v);
          init.external = v == 1;
        } else if (field == 13 && wt == kLen) {
          ok = tensor.bytes(d, dn, dAt);
          std::string key, value;
          Wire entry(d, dn, dAt);
          while (ok && !entry.done()) {
            uint32_t f;
            int ewt;
            const uint8_t *s;
            size_t sn, sAt;
            ok = entry.tag(f, ewt);
            if (ok && (f == 1 || f == 2) && ewt == kLen) {
              ok = entry.bytes(s, sn, sAt);
              if (ok)
                (f == 1 ? key : value)
                    .assign(reinterpret_cast<const char *>(s), sn);
            } else if (ok) {
              ok = entry.skip(ewt);
            }
          }
          if (key == "location")
            init.location = value;
          else if (key == "offset")
            offsetText = value;
          else if (key == "length")
            lengthText = value;
        } else {
          ok = tensor.skip(wt);
        }
        if (!ok)
          return malformed(tensor, "TensorProto");
      }
      for (int64_t d : init.dims)
        if (d < 0)
          return error("initializer '" + init.name + "' has a negative dim " +
                       std::to_string(d));
      if (init.external) {
        auto parse = [&](const std::string &text, const char *key,
                         uint64_t &out) -> Status {
          char *end = nullptr;
          errno = 0;
          unsigned long long x = std::strtoull(text.c_str(), &end, 10);
          if (text.empty() || *end || errno || text[0] == '-')
            return error("external data of initializer '" + init.name +
                         "' has a bad " + key + " '" + text + "'");
          out = x;
          return Status();
        };
        if (!offsetText.empty())
          if (Status s = parse(offsetText, "offset", init.offset); !s.ok())
            return s;
        if (!lengthText.empty()) {
          if (Status s = parse(lengthText, "length", init.length); !s.ok())
            return s;
          init.hasLength = true;
        }
      }
      if (init.name.empty())
        continue; // nothing can refer to it
      if (byName_.count(init.name))
        return error("initializer '" + init.name + "' appears twice");
      byName_[init.name] = inits_.size();
      inits_.push_back(std::move(init));
    }
  }
  if (!sawGraph)
    return error("no graph (ModelProto field 7) found; is this an ONNX model?");
  return Status();
}

Status OnnxWeights::read(const std::string &name, const Tensor &dst) const {
  const OnnxInitializer *init = find(name);
  if (!init)
    return error("has no initializer '" + name + "'");
  std::string what = "initializer '" + name + "'";
  DType type;
  if (!dtypeFromOnnx(init->dataType, type))
    return error(what + " has data type " + onnxDataTypeName(init->dataType) +
                 ", which a training program does not take");
  bool sameShape = static_cast<int>(init->dims.size()) == dst.rank;
  for (int i = 0; sameShape && i < dst.rank; ++i)
    sameShape = init->dims[i] == dst.shape[i];
  if (!sameShape || !canConvert(type, dst.dtype))
    return error(what + " is " + init->describe() +
                 " but the program expects " + describe(dst));
  size_t n = static_cast<size_t>(init->numel());
  size_t es = dtypeSize(type);
  if (init->external)
    return readExternal(*init, type, dst);

  // The data fields: raw_data, or the typed field of this data type.
  uint32_t typedField = 5; // int32_data: ints <= 32 bits, bool, f16 bits
  if (type == DType::F32)
    typedField = 4;
  else if (type == DType::I64)
    typedField = 7;
  else if (type == DType::F64)
    typedField = 10;
  const uint8_t *raw = nullptr;
  size_t rawSize = 0;
  size_t count = 0; // typed elements seen
  Wire tensor(map_ + init->begin, init->size, init->begin);
  auto malformed = [&] {
    return error("malformed protobuf in " + what + " at byte " +
                 std::to_string(tensor.offset()));
  };
  // Typed values are decoded as they come; more of them than the shape
  // holds is an error, caught before any write past the end.
  auto putTyped = [&](uint64_t bits) -> bool {
    if (count >= n)
      return ++count, true;
    switch (type) {
    case DType::F32: {
      float f;
      uint32_t b = static_cast<uint32_t>(bits);
      std::memcpy(&f, &b, 4);
      putOne(dst, count, &f, type);
      break;
    }
    case DType::F64: {
      double f;
      std::memcpy(&f, &bits, 8);
      putOne(dst, count, &f, type);
      break;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h = static_cast<uint16_t>(bits);
      putOne(dst, count, &h, type);
      break;
    }
    default: {
      int64_t v = static_cast<int64_t>(bits);
      if (type == DType::I32 || type == DType::I8)
        v = static_cast<int32_t>(bits); // sign-extended varint
      if (type == DType::Bool)
        v = v != 0;
      if (dst.dtype == DType::Bool) {
        uint8_t b = v != 0;
        putOne(dst, count, &b, DType::Bool);
      } else if (!convertElements(&v, DType::I64,
                                  static_cast<char *>(dst.data) +
                                      count * dtypeSize(dst.dtype),
                                  dst.dtype, 1)) {
        ++count;
        return false;
      }
    }
    }
    ++count;
    return true;
  };
  bool rangeOk = true;
  while (!tensor.done()) {
    uint32_t field;
    int wt;
    if (!tensor.tag(field, wt))
      return malformed();
    const uint8_t *d;
    size_t dn, dAt;
    if (field == 9 && wt == kLen) {
      if (!tensor.bytes(raw, rawSize, dAt))
        return malformed();
      continue;
    }
    if (field != typedField) {
      if (!tensor.skip(wt))
        return malformed();
      continue;
    }
    bool fixed32 = field == 4, fixed64 = field == 10;
    if (wt == kLen) { // packed
      if (!tensor.bytes(d, dn, dAt))
        return malformed();
      Wire packed(d, dn, dAt);
      while (!packed.done()) {
        uint64_t v = 0;
        bool ok = fixed32   ? packed.fixed(&v, 4)
                  : fixed64 ? packed.fixed(&v, 8)
                            : packed.varint(v);
        if (!ok)
          return malformed();
        rangeOk = putTyped(v) && rangeOk;
      }
    } else {
      uint64_t v = 0;
      bool ok = (fixed32 && wt == kFixed32)               ? tensor.fixed(&v, 4)
                : (fixed64 && wt == kFixed64)             ? tensor.fixed(&v, 8)
                : (!fixed32 && !fixed64 && wt == kVarint) ? tensor.varint(v)
                                                          : false;
      if (!ok)
        return malformed();
      rangeOk = putTyped(v) && rangeOk;
    }
  }
  if (raw) {
    if (rawSize != n * es)
      return error(what + " (" + init->describe() + ") holds " +
                   std::to_string(rawSize) + " bytes of raw data, expected " +
                   std::to_string(n * es));
    size_t bad = 0;
    if (!convertUnaligned(raw, type, dst, 0, n, &bad))
      return error(what + ": element " + std::to_string(bad) +
                   " does not fit " + dtypeName(dst.dtype));
    return Status();
  }
  if (count != n)
    return error(what + " (" + init->describe() + ") holds " +
                 std::to_string(count) + " values, expected " +
                 std::to_string(n) + (count ? "" : " (no data)"));
  if (!rangeOk)
    return error(what + ": a value does not fit " +
                 std::string(dtypeName(dst.dtype)));
  return Status();
}

Status OnnxWeights::readExternal(const OnnxInitializer &init, DType type,
                                 const Tensor &dst) const {
  std::string full;
  if (Status s = resolveExternalLocation(dir_, init.name, init.location, &full);
      !s.ok())
    return error(s.message());
  size_t n = static_cast<size_t>(init.numel());
  uint64_t need = static_cast<uint64_t>(n) * dtypeSize(type);
  uint64_t length = init.hasLength ? init.length : need;
  std::string what = "external data of initializer '" + init.name + "' in '" +
                     init.location + "'";
  if (length < need)
    return error(what + " has length " + std::to_string(length) + " but " +
                 init.describe() + " needs " + std::to_string(need) + " bytes");
  int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return error("cannot open " + what + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return error("cannot stat " + what + ": " + std::strerror(errno));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (init.offset > size || need > size - init.offset) {
    ::close(fd);
    return error(what + " needs bytes [" + std::to_string(init.offset) + ", " +
                 std::to_string(init.offset + need) + ") but the file has " +
                 std::to_string(size) + " bytes (truncated?)");
  }
  // Same dtype: straight into dst. Otherwise through a bounce buffer.
  constexpr size_t kChunk = 1 << 20;
  std::vector<uint8_t> bounce;
  if (type != dst.dtype)
    bounce.resize(kChunk);
  size_t es = dtypeSize(type);
  uint64_t done = 0;
  while (done < need) {
    uint8_t *into;
    size_t want;
    if (type == dst.dtype) {
      into = static_cast<uint8_t *>(dst.data) + done;
      want = static_cast<size_t>(std::min<uint64_t>(need - done, 1u << 30));
    } else {
      into = bounce.data();
      want = static_cast<size_t>(std::min<uint64_t>(need - done, kChunk));
      want -= want % es;
    }
    ssize_t got =
        ::pread(fd, into, want, static_cast<off_t>(init.offset + done));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      int e = errno;
      ::close(fd);
      return error("cannot read " + what + ": " +
                   (got < 0 ? std::strerror(e) : "unexpected end of file"));
    }
    size_t g = static_cast<size_t>(got);
    if (type != dst.dtype) {
      if (g % es) { // keep whole elements; the rest is read again
        g -= g % es;
        if (g == 0)
          continue;
      }
      size_t bad = 0;
      if (!convertUnaligned(into, type, dst, done / es, g / es, &bad)) {
        ::close(fd);
        return error(what + ": element " + std::to_string(bad) +
                     " does not fit " + dtypeName(dst.dtype));
      }
    }
    done += g;
  }
  ::close(fd);
  return Status();
}

} // namespace dsc::program
