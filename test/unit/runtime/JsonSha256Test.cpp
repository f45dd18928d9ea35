//===- JsonSha256Test.cpp - The JSON module and SHA-256 -------------------===//

#include "io/json.h"
#include "io/sha256.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

using namespace dsc;
using namespace dsc::io;

namespace {

std::string sha(const std::string &s) {
  Sha256 h;
  h.update(s.data(), s.size());
  return h.finish();
}

} // namespace

// FIPS 180-4 examples (NIST CSRC "SHA256.pdf") and the million-'a' vector.
TEST(Sha256, StandardVectors) {
  EXPECT_EQ(sha(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;
  std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i)
    h.update(chunk.data(), chunk.size());
  EXPECT_EQ(h.finish(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalMatchesOneShotAtEveryBlockBoundary) {
  std::string msg;
  for (int i = 0; i < 200; ++i)
    msg += static_cast<char>(i * 7 + 3);
  for (size_t n = 0; n <= msg.size(); n += 1) {
    std::string whole = sha(msg.substr(0, n));
    Sha256 h;
    for (size_t i = 0; i < n; i += 13)
      h.update(msg.data() + i, std::min<size_t>(13, n - i));
    ASSERT_EQ(h.finish(), whole) << n;
  }
}

TEST(Sha256, File) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("dsc-sha-" + std::to_string(::getpid())))
                         .string();
  { std::ofstream(path, std::ios::binary) << "abc"; }
  std::string hex;
  ASSERT_TRUE(sha256File(path, hex).ok());
  EXPECT_EQ(hex, sha("abc"));
  std::remove(path.c_str());
  Status s = sha256File(path, hex);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos);
}

TEST(Json, ParseAndFormatRoundTrip) {
  std::string text =
      R"({"a": [1, -2, 3.5e3], "b": {"c": "x\"y\\z\n\u00e9"}, "d": true, "e": null})";
  Json j;
  std::string error;
  ASSERT_TRUE(JsonParser(text).parse(j, error)) << error;
  ASSERT_EQ(j.kind, Json::Object);
  EXPECT_EQ(j.find("b")->find("c")->text, "x\"y\\z\n\xc3\xa9");
  std::string compact = formatJson(j, 0);
  Json back;
  ASSERT_TRUE(JsonParser(compact).parse(back, error)) << error;
  EXPECT_EQ(formatJson(back, 0), compact);
  std::string pretty = formatJson(j, 2);
  EXPECT_NE(pretty.find("\n  \"a\": [1, -2, 3.5e3]"), std::string::npos)
      << pretty;
  ASSERT_TRUE(JsonParser(pretty).parse(back, error)) << error;
  EXPECT_EQ(formatJson(back, 0), compact);
  EXPECT_EQ(formatJson(Json::object(), 2), "{}");
  EXPECT_EQ(formatJson(Json::array(), 2), "[]");
}

TEST(Json, ErrorsAndDepthLimit) {
  Json j;
  std::string error;
  EXPECT_FALSE(JsonParser("{\"a\": 1").parse(j, error));
  EXPECT_EQ(error, "expected ',' or '}' at byte 7");
  EXPECT_FALSE(JsonParser("[1] x").parse(j, error));
  EXPECT_EQ(error, "trailing characters at byte 4");
  EXPECT_FALSE(JsonParser("\"abc").parse(j, error));
  EXPECT_EQ(error, "unterminated string at byte 4");
  std::string deep(65, '['), close(65, ']');
  EXPECT_TRUE(JsonParser(deep + close).parse(j, error)) << error;
  EXPECT_FALSE(JsonParser("[" + deep + close + "]").parse(j, error));
  EXPECT_NE(error.find("nesting too deep"), std::string::npos);
}

TEST(Json, IntegersExactlyAndDoublesRoundTrip) {
  int64_t v;
  EXPECT_TRUE(jsonToInt64(Json::integer(INT64_MAX), v));
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_TRUE(jsonToInt64(Json::integer(INT64_MIN), v));
  EXPECT_EQ(v, INT64_MIN);
  Json big;
  big.kind = Json::Number;
  big.text = "9223372036854775808";
  EXPECT_FALSE(jsonToInt64(big, v));
  big.text = "1e3";
  EXPECT_FALSE(jsonToInt64(big, v));
  big.text = "-";
  EXPECT_FALSE(jsonToInt64(big, v));
  uint64_t u;
  EXPECT_TRUE(jsonToUint(Json::unsignedInteger(9999999999999999999ull), u));
  EXPECT_EQ(u, 9999999999999999999ull);
  big.text = "18446744073709551615"; // 20 digits: refused, as before
  EXPECT_FALSE(jsonToUint(big, u));

  for (double d : {0.1, 1.0 / 3, -1e-300, 6.02214076e23, 123456789.0}) {
    Json j;
    ASSERT_TRUE(Json::real(d, j));
    EXPECT_EQ(std::strtod(j.text.c_str(), nullptr), d) << j.text;
  }
  Json j;
  EXPECT_FALSE(Json::real(std::numeric_limits<double>::infinity(), j));
  EXPECT_FALSE(Json::real(std::nan(""), j));
}

TEST(Json, EscapesControlCharacters) {
  std::string out;
  appendJsonString(out, std::string("a\x01\"\\\tb", 6));
  EXPECT_EQ(out, "\"a\\u0001\\\"\\\\\\u0009b\"");
  Json j;
  std::string error;
  ASSERT_TRUE(JsonParser(out).parse(j, error));
  EXPECT_EQ(j.text, std::string("a\x01\"\\\tb", 6));
}
