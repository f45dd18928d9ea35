//===- DscOps.cpp - op definitions, folders of the dsc dialect ------------===//
#include "dialects/dsc/IR/DscOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace dsc;

#include "dialects/dsc/IR/DscInterfaces.cpp.inc"

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValueAttr(); }

#define GET_OP_CLASSES
#include "dialects/dsc/IR/DscOps.cpp.inc"
