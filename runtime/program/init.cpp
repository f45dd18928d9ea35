//===- init.cpp - Initial parameters and buffers (--init) -----------------===//

#include "cpu/kernel_util.h"
#include "program/convert.h"
#include "program/onnx_weights.h"
#include "program/rng.h"
#include "program/run.h"
#include "program/shell.h"

#include <cinttypes>
#include <cstring>

namespace dsc::program {

namespace {

/// t = std * N(0, 1), element i the sequential generator's i-th normal from
/// `rng`, which then stands after the last. Threads over contiguous ranges,
/// each generator skipped to its start: the same bits for any thread count
/// (a billion values took a minute on one core).
void fillNormal(const Tensor &t, double std, Rng &rng) {
  const int64_t n = t.numel();
  const uint64_t start = rng.state();
  cpu::detail::parallelFor(n, 0, int64_t(1) << 20, [&](int64_t b, int64_t e) {
    Rng r(0);
    r.setState(start);
    r.skip(2 * uint64_t(b));
    std::vector<double> v(std::min<int64_t>(e - b, int64_t(1) << 16));
    for (int64_t done = b; done < e;) {
      int64_t k = std::min<int64_t>(int64_t(v.size()), e - done);
      for (int64_t j = 0; j < k; ++j)
        v[j] = std * r.normal();
      convertElements(v.data(), DType::F64,
                      static_cast<char *>(t.data) + done * dtypeSize(t.dtype),
                      t.dtype, size_t(k));
      done += k;
    }
  });
  rng.setState(start);
  rng.skip(2 * uint64_t(n));
}

} // namespace

Status initWeights(const ProgramSpec &spec, const Options &o,
                   const std::vector<InitTarget> &targets, std::string &what) {
  std::string source =
      o.init.empty() ? (spec.modelPath ? spec.modelPath : "") : o.init;
  if (targets.empty()) {
    what = "none needed";
    return Status();
  }

  // The model, opened when first needed (default init, or buffers that
  // another source does not hold).
  std::unique_ptr<OnnxWeights> model;
  auto fromModel = [&](const InitTarget &a, const std::string &path,
                       const std::string &why) -> Status {
    if (!model) {
      model = std::make_unique<OnnxWeights>();
      if (Status s = model->open(path); !s.ok())
        return Status::error(s.code(), s.message() + why +
                                           "; give --init FILE.onnx, --init "
                                           "FILE.safetensors or --init random");
    }
    if (!model->find(a.name))
      return fail(path + " has no initializer for " + argRoleName(a.role) +
                  " '" + a.name + "' " + describeSpec(a.type) + why);
    return model->read(a.name, a.dst);
  };
  std::string modelPath = spec.modelPath ? spec.modelPath : "";

  // random[:SEED]
  if (source == "random" || source.rfind("random:", 0) == 0) {
    uint64_t seed = o.seed;
    if (source.size() > 6 && !parseU64(source.substr(7), seed))
      return fail("--init random:SEED expects an integer seed, not '" +
                  source.substr(7) + "'");
    Rng rng(seed, /*stream=*/1);
    int fromModelCount = 0;
    for (const InitTarget &a : targets) {
      const Tensor &t = a.dst;
      switch (randomInitRule(a.role, a.name, a.type)) {
      case RandomInit::Normal:
        fillNormal(t, 0.02, rng);
        break;
      case RandomInit::Zeros:
        std::memset(t.data, 0, t.nbytes());
        break;
      case RandomInit::Ones:
        fillValue(t, 1.0);
        break;
      case RandomInit::FromModel:
        if (Status s = fromModel(a, modelPath,
                                 " (--init random reads constant buffers "
                                 "such as masks from the model)");
            !s.ok())
          return s;
        ++fromModelCount;
        break;
      }
    }
    what = format("random (seed %" PRIu64 ")", seed);
    if (fromModelCount)
      what += format(", %d constant buffers from the model", fromModelCount);
    return Status();
  }

  // FILE.safetensors
  if (endsWith(lower(source), ".safetensors")) {
    io::SafetensorsFile file;
    if (Status s = file.read(source); !s.ok())
      return Status::error(s.code(), "--init: " + s.message());
    std::vector<std::string> missing;
    for (const InitTarget &t : targets)
      if (t.role == ArgRole::Param && !file.contains(t.name))
        missing.push_back(t.name);
    if (!missing.empty()) {
      std::string list;
      for (size_t k = 0; k < missing.size() && k < 5; ++k)
        list += (k ? ", '" : "'") + missing[k] + "'";
      if (missing.size() > 5)
        list += format(" and %zu more", missing.size() - 5);
      return fail("--init " + source + " has no tensor for parameter " + list);
    }
    int fromModelCount = 0;
    for (const InitTarget &a : targets) {
      if (!file.contains(a.name)) { // a buffer
        if (Status s = fromModel(a, modelPath,
                                 " (buffer '" + std::string(a.name) +
                                     "' is not in " + source + ")");
            !s.ok())
          return s;
        ++fromModelCount;
        continue;
      }
      Tensor src;
      if (Status s = file.get(a.name, src); !s.ok())
        return s;
      if (Status s = copyInto(src, a.dst,
                              "--init " + source + ": " + argRoleName(a.role) +
                                  " '" + a.name + "'");
          !s.ok())
        return s;
    }
    what = source;
    if (fromModelCount)
      what += format(" (%d buffers from the model)", fromModelCount);
    return Status();
  }

  // FILE.onnx (the default: the model compiled from)
  if (source.empty())
    return fail("the program does not know its model; give --init FILE.onnx, "
                "--init FILE.safetensors or --init random");
  std::string why = o.init.empty() ? " (the model the program was compiled "
                                     "from; its initializers are the initial "
                                     "weights)"
                                   : "";
  for (const InitTarget &a : targets)
    if (Status s = fromModel(a, source, why); !s.ok())
      return s;
  what = source;
  return Status();
}

//===----------------------------------------------------------------------===//
// Ranks and buckets
//===----------------------------------------------------------------------===//

/// One rank's tensors and scratch. Its Input arguments are views of its
/// rows of the global batch; everything else is its own.
/// A rank's arguments, results and arena in device memory (a program
/// compiled for a device): the host ones keep the initial values and

/// The full type of every parameter of every bucket: BucketEntry's shape,
/// else the model's initializer of that name, else [numel].
std::vector<std::vector<TensorSpec>> bucketShapes(const ProgramSpec &spec,
                                                  const std::string &model) {
  std::vector<std::vector<TensorSpec>> shapes(size_t(spec.numBuckets));
  const std::string &modelFile = model;
  std::unique_ptr<OnnxWeights> onnx;
  bool tried = false;
  for (int b = 0; b < spec.numBuckets; ++b) {
    const BucketSpec &bk = spec.buckets[b];
    for (int e = 0; e < bk.numEntries; ++e) {
      const BucketEntry &en = bk.entries[e];
      TensorSpec t{bk.dtype, 1, {en.numel}};
      if (en.rank >= 0) {
        t.rank = en.rank;
        for (int d = 0; d < en.rank; ++d)
          t.shape[d] = en.shape[d];
      } else {
        if (!tried) {
          tried = true;
          onnx = std::make_unique<OnnxWeights>();
          if (modelFile.empty() || !onnx->open(modelFile).ok())
            onnx.reset();
        }
        const OnnxInitializer *init = onnx ? onnx->find(en.param) : nullptr;
        if (init && init->numel() == en.numel &&
            init->dims.size() <= size_t(kMaxRank)) {
          t.rank = int(init->dims.size());
          for (int d = 0; d < t.rank; ++d)
            t.shape[d] = init->dims[size_t(d)];
        }
      }
      shapes[size_t(b)].push_back(t);
    }
  }
  return shapes;
}

/// A view of each parameter of bucket `b` in the packed bucket at `flat`.
void unpackBucket(const ProgramSpec &spec,
                  const std::vector<std::vector<TensorSpec>> &shapes, int b,
                  void *flat, std::vector<io::NamedTensor> &out) {
  const BucketSpec &bk = spec.buckets[b];
  size_t es = dtypeSize(bk.dtype);
  for (int e = 0; e < bk.numEntries; ++e) {
    const BucketEntry &en = bk.entries[e];
    const TensorSpec &t = shapes[size_t(b)][size_t(e)];
    out.push_back(
        {en.param,
         Tensor::of(static_cast<char *>(flat) + size_t(en.offset) * es,
                    bk.dtype, I64s(t.shape, size_t(t.rank)))});
  }
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

RandomInit randomInitRule(ArgRole role, const std::string &name,
                          const TensorSpec &type) {
  std::string n = lower(name);
  if (role == ArgRole::Buffer) {
    if (endsWith(n, "running_var"))
      return RandomInit::Ones;
    if (endsWith(n, "running_mean") || endsWith(n, "num_batches_tracked"))
      return RandomInit::Zeros;
    return RandomInit::FromModel;
  }
  if (!isFloat(type.dtype))
    return RandomInit::Zeros;
  if (type.rank >= 2)
    return RandomInit::Normal;
  if (endsWith(n, "bias") || endsWith(n, "beta"))
    return RandomInit::Zeros;
  if (endsWith(n, "weight") || endsWith(n, "scale") || endsWith(n, "gamma"))
    return RandomInit::Ones;
  return RandomInit::Zeros;
}

} // namespace dsc::program
