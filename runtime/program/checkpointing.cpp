//===- checkpointing.cpp - --save-dir, --resume ---------------------------===//

#include "program/checkpointing.h"
#include "io/checkpoint.h"
#include "io/output_file.h"
#include "program/convert.h"

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstring>

namespace dsc::program {

namespace {

std::atomic<bool> gStop{false};

extern "C" void onStopSignal(int) {
  gStop.store(true);
  // A second signal ends the run at once (temporaries removed).
  io::clearGracefulStop();
}

const char *kindOf(ArgRole role) {
  switch (role) {
  case ArgRole::Param:
    return "param/";
  case ArgRole::OptState:
    return "optim/";
  case ArgRole::Buffer:
    return "buffer/";
  case ArgRole::Scaler:
    return "scaler/";
  case ArgRole::ComputeCopy: // refilled from its parameter on resume
  default:
    return nullptr;
  }
}

bool parseState(const std::map<std::string, std::string> &state,
                const std::string &key, std::string &out) {
  auto it = state.find(key);
  if (it == state.end())
    return false;
  out = it->second;
  return true;
}

} // namespace

/// One tensor (or piece) of one rank: elements [argOffset, argOffset +
/// numel) of argument `arg` are elements [offset, offset + numel) of the
/// logical tensor `name`.
struct Checkpointer::Entry {
  std::string name;
  int arg = 0;
  bool replicated = false; // every rank holds it whole
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t offset = 0, numel = 0, argOffset = 0;
  int64_t logicalNumel = 0;
};

void Checkpointer::entriesOf(const RankState &rs,
                             std::vector<Entry> &out) const {
  const int G = job_.G;
  for (int i = 0; i < spec_.numArgs; ++i) {
    const ArgSpec &a = spec_.args[i];
    const char *kind = kindOf(a.role);
    if (!kind)
      continue;
    if (a.bucket < 0) {
      Entry e;
      e.name = kind + std::string(a.name);
      e.arg = i;
      e.replicated = true;
      e.dtype = a.type.dtype;
      e.shape.assign(a.type.shape, a.type.shape + a.type.rank);
      e.numel = e.logicalNumel = numelOf(a.type);
      out.push_back(e);
      continue;
    }
    // A shard of a flat bucket: the pieces of the parameters it overlaps.
    const BucketSpec &bk = spec_.buckets[a.bucket];
    std::string slot;
    if (a.role == ArgRole::OptState) {
      std::string n = a.name, prefix = std::string(bk.name) + "/";
      slot = n.compare(0, prefix.size(), prefix) == 0
                 ? n.substr(prefix.size())
                 : n.substr(n.find_last_of('/') + 1);
    }
    int64_t shard = bk.paddedNumel / G;
    int64_t lo = int64_t(rs.id % G) * shard, hi = lo + shard;
    for (int k = 0; k < bk.numEntries; ++k) {
      const BucketEntry &en = bk.entries[k];
      int64_t from = std::max(lo, en.offset),
              to = std::min(hi, en.offset + en.numel);
      if (from >= to)
        continue;
      const TensorSpec &t = ranks_.shapes()[size_t(a.bucket)][size_t(k)];
      Entry e;
      e.name = kind + std::string(en.param) + (slot.empty() ? "" : "/" + slot);
      e.arg = i;
      e.dtype = bk.dtype;
      e.shape.assign(t.shape, t.shape + t.rank);
      e.offset = from - en.offset;
      e.numel = to - from;
      e.argOffset = from - lo;
      e.logicalNumel = en.numel;
      out.push_back(e);
    }
  }
}

bool Checkpointer::stopRequested() { return gStop.load(); }

Checkpointer::~Checkpointer() {
  if (armed_)
    io::setGracefulStop(nullptr);
}

bool Checkpointer::due(int64_t step) const {
  const Options &o = job_.o;
  return !o.saveDir.empty() && o.saveEvery > 0 && step % o.saveEvery == 0 &&
         step != lastSaved_;
}

Status Checkpointer::prepare() {
  const Options &o = job_.o;
  gStop.store(false); // not an earlier run's signal (one process, many runs)
  if (o.saveDir.empty())
    return Status();
  if (Status s = io::makeDirectories("--save-dir " + o.saveDir, o.saveDir);
      !s.ok())
    return s;
  if (!job_.distributed || job_.env.rank == 0)
    for (const std::string &stale : io::removeStaleCheckpoints(o.saveDir))
      job_.note("removed " + stale +
                ", a checkpoint an interrupted save left incomplete");
  gStop.store(false);
  io::setGracefulStop(onStopSignal);
  armed_ = true;
  return Status();
}

//===----------------------------------------------------------------------===//
// Save
//===----------------------------------------------------------------------===//

Status Checkpointer::save(int64_t step) {
  Status s = saveImpl(step);
  // What the save read of NVMe files leaves host memory.
  Status evicted = ranks_.evictNvme();
  if (s.ok()) {
    lastSaved_ = step;
    return evicted;
  }
  // A failed save (a full disk, an I/O error) leaves no half-written step:
  // the previous checkpoint and `latest` are untouched. In a run of one
  // process per rank, rank 0 owns the step's temporary folder.
  const std::string &dir = job_.o.saveDir;
  std::string tmp = io::checkpointTempDir(dir, step);
  if (!job_.distributed || job_.env.rank == 0) {
    if (io::removeCheckpointTemp(tmp))
      job_.note("removed " + tmp + " of the failed save; " +
                (lastSaved_ >= 0 ? io::checkpointStepDir(dir, lastSaved_)
                                 : std::string("the latest checkpoint")) +
                " is intact");
  }
  ++failedSaves_;
  lastFailed_ = step;
  return s;
}

Status Checkpointer::saveImpl(int64_t step) {
  const Options &o = job_.o;
  const Layout &l = job_.layout;
  // The state lives on the device: bring it back first.
  std::vector<int> kept = l.params;
  for (const std::vector<int> *v : {&l.buffers, &l.optStates})
    kept.insert(kept.end(), v->begin(), v->end());
  if (l.lossScale >= 0)
    for (int i = 0; i < spec_.numArgs; ++i)
      if (spec_.args[i].role == ArgRole::Scaler)
        kept.push_back(i);
  if (Status s = ranks_.fetch(kept, /*args=*/true); !s.ok())
    return s;
  std::string tmp = io::checkpointTempDir(o.saveDir, step);
  Status written;
  for (auto &rs : ranks_.all()) {
    std::vector<Entry> entries;
    entriesOf(*rs, entries);
    std::vector<io::ShardTensor> tensors;
    for (const Entry &e : entries) {
      if (e.replicated ? rs->id != 0 : rs->id >= job_.G)
        continue; // another rank saves it
      const Tensor &t = rs->args[size_t(e.arg)];
      io::ShardTensor st;
      st.name = e.name;
      st.dtype = e.dtype;
      st.shape = e.shape;
      st.offset = e.offset;
      st.numel = e.numel;
      st.data = static_cast<const char *>(t.data) +
                size_t(e.argOffset) * dtypeSize(e.dtype);
      tensors.push_back(st);
    }
    if (rs->id >= job_.G && !tensors.size())
      continue; // a replica beyond group 0 holds nothing of its own
    if (Status s = io::writeCheckpointShard(tmp, rs->id, tensors); !s.ok()) {
      written = Status::error(s.code(), "--save-dir: " + s.message());
      break;
    }
  }
  // Every process learns whether all shards were written, so that rank 0
  // commits only a complete step and none waits for a shard that failed.
  bool anyFailed = false;
  if (Status s = ranks_.anyRank(!written.ok(), anyFailed); !s.ok())
    return s;
  if (!written.ok())
    return written;
  if (anyFailed)
    return fail(format("--save-dir: another rank could not write its shard "
                       "of step %" PRId64 " (its own error says why); the "
                       "step was not saved",
                       step));
  if (job_.distributed && job_.env.rank != 0)
    return Status(); // rank 0 commits
  io::CheckpointManifest m;
  m.step = step;
  m.dscVersion = spec_.dscVersion ? spec_.dscVersion : "";
  m.modelPath = spec_.modelPath ? spec_.modelPath : "";
  m.modelSha256 = spec_.modelSha256 ? spec_.modelSha256 : "";
  m.optimizer = spec_.optimizer;
  m.precision = spec_.precision ? spec_.precision : "fp32";
  m.worldSize = job_.W;
  m.groupSize = job_.G;
  m.stage = spec_.stage;
  m.compileCommand = spec_.compileCommand ? spec_.compileCommand : "";
  m.configJson = spec_.configJson ? spec_.configJson : "";
  m.state["seed"] = std::to_string(o.seed);
  m.state["data_rng"] = std::to_string(feed_.rngState());
  m.state["global_batch"] =
      std::to_string(job_.W * spec_.microBatch * spec_.accumSteps);
  m.state["samples"] =
      std::to_string(step * job_.W * spec_.microBatch * spec_.accumSteps);
  if (!o.data.empty())
    m.state["data"] = o.data;
  for (const auto &[name, v] : hypers_)
    m.state["hyper/" + name] = format("%.17g", v);
  // Only ranks of shard group 0 write pieces; rank 0 writes the rest.
  int writers = std::max(1, std::min(job_.W, job_.G));
  double timeout = job_.timeout > 0 ? job_.timeout : 300;
  if (Status s = io::commitCheckpoint(o.saveDir, tmp,
                                      io::checkpointStepDir(o.saveDir, step),
                                      writers, m, timeout, int(o.keepLast));
      !s.ok())
    return Status::error(s.code(), "--save-dir: " + s.message());
  if (!o.quiet) {
    std::fprintf(job_.out, "saved %s\n",
                 io::checkpointStepDir(o.saveDir, step).c_str());
    std::fflush(job_.out);
  }
  return Status();
}

//===----------------------------------------------------------------------===//
// Resume
//===----------------------------------------------------------------------===//

Status
Checkpointer::restoreState(const std::map<std::string, std::string> &state,
                           int64_t step) {
  Options &o = job_.o;
  std::string text;
  bool sameSeed = true;
  if (parseState(state, "seed", text)) {
    uint64_t seed = 0;
    if (!parseU64(text, seed))
      return fail("--resume: the checkpoint's seed '" + text +
                  "' is not a number");
    sameSeed = !o.seedGiven || seed == o.seed;
    if (!sameSeed)
      job_.note(format("--seed %" PRIu64 " overrides the checkpoint's seed "
                       "%" PRIu64 " (dropout masks and --data windows differ "
                       "from the run that saved it)",
                       o.seed, seed));
    else
      o.seed = seed;
  }
  if (parseState(state, "data_rng", text)) {
    uint64_t rng = 0;
    if (!parseU64(text, rng))
      return fail("--resume: the checkpoint's data_rng '" + text +
                  "' is not a number");
    if (sameSeed) // else the new seed's own windows
      feed_.setRngState(rng);
  }
  if (parseState(state, "data", text) && text != o.data)
    job_.note("the checkpoint was trained on --data " + text +
              (o.data.empty() ? std::string(", this run has none")
                              : ", this run reads " + o.data));
  for (auto &[name, v] : o.hypers) {
    if (!parseState(state, "hyper/" + name, text))
      continue;
    char *end = nullptr;
    double saved = std::strtod(text.c_str(), &end);
    if (text.empty() || *end)
      return fail("--resume: the checkpoint's " + name + " '" + text +
                  "' is not a number");
    if (o.hypersGiven.count(name)) {
      if (saved != v)
        job_.note(format("%s %g overrides the checkpoint's %g",
                         optionName(name).c_str(), v, saved));
    } else {
      v = saved;
    }
  }
  return Status();
}

Status Checkpointer::resume(int64_t &nextStep, std::string &what) {
  const Options &o = job_.o;
  io::CheckpointReader reader;
  if (Status s = reader.open(o.resume); !s.ok())
    return Status::error(s.code(), "--resume: " + s.message());
  const io::CheckpointManifest &m = reader.manifest();
  std::string model = spec_.modelPath ? spec_.modelPath : "?";
  if (spec_.modelSha256 && *spec_.modelSha256 && !m.modelSha256.empty() &&
      m.modelSha256 != spec_.modelSha256)
    return fail("--resume " + o.resume +
                ": the checkpoint is of another "
                "model (" +
                m.modelPath + ", sha256 " + m.modelSha256.substr(0, 12) +
                "...) than this program was "
                "compiled from (" +
                model + ", sha256 " +
                std::string(spec_.modelSha256).substr(0, 12) +
                "...); resume it with a program compiled from that model");
  if (m.optimizer != spec_.optimizer)
    return fail("--resume " + o.resume + ": the checkpoint holds " +
                m.optimizer + " state, but this program's optimizer is " +
                spec_.optimizer + "; compile with --optimizer " + m.optimizer);
  if (m.step >= 0 && m.step > int64_t(1) << 53)
    return fail("--resume: the checkpoint's step is out of range");
  for (auto &rs : ranks_.all()) {
    std::vector<Entry> entries;
    entriesOf(*rs, entries);
    for (const Entry &e : entries) {
      const io::CheckpointTensor *t = m.find(e.name);
      std::string who = job_.W > 1 ? format(" (rank %d)", rs->id) : "";
      if (!t)
        return fail("--resume " + reader.stepDir() + " has no tensor '" +
                    e.name + "'" + who +
                    "; the checkpoint is of a program with other parameters "
                    "or another optimizer");
      if (t->numel() != e.logicalNumel)
        return fail("--resume: '" + e.name + "' has " +
                    std::to_string(t->numel()) +
                    " elements in the checkpoint, but this program's has " +
                    std::to_string(e.logicalNumel));
      const Tensor &arg = rs->args[size_t(e.arg)];
      Tensor view = Tensor::of(static_cast<char *>(arg.data) +
                                   size_t(e.argOffset) * dtypeSize(e.dtype),
                               e.dtype, I64s{e.numel});
      if (Status s = reader.readRange(e.name, e.offset, view); !s.ok())
        return Status::error(s.code(), "--resume: " + s.message());
    }
  }
  if (Status s = restoreState(m.state, m.step); !s.ok())
    return s;
  nextStep = m.step + 1;
  what = format("checkpoint %s (step %" PRId64 ", %d rank%s, stage %d)",
                reader.stepDir().c_str(), m.step, m.worldSize,
                m.worldSize == 1 ? "" : "s", m.stage);
  if (m.worldSize != job_.W || m.stage != spec_.stage || m.groupSize != job_.G)
    what += format(", resharded to %d rank%s, stage %d", job_.W,
                   job_.W == 1 ? "" : "s", spec_.stage);
  return Status();
}

} // namespace dsc::program
