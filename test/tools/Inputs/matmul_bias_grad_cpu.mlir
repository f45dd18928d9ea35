module attributes {dsc.target = {name = "cpu"}} {
  func.func @train_step(%g: tensor<8x16xf32> {dsc.input = "g"}, %x: tensor<8x24xf32> {dsc.input = "x"}) -> (tensor<16x24xf32> {dsc.output = "w"}, tensor<16xf32> {dsc.output = "b"}, tensor<24x16xf32> {dsc.output = "w_in_out"}, tensor<16xf32> {dsc.output = "b_in_out"}) {
    %w, %b = dsc.matmul_bias_grad %g, %x : tensor<8x16xf32>, tensor<8x24xf32> -> tensor<16x24xf32>, tensor<16xf32>
    %w2, %b2 = dsc.matmul_bias_grad %x, %g {sum_rhs = true} : tensor<8x24xf32>, tensor<8x16xf32> -> tensor<24x16xf32>, tensor<16xf32>
    return %w, %b, %w2, %b2 : tensor<16x24xf32>, tensor<16xf32>, tensor<24x16xf32>, tensor<16xf32>
  }
}
