//===- checkpoint.cpp - Training checkpoints on disk ----------------------===//
//
// The layout and the two-phase commit are described in checkpoint.h. Every
// name a manifest or sidecar holds is checked before it is used: indices
// against their arrays, sizes against 64 bits, pieces against the tensor
// they tile, so an edited or truncated file is an error that names the file
// and the field.
//
//===----------------------------------------------------------------------===//

#include "io/checkpoint.h"
#include "io/json.h"
#include "io/output_file.h"
#include "io/safetensors.h"
#include "io/sha256.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace dsc::io {

namespace {

constexpr const char *kFormat = "dsc-checkpoint";
constexpr const char *kSidecarFormat = "dsc-checkpoint-rank";
constexpr int kVersion = 1;
// Far above any real tensor, and small enough that numel * 8 stays in int64.
constexpr int64_t kMaxNumel = int64_t(1) << 56;
constexpr uint64_t kMaxJsonBytes = uint64_t(1) << 30;

std::string errnoText(int e = errno) { return std::strerror(e); }

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status ioError(const std::string &message) {
  return Status::error(StatusCode::IoError, message);
}

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty())
    return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string trimSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  return path;
}

std::string baseName(const std::string &path) {
  std::string p = trimSlashes(path);
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string parentOf(const std::string &path) {
  std::string p = trimSlashes(path);
  size_t slash = p.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string rankFileName(int rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

std::string sidecarName(int rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "rank_%05d.json", rank);
  return buf;
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Status fsyncDir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ioError("fsync(" + dir + "): " + errnoText());
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0)
    return ioError("fsync(" + dir + "): " + errnoText(e));
  return Status();
}

/// mkdir -p, fsyncing the parent of every folder it creates.
Status makeDirs(const std::string &path) {
  std::string p = trimSlashes(path);
  if (p.empty() || isDirectory(p))
    return Status();
  if (exists(p))
    return ioError("mkdir(" + p + "): exists and is not a directory");
  std::string parent = parentOf(p);
  if (parent != p) {
    Status s = makeDirs(parent);
    if (!s.ok())
      return s;
  }
  if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST)
    return ioError("mkdir(" + p + "): " + errnoText());
  return fsyncDir(parent);
}

Status writeTextAtomically(const std::string &path, const std::string &text) {
  AtomicFile file;
  Status s = file.open(path);
  if (s.ok())
    s = file.write(text.data(), text.size());
  if (s.ok())
    s = file.commit();
  return s;
}

Status readText(const std::string &path, std::string &out) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return ioError(path + ": " + errnoText());
  out.clear();
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    out.append(buf, n);
    if (out.size() > kMaxJsonBytes) {
      std::fclose(f);
      return ioError(path + ": larger than 1 GiB, not a checkpoint manifest");
    }
  }
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad)
    return ioError(path + ": read failed");
  return Status();
}

Status fileSize(const std::string &path, uint64_t &bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return ioError(path + ": " + errnoText());
  if (!S_ISREG(st.st_mode))
    return ioError(path + ": not a regular file");
  bytes = static_cast<uint64_t>(st.st_size);
  return Status();
}

Status removeTree(const std::string &path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec)
    return ioError("remove(" + path + "): " + ec.message());
  return Status();
}

/// The product of `shape` (each dim >= 0), false above kMaxNumel.
bool checkedNumel(const std::vector<int64_t> &shape, int64_t &numel) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxNumel)
      return false;
    if (d != 0 && n > kMaxNumel / d)
      return false;
    n *= d;
  }
  numel = n;
  return true;
}

std::string shapeText(DType dtype, const std::vector<int64_t> &shape) {
  return std::string(dtypeName(dtype)) + describe(I64s(shape));
}

bool isLowerHex64(const std::string &s) {
  return s.size() == 64 &&
         s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

/// Step number of "step_<N>" (digits only, no sign); false otherwise.
bool parseStepName(const std::string &name, int64_t &step) {
  if (name.compare(0, 5, "step_") != 0 || name.size() == 5 ||
      name.size() > 5 + 18 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return false;
  step = std::stoll(name.substr(5)); // at most 18 digits: cannot throw
  return true;
}

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return names;
  while (dirent *e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..")
      names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

//===----------------------------------------------------------------------===//
// Reading fields with errors that name the file and the field
//===----------------------------------------------------------------------===//

class Fields {
public:
  explicit Fields(std::string what) : what_(std::move(what)) {}

  Status error(const std::string &field, const std::string &why) const {
    return ioError(what_ + ": " + (field.empty() ? "" : "'" + field + "' ") +
                   why);
  }

  const Json *member(const Json &obj, const std::string &path, const char *key,
                     Json::Kind kind, const char *kindName, Status &s) const {
    std::string field = path.empty() ? key : path + "." + key;
    const Json *v = obj.find(key);
    if (!v) {
      s = error(field, "is missing");
      return nullptr;
    }
    if (v->kind != kind) {
      s = error(field, std::string("is not ") + kindName);
      return nullptr;
    }
    return v;
  }

  Status str(const Json &obj, const std::string &path, const char *key,
             std::string &out) const {
    Status s;
    if (const Json *v = member(obj, path, key, Json::String, "a string", s))
      out = v->text;
    return s;
  }

  Status i64(const Json &obj, const std::string &path, const char *key,
             int64_t lo, int64_t hi, int64_t &out) const {
    Status s;
    const Json *v = member(obj, path, key, Json::Number, "a number", s);
    if (!v)
      return s;
    return integer(*v, path.empty() ? key : path + "." + key, lo, hi, out);
  }

  Status integer(const Json &v, const std::string &field, int64_t lo,
                 int64_t hi, int64_t &out) const {
    int64_t x;
    if (!jsonToInt64(v, x) || x < lo || x > hi)
      return error(field, "is " + (v.text.empty() ? "not a number" : v.text) +
                              ", not an integer in [" + std::to_string(lo) +
                              ", " + std::to_string(hi) + "]");
    out = x;
    return Status();
  }

  Status u64(const Json &obj, const std::string &path, const char *key,
             uint64_t &out) const {
    Status s;
    const Json *v = member(obj, path, key, Json::Number, "a number", s);
    if (!v)
      return s;
    if (!jsonToUint(*v, out))
      return error(path.empty() ? key : path + "." + key,
                   "is " + v->text + ", not a byte count");
    return Status();
  }

  Status intVal(const Json &obj, const std::string &path, const char *key,
                int lo, int hi, int &out) const {
    int64_t x = 0;
    Status s = i64(obj, path, key, lo, hi, x);
    if (s.ok())
      out = static_cast<int>(x);
    return s;
  }

  Status shape(const Json &obj, const std::string &path,
               std::vector<int64_t> &out, int64_t &numel) const {
    Status s;
    const Json *v = member(obj, path, "shape", Json::Array, "an array", s);
    if (!v)
      return s;
    std::string field = path + ".shape";
    if (v->items.size() > static_cast<size_t>(kMaxRank))
      return error(field, "has " + std::to_string(v->items.size()) +
                              " dims, more than 8");
    out.clear();
    for (size_t i = 0; i < v->items.size(); ++i) {
      int64_t d;
      s = integer(v->items[i], field + "[" + std::to_string(i) + "]", 0,
                  kMaxNumel, d);
      if (!s.ok())
        return s;
      out.push_back(d);
    }
    if (!checkedNumel(out, numel))
      return error(field, describe(I64s(out)) + " has more than 2^56 elements");
    return Status();
  }

  Status dtype(const Json &obj, const std::string &path, DType &out) const {
    std::string name;
    Status s = str(obj, path, "dtype", name);
    if (!s.ok())
      return s;
    if (!parseSafetensorsDtype(name, out))
      return error(path + ".dtype", "'" + name +
                                        "' is not a dtype (F32, "
                                        "F64, F16, BF16, I64, I32, "
                                        "I8, U8, BOOL)");
    return Status();
  }

  const std::string &what() const { return what_; }

private:
  std::string what_;
};

Status parseJsonDocument(const std::string &text, const std::string &what,
                         Json &root) {
  std::string error;
  if (!JsonParser(text).parse(root, error))
    return ioError(what + ": not JSON (" + error +
                   "); the file is truncated or was edited");
  if (root.kind != Json::Object)
    return ioError(what + ": not a JSON object");
  return Status();
}

/// Sorts `t`'s pieces by offset and checks that they tile [0, numel) once;
/// `owner(i)` names the writer of piece i in messages ("rank 2").
Status checkTiling(CheckpointTensor &t, const std::string &what,
                   const std::vector<std::string> &owners) {
  std::vector<size_t> order(t.pieces.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return t.pieces[a].offset < t.pieces[b].offset;
  });
  int64_t total = t.numel(), next = 0;
  size_t prev = 0;
  bool any = false;
  std::vector<CheckpointPiece> sorted;
  for (size_t i : order) {
    const CheckpointPiece &p = t.pieces[i];
    if (p.numel == 0)
      continue;
    auto range = [](int64_t lo, int64_t hi) {
      return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
    };
    if (p.offset < next)
      return ioError(what + ": tensor '" + t.name + "': elements " +
                     range(p.offset, std::min(next, p.offset + p.numel)) +
                     " are held twice (" + owners[prev] + " and " + owners[i] +
                     ")");
    if (p.offset > next)
      return ioError(what + ": tensor '" + t.name + "': elements " +
                     range(next, p.offset) + " of " + std::to_string(total) +
                     " are in no piece (missing between " +
                     (any ? owners[prev] : std::string("the start")) + " and " +
                     owners[i] + ")");
    next = p.offset + p.numel;
    prev = i;
    any = true;
    sorted.push_back(p);
  }
  if (next != total)
    return ioError(what + ": tensor '" + t.name + "': elements [" +
                   std::to_string(next) + ", " + std::to_string(total) +
                   ") of " + std::to_string(total) + " are in no piece" +
                   (any ? " (the last is " + owners[prev] + "'s)" : ""));
  t.pieces = std::move(sorted);
  return Status();
}

//===----------------------------------------------------------------------===//
// Sidecars
//===----------------------------------------------------------------------===//

struct SidecarPiece {
  std::string name, tensor;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t offset = 0, numel = 0;
};

struct Sidecar {
  int rank = 0;
  CheckpointFile file;
  std::vector<SidecarPiece> pieces;
};

std::string sidecarToJson(const Sidecar &sc) {
  Json root = Json::object();
  root.add("format", Json::string(kSidecarFormat));
  root.add("rank", Json::integer(sc.rank));
  root.add("file", Json::string(sc.file.name));
  root.add("bytes", Json::unsignedInteger(sc.file.bytes));
  root.add("sha256", Json::string(sc.file.sha256));
  Json &pieces = root.add("pieces", Json::array());
  for (const SidecarPiece &p : sc.pieces) {
    Json &j = pieces.push(Json::object());
    j.add("name", Json::string(p.name));
    j.add("dtype", Json::string(safetensorsDtypeName(p.dtype)));
    Json &shape = j.add("shape", Json::array());
    for (int64_t d : p.shape)
      shape.push(Json::integer(d));
    j.add("offset", Json::integer(p.offset));
    j.add("numel", Json::integer(p.numel));
    j.add("tensor", Json::string(p.tensor));
  }
  return formatJson(root, 1) + "\n";
}

Status sidecarFromJson(const std::string &text, const std::string &what,
                       Sidecar &sc) {
  Json root;
  Status s = parseJsonDocument(text, what, root);
  if (!s.ok())
    return s;
  Fields f(what);
  std::string format;
  if (!(s = f.str(root, "", "format", format)).ok())
    return s;
  if (format != kSidecarFormat)
    return f.error("format",
                   "is '" + format + "', not '" + kSidecarFormat + "'");
  if (!(s = f.intVal(root, "", "rank", 0, INT32_MAX, sc.rank)).ok() ||
      !(s = f.str(root, "", "file", sc.file.name)).ok() ||
      !(s = f.u64(root, "", "bytes", sc.file.bytes)).ok() ||
      !(s = f.str(root, "", "sha256", sc.file.sha256)).ok())
    return s;
  sc.file.rank = sc.rank;
  if (!isLowerHex64(sc.file.sha256))
    return f.error("sha256", "is not 64 lower-case hex digits");
  const Json *pieces = f.member(root, "", "pieces", Json::Array, "an array", s);
  if (!pieces)
    return s;
  for (size_t i = 0; i < pieces->items.size(); ++i) {
    const Json &j = pieces->items[i];
    std::string path = "pieces[" + std::to_string(i) + "]";
    if (j.kind != Json::Object)
      return f.error(path, "is not an object");
    SidecarPiece p;
    int64_t total = 0;
    if (!(s = f.str(j, path, "name", p.name)).ok() ||
        !(s = f.str(j, path, "tensor", p.tensor)).ok() ||
        !(s = f.dtype(j, path, p.dtype)).ok() ||
        !(s = f.shape(j, path, p.shape, total)).ok() ||
        !(s = f.i64(j, path, "offset", 0, total, p.offset)).ok() ||
        !(s = f.i64(j, path, "numel", 0, total - p.offset, p.numel)).ok())
      return s;
    sc.pieces.push_back(std::move(p));
  }
  return Status();
}

} // namespace

//===----------------------------------------------------------------------===//
// The manifest
//===----------------------------------------------------------------------===//

int64_t CheckpointTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const CheckpointTensor *
CheckpointManifest::find(const std::string &name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const CheckpointTensor &t,
                                const std::string &n) { return t.name < n; });
  if (it != tensors.end() && it->name == name)
    return &*it;
  for (const CheckpointTensor &t : tensors) // not sorted after all
    if (t.name == name)
      return &t;
  return nullptr;
}

std::string manifestToJson(const CheckpointManifest &m) {
  Json root = Json::object();
  root.add("format", Json::string(kFormat));
  root.add("version", Json::integer(m.format));
  root.add("step", Json::integer(m.step));
  root.add("dsc_version", Json::string(m.dscVersion));
  Json &model = root.add("model", Json::object());
  model.add("path", Json::string(m.modelPath));
  model.add("sha256", Json::string(m.modelSha256));
  root.add("optimizer", Json::string(m.optimizer));
  root.add("precision", Json::string(m.precision));
  root.add("world_size", Json::integer(m.worldSize));
  root.add("group_size", Json::integer(m.groupSize));
  root.add("stage", Json::integer(m.stage));
  root.add("compile_command", Json::string(m.compileCommand));
  // The config as an object, so the manifest reads as one document; text
  // that is not a JSON object (never written by dsc) is kept as a string.
  Json config;
  std::string error;
  if (m.configJson.empty())
    config = Json::object();
  else if (!JsonParser(m.configJson).parse(config, error) ||
           config.kind != Json::Object)
    config = Json::string(m.configJson);
  root.add("config", std::move(config));
  Json &state = root.add("state", Json::object());
  for (const auto &[k, v] : m.state)
    state.add(k, Json::string(v));
  Json &files = root.add("files", Json::array());
  for (const CheckpointFile &f : m.files) {
    Json &j = files.push(Json::object());
    j.add("name", Json::string(f.name));
    j.add("rank", Json::integer(f.rank));
    j.add("bytes", Json::unsignedInteger(f.bytes));
    j.add("sha256", Json::string(f.sha256));
  }
  Json &tensors = root.add("tensors", Json::array());
  for (const CheckpointTensor &t : m.tensors) {
    Json &j = tensors.push(Json::object());
    j.add("name", Json::string(t.name));
    j.add("dtype", Json::string(safetensorsDtypeName(t.dtype)));
    Json &shape = j.add("shape", Json::array());
    for (int64_t d : t.shape)
      shape.push(Json::integer(d));
    Json &pieces = j.add("pieces", Json::array());
    for (const CheckpointPiece &p : t.pieces) {
      Json &pj = pieces.push(Json::object());
      pj.add("file", Json::integer(p.file));
      pj.add("tensor", Json::string(p.tensor));
      pj.add("offset", Json::integer(p.offset));
      pj.add("numel", Json::integer(p.numel));
    }
  }
  return formatJson(root, 2) + "\n";
}

Status manifestFromJson(const std::string &text, const std::string &what,
                        CheckpointManifest &out) {
  Json root;
  Status s = parseJsonDocument(text, what, root);
  if (!s.ok())
    return s;
  Fields f(what);
  CheckpointManifest m;
  std::string format;
  if (!(s = f.str(root, "", "format", format)).ok())
    return s;
  if (format != kFormat)
    return f.error("format", "is '" + format + "', not '" + kFormat + "'");
  if (!(s = f.intVal(root, "", "version", 1, INT32_MAX, m.format)).ok())
    return s;
  if (m.format != kVersion)
    return f.error("version",
                   "is " + std::to_string(m.format) +
                       "; this dsc reads checkpoint format version " +
                       std::to_string(kVersion) + " (use a newer dsc)");
  const Json *model = f.member(root, "", "model", Json::Object, "an object", s);
  if (!model)
    return s;
  if (!(s = f.i64(root, "", "step", 0, INT64_MAX, m.step)).ok() ||
      !(s = f.str(root, "", "dsc_version", m.dscVersion)).ok() ||
      !(s = f.str(*model, "model", "path", m.modelPath)).ok() ||
      !(s = f.str(*model, "model", "sha256", m.modelSha256)).ok() ||
      !(s = f.str(root, "", "optimizer", m.optimizer)).ok() ||
      !(s = f.str(root, "", "precision", m.precision)).ok() ||
      !(s = f.intVal(root, "", "world_size", 1, 1 << 24, m.worldSize)).ok() ||
      !(s = f.intVal(root, "", "group_size", 1, 1 << 24, m.groupSize)).ok() ||
      !(s = f.intVal(root, "", "stage", 0, 3, m.stage)).ok() ||
      !(s = f.str(root, "", "compile_command", m.compileCommand)).ok())
    return s;

  const Json *config = root.find("config");
  if (!config)
    m.configJson = "{}";
  else if (config->kind == Json::Object)
    m.configJson = formatJson(*config, 0);
  else if (config->kind == Json::String)
    m.configJson = config->text;
  else
    return f.error("config", "is not an object");

  if (const Json *state = root.find("state")) {
    if (state->kind != Json::Object)
      return f.error("state", "is not an object");
    for (const auto &[k, v] : state->members) {
      if (v.kind != Json::String)
        return f.error("state." + k, "is not a string");
      m.state[k] = v.text;
    }
  }

  const Json *files = f.member(root, "", "files", Json::Array, "an array", s);
  if (!files)
    return s;
  std::set<std::string> fileNames;
  for (size_t i = 0; i < files->items.size(); ++i) {
    const Json &j = files->items[i];
    std::string path = "files[" + std::to_string(i) + "]";
    if (j.kind != Json::Object)
      return f.error(path, "is not an object");
    CheckpointFile file;
    if (!(s = f.str(j, path, "name", file.name)).ok() ||
        !(s = f.intVal(j, path, "rank", 0, INT32_MAX, file.rank)).ok() ||
        !(s = f.u64(j, path, "bytes", file.bytes)).ok() ||
        !(s = f.str(j, path, "sha256", file.sha256)).ok())
      return s;
    // Files live in the step directory: a name that leaves it is refused.
    if (file.name.empty() || file.name == "." || file.name == ".." ||
        file.name.find('/') != std::string::npos ||
        file.name.find('\0') != std::string::npos)
      return f.error(path + ".name", "'" + file.name +
                                         "' is not a file name in the step "
                                         "directory");
    if (!fileNames.insert(file.name).second)
      return f.error(path + ".name", "'" + file.name + "' is listed twice");
    if (!isLowerHex64(file.sha256))
      return f.error(path + ".sha256", "is not 64 lower-case hex digits");
    m.files.push_back(std::move(file));
  }

  const Json *tensors =
      f.member(root, "", "tensors", Json::Array, "an array", s);
  if (!tensors)
    return s;
  for (size_t i = 0; i < tensors->items.size(); ++i) {
    const Json &j = tensors->items[i];
    std::string path = "tensors[" + std::to_string(i) + "]";
    if (j.kind != Json::Object)
      return f.error(path, "is not an object");
    CheckpointTensor t;
    int64_t total = 0;
    if (!(s = f.str(j, path, "name", t.name)).ok() ||
        !(s = f.dtype(j, path, t.dtype)).ok() ||
        !(s = f.shape(j, path, t.shape, total)).ok())
      return s;
    if (t.name.empty())
      return f.error(path + ".name", "is empty");
    const Json *pieces =
        f.member(j, path, "pieces", Json::Array, "an array", s);
    if (!pieces)
      return s;
    std::vector<std::string> owners;
    for (size_t k = 0; k < pieces->items.size(); ++k) {
      const Json &pj = pieces->items[k];
      std::string ppath = path + ".pieces[" + std::to_string(k) + "]";
      if (pj.kind != Json::Object)
        return f.error(ppath, "is not an object");
      CheckpointPiece p;
      int64_t fileIndex = 0;
      if (!(s = f.i64(pj, ppath, "file", 0, INT32_MAX, fileIndex)).ok() ||
          !(s = f.str(pj, ppath, "tensor", p.tensor)).ok() ||
          !(s = f.i64(pj, ppath, "offset", 0, total, p.offset)).ok() ||
          !(s = f.i64(pj, ppath, "numel", 0, total - p.offset, p.numel)).ok())
        return s;
      if (fileIndex >= static_cast<int64_t>(m.files.size()))
        return f.error(ppath + ".file",
                       "is " + std::to_string(fileIndex) + ", but there are " +
                           std::to_string(m.files.size()) + " files");
      p.file = static_cast<int>(fileIndex);
      owners.push_back(m.files[p.file].name);
      t.pieces.push_back(std::move(p));
    }
    s = checkTiling(t, what, owners);
    if (!s.ok())
      return s;
    m.tensors.push_back(std::move(t));
  }
  std::sort(m.tensors.begin(), m.tensors.end(),
            [](const CheckpointTensor &a, const CheckpointTensor &b) {
              return a.name < b.name;
            });
  for (size_t i = 1; i < m.tensors.size(); ++i)
    if (m.tensors[i].name == m.tensors[i - 1].name)
      return f.error("tensors", "list '" + m.tensors[i].name + "' twice");
  out = std::move(m);
  return Status();
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

std::string checkpointStepDir(const std::string &root, int64_t step) {
  return joinPath(root, "step_" + std::to_string(step));
}

std::string checkpointTempDir(const std::string &root, int64_t step) {
  return checkpointStepDir(root, step) + ".tmp";
}

Status writeCheckpointShard(const std::string &tmpDir, int rank,
                            const std::vector<ShardTensor> &tensors) {
  std::string call = "write_checkpoint_shard(" + tmpDir + ", rank " +
                     std::to_string(rank) + ")";
  auto invalid = [&](const std::string &why) {
    return Status::error(StatusCode::InvalidArgument, call + ": " + why);
  };
  if (rank < 0)
    return invalid("negative rank");
  Sidecar sc;
  sc.rank = rank;
  sc.file.name = rankFileName(rank);
  sc.file.rank = rank;
  std::vector<NamedTensor> named;
  for (const ShardTensor &t : tensors) {
    std::string what = "tensor '" + t.name + "'";
    int64_t total = 0;
    if (t.name.empty())
      return invalid("a tensor without a name");
    if (t.shape.size() > static_cast<size_t>(kMaxRank))
      return invalid(what + ": rank above 8");
    if (!checkedNumel(t.shape, total))
      return invalid(what + ": shape " + describe(I64s(t.shape)) +
                     " is negative or too large");
    if (t.offset < 0 || t.numel < 0 || t.offset > total ||
        t.numel > total - t.offset)
      return invalid(what + ": elements [" + std::to_string(t.offset) + ", +" +
                     std::to_string(t.numel) + ") outside its " +
                     std::to_string(total) + " elements");
    if (t.numel > 0 && !t.data)
      return invalid(what + ": no data");
    if (t.numel == 0 && total > 0)
      continue; // an empty piece holds nothing
    SidecarPiece p;
    p.name = t.name;
    p.dtype = t.dtype;
    p.shape = t.shape;
    p.offset = t.offset;
    p.numel = t.numel;
    bool whole = t.offset == 0 && t.numel == total;
    p.tensor = whole ? t.name : t.name + "@" + std::to_string(t.offset);
    void *data = const_cast<void *>(t.data); // only read
    named.push_back({p.tensor, whole ? Tensor::of(data, t.dtype, t.shape)
                                     : Tensor::of(data, t.dtype, {t.numel})});
    sc.pieces.push_back(std::move(p));
  }
  Status s = makeDirs(tmpDir);
  if (!s.ok())
    return ioError(call + ": " + s.message());
  std::string file = joinPath(tmpDir, sc.file.name);
  s = writeSafetensors(file, named,
                       {{"format", kFormat}, {"rank", std::to_string(rank)}});
  if (s.ok())
    s = fileSize(file, sc.file.bytes);
  if (s.ok())
    s = sha256File(file, sc.file.sha256);
  // The sidecar comes second: its presence says the file is complete.
  if (s.ok())
    s = writeTextAtomically(joinPath(tmpDir, sidecarName(rank)),
                            sidecarToJson(sc));
  if (!s.ok())
    return Status::error(s.code(), call + ": " + s.message());
  return Status();
}

namespace {

/// Renames `from` to `to`; an existing `to` (the same step saved twice) is
/// moved aside first and removed once the new one is in place.
Status publishDir(const std::string &from, const std::string &to) {
  if (!exists(to)) {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return ioError("rename(" + from + ", " + to + "): " + errnoText());
    return Status();
  }
  std::string old = to + ".old";
  Status s = removeTree(old);
  if (!s.ok())
    return s;
  if (::rename(to.c_str(), old.c_str()) != 0)
    return ioError("rename(" + to + ", " + old + "): " + errnoText());
  if (::rename(from.c_str(), to.c_str()) != 0) {
    int e = errno;
    (void)::rename(old.c_str(), to.c_str()); // put the old one back
    return ioError("rename(" + from + ", " + to + "): " + errnoText(e));
  }
  if (!(s = fsyncDir(parentOf(to))).ok())
    return s;
  return removeTree(old);
}

/// Removes every `step_<N>` of `root` but the `keepLast` newest by number;
/// `current` is kept whatever its number and counts as one of them.
Status pruneSteps(const std::string &root, const std::string &current,
                  int keepLast) {
  if (keepLast <= 0)
    return Status();
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const std::string &name : listDir(root)) {
    int64_t step;
    if (name != current && parseStepName(name, step) &&
        isDirectory(joinPath(root, name)))
      steps.emplace_back(step, name);
  }
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = static_cast<size_t>(keepLast - 1); i < steps.size(); ++i) {
    Status s = removeTree(joinPath(root, steps[i].second));
    if (!s.ok())
      return s;
  }
  return Status();
}

} // namespace

Status commitCheckpoint(const std::string &root, const std::string &tmpDir,
                        const std::string &finalDir, int numRanks,
                        const CheckpointManifest &base, double timeoutSeconds,
                        int keepLast) {
  std::string call = "commit_checkpoint(" + tmpDir + ")";
  auto fail = [&](const std::string &why) {
    return ioError(call + ": " + why);
  };
  if (numRanks < 1)
    return Status::error(StatusCode::InvalidArgument,
                         call + ": needs at least one rank");

  // 1. Wait for every rank's sidecar.
  using Clock = std::chrono::steady_clock;
  auto deadline =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
          std::max(0.0, std::min(timeoutSeconds, 1e9))));
  std::vector<int> missing;
  while (true) {
    missing.clear();
    for (int r = 0; r < numRanks; ++r)
      if (!exists(joinPath(tmpDir, sidecarName(r))))
        missing.push_back(r);
    if (missing.empty() || Clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!missing.empty()) {
    std::string ranks;
    for (size_t i = 0; i < missing.size() && i < 16; ++i)
      ranks += (i ? ", " : "") + std::to_string(missing[i]);
    if (missing.size() > 16)
      ranks += ", ...";
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", timeoutSeconds);
    return fail("rank" + std::string(missing.size() > 1 ? "s " : " ") + ranks +
                " (of " + std::to_string(numRanks) +
                ") wrote no checkpoint within " + secs +
                " s; did it fail or is it still saving?");
  }

  // 2. Read them and merge the pieces of every logical tensor.
  CheckpointManifest m = base;
  m.files.clear();
  m.tensors.clear();
  if (m.configJson.empty())
    m.configJson = "{}";
  std::map<std::string, CheckpointTensor> merged;
  std::map<std::string, std::vector<std::string>> owners;
  std::map<std::string, int> firstRank;
  for (int r = 0; r < numRanks; ++r) {
    std::string path = joinPath(tmpDir, sidecarName(r));
    std::string text;
    Sidecar sc;
    Status s = readText(path, text);
    if (s.ok())
      s = sidecarFromJson(text, path, sc);
    if (!s.ok())
      return fail(s.message());
    if (sc.rank != r || sc.file.name != rankFileName(r))
      return fail(path + ": describes rank " + std::to_string(sc.rank) + " (" +
                  sc.file.name + "), not rank " + std::to_string(r));
    uint64_t bytes = 0;
    if (!(s = fileSize(joinPath(tmpDir, sc.file.name), bytes)).ok())
      return fail(s.message());
    if (bytes != sc.file.bytes)
      return fail(sc.file.name + " has " + std::to_string(bytes) +
                  " bytes, its sidecar says " + std::to_string(sc.file.bytes));
    int fileIndex = static_cast<int>(m.files.size());
    m.files.push_back(sc.file);
    for (SidecarPiece &p : sc.pieces) {
      auto it = merged.find(p.name);
      if (it == merged.end()) {
        CheckpointTensor t;
        t.name = p.name;
        t.dtype = p.dtype;
        t.shape = p.shape;
        it = merged.emplace(p.name, std::move(t)).first;
        firstRank[p.name] = r;
      } else if (it->second.dtype != p.dtype || it->second.shape != p.shape) {
        return fail("tensor '" + p.name + "' is " +
                    shapeText(it->second.dtype, it->second.shape) +
                    " on rank " + std::to_string(firstRank[p.name]) + " but " +
                    shapeText(p.dtype, p.shape) + " on rank " +
                    std::to_string(r));
      }
      CheckpointPiece piece;
      piece.file = fileIndex;
      piece.tensor = p.tensor;
      piece.offset = p.offset;
      piece.numel = p.numel;
      it->second.pieces.push_back(std::move(piece));
      owners[p.name].push_back("rank " + std::to_string(r));
    }
  }
  for (auto &[name, t] : merged) {
    Status s = checkTiling(t, call, owners[name]);
    if (!s.ok())
      return s;
    m.tensors.push_back(std::move(t));
  }

  // 3. The manifest, then the step under its name, then `latest`.
  Status s =
      writeTextAtomically(joinPath(tmpDir, "manifest.json"), manifestToJson(m));
  for (int r = 0; s.ok() && r < numRanks; ++r)
    if (::unlink(joinPath(tmpDir, sidecarName(r)).c_str()) != 0)
      s = ioError("unlink(" + joinPath(tmpDir, sidecarName(r)) +
                  "): " + errnoText());
  if (s.ok())
    s = fsyncDir(tmpDir);
  if (s.ok())
    s = makeDirs(parentOf(finalDir));
  if (s.ok())
    s = publishDir(tmpDir, finalDir);
  if (s.ok())
    s = fsyncDir(parentOf(finalDir));
  if (s.ok())
    s = makeDirs(root);
  if (s.ok())
    s = writeTextAtomically(joinPath(root, "latest"),
                            baseName(finalDir) + "\n");
  if (!s.ok())
    return fail(s.message());
  s = pruneSteps(root, baseName(finalDir), keepLast);
  if (!s.ok())
    return fail(baseName(finalDir) +
                " is saved, but removing older steps failed: " + s.message());
  return Status();
}

std::vector<std::string> removeStaleCheckpoints(const std::string &root) {
  std::vector<std::string> removed;
  for (const std::string &name : listDir(root)) {
    int64_t step;
    bool tmp = endsWith(name, ".tmp"), old = endsWith(name, ".old");
    if ((!tmp && !old) || !parseStepName(name.substr(0, name.size() - 4), step))
      continue;
    std::string path = joinPath(root, name);
    if (!isDirectory(path))
      continue;
    if (old) {
      // A re-save of step N was killed between its two renames (publishDir):
      // step_N.old is the complete previous save of N, and `latest` may name
      // step_N. Put it back unless the new step_N is in place.
      std::string stepDir = joinPath(root, name.substr(0, name.size() - 4));
      if (!exists(stepDir) && exists(joinPath(path, "manifest.json")) &&
          ::rename(path.c_str(), stepDir.c_str()) == 0) {
        removed.push_back(path + " (renamed back to " + stepDir + ")");
        continue;
      }
    }
    if (removeTree(path).ok())
      removed.push_back(path);
  }
  // A `latest` being replaced when the run was killed.
  for (const std::string &stale :
       removeStaleTemporaries(joinPath(root, "latest")))
    removed.push_back(stale);
  if (!removed.empty())
    (void)fsyncDir(root);
  return removed;
}

bool removeCheckpointTemp(const std::string &tmpDir) {
  if (!isDirectory(tmpDir))
    return false;
  bool ok = removeTree(tmpDir).ok();
  if (ok)
    (void)fsyncDir(parentOf(tmpDir));
  return ok;
}

std::vector<std::string> checkpointSteps(const std::string &root) {
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const std::string &name : listDir(root)) {
    int64_t step;
    std::string path = joinPath(root, name);
    if (parseStepName(name, step) && isDirectory(path))
      steps.emplace_back(step, path);
  }
  std::sort(steps.begin(), steps.end());
  std::vector<std::string> out;
  for (auto &entry : steps)
    out.push_back(entry.second);
  return out;
}

std::string describeCheckpoint(const CheckpointReader &reader,
                               bool withTensors) {
  const CheckpointManifest &m = reader.manifest();
  uint64_t bytes = 0;
  for (const CheckpointFile &f : m.files)
    bytes += f.bytes;
  int params = 0, optim = 0, other = 0;
  int64_t paramElems = 0;
  for (const CheckpointTensor &t : m.tensors) {
    if (t.name.compare(0, 6, "param/") == 0) {
      ++params;
      paramElems += t.numel();
    } else if (t.name.compare(0, 6, "optim/") == 0) {
      ++optim;
    } else {
      ++other;
    }
  }
  auto line = [](std::string &out, const char *key, const std::string &v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "  %-13s", key);
    out += buf + v + "\n";
  };
  std::string out = reader.stepDir() + "\n";
  line(out, "step", std::to_string(m.step));
  line(out, "world size",
       std::to_string(m.worldSize) +
           (m.groupSize != m.worldSize
                ? " (shard groups of " + std::to_string(m.groupSize) + ")"
                : ""));
  line(out, "ZeRO stage", std::to_string(m.stage));
  line(out, "precision", m.precision.empty() ? "?" : m.precision);
  line(out, "optimizer", m.optimizer.empty() ? "?" : m.optimizer);
  line(out, "files",
       std::to_string(m.files.size()) + ", " + std::to_string(bytes) +
           " bytes");
  line(out, "model",
       (m.modelPath.empty() ? "?" : m.modelPath) +
           (m.modelSha256.empty()
                ? ""
                : " (sha256 " + m.modelSha256.substr(0, 16) + "...)"));
  line(out, "tensors",
       std::to_string(m.tensors.size()) + ": " + std::to_string(params) +
           " parameters (" + std::to_string(paramElems) + " elements), " +
           std::to_string(optim) + " optimizer state, " +
           std::to_string(other) + " other");
  if (!m.dscVersion.empty())
    line(out, "written by", m.dscVersion);
  if (withTensors)
    for (const CheckpointTensor &t : m.tensors)
      out += "    " + t.name + " " + shapeText(t.dtype, t.shape) + " in " +
             std::to_string(t.pieces.size()) +
             (t.pieces.size() == 1 ? " piece\n" : " pieces\n");
  return out;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

struct CheckpointReader::Files {
  std::vector<std::unique_ptr<SafetensorsFile>> loaded; // by file index
  /// (tensor, piece) indices of the pieces each file holds.
  std::vector<std::vector<std::pair<size_t, size_t>>> uses;
};

CheckpointReader::CheckpointReader() = default;
CheckpointReader::~CheckpointReader() = default;

Status CheckpointReader::open(const std::string &path) {
  files_.reset();
  manifest_ = CheckpointManifest();
  dir_.clear();
  std::string call = "open_checkpoint(" + path + ")";
  std::string dir = trimSlashes(path);
  if (!isDirectory(dir) && !(exists(dir) && isDirectory(dir + "/.")))
    return ioError(call + ": not a directory");
  if (!exists(joinPath(dir, "manifest.json"))) {
    std::string latestPath = joinPath(dir, "latest");
    if (!exists(latestPath))
      return ioError(call + ": neither a checkpoint step (no manifest.json) "
                            "nor a checkpoint root (no latest)");
    std::string text;
    Status s = readText(latestPath, text);
    if (!s.ok())
      return ioError(call + ": " + s.message());
    while (!text.empty() &&
           (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
      text.pop_back();
    int64_t step;
    if (!parseStepName(text, step))
      return ioError(call + ": " + latestPath + " holds '" +
                     text.substr(0, 64) + "', not step_<N>");
    dir = joinPath(dir, text);
    if (!isDirectory(dir))
      return ioError(call + ": " + latestPath + " names " + text +
                     ", which does not exist (removed, or the save did not "
                     "finish)");
    if (!exists(joinPath(dir, "manifest.json")))
      return ioError(call + ": " + dir + " has no manifest.json");
  }
  std::string manifestPath = joinPath(dir, "manifest.json");
  std::string text;
  CheckpointManifest m;
  Status s = readText(manifestPath, text);
  if (s.ok())
    s = manifestFromJson(text, manifestPath, m);
  if (!s.ok())
    return Status::error(s.code(), call + ": " + s.message());
  for (const CheckpointFile &f : m.files) {
    std::string file = joinPath(dir, f.name);
    uint64_t bytes = 0;
    s = fileSize(file, bytes);
    if (!s.ok())
      return ioError(call + ": " + s.message());
    if (bytes != f.bytes) {
      // Name what it holds, so that the message says what is lost.
      std::string held;
      int count = 0, index = int(&f - m.files.data());
      for (const CheckpointTensor &t : m.tensors)
        for (const CheckpointPiece &p : t.pieces)
          if (p.file == index && count++ < 3)
            held += (held.empty() ? "" : ", ") + ("'" + t.name + "'");
      if (count > 3)
        held += " and " + std::to_string(count - 3) + " more";
      return ioError(call + ": " + file + " has " + std::to_string(bytes) +
                     " bytes, the manifest says " + std::to_string(f.bytes) +
                     " (truncated or replaced?)" +
                     (held.empty() ? "" : "; it holds tensor " + held));
    }
  }
  auto files = std::make_unique<Files>();
  files->loaded.resize(m.files.size());
  files->uses.resize(m.files.size());
  for (size_t t = 0; t < m.tensors.size(); ++t)
    for (size_t p = 0; p < m.tensors[t].pieces.size(); ++p)
      files->uses[m.tensors[t].pieces[p].file].emplace_back(t, p);
  dir_ = dir;
  manifest_ = std::move(m);
  files_ = std::move(files);
  return Status();
}

namespace {

/// Loads file `index` of a checkpoint and checks the pieces it holds.
Status loadShard(const std::string &dir, const CheckpointManifest &m,
                 size_t index,
                 const std::vector<std::pair<size_t, size_t>> &uses,
                 std::unique_ptr<SafetensorsFile> &out) {
  std::string path = joinPath(dir, m.files[index].name);
  // A file of the right size whose bytes changed (a bad disk, a torn copy)
  // is refused before any of it is used.
  if (!m.files[index].sha256.empty()) {
    std::string hex;
    Status h = sha256File(path, hex);
    if (!h.ok())
      return h;
    if (hex != m.files[index].sha256)
      return ioError(path + ": sha256 " + hex + ", the manifest says " +
                     m.files[index].sha256 +
                     " (the file is corrupted or changed since it was saved)");
  }
  auto file = std::make_unique<SafetensorsFile>();
  Status s = file->read(path);
  if (!s.ok())
    return s;
  for (auto [ti, pi] : uses) {
    const CheckpointTensor &t = m.tensors[ti];
    const CheckpointPiece &p = t.pieces[pi];
    std::string what = path + ": tensor '" + p.tensor + "' (piece of '" +
                       t.name + "' at " + std::to_string(p.offset) + ")";
    Tensor view;
    if (!file->contains(p.tensor))
      return ioError(what + " is missing");
    s = file->get(p.tensor, view);
    if (!s.ok())
      return s;
    if (view.dtype != t.dtype)
      return ioError(what + " is " + dtypeName(view.dtype) +
                     ", the manifest says " + dtypeName(t.dtype));
    bool flat = view.rank == 1 && view.shape[0] == p.numel;
    bool whole =
        p.offset == 0 && p.numel == t.numel() && view.dims() == t.shape;
    if (!flat && !whole)
      return ioError(what + " is " + describe(view) + ", the manifest says " +
                     std::to_string(p.numel) + " elements of " +
                     shapeText(t.dtype, t.shape));
  }
  out = std::move(file);
  return Status();
}

} // namespace

Status CheckpointReader::readRange(const std::string &name, int64_t offset,
                                   const Tensor &dst) {
  std::string call = "read_checkpoint(" + name + ", offset " +
                     std::to_string(offset) + ", " + describe(dst) + ")";
  auto invalid = [&](StatusCode code, const std::string &why) {
    return Status::error(code, call + ": " + why);
  };
  if (!files_)
    return invalid(StatusCode::InvalidArgument, "no checkpoint is open");
  const CheckpointTensor *t = manifest_.find(name);
  if (!t)
    return invalid(StatusCode::InvalidArgument,
                   "no tensor of that name in " + dir_);
  if (dst.dtype != t->dtype)
    return invalid(StatusCode::InvalidArgument,
                   "the checkpoint holds it as " +
                       shapeText(t->dtype, t->shape));
  if (dst.rank < 0 || dst.rank > kMaxRank)
    return invalid(StatusCode::InvalidArgument, "bad destination rank");
  int64_t n = dst.numel(), total = t->numel();
  if (offset < 0 || n < 0 || offset > total || n > total - offset)
    return invalid(StatusCode::OutOfRange,
                   "outside its " + std::to_string(total) + " elements");
  if (n > 0 && !dst.present())
    return invalid(StatusCode::InvalidArgument, "no destination memory");
  size_t es = dtypeSize(t->dtype);
  for (const CheckpointPiece &p : t->pieces) {
    int64_t lo = std::max(offset, p.offset);
    int64_t hi = std::min(offset + n, p.offset + p.numel);
    if (lo >= hi)
      continue;
    auto &slot = files_->loaded[p.file];
    if (!slot) {
      Status s = loadShard(dir_, manifest_, p.file, files_->uses[p.file], slot);
      if (!s.ok())
        return Status::error(s.code(), call + ": " + s.message());
    }
    Tensor src;
    Status s = slot->get(p.tensor, src);
    if (!s.ok())
      return Status::error(s.code(), call + ": " + s.message());
    std::memcpy(static_cast<char *>(dst.data) + (lo - offset) * es,
                static_cast<const char *>(src.data) + (lo - p.offset) * es,
                static_cast<size_t>(hi - lo) * es);
  }
  return Status();
}

Status CheckpointReader::read(const std::string &name, const Tensor &dst) {
  const CheckpointTensor *t = files_ ? manifest_.find(name) : nullptr;
  if (t && dst.rank >= 0 && dst.rank <= kMaxRank && dst.numel() != t->numel())
    return Status::error(StatusCode::InvalidArgument,
                         "read_checkpoint(" + name + ", " + describe(dst) +
                             "): the checkpoint holds " +
                             shapeText(t->dtype, t->shape));
  return readRange(name, 0, dst);
}

Status CheckpointReader::verify(std::vector<std::string> &problems) const {
  problems.clear();
  if (!files_)
    return Status::error(StatusCode::InvalidArgument,
                         "verify_checkpoint: no checkpoint is open");
  for (const CheckpointFile &f : manifest_.files) {
    std::string path = joinPath(dir_, f.name);
    uint64_t bytes = 0;
    Status s = fileSize(path, bytes);
    if (!s.ok()) {
      problems.push_back(s.message());
      continue;
    }
    if (bytes != f.bytes) {
      problems.push_back(path + ": " + std::to_string(bytes) +
                         " bytes, the manifest says " +
                         std::to_string(f.bytes));
      continue;
    }
    std::string hex;
    s = sha256File(path, hex);
    if (!s.ok())
      problems.push_back(s.message());
    else if (hex != f.sha256)
      problems.push_back(path + ": sha256 " + hex + ", the manifest says " +
                         f.sha256 + " (the file changed since it was saved)");
  }
  return Status();
}

} // namespace dsc::io
