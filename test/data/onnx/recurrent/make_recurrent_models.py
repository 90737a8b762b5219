#!/usr/bin/env python3
"""Writes ONNX LSTM and GRU graphs in the forms torch does not export, for the importer's tests:

  gru_lbr0.onnx          GRU with linear_before_reset = 0 (torch always writes 1), layout 0, Y and
                         Y_h read, no initial state
  lstm_reverse_h0.onnx   LSTM with direction reverse and layout 1 ([batch, sequence, ...]), its
                         initial h and c computed from the input (activations), Y and Y_c read

Each with the outputs of onnx's reference evaluator for a seeded batch of 3 in ONNX's test-data
layout (NAME/test_data_set_0/input_0.pb, output_0.pb), checked against onnxruntime where it runs
the graph (it refuses layout 1); the tests only read the committed files.
torch 2.x's own LSTM and GRU exports are in ../torch2 (lstm_stack, gru_layer).
Regenerate with onnx and onnxruntime installed (written with onnx 1.23.2, onnxruntime 1.32):
  python3 test/data/onnx/recurrent/make_recurrent_models.py test/data/onnx/recurrent
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(37)
BATCH, STEPS, INPUT, HIDDEN = 3, 4, 5, 3


def weight(name, *shape):
    return numpy_helper.from_array(rng.uniform(-0.6, 0.6, shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(nodes, inits, name):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", STEPS, INPUT])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])
    graph = helper.make_graph(nodes, name, [x], [y], inits)
    model = helper.make_model(graph, producer_name="graphpipe-test",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, f"{OUT}/{name}.onnx")
    feed = rng.standard_normal((BATCH, STEPS, INPUT)).astype(np.float32)
    out = ReferenceEvaluator(model).run(["y"], {"x": feed})[0]
    try:
        session = onnxruntime.InferenceSession(f"{OUT}/{name}.onnx")
    except Exception:  # onnxruntime has no batch-first (layout 1) recurrent kernels
        session = None
    if session is not None:
        assert np.abs(session.run(["y"], {"x": feed})[0] - out).max() < 1e-6
    d = f"{OUT}/{name}/test_data_set_0"
    os.makedirs(d, exist_ok=True)
    onnx.save_tensor(numpy_helper.from_array(feed, "x"), f"{d}/input_0.pb")
    onnx.save_tensor(numpy_helper.from_array(out, "y"), f"{d}/output_0.pb")


def gru_lbr0():
    g = 3 * HIDDEN
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),  # [steps, batch, input]
        helper.make_node("GRU", ["xt", "W", "R", "B"], ["Y", "Y_h"], hidden_size=HIDDEN,
                         linear_before_reset=0),
        helper.make_node("Transpose", ["Y"], ["yb"], perm=[2, 0, 1, 3]),  # [batch, steps, 1, h]
        helper.make_node("Flatten", ["yb"], ["yf"], axis=1),
        helper.make_node("Transpose", ["Y_h"], ["hb"], perm=[1, 0, 2]),
        helper.make_node("Flatten", ["hb"], ["hf"], axis=1),
        helper.make_node("Concat", ["yf", "hf"], ["y"], axis=1),
    ]
    save(nodes, [weight("W", 1, g, INPUT), weight("R", 1, g, HIDDEN), weight("B", 1, 2 * g)],
         "gru_lbr0")


def lstm_reverse_h0():
    g = 4 * HIDDEN
    nodes = [
        helper.make_node("Slice", ["x", "zero", "one", "one"], ["x0"]),  # x[:, 0:1]
        helper.make_node("Flatten", ["x0"], ["x0f"], axis=1),
        helper.make_node("Gemm", ["x0f", "Wh", "bh"], ["h0p"], transB=1),
        helper.make_node("Tanh", ["h0p"], ["h0t"]),
        helper.make_node("Unsqueeze", ["h0t", "one"], ["h0"]),  # [batch, 1, hidden]
        helper.make_node("Gemm", ["x0f", "Wc", "bc"], ["c0p"], transB=1),
        helper.make_node("Unsqueeze", ["c0p", "one"], ["c0"]),
        helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["Y", "", "Y_c"],
                         hidden_size=HIDDEN, direction="reverse", layout=1),
        helper.make_node("Flatten", ["Y"], ["yf"], axis=1),  # [batch, steps, 1, hidden]
        helper.make_node("Flatten", ["Y_c"], ["cf"], axis=1),
        helper.make_node("Concat", ["yf", "cf"], ["y"], axis=1),
    ]
    inits = [weight("W", 1, g, INPUT), weight("R", 1, g, HIDDEN), weight("B", 1, 2 * g),
             weight("Wh", HIDDEN, INPUT), weight("bh", HIDDEN), weight("Wc", HIDDEN, INPUT),
             weight("bc", HIDDEN), ints("zero", [0]), ints("one", [1])]
    save(nodes, inits, "lstm_reverse_h0")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    gru_lbr0()
    lstm_reverse_h0()
