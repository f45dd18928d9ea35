//===- DscOps.td - the dsc dialect: tensor ops of a training step ----------===//
//
// Ops mirror the ONNX operators that PyTorch's exporters write, in a
// canonical form: every shape-like operand of ONNX (Reshape's shape, Slice's
// starts, ReduceMean's axes, ...) is folded at import into a static attribute,
// so the IR holds tensors with static shapes and no shape arithmetic.
// Every op infers its result types; the verifier checks them.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_OPS_TD
#define DSC_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "dialects/dsc/IR/DscInterfaces.td"

def Dsc_Dialect : Dialect {
  let name = "dsc";
  let cppNamespace = "::dsc";
  let summary = "Tensor-level ops of a training step compiled by dsc";
  let description = [{
    The `dsc` dialect holds the forward graph imported from ONNX, and later
    the whole training step (gradients, optimizer, collectives). Shapes are
    static; ONNX node names are kept as op locations.
  }];
  let hasConstantMaterializer = 1;
  // Inherent attributes live in the attribute dictionary so that the
  // table-driven importer can infer result types before it creates an op.
  let usePropertiesForAttributes = 0;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Dsc_Tensor : StaticShapeTensorOf<[AnyType]>;
def Dsc_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Dsc_IntTensor : StaticShapeTensorOf<[AnySignlessInteger, AnyUnsignedInteger]>;
def Dsc_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Dsc_BoolTensor : StaticShapeTensorOf<[I1]>;

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

class Dsc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dsc_Dialect, mnemonic,
         !listconcat(traits, [Pure, InferTypeOpAdaptor])>;

// An op whose vector-Jacobian product is stated in VJP.cpp.
class Dsc_DiffOp<string mnemonic, list<Trait> traits = []>
    : Dsc_Op<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Dsc_VJPOpInterface>])>;

class Dsc_UnaryOp<string mnemonic, Type type = Dsc_FloatTensor,
                  list<Trait> traits = []>
    : Dsc_DiffOp<mnemonic, traits> {
  let arguments = (ins type:$input);
  let results = (outs type:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

// Binary ops broadcast their operands with ONNX (numpy) rules.
class Dsc_BinaryOp<string mnemonic, Type type = Dsc_Tensor,
                   list<Trait> traits = []>
    : Dsc_DiffOp<mnemonic, traits> {
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs type:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

class Dsc_CompareOp<string mnemonic> : Dsc_Op<mnemonic> {
  let arguments = (ins Dsc_Tensor:$lhs, Dsc_Tensor:$rhs);
  let results = (outs Dsc_BoolTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

class Dsc_ReduceOp<string mnemonic> : Dsc_DiffOp<mnemonic> {
  let summary = "reduction over static axes";
  let description = [{
    The result has the input's element type; reduce_sum and reduce_mean of
    a bf16 or f16 input may also have an f32 result (the sum of the widened
    values: canonicalization reads the 16-bit value itself instead of its
    f32 cast).
  }];
  let arguments = (ins Dsc_Tensor:$input, DenseI64ArrayAttr:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

//===----------------------------------------------------------------------===//
// Constants and casts
//===----------------------------------------------------------------------===//

def Dsc_ConstantOp : Dsc_Op<"constant", [ConstantLike]> {
  let summary = "a constant tensor";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Dsc_CastOp : Dsc_DiffOp<"cast"> {
  let summary = "element type conversion (ONNX Cast, CastLike)";
  let description = [{
    Canonicalization removes a cast to the input's own type, and a pair
    `cast(cast(x : A -> B) -> A)` when A -> B is exact (a widening between
    float formats: bf16 or f16 to f32 or f64, f32 to f64), which gives x back
    bit for bit.
  }];
  let arguments = (ins Dsc_Tensor:$input, TypeAttr:$to);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def Dsc_NegOp : Dsc_UnaryOp<"neg", Dsc_Tensor>;
def Dsc_AbsOp : Dsc_UnaryOp<"abs", Dsc_Tensor>;
def Dsc_ExpOp : Dsc_UnaryOp<"exp">;
def Dsc_LogOp : Dsc_UnaryOp<"log">;
def Dsc_SqrtOp : Dsc_UnaryOp<"sqrt">;
def Dsc_ReciprocalOp : Dsc_UnaryOp<"reciprocal">;
def Dsc_TanhOp : Dsc_UnaryOp<"tanh">;
def Dsc_ErfOp : Dsc_UnaryOp<"erf">;
def Dsc_SigmoidOp : Dsc_UnaryOp<"sigmoid">;
def Dsc_ReluOp : Dsc_UnaryOp<"relu">;
def Dsc_FloorOp : Dsc_Op<"floor"> {
  let arguments = (ins Dsc_FloatTensor:$input);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}
def Dsc_CeilOp : Dsc_Op<"ceil"> {
  let arguments = (ins Dsc_FloatTensor:$input);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}
def Dsc_SinOp : Dsc_UnaryOp<"sin">;
def Dsc_CosOp : Dsc_UnaryOp<"cos">;
def Dsc_SoftplusOp : Dsc_UnaryOp<"softplus">;
def Dsc_NotOp : Dsc_Op<"not"> {
  let arguments = (ins Dsc_BoolTensor:$input);
  let results = (outs Dsc_BoolTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_LeakyReluOp : Dsc_DiffOp<"leaky_relu"> {
  let arguments = (ins Dsc_FloatTensor:$input, F64Attr:$alpha);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_GeluOp : Dsc_DiffOp<"gelu"> {
  let summary = "GELU (ONNX Gelu, opset 20), exact or tanh approximation";
  let arguments = (ins Dsc_FloatTensor:$input,
                   DefaultValuedAttr<BoolAttr, "false">:$tanh_approximation);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_SwigluOp : Dsc_DiffOp<"swiglu", [AllTypesMatch<["gate", "up"]>]> {
  let summary = "SwiGLU's gate: silu(gate) * up = gate * sigmoid(gate) * up";
  let description = [{
    The gated activation of Llama-style MLPs, raised from its formula by
    dsc-raise-swiglu. As one op its backward reads `gate` and `up` alone
    (sigmoid(gate) is part of the derivative), where the formula's
    backward would read the sigmoid and the silu as well. `gate`, `up` and
    the result have one type.
  }];
  let arguments = (ins Dsc_FloatTensor:$gate, Dsc_FloatTensor:$up);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($gate)";
}

def Dsc_ClipOp : Dsc_DiffOp<"clip"> {
  let summary = "clamp to [min, max]; a missing bound is unbounded";
  let arguments = (ins Dsc_Tensor:$input, OptionalAttr<F64Attr>:$min,
                   OptionalAttr<F64Attr>:$max);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_AddOp : Dsc_BinaryOp<"add">;
def Dsc_SubOp : Dsc_BinaryOp<"sub">;
def Dsc_MulOp : Dsc_BinaryOp<"mul">;
def Dsc_DivOp : Dsc_BinaryOp<"div">;
def Dsc_PowOp : Dsc_BinaryOp<"pow">;
def Dsc_MaxOp : Dsc_BinaryOp<"max">;
def Dsc_MinOp : Dsc_BinaryOp<"min">;
def Dsc_AndOp : Dsc_Op<"and"> {
  let arguments = (ins Dsc_BoolTensor:$lhs, Dsc_BoolTensor:$rhs);
  let results = (outs Dsc_BoolTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}
def Dsc_OrOp : Dsc_Op<"or"> {
  let arguments = (ins Dsc_BoolTensor:$lhs, Dsc_BoolTensor:$rhs);
  let results = (outs Dsc_BoolTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}
def Dsc_XorOp : Dsc_Op<"xor"> {
  let arguments = (ins Dsc_BoolTensor:$lhs, Dsc_BoolTensor:$rhs);
  let results = (outs Dsc_BoolTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}
def Dsc_EqualOp : Dsc_CompareOp<"equal">;
def Dsc_LessOp : Dsc_CompareOp<"less">;
def Dsc_LessEqualOp : Dsc_CompareOp<"less_equal">;
def Dsc_GreaterOp : Dsc_CompareOp<"greater">;
def Dsc_GreaterEqualOp : Dsc_CompareOp<"greater_equal">;

def Dsc_WhereOp : Dsc_DiffOp<"where"> {
  let summary = "select x where cond else y, broadcasting all three";
  let arguments = (ins Dsc_BoolTensor:$cond, Dsc_Tensor:$x, Dsc_Tensor:$y);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = [{
    $cond `,` $x `,` $y attr-dict `:` type($cond) `,` type($x) `,` type($y)
    `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Linear algebra, convolution and pooling
//===----------------------------------------------------------------------===//

def Dsc_MatMulOp : Dsc_DiffOp<"matmul"> {
  let summary = "numpy matmul with batch broadcasting (ONNX MatMul)";
  let description = [{
    `op(lhs) x op(rhs)`, where op swaps the last two dims of an operand whose
    `transpose_lhs` / `transpose_rhs` flag is set (the operand then has rank
    >= 2). The importer writes no flags; canonicalization folds a
    `dsc.transpose` of the last two dims into them, and rewrites
    `transpose(matmul(a, b))` as `matmul(b, a)` with the flags flipped, so a
    backend whose GEMM reads operands transposed (cuBLASLt, the CPU kernels)
    moves no data for them.

    The result has the operands' element type; with bf16 or f16 operands it
    may also be f32: the f32 accumulator written as it is, not rounded to 16
    bits (dsc-fuse-elementwise folds a lone widening cast of a product into
    it, a GEMM with a wide epilogue).
  }];
  let arguments = (ins Dsc_FloatTensor:$lhs, Dsc_FloatTensor:$rhs,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                   DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def Dsc_MatMulBiasGradOp : Dsc_Op<"matmul_bias_grad"> {
  let summary = "a weight gradient GEMM with its bias gradient as epilogue";
  let description = [{
    A decision of dsc-fuse-gemm-epilogue that the IR shows: the weight
    gradient of a linear layer, `result = transpose(lhs) x rhs` over the
    tokens T, and the bias gradient of the same layer, the column sums of
    the operand that is the output gradient (`lhs`, or `rhs` with
    `sum_rhs`: a layer that stores its weight [in, out], as GPT-2's
    Conv1D), one op for the target: the CUDA runtime runs the GEMM and
    sums that operand's columns in its own 16-byte kernel (or, where that
    cannot take it, in cuBLASLt's BGRADB / BGRADA epilogue):
    ```
    result[m, n]  = sum over t: lhs[t, m] * rhs[t, n]
    bias_grad[m]  = sum over t: f32(lhs[t, m])   (or [n] from rhs; f32 sums)
    ```
    `lhs` is [T, M] and `rhs` [T, N] with one element type; `result` is
    [M, N] in that type or, for 16-bit operands, f32 (the accumulator
    unrounded, as dsc.matmul's); `bias_grad` is f32 [M] (or [N]). A
    backend without the epilogue computes the GEMM and the column sums one
    after the other.
  }];
  let arguments = (ins Dsc_FloatTensor:$lhs, Dsc_FloatTensor:$rhs,
                   DefaultValuedAttr<BoolAttr, "false">:$sum_rhs);
  let results = (outs Dsc_FloatTensor:$result, Dsc_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->`
    type($result) `,` type($bias_grad)
  }];
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def Dsc_GemmGeluOp : Dsc_Op<"gemm_gelu"> {
  let summary = "a linear layer and its tanh GELU in one GEMM (GELU epilogue)";
  let description = [{
    A decision of dsc-fuse-gemm-epilogue that the IR shows: a 16-bit linear
    layer whose output goes through GELU's tanh approximation, in one GEMM
    whose epilogue applies GELU and also writes its input (cuBLASLt's
    GELU_AUX_BIAS), the value backward reads:
    ```
    s[m, n] = sum over k: a[m, k] * op(b)[k, n]  + bias[n]   (f32 sums)
    pre     = round(s)
    result  = round(gelu_tanh(s))
    ```
    `a` is [M, K], `b` [K, N] (or [N, K] with `trans_b`), `bias` [N] or
    absent; `result` and `pre` are [M, N], all of one element type. A
    backend without the epilogue computes `pre` first and GELU from it (one
    rounding more).
  }];
  let arguments = (ins Dsc_FloatTensor:$a, Dsc_FloatTensor:$b,
                   Optional<Dsc_FloatTensor>:$bias,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs Dsc_FloatTensor:$result, Dsc_FloatTensor:$pre);
  let assemblyFormat = [{
    $a `,` $b (`,` $bias^)? attr-dict `:` type(operands) `->` type($result)
    `,` type($pre)
  }];
}

def Dsc_MatMulGeluGradOp : Dsc_Op<"matmul_gelu_grad"> {
  let summary = "an input-gradient GEMM with GELU's derivative as epilogue";
  let description = [{
    A decision of dsc-fuse-gemm-epilogue that the IR shows: the gradient of
    GELU's (tanh approximation) input, where GELU's output gradient is a
    GEMM (the next layer's input gradient), in one GEMM whose epilogue
    multiplies by GELU's derivative at `pre` (cuBLASLt's DGELU):
    ```
    result[m, n] = round((sum over k: a[m, k] * op(b)[k, n]) * gelu_tanh'(pre[m, n]))
    ```
    with the product in f32, not rounded before the multiplication. `a` is
    [M, K], `b` [K, N] (or [N, K] with `trans_b`), `pre` and `result`
    [M, N], all of one 16-bit element type. A backend without the epilogue
    rounds the product first.
  }];
  let arguments = (ins Dsc_FloatTensor:$a, Dsc_FloatTensor:$b,
                   Dsc_FloatTensor:$pre,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b `,` $pre attr-dict `:` type(operands) `->` type($result)
  }];
}

def Dsc_GemmOp : Dsc_DiffOp<"gemm"> {
  let summary = "alpha * op(A) * op(B) + beta * C (ONNX Gemm)";
  let arguments = (ins Dsc_FloatTensor:$a, Dsc_FloatTensor:$b,
                   Optional<Dsc_FloatTensor>:$c,
                   DefaultValuedAttr<F64Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F64Attr, "1.0">:$beta,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b (`,` $c^)? attr-dict `:` type(operands) `->` type($result)
  }];
}

def Dsc_ConvOp : Dsc_DiffOp<"conv"> {
  let summary = "N-d grouped convolution, NCHW layout (ONNX Conv)";
  let arguments = (ins Dsc_FloatTensor:$input, Dsc_FloatTensor:$weight,
                   Optional<Dsc_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type(operands)
    `->` type($result)
  }];
}

class Dsc_PoolOp<string mnemonic> : Dsc_DiffOp<mnemonic> {
  let arguments = (ins Dsc_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides,
                   DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Dsc_MaxPoolOp : Dsc_PoolOp<"max_pool"> {
  let summary = "max pooling over the spatial dims (ONNX MaxPool)";
}
def Dsc_AvgPoolOp : Dsc_PoolOp<"avg_pool"> {
  let summary = "average pooling over the spatial dims (ONNX AveragePool)";
}

class Dsc_GlobalPoolOp<string mnemonic> : Dsc_DiffOp<mnemonic> {
  let arguments = (ins Dsc_FloatTensor:$input);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}
def Dsc_GlobalAvgPoolOp : Dsc_GlobalPoolOp<"global_avg_pool">;
def Dsc_GlobalMaxPoolOp : Dsc_GlobalPoolOp<"global_max_pool">;

//===----------------------------------------------------------------------===//
// Normalization, softmax and losses
//===----------------------------------------------------------------------===//

def Dsc_BatchNormTrainOp : Dsc_DiffOp<"batch_norm_train"> {
  let summary = "batch normalization with batch statistics (training mode)";
  let description = [{
    Normalizes with the mean and biased variance of the batch over all dims
    but the channel dim 1, and returns the updated running statistics:
    `running = momentum * running + (1 - momentum) * batch` (ONNX
    BatchNormalization with training_mode = 1; the running variance is
    updated with the unbiased batch variance, as PyTorch does).
  }];
  let arguments = (ins Dsc_FloatTensor:$input, Dsc_FloatTensor:$scale,
                   Dsc_FloatTensor:$bias, Dsc_FloatTensor:$running_mean,
                   Dsc_FloatTensor:$running_var, F64Attr:$epsilon,
                   F64Attr:$momentum);
  let results = (outs Dsc_FloatTensor:$result, Dsc_FloatTensor:$new_running_mean,
                      Dsc_FloatTensor:$new_running_var);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias `,` $running_mean `,` $running_var attr-dict
    `:` type(operands)
  }];
}

def Dsc_BatchNormOp : Dsc_DiffOp<"batch_norm"> {
  let summary = "batch normalization with given statistics (inference mode)";
  let arguments = (ins Dsc_FloatTensor:$input, Dsc_FloatTensor:$scale,
                   Dsc_FloatTensor:$bias, Dsc_FloatTensor:$mean,
                   Dsc_FloatTensor:$var, F64Attr:$epsilon);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias `,` $mean `,` $var attr-dict
    `:` type(operands)
  }];
}

def Dsc_LayerNormOp : Dsc_DiffOp<"layer_norm"> {
  let summary = "layer normalization over dims [axis, rank)";
  let arguments = (ins Dsc_FloatTensor:$input, Dsc_FloatTensor:$scale,
                   Optional<Dsc_FloatTensor>:$bias, I64Attr:$axis,
                   F64Attr:$epsilon, UnitAttr:$rms);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` type(operands)
    `->` type($result)
  }];
  let description = [{
    The result has the input's type, or, for an f32 input, a 16-bit float
    type of its shape: the norm computed in f32 and rounded as a cast of its
    f32 result would be (dsc-fuse-elementwise folds such a cast into it).
    With `rms` it is RMSNorm (dsc-raise-rms-norm): x / sqrt(mean(x^2) +
    epsilon) * scale, no mean taken out and no bias.
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
}

def Dsc_SoftmaxOp : Dsc_DiffOp<"softmax"> {
  let arguments = (ins Dsc_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_LogSoftmaxOp : Dsc_DiffOp<"log_softmax"> {
  let arguments = (ins Dsc_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_SoftmaxCrossEntropyOp : Dsc_DiffOp<"softmax_cross_entropy"> {
  let summary = "softmax cross-entropy of scores [N, C, d...] against labels";
  let description = [{
    ONNX SoftmaxCrossEntropyLoss. `reduction` is "mean", "sum" or "none";
    with "mean" the sum is divided by the total weight of the labels that are
    not `ignore_index`.
  }];
  let arguments = (ins Dsc_FloatTensor:$scores, Dsc_IndexTensor:$labels,
                   Optional<Dsc_FloatTensor>:$weights, StrAttr:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Dsc_FloatTensor:$loss);
  // 16-bit scores are read as they are and the loss computed (and
  // returned) in f32; canonicalization drops a widening cast of the scores.
  let hasCanonicalizer = 1;
  let assemblyFormat = [{
    $scores `,` $labels (`,` $weights^)? attr-dict `:` type(operands)
    `->` type($loss)
  }];
}

def Dsc_NllLossOp : Dsc_DiffOp<"nll_loss"> {
  let summary = "negative log-likelihood of log-probabilities [N, C, d...]";
  let arguments = (ins Dsc_FloatTensor:$input, Dsc_IndexTensor:$labels,
                   Optional<Dsc_FloatTensor>:$weights, StrAttr:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Dsc_FloatTensor:$loss);
  let assemblyFormat = [{
    $input `,` $labels (`,` $weights^)? attr-dict `:` type(operands)
    `->` type($loss)
  }];
}

def Dsc_DropoutOp : Dsc_DiffOp<"dropout"> {
  let summary = "training-mode dropout: zero with probability ratio, scale";
  let arguments = (ins Dsc_FloatTensor:$input, F64Attr:$ratio,
                   OptionalAttr<I64Attr>:$seed);
  let results = (outs Dsc_FloatTensor:$result, Dsc_BoolTensor:$mask);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_AttentionOp : Dsc_DiffOp<"attention"> {
  let summary = "scaled dot-product attention with its softmax statistics";
  let description = [{
    `result = softmax(scale * query key^T + mask) value` per batch and head,
    computed without the [Tq, Tk] scores (flash attention):

    - query [B, Hq, Tq, D], key [B, Hkv, Tk, D], value [B, Hkv, Tk, Dv] with
      Hq a multiple of Hkv: query head h reads key/value head
      h / (Hq / Hkv) (grouped-query and multi-query attention, without
      repeated keys);
    - `mask` (optional): rank 4, each dim 1 or that of [B, Hq, Tq, Tk]; a
      float mask is added to the scaled scores (-inf masks), an i1 mask
      keeps where true (key padding, as BERT's attention_mask makes it);
    - `causal`: query i sees keys j <= i; `window` > 0: and only keys
      j > i - window (Mistral's sliding window);
    - `dropout` > 0 (training): each probability is zeroed with that
      probability and the others scaled by 1 / (1 - dropout); the mask is a
      function of the run's seed, the step, the call and `seed_id`, so the
      backward (and any recomputation) draws the same one;
    - `lse` [B, Hq, Tq] is the log-sum-exp of each row's masked scores
      (f32; f64 for f64 operands), all the backward needs besides the
      operands and the result: -inf for a row with no key left, whose
      result is 0;
    - `seq_major`: query, key, value and the result are [B, T, H, D]
      instead (tokens before heads, as a projection's output reshaped
      lays them out); lse and the mask keep their layout. Canonicalization
      folds the `[0, 2, 1, 3]` transposes around an attention into it, so
      the kernel reads and writes the projections' layout and no copy is
      made (cuDNN takes the strides; other kernels copy in the runtime).
  }];
  let arguments = (ins Dsc_FloatTensor:$query, Dsc_FloatTensor:$key,
                   Dsc_FloatTensor:$value, Optional<Dsc_Tensor>:$mask,
                   F64Attr:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal,
                   DefaultValuedAttr<I64Attr, "0">:$window,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   DefaultValuedAttr<I64Attr, "0">:$seed_id,
                   DefaultValuedAttr<BoolAttr, "false">:$seq_major);
  let results = (outs Dsc_FloatTensor:$result, Dsc_FloatTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`,` $mask^)? attr-dict `:` type(operands)
    `->` type(results)
  }];
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

def Dsc_ReduceSumOp : Dsc_ReduceOp<"reduce_sum">;
def Dsc_ReduceMeanOp : Dsc_ReduceOp<"reduce_mean">;
def Dsc_ReduceMaxOp : Dsc_ReduceOp<"reduce_max">;
def Dsc_ReduceMinOp : Dsc_ReduceOp<"reduce_min">;
def Dsc_ReduceProdOp : Dsc_ReduceOp<"reduce_prod">;

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Dsc_RotateHalfOp : Dsc_DiffOp<"rotate_half"> {
  let summary = "rotary embedding's rotate_half over the last dim";
  let description = [{
    With h half the last dim: `result[..., i] = -input[..., i + h]` for
    i < h and `input[..., i - h]` for i >= h, i.e. `concat(-x2, x1)` of the
    two halves, as HF Llama's `rotate_half` (exact: a move and a sign flip).
    dsc-raise-rotate-half forms it from the exported slices, neg and concat;
    its gradient is `rotate_half(-g)`: one kernel each way instead of two
    slices, a negation and a concatenation (and their gradients).
  }];
  let arguments = (ins Dsc_FloatTensor:$input);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_ReshapeOp : Dsc_DiffOp<"reshape"> {
  let summary = "reshape to a static shape (ONNX Reshape, Flatten, Squeeze, "
                "Unsqueeze)";
  let arguments = (ins Dsc_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Dsc_TransposeOp : Dsc_DiffOp<"transpose"> {
  let description = [{
    Canonicalization composes a transpose of a transpose into one (none when
    the composition is the identity) and drops an identity permutation.
  }];
  let arguments = (ins Dsc_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasCanonicalizer = 1;
}

def Dsc_ExpandOp : Dsc_DiffOp<"expand"> {
  let summary = "broadcast to a static shape (ONNX Expand)";
  let arguments = (ins Dsc_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Dsc_SliceOp : Dsc_DiffOp<"slice"> {
  let summary = "strided slice: element i of dim d is offsets[d] + i * "
                "strides[d], for i < sizes[d]";
  let description = [{
    ONNX Slice with its starts, ends, axes and steps resolved at import
    against the static input shape. Strides may be negative (reversal).
  }];
  let arguments = (ins Dsc_Tensor:$input, DenseI64ArrayAttr:$offsets,
                   DenseI64ArrayAttr:$sizes, DenseI64ArrayAttr:$strides);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Dsc_ConcatOp : Dsc_DiffOp<"concat"> {
  let arguments = (ins Variadic<Dsc_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
}

def Dsc_SplitOp : Dsc_DiffOp<"split"> {
  let summary = "split along an axis into pieces of static sizes";
  let arguments = (ins Dsc_Tensor:$input, I64Attr:$axis,
                   DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Dsc_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
}

def Dsc_GatherOp : Dsc_DiffOp<"gather"> {
  let summary = "take slices of data along axis at indices (ONNX Gather)";
  let arguments = (ins Dsc_Tensor:$data, Dsc_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices attr-dict `:` type($data) `,` type($indices)
    `->` type($result)
  }];
}

def Dsc_PadOp : Dsc_DiffOp<"pad"> {
  let summary = "pad with a constant value (ONNX Pad, mode constant)";
  let description = [{
    `pads` holds the amounts added before each dim, then after each dim, as
    in ONNX; negative amounts crop.
  }];
  let arguments = (ins Dsc_Tensor:$input, DenseI64ArrayAttr:$pads,
                   DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Dsc_TriluOp : Dsc_DiffOp<"trilu"> {
  let summary = "keep the upper or lower triangle of the last two dims";
  let arguments = (ins Dsc_Tensor:$input, BoolAttr:$upper,
                   DefaultValuedAttr<I64Attr, "0">:$k);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dsc_CumSumOp : Dsc_DiffOp<"cumsum"> {
  let summary = "running sum along one axis (ONNX CumSum)";
  let description = [{
    `result[.., i, ..]` is the sum of `input[.., j, ..]` for j <= i along
    `axis` (j < i when `exclusive`; j >= i, or j > i, when `reverse`), in
    the order of j from the sum's start, so integer sums are exact and
    floating ones are one sequential sum per line. Its gradient is the
    cumsum of the result's gradient the other way round.
  }];
  let arguments = (ins Dsc_Tensor:$input, I64Attr:$axis,
                   DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                   DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Gradient ops: what autodiff emits where composing forward ops would be
// slow or unclear. Each names the forward op it differentiates.
//===----------------------------------------------------------------------===//

def Dsc_ConvBackwardInputOp : Dsc_Op<"conv_backward_input"> {
  let summary = "gradient of dsc.conv with respect to its input";
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$weight,
                   DenseI64ArrayAttr:$input_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $weight attr-dict `:` type($grad) `,` type($weight)
    `->` type($result)
  }];
}

def Dsc_ConvBackwardWeightOp : Dsc_Op<"conv_backward_weight"> {
  let summary = "gradient of dsc.conv with respect to its weight";
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$input,
                   DenseI64ArrayAttr:$weight_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input attr-dict `:` type($grad) `,` type($input)
    `->` type($result)
  }];
}

def Dsc_PoolBackwardOp : Dsc_Op<"pool_backward"> {
  let summary = "gradient of dsc.max_pool or dsc.avg_pool w.r.t. the input";
  let description = [{
    `kind` is "max" (the gradient goes to the first maximum of each window,
    as in PyTorch) or "avg". The forward input is an operand.
  }];
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$input,
                   StrAttr:$kind, DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                   DenseI64ArrayAttr:$dilations,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input attr-dict `:` type($grad) `,` type($input)
    `->` type($result)
  }];
}

def Dsc_BatchNormTrainBackwardOp : Dsc_Op<"batch_norm_train_backward"> {
  let summary = "gradients of dsc.batch_norm_train: input, scale, bias";
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$input,
                   Dsc_FloatTensor:$scale, F64Attr:$epsilon);
  let results = (outs Dsc_FloatTensor:$grad_input, Dsc_FloatTensor:$grad_scale,
                      Dsc_FloatTensor:$grad_bias);
  let assemblyFormat = [{
    $grad `,` $input `,` $scale attr-dict `:` type(operands)
  }];
}

def Dsc_SoftmaxBackwardOp : Dsc_Op<"softmax_backward"> {
  let summary = "gradient of dsc.softmax or dsc.log_softmax from its result";
  let description = [{
    `output` is the forward result y and `grad` the gradient of y. Softmax:
    grad * y - y * sum(grad * y, axis); with `log` (log_softmax):
    grad - exp(y) * sum(grad, axis). One op instead of four, so a backend
    reads each operand once.
  }];
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$output,
                   I64Attr:$axis, DefaultValuedAttr<BoolAttr, "false">:$log);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $output attr-dict `:` type($grad) `,` type($output)
  }];
}

def Dsc_AttentionBackwardOp : Dsc_Op<"attention_backward"> {
  let summary = "gradients of dsc.attention: query, key, value";
  let description = [{
    From the gradient of the result, the forward's operands, its result and
    its `lse` (flash attention's backward: the probabilities are recomputed
    tile by tile, never stored). Attributes as the forward's; key and value
    gradients are summed over the query heads that share them.
    `workspace_limit` > 0 bounds the library workspace one backward call
    may take (cuDNN's deterministic backward grows with the batch): the
    runtime then runs it over slices of the batch, same bits, somewhat
    slower (dsc/workspaces.h). 0: one call over the whole batch. With
    `seq_major`, grad, query, key, value, output and the three gradients
    are [B, T, H, D]. `deterministic = false` (dsc compile
    --nondeterministic-attention) lets the target add the query's gradient
    with atomics, as PyTorch's SDPA does: faster, but a step's gradients may
    then differ in their last bits from one run to the next.
  }];
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$query,
                   Dsc_FloatTensor:$key, Dsc_FloatTensor:$value,
                   Dsc_FloatTensor:$output, Dsc_FloatTensor:$lse,
                   Optional<Dsc_Tensor>:$mask, F64Attr:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal,
                   DefaultValuedAttr<I64Attr, "0">:$window,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   DefaultValuedAttr<I64Attr, "0">:$seed_id,
                   DefaultValuedAttr<I64Attr, "0">:$workspace_limit,
                   DefaultValuedAttr<BoolAttr, "false">:$seq_major,
                   DefaultValuedAttr<BoolAttr, "true">:$deterministic);
  let results = (outs Dsc_FloatTensor:$grad_query, Dsc_FloatTensor:$grad_key,
                      Dsc_FloatTensor:$grad_value);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output `,` $lse
    (`,` $mask^)? attr-dict `:` type(operands) `->` type(results)
  }];
  let hasCanonicalizer = 1;
}

def Dsc_LayerNormBackwardOp : Dsc_Op<"layer_norm_backward"> {
  let summary = "gradients of dsc.layer_norm: input, scale, bias";
  let description = [{
    `input` has the gradient's type, or, for an f32 gradient, a 16-bit
    float type of its shape, read as its exact f32 widening (the cast
    dsc-fuse-elementwise folds in); the input's gradient has the gradient's
    type. With `rms`, of the RMSNorm (grad_bias is then zero).

    dsc-fuse-norm-residual's epilogue: with `residual` (the gradient's
    type), grad_input is residual + the norm's input gradient, rounded as
    that f32 add (the residual stream's gradient, which the kernel reads and
    may write over); with `copy_type` (a 16-bit float type), a fourth result
    holds grad_input cast to it (what the next GEMM reads).
  }];
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$input,
                   Dsc_FloatTensor:$scale, Optional<Dsc_FloatTensor>:$residual,
                   I64Attr:$axis, F64Attr:$epsilon, UnitAttr:$rms,
                   OptionalAttr<TypeAttr>:$copy_type);
  let results = (outs Dsc_FloatTensor:$grad_input, Dsc_FloatTensor:$grad_scale,
                      Dsc_FloatTensor:$grad_bias,
                      Optional<Dsc_FloatTensor>:$grad_input_copy);
  let assemblyFormat = [{
    $grad `,` $input `,` $scale (`residual` $residual^)? attr-dict `:`
    type(operands)
  }];
}

def Dsc_ClassLossBackwardOp : Dsc_Op<"class_loss_backward"> {
  let summary = "gradient of softmax_cross_entropy or nll_loss w.r.t. "
                "the scores or log-probabilities";
  let description = [{
    `kind` is "softmax_cross_entropy" or "nll". `grad` has the loss's shape
    (a scalar unless reduction is "none").
  }];
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_FloatTensor:$input,
                   Dsc_IndexTensor:$labels, Optional<Dsc_FloatTensor>:$weights,
                   StrAttr:$kind, StrAttr:$reduction,
                   OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input `,` $labels (`,` $weights^)? attr-dict `:` type(operands)
    `->` type($result)
  }];
}

def Dsc_LinearCrossEntropyOp : Dsc_Op<"linear_cross_entropy"> {
  let summary = "a classifier's logits, their summed softmax cross-entropy "
                "and its gradients, a chunk of rows at a time";
  let description = [{
    What dsc-fuse-classifier makes of `logits = matmul(input, op(weight))`,
    `loss = softmax_cross_entropy(logits, labels) {reduction = "sum"}` and
    the backward's `class_loss_backward(seed, ...)` with the two matmuls
    that take the logits' gradient back to `input` and `weight`, when
    nothing else reads the logits: the [N, V] logits never exist. Rows of
    `input` ([..., C], N rows) are taken `chunk_rows` at a time; each
    chunk's logits live in the `logits` result ([chunk_rows, V], scratch
    nothing reads), its loss in `chunk_loss` (one f32 per chunk, summed in
    order into `loss`), its logits' gradient (times `seed`, a scalar)
    overwrites its logits and gives `grad_input`'s rows and a term of
    `grad_weight`, accumulated in f32 when `f32_weight_grad` is set
    (otherwise in weight's type). `weight` is [V, C] with
    `transpose_weight` (logits = input @ weight^T), else [C, V]. With
    `init` (of `grad_weight`'s type) the chunks' terms are added to it, in
    chunk order: `grad_weight` = ((init + term0) + term1) + ..., which may
    be written over `init` (dsc-accumulate-in-call's running sum of a
    gradient over micro-batches).
  }];
  let arguments = (ins Dsc_FloatTensor:$input, Dsc_FloatTensor:$weight,
                   Dsc_IndexTensor:$labels, Dsc_FloatTensor:$seed,
                   Optional<Dsc_FloatTensor>:$init,
                   BoolAttr:$transpose_weight, BoolAttr:$f32_weight_grad,
                   I64Attr:$chunk_rows, OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Dsc_FloatTensor:$loss, Dsc_FloatTensor:$grad_input,
                      Dsc_FloatTensor:$grad_weight, Dsc_FloatTensor:$logits,
                      Dsc_FloatTensor:$chunk_loss);
  let assemblyFormat = [{
    $input `,` $weight `,` $labels `,` $seed (`init` $init^)? attr-dict `:`
    type(operands)
  }];
}

def Dsc_ScatterAddOp : Dsc_Op<"scatter_add"> {
  let summary = "gradient of dsc.gather: add slices of grad into zeros of "
                "`shape` (or into `init`) at indices along axis, in index "
                "order";
  let description = [{
    Each slice of the result along `axis` is the sum, in index order from
    zero, of the slices of `grad` whose index names it; with `init`, that
    sum is then added to `init`'s slice (a slice no index names is
    `init`'s as it is): `init + scatter_add(grad)`, rounded as that add
    would be. `into` is what canonicalization makes of a tied embedding's
    gradient added to another one (the classifier's), so that a kernel
    touches only the indexed slices of the result rather than writing
    zeros over all of it and then adding the whole of both.
  }];
  let arguments = (ins Dsc_FloatTensor:$grad, Dsc_IndexTensor:$indices,
                   Optional<Dsc_FloatTensor>:$init,
                   I64Attr:$axis, DenseI64ArrayAttr:$shape);
  let results = (outs Dsc_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $indices (`into` $init^)? attr-dict `:` type($grad) `,`
    type($indices) (`,` type($init)^)? `->` type($result)
  }];
  let hasCanonicalizer = 1;
}

def Dsc_InsertSliceOp : Dsc_Op<"insert_slice"> {
  let summary = "gradient of dsc.slice: zeros of `shape` with grad placed "
                "at the slice's elements";
  let arguments = (ins Dsc_Tensor:$grad, DenseI64ArrayAttr:$shape,
                   DenseI64ArrayAttr:$offsets, DenseI64ArrayAttr:$strides);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Scheduling
//===----------------------------------------------------------------------===//

// Collectives talk to other ranks and fill buffers asynchronously: they
// are not values a generic pass may merge, drop or move. The upstream
// `shard` collectives are Pure (they describe *what* is exchanged), so dsc
// pins them instead: each one reads its operand through a
// `dsc.collective_input` and is completed by a `dsc.wait`, and both, with
// `dsc.release`, read and write this resource. Ops with effects on one
// resource keep their order and are never merged (CSE) or erased as dead
// (canonicalize); the Pure collective between them has a unique operand
// and a single user, so it can neither merge with another nor move out of
// its window.
def Dsc_CollectiveResource : Resource<"::dsc::CollectiveResource">;

def Dsc_CollectiveInputOp : Op<Dsc_Dialect, "collective_input", [
    InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>,
    MemoryEffects<[MemRead<Dsc_CollectiveResource>,
                   MemWrite<Dsc_CollectiveResource>]>]> {
  let summary = "the point where a collective takes its operand";
  let description = [{
    dsc-zero-partition passes the operand of every `shard.all_gather`,
    `shard.reduce_scatter` and `shard.all_reduce` it creates through this
    op; dsc-schedule moves the pair together (the collective's start). The
    value is the operand, unchanged (the code generator aliases it).

    Why: the `shard` ops are Pure, so two gathers of the same shard (a
    stage-3 bucket gathered for forward, released, and gathered again for
    backward) would be one value to CSE, and the release would be undone.
    This op has effects on `dsc::CollectiveResource`, so two of them are
    never merged, and each collective reads a value no other one reads:

    ```mlir
    %i0 = dsc.collective_input %shard : tensor<8xbf16>
    %g0 = shard.all_gather %i0 on @dsc_ranks grid_axes = [1] gather_axis = 0
        : tensor<8xbf16> -> tensor<32xbf16>
    ...
    dsc.release %w0 : tensor<32xbf16>
    %i1 = dsc.collective_input %shard : tensor<8xbf16>   // not CSE'd with %i0
    %g1 = shard.all_gather %i1 ...
    ```

    The result's only users are `shard` collectives (the verifier checks).
  }];
  let arguments = (ins Dsc_Tensor:$input);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dsc_WaitOp : Op<Dsc_Dialect, "wait", [
    InferTypeOpAdaptor,
    MemoryEffects<[MemRead<Dsc_CollectiveResource>,
                   MemWrite<Dsc_CollectiveResource>]>]> {
  let summary = "completion point of an asynchronous collective";
  let description = [{
    dsc-schedule splits a collective into its start (the `shard` op and its
    `dsc.collective_input`, moved early) and this wait (just before the
    first use of the result). The value is the collective's result,
    unchanged; a backend that runs collectives on their own stream waits
    here for their completion event, a synchronous one treats it as the
    identity.

    Not Pure: the wait is where another rank's data becomes visible, so it
    reads and writes `dsc::CollectiveResource`. Generic passes therefore keep
    it where dsc-schedule placed it, in order with the other collective
    points and releases, and never merge two waits. The input must be the
    result of a `shard` collective (the verifier checks).
  }];
  let arguments = (ins Dsc_Tensor:$input);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dsc_ReleaseOp : Op<Dsc_Dialect, "release", [
    MemoryEffects<[MemWrite<Dsc_CollectiveResource>]>]> {
  let summary = "end of life of gathered parameters";
  let description = [{
    Placed by dsc-zero-partition (stage 3) after the last forward use of a
    bucket's gathered parameters: from here on only the shard is kept, and
    backward gathers them again. The memory plan frees the storage at this
    point; nothing may use the values afterwards.

    Effects: it frees its operands (MemFree), and writes
    `dsc::CollectiveResource`, so it stays ordered with the collective
    points around it (the forward gather's wait before, the backward
    gather's `dsc.collective_input` after) under any generic pass.
  }];
  let arguments = (ins Arg<Variadic<Dsc_Tensor>, "the released values",
                           [MemFree]>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Offload (dsc-offload)
//===----------------------------------------------------------------------===//

// Copies between device and host memory run on their own stream, and host
// work (the optimizer on offloaded state) runs after them in that stream's
// order: like collectives, they are not values a generic pass may merge,
// drop or move across each other. The copy and the wait read and write
// this resource.
def Dsc_OffloadResource : Resource<"::dsc::OffloadResource">;

def Dsc_OffloadCopyOp : Op<Dsc_Dialect, "offload_copy", [
    AllTypesMatch<["input", "result"]>,
    MemoryEffects<[MemRead<Dsc_OffloadResource>,
                   MemWrite<Dsc_OffloadResource>]>]> {
  let summary = "a copy of a value into host or device memory";
  let description = [{
    Placed by dsc-offload. The result is the input's elements in the memory
    `to` names: "host" (pinned host memory, where the offloaded optimizer
    reads and writes) or "device" (the GPU's, where the step computes).
    A backend with separate memories runs it on a copy stream after the
    compute work issued before it, so it overlaps what follows; a value
    copied to the device is read only after its `dsc.offload_wait`. Host
    ops (those with `dsc.on_host`) run on that stream after the copies
    before them. On a backend with one memory (CPU) it is a copy.

    Effects on `dsc::OffloadResource`: two copies of one value are two
    transfers (CSE keeps both), and none is dropped or moved across
    another, a wait or a host op by a generic pass.
  }];
  let arguments = (ins Dsc_Tensor:$input, StrAttr:$to);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dsc_OffloadWaitOp : Op<Dsc_Dialect, "offload_wait", [
    AllTypesMatch<["input", "result"]>,
    MemoryEffects<[MemRead<Dsc_OffloadResource>,
                   MemWrite<Dsc_OffloadResource>]>]> {
  let summary = "completion point of a copy into device memory";
  let description = [{
    Placed by dsc-offload before the first device use of a value that a
    `dsc.offload_copy {to = "device"}` brings in: the compute stream waits
    here for that copy (and the host work before it) to finish. The value
    is the copy's result, unchanged (the code generator aliases it). The
    input must be such a copy (the verifier checks).
  }];
  let arguments = (ins Dsc_Tensor:$input);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

// The NVMe tier (dsc-offload optimizer=nvme): optimizer state that lives in
// files, staged into host memory for the host op that updates it.
def Dsc_NvmeReadOp : Op<Dsc_Dialect, "nvme_read", [
    AllTypesMatch<["input", "result"]>,
    MemoryEffects<[MemRead<Dsc_OffloadResource>,
                   MemWrite<Dsc_OffloadResource>]>]> {
  let summary = "a step argument's bytes read from its file into host memory";
  let description = [{
    Placed by dsc-offload with `optimizer=nvme` ahead of the first host op
    that reads an argument with `dsc.memory = "nvme"` (fp32 masters and
    optimizer state kept in a file under the run's `--nvme-path`). The
    result is the argument's elements in host memory (the host frame),
    which the host op reads instead. A host op (`dsc.on_host`): it starts
    after the host work before it, on the host's side of the step, and
    the read runs on the runtime's I/O threads until the next host op that
    names the result waits for it.

    Effects on `dsc::OffloadResource`: it stays ordered with the
    `dsc.nvme_write` that later writes the same file, with the copies and
    with the other reads; no generic pass merges two reads or moves one.
  }];
  let arguments = (ins Dsc_Tensor:$input);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dsc_NvmeWriteOp : Op<Dsc_Dialect, "nvme_write", [
    AllTypesMatch<["input", "result"]>,
    MemoryEffects<[MemRead<Dsc_OffloadResource>,
                   MemWrite<Dsc_OffloadResource>]>]> {
  let summary = "an updated state written from host memory into its file";
  let description = [{
    Placed by dsc-offload with `optimizer=nvme` right after the host op
    that computes the update of an argument kept on NVMe. The result is
    that update in the argument's file: the step returns it, in place of
    its argument (dsc-in-place-updates), so the program keeps one file per
    state. A host op (`dsc.on_host`).

    Effects on `dsc::OffloadResource`: never dropped, merged or moved
    across the read of the same file by a generic pass.
  }];
  let arguments = (ins Dsc_Tensor:$input);
  let results = (outs Dsc_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer ops: what dsc-optimizer emits. Hyperparameters are run-time
// scalars (tensor<f32>) so a compiled program can override its defaults.
//===----------------------------------------------------------------------===//

def Dsc_ScalarF32 : StaticShapeTensorOf<[F32]>;
def Dsc_StepTensor : StaticShapeTensorOf<[I64]>;

def Dsc_AdamWOp : Dsc_Op<"adamw"> {
  let summary = "one AdamW step with PyTorch's semantics";
  let description = [{
    With t = step (1 for the first step):
    ```
    param  = param - lr * weight_decay * param        (decoupled decay)
    m      = beta1 * m + (1 - beta1) * grad
    v      = beta2 * v + (1 - beta2) * grad^2
    param  = param - lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
    ```
  }];
  let arguments = (ins Dsc_FloatTensor:$param, Dsc_FloatTensor:$grad,
                   Dsc_FloatTensor:$exp_avg, Dsc_FloatTensor:$exp_avg_sq,
                   Dsc_ScalarF32:$lr, Dsc_ScalarF32:$beta1,
                   Dsc_ScalarF32:$beta2, Dsc_ScalarF32:$eps,
                   Dsc_ScalarF32:$weight_decay, Dsc_StepTensor:$step);
  let results = (outs Dsc_FloatTensor:$new_param,
                      Dsc_FloatTensor:$new_exp_avg,
                      Dsc_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $lr `,` $beta1 `,`
    $beta2 `,` $eps `,` $weight_decay `,` $step attr-dict `:` type(operands)
  }];
}

def Dsc_AdamWMultiOp : Dsc_Op<"adamw_multi"> {
  let summary = "AdamW steps of several parameters, one kernel (multi-tensor)";
  let description = [{
    dsc-multi-tensor-adamw's grouping of dsc.adamw ops that share their
    hyperparameters and step. `tensors` holds N params, then their N grads,
    N exp_avgs and N exp_avg_sqs; the results are the N new params, then
    the N new exp_avgs and N new exp_avg_sqs. Each grad is multiplied by
    the scalar `grad_scale` first, as a dsc.mul of the grad by it would
    round (a splat 1 constant when the grads are not scaled: the kernel
    then skips it). Before that, each grad is multiplied by the scalar
    `grad_prescale` (`scale %s after %p`), rounded likewise (a splat 1 when
    there is none): the grads of a loss normalized by its label count
    (dsc-global-mean-loss) are `mul(mul(g, 1 / count), clip_coefficient)`,
    both folded here, so no kernel writes the normalized gradients. Each
    parameter's results are those of dsc.adamw on it, bit for bit.

    Optionally (dsc-offload) N more results follow: each new param rounded
    to a 16-bit float type of its shape, as dsc.cast would round it (the
    next step's compute copies, written while the values are in cache).
  }];
  let arguments = (ins Dsc_ScalarF32:$lr, Dsc_ScalarF32:$beta1,
                   Dsc_ScalarF32:$beta2, Dsc_ScalarF32:$eps,
                   Dsc_ScalarF32:$weight_decay, Dsc_StepTensor:$step,
                   Dsc_ScalarF32:$grad_scale,
                   Dsc_ScalarF32:$grad_prescale,
                   Variadic<Dsc_FloatTensor>:$tensors);
  let results = (outs Variadic<Dsc_FloatTensor>:$results);
  let assemblyFormat = [{
    $lr `,` $beta1 `,` $beta2 `,` $eps `,` $weight_decay `,` $step `,`
    `scale` $grad_scale `after` $grad_prescale `,` `(` $tensors `)`
    attr-dict `:` type($lr) `,` type($beta1) `,` type($beta2) `,` type($eps)
    `,` type($weight_decay) `,` type($step) `,` type($grad_scale) `,`
    type($grad_prescale) `,` `(` type($tensors) `)` `->` type($results)
  }];
  let extraClassDeclaration = [{
    /// The inferred 3N results, optionally followed by N compute copies
    /// (16-bit, of each parameter's shape).
    static bool isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                        ::mlir::TypeRange actual);
  }];
  let hasVerifier = 1;
}

def Dsc_SumSquaresOp : Dsc_Op<"sum_squares"> {
  let summary = "the sum of the squares of every element of several tensors";
  let description = [{
    The square of a global gradient norm in one kernel (multi-tensor), for
    dsc-optimizer and dsc-zero-partition: with T the tensors' common
    element type (f32 or f64),
    ```
    result = round_f32( sum over tensors t, elements x of t:
                        double(v) * double(v) ),  v = round_T(x * scale)
    ```
    The products are exact for f32 (and rounded to double for f64); the
    sum is accumulated in double in an order fixed by the shapes alone, so
    a step gives the same bits every run. `scale` multiplies each element
    first, as a dsc.mul of the tensor by it would round (a splat 1 constant
    when the tensors are not scaled).
  }];
  let arguments = (ins Dsc_ScalarF32:$scale,
                   Variadic<Dsc_FloatTensor>:$tensors);
  let results = (outs Dsc_ScalarF32:$result);
  let assemblyFormat = [{
    `scale` $scale `,` `(` $tensors `)` attr-dict `:` type($scale) `,`
    `(` type($tensors) `)` `->` type($result)
  }];
  let hasCanonicalizer = 1;
}

def Dsc_SgdOp : Dsc_Op<"sgd"> {
  let summary = "one SGD step with momentum, PyTorch's semantics";
  let description = [{
    ```
    g   = grad + weight_decay * param
    buf = step == 1 ? g : momentum * buf + (1 - dampening) * g
    g   = nesterov ? g + momentum * buf : buf      (buf when momentum != 0)
    param = param - lr * g
    ```
  }];
  let arguments = (ins Dsc_FloatTensor:$param, Dsc_FloatTensor:$grad,
                   Dsc_FloatTensor:$momentum_buffer, Dsc_ScalarF32:$lr,
                   Dsc_ScalarF32:$momentum, Dsc_ScalarF32:$weight_decay,
                   Dsc_StepTensor:$step,
                   DefaultValuedAttr<F64Attr, "0.0">:$dampening,
                   DefaultValuedAttr<BoolAttr, "false">:$nesterov);
  let results = (outs Dsc_FloatTensor:$new_param,
                      Dsc_FloatTensor:$new_momentum_buffer);
  let assemblyFormat = [{
    $param `,` $grad `,` $momentum_buffer `,` $lr `,` $momentum `,`
    $weight_decay `,` $step attr-dict `:` type(operands)
  }];
}

def Dsc_LrScheduleOp : Dsc_Op<"lr_schedule"> {
  let summary = "learning rate at a step (DeepSpeed's WarmupCosineLR and "
                "WarmupDecayLR, linear warm-up)";
  let description = [{
    `kind` is "constant", "warmup_cosine" or "warmup_linear". With
    w = warmup_steps, T = total_steps and t = step (1-based):
    - warm-up (t <= w): ratio = warmup_min_ratio + (1 - warmup_min_ratio) * t / w
    - warmup_cosine after: ratio = min_ratio + (1 - min_ratio) *
      0.5 * (1 + cos(pi * (t - w) / (T - w)))
    - warmup_linear after: ratio = min_ratio + (1 - min_ratio) *
      max(0, (T - t) / (T - w))
    - constant after: ratio = 1
    and lr = base_lr * ratio.
  }];
  let arguments = (ins Dsc_StepTensor:$step, Dsc_ScalarF32:$base_lr,
                   StrAttr:$kind, DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                   DefaultValuedAttr<I64Attr, "0">:$total_steps,
                   DefaultValuedAttr<F64Attr, "0.0">:$warmup_min_ratio,
                   DefaultValuedAttr<F64Attr, "0.0">:$min_ratio);
  let results = (outs Dsc_ScalarF32:$lr);
  let assemblyFormat = "$step `,` $base_lr attr-dict `:` type(operands)";
}


//===----------------------------------------------------------------------===//
// Fusion (dsc-fuse-elementwise)
//===----------------------------------------------------------------------===//

def Dsc_FusedOp : Op<Dsc_Dialect, "fused", [
    Pure, IsolatedFromAbove, SingleBlock,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "ops that one generated kernel computes";
  let description = [{
    A decision of dsc-fuse-elementwise that the IR shows: the body (one
    block whose arguments are `inputs`, in order) is a chain of elementwise
    ops computed by one kernel, element by element in registers; the values
    the body yields are the only ones written to memory. `kind` names how a
    backend generates the kernel: "elementwise" (every body op elementwise
    over the shape of the first result, inputs broadcast to it, splat
    constants inlined; a cast of a body argument may keep the argument's
    shape, the element read widened in registers; a `dsc.rotate_half` of a
    body argument of that shape
    reads the argument's partner element, half the last dim away, negated
    for the first half). A backend without generated kernels rejects it.

    ```mlir
    %r = dsc.fused "elementwise" (%x, %b) : (tensor<4x8xbf16>, tensor<8xf32>)
        -> tensor<4x8xf32> {
    ^bb0(%a: tensor<4x8xbf16>, %c: tensor<8xf32>):
      %0 = dsc.cast %a {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
      %1 = dsc.add %0, %c : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
      dsc.yield %1 : tensor<4x8xf32>
    }
    ```
  }];
  let arguments = (ins StrAttr:$kind, Variadic<Dsc_Tensor>:$inputs);
  let results = (outs Variadic<Dsc_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)
    $body
  }];
  let hasVerifier = 1;
}

def Dsc_YieldOp : Op<Dsc_Dialect, "yield", [
    Pure, Terminator, ReturnLike, HasParent<"FusedOp">]> {
  let summary = "the values a dsc.fused op writes";
  let arguments = (ins Variadic<Dsc_Tensor>:$values);
  let builders = [OpBuilder<(ins), [{ /* nothing yielded */ }]>];
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // DSC_OPS_TD
