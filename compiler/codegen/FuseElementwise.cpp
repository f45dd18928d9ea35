//===- FuseElementwise.cpp - Elementwise chains as one CUDA kernel --------===//

#include "compiler/codegen/FuseElementwise.h"

#include "compiler/codegen/Lowering.h"
#include "dialects/dsc/IR/DscOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>
#include <optional>

using namespace mlir;

namespace dsc::codegen {
namespace {

RankedTensorType typeOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

bool isF32(Value v) {
  auto t = typeOf(v);
  return t && t.hasStaticShape() && t.getElementType().isF32();
}
bool isBool(Value v) {
  auto t = typeOf(v);
  return t && t.hasStaticShape() && t.getElementType().isInteger(1);
}
bool isHalf(Value v) {
  auto t = typeOf(v);
  return t && t.hasStaticShape() &&
         (t.getElementType().isBF16() || t.getElementType().isF16());
}
bool isBF16(Value v) {
  return isHalf(v) && typeOf(v).getElementType().isBF16();
}
/// The C type a kernel stores an element of `v` as, and the one it
/// computes with.
const char *storageType(Value v) {
  return isBool(v) ? "uint8_t" : isHalf(v) ? "uint16_t" : "float";
}
const char *registerType(Value v) { return isBool(v) ? "bool" : "float"; }
bool isF32OrBool(Value v) { return isF32(v) || isBool(v); }

/// A 16-bit (bf16, f16) value lives in a float register, holding a value of
/// its format: loaded exactly, rounded where a cast makes it, stored
/// exactly (dsc-mixed-precision's casts around fp32 chains).
std::string roundTo(Value like, const std::string &x) {
  return isBF16(like)
             ? "detail::bf16BitsToFloat(detail::floatToBf16Bits(" + x + "))"
             : "detail::halfBitsToFloat(detail::floatToHalfBits(" + x + "))";
}

/// A float literal valid in device code (no std::numeric_limits there).
std::string deviceFloat(float v) {
  if (std::isnan(v))
    return "__int_as_float(0x7fc00000)";
  if (std::isinf(v))
    return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  return cppFloat(v);
}

/// The device expression of `op` from its operands' expressions, when the
/// op is fusible on these element types.
std::optional<std::string> expression(Operation *op,
                                      llvm::ArrayRef<std::string> in) {
  // Casts between f32 and the 16-bit formats, in registers.
  if (auto c = dyn_cast<CastOp>(op)) {
    Value from = c.getInput(), to = c.getResult();
    bool fromFloat = isF32(from) || isHalf(from),
         toFloat = isF32(to) || isHalf(to);
    if (fromFloat && toFloat && (isHalf(from) || isHalf(to)))
      return isF32(to) ? in[0] : roundTo(to, in[0]);
  }
  if (op->getNumResults() != 1 || !isF32OrBool(op->getResult(0)) ||
      !llvm::all_of(op->getOperands(), isF32OrBool))
    return std::nullopt;
  Value r = op->getResult(0);
  if (const char *kind = unaryKind(op)) {
    if (isa<NotOp>(op))
      return isBool(r) ? std::optional<std::string>("(!" + in[0] + ")")
                       : std::nullopt;
    if (!isF32(r) || !isF32(op->getOperand(0)))
      return std::nullopt;
    return std::string("ops::applyUnary<float>(UnaryOp::") + kind + ", " +
           in[0] + ")";
  }
  if (const char *kind = binaryKind(op)) {
    Value a = op->getOperand(0), b = op->getOperand(1);
    bool compare =
        isa<EqualOp, LessOp, LessEqualOp, GreaterOp, GreaterEqualOp>(op);
    if (isF32(a) && isF32(b)) {
      if (compare)
        return isBool(r) ? std::optional<std::string>(
                               std::string("ops::compare<float>(BinaryOp::") +
                               kind + ", " + in[0] + ", " + in[1] + ")")
                         : std::nullopt;
      if (isa<AndOp, OrOp, XorOp>(op) || !isF32(r))
        return std::nullopt;
      return std::string("ops::arith<float>(BinaryOp::") + kind + ", " + in[0] +
             ", " + in[1] + ")";
    }
    if (isBool(a) && isBool(b) && isBool(r)) {
      // The runtime reads bools as 0/1 bytes: these are its results.
      if (isa<AndOp>(op))
        return "(" + in[0] + " && " + in[1] + ")";
      if (isa<OrOp>(op))
        return "(" + in[0] + " || " + in[1] + ")";
      if (isa<XorOp>(op))
        return "(" + in[0] + " != " + in[1] + ")";
      if (isa<EqualOp>(op))
        return "(" + in[0] + " == " + in[1] + ")";
    }
    return std::nullopt;
  }
  if (auto w = dyn_cast<WhereOp>(op)) {
    if (isBool(w.getCond()) && isF32(w.getX()) && isF32(w.getY()))
      return "(" + in[0] + " ? " + in[1] + " : " + in[2] + ")";
    return std::nullopt;
  }
  if (auto c = dyn_cast<CastOp>(op)) {
    if (isF32(c.getInput()) && isBool(r))
      return "(" + in[0] + " != 0.0f)";
    if (isBool(c.getInput()) && isF32(r))
      return "(" + in[0] + " ? 1.0f : 0.0f)";
    if (isF32(c.getInput()) && isF32(r))
      return in[0];
    return std::nullopt;
  }
  if (isa<SwigluOp>(op))
    return isF32(r) ? std::optional<std::string>("ops::swigluOf<float>(" +
                                                 in[0] + ", " + in[1] + ")")
                    : std::nullopt;
  if (auto g = dyn_cast<GeluOp>(op)) {
    if (!isF32(r))
      return std::nullopt;
    return "ops::geluOf<float>(" + in[0] + ", " +
           cppBool(g.getTanhApproximation()) + ")";
  }
  if (auto l = dyn_cast<LeakyReluOp>(op)) {
    if (!isF32(r))
      return std::nullopt;
    std::string alpha =
        deviceFloat(static_cast<float>(l.getAlpha().convertToDouble()));
    return "(" + in[0] + " > 0.0f ? " + in[0] + " : " + alpha + " * " + in[0] +
           ")";
  }
  return std::nullopt;
}

/// A splat f32 or bool constant's literal, to inline.
std::optional<std::string> splatLiteral(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto attr = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!attr || !attr.isSplat())
    return std::nullopt;
  if (isF32(v))
    return deviceFloat(attr.getSplatValue<APFloat>().convertToFloat());
  if (isBool(v))
    return std::string(attr.getSplatValue<APInt>().isZero() ? "false" : "true");
  return std::nullopt;
}

/// The vector variant of a fused kernel: each thread computes `width`
/// consecutive elements, loading and storing them with vector accesses of
/// up to 16 bytes per tensor (detail::loadLanes / storeLanes: 8 lanes when
/// the chain reads or writes a 16-bit or bool tensor, so that those take
/// 16-byte (8-byte) accesses too, else 4: a float4); the element body is the
/// scalar kernel's, so the bits are the same. Possible when the count is a
/// multiple of the width and every input is of the result's shape, a
/// scalar, broadcast along leading dims only with an inner size that is a
/// multiple of the width (a bias), or any other broadcast whose last dim is
/// whole or 1 over a result whose last dim is a multiple of the width
/// (addStrided); the launcher takes it when every pointer is aligned for
/// its vector access, and the scalar kernel otherwise.
struct VectorKernel {
  int width = 4;
  bool possible = false;
  /// " *__restrict__ ", or " *" where an output is written over an input
  /// (dsc.overwrites): the two pointers alias.
  std::string pointer = " *__restrict__ ";
  std::string params, before, laneIn, laneOut, after, hostArgs, aligned;

  int vecBytes(Value v) const {
    int bytes = width * (isBool(v) ? 1 : isHalf(v) ? 2 : 4);
    return bytes < 16 ? bytes : 16;
  }
  /// The register value of a stored element `raw` of v.
  static std::string toRegister(Value v, const std::string &raw) {
    if (isBool(v))
      return "(" + raw + " != 0)";
    if (isHalf(v))
      return std::string(isBF16(v) ? "detail::bf16BitsToFloat("
                                   : "detail::halfBitsToFloat(") +
             raw + ")";
    return raw;
  }
  void addAligned(Value v, const std::string &ptr) {
    aligned += " && reinterpret_cast<uintptr_t>(" + ptr + ".data) % " +
               std::to_string(vecBytes(v)) + " == 0";
  }

  /// `direct`: the body reads the input at its own element (not only
  /// rotated, addRotated): its lanes are loaded here.
  void addInput(Value v, const std::string &in, const std::string &reg,
                ArrayRef<int64_t> shape, int64_t n, bool direct) {
    if (!possible)
      return;
    auto t = typeOf(v);
    std::string cT = storageType(v), rT = registerType(v);
    std::string w = std::to_string(width);
    params += "const " + cT + pointer + in + ", ";
    hostArgs += "static_cast<const " + cT + " *>(" + in + ".data), ";
    if (!direct) { // of the result's shape (rotatedInput)
      addAligned(v, in);
      return;
    }
    if (t.getNumElements() == 1) { // one value for every lane
      before += "    const " + rT + " " + reg + " = " +
                toRegister(v, in + "[0]") + ";\n";
      return;
    }
    // Broadcast along leading dims only: the input is the trailing dims of
    // the result (leading 1s dropped), read at (i mod inner).
    ArrayRef<int64_t> s = t.getShape();
    while (!s.empty() && s.front() == 1)
      s = s.drop_front();
    std::string index = "j";
    bool small = n < (int64_t(1) << 31);
    if (t.getShape() != shape) {
      bool trailing = s.size() <= shape.size() &&
                      shape.take_back(s.size()) == s;
      int64_t inner = t.getNumElements();
      if (!trailing || inner % width != 0)
        return addStrided(v, in, reg, shape, small);
      index = small ? "(uint32_t(j) * " + w + "u % " + std::to_string(inner) +
                          "u) / " + w + "u"
                    : "(j * " + w + " % " + std::to_string(inner) + ") / " + w;
    }
    before += "    " + cT + " " + reg + "s[" + w + "];\n";
    before += "    detail::loadLanes<" + w + ">(" + in + ", " + index + ", " +
              reg + "s);\n";
    laneIn += "      const " + rT + " " + reg + " = " +
              toRegister(v, reg + "s[l]") + ";\n";
    addAligned(v, in);
  }

  /// Any other broadcast, where the result's last dim is a multiple of the
  /// width: a vector's lanes share every index but the last, so they read
  /// `width` consecutive elements of the input (its last dim whole: the
  /// first lane's offset, by the input's strides, is a multiple of the
  /// width) or one element (its last dim broadcast). Rotary's cos and sin
  /// ([1, T, 1, D] over [B, T, H, D]), a per-row scale ([B, T, 1]).
  void addStrided(Value v, const std::string &in, const std::string &reg,
                  ArrayRef<int64_t> shape, bool small) {
    auto t = typeOf(v);
    int64_t last = t.getRank() ? t.getShape().back() : 1;
    if (shape.empty() || shape.back() % width != 0 ||
        (last != shape.back() && last != 1)) {
      possible = false;
      return;
    }
    std::string cT = storageType(v), rT = registerType(v);
    std::string w = std::to_string(width);
    params += "detail::Dims " + in + "Dims, ";
    hostArgs += "detail::simplified(detail::broadcastDims(" + in + ", out0)), ";
    std::string offset =
        small ? "detail::offsetOf32(uint32_t(j) * " + w + "u, " + in + "Dims)"
              : "detail::offsetOf(j * " + w + ", " + in + "Dims)";
    if (last == 1) {
      before += "    const " + rT + " " + reg + " = " +
                toRegister(v, in + "[" + offset + "]") + ";\n";
      return;
    }
    before += "    " + cT + " " + reg + "s[" + w + "];\n";
    before += "    detail::loadLanes<" + w + ">(" + in + ", " + offset + " / " +
              w + ", " + reg + "s);\n";
    laneIn += "      const " + rT + " " + reg + " = " +
              toRegister(v, reg + "s[l]") + ";\n";
    addAligned(v, in);
  }

  /// A rotate_half of input `in` (of the result's shape): the vector's
  /// partner, half a last dim away, is a whole vector when the half is a
  /// multiple of the width; its lanes negated for the first half.
  void addRotated(Value v, const std::string &in, const std::string &reg,
                  ArrayRef<int64_t> shape) {
    if (!possible)
      return;
    int64_t half = shape.back() / 2;
    if (half % width != 0) {
      possible = false;
      return;
    }
    std::string w = std::to_string(width);
    std::string perRow = std::to_string(2 * half / width),
                shift = std::to_string(half / width);
    before +=
        "    " + std::string(storageType(v)) + " " + reg + "s[" + w + "];\n";
    before +=
        "    const bool " + reg + "neg = j % " + perRow + " < " + shift + ";\n";
    before += "    detail::loadLanes<" + w + ">(" + in + ", " + reg +
              "neg ? j + " + shift + " : j - " + shift + ", " + reg + "s);\n";
    std::string x = toRegister(v, reg + "s[l]");
    laneIn += "      const float " + reg + " = " + reg + "neg ? -" + x + " : " +
              x + ";\n";
  }

  void addOutput(Value v, const std::string &out, const std::string &value) {
    if (!possible)
      return;
    std::string cT = storageType(v);
    std::string w = std::to_string(width);
    params += cT + pointer + out + ", ";
    hostArgs += "static_cast<" + cT + " *>(" + out + ".data), ";
    before += "    " + cT + " " + out + "s[" + w + "];\n";
    laneOut += "      " + out + "s[l] = " + value + ";\n";
    after +=
        "    detail::storeLanes<" + w + ">(" + out + ", j, " + out + "s);\n";
    addAligned(v, out);
  }

  std::string kernelName(const std::string &name) const {
    return name + "_vec" + std::to_string(width) + "_kernel";
  }

  std::string kernel(const std::string &name, const std::string &body) const {
    // The scalar body, indented one more level, inside the lane loop.
    std::string inner;
    for (StringRef line : llvm::split(StringRef(body).rtrim('\n'), '\n'))
      inner += "  " + line.str() + "\n";
    return "__global__ void __launch_bounds__(256)\n    " + kernelName(name) +
           "(" + params + "int64_t nv) {\n" + "  DSC_GRID_STRIDE(j, nv) {\n" +
           before + "#pragma unroll\n    for (int l = 0; l < " +
           std::to_string(width) + "; ++l) {\n" + laneIn + inner + laneOut +
           "    }\n" + after + "  }\n}\n\n";
  }

  std::string launch(const std::string &name,
                     const std::string &opsList) const {
    std::string w = std::to_string(width);
    return "  if (true" + aligned + ") {\n    " + kernelName(name) +
           "<<<detail::blocksFor(n / " + w +
           "), 256, 0, dsc::cuda::stream()>>>(" + hostArgs + "n / " + w +
           ");\n    return dsc::cuda::checkLaunch(\"" + name + " (" + opsList +
           ", " + w + "-wide)\");\n  }\n";
  }
};

/// The register of a rotate_half in a fused body, after checking what the
/// kernel can read rotated: a body argument of the result's shape over an
/// even last dim, never one the op writes its result over (each lane reads
/// its partner, which another lane may have written).
FailureOr<std::string> rotatedInput(FusedOp op, RotateHalfOp rh, size_t k,
                                    ArrayRef<int64_t> shape) {
  auto arg = dyn_cast<BlockArgument>(rh.getInput());
  if (!arg || typeOf(arg).getShape() != shape || shape.empty() ||
      shape.back() % 2 != 0 || !(isF32(arg) || isHalf(arg)))
    return rh.emitOpError(
        "in a dsc.fused body must read a body argument of the result's "
        "shape with an even last dim; dsc-fuse-elementwise should not have "
        "fused it");
  if (auto over = op->getAttrOfType<IntegerAttr>("dsc.overwrites");
      over && over.getInt() == int64_t(arg.getArgNumber()))
    return rh.emitOpError("in a dsc.fused body reads input ")
           << arg.getArgNumber()
           << " rotated, which the op writes its result over "
              "(dsc.overwrites); dsc-in-place-temporaries should not have "
              "chosen it";
  return "r" + std::to_string(k);
}

/// Whether `op` writes an output over one of its inputs: dsc.overwrites,
/// or an output its function returns in place of an argument
/// (dsc.in_place on a callee's result: dsc-accumulate-in-call's running
/// sum, which the caller may pass in the result's own storage).
bool writesOverInput(FusedOp op) {
  if (op->hasAttr("dsc.overwrites"))
    return true;
  auto fn = op->getParentOfType<func::FuncOp>();
  for (Value r : op->getResults())
    for (OpOperand &u : r.getUses())
      if (fn && isa<func::ReturnOp>(u.getOwner()) &&
          fn.getResultAttr(u.getOperandNumber(), "dsc.in_place"))
        return true;
  return false;
}

} // namespace

FailureOr<std::string> emitFusedKernel(FusedOp op, const std::string &name) {
  Block &block = op.getBody().front();
  struct {
    std::vector<Operation *> ops;
    std::vector<Value> inputs, outputs;
  } group;
  for (Value v : block.getArguments())
    group.inputs.push_back(v);
  for (Operation &inner : block.without_terminator())
    if (!(isa<ConstantOp>(inner) && splatLiteral(inner.getResult(0))))
      group.ops.push_back(&inner);
  for (Value v : block.getTerminator()->getOperands())
    group.outputs.push_back(v);
  Value first = group.outputs.front();
  ArrayRef<int64_t> shape = typeOf(first).getShape();
  int64_t n = typeOf(first).getNumElements();

  std::string params, args, loads, body, stores, hostArgs, hostDims;
  // An output written over an input (dsc.overwrites, element for element:
  // each lane reads its elements before it writes them) aliases it.
  const std::string pointer = writesOverInput(op) ? " *" : " *__restrict__ ";
  // Both widths are tried as the tensors are added; the 8-wide one is
  // taken where it is possible and some tensor is narrower than f32.
  VectorKernel vec8, vec4;
  vec8.width = 8, vec4.width = 4;
  vec8.possible = n % 8 == 0, vec4.possible = n % 4 == 0;
  vec8.pointer = vec4.pointer = pointer;
  bool narrow = false;
  llvm::DenseMap<Value, std::string> expr;
  for (auto [k, v] : llvm::enumerate(group.inputs)) {
    std::string in = "in" + std::to_string(k);
    auto t = typeOf(v);
    params += std::string("const ") + storageType(v) + pointer + in + ", ";
    hostArgs += "static_cast<const " + std::string(storageType(v)) + " *>(" +
                in + ".data), ";
    // Read at its own element by some op, or only rotated (rotate_half).
    bool direct = llvm::any_of(
        v.getUsers(), [](Operation *user) { return !isa<RotateHalfOp>(user); });
    vec8.addInput(v, in, "x" + std::to_string(k), shape, n, direct);
    vec4.addInput(v, in, "x" + std::to_string(k), shape, n, direct);
    narrow |= !isF32(v);
    std::string index;
    if (t.getShape() == shape)
      index = "i";
    else if (t.getNumElements() == 1)
      index = "0";
    else {
      // Strides simplified on the host; 32-bit index math when it fits.
      index = n < (int64_t(1) << 31)
                  ? "detail::offsetOf32(uint32_t(i), " + in + "Dims)"
                  : "detail::offsetOf(i, " + in + "Dims)";
      params += "detail::Dims " + in + "Dims, ";
      hostArgs +=
          "detail::simplified(detail::broadcastDims(" + in + ", out0)), ";
    }
    std::string value = in + "[" + index + "]";
    if (isBool(v))
      value = "(" + value + " != 0)";
    else if (isHalf(v))
      value = std::string(isBF16(v) ? "detail::bf16BitsToFloat("
                                    : "detail::halfBitsToFloat(") +
              value + ")";
    std::string reg = "x" + std::to_string(k);
    if (direct)
      loads += "    const " + std::string(registerType(v)) + " " + reg + " = " +
               value + ";\n";
    expr[v] = reg;
  }
  for (auto [k, inner] : llvm::enumerate(group.ops)) {
    if (auto rh = dyn_cast<RotateHalfOp>(inner)) {
      FailureOr<std::string> reg = rotatedInput(op, rh, k, shape);
      if (failed(reg))
        return failure();
      auto arg = cast<BlockArgument>(rh.getInput());
      std::string in = "in" + std::to_string(arg.getArgNumber());
      int64_t half = shape.back() / 2;
      std::string h = std::to_string(half), d = std::to_string(2 * half);
      std::string x = VectorKernel::toRegister(arg, in + "[i % " + d + " < " +
                                                        h + " ? i + " + h +
                                                        " : i - " + h + "]");
      loads += "    const float " + *reg + " = i % " + d + " < " + h + " ? -" +
               x + " : " + x + "; // dsc.rotate_half\n";
      vec8.addRotated(arg, in, *reg, shape);
      vec4.addRotated(arg, in, *reg, shape);
      expr[rh.getResult()] = *reg;
      continue;
    }
    std::vector<std::string> in;
    for (Value v : inner->getOperands()) {
      if (auto it = expr.find(v); it != expr.end())
        in.push_back(it->second);
      else if (std::optional<std::string> literal = splatLiteral(v))
        in.push_back(*literal);
      else
        return inner->emitOpError("in a dsc.fused body: operand is neither "
                                  "a body value nor a splat constant");
    }
    std::optional<std::string> e = expression(inner, in);
    if (inner->getNumResults() != 1 || !e)
      return inner->emitOpError(
          "has no device expression in a fused elementwise kernel (on these "
          "element types); dsc-fuse-elementwise should not have fused it");
    Value r = inner->getResult(0);
    // A cast of an input may keep the input's broadcast shape (a bias
    // widened as it is read): its register holds the element the lane
    // reads.
    bool widenedInput =
        isa<CastOp>(inner) && isa<BlockArgument>(inner->getOperand(0)) &&
        typeOf(inner->getOperand(0)).getShape() == typeOf(r).getShape();
    if (typeOf(r).getShape() != shape && !widenedInput)
      return inner->emitOpError("in a dsc.fused body: result shape differs "
                                "from the fused op's first result");
    std::string reg = "t" + std::to_string(k);
    body += "    const " + std::string(registerType(r)) + " " + reg + " = " +
            *e + "; // " + inner->getName().getStringRef().str() + "\n";
    expr[r] = reg;
  }
  std::string outParams, outHost;
  for (auto [k, v] : llvm::enumerate(group.outputs)) {
    std::string out = "out" + std::to_string(k);
    params += std::string(storageType(v)) + pointer + out + ", ";
    outHost += "static_cast<" + std::string(storageType(v)) + " *>(" + out +
               ".data), ";
    std::string value =
        isBool(v)    ? "uint8_t(" + expr[v] + ")"
        : !isHalf(v) ? expr[v]
                     : std::string(isBF16(v) ? "detail::floatToBf16Bits("
                                             : "detail::floatToHalfBits(") +
                           expr[v] + ")";
    stores += "    " + out + "[i] = " + value + ";\n";
    vec8.addOutput(v, out, value);
    vec4.addOutput(v, out, value);
    narrow |= !isF32(v);
  }
  std::string launcherParams;
  for (size_t k = 0; k < group.inputs.size(); ++k)
    launcherParams += "const Tensor &in" + std::to_string(k) + ", ";
  for (size_t k = 0; k < group.outputs.size(); ++k)
    launcherParams +=
        std::string(k ? ", " : "") + "const Tensor &out" + std::to_string(k);

  std::string opsList;
  for (Operation *inner : group.ops)
    opsList += (opsList.empty() ? "" : " ") +
               inner->getName().getStringRef().drop_front(4).str();
  std::string shapeText = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    shapeText += (i ? "," : "") + std::to_string(d);
  shapeText += "]";

  std::string s;
  s += "// " + opsList + " over " + shapeText + "\n";
  s += "__global__ void __launch_bounds__(256)\n    " + name + "_kernel(" +
       params + "int64_t n) {\n";
  s += "  DSC_GRID_STRIDE(i, n) {\n" + loads + body + stores + "  }\n}\n\n";
  const VectorKernel &vec = narrow && vec8.possible ? vec8 : vec4;
  if (vec.possible)
    s += vec.kernel(name, body);
  s += "Status " + name + "(" + launcherParams + ") {\n";
  s += "  constexpr int64_t n = " + std::to_string(n) + ";\n";
  if (vec.possible)
    s += vec.launch(name, opsList);
  s += "  " + name +
       "_kernel<<<detail::blocksFor(n), 256, 0, "
       "dsc::cuda::stream()>>>(" +
       hostArgs + outHost + "n);\n";
  s += "  return dsc::cuda::checkLaunch(\"" + name + " (" + opsList +
       ")\");\n}\n\n";
  return s;
}

} // namespace dsc::codegen
