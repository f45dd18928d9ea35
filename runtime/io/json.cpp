//===- json.cpp - A small JSON reader and writer --------------------------===//

#include "io/json.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace dsc::io {

//===----------------------------------------------------------------------===//
// Building trees
//===----------------------------------------------------------------------===//

Json Json::string(std::string s) {
  Json j = withKind(String);
  j.text = std::move(s);
  return j;
}

Json Json::boolean(bool b) {
  Json j = withKind(Bool);
  j.text = b ? "true" : "false";
  return j;
}

Json Json::integer(int64_t v) {
  Json j = withKind(Number);
  j.text = std::to_string(v);
  return j;
}

Json Json::unsignedInteger(uint64_t v) {
  Json j = withKind(Number);
  j.text = std::to_string(v);
  return j;
}

bool Json::real(double v, Json &out) {
  if (!std::isfinite(v))
    return false;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out = withKind(Number);
  out.text = buf;
  return true;
}

Json &Json::add(std::string key, Json value) {
  members.emplace_back(std::move(key), std::move(value));
  return members.back().second;
}

Json &Json::push(Json value) {
  items.push_back(std::move(value));
  return items.back();
}

const Json *Json::find(const std::string &key) const {
  for (const auto &[k, v] : members)
    if (k == key)
      return &v;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// The parser: objects, arrays, strings, numbers kept as their text
//===----------------------------------------------------------------------===//

bool JsonParser::parse(Json &out, std::string &error) {
  out = Json();
  if (!value(out, 0) || (skipSpace(), pos_ != s_.size())) {
    error = error_.empty() ? "trailing characters" : error_;
    error += " at byte " + std::to_string(pos_);
    return false;
  }
  return true;
}

void JsonParser::skipSpace() {
  while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' ||
                              s_[pos_] == '\t' || s_[pos_] == '\r'))
    ++pos_;
}

bool JsonParser::fail(const char *what) {
  if (error_.empty())
    error_ = what;
  return false;
}

bool JsonParser::literal(const char *word) {
  size_t n = std::strlen(word);
  if (s_.compare(pos_, n, word) != 0)
    return fail("unexpected token");
  pos_ += n;
  return true;
}

bool JsonParser::value(Json &out, int depth) {
  if (depth > 64)
    return fail("nesting too deep");
  skipSpace();
  if (pos_ >= s_.size())
    return fail("unexpected end");
  char c = s_[pos_];
  if (c == '{')
    return object(out, depth);
  if (c == '[')
    return array(out, depth);
  if (c == '"') {
    out.kind = Json::String;
    return string(out.text);
  }
  if (c == 't' || c == 'f') {
    out.kind = Json::Bool;
    out.text = c == 't' ? "true" : "false";
    return literal(c == 't' ? "true" : "false");
  }
  if (c == 'n') {
    out.kind = Json::Null;
    return literal("null");
  }
  size_t start = pos_;
  while (pos_ < s_.size() &&
         (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
          std::strchr("+-.eE", s_[pos_])))
    ++pos_;
  if (start == pos_)
    return fail("unexpected character");
  out.kind = Json::Number;
  out.text = s_.substr(start, pos_ - start);
  return true;
}

bool JsonParser::object(Json &out, int depth) {
  out.kind = Json::Object;
  ++pos_; // '{'
  skipSpace();
  if (pos_ < s_.size() && s_[pos_] == '}')
    return ++pos_, true;
  while (true) {
    skipSpace();
    std::string key;
    if (pos_ >= s_.size() || s_[pos_] != '"' || !string(key))
      return fail("expected a member name");
    skipSpace();
    if (pos_ >= s_.size() || s_[pos_++] != ':')
      return fail("expected ':'");
    Json v;
    if (!value(v, depth + 1))
      return false;
    out.members.emplace_back(std::move(key), std::move(v));
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      continue;
    }
    if (pos_ < s_.size() && s_[pos_] == '}')
      return ++pos_, true;
    return fail("expected ',' or '}'");
  }
}

bool JsonParser::array(Json &out, int depth) {
  out.kind = Json::Array;
  ++pos_; // '['
  skipSpace();
  if (pos_ < s_.size() && s_[pos_] == ']')
    return ++pos_, true;
  while (true) {
    Json v;
    if (!value(v, depth + 1))
      return false;
    out.items.push_back(std::move(v));
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == ',') {
      ++pos_;
      continue;
    }
    if (pos_ < s_.size() && s_[pos_] == ']')
      return ++pos_, true;
    return fail("expected ',' or ']'");
  }
}

namespace {

void appendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

} // namespace

bool JsonParser::hex4(uint32_t &cp) {
  if (pos_ + 4 > s_.size())
    return fail("bad \\u escape");
  cp = 0;
  for (int i = 0; i < 4; ++i) {
    char h = s_[pos_++];
    cp <<= 4;
    if (h >= '0' && h <= '9')
      cp |= h - '0';
    else if (h >= 'a' && h <= 'f')
      cp |= h - 'a' + 10;
    else if (h >= 'A' && h <= 'F')
      cp |= h - 'A' + 10;
    else
      return fail("bad \\u escape");
  }
  return true;
}

bool JsonParser::string(std::string &out) {
  ++pos_; // '"'
  while (pos_ < s_.size()) {
    char c = s_[pos_++];
    if (c == '"')
      return true;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (pos_ >= s_.size())
      break;
    char e = s_[pos_++];
    switch (e) {
    case '"':
    case '\\':
    case '/':
      out += e;
      break;
    case 'b':
      out += '\b';
      break;
    case 'f':
      out += '\f';
      break;
    case 'n':
      out += '\n';
      break;
    case 'r':
      out += '\r';
      break;
    case 't':
      out += '\t';
      break;
    case 'u': {
      uint32_t cp;
      if (!hex4(cp))
        return false;
      if (cp >= 0xd800 && cp < 0xdc00 && pos_ + 1 < s_.size() &&
          s_[pos_] == '\\' && s_[pos_ + 1] == 'u') {
        pos_ += 2;
        uint32_t lo;
        if (!hex4(lo))
          return false;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      appendUtf8(out, cp);
      break;
    }
    default:
      return fail("bad escape");
    }
  }
  return fail("unterminated string");
}

//===----------------------------------------------------------------------===//
// Numbers
//===----------------------------------------------------------------------===//

bool jsonToUint(const Json &j, uint64_t &out) {
  if (j.kind != Json::Number || j.text.empty() ||
      j.text.find_first_not_of("0123456789") != std::string::npos ||
      j.text.size() > 19)
    return false;
  uint64_t v = 0;
  for (char c : j.text)
    v = v * 10 + static_cast<uint64_t>(c - '0'); // 19 digits cannot wrap
  out = v;
  return true;
}

bool jsonToInt64(const Json &j, int64_t &out) {
  if (j.kind != Json::Number || j.text.empty())
    return false;
  bool negative = j.text[0] == '-';
  std::string digits = j.text.substr(negative ? 1 : 0);
  if (digits.empty() || digits.size() > 19 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  uint64_t v = 0;
  for (char c : digits)
    v = v * 10 + static_cast<uint64_t>(c - '0');
  uint64_t limit = negative ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
  if (v > limit)
    return false;
  out = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

//===----------------------------------------------------------------------===//
// The writer
//===----------------------------------------------------------------------===//

void appendJsonString(std::string &out, const std::string &s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

namespace {

bool allScalars(const Json &j) {
  for (const Json &item : j.items)
    if (item.kind == Json::Array || item.kind == Json::Object)
      return false;
  for (const auto &member : j.members)
    if (member.second.kind == Json::Array || member.second.kind == Json::Object)
      return false;
  return true;
}

/// A container of scalars on one line: `[4, 4]`, `{"file": 0, "numel": 16}`.
std::string inlineText(const Json &j) {
  std::string out = j.kind == Json::Array ? "[" : "{";
  for (size_t i = 0; i < j.items.size(); ++i)
    out += (i ? ", " : "") + formatJson(j.items[i], 0);
  for (size_t i = 0; i < j.members.size(); ++i) {
    out += i ? ", " : "";
    appendJsonString(out, j.members[i].first);
    out += ": " + formatJson(j.members[i].second, 0);
  }
  return out + (j.kind == Json::Array ? "]" : "}");
}

void format(const Json &j, int indent, int level, std::string &out) {
  auto newline = [&](int l) {
    if (indent <= 0)
      return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * l, ' ');
  };
  if (indent > 0 && (j.kind == Json::Array || j.kind == Json::Object) &&
      allScalars(j)) {
    std::string line = inlineText(j);
    if (j.kind == Json::Array || line.size() <= 80) {
      out += line;
      return;
    }
  }
  switch (j.kind) {
  case Json::Null:
    out += "null";
    return;
  case Json::Bool:
    out += j.text == "true" ? "true" : "false";
    return;
  case Json::Number:
    out += j.text.empty() ? "0" : j.text;
    return;
  case Json::String:
    appendJsonString(out, j.text);
    return;
  case Json::Array:
    out += '[';
    for (size_t i = 0; i < j.items.size(); ++i) {
      if (i)
        out += ',';
      newline(level + 1);
      format(j.items[i], indent, level + 1, out);
    }
    if (!j.items.empty())
      newline(level);
    out += ']';
    return;
  case Json::Object:
    out += '{';
    for (size_t i = 0; i < j.members.size(); ++i) {
      if (i)
        out += ',';
      newline(level + 1);
      appendJsonString(out, j.members[i].first);
      out += indent > 0 ? ": " : ":";
      format(j.members[i].second, indent, level + 1, out);
    }
    if (!j.members.empty())
      newline(level);
    out += '}';
    return;
  }
}

} // namespace

std::string formatJson(const Json &j, int indent) {
  std::string out;
  format(j, indent, 0, out);
  return out;
}

} // namespace dsc::io
