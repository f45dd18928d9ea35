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
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

#include <string>

using namespace mlir;

namespace {

class CodegenTest : public ::testing::Test {
protected:
  CodegenTest() {
    ctx.loadDialect<dsc::DscDialect, func::FuncDialect>();
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
  struct Range {
    Value v;
    size_t def, end;
    uint64_t offset, bytes;
  };
  std::vector<Range> ranges;
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
      ranges.push_back({r, index[op], end, s.offset, s.bytes});
    }
  }
  for (size_t a = 0; a < ranges.size(); ++a)
    for (size_t b = a + 1; b < ranges.size(); ++b) {
      const Range &x = ranges[a], &y = ranges[b];
      bool liveTogether = x.def <= y.end && y.def <= x.end;
      bool overlap =
          x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      EXPECT_FALSE(liveTogether && overlap)
          << "values defined at ops " << x.def << " and " << y.def
          << " share bytes while both live";
    }
  // A callee frame starts above every range live at the call.
  for (auto [op, offset] : plan.calleeOffset)
    for (const Range &r : ranges)
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
  EXPECT_TRUE(has("cpu::unary(cpu::UnaryOp::Relu, v_arg0, v0)"));
  EXPECT_TRUE(has("return failed(s, \"@train_step\", \"dsc.relu\", "
                  "\"/net/Relu_1\");"));
  EXPECT_TRUE(has("cpu::dropoutSeed(ctx.seed, ctx.step, ctx.call, 1)"));
  EXPECT_TRUE(has("const float kConst0[1] = {\n    0.1f,\n};"));
  EXPECT_TRUE(has("const Tensor &v2 = results[0];"));
  EXPECT_TRUE(has("cpu::reshape(v_arg0, results[1])")); // an argument
  EXPECT_TRUE(has("{dsc::ArgRole::Input, \"x\", {DType::F32, 2, {2, 3}}},"));
  EXPECT_TRUE(has("{dsc::ArgRole::Seed, \"seed\", {DType::I64, 0, {}}},"));
  EXPECT_TRUE(has("{dsc::ResultRole::Grad, \"w\", {DType::F32, 2, {2, 3}}},"));
  EXPECT_TRUE(has("{\"lr\", 0.05},"));
  EXPECT_TRUE(has("/*optimizer=*/\"sgd\""));
  EXPECT_TRUE(has("/*microBatch=*/2,"));
  EXPECT_TRUE(has("static_cast<uint64_t>(*args[2].as<int64_t>()), 0, 0"));
  EXPECT_TRUE(has("return dsc::runProgram(dsc_program, argc, argv);"));

  std::string out64, errors64;
  dsc::EmitCppOptions f64;
  f64.promoteF32ToF64 = true;
  f64.emitMain = false;
  ASSERT_TRUE(emit(*module, out64, errors64, f64)) << errors64;
  EXPECT_NE(out64.find("const double kConst0[1] = {\n    0.10000000149011612,"),
            std::string::npos);
  EXPECT_NE(out64.find("{dsc::ArgRole::Input, \"x\", {DType::F64, 2, {2, 3}}}"),
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

} // namespace
