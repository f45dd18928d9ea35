//===- output_file.h - Checked output paths and atomic writes ---*- C++ -*-===//
//
// Every file a compiled program writes (--dump-params, --dump-grads, --log)
// goes through here:
//
//   - checkOutputPath: before training, the path is refused unless its folder
//     exists and is writable and the target is absent or a regular file; a
//     symbolic link, device, FIFO or socket at the target is refused unless
//     the caller allows writing through special files (see OutputTarget);
//   - AtomicFile: a temporary `<target>.tmp.XXXXXX` in the target's folder,
//     flock()ed while written, fsync, rename, fsync of the folder; removed on
//     every failure path and (through a fixed-size registry) by SIGINT,
//     SIGTERM and SIGHUP;
//   - removeStaleTemporaries: a temporary that a killed run left behind (no
//     live writer holds its lock) is removed by the next run.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_OUTPUT_FILE_H
#define DSC_RUNTIME_IO_OUTPUT_FILE_H

#include "dsc/runtime.h"

#include <cstdio>
#include <string>
#include <vector>

namespace dsc::io {

/// How a checked output path is written.
enum class WriteMode {
  /// A temporary file in the same folder, renamed over `path`: readers see
  /// the old file or the complete new one, never a partial one.
  Atomic,
  /// `path` is an existing device or FIFO opened and written in place
  /// (e.g. /dev/null or a pipe to another process); only with
  /// --overwrite-special.
  Through,
};

/// Where and how to write what the user named. With `allowSpecial`, a
/// symbolic link is followed to the file it names (which is then replaced
/// atomically, the link kept) and a device or FIFO is written through.
struct OutputTarget {
  std::string path; // the user's path, or what its symbolic link names
  WriteMode mode = WriteMode::Atomic;
};

/// Checks `path` for `option` (used in messages: "--dump-params"). Fills
/// `target` on success; an error reads "--dump-params P: why".
Status checkOutputPath(const std::string &option, const std::string &path,
                       bool allowSpecial, OutputTarget &target);

/// The file `path` names, for comparing two outputs: its folder resolved
/// (realpath), then its name; `path` itself if the folder does not resolve.
std::string canonicalOutputPath(const std::string &path);

/// Opens a checked target as a stream (the --log file): a regular file is
/// created or truncated (never through a symbolic link put there since the
/// check: O_NOFOLLOW), a device or FIFO opened for writing.
Status openOutputStream(const OutputTarget &target, std::FILE **out);

/// Removes `<target>.tmp.XXXXXX` files in the target's folder that no live
/// writer holds (a writer keeps an exclusive flock() on its temporary until
/// it is renamed). Returns the paths removed, for a note to the user.
std::vector<std::string> removeStaleTemporaries(const std::string &target);

/// A file written as a whole and then published under its name.
class AtomicFile {
public:
  AtomicFile() = default;
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;
  /// Removes the temporary unless commit() succeeded.
  ~AtomicFile();

  /// Atomic: creates and locks the temporary, registers it for removal on a
  /// signal. Through: opens the existing device or FIFO.
  Status open(const std::string &path, WriteMode mode = WriteMode::Atomic);
  Status write(const void *data, size_t bytes);
  /// Atomic: fsync, permissions 0644 less the umask, a last check that the
  /// target is still absent or a regular file, rename, fsync of the folder.
  Status commit();

private:
  Status fail(const std::string &what);
  void discard();

  std::string path_, tmp_;
  WriteMode mode_ = WriteMode::Atomic;
  int fd_ = -1;
  int slot_ = -1; // in the signal cleanup registry
};

/// Creates `path` and its missing parents (mode 0777 less the umask) and
/// checks that it is a writable folder. An error reads "<who>: cannot
/// create directory 'P': why", naming the component that failed.
Status makeDirectories(const std::string &who, const std::string &path);

/// While `onStop` is set, SIGINT and SIGTERM call it (from the signal
/// handler: async-signal-safe code only) instead of removing the registered
/// temporaries and ending the program: a run that stops gracefully finishes
/// its step, saves a checkpoint and exits. Null restores the default, which
/// SIGHUP always has.
void setGracefulStop(void (*onStop)(int));
/// setGracefulStop(nullptr), async-signal-safe (a lock-free store): what a
/// stop handler calls so that a second signal ends the program.
void clearGracefulStop();

/// The signal cleanup registry (exposed for tests): at most
/// kMaxTemporaries paths of at most kMaxTemporaryPath bytes at once; a
/// temporary that does not fit is still removed on normal exit paths.
constexpr int kMaxTemporaries = 16;
constexpr size_t kMaxTemporaryPath = 4096;
/// Registers `path` and installs the handlers of SIGINT, SIGTERM and SIGHUP
/// once (a signal ignored at start stays ignored). -1 when full.
int registerTemporary(const std::string &path);
void unregisterTemporary(int slot);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_OUTPUT_FILE_H
