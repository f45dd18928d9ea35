//===- dsc.cpp - the dsc command line -------------------------------------===//
//
//   dsc import model.onnx [--micro-batch N] [--summary]   print the dsc IR
//   dsc ops                                                supported ONNX ops
//
//===----------------------------------------------------------------------===//

#include "compiler/import/OnnxImporter.h"
#include "dialects/dsc/IR/DscOps.h"
#include "tools/dsc/Summary.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>
#include <vector>

using namespace mlir;

namespace {

const char *kUsage = R"(dsc - compile ONNX training graphs into sharded training programs

usage: dsc <command> [options] MODEL.onnx

commands:
  import     read an ONNX training graph (model + scalar loss) and print it
             in the dsc dialect, with static shapes and shape arithmetic
             folded away, or a summary of its parameters and ops
  ops        list the ONNX operators (default domain) dsc can import
  help       this text; `dsc help import` for the options of a command
  version    print the version

Run `dsc import --help` for the import options. docs/ops.md lists the
supported operators and opsets, docs/architecture.md the pipeline.
)";

const char *kImportUsage = R"(usage: dsc import [options] MODEL.onnx

Reads MODEL.onnx (its external data, if any, only from MODEL's folder) and
prints the `@forward` function in the dsc dialect. Float initializers that
reach the loss become trainable parameters (dsc.param); graph inputs become
batch inputs (dsc.input); the scalar output is the loss.

options:
  --micro-batch N            set dim 0 of every input whose dim 0 is symbolic
  --input-shape NAME=AxBx..  set the whole shape of input NAME (repeatable)
  --no-loss                  import a graph that has no scalar loss output
                             (e.g. an inference graph); every output is kept
  --summary                  print parameters, inputs, outputs and op counts
  --summary-json             the same as one JSON object
  --debug-info               print locations (the ONNX node names) in the IR
  -o FILE                    write to FILE (atomically) instead of stdout
  -h, --help                 this text

exit status: 0 on success, 1 on a problem with the model or the options
(the message names the file, the ONNX node, its op and what to do).
)";

// Prints "error: <file>: <message>"; the importer puts the node in the
// message, so the location only contributes the file.
void installDiagnosticPrinter(MLIRContext &ctx) {
  ctx.getDiagEngine().registerHandler([](Diagnostic &diag) {
    auto &os = llvm::errs();
    const char *severity = diag.getSeverity() == DiagnosticSeverity::Error
                               ? "error"
                           : diag.getSeverity() == DiagnosticSeverity::Warning
                               ? "warning"
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
    for (auto &note : diag.getNotes())
      os << "note: " << note.str() << "\n";
    return success();
  });
}

int usageError(const std::string &msg, const char *usage) {
  llvm::errs() << "error: " << msg << "\n\n" << usage;
  return 1;
}

/// Writes via a temporary file and a rename, so a reader never sees half.
bool writeAtomically(const std::string &path,
                     const std::function<void(llvm::raw_ostream &)> &write) {
  std::string tmp = path + ".tmp." + std::to_string(llvm::sys::Process::getProcessId());
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec) {
      llvm::errs() << "error: cannot write '" << tmp << "': " << ec.message()
                   << "\n";
      return false;
    }
    write(os);
    os.close();
    if (os.has_error()) {
      llvm::errs() << "error: writing '" << tmp << "' failed\n";
      llvm::sys::fs::remove(tmp);
      return false;
    }
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

int runImport(std::vector<std::string> args) {
  dsc::ImportOptions opts;
  std::string model, output;
  bool summary = false, summaryJson = false, debugInfo = false;
  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef a = args[i];
    auto value = [&](const char *flag) -> std::optional<std::string> {
      if (a.consume_front(std::string(flag) + "="))
        return a.str();
      if (a == flag && i + 1 < args.size())
        return args[++i];
      return std::nullopt;
    };
    if (a == "-h" || a == "--help") {
      llvm::outs() << kImportUsage;
      return 0;
    }
    if (a.starts_with("--micro-batch")) {
      auto v = value("--micro-batch");
      int64_t n;
      if (!v || llvm::StringRef(*v).getAsInteger(10, n) || n <= 0)
        return usageError("--micro-batch needs a positive integer",
                          kImportUsage);
      opts.microBatch = n;
    } else if (a.starts_with("--input-shape")) {
      auto v = value("--input-shape");
      if (!v)
        return usageError("--input-shape needs NAME=AxB...", kImportUsage);
      auto [name, dims] = llvm::StringRef(*v).rsplit('=');
      std::vector<int64_t> shape;
      if (name.empty() || dims.empty() || !parseShape(dims, shape))
        return usageError("--input-shape '" + *v +
                              "' is not NAME=AxBx... with non-negative dims",
                          kImportUsage);
      opts.inputShapes[name.str()] = shape;
    } else if (a == "--no-loss") {
      opts.requireLoss = false;
    } else if (a == "--summary") {
      summary = true;
    } else if (a == "--summary-json") {
      summaryJson = true;
    } else if (a == "--debug-info") {
      debugInfo = true;
    } else if (a == "-o" || a.starts_with("-o=")) {
      auto v = value("-o");
      if (!v)
        return usageError("-o needs a file name", kImportUsage);
      output = *v;
    } else if (a.starts_with("-") && a != "-") {
      return usageError("unknown option '" + a.str() + "'", kImportUsage);
    } else if (model.empty()) {
      model = a.str();
    } else {
      return usageError("more than one model given ('" + model + "', '" +
                            a.str() + "')",
                        kImportUsage);
    }
  }
  if (model.empty())
    return usageError("no model given", kImportUsage);

  MLIRContext ctx;
  installDiagnosticPrinter(ctx);
  auto module = dsc::importOnnxFile(ctx, model, opts);
  if (!module)
    return 1;
  auto write = [&](llvm::raw_ostream &os) {
    if (summaryJson)
      dsc::printSummaryJson(*module, os);
    else if (summary)
      dsc::printSummary(*module, os);
    else {
      OpPrintingFlags flags;
      if (debugInfo)
        flags.enableDebugInfo();
      module->print(os, flags);
      os << "\n";
    }
  };
  if (output.empty()) {
    write(llvm::outs());
    return 0;
  }
  return writeAtomically(output, write) ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" ||
      args[0] == "help") {
    if (args.size() >= 2 && args[1] == "import") {
      llvm::outs() << kImportUsage;
      return 0;
    }
    llvm::outs() << kUsage;
    return args.empty() ? 1 : 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "import")
    return runImport(args);
  if (command == "ops") {
    for (const auto &op : dsc::supportedOnnxOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (command == "version" || command == "--version") {
    llvm::outs() << "dsc 0.1 (MLIR " << LLVM_VERSION_STRING << ")\n";
    return 0;
  }
  return usageError("unknown command '" + command + "'", kUsage);
}
