#!/usr/bin/env python3
"""Writes golden.safetensors with the `safetensors` package (0.8.0 wrote the committed file).

The Catch2 test `export_test.cc` writes the same three tensors with GraphPipe's writer and
compares the files byte for byte: same header JSON, padding and tensor order.
Run: python3 make_golden_safetensors.py (needs numpy and safetensors).
"""
import os

import numpy as np
from safetensors.numpy import save_file

here = os.path.dirname(os.path.abspath(__file__))
tensors = {
    "layer.0.weight": np.arange(6, dtype=np.float32).reshape(2, 3) * 0.25 - 0.5,
    "layer.0.bias": np.array([0.5, -1.0, 2.0], dtype=np.float32),
    "emb.weight": np.arange(8, dtype=np.float32).reshape(4, 2) * 0.5 - 2.0,
}
save_file(tensors, os.path.join(here, "golden.safetensors"), metadata={"format": "pt"})
