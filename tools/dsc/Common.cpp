//===- Common.cpp - pieces every dsc subcommand shares --------------------===//
#include "tools/dsc/Common.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace mlir;

namespace dsc {

// Prints "error: <file>: <message>"; the importer puts the node in the
// message, so the location only contributes the file.
void installDiagnosticPrinter(MLIRContext &ctx, llvm::raw_ostream *out) {
  ctx.getDiagEngine().registerHandler([out](Diagnostic &diag) {
    auto &os = out ? *out : llvm::errs();
    const char *severity =
        diag.getSeverity() == DiagnosticSeverity::Error     ? "error"
        : diag.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                                                            : "note";
    std::string file;
    diag.getLocation()->walk([&](Location loc) {
      if (auto f = dyn_cast<FileLineColLoc>(loc)) {
        file = f.getFilename().str();
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    std::string node;
    if (auto name = dyn_cast<NameLoc>(diag.getLocation()))
      node = name.getName().str();
    std::string msg = diag.str();
    os << severity << ": " << (file.empty() ? "" : file + ": ");
    // Messages from the verifier do not name the node; add it.
    if (!node.empty() && !llvm::StringRef(msg).starts_with("node '"))
      os << "node '" << node << "': ";
    os << msg << "\n";
    for (auto &note : diag.getNotes()) {
      std::string text = note.str();
      // The pass manager's op dump is for compiler developers.
      if (llvm::StringRef(text).starts_with("see current operation"))
        continue;
      os << "note: " << text << "\n";
    }
    return success();
  });
}

int usageError(const std::string &msg, const char *usage) {
  llvm::errs() << "error: " << msg << "\n\n" << usage;
  return 1;
}

/// Writes `write`'s output to `path` (opened with `flags`); false, after
/// saying why, when it cannot be opened or written.
static bool writeStream(const std::string &path,
                        const std::function<void(llvm::raw_ostream &)> &write,
                        llvm::sys::fs::OpenFlags flags) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, flags);
  if (ec) {
    llvm::errs() << "error: cannot write '" << path << "': " << ec.message()
                 << "\n";
    return false;
  }
  write(os);
  os.close();
  if (os.has_error()) {
    llvm::errs() << "error: writing '" << path << "' failed\n";
    return false;
  }
  return true;
}

/// Writes via a temporary file and a rename, so a reader never sees half.
/// A device or FIFO (`-o /dev/null`) is written straight into instead: a
/// rename would replace it (as root, the device node itself).
bool writeAtomically(const std::string &requested,
                     const std::function<void(llvm::raw_ostream &)> &write) {
  // A symbolic link stays: the file it names is the one replaced.
  std::string path = requested;
  llvm::SmallString<256> real;
  if (llvm::sys::fs::is_symlink_file(requested) &&
      !llvm::sys::fs::real_path(requested, real))
    path = std::string(real);
  llvm::sys::fs::file_status st;
  if (!llvm::sys::fs::status(path, st)) {
    if (st.type() == llvm::sys::fs::file_type::directory_file) {
      llvm::errs() << "error: cannot write '" << requested
                   << "': it is a directory\n";
      return false;
    }
    if (st.type() != llvm::sys::fs::file_type::regular_file)
      return writeStream(path, write, llvm::sys::fs::OF_Append);
  }
  std::string tmp =
      path + ".tmp." + std::to_string(llvm::sys::Process::getProcessId());
  if (!writeStream(tmp, write, llvm::sys::fs::OF_None)) {
    llvm::sys::fs::remove(tmp);
    return false;
  }
  if (auto ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::errs() << "error: cannot rename '" << tmp << "' to '" << path
                 << "': " << ec.message() << "\n";
    llvm::sys::fs::remove(tmp);
    return false;
  }
  return true;
}

bool parseShape(llvm::StringRef text, std::vector<int64_t> &shape) {
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, 'x');
  for (llvm::StringRef p : parts) {
    int64_t d;
    if (p.getAsInteger(10, d) || d < 0)
      return false;
    shape.push_back(d);
  }
  return !shape.empty() || text.empty();
}

std::optional<std::string> ArgCursor::take(llvm::StringRef flag) {
  llvm::StringRef a = current();
  if (a.consume_front(flag)) {
    if (a.consume_front("=")) {
      next();
      return a.str();
    }
    if (a.empty()) {
      if (i_ + 1 >= args_.size()) {
        error = flag.str() + " needs a value";
        next();
        return std::nullopt;
      }
      next();
      std::string v = current();
      next();
      return v;
    }
  }
  return std::nullopt;
}

bool parseImportOption(ArgCursor &c, ImportOptions &opts) {
  if (auto v = c.take("--micro-batch")) {
    int64_t n;
    if (llvm::StringRef(*v).getAsInteger(10, n) || n <= 0)
      c.error = "--micro-batch needs a positive integer";
    else
      opts.microBatch = n;
    return true;
  }
  if (auto v = c.take("--input-shape")) {
    auto [name, dims] = llvm::StringRef(*v).rsplit('=');
    std::vector<int64_t> shape;
    if (name.empty() || dims.empty() || !parseShape(dims, shape))
      c.error = "--input-shape '" + *v +
                "' is not NAME=AxBx... with non-negative dims";
    else
      opts.inputShapes[name.str()] = shape;
    return true;
  }
  if (auto v = c.take("--max-constant-bytes")) {
    int64_t n;
    if (llvm::StringRef(*v).getAsInteger(10, n) || n <= 0)
      c.error = "--max-constant-bytes needs a positive integer (bytes)";
    else
      opts.maxConstantBytes = n;
    return true;
  }
  if (!c.error.empty())
    return true;
  if (c.is("--no-loss")) {
    opts.requireLoss = false;
    c.next();
    return true;
  }
  return false;
}

/// "80GiB", "80GB", "512MiB", "1.5TB" or plain bytes; none when malformed.
std::optional<uint64_t> parseSize(llvm::StringRef text) {
  static const std::pair<const char *, double> units[] = {
      {"TiB", 1099511627776.0},
      {"GiB", 1073741824.0},
      {"MiB", 1048576.0},
      {"KiB", 1024.0},
      {"TB", 1e12},
      {"GB", 1e9},
      {"MB", 1e6},
      {"KB", 1e3},
      {"B", 1}};
  double scale = 1;
  for (auto [suffix, bytes] : units)
    if (text.consume_back(suffix)) {
      scale = bytes;
      break;
    }
  double value;
  if (text.trim().getAsDouble(value) || !(value > 0))
    return std::nullopt;
  return static_cast<uint64_t>(value * scale);
}

std::string formatNumber(double d) {
  if (std::fabs(d) == std::floor(std::fabs(d)) && std::fabs(d) < 9.0e18)
    return std::to_string(static_cast<long long>(d));
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", d);
  if (std::strtod(buf, nullptr) != d)
    std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

} // namespace dsc
