//===- run.h - The program shell's internals, for tests ---------*- C++ -*-===//
//
// dsc::runProgram (dsc/program.h) is `run` on stdout and stderr. Tests call
// `run` with files of their own, and check the --init random rule directly.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_RUN_H
#define DSC_RUNTIME_PROGRAM_RUN_H

#include "dsc/program.h"

#include <cstdio>
#include <string>

namespace dsc::program {

/// runProgram with its streams: the banner, progress lines and --help go to
/// `out`; `error: ...` and `warning: ...` lines to `err`. Returns the exit
/// code: 0, or 1 after an error.
int run(const ProgramSpec &spec, int argc, char **argv, std::FILE *out,
        std::FILE *err);

/// What --init random puts in an argument (see README.md).
enum class RandomInit {
  Normal, // normal(0, 0.02)
  Zeros,
  Ones,
  FromModel, // read from the ONNX model (constants such as masks)
};
RandomInit randomInitRule(ArgRole role, const std::string &name,
                          const TensorSpec &type);

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_RUN_H
