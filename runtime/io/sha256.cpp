//===- sha256.cpp - SHA-256 of buffers and files --------------------------===//
//
// FIPS 180-4, section 6.2: 512-bit blocks, a 64-word message schedule, the
// padding of section 5.1.1 (a 1 bit, zeros, the bit length as 64 bits).
//
//===----------------------------------------------------------------------===//

#include "io/sha256.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

namespace dsc::io {

namespace {

// The first 32 bits of the fractional parts of the cube roots of the first
// 64 primes (FIPS 180-4, 4.2.2).
const uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// The first 32 bits of the fractional parts of the square roots of the
// first 8 primes (4.2.2, 5.3.3).
const uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                              0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

} // namespace

Sha256::Sha256() { std::memcpy(h_, kInitial, sizeof h_); }

void Sha256::block(const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 |
           uint32_t(p[4 * t + 2]) << 8 | uint32_t(p[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5],
           g = h_[6], h = h_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t sum1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + sum1 + ch + kRound[t] + w[t];
    uint32_t sum0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = sum0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::update(const void *data, size_t bytes) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  total_ += bytes;
  if (used_) {
    size_t take = std::min(bytes, sizeof buf_ - used_);
    std::memcpy(buf_ + used_, p, take);
    used_ += take;
    p += take;
    bytes -= take;
    if (used_ < sizeof buf_)
      return;
    block(buf_);
    used_ = 0;
  }
  for (; bytes >= 64; p += 64, bytes -= 64)
    block(p);
  if (bytes) {
    std::memcpy(buf_, p, bytes);
    used_ = bytes;
  }
}

std::string Sha256::finish() {
  uint64_t bits = total_ * 8;
  unsigned char pad[72] = {0x80};
  // Pad to 56 mod 64, then the 64-bit big-endian length.
  size_t padLen = (used_ < 56 ? 56 - used_ : 120 - used_);
  for (int i = 0; i < 8; ++i)
    pad[padLen + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(pad, padLen + 8);
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint32_t word : h_)
    for (int shift = 28; shift >= 0; shift -= 4)
      hex += digits[(word >> shift) & 0xf];
  *this = Sha256();
  return hex;
}

Status sha256File(const std::string &path, std::string &hex) {
  auto fail = [&](const std::string &why) {
    return Status::error(StatusCode::IoError,
                         "sha256_file(" + path + "): " + why);
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(std::strerror(errno));
  Sha256 sha;
  std::vector<unsigned char> chunk(1 << 20);
  while (true) {
    ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return fail(std::strerror(e));
    }
    if (n == 0)
      break;
    sha.update(chunk.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  hex = sha.finish();
  return Status();
}

} // namespace dsc::io
