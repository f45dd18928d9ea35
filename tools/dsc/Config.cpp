//===- Config.cpp - DeepSpeed ds_config.json onto `dsc compile` flags -----===//
//
// Two steps: every object of the file is checked against a table of the keys
// DeepSpeed knows (unknown keys warn with the nearest known one, ill-typed
// values and set-but-unsupported features are errors), then the keys dsc
// implements become compile flags. Defaults are DeepSpeed's code, not its
// docs, where the two disagree (cited beside each). docs/config.md has the
// whole mapping.
//
//===----------------------------------------------------------------------===//
#include "tools/dsc/Config.h"
#include "tools/dsc/Common.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace dsc {
namespace {

namespace json = llvm::json;
using llvm::StringRef;

enum class Type { Bool, Number, Count, String, Object, Pair };

/// What dsc does with a key it knows.
enum class Use {
  Map,    // becomes compile flags (Resolver below)
  Accept, // what dsc does anyway, or of no effect on the compiled step
  Warn,   // accepted with a warning when set: dsc does not do it yet
  Refuse, // an error when set (true, an enabled block, any other value)
};

struct Key {
  const char *name;
  Type type;
  Use use;
  const char *why; // Warn / Refuse: what is missing and what to do
  bool allowsAuto; // HF Transformers resolves "auto" for it
};

constexpr bool kAuto = true;

// DeepSpeed's keys, from deepspeed/runtime/constants.py, runtime/config.py,
// runtime/zero/config.py, runtime/fp16 and runtime/lr_schedules.py.
const Key kTopKeys[] = {
    {"train_batch_size", Type::Count, Use::Map, "", kAuto},
    {"train_micro_batch_size_per_gpu", Type::Count, Use::Map, "", kAuto},
    {"gradient_accumulation_steps", Type::Count, Use::Map, "", kAuto},
    {"gradient_clipping", Type::Number, Use::Map, "", kAuto},
    {"steps_per_print", Type::Count, Use::Map, "", false},
    {"wall_clock_breakdown", Type::Bool, Use::Map, "", false},
    {"memory_breakdown", Type::Bool, Use::Warn,
     "not supported yet; `dsc compile --report` gives the memory plan", false},
    {"dump_state", Type::Bool, Use::Warn, "not supported; ignored", false},
    {"zero_optimization", Type::Object, Use::Map, "", false},
    {"fp16", Type::Object, Use::Map, "", false},
    {"bf16", Type::Object, Use::Map, "", false},
    {"data_types", Type::Object, Use::Map, "", false},
    {"communication_data_type", Type::String, Use::Map, "", false},
    {"optimizer", Type::Object, Use::Map, "", false},
    {"scheduler", Type::Object, Use::Map, "", false},
    {"zero_allow_untested_optimizer", Type::Bool, Use::Accept, "", false},
    {"zero_force_ds_cpu_optimizer", Type::Bool, Use::Accept, "", false},
    {"fp32_allreduce", Type::Bool, Use::Accept, "", false},
    {"activation_checkpointing", Type::Object, Use::Map, "", false},
    {"tensorboard", Type::Object, Use::Map, "", false},
    {"csv_monitor", Type::Object, Use::Map, "", false},
    {"wandb", Type::Object, Use::Refuse,
     "Weights & Biases is not supported; remove the block or set "
     "\"enabled\": false",
     false},
    {"comet", Type::Object, Use::Refuse,
     "Comet is not supported; remove the block or set \"enabled\": false",
     false},
    {"flops_profiler", Type::Object, Use::Warn, "not supported; ignored",
     false},
    {"comms_logger", Type::Object, Use::Warn,
     "not supported; the collectives are listed in PROGRAM.collectives.json",
     false},
    {"checkpoint", Type::Object, Use::Warn,
     "checkpoints are not written yet; ignored", false},
    {"aio", Type::Object, Use::Accept, "", false},
    {"amp", Type::Object, Use::Refuse,
     "Apex AMP is not supported; use \"bf16\" or \"fp16\"", false},
    {"prescale_gradients", Type::Bool, Use::Refuse, "not supported", false},
    {"gradient_predivide_factor", Type::Number, Use::Map, "", false},
    {"sparse_gradients", Type::Bool, Use::Refuse, "not supported", false},
    {"sparse_attention", Type::Object, Use::Refuse, "not supported", false},
    {"pipeline", Type::Object, Use::Refuse,
     "pipeline parallelism is not supported", false},
    {"elasticity", Type::Object, Use::Refuse, "not supported", false},
    {"compression_training", Type::Object, Use::Refuse, "not supported", false},
    {"autotuning", Type::Object, Use::Refuse, "not supported", false},
    {"hybrid_engine", Type::Object, Use::Refuse,
     "the hybrid (training + inference) engine is not supported", false},
};

const Key kZeroKeys[] = {
    {"stage", Type::Count, Use::Map, "", false},
    {"contiguous_gradients", Type::Bool, Use::Accept, "", false},
    {"reduce_scatter", Type::Bool, Use::Accept, "", false},
    {"reduce_bucket_size", Type::Count, Use::Map, "", kAuto},
    {"use_multi_rank_bucket_allreduce", Type::Bool, Use::Accept, "", false},
    {"allgather_partitions", Type::Bool, Use::Accept, "", false},
    {"allgather_bucket_size", Type::Count, Use::Map, "", false},
    {"overlap_comm", Type::Bool, Use::Accept, "", false},
    {"load_from_fp32_weights", Type::Bool, Use::Accept, "", false},
    {"elastic_checkpoint", Type::Bool, Use::Accept, "", false},
    {"offload_param", Type::Object, Use::Map, "", false},
    {"offload_optimizer", Type::Object, Use::Map, "", false},
    {"sub_group_size", Type::Count, Use::Accept, "", false},
    {"cpu_offload", Type::Bool, Use::Refuse,
     "offload is not supported yet; remove the key", false},
    {"cpu_offload_param", Type::Bool, Use::Refuse,
     "offload is not supported yet; remove the key", false},
    {"cpu_offload_use_pin_memory", Type::Bool, Use::Accept, "", false},
    {"stage3_prefetch_bucket_size", Type::Count, Use::Map, "", kAuto},
    {"prefetch_bucket_size", Type::Count, Use::Map, "", kAuto},
    {"stage3_param_persistence_threshold", Type::Count, Use::Map, "", kAuto},
    {"param_persistence_threshold", Type::Count, Use::Map, "", kAuto},
    {"stage3_max_live_parameters", Type::Count, Use::Map, "", false},
    {"max_live_parameters", Type::Count, Use::Map, "", false},
    {"stage3_model_persistence_threshold", Type::Count, Use::Accept, "", false},
    {"model_persistence_threshold", Type::Count, Use::Accept, "", false},
    {"stage3_max_reuse_distance", Type::Count, Use::Accept, "", false},
    {"max_reuse_distance", Type::Count, Use::Accept, "", false},
    {"stage3_gather_16bit_weights_on_model_save", Type::Bool, Use::Accept, "",
     false},
    {"gather_16bit_weights_on_model_save", Type::Bool, Use::Accept, "", false},
    {"stage3_gather_fp16_weights_on_model_save", Type::Bool, Use::Accept, "",
     false},
    {"stage3_module_granularity_threshold", Type::Count, Use::Accept, "",
     false},
    {"module_granularity_threshold", Type::Count, Use::Accept, "", false},
    {"stage3_use_all_reduce_for_fetch_params", Type::Bool, Use::Accept, "",
     false},
    {"use_all_reduce_for_fetch_params", Type::Bool, Use::Accept, "", false},
    {"ignore_unused_parameters", Type::Bool, Use::Accept, "", false},
    {"legacy_stage1", Type::Bool, Use::Refuse, "not supported", false},
    {"round_robin_gradients", Type::Bool, Use::Accept, "", false},
    {"zero_hpz_partition_size", Type::Count, Use::Map, "", false},
    {"zero_quantized_weights", Type::Bool, Use::Refuse,
     "ZeRO++ quantized weights are not supported", false},
    {"zero_quantized_nontrainable_weights", Type::Bool, Use::Refuse,
     "ZeRO++ quantized weights are not supported", false},
    {"zero_quantized_gradients", Type::Bool, Use::Refuse,
     "ZeRO++ quantized gradients are not supported", false},
    {"zeropp_loco_param", Type::Object, Use::Refuse, "not supported", false},
    {"mics_shard_size", Type::Number, Use::Map, "", false},
    {"mics_hierarchical_params_gather", Type::Bool, Use::Refuse,
     "MiCS is not supported", false},
    {"memory_efficient_linear", Type::Bool, Use::Accept, "", false},
    {"pipeline_loading_checkpoint", Type::Bool, Use::Accept, "", false},
    {"override_module_apply", Type::Bool, Use::Accept, "", false},
};

const Key kOffloadKeys[] = {
    {"device", Type::String, Use::Map, "", false},
    {"pin_memory", Type::Bool, Use::Accept, "", false},
    {"nvme_path", Type::String, Use::Accept, "", false},
    {"buffer_count", Type::Count, Use::Accept, "", false},
    {"buffer_size", Type::Count, Use::Accept, "", false},
    {"max_in_cpu", Type::Count, Use::Accept, "", false},
    {"fast_init", Type::Bool, Use::Accept, "", false},
    {"ratio", Type::Number, Use::Map, "", false},
    {"pipeline", Type::Bool, Use::Accept, "", false},
    {"pipeline_read", Type::Bool, Use::Accept, "", false},
    {"pipeline_write", Type::Bool, Use::Accept, "", false},
};

const Key kFp16Keys[] = {
    {"enabled", Type::Bool, Use::Map, "", kAuto},
    {"loss_scale", Type::Number, Use::Map, "", false},
    {"initial_scale_power", Type::Count, Use::Map, "", false},
    {"loss_scale_window", Type::Count, Use::Map, "", false},
    {"hysteresis", Type::Count, Use::Map, "", false},
    {"min_loss_scale", Type::Number, Use::Map, "", false},
    {"consecutive_hysteresis", Type::Bool, Use::Refuse,
     "not supported: the hysteresis is restored after loss_scale_window "
     "good steps, as by default",
     false},
    {"auto_cast", Type::Bool, Use::Refuse,
     "not supported: dsc casts per op class (docs/numerics.md)", false},
    {"fp16_master_weights_and_grads", Type::Bool, Use::Refuse,
     "not supported: masters and gradients are fp32", false},
};

const Key kBf16Keys[] = {
    {"enabled", Type::Bool, Use::Map, "", kAuto},
    {"immediate_grad_update", Type::Bool, Use::Accept, "", false},
};

// deepspeed/monitor/config.py: both blocks have these three.
const Key kMonitorKeys[] = {
    {"enabled", Type::Bool, Use::Map, "", false},
    {"output_path", Type::String, Use::Map, "", false},
    {"job_name", Type::String, Use::Map, "", false},
};

// DeepSpeed checkpoints the layers the model's code wraps; the compiler's
// per-block recomputation (--recompute full) checkpoints every repeated
// block. Its placement options have no counterpart.
const Key kActivationCheckpointingKeys[] = {
    {"partition_activations", Type::Bool, Use::Accept, "", false},
    {"contiguous_memory_optimization", Type::Bool, Use::Accept, "", false},
    {"number_checkpoints", Type::Count, Use::Accept, "", false},
    {"synchronize_checkpoint_boundary", Type::Bool, Use::Accept, "", false},
    {"profile", Type::Bool, Use::Accept, "", false},
    {"cpu_checkpointing", Type::Bool, Use::Warn,
     "not mapped: the checkpoints stay in GPU memory (dsc has no offload "
     "yet)",
     false},
};

const Key kDataTypeKeys[] = {
    {"grad_accum_dtype", Type::String, Use::Map, "", false},
};

const Key kOptimizerKeys[] = {
    {"type", Type::String, Use::Map, "", false},
    {"params", Type::Object, Use::Map, "", false},
};

const Key kOptimizerParamKeys[] = {
    {"lr", Type::Number, Use::Map, "", kAuto},
    {"betas", Type::Pair, Use::Map, "", kAuto},
    {"eps", Type::Number, Use::Map, "", kAuto},
    {"weight_decay", Type::Number, Use::Map, "", kAuto},
    {"momentum", Type::Number, Use::Map, "", false},
    {"dampening", Type::Number, Use::Map, "", false},
    {"nesterov", Type::Bool, Use::Map, "", false},
    {"adam_w_mode", Type::Bool, Use::Map, "", false},
    {"torch_adam", Type::Bool, Use::Map, "", false},
    {"fused", Type::Bool, Use::Accept, "", false},
    {"foreach", Type::Bool, Use::Accept, "", false},
    {"amsgrad", Type::Bool, Use::Refuse, "AMSGrad is not supported", false},
    {"bias_correction", Type::Bool, Use::Map, "", false},
};

const Key kSchedulerKeys[] = {
    {"type", Type::String, Use::Map, "", false},
    {"params", Type::Object, Use::Map, "", false},
};

const Key kSchedulerParamKeys[] = {
    {"warmup_min_lr", Type::Number, Use::Map, "", kAuto},
    {"warmup_max_lr", Type::Number, Use::Map, "", kAuto},
    {"warmup_num_steps", Type::Count, Use::Map, "", kAuto},
    {"warmup_type", Type::String, Use::Map, "", false},
    {"total_num_steps", Type::Count, Use::Map, "", kAuto},
    {"warmup_min_ratio", Type::Number, Use::Map, "", false},
    {"cos_min_ratio", Type::Number, Use::Map, "", false},
    {"last_batch_iteration", Type::Number, Use::Accept, "", false},
};

const char *typeName(Type t) {
  switch (t) {
  case Type::Bool:
    return "a boolean (true or false)";
  case Type::Number:
    return "a number";
  case Type::Count:
    return "a non-negative integer";
  case Type::String:
    return "a string";
  case Type::Object:
    return "an object";
  case Type::Pair:
    return "a list of two numbers";
  }
  llvm_unreachable("unknown type");
}

bool isCount(double d) { return d >= 0 && d == std::floor(d) && d < 9.0e18; }

bool hasType(const json::Value &v, Type t) {
  switch (t) {
  case Type::Bool:
    return v.getAsBoolean().has_value();
  case Type::Number:
    return v.getAsNumber().has_value();
  case Type::Count: {
    auto d = v.getAsNumber();
    return d && isCount(*d);
  }
  case Type::String:
    return v.getAsString().has_value();
  case Type::Object:
    return v.getAsObject() != nullptr;
  case Type::Pair: {
    const json::Array *a = v.getAsArray();
    return a && a->size() == 2 && (*a)[0].getAsNumber() &&
           (*a)[1].getAsNumber();
  }
  }
  llvm_unreachable("unknown type");
}

/// The value of `name`, or null when absent or JSON null (DeepSpeed reads
/// null as "not given").
const json::Value *field(const json::Object &obj, StringRef name) {
  const json::Value *v = obj.get(name);
  return v && v->kind() != json::Value::Null ? v : nullptr;
}

bool isAuto(const json::Value *v) {
  return v && v->getAsString() && *v->getAsString() == "auto";
}

/// Whether a Warn / Refuse key asks for the feature: true, a non-zero
/// number, a block not marked "enabled": false.
bool isSet(const json::Value &v) {
  if (auto b = v.getAsBoolean())
    return *b;
  if (auto d = v.getAsNumber())
    return *d != 0;
  if (const json::Object *o = v.getAsObject()) {
    if (const json::Value *e = o->get("enabled"))
      return !e->getAsBoolean() || *e->getAsBoolean();
    return true;
  }
  return v.kind() != json::Value::Null;
}

/// "1" and "1.0" are the same value.
bool sameValue(StringRef a, StringRef b) {
  double x, y;
  return a == b || (!a.getAsDouble(x) && !b.getAsDouble(y) && x == y);
}

/// A flag of `dsc compile` with the value it gets from the config.
struct Setting {
  std::string key, flag, value;
  bool isDefault; // DeepSpeed's default for an absent key
};

class Resolver {
public:
  Resolver(StringRef file, const std::vector<std::string> &cli,
           llvm::raw_ostream &diag)
      : file_(file), cli_(cli), diag_(diag) {}

  bool run(const json::Object &root, ResolvedConfig &out);

private:
  // Diagnostics, each naming the file and the key path.
  void error(StringRef key, const llvm::Twine &msg) {
    diag_ << "error: " << file_ << ": " << key << ": " << msg << "\n";
    ++errors_;
  }
  void warning(StringRef key, const llvm::Twine &msg) {
    diag_ << "warning: " << file_ << ": " << key << ": " << msg << "\n";
  }
  void note(StringRef key, const llvm::Twine &msg) {
    diag_ << "note: " << file_ << ": " << key << ": " << msg << "\n";
  }

  // The user's command line.
  std::optional<std::string> cliValue(StringRef flag) const;
  bool cliHas(StringRef flag) const;

  /// Checks every key of `obj` against `keys` (unknown, type, "auto",
  /// unsupported); false when one was an error.
  bool check(const json::Object &obj, StringRef path, llvm::ArrayRef<Key> keys);
  /// Records `flag value` for `key`, unless the command line gives the flag.
  /// `shown`: the value as the file has it, when it is not the flag's.
  void set(StringRef key, StringRef flag, std::string value,
           bool isDefault = false, std::string shown = "");
  /// `key` is "auto": the value is the command line's `flag`, or an error.
  bool fromCli(StringRef key, StringRef flag, StringRef hfName);
  /// A number or "auto" mapped to `flag`.
  void mapNumber(const json::Object &obj, StringRef path, StringRef name,
                 StringRef flag, StringRef hfName);

  /// A run-time default of the program (ResolvedConfig::runArgs).
  void runArg(StringRef key, StringRef flag, const std::string &value);
  void mapMonitors(const json::Object &root);
  void mapBatch(const json::Object &root);
  void mapZero(const json::Object &zero);
  void mapPrecision(const json::Object &root);
  void mapOptimizer(const json::Object &opt);
  void mapScheduler(const json::Object &sched);
  void mapMisc(const json::Object &root);

  std::string file_;
  const std::vector<std::string> &cli_;
  llvm::raw_ostream &diag_;
  std::vector<Setting> settings_;
  std::vector<std::string> lines_;
  std::vector<std::string> runArgs_;
  int errors_ = 0;
  int64_t stage_ = 0;
  std::string precision_; // as mapPrecision resolved it ("": it failed)
  std::string offloadAtStage12_;   // offload_optimizer.device there
  void checkOffloadPrecision();
};

std::optional<std::string> Resolver::cliValue(StringRef flag) const {
  std::optional<std::string> v;
  for (size_t i = 0; i < cli_.size(); ++i) {
    StringRef a = cli_[i];
    if (a == flag && i + 1 < cli_.size())
      v = cli_[++i];
    else if (a.starts_with(flag) && a.drop_front(flag.size()).starts_with("="))
      v = a.drop_front(flag.size() + 1).str();
  }
  return v;
}

bool Resolver::cliHas(StringRef flag) const {
  return llvm::is_contained(cli_, flag.str()) || cliValue(flag).has_value();
}

bool Resolver::check(const json::Object &obj, StringRef path,
                     llvm::ArrayRef<Key> keys) {
  int before = errors_;
  // json::Object is unordered: sort for a stable order of messages.
  std::vector<std::string> names;
  for (const auto &kv : obj)
    names.push_back(kv.first.str());
  llvm::sort(names);
  for (const std::string &name : names) {
    std::string keyPath = path.empty() ? name : (path + "." + name).str();
    const json::Value &v = *obj.get(name);
    const Key *key =
        llvm::find_if(keys, [&](const Key &k) { return name == k.name; });
    if (key == keys.end()) {
      const Key *best = nullptr;
      unsigned bestDist = ~0u;
      for (const Key &k : keys) {
        unsigned d = StringRef(name).edit_distance(k.name);
        if (d < bestDist)
          bestDist = d, best = &k;
      }
      std::string hint;
      if (best)
        hint = "; did you mean '" + (path.empty() ? "" : path.str() + ".") +
               best->name + "'?";
      warning(keyPath, "unknown key, ignored" + hint);
      continue;
    }
    if (v.kind() == json::Value::Null)
      continue; // DeepSpeed reads null as "not given"
    if (isAuto(&v)) {
      if (!key->allowsAuto)
        error(keyPath, "\"auto\" is not resolved for this key (HF "
                       "Transformers fills it for none); give a value");
      continue;
    }
    if (!hasType(v, key->type)) {
      error(keyPath, llvm::Twine("expected ") + typeName(key->type));
      continue;
    }
    if (key->use == Use::Warn && isSet(v))
      warning(keyPath, key->why);
    else if (key->use == Use::Refuse && isSet(v))
      error(keyPath, key->why);
  }
  return errors_ == before;
}

void Resolver::set(StringRef key, StringRef flag, std::string value,
                   bool isDefault, std::string shown) {
  if (shown.empty())
    shown = value.empty() ? "true" : value;
  std::string flagValue = value.empty() ? "" : " " + value;
  // A flag without a value (--nesterov) is only present or not.
  std::optional<std::string> user =
      value.empty() ? std::nullopt : cliValue(flag);
  if (user || cliHas(flag)) {
    std::string given = user ? " " + *user : "";
    if (!isDefault && user && !sameValue(value, *user))
      note(key, llvm::Twine(shown) + " overridden by " + flag + given +
                    " on the command line");
    lines_.push_back(key.str() + " = " + shown + " -> " + flag.str() + given +
                     " (command line)");
    return;
  }
  // A later key for the same flag wins (WarmupLR's warmup_max_lr over the
  // optimizer's lr, as DeepSpeed's scheduler overwrites the lr).
  for (const Setting &s : settings_)
    if (s.flag == flag && !s.isDefault && s.value != value)
      note(key, llvm::Twine(value) + " is used for " + flag + ", not " + s.key +
                    " = " + s.value);
  llvm::erase_if(settings_, [&](const Setting &s) { return s.flag == flag; });
  settings_.push_back({key.str(), flag.str(), value, isDefault});
  lines_.push_back(key.str() + " = " + shown + " -> " + flag.str() + flagValue +
                   (isDefault ? " (DeepSpeed's default)" : ""));
}

bool Resolver::fromCli(StringRef key, StringRef flag, StringRef hfName) {
  if (auto user = cliValue(flag)) {
    lines_.push_back(key.str() + " = auto -> " + flag.str() + " " + *user +
                     " (command line)");
    return true;
  }
  error(key, llvm::Twine("\"auto\" takes its value from ") + flag +
                 " (as HF Transformers fills it from " + hfName + "); give " +
                 flag + " or a value in the file");
  return false;
}

void Resolver::mapNumber(const json::Object &obj, StringRef path,
                         StringRef name, StringRef flag, StringRef hfName) {
  const json::Value *v = field(obj, name);
  std::string key = path.empty() ? name.str() : (path + "." + name).str();
  if (!v || v->kind() == json::Value::Null)
    return;
  if (isAuto(v)) {
    fromCli(key, flag, hfName);
    return;
  }
  if (auto d = v->getAsNumber())
    set(key, flag, formatNumber(*d));
}

/// DeepSpeed's rule (runtime/config.py, _set_batch_related_parameters):
/// train_batch_size = micro x accumulation x world size; two given, the
/// third follows; train_batch_size alone means accumulation 1.
void Resolver::mapBatch(const json::Object &root) {
  struct Batch {
    const char *key, *flag, *hf;
    std::optional<int64_t> value;
    bool fromCommandLine = false;
  };
  Batch micro{"train_micro_batch_size_per_gpu", "--micro-batch",
              "per_device_train_batch_size", std::nullopt};
  Batch accum{"gradient_accumulation_steps", "--accum-steps",
              "gradient_accumulation_steps", std::nullopt};
  Batch total{"train_batch_size", "", "", std::nullopt};
  if (!field(root, micro.key) && !field(root, accum.key) &&
      !field(root, total.key))
    return; // the command line (or the model's shapes) says
  bool autoKey[3] = {false, false, false};
  Batch *all[3] = {&micro, &accum, &total};
  for (int i = 0; i < 3; ++i) {
    Batch &b = *all[i];
    const json::Value *v = field(root, b.key);
    autoKey[i] = isAuto(v);
    std::optional<std::string> user = *b.flag ? cliValue(b.flag) : std::nullopt;
    int64_t n;
    if (user && !StringRef(*user).getAsInteger(10, n)) {
      if (v && !autoKey[i] && v->getAsNumber() && *v->getAsNumber() != n)
        note(b.key, formatNumber(*v->getAsNumber()) + " overridden by " +
                        b.flag + " " + *user + " on the command line");
      b.value = n, b.fromCommandLine = true;
    } else if (v && !autoKey[i] && v->getAsNumber()) {
      b.value = static_cast<int64_t>(*v->getAsNumber());
    }
  }
  int64_t world = 1;
  if (auto w = cliValue("--world-size"))
    StringRef(*w).getAsInteger(10, world);
  if (world < 1)
    return; // Compile.cpp reports the bad --world-size
  auto divide = [&](Batch &out, int64_t num, int64_t den, const char *what) {
    if (den <= 0 || num % den != 0) {
      error(out.key, llvm::Twine("cannot be derived: train_batch_size ") +
                         llvm::Twine(*total.value) + " is not divisible by " +
                         what + " = " + llvm::Twine(den));
      return;
    }
    out.value = num / den;
  };
  if (!micro.value && autoKey[0] && !total.value) {
    fromCli(micro.key, micro.flag, micro.hf);
    return;
  }
  if (!accum.value && autoKey[1] && !(total.value && micro.value)) {
    fromCli(accum.key, accum.flag, accum.hf);
    return;
  }
  if (!micro.value && !total.value)
    return; // no batch in the file: --micro-batch or the model's shapes
  if (total.value && micro.value && !accum.value)
    divide(accum, *total.value, *micro.value * world,
           "train_micro_batch_size_per_gpu x world size");
  else if (total.value && accum.value && !micro.value)
    divide(micro, *total.value, *accum.value * world,
           "gradient_accumulation_steps x world size");
  else if (!accum.value)
    accum.value = 1;
  if (!micro.value && total.value)
    divide(micro, *total.value, world, "world size");
  if (!micro.value || !accum.value)
    return;
  if (!total.value)
    total.value = *micro.value * *accum.value * world;
  if (*micro.value < 1 || *accum.value < 1 ||
      *total.value != *micro.value * *accum.value * world) {
    error("train_batch_size",
          llvm::Twine(*total.value) + " != train_micro_batch_size_per_gpu " +
              llvm::Twine(*micro.value) + " x gradient_accumulation_steps " +
              llvm::Twine(*accum.value) + " x world size " +
              llvm::Twine(world) +
              " (--world-size); DeepSpeed requires them "
              "to agree: change one, or set "
              "train_batch_size to \"auto\"");
    return;
  }
  for (Batch *b : {&micro, &accum}) {
    if (b->fromCommandLine)
      lines_.push_back(std::string(b->key) + " -> " + b->flag + " " +
                       std::to_string(*b->value) + " (command line)");
    else
      set(b->key, b->flag, std::to_string(*b->value));
  }
  lines_.push_back("train_batch_size = " + std::to_string(*total.value) +
                   " (micro " + std::to_string(*micro.value) + " x accum " +
                   std::to_string(*accum.value) + " x world size " +
                   std::to_string(world) + ")");
}

void Resolver::mapZero(const json::Object &zero) {
  const std::string p = "zero_optimization";
  if (!check(zero, p, kZeroKeys))
    return;
  if (const json::Value *v = field(zero, "stage"); v && v->getAsNumber()) {
    stage_ = static_cast<int64_t>(*v->getAsNumber());
    if (stage_ > 3)
      return error(p + ".stage", "must be 0, 1, 2 or 3");
    if (auto sharding = cliValue("--sharding"))
      note(p + ".stage", llvm::Twine(stage_) + " overridden by --sharding " +
                             *sharding + " on the command line");
    else
      set(p + ".stage", "--stage", std::to_string(stage_));
  }
  // The bucket knobs below apply at the command line's stage, if it gives
  // one.
  static const std::pair<const char *, int64_t> fsdp[] = {{"NO_SHARD", 0},
                                                          {"SHARD_GRAD_OP", 2},
                                                          {"FULL_SHARD", 3},
                                                          {"HYBRID_SHARD", 3}};
  for (auto [name, stage] : fsdp)
    if (cliValue("--sharding") == name)
      stage_ = stage;
  if (auto user = cliValue("--stage"))
    StringRef(*user).getAsInteger(10, stage_);
  for (const char *name : {"offload_optimizer", "offload_param"}) {
    const json::Object *o = zero.getObject(name);
    if (!o || !check(*o, p + "." + name, kOffloadKeys))
      continue;
    auto device = o->getString("device");
    if (!device || *device == "none")
      continue;
    bool host = *device == "cpu" || *device == "nvme";
    if (StringRef(name) == "offload_optimizer" && host) {
      // At stages 1-2 it needs bf16 or fp16, read further down the file
      // (checkOffloadPrecision).
      if ((stage_ == 1 || stage_ == 2) && !cliValue("--offload-optimizer"))
        offloadAtStage12_ = device->str();
      set(p + "." + name + ".device", "--offload-optimizer", device->str());
      if (auto path = o->getString("nvme_path"); path && *device == "nvme")
        set(p + "." + name + ".nvme_path", "--nvme-path", path->str());
      // ZeRO-Offload++'s Twin-Flow share (DeepSpeed takes it at stage 3;
      // dsc at stage 0 too).
      mapNumber(*o, p + "." + name, "ratio", "--offload-ratio", "");
    } else if (StringRef(name) == "offload_param" && *device == "cpu")
      set(p + "." + name + ".device", "--offload-param", "cpu");
    else
      error(p + "." + name + ".device",
            StringRef(name) == "offload_optimizer"
                ? "use \"cpu\", \"nvme\" or \"none\""
                : "only \"cpu\" is supported (parameters on NVMe are not "
                  "yet); use \"cpu\" or \"none\"");
  }
  if (auto hpz = zero.getNumber("zero_hpz_partition_size"); hpz && *hpz > 1)
    error(p + ".zero_hpz_partition_size",
          "ZeRO++ hierarchical partitioning is not supported; --sharding "
          "HYBRID_SHARD --hybrid-group G shards inside groups of G ranks");
  if (auto mics = zero.getNumber("mics_shard_size"); mics && *mics > 0)
    error(p + ".mics_shard_size", "MiCS is not supported; --sharding "
                                  "HYBRID_SHARD --hybrid-group G shards "
                                  "inside groups of G ranks");

  // Buckets. Defaults from deepspeed/runtime/zero/config.py (its docs give
  // 5e8 for stage3_prefetch_bucket_size; the code's Field default is 5e7).
  struct Bucket {
    const char *name, *alias, *flag, *hf;
    int64_t deepSpeedDefault;
    bool stage3Only;
  };
  const Bucket buckets[] = {
      {"reduce_bucket_size", nullptr, "--reduce-bucket-size",
       "the model's hidden_size^2", 500000000, false},
      {"allgather_bucket_size", nullptr, "--allgather-bucket-size", "",
       500000000, false},
      {"stage3_prefetch_bucket_size", "prefetch_bucket_size",
       "--stage3-prefetch-bucket-size", "0.9 x the model's hidden_size^2",
       50000000, true},
      {"stage3_param_persistence_threshold", "param_persistence_threshold",
       "--stage3-param-persistence-threshold", "10 x the model's hidden_size",
       100000, true},
      {"stage3_max_live_parameters", "max_live_parameters",
       "--stage3-max-live-parameters", "", 1000000000, true},
  };
  for (const Bucket &b : buckets) {
    std::string name = b.name;
    if (b.alias && field(zero, b.alias)) {
      if (field(zero, b.name))
        return error(p + "." + b.alias, llvm::Twine("an alias of ") + b.name +
                                            ", which is given too; give one");
      name = b.alias;
    }
    std::string key = p + "." + name;
    bool stageApplies = b.stage3Only ? stage_ == 3 : stage_ >= 1;
    const json::Value *v = field(zero, name);
    if (v && !stageApplies) {
      note(key, llvm::Twine("applies to stage ") +
                    (b.stage3Only ? "3" : "1-3") + " only; ignored");
      continue;
    }
    if (!stageApplies)
      continue;
    if (isAuto(v)) {
      fromCli(key, b.flag, b.hf);
      continue;
    }
    if (v && v->getAsNumber())
      set(key, b.flag, formatNumber(*v->getAsNumber()));
    else
      set(key, b.flag, std::to_string(b.deepSpeedDefault), /*isDefault=*/true);
  }
}

void Resolver::mapPrecision(const json::Object &root) {
  // "auto": HF Transformers enables fp16 / bf16 from its --fp16 / --bf16
  // flags, off by default; here from --precision.
  std::optional<std::string> userPrecision = cliValue("--precision");
  bool fromAuto = false;
  auto enabled = [&](const char *block, const char *name) {
    const json::Object *o = root.getObject(block);
    if (!o)
      return false;
    const json::Value *e = field(*o, "enabled");
    if (isAuto(e)) {
      fromAuto = true;
      lines_.push_back(std::string(block) + ".enabled = auto -> " +
                       (userPrecision == name ? "true" : "false") +
                       " (--precision " + userPrecision.value_or("fp32") + ")");
      return userPrecision == name;
    }
    return e && e->getAsBoolean() && *e->getAsBoolean();
  };
  const json::Object *fp16 = root.getObject("fp16");
  const json::Object *bf16 = root.getObject("bf16");
  if ((fp16 && !check(*fp16, "fp16", kFp16Keys)) ||
      (bf16 && !check(*bf16, "bf16", kBf16Keys)))
    return;
  bool half = enabled("fp16", "fp16"), brain = enabled("bf16", "bf16");
  if (half && brain)
    return error("fp16.enabled", "fp16 and bf16 are both enabled; enable one");
  precision_ = userPrecision.value_or(half ? "fp16" : brain ? "bf16" : "fp32");
  if (half && !fromAuto)
    set("fp16.enabled", "--precision", "fp16", false, "true");
  if (brain && !fromAuto)
    set("bf16.enabled", "--precision", "bf16", false, "true");
  // The loss-scale knobs mean something for fp16 only (DeepSpeed ignores
  // them otherwise, and dsc refuses them beside bf16 / fp32).
  if (userPrecision.value_or(half ? "fp16" : "fp32") != "fp16" || !fp16)
    return;
  const std::pair<const char *, const char *> knobs[] = {
      {"loss_scale", "--loss-scale"},
      {"initial_scale_power", "--initial-scale-power"},
      {"loss_scale_window", "--loss-scale-window"},
      {"hysteresis", "--hysteresis"},
      {"min_loss_scale", "--min-loss-scale"}};
  for (auto [name, flag] : knobs)
    if (auto d = fp16->getNumber(name))
      set(std::string("fp16.") + name, flag, formatNumber(*d));
}

void Resolver::mapOptimizer(const json::Object &opt) {
  if (!check(opt, "optimizer", kOptimizerKeys))
    return;
  std::string type = opt.getString("type").value_or("").lower();
  const json::Object empty;
  const json::Object *params = opt.getObject("params");
  if (!params)
    params = &empty;
  // DeepSpeed's Adam is FusedAdam with adam_w_mode true by default
  // (runtime/engine.py: effective_adam_w_mode = name == "adamw" or
  // adam_w_mode): decoupled weight decay, dsc's adamw.
  bool adam = type == "adam" || type == "adamw";
  if (type.empty())
    return error("optimizer.type", "not given; give Adam, AdamW or SGD");
  if (!adam && type != "sgd")
    return error("optimizer.type",
                 "'" + opt.getString("type").value_or("").str() +
                     "' is not supported; dsc has Adam, AdamW and SGD");
  if (!check(*params, "optimizer.params", kOptimizerParamKeys))
    return;
  const std::string p = "optimizer.params";
  if (type == "adam" && params->getBoolean("adam_w_mode") == false)
    return error(p + ".adam_w_mode",
                 "Adam with L2 weight decay (adam_w_mode false) is not "
                 "supported; dsc's Adam decouples the weight decay (AdamW)");
  if (params->getBoolean("bias_correction") == false)
    return error(p + ".bias_correction",
                 "Adam without bias correction is not supported");
  set("optimizer.type", "--optimizer", adam ? "adamw" : "sgd", false,
      opt.getString("type")->str());
  mapNumber(*params, p, "lr", "--lr", "learning_rate");
  if (const json::Value *betas = field(*params, "betas")) {
    if (isAuto(betas)) {
      if (!cliValue("--beta1") || !cliValue("--beta2"))
        error(p + ".betas", "\"auto\" takes its values from --beta1 and "
                            "--beta2 (as HF Transformers fills it from "
                            "adam_beta1 and adam_beta2); give both or a "
                            "value in the file");
      else
        lines_.push_back(p + ".betas = auto -> --beta1 " +
                         *cliValue("--beta1") + " --beta2 " +
                         *cliValue("--beta2") + " (command line)");
    } else if (const json::Array *a = betas->getAsArray()) {
      set(p + ".betas[0]", "--beta1", formatNumber(*(*a)[0].getAsNumber()));
      set(p + ".betas[1]", "--beta2", formatNumber(*(*a)[1].getAsNumber()));
    }
  }
  mapNumber(*params, p, "eps", "--eps", "adam_epsilon");
  // Absent weight decay: FusedAdam's and torch.optim.SGD's default 0;
  // torch.optim.AdamW's 0.01 with torch_adam.
  bool torchAdamW = adam && params->getBoolean("torch_adam") == true;
  if (field(*params, "weight_decay"))
    mapNumber(*params, p, "weight_decay", "--weight-decay", "weight_decay");
  else
    set(p + ".weight_decay", "--weight-decay", torchAdamW ? "0.01" : "0",
        /*isDefault=*/true);
  if (type != "sgd")
    return;
  // torch.optim.SGD: momentum 0 unless given (dsc's own default is 0.9).
  if (field(*params, "momentum"))
    mapNumber(*params, p, "momentum", "--momentum", "");
  else
    set(p + ".momentum", "--momentum", "0", /*isDefault=*/true);
  mapNumber(*params, p, "dampening", "--dampening", "");
  if (params->getBoolean("nesterov") == true)
    set(p + ".nesterov", "--nesterov", "");
}

void Resolver::mapScheduler(const json::Object &sched) {
  if (!check(sched, "scheduler", kSchedulerKeys))
    return;
  std::string type = sched.getString("type").value_or("").str();
  if (type == "OneCycle" || type == "LRRangeTest")
    return error("scheduler.type",
                 type + " is not supported yet; dsc has WarmupLR (linear), "
                        "WarmupDecayLR and WarmupCosineLR");
  if (type != "WarmupLR" && type != "WarmupDecayLR" && type != "WarmupCosineLR")
    return error("scheduler.type",
                 "'" + type +
                     "' is not a DeepSpeed scheduler dsc knows "
                     "(WarmupLR, WarmupDecayLR, WarmupCosineLR)");
  const json::Object empty;
  const json::Object *params = sched.getObject("params");
  if (!params)
    params = &empty;
  const std::string p = "scheduler.params";
  if (!check(*params, p, kSchedulerParamKeys))
    return;
  // lr_schedules.py: every warm-up is "log" unless warmup_type says linear.
  std::string warmupType =
      params->getString("warmup_type").value_or("log").str();
  if (warmupType != "linear")
    return error(p + ".warmup_type",
                 (field(*params, "warmup_type")
                      ? "'" + warmupType + "'"
                      : std::string("not given, so DeepSpeed's default "
                                    "'log'")) +
                     ": dsc warms up linearly only; set \"warmup_type\": "
                     "\"linear\"");
  bool cosine = type == "WarmupCosineLR";
  set("scheduler.type", "--schedule",
      cosine                    ? "warmup_cosine"
      : type == "WarmupDecayLR" ? "warmup_linear"
                                : "constant",
      false, type);
  // warmup_num_steps: default 1000, at least 2 (lr_schedules.py:
  // max(2, warmup_num_steps)).
  const json::Value *w = field(*params, "warmup_num_steps");
  if (isAuto(w))
    fromCli(p + ".warmup_num_steps", "--warmup-steps", "warmup_steps");
  else
    set(p + ".warmup_num_steps", "--warmup-steps",
        std::to_string(std::max<int64_t>(
            2, w ? static_cast<int64_t>(*w->getAsNumber()) : 1000)),
        /*isDefault=*/!w);
  if (type != "WarmupLR") {
    if (!field(*params, "total_num_steps"))
      return error(p + ".total_num_steps",
                   type + " needs it (DeepSpeed has no default)");
    mapNumber(*params, p, "total_num_steps", "--total-steps",
              "num_training_steps");
  }
  if (cosine) {
    // Ratios of the optimizer's lr.
    set(p + ".warmup_min_ratio", "--warmup-min-ratio",
        formatNumber(params->getNumber("warmup_min_ratio").value_or(0.0)),
        !field(*params, "warmup_min_ratio"));
    set(p + ".cos_min_ratio", "--min-ratio",
        formatNumber(params->getNumber("cos_min_ratio").value_or(1e-4)),
        !field(*params, "cos_min_ratio"));
    return;
  }
  // WarmupLR / WarmupDecayLR: absolute rates from warmup_min_lr (0) up to
  // warmup_max_lr, which replaces the optimizer's lr (dsc's --lr); the decay
  // ends at warmup_min_lr. dsc's schedule takes ratios of --lr.
  double maxLr = 1e-3, minLr = 0;
  const json::Value *maxV = field(*params, "warmup_max_lr");
  if (isAuto(maxV)) {
    if (!fromCli(p + ".warmup_max_lr", "--lr", "learning_rate"))
      return;
    StringRef(*cliValue("--lr")).getAsDouble(maxLr);
  } else if (maxV) {
    set(p + ".warmup_max_lr", "--lr", formatNumber(*maxV->getAsNumber()));
  }
  // Absent warmup_max_lr: the optimizer's lr (lr_schedules.py: "if
  // warmup_max_lr is None: warmup_max_lr = group['lr']").
  for (const Setting &s : settings_)
    if (s.flag == "--lr")
      StringRef(s.value).getAsDouble(maxLr);
  if (auto user = cliValue("--lr"))
    StringRef(*user).getAsDouble(maxLr);
  const json::Value *minV = field(*params, "warmup_min_lr");
  if (minV && !isAuto(minV)) // "auto": HF fills 0
    minLr = *minV->getAsNumber();
  if (maxLr <= 0)
    return error(p + ".warmup_max_lr", "must be positive");
  std::string ratio = formatNumber(minLr / maxLr);
  std::string shown = formatNumber(minLr) + " (/ " + formatNumber(maxLr) + ")";
  set(p + ".warmup_min_lr", "--warmup-min-ratio", ratio, !minV, shown);
  if (type == "WarmupDecayLR")
    set(p + ".warmup_min_lr", "--min-ratio", ratio, !minV, shown);
}

void Resolver::runArg(StringRef key, StringRef flag, const std::string &value) {
  runArgs_.push_back(flag.str());
  runArgs_.push_back(value);
  lines_.push_back(key.str() + " = " + value + " -> the program's " +
                   flag.str() + " " + value +
                   " (its default; the run's own "
                   "option overrides it)");
}

/// DeepSpeed's monitors write to output_path/job_name; the program's
/// --tensorboard and --csv do the same, as run-time defaults.
void Resolver::mapMonitors(const json::Object &root) {
  for (const char *block : {"tensorboard", "csv_monitor"}) {
    const json::Object *m = root.getObject(block);
    if (!m || !check(*m, block, kMonitorKeys))
      continue;
    if (!m->getBoolean("enabled").value_or(false))
      continue;
    std::string path = m->getString("output_path").value_or("").str();
    std::string job = m->getString("job_name").value_or("").str();
    if (job.empty()) // DeepSpeed's default
      job = "DeepSpeedJobName";
    if (path.find_first_of("'\n") != std::string::npos ||
        job.find_first_of("'\n") != std::string::npos) {
      error(std::string(block) + ".output_path",
            "a path with a quote or a newline cannot be a default of the "
            "program; give it to the program's own option");
      continue;
    }
    std::string key = std::string(block) + ".output_path";
    if (std::string(block) == "tensorboard") {
      std::string dir = path.empty() ? job : path + "/" + job;
      runArg(key, "--tensorboard", dir);
    } else {
      runArg(key, "--csv", path.empty() ? "." : path);
      runArg(std::string(block) + ".job_name", "--run-name", job);
    }
  }
}

void Resolver::mapMisc(const json::Object &root) {
  mapNumber(root, "", "gradient_clipping", "--clip", "max_grad_norm");
  if (auto n = root.getNumber("steps_per_print")) {
    // A run-time option of the program, compiled in as its default. The
    // default is 10 in deepspeed/runtime/constants.py (the docs say 1).
    if (*n < 1)
      error("steps_per_print", "must be at least 1 (the program prints a "
                               "line every N steps)");
    else
      runArg("steps_per_print", "--print-every", formatNumber(*n));
  }
  mapMonitors(root);
  if (const json::Object *ac = root.getObject("activation_checkpointing"))
    if (check(*ac, "activation_checkpointing", kActivationCheckpointingKeys))
      set("activation_checkpointing", "--recompute", "full", false,
          "{...} (DeepSpeed checkpoints the layers the model wraps; dsc "
          "every repeated block)");
  if (root.getBoolean("wall_clock_breakdown").value_or(false)) {
    runArgs_.push_back("--wall-clock-breakdown");
    lines_.push_back("wall_clock_breakdown = true -> the program's "
                     "--wall-clock-breakdown (its default)");
  }
  if (auto f = root.getNumber("gradient_predivide_factor"); f && *f != 1)
    error("gradient_predivide_factor", "not supported (only 1.0)");
  if (const json::Object *dt = root.getObject("data_types");
      dt && check(*dt, "data_types", kDataTypeKeys)) {
    if (auto t = dt->getString("grad_accum_dtype"); t && *t != "fp32")
      error("data_types.grad_accum_dtype",
            "'" + t->str() +
                "' is not supported: dsc accumulates gradients in fp32 "
                "(docs/numerics.md); communication_data_type \"bf16\" sets "
                "the reductions over ranks (--grad-reduce-dtype)");
  }
  if (auto t = root.getString("communication_data_type")) {
    if (*t == "bf16")
      set("communication_data_type", "--grad-reduce-dtype", "bf16");
    else if (*t != "fp32")
      error("communication_data_type",
            "'" + t->str() +
                "' is not supported; dsc reduces gradients in "
                "fp32 or bf16");
  }
}

/// ZeRO-1/2 with the optimizer offloaded: in bf16 or fp16 the fp32
/// masters are sharded (dsc-zero-partition shard-masters) and the host
/// updates them; in fp32 the parameters are replicated and the update is a
/// slice of them, which cannot leave the GPU.
void Resolver::checkOffloadPrecision() {
  if (offloadAtStage12_.empty() || precision_ != "fp32")
    return; // none, or the precision's own error was reported
  error("zero_optimization.offload_optimizer.device",
        "\"" + offloadAtStage12_ + "\" at stage " + llvm::Twine(stage_) +
            " needs bf16 or fp16 (\"bf16\": {\"enabled\": true}, or "
            "--precision bf16 for \"auto\"): then the fp32 masters are "
            "sharded as DeepSpeed does, and the host updates them; in fp32 "
            "ZeRO-1/2's parameters are replicated and the update is a slice "
            "of them. In fp32, set \"stage\": 3 and pass --keep-gathered "
            "(ZeRO-2's traffic and memory)");
}

bool Resolver::run(const json::Object &root, ResolvedConfig &out) {
  // Each section is checked before it is read, so the sections after an
  // ill-typed key are still checked and every error is reported at once.
  check(root, "", kTopKeys);
  mapBatch(root);
  if (const json::Object *zero = root.getObject("zero_optimization"))
    mapZero(*zero);
  mapPrecision(root);
  checkOffloadPrecision();
  if (const json::Object *opt = root.getObject("optimizer"))
    mapOptimizer(*opt);
  if (const json::Object *sched = root.getObject("scheduler"))
    mapScheduler(*sched);
  mapMisc(root);
  if (errors_)
    return false;
  for (const Setting &s : settings_) {
    out.args.push_back(s.flag);
    if (!s.value.empty())
      out.args.push_back(s.value);
  }
  out.lines = lines_;
  out.runArgs = runArgs_;
  json::Object saved;
  saved["file"] = file_;
  saved["config"] = json::Object(root);
  json::Array lines;
  for (const std::string &l : lines_)
    lines.push_back(l);
  saved["resolved"] = std::move(lines);
  llvm::raw_string_ostream os(out.json);
  os << json::Value(std::move(saved));
  return true;
}

} // namespace

bool resolveDeepSpeedConfig(const std::string &path,
                            const std::vector<std::string> &cli,
                            ResolvedConfig &out, llvm::raw_ostream &diag) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    diag << "error: --config " << path << ": " << buffer.getError().message()
         << "\n";
    return false;
  }
  // The parse error says where: "[line:column, byte=N]: what".
  llvm::Expected<json::Value> value = json::parse((*buffer)->getBuffer());
  if (!value) {
    // "[2:28, byte=30]: Expected object key" -> "FILE:2:28: ..."
    std::string msg = llvm::toString(value.takeError());
    StringRef rest(msg), where;
    if (rest.consume_front("[")) {
      std::tie(where, rest) = rest.split("]: ");
      where = where.split(",").first;
    }
    diag << "error: " << path << (where.empty() ? "" : ":") << where
         << ": not valid JSON: " << (where.empty() ? StringRef(msg) : rest)
         << "\n";
    return false;
  }
  const json::Object *root = value->getAsObject();
  if (!root) {
    diag << "error: " << path << ": expected a JSON object at the top\n";
    return false;
  }
  return Resolver(path, cli, diag).run(*root, out);
}

void printResolvedConfig(const std::string &path, const ResolvedConfig &cfg,
                         llvm::raw_ostream &os) {
  os << "DeepSpeed config " << path << ", resolved:\n";
  for (const std::string &line : cfg.lines)
    os << "  " << line << "\n";
}

} // namespace dsc
