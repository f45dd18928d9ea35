//===- version.h - what a compiled program says with --version -*- C++ -*-===//
//
// `./train --version` prints where the program came from (the dsc that
// compiled it, the target, the model and its hash, the sharding and batch
// it was compiled for, the compile command), and with the environment the
// machine it runs on (core/env.h): what a bug report should carry.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_VERSION_H
#define DSC_RUNTIME_PROGRAM_VERSION_H

#include "core/env.h"
#include "dsc/program.h"

#include <string>

namespace dsc {

/// The compile provenance of `spec` as one "compiled program" section;
/// fields the compile did not record read "unknown".
EnvSection programSection(const ProgramSpec &spec);

/// programSection as text, then with `withEnv` the probed environment
/// (probeEnvironment), aligned as one report.
std::string formatProgramVersion(const ProgramSpec &spec, bool withEnv);

/// As formatProgramVersion(spec, true) for a given environment (tests).
std::string formatProgramVersion(const ProgramSpec &spec, const EnvInfo &env);

} // namespace dsc

#endif // DSC_RUNTIME_PROGRAM_VERSION_H
