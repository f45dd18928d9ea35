module attributes {dsc.target = {name = "cpu"}} {
  func.func @train_step(%a: tensor<4x8xf32> {dsc.param = "a"}, %b: tensor<16xf32> {dsc.param = "b"}, %s: tensor<f32> {dsc.input = "s"}) -> (tensor<f32> {dsc.output = "plain"}, tensor<f32> {dsc.output = "scaled"}) {
    %one = dsc.constant dense<1.0> : tensor<f32>
    %0 = dsc.sum_squares scale %one, (%a, %b) : tensor<f32>, (tensor<4x8xf32>, tensor<16xf32>) -> tensor<f32>
    %1 = dsc.sum_squares scale %s, (%b) : tensor<f32>, (tensor<16xf32>) -> tensor<f32>
    return %0, %1 : tensor<f32>, tensor<f32>
  }
}
