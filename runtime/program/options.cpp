//===- options.cpp - The program's options and --help ---------------------===//

#include "program/shell.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace dsc::program {

namespace {

// 2. Options
//===----------------------------------------------------------------------===//

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

/// spec.runDefaults as words: split at blanks; '...' quotes a word.
std::vector<std::string> splitDefaults(const char *line) {
  std::vector<std::string> words;
  if (!line)
    return words;
  std::string word;
  bool inWord = false, quoted = false;
  for (const char *c = line; *c; ++c) {
    if (quoted) {
      if (*c == '\'')
        quoted = false;
      else
        word += *c;
    } else if (*c == '\'') {
      quoted = inWord = true;
    } else if (*c == ' ' || *c == '\t' || *c == '\n') {
      if (inWord)
        words.push_back(word);
      word.clear();
      inWord = false;
    } else {
      word += *c;
      inWord = true;
    }
  }
  if (inWord)
    words.push_back(word);
  return words;
}

Status parseArgs(const ProgramSpec &spec, const Layout &layout, int argc,
                 char **argv, Options &o);

} // namespace

Status parseOptions(const ProgramSpec &spec, const Layout &layout, int argc,
                    char **argv, Options &o) {
  std::vector<std::string> words = splitDefaults(spec.runDefaults);
  if (words.empty())
    return parseArgs(spec, layout, argc, argv, o);
  // The compile's defaults first, so that argv overrides them.
  std::vector<char *> all;
  all.push_back(argc > 0 ? argv[0] : nullptr);
  for (std::string &w : words)
    all.push_back(w.data());
  for (int i = 1; i < argc; ++i)
    all.push_back(argv[i]);
  return parseArgs(spec, layout, int(all.size()), all.data(), o);
}

namespace {

Status parseArgs(const ProgramSpec &spec, const Layout &layout, int argc,
                 char **argv, Options &o) {
  std::map<std::string, std::string> hyperOptions; // --weight-decay -> name
  for (int h = 0; h < spec.numHypers; ++h) {
    o.hypers[spec.hypers[h].name] = spec.hypers[h].value;
    hyperOptions[optionName(spec.hypers[h].name)] = spec.hypers[h].name;
  }
  if (spec.nvmePath)
    o.nvmePath = spec.nvmePath; // --nvme-path overrides it
  static const std::set<std::string> valued = {
      "--steps",         "--seed",          "--batch",         "--data",
      "--data-dtype",    "--init",          "--log",           "--dump-grads",
      "--dump-params",   "--gradcheck",     "--gradcheck-tol", "--print-every",
      "--save-dir",      "--save-every",    "--keep-last",     "--resume",
      "--tensorboard",   "--mlflow",        "--csv",           "--run-name",
      "--on-save-error", "--max-bad-steps", "--nvme-path"};
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
    if (arg == "--version") {
      o.version = true;
      continue;
    }
    if (arg == "--cuda-graph" || arg == "--no-cuda-graph") {
      o.cudaGraph = arg == "--cuda-graph";
      o.cudaGraphGiven = true;
      continue;
    }
    if (arg == "--wall-clock-breakdown" || arg == "--no-wall-clock-breakdown") {
      o.wallClockBreakdown = arg == "--wall-clock-breakdown";
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
          name == "--overwrite-special" || name == "--version" ||
          name == "--wall-clock-breakdown" ||
          name == "--no-wall-clock-breakdown" || name == "--cuda-graph" ||
          name == "--no-cuda-graph")
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
      o.hypersGiven.insert(hyperOptions[name]);
    } else if (name == "--steps") {
      if (!parseInt(value, o.steps) || o.steps < 0)
        return fail("--steps expects a count >= 0, not '" + value + "'");
    } else if (name == "--seed") {
      if (!parseU64(value, o.seed))
        return fail("--seed expects an integer >= 0, not '" + value + "'");
      o.seedGiven = true;
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
    } else if (name == "--save-dir") {
      o.saveDir = value;
    } else if (name == "--save-every") {
      if (!parseInt(value, o.saveEvery) || o.saveEvery < 0)
        return fail("--save-every expects a count >= 0, not '" + value + "'");
    } else if (name == "--keep-last") {
      if (!parseInt(value, o.keepLast) || o.keepLast < 0)
        return fail("--keep-last expects a count >= 0, not '" + value + "'");
    } else if (name == "--resume") {
      o.resume = value;
    } else if (name == "--on-save-error") {
      if (value != "stop" && value != "continue")
        return fail("--on-save-error expects stop or continue, not '" + value +
                    "'");
      o.continueOnSaveError = value == "continue";
    } else if (name == "--max-bad-steps") {
      if (!parseInt(value, o.maxBadSteps) || o.maxBadSteps < 0)
        return fail("--max-bad-steps expects a count >= 0, not '" + value +
                    "'");
    } else if (name == "--tensorboard") {
      o.tensorboard = value;
    } else if (name == "--mlflow") {
      o.mlflow = value;
    } else if (name == "--csv") {
      o.csv = value;
    } else if (name == "--run-name") {
      o.runName = value;
    } else if (name == "--nvme-path") {
      o.nvmePath = value;
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
  if (o.help || o.version)
    return Status();
  if ((o.saveEvery > 0 || o.keepLast > 0) && o.saveDir.empty())
    return fail(std::string(o.saveEvery > 0 ? "--save-every" : "--keep-last") +
                " needs --save-dir DIR");
  if (o.gradcheck > 0 && (!o.saveDir.empty() || !o.resume.empty()))
    return fail("--gradcheck does not train; it takes no --save-dir or "
                "--resume");
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
  if (!layout.nvme.empty() && o.nvmePath.empty())
    return fail("this program keeps optimizer state in files on a fast disk "
                "(offload_optimizer nvme), but no directory was named: pass "
                "--nvme-path DIR (a directory on a fast local disk, NVMe; the "
                "optimizer state's files are created there and removed when "
                "the run ends)");
  return Status();
}

} // namespace

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
  if (layout.nvme.empty()) {
    opt("--nvme-path DIR", "(this program keeps no optimizer state on NVMe)");
  } else {
    opt("--nvme-path DIR", "a directory on a fast local disk (NVMe) for the");
    opt("", "  optimizer state offloaded there: its files are");
    opt("", "  created there and removed when the run ends");
    opt("", spec.nvmePath ? "  (default " + std::string(spec.nvmePath) + ")"
                          : "  (required: none was compiled in)");
  }
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
  opt("--wall-clock-breakdown", "time forward, backward, optimizer and the");
  opt("", "  collectives of every step (progress line, --log,");
  opt("", "  metrics); on a GPU each phase synchronizes it;");
  opt("", "  --no-wall-clock-breakdown undoes a compiled-in one");
  opt("--no-cuda-graph", "on a GPU, run every step's kernels one by one");
  opt("", "  (default: from the third step on, a step replays");
  opt("", "  as one captured CUDA graph where nothing in it");
  opt("", "  needs the host: no collectives, dropout or timers;");
  opt("", "  not with an offloaded optimizer, whose host work");
  opt("", "  ran slower as graph nodes: --cuda-graph captures it)");
  opt("--print-every N", "a progress line every N steps (and the first and");
  opt("", "  last); --log still gets every step");
  opt("--gradcheck N", "instead of training: compare the gradients of step 1");
  opt("", "  with central finite differences of the loss at N");
  opt("", "  elements of every parameter; exit 1 if one is off");
  opt("--gradcheck-tol X", "bound on the relative error (default 1e-6 for");
  opt("", "  float64 parameters, 2e-2 for float32)");
  std::fprintf(out, "\nCheckpoints:\n");
  opt("--save-dir DIR", "save a checkpoint at the end, on SIGTERM/SIGINT");
  opt("", "  (the step finishes, then save and exit 0) and every");
  opt("", "  --save-every steps: DIR/step_N, DIR/latest");
  opt("--save-every N", "a checkpoint every N steps (default 0: only at the");
  opt("", "  end and on a signal)");
  opt("--keep-last K", "keep only the newest K checkpoints (default all)");
  opt("--resume PATH", "continue from DIR (its latest) or DIR/step_N, at");
  opt("", "  any world size or stage; --steps is the total");
  opt("--on-save-error X", "a save that fails (disk full, I/O error): stop");
  opt("", "  (default: exit 1) or continue (a warning; the next");
  opt("", "  save retries); the previous checkpoint stays intact");
  std::fprintf(out, "\nNon-finite values:\n");
  opt("--max-bad-steps K",
      "stop (exit 1) after K consecutive steps whose loss");
  opt("", "  or gradient norm is inf or nan (default 10; 0: never");
  opt("", "  stop); each run of them is a warning naming the step");
  opt("", "  and the gradients, and is not checkpointed. fp16's");
  opt("", "  skipped steps are the loss scaler's, not counted");
  std::fprintf(out, "\nMetrics (beside --log; rank 0 writes them):\n");
  opt("--tensorboard DIR", "TensorBoard event files");
  opt("--mlflow DIR", "an MLflow file store (mlflow ui --backend-store-uri");
  opt("", "  DIR)");
  opt("--csv DIR", "DeepSpeed's csv_monitor layout: DIR/RUN/<tag>.csv");
  opt("--run-name NAME", "the run's name in MLflow and the CSV folder");
  std::fprintf(out, "\n");
  opt("--version", "what this program was compiled from and for, and the");
  opt("", "  libraries and GPUs found");
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
  std::vector<int> copies;
  for (const auto &copy : layout.computeCopies)
    copies.push_back(copy.first);
  group("compute copies", copies, false);
  std::fprintf(out, "  step scratch arena: %s\n",
               humanBytes(double(spec.arenaBytes)).c_str());
}

//===----------------------------------------------------------------------===//

} // namespace dsc::program
