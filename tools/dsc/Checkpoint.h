//===- Checkpoint.h - dsc checkpoint: list, verify, consolidate -*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_CHECKPOINT_H
#define DSC_TOOLS_DSC_CHECKPOINT_H

#include <string>
#include <vector>

namespace dsc {

extern const char *kCheckpointUsage;

/// `dsc checkpoint <list|verify|consolidate> ...`; the exit status.
int runCheckpoint(std::vector<std::string> args);

} // namespace dsc

#endif // DSC_TOOLS_DSC_CHECKPOINT_H
