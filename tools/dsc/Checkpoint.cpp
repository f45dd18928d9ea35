//===- Checkpoint.cpp - dsc checkpoint: list, verify, consolidate ---------===//
//
// A thin shell over runtime/io/checkpoint.h and consolidate.h; the one part
// that needs protobuf lives here: writing the trained parameters back into
// the ONNX model they were compiled from.
//
//===----------------------------------------------------------------------===//

#include "tools/dsc/Checkpoint.h"
#include "compiler/import/ImportContext.h"
#include "tools/dsc/Common.h"

#include "io/checkpoint.h"
#include "io/consolidate.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <map>

namespace dsc {

const char *kCheckpointUsage =
    R"(usage: dsc checkpoint list DIR [--tensors]
       dsc checkpoint verify DIR
       dsc checkpoint consolidate DIR --to MODEL.safetensors
                      [--max-shard-size 5GB] [--with-optimizer]
       dsc checkpoint consolidate DIR --to-onnx TRAINED.onnx [--model M.onnx]

DIR is a checkpoint root (the --save-dir of a training run; its `latest`
step is used, `list` shows every step) or one step_<N> directory.

  list          step, world size, ZeRO stage, precision, files and bytes,
                model of each step; --tensors adds every tensor's shape
  verify        recompute every file's size and SHA-256 against the
                manifest; one line per problem, exit status 1 if any
  consolidate   the parameters and buffers as whole tensors under their
                ONNX names, whatever the sharding they were saved at:
    --to FILE             one safetensors file, or Hugging Face style
                          shards FILE-0000i-of-0000K.safetensors and
                          FILE.safetensors.index.json above the shard size
    --max-shard-size S    largest shard (5GB, 500MB, 2GiB; default: one file)
    --with-optimizer      also the optimizer state (optim/...)
    --to-onnx FILE        the model with each parameter's initializer
                          replaced (in the initializer's own element type);
                          weights go to external data FILE.data when the
                          model used external data or would exceed 2 GiB
    --model M.onnx        the model to start from (default: the one the
                          manifest names)

exit status: 0 on success, 1 on any problem (the message names the file).
)";

namespace {

int fail(const std::string &msg) {
  llvm::errs() << "error: " << msg << "\n";
  return 1;
}

int fail(const Status &s) { return fail(s.message()); }

//===----------------------------------------------------------------------===//
// list, verify
//===----------------------------------------------------------------------===//

int runList(const std::string &dir, bool withTensors) {
  std::vector<std::string> steps = io::checkpointSteps(dir);
  if (steps.empty() || llvm::sys::fs::exists(dir + "/manifest.json"))
    steps = {dir};
  int rc = 0;
  for (const std::string &step : steps) {
    io::CheckpointReader reader;
    Status s = reader.open(step);
    if (!s.ok()) {
      rc = fail(s);
      continue;
    }
    llvm::outs() << io::describeCheckpoint(reader, withTensors);
  }
  return rc;
}

int runVerify(const std::string &dir) {
  io::CheckpointReader reader;
  Status s = reader.open(dir);
  if (!s.ok())
    return fail(s);
  std::vector<std::string> problems;
  if (!(s = reader.verify(problems)).ok())
    return fail(s);
  for (const std::string &p : problems)
    llvm::outs() << p << "\n";
  if (!problems.empty())
    return 1;
  llvm::outs() << reader.stepDir() << ": " << reader.manifest().files.size()
               << " files intact\n";
  return 0;
}

//===----------------------------------------------------------------------===//
// consolidate --to-onnx
//===----------------------------------------------------------------------===//

int onnxTypeOf(DType d) {
  switch (d) {
  case DType::F32:
    return onnx::TensorProto_DataType_FLOAT;
  case DType::F64:
    return onnx::TensorProto_DataType_DOUBLE;
  case DType::F16:
    return onnx::TensorProto_DataType_FLOAT16;
  case DType::BF16:
    return onnx::TensorProto_DataType_BFLOAT16;
  case DType::I64:
    return onnx::TensorProto_DataType_INT64;
  case DType::I32:
    return onnx::TensorProto_DataType_INT32;
  case DType::I8:
    return onnx::TensorProto_DataType_INT8;
  case DType::U8:
    return onnx::TensorProto_DataType_UINT8;
  case DType::Bool:
    return onnx::TensorProto_DataType_BOOL;
  }
  return 0;
}

bool isOnnxFloat(int t) {
  return t == onnx::TensorProto_DataType_FLOAT ||
         t == onnx::TensorProto_DataType_DOUBLE ||
         t == onnx::TensorProto_DataType_FLOAT16 ||
         t == onnx::TensorProto_DataType_BFLOAT16;
}

double loadFloat(const char *p, DType d) {
  switch (d) {
  case DType::F32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case DType::F64: {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case DType::F16:
  case DType::BF16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return d == DType::F16 ? halfToFloat(h) : bfloat16ToFloat(h);
  }
  default:
    return 0;
  }
}

/// The checkpoint tensor `src` (dtype `d`) as raw little-endian data of
/// ONNX element type `type`; false if no conversion applies.
bool encodeAs(const std::vector<char> &src, DType d, int64_t n, int type,
              std::string &raw) {
  if (type == onnxTypeOf(d)) {
    raw.assign(src.data(), static_cast<size_t>(n) * dtypeSize(d));
    return true;
  }
  if (!isFloat(d) || !isOnnxFloat(type))
    return false;
  size_t es = dtypeSize(d);
  size_t outEs = type == onnx::TensorProto_DataType_DOUBLE  ? 8
                 : type == onnx::TensorProto_DataType_FLOAT ? 4
                                                            : 2;
  raw.assign(static_cast<size_t>(n) * outEs, '\0');
  for (int64_t i = 0; i < n; ++i) {
    double v = loadFloat(src.data() + i * es, d);
    char *o = raw.data() + i * outEs;
    if (type == onnx::TensorProto_DataType_DOUBLE) {
      std::memcpy(o, &v, 8);
    } else if (type == onnx::TensorProto_DataType_FLOAT) {
      float f = static_cast<float>(v);
      std::memcpy(o, &f, 4);
    } else {
      uint16_t h = type == onnx::TensorProto_DataType_FLOAT16
                       ? floatToHalf(static_cast<float>(v))
                       : floatToBfloat16(static_cast<float>(v));
      std::memcpy(o, &h, 2);
    }
  }
  return true;
}

/// Bytes per element of an ONNX data type with a fixed size; 0 otherwise.
size_t onnxElementBytes(int type) {
  switch (type) {
  case onnx::TensorProto_DataType_DOUBLE:
  case onnx::TensorProto_DataType_INT64:
  case onnx::TensorProto_DataType_UINT64:
    return 8;
  case onnx::TensorProto_DataType_FLOAT:
  case onnx::TensorProto_DataType_INT32:
  case onnx::TensorProto_DataType_UINT32:
    return 4;
  case onnx::TensorProto_DataType_FLOAT16:
  case onnx::TensorProto_DataType_BFLOAT16:
  case onnx::TensorProto_DataType_INT16:
  case onnx::TensorProto_DataType_UINT16:
    return 2;
  case onnx::TensorProto_DataType_INT8:
  case onnx::TensorProto_DataType_UINT8:
  case onnx::TensorProto_DataType_BOOL:
    return 1;
  default:
    return 0;
  }
}

std::string externalKey(const onnx::TensorProto &t, const char *key) {
  for (const auto &kv : t.external_data())
    if (kv.key() == key)
      return kv.value();
  return "";
}

/// The bytes of an initializer stored as external data of the source model.
bool readExternal(const onnx::TensorProto &t, const std::string &modelDir,
                  std::string &raw, std::string &error) {
  error = checkExternalLocation(t, modelDir);
  if (!error.empty())
    return false;
  llvm::SmallString<256> full(modelDir);
  llvm::sys::path::append(full, externalKey(t, "location"));
  auto buf = llvm::MemoryBuffer::getFile(full, /*IsText=*/false);
  if (!buf) {
    error = "cannot read external data '" + std::string(full) +
            "' of initializer '" + t.name() + "': " + buf.getError().message();
    return false;
  }
  uint64_t size = (*buf)->getBufferSize(), offset = 0, length = 0, end = 0;
  std::string off = externalKey(t, "offset"), len = externalKey(t, "length");
  bool bad = !off.empty() && llvm::StringRef(off).getAsInteger(10, offset);
  if (len.empty()) {
    // The tensor's own size, as onnx reads it.
    uint64_t n = 1;
    for (int64_t d : t.dims())
      bad |= d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
    size_t es = onnxElementBytes(t.data_type());
    bad |= es == 0 || __builtin_mul_overflow(n, es, &length);
  } else {
    bad |= llvm::StringRef(len).getAsInteger(10, length);
  }
  if (bad || __builtin_add_overflow(offset, length, &end) || end > size) {
    error = "external data of initializer '" + t.name() + "' (offset '" + off +
            "', length '" + len + "') lies outside '" + std::string(full) +
            "' (" + std::to_string(size) + " bytes)";
    return false;
  }
  raw.assign((*buf)->getBufferStart() + offset, length);
  return true;
}

void clearData(onnx::TensorProto &t) {
  t.clear_float_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_double_data();
  t.clear_uint64_data();
  t.clear_string_data();
  t.clear_raw_data();
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto_DataLocation_DEFAULT);
}

int runToOnnx(io::CheckpointReader &reader, const std::string &out,
              std::string modelPath) {
  const io::CheckpointManifest &m = reader.manifest();
  if (modelPath.empty())
    modelPath = m.modelPath;
  if (modelPath.empty())
    return fail(reader.stepDir() +
                ": the manifest names no model; give one with --model");
  auto buf = llvm::MemoryBuffer::getFile(modelPath, /*IsText=*/false);
  if (!buf)
    return fail(modelPath + ": cannot read: " + buf.getError().message() +
                " (give the model with --model)");
  onnx::ModelProto model;
  if ((*buf)->getBufferSize() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromArray((*buf)->getBufferStart(),
                            static_cast<int>((*buf)->getBufferSize())) ||
      !model.has_graph())
    return fail(modelPath + ": not a valid ONNX model");
  buf->reset();
  llvm::SmallString<256> dir(modelPath);
  llvm::sys::path::remove_filename(dir);
  std::string modelDir = dir.empty() ? "." : std::string(dir);

  std::map<std::string, onnx::TensorProto *> inits;
  bool sourceExternal = false;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    inits[t.name()] = &t;
    sourceExternal |=
        t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL;
  }

  // 1. Every parameter and buffer of the checkpoint into its initializer.
  std::vector<io::ConsolidatedName> names;
  Status s = io::consolidatedNames(m, io::ConsolidateWhat(), names);
  if (!s.ok())
    return fail(s);
  std::vector<std::string> problems;
  std::map<std::string, std::string> replaced; // name -> raw bytes
  for (const io::ConsolidatedName &n : names) {
    const io::CheckpointTensor *t = m.find(n.logical);
    auto it = inits.find(n.name);
    if (it == inits.end()) {
      problems.push_back("'" + n.name + "' (" + n.logical +
                         ") is not an initializer of " + modelPath);
      continue;
    }
    onnx::TensorProto &init = *it->second;
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    if (dims != t->shape) {
      problems.push_back("'" + n.name + "' is " + describe(I64s(dims)) +
                         " in " + modelPath + " but " +
                         describe(I64s(t->shape)) + " in the checkpoint");
      continue;
    }
    std::vector<char> data(static_cast<size_t>(t->numel()) *
                           dtypeSize(t->dtype));
    s = reader.read(n.logical, Tensor::of(data.data(), t->dtype, t->shape));
    if (!s.ok())
      return fail(s);
    std::string raw;
    if (!encodeAs(data, t->dtype, t->numel(), init.data_type(), raw)) {
      problems.push_back("'" + n.name + "' is " + dtypeName(t->dtype) +
                         " in the checkpoint; its initializer's type " +
                         std::to_string(init.data_type()) + " cannot take it");
      continue;
    }
    replaced[n.name] = std::move(raw);
  }
  if (!problems.empty()) {
    for (const std::string &p : problems)
      llvm::errs() << "error: " << p << "\n";
    return fail(std::to_string(problems.size()) +
                " parameters do not fit the model; is it the model the "
                "checkpoint was trained from?");
  }

  // 2. Inline, or everything of 1 KiB or more as external data.
  uint64_t total = 0;
  for (const onnx::TensorProto &t : model.graph().initializer())
    total +=
        replaced.count(t.name()) ? replaced[t.name()].size() : t.ByteSizeLong();
  bool external = sourceExternal || total > (uint64_t(2) << 30) - (64 << 20);
  std::string dataName = llvm::sys::path::filename(out).str() + ".data";
  std::vector<std::pair<uint64_t, std::string>> blobs; // offset, bytes
  uint64_t offset = 0;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    std::string raw;
    bool have = false;
    auto it = replaced.find(t.name());
    if (it != replaced.end()) {
      raw = std::move(it->second);
      have = true;
    } else if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
      std::string error;
      if (!readExternal(t, modelDir, raw, error))
        return fail(error);
      have = true;
    } else if (external && t.has_raw_data()) {
      raw = t.raw_data();
      have = true;
    }
    if (!have)
      continue; // stays as it is
    clearData(t);
    if (!external || raw.size() < 1024) {
      t.set_raw_data(std::move(raw));
      continue;
    }
    offset = (offset + 63) / 64 * 64; // aligned, as onnx's own writer can
    t.set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    auto add = [&](const char *key, const std::string &value) {
      auto *kv = t.add_external_data();
      kv->set_key(key);
      kv->set_value(value);
    };
    add("location", dataName);
    add("offset", std::to_string(offset));
    add("length", std::to_string(raw.size()));
    offset += raw.size();
    blobs.emplace_back(offset - raw.size(), std::move(raw));
  }

  // 3. The data file first, then the model that refers to it.
  if (external) {
    llvm::SmallString<256> dataPath(out);
    llvm::sys::path::remove_filename(dataPath);
    llvm::sys::path::append(dataPath, dataName);
    bool ok =
        writeAtomically(std::string(dataPath), [&](llvm::raw_ostream &os) {
          uint64_t at = 0;
          for (auto &[want, raw] : blobs) {
            for (; at < want; ++at)
              os << '\0';
            os.write(raw.data(), raw.size());
            at += raw.size();
          }
        });
    if (!ok)
      return 1;
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return fail("cannot serialize the model for " + out +
                " (larger than 2 GiB even with external data?)");
  if (!writeAtomically(out, [&](llvm::raw_ostream &os) {
        os.write(bytes.data(), bytes.size());
      }))
    return 1;
  llvm::outs() << out << ": " << replaced.size() << " initializers from "
               << reader.stepDir()
               << (external ? ", weights in " + dataName : std::string())
               << "\n";
  return 0;
}

int runConsolidate(const std::string &dir, const std::string &to,
                   const std::string &toOnnx, const std::string &modelPath,
                   uint64_t maxShard, bool withOptimizer) {
  io::CheckpointReader reader;
  Status s = reader.open(dir);
  if (!s.ok())
    return fail(s);
  if (!toOnnx.empty())
    return runToOnnx(reader, toOnnx, modelPath);
  io::ConsolidateWhat what;
  what.includeOptimizer = withOptimizer;
  std::vector<std::string> written;
  s = io::consolidateToSafetensors(reader, to, maxShard, what, &written);
  if (!s.ok())
    return fail(s);
  for (const std::string &w : written)
    llvm::outs() << "wrote " << w << "\n";
  return 0;
}

} // namespace

int runCheckpoint(std::vector<std::string> args) {
  if (args.empty())
    return usageError("no checkpoint command given", kCheckpointUsage);
  std::string command = args[0];
  if (command == "-h" || command == "--help") {
    llvm::outs() << kCheckpointUsage;
    return 0;
  }
  if (command != "list" && command != "verify" && command != "consolidate")
    return usageError("unknown checkpoint command '" + command + "'",
                      kCheckpointUsage);
  args.erase(args.begin());
  std::string dir, to, toOnnx, modelPath;
  uint64_t maxShard = 0;
  bool tensors = false, withOptimizer = false;
  ArgCursor c(std::move(args));
  while (!c.done()) {
    if (c.is("-h") || c.is("--help")) {
      llvm::outs() << kCheckpointUsage;
      return 0;
    }
    if (command == "consolidate") {
      if (auto v = c.take("--to")) {
        to = *v;
        continue;
      }
      if (auto v = c.take("--to-onnx")) {
        toOnnx = *v;
        continue;
      }
      if (auto v = c.take("--model")) {
        modelPath = *v;
        continue;
      }
      if (auto v = c.take("--max-shard-size")) {
        if (!io::parseByteSize(*v, maxShard) || maxShard == 0)
          return usageError("--max-shard-size needs a size such as 5GB or "
                            "500MB, not '" +
                                *v + "'",
                            kCheckpointUsage);
        continue;
      }
      if (c.is("--with-optimizer")) {
        withOptimizer = true;
        c.next();
        continue;
      }
    }
    if (!c.error.empty())
      return usageError(c.error, kCheckpointUsage);
    if (command == "list" && c.is("--tensors")) {
      tensors = true;
      c.next();
      continue;
    }
    if (llvm::StringRef(c.current()).starts_with("-"))
      return usageError("unknown option '" + c.current() +
                            "' for `dsc "
                            "checkpoint " +
                            command + "`",
                        kCheckpointUsage);
    if (!dir.empty())
      return usageError("more than one checkpoint given ('" + dir + "', '" +
                            c.current() + "')",
                        kCheckpointUsage);
    dir = c.current();
    c.next();
  }
  if (dir.empty())
    return usageError("no checkpoint directory given", kCheckpointUsage);
  if (command == "list")
    return runList(dir, tensors);
  if (command == "verify")
    return runVerify(dir);
  if (to.empty() == toOnnx.empty())
    return usageError("consolidate needs one of --to FILE.safetensors and "
                      "--to-onnx FILE.onnx",
                      kCheckpointUsage);
  if (!toOnnx.empty() && (maxShard || withOptimizer))
    return usageError("--max-shard-size and --with-optimizer go with --to",
                      kCheckpointUsage);
  if (!modelPath.empty() && toOnnx.empty())
    return usageError("--model goes with --to-onnx", kCheckpointUsage);
  return runConsolidate(dir, to, toOnnx, modelPath, maxShard, withOptimizer);
}

} // namespace dsc
