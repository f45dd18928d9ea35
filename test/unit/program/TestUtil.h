//===- TestUtil.h - Temp folders, files and runs for program tests -*- C++
//-*-===//

#ifndef DSC_TEST_UNIT_PROGRAM_TESTUTIL_H
#define DSC_TEST_UNIT_PROGRAM_TESTUTIL_H

#include "io/safetensors.h"
#include "program/run.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dsc::program::test {

inline std::string fixture(const std::string &rel) {
  return std::string(DSC_SOURCE_DIR) + "/test/fixtures/" + rel;
}

/// A fresh folder under the test temp dir, removed with its contents.
class TempDir {
public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "dsc-program-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    path_ = ::mkdtemp(buf.data()) ? buf.data() : "";
  }
  ~TempDir() {
    if (!path_.empty())
      std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const {
    return path_ + "/" + name;
  }

private:
  std::string path_;
};

inline void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string readFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct RunResult {
  int rc = -1;
  std::string out, err;
};

inline std::string slurp(std::FILE *f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    s.append(buf, n);
  std::fclose(f);
  return s;
}

/// Runs the program shell with argv = {"train", args...}.
inline RunResult runWith(const ProgramSpec &spec,
                         const std::vector<std::string> &args) {
  std::vector<std::string> storage = {"train"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (auto &s : storage)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  std::FILE *out = std::tmpfile(), *err = std::tmpfile();
  RunResult r;
  r.rc = run(spec, static_cast<int>(storage.size()), argv.data(), out, err);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

} // namespace dsc::program::test

#endif // DSC_TEST_UNIT_PROGRAM_TESTUTIL_H
