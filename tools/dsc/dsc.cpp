//===- dsc.cpp - the dsc command line -------------------------------------===//
//
//   dsc import model.onnx [--micro-batch N] [--summary]   print the dsc IR
//   dsc ops                                                supported ONNX ops
//   dsc env [--json]                                       GPUs, CUDA libraries
//   dsc checkpoint list|verify|consolidate DIR             saved checkpoints
//
//===----------------------------------------------------------------------===//

#include "compiler/import/OnnxImporter.h"
#include "dialects/dsc/IR/DscOps.h"
#include "tools/dsc/Checkpoint.h"
#include "tools/dsc/Common.h"
#include "tools/dsc/Compile.h"
#include "tools/dsc/Env.h"
#include "tools/dsc/Estimate.h"
#include "tools/dsc/MemoryReport.h"
#include "tools/dsc/Summary.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace mlir;

using dsc::usageError;
using dsc::writeAtomically;

namespace {

const char *kUsage =
    R"(dsc - compile ONNX training graphs into sharded training programs

usage: dsc <command> [options] MODEL.onnx

commands:
  import     read an ONNX training graph (model + scalar loss) and print it
             in the dsc dialect, with static shapes and shape arithmetic
             folded away, or a summary of its parameters and ops
  compile    compile the whole training step (gradients, optimizer,
             schedule, ZeRO sharding) into a native program
  estimate   memory per GPU/rank of every ZeRO stage, before any run
  checkpoint list, verify or consolidate the checkpoints a training run
             saved (to safetensors, or back into the ONNX model)
  ops        list the ONNX operators (default domain) dsc can import
  env        dsc's build, the CUDA toolkit, GPUs, driver and libraries, the
             host: what a bug report should include (--json for JSON)
  help       this text; `dsc help import` for the options of a command
  version    print the version and the commit dsc was built from

Run `dsc import --help` and `dsc compile --help` for their options. docs/ops.md lists the
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
  --max-constant-bytes N     largest constant that folding shape computations
                             may materialize (default 268435456, 256 MiB)
  --summary                  print parameters, inputs, outputs and op counts
  --summary-json             the same as one JSON object
  --debug-info               print locations (the ONNX node names) in the IR
  -o FILE                    write to FILE (atomically) instead of stdout
  -h, --help                 this text

exit status: 0 on success, 1 on a problem with the model or the options
(the message names the file, the ONNX node, its op and what to do).
)";

int runImport(std::vector<std::string> args) {
  dsc::ImportOptions opts;
  std::string model, output;
  bool summary = false, summaryJson = false, debugInfo = false;
  dsc::ArgCursor c(std::move(args));
  while (!c.done()) {
    if (c.is("-h") || c.is("--help")) {
      llvm::outs() << kImportUsage;
      return 0;
    }
    if (dsc::parseImportOption(c, opts)) {
      if (!c.error.empty())
        return usageError(c.error, kImportUsage);
      continue;
    }
    if (auto v = c.take("-o")) {
      output = *v;
      continue;
    }
    if (!c.error.empty())
      return usageError(c.error, kImportUsage);
    llvm::StringRef a = c.current();
    if (a == "--summary")
      summary = true;
    else if (a == "--summary-json")
      summaryJson = true;
    else if (a == "--debug-info")
      debugInfo = true;
    else if (a.starts_with("-") && a != "-")
      return usageError("unknown option '" + a.str() + "'", kImportUsage);
    else if (model.empty())
      model = a.str();
    else
      return usageError("more than one model given ('" + model + "', '" +
                            a.str() + "')",
                        kImportUsage);
    c.next();
  }
  if (model.empty())
    return usageError("no model given", kImportUsage);

  MLIRContext ctx;
  dsc::installDiagnosticPrinter(ctx);
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
    if (args.size() >= 2 && args[1] == "compile")
      return dsc::runCompile({"--help"});
    if (args.size() >= 2 && args[1] == "estimate")
      return dsc::runEstimate({"--help"});
    if (args.size() >= 2 && args[1] == "env")
      return dsc::runEnv({"--help"});
    if (args.size() >= 2 && args[1] == "checkpoint") {
      llvm::outs() << dsc::kCheckpointUsage;
      return 0;
    }
    llvm::outs() << kUsage;
    return args.empty() ? 1 : 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "import")
    return runImport(args);
  if (command == "compile")
    return dsc::runCompile(args);
  if (command == "estimate")
    return dsc::runEstimate(args);
  if (command == "env")
    return dsc::runEnv(args);
  if (command == "checkpoint")
    return dsc::runCheckpoint(args);
  if (command == "ops") {
    for (const auto &op : dsc::supportedOnnxOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (command == "version" || command == "--version") {
    llvm::outs() << "dsc " << dsc::dscVersion() << " (MLIR "
                 << LLVM_VERSION_STRING << ", commit " << dsc::dscBuildCommit()
                 << ")\n";
    return 0;
  }
  return usageError("unknown command '" + command + "'", kUsage);
}
