//===- OnnxMutator.h - structure-aware mutation of ONNX models --*- C++ -*-===//
//
// Edits a parsed onnx::ModelProto the way a broken exporter or an attacker
// would: dims, element types, attributes, node input and output lists,
// initializers, external-data fields, opset versions. Byte-level mutation
// alone almost never gets past protobuf parsing into the importer.
//
//===----------------------------------------------------------------------===//
#ifndef DSC_TOOLS_DSC_FUZZ_ONNXMUTATOR_H
#define DSC_TOOLS_DSC_FUZZ_ONNXMUTATOR_H

#include <onnx/onnx_pb.h>

#include <random>

namespace dsc::fuzz {

/// Applies one random structural edit to `model`. Returns false when the
/// chosen edit found nothing to change (the caller tries another).
bool mutateModel(onnx::ModelProto &model, std::mt19937_64 &rng);

} // namespace dsc::fuzz

#endif // DSC_TOOLS_DSC_FUZZ_ONNXMUTATOR_H
