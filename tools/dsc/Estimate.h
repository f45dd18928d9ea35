//===- Estimate.h - `dsc estimate` ------------------------------*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_ESTIMATE_H
#define DSC_TOOLS_DSC_ESTIMATE_H

#include <string>
#include <vector>

namespace dsc {
/// `dsc estimate`: ZeRO's model-state formulas per stage and, with
/// --gpu-memory, every stage x recompute x offload choice compiled and held
/// against the budget.
int runEstimate(std::vector<std::string> args);
} // namespace dsc

#endif // DSC_TOOLS_DSC_ESTIMATE_H
