//===- safetensors.cpp - Read and write safetensors files -----------------===//

#include "io/safetensors.h"
#include "io/json.h"
#include "io/output_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace dsc::io {

const char *safetensorsDtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "F32";
  case DType::F64:
    return "F64";
  case DType::F16:
    return "F16";
  case DType::BF16:
    return "BF16";
  case DType::I64:
    return "I64";
  case DType::I32:
    return "I32";
  case DType::I8:
    return "I8";
  case DType::U8:
    return "U8";
  case DType::Bool:
    return "BOOL";
  }
  return "?";
}

bool parseSafetensorsDtype(const std::string &name, DType &out) {
  static const DType all[] = {DType::F32,  DType::F64, DType::F16,
                              DType::BF16, DType::I64, DType::I32,
                              DType::I8,   DType::U8,  DType::Bool};
  for (DType d : all)
    if (name == safetensorsDtypeName(d)) {
      out = d;
      return true;
    }
  return false;
}

namespace {

std::string errnoText() { return std::strerror(errno); }

struct FileCloser {
  void operator()(FILE *f) const {
    if (f)
      std::fclose(f);
  }
};

} // namespace

Status SafetensorsFile::read(const std::string &path) {
  std::string call = "read_safetensors(" + path + ")";
  auto fail = [&](const std::string &why) {
    return Status::error(StatusCode::IoError, call + ": " + why);
  };
  *this = SafetensorsFile();
  path_ = path;
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f)
    return fail(errnoText());
  if (std::fseek(f.get(), 0, SEEK_END) != 0)
    return fail(errnoText());
  long endPos = std::ftell(f.get());
  if (endPos < 0)
    return fail(errnoText());
  uint64_t fileSize = static_cast<uint64_t>(endPos);
  std::rewind(f.get());
  unsigned char lenBytes[8];
  if (fileSize < 8 || std::fread(lenBytes, 1, 8, f.get()) != 8)
    return fail("shorter than the 8-byte header length");
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | lenBytes[i];
  if (headerLen > 100 * 1000 * 1000 || headerLen > fileSize - 8)
    return fail("header length " + std::to_string(headerLen) +
                " does not fit a file of " + std::to_string(fileSize) +
                " bytes");
  std::string header(headerLen, '\0');
  if (std::fread(header.data(), 1, headerLen, f.get()) != headerLen)
    return fail("truncated header");
  uint64_t dataLen = fileSize - 8 - headerLen;
  data_.assign((dataLen + 7) / 8, 0);
  if (dataLen && std::fread(data_.data(), 1, dataLen, f.get()) != dataLen)
    return fail("truncated data");

  Json root;
  std::string error;
  if (!JsonParser(header).parse(root, error))
    return fail("header is not JSON: " + error);
  if (root.kind != Json::Object)
    return fail("header is not a JSON object");
  std::vector<std::pair<uint64_t, std::string>> order;
  for (auto &[name, entry] : root.members) {
    if (name == "__metadata__") {
      if (entry.kind != Json::Object)
        return fail("__metadata__ is not an object");
      for (auto &[k, v] : entry.members) {
        if (v.kind != Json::String)
          return fail("__metadata__ value of '" + k + "' is not a string");
        metadata_[k] = v.text;
      }
      continue;
    }
    std::string what = "tensor '" + name + "': ";
    if (entry.kind != Json::Object)
      return fail(what + "entry is not an object");
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (auto &[k, v] : entry.members) {
      if (k == "dtype")
        dtype = &v;
      else if (k == "shape")
        shape = &v;
      else if (k == "data_offsets")
        offsets = &v;
    }
    DType dt;
    if (!dtype || dtype->kind != Json::String)
      return fail(what + "missing dtype");
    if (!parseSafetensorsDtype(dtype->text, dt))
      return fail(what + "unsupported dtype " + dtype->text);
    if (!shape || shape->kind != Json::Array)
      return fail(what + "missing shape");
    if (shape->items.size() > static_cast<size_t>(kMaxRank))
      return fail(what + "rank above 8");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (const Json &d : shape->items) {
      uint64_t v;
      if (!jsonToUint(d, v) || v > (uint64_t(1) << 48))
        return fail(what + "bad shape entry");
      dims.push_back(static_cast<int64_t>(v));
      numel *= v;
      if (numel > (uint64_t(1) << 48))
        return fail(what + "too many elements");
    }
    uint64_t begin, end;
    if (!offsets || offsets->kind != Json::Array ||
        offsets->items.size() != 2 || !jsonToUint(offsets->items[0], begin) ||
        !jsonToUint(offsets->items[1], end))
      return fail(what + "missing data_offsets");
    if (end < begin || end > dataLen)
      return fail(what + "data_offsets [" + std::to_string(begin) + ", " +
                  std::to_string(end) + ") outside the " +
                  std::to_string(dataLen) + "-byte data section");
    if (end - begin != numel * dtypeSize(dt))
      return fail(what + "data_offsets span " + std::to_string(end - begin) +
                  " bytes, shape and dtype need " +
                  std::to_string(numel * dtypeSize(dt)));
    if (tensors_.count(name))
      return fail(what + "duplicate name");
    tensors_[name] =
        Tensor::of(reinterpret_cast<char *>(data_.data()) + begin, dt, dims);
    order.emplace_back(begin, name);
  }
  std::sort(order.begin(), order.end());
  for (auto &entry : order)
    names_.push_back(entry.second);
  return Status();
}

Status SafetensorsFile::get(const std::string &name, Tensor &out) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return Status::error(StatusCode::InvalidArgument,
                         "SafetensorsFile::get(" + name +
                             "): no such tensor in " + path_);
  out = it->second;
  return Status();
}

Status writeSafetensors(const std::string &path,
                        const std::vector<NamedTensor> &tensors,
                        const std::map<std::string, std::string> &metadata,
                        WriteMode mode) {
  std::string call = "write_safetensors(" + path + ")";
  auto fail = [&](StatusCode code, const std::string &why) {
    return Status::error(code, call + ": " + why);
  };
  // Larger elements first, then by name: every tensor starts aligned to its
  // element size, with no gaps (the format forbids holes).
  std::vector<const NamedTensor *> order;
  for (const NamedTensor &t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      return fail(StatusCode::InvalidArgument,
                  "bad tensor name '" + t.name + "'");
    if (t.tensor.rank < 0 || t.tensor.rank > kMaxRank)
      return fail(StatusCode::InvalidArgument,
                  "tensor '" + t.name + "': rank above 8");
    if (!t.tensor.present() && t.tensor.numel() != 0)
      return fail(StatusCode::InvalidArgument,
                  "tensor '" + t.name + "' has no data");
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](auto *a, auto *b) {
    size_t sa = dtypeSize(a->tensor.dtype), sb = dtypeSize(b->tensor.dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  {
    std::vector<std::string> names;
    for (auto *t : order)
      names.push_back(t->name);
    std::sort(names.begin(), names.end());
    auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end())
      return fail(StatusCode::InvalidArgument,
                  "duplicate tensor name '" + *dup + "'");
  }

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto &[k, v] : metadata) {
      if (!first)
        header += ',';
      first = false;
      appendJsonString(header, k);
      header += ':';
      appendJsonString(header, v);
    }
    header += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const NamedTensor *t : order) {
    if (!first)
      header += ',';
    first = false;
    appendJsonString(header, t->name);
    header += ":{\"dtype\":\"";
    header += safetensorsDtypeName(t->tensor.dtype);
    header += "\",\"shape\":[";
    for (int d = 0; d < t->tensor.rank; ++d)
      header += (d ? "," : "") + std::to_string(t->tensor.shape[d]);
    uint64_t bytes = t->tensor.nbytes();
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += '}';
  while ((8 + header.size()) % 8)
    header += ' ';

  unsigned char lenBytes[8];
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i)
    lenBytes[i] = static_cast<unsigned char>(len >> (8 * i));
  AtomicFile file;
  Status s = file.open(path, mode);
  if (s.ok())
    s = file.write(lenBytes, 8);
  if (s.ok())
    s = file.write(header.data(), header.size());
  for (size_t i = 0; s.ok() && i < order.size(); ++i)
    s = file.write(order[i]->tensor.data, order[i]->tensor.nbytes());
  if (s.ok())
    s = file.commit();
  if (!s.ok())
    return fail(s.code(), s.message());
  return Status();
}

} // namespace dsc::io
