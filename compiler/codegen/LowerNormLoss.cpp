//===- LowerNormLoss.cpp - Norms, softmax, attention, losses to kernels --===//
//
// Each op and its gradient op map onto the matching rt:: kernel pair. Loss
// reductions and class_loss_backward's kind are resolved here, at compile
// time. Dropout's seed is derived at run time from the step context (run
// seed, step, call) and the op's place among the function's dropouts, so
// every dropout of every micro-batch draws its own mask, reproducibly, and
// the same one whatever other ops a pass adds around it.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Lowering.h"

#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dsc::codegen {

namespace {

std::string optionalView(const LowerContext &ctx, Value v) {
  return v ? ctx.view(v) : std::string("Tensor()");
}

/// "rt::Reduction::Mean" for "mean", ...; failure on anything else.
FailureOr<std::string> reduction(Operation *op, StringRef name) {
  if (name == "none")
    return std::string("rt::Reduction::None");
  if (name == "sum")
    return std::string("rt::Reduction::Sum");
  if (name == "mean")
    return std::string("rt::Reduction::Mean");
  op->emitOpError("reduction must be \"none\", \"sum\" or \"mean\", got \"")
      << name << "\"";
  return failure();
}

std::string ignoreIndex(std::optional<uint64_t> value) {
  if (!value)
    return "std::nullopt";
  return "std::optional<int64_t>(" + cppInt(static_cast<int64_t>(*value)) + ")";
}

double toDouble(const APFloat &value) { return value.convertToDouble(); }

/// The dropouts before `o` in its block: its mask's position, which ops
/// that passes add (dsc-offload's copies, say) leave as it is, where the
/// op's index in the block would move.
unsigned dropoutOrdinal(DropoutOp o) {
  unsigned n = 0;
  for (Operation &op : *o->getBlock()) {
    if (&op == o.getOperation())
      break;
    n += isa<DropoutOp>(op);
  }
  return n;
}

/// Which call of the step draws `op`'s random numbers: its function's
/// (ctx.call), or for a step whose call of @forward_backward dsc-offload
/// inlined (overlap), that call's number (dsc.rng_call): the same masks.
std::string rngCall(Operation *op) {
  auto fn = op->getParentOfType<func::FuncOp>();
  if (auto n =
          fn ? fn->getAttrOfType<IntegerAttr>("dsc.rng_call") : IntegerAttr())
    return cppInt(n.getInt());
  return "ctx.call";
}

/// "rt::AttentionAttrs{scale, causal, window, dropout, seed[, limit]}".
/// The dropout seed is drawn like a dropout's, from a position no op has
/// (-1 - seed_id), so a forward, its backward and any recomputation draw
/// one mask. The backward's workspace limit, when it has one.
template <typename AttentionLike>
std::string attentionAttrs(AttentionLike o, int64_t workspaceLimit = 0) {
  double dropout = toDouble(o.getDropout());
  std::string seed =
      dropout > 0
          ? "rt::dropoutSeed(ctx.seed, ctx.step, " + rngCall(o.getOperation()) +
                ", " + cppInt(-1 - static_cast<int64_t>(o.getSeedId())) + ")"
          : "0";
  bool seqMajor = o.getSeqMajor(), deterministic = true;
  if (auto back = dyn_cast<AttentionBackwardOp>(o.getOperation()))
    deterministic = back.getDeterministic();
  // The trailing fields only where one of them is not its default.
  std::string tail;
  if (!deterministic)
    tail = std::string(", ") + cppBool(seqMajor) + ", false";
  else if (seqMajor)
    tail = ", true";
  if (workspaceLimit > 0 || !tail.empty())
    tail = ", " + cppInt(workspaceLimit) + tail;
  return "rt::AttentionAttrs{" + cppDouble(toDouble(o.getScale())) + ", " +
         cppBool(o.getCausal()) + ", " +
         cppInt(static_cast<int64_t>(o.getWindow())) + ", " +
         cppDouble(dropout) + ", " + seed + tail + "}";
}

} // namespace

LowerResult lowerNormLoss(Operation *op, const LowerContext &ctx) {
  using R = std::optional<LoweredCall>;
  auto call = [](std::string callee, std::vector<std::string> args) -> R {
    return LoweredCall{"", cppCall(callee, args)};
  };
  return llvm::TypeSwitch<Operation *, LowerResult>(op)
      .Case([&](BatchNormTrainOp o) {
        return call(
            "rt::batchNormTrain",
            {ctx.view(o.getInput()), ctx.view(o.getScale()),
             ctx.view(o.getBias()), ctx.view(o.getRunningMean()),
             ctx.view(o.getRunningVar()), cppDouble(toDouble(o.getEpsilon())),
             cppDouble(toDouble(o.getMomentum())), ctx.view(o.getResult()),
             ctx.view(o.getNewRunningMean()), ctx.view(o.getNewRunningVar())});
      })
      .Case([&](BatchNormOp o) {
        return call("rt::batchNorm",
                    {ctx.view(o.getInput()), ctx.view(o.getScale()),
                     ctx.view(o.getBias()), ctx.view(o.getMean()),
                     ctx.view(o.getVar()), cppDouble(toDouble(o.getEpsilon())),
                     ctx.view(o.getResult())});
      })
      .Case([&](BatchNormTrainBackwardOp o) {
        return call("rt::batchNormTrainBackward",
                    {ctx.view(o.getInput()), ctx.view(o.getScale()),
                     cppDouble(toDouble(o.getEpsilon())), ctx.view(o.getGrad()),
                     ctx.view(o.getGradInput()), ctx.view(o.getGradScale()),
                     ctx.view(o.getGradBias())});
      })
      .Case([&](LayerNormOp o) {
        if (o.getRms())
          return call("rt::rmsNorm",
                      {ctx.view(o.getInput()), ctx.view(o.getScale()),
                       cppInt(static_cast<int64_t>(o.getAxis())),
                       cppDouble(toDouble(o.getEpsilon())),
                       ctx.view(o.getResult())});
        return call("rt::layerNorm",
                    {ctx.view(o.getInput()), ctx.view(o.getScale()),
                     optionalView(ctx, o.getBias()),
                     cppInt(static_cast<int64_t>(o.getAxis())),
                     cppDouble(toDouble(o.getEpsilon())),
                     ctx.view(o.getResult())});
      })
      .Case([&](LayerNormBackwardOp o) {
        std::vector<std::string> args = {
            ctx.view(o.getInput()),
            ctx.view(o.getScale()),
            cppInt(static_cast<int64_t>(o.getAxis())),
            cppDouble(toDouble(o.getEpsilon())),
            ctx.view(o.getGrad()),
            ctx.view(o.getGradInput()),
            ctx.view(o.getGradScale())};
        if (!o.getRms())
          args.push_back(ctx.view(o.getGradBias()));
        // dsc-fuse-norm-residual's epilogue, when the op has one.
        if (o.getResidual() || o.getGradInputCopy()) {
          args.push_back(optionalView(ctx, o.getResidual()));
          args.push_back(optionalView(ctx, o.getGradInputCopy()));
        }
        return call(
            o.getRms() ? "rt::rmsNormBackward" : "rt::layerNormBackward", args);
      })
      .Case([&](SoftmaxOp o) {
        return call("rt::softmax", {ctx.view(o.getInput()),
                                    cppInt(static_cast<int64_t>(o.getAxis())),
                                    ctx.view(o.getResult())});
      })
      .Case([&](SoftmaxBackwardOp o) {
        return call(
            o.getLog() ? "rt::logSoftmaxBackward" : "rt::softmaxBackward",
            {ctx.view(o.getOutput()), cppInt(static_cast<int64_t>(o.getAxis())),
             ctx.view(o.getGrad()), ctx.view(o.getResult())});
      })
      .Case([&](LogSoftmaxOp o) {
        return call("rt::logSoftmax",
                    {ctx.view(o.getInput()),
                     cppInt(static_cast<int64_t>(o.getAxis())),
                     ctx.view(o.getResult())});
      })
      .Case([&](SoftmaxCrossEntropyOp o) -> LowerResult {
        FailureOr<std::string> red = reduction(o, o.getReduction());
        if (failed(red))
          return failure();
        return call("rt::softmaxCrossEntropy",
                    {ctx.view(o.getScores()), ctx.view(o.getLabels()),
                     optionalView(ctx, o.getWeights()), *red,
                     ignoreIndex(o.getIgnoreIndex()), ctx.view(o.getLoss())});
      })
      .Case([&](NllLossOp o) -> LowerResult {
        FailureOr<std::string> red = reduction(o, o.getReduction());
        if (failed(red))
          return failure();
        return call("rt::nllLoss",
                    {ctx.view(o.getInput()), ctx.view(o.getLabels()),
                     optionalView(ctx, o.getWeights()), *red,
                     ignoreIndex(o.getIgnoreIndex()), ctx.view(o.getLoss())});
      })
      .Case([&](ClassLossBackwardOp o) -> LowerResult {
        FailureOr<std::string> red = reduction(o, o.getReduction());
        if (failed(red))
          return failure();
        const char *callee = o.getKind() == "softmax_cross_entropy"
                                 ? "rt::softmaxCrossEntropyBackward"
                             : o.getKind() == "nll" ? "rt::nllLossBackward"
                                                    : nullptr;
        if (!callee) {
          o.emitOpError("kind must be \"softmax_cross_entropy\" or \"nll\", "
                        "got \"")
              << o.getKind() << "\"";
          return failure();
        }
        return call(callee, {ctx.view(o.getInput()), ctx.view(o.getLabels()),
                             optionalView(ctx, o.getWeights()), *red,
                             ignoreIndex(o.getIgnoreIndex()),
                             ctx.view(o.getGrad()), ctx.view(o.getResult())});
      })
      .Case([&](LinearCrossEntropyOp o) {
        return call("rt::linearCrossEntropy",
                    {ctx.view(o.getInput()), ctx.view(o.getWeight()),
                     cppBool(o.getTransposeWeight()), ctx.view(o.getLabels()),
                     ignoreIndex(o.getIgnoreIndex()), ctx.view(o.getSeed()),
                     ctx.view(o.getLogits()), ctx.view(o.getChunkLoss()),
                     ctx.view(o.getLoss()), ctx.view(o.getGradInput()),
                     ctx.view(o.getGradWeight()),
                     optionalView(ctx, o.getInit())});
      })
      .Case([&](AttentionOp o) {
        return call("rt::attention",
                    {ctx.view(o.getQuery()), ctx.view(o.getKey()),
                     ctx.view(o.getValue()), optionalView(ctx, o.getMask()),
                     attentionAttrs(o), ctx.view(o.getResult()),
                     ctx.view(o.getLse())});
      })
      .Case([&](AttentionBackwardOp o) {
        return call("rt::attentionBackward",
                    {ctx.view(o.getQuery()), ctx.view(o.getKey()),
                     ctx.view(o.getValue()), optionalView(ctx, o.getMask()),
                     ctx.view(o.getOutput()), ctx.view(o.getLse()),
                     ctx.view(o.getGrad()),
                     attentionAttrs(o, int64_t(o.getWorkspaceLimit())),
                     ctx.view(o.getGradQuery()), ctx.view(o.getGradKey()),
                     ctx.view(o.getGradValue())});
      })
      .Case([&](DropoutOp o) {
        std::string seed = "rt::dropoutSeed(ctx.seed, ctx.step, " +
                           rngCall(o.getOperation()) + ", " +
                           std::to_string(dropoutOrdinal(o)) + ")";
        return call("rt::dropout",
                    {ctx.view(o.getInput()), cppDouble(toDouble(o.getRatio())),
                     seed, ctx.view(o.getResult()), ctx.view(o.getMask())});
      })
      .Default([](Operation *) { return R(); });
}

} // namespace dsc::codegen
