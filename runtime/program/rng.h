//===- rng.h - The program's seeded random numbers --------------*- C++ -*-===//
//
// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state, and the same
// sequence on every platform and standard library (std:: distributions are
// not portable). Used for --init random and for the --data windows; each
// use has its own stream so changing one never shifts the other.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_RNG_H
#define DSC_RUNTIME_PROGRAM_RNG_H

#include <cmath>
#include <cstdint>

namespace dsc::program {

class Rng {
public:
  /// Stream 0 and 1 of the same seed are unrelated sequences.
  explicit Rng(uint64_t seed, uint64_t stream = 0)
      : state_(seed ^ (stream * 0xd1b54a32d192ed03ull)) {
    next(); // decorrelate small seeds
  }

  uint64_t next() {
    uint64_t z = (state_ += kStep);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, n), n > 0, without modulo bias.
  uint64_t below(uint64_t n) {
    uint64_t limit = -n % n; // 2^64 mod n
    uint64_t x;
    do
      x = next();
    while (x < limit);
    return x % n;
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Standard normal (Box-Muller, one value per call).
  double normal() {
    double u1 = 1.0 - uniform(); // (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  /// Moves on as `draws` calls of next() would (normal() is two): the
  /// state is a counter, so a thread can start anywhere in the sequence.
  void skip(uint64_t draws) { state_ += draws * kStep; }

  /// The whole state, for checkpoints: a generator set to state() draws
  /// what this one would draw next.
  uint64_t state() const { return state_; }
  void setState(uint64_t state) { state_ = state; }

private:
  static constexpr uint64_t kStep = 0x9e3779b97f4a7c15ull;
  uint64_t state_;
};

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_RNG_H
