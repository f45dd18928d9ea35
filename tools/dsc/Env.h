//===- Env.h - `dsc env` and what dsc says about its build ------*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_ENV_H
#define DSC_TOOLS_DSC_ENV_H

#include <string>
#include <vector>

namespace dsc {

/// dsc's version, "0.1".
const char *dscVersion();
/// The git commit dsc was configured at (`git rev-parse --short HEAD`), or
/// "unknown".
const char *dscBuildCommit();

/// `dsc env [--json]`: dsc's build, what it compiles for, the toolkit, and
/// the machine (runtime/core/env.h). Exit status 0 even without a GPU.
int runEnv(std::vector<std::string> args);

} // namespace dsc

#endif // DSC_TOOLS_DSC_ENV_H
