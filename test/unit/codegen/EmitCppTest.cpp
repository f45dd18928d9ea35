//===- EmitCppTest.cpp - the C++ code generator and its memory plan -------===//
//
// The memory plan is checked against the IR it plans: no two values live at
// the same time share bytes, no op writes over its own operands, and a
// callee's frame sits above everything live at the call. The emitter is
// checked for what a reader and the program shell rely on (the checked
// call naming the ONNX node, the spec, in-place results) and for its errors.
// Compiling and running the output against PyTorch references is the
// end-to-end tests' job.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/EmitCpp.h"
#include "compiler/codegen/MemoryPlan.h"

#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "llvm/Support/JSON.h"

#include "gtest/gtest.h"

#include <string>

using namespace mlir;

namespace {

class CodegenTest : public ::testing::Test {
protected:
  CodegenTest() {
    ctx.loadDialect<dsc::DscDialect, func::FuncDialect, shard::ShardDialect>();
    ctx.allowUnregisteredDialects();
  }

  OwningOpRef<ModuleOp> parse(const char *text) {
    auto module = parseSourceString<ModuleOp>(text, &ctx);
    EXPECT_TRUE(module);
    return module;
  }

  /// Emits `module`; `errors` receives the diagnostics.
  bool emit(ModuleOp module, std::string &out, std::string &errors,
            dsc::EmitCppOptions options = {}) {
    llvm::raw_string_ostream os(out);
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      errors += d.str() + "\n";
      return success();
    });
    return succeeded(dsc::emitCpp(module, os, options));
  }

  MLIRContext ctx;
};

dsc::codegen::PlanOptions
planOptions(const llvm::DenseMap<Operation *, uint64_t> &calleeBytes) {
  dsc::codegen::PlanOptions o;
  o.bytes = [](Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    return uint64_t(t.getNumElements()) *
           ((t.getElementType().getIntOrFloatBitWidth() + 7) / 8);
  };
  o.isStaticConstant = [](Operation *) { return true; };
  o.calleeBytes = [calleeBytes](func::CallOp call) {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    return calleeBytes.lookup(callee);
  };
  return o;
}

dsc::codegen::PlanOptions planOptions() {
  return planOptions(llvm::DenseMap<Operation *, uint64_t>());
}

/// A value's bytes in a frame and the ops over which they are in use.
struct LiveRange {
  size_t def, end;
  uint64_t offset, bytes;
};

/// No two ranges in use at the same op share a byte.
void expectApartWhileLive(const std::vector<LiveRange> &ranges) {
  for (size_t a = 0; a < ranges.size(); ++a)
    for (size_t b = a + 1; b < ranges.size(); ++b) {
      const LiveRange &x = ranges[a], &y = ranges[b];
      bool liveTogether = x.def <= y.end && y.def <= x.end;
      bool overlap =
          x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      EXPECT_FALSE(liveTogether && overlap)
          << "values defined at ops " << x.def << " and " << y.def
          << " share bytes while both live";
    }
}

/// Checks a plan against the liveness of the IR itself.
void checkPlan(func::FuncOp func, const dsc::codegen::FramePlan &plan) {
  using Kind = dsc::codegen::Storage::Kind;
  std::vector<Operation *> ops;
  for (Operation &op : func.getBody().front())
    ops.push_back(&op);
  llvm::DenseMap<Operation *, size_t> index;
  for (auto [i, op] : llvm::enumerate(ops))
    index[op] = i;
  // Where each arena value's bytes are in use: from its op to the last use
  // of it or of any reshape aliasing it.
  std::vector<LiveRange> ranges;
  for (Operation *op : ops) {
    if (plan.dead.contains(op))
      continue;
    for (Value r : op->getResults()) {
      const auto &s = plan.storage.lookup(r);
      if (s.kind != Kind::Arena)
        continue;
      size_t end = index[op];
      for (auto [v, vs] : plan.storage)
        if (v == r || (vs.kind == Kind::Alias && vs.source == r))
          for (Operation *user : v.getUsers())
            if (!plan.dead.contains(user))
              end = std::max(end, index[user]);
      EXPECT_EQ(s.offset % 64, 0u);
      EXPECT_LE(s.offset + s.bytes, plan.ownBytes);
      ranges.push_back({index[op], end, s.offset, s.bytes});
    }
  }
  expectApartWhileLive(ranges);
  // A callee frame starts above every range live at the call.
  for (auto [op, offset] : plan.calleeOffset)
    for (const LiveRange &r : ranges)
      if (r.def <= index[op] && index[op] <= r.end) {
        EXPECT_GE(offset, r.offset + r.bytes);
      }
}

const char *kChain = R"mlir(
module {
  func.func @callee(%a: tensor<16xf32>) -> tensor<16xf32> {
    %0 = dsc.exp %a : tensor<16xf32>
    %1 = dsc.neg %0 : tensor<16xf32>
    return %1 : tensor<16xf32>
  }
  func.func @train_step(%x: tensor<4x16xf32> {dsc.input = "x"},
                        %w: tensor<16xf32> {dsc.param = "w"})
      -> (tensor<f32> {dsc.output = "loss"}, tensor<16xf32> {dsc.grad = "w"}) {
    %0 = dsc.mul %x, %w : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
    %1 = dsc.tanh %0 : tensor<4x16xf32>
    %2 = dsc.exp %1 : tensor<4x16xf32>
    %3 = dsc.add %2, %1 : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
    %4 = dsc.reshape %3 {shape = array<i64: 64>} : tensor<4x16xf32> -> tensor<64xf32>
    %5 = dsc.sigmoid %0 : tensor<4x16xf32>
    %unused = dsc.relu %5 : tensor<4x16xf32>
    %6 = dsc.reduce_sum %4 {axes = array<i64: 0>, keepdims = false} : tensor<64xf32> -> tensor<f32>
    %7 = func.call @callee(%w) : (tensor<16xf32>) -> tensor<16xf32>
    %8 = dsc.reduce_sum %5 {axes = array<i64: 0>, keepdims = false} : tensor<4x16xf32> -> tensor<16xf32>
    %9 = dsc.mul %8, %7 : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
    %10 = dsc.reshape %9 {shape = array<i64: 4, 4>} : tensor<16xf32> -> tensor<4x4xf32>
    %11 = dsc.reshape %10 {shape = array<i64: 16>} : tensor<4x4xf32> -> tensor<16xf32>
    return %6, %11 : tensor<f32>, tensor<16xf32>
  }
}
)mlir";

TEST_F(CodegenTest, PlanKeepsLiveValuesApart) {
  auto module = parse(kChain);
  auto callee = module->lookupSymbol<func::FuncOp>("callee");
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  for (bool reuse : {true, false})
    for (bool alias : {true, false}) {
      auto options = planOptions();
      options.reuse = reuse;
      options.aliasReshapes = alias;
      auto calleePlan = dsc::codegen::planFrame(callee, options);
      checkPlan(callee, calleePlan);
      llvm::DenseMap<Operation *, uint64_t> calleeBytes;
      calleeBytes[callee] = calleePlan.totalBytes;
      auto withCallee = planOptions(calleeBytes);
      withCallee.reuse = reuse;
      withCallee.aliasReshapes = alias;
      auto plan = dsc::codegen::planFrame(step, withCallee);
      checkPlan(step, plan);
      // The callee computes its only result into the caller's storage.
      EXPECT_EQ(calleePlan.ownBytes, 64u);
      EXPECT_GE(plan.totalBytes, plan.ownBytes);
      EXPECT_EQ(plan.dead.size(), 1u); // %unused
    }
}

// First fit in op order puts the small %a at 0 and %b above it; %c, made
// while %b lives, no longer fits under %b once %a is gone: 576 bytes for a
// peak of 512 live. Placing the largest first packs it to the peak.
TEST_F(CodegenTest, PlanPacksToThePeakWhereOpOrderFragments) {
  auto module = parse(R"mlir(
module {
  func.func @f(%x: tensor<16xf32>, %y: tensor<4x16xf32>) -> tensor<f32> {
    %a = dsc.exp %x : tensor<16xf32>
    %b = dsc.add %y, %a : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
    %c = dsc.exp %b : tensor<4x16xf32>
    %s = dsc.reduce_sum %c {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x16xf32> -> tensor<f32>
    return %s : tensor<f32>
  }
}
)mlir");
  auto f = module->lookupSymbol<func::FuncOp>("f");
  auto plan = dsc::codegen::planFrame(f, planOptions());
  checkPlan(f, plan);
  EXPECT_EQ(plan.peakLiveBytes, 512u);
  EXPECT_EQ(plan.ownBytes, 512u);
  EXPECT_EQ(plan.totalBytes, 512u);
}

TEST_F(CodegenTest, PlanComputesReturnedReshapesInPlace) {
  auto module = parse(kChain);
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  auto plan = dsc::codegen::planFrame(step, planOptions());
  using Kind = dsc::codegen::Storage::Kind;
  Value ret = step.getBody().front().getTerminator()->getOperand(1);
  const auto &s = plan.storage.lookup(ret);
  ASSERT_EQ(s.kind, Kind::Alias);
  // %11 -> %10 -> %9: %9 is computed straight into results[1].
  const auto &root = plan.storage.lookup(s.source);
  EXPECT_EQ(root.kind, Kind::Result);
  EXPECT_EQ(root.index, 1u);
}

// dsc-accumulate-in-call's shape: the callee returns its running sum plus
// the gradient in place of the sum's argument. In the caller each call's
// result takes the storage of the sum it was passed when that sum dies at
// the call (one buffer through the first two calls), and not when it is
// read later (%b#1, read after the third call). In the callee, nothing but the
// sum itself is computed into that result: the gradient (which the add
// writes over, dsc.overwrites) keeps its own bytes, as the argument is
// still read there.
TEST_F(CodegenTest, PlanWritesACallResultOverItsRunningSum) {
  auto module = parse(R"mlir(
module {
  func.func @fb(%p: tensor<16xf32>, %acc: tensor<16xf32> {dsc.accumulator = 1 : i64})
      -> (tensor<f32>, tensor<16xf32> {dsc.in_place = 1 : i64}) {
    %g = dsc.exp %p : tensor<16xf32>
    %s = dsc.add %acc, %g {dsc.overwrites = 1 : i64} : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
    %l = dsc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<16xf32> -> tensor<f32>
    return %l, %s : tensor<f32>, tensor<16xf32>
  }
  func.func @train_step(%p: tensor<16xf32> {dsc.param = "p"})
      -> (tensor<16xf32>, tensor<16xf32>) {
    %z = dsc.neg %p : tensor<16xf32>
    %a:2 = func.call @fb(%p, %z) : (tensor<16xf32>, tensor<16xf32>) -> (tensor<f32>, tensor<16xf32>)
    %b:2 = func.call @fb(%p, %a#1) : (tensor<16xf32>, tensor<16xf32>) -> (tensor<f32>, tensor<16xf32>)
    %c:2 = func.call @fb(%p, %b#1) : (tensor<16xf32>, tensor<16xf32>) -> (tensor<f32>, tensor<16xf32>)
    %d:2 = func.call @fb(%p, %c#1) : (tensor<16xf32>, tensor<16xf32>) -> (tensor<f32>, tensor<16xf32>)
    %n = dsc.add %d#1, %b#1 : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
    %m = dsc.neg %n : tensor<16xf32>
    %k = dsc.neg %m : tensor<16xf32>
    return %m, %k : tensor<16xf32>, tensor<16xf32>
  }
}
)mlir");
  using Kind = dsc::codegen::Storage::Kind;
  auto fb = module->lookupSymbol<func::FuncOp>("fb");
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  auto calleePlan = dsc::codegen::planFrame(fb, planOptions());
  checkPlan(fb, calleePlan);
  Block &body = fb.getBody().front();
  Value g = body.front().getResult(0);
  Value sum = body.getTerminator()->getOperand(1);
  EXPECT_EQ(calleePlan.storage.lookup(sum).kind, Kind::Result);
  EXPECT_EQ(calleePlan.storage.lookup(g).kind, Kind::Arena);
  llvm::DenseMap<Operation *, uint64_t> calleeBytes;
  calleeBytes[fb] = calleePlan.totalBytes;
  auto plan = dsc::codegen::planFrame(step, planOptions(calleeBytes));
  checkPlan(step, plan);
  SmallVector<func::CallOp> calls(step.getOps<func::CallOp>());
  ASSERT_EQ(calls.size(), 4u);
  Value z = step.getBody().front().front().getResult(0);
  for (unsigned k : {0u, 1u, 3u}) {
    const auto &s = plan.storage.lookup(calls[k].getResult(1));
    EXPECT_EQ(s.kind, Kind::Alias) << "call " << k;
    EXPECT_EQ(s.source, k < 3 ? z : calls[2].getResult(1)) << "call " << k;
  }
  // %b#1 is read after the third call: that call's sum has bytes of its
  // own, which the fourth call writes over.
  EXPECT_EQ(plan.storage.lookup(calls[2].getResult(1)).kind, Kind::Arena);
}

// A callee that reads its running sum again after it makes the result in
// its place: the caller gives the result bytes of its own (written over the
// argument, the later read would see the new sum).
TEST_F(CodegenTest, PlanKeepsACallResultApartFromASumReadAgain) {
  auto module = parse(R"mlir(
module {
  func.func @fb(%p: tensor<16xf32>, %acc: tensor<16xf32> {dsc.accumulator = 1 : i64})
      -> (tensor<16xf32>, tensor<16xf32> {dsc.in_place = 1 : i64}) {
    %g = dsc.exp %p : tensor<16xf32>
    %s = dsc.add %acc, %g : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
    %n = dsc.neg %acc : tensor<16xf32>
    return %n, %s : tensor<16xf32>, tensor<16xf32>
  }
  func.func @train_step(%p: tensor<16xf32> {dsc.param = "p"}) -> tensor<16xf32> {
    %z = dsc.neg %p : tensor<16xf32>
    %a:2 = func.call @fb(%p, %z) : (tensor<16xf32>, tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>)
    %m = dsc.neg %a#1 : tensor<16xf32>
    return %m : tensor<16xf32>
  }
}
)mlir");
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  auto plan = dsc::codegen::planFrame(step, planOptions());
  checkPlan(step, plan);
  auto call = *step.getOps<func::CallOp>().begin();
  EXPECT_EQ(plan.storage.lookup(call.getResult(1)).kind,
            dsc::codegen::Storage::Kind::Arena);
}

// A tied classifier's weight gradient made onto the running sum (its init)
// and the embedding's rows scattered into it: the whole chain is computed
// in the in-place result's storage, no buffer of its own. When the sum is
// read elsewhere too, the chain may not write there before that read: the
// classifier's gradient gets bytes of its own.
TEST_F(CodegenTest, PlanComputesAnInPlaceChainInTheResult) {
  const char *text = R"mlir(
module {
  func.func @fb(%x: tensor<8x4xf32>, %w: tensor<6x4xf32>, %y: tensor<8xi64>,
                %acc: tensor<6x4xf32> {dsc.accumulator = 1 : i64})
      -> (tensor<f32>, tensor<6x4xf32> {dsc.in_place = 3 : i64}, tensor<6x4xf32>) {
    %seed = dsc.constant dense<1.0> : tensor<f32>
    %loss, %dx, %dw, %logits, %chunks = dsc.linear_cross_entropy %x, %w, %y, %seed init %acc {chunk_rows = 4 : i64, f32_weight_grad = true, transpose_weight = true} : tensor<8x4xf32>, tensor<6x4xf32>, tensor<8xi64>, tensor<f32>, tensor<6x4xf32>
    %s = dsc.scatter_add %dx, %y into %dw {axis = 0 : i64, dsc.overwrites = 2 : i64, shape = array<i64: 6, 4>} : tensor<8x4xf32>, tensor<8xi64>, tensor<6x4xf32> -> tensor<6x4xf32>
    %e = dsc.neg %EXTRA : tensor<6x4xf32>
    return %loss, %s, %e : tensor<f32>, tensor<6x4xf32>, tensor<6x4xf32>
  }
}
)mlir";
  using Kind = dsc::codegen::Storage::Kind;
  for (const char *extra : {"%w", "%acc"}) {
    std::string source = text;
    source.replace(source.find("%EXTRA"), 6, extra);
    auto module = parse(source.c_str());
    auto fb = module->lookupSymbol<func::FuncOp>("fb");
    auto plan = dsc::codegen::planFrame(fb, planOptions());
    checkPlan(fb, plan);
    auto lce = *fb.getOps<dsc::LinearCrossEntropyOp>().begin();
    const auto &dw = plan.storage.lookup(lce.getGradWeight());
    bool alone = std::string(extra) == "%w";
    EXPECT_EQ(dw.kind, alone ? Kind::Result : Kind::Arena) << extra;
    if (alone) {
      EXPECT_EQ(dw.index, 1u);
    }
    Value sum = fb.getBody().front().getTerminator()->getOperand(1);
    EXPECT_EQ(plan.storage.lookup(sum).kind, Kind::Result) << extra;
  }
}

// An offloaded step's host values (dsc-offload's shape: each chunk's
// gradient copied down, a host task, its result copied up): the host
// frame is reused, values that live together never share bytes, and a
// range is free only once the host task after its value's last use is
// issued (a copy up issued right after a task must not hold up the next).
TEST_F(CodegenTest, PlanReusesTheHostFrameForDeadChunks) {
  auto module = parse(R"mlir(
module {
  func.func @train_step(%w1: tensor<256xf32> {dsc.memory = "host"}, %w2: tensor<256xf32> {dsc.memory = "host"},
                        %w3: tensor<256xf32> {dsc.memory = "host"}, %w4: tensor<256xf32> {dsc.memory = "host"},
                        %g1: tensor<256xf32>, %g2: tensor<256xf32>, %g3: tensor<256xf32>, %g4: tensor<256xf32>)
      -> (tensor<256xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256xf32>) {
    %h1 = dsc.offload_copy %g1 {to = "host"} : tensor<256xf32>
    %h2 = dsc.offload_copy %g2 {to = "host"} : tensor<256xf32>
    %h3 = dsc.offload_copy %g3 {to = "host"} : tensor<256xf32>
    %a1 = dsc.add %w1, %h1 {dsc.on_host} : tensor<256xf32>, tensor<256xf32> -> tensor<256xf32>
    %u1 = dsc.offload_copy %a1 {to = "device"} : tensor<256xf32>
    %h4 = dsc.offload_copy %g4 {to = "host"} : tensor<256xf32>
    %a2 = dsc.add %w2, %h2 {dsc.on_host} : tensor<256xf32>, tensor<256xf32> -> tensor<256xf32>
    %u2 = dsc.offload_copy %a2 {to = "device"} : tensor<256xf32>
    %a3 = dsc.add %w3, %h3 {dsc.on_host} : tensor<256xf32>, tensor<256xf32> -> tensor<256xf32>
    %u3 = dsc.offload_copy %a3 {to = "device"} : tensor<256xf32>
    %a4 = dsc.add %w4, %h4 {dsc.on_host} : tensor<256xf32>, tensor<256xf32> -> tensor<256xf32>
    %u4 = dsc.offload_copy %a4 {to = "device"} : tensor<256xf32>
    return %u1, %u2, %u3, %u4 : tensor<256xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256xf32>
  }
}
)mlir");
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  auto options = planOptions();
  options.separateHost = true;
  auto plan = dsc::codegen::planFrame(step, options);
  using Kind = dsc::codegen::Storage::Kind;
  std::vector<Operation *> ops;
  for (Operation &op : step.getBody().front())
    ops.push_back(&op);
  // Each host value's bytes are in use from its op up to the host task
  // after its last use.
  std::vector<LiveRange> ranges;
  uint64_t sum = 0;
  for (auto [i, op] : llvm::enumerate(ops))
    for (Value r : op->getResults()) {
      const auto &s = plan.storage.lookup(r);
      if (s.kind != Kind::HostArena)
        continue;
      size_t last = i;
      for (auto [j, user] : llvm::enumerate(ops))
        if (llvm::is_contained(user->getOperands(), r))
          last = std::max(last, j);
      size_t next = ops.size();
      for (size_t j = last + 1; j < ops.size(); ++j)
        if (ops[j]->hasAttr("dsc.on_host")) {
          next = j;
          break;
        }
      EXPECT_LE(s.offset + s.bytes, plan.hostBytes);
      ranges.push_back({i, next, s.offset, s.bytes});
      sum += s.bytes;
    }
  ASSERT_EQ(ranges.size(), 8u); // four gradients down, four task results
  expectApartWhileLive(ranges);
  // Reused: less than every value a range of its own (8 KiB).
  EXPECT_LT(plan.hostBytes, sum);
}

TEST_F(CodegenTest, EmitsCheckedCallsAndSpec) {
  auto module = parse(R"mlir(
module attributes {dsc.optimizer = "sgd", dsc.micro_batch = 2 : i64,
                   dsc.hypers = {lr = 5.000000e-02 : f64}} {
  func.func @train_step(%x: tensor<2x3xf32> {dsc.input = "x"},
                        %lr: tensor<f32> {dsc.hyper = "lr"},
                        %s: tensor<i64> {dsc.seed})
      -> (tensor<2x3xf32> {dsc.output = "loss"}, tensor<2x3xf32> {dsc.grad = "w"}) {
    %0 = dsc.relu %x : tensor<2x3xf32> loc("/net/Relu_1"("m.onnx":1:0))
    %1, %mask = dsc.dropout %0 {ratio = 0.25 : f64} : tensor<2x3xf32> loc("/Dropout")
    %c = dsc.constant dense<0.1> : tensor<f32>
    %2 = dsc.mul %1, %c : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    return %2, %x : tensor<2x3xf32>, tensor<2x3xf32>
  }
}
)mlir");
  std::string out, errors;
  ASSERT_TRUE(emit(*module, out, errors)) << errors;
  auto has = [&](const char *text) {
    return out.find(text) != std::string::npos;
  };
  EXPECT_TRUE(has("rt::unary(rt::UnaryOp::Relu, v_arg0, v0)"));
  EXPECT_TRUE(has("return failed(s, \"@train_step\", \"dsc.relu\", "
                  "\"/net/Relu_1\");"));
  // The first dropout of its function: position 0 among the dropouts
  // (the op's index in the block is 1).
  EXPECT_TRUE(has("rt::dropoutSeed(ctx.seed, ctx.step, ctx.call, 0)"));
  EXPECT_TRUE(has("const float kConst0[1] = {\n    0.1f,\n};"));
  EXPECT_TRUE(has("const Tensor &v2 = results[0];"));
  EXPECT_TRUE(has("rt::reshape(v_arg0, results[1])")); // an argument
  EXPECT_TRUE(
      has("{dsc::ArgRole::Input, \"x\", {DType::F32, 2, {2, 3}}, -1},"));
  EXPECT_TRUE(has("{dsc::ArgRole::Seed, \"seed\", {DType::I64, 0, {}}, -1},"));
  EXPECT_TRUE(
      has("{dsc::ResultRole::Grad, \"w\", {DType::F32, 2, {2, 3}}, -1},"));
  EXPECT_TRUE(has("{\"lr\", 0.05},"));
  EXPECT_TRUE(has("/*optimizer=*/\"sgd\""));
  EXPECT_TRUE(has("/*microBatch=*/2,"));
  EXPECT_TRUE(has("static_cast<uint64_t>(*args[2].as<int64_t>()), 0, 0"));
  EXPECT_TRUE(has("return dsc::runProgram(dsc_program, argc, argv);"));
  // One rank: no grid, no collectives, no buckets.
  EXPECT_TRUE(has("/*worldSize=*/1,\n    /*groupSize=*/1,\n    /*stage=*/0,"));
  EXPECT_TRUE(has("const dsc::CollectiveSpec *const kCollectives = nullptr;"));
  EXPECT_TRUE(has("const dsc::BucketSpec *const kBuckets = nullptr;"));
  EXPECT_FALSE(has("noCommunicator"));

  std::string out64, errors64;
  dsc::EmitCppOptions f64;
  f64.promoteF32ToF64 = true;
  f64.emitMain = false;
  ASSERT_TRUE(emit(*module, out64, errors64, f64)) << errors64;
  EXPECT_NE(out64.find("const double kConst0[1] = {\n    0.10000000149011612,"),
            std::string::npos);
  EXPECT_NE(out64.find("{dsc::ArgRole::Input, \"x\", {DType::F64, 2, {2, 3}}"),
            std::string::npos);
  EXPECT_EQ(out64.find("int main"), std::string::npos);
}

TEST_F(CodegenTest, ReportsWhatItCannotLower) {
  struct Case {
    const char *ir;
    const char *error;
  } cases[] = {
      {R"mlir(module {
  func.func @train_step(%x: tensor<2xf32> {dsc.input = "x"}) -> (tensor<2xf32> {dsc.output = "y"}) {
    %0 = "foo.bar"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
})mlir",
       "codegen has no runtime lowering for foo.bar"},
      {R"mlir(module {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
})mlir",
       "no function @train_step"},
      {R"mlir(module {
  func.func @train_step(%x: tensor<2xf32>) -> (tensor<2xf32> {dsc.output = "y"}) {
    return %x : tensor<2xf32>
  }
})mlir",
       "argument 0 of @train_step has no role"},
      {R"mlir(module {
  func.func @train_step(%x: tensor<2xi16> {dsc.input = "x"}) -> (tensor<2xi16> {dsc.output = "y"}) {
    %0 = dsc.neg %x : tensor<2xi16>
    return %0 : tensor<2xi16>
  }
})mlir",
       "no runtime dtype for element type 'i16'"},
      {R"mlir(module {
  func.func @train_step(%x: tensor<2xf32> {dsc.input = "x"}) -> (tensor<2xf32> {dsc.output = "y"}) {
    %0 = func.call @train_step(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
})mlir",
       "recursive call of @train_step"},
  };
  for (const Case &c : cases) {
    auto module = parse(c.ir);
    ASSERT_TRUE(module);
    std::string out, errors;
    EXPECT_FALSE(emit(*module, out, errors));
    EXPECT_NE(errors.find(c.error), std::string::npos) << errors;
    EXPECT_TRUE(out.empty()) << "nothing is written on failure";
  }
}

//===----------------------------------------------------------------------===//
// Sharding: shard collectives, the manifest, buckets
//===----------------------------------------------------------------------===//

// What dsc-zero-partition produces, by hand: 2 replicas x groups of 2, a
// micro-batch function called twice (gather the parameter shard, compute,
// reduce-scatter the gradient), an all_reduce across replicas, an
// all_slice, and a collective whose result is unused (never issued).
const char *kSharded = R"mlir(
module attributes {dsc.world_size = 4 : i64, dsc.group_size = 2 : i64,
                   dsc.stage = 3 : i64, dsc.optimizer = "adamw",
                   dsc.buckets = [
                     {name = "bucket0", padded = 8 : i64,
                      entries = [["w", 0 : i64, 6 : i64, [2, 3]], ["b", 6 : i64, 1 : i64]]},
                     {name = "bucket1", padded = 4 : i64, dtype = "f32",
                      entries = [["v", 0 : i64, 3 : i64]]}]} {
  shard.grid @dsc_ranks(shape = 2x2)
  func.func @micro(%p: tensor<4xf32>) -> tensor<4xf32> {
    %full = shard.all_gather %p on @dsc_ranks grid_axes = [1] gather_axis = 0
        : tensor<4xf32> -> tensor<8xf32> loc("bucket0 params")
    %g = dsc.exp %full : tensor<8xf32>
    %rs = shard.reduce_scatter %g on @dsc_ranks grid_axes = [1] scatter_axis = 0
        : tensor<8xf32> -> tensor<4xf32>
    return %rs : tensor<4xf32>
  }
  func.func @train_step(%p: tensor<4xf32> {dsc.param = "bucket0", dsc.bucket = 0 : i64},
                        %m: tensor<2xf32> {dsc.opt_state = "bucket1/exp_avg", dsc.bucket = 1 : i64},
                        %x: tensor<2x3xf32> {dsc.input = "x"})
      -> (tensor<4xf32> {dsc.param_update = "bucket0", dsc.bucket = 0 : i64},
          tensor<1x3xf32> {dsc.output = "loss"}) {
    %a = func.call @micro(%p) : (tensor<4xf32>) -> tensor<4xf32>
    %b = func.call @micro(%p) : (tensor<4xf32>) -> tensor<4xf32>
    %s = dsc.add %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %r0 = shard.all_reduce %s on @dsc_ranks grid_axes = [0] reduction = sum
        : tensor<4xf32> -> tensor<4xf32> loc("bucket0 gradients")
    %r = dsc.wait %r0 : tensor<4xf32>
    %unused = shard.all_reduce %m on @dsc_ranks grid_axes = [0, 1]
        : tensor<2xf32> -> tensor<2xf32>
    %sl = shard.all_slice %x on @dsc_ranks grid_axes = [1] slice_axis = 0
        : tensor<2x3xf32> -> tensor<1x3xf32>
    return %r, %sl : tensor<4xf32>, tensor<1x3xf32>
  }
}
)mlir";

TEST_F(CodegenTest, LowersCollectivesToTheCommunicator) {
  auto module = parse(kSharded);
  ASSERT_TRUE(module);
  std::string out, errors;
  ASSERT_TRUE(emit(*module, out, errors)) << errors;
  auto has = [&](const std::string &text) {
    return out.find(text) != std::string::npos;
  };
  EXPECT_TRUE(has("ctx.comm ? ctx.comm->allGather(v_arg0, v_all_gather, "
                  "dsc::GridAxes{2u}, \"bucket0 params\")\n"
                  "                : noCommunicator(\"shard.all_gather\", "
                  "\"bucket0 params\")"))
      << out;
  EXPECT_TRUE(has("ctx.comm->reduceScatter(v0, v_reduce_scatter, "
                  "dsc::GridAxes{2u}, \"op #2\")"));
  EXPECT_TRUE(has("ctx.comm->allReduce(v2, v_all_reduce, dsc::GridAxes{1u}, "
                  "\"bucket0 gradients\")"));
  EXPECT_TRUE(has("allSlice(ctx, v_arg2, v_all_slice, dsc::GridAxes{2u}, "
                  "\"op #6\")"));
  // The label is in the Communicator's message; it is no ONNX node.
  EXPECT_TRUE(has("return failed(s, \"@train_step\", \"shard.all_reduce\", "
                  "\"\");"));
  EXPECT_FALSE(has("v_unused")) << "an unused collective is not issued";
  // The reduce-scatter computes straight into the callee's result, the
  // all_reduce into the entry's.
  EXPECT_TRUE(has("const Tensor &v_reduce_scatter = results[0];"));
  EXPECT_TRUE(has("const Tensor &v_all_reduce = results[0];"));
  // dsc.wait is the identity: the all_reduce computes into its result.
  EXPECT_TRUE(has("// %3 = dsc.wait(%all_reduce) -> f32[4]\n"
                  "  // (results[0] already holds it)"))
      << out;
  // The context carries the communicator to every call.
  EXPECT_TRUE(has("return {ctx.seed, ctx.step,   ++*ctx.calls, ctx.calls, "
                  "ctx.frame + offset,\n          ctx.comm, ctx.consts, "
                  "ctx.clock,    ctx.hostFrame};"));
  EXPECT_TRUE(has("static_cast<char *>(frame), rank.comm, nullptr, "
                  "rank.clock, nullptr};"));
  EXPECT_TRUE(has("Status trainStep(const dsc::RankContext &rank, "));
  EXPECT_TRUE(has("constexpr int64_t kWorldSize = 4;"));
  EXPECT_TRUE(has("constexpr int64_t kGroupSize = 2;"));
  EXPECT_TRUE(has("rank.comm->groupSize(dsc::GridAxes{2u}) != kGroupSize"));

  // The spec.
  EXPECT_TRUE(has("{dsc::ArgRole::Param, \"bucket0\", {DType::F32, 1, {4}}, "
                  "0},"));
  EXPECT_TRUE(has("{dsc::ArgRole::OptState, \"bucket1/exp_avg\", "
                  "{DType::F32, 1, {2}}, 1},"));
  EXPECT_TRUE(has("{dsc::ArgRole::Input, \"x\", {DType::F32, 2, {2, 3}}, "
                  "-1},"));
  EXPECT_TRUE(has("{dsc::ResultRole::Param, \"bucket0\", {DType::F32, 1, "
                  "{4}}, 0},"));
  EXPECT_TRUE(has("const dsc::BucketEntry kBucket0Entries[] = {\n"
                  "    {\"w\", 0, 6, 2, {2, 3}},\n    {\"b\", 6, 1},\n};"));
  EXPECT_TRUE(has("const dsc::BucketEntry kBucket1Entries[] = {\n"
                  "    {\"v\", 0, 3},\n};"));
  EXPECT_TRUE(has("const dsc::BucketSpec kBuckets[] = {\n"
                  "    {\"bucket0\", DType::F32, 8, 2, kBucket0Entries},\n"
                  "    {\"bucket1\", DType::F32, 4, 1, kBucket1Entries},\n};"));
  EXPECT_TRUE(has("    /*worldSize=*/4,\n    /*groupSize=*/2,\n"
                  "    /*stage=*/3,\n    /*numBuckets=*/2,\n    kBuckets,\n"
                  "    /*numCollectives=*/5,\n    kCollectives,\n"
                  "    /*device=*/nullptr,\n    /*precision=*/\"fp32\",\n"
                  "    /*lossScaler=*/{},\n"));
  // Provenance is left null without a compile command line; the step's
  // FLOPs are counted (here: no matmul, 0).
  EXPECT_TRUE(has("    /*dscVersion=*/nullptr,\n"
                  "    /*compileCommand=*/nullptr,\n"));
  EXPECT_TRUE(has("    /*flopsPerStep=*/"));
  // The manifest: @micro's collectives twice, in call order, then the
  // entry's own; the unused all_reduce and the all_slice are not in it.
  EXPECT_TRUE(has("const dsc::CollectiveSpec kCollectives[] = {\n"
                  "    {\"all_gather\", \"bucket0 params\", DType::F32, 4, 8, "
                  "2u},\n"
                  "    {\"reduce_scatter\", \"op #2\", DType::F32, 8, 4, 2u},\n"
                  "    {\"all_gather\", \"bucket0 params\", DType::F32, 4, 8, "
                  "2u},\n"
                  "    {\"reduce_scatter\", \"op #2\", DType::F32, 8, 4, 2u},\n"
                  "    {\"all_reduce\", \"bucket0 gradients\", DType::F32, 4, "
                  "4, 1u},\n};"))
      << out;
}

TEST_F(CodegenTest, WritesTheManifestAsJson) {
  auto module = parse(kSharded);
  ASSERT_TRUE(module);
  std::string out, errors;
  dsc::EmitCppStats stats;
  {
    llvm::raw_string_ostream os(out);
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      errors += d.str() + "\n";
      return success();
    });
    ASSERT_TRUE(succeeded(dsc::emitCpp(*module, os, {}, &stats))) << errors;
  }
  EXPECT_EQ(stats.worldSize, 4);
  EXPECT_EQ(stats.groupSize, 2);
  EXPECT_EQ(stats.stage, 3);
  ASSERT_EQ(stats.collectives.size(), 5u);
  EXPECT_EQ(stats.collectives[4].kind, "all_reduce");
  EXPECT_EQ(stats.collectives[4].axesMask, 1u);

  std::string json;
  llvm::raw_string_ostream js(json);
  ASSERT_TRUE(succeeded(dsc::emitManifestJson(*module, js)));
  auto parsed = llvm::json::parse(json);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError()) << json;
  const llvm::json::Object *root = parsed->getAsObject();
  ASSERT_TRUE(root);
  EXPECT_EQ(root->getInteger("world_size"), 4);
  EXPECT_EQ(root->getInteger("group_size"), 2);
  EXPECT_EQ(root->getInteger("stage"), 3);
  const llvm::json::Array *list = root->getArray("collectives");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 5u);
  const llvm::json::Object *second = (*list)[1].getAsObject();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->getString("kind"), "reduce_scatter");
  EXPECT_EQ(second->getString("what"), "op #2");
  EXPECT_EQ(second->getString("dtype"), "f32");
  EXPECT_EQ(second->getInteger("in_numel"), 8);
  EXPECT_EQ(second->getInteger("out_numel"), 4);
  EXPECT_EQ(second->getInteger("axes_mask"), 2);

  // Computing in float64 changes the manifest's and the buckets' dtype.
  dsc::EmitCppOptions f64;
  f64.promoteF32ToF64 = true;
  std::string out64, errors64;
  ASSERT_TRUE(emit(*module, out64, errors64, f64)) << errors64;
  EXPECT_NE(out64.find("{\"all_reduce\", \"bucket0 gradients\", DType::F64"),
            std::string::npos);
  EXPECT_NE(out64.find("{\"bucket0\", DType::F64, 8, 2, kBucket0Entries}"),
            std::string::npos);
}

TEST_F(CodegenTest, ReportsWhatItCannotShard) {
  // A module around one function body, with a 2x2 grid unless replaced.
  auto wrap = [](std::string body, std::string attrs = "",
                 std::string grid = "shard.grid @dsc_ranks(shape = 2x2)",
                 std::string args = "%x: tensor<4x2xf32> {dsc.input = \"x\"}") {
    return "module attributes {" + attrs + "} {\n" + grid +
           "\n  func.func @train_step(" + args +
           ") -> (tensor<4x2xf32> {dsc.output = \"y\"}) {\n" + body +
           "\n  }\n}\n";
  };
  struct Case {
    std::string ir;
    const char *error;
  } cases[] = {
      {wrap(R"mlir(
    %0 = shard.all_gather %x on @dsc_ranks grid_axes = [1] gather_axis = 1
        : tensor<4x2xf32> -> tensor<4x4xf32>
    %1 = dsc.slice %0 {offsets = array<i64: 0, 0>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 1>} : tensor<4x4xf32> -> tensor<4x2xf32>
    return %1 : tensor<4x2xf32>)mlir"),
       "along tensor axis 0 only, got gather_axis = 1"},
      {wrap(R"mlir(
    %0 = shard.all_reduce %x on @dsc_ranks grid_axes = [1] reduction = max
        : tensor<4x2xf32> -> tensor<4x2xf32>
    return %0 : tensor<4x2xf32>)mlir"),
       "reduction = <sum> only, got <max>"},
      {wrap(R"mlir(
    %0 = shard.all_reduce %x on @dsc_ranks grid_axes = [1]
        : tensor<4x2xf32> -> tensor<4x2xf64>
    %1 = dsc.cast %0 {to = f32} : tensor<4x2xf64> -> tensor<4x2xf32>
    return %1 : tensor<4x2xf32>)mlir"),
       "must keep the element type"},
      {wrap("    return %x : tensor<4x2xf32>", "",
            "shard.grid @dsc_ranks(shape = 4)"),
       "rank grid must be 2-D and static"},
      {wrap("    return %x : tensor<4x2xf32>", "dsc.world_size = 8 : i64"),
       "dsc.world_size = 8, but the grid has 2 x 2 ranks"},
      {wrap("    return %x : tensor<4x2xf32>", "dsc.world_size = 2 : i64", ""),
       "no rank grid"},
      {wrap("    return %x : tensor<4x2xf32>",
            "dsc.buckets = [{name = \"bucket0\", padded = 7 : i64, "
            "entries = []}]"),
       "not a positive multiple of the group size 2"},
      {wrap("    return %x : tensor<4x2xf32>",
            "dsc.buckets = [{name = \"bucket0\", padded = 8 : i64, "
            "entries = [[\"w\", 4 : i64, 6 : i64]]}]"),
       "\"w\" at [4, 10) is outside its 8 elements"},
      {wrap("    return %x : tensor<4x2xf32>",
            "dsc.buckets = [{name = \"bucket0\", padded = 8 : i64, "
            "entries = [[\"w\", 0 : i64, 6 : i64, [4, 2]]]}]"),
       "\"w\" has 6 elements, but its shape says [4,2]"},
      {wrap("    return %x : tensor<4x2xf32>",
            "dsc.buckets = [{name = \"bucket0\", entries = []}]"),
       "dsc.buckets[0] must be {name"},
      {wrap(
           "    return %x : tensor<4x2xf32>",
           "dsc.buckets = [{name = \"bucket0\", padded = 8 : i64, "
           "entries = []}]",
           "shard.grid @dsc_ranks(shape = 2x2)",
           "%x: tensor<4x2xf32> {dsc.input = \"x\"}, "
           "%p: tensor<8xf32> {dsc.param = \"bucket0\", dsc.bucket = 0 : i64}"),
       "must be 1-D of 4 elements, got 'tensor<8xf32>'"},
      {wrap(
           "    return %x : tensor<4x2xf32>", "",
           "shard.grid @dsc_ranks(shape = 2x2)",
           "%x: tensor<4x2xf32> {dsc.input = \"x\"}, "
           "%p: tensor<4xf32> {dsc.param = \"bucket0\", dsc.bucket = 0 : i64}"),
       "names no bucket (the module has 0)"},
  };
  for (const Case &c : cases) {
    auto module = parse(c.ir.c_str());
    ASSERT_TRUE(module) << c.ir;
    std::string out, errors;
    EXPECT_FALSE(emit(*module, out, errors)) << c.ir;
    EXPECT_NE(errors.find(c.error), std::string::npos)
        << "want: " << c.error << "\ngot: " << errors;
    EXPECT_TRUE(out.empty());
  }
}

} // namespace
