module attributes {dsc.target = {name = "cuda", arch = "sm_90a"}} {
  func.func @train_step(%x: tensor<2x8xf32> {dsc.input = "x"}) -> (tensor<2x8xf32> {dsc.output = "y"}) {
    %e = dsc.exp %x : tensor<2x8xf32>
    %f = dsc.fused "elementwise"(%e) {dsc.overwrites = 0 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32> {
    ^bb0(%a: tensor<2x8xf32>):
      %0 = dsc.rotate_half %a : tensor<2x8xf32>
      %1 = dsc.exp %0 : tensor<2x8xf32>
      dsc.yield %1 : tensor<2x8xf32>
    }
    return %f : tensor<2x8xf32>
  }
}
