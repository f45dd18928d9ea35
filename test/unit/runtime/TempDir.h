//===- TempDir.h - A fresh folder per test, for the runtime's units -*- C++
//-*-===//

#ifndef DSC_TEST_UNIT_RUNTIME_TEMPDIR_H
#define DSC_TEST_UNIT_RUNTIME_TEMPDIR_H

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

namespace dsc::test {

/// A fresh folder under the system temp dir, named after the test, removed
/// at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string &prefix = "dsc-runtime-test") {
    path = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  std::string str() const { return path.string(); }
};

} // namespace dsc::test

#endif // DSC_TEST_UNIT_RUNTIME_TEMPDIR_H
