#!/usr/bin/env python3
"""PyTorch eager baseline for one training step of a GraphPipe model.

Reads a GraphPipe model (protobuf JSON of graphpipe.v1.ModelGraph, e.g. from
`graphpipe-plan zoo export tiny-mmt --out tm.json`), builds a torch.nn.Module that interprets
the graph op by op with the same semantics as GraphPipe's CPU kernels, and times one training
step (zero_grad + forward + loss + backward + SGD step) on random inputs.

The last line printed is machine-readable:
  torch_step model=<name> batch=<B> dtype=<d> device=<dev> step_ms=<median ms>
             samples_per_s=<B*1000/step_ms> params=<parameter count>       (one line)
Exit status: 0 ok; 2 bad arguments, unreadable model or unsupported op; 3 PyTorch not importable;
1 the step itself failed (e.g. out of memory).
"""
import argparse
import base64
import json
import math
import statistics
import sys
import time


def fail(code, msg):
    print("torch_step: error: " + msg, file=sys.stderr)
    sys.exit(code)


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="GraphPipe model as protobuf JSON "
                   "(graphpipe-plan zoo export ... --out FILE.json); or give it as --model")
    p.add_argument("--model", dest="model_opt", metavar="FILE", help="same as MODEL")
    p.add_argument("--batch", type=int, default=8, help="samples per step (default 8)")
    p.add_argument("--device", default=None,
                   help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "tf32", "bf16"],
                   help="fp32 (strict); tf32 (fp32 storage, TF32 matmuls and convolutions); "
                        "bf16 (autocast around forward and loss)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--steps", type=int, default=10,
                   help="timed steps; the median is reported (default 10)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    p.add_argument("--attention", default="auto", choices=["auto", "sdpa", "math"],
                   help="attention core: sdpa = F.scaled_dot_product_attention (torch >= 2.0, "
                        "fused kernels); math = explicit softmax(QK^T/sqrt(d))V, as GraphPipe "
                        "computes it; auto = sdpa where available (default)")
    p.add_argument("--seed", type=int, default=0, help="torch RNG seed (default 0)")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op CPU threads (torch.set_num_threads; inter-op threads 1); "
                        "0 leaves torch's default (default 0)")
    p.add_argument("--print-loss", action="store_true", help="print every step's loss to stderr")
    a = p.parse_args()
    if (a.model is None) == (a.model_opt is None):
        fail(2, "give the model file once, as MODEL or --model FILE (see --help)")
    a.model = a.model or a.model_opt
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or a.threads < 0:
        fail(2, "--batch and --steps must be >= 1, --warmup and --threads >= 0")
    return a


# ---- model file --------------------------------------------------------------------------------

# Op types this interpreter implements; anything else (e.g. `opaque`) is refused up front.
SUPPORTED = {"input", "linear", "embedding_bag", "multi_head_attention", "layer_norm", "relu",
             "gelu", "softmax", "add", "concat", "slice", "matmul", "scale", "transpose",
             "reshape", "conv2d", "max_pool2d", "avg_pool2d", "batch_norm", "mse_loss",
             "softmax_cross_entropy", "embedding", "sigmoid", "tanh", "clip", "mul", "reduce",
             "bias_add", "broadcast_param", "unary", "binary", "compare", "where", "constant",
             "conv_transpose2d", "resize", "gather", "cast", "cumsum"}
PARAM_OPS = ("linear", "embedding_bag", "multi_head_attention", "layer_norm", "conv2d",
             "batch_norm", "embedding", "bias_add", "broadcast_param", "conv_transpose2d")
INT_DTYPES = ("DATA_TYPE_INT64", "DATA_TYPE_INT32", 4, 5)


def ref_key(ref):
    # Proto3 JSON omits zero values, so output index 0 is usually absent.
    return (ref["op"], int(ref.get("output", 0)))


def attr(op, name, default=None, required=False):
    """An attribute as a Python value. Proto3 JSON writes int64 as strings and may omit the
    fields of an empty IntList, so every kind is normalised here."""
    v = op.get("attrs", {}).get(name)
    if v is None:
        if required:
            fail(2, "op '%s' (%s): missing required attribute '%s'" % (op["id"], op["type"], name))
        return default
    if "i" in v:
        return int(v["i"])
    if "f" in v:
        return float(v["f"])  # float() also reads the JSON spellings "NaN" / "Infinity"
    if "s" in v:
        return v["s"]
    if "ints" in v:
        return [int(x) for x in v["ints"].get("values", [])]
    return default


def topo_order(ops):
    """Ops in dependency order. The format allows any order (zoo exports happen to be sorted),
    so ops are placed once all their producers are, and dangling references and cycles are
    reported here rather than as a KeyError inside forward."""
    by_id = {o["id"]: o for o in ops}
    if len(by_id) != len(ops):
        fail(2, "duplicate op ids in model")
    for o in ops:
        for r in o.get("inputs", []):
            if r["op"] not in by_id:
                fail(2, "op '%s' (%s) reads unknown op '%s'" % (o["id"], o["type"], r["op"]))
    order, placed, todo = [], set(), list(ops)
    while todo:
        ready = [o for o in todo if all(r["op"] in placed for r in o.get("inputs", []))]
        if not ready:
            fail(2, "model has a cycle through: " + ", ".join(o["id"] for o in todo))
        order += ready
        placed.update(o["id"] for o in ready)
        todo = [o for o in todo if o["id"] not in placed]
    return order


def check_model(model):
    """The ops in dependency order, after the checks that need no torch (so that exit status 2
    for a bad model does not depend on whether torch is installed)."""
    if not isinstance(model, dict) or not model.get("ops"):
        fail(2, "not a GraphPipe ModelGraph in JSON (no ops)")
    for op in model["ops"]:
        if op.get("type") not in SUPPORTED:
            fail(2, "op '%s' has unsupported type '%s'" % (op.get("id"), op.get("type")))
    if not model.get("losses"):
        fail(2, "model has no losses")
    return topo_order(model["ops"])


# ---- the module --------------------------------------------------------------------------------

def build_module(torch, model, attention):
    nn, F = torch.nn, torch.nn.functional
    # Prefer the fused attention kernel when asked and present (it is what nn.MultiheadAttention
    # uses in torch 2.x); it computes the same function with the default 1/sqrt(d) scale.
    use_sdpa = attention != "math" and hasattr(F, "scaled_dot_product_attention")
    if attention == "sdpa" and not use_sdpa:
        fail(2, "--attention sdpa needs torch >= 2.0 (this is %s)" % torch.__version__)
    # GraphPipe's gelu is the tanh approximation (torch >= 1.12 has it built in).
    UNARY = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh"),
             "softmax": lambda x: torch.softmax(x, dim=-1)}
    # The general element-wise ops' functions, by attrs.fn (model/src/ops_general.cc).
    UNARY_FNS = {"neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
                 "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "abs": torch.abs,
                 "erf": torch.erf, "sin": torch.sin, "cos": torch.cos, "softplus": F.softplus}
    BINARY_FNS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                  "pow": torch.pow, "max": torch.maximum, "min": torch.minimum}
    COMPARE_FNS = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
                   "gt": torch.gt, "ge": torch.ge}

    class GraphModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.ops = check_model(model)
            self.plist = nn.ParameterList()
            self.params = {}  # op id -> {param name: Parameter}
            # Tied parameters (model.param_ties) are one Parameter, as in the user's module.
            self.tied = {}  # (op id, param) -> (first member's op id, param)
            for tie in model.get("paramTies", model.get("param_ties", [])):
                members = [(m["op"], m["param"]) for m in tie.get("members", [])]
                for m in members[1:]:
                    self.tied[m] = members[0]
            for op in self.ops:
                self.params[op["id"]] = {}
                self.add_params(op, op.get("params", []))
            # Files not written by graphpipe-plan (ONNX imports, hand-written) may lack the
            # outputs and params that shape inference fills in: a dry run on the CPU at batch 2
            # derives them (2: batch_norm needs more than one value per channel).
            self.needs_dry_run = any(not op.get("outputs") or
                                     (op["type"] in PARAM_OPS and not op.get("params"))
                                     for op in self.ops)
            self.losses = [ref_key(r) for r in model["losses"]]
            self.checked = False

        def add_params(self, op, specs):
            for spec in specs:
                source = self.tied.get((op["id"], spec["name"]))
                if source is not None and spec["name"] in self.params.get(source[0], {}):
                    self.params[op["id"]][spec["name"]] = self.params[source[0]][source[1]]
                    continue
                p = nn.Parameter(self.init_param(op, spec))
                self.params[op["id"]][spec["name"]] = p
                self.plist.append(p)

        @staticmethod
        def derive_params(op, xs):
            """Param specs of `op` from its (batched) inputs, as model/src/ops_*.cc."""
            t, x = op["type"], xs[0]
            bias = attr(op, "bias", 1) != 0
            if t == "linear":
                n = attr(op, "out_features", required=True)
                specs = [("weight", [n, x.shape[-1]])] + ([("bias", [n])] if bias else [])
            elif t in ("embedding_bag", "embedding"):
                specs = [("weight", [attr(op, "num_embeddings", required=True),
                                     attr(op, "embedding_dim", required=True)])]
            elif t == "bias_add":
                specs = [("bias", attr(op, "shape", required=True))]
            elif t == "broadcast_param":
                specs = [("value", attr(op, "shape", required=True))]
            elif t == "conv_transpose2d":
                n, k = attr(op, "out_channels", required=True), attr(op, "kernel", required=True)
                specs = [("weight", [x.shape[1], n] + k)] + ([("bias", [n])] if bias else [])
            elif t == "multi_head_attention":
                h = x.shape[-1]
                specs = [(n + "_weight", [h, h]) for n in ("q", "k", "v", "out")]
                specs += [(n + "_bias", [h]) for n in ("q", "k", "v", "out")] if bias else []
            elif t == "layer_norm":
                specs = [("gamma", [x.shape[-1]]), ("beta", [x.shape[-1]])]
            elif t == "batch_norm":
                specs = [("gamma", [x.shape[1]]), ("beta", [x.shape[1]])]
            else:  # conv2d
                n, k = attr(op, "out_channels", required=True), attr(op, "kernel", required=True)
                specs = [("weight", [n, x.shape[1]] + k)] + ([("bias", [n])] if bias else [])
            op["params"] = [{"name": n, "shape": sh} for n, sh in specs]
            return op["params"]

        @staticmethod
        def init_param(op, spec):
            # Same scheme (not the same RNG stream) as executor/src/runtime/init.cc, or the model's own
            # values when it carries them (ONNX imports).
            shape = [int(d) for d in spec["shape"]]
            raw = op.get("param_values", {}).get(spec["name"])
            if raw is not None:
                data = bytearray(base64.b64decode(raw))
                if len(data) == 4 * math.prod(shape):
                    return torch.frombuffer(data, dtype=torch.float32).reshape(shape).clone()
            name = spec["name"]
            if op["type"] in ("layer_norm", "batch_norm"):
                return torch.ones(shape) if name == "gamma" else torch.zeros(shape)
            if "bias" in name:
                return torch.zeros(shape)
            bound = 0.05
            if op["type"] not in ("embedding_bag", "embedding") and len(shape) >= 2:
                bound = 1.0 / math.sqrt(math.prod(shape[1:]))
            return torch.empty(shape).uniform_(-bound, bound)

        def attention(self, op, x, p):
            heads = attr(op, "num_heads", required=True)
            b, s, h = x.shape
            d = h // heads
            q, k, v = (F.linear(x, p[n + "_weight"], p.get(n + "_bias")).view(b, s, heads, d)
                       .transpose(1, 2) for n in ("q", "k", "v"))
            if use_sdpa:
                c = F.scaled_dot_product_attention(q, k, v)
            else:
                c = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d), dim=-1) @ v
            c = c.transpose(1, 2).reshape(b, s, h)
            return F.linear(c, p["out_weight"], p.get("out_bias"))

        def run_op(self, op, xs, p, batch):
            t = op["type"]
            if t in ("concat", "slice"):
                axis = attr(op, "axis", -1)
                axis = axis + xs[0].dim() - 1 if axis < 0 else axis  # against the per-sample rank
            if t == "gelu" and attr(op, "approximate", "tanh") == "none":
                return F.gelu(xs[0])  # exact (erf), as nn.GELU()
            if t in UNARY:
                return UNARY[t](xs[0])
            if t == "linear":
                act = attr(op, "activation", "none")
                if act not in ("none", "relu", "gelu"):
                    fail(2, "op '%s' (linear): activation '%s' unsupported" % (op["id"], act))
                y = F.linear(xs[0], p["weight"], p.get("bias"))
                return y if act == "none" else UNARY[act](y)
            if t == "embedding_bag":
                ids = xs[0]
                bag = ids.shape[-1]
                y = F.embedding_bag(ids.reshape(-1, bag), p["weight"], mode=attr(op, "mode", "sum"))
                return y.reshape(*ids.shape[:-1], y.shape[-1])
            if t == "multi_head_attention":
                return self.attention(op, xs[0], p)
            if t == "layer_norm":
                return F.layer_norm(xs[0], xs[0].shape[-1:], p["gamma"], p["beta"],
                                    attr(op, "epsilon", 1e-5))
            if t == "add":
                return sum(xs[1:], xs[0])
            if t == "concat":
                return torch.cat(xs, dim=axis + 1)  # +1: the batch dim is first
            if t == "slice":
                start, end = attr(op, "start", required=True), attr(op, "end", required=True)
                return xs[0].narrow(axis + 1, start, end - start)
            if t == "matmul":
                # Eager PyTorch code writes these as views and a separate multiply.
                a = xs[0].transpose(-1, -2) if attr(op, "transpose_a", 0) else xs[0]
                b = xs[1].transpose(-1, -2) if attr(op, "transpose_b", 0) else xs[1]
                alpha = attr(op, "alpha", 1.0)
                y = torch.matmul(a, b)
                return y if alpha == 1 else y * alpha
            if t == "scale":
                return xs[0] * attr(op, "factor", required=True)
            if t == "transpose":
                y = xs[0].permute(0, *[d + 1 for d in attr(op, "perm", required=True)])
                if "axis" not in op.get("attrs", {}):
                    return y
                start = attr(op, "start", required=True)
                return y.narrow(attr(op, "axis", required=True) + 1, start,
                                attr(op, "end", required=True) - start)
            if t == "reshape":
                return xs[0].reshape(batch, *attr(op, "shape", required=True))
            if t == "conv2d":
                return F.conv2d(xs[0], p["weight"], p.get("bias"), attr(op, "stride", [1, 1]),
                                attr(op, "padding", [0, 0]))
            if t in ("max_pool2d", "avg_pool2d"):
                k = attr(op, "kernel", required=True)
                s, pad = attr(op, "stride", k), attr(op, "padding", [0, 0])
                if t == "max_pool2d":
                    return F.max_pool2d(xs[0], k, s, pad)
                return F.avg_pool2d(xs[0], k, s, pad,
                                    count_include_pad=bool(attr(op, "count_include_pad", 1)))
            if t == "batch_norm":  # training mode: micro-batch statistics, no running stats
                return F.batch_norm(xs[0], None, None, p["gamma"], p["beta"], training=True,
                                    eps=attr(op, "epsilon", 1e-5))
            general = self.general_op(op, t, xs, p, batch)
            if general is not None:
                return general
            # Losses give a per-sample [B, 1] value, as GraphPipe's loss ops do.
            if t == "mse_loss":
                d = xs[0].float() - xs[1].float()  # fp32 under bf16 autocast too
                return d.pow(2).reshape(batch, -1).mean(1, keepdim=True)
            if t == "softmax_cross_entropy":
                logits = xs[0].float()
                ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), xs[1].reshape(-1),
                                     reduction="none")
                return ce.reshape(batch, -1).mean(1, keepdim=True)
            fail(2, "op '%s' has unsupported type '%s'" % (op["id"], t))

        @staticmethod
        def broadcast(xs):
            """Operands aligned as GraphPipe broadcasts them: per-sample shapes on their trailing
            axes, the batch first (1s inserted after it)."""
            rank = max(x.dim() for x in xs)
            return [x.reshape(x.shape[0], *([1] * (rank - x.dim())), *x.shape[1:]) for x in xs]

        def general_op(self, op, t, xs, p, batch):
            """The ops beyond the original catalogue (imported PyTorch models): None if not one."""
            if t == "embedding":
                return F.embedding(xs[0], p["weight"])
            if t == "sigmoid":
                return torch.sigmoid(xs[0])
            if t == "tanh":
                return torch.tanh(xs[0])
            if t == "clip":
                return torch.clamp(xs[0], attr(op, "min", required=True),
                                   attr(op, "max", required=True))
            if t == "mul":
                return xs[0] * xs[1]
            if t == "bias_add":
                return xs[0] + p["bias"]
            if t == "broadcast_param":
                return p["value"].unsqueeze(0).expand(batch, *p["value"].shape)
            if t == "unary":
                return UNARY_FNS[attr(op, "fn", required=True)](xs[0])
            if t == "binary":
                a, b = self.broadcast(xs)
                return BINARY_FNS[attr(op, "fn", required=True)](a, b)
            if t == "compare":
                a, b = self.broadcast(xs)
                return COMPARE_FNS[attr(op, "fn", required=True)](a, b).to(a.dtype)
            if t == "where":
                c, a, b = self.broadcast(xs)
                return torch.where(c != 0, a, b)
            if t == "constant":
                shape = [int(d) for d in attr(op, "shape", required=True)]
                raw = bytearray(base64.b64decode(op["param_values"]["value"]))
                v = torch.frombuffer(raw, dtype=torch.float32).reshape(shape).to(xs[0].device)
                if attr(op, "dtype", "float32") == "int64":
                    v = v.long()
                return v.unsqueeze(0).expand(batch, *shape)
            if t == "reduce":
                axes = attr(op, "axes", None) or [attr(op, "axis", -1)]
                dims = [a + 1 if a >= 0 else a for a in axes]  # past the batch axis
                keep = attr(op, "keepdims", 1) != 0
                mode = attr(op, "mode", "sum")
                if mode == "sum":
                    return xs[0].sum(dim=dims, keepdim=keep)
                if mode == "mean":
                    return xs[0].mean(dim=dims, keepdim=keep)
                if mode == "max":
                    return xs[0].amax(dim=dims, keepdim=keep)
                return torch.linalg.vector_norm(xs[0], dim=dims, keepdim=keep)
            if t == "conv_transpose2d":
                return F.conv_transpose2d(xs[0], p["weight"], p.get("bias"),
                                          attr(op, "stride", [1, 1]), attr(op, "padding", [0, 0]),
                                          attr(op, "output_padding", [0, 0]))
            if t == "resize":
                size = attr(op, "size", required=True)
                if attr(op, "mode", "nearest") == "nearest":
                    return F.interpolate(xs[0], size=size, mode="nearest")
                return F.interpolate(xs[0], size=size, mode="bilinear",
                                     align_corners=bool(attr(op, "align_corners", 0)))
            if t == "gather":
                axis = attr(op, "axis", 0)
                index = torch.tensor([int(i) for i in attr(op, "indices", required=True)],
                                     device=xs[0].device)
                return torch.index_select(xs[0], axis + 1 if axis >= 0 else axis, index)
            if t == "cast":
                if attr(op, "dtype", "float32") == "int64":
                    return xs[0].long()  # truncated toward zero
                return xs[0].float()
            if t == "cumsum":
                axis = attr(op, "axis", -1)
                dim = axis + 1 if axis >= 0 else axis  # past the batch axis
                x = xs[0].flip(dim) if attr(op, "reverse", 0) else xs[0]
                y = x.cumsum(dim)
                if attr(op, "exclusive", 0):
                    y = y - x
                return y.flip(dim) if attr(op, "reverse", 0) else y
            return None

        def forward(self, inputs):
            """inputs: op id -> batched tensor. Returns the training loss: the sum over the
            model's losses of their mean over the batch."""
            batch = next(iter(inputs.values())).shape[0]
            vals = {}
            for op in self.ops:
                if op["type"] == "input":
                    vals[(op["id"], 0)] = inputs[op["id"]]
                    continue
                xs = [vals[ref_key(r)] for r in op.get("inputs", [])]
                if op["type"] in PARAM_OPS and not self.params[op["id"]]:
                    self.add_params(op, self.derive_params(op, xs))
                try:
                    y = self.run_op(op, xs, self.params[op["id"]], batch)
                except (RuntimeError, ValueError, TypeError, IndexError) as e:
                    fail(2, "op '%s' (%s) failed in torch: %s" % (op["id"], op["type"], e))
                if not op.get("outputs"):
                    op["outputs"] = [{"shape": list(y.shape[1:])}]
                elif not self.checked:
                    # First call only: catch semantic mistakes as shape mismatches, by op.
                    want = [batch] + [int(d) for d in op["outputs"][0].get("shape", [])]
                    if list(y.shape) != want:
                        fail(2, "op '%s' (%s): torch output %s, model says %s"
                             % (op["id"], op["type"], list(y.shape), want))
                vals[(op["id"], 0)] = y
            self.checked = True
            return sum(vals[k].float().mean() for k in self.losses)

    return GraphModule()


def make_inputs(torch, model, batch, device, dry=False):
    """Random batched inputs: floats from randn, integer ids in the range their consumer
    accepts (embedding rows, or classes for cross-entropy labels), as executor/src/runtime/init.cc."""
    by_id = {o["id"]: o for o in model["ops"]}
    int_range = {}
    for o in model["ops"]:
        for i, r in enumerate(o.get("inputs", [])):
            n = None
            if o["type"] == "embedding_bag" and i == 0:
                n = attr(o, "num_embeddings", required=True)
            elif o["type"] == "softmax_cross_entropy" and i == 1:
                logits = by_id[o["inputs"][0]["op"]].get("outputs")
                n = int(logits[0]["shape"][-1]) if logits else 1  # 1: the dry run's zeros
            if n is not None:
                int_range[r["op"]] = min(n, int_range.get(r["op"], n))
    inputs = {}
    for o in model["ops"]:
        if o["type"] != "input":
            continue
        spec = o["outputs"][0]
        shape = [batch] + [int(d) for d in spec.get("shape", [])]
        if spec.get("dtype") in INT_DTYPES:
            hi = 1 if dry else int_range.get(o["id"], 1)
            inputs[o["id"]] = torch.randint(0, hi, shape, device=device)
        else:
            inputs[o["id"]] = torch.randn(shape, device=device)
    return inputs


def main():
    args = parse_args()
    try:
        with open(args.model) as f:
            model = json.load(f)
    except (OSError, ValueError) as e:
        fail(2, "cannot read model %s: %s" % (args.model, e))
    check_model(model)
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        fail(3, "PyTorch not importable: %s" % e)

    if args.threads > 0:
        # Before any parallel work: torch refuses to change inter-op threads once it has started.
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
        torch.empty(1, device=dev)
    except Exception as e:
        fail(2, "device '%s' unusable: %s" % (device, e))
    cuda = dev.type == "cuda"
    if cuda:
        # fp32 means strict fp32 here; tf32 opts in. (torch's default for matmul is off, for
        # cuDNN convolutions on, so both are set explicitly.)
        torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"

    net = build_module(torch, model, args.attention)
    if net.needs_dry_run:
        with torch.no_grad():
            net(make_inputs(torch, model, 2, "cpu", dry=True))
    if not list(net.parameters()):
        fail(2, "model %s has no parameters: nothing to train" % args.model)
    net = net.to(dev)
    n_params = sum(p.numel() for p in net.parameters())
    inputs = make_inputs(torch, model, args.batch, dev)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr)
    autocast_on = args.dtype == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        # torch.autocast(device_type=...) exists in 1.10+; bf16 autocast works on CPU and CUDA.
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast_on):
            loss = net(inputs)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    times = []
    for i in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        try:
            loss = step()
            sync()
        except RuntimeError as e:  # e.g. out of memory in backward: one line for the caller
            fail(1, "training step failed: %s" % str(e).splitlines()[0])
        dt = (time.perf_counter() - t0) * 1000.0
        if i >= args.warmup:
            times.append(dt)
        if args.print_loss:
            print("step %d loss %.6g %.3f ms" % (i, loss.item(), dt), file=sys.stderr)
    if not math.isfinite(loss.item()):
        print("torch_step: warning: final loss is not finite", file=sys.stderr)

    med = statistics.median(times)
    name = model.get("name") or args.model
    print("torch_step model=%s batch=%d dtype=%s device=%s step_ms=%.4f samples_per_s=%.2f "
          "params=%d threads=%d" % (name.replace(" ", "_"), args.batch, args.dtype, dev.type, med,
                                    args.batch * 1000.0 / med, n_params, torch.get_num_threads()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
