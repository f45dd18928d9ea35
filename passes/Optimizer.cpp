//===- Optimizer.cpp - the training step around @forward_backward ---------===//
#include "dialects/dsc/IR/DscOps.h"
#include "passes/Passes.h"
#include "passes/StepMath.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Regex.h"

namespace dsc {
#define GEN_PASS_DEF_DSCOPTIMIZER
#include "passes/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace {

struct Role {
  unsigned index;
  std::string name;
};

struct OptimizerPass : public dsc::impl::DscOptimizerBase<OptimizerPass> {
  using Base::Base;

  OpBuilder *b = nullptr;
  LocationAttr loc; // set in runOnOperation

  Value scalarF32(double v) { return dsc::scalarF32(*b, loc, v); }
  Value splatLike(Value like, double v) {
    auto t = cast<RankedTensorType>(like.getType());
    return dsc::ConstantOp::create(
        *b, loc,
        SplatElementsAttr::get(t, FloatAttr::get(t.getElementType(), v)));
  }
  /// A scalar tensor converted to `like`'s element type (the count of a
  /// global-mean loss may come in the loss's 16-bit type, the rest in f32).
  Value scalarAs(Value scalar, Value like) {
    Type e = cast<RankedTensorType>(like.getType()).getElementType();
    if (cast<RankedTensorType>(scalar.getType()).getElementType() == e)
      return scalar;
    return dsc::CastOp::create(*b, loc, scalar, TypeAttr::get(e));
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    auto fb = module.lookupSymbol<func::FuncOp>("forward_backward");
    if (!fb) {
      module.emitError("dsc-optimizer: no @forward_backward; run "
                       "dsc-autodiff first");
      return signalPassFailure();
    }
    if (optimizer != "adamw" && optimizer != "sgd") {
      module.emitError("dsc-optimizer: optimizer must be adamw or sgd, not '")
          << optimizer << "'";
      return signalPassFailure();
    }
    if (accumSteps < 1) {
      module.emitError("dsc-optimizer: accum-steps must be at least 1");
      return signalPassFailure();
    }
    if (schedule != "constant" && schedule != "warmup_cosine" &&
        schedule != "warmup_linear") {
      module.emitError("dsc-optimizer: schedule must be constant, "
                       "warmup_cosine or warmup_linear, not '")
          << schedule << "'";
      return signalPassFailure();
    }
    if (schedule != "constant" && totalSteps <= warmupSteps) {
      module.emitError("dsc-optimizer: total_steps must exceed warmup_steps "
                       "for schedule ")
          << schedule << " (got " << totalSteps << " and " << warmupSteps
          << ")";
      return signalPassFailure();
    }
    if (warmupSteps < 0) {
      module.emitError("dsc-optimizer: warmup-steps must not be negative");
      return signalPassFailure();
    }
    llvm::Regex noDecayRe(noDecay);
    std::string reError;
    if (!noDecay.empty() && !noDecayRe.isValid(reError)) {
      module.emitError("dsc-optimizer: bad no-decay pattern: ") << reError;
      return signalPassFailure();
    }

    // 1. Analyse @forward_backward's signature.
    SmallVector<Role> params, buffers, inputs;
    for (unsigned i = 0; i < fb.getNumArguments(); ++i) {
      if (auto n = fb.getArgAttrOfType<StringAttr>(i, "dsc.param"))
        params.push_back({i, n.str()});
      else if (auto n = fb.getArgAttrOfType<StringAttr>(i, "dsc.buffer"))
        buffers.push_back({i, n.str()});
      else if (auto n = fb.getArgAttrOfType<StringAttr>(i, "dsc.input"))
        inputs.push_back({i, n.str()});
    }
    int lossIndex = -1, countIndex = -1;
    llvm::StringMap<unsigned> gradResult, bufferResult;
    for (unsigned i = 0; i < fb.getNumResults(); ++i) {
      if (auto n = fb.getResultAttrOfType<StringAttr>(i, "dsc.grad"))
        gradResult[n] = i;
      else if (auto n =
                   fb.getResultAttrOfType<StringAttr>(i, "dsc.buffer_update"))
        bufferResult[n] = i;
      else if (fb.getResultAttr(i, "dsc.loss_count"))
        countIndex = i;
      else if (fb.getResultAttr(i, "dsc.output") && lossIndex < 0)
        lossIndex = i;
    }
    if (lossIndex != 0) {
      fb.emitError("dsc-optimizer: @forward_backward must return the loss "
                   "first");
      return signalPassFailure();
    }
    int64_t microBatch = -1, tokens = 1;
    for (const Role &in : inputs) {
      auto t = cast<RankedTensorType>(fb.getArgument(in.index).getType());
      if (t.getRank() == 0) {
        fb.emitError("dsc-optimizer: input '")
            << in.name << "' is a scalar; batch inputs need a batch dim";
        return signalPassFailure();
      }
      if (microBatch < 0)
        microBatch = t.getDimSize(0);
      else if (microBatch != t.getDimSize(0)) {
        fb.emitError("dsc-optimizer: inputs disagree on the batch size (")
            << microBatch << " vs " << t.getDimSize(0) << " for '" << in.name
            << "')";
        return signalPassFailure();
      }
      if (t.getRank() == 2 && isa<IntegerType>(t.getElementType()))
        tokens = t.getDimSize(1);
    }

    // 2. The signature of @train_step.
    OpBuilder builder(ctx);
    b = &builder;
    loc = fb.getLoc();
    SmallVector<Type> argTypes;
    SmallVector<NamedAttribute> argAttrs; // one per arg
    auto addArg = [&](Type t, StringRef attr, Attribute value) {
      argTypes.push_back(t);
      argAttrs.push_back(builder.getNamedAttr(attr, value));
      return argTypes.size() - 1;
    };
    std::vector<StringRef> slots =
        optimizer == "adamw" ? std::vector<StringRef>{"exp_avg", "exp_avg_sq"}
                             : std::vector<StringRef>{"momentum_buffer"};
    SmallVector<unsigned> paramArg, bufferArg, inputArg;
    SmallVector<SmallVector<unsigned>> stateArg;
    for (const Role &p : params)
      paramArg.push_back(addArg(fb.getArgument(p.index).getType(), "dsc.param",
                                builder.getStringAttr(p.name)));
    for (const Role &p : params) {
      stateArg.emplace_back();
      for (StringRef slot : slots)
        stateArg.back().push_back(
            addArg(fb.getArgument(p.index).getType(), "dsc.opt_state",
                   builder.getStringAttr(p.name + "/" + slot.str())));
    }
    for (const Role &r : buffers)
      bufferArg.push_back(addArg(fb.getArgument(r.index).getType(),
                                 "dsc.buffer", builder.getStringAttr(r.name)));
    for (const Role &in : inputs) {
      auto t = cast<RankedTensorType>(fb.getArgument(in.index).getType());
      SmallVector<int64_t> global(t.getShape());
      global[0] *= accumSteps;
      inputArg.push_back(
          addArg(t.clone(global), "dsc.input", builder.getStringAttr(in.name)));
    }
    SmallVector<std::pair<StringRef, double>> hypers;
    if (optimizer == "adamw")
      hypers = {{"lr", lr},
                {"beta1", beta1},
                {"beta2", beta2},
                {"eps", eps},
                {"weight_decay", weightDecay},
                {"clip", clip}};
    else
      hypers = {{"lr", lr},
                {"momentum", momentum},
                {"weight_decay", weightDecay},
                {"clip", clip}};
    llvm::StringMap<unsigned> hyperArg;
    auto scalarF32Type = RankedTensorType::get({}, builder.getF32Type());
    auto scalarI64Type = RankedTensorType::get({}, builder.getI64Type());
    for (auto &[name, _] : hypers)
      hyperArg[name] =
          addArg(scalarF32Type, "dsc.hyper", builder.getStringAttr(name));
    unsigned stepArg = addArg(scalarI64Type, "dsc.step", builder.getUnitAttr());
    addArg(scalarI64Type, "dsc.seed", builder.getUnitAttr());

    auto step = func::FuncOp::create(loc, "train_step",
                                     builder.getFunctionType(argTypes, {}));
    module.push_back(step);
    Block *body = step.addEntryBlock();
    for (auto [i, attr] : llvm::enumerate(argAttrs))
      step.setArgAttr(i, attr.getName(), attr.getValue());
    builder.setInsertionPointToEnd(body);
    auto arg = [&](unsigned i) { return body->getArgument(i); };

    // 3. Micro-batches: slice, run forward_backward, average.
    SmallVector<Value> bufferValues;
    for (unsigned i : bufferArg)
      bufferValues.push_back(arg(i));
    Value lossSum, countSum;
    SmallVector<Value> gradSum(params.size());
    for (int64_t k = 0; k < accumSteps; ++k) {
      SmallVector<Value> callArgs(fb.getNumArguments());
      for (auto [p, a] : llvm::zip(params, paramArg))
        callArgs[p.index] = arg(a);
      for (auto [r, v] : llvm::zip(buffers, bufferValues))
        callArgs[r.index] = v;
      for (auto [in, a] : llvm::zip(inputs, inputArg)) {
        Value global = arg(a);
        if (accumSteps == 1) {
          callArgs[in.index] = global;
          continue;
        }
        auto t = cast<RankedTensorType>(global.getType());
        SmallVector<int64_t> offsets(t.getRank(), 0), sizes(t.getShape()),
            strides(t.getRank(), 1);
        offsets[0] = k * microBatch;
        sizes[0] = microBatch;
        callArgs[in.index] = dsc::SliceOp::create(
            builder, loc, global, builder.getDenseI64ArrayAttr(offsets),
            builder.getDenseI64ArrayAttr(sizes),
            builder.getDenseI64ArrayAttr(strides));
      }
      auto call = func::CallOp::create(builder, loc, fb, callArgs);
      Value loss = call.getResult(0);
      if (countIndex >= 0) {
        Value n = call.getResult(countIndex);
        countSum =
            countSum ? dsc::AddOp::create(builder, loc, countSum, n).getResult()
                     : n;
      }
      lossSum =
          lossSum ? dsc::AddOp::create(builder, loc, lossSum, loss).getResult()
                  : loss;
      for (auto [i, p] : llvm::enumerate(params)) {
        Value g = call.getResult(gradResult.lookup(p.name));
        gradSum[i] =
            gradSum[i]
                ? dsc::AddOp::create(builder, loc, gradSum[i], g).getResult()
                : g;
      }
      for (auto [i, r] : llvm::enumerate(buffers))
        if (bufferResult.count(r.name))
          bufferValues[i] = call.getResult(bufferResult.lookup(r.name));
    }
    Value loss = lossSum;
    SmallVector<Value> grads(gradSum);
    if (countSum) {
      // Summed losses over the labels that count: divide once by their
      // total (dsc-zero-partition makes it the total over all ranks).
      auto inv = dsc::ReciprocalOp::create(builder, loc, countSum);
      inv->setAttr("dsc.loss_normalizer", builder.getUnitAttr());
      loss = dsc::MulOp::create(builder, loc, loss, scalarAs(inv, loss));
      for (Value &g : grads)
        g = dsc::MulOp::create(builder, loc, g, scalarAs(inv, g));
    } else if (accumSteps > 1) {
      double inv = 1.0 / accumSteps;
      loss = dsc::MulOp::create(builder, loc, loss, splatLike(loss, inv));
      for (Value &g : grads)
        g = dsc::MulOp::create(builder, loc, g, scalarAs(scalarF32(inv), g));
    }

    // 4. Global norm (in f32) and clipping.
    Value norm = dsc::SqrtOp::create(builder, loc,
                                     dsc::sumOfSquaresF32(builder, loc, grads));
    Value coef =
        dsc::clipCoefficient(builder, loc, norm, arg(hyperArg.lookup("clip")));
    SmallVector<Value> clipped;
    for (Value g : grads)
      clipped.push_back(dsc::MulOp::create(builder, loc, g, scalarAs(coef, g)));

    // 5. Learning rate and the update.
    Value lrNow = dsc::LrScheduleOp::create(
        builder, loc, arg(stepArg), arg(hyperArg.lookup("lr")),
        builder.getStringAttr(schedule), builder.getI64IntegerAttr(warmupSteps),
        builder.getI64IntegerAttr(totalSteps),
        builder.getF64FloatAttr(warmupMinRatio),
        builder.getF64FloatAttr(minRatio));
    SmallVector<Value> newParams, newStates;
    for (auto [i, p] : llvm::enumerate(params)) {
      Value wd = arg(hyperArg.lookup("weight_decay"));
      if (!noDecay.empty() && noDecayRe.match(p.name))
        wd = scalarF32(0.0);
      Value param = arg(paramArg[i]);
      if (optimizer == "adamw") {
        auto op = dsc::AdamWOp::create(
            builder, loc, param, clipped[i], arg(stateArg[i][0]),
            arg(stateArg[i][1]), lrNow, arg(hyperArg.lookup("beta1")),
            arg(hyperArg.lookup("beta2")), arg(hyperArg.lookup("eps")), wd,
            arg(stepArg));
        newParams.push_back(op.getNewParam());
        newStates.append({op.getNewExpAvg(), op.getNewExpAvgSq()});
      } else {
        auto op = dsc::SgdOp::create(
            builder, loc, param, clipped[i], arg(stateArg[i][0]), lrNow,
            arg(hyperArg.lookup("momentum")), wd, arg(stepArg),
            builder.getF64FloatAttr(dampening), builder.getBoolAttr(nesterov));
        newParams.push_back(op.getNewParam());
        newStates.push_back(op.getNewMomentumBuffer());
      }
    }

    // 6. Results, each named for the program.
    SmallVector<Value> results{loss};
    SmallVector<NamedAttribute> resultAttrs{
        builder.getNamedAttr("dsc.output", builder.getStringAttr("loss"))};
    for (auto [p, v] : llvm::zip(params, newParams)) {
      results.push_back(v);
      resultAttrs.push_back(builder.getNamedAttr(
          "dsc.param_update", builder.getStringAttr(p.name)));
    }
    for (auto [i, p] : llvm::enumerate(params))
      for (auto [j, slot] : llvm::enumerate(slots)) {
        results.push_back(newStates[i * slots.size() + j]);
        resultAttrs.push_back(builder.getNamedAttr(
            "dsc.opt_state_update",
            builder.getStringAttr(p.name + "/" + slot.str())));
      }
    for (auto [r, v] : llvm::zip(buffers, bufferValues)) {
      results.push_back(v);
      resultAttrs.push_back(builder.getNamedAttr(
          "dsc.buffer_update", builder.getStringAttr(r.name)));
    }
    for (auto [p, g] : llvm::zip(params, grads)) {
      results.push_back(g);
      resultAttrs.push_back(
          builder.getNamedAttr("dsc.grad", builder.getStringAttr(p.name)));
    }
    results.push_back(norm);
    resultAttrs.push_back(
        builder.getNamedAttr("dsc.grad_norm", builder.getUnitAttr()));
    results.push_back(lrNow);
    resultAttrs.push_back(
        builder.getNamedAttr("dsc.lr", builder.getUnitAttr()));
    func::ReturnOp::create(builder, loc, results);
    step.setType(
        builder.getFunctionType(argTypes, TypeRange(ValueRange(results))));
    for (auto [i, attr] : llvm::enumerate(resultAttrs))
      step.setResultAttr(i, attr.getName(), attr.getValue());

    // 7. What the program needs to know.
    SmallVector<NamedAttribute> hyperDefaults;
    for (auto &[name, value] : hypers)
      hyperDefaults.push_back(
          builder.getNamedAttr(name, builder.getF64FloatAttr(value)));
    module->setAttr("dsc.hypers", builder.getDictionaryAttr(hyperDefaults));
    module->setAttr("dsc.optimizer", builder.getStringAttr(optimizer));
    module->setAttr("dsc.micro_batch", builder.getI64IntegerAttr(
                                           std::max<int64_t>(microBatch, 1)));
    module->setAttr("dsc.accum_steps", builder.getI64IntegerAttr(accumSteps));
    module->setAttr("dsc.tokens_per_example",
                    builder.getI64IntegerAttr(tokens));
  }
};

} // namespace
