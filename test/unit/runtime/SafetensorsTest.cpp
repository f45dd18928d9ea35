//===- SafetensorsTest.cpp - safetensors round trips and Python files -----===//

#include "io/safetensors.h"
#include "GradCheck.h"
#include "TempDir.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace dsc;
using namespace dsc::io;
using namespace dsc::test;
namespace fs = std::filesystem;

namespace {


} // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir dir;
  std::string path = (dir.path / "ckpt.safetensors").string();
  F f32({2, 3}, DType::F32, {1, -2, 3.5f, 0, 1e-30f, -7});
  D f64(std::vector<int64_t>{3}, DType::F64, {1.0 / 3, -1e300, 0});
  Buf<uint16_t> f16({2}, DType::F16, {floatToHalf(1.5f), floatToHalf(-0.25f)});
  Buf<uint16_t> bf16({1}, DType::BF16, {floatToBfloat16(3.0f)});
  Buf<int64_t> i64({2}, DType::I64, {int64_t(1) << 60, -5});
  Buf<int32_t> i32({1, 1}, DType::I32, {-123456});
  Buf<int8_t> i8({2}, DType::I8, {-128, 127});
  Buf<uint8_t> u8({3}, DType::U8, {0, 128, 255});
  Buf<uint8_t> b({2}, DType::Bool, {1, 0});
  F scalar({}, DType::F32, {42});
  std::vector<NamedTensor> ts = {
      {"f32", f32.t()},      {"f64", f64.t()}, {"f16", f16.t()},
      {"bf16", bf16.t()},    {"i64", i64.t()}, {"layer.0/i32", i32.t()},
      {"i8", i8.t()},        {"u8", u8.t()},   {"mask \"q\"", b.t()},
      {"scalar", scalar.t()}};
  DSC_ASSERT_OK(writeSafetensors(path, ts, {{"step", "3"}}));
  // Atomic write: nothing but the file is left behind.
  EXPECT_EQ(
      std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()),
      1);
  SafetensorsFile file;
  DSC_ASSERT_OK(file.read(path));
  EXPECT_EQ(file.names().size(), ts.size());
  EXPECT_EQ(file.metadata().at("step"), "3");
  for (const NamedTensor &nt : ts) {
    Tensor t;
    DSC_ASSERT_OK(file.get(nt.name, t));
    EXPECT_EQ(describe(t), describe(nt.tensor)) << nt.name;
    EXPECT_EQ(std::memcmp(t.data, nt.tensor.data, t.nbytes()), 0) << nt.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtypeSize(t.dtype), 0u)
        << nt.name;
  }
  Tensor missing;
  EXPECT_FALSE(file.get("nope", missing).ok());
  // Overwriting replaces the file whole.
  DSC_ASSERT_OK(writeSafetensors(path, {{"only", scalar.t()}}));
  DSC_ASSERT_OK(file.read(path));
  EXPECT_EQ(file.names(), std::vector<std::string>{"only"});
}

TEST(Safetensors, ReadsWhatPythonWrites) {
  SafetensorsFile file;
  DSC_ASSERT_OK(file.read(DSC_RUNTIME_TEST_DATA "/python_made.safetensors"));
  EXPECT_EQ(file.metadata().at("format"), "np");
  Tensor t;
  DSC_ASSERT_OK(file.get("weight.f32", t));
  EXPECT_EQ(describe(t), "f32[2,3]");
  EXPECT_EQ(t.as<float>()[5], 1.5f);
  DSC_ASSERT_OK(file.get("weight.f64", t));
  EXPECT_EQ(t.as<double>()[0], 1.0 / 3);
  DSC_ASSERT_OK(file.get("half", t));
  EXPECT_EQ(describe(t), "f16[4]");
  EXPECT_EQ(halfToFloat(t.as<uint16_t>()[2]), 65504.0f);
  DSC_ASSERT_OK(file.get("brain", t));
  EXPECT_EQ(bfloat16ToFloat(t.as<uint16_t>()[1]), -3.140625f);
  DSC_ASSERT_OK(file.get("tokens", t));
  EXPECT_EQ(describe(t), "i64[2,2]");
  EXPECT_EQ(t.as<int64_t>()[2], int64_t(1) << 40);
  EXPECT_EQ(t.as<int64_t>()[1], -1);
  DSC_ASSERT_OK(file.get("i32", t));
  EXPECT_EQ(t.as<int32_t>()[2], 2147483647);
  DSC_ASSERT_OK(file.get("i8", t));
  EXPECT_EQ(t.as<int8_t>()[0], -128);
  DSC_ASSERT_OK(file.get("u8", t));
  EXPECT_EQ(t.as<uint8_t>()[1], 255);
  DSC_ASSERT_OK(file.get("flags", t));
  EXPECT_EQ(describe(t), "bool[3]");
  EXPECT_EQ(t.as<uint8_t>()[1], 0);
  DSC_ASSERT_OK(file.get("scalar", t));
  EXPECT_EQ(describe(t), "f32[]");
  EXPECT_EQ(t.as<float>()[0], 2.5f);
}

TEST(Safetensors, ReadsTheMlpFixtureBatch) {
  std::string path = DSC_SOURCE_DIR "/test/fixtures/ref/mlp/batch.safetensors";
  if (!fs::exists(path))
    GTEST_SKIP() << path << " not present";
  SafetensorsFile file;
  DSC_ASSERT_OK(file.read(path));
  EXPECT_EQ(file.names(), (std::vector<std::string>{"y", "x"}));
  Tensor y, x;
  DSC_ASSERT_OK(file.get("y", y));
  DSC_ASSERT_OK(file.get("x", x));
  EXPECT_EQ(describe(y), "i64[4]");
  EXPECT_EQ(describe(x), "f32[4,64]");
}

TEST(Safetensors, PythonReadsWhatWeWrite) {
  if (std::system("python3 -c 'import safetensors, numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3 with safetensors and numpy not available";
  TempDir dir;
  std::string path = (dir.path / "out.safetensors").string();
  D w(std::vector<int64_t>{2, 2}, DType::F64, {1, 2, 3, 4});
  Buf<int64_t> ids({3}, DType::I64, {7, 8, 9});
  Buf<uint8_t> m({1}, DType::Bool, {1});
  DSC_ASSERT_OK(
      writeSafetensors(path, {{"w", w.t()}, {"ids", ids.t()}, {"m", m.t()}}));
  std::string cmd =
      "python3 -c \"from safetensors.numpy import load_file; "
      "d = load_file('" +
      path +
      "'); "
      "assert d['w'].dtype.name == 'float64' and d['w'][1, 0] == 3; "
      "assert d['ids'].tolist() == [7, 8, 9]; "
      "assert d['m'].dtype.name == 'bool' and d['m'][0]\"";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(Safetensors, BadFilesAreErrorsNotCrashes) {
  TempDir dir;
  auto writeRaw = [&](const std::string &name, const std::string &bytes) {
    std::ofstream(dir.path / name, std::ios::binary) << bytes;
    return (dir.path / name).string();
  };
  auto withHeader = [](const std::string &json, const std::string &data) {
    std::string s(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i)
      s[i] = static_cast<char>(n >> (8 * i));
    return s + json + data;
  };
  SafetensorsFile file;
  EXPECT_EQ(file.read((dir.path / "absent").string()).code(),
            StatusCode::IoError);
  EXPECT_FALSE(file.read(writeRaw("short", "abc")).ok());
  EXPECT_FALSE(
      file.read(writeRaw("huge", withHeader("{}", "").substr(0, 8) + "{"))
          .ok());
  EXPECT_FALSE(file.read(writeRaw("json", withHeader("{\"a\":", ""))).ok());
  Status st = file.read(
      writeRaw("span", withHeader("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                                  "\"data_offsets\":[0,4]}}",
                                  std::string(8, '\0'))));
  EXPECT_EQ(st.code(), StatusCode::IoError);
  EXPECT_NE(st.message().find("tensor 'a': data_offsets span 4 bytes"),
            std::string::npos)
      << st.message();
  EXPECT_FALSE(
      file.read(writeRaw("range", withHeader("{\"a\":{\"dtype\":\"U8\","
                                             "\"shape\":[4],"
                                             "\"data_offsets\":[0,4]}}",
                                             "ab")))
          .ok());
  EXPECT_FALSE(
      file.read(writeRaw("dtype", withHeader("{\"a\":{\"dtype\":\"C64\","
                                             "\"shape\":[],"
                                             "\"data_offsets\":[0,8]}}",
                                             std::string(8, '\0'))))
          .ok());
  F x({1}, DType::F32, {1});
  EXPECT_FALSE(writeSafetensors((dir.path / "dup").string(),
                                {{"a", x.t()}, {"a", x.t()}})
                   .ok());
  EXPECT_EQ(
      writeSafetensors((dir.path / "no/such/dir/f").string(), {{"a", x.t()}})
          .code(),
      StatusCode::IoError);
}
