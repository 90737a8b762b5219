#!/usr/bin/env python3
"""Writes tan_legacy.onnx: Linear(8, 6) -> torch.tan -> Linear(6, 2), exported by torch's
TorchScript exporter (dynamo=False, opset 17, dynamic batch). That exporter writes no shapes for
intermediate tensors, and GraphPipe has no operator for Tan: `import --allow-opaque` keeps it as
an opaque operator whose output shape only ONNX's own shape inference can give.

Generated with torch 2.15.0 from PyPI (a virtual environment; the tests only read the file):
  /tmp/t2/bin/python test/data/onnx/opaque/make_opaque.py test/data/onnx/opaque
"""
import os
import sys

import torch


class TanNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 6)
        self.fc2 = torch.nn.Linear(6, 2)

    def forward(self, x):
        return self.fc2(torch.tan(self.fc1(x)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(131)
    torch.onnx.export(TanNet(), (torch.randn(4, 8),), os.path.join(out, "tan_legacy.onnx"),
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False,
                      opset_version=17)


if __name__ == "__main__":
    main()
