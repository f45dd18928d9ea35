module attributes {dsc.target = {name = "cuda", arch = "sm_90a"}} {
  func.func @train_step(%q: tensor<2x4x2x16xbf16> {dsc.input = "q"}, %cos: tensor<1x4x1x16xf32> {dsc.param = "cos"}, %s: tensor<2x4x2x1xf32> {dsc.param = "s"}, %b: tensor<16xf32> {dsc.param = "b"}) -> (tensor<2x4x2x16xbf16> {dsc.output = "y"}, tensor<2x4x2x16xf32> {dsc.grad = "b"}) {
    %f:2 = dsc.fused "elementwise"(%q, %cos, %b) : (tensor<2x4x2x16xbf16>, tensor<1x4x1x16xf32>, tensor<16xf32>) -> (tensor<2x4x2x16xbf16>, tensor<2x4x2x16xf32>) {
    ^bb0(%a: tensor<2x4x2x16xbf16>, %c: tensor<1x4x1x16xf32>, %d: tensor<16xf32>):
      %0 = dsc.cast %a {to = f32} : tensor<2x4x2x16xbf16> -> tensor<2x4x2x16xf32>
      %1 = dsc.mul %0, %c : tensor<2x4x2x16xf32>, tensor<1x4x1x16xf32> -> tensor<2x4x2x16xf32>
      %2 = dsc.add %1, %d : tensor<2x4x2x16xf32>, tensor<16xf32> -> tensor<2x4x2x16xf32>
      %3 = dsc.cast %2 {to = bf16} : tensor<2x4x2x16xf32> -> tensor<2x4x2x16xbf16>
      dsc.yield %3, %2 : tensor<2x4x2x16xbf16>, tensor<2x4x2x16xf32>
    }
    %g = dsc.fused "elementwise"(%f#1, %s) : (tensor<2x4x2x16xf32>, tensor<2x4x2x1xf32>) -> tensor<2x4x2x16xf32> {
    ^bb0(%a: tensor<2x4x2x16xf32>, %c: tensor<2x4x2x1xf32>):
      %0 = dsc.mul %a, %c : tensor<2x4x2x16xf32>, tensor<2x4x2x1xf32> -> tensor<2x4x2x16xf32>
      dsc.yield %0 : tensor<2x4x2x16xf32>
    }
    return %f#0, %g : tensor<2x4x2x16xbf16>, tensor<2x4x2x16xf32>
  }
}
