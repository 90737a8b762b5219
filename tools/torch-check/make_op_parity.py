#!/usr/bin/env python3
"""Writes test/data/op_parity/cases.txt: PyTorch's forward output and gradients for the op cases
of test/support/op_cases.h that map onto one PyTorch function (the general element-wise ops,
reductions, conv_transpose2d, resize, gather, layer_norm with and without its affine), on inputs drawn here. The C++ test
(test/executor/torch_parity_test.cc) runs each case's CPU kernel on the same values and compares.

Every case has batch 2; inputs are in the op's input order, parameters in its ParamSpec order;
`gout` is the output gradient both sides back-propagate. Needs torch (not the tests):
  python3 tools/torch-check/make_op_parity.py test/data/op_parity/cases.txt
"""
import sys

import torch
import torch.nn.functional as F

BATCH = 2
torch.manual_seed(3)


def per_sample(t, rank):
    """t [B, *s] viewed with 1s after the batch up to per-sample rank `rank` (NumPy's alignment
    of per-sample shapes on their trailing axes)."""
    return t.view(t.shape[0], *([1] * (rank - (t.dim() - 1))), *t.shape[1:])


def rand(*shape, lo=-1.0, hi=1.0):
    return (lo + (hi - lo) * torch.rand(BATCH, *shape, dtype=torch.float64)).float()


def distinct(*shapes):
    n = sum(BATCH * torch.Size(s).numel() for s in shapes)
    v = (torch.randperm(n).double() - n / 2) * 0.01 + 0.005
    out, k = [], 0
    for s in shapes:
        m = BATCH * torch.Size(s).numel()
        out.append(v[k:k + m].float().view(BATCH, *s))
        k += m
    return out


def binary(fn, sa, sb, inputs=None):
    rank = max(len(sa), len(sb))
    a, b = inputs or (rand(*sa), rand(*sb))
    f = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
         "pow": torch.pow, "max": torch.maximum, "min": torch.minimum}[fn]
    return [a, b], [], lambda xs, ps: f(per_sample(xs[0], rank), per_sample(xs[1], rank))


def unary(fn):
    positive = fn in ("log", "sqrt", "rsqrt", "reciprocal")
    x = rand(2, 3, lo=0.5, hi=2.0) if positive else rand(2, 3, lo=-3, hi=3)
    if fn == "abs":
        x = torch.where(x.abs() < 0.2, x + 0.5, x)
    f = {"neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
         "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "abs": torch.abs,
         "erf": torch.erf, "sin": torch.sin, "cos": torch.cos, "softplus": F.softplus}[fn]
    return [x], [], lambda xs, ps: f(xs[0])


def reduce(shape, dims, mode, keepdim, inputs=None):
    x = inputs[0] if inputs else rand(*shape)
    dims = [d + 1 if d >= 0 else d for d in dims]  # past the batch axis

    def f(xs, ps):
        t = xs[0]
        if mode == "sum":
            return t.sum(dim=dims, keepdim=keepdim)
        if mode == "mean":
            return t.mean(dim=dims, keepdim=keepdim)
        if mode == "max":
            return t.amax(dim=dims, keepdim=keepdim)
        return torch.linalg.vector_norm(t, dim=dims, keepdim=keepdim)
    return [x], [], f


def conv_t(cin, h, w, out, k, s, p, op, bias):
    x = rand(cin, h, w)
    params = [torch.rand(cin, out, *k) - 0.5] + ([torch.rand(out) - 0.5] if bias else [])
    return [x], params, lambda xs, ps: F.conv_transpose2d(
        xs[0], ps[0], ps[1] if bias else None, stride=s, padding=p, output_padding=op)


def resize(c, h, w, size, mode, align):
    x = rand(c, h, w)
    kw = {"align_corners": align} if mode == "bilinear" else {}
    return [x], [], lambda xs, ps: F.interpolate(xs[0], size=size, mode=mode, **kw)


def gather(shape, axis, indices):
    x = rand(*shape)
    dim = axis + 1 if axis >= 0 else axis  # past the batch axis
    return [x], [], lambda xs, ps: torch.index_select(xs[0], dim, torch.tensor(indices))


def layer_norm(shape, scale, shift):
    d = shape[-1]
    params = ([rand(d)[0] + 1.5] if scale else []) + ([rand(d)[0]] if shift else [])

    def f(xs, ps):
        gamma = ps[0] if scale else None
        beta = ps[-1] if shift else None
        return F.layer_norm(xs[0], (d,), gamma, beta)
    return [rand(*shape, lo=-2, hi=3)], params, f


def cases():
    for fn in ("neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "erf", "sin", "cos",
               "softplus"):
        yield "unary " + fn, unary(fn)
    yield "binary add of [2, 1, 3] and [4, 1] (both broadcast)", binary("add", [2, 1, 3], [4, 1])
    yield "binary sub of [3] from [2, 3]", binary("sub", [2, 3], [3])
    yield "binary mul of [2, 3, 1] and [2, 1, 4]", binary("mul", [2, 3, 1], [2, 1, 4])
    yield "binary div of [2, 3] by [2, 1]", binary(
        "div", [2, 3], [2, 1], (rand(2, 3, lo=0.5, hi=2), rand(2, 1, lo=0.5, hi=2)))
    yield "binary pow of [2, 3] to [3]", binary(
        "pow", [2, 3], [3], (rand(2, 3, lo=0.5, hi=2), rand(3, lo=0.5, hi=2)))
    for fn in ("max", "min"):
        yield f"binary {fn} of [2, 3] and [1]", binary(fn, [2, 3], [1], distinct([2, 3], [1]))
    m = (torch.arange(BATCH * 6) % 3 != 1).float().view(BATCH, 2, 3)
    yield "where of a mask [2, 3], a [3] and b [2, 1]", (
        [m, rand(3), rand(2, 1)], [],
        lambda xs, ps: torch.where(xs[0] != 0, per_sample(xs[1], 2), per_sample(xs[2], 2)))
    yield "reduce sum over axes 0 and 2", reduce([2, 3, 4], [0, 2], "sum", True)
    yield "reduce mean over the last two axes, dropped", reduce([2, 3, 4], [-1, -2], "mean", False)
    yield "reduce max over axis 1", reduce([2, 3, 4], [1], "max", False, distinct([2, 3, 4]))
    yield "reduce l2 over the last axis", reduce([3, 4], [-1], "l2", True)
    yield "conv_transpose2d 2x2 stride 2", conv_t(2, 2, 3, 3, (2, 2), (2, 2), (0, 0), (0, 0), True)
    yield ("conv_transpose2d 3x3, stride 2, padding 1, output_padding 1, no bias",
           conv_t(3, 2, 3, 2, (3, 3), (2, 2), (1, 1), (1, 1), False))
    yield ("conv_transpose2d 3x2, stride [1, 2], padding [1, 0]",
           conv_t(2, 3, 3, 2, (3, 2), (1, 2), (1, 0), (0, 0), True))
    yield "resize nearest 2x3 to 4x7", resize(2, 2, 3, (4, 7), "nearest", False)
    yield "resize bilinear 3x3 to 6x5", resize(2, 3, 3, (6, 5), "bilinear", False)
    yield "resize bilinear, align_corners, 3x2 to 5x4", resize(1, 3, 2, (5, 4), "bilinear", True)
    yield "gather of a middle axis with repeats", gather([2, 5, 3], 1, [4, 0, 4, 2])
    yield "gather of the last axis (a lower triangle)", gather([3, 9], -1, [3, 6, 7])
    yield "layer_norm", layer_norm([2, 5], True, True)
    yield "layer_norm without shift", layer_norm([3, 9], True, False)
    yield "layer_norm without scale or shift", layer_norm([2, 5], False, False)
    yield "layer_norm without scale", layer_norm([2, 6], False, True)


def line(key, t):
    return key + " " + str(t.numel()) + " " + " ".join(f"{v:.9g}" for v in t.flatten().tolist())


def main():
    out = []
    for name, (inputs, params, f) in cases():
        xs = [t.clone().requires_grad_(True) for t in inputs]
        ps = [t.clone().requires_grad_(True) for t in params]
        y = f(xs, ps)
        gout = torch.rand(y.shape) - 0.5
        y.backward(gout)
        out.append("case " + name)
        out += [line(f"in{k}", t) for k, t in enumerate(inputs)]
        out += [line(f"param{k}", t) for k, t in enumerate(params)]
        out.append(line("gout", gout))
        out.append(line("out", y.detach()))
        # An input torch does not differentiate (a mask) has a zero gradient.
        out += [line(f"gin{k}", t.grad if t.grad is not None else torch.zeros_like(t))
                for k, t in enumerate(xs)]
        out += [line(f"gparam{k}", t.grad) for k, t in enumerate(ps)]
        out.append("end")
    with open(sys.argv[1], "w") as fh:
        fh.write(f"# written by tools/torch-check/make_op_parity.py with torch {torch.__version__}\n")
        fh.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
