//===- program.cpp - runProgram: the shell around a compiled step ---------===//
//
// What a user of a compiled program touches, as a job in named steps (each
// part in its own file, see shell.h):
//
//   1. the job: check the spec (a malformed one is a code-generation bug,
//      reported as an error, never a crash), parse the options, find the
//      launcher's ranks
//   2. the ranks: allocate every argument and result
//   3. initialize parameters and buffers (--init) or resume a checkpoint,
//      set hyperparameters; place the ranks on their devices
//   4. open the data (--batch or --data)
//   5. run the steps: sample, set Step, call the step on every rank,
//      report, save checkpoints
//   6. summary and dumps
//
// Every failure is one `error: ...` line on stderr and exit code 1.
//
//===----------------------------------------------------------------------===//

#include "dsc/program.h"
#include "io/checkpoint.h"
#include "io/output_file.h"
#include "program/checkpointing.h"
#include "program/convert.h"
#include "program/feed.h"
#include "program/gradcheck.h"
#include "program/ranks.h"
#include "program/report.h"
#include "program/run.h"
#include "program/shell.h"
#include "program/version.h"

#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstring>
#include <new>

namespace dsc {

int runProgram(const ProgramSpec &spec, int argc, char **argv) {
  // Past a file size limit (ulimit -f) a write then fails with EFBIG, which
  // is reported with the file's name, instead of killing the run unnamed.
  std::signal(SIGXFSZ, SIG_IGN);
  return program::run(spec, argc, argv, stdout, stderr);
}

namespace program {

namespace {

int error(const Job &job, const Status &s) {
  std::fprintf(job.err, "error: %s\n", s.message().c_str());
  std::fflush(job.err);
  return 1;
}

//===----------------------------------------------------------------------===//
// 1. The job
//===----------------------------------------------------------------------===//

/// Where this process stands: every rank as a thread of this process, or
/// (a device program launched by torchrun, srun, mpirun or dsrun) one rank
/// per process, talking over NCCL.
Status findRanks(Job &job) {
  const int W = job.W;
  launch::DistEnv &env = job.env;
  if (Status s = launch::readDistEnv(env); !s.ok())
    return s;
  job.distributed = env.present && job.device;
  if (env.present && !job.device && env.worldSize > 1)
    return fail("this program was compiled for the CPU (--target cpu), whose "
                "ranks are threads of one process, but " +
                env.source + " started " + std::to_string(env.worldSize) +
                " processes; run it once without a launcher, or compile with "
                "--target cuda for one process per GPU");
  if (job.distributed && env.worldSize != W)
    return fail(format(
        "this program was compiled for %d rank%s (--world-size), but %s "
        "started %d process%s (WORLD_SIZE); launch %d, or recompile with "
        "--world-size %d",
        W, W == 1 ? "" : "s", env.source.c_str(), env.worldSize,
        env.worldSize == 1 ? "" : "es", W, env.worldSize));
  if (job.distributed && W > 1 &&
      (!job.o.dumpGrads.empty() || !job.o.dumpParams.empty()))
    return fail("--dump-grads and --dump-params are not supported yet in a "
                "run of one process per GPU with more than one rank; run the "
                "ranks in one process (no launcher) to dump");
  if (job.distributed && env.rank != 0) {
    job.o.quiet = true; // rank 0 reports for all
    job.o.log.clear();
  }
  if (W > 1 || job.distributed) {
    std::string warning;
    job.timeout = comm::collectiveTimeoutFromEnv(&warning);
    if (!warning.empty())
      job.warn(warning);
  }
  return Status();
}

/// What a killed run left behind goes first. Temporaries lie next to the
/// file written (a followed link's target).
void removeStaleOutputs(const Job &job) {
  for (const io::OutputTarget *dump : {&job.o.dumpGradsTo, &job.o.dumpParamsTo})
    if (!dump->path.empty() && dump->mode == io::WriteMode::Atomic)
      for (const std::string &stale : io::removeStaleTemporaries(dump->path))
        job.note("removed " + stale +
                 ", a temporary file left by an interrupted run");
}

//===----------------------------------------------------------------------===//
// 5. The steps
//===----------------------------------------------------------------------===//

struct LoopState {
  int64_t nonFinite = 0, skippedSteps = 0, stepsRun = 0;
  // fp32/bf16: the current run of consecutive non-finite steps.
  int64_t badInARow = 0, firstBad = 0;
  std::string firstBadWhere;
  bool lastBad = false; // the step just run: not checkpointed
  double lastLoss = NAN, trainSeconds = 0;
  // The loss scaler's scale after the last step (fp16), as the program
  // reports it; the step's tensors may live on a device.
  double lossScale = NAN, hysteresis = NAN;
};

/// fp16: a skipped step says so; at the minimum scale the run stops.
Status checkOverflow(Job &job, Ranks &ranks, const StepRecord &r,
                     double scaleBefore, double hysteresisBefore) {
  const LossScalerSpec &ls = job.spec.lossScaler;
  if (ls.dynamic && scaleBefore <= ls.minScale && hysteresisBefore <= 1)
    return fail(
        format("step %" PRId64 ": the gradients overflow (inf or nan) at the "
               "minimum loss scale %g, %" PRId64 " steps skipped so far; fp16 "
               "cannot hold them. Try --precision bf16, a lower learning rate "
               "(--lr), gradient clipping (--clip 1.0), or a lower "
               "--min-loss-scale at compile time",
               r.step, scaleBefore, r.skippedSteps));
  if (job.o.quiet)
    return Status();
  std::string where;
  if (Status s = ranks.nonFiniteGrads(where); !s.ok())
    return s;
  std::fprintf(job.out,
               "step %" PRId64 ": gradients overflowed (inf or nan%s); "
               "step skipped, loss scale %g -> %g\n",
               r.step, where.c_str(), scaleBefore, r.lossScale);
  std::fflush(job.out);
  return Status();
}

/// The scalars of the step just run, from rank 0's host results.
StepRecord readStep(Job &job, Ranks &ranks, int64_t step, LoopState &st) {
  const Layout &layout = job.layout;
  const std::vector<Tensor> &results = ranks.rank0().results;
  StepRecord r;
  r.step = step;
  r.loss = scalarValue(results[layout.loss]);
  r.lr = layout.lr >= 0 ? scalarValue(results[layout.lr]) : ranks.lrHyper();
  r.gradNorm =
      layout.gradNorm >= 0 ? scalarValue(results[layout.gradNorm]) : NAN;
  r.skipped =
      layout.overflow >= 0 && scalarValue(results[layout.overflow]) != 0;
  if (layout.lossScaleResult >= 0)
    st.lossScale = scalarValue(results[layout.lossScaleResult]);
  if (layout.hysteresisResult >= 0)
    st.hysteresis = scalarValue(results[layout.hysteresisResult]);
  if (r.skipped)
    ++st.skippedSteps;
  r.lossScale = st.lossScale;
  r.skippedSteps = st.skippedSteps;
  return r;
}

/// fp32/bf16 (an fp16 step that overflows is skipped by the loss scaler,
/// see checkOverflow): a step whose loss or gradient norm is inf or nan.
/// The first of a run of them is a warning naming the step and the first
/// non-finite gradients (tensor and bucket); --max-bad-steps in a row stop
/// the run with an error naming the step.
Status checkNonFinite(Job &job, Ranks &ranks, const StepRecord &r,
                      LoopState &st) {
  bool bad =
      !r.skipped && (!std::isfinite(r.loss) ||
                     (job.layout.gradNorm >= 0 && !std::isfinite(r.gradNorm)));
  st.lastBad = bad;
  if (!bad) {
    st.badInARow = 0;
    return Status();
  }
  ++st.nonFinite;
  const Options &o = job.o;
  if (st.badInARow++ == 0) {
    st.firstBad = r.step;
    st.firstBadWhere.clear();
    if (Status s = ranks.nonFiniteGrads(st.firstBadWhere); !s.ok())
      return s;
    std::string what = !std::isfinite(r.loss)
                           ? std::string("the loss is ") +
                                 (std::isnan(r.loss) ? "nan" : "infinite")
                           : std::string("the gradient norm is ") +
                                 (std::isnan(r.gradNorm) ? "nan" : "infinite");
    std::string grads = st.firstBadWhere.empty()
                            ? ""
                            : "; non-finite gradients" + st.firstBadWhere;
    std::string hint = o.hypers.count("lr") ? "lower --lr" : "";
    if (o.hypers.count("clip"))
      hint += std::string(hint.empty() ? "" : " or ") + "set --clip";
    std::string limit =
        o.maxBadSteps > 0
            ? format("the run stops after %" PRId64 " such steps in a row "
                     "(--max-bad-steps)",
                     o.maxBadSteps)
            : std::string("training goes on (--max-bad-steps 0)");
    job.warn(format("step %" PRId64 ": %s%s; the parameters are probably "
                    "ruined%s%s; %s, and none is checkpointed (further "
                    "non-finite steps of this run of them are counted, not "
                    "reported)",
                    r.step, what.c_str(), grads.c_str(),
                    hint.empty() ? "" : "; ", hint.c_str(), limit.c_str()));
  }
  if (o.maxBadSteps > 0 && st.badInARow >= o.maxBadSteps)
    return fail(format("step %" PRId64 ": %" PRId64 " steps in a row with a "
                       "non-finite loss or gradient norm (since step %" PRId64
                       "%s); stopping (--max-bad-steps %" PRId64
                       "). The last checkpoint, if any, predates them",
                       r.step, st.badInARow, st.firstBad,
                       st.firstBadWhere.empty()
                           ? ""
                           : (", gradients" + st.firstBadWhere).c_str(),
                       o.maxBadSteps));
  return Status();
}

/// --dump-grads / --dump-params: `tensors` into the option's file.
Status writeDump(const char *option, const io::OutputTarget &to,
                 const std::vector<io::NamedTensor> &tensors,
                 const std::string &content) {
  if (Status w = io::writeSafetensors(
          to.path, tensors, {{"format", "pt"}, {"content", content}}, to.mode);
      !w.ok())
    return Status::error(w.code(), std::string(option) + ": " + w.message());
  return Status();
}

Status dumpGrads(Job &job, Ranks &ranks, int64_t step) {
  std::vector<io::NamedTensor> grads;
  if (Status s = ranks.collectGrads(grads); !s.ok())
    return s;
  if (Status s = writeDump("--dump-grads", job.o.dumpGradsTo, grads,
                           format("gradients of step %" PRId64, step));
      !s.ok())
    return s;
  ranks.clearScratch();
  return Status();
}

/// The loss scaler's state a checkpoint brought (fp16).
void readScaler(Job &job, Ranks &ranks, LoopState &st) {
  const Layout &l = job.layout;
  if (l.lossScale >= 0)
    st.lossScale = scalarValue(ranks.rank0().args[size_t(l.lossScale)]);
  if (l.hysteresis >= 0)
    st.hysteresis = scalarValue(ranks.rank0().args[size_t(l.hysteresis)]);
}

/// One optimizer step on every rank, and what follows it.
Status trainStep(Job &job, Ranks &ranks, DataFeed &feed, Reporter &report,
                 int64_t step, LoopState &st) {
  Clock::time_point t0 = Clock::now();
  if (Status s = feed.next(ranks.slots()); !s.ok())
    return s;
  ranks.setStep(step);
  std::vector<std::string> failed = ranks.runStep(step);
  if (!failed.empty()) {
    for (size_t i = 0; i + 1 < failed.size(); ++i)
      std::fprintf(job.err, "error: %s\n", failed[i].c_str());
    return fail(failed.back());
  }
  double scaleBefore = st.lossScale, hysteresisBefore = st.hysteresis;
  StepRecord r = readStep(job, ranks, step, st);
  r.seconds = seconds(Clock::now() - t0);
  if (const StepClock *c = ranks.clock0()) {
    for (int k = 0; k < 3; ++k)
      r.phase[k] = c->seconds[k];
    r.comm = c->commSeconds;
    ranks.resetClocks();
  }
  st.trainSeconds += r.seconds;
  st.lastLoss = r.loss;
  ++st.stepsRun;
  if (r.skipped)
    if (Status s = checkOverflow(job, ranks, r, scaleBefore, hysteresisBefore);
        !s.ok())
      return s;
  if (st.stepsRun == 1 && !job.o.dumpGrads.empty())
    if (Status s = dumpGrads(job, ranks, step); !s.ok())
      return s;
  Status bad = checkNonFinite(job, ranks, r, st);
  if (Status s = ranks.swapUpdates(); !s.ok())
    return s;
  if (Status s = report.step(r); !s.ok())
    return s;
  return bad;
}

/// A checkpoint of step `step`. A failed save (its temporary folder
/// removed, the previous checkpoint intact) stops the run, or with
/// --on-save-error continue is a warning and the next save retries.
Status saveStep(Job &job, Checkpointer &ckpt, int64_t step) {
  Status s = ckpt.save(step);
  if (s.ok() || !job.o.continueOnSaveError)
    return s;
  job.warn(format("step %" PRId64 ": the checkpoint was not saved: %s; "
                  "training goes on (--on-save-error continue), the next save "
                  "retries",
                  step, s.message().c_str()));
  return Status();
}

//===----------------------------------------------------------------------===//
// 6. Dumps
//===----------------------------------------------------------------------===//

Status dumpParams(Job &job, Ranks &ranks, int64_t steps) {
  std::vector<io::NamedTensor> tensors;
  if (Status s = ranks.collectParams(tensors); !s.ok())
    return s;
  if (Status s = writeDump(
          "--dump-params", job.o.dumpParamsTo, tensors,
          format("parameters and buffers after %" PRId64 " steps", steps));
      !s.ok())
    return s;
  if (!job.o.quiet)
    std::fprintf(job.out, "wrote %s (%zu tensors)\n", job.o.dumpParams.c_str(),
                 tensors.size());
  ranks.clearScratch();
  return ranks.evictNvme(); // what the dump read of NVMe files
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

int runImpl(const ProgramSpec &spec, int argc, char **argv, std::FILE *out,
            std::FILE *err) {
  Job job(spec, out, err);
  if (Status s = checkSpec(spec, job.layout); !s.ok())
    return error(job, s);
  if (Status s = parseOptions(spec, job.layout, argc, argv, job.o); !s.ok())
    return error(job, s);
  job.program = argc > 0 && argv[0] ? baseName(argv[0]) : "program";
  if (job.o.help) {
    printHelp(spec, job.layout, job.program, out);
    std::fflush(out);
    return 0;
  }
  if (job.o.version) {
    std::fputs(formatProgramVersion(spec, /*withEnv=*/true).c_str(), out);
    std::fflush(out);
    return 0;
  }
  job.W = job.layout.worldSize;
  job.G = job.layout.groupSize;
  job.device = spec.device ? spec.device() : nullptr;
  // An offloaded optimizer's host AdamW wants every core while the GPU
  // waits: the step's waits sleep.
  if (job.device && spec.hostArenaBytes > 0)
    job.device->preferSleepingWaits();
  if (Status s = findRanks(job); !s.ok())
    return error(job, s);
  removeStaleOutputs(job);
  Ranks ranks(job);
  Reporter report(job, ranks);
  // The log is opened now, so that a bad one stops the run before anything
  // is allocated.
  if (Status s = report.open(); !s.ok())
    return error(job, s);
  DataFeed feed(job);
  Checkpointer ckpt(job, ranks, feed);
  if (Status s = ckpt.prepare(); !s.ok())
    return error(job, s);

  // 2-3. The ranks, their initial state (or a checkpoint's) and their
  // devices.
  std::string initWhat, deviceWhat;
  if (Status s = ranks.allocate(); !s.ok())
    return error(job, s);
  bool resuming = !job.o.resume.empty();
  if (Status s = ranks.initialize(initWhat, /*weights=*/!resuming); !s.ok())
    return error(job, s);
  int64_t firstStep = 1;
  if (resuming) {
    if (Status s = ckpt.resume(firstStep, initWhat); !s.ok())
      return error(job, s);
    ranks.setScalars(/*scaler=*/false); // the hyperparameters in force
  }
  ckpt.setHypers(job.o.hypers);
  if (Status s = ranks.fillComputeCopies(); !s.ok())
    return error(job, s);
  // The state the shell wrote into NVMe files goes to the disk, out of
  // host memory.
  if (Status s = ranks.evictNvme(); !s.ok())
    return error(job, s);
  if (Status s = ranks.placeOnDevice(deviceWhat); !s.ok())
    return error(job, s);

  // 4. Data, into the global batch.
  if (Status s = feed.open(ranks.slots()); !s.ok())
    return error(job, s);
  report.banner(initWhat, feed.what(), deviceWhat, firstStep);
  if (resuming && firstStep > job.o.steps)
    job.note(format("the checkpoint is at step %" PRId64
                    " and --steps is %" PRId64
                    " (the total): nothing to run; give a larger "
                    "--steps to go on",
                    firstStep - 1, job.o.steps));

  if (job.o.gradcheck > 0) {
    bool passed = false;
    if (Status s = gradcheck(job, ranks, passed); !s.ok())
      return error(job, s);
    return passed ? 0 : 1;
  }

  // 5. The steps.
  ranks.startWorld();
  LoopState st;
  st.lossScale = spec.lossScaler.initialScale;
  st.hysteresis = double(spec.lossScaler.hysteresis);
  if (resuming)
    readScaler(job, ranks, st);
  int64_t last = firstStep - 1;
  for (int64_t step = firstStep; step <= job.o.steps; ++step) {
    Status s = trainStep(job, ranks, feed, report, step, st);
    // A signal stops every rank after the same step: the processes of a
    // distributed run agree on it (a signal may reach them between steps).
    bool stop = false;
    if (s.ok() && !job.o.saveDir.empty())
      s = ranks.anyRank(Checkpointer::stopRequested(), stop);
    if (s.ok() && !st.lastBad && (ckpt.due(step) || stop))
      s = saveStep(job, ckpt, step);
    if (!s.ok()) {
      (void)report.close(false);
      return error(job, s);
    }
    last = step;
    if (stop) {
      job.note(format("stopped by a signal after step %" PRId64
                      "; resume with --resume %s",
                      step, job.o.saveDir.c_str()));
      break;
    }
  }
  if (!job.o.saveDir.empty() && last >= firstStep && !ckpt.saved(last) &&
      !ckpt.failed(last) && !st.lastBad)
    if (Status s = saveStep(job, ckpt, last); !s.ok()) {
      (void)report.close(false);
      return error(job, s);
    }
  if (Status s = report.close(true); !s.ok())
    return error(job, s);

  // 6. Summary and dumps.
  report.summary(st.stepsRun, st.trainSeconds, st.lastLoss, st.nonFinite);
  if (ckpt.failedSaves() > 0)
    job.warn(format(
        "%" PRId64 " checkpoint save%s failed (--on-save-error "
        "continue); the newest checkpoint is %s",
        ckpt.failedSaves(), ckpt.failedSaves() == 1 ? "" : "s",
        ckpt.lastSaved() >= 0
            ? io::checkpointStepDir(job.o.saveDir, ckpt.lastSaved()).c_str()
            : (resuming ? job.o.resume.c_str() : "none (no save succeeded)")));
  if (!job.o.dumpParams.empty())
    if (Status s = dumpParams(job, ranks, last); !s.ok())
      return error(job, s);
  return 0;
}

} // namespace

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
