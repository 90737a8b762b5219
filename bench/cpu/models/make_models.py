#!/usr/bin/env python3
"""Writes the graph-only ONNX exports (export_params=False: shapes and ops, no weights; both sides
of bench/cpu/run.py initialise their own) of the three PyTorch architectures bench/cpu times:
  gpt2_small_shaped.onnx  nanoGPT's GPT-2 with GPT-2 small's layer shape (768 wide, 12 heads,
                          50257 tokens, tied head) but 2 layers and 64 positions, so that a CPU
                          step takes seconds
  vit.onnx                a timm-style ViT (64x64 images, 8x8 patches, 192 wide, 3 heads, 4 layers)
  unet.onnx               tools/torch-check/modern_models.py's U-Net at 64x64
Legacy exporter, opset 17, training mode, dynamic batch. Needs torch (not the benchmark):
  python3 bench/cpu/models/make_models.py bench/cpu/models
"""
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "torch-check"))
import modern_models as mm  # noqa: E402


def export(model, x, path):
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], dynamo=False,
                      opset_version=17, export_params=False,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def main():
    warnings.filterwarnings("ignore")
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    torch.manual_seed(0)
    mm.EMBD, mm.HEADS, mm.SEQ, mm.VOCAB = 768, 12, 64, 50257
    export(mm.NanoGPT(sdpa=False, layers=2), torch.randint(0, mm.VOCAB, (2, mm.SEQ)),
           os.path.join(out, "gpt2_small_shaped.onnx"))
    mm.HEADS = 3
    vit = mm.TimmViT(size=64, patch=8, dim=192)
    vit.blocks = torch.nn.Sequential(*[mm.TimmBlock(192, 3) for _ in range(4)])
    export(vit, torch.randn(2, 3, 64, 64), os.path.join(out, "vit.onnx"))
    export(mm.UNet(), torch.randn(2, 3, 64, 64), os.path.join(out, "unet.onnx"))


if __name__ == "__main__":
    main()
