#!/usr/bin/python3
"""Writes small real torch.onnx.export models of specific layer patterns, with torch reference numerics.

Unlike ../make_models.py (graphs hand-written with onnx.helper), everything here is produced by
PyTorch itself (Debian's python3-torch 1.13 + python3-onnx 1.12), so the files show the exact
node patterns torch.onnx.export emits. The tests only read the committed files; nothing downloads.

For every pattern module below it writes five exports:
  <pattern>_op13.onnx           opset 13, eval mode, dynamic batch
  <pattern>_op17.onnx           opset 17, eval mode, dynamic batch
  <pattern>_op17_noparams.onnx  opset 17, eval mode, dynamic batch, export_params=False
                                (the weights become graph inputs, no initializers)
  <pattern>_op17_static.onnx    opset 17, eval mode, no dynamic_axes (batch 4 baked in)
  <pattern>_op17_train.onnx     opset 17, training=TrainingMode.TRAINING, do_constant_folding=False
Dynamic exports name axis 0 of every input and output "batch" (the flat ids input of
embedding_bag_offsets, whose axis 0 is the number of ids, not the batch, uses "num_ids").
Graph inputs are named x (or ids, offsets, x1, x2), the output y. The exports are left exactly as
torch wrote them (no ONNX shape inference is run on them).

For every export with weights (all but _noparams) a directory <stem>/ holds ONNX TensorProto
files (numpy_helper.from_array(arr, name).SerializeToString()), batch size 4:
  input_<k>.pb             seeded input for graph input k (named as the graph input)
  output_0.pb              torch's y with the initial weights (module.eval(), or module.train()
                           for _train; no pattern uses Dropout, so both are deterministic)
  target_0.pb              seeded random MSE target with y's shape
  loss_0.pb                float32 [1]: mse_loss(y, target) (mean over all elements) before the step
  output_after_step_0.pb   y on the same inputs after ONE torch.optim.SGD(lr=0.1) step on that loss,
                           in the same mode as output_0
Each pattern uses torch.manual_seed(<fixed per-pattern seed>) before building the module, so all
five variants of a pattern carry identical initial weights. The export and the reference
computation each run on their own deepcopy of the freshly built module. Note that a
training-mode export traces one forward pass in train mode, so the BatchNorm running_mean /
running_var initializers of the _train exports hold the initial statistics after one momentum
(0.1) update with the export batch (this is what torch.onnx.export writes; train-mode outputs do
not depend on them); the references start from the untouched initial module.
A pattern whose graph contains Loop (or whose export failed) gets no references.
resnet_block randomizes its BatchNorm affine parameters and running statistics (so eval-mode BN is
not ~identity); resnet_block_nobias (an extra pattern, bias-free convs as in torchvision) keeps the
default BatchNorm init, which is what makes the eval export deduplicate initializers into Identity.

models.json lists every export: {"stem", "pattern", "opset", "variant" (dynamic|static|train|
noparams), "inputs" (the data inputs, in graph order), "graph_inputs" (all graph inputs; with
_noparams these include the weights), "has_reference", "node_types" (sorted distinct op types)}.

Regenerate with: /usr/bin/python3 test/data/onnx/torch/make_torch_models.py test/data/onnx/torch
"""
import copy
import json
import os
import shutil
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
BATCH = 4
LR = 0.1


# ---------------------------------------------------------------------------------------------
# Pattern modules
# ---------------------------------------------------------------------------------------------

class SharedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)
        self.fc2.weight = self.fc1.weight  # one tensor object used by both layers

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class ResNetBlock(nn.Module):
    # conv_bias=False with default BatchNorm init is the torchvision layout: the eval export folds
    # each BN into its Conv, the two folded (all-zero) biases are deduplicated, and the second Conv
    # reads its bias through an Identity of the first one's.
    def __init__(self, conv_bias=True):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1, bias=conv_bias)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=conv_bias)
        self.bn2 = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)) + h)
        return self.fc(torch.flatten(self.pool(h), 1))


class SigmoidNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 6)
        self.fc2 = nn.Linear(6, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc2(torch.sigmoid(self.fc1(x))))


class MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim=8, num_heads=2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0,
                                                batch_first=True)

    def forward(self, x):
        return self.layer(x)


class StaticReshape(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 12)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        h = self.fc1(x)
        h = h.view(h.shape[0], 3, 4)
        return self.fc2(h)


class TrainLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 4)
        self.fc2 = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class PadAvgPool(nn.Module):
    def __init__(self, count_include_pad):
        super().__init__()
        self.count_include_pad = count_include_pad
        self.conv = nn.Conv2d(3, 4, 1)
        self.fc = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        h = F.avg_pool2d(self.conv(x), 3, stride=1, padding=1, count_include_pad=self.count_include_pad)
        return self.fc(torch.flatten(h, 1))


class EmbeddingMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.fc = nn.Linear(6, 2)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(dim=1))


class EmbeddingSingle(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.fc = nn.Linear(6, 2)

    def forward(self, ids):
        return self.fc(self.emb(ids))


class PoolCeil(nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)  # 9x9 -> 7x7
        self.pool = pool  # 7x7 -> 4x4 with ceil_mode
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.conv(x)), 1))


class ReLU6Depthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.pw = nn.Conv2d(4, 8, 1)
        self.act = nn.ReLU6()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        h = self.act(self.pw(self.act(self.dw(x))))
        return self.fc(torch.flatten(self.pool(h), 1))


class GroupedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, groups=2)  # 8x8 -> 6x6
        self.fc = nn.Linear(6 * 6 * 6, 2)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


class EmbeddingBagOffsets(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(20, 6, mode="sum")
        self.fc = nn.Linear(6, 2)

    def forward(self, ids, offsets):
        return self.fc(self.bag(ids, offsets))


class DotScores(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower_a = nn.Linear(8, 6)
        self.tower_b = nn.Linear(8, 6)

    def forward(self, x1, x2):
        return (self.tower_a(x1) * self.tower_b(x2)).sum(dim=1, keepdim=True)


class PositionEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(5, 8) * 0.1)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.ln(x + self.pos))


class Unsqueeze(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 6)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).unsqueeze(1))


def randomize_batchnorm(module):
    # Non-trivial affine parameters and running statistics, so eval-mode BatchNorm is not ~identity.
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return module


# ---------------------------------------------------------------------------------------------
# Inputs: each function gets a seeded torch.Generator and returns [(name, tensor)] in call order.
# ---------------------------------------------------------------------------------------------

def feat(*dims):
    return lambda g: [("x", torch.randn(BATCH, *dims, generator=g))]


def ids_input(*dims):
    return lambda g: [("ids", torch.randint(0, 20, (BATCH, *dims), generator=g, dtype=torch.int64))]


def bag_inputs(g):
    # 4 bags of sizes 3, 1, 4, 2 over a flat ids tensor.
    ids = torch.randint(0, 20, (10,), generator=g, dtype=torch.int64)
    offsets = torch.tensor([0, 3, 4, 8], dtype=torch.int64)
    return [("ids", ids), ("offsets", offsets)]


def two_towers(g):
    # Scaled by 0.5: with unit inputs the bilinear score makes the lr=0.1 step overshoot.
    return [("x1", 0.5 * torch.randn(BATCH, 8, generator=g)), ("x2", 0.5 * torch.randn(BATCH, 8, generator=g))]


# (name, seed, module builder, input maker, {input name: axis-0 name} override)
PATTERNS = [
    ("shared_weight", 101, SharedWeight, feat(8), None),
    ("resnet_block", 102, lambda: randomize_batchnorm(ResNetBlock()), feat(3, 8, 8), None),
    ("resnet_block_nobias", 120, lambda: ResNetBlock(conv_bias=False), feat(3, 8, 8), None),
    ("sigmoid", 103, SigmoidNet, feat(8), None),
    ("mha", 104, MHA, feat(5, 8), None),
    ("encoder_layer", 105, EncoderLayer, feat(5, 8), None),
    ("static_reshape", 106, StaticReshape, feat(12), None),
    ("train_linear", 107, TrainLinear, feat(8), None),
    ("pad_avgpool", 108, lambda: PadAvgPool(True), feat(3, 8, 8), None),
    ("pad_avgpool_exclude", 109, lambda: PadAvgPool(False), feat(3, 8, 8), None),
    ("embedding", 110, EmbeddingMean, ids_input(5), None),
    ("embedding_single", 111, EmbeddingSingle, ids_input(), None),
    ("maxpool_ceil", 112, lambda: PoolCeil(nn.MaxPool2d(2, stride=2, ceil_mode=True)), feat(3, 9, 9), None),
    ("avgpool_ceil", 113, lambda: PoolCeil(nn.AvgPool2d(2, 2, ceil_mode=True)), feat(3, 9, 9), None),
    ("relu6_depthwise", 114, ReLU6Depthwise, feat(4, 8, 8), None),
    ("grouped_conv", 115, GroupedConv, feat(4, 8, 8), None),
    ("embedding_bag_offsets", 116, EmbeddingBagOffsets, bag_inputs, {"ids": "num_ids"}),
    ("dot_scores", 117, DotScores, two_towers, None),
    ("position_embedding", 118, PositionEmbedding, feat(5, 8), None),
    ("unsqueeze", 119, Unsqueeze, feat(6), None),
]

# suffix, opset, variant, export keyword arguments
VARIANTS = [
    ("op13", 13, "dynamic", {}),
    ("op17", 17, "dynamic", {}),
    ("op17_noparams", 17, "noparams", {"export_params": False}),
    ("op17_static", 17, "static", {}),
    ("op17_train", 17, "train", {"training": torch.onnx.TrainingMode.TRAINING, "do_constant_folding": False}),
]


def save_tensor(path, arr, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name).SerializeToString())


def write_references(stem, module, inputs, train, graph_input_names, seed):
    module.train(train)
    d = os.path.join(OUT, stem)
    os.makedirs(d, exist_ok=True)
    data = dict(inputs)
    for k, name in enumerate(graph_input_names):
        save_tensor(os.path.join(d, f"input_{k}.pb"), data[name].numpy(), name)
    args = [t for _, t in inputs]
    params = list(module.parameters())  # deduplicated: a shared weight appears once
    opt = torch.optim.SGD(params, lr=LR)
    opt.zero_grad()
    y = module(*args)
    g = torch.Generator().manual_seed(seed + 5000)
    target = torch.randn(y.shape, generator=g)
    loss = F.mse_loss(y, target)
    loss.backward()
    opt.step()
    with torch.no_grad():
        y_after = module(*args)
    save_tensor(os.path.join(d, "output_0.pb"), y.detach().numpy(), "y")
    save_tensor(os.path.join(d, "target_0.pb"), target.numpy(), "target")
    save_tensor(os.path.join(d, "loss_0.pb"), loss.detach().numpy().reshape(1).astype(np.float32), "loss")
    save_tensor(os.path.join(d, "output_after_step_0.pb"), y_after.numpy(), "y")


# Shared with ../torch2/make_torch2_models.py: a pattern's module and seeded inputs, and one
# export's path (its old reference directory removed) and dynamic axes.
def prepared(seed, build, make_inputs):
    torch.manual_seed(seed)
    pristine = build()
    inputs = make_inputs(torch.Generator().manual_seed(seed + 1000))
    return pristine, inputs, [n for n, _ in inputs]


def export_target(stem, static, input_names, axis_names):
    ref_dir = os.path.join(OUT, stem)
    if os.path.isdir(ref_dir):
        shutil.rmtree(ref_dir)
    dynamic_axes = None
    if not static:
        dynamic_axes = {n: {0: (axis_names or {}).get(n, "batch")} for n in input_names}
        dynamic_axes["y"] = {0: "batch"}
    return os.path.join(OUT, stem + ".onnx"), dynamic_axes


def report(entries, failures):
    """Writes models.json and says which exports torch could not write."""
    with open(os.path.join(OUT, "models.json"), "w") as f:
        json.dump(entries, f, indent=1)
        f.write("\n")
    for stem, why in failures:
        print(f"export failed: {stem}: {why}")
    print(f"wrote {len(entries)} models to {OUT}")


def main():
    os.makedirs(OUT, exist_ok=True)
    entries = []
    failures = []
    for pattern, seed, build, make_inputs, axis_names in PATTERNS:
        pristine, inputs, input_names = prepared(seed, build, make_inputs)
        for suffix, opset, variant, kwargs in VARIANTS:
            stem = f"{pattern}_{suffix}"
            path, dynamic_axes = export_target(stem, variant == "static", input_names, axis_names)
            exported = copy.deepcopy(pristine)
            exported.train(variant == "train")
            try:
                torch.onnx.export(exported, tuple(t for _, t in inputs), path, opset_version=opset,
                                  input_names=input_names, output_names=["y"], dynamic_axes=dynamic_axes,
                                  **kwargs)
            except Exception as e:  # recorded, the pattern is skipped for this variant
                failures.append((stem, f"{type(e).__name__}: {e}".splitlines()[0]))
                if os.path.exists(path):
                    os.remove(path)
                continue
            model = onnx.load(path)
            node_types = sorted({n.op_type for n in model.graph.node})
            graph_inputs = [vi.name for vi in model.graph.input]
            data_inputs = [n for n in graph_inputs if n in input_names]
            has_reference = variant != "noparams" and "Loop" not in node_types
            if has_reference:
                write_references(stem, copy.deepcopy(pristine), inputs, variant == "train", data_inputs, seed)
            entries.append({"stem": stem, "pattern": pattern, "opset": opset, "variant": variant,
                            "inputs": data_inputs, "graph_inputs": graph_inputs,
                            "has_reference": has_reference, "node_types": node_types})
    report(entries, failures)


if __name__ == "__main__":
    main()
