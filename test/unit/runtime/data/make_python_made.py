# Regenerates python_made.safetensors, the file SafetensorsTest reads to check
# that the runtime understands what Python's safetensors writes.
#   cd test/unit/runtime/data && python3 make_python_made.py
import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

t = {
    "weight.f32": np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1,
    "weight.f64": np.array([1.0 / 3, -2.25], dtype=np.float64),
    "half": np.array([1.0, -0.5, 65504.0, 0.0], dtype=np.float16),
    "brain": np.array([1.0, -3.140625, 0.5], dtype=ml_dtypes.bfloat16),
    "tokens": np.array([[0, -1], [2**40, 7]], dtype=np.int64),
    "i32": np.array([-3, 5, 2**31 - 1], dtype=np.int32),
    "i8": np.array([-128, 127], dtype=np.int8),
    "u8": np.array([0, 255, 9], dtype=np.uint8),
    "flags": np.array([True, False, True], dtype=np.bool_),
    "scalar": np.array(2.5, dtype=np.float32),
}
save_file(t, "python_made.safetensors", metadata={"format": "np", "step": "12"})
