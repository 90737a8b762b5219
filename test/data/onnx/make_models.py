#!/usr/bin/python3
"""Writes the small ONNX models the importer tests read (run with Debian's python3-onnx 1.12).

PyTorch is not installable on the build machines (no PyPI access), so the graphs are written
with onnx.helper in the exact node patterns torch.onnx.export (opset 17) produces for these
layers: nn.Linear -> Gemm(transB=1) on 2-D inputs and MatMul + Add otherwise, exact GELU -> Div
by sqrt(2), Erf, Add 1, Mul x, Mul 0.5, nn.LayerNorm -> LayerNormalization, nn.EmbeddingBag ->
Gather + ReduceSum/ReduceMean over the bag, export_params=False -> weights as graph inputs,
F.layer_norm before opset 17 -> ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, the tanh GELU
of HuggingFace's NewGELU, x.view(B, ...) with a dynamic batch -> Shape/Gather/Unsqueeze/Concat ->
Reshape, nn.Conv2d -> Conv, nn.BatchNorm2d in training mode -> BatchNormalization(training_mode=1).
For the models checked numerically, a small numpy interpreter (run_model) computes the outputs
for a seeded input; they are written in ONNX's test-data layout (NAME/test_data_set_0/).
Regenerate with: /usr/bin/python3 test/data/onnx/make_models.py test/data/onnx
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
rng = np.random.default_rng(0)


def weight(name, *shape, fan_in=None):
    # Uniform in +-1/sqrt(fan_in), as PyTorch initialises nn.Linear. fan_in defaults to the last
    # dimension (an [out, in] Gemm weight); MatMul weights are [in, out] and pass theirs.
    bound = 1.0 / np.sqrt(fan_in or shape[-1])
    return numpy_helper.from_array(rng.uniform(-bound, bound, shape).astype(np.float32), name)


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def batch_input(name, *dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, ["batch", *dims])


def save(graph, name, feeds=None):
    model = helper.make_model(graph, producer_name="graphpipe-test", opset_imports=[helper.make_opsetid("", 17)])
    model = shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    onnx.save(model, f"{OUT}/{name}.onnx")
    if feeds is not None:  # expected outputs for a fixed input, in ONNX's test-data layout
        outputs = run_model(model, feeds)
        d = f"{OUT}/{name}/test_data_set_0"
        os.makedirs(d, exist_ok=True)
        for k, vi in enumerate(model.graph.input):
            if vi.name in feeds:
                onnx.save_tensor(numpy_helper.from_array(feeds[vi.name], vi.name), f"{d}/input_{k}.pb")
        for k, vi in enumerate(model.graph.output):
            onnx.save_tensor(numpy_helper.from_array(outputs[vi.name], vi.name), f"{d}/output_{k}.pb")


def pool_windows(x, kernel, strides, pads, fill):
    # [N, C, H, W] -> [N, C, Ho, Wo, kh, kw] windows of the padded input.
    (kh, kw), (sh, sw), (ph, pw) = kernel, strides, pads[:2]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    ho = (xp.shape[2] - kh) // sh + 1
    wo = (xp.shape[3] - kw) // sw + 1
    out = np.empty(x.shape[:2] + (ho, wo, kh, kw), x.dtype)
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
    return out


def run_node(n, v):
    a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
    i = [v[name] if name else None for name in n.input]
    t = n.op_type
    if t == "MatMul": return [np.matmul(i[0], i[1])]
    if t in ("Add", "Sub", "Mul", "Div", "Pow"):
        return [{"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                 "Pow": np.power}[t](i[0], i[1]).astype(i[0].dtype)]
    if t in ("Sqrt", "Tanh", "Relu", "Erf", "Identity"):
        f = {"Sqrt": np.sqrt, "Tanh": np.tanh, "Relu": lambda x: np.maximum(x, 0), "Identity": lambda x: x,
             "Erf": np.vectorize(math.erf)}[t]
        return [f(i[0]).astype(i[0].dtype)]
    if t == "ReduceMean": return [i[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))]
    if t == "Softmax":
        e = np.exp(i[0] - i[0].max(axis=a.get("axis", -1), keepdims=True))
        return [e / e.sum(axis=a.get("axis", -1), keepdims=True)]
    if t == "LayerNormalization":
        m = i[0].mean(axis=-1, keepdims=True)
        var = ((i[0] - m) ** 2).mean(axis=-1, keepdims=True)
        return [(i[0] - m) / np.sqrt(var + a.get("epsilon", 1e-5)) * i[1] + i[2]]
    if t == "Gemm": return [i[0] @ (i[1].T if a.get("transB", 0) else i[1]) + i[2]]
    if t == "Transpose": return [np.transpose(i[0], a["perm"])]
    if t == "Shape": return [np.array(i[0].shape, np.int64)]
    if t == "Gather": return [np.take(i[0], i[1], axis=a.get("axis", 0))]
    if t == "Unsqueeze": return [np.expand_dims(i[0], tuple(i[1]))]
    if t == "Concat": return [np.concatenate(i, axis=a["axis"])]
    if t == "Reshape":
        shape = [i[0].shape[k] if d == 0 else d for k, d in enumerate(i[1])]
        return [i[0].reshape(shape)]
    if t == "Split": return np.split(i[0], np.cumsum(i[1])[:-1], axis=a.get("axis", 0))
    if t == "Flatten": return [i[0].reshape(i[0].shape[0], -1)]
    if t == "Conv":
        w = i[1]
        cols = pool_windows(i[0], w.shape[2:], a.get("strides", [1, 1]), a.get("pads", [0] * 4), 0)
        y = np.einsum("nchwij,ocij->nohw", cols, w)
        return [y + i[2].reshape(1, -1, 1, 1) if len(i) > 2 else y]
    if t == "MaxPool":
        return [pool_windows(i[0], a["kernel_shape"], a["strides"], a.get("pads", [0] * 4), -np.inf).max(axis=(4, 5))]
    if t == "AveragePool":
        win = pool_windows(i[0], a["kernel_shape"], a["strides"], a["pads"], np.nan)
        return [np.nanmean(win, axis=(4, 5)) if not a.get("count_include_pad", 0)
                else np.nan_to_num(win).mean(axis=(4, 5))]
    if t == "GlobalAveragePool": return [i[0].mean(axis=(2, 3), keepdims=True)]
    if t == "BatchNormalization":  # training mode: batch statistics, biased variance
        m = i[0].mean(axis=(0, 2, 3), keepdims=True)
        var = i[0].var(axis=(0, 2, 3), keepdims=True)
        sh = (1, -1, 1, 1)
        return [(i[0] - m) / np.sqrt(var + a.get("epsilon", 1e-5)) * i[1].reshape(sh) + i[2].reshape(sh)]
    raise NotImplementedError(t)


def run_model(model, feeds):
    v = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    v.update(feeds)
    for n in model.graph.node:
        if n.op_type == "Constant":
            v[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
            continue
        for name, value in zip(n.output, run_node(n, v)):
            v[name] = value.astype(np.int64 if value.dtype == np.int64 else np.float32)
    return v


def two_tower(export_params=True):
    nodes, inits = [], []
    for tower, width in (("user", 16), ("item", 24)):
        inits += [weight(f"{tower}.fc1.weight", 32, width), weight(f"{tower}.fc1.bias", 32),
                  weight(f"{tower}.fc2.weight", 8, 32), weight(f"{tower}.fc2.bias", 8)]
        nodes += [
            helper.make_node("Gemm", [tower, f"{tower}.fc1.weight", f"{tower}.fc1.bias"], [f"{tower}.h"],
                             name=f"{tower}.fc1", transB=1),
            helper.make_node("Relu", [f"{tower}.h"], [f"{tower}.a"], name=f"{tower}.relu"),
            helper.make_node("Gemm", [f"{tower}.a", f"{tower}.fc2.weight", f"{tower}.fc2.bias"], [f"{tower}.emb"],
                             name=f"{tower}.fc2", transB=1),
        ]
    inits += [weight("head.weight", 1, 16), weight("head.bias", 1)]
    nodes += [
        helper.make_node("Concat", ["user.emb", "item.emb"], ["both"], name="concat", axis=1),
        helper.make_node("Gemm", ["both", "head.weight", "head.bias"], ["score"], name="head", transB=1),
    ]
    inputs = [batch_input("user", 16), batch_input("item", 24)]
    if not export_params:  # weights become graph inputs without initializers
        inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits]
        inits = []
    graph = helper.make_graph(nodes, "two_tower", inputs, [batch_input("score", 1)], inits)
    save(graph, "two_tower" if export_params else "two_tower_no_params")


def mlp_gelu_ln():
    inits = [weight("fc1.weight", 16, 32, fan_in=16), weight("fc1.bias", 32), weight("ln.weight", 32),
             weight("ln.bias", 32), weight("fc2.weight", 32, 4, fan_in=32),
             numpy_helper.from_array(np.array(1.4142135381698608, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h"], name="fc1.bias_add"),
        helper.make_node("Div", ["h", "sqrt2"], ["g0"], name="act"),
        helper.make_node("Erf", ["g0"], ["g1"], name="act.erf"),
        helper.make_node("Add", ["g1", "one"], ["g2"], name="act.add"),
        helper.make_node("Mul", ["h", "g2"], ["g3"], name="act.mul"),
        helper.make_node("Mul", ["g3", "half"], ["g"], name="act.half"),
        helper.make_node("LayerNormalization", ["g", "ln.weight", "ln.bias"], ["n"], name="ln", axis=-1),
        helper.make_node("MatMul", ["n", "fc2.weight"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "mlp_gelu_ln", [batch_input("x", 16)], [batch_input("probs", 4)], inits)
    save(graph, "mlp_gelu_ln")


def dlrm_like():
    inits = [weight("emb0.weight", 100, 8), weight("emb1.weight", 50, 8), weight("bot.weight", 8, 8),
             weight("bot.bias", 8), weight("top.weight", 1, 16), weight("top.bias", 1),
             const("bag_axes", [1]), const("s_start", [8]), const("s_end", [9223372036854775807]),
             const("s_axes", [1])]
    nodes = [
        helper.make_node("Gemm", ["dense", "bot.weight", "bot.bias"], ["d0"], name="bot", transB=1),
        helper.make_node("Relu", ["d0"], ["d"], name="bot.relu"),
        helper.make_node("Gather", ["emb0.weight", "ids0"], ["e0rows"], name="emb0", axis=0),
        helper.make_node("ReduceSum", ["e0rows", "bag_axes"], ["e0"], name="emb0.sum", keepdims=0),
        helper.make_node("Gather", ["emb1.weight", "ids1"], ["e1rows"], name="emb1", axis=0),
        helper.make_node("ReduceMean", ["e1rows"], ["e1"], name="emb1.mean", axes=[1], keepdims=0),
        helper.make_node("Concat", ["d", "e0", "e1"], ["z"], name="interact", axis=1),
        helper.make_node("Slice", ["z", "s_start", "s_end", "s_axes"], ["zs"], name="sparse_part"),
        helper.make_node("Gemm", ["zs", "top.weight", "top.bias"], ["ctr"], name="top", transB=1),
    ]
    inputs = [batch_input("dense", 8), batch_input("ids0", 5, elem=TensorProto.INT64),
              batch_input("ids1", 5, elem=TensorProto.INT64)]
    graph = helper.make_graph(nodes, "dlrm_like", inputs, [batch_input("ctr", 1)], inits)
    save(graph, "dlrm_like")


def attention_block():
    inits = [weight(f"{p}.weight", 16, 16, fan_in=16) for p in ("q", "k", "v")]
    nodes = [helper.make_node("MatMul", ["x", f"{p}.weight"], [p], name=f"attn.{p}") for p in ("q", "k", "v")]
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], name="attn.kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="attn.scores"),
        helper.make_node("Softmax", ["scores"], ["p"], name="attn.softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="attn.context"),
    ]
    graph = helper.make_graph(nodes, "attention_block", [batch_input("x", 4, 16)], [batch_input("y", 4, 16)], inits)
    save(graph, "attention_block")


def scalar_inputs():
    # Two per-sample scalars ([batch] inputs) added: data, not a bias.
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="sum")]
    graph = helper.make_graph(nodes, "scalar_inputs", [batch_input("a"), batch_input("b")],
                              [batch_input("s")])
    save(graph, "scalar_inputs")


def scalar(name, value):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def transformer_block():
    # Pre-LN block, hidden 16, 2 heads of 8, sequence 8, FFN 32: decomposed layer norm, fused QKV
    # split in three, a dynamic-batch view, scaled dot-product attention, LayerNormalization,
    # tanh GELU (NewGELU), residuals.
    S, H, NH, D, F = 8, 16, 2, 8, 32
    inits = [weight("ln1.weight", H), weight("ln1.bias", H), weight("qkv.weight", H, 3 * H, fan_in=H),
             weight("qkv.bias", 3 * H), weight("proj.weight", H, H, fan_in=H), weight("proj.bias", H),
             weight("ln2.weight", H), weight("ln2.bias", H), weight("fc1.weight", H, F, fan_in=H),
             weight("fc1.bias", F), weight("fc2.weight", F, H, fan_in=F), weight("fc2.bias", H),
             const("axes_last", [-1]), scalar("two", 2.0), scalar("eps", 1e-5), const("qkv_split", [H, H, H]),
             const("zero", 0), const("axes0", [0]), const("seq", [S]), const("heads", [NH]),
             const("head_dim", [D]), const("k_shape", [0, S, NH, D]), const("v_shape", [-1, S, NH, D]),
             scalar("sqrt_d", math.sqrt(D)), const("merged", [0, S, H]), scalar("half", 0.5),
             scalar("three", 3.0), scalar("kappa", 0.044715), scalar("beta", math.sqrt(2 / math.pi)),
             scalar("one", 1.0)]
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["ln1.mean"], name="ln1.mean", axes=[-1]),
        helper.make_node("Sub", ["x", "ln1.mean"], ["ln1.d"], name="ln1.sub"),
        helper.make_node("Pow", ["ln1.d", "two"], ["ln1.sq"], name="ln1.pow"),
        helper.make_node("ReduceMean", ["ln1.sq"], ["ln1.var"], name="ln1.var", axes=[-1]),
        helper.make_node("Add", ["ln1.var", "eps"], ["ln1.ve"], name="ln1.add_eps"),
        helper.make_node("Sqrt", ["ln1.ve"], ["ln1.std"], name="ln1.sqrt"),
        helper.make_node("Div", ["ln1.d", "ln1.std"], ["ln1.n"], name="ln1.div"),
        helper.make_node("Mul", ["ln1.n", "ln1.weight"], ["ln1.g"], name="ln1.scale"),
        helper.make_node("Add", ["ln1.g", "ln1.bias"], ["h"], name="ln1"),
        helper.make_node("MatMul", ["h", "qkv.weight"], ["qkv0"], name="attn.qkv"),
        helper.make_node("Add", ["qkv0", "qkv.bias"], ["qkv"], name="attn.qkv_bias"),
        helper.make_node("Split", ["qkv", "qkv_split"], ["q", "k", "v"], name="attn.split", axis=2),
        helper.make_node("Shape", ["q"], ["q.shape"], name="attn.shape"),
        helper.make_node("Gather", ["q.shape", "zero"], ["batch"], name="attn.batch", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="attn.batch1"),
        helper.make_node("Concat", ["batch1", "seq", "heads", "head_dim"], ["q_shape"], name="attn.q_shape",
                         axis=0),
        helper.make_node("Reshape", ["q", "q_shape"], ["qh"], name="attn.q_view"),
        helper.make_node("Reshape", ["k", "k_shape"], ["kh"], name="attn.k_view"),
        helper.make_node("Reshape", ["v", "v_shape"], ["vh"], name="attn.v_view"),
        helper.make_node("Transpose", ["qh"], ["qt"], name="attn.q_heads", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["kh"], ["kt"], name="attn.k_heads", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["vh"], ["vt"], name="attn.v_heads", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"], name="attn.scores"),
        helper.make_node("Div", ["scores", "sqrt_d"], ["scaled"], name="attn.scale"),
        helper.make_node("Softmax", ["scaled"], ["probs"], name="attn.softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "vt"], ["ctx"], name="attn.context"),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], name="attn.merge_heads", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "merged"], ["ctx_m"], name="attn.merge_view"),
        helper.make_node("MatMul", ["ctx_m", "proj.weight"], ["o0"], name="attn.proj"),
        helper.make_node("Add", ["o0", "proj.bias"], ["o"], name="attn.proj_bias"),
        helper.make_node("Add", ["x", "o"], ["r1"], name="residual1"),
        helper.make_node("LayerNormalization", ["r1", "ln2.weight", "ln2.bias"], ["h2"], name="ln2", axis=-1),
        helper.make_node("MatMul", ["h2", "fc1.weight"], ["f0"], name="ffn.fc1"),
        helper.make_node("Add", ["f0", "fc1.bias"], ["f"], name="ffn.fc1_bias"),
        helper.make_node("Mul", ["f", "half"], ["g_half"], name="ffn.act.half"),
        helper.make_node("Pow", ["f", "three"], ["g_cube"], name="ffn.act.cube"),
        helper.make_node("Mul", ["g_cube", "kappa"], ["g_k"], name="ffn.act.kappa"),
        helper.make_node("Add", ["f", "g_k"], ["g_in"], name="ffn.act.inner"),
        helper.make_node("Mul", ["g_in", "beta"], ["g_b"], name="ffn.act.beta"),
        helper.make_node("Tanh", ["g_b"], ["g_t"], name="ffn.act.tanh"),
        helper.make_node("Add", ["g_t", "one"], ["g_1"], name="ffn.act.one"),
        helper.make_node("Mul", ["g_half", "g_1"], ["g"], name="ffn.act"),
        helper.make_node("MatMul", ["g", "fc2.weight"], ["f2"], name="ffn.fc2"),
        helper.make_node("Add", ["f2", "fc2.bias"], ["f2b"], name="ffn.fc2_bias"),
        helper.make_node("Add", ["r1", "f2b"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(nodes, "transformer_block", [batch_input("x", S, H)], [batch_input("y", S, H)],
                              inits)
    save(graph, "transformer_block", {"x": rng.standard_normal((3, S, H)).astype(np.float32)})


def inception_block():
    # A GoogLeNet-style block: conv stem with batch norm, four branches (1x1; 1x1 -> 3x3;
    # 3x3 max pool -> 1x1; 3x3 average pool -> 1x1) concatenated on channels, then a strided
    # conv, global average pooling and a classifier.
    inits = []

    def conv(name, cin, cout, k):
        inits.extend([weight(f"{name}.weight", cout, cin, k, k, fan_in=cin * k * k), weight(f"{name}.bias", cout)])
        return [f"{name}.weight", f"{name}.bias"]

    nodes = [
        helper.make_node("Conv", ["x", *conv("stem", 3, 8, 3)], ["s0"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["s0", "bn.weight", "bn.bias", "bn.mean", "bn.var"], ["s1"],
                         name="stem.bn", training_mode=1),
        helper.make_node("Relu", ["s1"], ["s"], name="stem.relu"),
        helper.make_node("Conv", ["s", *conv("b1", 8, 4, 1)], ["b1c"], name="b1"),
        helper.make_node("Relu", ["b1c"], ["b1"], name="b1.relu"),
        helper.make_node("Conv", ["s", *conv("b2a", 8, 4, 1)], ["b2ac"], name="b2a"),
        helper.make_node("Relu", ["b2ac"], ["b2a"], name="b2a.relu"),
        helper.make_node("Conv", ["b2a", *conv("b2b", 4, 6, 3)], ["b2bc"], name="b2b", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b2bc"], ["b2"], name="b2b.relu"),
        helper.make_node("MaxPool", ["s"], ["b3p"], name="b3.pool", kernel_shape=[3, 3], strides=[1, 1],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["b3p", *conv("b3", 8, 4, 1)], ["b3c"], name="b3"),
        helper.make_node("Relu", ["b3c"], ["b3"], name="b3.relu"),
        helper.make_node("AveragePool", ["s"], ["b4p"], name="b4.pool", kernel_shape=[3, 3], strides=[1, 1],
                         pads=[1, 1, 1, 1], count_include_pad=0),
        helper.make_node("Conv", ["b4p", *conv("b4", 8, 2, 1)], ["b4c"], name="b4"),
        helper.make_node("Relu", ["b4c"], ["b4"], name="b4.relu"),
        helper.make_node("Concat", ["b1", "b2", "b3", "b4"], ["cat"], name="concat", axis=1),
        helper.make_node("MaxPool", ["cat"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", *conv("down", 16, 16, 3)], ["dc"], name="down", strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["dc"], ["d"], name="down.relu"),
        helper.make_node("GlobalAveragePool", ["d"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(8)).astype(np.float32), "bn.weight"),
              numpy_helper.from_array((0.1 * rng.standard_normal(8)).astype(np.float32), "bn.bias"),
              numpy_helper.from_array(np.zeros(8, np.float32), "bn.mean"),
              numpy_helper.from_array(np.ones(8, np.float32), "bn.var"),
              weight("fc.weight", 10, 16), weight("fc.bias", 10)]
    graph = helper.make_graph(nodes, "inception_block", [batch_input("x", 3, 16, 16)],
                              [batch_input("logits", 10)], inits)
    save(graph, "inception_block", {"x": rng.standard_normal((4, 3, 16, 16)).astype(np.float32)})


def gated_unsupported():
    # A gated unit (element-wise remainder of two activations) and a Tan: no GraphPipe operators.
    inits = [weight("a.weight", 8, 8), weight("a.bias", 8), weight("b.weight", 8, 8), weight("b.bias", 8),
             weight("out.weight", 4, 8), weight("out.bias", 4)]
    nodes = [
        helper.make_node("Gemm", ["x", "a.weight", "a.bias"], ["a"], name="gate.a", transB=1),
        helper.make_node("Gemm", ["x", "b.weight", "b.bias"], ["b"], name="gate.b", transB=1),
        helper.make_node("Mod", ["a", "b"], ["ab"], name="gate.mod", fmod=1),
        helper.make_node("Tan", ["ab"], ["s"], name="periodic"),
        helper.make_node("Gemm", ["s", "out.weight", "out.bias"], ["y"], name="out", transB=1),
    ]
    graph = helper.make_graph(nodes, "gated_unsupported", [batch_input("x", 8)], [batch_input("y", 4)], inits)
    save(graph, "gated_unsupported")


two_tower()
two_tower(export_params=False)
mlp_gelu_ln()
dlrm_like()
attention_block()
scalar_inputs()
transformer_block()
inception_block()
gated_unsupported()
