//===- crc32c.cpp - CRC-32C (Castagnoli) and TFRecord's mask --------------===//

#include "io/crc32c.h"

#include <array>

namespace dsc::io {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u; // 0x1EDC6F41 bit-reversed
constexpr uint32_t kMaskDelta = 0xa282ead8u;

constexpr std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = makeTable();

} // namespace

uint32_t crc32c(const void *data, size_t bytes, uint32_t crc) {
  const auto *p = static_cast<const uint8_t *>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < bytes; ++i)
    c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t maskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

uint32_t unmaskCrc32c(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

} // namespace dsc::io
