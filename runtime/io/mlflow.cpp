//===- mlflow.cpp - An MLflow file store ----------------------------------===//
//
// The layout of mlflow/store/tracking/file_store.py (FileStore):
//
//   DIR/.trash/                       deleted experiments
//   DIR/0/meta.yaml                   the Default experiment
//   DIR/<experiment id>/meta.yaml     artifact_location, creation_time,
//                                     experiment_id, last_update_time,
//                                     lifecycle_stage, name
//   DIR/<experiment id>/<run id>/meta.yaml   the run (status 1 RUNNING,
//                                     3 FINISHED, 4 FAILED; source_type 4
//                                     LOCAL; times in ms since the epoch)
//                            metrics/<key>   "<ms> <value> <step>" lines
//                            params/<key>    the value
//                            tags/<key>      the value (mlflow.runName, ...)
//                            artifacts/
//
// A key with '/' is a path below its folder, as MLflow stores it. MLflow's
// FileStore creates the Default experiment when it creates the root; so do
// we, when neither DIR/0 nor DIR/.trash/0 is there (mlflow.start_run()
// without an experiment logs into it). An experiment of the name asked for
// is reused; else one is created with an 18-digit random id, as MLflow's
// _generate_unique_integer_id does. Every YAML file is replaced atomically.
//
//===----------------------------------------------------------------------===//

#include "io/metrics.h"
#include "io/metrics_internal.h"
#include "io/output_file.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <map>
#include <pwd.h>
#include <random>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace dsc::io {

namespace detail {

std::string mlflowKey(const std::string &key) {
  // MLflow accepts [/\w.\- :] (POSIX) and refuses a name that normalizes
  // to another path; anything else becomes '_'.
  std::string clean;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' ||
              c == ' ' || c == ':' || c == '/';
    clean += ok ? c : '_';
  }
  std::string out;
  std::stringstream parts(clean);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty())
      continue;
    if (part == "." || part == "..")
      part = std::string(part.size(), '_');
    out += (out.empty() ? "" : "/") + part;
  }
  if (out.size() > 250) // MAX_ENTITY_KEY_LENGTH
    out.resize(250);
  while (!out.empty() && out.back() == '/')
    out.pop_back();
  return out.empty() ? "_" : out;
}

std::string yamlString(const std::string &s) {
  // Plain where YAML reads it back as this very string, as PyYAML writes
  // such values; else quoted.
  static const char *kSpecial[] = {"y",   "n",    "yes",   "no",   "on",
                                   "off", "true", "false", "null", "~"};
  bool plain = !s.empty() &&
               ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') ||
                s[0] == '_' || s[0] == '/');
  bool printable = true;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      printable = false;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' ||
          c == '/' || c == ':'))
      plain = false;
  }
  if (plain) {
    std::string lower;
    for (char c : s)
      lower += char(std::tolower(static_cast<unsigned char>(c)));
    for (const char *k : kSpecial)
      if (lower == k)
        plain = false;
  }
  if (plain)
    return s;
  if (printable) {
    std::string out = "'";
    for (char c : s)
      out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  }
  static const char kHex[] = "0123456789ABCDEF";
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (u < 0x20 || u == 0x7f)
      out += std::string("\\x") + kHex[u >> 4] + kHex[u & 15];
    else
      out += c;
  }
  return out + "\"";
}

/// The value of `key: value` in a meta.yaml as MLflow (PyYAML) writes it:
/// plain, 'single-quoted' or "double-quoted" (common escapes), a quoted one
/// folded over several lines. Empty when the key is missing.
std::string yamlValue(const std::string &text, const std::string &key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") != 0)
      continue;
    std::string v = line.substr(key.size() + 1);
    size_t start = v.find_first_not_of(' ');
    v = start == std::string::npos ? "" : v.substr(start);
    if (v.empty() || (v[0] != '\'' && v[0] != '"'))
      return v;
    char q = v[0];
    // A quoted scalar may continue on the next lines; a line break inside
    // it reads as a space.
    auto closed = [&](const std::string &s) {
      for (size_t i = 1; i < s.size(); ++i) {
        if (q == '"' && s[i] == '\\') {
          ++i;
          continue;
        }
        if (s[i] == q) {
          if (q == '\'' && i + 1 < s.size() && s[i + 1] == '\'') {
            ++i;
            continue;
          }
          return true;
        }
      }
      return false;
    };
    std::string more;
    while (!closed(v) && std::getline(in, more)) {
      size_t s = more.find_first_not_of(' ');
      v += " " + (s == std::string::npos ? "" : more.substr(s));
    }
    std::string out;
    for (size_t i = 1; i < v.size(); ++i) {
      char c = v[i];
      if (c == q) {
        if (q == '\'' && i + 1 < v.size() && v[i + 1] == '\'') {
          out += '\'';
          ++i;
          continue;
        }
        break;
      }
      if (q == '"' && c == '\\' && i + 1 < v.size()) {
        char e = v[++i];
        switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'x':
          if (i + 2 < v.size()) {
            out += char(std::strtol(v.substr(i + 1, 2).c_str(), nullptr, 16));
            i += 2;
          }
          break;
        default:
          out += e;
        }
        continue;
      }
      out += c;
    }
    return out;
  }
  return "";
}

} // namespace detail

namespace {

using namespace detail;

constexpr const char *kWho = "mlflow";
constexpr int kRunning = 1, kFinished = 3, kFailed = 4; // RunStatus
constexpr int kSourceLocal = 4;                         // SourceType.LOCAL

bool isDir(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool readFile(const std::string &path, std::string &text) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  return true;
}

std::vector<std::string> subfolders(const std::string &dir) {
  std::vector<std::string> names;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return names;
  while (const dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name[0] != '.' && isDir(dir + "/" + name))
      names.push_back(name);
  }
  ::closedir(d);
  return names;
}

std::string userName() {
  for (const char *var : {"LOGNAME", "USER", "LNAME", "USERNAME"})
    if (const char *v = std::getenv(var); v && *v)
      return v;
  if (const passwd *pw = ::getpwuid(::geteuid()); pw && pw->pw_name)
    return pw->pw_name;
  return "unknown";
}

/// MLflow's experiment id: 18 decimal digits, the first not 0.
std::string newExperimentId() {
  std::random_device rd;
  std::string id(1, char('1' + rd() % 9));
  while (id.size() < 18)
    id += char('0' + rd() % 10);
  return id;
}

std::string fileUri(const std::string &absPath) { return "file://" + absPath; }

class MlflowSink : public MetricsSink {
public:
  Status open(const std::string &dir, const RunInfo &info) {
    root_ = absolutePath(dir);
    if (Status st = makeDirectories(kWho, root_); !st.ok())
      return st;
    if (Status st = makeDirectories(kWho, root_ + "/.trash"); !st.ok())
      return st;
    if (!isDir(root_ + "/0") && !isDir(root_ + "/.trash/0"))
      if (Status st = createExperiment("Default", "0"); !st.ok())
        return st;
    std::string name = info.experiment.empty() ? "Default" : info.experiment;
    if (Status st = findOrCreateExperiment(name); !st.ok())
      return st;

    runId_ = randomHex(32);
    runName_ =
        info.runName.empty() ? "dsc-" + runId_.substr(0, 8) : info.runName;
    userId_ = userName();
    startTime_ = nowMillis();
    std::string runDir = root_ + "/" + experimentId_ + "/" + runId_;
    if (::mkdir(runDir.c_str(), 0777) != 0)
      return Status::error(StatusCode::IoError,
                           std::string(kWho) + ": cannot create directory '" +
                               runDir + "': " + errnoText(errno));
    runDir_ = runDir; // from here on, the run exists and is ended by close()
    for (const char *sub : {"metrics", "params", "tags", "artifacts"})
      if (Status st = makeDirectories(kWho, runDir_ + "/" + sub); !st.ok())
        return st;
    if (Status st = writeRunMeta(kRunning, -1); !st.ok())
      return st;

    std::map<std::string, std::string> tags = info.tags;
    tags["mlflow.runName"] = runName_;
    tags.emplace("mlflow.user", userId_);
    tags.emplace("mlflow.source.type", "LOCAL");
    for (const auto &[key, value] : tags)
      if (Status st = writeValue("tags", key, value); !st.ok())
        return st;
    for (const auto &[key, value] : info.params)
      if (Status st = writeValue("params", key, value); !st.ok())
        return st;
    return Status();
  }

  Status scalar(const std::string &tag, double value, int64_t step,
                double wallTime) override {
    if (closed_)
      return Status::error(StatusCode::InvalidArgument,
                           std::string(kWho) + ": scalar '" + tag +
                               "' after the run ended");
    std::string key = mlflowKey(tag);
    auto it = metrics_.find(key);
    if (it == metrics_.end()) {
      std::string path = runDir_ + "/metrics/" + key;
      size_t slash = path.rfind('/');
      if (Status st = makeDirectories(kWho, path.substr(0, slash)); !st.ok())
        return st;
      AppendFile &file = metrics_[key];
      if (Status st = file.open(kWho, path); !st.ok()) {
        metrics_.erase(key);
        return st;
      }
      it = metrics_.find(key);
    }
    auto ms = static_cast<int64_t>(std::llround(wallTime * 1000.0));
    return it->second.append(std::to_string(ms) + " " + formatNumber(value) +
                             " " + std::to_string(step) + "\n");
  }

  Status flush() override {
    for (auto &[key, file] : metrics_)
      if (Status st = file.sync(); !st.ok())
        return st;
    return Status();
  }

  Status close(bool ok) override {
    if (closed_)
      return Status();
    closed_ = true;
    Status st = flush();
    metrics_.clear();
    Status meta = writeRunMeta(ok ? kFinished : kFailed, nowMillis());
    return st.ok() ? meta : st;
  }

  /// A run dropped without close() did not end well.
  ~MlflowSink() override {
    if (!runDir_.empty())
      (void)close(false);
  }

private:
  Status createExperiment(const std::string &name, const std::string &id) {
    std::string path = root_ + "/" + id;
    if (::mkdir(path.c_str(), 0777) != 0)
      return Status::error(StatusCode::IoError,
                           std::string(kWho) + ": cannot create directory '" +
                               path + "': " + errnoText(errno));
    int64_t now = nowMillis();
    std::string yaml = "artifact_location: " + yamlString(fileUri(path)) +
                       "\n"
                       "creation_time: " +
                       std::to_string(now) + "\nexperiment_id: '" + id +
                       "'\n"
                       "last_update_time: " +
                       std::to_string(now) +
                       "\n"
                       "lifecycle_stage: active\n"
                       "name: " +
                       yamlString(name) + "\n";
    return writeFileAtomically(kWho, path + "/meta.yaml", yaml);
  }

  Status findOrCreateExperiment(const std::string &name) {
    for (const char *parent : {"", "/.trash"}) {
      std::string base = root_ + parent;
      for (const std::string &id : subfolders(base)) {
        std::string meta;
        if (!readFile(base + "/" + id + "/meta.yaml", meta) ||
            yamlValue(meta, "name") != name ||
            yamlValue(meta, "experiment_id") != id)
          continue;
        if (*parent || yamlValue(meta, "lifecycle_stage") != "active")
          return Status::error(
              StatusCode::InvalidArgument,
              std::string(kWho) + ": experiment '" + name + "' in " + root_ +
                  " is deleted (" + base + "/" + id +
                  "); restore it or remove it from .trash to log into it");
        experimentId_ = id;
        return Status();
      }
    }
    for (int attempt = 0;; ++attempt) {
      std::string id = newExperimentId();
      if (isDir(root_ + "/" + id) || isDir(root_ + "/.trash/" + id))
        continue;
      Status st = createExperiment(name, id);
      if (st.ok() || attempt == 9) {
        experimentId_ = id;
        return st;
      }
    }
  }

  Status writeRunMeta(int status, int64_t endTime) {
    std::string exp = "'" + experimentId_ + "'";
    std::string yaml =
        "artifact_uri: " + yamlString(fileUri(runDir_ + "/artifacts")) +
        "\nend_time: " + (endTime < 0 ? "null" : std::to_string(endTime)) +
        "\nentry_point_name: ''\nexperiment_id: " + exp +
        "\nlifecycle_stage: active\nrun_id: " + runId_ +
        "\nrun_name: " + yamlString(runName_) + "\nrun_uuid: " + runId_ +
        "\nsource_name: ''\nsource_type: " + std::to_string(kSourceLocal) +
        "\nsource_version: ''\nstart_time: " + std::to_string(startTime_) +
        "\nstatus: " + std::to_string(status) +
        "\ntags: []\nuser_id: " + yamlString(userId_) + "\n";
    return writeFileAtomically(kWho, runDir_ + "/meta.yaml", yaml);
  }

  Status writeValue(const char *folder, const std::string &key,
                    const std::string &value) {
    std::string path = runDir_ + "/" + folder + "/" + mlflowKey(key);
    size_t slash = path.rfind('/');
    if (Status st = makeDirectories(kWho, path.substr(0, slash)); !st.ok())
      return st;
    return writeFileAtomically(kWho, path, value);
  }

  std::string root_, experimentId_, runId_, runName_, userId_, runDir_;
  int64_t startTime_ = 0;
  std::map<std::string, AppendFile> metrics_;
  bool closed_ = false;
};

} // namespace

Status openMlflow(const std::string &dir, const RunInfo &info,
                  std::unique_ptr<MetricsSink> &out) {
  auto sink = std::make_unique<MlflowSink>();
  if (Status st = sink->open(dir, info); !st.ok())
    return st;
  out = std::move(sink);
  return Status();
}

} // namespace dsc::io
