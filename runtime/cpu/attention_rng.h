//===- attention_rng.h - The dropout mask of dsc.attention ------*- C++ -*-===//
//
// Shared by the CPU kernel (cpu/attention.cpp) and the CUDA kernel
// (cuda/attention.cu), host and device, so both backends drop the same
// probabilities bit for bit. Probability (b, h, i, j) of a [B, Hq, Tq, Tk]
// score tensor is kept iff the uniform of its row-major index, hashed with
// splitmix64 as cpu::dropout hashes its elements, is >= the ratio:
//
//   u = (splitmix64(splitmix64(seed) ^ index) >> 11) * 2^-53,  keep iff u >= p
//
// The comparison is done on the 53-bit integer against ceil(p * 2^53), which
// is the same test (both sides scale exactly by 2^53) without a double on
// the device's hot path.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_ATTENTION_RNG_H
#define DSC_RUNTIME_CPU_ATTENTION_RNG_H

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define DSC_HOST_DEVICE __host__ __device__
#else
#define DSC_HOST_DEVICE
#endif

namespace dsc::cpu {

DSC_HOST_DEVICE inline uint64_t attentionSplitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The dropout parameters of one call, computed once on the host.
struct AttentionDropout {
  uint64_t key = 0;       // splitmix64(seed)
  uint64_t threshold = 0; // keep iff the 53-bit draw >= threshold
  bool active = false;    // ratio > 0
};

inline AttentionDropout attentionDropoutOf(uint64_t seed, double ratio) {
  AttentionDropout d;
  d.key = attentionSplitmix64(seed);
  d.active = ratio > 0;
  d.threshold = static_cast<uint64_t>(std::ceil(ratio * 0x1.0p53));
  return d;
}

/// Whether probability number `index` (row-major in [B, Hq, Tq, Tk]) is kept.
DSC_HOST_DEVICE inline bool attentionDropoutKeep(const AttentionDropout &d,
                                                 uint64_t index) {
  return (attentionSplitmix64(d.key ^ index) >> 11) >= d.threshold;
}

/// The same for (b, h, i, j) of a call with Hq heads, Tq queries, Tk keys.
DSC_HOST_DEVICE inline bool
attentionDropoutKeep(const AttentionDropout &d, int64_t b, int64_t h, int64_t i,
                     int64_t j, int64_t hq, int64_t tq, int64_t tk) {
  uint64_t index = static_cast<uint64_t>(((b * hq + h) * tq + i) * tk + j);
  return attentionDropoutKeep(d, index);
}

/// The host convenience form of the spec: seed and ratio directly.
inline bool attentionDropoutKeep(uint64_t seed, int64_t b, int64_t h, int64_t i,
                                 int64_t j, int64_t hq, int64_t tq, int64_t tk,
                                 double ratio) {
  return attentionDropoutKeep(attentionDropoutOf(seed, ratio), b, h, i, j, hq,
                              tq, tk);
}

} // namespace dsc::cpu

#endif // DSC_RUNTIME_CPU_ATTENTION_RNG_H
