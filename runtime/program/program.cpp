//===- program.cpp - runProgram: the shell around a compiled step ---------===//
//
// What a user of a compiled program touches: options, initial weights,
// batches, the step loop with its progress line, metrics and dumps.
//
//   1. check the spec (a malformed one is a code-generation bug, reported
//      as an error, never a crash), parse argv
//   2. allocate every argument and result; Param, OptState and Buffer
//      results are double-buffered with their argument (swapped after a
//      step, never copied)
//   3. initialize parameters and buffers (--init), set hyperparameters
//   4. open the data (--batch or --data)
//   5. run the steps: sample, set Step/Seed, call the step, report
//   6. dump what was asked for
//
// Every failure is one `error: ...` line on stderr and exit code 1.
//
//===----------------------------------------------------------------------===//

#include "dsc/program.h"
#include "comm/inprocess.h"
#include "cpu/kernel_util.h"
#include "io/output_file.h"
#include "io/safetensors.h"
#include "program/convert.h"
#include "program/data.h"
#include "program/launch.h"
#include "program/onnx_weights.h"
#include "program/rng.h"
#include "program/run.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <thread>
#include <unistd.h>

namespace dsc {

int runProgram(const ProgramSpec &spec, int argc, char **argv) {
  // Past a file size limit (ulimit -f) a write then fails with EFBIG, which
  // is reported with the file's name, instead of killing the run unnamed.
  std::signal(SIGXFSZ, SIG_IGN);
  return program::run(spec, argc, argv, stdout, stderr);
}

namespace program {

namespace {

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

Status fail(const std::string &message) {
  return Status::error(StatusCode::InvalidArgument, message);
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string format(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string humanBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4)
    bytes /= 1024, ++u;
  return u == 0 ? format("%.0f B", bytes) : format("%.1f %s", bytes, units[u]);
}

std::string humanCount(double n) {
  if (n >= 1e9)
    return format("%.2fB", n / 1e9);
  if (n >= 1e6)
    return format("%.2fM", n / 1e6);
  if (n >= 1e3)
    return format("%.1fK", n / 1e3);
  return format("%.0f", n);
}

/// A JSON number, or null for inf/nan (JSON has neither).
std::string jsonNumber(double v) {
  return std::isfinite(v) ? format("%.9g", v) : "null";
}

std::string optionName(const std::string &hyper) {
  std::string s = hyper;
  std::replace(s.begin(), s.end(), '_', '-');
  return "--" + s;
}

int64_t numelOf(const TensorSpec &t) {
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i)
    n *= t.shape[i];
  return n;
}

std::string describeSpec(const TensorSpec &t) {
  return describeType(t.dtype, t.shape, t.rank);
}

const char *argRoleName(ArgRole r) {
  switch (r) {
  case ArgRole::Param:
    return "parameter";
  case ArgRole::OptState:
    return "optimizer state";
  case ArgRole::Buffer:
    return "buffer";
  case ArgRole::Input:
    return "input";
  case ArgRole::Hyper:
    return "hyperparameter";
  case ArgRole::Step:
    return "step";
  case ArgRole::Seed:
    return "seed";
  case ArgRole::Scaler:
    return "loss scaler state";
  }
  return "argument";
}

const char *resultRoleName(ResultRole r) {
  switch (r) {
  case ResultRole::Loss:
    return "loss";
  case ResultRole::Param:
    return "parameter";
  case ResultRole::OptState:
    return "optimizer state";
  case ResultRole::BufferUpdate:
    return "buffer update";
  case ResultRole::Grad:
    return "gradient";
  case ResultRole::GradNorm:
    return "gradient norm";
  case ResultRole::Lr:
    return "learning rate";
  case ResultRole::Scaler:
    return "loss scaler state";
  case ResultRole::Overflow:
    return "overflow flag";
  }
  return "result";
}

bool sameType(const TensorSpec &a, const TensorSpec &b) {
  if (a.dtype != b.dtype || a.rank != b.rank)
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i])
      return false;
  return true;
}

/// Storage for one tensor: 64-byte aligned, zero-filled, never empty (a
/// zero-element tensor still gets a non-null pointer).
struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
using Memory = std::unique_ptr<void, FreeDeleter>;

Status allocateTensor(const TensorSpec &type, const std::string &what,
                      Memory &mem, Tensor &out) {
  size_t bytes = static_cast<size_t>(numelOf(type)) * dtypeSize(type.dtype);
  size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void *p = std::aligned_alloc(64, rounded);
  if (!p)
    return Status::error(StatusCode::OutOfMemory,
                         "cannot allocate " + humanBytes(double(rounded)) +
                             " for " + what + " " + describeSpec(type));
  std::memset(p, 0, rounded);
  mem.reset(p);
  out = Tensor::of(p, type.dtype, I64s(type.shape, size_t(type.rank)));
  return Status();
}

//===----------------------------------------------------------------------===//
// 1. The spec
//===----------------------------------------------------------------------===//

/// The indices the loop needs, found once.
struct Layout {
  int loss = -1, gradNorm = -1, lr = -1;
  int overflow = -1;                   // fp16: the skipped-step flag
  int lossScale = -1, hysteresis = -1; // fp16: Scaler args
  std::vector<int> scalerResults;      // fp16: Scaler results
  int lossScaleResult = -1, hysteresisResult = -1;
  std::vector<std::pair<int, int>> updates; // (result, arg) double-buffered
  std::vector<int> grads;                   // Grad results
  std::vector<int> inputs, params, buffers, optStates; // args
  int worldSize = 1, groupSize = 1;
};

Status checkSpec(const ProgramSpec &spec, Layout &layout) {
  auto bug = [](const std::string &why) {
    return fail("program spec: " + why +
                " (the generated code is inconsistent; please report it as "
                "a dsc bug)");
  };
  if (!spec.trainStep)
    return bug("no train step function");
  if (spec.numArgs < 0 || (spec.numArgs > 0 && !spec.args) ||
      spec.numResults < 0 || (spec.numResults > 0 && !spec.results) ||
      spec.numHypers < 0 || (spec.numHypers > 0 && !spec.hypers))
    return bug("argument, result or hyperparameter lists are missing");
  if (spec.microBatch < 1 || spec.accumSteps < 1 || spec.tokensPerExample < 1)
    return bug("microBatch, accumSteps and tokensPerExample must be >= 1");
  if (!spec.optimizer)
    return bug("no optimizer name");
  auto checkType = [&](const TensorSpec &t, const std::string &what) {
    if (t.rank < 0 || t.rank > kMaxRank)
      return bug(what + " has rank " + std::to_string(t.rank));
    int64_t n = 1;
    for (int i = 0; i < t.rank; ++i) {
      if (t.shape[i] < 0)
        return bug(what + " has a negative dim");
      if (t.shape[i] && n > (int64_t(1) << 50) / t.shape[i])
        return bug(what + " is too large");
      n *= t.shape[i];
    }
    return Status();
  };
  std::map<std::pair<int, std::string>, int> argIndex; // (role, name)
  std::set<std::string> onnxNames;                     // params/buffers/inputs
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    if (!a.name)
      return bug("argument " + std::to_string(i) + " has no name");
    std::string what = std::string(argRoleName(a.role)) + " '" + a.name + "'";
    if (Status s = checkType(a.type, what); !s.ok())
      return s;
    if (!argIndex.emplace(std::make_pair(int(a.role), a.name), i).second)
      return bug(what + " appears twice");
    switch (a.role) {
    case ArgRole::Param:
    case ArgRole::Buffer:
    case ArgRole::Input:
      if (!onnxNames.insert(a.name).second)
        return bug("the name '" + std::string(a.name) +
                   "' is given to two arguments");
      (a.role == ArgRole::Param    ? layout.params
       : a.role == ArgRole::Buffer ? layout.buffers
                                   : layout.inputs)
          .push_back(i);
      break;
    case ArgRole::OptState:
      layout.optStates.push_back(i);
      break;
    case ArgRole::Scaler:
      if (!spec.lossScaler.enabled)
        return bug(what + " without a loss scaler");
      if (numelOf(a.type) != 1)
        return bug(what + " must be a scalar, not " + describeSpec(a.type));
      if (std::strcmp(a.name, "loss_scale") == 0)
        layout.lossScale = i;
      else if (std::strcmp(a.name, "hysteresis") == 0)
        layout.hysteresis = i;
      else if (std::strcmp(a.name, "good_steps") != 0 &&
               std::strcmp(a.name, "applied_steps") != 0)
        return bug(what + " is not a state of the loss scaler");
      break;
    case ArgRole::Hyper:
    case ArgRole::Step:
    case ArgRole::Seed:
      if (numelOf(a.type) != 1)
        return bug(what + " must be a scalar, not " + describeSpec(a.type));
      if (a.role == ArgRole::Hyper && !isFloat(a.type.dtype))
        return bug(what + " must be a float, not " + describeSpec(a.type));
      if (a.role != ArgRole::Hyper &&
          (isFloat(a.type.dtype) || a.type.dtype == DType::Bool))
        return bug(what + " must be an integer, not " + describeSpec(a.type));
      break;
    }
  }
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    if (a.role != ArgRole::Hyper)
      continue;
    bool found = false;
    for (int h = 0; h < spec.numHypers; ++h)
      found = found || (spec.hypers[h].name &&
                        std::strcmp(spec.hypers[h].name, a.name) == 0);
    if (!found)
      return bug("hyperparameter '" + std::string(a.name) + "' has no default");
  }
  for (int h = 0; h < spec.numHypers; ++h)
    if (!spec.hypers[h].name || !*spec.hypers[h].name)
      return bug("hyperparameter default " + std::to_string(h) +
                 " has no name");
  for (int i = 0; i < spec.numResults; ++i) {
    const ResultSpec &r = spec.results[i];
    if (!r.name)
      return bug("result " + std::to_string(i) + " has no name");
    std::string what =
        std::string(resultRoleName(r.role)) + " result '" + r.name + "'";
    if (Status s = checkType(r.type, what); !s.ok())
      return s;
    auto scalar = [&](int &slot) {
      if (slot >= 0)
        return bug("two " + std::string(resultRoleName(r.role)) + " results");
      if (numelOf(r.type) != 1 || !isFloat(r.type.dtype))
        return bug(what + " must be a float scalar, not " +
                   describeSpec(r.type));
      slot = i;
      return Status();
    };
    auto argOf = [&](ArgRole role) -> int {
      auto it = argIndex.find({int(role), r.name});
      return it == argIndex.end() ? -1 : it->second;
    };
    Status s;
    int arg = -1;
    switch (r.role) {
    case ResultRole::Loss:
      // The first is the loss; further graph outputs are not reported.
      if (layout.loss < 0)
        s = scalar(layout.loss);
      break;
    case ResultRole::GradNorm:
      s = scalar(layout.gradNorm);
      break;
    case ResultRole::Lr:
      s = scalar(layout.lr);
      break;
    case ResultRole::Overflow:
      s = scalar(layout.overflow);
      break;
    case ResultRole::Grad:
      if (r.bucket < 0 && argOf(ArgRole::Param) < 0)
        return bug(what + " has no parameter of that name");
      layout.grads.push_back(i);
      break;
    case ResultRole::Param:
    case ResultRole::OptState:
    case ResultRole::BufferUpdate:
    case ResultRole::Scaler:
      if (r.role == ResultRole::Scaler) {
        layout.scalerResults.push_back(i);
        if (std::strcmp(r.name, "loss_scale") == 0)
          layout.lossScaleResult = i;
        else if (std::strcmp(r.name, "hysteresis") == 0)
          layout.hysteresisResult = i;
      }
      arg = argOf(r.role == ResultRole::Param      ? ArgRole::Param
                  : r.role == ResultRole::OptState ? ArgRole::OptState
                  : r.role == ResultRole::Scaler   ? ArgRole::Scaler
                                                   : ArgRole::Buffer);
      if (arg < 0)
        return bug(what + " has no argument of that name");
      if (!sameType(r.type, spec.args[arg].type))
        return bug(what + " is " + describeSpec(r.type) +
                   " but its argument is " + describeSpec(spec.args[arg].type));
      for (auto &u : layout.updates)
        if (u.second == arg)
          return bug(what + " is returned twice");
      layout.updates.push_back({i, arg});
      break;
    }
    if (!s.ok())
      return s;
  }
  if (layout.loss < 0)
    return bug("no loss result");
  if (spec.lossScaler.enabled &&
      (layout.overflow < 0 ||
       (spec.lossScaler.dynamic && layout.lossScale < 0)))
    return bug("a loss scaler without its overflow flag or scale");

  // Sharding: the grid, the buckets, the shards, the manifest.
  int64_t W = spec.worldSize <= 0 ? 1 : spec.worldSize;
  int64_t G = spec.groupSize <= 0 ? W : spec.groupSize;
  if (W > 4096 || G > W || W % G != 0)
    return bug("world size " + std::to_string(W) + " and group size " +
               std::to_string(G) +
               " (the group size must divide the world "
               "size)");
  if (spec.stage < 0 || spec.stage > 3)
    return bug("ZeRO stage " + std::to_string(spec.stage));
  if (spec.numBuckets < 0 || (spec.numBuckets > 0 && !spec.buckets) ||
      spec.numCollectives < 0 || (spec.numCollectives > 0 && !spec.collectives))
    return bug("bucket or collective lists are missing");
  layout.worldSize = int(W);
  layout.groupSize = int(G);
  for (int b = 0; b < spec.numBuckets; ++b) {
    const BucketSpec &bk = spec.buckets[b];
    std::string what = "bucket " + std::to_string(b);
    if (!bk.name || bk.numEntries < 0 || (bk.numEntries > 0 && !bk.entries))
      return bug(what + " has no name or no entry list");
    if (bk.paddedNumel < 0 || bk.paddedNumel % G != 0)
      return bug(
          what + " '" + bk.name + "' has " + std::to_string(bk.paddedNumel) +
          " elements, not a multiple of the group size " + std::to_string(G));
    for (int e = 0; e < bk.numEntries; ++e) {
      const BucketEntry &en = bk.entries[e];
      if (!en.param || en.offset < 0 || en.numel < 0 ||
          en.offset + en.numel > bk.paddedNumel)
        return bug(what + " '" + bk.name + "': entry " + std::to_string(e) +
                   " lies outside the bucket");
      if (en.rank > kMaxRank)
        return bug(what + " '" + bk.name + "': parameter '" + en.param +
                   "' has rank " + std::to_string(en.rank));
      if (en.rank >= 0) {
        int64_t n = 1;
        for (int d = 0; d < en.rank; ++d)
          n *= en.shape[d];
        if (n != en.numel)
          return bug(what + " '" + bk.name + "': parameter '" + en.param +
                     "' has " + std::to_string(en.numel) +
                     " elements but its shape holds " + std::to_string(n));
      }
    }
  }
  auto checkShard = [&](int bucket, const TensorSpec &t,
                        const std::string &what) -> Status {
    if (bucket < 0)
      return Status();
    if (bucket >= spec.numBuckets)
      return bug(what + " names bucket " + std::to_string(bucket) + " of " +
                 std::to_string(spec.numBuckets));
    const BucketSpec &bk = spec.buckets[bucket];
    if (numelOf(t) != bk.paddedNumel / G || t.dtype != bk.dtype)
      return bug(what + " is " + describeSpec(t) + " but a shard of bucket '" +
                 bk.name + "' is " + dtypeName(bk.dtype) + "[" +
                 std::to_string(bk.paddedNumel / G) + "]");
    return Status();
  };
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    std::string what = std::string(argRoleName(a.role)) + " '" + a.name + "'";
    if (a.bucket >= 0 && a.role != ArgRole::Param &&
        a.role != ArgRole::OptState)
      return bug(what + " is sharded; only parameters and optimizer state "
                        "can be");
    if (Status s = checkShard(a.bucket, a.type, what); !s.ok())
      return s;
    if (a.role == ArgRole::Input && W > 1 && a.type.rank < 1)
      return bug(what + " is a scalar; a batch input of several ranks needs "
                        "a batch dimension");
  }
  for (int i = 0; i < spec.numResults; ++i) {
    const ResultSpec &r = spec.results[i];
    std::string what =
        std::string(resultRoleName(r.role)) + " result '" + r.name + "'";
    if (r.bucket >= 0 && r.role != ResultRole::Param &&
        r.role != ResultRole::OptState && r.role != ResultRole::Grad)
      return bug(what + " is sharded; only parameters, optimizer state and "
                        "gradients can be");
    if (Status s = checkShard(r.bucket, r.type, what); !s.ok())
      return s;
  }
  for (const auto &[r, a] : layout.updates)
    if (spec.results[r].bucket != spec.args[a].bucket)
      return bug(std::string(resultRoleName(spec.results[r].role)) +
                 " result '" + spec.results[r].name +
                 "' and its argument are in different buckets");
  for (int c = 0; c < spec.numCollectives; ++c)
    if (!spec.collectives[c].kind)
      return bug("collective " + std::to_string(c) +
                 " of the manifest has "
                 "no kind");
  return Status();
}

//===----------------------------------------------------------------------===//
// 2. Options
//===----------------------------------------------------------------------===//

struct Options {
  int64_t steps = 10;
  uint64_t seed = 0;
  std::string batch, data, init, dumpGrads, dumpParams, log;
  TokenType dataType = TokenType::U16;
  bool dataTypeGiven = false;
  bool help = false, quiet = false;
  bool overwriteSpecial = false; // write through links, devices and FIFOs
  // Where each output goes, checked before training (io/output_file.h).
  io::OutputTarget dumpGradsTo, dumpParamsTo, logTo;
  std::map<std::string, double> hypers; // spec name -> value
  int64_t printEvery = 1;               // progress line every N steps
  int64_t gradcheck = 0;                // elements per parameter; 0 = off
  double gradcheckTol = -1;             // < 0: by dtype
};

const char *hyperHelp(const std::string &name) {
  static const std::map<std::string, const char *> help = {
      {"lr", "learning rate"},
      {"weight_decay", "weight decay"},
      {"beta1", "Adam: decay of the first moment"},
      {"beta2", "Adam: decay of the second moment"},
      {"eps", "Adam: epsilon added to the denominator"},
      {"momentum", "SGD momentum"},
      {"clip", "clip the global gradient norm"},
  };
  auto it = help.find(name);
  return it == help.end() ? "hyperparameter" : it->second;
}

Status checkHyper(const std::string &name, double v) {
  std::string opt = optionName(name);
  if (!std::isfinite(v))
    return fail(opt + " must be a finite number");
  if ((name == "beta1" || name == "beta2") && !(v >= 0 && v < 1))
    return fail(opt + " must be in [0, 1), not " + format("%g", v));
  if (name == "eps" && !(v > 0))
    return fail(opt + " must be > 0, not " + format("%g", v));
  if ((name == "lr" || name == "weight_decay" || name == "momentum" ||
       name == "clip") &&
      v < 0)
    return fail(opt + " must be >= 0, not " + format("%g", v));
  return Status();
}

bool parseInt(const std::string &text, int64_t &out) {
  if (text.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end || errno)
    return false;
  out = v;
  return true;
}

bool parseU64(const std::string &text, uint64_t &out) {
  if (text.empty() || text[0] == '-')
    return false;
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (*end || errno)
    return false;
  out = v;
  return true;
}

/// Checks every output path before training, so that a long run never ends
/// on a bad one, and refuses two outputs that name the same file.
Status checkOutputs(Options &o) {
  struct Output {
    const char *option;
    const std::string &path;
    io::OutputTarget &target;
  } outputs[] = {{"--dump-grads", o.dumpGrads, o.dumpGradsTo},
                 {"--dump-params", o.dumpParams, o.dumpParamsTo},
                 {"--log", o.log, o.logTo}};
  std::map<std::string, const char *> seen; // resolved file -> option
  for (Output &out : outputs) {
    if (out.path.empty())
      continue;
    if (Status s = io::checkOutputPath(out.option, out.path, o.overwriteSpecial,
                                       out.target);
        !s.ok())
      return s;
    if (out.target.mode == io::WriteMode::Through)
      continue; // two streams into /dev/null are fine
    auto [it, fresh] =
        seen.emplace(io::canonicalOutputPath(out.target.path), out.option);
    if (!fresh)
      return fail(std::string(out.option) + " " + out.path + ": " + it->second +
                  " writes the same file; give each its own");
  }
  return Status();
}

Status parseOptions(const ProgramSpec &spec, const Layout &layout, int argc,
                    char **argv, Options &o) {
  std::map<std::string, std::string> hyperOptions; // --weight-decay -> name
  for (int h = 0; h < spec.numHypers; ++h) {
    o.hypers[spec.hypers[h].name] = spec.hypers[h].value;
    hyperOptions[optionName(spec.hypers[h].name)] = spec.hypers[h].name;
  }
  static const std::set<std::string> valued = {
      "--steps",       "--seed",      "--batch",         "--data",
      "--data-dtype",  "--init",      "--log",           "--dump-grads",
      "--dump-params", "--gradcheck", "--gradcheck-tol", "--print-every"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i] ? argv[i] : "";
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg == "--quiet" || arg == "-q") {
      o.quiet = true;
      continue;
    }
    if (arg == "--overwrite-special") {
      o.overwriteSpecial = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0)
      return fail("unexpected argument '" + arg +
                  "' (options start with --; "
                  "see --help)");
    std::string name = arg, value;
    bool hasValue = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      hasValue = true;
    }
    bool isHyper = hyperOptions.count(name) != 0;
    if (!valued.count(name) && !isHyper) {
      if (name == "--help" || name == "--quiet" ||
          name == "--overwrite-special")
        return fail(name + " takes no value");
      std::string hint;
      static const char *known[] = {"--lr",    "--weight-decay", "--beta1",
                                    "--beta2", "--eps",          "--momentum",
                                    "--clip"};
      for (const char *k : known)
        if (name == k)
          hint = " (this program's optimizer, " + std::string(spec.optimizer) +
                 ", was compiled without it)";
      return fail("unknown option '" + name + "'" + hint + "; see --help");
    }
    if (!hasValue) {
      if (i + 1 >= argc || !argv[i + 1])
        return fail(name + " needs a value");
      value = argv[++i];
    }
    if (isHyper) {
      char *end = nullptr;
      errno = 0;
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || errno)
        return fail(name + " expects a number, not '" + value + "'");
      o.hypers[hyperOptions[name]] = v;
    } else if (name == "--steps") {
      if (!parseInt(value, o.steps) || o.steps < 0)
        return fail("--steps expects a count >= 0, not '" + value + "'");
    } else if (name == "--seed") {
      if (!parseU64(value, o.seed))
        return fail("--seed expects an integer >= 0, not '" + value + "'");
    } else if (name == "--batch") {
      o.batch = value;
    } else if (name == "--data") {
      o.data = value;
    } else if (name == "--data-dtype") {
      if (!parseTokenType(value, o.dataType))
        return fail("--data-dtype expects uint16 or int32, not '" + value +
                    "'");
      o.dataTypeGiven = true;
    } else if (name == "--init") {
      o.init = value;
    } else if (name == "--log") {
      o.log = value;
    } else if (name == "--dump-grads") {
      o.dumpGrads = value;
    } else if (name == "--dump-params") {
      o.dumpParams = value;
    } else if (name == "--print-every") {
      if (!parseInt(value, o.printEvery) || o.printEvery < 1)
        return fail("--print-every expects a count >= 1, not '" + value + "'");
    } else if (name == "--gradcheck") {
      if (!parseInt(value, o.gradcheck) || o.gradcheck < 1)
        return fail("--gradcheck expects a count >= 1, not '" + value + "'");
    } else if (name == "--gradcheck-tol") {
      char *end = nullptr;
      o.gradcheckTol = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || !(o.gradcheckTol > 0))
        return fail("--gradcheck-tol expects a positive number, not '" + value +
                    "'");
    }
    if (value.empty())
      return fail(name + " needs a value");
  }
  if (o.help)
    return Status();
  for (const auto &[name, v] : o.hypers)
    if (Status s = checkHyper(name, v); !s.ok())
      return s;
  if (!o.batch.empty() && !o.data.empty())
    return fail("--batch and --data exclude each other; give one");
  if (o.dataTypeGiven && o.data.empty())
    return fail("--data-dtype applies to --data, which is not given");
  if (!o.dumpGrads.empty()) {
    if (layout.grads.empty())
      return fail("--dump-grads: this program returns no gradients");
    if (o.steps < 1)
      return fail("--dump-grads needs at least one step");
  }
  if (Status s = checkOutputs(o); !s.ok())
    return s;
  if (o.gradcheck > 0 && layout.worldSize > 1)
    return fail("--gradcheck needs a program compiled for one rank; this one "
                "is compiled for " +
                std::to_string(layout.worldSize) +
                " (compile it without --world-size to check its gradients)");
  if (!layout.inputs.empty() && o.batch.empty() && o.data.empty()) {
    std::string names;
    for (int i : layout.inputs)
      names += (names.empty() ? "" : ", ") + std::string(spec.args[i].name);
    return fail("the step needs a batch of its inputs (" + names +
                "): give --batch FILE.safetensors or --data FILE (token "
                "file); see --help");
  }
  if (layout.inputs.empty() && (!o.batch.empty() || !o.data.empty()))
    return fail(std::string(o.batch.empty() ? "--data" : "--batch") +
                ": the step takes no inputs");
  return Status();
}

//===----------------------------------------------------------------------===//
// --help
//===----------------------------------------------------------------------===//

void printHelp(const ProgramSpec &spec, const Layout &layout,
               const std::string &program, std::FILE *out) {
  int64_t global = layout.worldSize * spec.microBatch * spec.accumSteps;
  std::string model = spec.modelPath ? spec.modelPath : "(unknown)";
  std::fprintf(out, "usage: %s [options]\n\n", program.c_str());
  std::fprintf(out,
               "Trains %s with %s (compiled by dsc).\nOne step takes a "
               "global batch of %" PRId64 " examples = ",
               baseName(model).c_str(), spec.optimizer, global);
  if (layout.worldSize > 1)
    std::fprintf(out, "%d ranks x ", layout.worldSize);
  std::fprintf(out, "micro-batch %" PRId64 " x %" PRId64 " accumulation steps",
               spec.microBatch, spec.accumSteps);
  if (spec.tokensPerExample > 1)
    std::fprintf(out, ", of %" PRId64 " tokens each", spec.tokensPerExample);
  std::fprintf(out, ".\n");
  const char *precision = spec.precision ? spec.precision : "fp32";
  if (std::strcmp(precision, "fp32") != 0)
    std::fprintf(out,
                 "Mixed precision %s: 16-bit compute copies of fp32 master "
                 "weights, fp32 optimizer state and gradients.\n",
                 precision);
  const LossScalerSpec &ls = spec.lossScaler;
  if (ls.enabled && ls.dynamic)
    std::fprintf(out,
                 "fp16 loss scaling: dynamic, from %g, doubled after %" PRId64
                 " steps without overflow, halved after %" PRId64
                 " overflows, at least %g; a step with inf/nan gradients is "
                 "skipped.\n",
                 ls.initialScale, ls.window, ls.hysteresis, ls.minScale);
  else if (ls.enabled)
    std::fprintf(out,
                 "fp16 loss scaling: static, %g; a step with inf/nan "
                 "gradients is skipped.\n",
                 ls.initialScale);
  if (layout.worldSize > 1) {
    std::fprintf(out, "Compiled for %d ranks (ZeRO stage %d", layout.worldSize,
                 spec.stage);
    if (layout.groupSize < layout.worldSize)
      std::fprintf(out, ", sharded in groups of %d", layout.groupSize);
    std::fprintf(out, "); they run as threads of this process, rank r on rows\n"
                      "[r B, (r + 1) B) of the global batch (B = micro-batch x "
                      "accumulation steps).\nDSC_COLLECTIVE_TIMEOUT=S: give up "
                      "on a collective after S seconds (default 300).\n");
  }
  std::fprintf(out, "\n");

  auto opt = [&](const char *name, const std::string &text) {
    std::fprintf(out, "  %-24s %s\n", name, text.c_str());
  };
  std::fprintf(out, "Data (one of the two when the step has inputs):\n");
  opt("--batch FILE", "one fixed global batch for every step (safetensors):");
  opt("", "a tensor per input below, same name and shape");
  opt("--data FILE", "a flat token file (nanoGPT's train.bin); each row is");
  opt("", "a random window x[i:i+T], and a second input (the");
  opt("", "targets) gets x[i+1:i+T+1]");
  opt("--data-dtype TYPE", "token type of --data: uint16 (default) or int32");
  std::fprintf(out, "\nRun:\n");
  opt("--steps N", "optimizer steps to run (default 10)");
  opt("--seed S", "seed of dropout, --data windows, --init random");
  opt("", "(default 0)");
  opt("--init SOURCE", "initial parameters and buffers, from");
  opt("", "FILE.onnx: the initializers of an ONNX model (the");
  opt("", "  default is the model compiled from, see below)");
  opt("", "FILE.safetensors: e.g. a --dump-params file");
  opt("", "random[:SEED]: normal(0, 0.02) for matrices, zeros");
  opt("", "  for biases, ones for norm weights");
  std::fprintf(out, "\nOutput:\n");
  opt("--dump-grads FILE", layout.grads.empty()
                               ? "(this program returns no gradients)"
                               : "gradients of the first step, before "
                                 "clipping");
  opt("--dump-params FILE", "parameters and buffers after the last step");
  opt("--log FILE.jsonl", "one JSON object per step");
  opt("--overwrite-special", "let an output path be a symbolic link (the");
  opt("", "  file it names is replaced) or a device or FIFO");
  opt("", "  (written through); refused without it");
  opt("--quiet", "no progress lines (errors and warnings print)");
  opt("--print-every N", "a progress line every N steps (and the first and");
  opt("", "  last); --log still gets every step");
  opt("--gradcheck N", "instead of training: compare the gradients of step 1");
  opt("", "  with central finite differences of the loss at N");
  opt("", "  elements of every parameter; exit 1 if one is off");
  opt("--gradcheck-tol X", "bound on the relative error (default 1e-6 for");
  opt("", "  float64 parameters, 2e-2 for float32)");
  opt("--help", "this text");
  if (spec.numHypers) {
    std::fprintf(out, "\nHyperparameters of %s (defaults compiled in):\n",
                 spec.optimizer);
    for (int h = 0; h < spec.numHypers; ++h) {
      std::string name = optionName(spec.hypers[h].name) + " X";
      std::string text = hyperHelp(spec.hypers[h].name);
      if (std::strcmp(spec.hypers[h].name, "clip") == 0)
        text += " (0 = off)";
      opt(name.c_str(),
          format("%s; default %g", text.c_str(), spec.hypers[h].value));
    }
  }
  std::fprintf(out, "\nDumps are safetensors files keyed by ONNX names.\n");
  std::fprintf(out, "Model: %s\n", model.c_str());
  std::fprintf(out, "\nTensors:\n");
  auto group = [&](const char *title, const std::vector<int> &idx, bool list) {
    if (idx.empty())
      return;
    double elems = 0, bytes = 0;
    for (int i : idx) {
      double n = double(numelOf(spec.args[i].type));
      elems += n;
      bytes += n * double(dtypeSize(spec.args[i].type.dtype));
    }
    std::fprintf(out, "  %s: %zu tensors, %s elements, %s\n", title, idx.size(),
                 humanCount(elems).c_str(), humanBytes(bytes).c_str());
    if (list)
      for (int i : idx)
        std::fprintf(out, "    %-44s %s\n", spec.args[i].name,
                     describeSpec(spec.args[i].type).c_str());
  };
  group("inputs", layout.inputs, true);
  group("parameters", layout.params, true);
  group("buffers", layout.buffers, true);
  group("optimizer state", layout.optStates, false);
  std::fprintf(out, "  step scratch arena: %s\n",
               humanBytes(double(spec.arenaBytes)).c_str());
}

//===----------------------------------------------------------------------===//
// 3. Initial parameters and buffers
//===----------------------------------------------------------------------===//

struct Args {
  std::vector<Tensor> tensors; // in spec order
  std::vector<Memory> memory;
};

/// One tensor --init fills: a Param or Buffer argument of rank 0, or one
/// parameter of a sharded bucket (a view into the packed bucket, its full
/// shape), in spec order (a bucket's parameters in entry order).
struct InitTarget {
  ArgRole role;
  std::string name;
  TensorSpec type;
  Tensor dst;
};

Status initWeights(const ProgramSpec &spec, const Options &o,
                   const std::vector<InitTarget> &targets, std::string &what) {
  std::string source =
      o.init.empty() ? (spec.modelPath ? spec.modelPath : "") : o.init;
  if (targets.empty()) {
    what = "none needed";
    return Status();
  }

  // The model, opened when first needed (default init, or buffers that
  // another source does not hold).
  std::unique_ptr<OnnxWeights> model;
  auto fromModel = [&](const InitTarget &a, const std::string &path,
                       const std::string &why) -> Status {
    if (!model) {
      model = std::make_unique<OnnxWeights>();
      if (Status s = model->open(path); !s.ok())
        return Status::error(s.code(), s.message() + why +
                                           "; give --init FILE.onnx, --init "
                                           "FILE.safetensors or --init random");
    }
    if (!model->find(a.name))
      return fail(path + " has no initializer for " + argRoleName(a.role) +
                  " '" + a.name + "' " + describeSpec(a.type) + why);
    return model->read(a.name, a.dst);
  };
  std::string modelPath = spec.modelPath ? spec.modelPath : "";

  // random[:SEED]
  if (source == "random" || source.rfind("random:", 0) == 0) {
    uint64_t seed = o.seed;
    if (source.size() > 6 && !parseU64(source.substr(7), seed))
      return fail("--init random:SEED expects an integer seed, not '" +
                  source.substr(7) + "'");
    Rng rng(seed, /*stream=*/1);
    int fromModelCount = 0;
    for (const InitTarget &a : targets) {
      const Tensor &t = a.dst;
      switch (randomInitRule(a.role, a.name, a.type)) {
      case RandomInit::Normal: {
        size_t n = size_t(t.numel());
        std::vector<double> v(std::min<size_t>(n, 1 << 16));
        for (size_t done = 0; done < n;) {
          size_t k = std::min(v.size(), n - done);
          for (size_t j = 0; j < k; ++j)
            v[j] = 0.02 * rng.normal();
          convertElements(v.data(), DType::F64,
                          static_cast<char *>(t.data) +
                              done * dtypeSize(t.dtype),
                          t.dtype, k);
          done += k;
        }
        break;
      }
      case RandomInit::Zeros:
        std::memset(t.data, 0, t.nbytes());
        break;
      case RandomInit::Ones:
        fillValue(t, 1.0);
        break;
      case RandomInit::FromModel:
        if (Status s = fromModel(a, modelPath,
                                 " (--init random reads constant buffers "
                                 "such as masks from the model)");
            !s.ok())
          return s;
        ++fromModelCount;
        break;
      }
    }
    what = format("random (seed %" PRIu64 ")", seed);
    if (fromModelCount)
      what += format(", %d constant buffers from the model", fromModelCount);
    return Status();
  }

  // FILE.safetensors
  if (endsWith(lower(source), ".safetensors")) {
    io::SafetensorsFile file;
    if (Status s = file.read(source); !s.ok())
      return Status::error(s.code(), "--init: " + s.message());
    std::vector<std::string> missing;
    for (const InitTarget &t : targets)
      if (t.role == ArgRole::Param && !file.contains(t.name))
        missing.push_back(t.name);
    if (!missing.empty()) {
      std::string list;
      for (size_t k = 0; k < missing.size() && k < 5; ++k)
        list += (k ? ", '" : "'") + missing[k] + "'";
      if (missing.size() > 5)
        list += format(" and %zu more", missing.size() - 5);
      return fail("--init " + source + " has no tensor for parameter " + list);
    }
    int fromModelCount = 0;
    for (const InitTarget &a : targets) {
      if (!file.contains(a.name)) { // a buffer
        if (Status s = fromModel(a, modelPath,
                                 " (buffer '" + std::string(a.name) +
                                     "' is not in " + source + ")");
            !s.ok())
          return s;
        ++fromModelCount;
        continue;
      }
      Tensor src;
      if (Status s = file.get(a.name, src); !s.ok())
        return s;
      if (Status s = copyInto(src, a.dst,
                              "--init " + source + ": " + argRoleName(a.role) +
                                  " '" + a.name + "'");
          !s.ok())
        return s;
    }
    what = source;
    if (fromModelCount)
      what += format(" (%d buffers from the model)", fromModelCount);
    return Status();
  }

  // FILE.onnx (the default: the model compiled from)
  if (source.empty())
    return fail("the program does not know its model; give --init FILE.onnx, "
                "--init FILE.safetensors or --init random");
  std::string why = o.init.empty() ? " (the model the program was compiled "
                                     "from; its initializers are the initial "
                                     "weights)"
                                   : "";
  for (const InitTarget &a : targets)
    if (Status s = fromModel(a, source, why); !s.ok())
      return s;
  what = source;
  return Status();
}

//===----------------------------------------------------------------------===//
// Ranks and buckets
//===----------------------------------------------------------------------===//

/// One rank's tensors and scratch. Its Input arguments are views of its
/// rows of the global batch; everything else is its own.
/// A rank's arguments, results and arena in device memory (a program
/// compiled for a device): the host ones keep the initial values and
/// receive what is printed or dumped.
struct DeviceMirror {
  Device *device = nullptr;
  std::vector<Tensor> args, results;
  std::vector<void *> memory;
  HostArena arena;

  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror &) = delete;
  DeviceMirror &operator=(const DeviceMirror &) = delete;
  ~DeviceMirror() {
    for (void *p : memory)
      device->release(p);
  }
  Status create(Device *d, const std::vector<Tensor> &hostArgs,
                const std::vector<Tensor> &hostResults, size_t arenaBytes) {
    device = d;
    auto mirror = [&](const Tensor &h, Tensor &out) -> Status {
      void *p = nullptr;
      if (Status s = d->allocate(h.nbytes(), &p); !s.ok())
        return s;
      memory.push_back(p);
      out = h;
      out.data = p;
      return Status();
    };
    args.resize(hostArgs.size());
    results.resize(hostResults.size());
    for (size_t i = 0; i < hostArgs.size(); ++i)
      if (Status s = mirror(hostArgs[i], args[i]); !s.ok())
        return s;
    for (size_t i = 0; i < hostResults.size(); ++i)
      if (Status s = mirror(hostResults[i], results[i]); !s.ok())
        return s;
    void *base = nullptr;
    if (Status s = d->allocate(arenaBytes, &base); !s.ok())
      return Status::error(s.code(), "the step's arena (" +
                                         std::to_string(arenaBytes) +
                                         " bytes): " + s.message());
    memory.push_back(base);
    return arena.adopt(base, arenaBytes);
  }
  /// Host argument i to the device.
  Status upload(const std::vector<Tensor> &hostArgs, size_t i) {
    return device->toDevice(args[i].data, hostArgs[i].data,
                            hostArgs[i].nbytes());
  }
  /// Device tensor `d` into host tensor `h` (same type).
  Status download(const Tensor &d, const Tensor &h) {
    return device->toHost(h.data, d.data, h.nbytes());
  }
};

struct RankState {
  int id = 0;   // the global rank
  int gpu = -1; // its GPU (-1: rank % visible GPUs)
  Args args;
  std::vector<Tensor> results;
  std::vector<Memory> resultMemory;
  HostArena arena;
  std::unique_ptr<DeviceMirror> dev; // a device program's tensors
};

/// The full type of every parameter of every bucket: BucketEntry's shape,
/// else the model's initializer of that name, else [numel].
std::vector<std::vector<TensorSpec>> bucketShapes(const ProgramSpec &spec,
                                                  const std::string &model) {
  std::vector<std::vector<TensorSpec>> shapes(size_t(spec.numBuckets));
  const std::string &modelFile = model;
  std::unique_ptr<OnnxWeights> onnx;
  bool tried = false;
  for (int b = 0; b < spec.numBuckets; ++b) {
    const BucketSpec &bk = spec.buckets[b];
    for (int e = 0; e < bk.numEntries; ++e) {
      const BucketEntry &en = bk.entries[e];
      TensorSpec t{bk.dtype, 1, {en.numel}};
      if (en.rank >= 0) {
        t.rank = en.rank;
        for (int d = 0; d < en.rank; ++d)
          t.shape[d] = en.shape[d];
      } else {
        if (!tried) {
          tried = true;
          onnx = std::make_unique<OnnxWeights>();
          if (modelFile.empty() || !onnx->open(modelFile).ok())
            onnx.reset();
        }
        const OnnxInitializer *init = onnx ? onnx->find(en.param) : nullptr;
        if (init && init->numel() == en.numel &&
            init->dims.size() <= size_t(kMaxRank)) {
          t.rank = int(init->dims.size());
          for (int d = 0; d < t.rank; ++d)
            t.shape[d] = init->dims[size_t(d)];
        }
      }
      shapes[size_t(b)].push_back(t);
    }
  }
  return shapes;
}

/// A view of each parameter of bucket `b` in the packed bucket at `flat`.
void unpackBucket(const ProgramSpec &spec,
                  const std::vector<std::vector<TensorSpec>> &shapes, int b,
                  void *flat, std::vector<io::NamedTensor> &out) {
  const BucketSpec &bk = spec.buckets[b];
  size_t es = dtypeSize(bk.dtype);
  for (int e = 0; e < bk.numEntries; ++e) {
    const BucketEntry &en = bk.entries[e];
    const TensorSpec &t = shapes[size_t(b)][size_t(e)];
    out.push_back(
        {en.param,
         Tensor::of(static_cast<char *>(flat) + size_t(en.offset) * es,
                    bk.dtype, I64s(t.shape, size_t(t.rank)))});
  }
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

int runImpl(const ProgramSpec &spec, int argc, char **argv, std::FILE *out,
            std::FILE *err) {
  auto error = [&](const Status &s) {
    std::fprintf(err, "error: %s\n", s.message().c_str());
    std::fflush(err);
    return 1;
  };
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::duration d) {
    return std::chrono::duration<double>(d).count();
  };
  Clock::time_point start = Clock::now();

  // 1. Spec and options.
  Layout layout;
  if (Status s = checkSpec(spec, layout); !s.ok())
    return error(s);
  Options o;
  if (Status s = parseOptions(spec, layout, argc, argv, o); !s.ok())
    return error(s);
  std::string program = argc > 0 && argv[0] ? baseName(argv[0]) : "program";
  if (o.help) {
    printHelp(spec, layout, program, out);
    std::fflush(out);
    return 0;
  }
  const int W = layout.worldSize, G = layout.groupSize;
  Device *device = spec.device ? spec.device() : nullptr;

  // Where this process stands: every rank as a thread of this process, or
  // (a device program launched by torchrun, srun, mpirun or dsrun) one rank
  // per process, talking over NCCL.
  launch::DistEnv env;
  if (Status s = launch::readDistEnv(env); !s.ok())
    return error(s);
  const bool distributed = env.present && device;
  if (env.present && !device && env.worldSize > 1)
    return error(fail(
        "this program was compiled for the CPU (--target cpu), whose ranks "
        "are threads of one process, but " +
        env.source + " started " + std::to_string(env.worldSize) +
        " processes; run it once without a launcher, or compile with "
        "--target cuda for one process per GPU"));
  if (distributed && env.worldSize != W)
    return error(fail(format(
        "this program was compiled for %d rank%s (--world-size), but %s "
        "started %d process%s (WORLD_SIZE); launch %d, or recompile with "
        "--world-size %d",
        W, W == 1 ? "" : "s", env.source.c_str(), env.worldSize,
        env.worldSize == 1 ? "" : "es", W, env.worldSize)));
  if (distributed && W > 1 && (!o.dumpGrads.empty() || !o.dumpParams.empty()))
    return error(fail("--dump-grads and --dump-params are not supported yet "
                      "in a run of one process per GPU with more than one "
                      "rank; run the ranks in one process (no launcher) to "
                      "dump"));
  if (distributed && env.rank != 0) {
    o.quiet = true; // rank 0 reports for all
    o.log.clear();
  }
  // Outputs: what a killed run left behind goes first; the log is opened
  // now, so that a bad one stops the run before anything is allocated.
  // Temporaries lie next to the file written (a followed link's target).
  for (const io::OutputTarget *dump : {&o.dumpGradsTo, &o.dumpParamsTo})
    if (!dump->path.empty() && dump->mode == io::WriteMode::Atomic)
      for (const std::string &stale : io::removeStaleTemporaries(dump->path))
        std::fprintf(err,
                     "note: removed %s, a temporary file left by an "
                     "interrupted run\n",
                     stale.c_str());
  std::FILE *log = nullptr;
  if (!o.log.empty())
    if (Status s = io::openOutputStream(o.logTo, &log); !s.ok())
      return error(fail("--log " + o.log + ": " + s.message()));
  struct Closer {
    std::FILE *f;
    ~Closer() {
      if (f)
        std::fclose(f);
    }
  } closeLog{log};

  std::vector<int> ids; // the ranks this process runs
  if (distributed)
    ids.push_back(env.rank);
  else
    for (int r = 0; r < W; ++r)
      ids.push_back(r);

  double timeout = 0;
  if (W > 1 || distributed) {
    std::string warning;
    timeout = comm::collectiveTimeoutFromEnv(&warning);
    if (!warning.empty())
      std::fprintf(err, "warning: %s\n", warning.c_str());
  }

  // 2. Storage. The global batch: one tensor per Input with W times the
  // rank's rows; rank r's Input is a view of rows [r B, (r + 1) B).
  std::vector<InputSlot> slots;
  std::vector<Memory> inputMemory;
  for (int i : layout.inputs) {
    TensorSpec t = spec.args[i].type;
    if (W > 1)
      t.shape[0] *= W;
    Memory m;
    Tensor g;
    if (Status s = allocateTensor(
            t, std::string("input '") + spec.args[i].name + "'", m, g);
        !s.ok())
      return error(s);
    slots.push_back({spec.args[i].name, g});
    inputMemory.push_back(std::move(m));
  }
  std::vector<std::unique_ptr<RankState>> ranks;
  for (int r : ids) {
    auto rs = std::make_unique<RankState>();
    rs->id = r;
    std::string who = W > 1 ? format(" of rank %d", r) : "";
    rs->args.tensors.resize(size_t(spec.numArgs));
    rs->args.memory.resize(size_t(spec.numArgs));
    size_t inputIndex = 0;
    for (int i = 0; i < spec.numArgs; ++i) {
      const ArgSpec &a = spec.args[i];
      if (a.role == ArgRole::Input) {
        Tensor view = slots[inputIndex++].tensor;
        size_t bytes = size_t(numelOf(a.type)) * dtypeSize(a.type.dtype);
        view.data = static_cast<char *>(view.data) + size_t(r) * bytes;
        view.shape[0] = a.type.shape[0];
        rs->args.tensors[i] = view;
        continue;
      }
      if (Status s = allocateTensor(a.type,
                                    std::string(argRoleName(a.role)) + " '" +
                                        a.name + "'" + who,
                                    rs->args.memory[i], rs->args.tensors[i]);
          !s.ok())
        return error(s);
    }
    rs->results.resize(size_t(spec.numResults));
    rs->resultMemory.resize(size_t(spec.numResults));
    for (int i = 0; i < spec.numResults; ++i)
      if (Status s =
              allocateTensor(spec.results[i].type,
                             std::string(resultRoleName(spec.results[i].role)) +
                                 " result '" + spec.results[i].name + "'" + who,
                             rs->resultMemory[i], rs->results[i]);
          !s.ok())
        return error(s);
    if (!device) // a device program's arena is in device memory (3b)
      if (Status s = rs->arena.init(spec.arenaBytes); !s.ok())
        return error(s);
    ranks.push_back(std::move(rs));
  }
  RankState &rank0 = *ranks[0];

  // 3. Weights and hyperparameters: rank 0's replicated parameters and
  // buffers, and each sharded bucket packed whole (zeros in the padding);
  // then every rank gets the replicated ones and its shard.
  // Parameter shapes from the model of --init when it is one (the program
  // may run where the model it was compiled from is not), else that model.
  std::string shapeModel = spec.modelPath ? spec.modelPath : "";
  if (endsWith(lower(o.init), ".onnx"))
    shapeModel = o.init;
  std::vector<std::vector<TensorSpec>> shapes = bucketShapes(spec, shapeModel);
  std::vector<Memory> packedMemory(size_t(spec.numBuckets));
  std::vector<InitTarget> targets;
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    if (a.role == ArgRole::Buffer ||
        (a.role == ArgRole::Param && a.bucket < 0)) {
      targets.push_back({a.role, a.name, a.type, rank0.args.tensors[i]});
    } else if (a.role == ArgRole::Param) {
      const BucketSpec &bk = spec.buckets[a.bucket];
      Memory &m = packedMemory[size_t(a.bucket)];
      if (m)
        continue; // a bucket is one argument; be safe with two
      Tensor flat;
      if (Status s =
              allocateTensor(TensorSpec{bk.dtype, 1, {bk.paddedNumel}},
                             std::string("bucket '") + bk.name + "'", m, flat);
          !s.ok())
        return error(s);
      std::vector<io::NamedTensor> views;
      unpackBucket(spec, shapes, a.bucket, flat.data, views);
      for (size_t e = 0; e < views.size(); ++e)
        targets.push_back({ArgRole::Param, views[e].name,
                           shapes[size_t(a.bucket)][e], views[e].tensor});
    }
  }
  std::string initWhat;
  if (Status s = initWeights(spec, o, targets, initWhat); !s.ok())
    return error(s);
  for (auto &rsp : ranks)
    for (int i = 0; i < spec.numArgs; ++i) {
      const int r = rsp->id;
      const ArgSpec &a = spec.args[i];
      const Tensor &dst = rsp->args.tensors[i];
      if (a.role == ArgRole::Param && a.bucket >= 0) {
        int64_t shard = numelOf(a.type);
        std::memcpy(dst.data,
                    static_cast<char *>(packedMemory[size_t(a.bucket)].get()) +
                        size_t((r % G) * shard) * dtypeSize(a.type.dtype),
                    dst.nbytes());
      } else if (rsp.get() != &rank0 &&
                 (a.role == ArgRole::Param || a.role == ArgRole::Buffer)) {
        std::memcpy(dst.data, rank0.args.tensors[i].data, dst.nbytes());
      }
    }
  packedMemory.clear();
  double lrHyper = NAN;
  for (auto &rs : ranks)
    for (int i = 0; i < spec.numArgs; ++i) {
      const ArgSpec &a = spec.args[i];
      if (a.role == ArgRole::Hyper)
        fillValue(rs->args.tensors[i], o.hypers[a.name]);
      else if (a.role == ArgRole::Seed)
        setIntScalar(rs->args.tensors[i], static_cast<int64_t>(o.seed));
      else if (a.role == ArgRole::Scaler)
        fillValue(rs->args.tensors[i], std::strcmp(a.name, "loss_scale") == 0
                                           ? spec.lossScaler.initialScale
                                       : std::strcmp(a.name, "hysteresis") == 0
                                           ? double(spec.lossScaler.hysteresis)
                                           : 0.0);
    }
  if (o.hypers.count("lr"))
    lrHyper = o.hypers["lr"];

  // 3b. A device program: the NCCL communicator of a distributed run, then
  // every rank's tensors and arena in its GPU's memory, initialized from
  // the host ones.
  std::unique_ptr<Communicator> nccl;
  std::string deviceWhat;
  if (distributed) {
    DistributedInit init;
    init.rank = env.rank;
    init.worldSize = env.worldSize;
    init.groupSize = G;
    init.localRank = env.localRank;
    init.timeoutSeconds = timeout;
    init.manifest = spec.collectives;
    init.numCollectives = spec.numCollectives;
    init.exchangeId = [&](std::vector<uint8_t> &id) {
      return launch::exchangeId(env, id, timeout > 0 ? timeout : 300);
    };
    if (Status s = device->createDistributed(init, nccl); !s.ok())
      return error(
          Status::error(s.code(), format("rank %d: ", env.rank) + s.message()));
    rank0.gpu = env.localRank % std::max(device->count(), 1);
  }
  if (device) {
    // Will it fit? What every rank needs (its tensors, the planned arena and
    // the GEMM workspace), summed per GPU, against that GPU's memory, before
    // anything is allocated.
    size_t rankBytes = spec.arenaBytes + (size_t(32) << 20);
    for (const Tensor &t : rank0.args.tensors)
      rankBytes += t.nbytes();
    for (const Tensor &t : rank0.results)
      rankBytes += t.nbytes();
    std::map<int, std::pair<size_t, int>> perGpu;       // bytes, ranks
    std::map<int, std::pair<size_t, size_t>> gpuMemory; // free, total
    for (auto &rs : ranks) {
      if (Status s = device->bindRank(rs->id, rs->gpu); !s.ok())
        return error(s);
      int gpu = 0;
      size_t free = 0, total = 0;
      if (!device->memoryInfo(gpu, free, total).ok())
        continue; // no answer: the allocations will tell
      perGpu[gpu].first += rankBytes;
      perGpu[gpu].second += 1;
      gpuMemory[gpu] = {free, total};
    }
    for (const auto &[gpu, need] : perGpu) {
      auto [free, total] = gpuMemory[gpu];
      std::string what = format(
          "this step needs %s on GPU %d (%d rank%s x (tensors and arena "
          "of the compiled plan, %s))",
          humanBytes(double(need.first)).c_str(), gpu, need.second,
          need.second == 1 ? "" : "s", humanBytes(double(rankBytes)).c_str());
      if (need.first > total)
        return error(
            fail(what + format(", but it has %s in all; compile with a smaller "
                               "--micro-batch (and --accum-steps), a higher "
                               "--stage, or more ranks over more GPUs "
                               "(`dsc compile --report` shows the plan)",
                               humanBytes(double(total)).c_str())));
      if (need.first > free)
        std::fprintf(err,
                     "warning: %s, but only %s of its %s are free now; the "
                     "allocations may fail\n",
                     what.c_str(), humanBytes(double(free)).c_str(),
                     humanBytes(double(total)).c_str());
    }
    for (auto &rs : ranks) {
      if (Status s = device->bindRank(rs->id, rs->gpu); !s.ok())
        return error(s);
      rs->dev = std::make_unique<DeviceMirror>();
      if (Status s = rs->dev->create(device, rs->args.tensors, rs->results,
                                     spec.arenaBytes);
          !s.ok())
        return error(
            Status::error(s.code(), format("rank %d: ", rs->id) + s.message()));
      for (int i = 0; i < spec.numArgs; ++i)
        if (spec.args[i].role != ArgRole::Input)
          if (Status s = rs->dev->upload(rs->args.tensors, size_t(i)); !s.ok())
            return error(s);
    }
    if (Status s = device->bindRank(rank0.id, rank0.gpu); !s.ok())
      return error(s);
    deviceWhat = device->describe();
    if (distributed)
      deviceWhat += format(" | rank %d of %d (%s), NCCL", env.rank,
                           env.worldSize, env.source.c_str());
    else if (W > 1)
      deviceWhat += format(" | %d in-process ranks over %d GPU%s", W,
                           std::min(W, device->count()),
                           std::min(W, device->count()) == 1 ? "" : "s");
  }
  // Runs rank `rs`'s step on the calling thread. On a device: binds the
  // thread, uploads the batch and the step (every argument when `all`),
  // and brings back the scalars the progress line prints.
  // The results the progress line and the loss scaler read, fetched from a
  // device after every step.
  std::vector<int> shown = {layout.loss, layout.lr, layout.gradNorm,
                            layout.overflow};
  shown.insert(shown.end(), layout.scalerResults.begin(),
               layout.scalerResults.end());
  auto stepOn = [&](RankState &rs, Communicator *comm, int64_t step,
                    bool all) -> Status {
    RankContext ctx{nullptr, comm, step, static_cast<int64_t>(o.seed)};
    if (!rs.dev) {
      rs.arena.reset();
      ctx.arena = &rs.arena;
      return spec.trainStep(ctx, rs.args.tensors.data(), rs.results.data());
    }
    if (Status s = device->bindRank(rs.id, rs.gpu); !s.ok())
      return s;
    for (int i = 0; i < spec.numArgs; ++i) {
      ArgRole role = spec.args[i].role;
      if (all || role == ArgRole::Input || role == ArgRole::Step)
        if (Status s = rs.dev->upload(rs.args.tensors, size_t(i)); !s.ok())
          return s;
    }
    rs.dev->arena.reset();
    ctx.arena = &rs.dev->arena;
    if (Status s =
            spec.trainStep(ctx, rs.dev->args.data(), rs.dev->results.data());
        !s.ok())
      return s;
    for (int r : shown)
      if (r >= 0)
        if (Status s = rs.dev->download(rs.dev->results[size_t(r)],
                                        rs.results[size_t(r)]);
            !s.ok())
          return s;
    return device->synchronize();
  };
  // On a device: brings results `which` (or, with args, arguments) of every
  // rank back into the host tensors.
  auto fetch = [&](const std::vector<int> &which, bool args) -> Status {
    if (!device)
      return Status();
    for (auto &rs : ranks) {
      if (Status s = device->bindRank(rs->id, rs->gpu); !s.ok())
        return s;
      for (int i : which) {
        const Tensor &d =
            args ? rs->dev->args[size_t(i)] : rs->dev->results[size_t(i)];
        const Tensor &h =
            args ? rs->args.tensors[size_t(i)] : rs->results[size_t(i)];
        if (Status s = rs->dev->download(d, h); !s.ok())
          return s;
      }
    }
    return Status();
  };

  // 4. Data, into the global batch.
  BatchShape batch{spec.microBatch, spec.accumSteps, W};
  TokenData tokens;
  std::string dataWhat = "none needed";
  if (!o.batch.empty()) {
    std::vector<std::string> unused;
    if (Status s = loadBatchFile(o.batch, slots, batch, &unused); !s.ok())
      return error(s);
    dataWhat = "fixed batch " + o.batch;
    if (!unused.empty()) {
      std::string list;
      for (const auto &u : unused)
        list += (list.empty() ? "'" : ", '") + u + "'";
      std::fprintf(err,
                   "warning: --batch %s: tensors the step does not take "
                   "are ignored: %s\n",
                   o.batch.c_str(), list.c_str());
    }
  } else if (!o.data.empty()) {
    if (Status s = tokens.open(o.data, o.dataType, slots, batch); !s.ok())
      return error(s);
    dataWhat =
        format("%s (%s, %s tokens)", o.data.c_str(), tokenTypeName(o.dataType),
               humanCount(double(tokens.numTokens())).c_str());
  }
  Rng dataRng(o.seed, /*stream=*/2);

  int64_t global = batch.global();
  bool tokenUnits = spec.tokensPerExample > 1;
  double perStep = double(global * spec.tokensPerExample);
  if (!o.quiet) {
    double paramElems = 0, paramBytes = 0;
    std::set<int> countedBuckets;
    for (int i : layout.params) {
      const ArgSpec &a = spec.args[i];
      if (a.bucket < 0) {
        paramElems += double(numelOf(a.type));
        paramBytes += double(numelOf(a.type)) * double(dtypeSize(a.type.dtype));
      } else if (countedBuckets.insert(a.bucket).second) {
        const BucketSpec &bk = spec.buckets[a.bucket];
        for (int e = 0; e < bk.numEntries; ++e) {
          paramElems += double(bk.entries[e].numel);
          paramBytes +=
              double(bk.entries[e].numel) * double(dtypeSize(bk.dtype));
        }
      }
    }
    std::fprintf(
        out,
        "%s: %s | %s, %s | %s parameters (%s) | global batch %" PRId64 " = ",
        program.c_str(),
        baseName(spec.modelPath ? spec.modelPath : "?").c_str(), spec.optimizer,
        spec.precision ? spec.precision : "fp32",
        humanCount(paramElems).c_str(), humanBytes(paramBytes).c_str(), global);
    if (W > 1)
      std::fprintf(out, "%d ranks x ", W);
    std::fprintf(out, "%" PRId64 " x %" PRId64, spec.microBatch,
                 spec.accumSteps);
    if (tokenUnits)
      std::fprintf(out, " x %" PRId64 " tokens", spec.tokensPerExample);
    std::fprintf(out, " | arena %s%s",
                 humanBytes(double(spec.arenaBytes)).c_str(),
                 W > 1 ? " per rank" : "");
    if (W > 1) {
      std::fprintf(out, " | %d ranks (%s), ZeRO stage %d", W,
                   distributed ? "one process per GPU" : "in-process threads",
                   spec.stage);
      if (G < W)
        std::fprintf(out, ", groups of %d", G);
    }
    std::fprintf(out, "\n");
    if (device)
      std::fprintf(out, "device: %s\n", deviceWhat.c_str());
    std::fprintf(out,
                 "init: %s | data: %s | %" PRId64 " steps, seed %" PRIu64 "\n",
                 initWhat.c_str(), dataWhat.c_str(), o.steps, o.seed);
    std::fflush(out);
  }

  // Finite differences of the loss against the compiled gradients
  // (--gradcheck N): every call is step 1 with the same seed, so dropout
  // masks repeat and the loss is a smooth function of each parameter.
  // One rank only (parseOptions refuses it otherwise).
  if (o.gradcheck > 0) {
    Args &args = rank0.args;
    std::vector<Tensor> &results = rank0.results;
    for (int i = 0; i < spec.numArgs; ++i)
      if (spec.args[i].role == ArgRole::Step)
        setIntScalar(args.tensors[i], 1);
    auto lossAt = [&](double &loss) -> Status {
      Status s = stepOn(rank0, nccl.get(), 1, /*all=*/true);
      if (s.ok())
        loss = scalarValue(results[layout.loss]);
      return s;
    };
    auto get = [](const Tensor &t, int64_t i) {
      return t.dtype == DType::F64 ? t.as<double>()[i]
                                   : double(t.as<float>()[i]);
    };
    auto set = [](const Tensor &t, int64_t i, double v) {
      if (t.dtype == DType::F64)
        t.as<double>()[i] = v;
      else
        t.as<float>()[i] = float(v);
    };
    double base = 0;
    if (Status s = lossAt(base); !s.ok())
      return error(s);
    if (Status s = fetch(layout.grads, /*args=*/false); !s.ok())
      return error(s);
    std::vector<std::vector<double>> analytic;
    for (int r : layout.grads) {
      const Tensor &g = results[r];
      if (g.dtype != DType::F64 && g.dtype != DType::F32)
        return error(Status::error(StatusCode::Unimplemented,
                                   "--gradcheck supports float32 and float64 "
                                   "parameters only"));
      analytic.emplace_back(g.numel());
      for (int64_t i = 0; i < g.numel(); ++i)
        analytic.back()[i] = get(g, i);
    }
    double worst = 0, tolUsed = 0;
    for (size_t k = 0; k < layout.grads.size(); ++k) {
      const char *name = spec.results[layout.grads[k]].name;
      int a = -1;
      for (int i : layout.params)
        if (std::string(spec.args[i].name) == name)
          a = i;
      if (a < 0)
        continue;
      const Tensor &p = args.tensors[a];
      bool f64 = p.dtype == DType::F64;
      double h = f64 ? 1e-5 : 1e-2;
      double tol = o.gradcheckTol > 0 ? o.gradcheckTol : (f64 ? 1e-6 : 2e-2);
      tolUsed = std::max(tolUsed, tol);
      int64_t n = p.numel(), count = std::min<int64_t>(n, o.gradcheck);
      double maxErr = 0;
      for (int64_t j = 0; j < count; ++j) {
        int64_t idx =
            count == n ? j : j * (n - 1) / std::max<int64_t>(count - 1, 1);
        double orig = get(p, idx), lp = 0, lm = 0;
        set(p, idx, orig + h);
        Status sp = lossAt(lp);
        set(p, idx, orig - h);
        Status sm = lossAt(lm);
        set(p, idx, orig);
        if (!sp.ok())
          return error(sp);
        if (!sm.ok())
          return error(sm);
        double fd = (lp - lm) / (2 * h), an = analytic[k][idx];
        double err =
            std::fabs(fd - an) / std::max({std::fabs(fd), std::fabs(an), 1e-3});
        maxErr = std::max(maxErr, err);
      }
      worst = std::max(worst, maxErr / tol);
      std::fprintf(out,
                   "gradcheck %-40s %6" PRId64 " of %8" PRId64
                   " elements | max rel error %.2e%s\n",
                   name, count, n, maxErr, maxErr > tol ? "  <-- FAIL" : "");
    }
    bool ok = worst <= 1.0;
    std::fprintf(out, "gradcheck: loss %.10g | %s (bound %.0e)\n", base,
                 ok ? "OK" : "FAILED", tolUsed);
    std::fflush(out);
    return ok ? 0 : 1;
  }

  // The ranks: threads of this process around an in-process world whose
  // manifest is the compiled one; one rank runs on this thread.
  std::unique_ptr<comm::InProcessWorld> world;
  std::vector<std::unique_ptr<Communicator>> staged; // on a device
  if (W > 1 && !distributed) {
    world = std::make_unique<comm::InProcessWorld>(
        W, G, spec.collectives, spec.numCollectives, timeout);
    if (device)
      for (int r = 0; r < W; ++r)
        staged.push_back(device->wrapInProcess(world->comm(r)));
  }
  // Runs one step on every rank; the error lines, empty when all went well.
  auto runStep = [&](int64_t step) -> std::vector<std::string> {
    std::string at = format("step %" PRId64 ": ", step);
    if (!world) {
      Status s = stepOn(rank0, nccl.get(), step, /*all=*/false);
      if (!s.ok())
        return {(distributed ? format("rank %d: ", env.rank) : "") + at +
                s.message()};
      return {};
    }
    world->beginStep();
    std::vector<Status> st(static_cast<size_t>(W));
    auto body = [&](int r) {
      RankState &rs = *ranks[size_t(r)];
      try {
        st[size_t(r)] =
            stepOn(rs, device ? staged[size_t(r)].get() : world->comm(r), step,
                   /*all=*/false);
      } catch (const std::bad_alloc &) {
        st[size_t(r)] =
            Status::error(StatusCode::OutOfMemory, "out of host memory");
      } catch (const std::exception &e) {
        st[size_t(r)] = Status::error(StatusCode::InvalidArgument, e.what());
      }
      if (!st[size_t(r)].ok())
        world->abort(r, st[size_t(r)].message());
      else
        world->finishStep(r);
    };
    std::vector<std::thread> threads;
    for (int r = 1; r < W; ++r)
      threads.emplace_back(body, r);
    body(0);
    for (auto &t : threads)
      t.join();
    // The rank whose failure aborted the world first, then any other rank
    // that failed on its own (not with "rank F failed: ...").
    std::vector<std::string> lines;
    auto line = [&](int r) {
      std::string m = st[size_t(r)].message();
      std::string prefix = "rank " + std::to_string(r) + ": ";
      if (m.compare(0, prefix.size(), prefix) == 0)
        m = m.substr(prefix.size());
      return prefix + at + m;
    };
    int root = world->failedRank();
    if (root >= 0 && !st[size_t(root)].ok())
      lines.push_back(line(root));
    std::string secondary = "rank " + std::to_string(root) + " failed: ";
    for (int r = 0; r < W; ++r)
      if (r != root && !st[size_t(r)].ok() &&
          st[size_t(r)].message().find(secondary) == std::string::npos)
        lines.push_back(line(r));
    if (lines.empty() && root >= 0)
      lines.push_back("rank " + std::to_string(root) + ": " + at +
                      world->failure());
    if (lines.empty() && spec.collectives)
      for (int r = 0; r < W; ++r) {
        int64_t calls = world->callsThisStep(r);
        if (calls != spec.numCollectives)
          lines.push_back(format("rank %d: ", r) + at +
                          format("issued %" PRId64
                                 " collectives, but the manifest has %d per "
                                 "step",
                                 calls, spec.numCollectives));
      }
    return lines;
  };

  // Per-parameter tensors of a sharded bucket: the shards of group 0 (the
  // ranks of replica 0) in order, unpacked by BucketEntry without padding.
  std::vector<Memory> dumpMemory;
  auto gatherBucket = [&](int b, const std::function<Tensor(int)> &shardOf,
                          std::vector<io::NamedTensor> &list) -> Status {
    const BucketSpec &bk = spec.buckets[b];
    Memory m;
    Tensor flat;
    if (Status s =
            allocateTensor(TensorSpec{bk.dtype, 1, {bk.paddedNumel}},
                           std::string("bucket '") + bk.name + "'", m, flat);
        !s.ok())
      return s;
    size_t shardBytes = size_t(bk.paddedNumel / G) * dtypeSize(bk.dtype);
    for (int g = 0; g < G; ++g)
      std::memcpy(static_cast<char *>(flat.data) + size_t(g) * shardBytes,
                  shardOf(g).data, shardBytes);
    unpackBucket(spec, shapes, b, flat.data, list);
    dumpMemory.push_back(std::move(m));
    return Status();
  };

  // Every gradient of the last step by parameter name, unpacked from the
  // ranks' bucket shards (host copies; brought back from a device first).
  auto collectGrads = [&](std::vector<io::NamedTensor> &grads) -> Status {
    if (Status s = fetch(layout.grads, /*args=*/false); !s.ok())
      return s;
    for (int r : layout.grads) {
      if (spec.results[r].bucket < 0) {
        grads.push_back({spec.results[r].name, rank0.results[r]});
        continue;
      }
      if (Status s = gatherBucket(
              spec.results[r].bucket,
              [&](int g) { return ranks[size_t(g)]->results[r]; }, grads);
          !s.ok())
        return s;
    }
    return Status();
  };
  // fp16, on a skipped step: ", in <params>" naming the gradients that hold
  // an inf or nan (and their bucket). Only then are gradients fetched; a
  // distributed rank holds only its own shards and says nothing more.
  auto nonFiniteGrads = [&](std::string &where) -> Status {
    if (distributed && W > 1)
      return Status();
    std::vector<io::NamedTensor> grads;
    if (Status s = collectGrads(grads); !s.ok())
      return s;
    std::map<std::string, int> bucketOf;
    for (int b = 0; b < spec.numBuckets; ++b)
      for (int e = 0; e < spec.buckets[b].numEntries; ++e)
        bucketOf[spec.buckets[b].entries[e].param] = b;
    std::vector<std::string> bad;
    for (const io::NamedTensor &g : grads) {
      bool finite = true;
      for (int64_t i = 0, n = g.tensor.numel(); finite && i < n; ++i)
        finite = std::isfinite(
            cpu::detail::loadAsDouble(g.tensor.data, g.tensor.dtype, i));
      if (finite)
        continue;
      auto b = bucketOf.find(g.name);
      bad.push_back(g.name + (b == bucketOf.end()
                                  ? std::string()
                                  : std::string(" (") +
                                        spec.buckets[b->second].name + ")"));
    }
    dumpMemory.clear();
    for (size_t i = 0; i < bad.size() && i < 3; ++i)
      where += (i ? ", " : " in ") + bad[i];
    if (bad.size() > 3)
      where += " and " + std::to_string(bad.size() - 3) + " more";
    return Status();
  };

  // 5. The steps.
  int64_t nonFinite = 0, skippedSteps = 0;
  double lastLoss = NAN, trainSeconds = 0;
  // The loss scaler's scale after the last step (fp16), as the program
  // reports it; the step's tensors may live on a device.
  double lossScale = spec.lossScaler.initialScale,
         hysteresis = double(spec.lossScaler.hysteresis);
  for (int64_t step = 1; step <= o.steps; ++step) {
    Clock::time_point t0 = Clock::now();
    if (!o.data.empty())
      if (Status s = tokens.sample(dataRng, slots); !s.ok())
        return error(s);
    for (auto &rs : ranks)
      for (int i = 0; i < spec.numArgs; ++i)
        if (spec.args[i].role == ArgRole::Step)
          setIntScalar(rs->args.tensors[i], step);
    std::vector<std::string> failed = runStep(step);
    if (!failed.empty()) {
      for (const std::string &l : failed)
        std::fprintf(err, "error: %s\n", l.c_str());
      std::fflush(err);
      return 1;
    }
    double dt = seconds(Clock::now() - t0);
    trainSeconds += dt;

    const std::vector<Tensor> &results = rank0.results;
    double loss = scalarValue(results[layout.loss]);
    double lr = layout.lr >= 0 ? scalarValue(results[layout.lr]) : lrHyper;
    double gradNorm =
        layout.gradNorm >= 0 ? scalarValue(results[layout.gradNorm]) : NAN;
    lastLoss = loss;
    // fp16: a skipped step says so; at the minimum scale the run stops.
    bool skipped =
        layout.overflow >= 0 && scalarValue(results[layout.overflow]) != 0;
    double scaleBefore = lossScale, hysteresisBefore = hysteresis;
    if (layout.lossScaleResult >= 0)
      lossScale = scalarValue(results[layout.lossScaleResult]);
    if (layout.hysteresisResult >= 0)
      hysteresis = scalarValue(results[layout.hysteresisResult]);
    if (skipped) {
      ++skippedSteps;
      if (spec.lossScaler.dynamic && scaleBefore <= spec.lossScaler.minScale &&
          hysteresisBefore <= 1) {
        std::fprintf(err,
                     "error: step %" PRId64 ": the gradients overflow (inf "
                     "or nan) at the minimum loss scale %g, %" PRId64
                     " steps skipped so far; fp16 cannot hold them. Try "
                     "--precision bf16, a lower learning rate (--lr), "
                     "gradient clipping (--clip 1.0), or a lower "
                     "--min-loss-scale at compile time\n",
                     step, scaleBefore, skippedSteps);
        std::fflush(err);
        return 1;
      }
      if (!o.quiet) {
        std::string where;
        if (Status s = nonFiniteGrads(where); !s.ok())
          return error(s);
        std::fprintf(out,
                     "step %" PRId64 ": gradients overflowed (inf or nan%s); "
                     "step skipped, loss scale %g -> %g\n",
                     step, where.c_str(), scaleBefore, lossScale);
        std::fflush(out);
      }
    }
    if (step == 1 && !o.dumpGrads.empty()) {
      std::vector<io::NamedTensor> grads;
      if (Status s = collectGrads(grads); !s.ok())
        return error(s);
      if (Status w = io::writeSafetensors(
              o.dumpGradsTo.path, grads,
              {{"format", "pt"}, {"content", "gradients of step 1"}},
              o.dumpGradsTo.mode);
          !w.ok())
        return error(Status::error(w.code(), "--dump-grads: " + w.message()));
      dumpMemory.clear();
    }
    for (auto &rs : ranks)
      for (const auto &[r, a] : layout.updates) {
        std::swap(rs->args.tensors[a].data, rs->results[r].data);
        if (rs->dev)
          std::swap(rs->dev->args[size_t(a)].data,
                    rs->dev->results[size_t(r)].data);
      }

    if (!std::isfinite(loss)) {
      if (nonFinite++ == 0) {
        std::string hint = o.hypers.count("lr") ? "lower --lr" : "";
        if (o.hypers.count("clip"))
          hint += std::string(hint.empty() ? "" : " or ") + "set --clip";
        std::fprintf(err,
                     "warning: step %" PRId64 ": the loss is %s; training "
                     "goes on, but the parameters are probably ruined%s%s "
                     "(further non-finite losses are counted, not "
                     "reported)\n",
                     step, std::isnan(loss) ? "nan" : "infinite",
                     hint.empty() ? "" : "; ", hint.c_str());
        std::fflush(err);
      }
    }
    double rate = dt > 0 ? perStep / dt : 0;
    if (!o.quiet &&
        (step == 1 || step == o.steps || step % o.printEvery == 0)) {
      std::string line = format("step %" PRId64 "/%" PRId64 " | loss %.4f",
                                step, o.steps, loss);
      if (std::isfinite(lr) || layout.lr >= 0)
        line += format(" | lr %.2e", lr);
      if (layout.gradNorm >= 0)
        line += format(" | grad norm %.3f", gradNorm);
      if (spec.lossScaler.enabled)
        line += format(" | scale %g", lossScale);
      if (skippedSteps > 0)
        line += format(" | skipped %" PRId64, skippedSteps);
      line += format(" | %.0f %s", rate, tokenUnits ? "tok/s" : "samples/s");
      std::fprintf(out, "%s\n", line.c_str());
      std::fflush(out);
    }
    if (log) {
      std::string json =
          format("{\"step\":%" PRId64, step) + ",\"loss\":" + jsonNumber(loss);
      if (std::isfinite(lr) || layout.lr >= 0)
        json += ",\"lr\":" + jsonNumber(lr);
      if (layout.gradNorm >= 0)
        json += ",\"grad_norm\":" + jsonNumber(gradNorm);
      if (spec.lossScaler.enabled)
        json += ",\"loss_scale\":" + jsonNumber(lossScale) +
                ",\"skipped\":" + (skipped ? "true" : "false") +
                ",\"skipped_steps\":" + std::to_string(skippedSteps);
      json += ",\"step_time_s\":" + jsonNumber(dt);
      json += std::string(tokenUnits ? ",\"tokens_per_s\":"
                                     : ",\"samples_per_s\":") +
              jsonNumber(rate);
      json += ",\"elapsed_s\":" + jsonNumber(seconds(Clock::now() - start));
      json += "}\n";
      if (std::fputs(json.c_str(), log) < 0 || std::fflush(log) != 0)
        return error(
            fail("--log " + o.log + ": write failed: " + std::strerror(errno)));
    }
  }

  if (log) {
    std::FILE *f = log;
    closeLog.f = log = nullptr;
    if (std::fclose(f) != 0)
      return error(
          fail("--log " + o.log + ": write failed: " + std::strerror(errno)));
  }

  // 6. Summary and dumps.
  auto arenaPeak = [&] {
    size_t peak = 0;
    for (auto &rs : ranks)
      peak = std::max(peak, rs->dev ? rs->dev->arena.peak() : rs->arena.peak());
    return peak;
  };
  if (nonFinite > 1)
    std::fprintf(err,
                 "warning: %" PRId64 " of %" PRId64
                 " steps had a non-finite loss\n",
                 nonFinite, o.steps);
  if (!o.quiet && o.steps > 0) {
    std::fprintf(
        out,
        "done: %" PRId64 " steps in %.3f s (%.4f s/step) | final "
        "loss %.4f | %.0f %s | arena peak %s\n",
        o.steps, trainSeconds, trainSeconds / double(o.steps), lastLoss,
        trainSeconds > 0 ? perStep * double(o.steps) / trainSeconds : 0.0,
        tokenUnits ? "tok/s" : "samples/s",
        humanBytes(double(arenaPeak())).c_str());
    if (device) {
      size_t peak = 0, tensorBytes = 0;
      for (auto &rs : ranks) {
        size_t now = 0, p = 0;
        if (device->bindRank(rs->id, rs->gpu).ok() &&
            device->memoryInUse(now, p).ok())
          peak = std::max(peak, p);
      }
      for (const Tensor &t : rank0.args.tensors)
        tensorBytes += t.nbytes();
      for (const Tensor &t : rank0.results)
        tensorBytes += t.nbytes();
      std::fprintf(out,
                   "gpu memory: peak %s per rank = step tensors %s + arena "
                   "%s (the compiler's plan) + library workspaces %s\n",
                   humanBytes(double(peak)).c_str(),
                   humanBytes(double(tensorBytes)).c_str(),
                   humanBytes(double(spec.arenaBytes)).c_str(),
                   humanBytes(double(peak) - double(tensorBytes) -
                              double(spec.arenaBytes))
                       .c_str());
    }
    std::fflush(out);
  }
  if (!o.dumpParams.empty()) {
    std::vector<int> kept = layout.params;
    kept.insert(kept.end(), layout.buffers.begin(), layout.buffers.end());
    if (Status s = fetch(kept, /*args=*/true); !s.ok())
      return error(s);
    std::vector<io::NamedTensor> tensors;
    for (int i : layout.params) {
      if (spec.args[i].bucket < 0) {
        tensors.push_back({spec.args[i].name, rank0.args.tensors[i]});
        continue;
      }
      if (Status s = gatherBucket(
              spec.args[i].bucket,
              [&](int g) { return ranks[size_t(g)]->args.tensors[i]; },
              tensors);
          !s.ok())
        return error(s);
    }
    for (int i : layout.buffers)
      tensors.push_back({spec.args[i].name, rank0.args.tensors[i]});
    if (Status w = io::writeSafetensors(
            o.dumpParamsTo.path, tensors,
            {{"format", "pt"},
             {"content",
              format("parameters and buffers after %" PRId64 " steps",
                     o.steps)}},
            o.dumpParamsTo.mode);
        !w.ok())
      return error(Status::error(w.code(), "--dump-params: " + w.message()));
    if (!o.quiet)
      std::fprintf(out, "wrote %s (%zu tensors)\n", o.dumpParams.c_str(),
                   tensors.size());
  }
  return 0;
}

} // namespace

//===----------------------------------------------------------------------===//
// Public entry points of run.h
//===----------------------------------------------------------------------===//

RandomInit randomInitRule(ArgRole role, const std::string &name,
                          const TensorSpec &type) {
  std::string n = lower(name);
  if (role == ArgRole::Buffer) {
    if (endsWith(n, "running_var"))
      return RandomInit::Ones;
    if (endsWith(n, "running_mean") || endsWith(n, "num_batches_tracked"))
      return RandomInit::Zeros;
    return RandomInit::FromModel;
  }
  if (!isFloat(type.dtype))
    return RandomInit::Zeros;
  if (type.rank >= 2)
    return RandomInit::Normal;
  if (endsWith(n, "bias") || endsWith(n, "beta"))
    return RandomInit::Zeros;
  if (endsWith(n, "weight") || endsWith(n, "scale") || endsWith(n, "gamma"))
    return RandomInit::Ones;
  return RandomInit::Zeros;
}

int run(const ProgramSpec &spec, int argc, char **argv, std::FILE *out,
        std::FILE *err) {
  try {
    return runImpl(spec, argc, argv, out, err);
  } catch (const std::bad_alloc &) {
    std::fprintf(err, "error: out of host memory\n");
  } catch (const std::exception &e) {
    std::fprintf(err, "error: %s\n", e.what());
  }
  std::fflush(err);
  return 1;
}

} // namespace program
} // namespace dsc
