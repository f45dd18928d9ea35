//===- DscInterfaces.td - op interfaces of the dsc dialect ----------------===//
#ifndef DSC_INTERFACES_TD
#define DSC_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Dsc_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let cppNamespace = "::dsc";
  let description = [{
    An op that states its vector-Jacobian product. Given the gradients of
    its results (a null Value where a result receives none), it builds, at
    the builder's insertion point, the gradient of each operand (null where
    no gradient flows: indices, labels, masks, running statistics). The
    autodiff pass calls this and nothing else; there is no per-op switch.
  }];
  let methods = [
    InterfaceMethod<
      "Builds the operand gradients from the result gradients",
      "::llvm::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // DSC_INTERFACES_TD
