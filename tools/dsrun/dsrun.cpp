//===- dsrun.cpp - Start N local ranks of a compiled training program -----===//
//
//   dsrun -n N [--master-port P] [--] PROGRAM ARGS...
//
// Starts N processes of PROGRAM on this machine with the variables torchrun
// sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) plus DSRUN=1, prefixes every line they print with
// "[rank i] ", and stops them all when one fails. Plain POSIX; it links
// nothing of dsc, so it builds without MLIR.
//
// Each rank runs in its own process group (so that a rank's own children,
// e.g. those of a shell script, are signalled with it), with stdin from
// /dev/null; on Linux a rank also gets SIGTERM should dsrun die.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 1024;
constexpr size_t kMaxLine = 64 * 1024; // longer lines are cut
constexpr auto kKillAfter = std::chrono::seconds(5);
// A signal from the user is a request to stop: the ranks finish their step
// and save (a program with --save-dir) before they exit, which can take a
// while for a large model; SIGKILL only after this (or a second signal).
constexpr auto kStopGrace = std::chrono::seconds(600);
constexpr auto kDrainAfterExit = std::chrono::seconds(1);

const char *const kUsage =
    "usage: dsrun -n N [--master-port P] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Starts N processes of PROGRAM on this machine, one per rank, as torchrun\n"
    "does, for a program compiled by dsc (or any program that reads these\n"
    "variables). Rank i gets\n"
    "  RANK=i LOCAL_RANK=i WORLD_SIZE=N LOCAL_WORLD_SIZE=N\n"
    "  MASTER_ADDR=127.0.0.1 MASTER_PORT=P DSRUN=1\n"
    "and CUDA_VISIBLE_DEVICES as dsrun has it (the program picks its GPU by\n"
    "LOCAL_RANK). Every line a rank prints is prefixed with \"[rank i] \"\n"
    "(stdout to stdout, stderr to stderr); ranks read stdin from /dev/null.\n"
    "\n"
    "When a rank exits with a non-zero status or is killed by a signal, dsrun\n"
    "sends SIGTERM to the other ranks (SIGKILL 5 s later) and exits with that\n"
    "rank's status (128 + signal for a signal). SIGINT, SIGTERM and SIGHUP to\n"
    "dsrun are passed on to every rank, which may finish its step and save\n"
    "(--save-dir) before it exits: SIGKILL follows after 600 s, or at once on\n"
    "a second signal. When every rank exits with 0, so does dsrun.\n"
    "\n"
    "options:\n"
    "  -n N, --nproc N      number of ranks (1 to 1024)\n"
    "  --master-port P      the port rank 0 listens on (default: a free port)\n"
    "  -h, --help           this text\n"
    "\n"
    "exit status: that of the first rank to fail, 0 when all succeed, 2 for\n"
    "bad arguments, 126/127 when PROGRAM cannot be run.\n";

//===----------------------------------------------------------------------===//
// Output
//===----------------------------------------------------------------------===//

bool outputDead[3] = {false, false, false};

/// Writes all of `data` to fd 1 or 2, riding out EINTR and a non-blocking
/// descriptor; a closed reader (EPIPE) silences that stream from then on.
void writeAll(int fd, const std::string &data) {
  if (outputDead[fd])
    return;
  const char *p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n > 0) {
      p += n;
      left -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, 1000);
      continue;
    }
    outputDead[fd] = true;
    return;
  }
}

void say(const std::string &message) {
  writeAll(2, "dsrun: " + message + "\n");
}

/// One pipe from a rank: its stdout or stderr, and the partial line.
struct Stream {
  int fd = -1;
  int outFd = 1;
  std::string partial;
};

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0; // from waitpid, once reaped
  Stream out, err;
};

std::string prefixOf(const Rank &r) {
  return "[rank " + std::to_string(r.index) + "] ";
}

/// Writes the complete lines of `s.partial` (all of it if `flush`), each
/// with the rank's prefix, in one write so lines never interleave.
void emitLines(const Rank &r, Stream &s, bool flush) {
  std::string text;
  const std::string prefix = prefixOf(r);
  size_t start = 0;
  while (true) {
    size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos)
      break;
    text += prefix;
    text.append(s.partial, start, nl - start + 1);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if ((flush && !s.partial.empty()) || s.partial.size() >= kMaxLine) {
    text += prefix + s.partial + "\n";
    s.partial.clear();
  }
  if (!text.empty())
    writeAll(s.outFd, text);
}

void closeStream(Rank &r, Stream &s) {
  if (s.fd < 0)
    return;
  ::close(s.fd);
  s.fd = -1;
  emitLines(r, s, /*flush=*/true);
}

/// Reads what the pipe holds now (it is non-blocking) and prints the lines.
void readStream(Rank &r, Stream &s) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      emitLines(r, s, /*flush=*/false);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    closeStream(r, s); // end of file, or an error
  }
}

//===----------------------------------------------------------------------===//
// Signals: the handler only writes the signal number into a pipe that the
// poll loop watches.
//===----------------------------------------------------------------------===//

int signalPipe[2] = {-1, -1};

extern "C" void onSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(signalPipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

bool setFlags(int fd, bool nonblocking) {
  int fdfl = ::fcntl(fd, F_GETFD);
  if (fdfl < 0 || ::fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0)
    return false;
  if (!nonblocking)
    return true;
  int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) >= 0;
}

bool makePipe(int fds[2]) {
  if (::pipe(fds) < 0)
    return false;
  return setFlags(fds[0], false) && setFlags(fds[1], false);
}

bool installHandlers() {
  if (!makePipe(signalPipe) || !setFlags(signalPipe[0], true) ||
      !setFlags(signalPipe[1], true))
    return false;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kForwarded)
    if (::sigaction(sig, &sa, nullptr) < 0)
      return false;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  if (::sigaction(SIGCHLD, &sa, nullptr) < 0)
    return false;
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  return ::sigaction(SIGPIPE, &ign, nullptr) == 0;
}

std::string signalName(int sig) {
  const char *name = ::strsignal(sig);
  return "signal " + std::to_string(sig) +
         (name ? std::string(": ") + name : "");
}

//===----------------------------------------------------------------------===//
// Arguments
//===----------------------------------------------------------------------===//

struct Options {
  int ranks = 0;
  int masterPort = 0; // 0: find a free one
  std::vector<std::string> command;
};

[[noreturn]] void usageError(const std::string &message) {
  writeAll(2, "dsrun: " + message + "\n" +
                  "usage: dsrun -n N [--master-port P] [--] PROGRAM "
                  "[ARGS...] (dsrun --help for more)\n");
  std::exit(2);
}

int parseCount(const std::string &option, const std::string &text, int lo,
               int hi, const char *what) {
  bool digits = !text.empty() && text.size() <= 9 &&
                std::all_of(text.begin(), text.end(),
                            [](char c) { return c >= '0' && c <= '9'; });
  long v = digits ? std::strtol(text.c_str(), nullptr, 10) : -1;
  if (!digits || v < lo || v > hi)
    usageError(option + " takes " + what + " from " + std::to_string(lo) +
               " to " + std::to_string(hi) + ", not '" + text + "'");
  return static_cast<int>(v);
}

Options parseArgs(int argc, char **argv) {
  Options o;
  bool haveRanks = false;
  int i = 1;
  // An option's value: "--opt V", "--opt=V" or, for -n, "-nV".
  auto value = [&](const std::string &arg, const std::string &name,
                   std::string &out) {
    if (arg == name) {
      if (i + 1 >= argc)
        usageError(name + " needs a value");
      out = argv[++i];
      return true;
    }
    if (arg.compare(0, name.size() + 1, name + "=") == 0) {
      out = arg.substr(name.size() + 1);
      return true;
    }
    if (name == "-n" && arg.size() > 2 && arg.compare(0, 2, "-n") == 0) {
      out = arg.substr(2);
      return true;
    }
    return false;
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i], v;
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      writeAll(1, kUsage);
      std::exit(0);
    }
    if (value(arg, "-n", v) || value(arg, "--nproc", v)) {
      o.ranks = parseCount(arg.compare(0, 2, "-n") == 0 ? "-n" : "--nproc", v,
                           1, kMaxRanks, "a number of ranks");
      haveRanks = true;
      continue;
    }
    if (value(arg, "--master-port", v)) {
      o.masterPort = parseCount("--master-port", v, 1, 65535, "a port");
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-')
      usageError("unknown option '" + arg + "'");
    break; // the program
  }
  for (; i < argc; ++i)
    o.command.push_back(argv[i]);
  if (!haveRanks)
    usageError("say how many ranks to start with -n N");
  if (o.command.empty())
    usageError("no program to run");
  return o;
}

/// A port no one listens on now: bind port 0 and read what the kernel chose.
/// (Dual-stack where the host has IPv6, as rank 0 listens.)
int freePort() {
  for (int family : {AF_INET6, AF_INET}) {
    int fd = ::socket(family, SOCK_STREAM, 0);
    if (fd < 0)
      continue;
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET6) {
      int zero = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      auto *a = reinterpret_cast<sockaddr_in6 *>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      len = sizeof(sockaddr_in6);
    } else {
      auto *a = reinterpret_cast<sockaddr_in *>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      len = sizeof(sockaddr_in);
    }
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr *>(&ss), len) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &len) == 0)
      port = ntohs(family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port
                       : reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
    ::close(fd);
    if (port > 0)
      return port;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Ranks
//===----------------------------------------------------------------------===//

/// In the child: becomes rank `index` and execs the program. On failure
/// writes errno to `execPipe` and exits 127.
[[noreturn]] void execRank(const Options &o, int index, pid_t parent, int outFd,
                           int errFd, int execPipe, const sigset_t &oldMask) {
  ::setpgid(0, 0);
#ifdef __linux__
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) // dsrun died before prctl
    ::_exit(127);
#endif
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : kForwarded)
    ::sigaction(sig, &dfl, nullptr);
  ::sigaction(SIGCHLD, &dfl, nullptr);
  ::sigaction(SIGPIPE, &dfl, nullptr);
  ::sigprocmask(SIG_SETMASK, &oldMask, nullptr);

  int devNull = ::open("/dev/null", O_RDONLY);
  if (devNull >= 0 && devNull != 0) {
    ::dup2(devNull, 0);
    ::close(devNull);
  }
  ::dup2(outFd, 1);
  ::dup2(errFd, 2);
  const std::string rank = std::to_string(index),
                    size = std::to_string(o.ranks),
                    port = std::to_string(o.masterPort);
  ::setenv("RANK", rank.c_str(), 1);
  ::setenv("LOCAL_RANK", rank.c_str(), 1);
  ::setenv("WORLD_SIZE", size.c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", size.c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", port.c_str(), 1);
  ::setenv("DSRUN", "1", 1);

  std::vector<char *> args;
  for (const auto &a : o.command)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  int e = errno;
  ssize_t ignored = ::write(execPipe, &e, sizeof(e));
  (void)ignored;
  ::_exit(127);
}

class Launcher {
public:
  explicit Launcher(Options o) : opts_(std::move(o)) {}
  int run();

private:
  bool start(int index);
  void signalAll(int sig);
  void reap();
  void onRankExit(Rank &r);
  void beginStop(int sig, bool requested = false);
  void handleSignals();
  bool anyRunning() const;
  bool anyOpen() const;

  Options opts_;
  std::vector<Rank> ranks_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point killAt_;
  std::chrono::seconds grace_{0};
  int exitCode_ = 0;
  int interruptedBy_ = 0;
};

bool Launcher::start(int index) {
  int out[2], err[2], exec[2];
  if (!makePipe(out) || !makePipe(err) || !makePipe(exec)) {
    say("cannot create pipes for rank " + std::to_string(index) + ": " +
        std::strerror(errno));
    return false;
  }
  // Signals stay blocked across fork until the child has reset its
  // handlers, so no handler of ours runs in the child.
  sigset_t all, old;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &old);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    ::close(err[0]);
    ::close(exec[0]);
    execRank(opts_, index, parent, out[1], err[1], exec[1], old);
  }
  int forkErrno = errno;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  ::close(out[1]);
  ::close(err[1]);
  ::close(exec[1]);
  if (pid < 0) {
    say("cannot start rank " + std::to_string(index) + ": " +
        std::strerror(forkErrno));
    ::close(out[0]);
    ::close(err[0]);
    ::close(exec[0]);
    return false;
  }
  ::setpgid(pid, pid); // also done by the child; whichever runs first

  Rank r;
  r.index = index;
  r.pid = pid;
  r.running = true;
  r.out.fd = out[0];
  r.out.outFd = 1;
  r.err.fd = err[0];
  r.err.outFd = 2;
  setFlags(r.out.fd, true);
  setFlags(r.err.fd, true);
  ranks_.push_back(std::move(r));

  // The exec pipe closes on a successful exec; otherwise it carries errno.
  int e = 0;
  ssize_t n;
  do
    n = ::read(exec[0], &e, sizeof(e));
  while (n < 0 && errno == EINTR);
  ::close(exec[0]);
  if (n == static_cast<ssize_t>(sizeof(e))) {
    say("cannot run '" + opts_.command[0] + "': " + std::strerror(e));
    exitCode_ = e == ENOENT ? 127 : 126;
    return false;
  }
  return true;
}

void Launcher::signalAll(int sig) {
  // The whole process group: a rank's own children go too. A reaped rank's
  // group may still hold such children; an empty one gives ESRCH.
  for (auto &r : ranks_)
    if (::kill(-r.pid, sig) < 0 && r.running)
      ::kill(r.pid, sig);
}

bool Launcher::anyRunning() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const Rank &r) { return r.running; });
}

bool Launcher::anyOpen() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank &r) {
    return r.out.fd >= 0 || r.err.fd >= 0;
  });
}

void Launcher::beginStop(int sig, bool requested) {
  if (stopping_)
    return;
  stopping_ = true;
  grace_ = requested ? kStopGrace : kKillAfter;
  killAt_ = Clock::now() + grace_;
  signalAll(sig);
}

void Launcher::onRankExit(Rank &r) {
  // What the rank printed before it exited is in its pipes now: print it
  // before saying that it failed.
  readStream(r, r.out);
  readStream(r, r.err);
  if (stopping_ && interruptedBy_ == 0)
    return; // stopped for another rank's failure, which is the status
  int code = 0;
  std::string how;
  if (WIFEXITED(r.status)) {
    code = WEXITSTATUS(r.status);
    how = "exited with status " + std::to_string(code);
  } else if (WIFSIGNALED(r.status)) {
    code = 128 + WTERMSIG(r.status);
    how = "exited with status " + std::to_string(code) + " (killed by " +
          signalName(WTERMSIG(r.status)) + ")";
  }
  if (code == 0)
    return;
  if (stopping_) { // stopped by the user: the first rank that did not exit 0
    if (exitCode_ == 0)
      exitCode_ = code;
    return;
  }
  exitCode_ = code;
  bool others = std::any_of(ranks_.begin(), ranks_.end(),
                            [&](const Rank &o) { return o.running; });
  say("rank " + std::to_string(r.index) + " " + how +
      (others ? "; stopping the other ranks" : ""));
  beginStop(SIGTERM);
}

void Launcher::reap() {
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid <= 0)
      return;
    for (auto &r : ranks_) {
      if (r.pid != pid || !r.running)
        continue;
      r.running = false;
      r.status = status;
      onRankExit(r);
      break;
    }
  }
}

void Launcher::handleSignals() {
  unsigned char sigs[64];
  ssize_t n;
  while ((n = ::read(signalPipe[0], sigs, sizeof(sigs))) > 0 ||
         (n < 0 && errno == EINTR)) {
    for (ssize_t k = 0; k < n; ++k) {
      int sig = sigs[k];
      if (sig == SIGCHLD)
        continue; // reaped below
      if (!stopping_) {
        interruptedBy_ = sig;
        say(std::string("got ") +
            (sig == SIGINT    ? "SIGINT"
             : sig == SIGTERM ? "SIGTERM"
                              : "SIGHUP") +
            "; passing it on to the ranks");
        beginStop(sig, /*requested=*/true);
      } else if (!killed_ && anyRunning()) {
        say("killing the ranks");
        killed_ = true;
        signalAll(SIGKILL);
      }
    }
  }
  reap();
}

int Launcher::run() {
  if (!installHandlers()) {
    say(std::string("cannot set up signal handling: ") + std::strerror(errno));
    return 1;
  }
  if (opts_.masterPort == 0 && (opts_.masterPort = freePort()) == 0) {
    say("cannot find a free port; pass --master-port P");
    return 1;
  }
  ranks_.reserve(static_cast<size_t>(opts_.ranks));
  for (int i = 0; i < opts_.ranks && !stopping_; ++i) {
    if (!start(i)) {
      if (exitCode_ == 0)
        exitCode_ = 1;
      beginStop(SIGTERM);
      break;
    }
    handleSignals(); // an early failure or Ctrl-C stops the launch
  }

  Clock::time_point drainUntil{};
  bool draining = false;
  while (true) {
    if (!anyRunning()) {
      if (!anyOpen())
        break;
      // Every rank is gone, but something they started may hold a pipe:
      // read what comes for a moment, then stop.
      if (!draining) {
        draining = true;
        drainUntil = Clock::now() + kDrainAfterExit;
      } else if (Clock::now() >= drainUntil) {
        break;
      }
    }
    std::vector<pollfd> fds;
    std::vector<Stream *> streams;
    std::vector<Rank *> owners;
    fds.push_back({signalPipe[0], POLLIN, 0});
    for (auto &r : ranks_)
      for (Stream *s : {&r.out, &r.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
          owners.push_back(&r);
        }
    int timeout = -1;
    auto until = [&](Clock::time_point t) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    t - Clock::now())
                    .count() +
                1;
      int v = static_cast<int>(std::max<long long>(0, ms));
      timeout = timeout < 0 ? v : std::min(timeout, v);
    };
    if (stopping_ && !killed_ && anyRunning())
      until(killAt_);
    if (draining)
      until(drainUntil);
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      say(std::string("poll: ") + std::strerror(errno));
      beginStop(SIGTERM);
      if (exitCode_ == 0)
        exitCode_ = 1;
    }
    for (size_t k = 1; n > 0 && k < fds.size(); ++k)
      if (fds[k].revents)
        readStream(*owners[k - 1], *streams[k - 1]);
    handleSignals();
    if (stopping_ && !killed_ && anyRunning() && Clock::now() >= killAt_) {
      std::string left;
      for (auto &r : ranks_)
        if (r.running)
          left += (left.empty() ? "" : ", ") + std::to_string(r.index);
      say("rank(s) " + left + " still running " +
          std::to_string(grace_.count()) + " s after SIGTERM; killing them");
      killed_ = true;
      signalAll(SIGKILL);
    }
  }
  for (auto &r : ranks_) {
    closeStream(r, r.out);
    closeStream(r, r.err);
  }
  // Stopped by a signal and every rank exited 0 (it finished its step and
  // saved): so does dsrun. A rank the signal ended gives 128 + signal.
  if (exitCode_ != 0)
    return exitCode_;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options opts = parseArgs(argc, argv);
  return Launcher(std::move(opts)).run();
}
