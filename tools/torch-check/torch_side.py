"""PyTorch's half of architectures.py: the export variants, PyTorch's own SGD steps (the
reference GraphPipe is judged against), and onnxruntime on an exported file."""
import collections
import contextlib
import copy
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn

LR = 0.01
STEPS = 3  # SGD steps; losses are taken before each step and after the last

# The exporters and options a user meets. "train": the module's mode when exported (and when
# PyTorch steps it); "graph_only": exported without weights (imported and planned, not trained).
def padding_rows(model, onnx_path):
    """{initializer name: row} of every nn.Embedding with a padding_idx, by the name the export
    gives its table (a legacy export keeps state_dict names, one of several for a tied table)."""
    names = {t.name for t in onnx.load(onnx_path, load_external_data=False).graph.initializer}
    state = model.state_dict(keep_vars=True)
    rows = {}
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
            for key, value in state.items():
                if value is m.weight and key in names:
                    rows[key] = m.padding_idx % m.num_embeddings
    return rows


def buffer_initializers(model, onnx_path):
    """The float buffers (register_buffer) of the torch model that a legacy export keeps as
    initializers by their state_dict names: what `import --freeze` takes."""
    names = {t.name for t in onnx.load(onnx_path, load_external_data=False).graph.initializer}
    return sorted(name for name, b in model.named_buffers()
                  if name in names and b.is_floating_point())


VARIANTS = {
    "dynamo": dict(train=False, kwargs=dict(dynamo=True)),
    "dynamo_train": dict(train=True, kwargs=dict(dynamo=True, optimize=False)),
    "legacy17": dict(train=True, kwargs=dict(dynamo=False, opset_version=17,
                                             training=torch.onnx.TrainingMode.TRAINING,
                                             do_constant_folding=False)),
    "legacy13_eval": dict(train=False, kwargs=dict(dynamo=False, opset_version=13)),
    "dynamo_graph": dict(train=False, graph_only=True, kwargs=dict(dynamo=True,
                                                                  export_params=False)),
    "legacy17_graph": dict(train=True, graph_only=True,
                           kwargs=dict(dynamo=False, opset_version=17, export_params=False,
                                       training=torch.onnx.TrainingMode.TRAINING,
                                       do_constant_folding=False)),
}


def no_dropout(module):
    """Dropout and stochastic depth off: GraphPipe passes Dropout through and refuses random
    draws, so both sides compute the same function."""
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(m, nn.MultiheadAttention):
            m.dropout = 0.0
        # Stochastic depth (torchvision's StochasticDepth; timm's DropPath and Hugging Face's
        # SegformerDropPath, BeitDropPath, ...) draws at random.
        if type(m).__name__ == "StochasticDepth":
            m.p = 0.0
        if type(m).__name__.endswith("DropPath") and hasattr(m, "drop_prob"):
            m.drop_prob = 0.0
    return module


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


Steps = collections.namedtuple("Steps", "losses output_before output_after")


def train(model, inputs, target, train_mode, dtype=torch.float32, frozen=()):
    """PyTorch's STEPS SGD steps (lr LR) on the MSE loss of one batch, the module in the mode it
    was exported in, the parameters named in frozen kept constant: Steps(the STEPS + 1 losses,
    the output before the first step and after the last as numpy)."""
    model = copy.deepcopy(model).to(dtype)
    model.train(train_mode)
    for name, p in model.named_parameters():
        p.requires_grad_(name not in frozen)
    args = [t.to(dtype) if t.is_floating_point() else t for _, t in inputs]
    target = target.to(dtype)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    losses, outputs = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        y = model(*args)
        outputs.append(y.detach().numpy())
        loss = nn.functional.mse_loss(y, target)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    with torch.no_grad():
        y = model(*args)
        losses.append(nn.functional.mse_loss(y, target).item())
    return Steps(losses, outputs[0], y.numpy())


def has_batch_norm(model):
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def folded_parameters(model, path, trained):
    """The module's parameters that the exported file lost: neither an initializer of the file
    nor one GraphPipe trains (trained: their names, including merged copies it told apart) has
    the name, and no trained initializer that is not another parameter's holds its values in
    some order (an exporter may transpose or rename a weight). Such a parameter was folded into a
    constant (dynamo's optimiser writes exp(logit_scale) as one) or dropped (an all-zero bias):
    the file cannot train it as PyTorch does. A parameter the file holds by name but GraphPipe
    does not train is not lost: that would be GraphPipe's mistake."""
    initializers = onnx.load(path).graph.initializer
    params = dict(model.named_parameters())  # tied parameters come once
    renamed = {t.name: np.sort(onnx.numpy_helper.to_array(t), axis=None) for t in initializers
               if t.name in trained and t.name not in params}
    held = {t.name for t in initializers} | set(trained)
    lost = []
    for name, p in params.items():
        if name in held:
            continue
        values = np.sort(p.detach().numpy(), axis=None)
        match = next((k for k, v in renamed.items()
                      if v.shape == values.shape and np.array_equal(v, values)), None)
        if match is None:
            lost.append(name)
        else:
            del renamed[match]
    return lost


def onnxruntime_output(path, inputs):
    """The output "y" of an exported file on the batch, by onnxruntime (CPU)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initializers are torch's, not ours
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {n: t.numpy() for n, t in inputs}
    return session.run(["y"], feed)[0]


def output_error(got, want):
    """Max abs error relative to the max abs value of the expected output."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-12))
