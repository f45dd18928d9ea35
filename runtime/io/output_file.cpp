//===- output_file.cpp - Checked output paths and atomic writes -----------===//

#include "io/output_file.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <mutex>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsc::io {

namespace {

std::string errnoText(int e = errno) { return std::strerror(e); }

/// "a/b/c" -> "a/b", "c" -> ".", "/c" -> "/".
std::string folderOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// "a/b/c" -> "a/b/" (what a sibling's name is appended to), "c" -> "".
std::string prefixOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

/// What a non-regular file is, for messages.
const char *kindOf(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISLNK(mode))
    return "a symbolic link";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

/// Why `folder` cannot hold a new file: it is missing (naming the first
/// missing component's parent that exists) or something on the way is a file.
std::string missingFolderReason(const std::string &folder) {
  std::string up = folder;
  struct stat st;
  while (::stat(up.c_str(), &st) != 0 && up != "." && up != "/")
    up = folderOf(up);
  if (::stat(up.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    return "'" + up + "' is a file, not a directory";
  return "directory '" + folder + "' does not exist";
}

} // namespace

//===----------------------------------------------------------------------===//
// Checks before training
//===----------------------------------------------------------------------===//

namespace {

Status checkOutputPathAt(const std::string &option, const std::string &path,
                         bool allowSpecial, OutputTarget &target, int hops);

/// --overwrite-special on a symbolic link: what it names is checked as if
/// given directly, so a link to a device is written through and a link to a
/// file replaces that file (the link stays). A link to a file not written
/// yet is followed one hop at a time.
Status followLink(const std::string &option, const std::string &path,
                  OutputTarget &target, int hops) {
  auto refuse = [&](const std::string &why) {
    return Status::error(StatusCode::InvalidArgument,
                         option + " " + path + ": " + why);
  };
  std::string chain = option + " " + path + " ->";
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved))
    return checkOutputPathAt(chain, resolved, true, target, hops + 1);
  if (errno != ENOENT)
    return refuse("is a symbolic link that does not resolve: " + errnoText());
  if (hops >= 8)
    return refuse("too many levels of symbolic links");
  ssize_t n = ::readlink(path.c_str(), resolved, sizeof resolved - 1);
  if (n <= 0)
    return refuse("is a symbolic link that cannot be read: " + errnoText());
  std::string next(resolved, size_t(n));
  if (next[0] != '/')
    next = prefixOf(path) + next;
  return checkOutputPathAt(chain, next, true, target, hops + 1);
}

Status checkOutputPathAt(const std::string &option, const std::string &path,
                         bool allowSpecial, OutputTarget &target, int hops) {
  auto refuse = [&](const std::string &why) {
    return Status::error(StatusCode::InvalidArgument,
                         option + " " + path + ": " + why);
  };
  if (path.empty())
    return Status::error(StatusCode::InvalidArgument,
                         option + " needs a file name");
  if (path.back() == '/')
    return refuse("is a directory; give a file name inside it");
  std::string folder = folderOf(path);
  struct stat st;
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return refuse(missingFolderReason(folder));
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return refuse("cannot write into directory '" + folder +
                  "': " + errnoText());

  target = OutputTarget{path, WriteMode::Atomic};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return Status(); // a new file
    return refuse(errnoText());
  }
  if (S_ISREG(st.st_mode))
    return Status(); // replaced atomically
  std::string kind = kindOf(st.st_mode);
  if (S_ISDIR(st.st_mode))
    return refuse("is a directory; give a file name inside it");
  if (S_ISSOCK(st.st_mode))
    return refuse("is a socket; refusing to replace it");
  if (S_ISLNK(st.st_mode)) {
    if (!allowSpecial)
      return refuse("is a symbolic link; refusing to replace it (pass "
                    "--overwrite-special to write to the file it points to)");
    return followLink(option, path, target, hops);
  }
  if (!allowSpecial)
    return refuse("is " + kind +
                  "; refusing to replace it (pass --overwrite-special to "
                  "write through it)");
  target.mode = WriteMode::Through;
  return Status();
}

} // namespace

Status checkOutputPath(const std::string &option, const std::string &path,
                       bool allowSpecial, OutputTarget &target) {
  return checkOutputPathAt(option, path, allowSpecial, target, 0);
}

std::string canonicalOutputPath(const std::string &path) {
  char resolved[PATH_MAX];
  if (!::realpath(folderOf(path).c_str(), resolved))
    return path;
  return std::string(resolved) + "/" + path.substr(prefixOf(path).size());
}

Status openOutputStream(const OutputTarget &target, std::FILE **out) {
  int flags = O_WRONLY | O_NOCTTY | O_CLOEXEC;
  if (target.mode == WriteMode::Atomic)
    flags |= O_CREAT | O_TRUNC | O_NOFOLLOW;
  int fd = ::open(target.path.c_str(), flags, 0666);
  if (fd < 0)
    return Status::error(StatusCode::IoError, "cannot open: " + errnoText());
  *out = ::fdopen(fd, "w");
  if (!*out) {
    int e = errno;
    ::close(fd);
    return Status::error(StatusCode::IoError, "cannot open: " + errnoText(e));
  }
  return Status();
}

std::vector<std::string> removeStaleTemporaries(const std::string &target) {
  std::vector<std::string> removed;
  std::string folder = folderOf(target), prefix = prefixOf(target);
  std::string stem = target.substr(prefix.size()) + ".tmp.";
  DIR *dir = ::opendir(folder.c_str());
  if (!dir)
    return removed;
  while (const dirent *e = ::readdir(dir)) {
    std::string name = e->d_name;
    // mkstemp's pattern: exactly six characters after the stem.
    if (name.size() != stem.size() + 6 || name.compare(0, stem.size(), stem))
      continue;
    std::string path = prefix + name;
    int fd = ::open(path.c_str(),
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
      continue;
    struct stat st;
    // A live writer holds LOCK_EX until its rename; a killed one holds none.
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::unlink(path.c_str()) == 0)
      removed.push_back(path);
    ::close(fd);
  }
  ::closedir(dir);
  return removed;
}

Status makeDirectories(const std::string &who, const std::string &path) {
  if (path.empty())
    return Status::error(StatusCode::InvalidArgument,
                         who + ": needs a directory name");
  // Each prefix ending before a '/', then the whole path.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    std::string prefix = path.substr(0, end);
    if (!prefix.empty() && prefix.back() != '/' &&
        ::mkdir(prefix.c_str(), 0777) != 0) {
      int e = errno;
      struct stat st;
      if (e != EEXIST || ::stat(prefix.c_str(), &st) != 0)
        return Status::error(StatusCode::IoError,
                             who + ": cannot create directory '" + prefix +
                                 "': " + std::strerror(e));
      if (!S_ISDIR(st.st_mode))
        return Status::error(StatusCode::IoError,
                             who + ": cannot create directory '" + prefix +
                                 "': a file is in the way");
    }
    if (end == std::string::npos)
      break;
  }
  if (::access(path.c_str(), W_OK | X_OK) != 0)
    return Status::error(StatusCode::IoError, who + ": cannot write into '" +
                                                  path +
                                                  "': " + std::strerror(errno));
  return Status();
}

//===----------------------------------------------------------------------===//
// The signal cleanup registry
//===----------------------------------------------------------------------===//

namespace {

// Slots: 0 free, 1 being filled, 2 a live temporary the handler removes.
// Fixed storage and lock-free atomics only: the handler may run at any
// instruction of any thread, so it can neither allocate nor take a lock.
static_assert(std::atomic<int>::is_always_lock_free);
char gPaths[kMaxTemporaries][kMaxTemporaryPath];
std::atomic<int> gSlots[kMaxTemporaries];

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction gPrevious[3];
std::atomic<void (*)(int)> gGracefulStop{nullptr};
std::once_flag gInstalled;

extern "C" void removeTemporariesOnSignal(int sig) {
  if (sig != SIGHUP)
    if (void (*onStop)(int) = gGracefulStop.load()) {
      onStop(sig);
      return;
    }
  for (int i = 0; i < kMaxTemporaries; ++i)
    if (gSlots[i].load() == 2)
      ::unlink(gPaths[i]);
  // Then die as the signal would have (exit status, core dump), or let the
  // handler that was there before us run: re-raise under it. The signal is
  // blocked while we run, so it is delivered once we return.
  for (int k = 0; k < 3; ++k)
    if (kSignals[k] == sig)
      ::sigaction(sig, &gPrevious[k], nullptr);
  ::raise(sig);
}

void installHandlers() {
  for (int k = 0; k < 3; ++k) {
    if (::sigaction(kSignals[k], nullptr, &gPrevious[k]) != 0)
      continue;
    // nohup and `cmd &` in a non-interactive shell ignore signals on
    // purpose; keep it so.
    if (gPrevious[k].sa_handler == SIG_IGN)
      continue;
    struct sigaction sa {};
    sa.sa_handler = removeTemporariesOnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(kSignals[k], &sa, nullptr);
  }
}

} // namespace

void setGracefulStop(void (*onStop)(int)) {
  std::call_once(gInstalled, installHandlers);
  gGracefulStop.store(onStop);
}

void clearGracefulStop() { gGracefulStop.store(nullptr); }

int registerTemporary(const std::string &path) {
  std::call_once(gInstalled, installHandlers);
  if (path.size() >= kMaxTemporaryPath)
    return -1;
  for (int i = 0; i < kMaxTemporaries; ++i) {
    int expected = 0;
    if (!gSlots[i].compare_exchange_strong(expected, 1))
      continue;
    std::memcpy(gPaths[i], path.c_str(), path.size() + 1);
    gSlots[i].store(2);
    return i;
  }
  return -1;
}

void unregisterTemporary(int slot) {
  if (slot >= 0 && slot < kMaxTemporaries)
    gSlots[slot].store(0);
}

//===----------------------------------------------------------------------===//
// AtomicFile
//===----------------------------------------------------------------------===//

AtomicFile::~AtomicFile() { discard(); }

Status AtomicFile::fail(const std::string &what) {
  int e = errno;
  discard();
  return Status::error(StatusCode::IoError, what + ": " + errnoText(e));
}

void AtomicFile::discard() {
  if (!tmp_.empty())
    ::unlink(tmp_.c_str()); // while still locked, before close
  if (fd_ >= 0)
    ::close(fd_);
  unregisterTemporary(slot_);
  tmp_.clear();
  fd_ = slot_ = -1;
}

Status AtomicFile::open(const std::string &path, WriteMode mode) {
  discard();
  path_ = path;
  mode_ = mode;
  if (mode == WriteMode::Through) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    return fd_ < 0 ? fail("cannot open") : Status();
  }
  std::string tmp = path + ".tmp.XXXXXX";
  fd_ = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd_ < 0)
    return fail("cannot create a temporary file");
  tmp_ = tmp;
  slot_ = registerTemporary(tmp_);
  // The lock tells removeStaleTemporaries of another run that we are alive.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
    return fail("cannot lock " + tmp_);
  return Status();
}

Status AtomicFile::write(const void *data, size_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes) {
    ssize_t w = ::write(fd_, p, bytes);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      if (w == 0)
        errno = EIO;
      return fail("write failed");
    }
    p += w, bytes -= static_cast<size_t>(w);
  }
  return Status();
}

Status AtomicFile::commit() {
  if (fd_ < 0)
    return Status::error(StatusCode::IoError, "commit of a file not open");
  if (mode_ == WriteMode::Through) {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      return fail("close failed");
    return Status();
  }
  if (::fsync(fd_) != 0)
    return fail("fsync failed");
  // mkstemp creates 0600; an output gets the usual 0644 less the umask.
  mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd_, 0644 & ~mask) != 0)
    return fail("chmod failed");
  // The target was checked at start-up; refuse if something else has been
  // put there since (the window left is between this check and the rename).
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    discard();
    return Status::error(StatusCode::IoError,
                         std::string("the target is now ") +
                             kindOf(st.st_mode) + "; refusing to replace it");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    return fail("rename failed");
  tmp_.clear(); // published: nothing to remove any more
  unregisterTemporary(slot_);
  slot_ = -1;
  int fd = fd_;
  fd_ = -1;
  ::close(fd);
  // The rename is durable only once the directory entry is on disk.
  int dir = ::open(folderOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0)
    return fail("cannot open the directory to fsync it");
  int rc = ::fsync(dir);
  int e = errno;
  ::close(dir);
  // Some file systems cannot fsync a directory (EINVAL); nothing to do there.
  if (rc != 0 && e != EINVAL) {
    errno = e;
    return fail("fsync of the directory failed");
  }
  return Status();
}

} // namespace dsc::io
