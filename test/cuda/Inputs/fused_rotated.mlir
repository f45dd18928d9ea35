module attributes {dsc.target = {name = "cuda", arch = "sm_90a"}} {
  func.func @train_step(%g: tensor<2x4x2x16xbf16> {dsc.input = "g"}, %cos: tensor<1x4x1x16xf32> {dsc.param = "cos"}, %h: tensor<2x4x2x8xbf16> {dsc.input = "h"}) -> (tensor<2x4x2x16xbf16> {dsc.output = "y"}, tensor<2x4x2x8xf32> {dsc.output = "z"}) {
    %f = dsc.fused "elementwise"(%g, %cos) : (tensor<2x4x2x16xbf16>, tensor<1x4x1x16xf32>) -> tensor<2x4x2x16xbf16> {
    ^bb0(%a: tensor<2x4x2x16xbf16>, %c: tensor<1x4x1x16xf32>):
      %0 = dsc.cast %a {to = f32} : tensor<2x4x2x16xbf16> -> tensor<2x4x2x16xf32>
      %1 = dsc.mul %0, %c : tensor<2x4x2x16xf32>, tensor<1x4x1x16xf32> -> tensor<2x4x2x16xf32>
      %2 = dsc.rotate_half %a : tensor<2x4x2x16xbf16>
      %3 = dsc.cast %2 {to = f32} : tensor<2x4x2x16xbf16> -> tensor<2x4x2x16xf32>
      %4 = dsc.add %1, %3 : tensor<2x4x2x16xf32>, tensor<2x4x2x16xf32> -> tensor<2x4x2x16xf32>
      %5 = dsc.cast %4 {to = bf16} : tensor<2x4x2x16xf32> -> tensor<2x4x2x16xbf16>
      dsc.yield %5 : tensor<2x4x2x16xbf16>
    }
    %k = dsc.fused "elementwise"(%h) : (tensor<2x4x2x8xbf16>) -> tensor<2x4x2x8xf32> {
    ^bb0(%a: tensor<2x4x2x8xbf16>):
      %0 = dsc.rotate_half %a : tensor<2x4x2x8xbf16>
      %1 = dsc.cast %0 {to = f32} : tensor<2x4x2x8xbf16> -> tensor<2x4x2x8xf32>
      dsc.yield %1 : tensor<2x4x2x8xf32>
    }
    return %f, %k : tensor<2x4x2x16xbf16>, tensor<2x4x2x8xf32>
  }
}
