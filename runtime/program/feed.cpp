//===- feed.cpp - The batches of the steps (--batch, --data) --------------===//

#include "program/feed.h"
#include "cpu/kernel_util.h"

#include <cinttypes>
#include <cmath>

namespace dsc::program {

namespace {

/// A float input holding an inf or nan makes every step's loss non-finite:
/// named (tensor, element, example) before the first step runs.
Status checkFinite(const std::string &file, const std::vector<InputSlot> &slots,
                   int64_t examples) {
  for (const InputSlot &slot : slots) {
    const Tensor &t = slot.tensor;
    if (!isFloat(t.dtype))
      continue;
    int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) {
      double v = cpu::detail::loadAsDouble(t.data, t.dtype, i);
      if (std::isfinite(v))
        continue;
      int64_t perExample =
          examples > 0 ? std::max<int64_t>(n / examples, 1) : n;
      return fail(format("--batch %s: input '%s' holds %s at element %" PRId64
                         " (example %" PRId64 " of %" PRId64
                         "); every step's loss would be non-finite. Fix or "
                         "filter the data",
                         file.c_str(), slot.name.c_str(),
                         std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"), i,
                         i / perExample, examples));
    }
  }
  return Status();
}

} // namespace

Status DataFeed::open(const std::vector<InputSlot> &slots) {
  const Options &o = job_.o;
  const ProgramSpec &spec = job_.spec;
  BatchShape batch{spec.microBatch, spec.accumSteps, job_.W};
  if (!o.batch.empty()) {
    std::vector<std::string> unused;
    if (Status s = loadBatchFile(o.batch, slots, batch, &unused); !s.ok())
      return s;
    if (Status s = checkFinite(o.batch, slots, batch.global()); !s.ok())
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
