//===- Common.h - pieces every dsc subcommand shares ------------*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_COMMON_H
#define DSC_TOOLS_DSC_COMMON_H

#include "compiler/import/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dsc {

/// Prints diagnostics as "error: <file>: <message>", naming the ONNX node,
/// to `os` (standard error when none).
void installDiagnosticPrinter(mlir::MLIRContext &ctx,
                              llvm::raw_ostream *os = nullptr);
/// "error: <msg>", the usage text, and exit status 1.
int usageError(const std::string &msg, const char *usage);
/// "80GiB", "80GB", "512MiB", "4096" (bytes): the byte count, or none for
/// anything else (zero and negative sizes included).
std::optional<uint64_t> parseSize(llvm::StringRef text);
/// Writes via a temporary file and a rename, so a reader never sees half.
bool writeAtomically(const std::string &path,
                     const std::function<void(llvm::raw_ostream &)> &write);
/// Shortest text that reads back as `d` ("200000000", "0.0003", "0.7").
std::string formatNumber(double d);
/// Parses "4x64" into {4, 64}.
bool parseShape(llvm::StringRef text, std::vector<int64_t> &shape);

/// Walks argv-style options: `take("--lr")` accepts "--lr X" and "--lr=X".
class ArgCursor {
public:
  explicit ArgCursor(std::vector<std::string> args) : args_(std::move(args)) {}
  bool done() const { return i_ >= args_.size(); }
  const std::string &current() const { return args_[i_]; }
  void next() { ++i_; }
  /// If the current option is `flag` (with a value), returns the value and
  /// advances; an error is recorded when the value is missing.
  std::optional<std::string> take(llvm::StringRef flag);
  bool is(llvm::StringRef flag) const { return current() == flag; }
  std::string error;

private:
  std::vector<std::string> args_;
  size_t i_ = 0;
};

/// Handles --micro-batch, --input-shape, --max-constant-bytes and --no-loss;
/// returns true if it consumed the current option (check `cursor.error`).
bool parseImportOption(ArgCursor &cursor, ImportOptions &opts);

} // namespace dsc

#endif // DSC_TOOLS_DSC_COMMON_H
