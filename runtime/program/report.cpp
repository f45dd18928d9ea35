//===- report.cpp - What a run tells its user and their tools -------------===//

#include "program/report.h"
#include "io/nvme.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sys/resource.h>

namespace dsc::program {

namespace {
double peakTflops(const std::string &describe, const char *precision);
} // namespace

Reporter::~Reporter() {
  if (log_)
    std::fclose(log_);
}

double Reporter::perStep() const {
  const ProgramSpec &spec = job_.spec;
  return double(job_.W * spec.microBatch * spec.accumSteps *
                spec.tokensPerExample);
}

/// What the MLflow run and the CSV job are called, and what they record.
io::RunInfo Reporter::runInfo() const {
  const ProgramSpec &spec = job_.spec;
  const Options &o = job_.o;
  io::RunInfo info;
  info.runName = o.runName.empty() ? job_.program : o.runName;
  auto param = [&](const char *k, const std::string &v) { info.params[k] = v; };
  param("model", spec.modelPath ? spec.modelPath : "");
  param("optimizer", spec.optimizer);
  param("precision", spec.precision ? spec.precision : "fp32");
  param("world_size", std::to_string(job_.W));
  param("zero_stage", std::to_string(spec.stage));
  param("micro_batch", std::to_string(spec.microBatch));
  param("accum_steps", std::to_string(spec.accumSteps));
  param("tokens_per_example", std::to_string(spec.tokensPerExample));
  param("steps", std::to_string(o.steps));
  param("seed", std::to_string(o.seed));
  for (const auto &[name, v] : o.hypers)
    info.params["hyper/" + name] = format("%.9g", v);
  if (spec.compileCommand)
    param("compile_command", spec.compileCommand);
  if (spec.configJson)
    param("ds_config", spec.configJson);
  info.tags["dsc.target"] = spec.target ? spec.target : "";
  if (spec.dscVersion)
    info.tags["dsc.version"] = spec.dscVersion;
  if (spec.modelSha256)
    info.tags["dsc.model_sha256"] = spec.modelSha256;
  return info;
}

Status Reporter::open() {
  const Options &o = job_.o;
  if (!o.log.empty())
    if (Status s = io::openOutputStream(o.logTo, &log_); !s.ok())
      return fail("--log " + o.log + ": " + s.message());
  if (job_.distributed && job_.env.rank != 0)
    return Status(); // rank 0 writes the metrics
  struct Kind {
    const char *option;
    const std::string &dir;
    Status (*open)(const std::string &, const io::RunInfo &,
                   std::unique_ptr<io::MetricsSink> &);
  } kinds[] = {{"--tensorboard", o.tensorboard, io::openTensorBoard},
               {"--mlflow", o.mlflow, io::openMlflow},
               {"--csv", o.csv, io::openCsvMonitor}};
  io::RunInfo info = runInfo();
  for (const Kind &k : kinds) {
    if (k.dir.empty())
      continue;
    std::unique_ptr<io::MetricsSink> sink;
    if (Status s = k.open(k.dir, info, sink); !s.ok())
      return Status::error(s.code(), std::string(k.option) + " " + k.dir +
                                         ": " + s.message());
    sinks_.push_back({k.option, std::move(sink)});
  }
  return Status();
}

void Reporter::banner(const std::string &initWhat, const std::string &dataWhat,
                      const std::string &deviceWhat, int64_t firstStep) {
  firstStep_ = firstStep;
  nvmeAtStart_ = nvmeLast_ = io::nvmeTraffic();
  if (job_.device) {
    // In-process ranks may share a GPU: its work is theirs together.
    int gpus = std::max(1, std::min(job_.W, job_.device->count()));
    int perGpu = job_.distributed ? 1 : (job_.W + gpus - 1) / gpus;
    peakTflops_ = peakTflops(deviceWhat, job_.spec.precision) / perGpu;
  }
  const Options &o = job_.o;
  if (o.quiet)
    return;
  const ProgramSpec &spec = job_.spec;
  const int W = job_.W, G = job_.G;
  std::FILE *out = job_.out;
  double paramElems = 0, paramBytes = 0;
  std::set<int> countedBuckets;
  for (int i : job_.layout.params) {
    const ArgSpec &a = spec.args[i];
    if (a.bucket < 0) {
      paramElems += double(numelOf(a.type));
      paramBytes += double(numelOf(a.type)) * double(dtypeSize(a.type.dtype));
    } else if (countedBuckets.insert(a.bucket).second) {
      const BucketSpec &bk = spec.buckets[a.bucket];
      for (int e = 0; e < bk.numEntries; ++e) {
        paramElems += double(bk.entries[e].numel);
        paramBytes += double(bk.entries[e].numel) * double(dtypeSize(bk.dtype));
      }
    }
  }
  int64_t global = W * spec.microBatch * spec.accumSteps;
  std::fprintf(
      out, "%s: %s | %s, %s | %s parameters (%s) | global batch %" PRId64 " = ",
      job_.program.c_str(),
      baseName(spec.modelPath ? spec.modelPath : "?").c_str(), spec.optimizer,
      spec.precision ? spec.precision : "fp32", humanCount(paramElems).c_str(),
      humanBytes(paramBytes).c_str(), global);
  if (W > 1)
    std::fprintf(out, "%d ranks x ", W);
  std::fprintf(out, "%" PRId64 " x %" PRId64, spec.microBatch, spec.accumSteps);
  if (tokenUnits())
    std::fprintf(out, " x %" PRId64 " tokens", spec.tokensPerExample);
  std::fprintf(out, " | arena %s%s",
               humanBytes(double(spec.arenaBytes)).c_str(),
               W > 1 ? " per rank" : "");
  if (W > 1) {
    std::fprintf(out, " | %d ranks (%s), ZeRO stage %d", W,
                 job_.distributed ? "one process per GPU"
                                  : "in-process threads",
                 spec.stage);
    if (G < W)
      std::fprintf(out, ", groups of %d", G);
  }
  std::fprintf(out, "\n");
  if (job_.device)
    std::fprintf(out, "device: %s\n", deviceWhat.c_str());
  std::string steps =
      firstStep > 1 ? format("steps %" PRId64 "-%" PRId64, firstStep, o.steps)
                    : format("%" PRId64 " steps", o.steps);
  std::fprintf(out, "init: %s | data: %s | %s, seed %" PRIu64 "\n",
               initWhat.c_str(), dataWhat.c_str(), steps.c_str(), o.seed);
  if (size_t bytes = io::nvmeBytes())
    std::fprintf(out,
                 "nvme: %s of optimizer state in files under %s (removed "
                 "when the run ends)\n",
                 humanBytes(double(bytes)).c_str(), o.nvmePath.c_str());
  std::fflush(out);
}

/// Peak bytes of this process's step: device memory in use (rank 0's GPU),
/// or the host's resident set.
size_t Reporter::peakMemory() const {
  if (job_.device) {
    size_t peak = 0, tensors = 0;
    ranks_.deviceMemory(peak, tensors);
    return peak;
  }
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return size_t(ru.ru_maxrss) * 1024; // KiB on Linux
}

namespace {

/// The dense tensor-core peak of the step's precision on the GPU
/// `describe` names, TFLOP/s (DSC_PEAK_TFLOPS overrides; 0: unknown).
double peakTflops(const std::string &describe, const char *precision) {
  if (const char *env = std::getenv("DSC_PEAK_TFLOPS")) {
    char *end = nullptr;
    double v = std::strtod(env, &end);
    if (end != env && v > 0)
      return v;
  }
  bool half = precision && std::strcmp(precision, "fp32") != 0;
  struct Peak {
    const char *name;
    double half, tf32;
  } peaks[] = {
      {"H200", 989.4, 494.7},  {"H100", 989.4, 494.7}, {"H800", 989.4, 494.7},
      {"GH200", 989.4, 494.7}, {"B200", 2250, 1100},   {"A100", 312, 156},
      {"A800", 312, 156},      {"L40S", 362, 183},     {"A10", 125, 62.5}};
  for (const Peak &p : peaks)
    if (describe.find(p.name) != std::string::npos)
      return half ? p.half : p.tf32;
  return 0;
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0)
    return "?";
  int64_t t = int64_t(s + 0.5);
  if (t < 60)
    return format("%" PRId64 "s", t);
  if (t < 3600)
    return format("%" PRId64 "m%02" PRId64 "s", t / 60, t % 60);
  return format("%" PRId64 "h%02" PRId64 "m", t / 3600, (t % 3600) / 60);
}

} // namespace

std::string Reporter::progressLine(const StepRecord &r, double rate,
                                   size_t peak) {
  const Layout &l = job_.layout;
  const ProgramSpec &spec = job_.spec;
  std::string line = format("step %" PRId64 "/%" PRId64 " | loss %.4f", r.step,
                            job_.o.steps, r.loss);
  if (std::isfinite(r.lr) || l.lr >= 0)
    line += format(" | lr %.2e", r.lr);
  if (l.gradNorm >= 0)
    line += format(" | grad norm %.3f", r.gradNorm);
  if (spec.lossScaler.enabled)
    line += format(" | scale %g", r.lossScale);
  if (r.skippedSteps > 0)
    line += format(" | skipped %" PRId64, r.skippedSteps);
  line += format(" | %.0f %s", rate, tokenUnits() ? "tok/s" : "samples/s");
  if (r.comm >= 0)
    line +=
        format(" | fwd %.1f bwd %.1f opt %.1f comm %.1f ms", 1e3 * r.phase[0],
               1e3 * r.phase[1], 1e3 * r.phase[2], 1e3 * r.comm);
  if (peakTflops_ > 0 && spec.flopsPerStep > 0 && r.seconds > 0)
    line += format(" | MFU %.1f%%", 100.0 * spec.flopsPerStep / r.seconds /
                                        (peakTflops_ * 1e12));
  if (peak)
    line += " | mem " + humanBytes(double(peak));
  double elapsed = seconds(Clock::now() - job_.start);
  double left = double(job_.o.steps - r.step) * stepSeconds_ /
                double(std::max<int64_t>(stepsRun_, 1));
  line += " | elapsed " + duration(elapsed);
  if (r.step < job_.o.steps)
    line += " | eta " + duration(left);
  return line;
}

Status Reporter::logLine(const StepRecord &r, double rate) {
  const Layout &l = job_.layout;
  const ProgramSpec &spec = job_.spec;
  std::string json =
      format("{\"step\":%" PRId64, r.step) + ",\"loss\":" + jsonNumber(r.loss);
  if (std::isfinite(r.lr) || l.lr >= 0)
    json += ",\"lr\":" + jsonNumber(r.lr);
  if (l.gradNorm >= 0)
    json += ",\"grad_norm\":" + jsonNumber(r.gradNorm);
  if (spec.lossScaler.enabled)
    json += ",\"loss_scale\":" + jsonNumber(r.lossScale) +
            ",\"skipped\":" + (r.skipped ? "true" : "false") +
            ",\"skipped_steps\":" + std::to_string(r.skippedSteps);
  json += ",\"step_time_s\":" + jsonNumber(r.seconds);
  if (r.comm >= 0)
    json += ",\"forward_s\":" + jsonNumber(r.phase[0]) +
            ",\"backward_s\":" + jsonNumber(r.phase[1]) +
            ",\"optimizer_s\":" + jsonNumber(r.phase[2]) +
            ",\"comm_s\":" + jsonNumber(r.comm);
  json +=
      std::string(tokenUnits() ? ",\"tokens_per_s\":" : ",\"samples_per_s\":") +
      jsonNumber(rate);
  if (io::nvmeBytes()) { // the step's traffic to and from its NVMe files
    io::NvmeTraffic t = io::nvmeTraffic();
    json += ",\"nvme_read_bytes\":" +
            std::to_string(t.readBytes - nvmeLast_.readBytes) +
            ",\"nvme_written_bytes\":" +
            std::to_string(t.writtenBytes - nvmeLast_.writtenBytes);
  }
  json += ",\"elapsed_s\":" + jsonNumber(seconds(Clock::now() - job_.start));
  json += "}\n";
  if (std::fputs(json.c_str(), log_) < 0 || std::fflush(log_) != 0)
    return fail("--log " + job_.o.log +
                ": write failed: " + std::strerror(errno));
  return Status();
}

Status Reporter::step(const StepRecord &r) {
  stepSeconds_ += r.seconds;
  ++stepsRun_;
  double rate = r.seconds > 0 ? perStep() / r.seconds : 0;
  const Options &o = job_.o;
  bool print = !o.quiet && (r.step == firstStep_ || r.step == o.steps ||
                            r.step % o.printEvery == 0);
  // Read once: on a device it asks every rank's GPU.
  size_t peak = print || !sinks_.empty() ? peakMemory() : 0;
  if (print) {
    std::fprintf(job_.out, "%s\n", progressLine(r, rate, peak).c_str());
    std::fflush(job_.out);
  }
  if (log_)
    if (Status s = logLine(r, rate); !s.ok())
      return s;
  nvmeLast_ = io::nvmeTraffic();
  return sinks(r, rate, peak);
}

Status Reporter::sinks(const StepRecord &r, double rate, size_t peak) {
  if (sinks_.empty())
    return Status();
  const Layout &l = job_.layout;
  const ProgramSpec &spec = job_.spec;
  double now = std::chrono::duration<double>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  std::vector<std::pair<const char *, double>> values = {
      {"train/loss", r.loss}};
  if (std::isfinite(r.lr) || l.lr >= 0)
    values.push_back({"train/lr", r.lr});
  if (l.gradNorm >= 0)
    values.push_back({"train/grad_norm", r.gradNorm});
  if (spec.lossScaler.enabled) {
    values.push_back({"train/loss_scale", r.lossScale});
    values.push_back({"train/skipped_steps", double(r.skippedSteps)});
  }
  values.push_back(
      {tokenUnits() ? "train/tokens_per_s" : "train/samples_per_s", rate});
  values.push_back(
      {"train/samples",
       double(r.step) * double(job_.W * spec.microBatch * spec.accumSteps)});
  values.push_back({"time/step_s", r.seconds});
  if (r.comm >= 0) {
    values.push_back({"time/forward_s", r.phase[0]});
    values.push_back({"time/backward_s", r.phase[1]});
    values.push_back({"time/optimizer_s", r.phase[2]});
    values.push_back({"time/comm_s", r.comm});
  }
  if (peak)
    values.push_back({"memory/peak_bytes", double(peak)});
  for (auto &[option, sink] : sinks_) {
    for (const auto &[tag, v] : values)
      if (Status s = sink->scalar(tag, v, r.step, now); !s.ok())
        return Status::error(s.code(),
                             std::string(option) + ": " + s.message());
    if (Status s = sink->flush(); !s.ok())
      return Status::error(s.code(), std::string(option) + ": " + s.message());
  }
  return Status();
}

Status Reporter::close(bool ok) {
  for (auto &[option, sink] : sinks_)
    if (Status s = sink->close(ok); !s.ok() && ok)
      return Status::error(s.code(), std::string(option) + ": " + s.message());
  sinks_.clear();
  if (log_) {
    std::FILE *f = log_;
    log_ = nullptr;
    if (std::fclose(f) != 0)
      return fail("--log " + job_.o.log +
                  ": write failed: " + std::strerror(errno));
  }
  return Status();
}

void Reporter::summary(int64_t steps, double trainSeconds, double lastLoss,
                       int64_t nonFinite) {
  const Options &o = job_.o;
  const ProgramSpec &spec = job_.spec;
  if (nonFinite > 1)
    job_.warn(format("%" PRId64 " of %" PRId64 " steps had a non-finite loss",
                     nonFinite, steps));
  if (o.quiet || steps <= 0)
    return;
  std::FILE *out = job_.out;
  std::fprintf(out,
               "done: %" PRId64 " steps in %.3f s (%.4f s/step) | final "
               "loss %.4f | %.0f %s | arena peak %s\n",
               steps, trainSeconds, trainSeconds / double(steps), lastLoss,
               trainSeconds > 0 ? perStep() * double(steps) / trainSeconds
                                : 0.0,
               tokenUnits() ? "tok/s" : "samples/s",
               humanBytes(double(ranks_.arenaPeak())).c_str());
  if (size_t bytes = io::nvmeBytes()) {
    io::NvmeTraffic t = io::nvmeTraffic();
    double read = double(t.readBytes - nvmeAtStart_.readBytes),
           written = double(t.writtenBytes - nvmeAtStart_.writtenBytes);
    std::fprintf(out, "nvme: %s under %s | per step read %s, written %s\n",
                 humanBytes(double(bytes)).c_str(), o.nvmePath.c_str(),
                 humanBytes(read / double(steps)).c_str(),
                 humanBytes(written / double(steps)).c_str());
  }
  if (job_.device) {
    size_t peak = 0, tensorBytes = 0;
    ranks_.deviceMemory(peak, tensorBytes);
    std::fprintf(
        out,
        "gpu memory: peak %s per rank = step tensors %s + arena "
        "%s (the compiler's plan) + library workspaces %s\n",
        humanBytes(double(peak)).c_str(),
        humanBytes(double(tensorBytes)).c_str(),
        humanBytes(double(spec.arenaBytes)).c_str(),
        humanBytes(double(peak) - double(tensorBytes) - double(spec.arenaBytes))
            .c_str());
    size_t fixedBytes = 0, scratchBytes = 0;
    std::string scratchFor;
    ranks_.deviceWorkspaces(fixedBytes, scratchBytes, scratchFor);
    if (fixedBytes + scratchBytes)
      std::fprintf(out,
                   "library workspaces: %s fixed (cuBLASLt) + scratch %s%s%s\n",
                   humanBytes(double(fixedBytes)).c_str(),
                   humanBytes(double(scratchBytes)).c_str(),
                   scratchFor.empty() ? "" : ", sized by ", scratchFor.c_str());
    size_t hostTensors = 0, hostArena = 0;
    ranks_.pinnedMemory(hostTensors, hostArena);
    if (hostTensors + hostArena)
      std::fprintf(out,
                   "pinned host memory: %s per rank = offloaded tensors %s + "
                   "host arena %s\n",
                   humanBytes(double(hostTensors + hostArena)).c_str(),
                   humanBytes(double(hostTensors)).c_str(),
                   humanBytes(double(hostArena)).c_str());
    // The whole process on the host: pinned memory, the host copies of
    // what the program reads back, the CUDA libraries' own.
    struct rusage ru {};
    if (getrusage(RUSAGE_SELF, &ru) == 0)
      std::fprintf(out, "host memory: peak resident %s (this process)\n",
                   humanBytes(double(ru.ru_maxrss) * 1024).c_str());
  }
  std::fflush(out);
}

} // namespace dsc::program
