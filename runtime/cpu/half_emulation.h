//===- half_emulation.h - f16/bf16 storage with f32 math on the CPU -*- C++
//-*-===//
//
// Mixed-precision programs (dsc-mixed-precision) run matmuls and
// convolutions on 16-bit operands with fp32 accumulation, as tensor cores
// do. The CPU backend has no 16-bit arithmetic; it emulates the storage:
// operands are widened to f32 (exactly: every f16/bf16 value is an f32),
// the f32 kernel runs, and each result is rounded once to its 16-bit type
// (round to nearest even, the conversions of dsc::cpu::cast). So CI runs
// every mixed-precision program end to end, sharded ones included.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_RUNTIME_CPU_HALF_EMULATION_H
#define DSC_RUNTIME_CPU_HALF_EMULATION_H

#include "cpu/kernels.h"

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsc::cpu {

inline bool isHalf(DType t) { return t == DType::F16 || t == DType::BF16; }

/// True when any present view of `ts` is f16 or bf16.
inline bool anyHalf(std::initializer_list<Tensor> ts) {
  for (const Tensor &t : ts)
    if (t.present() && isHalf(t.dtype))
      return true;
  return false;
}

/// f32 stand-ins for the 16-bit views of one kernel call.
class HalfAsF32 {
public:
  /// Every present view of `ts` must have the one 16-bit dtype of the first:
  /// the kernels take operands and result of one dtype.
  Status check(const char *kernel, std::initializer_list<Tensor> ts) const {
    DType want = DType::F32;
    for (const Tensor &t : ts)
      if (t.present() && isHalf(t.dtype)) {
        want = t.dtype;
        break;
      }
    for (const Tensor &t : ts)
      if (t.present() && t.dtype != want)
        return Status::error(StatusCode::InvalidArgument,
                             std::string(kernel) +
                                 ": expects operands and "
                                 "result of one dtype, "
                                 "got " +
                                 dtypeName(t.dtype) + " beside " +
                                 dtypeName(want));
    return Status();
  }
  /// An operand: its values widened to f32 (a view without data stays
  /// without data).
  Tensor in(const Tensor &t) {
    if (!isHalf(t.dtype))
      return t;
    Tensor wide = f32Like(t);
    if (t.data)
      (void)cast(t, wide); // 16-bit to f32 cannot fail nor round
    return wide;
  }
  /// A result: f32 scratch that finish() rounds into `t`.
  Tensor out(const Tensor &t) {
    if (!isHalf(t.dtype) || !t.data)
      return isHalf(t.dtype) ? f32Like(t) : t;
    Tensor wide = f32Like(t);
    results_.push_back({wide, t});
    return wide;
  }
  /// Rounds every result once to its 16-bit type.
  Status finish() {
    for (auto &[wide, narrow] : results_)
      if (Status s = cast(wide, narrow); !s.ok())
        return s;
    return Status();
  }

private:
  Tensor f32Like(const Tensor &t) {
    Tensor wide = t;
    wide.dtype = DType::F32;
    if (!t.data)
      return wide;
    storage_.push_back(std::make_unique<float[]>(size_t(t.numel())));
    wide.data = storage_.back().get();
    return wide;
  }
  std::vector<std::unique_ptr<float[]>> storage_;
  std::vector<std::pair<Tensor, Tensor>> results_;
};

/// The 16-bit path of a kernel: when any of `views` is f16/bf16, runs
/// `run(h)` (the f32 kernel on h.in(...) / h.out(...)) and rounds the
/// results; std::nullopt when none is, and the caller goes on in f32/f64.
template <typename Run>
std::optional<Status>
emulateHalf(const char *kernel, std::initializer_list<Tensor> views, Run run) {
  if (!anyHalf(views))
    return std::nullopt;
  HalfAsF32 h;
  if (Status st = h.check(kernel, views); !st.ok())
    return st;
  if (Status st = run(h); !st.ok())
    return st;
  return h.finish();
}

} // namespace dsc::cpu

#endif // DSC_RUNTIME_CPU_HALF_EMULATION_H
