//===- Compile.h - `dsc compile` --------------------------------*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_COMPILE_H
#define DSC_TOOLS_DSC_COMPILE_H

#include <string>
#include <vector>

namespace dsc {
int runCompile(std::vector<std::string> args);
} // namespace dsc

#endif // DSC_TOOLS_DSC_COMPILE_H
