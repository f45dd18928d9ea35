//===- linear_cross_entropy.h - The chunked classifier, for both backends -===//
//
// dsc.linear_cross_entropy: logits = input @ op(weight), their summed softmax
// cross-entropy against labels, and the gradients of `seed * loss` with
// respect to input and weight, over chunks of rows so that only one chunk's
// logits ([chunk, V], the op's scratch) ever exist. Per chunk: the logits
// GEMM, the loss of its rows (into chunk_loss[c]), the logits' gradient in
// place, then grad_input's rows and grad_weight's accumulation (f32 when
// the op asks for it, whatever the operands' type), onto `init` when it is
// present (copied into grad_weight first unless grad_weight is its
// storage). The loss is the sum of chunk_loss, in chunk order:
// deterministic, and the same kernels as the unfused step's.
//
// `K` is the backend: static matmulTransposed, matmulAccumulate,
// softmaxCrossEntropyWithBackward (the summed loss of the rows and its
// gradient, as softmaxCrossEntropy then softmaxCrossEntropyBackward give
// them), reduce and reshape (a copy) with the kernels' signatures (without
// the CPU's thread count).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_LINEAR_CROSS_ENTROPY_H
#define DSC_RUNTIME_CPU_LINEAR_CROSS_ENTROPY_H

#include "cpu/kernel_util.h"
#include "cpu/kernels.h"

#include <optional>

namespace dsc::cpu::detail {

/// Rows [r0, r0 + rows) of `t` seen as [numel / width, width].
inline Tensor rowsOf(const Tensor &t, int64_t width, int64_t r0, int64_t rows) {
  char *base = static_cast<char *>(t.data);
  return Tensor::of(base + size_t(r0 * width) * dtypeSize(t.dtype), t.dtype,
                    {rows, width});
}

/// The shape checks of linearCrossEntropy; n, c, v: rows, features, classes.
inline Status checkLinearCrossEntropy(
    const Call &call, const Tensor &input, const Tensor &weight,
    bool transWeight, const Tensor &labels, const Tensor &seed,
    const Tensor &logits, const Tensor &chunkLoss, const Tensor &loss,
    const Tensor &gradInput, const Tensor &gradWeight, int64_t &n, int64_t &c,
    int64_t &v) {
  for (const Tensor *t : {&input, &weight, &labels, &seed, &logits, &chunkLoss,
                          &loss, &gradInput, &gradWeight})
    if (!validRank(*t) || !t->present())
      return call.fail("every tensor must be present, of rank <= " +
                       std::to_string(kMaxRank));
  if (input.rank < 1 || weight.rank != 2 || logits.rank != 2)
    return call.fail("input needs rank >= 1, weight and logits rank 2");
  c = input.shape[input.rank - 1];
  v = transWeight ? weight.shape[0] : weight.shape[1];
  if ((transWeight ? weight.shape[1] : weight.shape[0]) != c)
    return call.fail("weight's feature dim must be input's last dim");
  n = c == 0 ? 0 : input.numel() / c;
  int64_t rows = logits.shape[0];
  if (logits.shape[1] != v || rows < 1 || logits.dtype != input.dtype)
    return call.fail("logits must be [chunk >= 1, classes] of input's dtype");
  int64_t chunks = n == 0 ? 0 : (n + rows - 1) / rows;
  if (labels.numel() != n || chunkLoss.numel() != chunks ||
      chunkLoss.dtype != loss.dtype || loss.numel() != 1 || seed.numel() != 1 ||
      gradInput.numel() != input.numel() ||
      gradInput.shape[gradInput.rank - 1] != c ||
      gradWeight.numel() != weight.numel())
    return call.fail("labels must have one entry per row, chunk_loss one "
                     "value of loss's dtype per chunk, loss and seed one "
                     "value, the gradients "
                     "their operands' sizes");
  if (gradWeight.dtype != weight.dtype && gradWeight.dtype != DType::F32)
    return call.fail("grad_weight must be weight's dtype or f32");
  if (loss.dtype != DType::F32 && loss.dtype != DType::F64)
    return call.fail("loss must be f32 or f64");
  return Status();
}

template <typename K>
Status linearCrossEntropyChunks(const char *name, const Tensor &input,
                                const Tensor &weight, bool transWeight,
                                const Tensor &labels,
                                std::optional<int64_t> ignoreIndex,
                                const Tensor &seed, const Tensor &logits,
                                const Tensor &chunkLoss, const Tensor &loss,
                                const Tensor &gradInput,
                                const Tensor &gradWeight, const Tensor &init) {
  Call call(name);
  call.arg("input", input)
      .arg("weight", weight)
      .raw("trans_weight", transWeight ? "true" : "false")
      .arg("labels", labels)
      .arg("seed", seed)
      .arg("logits", logits)
      .arg("chunk_loss", chunkLoss)
      .arg("loss", loss)
      .arg("grad_input", gradInput)
      .arg("grad_weight", gradWeight);
  if (init.present())
    call.arg("init", init);
  int64_t n = 0, c = 0, v = 0;
  if (Status st = checkLinearCrossEntropy(call, input, weight, transWeight,
                                          labels, seed, logits, chunkLoss, loss,
                                          gradInput, gradWeight, n, c, v);
      !st.ok())
    return st;
  bool accumulate = init.present();
  if (accumulate &&
      (init.dtype != gradWeight.dtype || init.numel() != gradWeight.numel()))
    return call.fail("init must be grad_weight's dtype and size");
  // Every chunk's term goes onto init's values, in grad_weight's storage.
  if (accumulate)
    if (Status st = K::reshape(init, gradWeight); !st.ok())
      return st;
  Tensor scalar = Tensor::of(loss.data, loss.dtype, {});
  Tensor chunkSum =
      Tensor::of(chunkLoss.data, chunkLoss.dtype, {chunkLoss.numel()});
  if (n == 0)
    return K::reduce(ReduceOp::Sum, chunkSum, I64s(), false, scalar);
  int64_t rows = logits.shape[0];
  for (int64_t r0 = 0, ch = 0; r0 < n; r0 += rows, ++ch) {
    int64_t m = std::min(rows, n - r0);
    Tensor x = rowsOf(input, c, r0, m);
    Tensor l = rowsOf(logits, v, 0, m);
    Tensor y = rowsOf(labels, 1, r0, m);
    y = Tensor::of(y.data, y.dtype, {m});
    Tensor lossC = Tensor::of(static_cast<char *>(chunkLoss.data) +
                                  size_t(ch) * dtypeSize(chunkLoss.dtype),
                              chunkLoss.dtype, {});
    if (Status st = K::matmulTransposed(x, false, weight, transWeight, l);
        !st.ok())
      return st;
    if (Status st = K::softmaxCrossEntropyWithBackward(l, y, ignoreIndex, seed,
                                                       lossC, l);
        !st.ok())
      return st;
    if (Status st = K::matmulTransposed(l, false, weight, !transWeight,
                                        rowsOf(gradInput, c, r0, m));
        !st.ok())
      return st;
    Status st = transWeight
                    ? K::matmulAccumulate(l, true, x, false,
                                          accumulate || ch > 0, gradWeight)
                    : K::matmulAccumulate(x, true, l, false,
                                          accumulate || ch > 0, gradWeight);
    if (!st.ok())
      return st;
  }
  return K::reduce(ReduceOp::Sum, chunkSum, I64s(), false, scalar);
}

} // namespace dsc::cpu::detail

#endif // DSC_RUNTIME_CPU_LINEAR_CROSS_ENTROPY_H
