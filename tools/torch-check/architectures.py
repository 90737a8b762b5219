#!/usr/bin/env python3
"""Whole architectures from PyTorch, through GraphPipe, against PyTorch's own training step.

For each architecture (torchvision CNNs with random weights, and recommendation, MLP and
transformer models written here the way their users write them) and each export variant, this
script
  1. exports the model with torch.onnx.export,
  2. computes in PyTorch the MSE loss of a seeded batch against a seeded target, takes one SGD step
     (lr 0.01) and computes the loss again,
  3. imports the export with `graphpipe-plan import`, plans it with `graphpipe-plan search`,
     trains the same two iterations with
     `graphpipe-executor reference --data` on the same batch, and
  4. prints one table row: import ok or the refusal, the losses of each side, and the worse
     relative difference.
A row passes when every loss is within 1e-4 of PyTorch's (relative), or -- for networks whose
fp32 step is ill-conditioned (batch norm over a few values on tiny feature maps) -- when ours is
at least as close to PyTorch's float64 result as PyTorch's own fp32 is (within twice its error).
Dropout is set to 0 (GraphPipe passes Dropout through) so the two sides compute the same function.

Variants (the exporters and options a user meets):
  dynamo        torch.onnx.export(dynamo=True), eval mode: the default of torch >= 2.9
  dynamo_train  dynamo=True, optimize=False, module in train mode: batch norm kept, trains
  legacy17      dynamo=False, opset 17, TrainingMode.TRAINING, no constant folding, as torch's
                docs advise for training
  legacy13_eval dynamo=False, opset 13, eval mode, constant folding (folds batch norm)
  dynamo_graph, legacy17_graph  dynamo eval and legacy17 with export_params=False (graph only):
                imported and planned, not trained (torch 2.15's dynamo exporter leaves the
                weights out of such a graph altogether: ONNX's checker rejects it, n/a)
Every imported model is also planned (graphpipe-plan search, 8 H100s, mini-batch 64).
Eval-mode variants compare only the first loss against PyTorch's eval-mode forward (a folded
batch norm trains as a different model, and the import says so).

Needs torch (and torchvision) in the Python running it; nothing is downloaded (random weights).
Usage:
  python3 tools/torch-check/architectures.py [--bin build/bin] [--only resnet18,dlrm] [--out DIR]
          [--variants dynamo,legacy17]
Exit status 1 when any row fails (refused, or a loss off by more than 1e-4 relative).
"""
import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modern_models  # noqa: E402  (issue 37's architectures)

BATCH = 4
LR = 0.01
TOLERANCE = 1e-4  # relative, per loss: fp32 sums in another order over a whole network


# --------------------------------------------------------------------------------------------
# Architectures: (name, builder, input maker). Inputs are lists of (name, tensor). 15 models:
# 14 architectures; DLRM also with nn.Embedding + sum(dim=1) in place of nn.EmbeddingBag, and with
# bags of varying length (offsets).
# --------------------------------------------------------------------------------------------

def image(size):
    return lambda g: [("x", torch.randn(BATCH, 3, size, size, generator=g))]


def torchvision_model(name, **kwargs):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, num_classes=10, **kwargs)
    return build


class DLRM(nn.Module):
    # Dense features through a bottom MLP, 4 sparse features as fixed-size bags (EmbeddingBag
    # with ids [batch, bag]), pairwise dot-product interactions, top MLP.
    def __init__(self, tables=4, rows=50, dim=16):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, dim), nn.ReLU())
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        pairs = (tables + 1) * tables // 2
        self.top = nn.Sequential(nn.Linear(dim + pairs, 32), nn.ReLU(), nn.Linear(32, 1))

    def bags(self, ids):
        return [t(i) for t, i in zip(self.tables, ids)]

    def forward(self, dense, ids0, ids1, ids2, ids3):
        x = self.bottom(dense)
        return self.interact(x, self.bags((ids0, ids1, ids2, ids3)))

    def interact(self, x, bags):
        feats = [x] + bags
        scores = []
        for a in range(len(feats)):
            for b in range(a + 1, len(feats)):
                scores.append((feats[a] * feats[b]).sum(dim=1, keepdim=True))
        return self.top(torch.cat([x] + scores, dim=1))


class DLRMEmbeddingSum(DLRM):
    # The same model with each bag summed by nn.Embedding + sum(dim=1) (torch 2.x writes it as
    # Gather + ReduceSum, where nn.EmbeddingBag becomes a Loop over the bags).
    def __init__(self):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(50, 16) for _ in range(4))
        del self.tables

    def bags(self, ids):
        return [e(i).sum(dim=1) for e, i in zip(self.embeddings, ids)]


class DLRMOffsets(DLRM):
    # The same model with bags of varying length: each table takes flat ids and the offset of
    # every sample's bag, as DLRM's own data loaders feed nn.EmbeddingBag (imported with
    # --max-bag: every sample's bag padded to that many ids).
    def forward(self, dense, ids0, off0, ids1, off1, ids2, off2, ids3, off3):
        bags = [t(i, o) for t, i, o in zip(self.tables, (ids0, ids1, ids2, ids3),
                                           (off0, off1, off2, off3))]
        return self.interact(self.bottom(dense), bags)


def dlrm_offsets_inputs(g):
    # Bags of 1 to 4 ids (4 samples: one of each length, in a seeded order per table).
    out = [("dense", torch.randn(BATCH, 13, generator=g))]
    for k in range(4):
        lengths = torch.randperm(BATCH, generator=g) + 1
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
        out.append((f"ids{k}", torch.randint(0, 50, (int(lengths.sum()),), generator=g)))
        out.append((f"off{k}", offsets))
    return out


def dlrm_inputs(g):
    ids = [(f"ids{k}", torch.randint(0, 50, (BATCH, 3), generator=g)) for k in range(4)]
    return [("dense", torch.randn(BATCH, 13, generator=g))] + ids


class TwoTower(nn.Module):
    # User and item towers over embeddings, scored by a dot product and a sigmoid.
    def __init__(self):
        super().__init__()
        self.user_emb = nn.Embedding(100, 16)
        self.item_emb = nn.Embedding(200, 16)
        self.user = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
        self.item = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, user, item):
        u = self.user(self.user_emb(user))
        v = self.item(self.item_emb(item))
        return torch.sigmoid((u * v).sum(dim=1, keepdim=True))


def two_tower_inputs(g):
    return [("user", torch.randint(0, 100, (BATCH,), generator=g)),
            ("item", torch.randint(0, 200, (BATCH,), generator=g))]


class CandleUno(nn.Module):
    # Three feature branches (cell expression, two drug descriptors), each its own MLP, then a
    # shared MLP on their concatenation.
    def __init__(self):
        super().__init__()
        def tower(n):
            return nn.Sequential(nn.Linear(n, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.cell, self.drug1, self.drug2 = tower(100), tower(80), tower(80)
        self.head = nn.Sequential(nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, cell, drug1, drug2):
        return self.head(torch.cat([self.cell(cell), self.drug1(drug1), self.drug2(drug2)], dim=1))


def candle_inputs(g):
    return [(n, torch.randn(BATCH, k, generator=g)) for n, k in (("cell", 100), ("drug1", 80),
                                                                  ("drug2", 80))]


class Bert(nn.Module):
    # Token and learned position embeddings, LayerNorm, an nn.TransformerEncoder (exact GELU),
    # a pooler on the first token, a classifier.
    def __init__(self, vocab=100, seq=8, hidden=32, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(0.02 * torch.randn(1, seq, hidden))
        self.norm = nn.LayerNorm(hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0,
                                           activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.Linear(hidden, hidden)
        self.cls = nn.Linear(hidden, 2)

    def forward(self, ids):
        h = self.encoder(self.norm(self.tok(ids) + self.pos))
        return self.cls(torch.tanh(self.pool(h[:, 0])))


def ids_inputs(g):
    return [("ids", torch.randint(0, 100, (BATCH, 8), generator=g))]


class Encoder(nn.Module):
    # nn.TransformerEncoder over continuous features, as time-series and multimodal models use it.
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


class MultiModal(nn.Module):
    # Two modality branches (a transformer over tokens, an MLP over features) fused by a head:
    # the multi-branch shape graph pipelines are for.
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.text = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.image = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))
        self.head = nn.Linear(64, 3)

    def forward(self, text, image):
        t = self.text(text).mean(dim=1)
        return self.head(torch.cat([t, self.image(image)], dim=1))


def multimodal_inputs(g):
    return [("text", torch.randn(BATCH, 6, 32, generator=g)),
            ("image", torch.randn(BATCH, 64, generator=g))]


class ViT(nn.Module):
    # Patch embedding by a strided conv, a learned class token, position embeddings, encoder.
    def __init__(self, size=32, patch=8, hidden=32):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, patch, stride=patch)
        n = (size // patch) ** 2
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, hidden))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n + 1, hidden))
        layer = nn.TransformerEncoderLayer(hidden, 4, 2 * hidden, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        p = self.patch(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        h = self.encoder(torch.cat([cls, p], dim=1) + self.pos)
        return self.head(h[:, 0])


ARCHITECTURES = [
    ("resnet18", torchvision_model("resnet18"), image(64)),
    ("resnet50", torchvision_model("resnet50"), image(64)),
    ("mobilenet_v2", torchvision_model("mobilenet_v2"), image(64)),
    ("googlenet", torchvision_model("googlenet", aux_logits=False, init_weights=True), image(64)),
    ("inception_v3", torchvision_model("inception_v3", aux_logits=False, init_weights=True),
     image(96)),
    ("densenet121", torchvision_model("densenet121"), image(64)),
    ("squeezenet1_0", torchvision_model("squeezenet1_0"), image(64)),
    ("dlrm", DLRM, dlrm_inputs),
    ("dlrm_embedding_sum", DLRMEmbeddingSum, dlrm_inputs),
    ("dlrm_offsets", DLRMOffsets, dlrm_offsets_inputs),
    ("two_tower", TwoTower, two_tower_inputs),
    ("candle_uno", CandleUno, candle_inputs),
    ("bert", Bert, ids_inputs),
    ("transformer_encoder", Encoder, lambda g: [("x", torch.randn(BATCH, 6, 32, generator=g))]),
    ("multimodal", MultiModal, multimodal_inputs),
    ("vit", ViT, image(32)),
] + modern_models.MODERN

VARIANTS = {
    "dynamo": dict(train=False, kwargs=dict(dynamo=True)),
    "dynamo_train": dict(train=True, kwargs=dict(dynamo=True, optimize=False)),
    "legacy17": dict(train=True, kwargs=dict(dynamo=False, opset_version=17,
                                             training=torch.onnx.TrainingMode.TRAINING,
                                             do_constant_folding=False)),
    "legacy13_eval": dict(train=False, kwargs=dict(dynamo=False, opset_version=13)),
    # Graph only (export_params=False): the weights are graph inputs without values. Imported
    # and planned, not trained (there is nothing to compare a step with).
    "dynamo_graph": dict(train=False, graph_only=True, kwargs=dict(dynamo=True,
                                                                  export_params=False)),
    "legacy17_graph": dict(train=True, graph_only=True,
                           kwargs=dict(dynamo=False, opset_version=17, export_params=False,
                                       training=torch.onnx.TrainingMode.TRAINING,
                                       do_constant_folding=False)),
}


def no_dropout(module):
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(m, nn.MultiheadAttention):
            m.dropout = 0.0
    return module


def torch_losses(model, inputs, target, train):
    """The MSE loss, one SGD step, the loss again (train); or the eval forward's loss."""
    model = copy.deepcopy(model)
    model.train(train)
    args = [t for _, t in inputs]
    if not train:
        with torch.no_grad():
            return [nn.functional.mse_loss(model(*args), target).item()]
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(*args), target)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return losses


@contextlib.contextmanager
def quiet():
    """The exporters' progress lines and graph dumps (some from C++) go to /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [null]:
            os.close(fd)


def export(model, inputs, path, variant):
    spec = VARIANTS[variant]
    model = copy.deepcopy(model)
    model.train(spec["train"])
    names = [n for n, _ in inputs]
    kwargs = dict(spec["kwargs"])
    # Flat ids of bags of varying length (ids<k> with an off<k> input) have their own length.
    axis = {n: f"num_{n}" if n.startswith("ids") and any(m.startswith("off") for m in names)
            else "batch" for n in names}
    if kwargs.get("dynamo"):
        dims = {a: torch.export.Dim(a, min=2) for a in set(axis.values())}
        kwargs["dynamic_shapes"] = tuple({0: dims[axis[n]]} for n in names)
    else:
        kwargs["dynamic_axes"] = {n: {0: axis.get(n, "batch")} for n in names + ["y"]}
    with quiet():
        torch.onnx.export(model, tuple(t for _, t in inputs), path, input_names=names,
                          output_names=["y"], **kwargs)


def exact_losses(model, inputs, target, train):
    """torch_losses in float64: the reference both fp32 computations are judged against."""
    as64 = [(n, t.double() if t.is_floating_point() else t) for n, t in inputs]
    return torch_losses(copy.deepcopy(model).double(), as64, target.double(), train)


def plan(bin_dir, model, work):
    """graphpipe-plan search on 8 H100s (analytic costs): "S stages on D devices" or the error."""
    report = os.path.join(work, "report.json")
    run = subprocess.run([os.path.join(bin_dir, "graphpipe-plan"), "search", "--model", model,
                          "--cluster", "dgx-h100", "--devices", "8", "--batch", "64", "--out",
                          os.path.join(work, "plan.pb"), "--report", report, "--log-level",
                          "warn"], capture_output=True, text=True)
    if run.returncode != 0:
        return None, ("search: " + " / ".join(run.stderr.strip().splitlines()[:3]))[:300]
    with open(report) as f:
        r = json.load(f)
    return f"{r['num_stages']} stages on {r['devices_used']} devices", ""


def ours(bin_dir, path, inputs, target, train, work, graph_only=False):
    """Import, plan, and train two iterations (or one forward) on the same batch: (losses or
    None, the error, the plan's summary); a graph-only export is imported and planned only."""
    model = os.path.join(work, "model.pbtxt")
    # Bags of varying length: every sample holds up to 4 ids (dlrm_offsets' longest bag).
    ragged = ["--max-bag", "4"] if any(n.startswith("off") for n, _ in inputs) else []
    imported = subprocess.run([os.path.join(bin_dir, "graphpipe-plan"), "import", path, "--out",
                               model] + ragged, capture_output=True, text=True)
    if imported.returncode != 0:
        lines = [l for l in imported.stderr.splitlines() if l.strip()]
        return None, " / ".join(lines[:3])[:300], ""
    planned, why = plan(bin_dir, model, work)
    if planned is None:
        return None, why, ""
    if graph_only:
        return [], "", planned
    if not train and "exported in eval mode" in imported.stderr:
        return None, "eval", planned
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    for name, t in inputs:
        np.save(os.path.join(data, name + ".npy"), t.numpy())
    np.save(os.path.join(data, "y.target.npy"), target.numpy())
    metrics = os.path.join(work, "metrics.json")
    run = subprocess.run([os.path.join(bin_dir, "graphpipe-executor"), "reference", "--model", model,
                          "--batch", str(BATCH), "--iterations", "2" if train else "1",
                          "--optimizer", "sgd", "--momentum", "0", "--lr", str(LR), "--data", data,
                          "--no-shuffle", "--metrics-out", metrics, "--log-level", "warn"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return None, ("reference: " + run.stderr.strip().splitlines()[-1])[:300], planned
    with open(metrics) as f:
        return [it["loss"] for it in json.load(f)["iterations"]], "", planned


def main():
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                  "bin"))
    ap.add_argument("--only", default="")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="", help="keep the exports here (default: a temp dir)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    out = args.out or tempfile.mkdtemp(prefix="gp_torch_check_")
    print(f"torch {torch.__version__}; batch {BATCH}, SGD lr {LR}, tolerance {TOLERANCE} relative")
    print(f"{'architecture':<20} {'variant':<14} {'result':<8} {'torch losses':<24} "
          f"{'ours':<24} {'rel. diff':<9} note")
    failed = 0
    for name, build, make_inputs in ARCHITECTURES:
        if only and name not in only:
            continue
        torch.manual_seed(0)
        model = no_dropout(build())
        inputs = make_inputs(torch.Generator().manual_seed(1))
        with torch.no_grad():
            y = model.eval()(*[t for _, t in inputs])
        target = torch.randn(y.shape, generator=torch.Generator().manual_seed(2))
        for variant in args.variants.split(","):
            work = os.path.join(out, f"{name}_{variant}")
            os.makedirs(work, exist_ok=True)
            path = os.path.join(work, f"{name}.onnx")
            train = VARIANTS[variant]["train"]
            started = time.time()
            try:
                export(model, inputs, path, variant)
            except Exception as e:  # the exporter's own failure: not ours to judge
                print(f"{name:<20} {variant:<14} {'n/a':<8} {'':<24} {'':<24} {'':<9} "
                      f"torch could not export: {str(e).splitlines()[0][:120]}")
                continue
            try:  # an export ONNX itself rejects is not ours to judge either
                onnx.checker.check_model(path)
            except Exception as e:
                print(f"{name:<20} {variant:<14} {'n/a':<8} {'':<24} {'':<24} {'':<9} "
                      f"torch wrote an invalid model: {str(e).splitlines()[0][:120]}")
                continue
            graph_only = VARIANTS[variant].get("graph_only", False)
            want = [] if graph_only else torch_losses(model, inputs, target, train)
            got, why, planned = ours(args.bin, path, inputs, target, train, work, graph_only)
            fmt = lambda v: " ".join(f"{x:.6g}" for x in v)
            if graph_only and got is not None:
                print(f"{name:<20} {variant:<14} {'ok':<8} {'':<24} {'':<24} {'':<9} "
                      f"graph only: imported, planned ({planned}); "
                      f"{time.time() - started:.0f} s")
                sys.stdout.flush()
                continue
            if why == "eval":
                print(f"{name:<20} {variant:<14} {'n/a':<8} {fmt(want):<24} {'':<24} {'':<9} "
                      "eval-mode batch norm: GraphPipe trains it with batch statistics (the "
                      "import warns)")
                continue
            if got is None:
                failed += 1
                print(f"{name:<20} {variant:<14} {'REFUSED':<8} {fmt(want):<24} {'':<24} {'':<9} {why}")
                continue
            rel = lambda a, b: abs(a - b) / max(abs(b), 1e-12)
            diff = max(rel(a, b) for a, b in zip(got, want))
            ok = diff <= TOLERANCE and len(got) == len(want)
            note = ""
            if not ok and len(got) == len(want):
                exact = exact_losses(model, inputs, target, train)
                theirs = max(rel(a, b) for a, b in zip(want, exact))
                mine = max(rel(a, b) for a, b in zip(got, exact))
                ok = mine <= 2 * theirs + TOLERANCE
                note = f"vs float64: ours {mine:.1e}, PyTorch fp32 {theirs:.1e}; "
            failed += 0 if ok else 1
            print(f"{name:<20} {variant:<14} {'ok' if ok else 'DIFFERS':<8} {fmt(want):<24} "
                  f"{fmt(got):<24} {diff:<9.2e} {note}planned ({planned}); "
                  f"{time.time() - started:.0f} s")
            sys.stdout.flush()
    print(f"exports kept in {out}" if args.out else "")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
