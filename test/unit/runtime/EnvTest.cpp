//===- EnvTest.cpp - the environment probe and its report -----------------===//

#include "core/env.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <string>

using namespace dsc;

namespace {

/// A strict JSON checker (RFC 8259 grammar, no extensions): true when `s`
/// is exactly one JSON value with optional surrounding whitespace.
class JsonChecker {
public:
  explicit JsonChecker(const std::string &s) : s(s) {}
  bool valid() {
    ws();
    if (!value())
      return false;
    ws();
    return i == s.size();
  }

private:
  const std::string &s;
  size_t i = 0;

  bool eat(char c) {
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void ws() {
    while (i < s.size() &&
           (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
      ++i;
  }
  bool literal(const char *word) {
    std::string w(word);
    if (s.compare(i, w.size(), w) != 0)
      return false;
    i += w.size();
    return true;
  }
  bool digits() {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9')
      ++i;
    return i > start;
  }
  bool number() {
    eat('-');
    if (eat('0')) {
    } else if (!digits())
      return false;
    if (eat('.') && !digits())
      return false;
    if (eat('e') || eat('E')) {
      if (!eat('+'))
        eat('-');
      if (!digits())
        return false;
    }
    return true;
  }
  bool string() {
    if (!eat('"'))
      return false;
    while (i < s.size()) {
      unsigned char c = s[i++];
      if (c == '"')
        return true;
      if (c < 0x20)
        return false;
      if (c != '\\')
        continue;
      if (i >= s.size())
        return false;
      char e = s[i++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k, ++i)
          if (i >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i])))
            return false;
      } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
        return false;
      }
    }
    return false;
  }
  bool value() {
    if (i >= s.size())
      return false;
    char c = s[i];
    if (c == '{') {
      ++i;
      ws();
      if (eat('}'))
        return true;
      do {
        ws();
        if (!string())
          return false;
        ws();
        if (!eat(':'))
          return false;
        ws();
        if (!value())
          return false;
        ws();
      } while (eat(','));
      return eat('}');
    }
    if (c == '[') {
      ++i;
      ws();
      if (eat(']'))
        return true;
      do {
        ws();
        if (!value())
          return false;
        ws();
      } while (eat(','));
      return eat(']');
    }
    if (c == '"')
      return string();
    if (c == 't')
      return literal("true");
    if (c == 'f')
      return literal("false");
    if (c == 'n')
      return literal("null");
    return number();
  }
};

bool validJson(const std::string &s) { return JsonChecker(s).valid(); }

TEST(JsonCheckerTest, AcceptsJsonAndRejectsTheRest) {
  EXPECT_TRUE(validJson(R"({"a": [1, -2.5e3, true, null], "b": "x\"\u00e9"})"));
  EXPECT_TRUE(validJson("[]"));
  EXPECT_FALSE(validJson("{\"a\": 1,}"));
  EXPECT_FALSE(validJson("{\"a\" 1}"));
  EXPECT_FALSE(validJson("\"tab\there\""));
  EXPECT_FALSE(validJson("{} {}"));
  EXPECT_FALSE(validJson("01"));
}

/// An environment with every kind of entry, including text JSON must escape.
EnvInfo handBuiltEnv() {
  EnvInfo env;
  env.driver.soname = "libcuda.so.1";
  env.driver.found = true;
  env.driver.path = "/usr/lib/libcuda.so.1";
  env.driver.version = "13.0";
  env.driver.rawVersion = 13000;
  env.nvml.soname = "libnvidia-ml.so.1";
  env.nvml.found = true;
  env.nvml.version = "580.65.06";
  GpuInfo gpu;
  gpu.index = 0;
  gpu.name = "NVIDIA H200 \"test\"";
  gpu.pciBusId = "00000000:1B:00.0";
  gpu.ccMajor = 9;
  gpu.ccMinor = 0;
  gpu.totalBytes = 150ull << 30;
  gpu.freeBytes = 149ll << 30;
  env.gpus.push_back(gpu);
  gpu.index = 1;
  gpu.freeBytes = -1;
  env.gpus.push_back(gpu);
  env.cudaRuntime.soname = "libcudart.so.13";
  env.cudaRuntime.found = true;
  env.cudaRuntime.version = "13.0";
  env.cudnn.soname = "libcudnn.so.9";
  env.cudnn.error = "libcudnn.so.9: cannot open shared object file";
  env.cublasLt.soname = "libcublasLt.so.13";
  env.cublasLt.found = true;
  env.cublasLt.error = "undefined symbol: cublasLtGetVersion";
  env.nccl.soname = "libnccl.so.2";
  env.nccl.found = true;
  env.nccl.version = "2.28.9";
  env.host.cpuModel = "Some CPU\t@ 3 GHz";
  env.host.logicalCpus = 8;
  env.host.usableCpus = 2;
  env.host.memTotalBytes = 64ull << 30;
  env.host.memAvailableBytes = 32ull << 30;
  env.host.os = "Debian\\GNU/Linux 12";
  env.vars = {{"DSC_X", "a\nb"}, {"NCCL_DEBUG", "INFO"}};
  return env;
}

} // namespace

TEST(EnvTest, ProbingThisMachineDoesNotFail) {
  EnvInfo env = probeEnvironment();
  EXPECT_EQ(env.driver.soname, "libcuda.so.1");
  EXPECT_EQ(env.cudaRuntime.soname, "libcudart.so.13");
  EXPECT_EQ(env.cudnn.soname, "libcudnn.so.9");
  EXPECT_EQ(env.cublasLt.soname, "libcublasLt.so.13");
  EXPECT_EQ(env.nccl.soname, "libnccl.so.2");
  // Found or not, each library says which: a path, or dlerror's reason.
  for (const LibraryInfo *lib : {&env.driver, &env.nvml, &env.cudaRuntime,
                                 &env.cudnn, &env.cublasLt, &env.nccl}) {
    if (lib->found) {
      EXPECT_FALSE(lib->path.empty()) << lib->soname;
    } else {
      EXPECT_FALSE(lib->error.empty()) << lib->soname;
    }
  }
  if (!env.driver.found) {
    EXPECT_TRUE(env.gpus.empty());
  }
  EXPECT_GT(env.host.logicalCpus, 0);
  EXPECT_GT(env.host.usableCpus, 0);
  EXPECT_GT(env.host.memTotalBytes, 0u);
  EXPECT_FALSE(env.host.cpuModel.empty());
  EXPECT_NE(env.host.libc.find("glibc"), std::string::npos);

  std::string text = formatEnvText(env);
  EXPECT_NE(text.find("CUDA driver:"), std::string::npos) << text;
  if (env.gpus.empty()) {
    EXPECT_NE(text.find("no GPU found"), std::string::npos) << text;
  }
  if (!env.driver.found) {
    EXPECT_NE(text.find("not found (libcuda.so.1"), std::string::npos) << text;
  }
  std::string json = formatEnvJson(env);
  EXPECT_TRUE(validJson(json)) << json;
}

TEST(EnvTest, ReportsTheVariablesThatMatter) {
  ::setenv("DSC_ENV_TEST", "quote\" backslash\\ tab\t", 1);
  ::setenv("NCCL_ENV_TEST", "1", 1);
  ::setenv("UNRELATED_ENV_TEST", "secret", 1);
  EnvInfo env = probeEnvironment();
  ::unsetenv("DSC_ENV_TEST");
  ::unsetenv("NCCL_ENV_TEST");
  ::unsetenv("UNRELATED_ENV_TEST");
  bool dsc = false, nccl = false;
  for (const auto &v : env.vars) {
    EXPECT_NE(v.first, "UNRELATED_ENV_TEST");
    dsc |= v.first == "DSC_ENV_TEST" && v.second == "quote\" backslash\\ tab\t";
    nccl |= v.first == "NCCL_ENV_TEST" && v.second == "1";
  }
  EXPECT_TRUE(dsc);
  EXPECT_TRUE(nccl);
  std::string json = formatEnvJson(env);
  EXPECT_TRUE(validJson(json)) << json;
  EXPECT_NE(json.find(R"("DSC_ENV_TEST": "quote\" backslash\\ tab\t")"),
            std::string::npos)
      << json;
}

TEST(EnvTest, TextHasAlignedSections) {
  std::string text = formatEnvText(handBuiltEnv());
  EXPECT_NE(text.find("GPU driver\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nGPUs\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nCUDA libraries\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nhost\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nenvironment\n"), std::string::npos) << text;
  EXPECT_NE(text.find("13.0  /usr/lib/libcuda.so.1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("580.65.06\n"), std::string::npos) << text;
  EXPECT_NE(text.find("NVIDIA H200 \"test\", sm_90, 150.0 GiB (149.0 GiB "
                      "free), 00000000:1B:00.0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("not found (libcudnn.so.9: cannot open"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("version unknown (undefined symbol"), std::string::npos)
      << text;
  EXPECT_NE(text.find("8 logical, 2 usable by this process"), std::string::npos)
      << text;
  // Unset, and shown as such: what GPUs are visible, NVLink multicast.
  EXPECT_NE(text.find("CUDA_VISIBLE_DEVICES:"), std::string::npos) << text;
  EXPECT_NE(text.find("NCCL_NVLS_ENABLE:"), std::string::npos) << text;
  // Every entry's value starts in the same column.
  size_t column = std::string::npos, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.compare(0, 2, "  ") != 0)
      continue;
    size_t colon = line.find(':');
    ASSERT_NE(colon, std::string::npos) << line;
    size_t value = line.find_first_not_of(' ', colon + 1);
    if (column == std::string::npos)
      column = value;
    EXPECT_EQ(value, column) << line;
  }
}

TEST(EnvTest, JsonEscapesAndTypes) {
  std::string json = formatEnvJson(handBuiltEnv());
  EXPECT_TRUE(validJson(json)) << json;
  EXPECT_NE(json.find(R"("name": "NVIDIA H200 \"test\"")"), std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("cpu": "Some CPU\t@ 3 GHz")"), std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("os": "Debian\\GNU/Linux 12")"), std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("DSC_X": "a\nb")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("CUDA_VISIBLE_DEVICES": null)"), std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("free_bytes": null)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("raw_version": 13000)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("found": false)"), std::string::npos) << json;

  EnvInfo empty;
  EXPECT_TRUE(validJson(formatEnvJson(empty))) << formatEnvJson(empty);
  EXPECT_NE(formatEnvText(empty).find("no GPU found (no CUDA driver)"),
            std::string::npos);
}

TEST(EnvTest, FormatBytes) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1536), "1.5 KiB");
  EXPECT_EQ(formatBytes(80ull << 30), "80.0 GiB");
}
