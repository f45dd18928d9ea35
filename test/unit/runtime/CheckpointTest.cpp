//===- CheckpointTest.cpp - Sharded checkpoints, commit, read, verify -----===//
//
// Ranks here are loops in one process: each writes the pieces of a flat
// bucket (the parameters laid end to end, split evenly, as ZeRO shards it)
// that fall in its shard, then rank 0 commits.
//
//===----------------------------------------------------------------------===//

#include "io/checkpoint.h"
#include "TempDir.h"
#include "io/consolidate.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace dsc;
using namespace dsc::io;
namespace fs = std::filesystem;

namespace {

/// A fresh folder for the test (TempDir.h).
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("dsc-ckpt-test") {}
};

struct Logical {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// Element i of tensor number k: distinct everywhere, exact in f32.
float valueAt(size_t k, int64_t i, int64_t step) {
  return static_cast<float>(k * 1000 + i) + 0.25f * static_cast<float>(step);
}

const std::vector<Logical> &model() {
  static const std::vector<Logical> m = {
      {"param/a", {4, 6}},
      {"param/b", {11}},
      {"param/c", {3, 3}},
      {"optim/param/a/exp_avg", {4, 6}},
  };
  return m;
}

/// The full data of every logical tensor of `model()` at `step`.
std::vector<std::vector<float>> fullData(int64_t step) {
  std::vector<std::vector<float>> data;
  for (size_t k = 0; k < model().size(); ++k) {
    data.emplace_back(model()[k].numel());
    for (int64_t i = 0; i < model()[k].numel(); ++i)
      data[k][i] = valueAt(k, i, step);
  }
  return data;
}

/// Rank `rank` of `ranks`: the pieces of its shard of the bucket of every
/// tensor, and (rank 0 only) the buffer `buffer/bn` whole.
std::vector<ShardTensor> shardOf(int rank, int ranks,
                                 const std::vector<std::vector<float>> &data) {
  int64_t total = 0;
  for (const Logical &l : model())
    total += l.numel();
  int64_t per = (total + ranks - 1) / ranks;
  int64_t lo = rank * per, hi = std::min(total, lo + per);
  std::vector<ShardTensor> out;
  int64_t start = 0;
  for (size_t k = 0; k < model().size(); ++k) {
    const Logical &l = model()[k];
    int64_t a = std::max(lo, start), b = std::min(hi, start + l.numel());
    if (a < b) {
      ShardTensor t;
      t.name = l.name;
      t.shape = l.shape;
      t.offset = a - start;
      t.numel = b - a;
      t.data = data[k].data() + t.offset;
      out.push_back(t);
    }
    start += l.numel();
  }
  if (rank == 0) {
    static const float bn[5] = {1, 2, 3, 4, 5};
    ShardTensor t;
    t.name = "buffer/bn";
    t.shape = {5};
    t.numel = 5;
    t.data = bn;
    out.push_back(t);
  }
  return out;
}

CheckpointManifest baseManifest(int64_t step, int ranks) {
  CheckpointManifest m;
  m.step = step;
  m.dscVersion = "dsc 0.1";
  m.modelPath = "model.onnx";
  m.modelSha256 = std::string(64, 'a');
  m.optimizer = "adamw";
  m.precision = "fp32";
  m.worldSize = ranks;
  m.groupSize = ranks;
  m.stage = 3;
  m.compileCommand = "dsc compile --stage 3 model.onnx";
  m.configJson =
      R"({"train_micro_batch_size_per_gpu":4,"zero_optimization":{"stage":3}})";
  m.state = {{"seed", "1234"}, {"data_position", "98765432109"}};
  return m;
}

/// Writes and commits step `step` of `root` from `ranks` ranks.
Status save(const std::string &root, int64_t step, int ranks,
            int keepLast = 0) {
  auto data = fullData(step);
  std::string tmp = checkpointTempDir(root, step);
  for (int r = 0; r < ranks; ++r) {
    Status s = writeCheckpointShard(tmp, r, shardOf(r, ranks, data));
    if (!s.ok())
      return s;
  }
  return commitCheckpoint(root, tmp, checkpointStepDir(root, step), ranks,
                          baseManifest(step, ranks), 5.0, keepLast);
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::vector<std::string> stepDirs(const std::string &root) {
  std::vector<std::string> names;
  for (auto &e : fs::directory_iterator(root))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace

TEST(Checkpoint, ShardedRoundTripAtTwoAndThreeRanks) {
  for (int ranks : {2, 3}) {
    TempDir dir;
    ASSERT_TRUE(save(dir.str(), 7, ranks).ok());
    EXPECT_EQ(readFile(dir.str() + "/latest"), "step_7\n");
    EXPECT_FALSE(fs::exists(dir.path / "step_7.tmp"));
    EXPECT_FALSE(fs::exists(dir.path / "step_7" / "rank_00000.json"));

    CheckpointReader reader;
    Status s = reader.open(dir.str());
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(reader.stepDir(), dir.str() + "/step_7");
    const CheckpointManifest &m = reader.manifest();
    EXPECT_EQ(m.step, 7);
    EXPECT_EQ(m.stage, 3);
    EXPECT_EQ(m.worldSize, ranks);
    EXPECT_EQ(m.files.size(), static_cast<size_t>(ranks));
    EXPECT_EQ(m.state.at("data_position"), "98765432109");
    EXPECT_EQ(m.configJson, baseManifest(7, ranks).configJson);
    ASSERT_EQ(m.tensors.size(), model().size() + 1);
    EXPECT_TRUE(
        std::is_sorted(m.tensors.begin(), m.tensors.end(),
                       [](auto &a, auto &b) { return a.name < b.name; }));

    auto data = fullData(7);
    for (size_t k = 0; k < model().size(); ++k) {
      const Logical &l = model()[k];
      std::vector<float> back(l.numel(), -1);
      s = reader.read(l.name, Tensor::of(back.data(), DType::F32, l.shape));
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(back, data[k]) << l.name;
      // Every range, as a reader at another sharding asks for them.
      for (int64_t off = 0; off <= l.numel(); ++off)
        for (int64_t n = 0; off + n <= l.numel(); n += 5) {
          std::vector<float> part(n, -1);
          s = reader.readRange(l.name, off,
                               Tensor::of(part.data(), DType::F32, {n}));
          ASSERT_TRUE(s.ok()) << s.message();
          EXPECT_TRUE(
              std::equal(part.begin(), part.end(), data[k].begin() + off))
              << l.name << " " << off << "+" << n;
        }
    }
    float bn[5];
    ASSERT_TRUE(reader.read("buffer/bn", Tensor::of(bn, DType::F32, {5})).ok());
    EXPECT_EQ(bn[4], 5.0f);

    std::vector<std::string> problems;
    ASSERT_TRUE(reader.verify(problems).ok());
    EXPECT_TRUE(problems.empty()) << problems.front();
  }
}

TEST(Checkpoint, FileLayoutWholeTensorsAndPieces) {
  TempDir dir;
  ASSERT_TRUE(save(dir.str(), 1, 2).ok());
  SafetensorsFile f;
  ASSERT_TRUE(f.read(dir.str() + "/step_1/rank_00000.safetensors").ok());
  EXPECT_EQ(f.metadata().at("format"), "dsc-checkpoint");
  EXPECT_EQ(f.metadata().at("rank"), "0");
  // Rank 0 holds param/a whole (bucket [0, 34) of 68) under its own name
  // and shape, and the start of param/b as a piece.
  Tensor a, b;
  ASSERT_TRUE(f.get("param/a", a).ok());
  EXPECT_EQ(a.dims(), (std::vector<int64_t>{4, 6}));
  ASSERT_TRUE(f.get("param/b@0", b).ok());
  EXPECT_EQ(b.dims(), (std::vector<int64_t>{10}));
  SafetensorsFile g;
  ASSERT_TRUE(g.read(dir.str() + "/step_1/rank_00001.safetensors").ok());
  EXPECT_TRUE(g.contains("param/b@10"));
  EXPECT_TRUE(g.contains("optim/param/a/exp_avg"));
  EXPECT_EQ(g.metadata().at("rank"), "1");

  // The manifest is readable JSON and reads back to itself.
  std::string text = readFile(dir.str() + "/step_1/manifest.json");
  EXPECT_NE(
      text.find("\n  \"config\": {\n    \"train_micro_batch_size_per_gpu\""),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("\"shape\": [4, 6]"), std::string::npos);
  CheckpointManifest m;
  ASSERT_TRUE(manifestFromJson(text, "manifest.json", m).ok());
  EXPECT_EQ(manifestToJson(m), text);
}

TEST(Checkpoint, VerifyFindsAFlippedByteAndATruncatedFile) {
  TempDir dir;
  ASSERT_TRUE(save(dir.str(), 3, 2).ok());
  std::string file = dir.str() + "/step_3/rank_00001.safetensors";
  std::string bytes = readFile(file);
  bytes[bytes.size() - 3] ^= 0x10;
  writeFile(file, bytes);
  CheckpointReader reader;
  ASSERT_TRUE(reader.open(dir.str()).ok());
  std::vector<std::string> problems;
  ASSERT_TRUE(reader.verify(problems).ok());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("rank_00001.safetensors: sha256"),
            std::string::npos)
      << problems[0];

  writeFile(file, bytes.substr(0, bytes.size() - 8));
  ASSERT_TRUE(reader.verify(problems).ok());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("bytes, the manifest says"), std::string::npos)
      << problems[0];
  // Opening checks sizes: a truncated file is refused up front.
  CheckpointReader again;
  Status s = again.open(dir.str());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank_00001.safetensors has"), std::string::npos)
      << s.message();
}

TEST(Checkpoint, KeepLastPrunesByStepNumberAndKeepsTheNewOne) {
  TempDir dir;
  for (int64_t step : {1, 2, 9, 10})
    ASSERT_TRUE(save(dir.str(), step, 2, 2).ok());
  EXPECT_EQ(stepDirs(dir.str()),
            (std::vector<std::string>{"latest", "step_10", "step_9"}));
  // A run rewound to step 3 saves: step 3 stays, with the newest other.
  ASSERT_TRUE(save(dir.str(), 3, 2, 2).ok());
  EXPECT_EQ(stepDirs(dir.str()),
            (std::vector<std::string>{"latest", "step_10", "step_3"}));
  EXPECT_EQ(readFile(dir.str() + "/latest"), "step_3\n");
  // keepLast 0 keeps everything.
  ASSERT_TRUE(save(dir.str(), 4, 2, 0).ok());
  EXPECT_EQ(stepDirs(dir.str()).size(), 4u);
}

TEST(Checkpoint, SavingAStepTwiceReplacesIt) {
  TempDir dir;
  ASSERT_TRUE(save(dir.str(), 5, 2).ok());
  ASSERT_TRUE(save(dir.str(), 5, 3).ok());
  EXPECT_EQ(stepDirs(dir.str()),
            (std::vector<std::string>{"latest", "step_5"}));
  CheckpointReader reader;
  ASSERT_TRUE(reader.open(dir.str() + "/step_5").ok());
  EXPECT_EQ(reader.manifest().files.size(), 3u);
}

TEST(Checkpoint, StaleTemporariesAreRemoved) {
  TempDir dir;
  ASSERT_TRUE(save(dir.str(), 1, 2).ok());
  auto data = fullData(2);
  ASSERT_TRUE(writeCheckpointShard(checkpointTempDir(dir.str(), 2), 0,
                                   shardOf(0, 2, data))
                  .ok());
  fs::create_directories(dir.path / "step_x.tmp"); // not ours: stays
  std::vector<std::string> removed = removeStaleCheckpoints(dir.str());
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], dir.str() + "/step_2.tmp");
  EXPECT_EQ(stepDirs(dir.str()),
            (std::vector<std::string>{"latest", "step_1", "step_x.tmp"}));
}

TEST(Checkpoint, AMissingRankTimesOutNamingIt) {
  TempDir dir;
  auto data = fullData(1);
  std::string tmp = checkpointTempDir(dir.str(), 1);
  for (int r : {0, 2})
    ASSERT_TRUE(writeCheckpointShard(tmp, r, shardOf(r, 3, data)).ok());
  Status s = commitCheckpoint(dir.str(), tmp, checkpointStepDir(dir.str(), 1),
                              3, baseManifest(1, 3), 0.05, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 (of 3) wrote no checkpoint within 0.05 s"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(fs::exists(dir.path / "step_1"));
  EXPECT_FALSE(fs::exists(dir.path / "latest"));
}

TEST(Checkpoint, OverlapsGapsAndMismatchesAreRefused) {
  TempDir dir;
  std::vector<float> v(24, 1.0f);
  auto piece = [&](const char *name, std::vector<int64_t> shape, int64_t off,
                   int64_t n, DType dt = DType::F32) {
    ShardTensor t;
    t.name = name;
    t.shape = shape;
    t.offset = off;
    t.numel = n;
    t.dtype = dt;
    t.data = v.data();
    return std::vector<ShardTensor>{t};
  };
  auto commit = [&](int64_t step, std::vector<ShardTensor> r0,
                    std::vector<ShardTensor> r1) {
    std::string tmp = checkpointTempDir(dir.str(), step);
    Status s = writeCheckpointShard(tmp, 0, r0);
    if (s.ok())
      s = writeCheckpointShard(tmp, 1, r1);
    if (s.ok())
      s = commitCheckpoint(dir.str(), tmp, checkpointStepDir(dir.str(), step),
                           2, baseManifest(step, 2), 1.0, 0);
    return s;
  };
  Status s = commit(1, piece("param/w", {4, 6}, 0, 12),
                    piece("param/w", {4, 6}, 10, 14));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor 'param/w': elements [10, 12) are held "
                             "twice (rank 0 and rank 1)"),
            std::string::npos)
      << s.message();
  s = commit(2, piece("param/w", {4, 6}, 0, 10),
             piece("param/w", {4, 6}, 12, 12));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("elements [10, 12) of 24 are in no piece"),
            std::string::npos)
      << s.message();
  s = commit(3, piece("param/w", {4, 6}, 0, 12),
             piece("param/w", {4, 6}, 12, 10));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("elements [22, 24) of 24 are in no piece"),
            std::string::npos)
      << s.message();
  s = commit(4, piece("param/w", {4, 6}, 0, 12),
             piece("param/w", {24}, 12, 12));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(
                "tensor 'param/w' is f32[4,6] on rank 0 but f32[24] on rank 1"),
            std::string::npos)
      << s.message();
  s = commit(5, piece("param/w", {4, 6}, 0, 12),
             piece("param/w", {4, 6}, 12, 12, DType::BF16));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bf16[4,6] on rank 1"), std::string::npos)
      << s.message();
  // A piece outside its tensor is refused when written.
  s = writeCheckpointShard(dir.str() + "/x.tmp", 0,
                           piece("param/w", {4, 6}, 20, 5));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_FALSE(fs::exists(dir.path / "latest"));
}

TEST(Checkpoint, ACorruptManifestIsAClearError) {
  TempDir dir;
  ASSERT_TRUE(save(dir.str(), 2, 3).ok());
  std::string path = dir.str() + "/step_2/manifest.json";
  const std::string good = readFile(path);
  CheckpointManifest m;
  // Every truncation fails cleanly (and names the file).
  for (size_t n = 0; n < good.size() - 1; n += 7) {
    Status s = manifestFromJson(good.substr(0, n), path, m);
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_EQ(s.message().rfind(path + ": ", 0), 0u) << s.message();
  }
  auto edited = [&](const std::string &from, const std::string &to) {
    std::string text = good;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
      text.replace(at, from.size(), to);
    return manifestFromJson(text, path, m);
  };
  struct Case {
    std::string from, to, message;
  } cases[] = {
      {"\"step\": 2", "\"step\": \"2\"", "'step' is not a number"},
      {"\"step\": 2", "\"step\": -2", "'step' is -2, not an integer"},
      {"\"stage\": 3", "\"stage\": 7", "'stage' is 7"},
      {"\"shape\": [4, 6]", "\"shape\": [4, 1e30]",
       "'tensors[1].shape[1]' is 1e30"},
      {"\"shape\": [4, 6]", "\"shape\": [4294967296, 4294967296]",
       "has more than 2^56 elements"},
      {"\"shape\": [4, 6]", "\"shape\": [99999999999999999999999]",
       "'tensors[1].shape[0]' is 99999999999999999999999"},
      {"\"file\": 0", "\"file\": 99", "is 99, but there are 3 files"},
      {"\"offset\": 0", "\"offset\": -1", "offset' is -1"},
      {"\"dtype\": \"F32\"", "\"dtype\": \"F33\"", "'F33' is not a dtype"},
      {"\"format\": \"dsc-checkpoint\"", "\"format\": \"other\"",
       "'format' is 'other'"},
      {"\"version\": 1", "\"version\": 2", "format version 1"},
      {"\"name\": \"rank_00000.safetensors\"",
       "\"name\": \"../rank_00000.safetensors\"",
       "is not a file name in the step directory"},
      {"\"files\": [", "\"files\": 3, \"x\": [", "'files' is not an array"},
      {"\"pieces\": [",
       "\"pieces\": [{\"file\": 0, \"tensor\": \"x\", "
       "\"offset\": 0, \"numel\": 1}, ",
       "are held twice"},
  };
  for (const Case &c : cases) {
    Status s = edited(c.from, c.to);
    ASSERT_FALSE(s.ok()) << c.to;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << c.to << ": " << s.message();
  }
  // Through the reader: the error names the manifest.
  writeFile(path, good.substr(0, good.size() / 2));
  CheckpointReader reader;
  Status s = reader.open(dir.str());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ": not JSON"), std::string::npos)
      << s.message();
}

TEST(Checkpoint, ReaderErrors) {
  TempDir dir;
  CheckpointReader reader;
  Status s = reader.open(dir.str());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("neither a checkpoint step"), std::string::npos);
  ASSERT_TRUE(save(dir.str(), 1, 2).ok());
  writeFile(dir.str() + "/latest", "step_8\n");
  s = reader.open(dir.str());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("names step_8, which does not exist"),
            std::string::npos)
      << s.message();
  ASSERT_TRUE(reader.open(dir.str() + "/step_1/").ok());
  float buf[30];
  s = reader.readRange("param/b", 5, Tensor::of(buf, DType::F32, {7}));
  EXPECT_EQ(s.code(), StatusCode::OutOfRange) << s.message();
  s = reader.readRange("param/b", -1, Tensor::of(buf, DType::F32, {1}));
  EXPECT_EQ(s.code(), StatusCode::OutOfRange) << s.message();
  s = reader.readRange("param/b", 0, Tensor::of(buf, DType::BF16, {2}));
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("holds it as f32[11]"), std::string::npos);
  s = reader.read("param/nope", Tensor::of(buf, DType::F32, {2}));
  EXPECT_NE(s.message().find("no tensor of that name"), std::string::npos);
  s = reader.read("param/b", Tensor::of(buf, DType::F32, {9}));
  EXPECT_FALSE(s.ok());
  // A piece whose tensor was renamed in its file (same size) is caught on
  // first use of that file.
  std::string f1 = dir.str() + "/step_1/rank_00001.safetensors";
  std::string bytes = readFile(f1);
  size_t at = bytes.find("\"param/c\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 9, "\"param/x\"");
  writeFile(f1, bytes);
  CheckpointReader r2;
  ASSERT_TRUE(r2.open(dir.str() + "/step_1").ok());
  // Its hash no longer matches the manifest's: refused before it is parsed.
  s = r2.read("param/c", Tensor::of(buf, DType::F32, {3, 3}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("read_checkpoint(param/c, "), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("rank_00001.safetensors: sha256 "),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("(the file is corrupted or changed since it was "
                             "saved)"),
            std::string::npos)
      << s.message();
  // With the manifest's hash updated too, the piece itself is missing.
  std::string manifestPath = dir.str() + "/step_1/manifest.json";
  std::string manifest = readFile(manifestPath), oldHash, newHash;
  CheckpointReader r1;
  ASSERT_TRUE(r1.open(dir.str() + "/step_1").ok());
  oldHash = r1.manifest().files[1].sha256;
  ASSERT_TRUE(sha256File(f1, newHash).ok());
  size_t h = manifest.find(oldHash);
  ASSERT_NE(h, std::string::npos);
  manifest.replace(h, oldHash.size(), newHash);
  writeFile(manifestPath, manifest);
  ASSERT_TRUE(r2.open(dir.str() + "/step_1").ok());
  s = r2.read("param/c", Tensor::of(buf, DType::F32, {3, 3}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank_00001.safetensors: tensor 'param/c' "
                             "(piece of 'param/c' at 0) is missing"),
            std::string::npos)
      << s.message();
  ASSERT_TRUE(r2.read("param/a", Tensor::of(buf, DType::F32, {4, 6})).ok());
}

TEST(Checkpoint, ConsolidateToOneFileAndToShards) {
  TempDir dir;
  ASSERT_TRUE(save(dir.str(), 4, 3).ok());
  CheckpointReader reader;
  ASSERT_TRUE(reader.open(dir.str()).ok());
  auto data = fullData(4);

  std::string one = dir.str() + "/model.safetensors";
  ASSERT_TRUE(consolidateToSafetensors(reader, one, 0, {}).ok());
  SafetensorsFile f;
  ASSERT_TRUE(f.read(one).ok());
  EXPECT_EQ(f.names().size(), 4u); // a, b, c, bn: no optimizer state
  Tensor a;
  ASSERT_TRUE(f.get("a", a).ok());
  EXPECT_EQ(a.dims(), (std::vector<int64_t>{4, 6}));
  EXPECT_TRUE(std::equal(data[0].begin(), data[0].end(), a.as<float>()));
  EXPECT_TRUE(f.contains("bn"));
  EXPECT_EQ(f.metadata().at("format"), "pt");

  ConsolidateWhat all;
  all.includeOptimizer = true;
  ASSERT_TRUE(consolidateToSafetensors(reader, one, 0, all).ok());
  ASSERT_TRUE(f.read(one).ok());
  EXPECT_TRUE(f.contains("optim/param/a/exp_avg"));

  // 24+11+9+5 floats = 196 bytes; shards of at most 64 bytes: a alone,
  // b with bn, c.
  std::vector<std::string> written;
  std::string sharded = dir.str() + "/out/model.safetensors";
  fs::create_directories(dir.path / "out");
  ASSERT_TRUE(consolidateToSafetensors(reader, sharded, 64, {}, &written).ok());
  ASSERT_EQ(written.size(), 4u);
  EXPECT_EQ(written[0], dir.str() + "/out/model-00001-of-00003.safetensors");
  EXPECT_EQ(written[3], dir.str() + "/out/model.safetensors.index.json");
  EXPECT_FALSE(fs::exists(sharded));
  Json index;
  std::string error;
  ASSERT_TRUE(JsonParser(readFile(written[3])).parse(index, error)) << error;
  EXPECT_EQ(index.find("metadata")->find("total_size")->text, "196");
  const Json *map = index.find("weight_map");
  ASSERT_TRUE(map);
  ASSERT_EQ(map->members.size(), 4u);
  for (auto &[name, file] : map->members) {
    SafetensorsFile shard;
    ASSERT_TRUE(shard.read(dir.str() + "/out/" + file.text).ok());
    EXPECT_TRUE(shard.contains(name)) << name;
  }
  EXPECT_EQ(map->find("a")->text, "model-00001-of-00003.safetensors");
  EXPECT_EQ(map->find("bn")->text, "model-00002-of-00003.safetensors");
}

TEST(Checkpoint, ByteSizes) {
  uint64_t b;
  ASSERT_TRUE(parseByteSize("5GB", b));
  EXPECT_EQ(b, 5000000000ull);
  ASSERT_TRUE(parseByteSize("2GiB", b));
  EXPECT_EQ(b, 2ull << 30);
  ASSERT_TRUE(parseByteSize("500mb", b));
  EXPECT_EQ(b, 500000000ull);
  ASSERT_TRUE(parseByteSize("123", b));
  EXPECT_EQ(b, 123u);
  EXPECT_FALSE(parseByteSize("GB", b));
  EXPECT_FALSE(parseByteSize("5XB", b));
  EXPECT_FALSE(parseByteSize("99999999999999999999GB", b));
}

TEST(Checkpoint, StepsAndDescription) {
  TempDir dir;
  for (int64_t step : {10, 2, 9})
    ASSERT_TRUE(save(dir.str(), step, 2).ok());
  EXPECT_EQ(
      checkpointSteps(dir.str()),
      (std::vector<std::string>{dir.str() + "/step_2", dir.str() + "/step_9",
                                dir.str() + "/step_10"}));
  CheckpointReader reader;
  ASSERT_TRUE(reader.open(dir.str()).ok());
  std::string text = describeCheckpoint(reader, true);
  // `latest` is the last step saved, not the highest.
  EXPECT_NE(text.find("  step         9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  ZeRO stage   3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  tensors      5: 3 parameters (44 elements), 1 "
                      "optimizer state, 1 other\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    param/b f32[11] in 2 pieces\n"), std::string::npos)
      << text;
}
