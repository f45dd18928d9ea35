//===- CppLiterals.cpp - C++ literals that read back exactly --------------===//

#include "compiler/codegen/Lowering.h"

#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace dsc::codegen {

namespace {

/// The shortest %.Ng spelling of `value` that parses back to it.
template <typename T> std::string shortest(T value) {
  char buf[64];
  constexpr int maxDigits = std::numeric_limits<T>::max_digits10;
  for (int digits = 1; digits <= maxDigits; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(value));
    T back;
    if constexpr (std::is_same_v<T, float>)
      back = std::strtof(buf, nullptr);
    else
      back = std::strtod(buf, nullptr);
    if (back == value)
      break;
  }
  std::string s = buf;
  // "1" would be an int literal; keep it a floating one.
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s;
}

template <typename T> std::string special(T value, const char *type) {
  std::string limits = std::string("std::numeric_limits<") + type + ">::";
  if (std::isnan(value))
    return limits + "quiet_NaN()";
  return (value < 0 ? "-" : "") + limits + "infinity()";
}

} // namespace

std::string cppDouble(double value) {
  if (!std::isfinite(value))
    return special(value, "double");
  return shortest(value);
}

std::string cppFloat(float value) {
  if (!std::isfinite(value))
    return special(value, "float");
  return shortest(value) + "f";
}

std::string cppInt(int64_t value) {
  if (value == std::numeric_limits<int64_t>::min())
    return "(-9223372036854775807 - 1)";
  return std::to_string(value);
}

std::string cppInts(llvm::ArrayRef<int64_t> values) {
  std::string s = "{";
  for (size_t i = 0; i < values.size(); ++i)
    s += (i ? ", " : "") + cppInt(values[i]);
  return s + "}";
}

std::string cppOptional(std::optional<double> value) {
  if (!value)
    return "std::nullopt";
  return "std::optional<double>(" + cppDouble(*value) + ")";
}

std::string cppString(llvm::StringRef text) {
  std::string s = "\"";
  for (unsigned char c : text) {
    switch (c) {
    case '"':
      s += "\\\"";
      break;
    case '\\':
      s += "\\\\";
      break;
    case '\n':
      s += "\\n";
      break;
    case '\t':
      s += "\\t";
      break;
    default:
      if (c < 0x20 || c == 0x7f) {
        // Octal, so that a following digit cannot extend the escape.
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\%03o", c);
        s += buf;
      } else {
        s += static_cast<char>(c);
      }
    }
  }
  // "??x" would be a trigraph before C++17; harmless now, but cheap to avoid.
  size_t at = 0;
  while ((at = s.find("??", at)) != std::string::npos)
    s.replace(at, 2, "?\\?");
  return s + "\"";
}

std::string cppConvAttrs(llvm::ArrayRef<int64_t> strides,
                         llvm::ArrayRef<int64_t> pads,
                         llvm::ArrayRef<int64_t> dilations, int64_t group) {
  return "rt::ConvAttrs{" + cppInts(strides) + ", " + cppInts(pads) + ", " +
         cppInts(dilations) + ", " + cppInt(group) + "}";
}

std::string cppCall(llvm::StringRef callee,
                    llvm::ArrayRef<std::string> arguments) {
  return callee.str() + "(" + llvm::join(arguments, ", ") + ")";
}

} // namespace dsc::codegen
