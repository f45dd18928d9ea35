//===- launch.cpp - Launcher variables and the rank-0 id exchange ---------===//

#include "program/launch.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

namespace dsc::launch {

namespace {

//===----------------------------------------------------------------------===//
// Environment
//===----------------------------------------------------------------------===//

/// The value of `name`, or null when it is unset or empty (an empty value
/// counts as unset, as in `export RANK=`).
const char *env(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
}

Status envError(const std::string &message) {
  return Status::error(StatusCode::InvalidArgument, "launch: " + message);
}

/// A whole decimal number in [lo, hi], no sign, no spaces.
bool parseNumber(const std::string &text, long long lo, long long hi,
                 long long &out) {
  if (text.empty() || text.size() > 18)
    return false;
  long long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi)
    return false;
  out = v;
  return true;
}

/// Reads variable `name` (which must be set) as a number in [lo, hi].
Status readNumber(const char *name, long long lo, long long hi, int &out,
                  const std::string &who) {
  const char *v = env(name);
  long long n = 0;
  if (!parseNumber(v ? v : "", lo, hi, n)) {
    std::string range = hi == INT_MAX
                            ? "a whole number >= " + std::to_string(lo)
                            : "a whole number in [" + std::to_string(lo) +
                                  ", " + std::to_string(hi) + "]";
    return envError(std::string(name) + "='" + (v ? v : "") + "' (" + who +
                    ") is not " + range);
  }
  out = static_cast<int>(n);
  return Status();
}

Status requireVar(const char *name, const std::string &who,
                  const std::string &hint) {
  if (env(name))
    return Status();
  return envError(std::string(name) + " is not set (" + who + "); " + hint);
}

/// The checks every source shares: ranks inside their worlds.
Status checkRanks(const DistEnv &e, const char *rankVar, const char *sizeVar,
                  const char *localRankVar, const char *localSizeVar,
                  const std::string &who) {
  if (e.rank >= e.worldSize)
    return envError(
        std::string(rankVar) + "=" + std::to_string(e.rank) + " is not below " +
        sizeVar + "=" + std::to_string(e.worldSize) + " (" + who +
        "); every process needs a distinct rank in [0, " + sizeVar + ")");
  if (e.localRank >= e.localWorldSize)
    return envError(std::string(localRankVar) + "=" +
                    std::to_string(e.localRank) + " is not below " +
                    localSizeVar + "=" + std::to_string(e.localWorldSize) +
                    " (" + who +
                    "); the local rank indexes the processes "
                    "of one node");
  if (e.localWorldSize > e.worldSize)
    return envError(std::string(localSizeVar) + "=" +
                    std::to_string(e.localWorldSize) + " exceeds " + sizeVar +
                    "=" + std::to_string(e.worldSize) + " (" + who +
                    "); a node cannot hold more processes than the world");
  return Status();
}

/// MASTER_ADDR and MASTER_PORT: required when more than one process runs;
/// with one, 127.0.0.1 and 29500 stand in.
Status readMaster(DistEnv &e, const std::string &who, const std::string &hint) {
  if (const char *addr = env("MASTER_ADDR"))
    e.masterAddr = addr;
  else if (e.worldSize > 1)
    return envError("MASTER_ADDR is not set but the world has " +
                    std::to_string(e.worldSize) + " processes (" + who + "); " +
                    hint);
  else
    e.masterAddr = "127.0.0.1";
  if (env("MASTER_PORT"))
    return readNumber("MASTER_PORT", 1, 65535, e.masterPort, who);
  if (e.worldSize > 1)
    return envError("MASTER_PORT is not set but the world has " +
                    std::to_string(e.worldSize) + " processes (" + who + "); " +
                    hint);
  e.masterPort = 29500;
  return Status();
}

Status readTorchrun(DistEnv &e) {
  const char *dsrun = env("DSRUN");
  e.source = dsrun ? "dsrun" : "torchrun";
  std::string who = dsrun ? "set by dsrun" : "torchrun-style variables";
  const char *hint = "torchrun and dsrun set RANK, WORLD_SIZE, LOCAL_RANK, "
                     "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT";
  if (dsrun && std::string(dsrun) != "1")
    return envError("DSRUN='" + std::string(dsrun) +
                    "' is not 1; only dsrun should set it");
  if (Status st = requireVar("RANK", who, hint); !st.ok())
    return st;
  if (Status st = requireVar("WORLD_SIZE", who, hint); !st.ok())
    return st;
  if (Status st = readNumber("WORLD_SIZE", 1, INT_MAX, e.worldSize, who);
      !st.ok())
    return st;
  if (Status st = readNumber("RANK", 0, INT_MAX, e.rank, who); !st.ok())
    return st;
  if (e.worldSize == 1 && !env("LOCAL_RANK") && !env("LOCAL_WORLD_SIZE")) {
    e.localRank = 0;
    e.localWorldSize = 1;
  } else {
    if (Status st = requireVar("LOCAL_RANK", who, hint); !st.ok())
      return st;
    if (Status st = requireVar("LOCAL_WORLD_SIZE", who, hint); !st.ok())
      return st;
    if (Status st = readNumber("LOCAL_RANK", 0, INT_MAX, e.localRank, who);
        !st.ok())
      return st;
    if (Status st =
            readNumber("LOCAL_WORLD_SIZE", 1, INT_MAX, e.localWorldSize, who);
        !st.ok())
      return st;
  }
  if (Status st = checkRanks(e, "RANK", "WORLD_SIZE", "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE", who);
      !st.ok())
    return st;
  return readMaster(e, who,
                    "set MASTER_ADDR to the host of rank 0 and MASTER_PORT "
                    "to a free port there (torchrun and dsrun set both)");
}

Status readOpenMpi(DistEnv &e) {
  e.source = "openmpi";
  std::string who = "Open MPI";
  const char *hint = "mpirun sets OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, "
                     "OMPI_COMM_WORLD_LOCAL_RANK and "
                     "OMPI_COMM_WORLD_LOCAL_SIZE; start the program with "
                     "mpirun";
  for (const char *name :
       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    if (Status st = requireVar(name, who, hint); !st.ok())
      return st;
  if (Status st =
          readNumber("OMPI_COMM_WORLD_SIZE", 1, INT_MAX, e.worldSize, who);
      !st.ok())
    return st;
  if (Status st = readNumber("OMPI_COMM_WORLD_RANK", 0, INT_MAX, e.rank, who);
      !st.ok())
    return st;
  if (Status st = readNumber("OMPI_COMM_WORLD_LOCAL_RANK", 0, INT_MAX,
                             e.localRank, who);
      !st.ok())
    return st;
  if (Status st = readNumber("OMPI_COMM_WORLD_LOCAL_SIZE", 1, INT_MAX,
                             e.localWorldSize, who);
      !st.ok())
    return st;
  if (Status st = checkRanks(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE", who);
      !st.ok())
    return st;
  return readMaster(e, who,
                    "mpirun does not say where rank 0 listens, so pass both: "
                    "mpirun -x MASTER_ADDR=<host of rank 0> -x "
                    "MASTER_PORT=<a free port there> ...");
}

Status readSlurm(DistEnv &e) {
  e.source = "slurm";
  std::string who = "Slurm";
  const char *hint = "srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID "
                     "and SLURM_TASKS_PER_NODE; start the program with srun";
  for (const char *name : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"})
    if (Status st = requireVar(name, who, hint); !st.ok())
      return st;
  if (Status st = readNumber("SLURM_NTASKS", 1, INT_MAX, e.worldSize, who);
      !st.ok())
    return st;
  if (Status st = readNumber("SLURM_PROCID", 0, INT_MAX, e.rank, who); !st.ok())
    return st;
  if (Status st = readNumber("SLURM_LOCALID", 0, INT_MAX, e.localRank, who);
      !st.ok())
    return st;

  // Processes on this node.
  const char *localSizeVar = "SLURM_NTASKS_PER_NODE";
  if (env("SLURM_NTASKS_PER_NODE")) {
    if (Status st = readNumber("SLURM_NTASKS_PER_NODE", 1, INT_MAX,
                               e.localWorldSize, who);
        !st.ok())
      return st;
  } else {
    const char *var = env("SLURM_STEP_TASKS_PER_NODE")
                          ? "SLURM_STEP_TASKS_PER_NODE"
                          : "SLURM_TASKS_PER_NODE";
    localSizeVar = var;
    if (Status st = requireVar(var, who,
                               "it gives the processes per node (or set "
                               "SLURM_NTASKS_PER_NODE)");
        !st.ok())
      return st;
    std::vector<int> counts;
    if (Status st = expandSlurmTasksPerNode(env(var), counts); !st.ok())
      return envError(std::string(var) + "='" + env(var) +
                      "' (Slurm): " + st.message());
    int node = 0;
    if (env("SLURM_NODEID")) {
      if (Status st = readNumber("SLURM_NODEID", 0, INT_MAX, node, who);
          !st.ok())
        return st;
      if (node >= static_cast<int>(counts.size()))
        return envError("SLURM_NODEID=" + std::to_string(node) + " but " + var +
                        "='" + env(var) + "' lists " +
                        std::to_string(counts.size()) + " node(s) (Slurm)");
    } else if (std::adjacent_find(counts.begin(), counts.end(),
                                  std::not_equal_to<int>()) != counts.end()) {
      return envError(std::string(var) + "='" + env(var) +
                      "' differs between nodes and SLURM_NODEID is not set "
                      "(Slurm); cannot tell how many processes share this "
                      "node");
    }
    e.localWorldSize = counts[node];
  }
  if (Status st = checkRanks(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                             localSizeVar, who);
      !st.ok())
    return st;

  // Rank 0's host: MASTER_ADDR if given, else the first node of the step.
  if (const char *addr = env("MASTER_ADDR")) {
    e.masterAddr = addr;
  } else {
    const char *var = nullptr;
    for (const char *name :
         {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
      if (!var && env(name))
        var = name;
    if (!var) {
      if (e.worldSize > 1)
        return envError("neither SLURM_JOB_NODELIST nor SLURM_NODELIST is "
                        "set (Slurm), so the host of rank 0 is unknown; set "
                        "MASTER_ADDR to it");
      e.masterAddr = "127.0.0.1";
    } else {
      std::vector<std::string> hosts;
      if (Status st = expandSlurmNodelist(env(var), hosts); !st.ok())
        return envError(std::string(var) + "='" + env(var) +
                        "' (Slurm): " + st.message() +
                        "; set MASTER_ADDR to the host of rank 0");
      e.masterAddr = hosts.front();
    }
  }
  // Port: MASTER_PORT, else one derived from the job id so that two jobs
  // sharing a first node rarely collide.
  if (env("MASTER_PORT"))
    return readNumber("MASTER_PORT", 1, 65535, e.masterPort, who);
  e.masterPort = 29500;
  const char *jobVar = env("SLURM_JOB_ID") ? "SLURM_JOB_ID" : "SLURM_JOBID";
  if (env(jobVar)) {
    long long job = 0;
    if (!parseNumber(env(jobVar), 0, LLONG_MAX / 16, job))
      return envError(std::string(jobVar) + "='" + env(jobVar) +
                      "' (Slurm) is not a number, so no port can be derived "
                      "from it; set MASTER_PORT to a free port on the host "
                      "of rank 0");
    e.masterPort = 29500 + static_cast<int>(job % 1000);
  }
  return Status();
}

} // namespace

Status readDistEnv(DistEnv &out) {
  out = DistEnv();
  DistEnv e;
  e.present = true;
  Status st;
  if (env("RANK") || env("WORLD_SIZE") || env("DSRUN"))
    st = readTorchrun(e);
  else if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE"))
    st = readOpenMpi(e);
  else if (env("SLURM_PROCID"))
    st = readSlurm(e);
  else
    return Status(); // a single process, started by hand
  if (st.ok())
    out = e;
  return st;
}

//===----------------------------------------------------------------------===//
// Slurm's compressed lists
//===----------------------------------------------------------------------===//

namespace {

Status listError(const std::string &message) {
  return Status::error(StatusCode::InvalidArgument, message);
}

constexpr size_t kMaxHosts = 1 << 20;

/// Expands one host expression ("rack[1-2]-n[01,03]", no top-level comma)
/// and appends its hosts.
Status expandHostExpr(const std::string &expr,
                      std::vector<std::string> &hosts) {
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < expr.size()) {
    if (expr[i] == ']')
      return listError("unmatched ']' in '" + expr + "'");
    if (expr[i] != '[') {
      size_t j = expr.find_first_of("[]", i);
      if (j == std::string::npos)
        j = expr.size();
      for (auto &p : partial)
        p += expr.substr(i, j - i);
      i = j;
      continue;
    }
    size_t close = expr.find(']', i);
    if (close == std::string::npos)
      return listError("unmatched '[' in '" + expr + "'");
    std::string body = expr.substr(i + 1, close - i - 1);
    if (body.find('[') != std::string::npos)
      return listError("nested '[' in '" + expr + "'");
    if (body.empty())
      return listError("empty '[]' in '" + expr + "'");
    std::vector<std::string> items;
    size_t start = 0;
    while (true) {
      size_t comma = body.find(',', start);
      std::string range =
          body.substr(start, comma == std::string::npos ? std::string::npos
                                                        : comma - start);
      size_t dash = range.find('-');
      std::string lo = range.substr(0, dash);
      std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
      long long a = 0, b = 0;
      if (!parseNumber(lo, 0, LLONG_MAX / 16, a) ||
          !parseNumber(hi, 0, LLONG_MAX / 16, b))
        return listError("'" + range + "' in '" + expr +
                         "' is not a number or a range like 01-04");
      if (b < a)
        return listError("range '" + range + "' in '" + expr +
                         "' runs backwards");
      if (static_cast<unsigned long long>(b - a) >= kMaxHosts)
        return listError("range '" + range + "' in '" + expr +
                         "' is too large");
      // Zero padding: the width of the lower bound, as Slurm writes it.
      int width = static_cast<int>(lo.size());
      for (long long v = a; v <= b; ++v) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%0*lld", width, v);
        items.push_back(buf);
      }
      if (comma == std::string::npos)
        break;
      start = comma + 1;
    }
    if (partial.size() * items.size() > kMaxHosts)
      return listError("'" + expr + "' expands to too many hosts");
    std::vector<std::string> next;
    next.reserve(partial.size() * items.size());
    for (const auto &p : partial)
      for (const auto &item : items)
        next.push_back(p + item);
    partial.swap(next);
    i = close + 1;
  }
  if (hosts.size() + partial.size() > kMaxHosts)
    return listError("the list expands to too many hosts");
  for (auto &p : partial) {
    if (p.empty())
      return listError("empty host name");
    hosts.push_back(std::move(p));
  }
  return Status();
}

} // namespace

Status expandSlurmNodelist(const std::string &list,
                           std::vector<std::string> &hosts) {
  hosts.clear();
  if (list.find_first_of(" \t\n") != std::string::npos)
    return listError("host list '" + list + "' contains white space");
  if (list.empty())
    return listError("empty host list");
  // Split at commas outside brackets.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[')
      ++depth;
    else if (c == ']')
      --depth;
    if (c != ',' || depth > 0)
      continue;
    std::string expr = list.substr(start, i - start);
    if (expr.empty()) {
      hosts.clear();
      return listError("empty host name in '" + list + "'");
    }
    if (Status st = expandHostExpr(expr, hosts); !st.ok()) {
      hosts.clear();
      return st;
    }
    start = i + 1;
  }
  if (depth != 0 || hosts.empty()) {
    hosts.clear();
    return listError(depth > 0 ? "unmatched '[' in '" + list + "'"
                               : "malformed host list '" + list + "'");
  }
  return Status();
}

Status expandSlurmTasksPerNode(const std::string &text,
                               std::vector<int> &counts) {
  counts.clear();
  if (text.empty())
    return listError("empty list");
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    std::string count = item, repeat = "1";
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')')
        return listError("'" + item + "' is not N or N(xM)");
      count = item.substr(0, paren);
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    long long c = 0, r = 0;
    if (!parseNumber(count, 1, INT_MAX, c) ||
        !parseNumber(repeat, 1, 1 << 20, r))
      return listError("'" + item + "' is not N or N(xM)");
    if (counts.size() + r > (1u << 20))
      return listError("too many nodes");
    counts.insert(counts.end(), static_cast<size_t>(r), static_cast<int>(c));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return Status();
}

//===----------------------------------------------------------------------===//
// The exchange
//===----------------------------------------------------------------------===//
//
// Wire format (big-endian 32-bit words):
//   rank r -> rank 0   'DSCH', version, r, world size
//   rank 0 -> rank r   'DSCR', status (0: ok, else a StatusCode), length,
//                      bytes: the blob or the error message

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x44534348; // "DSCH"
constexpr uint32_t kReplyMagic = 0x44534352; // "DSCR"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxBlob = 64u << 20;

[[maybe_unused]] std::string fromStrerror(int rc, const char *buf) {
  return rc == 0 ? buf : "unknown error";
}
[[maybe_unused]] std::string fromStrerror(const char *text, const char *) {
  return text;
}
std::string errnoText(int err) {
  char buf[256] = {};
  return fromStrerror(strerror_r(err, buf, sizeof(buf)), buf);
}

std::string secondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

int msLeft(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                  Clock::now())
                .count();
  return ms <= 0 ? 0 : ms >= INT_MAX ? INT_MAX : static_cast<int>(ms) + 1;
}

/// Closes a socket when it goes out of scope.
class Socket {
public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket &operator=(Socket &&o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  Socket(const Socket &) = delete;
  Socket &operator=(const Socket &) = delete;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_ = -1;
};

bool setNonblockingCloexec(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return false;
  int fdfl = ::fcntl(fd, F_GETFD);
  return fdfl >= 0 && ::fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) >= 0;
}

enum class Io { Ok, Timeout, Closed, Error };

/// Waits for `events` on `fd` until `deadline`.
Io waitFor(int fd, short events, Clock::time_point deadline, int &err) {
  while (true) {
    int ms = msLeft(deadline);
    if (ms == 0)
      return Io::Timeout;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      err = errno;
      return Io::Error;
    }
    if (n > 0)
      return Io::Ok;
  }
}

Io sendAll(int fd, const void *data, size_t size, Clock::time_point deadline,
           int &err) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
#ifdef MSG_NOSIGNAL
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
#else
    ssize_t n = ::send(fd, p, size, 0);
#endif
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Io io = waitFor(fd, POLLOUT, deadline, err); io != Io::Ok)
        return io;
      continue;
    }
    err = errno;
    return err == EPIPE || err == ECONNRESET ? Io::Closed : Io::Error;
  }
  return Io::Ok;
}

Io recvAll(int fd, void *data, size_t size, Clock::time_point deadline,
           int &err) {
  char *p = static_cast<char *>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0)
      return Io::Closed;
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Io io = waitFor(fd, POLLIN, deadline, err); io != Io::Ok)
        return io;
      continue;
    }
    err = errno;
    return err == ECONNRESET ? Io::Closed : Io::Error;
  }
  return Io::Ok;
}

void putWord(std::vector<uint8_t> &out, uint32_t v) {
  uint32_t be = htonl(v);
  const uint8_t *b = reinterpret_cast<const uint8_t *>(&be);
  out.insert(out.end(), b, b + 4);
}

uint32_t word(const uint8_t *p) {
  uint32_t be;
  std::memcpy(&be, p, 4);
  return ntohl(be);
}

std::vector<uint8_t> reply(uint32_t status, const void *data, size_t size) {
  std::vector<uint8_t> out;
  out.reserve(12 + size);
  putWord(out, kReplyMagic);
  putWord(out, status);
  putWord(out, static_cast<uint32_t>(size));
  const uint8_t *b = static_cast<const uint8_t *>(data);
  out.insert(out.end(), b, b + size);
  return out;
}

/// "10.0.0.5:41234" / "[::1]:41234" for messages.
std::string peerName(const sockaddr_storage &ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto *a = reinterpret_cast<const sockaddr_in *>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    auto *a = reinterpret_cast<const sockaddr_in6 *>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      ::inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], host, sizeof(host));
      return std::string(host) + ":" + std::to_string(ntohs(a->sin6_port));
    }
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

Status netError(const std::string &message) {
  return Status::error(StatusCode::IoError, message);
}

/// A socket listening on `port` on every interface: IPv6 with IPv4 mapped
/// where the host has IPv6, else IPv4.
Socket listenOn(int port, int backlog, int &err) {
  for (int family : {AF_INET6, AF_INET}) {
    Socket s(::socket(family, SOCK_STREAM, 0));
    if (!s.valid()) {
      err = errno;
      continue;
    }
    int one = 1, zero = 0;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc;
    if (family == AF_INET6) {
      ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(s.fd(), reinterpret_cast<sockaddr *>(&a), sizeof(a));
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(s.fd(), reinterpret_cast<sockaddr *>(&a), sizeof(a));
    }
    if (rc < 0) {
      err = errno;
      // A port in use or forbidden stays so in IPv4; anything else (no
      // IPv6 on this host) falls back to IPv4.
      if (err == EADDRINUSE || err == EACCES)
        return Socket();
      continue;
    }
    if (::listen(s.fd(), backlog) < 0 || !setNonblockingCloexec(s.fd())) {
      err = errno;
      return Socket();
    }
    return s;
  }
  return Socket();
}

std::string rankList(const std::vector<bool> &seen) {
  std::string s;
  int listed = 0, more = 0;
  for (size_t r = 1; r < seen.size(); ++r) {
    if (seen[r])
      continue;
    if (listed < 16)
      s += (listed++ ? ", " : "") + std::to_string(r);
    else
      ++more;
  }
  if (more)
    s += " and " + std::to_string(more) + " more";
  return s;
}

struct Peer {
  Socket sock;
  int rank = 0;
  std::string from;
};

Status serve(const DistEnv &env, const std::vector<uint8_t> &blob,
             double timeoutSeconds, Clock::time_point deadline) {
  const std::string port = std::to_string(env.masterPort);
  if (blob.size() > kMaxBlob)
    return Status::error(
        StatusCode::InvalidArgument,
        "exchangeId: rank 0's blob has " + std::to_string(blob.size()) +
            " bytes, more than the limit of " + std::to_string(kMaxBlob));
  int err = 0;
  Socket listener =
      listenOn(env.masterPort, std::min(env.worldSize, 4096), err);
  if (!listener.valid()) {
    if (err == EADDRINUSE)
      return netError("rank 0: cannot listen on port " + port +
                      " (MASTER_PORT): it is in use, by another job or a "
                      "process of an earlier run; set MASTER_PORT to a free "
                      "port");
    return netError("rank 0: cannot listen on port " + port +
                    " (MASTER_PORT): " + errnoText(err));
  }

  const std::vector<uint8_t> ok = reply(0, blob.data(), blob.size());
  std::vector<Peer> held; // connected, waiting for the blob
  std::vector<bool> seen(static_cast<size_t>(env.worldSize), false);
  std::vector<std::string> seenFrom(seen.size());
  seen[0] = true;
  int connected = 0;
  bool streaming = false; // out of descriptors: send at once, hold none
  std::string failure, sendFailure;
  StatusCode failureCode = StatusCode::IoError;

  auto sendOk = [&](Peer &p) {
    int e = 0;
    auto until = std::max(deadline, Clock::now() + std::chrono::seconds(10));
    if (sendAll(p.sock.fd(), ok.data(), ok.size(), until, e) != Io::Ok &&
        sendFailure.empty())
      sendFailure = "rank 0: could not send the id to rank " +
                    std::to_string(p.rank) + " (" + p.from +
                    "): " + (e ? errnoText(e) : std::string("timed out")) +
                    "; did it stop waiting?";
    p.sock.reset();
  };

  while (connected < env.worldSize - 1) {
    int e = 0;
    Io io = waitFor(listener.fd(), POLLIN, deadline, e);
    if (io == Io::Timeout) {
      failure = "rank 0: only " + std::to_string(connected + 1) + " of " +
                std::to_string(env.worldSize) + " ranks joined at port " +
                port + " within " + secondsText(timeoutSeconds) +
                " s; missing rank(s) " + rankList(seen) +
                "; are they running, with MASTER_ADDR=" + env.masterAddr +
                " and MASTER_PORT=" + port + "?";
      if (env.source == "slurm")
        failure += " (a program started in an sbatch script without srun "
                   "runs alone as rank 0; start it with srun)";
      break;
    }
    if (io != Io::Ok) {
      failure = "rank 0: waiting for connections on port " + port + ": " +
                errnoText(e);
      break;
    }
    sockaddr_storage from{};
    socklen_t fromLen = sizeof(from);
    Socket conn(
        ::accept(listener.fd(), reinterpret_cast<sockaddr *>(&from), &fromLen));
    if (!conn.valid()) {
      e = errno;
      if (e == EINTR || e == EAGAIN || e == EWOULDBLOCK || e == ECONNABORTED ||
          e == EPROTO)
        continue;
      if ((e == EMFILE || e == ENFILE) && !held.empty()) {
        // Out of descriptors: hand out the blob to those waiting and go on
        // without holding connections.
        for (auto &p : held)
          sendOk(p);
        held.clear();
        streaming = true;
        continue;
      }
      failure =
          "rank 0: accepting connections on port " + port + ": " +
          errnoText(e) +
          (e == EMFILE || e == ENFILE ? " (raise the limit: ulimit -n)" : "");
      break;
    }
    if (!setNonblockingCloexec(conn.fd()))
      continue;
    Peer peer;
    peer.sock = std::move(conn);
    peer.from = peerName(from);

    // The hello comes right after connecting; a connection that sends
    // something else (or nothing) is not one of ours and is dropped.
    uint8_t hello[16];
    auto helloDeadline = std::min(deadline + std::chrono::seconds(1),
                                  Clock::now() + std::chrono::seconds(10));
    if (recvAll(peer.sock.fd(), hello, sizeof(hello), helloDeadline, e) !=
            Io::Ok ||
        word(hello) != kHelloMagic)
      continue;
    uint32_t version = word(hello + 4);
    uint32_t peerRank = word(hello + 8);
    uint32_t peerWorld = word(hello + 12);
    peer.rank = static_cast<int>(peerRank);

    std::string bad;
    if (version != kVersion)
      bad = "a process at " + peer.from + " speaks exchange version " +
            std::to_string(version) + ", rank 0 speaks " +
            std::to_string(kVersion) + "; run the same dsc build everywhere";
    else if (peerWorld != static_cast<uint32_t>(env.worldSize))
      bad = "rank " + std::to_string(peerRank) + " says world size " +
            std::to_string(peerWorld) + ", rank 0 has " +
            std::to_string(env.worldSize) +
            "; every process must be started with the same world size";
    else if (peerRank == 0 || peerRank >= static_cast<uint32_t>(env.worldSize))
      bad = "a process at " + peer.from + " says it is rank " +
            std::to_string(peerRank) + " of " + std::to_string(peerWorld) +
            (peerRank == 0 ? ", but this process is rank 0; two processes "
                             "have rank 0"
                           : "");
    else if (seen[peerRank])
      bad = "rank " + std::to_string(peerRank) + " joined twice (from " +
            seenFrom[peerRank] + ", then from " + peer.from +
            "); two processes have the same rank";
    if (!bad.empty()) {
      failure = "rank 0: " + bad;
      failureCode = StatusCode::InvalidArgument;
      held.push_back(std::move(peer)); // told below, with the others
      break;
    }
    seen[peerRank] = true;
    seenFrom[peerRank] = peer.from;
    ++connected;
    if (streaming)
      sendOk(peer);
    else
      held.push_back(std::move(peer));
  }

  if (!failure.empty()) {
    // Every rank still connected learns why, so that all of them fail with
    // the same message instead of waiting for their own timeouts.
    std::vector<uint8_t> no = reply(static_cast<uint32_t>(failureCode),
                                    failure.data(), failure.size());
    for (auto &p : held) {
      int e = 0;
      sendAll(p.sock.fd(), no.data(), no.size(),
              Clock::now() + std::chrono::seconds(2), e);
    }
    return Status::error(failureCode, failure);
  }
  for (auto &p : held)
    sendOk(p);
  if (!sendFailure.empty())
    return netError(sendFailure);
  return Status();
}

/// Connects to rank 0, retrying until `deadline`. On failure `lastError`
/// says what the last attempt ran into.
Socket connectToRankZero(const DistEnv &env, Clock::time_point deadline,
                         std::string &lastError) {
  const std::string port = std::to_string(env.masterPort);
  auto backoff = std::chrono::milliseconds(20);
  while (Clock::now() < deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *list = nullptr;
    int rc = ::getaddrinfo(env.masterAddr.c_str(), port.c_str(), &hints, &list);
    if (rc != 0) {
      lastError =
          "cannot resolve '" + env.masterAddr + "': " +
          (rc == EAI_SYSTEM ? errnoText(errno) : std::string(gai_strerror(rc)));
    } else {
      for (addrinfo *ai = list; ai; ai = ai->ai_next) {
        Socket s(::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol));
        if (!s.valid() || !setNonblockingCloexec(s.fd())) {
          lastError = "socket: " + errnoText(errno);
          continue;
        }
        int e = 0;
        if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) < 0) {
          if (errno != EINPROGRESS && errno != EINTR) {
            lastError = errnoText(errno);
            continue;
          }
          auto until =
              std::min(deadline, Clock::now() + std::chrono::seconds(5));
          Io io = waitFor(s.fd(), POLLOUT, until, e);
          if (io == Io::Timeout) {
            lastError = "connecting timed out";
            continue;
          }
          socklen_t len = sizeof(e);
          if (io != Io::Ok ||
              ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &e, &len) < 0 ||
              e != 0) {
            lastError = errnoText(e ? e : errno);
            continue;
          }
        }
        // Connecting to a port nobody listens on can, on loopback, connect
        // the socket to itself (TCP simultaneous open); that is no rank 0.
        sockaddr_storage self{}, peer{};
        socklen_t selfLen = sizeof(self), peerLen = sizeof(peer);
        if (::getsockname(s.fd(), reinterpret_cast<sockaddr *>(&self),
                          &selfLen) == 0 &&
            ::getpeername(s.fd(), reinterpret_cast<sockaddr *>(&peer),
                          &peerLen) == 0 &&
            selfLen == peerLen && std::memcmp(&self, &peer, selfLen) == 0) {
          lastError = "connection refused";
          continue;
        }
        ::freeaddrinfo(list);
        return s;
      }
      ::freeaddrinfo(list);
    }
    auto now = Clock::now();
    if (now >= deadline)
      break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return Socket();
}

Status join(const DistEnv &env, std::vector<uint8_t> &blob,
            double timeoutSeconds, Clock::time_point deadline) {
  const std::string me = "rank " + std::to_string(env.rank);
  const std::string where =
      env.masterAddr + ":" + std::to_string(env.masterPort);
  std::string lastError;
  Socket s = connectToRankZero(env, deadline, lastError);
  if (!s.valid())
    return netError(
        me + ": no answer from rank 0 at " + where + " after " +
        secondsText(timeoutSeconds) +
        " s; is rank 0 running? check MASTER_ADDR/MASTER_PORT" +
        (lastError.empty() ? "" : " (last try: " + lastError + ")"));

  std::vector<uint8_t> hello;
  putWord(hello, kHelloMagic);
  putWord(hello, kVersion);
  putWord(hello, static_cast<uint32_t>(env.rank));
  putWord(hello, static_cast<uint32_t>(env.worldSize));
  // Rank 0 answers once every rank has joined; give it a moment past our
  // own timeout so that its message (which ranks are missing) reaches us.
  auto grace = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(timeoutSeconds, 5.0)));
  auto until = std::max(deadline, Clock::now()) + grace;
  int e = 0;
  auto ioError = [&](Io io, const char *what) {
    if (io == Io::Timeout)
      return netError(me + ": connected to rank 0 at " + where +
                      ", but it sent no id within " +
                      secondsText(timeoutSeconds) +
                      " s; it is still waiting for other ranks (are all " +
                      std::to_string(env.worldSize) + " ranks running?)");
    if (io == Io::Closed)
      return netError(me + ": rank 0 at " + where +
                      " closed the connection while " + what +
                      "; did rank 0 fail?");
    return netError(me + ": " + what + " rank 0 at " + where + ": " +
                    errnoText(e));
  };
  if (Io io = sendAll(s.fd(), hello.data(), hello.size(), until, e);
      io != Io::Ok)
    return ioError(io, "sending to");
  uint8_t head[12];
  if (Io io = recvAll(s.fd(), head, sizeof(head), until, e); io != Io::Ok)
    return ioError(io, "waiting for");
  if (word(head) != kReplyMagic)
    return netError(me + ": the service at " + where +
                    " is not dsc's rank 0 (unexpected reply); is MASTER_PORT "
                    "used by another program?");
  uint32_t status = word(head + 4), size = word(head + 8);
  if (size > kMaxBlob)
    return netError(me + ": rank 0 at " + where + " announced " +
                    std::to_string(size) + " bytes, more than the limit");
  std::vector<uint8_t> data(size);
  if (size > 0)
    if (Io io = recvAll(s.fd(), data.data(), size, until, e); io != Io::Ok)
      return ioError(io, "receiving from");
  if (status != 0) {
    std::string message(data.begin(), data.end());
    if (message.compare(0, 8, "rank 0: ") == 0)
      message.erase(0, 8);
    StatusCode code =
        status == static_cast<uint32_t>(StatusCode::InvalidArgument)
            ? StatusCode::InvalidArgument
            : StatusCode::IoError;
    return Status::error(code,
                         me + ": rank 0 at " + where + " reports: " + message);
  }
  blob = std::move(data);
  return Status();
}

} // namespace

Status exchangeId(const DistEnv &env, std::vector<uint8_t> &blob,
                  double timeoutSeconds) {
  if (!env.present || env.worldSize == 1)
    return Status();
  auto bad = [](const std::string &m) {
    return Status::error(StatusCode::InvalidArgument, "exchangeId: " + m);
  };
  if (env.worldSize < 1 || env.rank < 0 || env.rank >= env.worldSize)
    return bad("rank " + std::to_string(env.rank) + " is outside world size " +
               std::to_string(env.worldSize));
  if (env.masterPort < 1 || env.masterPort > 65535)
    return bad("master port " + std::to_string(env.masterPort) +
               " is not in [1, 65535]; set MASTER_PORT");
  if (env.rank != 0 && env.masterAddr.empty())
    return bad("no master address; set MASTER_ADDR to the host of rank 0");
  if (!(timeoutSeconds > 0))
    return bad("timeout " + secondsText(timeoutSeconds) + " s is not positive");
  auto deadline =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::min(timeoutSeconds, 1e7)));
  if (env.rank == 0)
    return serve(env, blob, timeoutSeconds, deadline);
  return join(env, blob, timeoutSeconds, deadline);
}

} // namespace dsc::launch
