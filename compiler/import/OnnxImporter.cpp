//===- OnnxImporter.cpp - ONNX ModelProto to the dsc dialect --------------===//
//
// Import runs in five steps:
//   1. parse and check the file (protobuf, IR version, opsets, domains, ops);
//   2. give every graph input a static shape (--micro-batch, --input-shape);
//   3. decide which float initializers are trainable: those with a
//      differentiable path to the loss;
//   4. convert the nodes in order, folding what is constant on the host;
//   5. return the loss (and updated buffers) and verify the module.
//
//===----------------------------------------------------------------------===//
#include "compiler/import/ImportContext.h"
#include "compiler/import/OnnxOps.h"
#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <set>

using namespace mlir;

namespace dsc {

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

class GraphImporter {
public:
  GraphImporter(MLIRContext &ctx, std::string path, const ImportOptions &opts)
      : ctx(ctx), builder(&ctx), path(std::move(path)), opts(opts) {
    llvm::SmallString<256> dir(this->path);
    llvm::sys::path::remove_filename(dir);
    modelDir = dir.empty() ? "." : std::string(dir);
  }

  OwningOpRef<ModuleOp> run();

  MLIRContext &ctx;
  OpBuilder builder;
  std::string path, modelDir;
  ImportOptions opts;
  onnx::ModelProto model;
  int64_t opset = 0;
  llvm::StringMap<ImportValue> values;
  llvm::StringMap<unsigned> uses;
  llvm::DenseMap<Value, Value> constantCache;

  Location fileLoc() { return FileLineColLoc::get(&ctx, path, 0, 0); }
  Location nodeLoc(const onnx::NodeProto &n, size_t index) {
    std::string name =
        n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
    return NameLoc::get(StringAttr::get(&ctx, name),
                        FileLineColLoc::get(&ctx, path, index + 1, 0));
  }
  InFlightDiagnostic fileError() { return emitError(fileLoc()); }
  /// An error that names node `index`, its op type and the opset.
  InFlightDiagnostic nodeError(const onnx::NodeProto &n, size_t index) {
    return emitError(nodeLoc(n, index))
           << "node '" << n.name() << "' (" << n.op_type() << ", opset "
           << opset << "): ";
  }

private:
  LogicalResult parse();
  LogicalResult checkOps();
  LogicalResult checkGraph();
  FailureOr<RankedTensorType> inputType(const onnx::ValueInfoProto &vi);
  FailureOr<RankedTensorType> checkedInputType(llvm::StringRef name,
                                               ArrayRef<int64_t> shape,
                                               ElemKind kind);
  std::set<std::string>
  trainableInitializers(const llvm::StringMap<const onnx::TensorProto *> &inits,
                        llvm::ArrayRef<std::string> lossNames);
  LogicalResult convertNode(const onnx::NodeProto &node, size_t index);
};

LogicalResult GraphImporter::parse() {
  if (!llvm::sys::fs::exists(path))
    return fileError() << "no such file; check the path to the model";
  if (llvm::sys::fs::is_directory(path))
    return fileError() << "is a directory, not an ONNX model file";
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!buf)
    return fileError() << "cannot read: " << buf.getError().message();
  llvm::StringRef bytes = (*buf)->getBuffer();
  if (bytes.empty())
    return fileError() << "is empty, not an ONNX model";
  if (!model.ParseFromArray(bytes.data(), (int)bytes.size()))
    return fileError()
           << "is not a valid ONNX model (protobuf parsing failed: the file "
              "is truncated or not ONNX); re-export it or check the download";
  if (!model.has_graph() || model.ir_version() <= 0 ||
      model.opset_import_size() == 0)
    return fileError()
           << "is not a valid ONNX model (no graph, IR version or opset); "
              "the file may be truncated or not ONNX";
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset == 0)
    return fileError() << "imports no default ONNX opset";
  if (opset < kMinOpset || opset > kMaxOpset)
    return fileError() << "uses opset " << opset << "; dsc reads opsets "
                       << kMinOpset << " to " << kMaxOpset
                       << ". Re-export with torch.onnx.export(..., "
                          "opset_version=17) or convert it with "
                          "onnx.version_converter";
  return success();
}

LogicalResult GraphImporter::checkOps() {
  const auto &handlers = nodeHandlers();
  const auto &graph = model.graph();
  bool ok = true;
  std::set<std::string> localFunctions;
  for (const auto &f : model.functions())
    localFunctions.insert(f.domain() + "::" + f.name());
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto &n = graph.node(i);
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      auto diag = emitError(nodeLoc(n, i))
                  << "node '" << n.name() << "' (" << n.op_type()
                  << ", domain '" << n.domain() << "'): ";
      if (localFunctions.count(n.domain() + "::" + n.op_type()))
        diag << "calls a model-local function; inline it first "
                "(onnx.inliner.inline_local_functions) and re-save";
      else
        diag << "operators of domain '" << n.domain()
             << "' are not supported; dsc reads the default ONNX domain "
                "only. Export without custom or contrib ops (e.g. without "
                "onnxruntime fusions)";
      ok = false;
      continue;
    }
    if (!handlers.count(n.op_type())) {
      std::string supported;
      for (const auto &op : supportedOnnxOps())
        supported += (supported.empty() ? "" : ", ") + op;
      nodeError(n, i) << "unsupported ONNX operator '" << n.op_type()
                      << "'. Supported: " << supported
                      << ". See docs/ops.md, or rewrite that part of the model";
      ok = false;
      continue;
    }
    // Input and output counts, required inputs and attribute types, checked
    // here once so that no handler or folder reads past what the node has.
    NodeContext nc(*this, n, nodeLoc(n, i), opset);
    if (failed(checkNodeSignature(nc)))
      ok = false;
  }
  return success(ok);
}

// Value names are SSA names: each is defined once, by an initializer, a graph
// input or a node output, and every graph output is computed by one of them.
LogicalResult GraphImporter::checkGraph() {
  const auto &graph = model.graph();
  bool ok = true;
  llvm::StringSet<> inits, inputs, defined;
  for (const auto &t : graph.initializer()) {
    if (!inits.insert(t.name()).second) {
      fileError() << "initializer '" << t.name()
                  << "' is defined more than once; initializer names must "
                     "be unique: remove the duplicates or re-export the model";
      ok = false;
    }
    std::string err = checkTensorDims(t, "initializer '" + t.name() + "'");
    if (!err.empty()) {
      fileError() << err;
      ok = false;
    }
  }
  for (const auto &vi : graph.input())
    if (!inputs.insert(vi.name()).second && !inits.contains(vi.name())) {
      fileError() << "graph input '" << vi.name()
                  << "' is listed more than once; input names must be unique";
      ok = false;
    }
  // Old exporters list initializers among the inputs too: that is allowed.
  for (const auto &name : inits.keys())
    defined.insert(name);
  for (const auto &name : inputs.keys())
    defined.insert(name);
  for (int i = 0; i < graph.node_size(); ++i) {
    const auto &n = graph.node(i);
    for (int o = 0; o < n.output_size(); ++o)
      if (!n.output(o).empty() && !defined.insert(n.output(o)).second) {
        nodeError(n, i) << "output #" << o << " '" << n.output(o)
                        << "' is already defined (by an initializer, a graph "
                           "input or an earlier node); every value name must "
                           "be defined once: rename one of them";
        ok = false;
      }
  }
  llvm::StringSet<> outputs;
  for (const auto &o : graph.output()) {
    if (!outputs.insert(o.name()).second) {
      fileError() << "graph output '" << o.name()
                  << "' is listed more than once; output names must be unique";
      ok = false;
    } else if (inputs.contains(o.name()) && !inits.contains(o.name())) {
      fileError() << "graph output '" << o.name()
                  << "' is a graph input, not computed by the graph; remove "
                     "it from the outputs (or compute it, e.g. with Identity "
                     "under another name)";
      ok = false;
    } else if (!defined.contains(o.name())) {
      fileError() << "graph output '" << o.name()
                  << "' is not computed by any node, initializer or graph "
                     "input; remove it from the outputs or add the node "
                     "that computes it";
      ok = false;
    }
  }
  return success(ok);
}

FailureOr<RankedTensorType>
GraphImporter::inputType(const onnx::ValueInfoProto &vi) {
  const auto &type = vi.type();
  if (!type.has_tensor_type())
    return fileError() << "graph input '" << vi.name()
                       << "' is not a tensor; dsc takes tensor inputs only";
  auto kind = fromOnnxDataType(type.tensor_type().elem_type());
  if (!kind)
    return fileError() << "graph input '" << vi.name()
                       << "' has unsupported element type "
                       << onnxDataTypeName(type.tensor_type().elem_type());
  SmallVector<int64_t> shape;
  auto given = opts.inputShapes.find(vi.name());
  const auto &dims = type.tensor_type().shape().dim();
  if (given != opts.inputShapes.end()) {
    if (type.tensor_type().has_shape() &&
        (size_t)dims.size() != given->second.size())
      return fileError() << "--input-shape " << vi.name() << " gives "
                         << given->second.size() << " dims but the input has "
                         << dims.size();
    for (auto [i, d] : llvm::enumerate(given->second)) {
      if (i < (size_t)dims.size() && dims[i].has_dim_value() &&
          dims[i].dim_value() != d)
        return fileError() << "--input-shape " << vi.name() << " sets dim " << i
                           << " to " << d << " but the model fixes it to "
                           << dims[i].dim_value();
      shape.push_back(d);
    }
    return checkedInputType(vi.name(), shape, *kind);
  }
  if (!type.tensor_type().has_shape())
    return fileError() << "graph input '" << vi.name()
                       << "' has no shape; give one with --input-shape "
                       << vi.name() << "=DIMxDIM...";
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d.has_dim_value() && d.dim_value() >= 0) {
      if (i == 0 && opts.microBatch && *opts.microBatch != d.dim_value())
        return fileError() << "--micro-batch " << *opts.microBatch
                           << " conflicts with graph input '" << vi.name()
                           << "', whose batch dim the model fixes to "
                           << d.dim_value()
                           << "; export with a dynamic batch axis (e.g. "
                              "dynamic_axes / dynamic_shapes) or drop "
                              "--micro-batch";
      shape.push_back(d.dim_value());
      continue;
    }
    if (i == 0 && opts.microBatch) {
      shape.push_back(*opts.microBatch);
      continue;
    }
    std::string sym = d.has_dim_param() ? "'" + d.dim_param() + "'" : "?";
    return fileError() << "graph input '" << vi.name() << "' has dynamic dim "
                       << i << " (" << sym
                       << ") left unset; dsc compiles static shapes: pass "
                       << (i == 0 ? "--micro-batch N or " : "")
                       << "--input-shape " << vi.name() << "="
                       << "AxBx...";
  }
  return checkedInputType(vi.name(), shape, *kind);
}

FailureOr<RankedTensorType>
GraphImporter::checkedInputType(llvm::StringRef name, ArrayRef<int64_t> shape,
                                ElemKind kind) {
  if (!checkedByteSize(shape, kind))
    return fileError() << "graph input '" << name << "' has shape "
                       << formatShape(shape) << ", " << kTensorTooLarge
                       << "; give a smaller shape";
  return RankedTensorType::get(shape, toMlirType(&ctx, kind));
}

// ONNX input slots that carry no gradient (indices, shapes, masks, labels,
// running statistics), and ops whose outputs carry none at all.
static bool isDifferentiableSlot(const onnx::NodeProto &n, int slot) {
  static const llvm::StringSet<> noGradOps = {"Shape",
                                              "Size",
                                              "Equal",
                                              "Less",
                                              "LessOrEqual",
                                              "Greater",
                                              "GreaterOrEqual",
                                              "Not",
                                              "And",
                                              "Or",
                                              "Xor",
                                              "Range",
                                              "ConstantOfShape",
                                              "ArgMax",
                                              "ArgMin",
                                              "NonZero",
                                              "IsNaN",
                                              "IsInf",
                                              "Constant",
                                              "Floor",
                                              "Ceil",
                                              "Sign",
                                              "Round"};
  llvm::StringRef op = n.op_type();
  if (noGradOps.contains(op))
    return false;
  if (op == "Cast") {
    for (const auto &a : n.attribute())
      if (a.name() == "to") {
        auto k = fromOnnxDataType((int)a.i());
        return k && isFloatKind(*k);
      }
    return false;
  }
  if (op == "Where")
    return slot != 0;
  if (op == "BatchNormalization")
    return slot < 3;
  if (op == "Gather" || op == "GatherElements" || op == "GatherND" ||
      op == "Reshape" || op == "Expand" || op == "Split" || op == "Squeeze" ||
      op == "Unsqueeze" || op == "Tile" || op == "SoftmaxCrossEntropyLoss" ||
      op == "NegativeLogLikelihoodLoss" || op == "Dropout" || op == "Clip" ||
      op == "Trilu" || op == "CastLike" || op == "SplitToSequence" ||
      op == "SequenceAt" || op == "Pad" || op.starts_with("Reduce"))
    return slot == 0;
  if (op == "Slice")
    return slot == 0;
  return true;
}

std::set<std::string> GraphImporter::trainableInitializers(
    const llvm::StringMap<const onnx::TensorProto *> &inits,
    llvm::ArrayRef<std::string> lossNames) {
  // Walk backwards from the loss: a value needs a gradient if it feeds a
  // differentiable slot of a node one of whose outputs needs a gradient.
  llvm::StringSet<> needsGrad;
  for (const auto &n : lossNames)
    needsGrad.insert(n);
  const auto &graph = model.graph();
  for (int i = graph.node_size() - 1; i >= 0; --i) {
    const auto &n = graph.node(i);
    bool onPath = llvm::any_of(n.output(), [&](const std::string &o) {
      return needsGrad.contains(o);
    });
    if (!onPath)
      continue;
    for (int s = 0; s < n.input_size(); ++s)
      if (!n.input(s).empty() && isDifferentiableSlot(n, s))
        needsGrad.insert(n.input(s));
  }
  std::set<std::string> result;
  for (const auto &entry : inits) {
    const onnx::TensorProto *t = entry.second;
    auto kind = fromOnnxDataType(t->data_type());
    // A rank-0 float initializer is a scalar constant of the exporter
    // (a scale, an epsilon), not a module parameter.
    if (kind && isFloatKind(*kind) && t->dims_size() > 0 &&
        needsGrad.contains(entry.first()))
      result.insert(entry.first().str());
  }
  return result;
}

LogicalResult GraphImporter::convertNode(const onnx::NodeProto &node,
                                         size_t index) {
  Location loc = nodeLoc(node, index);
  NodeContext nc(*this, node, loc, opset);
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string &in = node.input(i);
    if (in.empty())
      continue;
    auto it = values.find(in);
    if (it == values.end())
      return nc.error() << "input #" << i << " '" << in
                        << "' is not defined: it is no initializer, graph "
                           "input or earlier node output (missing "
                           "initializer, or nodes out of order?)";
    // Handlers and folders read tensors; only SequenceAt reads a sequence.
    bool wantsSequence = node.op_type() == "SequenceAt" && i == 0;
    if (it->second.sequence.has_value() != wantsSequence)
      return nc.error() << "input #" << i << " '" << in << "' is "
                        << (wantsSequence ? "a tensor; SequenceAt reads a "
                                            "sequence (from SplitToSequence)"
                                          : "a sequence; only SequenceAt may "
                                            "read it");
  }
  // Host evaluation of constant (shape) computations first.
  const auto &folders = nodeFolders();
  auto folder = folders.find(node.op_type());
  if (folder != folders.end()) {
    std::vector<HostTensor> outs;
    FoldResult r = folder->second(nc, outs);
    if (r == FoldResult::Error)
      return failure();
    if (r == FoldResult::Folded) {
      bool small = llvm::all_of(outs, [&](const HostTensor &t) {
        return t.numElements() <= opts.foldLimit;
      });
      if (small || node.op_type() == "Constant") {
        for (size_t i = 0; i < outs.size() && i < nc.numOutputs(); ++i)
          nc.setOutput(i, std::move(outs[i]));
        return success();
      }
    }
  }
  const auto &handlers = nodeHandlers();
  auto handler = handlers.find(node.op_type());
  assert(handler != handlers.end() && "checkOps lets only known ops through");
  if (failed(handler->second(nc)))
    return failure();
  for (int i = 0; i < node.output_size(); ++i)
    if (!node.output(i).empty() && !values.count(node.output(i)) &&
        nc.outputUsed(i))
      return nc.error() << "output #" << i << " '" << node.output(i)
                        << "' is used but dsc does not produce it for this "
                           "op";
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  // 1. Parse and check.
  if (failed(parse()))
    return nullptr;
  // Both checks report every problem they find before import stops.
  bool opsOk = succeeded(checkOps());
  if (failed(checkGraph()) || !opsOk)
    return nullptr;
  const auto &graph = model.graph();

  for (const auto &n : graph.node())
    for (const auto &in : n.input())
      ++uses[in];
  for (const auto &o : graph.output())
    ++uses[o.name()];

  llvm::StringMap<const onnx::TensorProto *> inits;
  std::vector<const onnx::TensorProto *> initOrder;
  for (const auto &t : graph.initializer()) {
    if (!inits.count(t.name()))
      initOrder.push_back(&t);
    inits[t.name()] = &t;
  }
  if (graph.sparse_initializer_size())
    return fileError() << "sparse initializers are not supported", nullptr;

  // The loss: the single scalar float output.
  std::vector<std::string> lossNames, otherOutputs;
  for (const auto &o : graph.output()) {
    const auto &tt = o.type().tensor_type();
    bool scalar = tt.has_shape() && tt.shape().dim_size() == 0;
    auto kind = fromOnnxDataType(tt.elem_type());
    if (scalar && kind && isFloatKind(*kind))
      lossNames.push_back(o.name());
    else
      otherOutputs.push_back(o.name());
  }
  if (opts.requireLoss) {
    if (lossNames.size() != 1) {
      std::string outs;
      for (const auto &o : graph.output())
        outs += (outs.empty() ? "'" : ", '") + o.name() + "'";
      fileError() << (lossNames.empty() ? "has no scalar loss output"
                                        : "has several scalar outputs")
                  << " (outputs: " << outs
                  << "); dsc trains a graph whose one scalar float output is "
                     "the loss: export a module whose forward returns the "
                     "loss (e.g. wrap the model and F.cross_entropy), or use "
                     "--no-loss to only import it";
      return nullptr;
    }
  } else {
    otherOutputs.clear();
    lossNames.clear();
    for (const auto &o : graph.output())
      otherOutputs.push_back(o.name());
  }

  // 2. Static shapes of the graph inputs (old exporters list initializers
  // among the inputs too; those are initializers).
  std::vector<std::pair<std::string, RankedTensorType>> inputs;
  for (const auto &vi : graph.input()) {
    if (inits.count(vi.name()))
      continue;
    auto ty = inputType(vi);
    if (failed(ty))
      return nullptr;
    inputs.emplace_back(vi.name(), *ty);
  }
  for (const auto &shape : opts.inputShapes) {
    const auto &name = shape.first;
    if (!llvm::any_of(inputs, [&](auto &p) { return p.first == name; })) {
      fileError() << "--input-shape names '" << name
                  << "', which is not a graph input";
      return nullptr;
    }
  }

  // 3. Parameters, buffers and constants.
  std::vector<std::string> roots = opts.requireLoss ? lossNames : otherOutputs;
  std::set<std::string> trainable = trainableInitializers(inits, roots);

  auto module = ModuleOp::create(fileLoc());
  module->setAttr("dsc.source",
                  StringAttr::get(&ctx, llvm::sys::path::filename(path)));
  module->setAttr("dsc.opset", builder.getI64IntegerAttr(opset));
  if (!model.producer_name().empty())
    module->setAttr("dsc.producer",
                    StringAttr::get(&ctx, model.producer_name() + " " +
                                              model.producer_version()));
  OwningOpRef<ModuleOp> owned(module);

  std::set<std::string> runningStats;
  for (const auto &n : graph.node())
    if (n.op_type() == "BatchNormalization")
      for (int s = 3; s < 5 && s < n.input_size(); ++s)
        runningStats.insert(n.input(s));

  SmallVector<Type> argTypes;
  SmallVector<std::pair<std::string, std::string>> argRoles; // role, name
  std::vector<const onnx::TensorProto *> paramInits, bufferInits;
  for (const auto *t : initOrder) {
    auto kind = fromOnnxDataType(t->data_type());
    if (!kind) {
      fileError() << "initializer '" << t->name()
                  << "' has unsupported data type "
                  << onnxDataTypeName(t->data_type());
      return nullptr;
    }
    if (!uses.count(t->name()))
      continue; // unused initializers do not reach the IR
    // External-data paths are checked now, though parameters and buffers are
    // only read by the compiled program.
    if (t->data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
      std::string err = checkExternalLocation(*t, modelDir);
      if (!err.empty()) {
        fileError() << err;
        return nullptr;
      }
    }
    if (trainable.count(t->name())) {
      paramInits.push_back(t);
      continue;
    }
    // Small constants fold; large ones, ones without data and running
    // statistics (state the training step updates) are buffers.
    // checkGraph bounded the element count.
    SmallVector<int64_t> dims(t->dims().begin(), t->dims().end());
    int64_t n = *checkedNumElements(dims);
    if (!runningStats.count(t->name()) && n <= 4096) {
      auto data = readTensorData(*t, modelDir, fileLoc());
      if (failed(data))
        return nullptr;
      if (*data) {
        values[t->name()].constant = std::move(**data);
        continue;
      }
    }
    bufferInits.push_back(t);
  }

  auto typeOf = [&](const onnx::TensorProto *t) {
    SmallVector<int64_t> shape(t->dims().begin(), t->dims().end());
    return RankedTensorType::get(
        shape, toMlirType(&ctx, *fromOnnxDataType(t->data_type())));
  };
  for (const auto *t : paramInits) {
    argTypes.push_back(typeOf(t));
    argRoles.push_back({"dsc.param", t->name()});
  }
  for (const auto *t : bufferInits) {
    argTypes.push_back(typeOf(t));
    argRoles.push_back({"dsc.buffer", t->name()});
  }
  for (const auto &[name, ty] : inputs) {
    argTypes.push_back(ty);
    argRoles.push_back({"dsc.input", name});
  }

  auto func = func::FuncOp::create(fileLoc(), "forward",
                                   builder.getFunctionType(argTypes, {}));
  module.push_back(func);
  Block *entry = func.addEntryBlock();
  for (auto [i, role] : llvm::enumerate(argRoles)) {
    func.setArgAttr(i, role.first, StringAttr::get(&ctx, role.second));
    values[role.second].value = entry->getArgument(i);
  }
  builder.setInsertionPointToEnd(entry);

  // 4. Nodes, in order.
  for (int i = 0; i < graph.node_size(); ++i)
    if (failed(convertNode(graph.node(i), i)))
      return nullptr;

  // 5. Results: the loss, other outputs, then updated buffers.
  SmallVector<Value> results;
  SmallVector<std::pair<std::string, std::string>> resultRoles;
  auto resultValue = [&](const std::string &name) -> FailureOr<Value> {
    auto it = values.find(name);
    if (it == values.end()) {
      fileError() << "graph output '" << name << "' is never produced";
      return failure();
    }
    ImportValue &iv = it->second;
    if (iv.sequence) {
      fileError() << "graph output '" << name
                  << "' is a sequence; dsc returns tensors only";
      return failure();
    }
    if (!iv.value) {
      OpBuilder::InsertionGuard g(builder);
      iv.value = dsc::ConstantOp::create(builder, fileLoc(),
                                         iv.constant->toAttr(&ctx));
    }
    return iv.value;
  };
  for (const auto &n : lossNames) {
    auto v = resultValue(n);
    if (failed(v))
      return nullptr;
    results.push_back(*v);
    resultRoles.push_back({"dsc.output", n});
  }
  for (const auto &n : otherOutputs) {
    auto v = resultValue(n);
    if (failed(v))
      return nullptr;
    results.push_back(*v);
    resultRoles.push_back({"dsc.output", n});
  }
  // Batch-norm running statistics: a buffer argument that a
  // batch_norm_train reads gets its new value returned.
  for (Operation &op : *entry) {
    auto bn = dyn_cast<dsc::BatchNormTrainOp>(op);
    if (!bn)
      continue;
    for (auto [operand, result] :
         {std::pair{bn.getRunningMean(), bn.getNewRunningMean()},
          std::pair{bn.getRunningVar(), bn.getNewRunningVar()}}) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg || arg.getOwner() != entry)
        continue;
      auto name =
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "dsc.buffer");
      if (!name)
        continue;
      results.push_back(result);
      resultRoles.push_back({"dsc.buffer_update", name.str()});
    }
  }
  func::ReturnOp::create(builder, fileLoc(), results);
  func.setType(
      builder.getFunctionType(argTypes, TypeRange(ValueRange(results))));
  for (auto [i, role] : llvm::enumerate(resultRoles))
    func.setResultAttr(i, role.first, StringAttr::get(&ctx, role.second));

  // Constants and ops whose results nobody uses are dropped.
  bool changed = true;
  while (changed) {
    changed = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*entry)))
      if (!isa<func::ReturnOp>(op) && op.use_empty() && isPure(&op)) {
        op.erase();
        changed = true;
      }
  }
  if (failed(verify(module)))
    return nullptr;
  // Exporters repeat the same constants per layer; keep one of each.
  PassManager pm(&ctx);
  pm.addPass(createCSEPass());
  if (failed(pm.run(module)))
    return nullptr;
  return owned;
}

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

NodeContext::NodeContext(GraphImporter &imp, const onnx::NodeProto &node,
                         Location loc, int64_t opset)
    : imp_(imp), node_(node), loc_(loc), opset_(opset) {}

OpBuilder &NodeContext::builder() { return imp_.builder; }
MLIRContext *NodeContext::ctx() { return &imp_.ctx; }

InFlightDiagnostic NodeContext::error() {
  return emitError(loc_) << "node '" << node_.name() << "' (" << opType()
                         << ", opset " << opset_ << "): ";
}

int64_t NodeContext::maxConstantBytes() const {
  return imp_.opts.maxConstantBytes;
}

LogicalResult NodeContext::checkConstantSize(ArrayRef<int64_t> shape,
                                             ElemKind kind) {
  auto bytes = checkedByteSize(shape, kind);
  if (!bytes)
    return error() << "its result would have shape " << formatShape(shape)
                   << ", " << kTensorTooLarge
                   << "; check the shape computation that feeds it";
  if (*bytes > maxConstantBytes())
    return error() << "it would materialize a constant of shape "
                   << formatShape(shape) << " (" << *bytes
                   << " bytes), more than --max-constant-bytes "
                   << maxConstantBytes()
                   << "; raise the limit if the model really needs it";
  return success();
}

FoldResult NodeContext::checkFoldSize(ArrayRef<int64_t> shape, ElemKind kind) {
  auto bytes = checkedByteSize(shape, kind);
  if (!bytes) {
    (void)checkConstantSize(shape, kind); // reports the overflow
    return FoldResult::Error;
  }
  int64_t elements = *checkedNumElements(shape);
  // A Constant is kept whatever its element count (convertNode); other
  // results only up to foldLimit elements.
  bool tooMany = opType() != "Constant" && elements > imp_.opts.foldLimit;
  if (isFoldOnlyOp(opType())) {
    if (failed(checkConstantSize(shape, kind)))
      return FoldResult::Error;
    if (tooMany) {
      error() << "its result of shape " << formatShape(shape) << " has "
              << elements << " elements, more than the " << imp_.opts.foldLimit
              << " dsc folds at compile time";
      return FoldResult::Error;
    }
    return FoldResult::Folded;
  }
  // An op that also runs at run time is left to its handler rather than
  // folded into a constant larger than the limits.
  if (*bytes > maxConstantBytes() || tooMany)
    return FoldResult::NotFoldable;
  return FoldResult::Folded;
}

FailureOr<HostTensor> NodeContext::scalarConstant(size_t i,
                                                  llvm::StringRef what) {
  auto t = constant(i, what);
  if (failed(t))
    return failure();
  if (t->numElements() != 1)
    return error() << "input #" << i << " (" << what
                   << ") must hold exactly one value, but has shape "
                   << formatShape(t->shape);
  return t;
}

FailureOr<SmallVector<int64_t>>
NodeContext::shapeConstant(size_t i, llvm::StringRef what) {
  auto t = constant(i, what);
  if (failed(t))
    return failure();
  if (t->shape.size() != 1 || t->isFloat())
    return error() << "input #" << i << " (" << what
                   << ") must be a 1-D integer tensor, but is "
                   << elemKindName(t->kind) << " of shape "
                   << formatShape(t->shape);
  SmallVector<int64_t> dims(t->ints.begin(), t->ints.end());
  for (int64_t d : dims)
    if (d < 0)
      return error() << "input #" << i << " (" << what << ") "
                     << formatShape(dims) << " has a negative dim";
  return dims;
}

const onnx::AttributeProto *NodeContext::attr(llvm::StringRef name) const {
  for (const auto &a : node_.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t NodeContext::attrInt(llvm::StringRef name, int64_t dflt) const {
  const auto *a = attr(name);
  return a ? a->i() : dflt;
}

double NodeContext::attrFloat(llvm::StringRef name, double dflt) const {
  const auto *a = attr(name);
  return a ? (double)a->f() : dflt;
}

std::string NodeContext::attrString(llvm::StringRef name,
                                    llvm::StringRef dflt) const {
  const auto *a = attr(name);
  return a ? a->s() : dflt.str();
}

std::optional<std::vector<int64_t>>
NodeContext::attrInts(llvm::StringRef name) const {
  const auto *a = attr(name);
  if (!a)
    return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

bool NodeContext::hasInput(size_t i) const {
  return i < (size_t)node_.input_size() && !node_.input(i).empty();
}

const ImportValue &NodeContext::input(size_t i) const {
  return imp_.values.find(node_.input(i))->second;
}

bool NodeContext::isConstant(size_t i) const {
  return hasInput(i) && input(i).constant.has_value();
}

RankedTensorType NodeContext::type(size_t i) {
  const ImportValue &v = input(i);
  if (v.value)
    return cast<RankedTensorType>(v.value.getType());
  if (v.constant)
    return v.constant->type(ctx());
  return {};
}

FailureOr<Value> NodeContext::value(size_t i) {
  auto it = imp_.values.find(node_.input(i));
  ImportValue &v = it->second;
  if (v.sequence)
    return error() << "input #" << i << " '" << node_.input(i)
                   << "' is a sequence; only SequenceAt may read it";
  if (!v.value) {
    // Constants are materialized at the top of the function, once.
    OpBuilder::InsertionGuard g(builder());
    Block *entry = builder().getInsertionBlock();
    builder().setInsertionPointToStart(entry);
    v.value =
        dsc::ConstantOp::create(builder(), loc_, v.constant->toAttr(ctx()));
  }
  return v.value;
}

FailureOr<HostTensor> NodeContext::constant(size_t i, llvm::StringRef what) {
  if (!hasInput(i))
    return error() << "missing input #" << i << " (" << what << ")";
  const ImportValue &v = input(i);
  if (v.constant)
    return *v.constant;
  return error() << "input #" << i << " '" << node_.input(i) << "' (" << what
                 << ") must be known at compile time, but it is computed "
                    "from run-time data; dsc compiles static shapes. Make it "
                    "a constant in the model (e.g. avoid data-dependent "
                    "shapes)";
}

bool NodeContext::outputUsed(size_t i) const {
  return i < (size_t)node_.output_size() && !node_.output(i).empty() &&
         imp_.uses.count(node_.output(i));
}

void NodeContext::setOutput(size_t i, Value v) {
  if (i < (size_t)node_.output_size() && !node_.output(i).empty())
    imp_.values[node_.output(i)] = ImportValue{v, std::nullopt, std::nullopt};
}

void NodeContext::setOutput(size_t i, HostTensor t) {
  if (i < (size_t)node_.output_size() && !node_.output(i).empty())
    imp_.values[node_.output(i)] =
        ImportValue{Value(), std::move(t), std::nullopt};
}

void NodeContext::setOutput(size_t i, ImportValue v) {
  if (i < (size_t)node_.output_size() && !node_.output(i).empty())
    imp_.values[node_.output(i)] = std::move(v);
}

FailureOr<Operation *> NodeContext::create(llvm::StringRef opName,
                                           ValueRange operands,
                                           ArrayRef<NamedAttribute> attrs) {
  OperationState state(loc_, opName);
  state.addOperands(operands);
  state.addAttributes(attrs);
  auto info = state.name.getRegisteredInfo();
  assert(info && "dsc op not registered");
  auto *iface = info->getInterface<InferTypeOpInterface>();
  assert(iface && "every dsc op infers its result types");
  SmallVector<Type> types;
  // Re-emit inference errors with the node's name and op type in front.
  std::string message;
  bool inferred;
  {
    ScopedDiagnosticHandler capture(ctx(), [&](Diagnostic &d) {
      if (message.empty())
        message = d.str();
      return success();
    });
    inferred = succeeded(iface->inferReturnTypes(
        ctx(), loc_, operands, state.attributes.getDictionary(ctx()),
        OpaqueProperties(nullptr), RegionRange(), types));
  }
  if (!inferred)
    return error() << (message.empty() ? "invalid operands" : message);
  // Inference takes sizes from the file; a result whose size does not fit
  // in 64 bits (or with a negative dim) would break every later size.
  for (auto [r, t] : llvm::enumerate(types)) {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (!rt)
      continue;
    auto kind = fromMlirType(rt.getElementType());
    if (!checkedByteSize(rt.getShape(), kind.value_or(ElemKind::I64)))
      return error() << "result #" << r << " would have shape "
                     << formatShape(rt.getShape()) << ", which is negative or "
                     << kTensorTooLarge << "; check the shapes that feed it";
  }
  state.addTypes(types);
  return builder().create(state);
}

FailureOr<Value> NodeContext::create1(llvm::StringRef opName,
                                      ValueRange operands,
                                      ArrayRef<NamedAttribute> attrs) {
  auto op = create(opName, operands, attrs);
  if (failed(op))
    return failure();
  return (*op)->getResult(0);
}

Value NodeContext::materialize(const HostTensor &t) {
  return dsc::ConstantOp::create(builder(), loc_, t.toAttr(ctx()));
}

NamedAttribute NodeContext::named(llvm::StringRef name, Attribute a) {
  return NamedAttribute(StringAttr::get(ctx(), name), a);
}
NamedAttribute NodeContext::i64(llvm::StringRef name, int64_t v) {
  return named(name, builder().getI64IntegerAttr(v));
}
NamedAttribute NodeContext::f64(llvm::StringRef name, double v) {
  return named(name, builder().getF64FloatAttr(v));
}
NamedAttribute NodeContext::boolean(llvm::StringRef name, bool v) {
  return named(name, builder().getBoolAttr(v));
}
NamedAttribute NodeContext::str(llvm::StringRef name, llvm::StringRef v) {
  return named(name, builder().getStringAttr(v));
}
NamedAttribute NodeContext::array(llvm::StringRef name,
                                  llvm::ArrayRef<int64_t> v) {
  return named(name, builder().getDenseI64ArrayAttr(v));
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

OwningOpRef<ModuleOp> importOnnxFile(MLIRContext &ctx, const std::string &path,
                                     const ImportOptions &opts) {
  ctx.loadDialect<dsc::DscDialect, func::FuncDialect>();
  GraphImporter importer(ctx, path, opts);
  return importer.run();
}

std::vector<std::string> supportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &e : nodeHandlers())
    ops.push_back(e.first().str());
  llvm::sort(ops);
  return ops;
}

} // namespace dsc
