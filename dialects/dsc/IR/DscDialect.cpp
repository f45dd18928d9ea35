//===- DscDialect.cpp - registration of the dsc dialect -------------------===//
#include "dialects/dsc/IR/DscOps.h"

using namespace mlir;
using namespace dsc;

#include "dialects/dsc/IR/DscDialect.cpp.inc"

void DscDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/dsc/IR/DscOps.cpp.inc"
      >();
}

Operation *DscDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                           Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
