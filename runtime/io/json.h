//===- json.h - A small JSON reader and writer ------------------*- C++ -*-===//
//
// What the runtime's file formats need (safetensors headers, checkpoint
// manifests): a parser into a plain tree (objects keep their member order;
// numbers keep their literal text, so int64 values survive exactly), and a
// writer that escapes strings and prints numbers that read back the same
// (int64 exactly, doubles with 17 significant digits, no NaN or infinity).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_JSON_H
#define DSC_RUNTIME_IO_JSON_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsc::io {

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  std::string text; // String value, a Number's literal, "true"/"false"
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  static Json string(std::string s);
  static Json boolean(bool b);
  static Json integer(int64_t v);
  static Json unsignedInteger(uint64_t v);
  /// False (and `out` untouched) for NaN and infinities, which JSON lacks.
  static bool real(double v, Json &out);
  static Json array() { return withKind(Array); }
  static Json object() { return withKind(Object); }

  /// Appends a member (objects) or an item (arrays); returns the new value.
  Json &add(std::string key, Json value);
  Json &push(Json value);
  /// The first member named `key`, or null.
  const Json *find(const std::string &key) const;

private:
  static Json withKind(Kind k) {
    Json j;
    j.kind = k;
    return j;
  }
};

/// Parses one JSON document (nesting at most 64 deep). On failure `error`
/// says what and at which byte.
class JsonParser {
public:
  explicit JsonParser(const std::string &s) : s_(s) {}
  bool parse(Json &out, std::string &error);

private:
  void skipSpace();
  bool fail(const char *what);
  bool literal(const char *word);
  bool value(Json &out, int depth);
  bool object(Json &out, int depth);
  bool array(Json &out, int depth);
  bool hex4(uint32_t &cp);
  bool string(std::string &out);

  const std::string &s_;
  size_t pos_ = 0;
  std::string error_;
};

/// A Number of at most 19 decimal digits, no sign, fraction or exponent.
bool jsonToUint(const Json &j, uint64_t &out);
/// A Number that is an integer (optional '-', digits) within int64.
bool jsonToInt64(const Json &j, int64_t &out);

/// `s` as a quoted JSON string ('"', '\\' and control characters escaped).
void appendJsonString(std::string &out, const std::string &s);
/// The tree as text: compact with `indent` 0, else members and items one
/// per line indented by `indent` spaces a level (empty ones stay "{}"/"[]").
std::string formatJson(const Json &j, int indent = 0);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_JSON_H
