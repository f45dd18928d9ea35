//===- Config.h - a DeepSpeed ds_config.json as compile flags ---*- C++ -*-===//
//
// `dsc compile --config ds_config.json` reads a DeepSpeed configuration and
// turns it into the compile options it means (docs/config.md has the table).
// Flags given on the command line beside --config win over the file.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_TOOLS_DSC_CONFIG_H
#define DSC_TOOLS_DSC_CONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace dsc {

/// What a ds_config resolves to.
struct ResolvedConfig {
  /// Compile flags to put in front of the user's own ("--lr", "3e-4", ...);
  /// flags the user gave are not among them.
  std::vector<std::string> args;
  /// One line per key: "key = value -> --flag value" (for --report).
  std::vector<std::string> lines;
  /// The program's run-time defaults ("--print-every", "10", ...):
  /// steps_per_print and the monitor blocks.
  std::vector<std::string> runArgs;
  /// {"file": path, "config": the file as given, "resolved": lines}, saved
  /// in the program and in every checkpoint.
  std::string json;
};

/// Reads and resolves `path` against the user's command line `cli` (used
/// for "auto" values, the world size and overrides). Warnings and notes go
/// to `diag`; returns false after printing the errors.
bool resolveDeepSpeedConfig(const std::string &path,
                            const std::vector<std::string> &cli,
                            ResolvedConfig &out, llvm::raw_ostream &diag);

/// Prints the resolved config as `--report` shows it.
void printResolvedConfig(const std::string &path, const ResolvedConfig &cfg,
                         llvm::raw_ostream &os);

} // namespace dsc

#endif // DSC_TOOLS_DSC_CONFIG_H
