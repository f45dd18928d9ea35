//===- Compile.h - `dsc compile` --------------------------------*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_COMPILE_H
#define DSC_TOOLS_DSC_COMPILE_H

#include "compiler/import/OnnxImporter.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsc {
int runCompile(std::vector<std::string> args);

/// The --recompute choices, least recomputation first.
inline constexpr const char *kRecomputeModes[] = {"none", "elementwise",
                                                  "selective", "full"};

/// Whether `dsc compile MODEL FLAGS...` accepts its options (else the error
/// and the usage are printed, once).
bool compileOptionsAccepted(const std::string &model,
                            std::vector<std::string> flags);

/// What one rank holds in the step `dsc compile MODEL FLAGS...` compiles:
/// its arguments and results plus the code generator's arena (the static
/// plan's peak). None when it does not compile (the errors are printed to
/// `diagnostics`, standard error when none). Safe to call from several
/// threads at once: each compiles in its own context.
std::optional<uint64_t>
compiledPeakBytes(const std::string &model, const ImportOptions &import,
                  std::vector<std::string> flags,
                  llvm::raw_ostream *diagnostics = nullptr);
} // namespace dsc

#endif // DSC_TOOLS_DSC_COMPILE_H
