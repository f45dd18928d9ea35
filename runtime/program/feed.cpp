//===- feed.cpp - The batches of the steps (--batch, --data) --------------===//

#include "program/feed.h"

namespace dsc::program {

Status DataFeed::open(const std::vector<InputSlot> &slots) {
  const Options &o = job_.o;
  const ProgramSpec &spec = job_.spec;
  BatchShape batch{spec.microBatch, spec.accumSteps, job_.W};
  if (!o.batch.empty()) {
    std::vector<std::string> unused;
    if (Status s = loadBatchFile(o.batch, slots, batch, &unused); !s.ok())
      return s;
    what_ = "fixed batch " + o.batch;
    if (!unused.empty()) {
      std::string list;
      for (const auto &u : unused)
        list += (list.empty() ? "'" : ", '") + u + "'";
      job_.warn("--batch " + o.batch +
                ": tensors the step does not take are ignored: " + list);
    }
  } else if (!o.data.empty()) {
    if (Status s = tokens_.open(o.data, o.dataType, slots, batch); !s.ok())
      return s;
    what_ =
        format("%s (%s, %s tokens)", o.data.c_str(), tokenTypeName(o.dataType),
               humanCount(double(tokens_.numTokens())).c_str());
  }
  return Status();
}

Status DataFeed::next(const std::vector<InputSlot> &slots) {
  if (job_.o.data.empty())
    return Status();
  return tokens_.sample(rng_, slots);
}

} // namespace dsc::program
