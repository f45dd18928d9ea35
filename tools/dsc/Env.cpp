//===- Env.cpp - `dsc env`: what a bug report should say about the setup --===//
//
// What DeepSpeed's ds_report is to DeepSpeed: dsc's version and build, the
// code it compiles for, the CUDA toolkit it would build a program with, and
// the machine as a compiled program sees it (the runtime's probe, so `dsc
// env` and a program's --version agree).
//
//===----------------------------------------------------------------------===//

#include "tools/dsc/Env.h"
#include "tools/dsc/Common.h"

#include "core/env.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <optional>

#ifndef DSC_GIT_COMMIT
#define DSC_GIT_COMMIT "unknown"
#endif
#ifndef DSC_BUILD_TYPE
#define DSC_BUILD_TYPE "unknown"
#endif
#ifndef DSC_CXX_COMPILER
#define DSC_CXX_COMPILER "unknown"
#endif

namespace dsc {

const char *dscVersion() { return "0.1"; }

const char *dscBuildCommit() { return DSC_GIT_COMMIT; }

namespace {

const char *kEnvUsage = R"(usage: dsc env [--json]

Prints what a bug report should carry: dsc's version and build, what it
compiles for (the CUDA architectures, the cuDNN frontend), the CUDA toolkit
(nvcc), and the machine as a compiled program sees it: the CUDA driver and
GPUs, the CUDA runtime, cuDNN, cuBLASLt and NCCL libraries (version and
file), the host, and the CUDA_*, NCCL_* and DSC_* variables set.
A compiled program's --version reports the same environment.

options:
  --json      one JSON object instead of text
  -h, --help  this text

exit status: 0, also when no GPU or CUDA library is found (the report says
so); 1 on a bad option.
)";

/// The toolkit's nvcc: the one dsc was built with, else the first on PATH,
/// else /usr/local/cuda's.
std::optional<std::string> findNvcc() {
#ifdef DSC_NVCC
  if (llvm::sys::fs::can_execute(DSC_NVCC))
    return std::string(DSC_NVCC);
#endif
  if (auto p = llvm::sys::findProgramByName("nvcc"))
    return *p;
  if (llvm::sys::fs::can_execute("/usr/local/cuda/bin/nvcc"))
    return std::string("/usr/local/cuda/bin/nvcc");
  return std::nullopt;
}

/// `nvcc --version`'s line naming the release ("Cuda compilation tools,
/// release 13.0, V13.0.88"), else its first line; empty when it fails.
std::string nvccVersion(const std::string &nvcc) {
  llvm::SmallString<128> out;
  if (llvm::sys::fs::createTemporaryFile("dsc-env-nvcc", "txt", out))
    return "";
  std::optional<llvm::StringRef> redirects[] = {
      std::nullopt, llvm::StringRef(out), llvm::StringRef(out)};
  llvm::StringRef argv[] = {nvcc, "--version"};
  int rc = llvm::sys::ExecuteAndWait(nvcc, argv, std::nullopt, redirects,
                                     /*SecondsToWait=*/30);
  std::string line;
  if (auto buf = llvm::MemoryBuffer::getFile(out); buf && rc == 0) {
    llvm::SmallVector<llvm::StringRef> lines;
    (*buf)->getBuffer().split(lines, '\n', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef l : lines)
      if (l.contains("release")) {
        line = l.trim().str();
        break;
      }
    if (line.empty() && !lines.empty())
      line = lines.front().trim().str();
  }
  llvm::sys::fs::remove(out);
  return line;
}

struct BuildFacts {
  std::string nvccPath;    // the toolkit's nvcc, empty when none
  std::string nvccVersion; // its release line, empty when unknown
  std::string programCxx;  // what builds --target cpu programs
};

BuildFacts buildFacts() {
  BuildFacts f;
  if (auto nvcc = findNvcc()) {
    f.nvccPath = *nvcc;
    f.nvccVersion = nvccVersion(*nvcc);
  }
  std::string cxx = DSC_PROGRAM_CXX;
  if (const char *env = std::getenv("CXX"); env && *env)
    cxx = env;
  auto found = llvm::sys::findProgramByName(cxx);
  f.programCxx = found ? cxx + " (" + *found + ")" : cxx + " (not found)";
  return f;
}

std::vector<EnvSection> dscSections(const BuildFacts &f) {
  EnvSection build{"dsc", {}};
  build.entries = {{"version", dscVersion()},
                   {"commit", dscBuildCommit()},
                   {"build type", DSC_BUILD_TYPE},
                   {"built with", DSC_CXX_COMPILER},
                   {"MLIR/LLVM", LLVM_VERSION_STRING}};

  EnvSection targets{"compile targets", {}};
  targets.entries.emplace_back("cpu",
                               "yes, programs built with " + f.programCxx);
#ifdef DSC_NVCC
  targets.entries.emplace_back("cuda", std::string("yes, for ") +
                                           DSC_CUDA_ARCHITECTURES +
                                           ", built with " DSC_NVCC);
#else
  targets.entries.emplace_back(
      "cuda", "no (dsc was built without the CUDA backend: no nvcc found)");
#endif
#ifdef DSC_CUDNN_FRONTEND_VERSION
  targets.entries.emplace_back("cuDNN frontend", DSC_CUDNN_FRONTEND_VERSION
                               "  " DSC_CUDNN_FRONTEND_DIR);
#endif

  EnvSection toolkit{"CUDA toolkit", {}};
  if (f.nvccPath.empty())
    toolkit.entries.emplace_back("nvcc", "not found");
  else
    toolkit.entries.emplace_back(
        "nvcc", (f.nvccVersion.empty() ? "version unknown" : f.nvccVersion) +
                    "  " + f.nvccPath);
  return {build, targets, toolkit};
}

void printJson(const BuildFacts &f, const EnvInfo &env, llvm::raw_ostream &os) {
  auto strOrNull = [](const std::string &s) -> llvm::json::Value {
    if (s.empty())
      return nullptr;
    return s;
  };
  llvm::json::OStream j(os, 2);
  j.object([&] {
    j.attributeObject("dsc", [&] {
      j.attribute("version", dscVersion());
      j.attribute("commit", dscBuildCommit());
      j.attribute("build_type", DSC_BUILD_TYPE);
      j.attribute("compiler", DSC_CXX_COMPILER);
      j.attribute("llvm_version", LLVM_VERSION_STRING);
    });
    j.attributeObject("targets", [&] {
      j.attribute("program_cxx", f.programCxx);
#ifdef DSC_NVCC
      j.attribute("cuda", true);
      j.attribute("nvcc", DSC_NVCC);
      j.attribute("cuda_architectures", DSC_CUDA_ARCHITECTURES);
#else
      j.attribute("cuda", false);
      j.attribute("nvcc", nullptr);
      j.attribute("cuda_architectures", nullptr);
#endif
#ifdef DSC_CUDNN_FRONTEND_VERSION
      j.attribute("cudnn_frontend", DSC_CUDNN_FRONTEND_VERSION);
#else
      j.attribute("cudnn_frontend", nullptr);
#endif
    });
    j.attributeObject("toolkit", [&] {
      j.attribute("nvcc", strOrNull(f.nvccPath));
      j.attribute("nvcc_version", strOrNull(f.nvccVersion));
    });
    // Parsed back, so the runtime's part is printed (and checked) as the rest.
    std::string runtime = formatEnvJson(env);
    if (auto v = llvm::json::parse(runtime)) {
      j.attribute("runtime", std::move(*v));
    } else {
      llvm::consumeError(v.takeError());
      j.attributeBegin("runtime");
      j.rawValue(runtime);
      j.attributeEnd();
    }
  });
  os << "\n";
}

} // namespace

int runEnv(std::vector<std::string> args) {
  bool json = false;
  for (const std::string &a : args) {
    if (a == "-h" || a == "--help") {
      llvm::outs() << kEnvUsage;
      return 0;
    }
    if (a == "--json")
      json = true;
    else
      return usageError("unknown option '" + a + "'", kEnvUsage);
  }
  BuildFacts facts = buildFacts();
  EnvInfo env = probeEnvironment();
  if (json) {
    printJson(facts, env, llvm::outs());
    return 0;
  }
  std::vector<EnvSection> sections = dscSections(facts);
  for (EnvSection &s : envSections(env))
    sections.push_back(std::move(s));
  llvm::outs() << formatSections(sections);
  return 0;
}

} // namespace dsc
