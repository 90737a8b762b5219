"""GraphPipe's half of architectures.py: the graphpipe-plan and graphpipe-executor commands it
runs on an export, each raising Blocked with the command's own message when it refuses or fails."""
import json
import os
import re
import subprocess

import numpy as np

from torch_side import LR

TIMEOUT_S = 1800  # one command; the largest model here trains in seconds


class Blocked(Exception):
    """A step that refused or failed: its name and the command's message."""

    def __init__(self, step, message, stderr=""):
        super().__init__(f"{step}: {message}")
        self.step = step
        self.stderr = stderr  # the whole of it (the message is cut)


def message(stderr):
    """A failed command's error: three lines from its first error line (an import lists every
    node it refuses after it; warnings come before it), or its last two lines."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    at = next((k for k, line in enumerate(lines) if "error" in line.lower()), None)
    return " / ".join(lines[at:at + 3] if at is not None else lines[-2:])[:400]


class GraphPipe:
    """The two binaries in bin_dir, writing their files under work."""

    def __init__(self, bin_dir, work):
        self.plan_bin = os.path.join(bin_dir, "graphpipe-plan")
        self.exec_bin = os.path.join(bin_dir, "graphpipe-executor")
        self.work = work

    def path(self, name):
        return os.path.join(self.work, name)

    def run(self, step, argv):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Blocked(step, f"no answer after {TIMEOUT_S} s: {' '.join(argv)}")
        # Paths under the work directory are left out of the messages: they only lengthen them.
        done.stderr = done.stderr.replace(self.work + os.sep, "")
        if done.returncode != 0:
            raise Blocked(step, f"exit {done.returncode}: " + message(done.stderr), done.stderr)
        return done

    def import_onnx(self, onnx_path, max_bag=0, padding_idx=None, freeze=()):
        """graphpipe-plan import with no flag beyond --max-bag, --padding-idx and --freeze (the
        padding rows and buffers of a legacy export, which does not record them): (model file,
        import's stderr)."""
        model = self.path("model.pbtxt")
        flags = ["--max-bag", str(max_bag)] if max_bag else []
        for table, row in (padding_idx or {}).items():
            flags += ["--padding-idx", f"{table}={row}"]
        for name in freeze:
            flags += ["--freeze", name]
        done = self.run("import", [self.plan_bin, "import", onnx_path, "--out", model] + flags)
        return model, done.stderr

    def search(self, model, strategy, devices, batch, micro_batch=0):
        """graphpipe-plan search on the first `devices` CPU devices of this machine: (plan file,
        the search's JSON report)."""
        plan = self.path(f"plan_{strategy}_{devices}.pb")
        report = self.path(f"plan_{strategy}_{devices}.json")
        flags = ["--micro-batches", str(micro_batch)] if micro_batch else []
        self.run(f"search ({strategy})",
                 [self.plan_bin, "search", "--model", model, "--cluster", "cpu-local", "--devices",
                  str(devices), "--batch", str(batch), "--strategy", strategy, "--optimizer", "sgd",
                  "--lr", str(LR), "--out", plan, "--report", report, "--log-level", "warn"] +
                 flags)
        with open(report) as f:
            return plan, json.load(f)

    def split_plan(self, model, batch, whole_batch=False):
        """A plan of at least two stages on up to 4 devices: GraphPipe's own search first; when
        it keeps the model on one device (a small model computes faster than it communicates),
        the sequential (PipeDream) and Piper searches, which split any chain they can. With
        whole_batch, every stage computes the whole batch at once on one device (fewer devices
        when the search would replicate a stage). When every search keeps one stage, the ops
        halved by hand (lower_halves). Returns (plan file, strategy, report); Blocked("split",
        ...) when none splits it."""
        tried = []
        for devices in (4, 3, 2) if whole_batch else (4,):
            for strategy in ("graphpipe", "sequential", "piper"):
                try:
                    plan, report = self.search(model, strategy, devices, batch,
                                               batch if whole_batch else 0)
                except Blocked as e:
                    if strategy == "graphpipe":
                        raise  # the default search must plan every model it imports
                    tried.append(str(e))
                    continue
                if report["num_stages"] < 2:
                    tried.append(f"{strategy} on {devices}: 1 stage")
                elif whole_batch and any(len(s["devices"]) > 1 for s in report["stages"]):
                    tried.append(f"{strategy} on {devices}: a stage replicated")
                else:
                    return plan, strategy, report
        # A model small enough that every search keeps it on one device (its compute is cheaper
        # than a transfer): split by hand, as a user would, through graphpipe-plan lower.
        try:
            plan, report = self.lower_halves(model, batch)
        except Blocked as e:
            tried.append(str(e))
            raise Blocked("split", "no search splits it into 2 stages, nor lower: " +
                          "; ".join(tried))
        return plan, "by hand", report

    def lower_halves(self, model, batch):
        """graphpipe-plan lower of two stages on 2 devices, each the whole batch at once: the
        model's ops in file order (the importer writes them in topological order, so the first
        half is convex), halved. Returns (plan file, the JSON report)."""
        with open(model) as f:
            ops = re.findall(r'^  id: "(.*)"$', f.read(), re.MULTILINE)
        half = len(ops) // 2
        assignment = self.path("halves.json")
        with open(assignment, "w") as f:
            json.dump({"stages": [{"ops": ops[:half], "micro_batch": batch},
                                  {"ops": ops[half:], "micro_batch": batch}]}, f)
        plan, report = self.path("plan_halves.pb"), self.path("plan_halves.json")
        self.run("lower", [self.plan_bin, "lower", "--assignment", assignment, "--model", model,
                           "--cluster", "cpu-local", "--devices", "2", "--batch", str(batch),
                           "--optimizer", "sgd", "--lr", str(LR), "--out", plan, "--report",
                           report, "--log-level", "warn"])
        with open(report) as f:
            return plan, json.load(f)

    def reference(self, model, data, batch, iterations, checkpoint=None):
        """graphpipe-executor reference: plain SGD on the batch in data; the losses."""
        metrics = self.path(f"reference_{iterations}.json")
        flags = ["--checkpoint-dir", checkpoint] if checkpoint else []
        self.run("reference",
                 [self.exec_bin, "reference", "--model", model, "--batch", str(batch),
                  "--iterations", str(iterations), "--optimizer", "sgd", "--momentum", "0",
                  "--lr", str(LR), "--data", data, "--no-shuffle", "--metrics-out", metrics,
                  "--log-level", "warn"] + flags)
        return losses(metrics)

    def local(self, plan, data, iterations):
        """graphpipe-executor local: every rank of the plan on this machine; the losses."""
        metrics = self.path("local.json")
        self.run("local", [self.exec_bin, "local", "--plan", plan, "--iterations", str(iterations),
                           "--data", data, "--no-shuffle", "--metrics-out", metrics,
                           "--log-level", "warn"])
        return losses(metrics)

    def export(self, checkpoint, model, onnx_path):
        """graphpipe-executor export: (the source file with the checkpoint's trained weights,
        the export's warnings, e.g. a trained parameter the file has no tensor for)."""
        out = self.path("trained.onnx")
        done = self.run("export", [self.exec_bin, "--log-level", "warn", "export",
                                   "--checkpoint", checkpoint, "--model", model, "--onnx",
                                   onnx_path, "--out", out])
        warned = [line.split("[warning] ", 1)[1] for line in done.stderr.splitlines()
                  if "[warning] " in line]
        return out, warned


def trained_initializers(model):
    """The ONNX initializers an imported model trains (its param_sources), by name."""
    with open(model) as f:
        return set(re.findall(r'param_sources \{[^}]*?initializer: "([^"]+)"', f.read()))


def losses(metrics):
    with open(metrics) as f:
        return [it["loss"] for it in json.load(f)["iterations"]]


def write_data(data, inputs, target):
    """The batch as --data reads it: <input>.npy per graph input and y.target.npy."""
    os.makedirs(data, exist_ok=True)
    for name, t in inputs:
        np.save(os.path.join(data, name + ".npy"), t.numpy())
    np.save(os.path.join(data, "y.target.npy"), target.numpy())
    return data
