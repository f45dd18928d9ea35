//===- Target.cpp - the dsc.target module attribute -----------------------===//

#include "dialects/dsc/IR/Target.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace dsc {

FailureOr<TargetDescription> TargetDescription::forName(StringRef name,
                                                        StringRef arch,
                                                        std::string &error) {
  TargetDescription t;
  t.name = name.str();
  t.arch = arch.str();
  if (name == "cpu")
    return t;
  if (name == "cuda") {
    if (t.arch.empty())
      t.arch = "sm_90a";
    t.generatedKernels = t.deviceMemory = t.asyncCollectives =
        t.stridedAttention = t.gemmEpilogues = true;
    t.bufferAlignment = 256;
    return t;
  }
  error = "unknown target \"" + name.str() + "\" (known: cpu, cuda)";
  return failure();
}

FailureOr<TargetDescription> TargetDescription::of(ModuleOp module) {
  Attribute raw = module->getAttr("dsc.target");
  if (!raw)
    return TargetDescription();
  auto dict = dyn_cast<DictionaryAttr>(raw);
  auto text = [&](StringRef key) -> std::string {
    auto s = dict ? dict.getAs<StringAttr>(key) : StringAttr();
    return s ? s.getValue().str() : std::string();
  };
  if (!dict || text("name").empty())
    return module.emitError(
        "dsc.target must be a dictionary with a string `name`, e.g. "
        "{name = \"cuda\", arch = \"sm_90a\"}");
  std::string error;
  FailureOr<TargetDescription> t = forName(text("name"), text("arch"), error);
  if (failed(t))
    return module.emitError("dsc.target: ") << error;
  for (NamedAttribute a : dict) {
    StringRef key = a.getName().strref();
    if (key == "name" || key == "arch") {
      if (!isa<StringAttr>(a.getValue()))
        return module.emitError("dsc.target: `") << key << "` must be a string";
      continue;
    }
    if (key == "buffer_alignment") {
      auto v = dyn_cast<IntegerAttr>(a.getValue());
      if (!v || v.getInt() < 1 || v.getInt() > 4096 ||
          (v.getInt() & (v.getInt() - 1)) != 0)
        return module.emitError("dsc.target: `buffer_alignment` must be a "
                                "power of two from 1 to 4096");
      t->bufferAlignment = uint64_t(v.getInt());
      continue;
    }
    bool *flag = key == "generated_kernels"   ? &t->generatedKernels
                 : key == "device_memory"     ? &t->deviceMemory
                 : key == "async_collectives" ? &t->asyncCollectives
                 : key == "strided_attention" ? &t->stridedAttention
                 : key == "gemm_epilogues"    ? &t->gemmEpilogues
                                              : nullptr;
    auto value = dyn_cast<BoolAttr>(a.getValue());
    if (!flag || !value)
      return module.emitError("dsc.target: unknown or non-boolean key `")
             << key
             << "` (known: name, arch, generated_kernels, device_memory, "
                "async_collectives, strided_attention, gemm_epilogues, "
                "buffer_alignment)";
    *flag = value.getValue();
  }
  return t;
}

DictionaryAttr TargetDescription::toAttr(MLIRContext *ctx) const {
  Builder b(ctx);
  SmallVector<NamedAttribute> attrs = {b.getNamedAttr("name",
                                                      b.getStringAttr(name))};
  if (!arch.empty())
    attrs.push_back(b.getNamedAttr("arch", b.getStringAttr(arch)));
  attrs.push_back(b.getNamedAttr("generated_kernels",
                                 b.getBoolAttr(generatedKernels)));
  attrs.push_back(
      b.getNamedAttr("device_memory", b.getBoolAttr(deviceMemory)));
  attrs.push_back(
      b.getNamedAttr("async_collectives", b.getBoolAttr(asyncCollectives)));
  attrs.push_back(
      b.getNamedAttr("strided_attention", b.getBoolAttr(stridedAttention)));
  attrs.push_back(
      b.getNamedAttr("gemm_epilogues", b.getBoolAttr(gemmEpilogues)));
  attrs.push_back(b.getNamedAttr(
      "buffer_alignment", b.getI64IntegerAttr(int64_t(bufferAlignment))));
  return b.getDictionaryAttr(attrs);
}

void setTarget(ModuleOp module, const TargetDescription &target) {
  module->setAttr("dsc.target", target.toAttr(module.getContext()));
}

} // namespace dsc
