//===- version.cpp - what a compiled program says with --version ----------===//

#include "program/version.h"

#include <cstdio>

namespace dsc {
namespace {

std::string orUnknown(const char *s) {
  return s && *s ? std::string(s) : std::string("unknown");
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

} // namespace

EnvSection programSection(const ProgramSpec &spec) {
  EnvSection s{"compiled program", {}};
  auto add = [&](const char *name, std::string value) {
    s.entries.emplace_back(name, std::move(value));
  };
  add("dsc", orUnknown(spec.dscVersion));
  add("target", orUnknown(spec.target));
  add("model", orUnknown(spec.modelPath));
  add("model sha256", orUnknown(spec.modelSha256));

  std::string precision = orUnknown(spec.precision);
  const LossScalerSpec &ls = spec.lossScaler;
  if (ls.enabled && ls.dynamic)
    precision += ", dynamic loss scale (initial " + number(ls.initialScale) +
                 ", window " + std::to_string(ls.window) + ", hysteresis " +
                 std::to_string(ls.hysteresis) + ", min " +
                 number(ls.minScale) + ")";
  else if (ls.enabled)
    precision += ", static loss scale " + number(ls.initialScale);
  add("precision", precision);
  add("optimizer", orUnknown(spec.optimizer));

  int64_t world = spec.worldSize > 0 ? spec.worldSize : 1;
  std::string ranks = std::to_string(world);
  if (spec.groupSize > 0 && spec.groupSize != world)
    ranks +=
        " (state sharded in groups of " + std::to_string(spec.groupSize) + ")";
  add("world size", ranks);
  add("ZeRO stage", std::to_string(spec.stage));
  add("micro-batch", std::to_string(spec.microBatch) + " x " +
                         std::to_string(spec.accumSteps) +
                         " accumulation steps per rank");
  add("compile command", orUnknown(spec.compileCommand));
  if (spec.runDefaults && *spec.runDefaults)
    add("run defaults", spec.runDefaults);
  if (spec.configJson && *spec.configJson) {
    // One line: a newline is whitespace between JSON tokens (strings hold
    // theirs escaped), so the config stays valid JSON.
    std::string config = spec.configJson;
    for (char &c : config)
      if (c == '\n' || c == '\r')
        c = ' ';
    add("ds_config", config);
  } else {
    add("ds_config", "none");
  }
  return s;
}

std::string formatProgramVersion(const ProgramSpec &spec, const EnvInfo &env) {
  std::vector<EnvSection> sections = {programSection(spec)};
  for (EnvSection &s : envSections(env))
    sections.push_back(std::move(s));
  return formatSections(sections);
}

std::string formatProgramVersion(const ProgramSpec &spec, bool withEnv) {
  if (withEnv)
    return formatProgramVersion(spec, probeEnvironment());
  return formatSections({programSection(spec)});
}

} // namespace dsc
