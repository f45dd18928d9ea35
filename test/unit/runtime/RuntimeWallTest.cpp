//===- RuntimeWallTest.cpp - The runtime includes no compiler headers -----===//
//
// A compiled program links only the runtime, CUDA and NCCL, so no file under
// runtime/ may include MLIR, LLVM or protobuf headers.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

namespace fs = std::filesystem;

TEST(RuntimeWall, NoMlirLlvmOrProtobufIncludes) {
  fs::path root = fs::path(DSC_SOURCE_DIR) / "runtime";
  ASSERT_TRUE(fs::exists(root));
  std::regex forbidden(
      R"(^\s*#\s*include\s*[<"](mlir/|llvm/|llvm-c/|google/protobuf/|onnx/))");
  int files = 0;
  for (auto &entry : fs::recursive_directory_iterator(root)) {
    std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")
      continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      EXPECT_FALSE(std::regex_search(line, forbidden))
          << entry.path() << ":" << n << ": " << line;
  }
  EXPECT_GT(files, 5);
}
