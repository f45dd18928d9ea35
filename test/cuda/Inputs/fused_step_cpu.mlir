module attributes {dsc.target = {name = "cpu"}} {
  func.func @train_step(%x: tensor<4x8xbf16> {dsc.input = "x"}, %w: tensor<16x8xbf16> {dsc.param = "w"}, %b: tensor<16xf32> {dsc.param = "b"}) -> (tensor<f32> {dsc.output = "loss"}) {
    %y = dsc.matmul %x, %w {transpose_rhs = true} : tensor<4x8xbf16>, tensor<16x8xbf16> -> tensor<4x16xbf16>
    %h = dsc.fused "elementwise"(%y, %b) : (tensor<4x16xbf16>, tensor<16xf32>) -> tensor<4x16xf32> {
    ^bb0(%a: tensor<4x16xbf16>, %c: tensor<16xf32>):
      %0 = dsc.cast %a {to = f32} : tensor<4x16xbf16> -> tensor<4x16xf32>
      %1 = dsc.add %0, %c : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
      %k = dsc.constant dense<2.0> : tensor<f32>
      %2 = dsc.mul %1, %k : tensor<4x16xf32>, tensor<f32> -> tensor<4x16xf32>
      dsc.yield %2 : tensor<4x16xf32>
    }
    %l = dsc.reduce_sum %h {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x16xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
