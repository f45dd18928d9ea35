//===- DscFuzz.cpp - libFuzzer target: ONNX bytes to C++ source -----------===//
//
// One input is one ONNX file. It goes the way `dsc compile --emit=cpp` takes
// it: import, dsc-global-mean-loss, dsc-autodiff, dsc-optimizer, then (chosen
// by the input's length, so a reproducer replays the same way) ZeRO
// partitioning and mixed precision, and C++ emission into a string. No
// compiler is run. A diagnostic is a fine outcome; a crash, a sanitizer
// report, an assertion, a timeout or memory past -rss_limit_mb is a finding.
//
//   dsc-fuzz -seed=1 -max_total_time=60 corpus/ seeds/   # fuzz
//   dsc-fuzz test/fuzz/regressions/*.onnx                # replay, once each
//
// DSC_FUZZ_VERBOSE=1 prints the diagnostics and the stage an input reached.
//
//===----------------------------------------------------------------------===//

#include "tools/dsc-fuzz/OnnxMutator.h"

#include "compiler/codegen/EmitCpp.h"
#include "compiler/import/OnnxImporter.h"
#include "passes/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

using namespace mlir;

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

/// The importer reads a file (external data is found beside it), so each
/// input is written to model.onnx in a directory of this process's own.
std::string workDir, modelPath;
bool verbose = false;

void removeWorkDir() {
  if (workDir.empty())
    return;
  llvm::sys::fs::remove(modelPath);
  llvm::sys::fs::remove(workDir + "/weights.bin");
  llvm::sys::fs::remove(workDir);
}

/// weights.bin for external-data initializers: the fixture's (where the
/// build put it, or $DSC_FUZZ_WEIGHTS for a copy of the fuzzer run on another
/// machine), so the seed gpt2_nodrop_extdata/model.onnx imports as it is;
/// else 1 MiB of zeros.
void writeWeights() {
  std::string dst = workDir + "/weights.bin";
  const char *weights = std::getenv("DSC_FUZZ_WEIGHTS");
  if (llvm::sys::fs::copy_file(weights ? weights : DSC_FUZZ_WEIGHTS, dst)) {
    std::ofstream out(dst, std::ios::binary);
    std::string zeros(1 << 20, '\0');
    out.write(zeros.data(), (std::streamsize)zeros.size());
  }
}

int fail(const char *what) {
  if (verbose)
    llvm::errs() << "dsc-fuzz: stopped at " << what << "\n";
  return 0;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) {
  dsc::registerDscPasses();
  verbose = std::getenv("DSC_FUZZ_VERBOSE") != nullptr;
  llvm::SmallString<128> dir;
  if (llvm::sys::fs::createUniqueDirectory("dsc-fuzz", dir)) {
    std::fprintf(stderr, "dsc-fuzz: cannot create a temporary directory\n");
    std::exit(1);
  }
  workDir = std::string(dir);
  modelPath = workDir + "/model.onnx";
  writeWeights();
  std::atexit(removeWorkDir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  {
    std::ofstream out(modelPath, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data), (std::streamsize)size);
    if (!out)
      return fail("writing the model");
  }

  // A fresh context per input: one shared context would keep every type and
  // attribute ever made (memory grows without bound over a long run), and
  // state from one input could hide or cause a finding in the next.
  MLIRContext ctx(MLIRContext::Threading::DISABLED);
  ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &d) {
    if (verbose)
      llvm::errs() << d.getLocation() << ": " << d.str() << "\n";
    return success();
  });

  dsc::ImportOptions opts;
  // --micro-batch only where the model leaves the batch dim symbolic, as a
  // user would pass it: a fixed batch with --micro-batch is only an error.
  onnx::ModelProto parsed;
  if (parsed.ParseFromArray(data, (int)size))
    for (const auto &in : parsed.graph().input()) {
      const auto &shape = in.type().tensor_type().shape();
      if (shape.dim_size() && !shape.dim(0).has_dim_value())
        opts.microBatch = 2;
    }
  // Small, so folding cannot reach -rss_limit_mb; the limit's own checks
  // are then on the path of every large constant.
  opts.maxConstantBytes = 1 << 20;
  opts.foldLimit = 1 << 16;
  OwningOpRef<ModuleOp> module = dsc::importOnnxFile(ctx, modelPath, opts);
  if (!module)
    return fail("import");

  // The optional passes, from the input's length: deterministic per input.
  unsigned variant = size % 16;
  PassManager pm(&ctx);
  pm.addPass(dsc::createDscGlobalMeanLoss());
  pm.addPass(dsc::createDscAutodiff());
  dsc::DscOptimizerOptions optimizer;
  optimizer.optimizer = variant & 1 ? "sgd" : "adamw";
  optimizer.clip = variant & 1 ? 1.0 : 0.0;
  pm.addPass(dsc::createDscOptimizer(optimizer));
  if (variant & 2) {
    dsc::DscZeroPartitionOptions zero;
    zero.worldSize = 2;
    zero.stage = variant & 4 ? 3 : 2;
    pm.addPass(dsc::createDscZeroPartition(zero));
    pm.addPass(dsc::createDscSchedule());
  }
  if (variant & 4) {
    dsc::DscMixedPrecisionOptions mp;
    mp.precision = variant & 1 ? "fp16" : "bf16";
    pm.addPass(dsc::createDscMixedPrecision(mp));
  }
  if (variant & 8) {
    // Optimizer offload (and at stage 3 the parameters), on the grouped
    // AdamW as dsc compile runs it.
    dsc::DscMultiTensorAdamWOptions multi;
    multi.minGroup = 1;
    pm.addPass(dsc::createDscMultiTensorAdamW(multi));
    dsc::DscOffloadOptions offload;
    offload.optimizer = "cpu";
    offload.params = (variant & 6) == 6 ? "cpu" : "none";
    offload.chunkElements = 1 << 12;
    pm.addPass(dsc::createDscOffload(offload));
  }
  pm.addPass(createCSEPass());
  if (failed(pm.run(*module)))
    return fail("the pass pipeline");

  std::string source;
  llvm::raw_string_ostream os(source);
  if (failed(dsc::emitCpp(*module, os)))
    return fail("C++ emission");
  return fail("the end (C++ emitted)");
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned int seed) {
  std::mt19937_64 rng(seed);
  onnx::ModelProto model;
  // One in eight stays byte-level even when the model parses, so protobuf's
  // own decoding (and what it lets through) keeps being exercised.
  if (rng() % 8 == 0 || !model.ParseFromArray(data, (int)size))
    return LLVMFuzzerMutate(data, size, maxSize);
  unsigned edits = 1 + rng() % 3;
  for (unsigned tries = 0; edits && tries < 16; ++tries)
    if (dsc::fuzz::mutateModel(model, rng))
      --edits;
  std::string out;
  if (!model.SerializeToString(&out) || out.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
