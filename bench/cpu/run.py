#!/usr/bin/env python3
"""One training step on the CPU: `graphpipe-executor reference` against PyTorch eager.

For every model (small configurations of each zoo model, and ONNX test models imported with
`graphpipe-plan import`) the model is written to one JSON file that both sides read:
  ours:    graphpipe-executor --cpu-threads N reference --model FILE --batch B --iterations W+S
           (per-iteration wall time from --metrics-out; an iteration is zero_grad, forward, loss,
           backward and the SGD step, as ReferenceTrainer::run_iteration times it)
  PyTorch: bench/gpu/torch_step.py --model FILE --device cpu --threads N --attention math
           (the same step in eager mode: zero_grad, forward, loss, backward, torch.optim.SGD)
Each side reports the median of S timed steps after W untimed ones; the two sides alternate
--repeat times per model and the fastest median of each side is kept, so that a burst of other
load on the machine hits one repetition rather than one side. The ratio is ours / PyTorch
(below 1: we are faster), from the same run; a second ratio divides the sides' medians over the
alternations, which one unusually fast repetition of either side does not move.

Usage: bench/cpu/run.py [--bin build/bin] [--threads 1] [--batch 16] [--steps 10] [--warmup 3]
                        [--repeat 2] [--only SUBSTRING] [--python python3]
Exit status: 0 table printed (rows whose PyTorch side failed read n/a); 1 our side failed on a
model; 2 bad arguments.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TORCH_STEP = os.path.join(ROOT, "bench", "gpu", "torch_step.py")
ONNX_DIR = os.path.join(ROOT, "test", "data", "onnx")

# Small configurations of every zoo model: the tiny CPU-test variants (dominated by per-op
# overhead) and one size per model where the kernels' arithmetic dominates (the mmt row is
# issue 21's measurement).
ZOO_MODELS = [
    "tiny-mmt", "tiny-transformer", "tiny-nbranch", "tiny-dlrm", "tiny-candle-uno",
    "mmt?branches=2&layers=2&seq=64&hidden=256&heads=4&ffn=1024",
    "transformer?layers=2&seq=64&hidden=256&heads=4&ffn=1024",
    "nbranch?branches=2&layers=2&seq=64&hidden=256&heads=4",
    "dlrm?dense_branches=2&sparse_branches=2&dense_in=256&dense_layers=2&width=512&rows=10000"
    "&dim=64&bag=20&top_layers=2",
    "candle-uno?width=512&layers=2",
]
# ONNX test models that import without opaque ops: a transformer block, an MLP with GELU and
# layer norm, a DLRM-like model, an inception block (convolutions, pooling) and two torch exports.
ONNX_MODELS = [
    "transformer_block.onnx", "mlp_gelu_ln.onnx", "dlrm_like.onnx", "inception_block.onnx",
    "torch/encoder_layer_op17.onnx", "torch/resnet_block_op17.onnx",
]
# Whole PyTorch architectures as their users write them (issue 37), graph-only exports of
# bench/cpu/models/make_models.py: GPT-2 small's layer shape (2 layers, 64 positions), a timm-style
# ViT and a U-Net. Both sides initialise the weights themselves.
ARCH_MODELS = ["models/gpt2_small_shaped.onnx", "models/vit.onnx", "models/unet.onnx"]


def torch_python():
    # Debian's python3-torch serves /usr/bin/python3, which need not be the python3 on PATH.
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import torch"],
                                                 capture_output=True).returncode == 0:
            return py
    return sys.executable  # the PyTorch column then reads n/a, with torch_step's message


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                   help="directory of graphpipe-plan and graphpipe-executor (default build/bin)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads on both sides: our --cpu-threads (BLAS) and torch's "
                        "intra-op threads (default 1)")
    p.add_argument("--batch", type=int, default=16, help="mini-batch (default 16)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per side (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--repeat", type=int, default=2,
                   help="alternations of the two sides per model; the fastest median of each "
                        "side is kept (default 2)")
    p.add_argument("--only", default="", help="only models whose name contains this")
    p.add_argument("--python", default=os.environ.get("GP_PYTHON") or torch_python(),
                   help="the Python with PyTorch (default: $GP_PYTHON, else this one or "
                        "/usr/bin/python3, whichever imports torch)")
    a = p.parse_args()
    if min(a.threads, a.batch, a.steps, a.repeat) < 1 or a.warmup < 0:
        p.error("--threads, --batch, --steps and --repeat must be >= 1, --warmup >= 0")
    return a


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError("%s: exit %d: %s" % (os.path.basename(cmd[0]), r.returncode,
                                               lines[-1] if lines else ""))
    return r.stdout


def thread_env(threads):
    # Every threading runtime either side may load gets the same count, so that no library
    # spawns threads beyond what the table states.
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def export_model(a, name, out):
    plan = os.path.join(a.bin, "graphpipe-plan")
    if name.endswith(".onnx"):
        path = (os.path.join(HERE, name) if name.startswith("models/")
                else os.path.join(ONNX_DIR, name))
        run([plan, "import", path, "--out", out, "--inline-weights", "--log-level", "warn"])
    else:
        run([plan, "zoo", "export", name, "--out", out, "--log-level", "warn"])


def ours_ms(a, model, tmp):
    metrics = os.path.join(tmp, "metrics.json")
    run([os.path.join(a.bin, "graphpipe-executor"), "--cpu-threads", str(a.threads),
         "--log-level", "warn", "reference", "--model", model, "--batch", str(a.batch),
         "--iterations", str(a.warmup + a.steps), "--optimizer", "sgd", "--lr", "0.01",
         "--metrics-out", metrics], env=thread_env(a.threads))
    with open(metrics) as f:
        its = json.load(f)["iterations"][a.warmup:]
    return 1000.0 * statistics.median(m["time_s"] for m in its)


def torch_ms(a, model):
    out = run([a.python, TORCH_STEP, "--model", model, "--device", "cpu", "--batch",
               str(a.batch), "--threads", str(a.threads), "--attention", "math", "--warmup",
               str(a.warmup), "--steps", str(a.steps)], env=thread_env(a.threads))
    fields = dict(kv.split("=", 1) for kv in out.strip().splitlines()[-1].split()[1:])
    if int(fields["threads"]) != a.threads:
        raise RuntimeError("torch runs %s threads, not %d" % (fields["threads"], a.threads))
    return float(fields["step_ms"])


def main():
    a = parse_args()
    models = [m for m in ZOO_MODELS + ONNX_MODELS + ARCH_MODELS if a.only in m]
    if not models:
        print("run.py: no model matches --only %r" % a.only, file=sys.stderr)
        return 2
    rows, status = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            model = os.path.join(tmp, "model.json")
            ours, theirs, note = [], [], ""
            try:
                export_model(a, name, model)
                for _ in range(a.repeat):
                    ours.append(ours_ms(a, model, tmp))
                    try:
                        theirs.append(torch_ms(a, model))
                    except RuntimeError as e:
                        note = str(e)
            except RuntimeError as e:
                print("run.py: %s: %s" % (name, e), file=sys.stderr)
                status = 1
                continue
            if note:
                print("run.py: %s: PyTorch: %s" % (name, note), file=sys.stderr)
            o = min(ours)
            t = min(theirs) if theirs else None
            median_ratio = statistics.median(ours) / statistics.median(theirs) if theirs else None
            rows.append((name, o, t, median_ratio))
            print("%s: ours %s ms, PyTorch %s ms" % (name, ["%.2f" % x for x in ours],
                                                   ["%.2f" % x for x in theirs]),
                  file=sys.stderr, flush=True)
    width = max([len(r[0]) for r in rows] + [5])
    print("\nOne training step (forward, loss, backward, SGD) at batch %d, %d thread%s on both "
          "sides; median of %d steps, best of %d alternations" %
          (a.batch, a.threads, "" if a.threads == 1 else "s", a.steps, a.repeat))
    print("| %-*s | %9s | %11s | %6s | %16s |" %
          (width, "model", "ours, ms", "PyTorch, ms", "ratio", "ratio of medians"))
    print("|%s|%s|%s|%s|%s|" % ("-" * (width + 2), "-" * 11, "-" * 13, "-" * 8, "-" * 18))
    for name, o, t, median_ratio in rows:
        ts = "n/a" if t is None else "%.3f" % t
        ratio = "n/a" if t is None else "%.2f" % (o / t)
        mr = "n/a" if median_ratio is None else "%.2f" % median_ratio
        print("| %-*s | %9.3f | %11s | %6s | %16s |" % (width, name, o, ts, ratio, mr))
    return status


if __name__ == "__main__":
    sys.exit(main())
