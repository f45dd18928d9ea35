//===- inprocess.cpp - Ranks as threads of one process --------------------===//

#include "comm/inprocess.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dsc::comm {

namespace {

const char *kindName(InProcessWorld::Kind k) {
  switch (k) {
  case InProcessWorld::Kind::AllReduce:
    return "all_reduce";
  case InProcessWorld::Kind::AllGather:
    return "all_gather";
  case InProcessWorld::Kind::ReduceScatter:
    return "reduce_scatter";
  }
  return "collective";
}

std::string rankList(const std::vector<int> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

Status err(const std::string &message) {
  return Status::error(StatusCode::InvalidArgument, message);
}

/// out[i] = sum_k ins[k][offset + i], k in group order, in T (Acc for the
/// half types).
template <typename T>
void sumInto(const std::vector<const void *> &ins, int64_t offset,
             int64_t count, void *out) {
  T *o = static_cast<T *>(out);
  for (int64_t i = 0; i < count; ++i) {
    T acc = static_cast<const T *>(ins[0])[offset + i];
    for (size_t k = 1; k < ins.size(); ++k)
      acc = static_cast<T>(acc + static_cast<const T *>(ins[k])[offset + i]);
    o[i] = acc;
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void sumHalf(const std::vector<const void *> &ins, int64_t offset,
             int64_t count, void *out) {
  uint16_t *o = static_cast<uint16_t *>(out);
  for (int64_t i = 0; i < count; ++i) {
    float acc = ToF(static_cast<const uint16_t *>(ins[0])[offset + i]);
    for (size_t k = 1; k < ins.size(); ++k)
      acc += ToF(static_cast<const uint16_t *>(ins[k])[offset + i]);
    o[i] = FromF(acc);
  }
}

void sumBool(const std::vector<const void *> &ins, int64_t offset,
             int64_t count, void *out) {
  uint8_t *o = static_cast<uint8_t *>(out);
  for (int64_t i = 0; i < count; ++i) {
    uint8_t acc = 0;
    for (const void *p : ins)
      acc = acc | (static_cast<const uint8_t *>(p)[offset + i] != 0);
    o[i] = acc;
  }
}

void reduce(DType dtype, const std::vector<const void *> &ins, int64_t offset,
            int64_t count, void *out) {
  switch (dtype) {
  case DType::F32:
    return sumInto<float>(ins, offset, count, out);
  case DType::F64:
    return sumInto<double>(ins, offset, count, out);
  case DType::F16:
    return sumHalf<halfToFloat, floatToHalf>(ins, offset, count, out);
  case DType::BF16:
    return sumHalf<bfloat16ToFloat, floatToBfloat16>(ins, offset, count, out);
  case DType::I64:
    return sumInto<int64_t>(ins, offset, count, out);
  case DType::I32:
    return sumInto<int32_t>(ins, offset, count, out);
  case DType::I8:
    return sumInto<int8_t>(ins, offset, count, out);
  case DType::U8:
    return sumInto<uint8_t>(ins, offset, count, out);
  case DType::Bool:
    return sumBool(ins, offset, count, out);
  }
}

} // namespace

double collectiveTimeoutFromEnv(std::string *warning) {
  const char *v = std::getenv("DSC_COLLECTIVE_TIMEOUT");
  if (!v || !*v)
    return 300;
  char *end = nullptr;
  double s = std::strtod(v, &end);
  if (*end || !(s > 0)) {
    if (warning)
      *warning = std::string("DSC_COLLECTIVE_TIMEOUT='") + v +
                 "' is not a positive number of seconds; using 300";
    return 300;
  }
  return s;
}

//===----------------------------------------------------------------------===//
// The per-rank Communicator
//===----------------------------------------------------------------------===//

class InProcessWorld::RankComm : public Communicator {
public:
  RankComm(InProcessWorld &world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  int groupRank(GridAxes axes) const override {
    std::vector<int> g = world_.groupOf(rank_, axes.mask);
    return int(std::find(g.begin(), g.end(), rank_) - g.begin());
  }
  int groupSize(GridAxes axes) const override {
    return int(world_.groupOf(rank_, axes.mask).size());
  }
  Status allReduce(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return world_.collective(rank_, Kind::AllReduce, in, out, axes, what);
  }
  Status allGather(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return world_.collective(rank_, Kind::AllGather, in, out, axes, what);
  }
  Status reduceScatter(const Tensor &in, const Tensor &out, GridAxes axes,
                       const char *what) override {
    return world_.collective(rank_, Kind::ReduceScatter, in, out, axes, what);
  }

private:
  InProcessWorld &world_;
  int rank_;
};

/// One rendezvous: a collective of one group at one point of its sequence.
struct InProcessWorld::Slot {
  std::vector<const void *> ins; // by group position
  std::vector<bool> posted;
  int arrived = 0, departed = 0;
  Kind kind = Kind::AllReduce;
  DType dtype = DType::F32;
  int64_t inNumel = 0, outNumel = 0;
  int firstRank = -1;
  std::string firstDesc;
};

//===----------------------------------------------------------------------===//
// The world
//===----------------------------------------------------------------------===//

InProcessWorld::InProcessWorld(int worldSize, int groupSize,
                               const CollectiveSpec *manifest,
                               int numCollectives, double timeoutSeconds)
    : worldSize_(std::max(worldSize, 1)),
      groupSize_(groupSize <= 0 ? std::max(worldSize, 1) : groupSize),
      timeout_(timeoutSeconds > 0 ? timeoutSeconds
                                  : collectiveTimeoutFromEnv()) {
  if (worldSize_ % groupSize_ != 0)
    groupSize_ = worldSize_; // the runner checks the spec before this
  for (int r = 0; r < worldSize_; ++r)
    comms_.push_back(std::make_unique<RankComm>(*this, r));
  checkers_.assign(size_t(worldSize_),
                   ManifestChecker(manifest, manifest ? numCollectives : 0));
  groupCalls_.resize(size_t(worldSize_));
  finished_.assign(size_t(worldSize_), false);
  waitingIn_.assign(size_t(worldSize_), -1);
}

InProcessWorld::~InProcessWorld() = default;

Communicator *InProcessWorld::comm(int rank) {
  return rank >= 0 && rank < worldSize_ ? comms_[size_t(rank)].get() : nullptr;
}

void InProcessWorld::beginStep() {
  std::lock_guard<std::mutex> lock(mu_);
  for (ManifestChecker &c : checkers_)
    c.beginStep();
  std::fill(finished_.begin(), finished_.end(), false);
  std::fill(waitingIn_.begin(), waitingIn_.end(), -1);
  // Group sequence numbers continue: slots of a finished step are gone, and
  // the counters of all members of a group advance together.
}

void InProcessWorld::finishStep(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (rank >= 0 && rank < worldSize_)
    finished_[size_t(rank)] = true;
  cv_.notify_all();
}

void InProcessWorld::abort(int rank, const std::string &message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_)
    return;
  aborted_ = true;
  failedRank_ = rank;
  std::string prefix = "rank " + std::to_string(rank) + ": ";
  failure_ = message.compare(0, prefix.size(), prefix) == 0
                 ? message.substr(prefix.size())
                 : message;
  cv_.notify_all();
}

bool InProcessWorld::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

int InProcessWorld::failedRank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failedRank_;
}

std::string InProcessWorld::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

int64_t InProcessWorld::callsThisStep(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return rank >= 0 && rank < worldSize_ ? checkers_[size_t(rank)].calls() : 0;
}

std::vector<int> InProcessWorld::groupOf(int rank, uint32_t mask) const {
  int replicas = worldSize_ / groupSize_;
  int myReplica = rank / groupSize_, myPos = rank % groupSize_;
  std::vector<int> out;
  for (int rep = 0; rep < replicas; ++rep) {
    if (!(mask & 1u) && rep != myReplica)
      continue;
    for (int pos = 0; pos < groupSize_; ++pos) {
      if (!(mask & 2u) && pos != myPos)
        continue;
      out.push_back(rep * groupSize_ + pos);
    }
  }
  return out;
}

Status InProcessWorld::collective(int rank, Kind kind, const Tensor &in,
                                  const Tensor &out, GridAxes axes,
                                  const char *what) {
  using Clock = std::chrono::steady_clock;
  if (rank < 0 || rank >= worldSize_)
    return err("collective on rank " + std::to_string(rank) +
               " of a world of " + std::to_string(worldSize_));
  std::string me = "rank " + std::to_string(rank) + ": ";
  std::unique_lock<std::mutex> lock(mu_);
  int64_t index = 0;
  Status checked =
      checkers_[size_t(rank)].check(kindName(kind), in.dtype, in.numel(),
                                    out.numel(), axes.mask, what, index);
  std::string call = "collective #" + std::to_string(index) + " (" +
                     describeCollective(kindName(kind), in.numel(), out.numel(),
                                        in.dtype, axes.mask, what) +
                     ")";
  // Fails this rank: aborts the world, returns the message.
  auto failHere = [&](const std::string &body) {
    if (!aborted_) {
      aborted_ = true;
      failedRank_ = rank;
      failure_ = body;
      cv_.notify_all();
    }
    return err(me + body);
  };
  auto peerFailed = [&]() {
    return err(me + call + ": rank " + std::to_string(failedRank_) +
               " failed: " + failure_);
  };
  if (aborted_)
    return peerFailed();

  // 1. The call itself, then against the manifest.
  std::vector<int> group = groupOf(rank, axes.mask);
  int n = int(group.size());
  int pos = int(std::find(group.begin(), group.end(), rank) - group.begin());
  if (axes.mask > 3)
    return failHere(call + ": axes mask " + std::to_string(axes.mask) +
                    " names an axis the grid does not have (bit 0 replicas, "
                    "bit 1 group)");
  if (!in.present() || !out.present())
    return failHere(call + ": the " + (in.present() ? "output" : "input") +
                    " is absent");
  if (in.dtype != out.dtype)
    return failHere(call + ": input " + describe(in) + " and output " +
                    describe(out) + " differ in dtype");
  if (!checked.ok())
    return failHere(checked.message());

  int64_t expectOut = kind == Kind::AllReduce   ? in.numel()
                      : kind == Kind::AllGather ? in.numel() * n
                                                : in.numel() / n;
  if (out.numel() != expectOut ||
      (kind == Kind::ReduceScatter && in.numel() % n != 0))
    return failHere(call + ": input " + describe(in) + " and output " +
                    describe(out) + " do not fit a group of " +
                    std::to_string(n) + " ranks (" +
                    (kind == Kind::AllReduce   ? "same size"
                     : kind == Kind::AllGather ? "output = group x input"
                                               : "input = group x output") +
                    ")");

  // 2. The rendezvous of this group at this point of its sequence.
  auto groupKey = std::make_pair(axes.mask, group[0]);
  int64_t seq = groupCalls_[size_t(rank)][groupKey]++;
  auto key = std::make_tuple(axes.mask, group[0], seq);
  std::shared_ptr<Slot> &ref = slots_[key];
  if (!ref) {
    ref = std::make_shared<Slot>();
    ref->ins.assign(size_t(n), nullptr);
    ref->posted.assign(size_t(n), false);
    ref->kind = kind;
    ref->dtype = in.dtype;
    ref->inNumel = in.numel();
    ref->outNumel = out.numel();
    ref->firstRank = rank;
    ref->firstDesc = call;
  } else if (ref->kind != kind || ref->dtype != in.dtype ||
             ref->inNumel != in.numel() || ref->outNumel != out.numel()) {
    return failHere(call + " does not match rank " +
                    std::to_string(ref->firstRank) + "'s " + ref->firstDesc +
                    " at the same point of their group (ranks " +
                    rankList(group) + ")");
  }
  std::shared_ptr<Slot> slot = ref;
  slot->ins[size_t(pos)] = in.data;
  slot->posted[size_t(pos)] = true;
  ++slot->arrived;
  waitingIn_[size_t(rank)] = index;
  cv_.notify_all();

  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_));
  int finishedPeer = -1;
  auto arrivedAll = [&] {
    if (slot->arrived == n || aborted_)
      return true;
    for (int k = 0; k < n; ++k)
      if (!slot->posted[size_t(k)] && finished_[size_t(group[size_t(k)])]) {
        finishedPeer = group[size_t(k)];
        return true;
      }
    return false;
  };
  bool inTime = cv_.wait_until(lock, deadline, arrivedAll);
  if (slot->arrived != n) {
    waitingIn_[size_t(rank)] = -1;
    if (aborted_)
      return peerFailed();
    if (finishedPeer >= 0)
      return failHere(call + ": rank " + std::to_string(finishedPeer) +
                      " finished its step after " +
                      std::to_string(checkers_[size_t(finishedPeer)].calls()) +
                      " collectives without joining this one (ranks " +
                      rankList(group) + ")");
    (void)inTime;
    std::vector<int> missing;
    std::string where;
    for (int k = 0; k < n; ++k)
      if (!slot->posted[size_t(k)]) {
        int r = group[size_t(k)];
        missing.push_back(r);
        int64_t w = waitingIn_[size_t(r)];
        where +=
            (where.empty() ? "" : ", ") + std::string("rank ") +
            std::to_string(r) +
            (w >= 0
                 ? " waits in collective #" + std::to_string(w)
                 : " is computing (last issued collective #" +
                       std::to_string(checkers_[size_t(r)].calls() - 1) + ")");
      }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", timeout_);
    return failHere(call + ": timed out after " + secs + " s waiting for " +
                    (missing.size() == 1 ? "rank " : "ranks ") +
                    rankList(missing) + " of the group (ranks " +
                    rankList(group) + "); " + where +
                    " (DSC_COLLECTIVE_TIMEOUT sets the limit)");
  }

  // 3. Everyone has posted: read the inputs without the lock.
  std::vector<const void *> ins = slot->ins;
  lock.unlock();
  size_t es = dtypeSize(in.dtype);
  size_t outBytes = size_t(out.numel()) * es, inBytes = size_t(in.numel()) * es;
  const char *ob = static_cast<const char *>(out.data);
  const char *ib = static_cast<const char *>(in.data);
  bool alias = ob < ib + inBytes && ib < ob + outBytes;
  std::vector<char> temp(alias ? outBytes : 0);
  void *dst = alias ? static_cast<void *>(temp.data()) : out.data;
  switch (kind) {
  case Kind::AllReduce:
    reduce(in.dtype, ins, 0, in.numel(), dst);
    break;
  case Kind::ReduceScatter:
    reduce(in.dtype, ins, int64_t(pos) * out.numel(), out.numel(), dst);
    break;
  case Kind::AllGather:
    for (int k = 0; k < n; ++k)
      std::memcpy(static_cast<char *>(dst) + size_t(k) * inBytes,
                  ins[size_t(k)], inBytes);
    break;
  }

  // 4. Wait until every member has read before anyone reuses its input.
  lock.lock();
  if (++slot->departed == n) {
    slots_.erase(key);
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return slot->departed == n || aborted_; });
  }
  waitingIn_[size_t(rank)] = -1;
  if (slot->departed != n)
    return peerFailed();
  lock.unlock();
  if (alias)
    std::memcpy(out.data, temp.data(), outBytes);
  return Status();
}

} // namespace dsc::comm
