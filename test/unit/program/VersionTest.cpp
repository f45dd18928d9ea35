//===- VersionTest.cpp - what a compiled program says with --version ------===//

#include "program/version.h"

#include <gtest/gtest.h>

#include <string>

using namespace dsc;

namespace {

ProgramSpec provenanceSpec() {
  ProgramSpec spec{};
  spec.modelPath = "/models/gpt.onnx";
  spec.optimizer = "adamw";
  spec.microBatch = 4;
  spec.accumSteps = 8;
  spec.worldSize = 8;
  spec.groupSize = 4;
  spec.stage = 3;
  spec.precision = "fp16";
  spec.lossScaler = {true, true, 65536, 1000, 2, 1};
  spec.dscVersion = "0.1 (MLIR 22.1.0)";
  spec.compileCommand = "dsc compile --target cuda --zero-stage 3 gpt.onnx";
  spec.target = "cuda sm_90a";
  spec.modelSha256 =
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  spec.configJson = "{\n  \"train_batch_size\": 256\n}";
  spec.runDefaults = "--print-every 10";
  return spec;
}

bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST(VersionTest, SaysWhereTheProgramCameFrom) {
  std::string text = formatProgramVersion(provenanceSpec(), false);
  EXPECT_EQ(text.rfind("compiled program\n", 0), 0u) << text;
  EXPECT_TRUE(has(text, "0.1 (MLIR 22.1.0)\n")) << text;
  EXPECT_TRUE(has(text, "cuda sm_90a\n")) << text;
  EXPECT_TRUE(has(text, "/models/gpt.onnx\n")) << text;
  EXPECT_TRUE(has(text, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca49599"
                        "1b7852b855\n"))
      << text;
  EXPECT_TRUE(has(text, "fp16, dynamic loss scale (initial 65536, window "
                        "1000, hysteresis 2, min 1)\n"))
      << text;
  EXPECT_TRUE(has(text, "adamw\n")) << text;
  EXPECT_TRUE(has(text, "8 (state sharded in groups of 4)\n")) << text;
  EXPECT_TRUE(has(text, "ZeRO stage:")) << text;
  EXPECT_TRUE(has(text, "4 x 8 accumulation steps per rank\n")) << text;
  EXPECT_TRUE(has(text, "dsc compile --target cuda --zero-stage 3 gpt.onnx\n"))
      << text;
  EXPECT_TRUE(has(text, "--print-every 10\n")) << text;
  // The config on one line, still JSON.
  EXPECT_TRUE(has(text, "{   \"train_batch_size\": 256 }\n")) << text;
  // Without the environment, nothing is probed or printed.
  EXPECT_FALSE(has(text, "CUDA driver")) << text;
}

TEST(VersionTest, UnknownFieldsSaySo) {
  ProgramSpec spec{};
  spec.optimizer = "sgd";
  spec.microBatch = 2;
  spec.accumSteps = 1;
  std::string text = formatProgramVersion(spec, false);
  EXPECT_TRUE(has(text, "dsc:")) << text;
  EXPECT_TRUE(has(text, "unknown\n")) << text;
  EXPECT_FALSE(has(text, "(null)")) << text;
  EXPECT_TRUE(has(text, "fp32\n")) << text;
  EXPECT_TRUE(has(text, "world size:")) << text;
  EXPECT_TRUE(has(text, " 1\n")) << text;   // worldSize 0 is one rank
  EXPECT_TRUE(has(text, "none\n")) << text; // no ds_config
  EXPECT_FALSE(has(text, "run defaults")) << text;
  spec.lossScaler = {true, false, 128, 0, 0, 0};
  spec.precision = "fp16";
  EXPECT_TRUE(
      has(formatProgramVersion(spec, false), "fp16, static loss scale 128\n"));
}

TEST(VersionTest, WithTheEnvironmentOneAlignedReport) {
  EnvInfo env;
  env.driver.soname = "libcuda.so.1";
  env.driver.error = "libcuda.so.1: cannot open shared object file";
  std::string text = formatProgramVersion(provenanceSpec(), env);
  EXPECT_EQ(text.rfind("compiled program\n", 0), 0u) << text;
  EXPECT_TRUE(has(text, "\nGPU driver\n")) << text;
  EXPECT_TRUE(has(text, "not found (libcuda.so.1: cannot open")) << text;
  EXPECT_TRUE(has(text, "no GPU found")) << text;
  EXPECT_TRUE(has(text, "\nhost\n")) << text;
  // The program's values and the environment's start in one column.
  auto column = [&](const std::string &value) {
    size_t at = text.find(value);
    if (at == std::string::npos)
      return std::string::npos;
    size_t lineStart = text.rfind('\n', at);
    return at - (lineStart == std::string::npos ? 0 : lineStart + 1);
  };
  size_t model = column("/models/gpt.onnx\n");
  ASSERT_NE(model, std::string::npos) << text;
  EXPECT_EQ(column("dsc compile --target"), model) << text;
  EXPECT_EQ(column("not found (libcuda"), model) << text;
  EXPECT_EQ(column("(not set)"), model) << text;

  // This machine, probed: never fails, whatever it has.
  std::string probed = formatProgramVersion(provenanceSpec(), true);
  EXPECT_TRUE(has(probed, "CUDA driver:")) << probed;
  EXPECT_TRUE(has(probed, "compile command:")) << probed;
}
