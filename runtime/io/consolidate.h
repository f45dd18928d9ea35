//===- consolidate.h - A checkpoint as full tensors by ONNX name -*- C++
//-*-===//
//
// What `dsc checkpoint consolidate` writes: the parameters and buffers of a
// checkpoint (io/checkpoint.h), assembled whole from the pieces of every
// rank, under their ONNX initializer names (`param/` and `buffer/` taken
// off), as one safetensors file or, above a size, as Hugging Face style
// shards with an index:
//
//   NAME-00001-of-00003.safetensors ... NAME.safetensors.index.json
//   {"metadata": {"total_size": BYTES}, "weight_map": {tensor: file}}
//
// Optimizer state (`optim/...`) and loss-scaler state (`scaler/...`) keep
// their logical names and are included only on request.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_CONSOLIDATE_H
#define DSC_RUNTIME_IO_CONSOLIDATE_H

#include "io/checkpoint.h"

#include <string>
#include <vector>

namespace dsc::io {

struct ConsolidateWhat {
  bool buffers = true;           // buffer/* (running statistics)
  bool includeOptimizer = false; // optim/* and scaler/*
};

/// One tensor of the consolidated output: its name there and in the
/// checkpoint.
struct ConsolidatedName {
  std::string name;    // "h.0.attn.weight" (ONNX initializer name)
  std::string logical; // "param/h.0.attn.weight"
};

/// The tensors `what` selects, sorted by output name; an error when two
/// logical names map to one output name.
Status consolidatedNames(const CheckpointManifest &m,
                         const ConsolidateWhat &what,
                         std::vector<ConsolidatedName> &out);

/// Writes the selected tensors to `outPath` (".safetensors"), or, when
/// `maxShardBytes` > 0 and their data exceeds it, to shards beside it and
/// the index `<stem>.safetensors.index.json`. Every file is written
/// atomically; `written` receives the paths, index last.
Status consolidateToSafetensors(CheckpointReader &reader,
                                const std::string &outPath,
                                uint64_t maxShardBytes,
                                const ConsolidateWhat &what,
                                std::vector<std::string> *written = nullptr);

/// "5GB", "500MB", "1GiB", "123" (bytes) -> bytes; false if malformed.
bool parseByteSize(const std::string &text, uint64_t &bytes);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_CONSOLIDATE_H
