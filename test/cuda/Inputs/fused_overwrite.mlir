module attributes {dsc.target = {name = "cuda", arch = "sm_90a"}} {
  func.func @train_step(%x: tensor<4x16xf32> {dsc.input = "x"}, %w: tensor<4x16xf32> {dsc.param = "w"}, %s: tensor<f32> {dsc.hyper = "lr"}) -> (tensor<f32> {dsc.output = "loss"}, tensor<4x16xf32> {dsc.grad = "w"}) {
    %g = dsc.mul %x, %w : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
    %f:2 = dsc.fused "elementwise"(%g, %s) {dsc.overwrites = 0 : i64} : (tensor<4x16xf32>, tensor<f32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
    ^bb0(%a: tensor<4x16xf32>, %c: tensor<f32>):
      %0 = dsc.mul %a, %c : tensor<4x16xf32>, tensor<f32> -> tensor<4x16xf32>
      %1 = dsc.mul %0, %0 : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
      dsc.yield %0, %1 : tensor<4x16xf32>, tensor<4x16xf32>
    }
    %l = dsc.reduce_sum %f#1 {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x16xf32> -> tensor<f32>
    return %l, %f#0 : tensor<f32>, tensor<4x16xf32>
  }
}
