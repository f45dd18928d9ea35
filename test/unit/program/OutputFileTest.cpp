//===- OutputFileTest.cpp - Output path checks, atomic writes, cleanup ----===//
//
// io/output_file.h on its own: what checkOutputPath refuses, that an
// AtomicFile leaves no temporary behind on any path (including SIGTERM, in a
// forked child), and which stale temporaries the next run removes.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "io/output_file.h"

#include <climits>
#include <csignal>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace dsc;
using namespace dsc::io;
using namespace dsc::program::test;

namespace {

bool exists(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

/// Files in `dir` whose name starts with `prefix`.
int countStartingWith(const std::string &dir, const std::string &prefix) {
  std::string cmd = "ls -A '" + dir + "' | grep -c '^" + prefix + "'";
  std::FILE *p = ::popen(cmd.c_str(), "r");
  int n = 0;
  if (p) {
    if (std::fscanf(p, "%d", &n) != 1)
      n = -1;
    ::pclose(p);
  }
  return n;
}

Status check(const std::string &path, bool allowSpecial, OutputTarget &t) {
  return checkOutputPath("--out", path, allowSpecial, t);
}

TEST(OutputPath, NewAndRegularFilesAreReplacedAtomically) {
  TempDir dir;
  OutputTarget t;
  ASSERT_TRUE(check(dir / "new.bin", false, t).ok());
  EXPECT_EQ(t.path, dir / "new.bin");
  EXPECT_EQ(t.mode, WriteMode::Atomic);
  writeFile(dir / "old.bin", "old");
  ASSERT_TRUE(check(dir / "old.bin", false, t).ok());
  EXPECT_EQ(t.mode, WriteMode::Atomic);
}

TEST(OutputPath, FoldersThatCannotHoldTheFileAreRefused) {
  TempDir dir;
  OutputTarget t;
  Status s = check(dir / "no/such/out.bin", true, t);
  EXPECT_EQ(s.message(), "--out " + dir / "no/such/out.bin" + ": directory '" +
                             dir / "no/such" + "' does not exist");
  writeFile(dir / "file", "x");
  s = check(dir / "file/sub/out.bin", true, t);
  EXPECT_EQ(s.message(), "--out " + dir / "file/sub/out.bin" + ": '" +
                             dir / "file" + "' is a file, not a directory");
  // A directory is never a target, not even with --overwrite-special.
  s = check(dir.path(), true, t);
  EXPECT_TRUE(contains(s.message(), "is a directory")) << s.message();
  s = check(dir / "x/", false, t);
  EXPECT_TRUE(contains(s.message(), "is a directory")) << s.message();
  EXPECT_EQ(check("", false, t).message(), "--out needs a file name");
}

TEST(OutputPath, SpecialFilesNeedOverwriteSpecial) {
  TempDir dir;
  OutputTarget t;
  EXPECT_EQ(check("/dev/zero", false, t).message(),
            "--out /dev/zero: is a character device; refusing to replace it "
            "(pass --overwrite-special to write through it)");
  ASSERT_TRUE(check("/dev/zero", true, t).ok());
  EXPECT_EQ(t.mode, WriteMode::Through);

  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_TRUE(contains(check(dir / "fifo", false, t).message(),
                       "is a FIFO; refusing to replace it"));
  ASSERT_TRUE(check(dir / "fifo", true, t).ok());
  EXPECT_EQ(t.mode, WriteMode::Through);

  // A symbolic link is followed, to a file (replaced, the link kept) or to a
  // device (written through); a dangling one is refused.
  ASSERT_EQ(::symlink("real.bin", (dir / "link").c_str()), 0);
  writeFile(dir / "real.bin", "x");
  EXPECT_EQ(check(dir / "link", false, t).message(),
            "--out " + dir / "link" +
                ": is a symbolic link; refusing to replace it (pass "
                "--overwrite-special to write to the file it points to)");
  ASSERT_TRUE(check(dir / "link", true, t).ok());
  char real[PATH_MAX];
  ASSERT_NE(::realpath((dir / "real.bin").c_str(), real), nullptr);
  EXPECT_EQ(t.path, real);
  EXPECT_EQ(t.mode, WriteMode::Atomic);
  ASSERT_EQ(::symlink("/dev/zero", (dir / "null").c_str()), 0);
  ASSERT_TRUE(check(dir / "null", true, t).ok());
  EXPECT_EQ(t.path, "/dev/zero");
  EXPECT_EQ(t.mode, WriteMode::Through);
  // A link to a file not written yet is followed, its folder checked.
  ASSERT_EQ(::symlink("later.bin", (dir / "dangling").c_str()), 0);
  ASSERT_TRUE(check(dir / "dangling", true, t).ok());
  EXPECT_EQ(t.path, dir / "later.bin");
  EXPECT_EQ(t.mode, WriteMode::Atomic);
  ASSERT_EQ(::symlink("gone/x", (dir / "nowhere").c_str()), 0);
  EXPECT_EQ(check(dir / "nowhere", true, t).message(),
            "--out " + dir / "nowhere" + " -> " + dir / "gone/x" +
                ": directory '" + dir / "gone" + "' does not exist");
  ASSERT_EQ(::symlink("loop", (dir / "loop").c_str()), 0);
  EXPECT_TRUE(contains(check(dir / "loop", true, t).message(),
                       "symbolic link that does not resolve"));
  ASSERT_EQ(::symlink(dir.path().c_str(), (dir / "todir").c_str()), 0);
  EXPECT_TRUE(contains(check(dir / "todir", true, t).message(),
                       "-> " +
                           std::string(::realpath(dir.path().c_str(), real)) +
                           ": is a directory"));
}

TEST(AtomicFile, CommitPublishesAndLeavesNoTemporary) {
  TempDir dir;
  writeFile(dir / "out.bin", "old");
  {
    AtomicFile f;
    ASSERT_TRUE(f.open(dir / "out.bin").ok());
    EXPECT_EQ(countStartingWith(dir.path(), "out.bin.tmp."), 1);
    ASSERT_TRUE(f.write("new", 3).ok());
    EXPECT_EQ(readFile(dir / "out.bin"), "old"); // not published yet
    ASSERT_TRUE(f.commit().ok());
  }
  EXPECT_EQ(readFile(dir / "out.bin"), "new");
  EXPECT_EQ(countStartingWith(dir.path(), "out.bin.tmp."), 0);
}

TEST(AtomicFile, AnAbandonedWriteRemovesItsTemporary) {
  TempDir dir;
  {
    AtomicFile f;
    ASSERT_TRUE(f.open(dir / "out.bin").ok());
    ASSERT_TRUE(f.write("partial", 7).ok());
  } // an early return: no commit
  EXPECT_FALSE(exists(dir / "out.bin"));
  EXPECT_EQ(countStartingWith(dir.path(), "out.bin."), 0);
}

TEST(AtomicFile, ATargetReplacedByALinkSinceTheCheckIsRefused) {
  TempDir dir;
  AtomicFile f;
  ASSERT_TRUE(f.open(dir / "out.bin").ok());
  ASSERT_TRUE(f.write("x", 1).ok());
  ASSERT_EQ(::symlink("/dev/zero", (dir / "out.bin").c_str()), 0);
  Status s = f.commit();
  EXPECT_EQ(s.message(),
            "the target is now a symbolic link; refusing to replace it");
  EXPECT_EQ(countStartingWith(dir.path(), "out.bin."), 0);
  struct stat st;
  ASSERT_EQ(::lstat((dir / "out.bin").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST(AtomicFile, ThroughWritesIntoTheDevice) {
  AtomicFile f;
  ASSERT_TRUE(f.open("/dev/zero", WriteMode::Through).ok());
  ASSERT_TRUE(f.write("x", 1).ok());
  ASSERT_TRUE(f.commit().ok());
  struct stat st;
  ASSERT_EQ(::lstat("/dev/zero", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

// A child process starts a write and is sent SIGTERM before it commits: the
// handler removes the temporary and the child still dies of SIGTERM.
TEST(AtomicFile, SigtermRemovesTheTemporary) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    AtomicFile f;
    if (!f.open(dir / "out.bin").ok() || !f.write("partial", 7).ok())
      ::_exit(2);
    char one = 1;
    if (::write(ready[1], &one, 1) != 1)
      ::_exit(3);
    for (;;)
      ::pause(); // "still writing"
  }
  ::close(ready[1]);
  char one = 0;
  ASSERT_EQ(::read(ready[0], &one, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(countStartingWith(dir.path(), "out.bin.tmp."), 1);
  ASSERT_EQ(::kill(child, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_EQ(countStartingWith(dir.path(), "out.bin"), 0);
}

TEST(CleanupRegistry, HoldsAFixedNumberOfPaths) {
  std::vector<int> slots;
  for (int i = 0; i < kMaxTemporaries; ++i) {
    slots.push_back(registerTemporary("/nonexistent/t" + std::to_string(i)));
    EXPECT_GE(slots.back(), 0);
  }
  EXPECT_EQ(registerTemporary("/nonexistent/full"), -1);
  unregisterTemporary(slots[3]);
  EXPECT_EQ(registerTemporary("/nonexistent/again"), slots[3]);
  for (int s : slots)
    unregisterTemporary(s);
  EXPECT_EQ(registerTemporary(std::string(kMaxTemporaryPath, 'a')), -1);
}

TEST(StaleTemporaries, OnlyUnlockedOnesOfTheTargetAreRemoved) {
  TempDir dir;
  writeFile(dir / "p.st.tmp.AAAAAA", "killed run");
  writeFile(dir / "p.st.tmp.short", "not mkstemp's");
  writeFile(dir / "q.st.tmp.BBBBBB", "another target's");
  ASSERT_EQ(::symlink("p.st", (dir / "p.st.tmp.CCCCCC").c_str()), 0);
  AtomicFile live; // a concurrent writer of the same target
  ASSERT_TRUE(live.open(dir / "p.st").ok());

  std::vector<std::string> removed = removeStaleTemporaries(dir / "p.st");
  EXPECT_EQ(removed, std::vector<std::string>{dir / "p.st.tmp.AAAAAA"});
  EXPECT_FALSE(exists(dir / "p.st.tmp.AAAAAA"));
  EXPECT_TRUE(exists(dir / "p.st.tmp.short"));
  EXPECT_TRUE(exists(dir / "q.st.tmp.BBBBBB"));
  EXPECT_TRUE(exists(dir / "p.st.tmp.CCCCCC"));
  EXPECT_EQ(countStartingWith(dir.path(), "p.st.tmp."), 3); // live's remains
  ASSERT_TRUE(live.write("x", 1).ok());
  EXPECT_TRUE(live.commit().ok());
}

TEST(OutputStream, OpensFilesAndDevices) {
  TempDir dir;
  std::FILE *f = nullptr;
  ASSERT_TRUE(openOutputStream({dir / "log", WriteMode::Atomic}, &f).ok());
  std::fputs("line\n", f);
  std::fclose(f);
  EXPECT_EQ(readFile(dir / "log"), "line\n");
  ASSERT_TRUE(openOutputStream({"/dev/zero", WriteMode::Through}, &f).ok());
  std::fclose(f);
  // A link put at a checked target is not followed.
  ASSERT_EQ(::symlink("log", (dir / "link").c_str()), 0);
  EXPECT_FALSE(openOutputStream({dir / "link", WriteMode::Atomic}, &f).ok());
}

} // namespace
