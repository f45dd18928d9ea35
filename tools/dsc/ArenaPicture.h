//===- ArenaPicture.h - the arena over one step, as an SVG ------*- C++ -*-===//
#ifndef DSC_TOOLS_DSC_ARENAPICTURE_H
#define DSC_TOOLS_DSC_ARENAPICTURE_H

#include "compiler/codegen/EmitCpp.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

namespace dsc {

/// Draws `stats.timeline` (EmitCppOptions::recordTimeline): the step's op
/// clock on x, with the forward, backward and optimizer marked; arena
/// offset on y; one rectangle per planned buffer over [first use, last
/// use] x [offset, offset + size], coloured by kArenaKinds, with a tooltip
/// naming its op, ONNX node and size. The highest planned byte and the
/// moment the most bytes are alive are marked. Buffers smaller than a
/// pixel are merged into a grid of small cells per kind (the legend says
/// how many), which bounds the file for big models. `title` heads it.
void writeArenaSvg(const EmitCppStats &stats, llvm::StringRef title,
                   llvm::raw_ostream &os);

} // namespace dsc

#endif // DSC_TOOLS_DSC_ARENAPICTURE_H
