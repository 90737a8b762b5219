#!/usr/bin/python3
"""Writes the small ONNX models the importer tests read (run with Debian's python3-onnx 1.12).

PyTorch is not installable on the build machines (no PyPI access), so the graphs are written
with onnx.helper in the exact node patterns torch.onnx.export (opset 17) produces for these
layers: nn.Linear -> Gemm(transB=1) on 2-D inputs and MatMul + Add otherwise, exact GELU -> Div
by sqrt(2), Erf, Add 1, Mul x, Mul 0.5, nn.LayerNorm -> LayerNormalization, nn.EmbeddingBag ->
Gather + ReduceSum/ReduceMean over the bag, export_params=False -> weights as graph inputs.
Regenerate with: /usr/bin/python3 test/data/onnx/make_models.py test/data/onnx
"""
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


def save(graph, name):
    model = helper.make_model(graph, producer_name="graphpipe-test", opset_imports=[helper.make_opsetid("", 17)])
    model = shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    onnx.save(model, f"{OUT}/{name}.onnx")


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


two_tower()
two_tower(export_params=False)
mlp_gelu_ln()
dlrm_like()
attention_block()
scalar_inputs()
