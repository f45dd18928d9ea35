//===- OnnxWeightsTest.cpp - The protobuf-free ONNX initializer reader ----===//
//
// Against the PyTorch-exported fixtures (values must equal the reference
// params.safetensors bit for bit), hand-encoded TensorProtos for the typed
// fields exporters rarely use, external-data confinement, and truncated or
// foreign files (errors, never crashes).
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "program/onnx_weights.h"

#include <cmath>
#include <cstring>
#include <unistd.h>

using namespace dsc;
using namespace dsc::program;
using namespace dsc::program::test;

namespace {

//===----------------------------------------------------------------------===//
// A tiny protobuf encoder for hand-made models
//===----------------------------------------------------------------------===//

struct Pb {
  std::string b;
  Pb &varint(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    b.push_back(static_cast<char>(v));
    return *this;
  }
  Pb &tag(uint32_t field, int wt) { return varint((field << 3) | wt); }
  Pb &num(uint32_t field, uint64_t v) { return tag(field, 0).varint(v); }
  Pb &bytes(uint32_t field, const std::string &s) {
    tag(field, 2).varint(s.size());
    b += s;
    return *this;
  }
  Pb &fixed32(uint32_t field, float f) {
    tag(field, 5);
    char c[4];
    std::memcpy(c, &f, 4);
    b.append(c, 4);
    return *this;
  }
};

std::string packedVarints(const std::vector<int64_t> &v) {
  Pb p;
  for (int64_t x : v)
    p.varint(static_cast<uint64_t>(x));
  return p.b;
}

template <typename T> std::string rawOf(const std::vector<T> &v) {
  return std::string(reinterpret_cast<const char *>(v.data()),
                     v.size() * sizeof(T));
}

std::string externalEntry(const std::string &key, const std::string &value) {
  return Pb().bytes(1, key).bytes(2, value).b;
}

/// A model around `initializers` (TensorProto bytes), with other fields the
/// reader must skip: ir_version, a node, a graph input, opset_import.
std::string modelOf(const std::vector<std::string> &initializers) {
  Pb graph;
  graph.bytes(1, Pb().bytes(4, "Relu").bytes(1, "a").bytes(2, "b").b); // node
  graph.bytes(2, "g");
  for (const auto &t : initializers)
    graph.bytes(5, t);
  graph.bytes(11, Pb().bytes(1, "x").b); // input
  Pb model;
  model.num(1, 8).bytes(2, "test").bytes(7, graph.b);
  model.bytes(8, Pb().bytes(1, "").num(2, 17).b);
  return model.b;
}

Tensor viewOf(std::vector<float> &v, std::initializer_list<int64_t> shape) {
  return Tensor::of(v.data(), DType::F32, shape);
}

//===----------------------------------------------------------------------===//
// PyTorch-exported fixtures
//===----------------------------------------------------------------------===//

/// Every tensor of `refFile` read from `model` equals the reference exactly.
void expectMatchesReference(const std::string &model,
                            const std::string &refFile, size_t expectCount) {
  SCOPED_TRACE(model);
  OnnxWeights w;
  Status s = w.open(model);
  ASSERT_TRUE(s.ok()) << s.message();
  io::SafetensorsFile ref;
  s = ref.read(refFile);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(ref.names().size(), expectCount);
  for (const std::string &name : ref.names()) {
    SCOPED_TRACE(name);
    Tensor expected;
    ASSERT_TRUE(ref.get(name, expected).ok());
    ASSERT_NE(w.find(name), nullptr);
    std::vector<uint8_t> storage(expected.nbytes() + 1);
    Tensor got = expected;
    got.data = storage.data();
    s = w.read(name, got);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(std::memcmp(got.data, expected.data, expected.nbytes()), 0);
  }
}

TEST(OnnxWeights, MlpMatchesReference) {
  expectMatchesReference(fixture("models/mlp_opset17.onnx"),
                         fixture("ref/mlp/params.safetensors"), 4);
}

TEST(OnnxWeights, CnnMatchesReference) {
  expectMatchesReference(fixture("models/cnn_opset17.onnx"),
                         fixture("ref/cnn/params.safetensors"), 10);
}

TEST(OnnxWeights, CnnRunningStatsMatchTheOnnxPackage) {
  // BatchNorm buffers; the reference was read by the onnx package
  // (data/make_onnx_buffers.py).
  expectMatchesReference(
      fixture("models/cnn_opset17.onnx"),
      DSC_PROGRAM_TEST_DATA "/cnn_opset17_buffers.safetensors", 4);
}

TEST(OnnxWeights, NanoGptMatchesReference) {
  expectMatchesReference(fixture("models/nanogpt_opset17.onnx"),
                         fixture("ref/nanogpt/params.safetensors"), 28);
}

TEST(OnnxWeights, Gpt2MatchesReference) {
  expectMatchesReference(fixture("models/gpt2_nodrop_opset17.onnx"),
                         fixture("ref/gpt2_nodrop/params.safetensors"), 28);
}

TEST(OnnxWeights, ExternalDataMatchesReference) {
  expectMatchesReference(fixture("models/gpt2_nodrop_extdata/model.onnx"),
                         fixture("ref/gpt2_nodrop/params.safetensors"), 28);
  OnnxWeights w;
  ASSERT_TRUE(w.open(fixture("models/gpt2_nodrop_extdata/model.onnx")).ok());
  const OnnxInitializer *wte = w.find("model.transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_TRUE(wte->external);
  EXPECT_EQ(wte->location, "weights.bin");
  EXPECT_EQ(wte->describe(), "f32[128,32]");
}

TEST(OnnxWeights, IndexesEveryInitializerInOrder) {
  OnnxWeights w;
  ASSERT_TRUE(w.open(fixture("models/nanogpt_opset17.onnx")).ok());
  ASSERT_EQ(w.initializers().size(), 30u); // 28 params + 2 attention masks
  EXPECT_EQ(w.initializers()[0].name, "transformer.wte.weight");
  const OnnxInitializer *mask = w.find("transformer.h.0.attn.bias");
  ASSERT_NE(mask, nullptr);
  EXPECT_EQ(mask->describe(), "f32[1,1,32,32]");
  EXPECT_EQ(w.find("no.such"), nullptr);
}

TEST(OnnxWeights, ConvertsToTheProgramsDtype) {
  OnnxWeights w;
  ASSERT_TRUE(w.open(fixture("models/mlp_opset17.onnx")).ok());
  std::vector<float> f(128);
  ASSERT_TRUE(w.read("net.0.bias", viewOf(f, {128})).ok());
  std::vector<double> d(128);
  ASSERT_TRUE(
      w.read("net.0.bias", Tensor::of(d.data(), DType::F64, {128})).ok());
  std::vector<uint16_t> h(128);
  ASSERT_TRUE(
      w.read("net.0.bias", Tensor::of(h.data(), DType::BF16, {128})).ok());
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(d[i], static_cast<double>(f[i]));
    EXPECT_EQ(h[i], floatToBfloat16(f[i]));
  }
}

TEST(OnnxWeights, WrongShapeOrDtypeOrNameIsAnError) {
  OnnxWeights w;
  ASSERT_TRUE(w.open(fixture("models/mlp_opset17.onnx")).ok());
  std::vector<float> f(128 * 64);
  Status s = w.read("net.0.weight", viewOf(f, {64, 128}));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'net.0.weight' is f32[128,64] but the program "
                             "expects f32[64,128]"),
            std::string::npos)
      << s.message();
  std::vector<int64_t> i(128);
  s = w.read("net.0.bias", Tensor::of(i.data(), DType::I64, {128}));
  EXPECT_FALSE(s.ok());
  s = w.read("net.9.weight", viewOf(f, {1}));
  EXPECT_NE(s.message().find("has no initializer 'net.9.weight'"),
            std::string::npos)
      << s.message();
}

//===----------------------------------------------------------------------===//
// Hand-encoded TensorProtos
//===----------------------------------------------------------------------===//

TEST(OnnxWeights, TypedFieldsPackedAndUnpacked) {
  TempDir dir;
  std::vector<std::string> inits;
  // float_data packed, dims unpacked
  inits.push_back(Pb().num(1, 2)
                      .num(1, 3)
                      .num(2, 1)
                      .bytes(8, "fp")
                      .bytes(4, rawOf<float>({1, 2, 3, 4, 5, 6}))
                      .b);
  // float_data unpacked (fixed32 each), dims packed
  Pb fu;
  fu.bytes(1, packedVarints({3})).num(2, 1).bytes(8, "fu");
  for (float v : {-1.5f, 0.25f, 7.0f})
    fu.fixed32(4, v);
  inits.push_back(fu.b);
  // int64_data packed with negatives; name before data_type
  inits.push_back(Pb().bytes(8, "i64")
                      .bytes(1, packedVarints({3}))
                      .num(2, 7)
                      .bytes(7, packedVarints({-5, 0, 1LL << 40}))
                      .b);
  // int64_data unpacked
  inits.push_back(Pb().bytes(8, "i64u")
                      .num(1, 2)
                      .num(2, 7)
                      .num(7, static_cast<uint64_t>(-9))
                      .num(7, 9)
                      .b);
  // int32_data for INT32 (negative: 10-byte varint)
  inits.push_back(Pb().bytes(8, "i32")
                      .num(1, 2)
                      .num(2, 6)
                      .bytes(5, packedVarints({-7, 123456}))
                      .b);
  // int32_data holding FLOAT16 bits: 1.0, -2.0
  inits.push_back(Pb().bytes(8, "f16")
                      .num(1, 2)
                      .num(2, 10)
                      .bytes(5, packedVarints({0x3c00, 0xc000}))
                      .b);
  // double_data packed
  inits.push_back(Pb().bytes(8, "f64")
                      .num(1, 2)
                      .num(2, 11)
                      .bytes(10, rawOf<double>({0.5, -3.25}))
                      .b);
  // BOOL in int32_data
  inits.push_back(Pb().bytes(8, "bool")
                      .num(1, 3)
                      .num(2, 9)
                      .bytes(5, packedVarints({1, 0, 1}))
                      .b);
  // a scalar in raw_data
  inits.push_back(
      Pb().bytes(8, "scalar").num(2, 1).bytes(9, rawOf<float>({42.0f})).b);
  // unknown fields (doc_string 12, a fixed64 field 99) are skipped
  Pb odd;
  odd.bytes(12, "doc").tag(99, 1);
  odd.b.append(8, '\x01');
  odd.bytes(8, "odd2").num(1, 1).num(2, 1).bytes(9, rawOf<float>({9.0f}));
  inits.push_back(odd.b);
  writeFile(dir / "m.onnx", modelOf(inits));

  OnnxWeights w;
  Status s = w.open(dir / "m.onnx");
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<float> f(6);
  ASSERT_TRUE(w.read("fp", viewOf(f, {2, 3})).ok());
  EXPECT_EQ(f, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  std::vector<float> fu3(3);
  s = w.read("fu", viewOf(fu3, {3}));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(fu3, (std::vector<float>{-1.5f, 0.25f, 7.0f}));
  std::vector<int64_t> i64(3);
  ASSERT_TRUE(w.read("i64", Tensor::of(i64.data(), DType::I64, {3})).ok());
  EXPECT_EQ(i64, (std::vector<int64_t>{-5, 0, 1LL << 40}));
  std::vector<int64_t> i64u(2);
  ASSERT_TRUE(w.read("i64u", Tensor::of(i64u.data(), DType::I64, {2})).ok());
  EXPECT_EQ(i64u, (std::vector<int64_t>{-9, 9}));
  std::vector<int32_t> i32(2);
  ASSERT_TRUE(w.read("i32", Tensor::of(i32.data(), DType::I32, {2})).ok());
  EXPECT_EQ(i32, (std::vector<int32_t>{-7, 123456}));
  std::vector<int64_t> i32as64(2); // widened on the way
  ASSERT_TRUE(w.read("i32", Tensor::of(i32as64.data(), DType::I64, {2})).ok());
  EXPECT_EQ(i32as64, (std::vector<int64_t>{-7, 123456}));
  std::vector<float> f16(2);
  ASSERT_TRUE(w.read("f16", viewOf(f16, {2})).ok());
  EXPECT_EQ(f16, (std::vector<float>{1.0f, -2.0f}));
  std::vector<double> f64(2);
  ASSERT_TRUE(w.read("f64", Tensor::of(f64.data(), DType::F64, {2})).ok());
  EXPECT_EQ(f64, (std::vector<double>{0.5, -3.25}));
  std::vector<uint8_t> b(3);
  ASSERT_TRUE(w.read("bool", Tensor::of(b.data(), DType::Bool, {3})).ok());
  EXPECT_EQ(b, (std::vector<uint8_t>{1, 0, 1}));
  std::vector<float> sc(1);
  ASSERT_TRUE(w.read("scalar", Tensor::of(sc.data(), DType::F32, {})).ok());
  EXPECT_EQ(sc[0], 42.0f);
  std::vector<float> o(1);
  s = w.read("odd2", viewOf(o, {1}));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(o[0], 9.0f);
}

TEST(OnnxWeights, DataThatDoesNotMatchTheShapeIsAnError) {
  TempDir dir;
  std::vector<std::string> inits;
  inits.push_back(Pb().bytes(8, "short")
                      .num(1, 4)
                      .num(2, 1)
                      .bytes(4, rawOf<float>({1, 2, 3}))
                      .b);
  inits.push_back(Pb().bytes(8, "long")
                      .num(1, 2)
                      .num(2, 1)
                      .bytes(4, rawOf<float>({1, 2, 3}))
                      .b);
  inits.push_back(
      Pb().bytes(8, "raw").num(1, 2).num(2, 1).bytes(9, rawOf<float>({1})).b);
  inits.push_back(Pb().bytes(8, "empty").num(1, 2).num(2, 1).b);
  inits.push_back(Pb().bytes(8, "str").num(1, 1).num(2, 8).bytes(6, "x").b);
  inits.push_back(
      Pb().bytes(8, "i8").num(1, 1).num(2, 3).bytes(5, packedVarints({300})).b);
  writeFile(dir / "m.onnx", modelOf(inits));
  OnnxWeights w;
  ASSERT_TRUE(w.open(dir / "m.onnx").ok());
  std::vector<float> f(4);
  auto expectError = [&](const std::string &name, Tensor t,
                         const std::string &part) {
    Status s = w.read(name, t);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  };
  expectError("short", viewOf(f, {4}), "holds 3 values, expected 4");
  expectError("long", viewOf(f, {2}), "holds 3 values, expected 2");
  expectError("raw", viewOf(f, {2}), "holds 4 bytes of raw data, expected 8");
  expectError("empty", viewOf(f, {2}), "(no data)");
  expectError("str", viewOf(f, {1}), "STRING");
  int8_t i8;
  expectError("i8", Tensor::of(&i8, DType::I8, {1}), "does not fit");
}

TEST(OnnxWeights, TruncatedOrForeignFilesAreErrorsNotCrashes) {
  TempDir dir;
  std::string good = modelOf({Pb().bytes(8, "a")
                                  .num(1, 3)
                                  .num(2, 1)
                                  .bytes(4, rawOf<float>({1, 2, 3}))
                                  .b,
                              Pb().bytes(8, "b")
                                  .num(1, 2)
                                  .num(2, 7)
                                  .bytes(7, packedVarints({1, 2}))
                                  .b});
  int failed = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    writeFile(dir / "t.onnx", good.substr(0, n));
    OnnxWeights w;
    Status s = w.open(dir / "t.onnx");
    if (!s.ok()) {
      ++failed;
      EXPECT_NE(s.message().find("t.onnx"), std::string::npos);
      continue;
    }
    // A prefix that ends between fields opens: reads must still be safe.
    std::vector<float> f(3);
    (void)w.read("a", viewOf(f, {3}));
  }
  EXPECT_GT(failed, 0);
  writeFile(dir / "junk.onnx", std::string("\xff\xff\xff\xff\xff\xff\xff\xff"
                                           "\xff\xff\xff hello",
                                           16));
  OnnxWeights w;
  Status s = w.open(dir / "junk.onnx");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("malformed protobuf"), std::string::npos)
      << s.message();
  writeFile(dir / "text.onnx", Pb().num(1, 8).b); // no graph
  OnnxWeights w2;
  s = w2.open(dir / "text.onnx");
  EXPECT_NE(s.message().find("no graph"), std::string::npos) << s.message();
  OnnxWeights w3;
  s = w3.open(dir / "absent.onnx");
  EXPECT_NE(s.message().find("cannot open"), std::string::npos) << s.message();
}

//===----------------------------------------------------------------------===//
// External data
//===----------------------------------------------------------------------===//

std::string externalInit(const std::string &name, const std::string &location,
                         int64_t offset = -1, int64_t length = -1,
                         int dataType = 1, int64_t dim = 3) {
  Pb t;
  t.bytes(8, name).num(1, static_cast<uint64_t>(dim)).num(2, dataType);
  t.bytes(13, externalEntry("location", location));
  if (offset >= 0)
    t.bytes(13, externalEntry("offset", std::to_string(offset)));
  if (length >= 0)
    t.bytes(13, externalEntry("length", std::to_string(length)));
  t.num(14, 1);
  return t.b;
}

TEST(OnnxWeights, ExternalDataWithOffsetAndConversion) {
  TempDir dir;
  ASSERT_EQ(::mkdir((dir / "model").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir / "model/sub").c_str(), 0755), 0);
  std::string data = "pad!" + rawOf<float>({1.5f, 2.5f, -3.5f});
  writeFile(dir / "model/sub/w.bin", data);
  writeFile(dir / "model/m.onnx",
            modelOf({externalInit("w", "sub/w.bin", 4, 12),
                     externalInit("nolen", "./sub/w.bin", 4)}));
  OnnxWeights w;
  ASSERT_TRUE(w.open(dir / "model/m.onnx").ok());
  std::vector<float> f(3);
  Status s = w.read("w", viewOf(f, {3}));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(f, (std::vector<float>{1.5f, 2.5f, -3.5f}));
  std::vector<double> d(3);
  s = w.read("nolen", Tensor::of(d.data(), DType::F64, {3}));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(d, (std::vector<double>{1.5, 2.5, -3.5}));
}

TEST(OnnxWeights, ExternalDataIsConfinedToTheModelsFolder) {
  TempDir dir;
  ASSERT_EQ(::mkdir((dir / "model").c_str(), 0755), 0);
  std::string floats = rawOf<float>({1, 2, 3});
  writeFile(dir / "outside.bin", floats);
  writeFile(dir / "model/inside.bin", floats);
  ASSERT_EQ(::symlink((dir / "outside.bin").c_str(),
                      (dir / "model/link.bin").c_str()),
            0);
  writeFile(
      dir / "model/m.onnx",
      modelOf({externalInit("abs", dir / "outside.bin"),
               externalInit("up", "../outside.bin"),
               externalInit("deep", "x/../../outside.bin"),
               externalInit("link", "link.bin"),
               externalInit("missing", "weights.bin"),
               externalInit("noloc", ""), externalInit("past", "inside.bin", 8),
               externalInit("shortlen", "inside.bin", 0, 8),
               externalInit("ok", "inside.bin")}));
  OnnxWeights w;
  ASSERT_TRUE(w.open(dir / "model/m.onnx").ok());
  std::vector<float> f(3);
  auto expectError = [&](const std::string &name,
                         std::vector<std::string> parts) {
    Status s = w.read(name, viewOf(f, {3}));
    EXPECT_FALSE(s.ok()) << name;
    parts.push_back("'" + name + "'");
    for (const auto &p : parts)
      EXPECT_NE(s.message().find(p), std::string::npos)
          << name << ": " << s.message();
  };
  expectError("abs", {"absolute path"});
  expectError("up", {"outside the model's folder"});
  expectError("deep", {"outside the model's folder"});
  expectError("link", {"resolves to", "outside the model's folder"});
  expectError("missing", {"missing", "'weights.bin' not found", "m.onnx"});
  expectError("noloc", {"no 'location'"});
  expectError("past", {"needs bytes [8, 20)", "has 12 bytes"});
  expectError("shortlen", {"has length 8", "needs 12 bytes"});
  Status s = w.read("ok", viewOf(f, {3}));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(f, (std::vector<float>{1, 2, 3}));
}

TEST(OnnxWeights, BadExternalOffsetIsAnErrorAtOpen) {
  TempDir dir;
  Pb t;
  t.bytes(8, "w").num(1, 1).num(2, 1);
  t.bytes(13, externalEntry("location", "w.bin"));
  t.bytes(13, externalEntry("offset", "12abc"));
  t.num(14, 1);
  writeFile(dir / "m.onnx", modelOf({t.b}));
  OnnxWeights w;
  Status s = w.open(dir / "m.onnx");
  EXPECT_NE(s.message().find("bad offset '12abc'"), std::string::npos)
      << s.message();
}

} // namespace
