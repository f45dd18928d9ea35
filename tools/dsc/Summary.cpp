//===- Summary.cpp - what an imported model holds -------------------------===//
#include "tools/dsc/Summary.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>

using namespace mlir;

namespace dsc {
namespace {

struct Entry {
  std::string role, name;
  RankedTensorType type;
};

std::string dtypeName(Type t) {
  if (auto i = dyn_cast<IntegerType>(t))
    return (i.isUnsigned() ? "u" : "i") + std::to_string(i.getWidth());
  if (t.isF32())
    return "f32";
  if (t.isF64())
    return "f64";
  if (t.isF16())
    return "f16";
  if (t.isBF16())
    return "bf16";
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

std::string shapeString(RankedTensorType t) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(t.getShape()))
    s += (i ? "x" : "") + std::to_string(d);
  return s + "]";
}

struct Collected {
  std::vector<Entry> args, results;
  std::map<std::string, int64_t> ops;
};

Collected collect(ModuleOp module) {
  Collected c;
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func)
    return c;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    for (const char *role : {"dsc.param", "dsc.buffer", "dsc.input"})
      if (auto name = func.getArgAttrOfType<StringAttr>(i, role))
        c.args.push_back({role + 4, name.str(), type});
  }
  auto resultTypes = func.getFunctionType().getResults();
  for (unsigned i = 0; i < resultTypes.size(); ++i) {
    auto type = cast<RankedTensorType>(resultTypes[i]);
    for (const char *role : {"dsc.output", "dsc.buffer_update"})
      if (auto name = func.getResultAttrOfType<StringAttr>(i, role))
        c.results.push_back({role + 4, name.str(), type});
  }
  func.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "dsc")
      ++c.ops[op->getName().getStringRef().str()];
  });
  return c;
}

} // namespace

int64_t tensorBytes(Type t) {
  auto r = cast<RankedTensorType>(t);
  unsigned bits = r.getElementType().getIntOrFloatBitWidth();
  return r.getNumElements() * std::max(1u, bits / 8);
}

void printSummary(ModuleOp module, llvm::raw_ostream &os) {
  Collected c = collect(module);
  auto source = module->getAttrOfType<StringAttr>("dsc.source");
  os << "model " << (source ? source.str() : "?");
  if (auto opset = module->getAttrOfType<IntegerAttr>("dsc.opset"))
    os << " (opset " << opset.getInt() << ")";
  os << "\n";
  for (const char *role : {"param", "buffer", "input"}) {
    int64_t count = 0, elems = 0, bytes = 0;
    for (const Entry &e : c.args)
      if (e.role == role) {
        ++count;
        elems += e.type.getNumElements();
        bytes += tensorBytes(e.type);
      }
    os << llvm::formatv("{0,-8} {1,5} tensors {2,14} elements {3,12} bytes\n",
                        std::string(role) + "s", count, elems, bytes);
  }
  os << "\nparameters:\n";
  for (const Entry &e : c.args)
    if (e.role == "param")
      os << llvm::formatv("  {0,-48} {1,-16} {2}\n", e.name,
                          shapeString(e.type),
                          dtypeName(e.type.getElementType()));
  os << "inputs:\n";
  for (const Entry &e : c.args)
    if (e.role == "input")
      os << llvm::formatv("  {0,-48} {1,-16} {2}\n", e.name,
                          shapeString(e.type),
                          dtypeName(e.type.getElementType()));
  os << "outputs:\n";
  for (const Entry &e : c.results)
    os << llvm::formatv("  {0,-48} {1,-16} {2}{3}\n", e.name,
                        shapeString(e.type), dtypeName(e.type.getElementType()),
                        e.role == "buffer_update" ? " (buffer update)" : "");
  int64_t total = 0;
  for (auto &[_, n] : c.ops)
    total += n;
  os << "ops (" << total << "):\n";
  for (auto &[name, n] : c.ops)
    os << llvm::formatv("  {0,-28} {1,6}\n", name, n);
}

void printSummaryJson(ModuleOp module, llvm::raw_ostream &os) {
  Collected c = collect(module);
  auto tensor = [](const Entry &e) {
    llvm::json::Array shape;
    for (int64_t d : e.type.getShape())
      shape.push_back(d);
    return llvm::json::Object{{"name", e.name},
                              {"shape", std::move(shape)},
                              {"dtype", dtypeName(e.type.getElementType())}};
  };
  llvm::json::Array params, buffers, inputs, outputs, updates;
  for (const Entry &e : c.args)
    (e.role == "param"    ? params
     : e.role == "buffer" ? buffers
                          : inputs)
        .push_back(tensor(e));
  for (const Entry &e : c.results)
    (e.role == "output" ? outputs : updates).push_back(tensor(e));
  llvm::json::Object ops;
  for (auto &[name, n] : c.ops)
    ops[name] = n;
  llvm::json::Object root{
      {"params", std::move(params)},          {"buffers", std::move(buffers)},
      {"inputs", std::move(inputs)},          {"outputs", std::move(outputs)},
      {"buffer_updates", std::move(updates)}, {"ops", std::move(ops)}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

} // namespace dsc
