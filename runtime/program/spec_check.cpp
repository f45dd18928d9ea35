//===- spec_check.cpp - The spec the generated code hands over ------------===//
//
// A malformed spec is a code-generation bug, reported as an error naming
// what is inconsistent, never a crash.
//
//===----------------------------------------------------------------------===//

#include "program/shell.h"

#include <cstring>
#include <map>
#include <set>

namespace dsc::program {

namespace {

Status bug(const std::string &why) {
  return fail("program spec: " + why +
              " (the generated code is inconsistent; please report it as "
              "a dsc bug)");
}

using ArgIndex = std::map<std::pair<int, std::string>, int>; // (role, name)

/// A ComputeCopy argument and its Param: the same name and shape (a
/// stage-3 Param is this rank's bucket shard, and its copy that shard
/// rounded, unmarked: no bucket holds 16-bit state), the copy bf16 or f16.
/// Sets copy.second to the Param.
Status pairComputeCopy(const ProgramSpec &spec, const ArgIndex &argIndex,
                       std::pair<int, int> &copy) {
  const ArgSpec &a = spec.args[copy.first];
  std::string what = std::string("compute copy '") + a.name + "'";
  auto it = argIndex.find({int(ArgRole::Param), a.name});
  if (it == argIndex.end())
    return bug(what + " has no parameter of that name");
  const ArgSpec &p = spec.args[it->second];
  if (a.bucket >= 0)
    return bug(what + " is marked as a bucket shard; a compute copy is "
                      "sharded only through its parameter");
  if (a.type.dtype != DType::BF16 && a.type.dtype != DType::F16)
    return bug(what + " is " + describeSpec(a.type) +
               "; a compute copy is bf16 or f16");
  TensorSpec expected = p.type;
  expected.dtype = a.type.dtype;
  if (!sameType(a.type, expected))
    return bug(what + " is " + describeSpec(a.type) + " but its parameter is " +
               describeSpec(p.type));
  copy.second = it->second;
  return Status();
}

/// The argument role a state update of role `r` updates.
ArgRole updatedRole(ResultRole r) {
  switch (r) {
  case ResultRole::OptState:
    return ArgRole::OptState;
  case ResultRole::BufferUpdate:
    return ArgRole::Buffer;
  case ResultRole::Scaler:
    return ArgRole::Scaler;
  case ResultRole::ComputeCopy:
    return ArgRole::ComputeCopy;
  default:
    return ArgRole::Param;
  }
}

} // namespace

Status checkSpec(const ProgramSpec &spec, Layout &layout) {
  if (!spec.trainStep)
    return bug("no train step function");
  if (spec.numArgs < 0 || (spec.numArgs > 0 && !spec.args) ||
      spec.numResults < 0 || (spec.numResults > 0 && !spec.results) ||
      spec.numHypers < 0 || (spec.numHypers > 0 && !spec.hypers))
    return bug("argument, result or hyperparameter lists are missing");
  if (spec.microBatch < 1 || spec.accumSteps < 1 || spec.tokensPerExample < 1)
    return bug("microBatch, accumSteps and tokensPerExample must be >= 1");
  if (!spec.optimizer)
    return bug("no optimizer name");
  auto checkType = [&](const TensorSpec &t, const std::string &what) {
    if (t.rank < 0 || t.rank > kMaxRank)
      return bug(what + " has rank " + std::to_string(t.rank));
    int64_t n = 1;
    for (int i = 0; i < t.rank; ++i) {
      if (t.shape[i] < 0)
        return bug(what + " has a negative dim");
      if (t.shape[i] && n > (int64_t(1) << 50) / t.shape[i])
        return bug(what + " is too large");
      n *= t.shape[i];
    }
    return Status();
  };
  ArgIndex argIndex;
  std::set<std::string> onnxNames; // params/buffers/inputs
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    if (!a.name)
      return bug("argument " + std::to_string(i) + " has no name");
    std::string what = std::string(argRoleName(a.role)) + " '" + a.name + "'";
    if (Status s = checkType(a.type, what); !s.ok())
      return s;
    if (!argIndex.emplace(std::make_pair(int(a.role), a.name), i).second)
      return bug(what + " appears twice");
    switch (a.role) {
    case ArgRole::Param:
    case ArgRole::Buffer:
    case ArgRole::Input:
      if (!onnxNames.insert(a.name).second)
        return bug("the name '" + std::string(a.name) +
                   "' is given to two arguments");
      (a.role == ArgRole::Param    ? layout.params
       : a.role == ArgRole::Buffer ? layout.buffers
                                   : layout.inputs)
          .push_back(i);
      break;
    case ArgRole::OptState:
      layout.optStates.push_back(i);
      break;
    case ArgRole::ComputeCopy:
      layout.computeCopies.push_back({i, -1}); // its Param: below
      break;
    case ArgRole::Scaler:
      if (!spec.lossScaler.enabled)
        return bug(what + " without a loss scaler");
      if (numelOf(a.type) != 1)
        return bug(what + " must be a scalar, not " + describeSpec(a.type));
      if (std::strcmp(a.name, "loss_scale") == 0)
        layout.lossScale = i;
      else if (std::strcmp(a.name, "hysteresis") == 0)
        layout.hysteresis = i;
      else if (std::strcmp(a.name, "good_steps") != 0 &&
               std::strcmp(a.name, "applied_steps") != 0)
        return bug(what + " is not a state of the loss scaler");
      break;
    case ArgRole::Hyper:
    case ArgRole::Step:
    case ArgRole::Seed:
      if (numelOf(a.type) != 1)
        return bug(what + " must be a scalar, not " + describeSpec(a.type));
      if (a.role == ArgRole::Hyper && !isFloat(a.type.dtype))
        return bug(what + " must be a float, not " + describeSpec(a.type));
      if (a.role != ArgRole::Hyper &&
          (isFloat(a.type.dtype) || a.type.dtype == DType::Bool))
        return bug(what + " must be an integer, not " + describeSpec(a.type));
      break;
    }
  }
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    if (a.role != ArgRole::Hyper)
      continue;
    bool found = false;
    for (int h = 0; h < spec.numHypers; ++h)
      found = found || (spec.hypers[h].name &&
                        std::strcmp(spec.hypers[h].name, a.name) == 0);
    if (!found)
      return bug("hyperparameter '" + std::string(a.name) + "' has no default");
  }
  for (int h = 0; h < spec.numHypers; ++h)
    if (!spec.hypers[h].name || !*spec.hypers[h].name)
      return bug("hyperparameter default " + std::to_string(h) +
                 " has no name");
  for (auto &copy : layout.computeCopies)
    if (Status s = pairComputeCopy(spec, argIndex, copy); !s.ok())
      return s;
  for (int i = 0; i < spec.numResults; ++i) {
    const ResultSpec &r = spec.results[i];
    if (!r.name)
      return bug("result " + std::to_string(i) + " has no name");
    std::string what =
        std::string(resultRoleName(r.role)) + " result '" + r.name + "'";
    if (Status s = checkType(r.type, what); !s.ok())
      return s;
    auto scalar = [&](int &slot) {
      if (slot >= 0)
        return bug("two " + std::string(resultRoleName(r.role)) + " results");
      if (numelOf(r.type) != 1 || !isFloat(r.type.dtype))
        return bug(what + " must be a float scalar, not " +
                   describeSpec(r.type));
      slot = i;
      return Status();
    };
    auto argOf = [&](ArgRole role) -> int {
      auto it = argIndex.find({int(role), r.name});
      return it == argIndex.end() ? -1 : it->second;
    };
    Status s;
    int arg = -1;
    switch (r.role) {
    case ResultRole::Loss:
      // The first is the loss; further graph outputs are not reported.
      if (layout.loss < 0)
        s = scalar(layout.loss);
      break;
    case ResultRole::GradNorm:
      s = scalar(layout.gradNorm);
      break;
    case ResultRole::GradNormalizer:
      s = scalar(layout.gradNormalizer);
      break;
    case ResultRole::Lr:
      s = scalar(layout.lr);
      break;
    case ResultRole::Overflow:
      s = scalar(layout.overflow);
      break;
    case ResultRole::Grad:
      if (r.bucket < 0 && argOf(ArgRole::Param) < 0)
        return bug(what + " has no parameter of that name");
      layout.grads.push_back(i);
      break;
    case ResultRole::Param:
    case ResultRole::OptState:
    case ResultRole::BufferUpdate:
    case ResultRole::Scaler:
    case ResultRole::ComputeCopy:
      if (r.role == ResultRole::Scaler) {
        layout.scalerResults.push_back(i);
        if (std::strcmp(r.name, "loss_scale") == 0)
          layout.lossScaleResult = i;
        else if (std::strcmp(r.name, "hysteresis") == 0)
          layout.hysteresisResult = i;
      }
      arg = argOf(updatedRole(r.role));
      if (arg < 0)
        return bug(what + " has no argument of that name");
      if (!sameType(r.type, spec.args[arg].type))
        return bug(what + " is " + describeSpec(r.type) +
                   " but its argument is " + describeSpec(spec.args[arg].type));
      for (auto *list : {&layout.updates, &layout.inPlace})
        for (auto &u : *list)
          if (u.second == arg)
            return bug(what + " is returned twice");
      if (r.inPlaceOf >= 0 && r.inPlaceOf != arg)
        return bug(what + " is computed in place of argument " +
                   std::to_string(r.inPlaceOf) + ", not of its own (" +
                   std::to_string(arg) + ")");
      if (r.role == ResultRole::ComputeCopy && r.inPlaceOf != arg)
        return bug(what + " is not computed in place of its argument; a "
                          "compute copy always is");
      (r.inPlaceOf >= 0 ? layout.inPlace : layout.updates).push_back({i, arg});
      break;
    }
    if (!s.ok())
      return s;
    if (r.inPlaceOf >= 0 && arg < 0)
      return bug(what + " is computed in place of an argument but updates "
                        "none");
  }
  if (layout.loss < 0)
    return bug("no loss result");
  if (spec.lossScaler.enabled &&
      (layout.overflow < 0 ||
       (spec.lossScaler.dynamic && layout.lossScale < 0)))
    return bug("a loss scaler without its overflow flag or scale");

  // Sharding: the grid, the buckets, the shards, the manifest.
  int64_t W = spec.worldSize <= 0 ? 1 : spec.worldSize;
  int64_t G = spec.groupSize <= 0 ? W : spec.groupSize;
  if (W > 4096 || G > W || W % G != 0)
    return bug("world size " + std::to_string(W) + " and group size " +
               std::to_string(G) +
               " (the group size must divide the world "
               "size)");
  if (spec.stage < 0 || spec.stage > 3)
    return bug("ZeRO stage " + std::to_string(spec.stage));
  if (spec.numBuckets < 0 || (spec.numBuckets > 0 && !spec.buckets) ||
      spec.numCollectives < 0 || (spec.numCollectives > 0 && !spec.collectives))
    return bug("bucket or collective lists are missing");
  layout.worldSize = int(W);
  layout.groupSize = int(G);
  for (int b = 0; b < spec.numBuckets; ++b) {
    const BucketSpec &bk = spec.buckets[b];
    std::string what = "bucket " + std::to_string(b);
    if (!bk.name || bk.numEntries < 0 || (bk.numEntries > 0 && !bk.entries))
      return bug(what + " has no name or no entry list");
    if (bk.paddedNumel < 0 || bk.paddedNumel % G != 0)
      return bug(
          what + " '" + bk.name + "' has " + std::to_string(bk.paddedNumel) +
          " elements, not a multiple of the group size " + std::to_string(G));
    for (int e = 0; e < bk.numEntries; ++e) {
      const BucketEntry &en = bk.entries[e];
      if (!en.param || en.offset < 0 || en.numel < 0 ||
          en.offset + en.numel > bk.paddedNumel)
        return bug(what + " '" + bk.name + "': entry " + std::to_string(e) +
                   " lies outside the bucket");
      if (en.rank > kMaxRank)
        return bug(what + " '" + bk.name + "': parameter '" + en.param +
                   "' has rank " + std::to_string(en.rank));
      if (en.rank >= 0) {
        int64_t n = 1;
        for (int d = 0; d < en.rank; ++d)
          n *= en.shape[d];
        if (n != en.numel)
          return bug(what + " '" + bk.name + "': parameter '" + en.param +
                     "' has " + std::to_string(en.numel) +
                     " elements but its shape holds " + std::to_string(n));
      }
    }
  }
  auto checkShard = [&](int bucket, const TensorSpec &t,
                        const std::string &what) -> Status {
    if (bucket < 0)
      return Status();
    if (bucket >= spec.numBuckets)
      return bug(what + " names bucket " + std::to_string(bucket) + " of " +
                 std::to_string(spec.numBuckets));
    const BucketSpec &bk = spec.buckets[bucket];
    if (numelOf(t) != bk.paddedNumel / G || t.dtype != bk.dtype)
      return bug(what + " is " + describeSpec(t) + " but a shard of bucket '" +
                 bk.name + "' is " + dtypeName(bk.dtype) + "[" +
                 std::to_string(bk.paddedNumel / G) + "]");
    return Status();
  };
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    std::string what = std::string(argRoleName(a.role)) + " '" + a.name + "'";
    if (a.bucket >= 0 && a.role != ArgRole::Param &&
        a.role != ArgRole::OptState)
      return bug(what + " is sharded; only parameters and optimizer state "
                        "can be");
    if (Status s = checkShard(a.bucket, a.type, what); !s.ok())
      return s;
    if (a.role == ArgRole::Input && W > 1 && a.type.rank < 1)
      return bug(what + " is a scalar; a batch input of several ranks needs "
                        "a batch dimension");
    if (a.role == ArgRole::Input && a.host)
      return bug(what + " is marked host; batch inputs cannot be");
    if (!a.nvme)
      continue;
    if (a.role != ArgRole::Param && a.role != ArgRole::OptState)
      return bug(what + " is marked nvme; only parameters and optimizer "
                        "state can be");
    if (!a.host)
      return bug(what + " is marked nvme but not host; state in an NVMe "
                        "file is staged through host memory");
    layout.nvme.push_back(i);
  }
  for (int i = 0; i < spec.numResults; ++i) {
    const ResultSpec &r = spec.results[i];
    std::string what =
        std::string(resultRoleName(r.role)) + " result '" + r.name + "'";
    if (r.bucket >= 0 && r.role != ResultRole::Param &&
        r.role != ResultRole::OptState && r.role != ResultRole::Grad)
      return bug(what + " is sharded; only parameters, optimizer state and "
                        "gradients can be");
    if (Status s = checkShard(r.bucket, r.type, what); !s.ok())
      return s;
    if (r.nvme && r.role != ResultRole::Param && r.role != ResultRole::OptState)
      return bug(what + " is marked nvme; only updated parameters and "
                        "optimizer state can be");
  }
  layout.aliasOf.assign(size_t(spec.numResults), -1);
  for (const auto &[r, a] : layout.inPlace)
    layout.aliasOf[size_t(r)] = a;
  for (auto *list : {&layout.updates, &layout.inPlace})
    for (const auto &[r, a] : *list) {
      std::string what = std::string(resultRoleName(spec.results[r].role)) +
                         " result '" + spec.results[r].name + "'";
      if (spec.results[r].bucket != spec.args[a].bucket)
        return bug(what + " and its argument are in different buckets");
      if (spec.results[r].host != spec.args[a].host)
        return bug(what + " and its argument are not both in host memory");
      if (spec.results[r].nvme != spec.args[a].nvme)
        return bug(what + " and its argument are not both in NVMe files");
      if (spec.results[r].nvme && spec.results[r].inPlaceOf < 0)
        return bug(what + " is in an NVMe file but not computed in place of "
                          "its argument; state in a file always is");
    }
  for (int c = 0; c < spec.numCollectives; ++c)
    if (!spec.collectives[c].kind)
      return bug("collective " + std::to_string(c) +
                 " of the manifest has "
                 "no kind");
  return Status();
}

//===----------------------------------------------------------------------===//

} // namespace dsc::program
