//===- consolidate.cpp - A checkpoint as full tensors by ONNX name --------===//

#include "io/consolidate.h"
#include "io/json.h"
#include "io/output_file.h"
#include "io/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

namespace dsc::io {

namespace {

bool startsWith(const std::string &s, const char *prefix) {
  return s.compare(0, std::char_traits<char>::length(prefix), prefix) == 0;
}

/// "out/model.safetensors" -> "out/model".
std::string stemOf(const std::string &path) {
  const std::string ext = ".safetensors";
  if (path.size() > ext.size() &&
      path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return path.substr(0, path.size() - ext.size());
  return path;
}

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// The tensors of one output file, read whole into owned buffers.
Status writeFile(CheckpointReader &reader, const std::string &path,
                 const std::vector<const ConsolidatedName *> &names,
                 int64_t step) {
  std::vector<std::vector<uint64_t>> storage;
  std::vector<NamedTensor> tensors;
  storage.reserve(names.size());
  for (const ConsolidatedName *n : names) {
    const CheckpointTensor *t = reader.manifest().find(n->logical);
    size_t bytes = static_cast<size_t>(t->numel()) * dtypeSize(t->dtype);
    storage.emplace_back((bytes + 7) / 8);
    Tensor view = Tensor::of(storage.back().data(), t->dtype, t->shape);
    Status s = reader.read(n->logical, view);
    if (!s.ok())
      return s;
    tensors.push_back({n->name, view});
  }
  return writeSafetensors(
      path, tensors,
      {{"format", "pt"}, {"dsc_checkpoint_step", std::to_string(step)}});
}

} // namespace

Status consolidatedNames(const CheckpointManifest &m,
                         const ConsolidateWhat &what,
                         std::vector<ConsolidatedName> &out) {
  out.clear();
  std::map<std::string, std::string> seen; // output name -> logical
  for (const CheckpointTensor &t : m.tensors) {
    ConsolidatedName n;
    n.logical = t.name;
    if (startsWith(t.name, "param/"))
      n.name = t.name.substr(6);
    else if (startsWith(t.name, "buffer/") && what.buffers)
      n.name = t.name.substr(7);
    else if ((startsWith(t.name, "optim/") || startsWith(t.name, "scaler/")) &&
             what.includeOptimizer)
      n.name = t.name;
    else
      continue;
    auto [it, fresh] = seen.emplace(n.name, n.logical);
    if (!fresh)
      return Status::error(StatusCode::InvalidArgument,
                           "consolidate: '" + it->second + "' and '" +
                               n.logical + "' would both be named '" + n.name +
                               "'");
    out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end(),
            [](const ConsolidatedName &a, const ConsolidatedName &b) {
              return a.name < b.name;
            });
  return Status();
}

Status consolidateToSafetensors(CheckpointReader &reader,
                                const std::string &outPath,
                                uint64_t maxShardBytes,
                                const ConsolidateWhat &what,
                                std::vector<std::string> *written) {
  std::string call = "consolidate(" + reader.stepDir() + " -> " + outPath + ")";
  auto wrap = [&](const Status &s) {
    return s.ok() ? s : Status::error(s.code(), call + ": " + s.message());
  };
  std::vector<ConsolidatedName> names;
  Status s = consolidatedNames(reader.manifest(), what, names);
  if (!s.ok())
    return wrap(s);
  if (names.empty())
    return wrap(Status::error(StatusCode::InvalidArgument,
                              "the checkpoint holds no parameters"));
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const ConsolidatedName &n : names) {
    const CheckpointTensor *t = reader.manifest().find(n.logical);
    sizes.push_back(static_cast<uint64_t>(t->numel()) * dtypeSize(t->dtype));
    total += sizes.back();
  }
  int64_t step = reader.manifest().step;

  // One file when it fits.
  if (maxShardBytes == 0 || total <= maxShardBytes) {
    std::vector<const ConsolidatedName *> all;
    for (const ConsolidatedName &n : names)
      all.push_back(&n);
    s = writeFile(reader, outPath, all, step);
    if (s.ok() && written)
      written->push_back(outPath);
    return wrap(s);
  }

  // Shards in name order, each up to maxShardBytes (a larger tensor alone).
  std::vector<std::vector<const ConsolidatedName *>> shards(1);
  uint64_t used = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!shards.back().empty() && used + sizes[i] > maxShardBytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().push_back(&names[i]);
    used += sizes[i];
  }
  std::string stem = stemOf(outPath);
  Json index = Json::object();
  index.add("metadata", Json::object())
      .add("total_size", Json::unsignedInteger(total));
  Json &map = index.add("weight_map", Json::object());
  for (size_t k = 0; k < shards.size(); ++k) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu.safetensors", k + 1,
                  shards.size());
    std::string path = stem + suffix;
    s = writeFile(reader, path, shards[k], step);
    if (!s.ok())
      return wrap(s);
    if (written)
      written->push_back(path);
    for (const ConsolidatedName *n : shards[k])
      map.add(n->name, Json::string(baseName(path)));
  }
  std::string indexPath = stem + ".safetensors.index.json";
  std::string text = formatJson(index, 2) + "\n";
  AtomicFile file;
  s = file.open(indexPath);
  if (s.ok())
    s = file.write(text.data(), text.size());
  if (s.ok())
    s = file.commit();
  if (s.ok() && written)
    written->push_back(indexPath);
  return wrap(s);
}

bool parseByteSize(const std::string &text, uint64_t &bytes) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (v > (UINT64_MAX - 9) / 10)
      return false;
    v = v * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  if (i == 0)
    return false;
  std::string unit;
  for (; i < text.size(); ++i)
    unit +=
        static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  static const std::pair<const char *, uint64_t> units[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1000},
      {"MB", 1000 * 1000},
      {"GB", 1000 * 1000 * 1000},
      {"TB", 1000ull * 1000 * 1000 * 1000},
      {"KIB", 1ull << 10},
      {"MIB", 1ull << 20},
      {"GIB", 1ull << 30},
      {"TIB", 1ull << 40}};
  for (auto [name, scale] : units)
    if (unit == name) {
      if (v > UINT64_MAX / scale)
        return false;
      bytes = v * scale;
      return true;
    }
  return false;
}

} // namespace dsc::io
