//===- device.h - The CUDA backend as a dsc::Device -------------*- C++ -*-===//
//
// What a program compiled with --target cuda puts in its ProgramSpec
// (`spec.device = dsc::cuda::device`): runProgram mirrors the step's tensors
// in GPU memory through it. See dsc/device.h.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_DEVICE_H
#define DSC_RUNTIME_CUDA_DEVICE_H

#include "dsc/device.h"

namespace dsc::cuda {

/// The process's CUDA device (one object for every GPU it sees).
Device *device();

} // namespace dsc::cuda

#endif // DSC_RUNTIME_CUDA_DEVICE_H
