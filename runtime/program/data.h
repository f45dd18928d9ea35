//===- data.h - Batches for the step: --batch and --data --------*- C++ -*-===//
//
// The step takes the whole global batch (micro-batch x accumulation steps
// along dim 0) as its Input arguments, named as the ONNX graph inputs.
//
//   --batch FILE.safetensors   one fixed batch, fed at every step. Each
//       Input is looked up by name; its shape must equal the program's; its
//       dtype may differ within integers (i64, i32, i8, u8; checked for
//       range) or within floats (f64, f32, f16, bf16).
//   --data FILE                a flat token file (nanoGPT's train.bin:
//       uint16 by default, or int32), for language models. Every Input
//       must be an integer [N, T]; one or two of them. Each row r samples
//       a start i uniformly in [0, L - T - 1] (L tokens in the file) and
//       the first Input gets x[i, i+T), the second (the targets) gets
//       x[i+1, i+T+1). Inputs are taken in spec order.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_DATA_H
#define DSC_RUNTIME_PROGRAM_DATA_H

#include "dsc/runtime.h"
#include "program/rng.h"

#include <string>
#include <vector>

namespace dsc::program {

/// One Input argument and the storage the program holds for it.
struct InputSlot {
  std::string name;
  Tensor tensor;
};

/// How the global batch (dim 0 of every Input) is made up, for messages.
/// With several ranks, the files hold the whole global batch and rank r
/// takes rows [r * B, (r + 1) * B), B = microBatch * accumSteps.
struct BatchShape {
  int64_t microBatch = 1;
  int64_t accumSteps = 1;
  int64_t ranks = 1;
  int64_t global() const { return ranks * microBatch * accumSteps; }
};

/// Fills every slot from a safetensors file. `*unused` (if given) receives
/// the file's tensors that no slot takes.
Status loadBatchFile(const std::string &path,
                     const std::vector<InputSlot> &slots,
                     const BatchShape &batch,
                     std::vector<std::string> *unused = nullptr);

enum class TokenType { U16, I32 };
/// "uint16" / "u16" or "int32" / "i32".
bool parseTokenType(const std::string &text, TokenType &out);
const char *tokenTypeName(TokenType type);

/// A memory-mapped token file and the windowing rule above.
class TokenData {
public:
  TokenData() = default;
  ~TokenData();
  TokenData(const TokenData &) = delete;
  TokenData &operator=(const TokenData &) = delete;

  /// Maps `path` and checks `slots` against the rule; nothing is read yet.
  Status open(const std::string &path, TokenType type,
              const std::vector<InputSlot> &slots, const BatchShape &batch);
  /// Writes one window per row of the slots.
  Status sample(Rng &rng, const std::vector<InputSlot> &slots) const;

  size_t numTokens() const { return numTokens_; }

private:
  int64_t token(size_t i) const;

  std::string path_;
  TokenType type_ = TokenType::U16;
  const uint8_t *map_ = nullptr;
  size_t mapSize_ = 0;
  size_t numTokens_ = 0;
};

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_DATA_H
