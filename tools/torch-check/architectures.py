#!/usr/bin/env python3
"""Whole architectures from PyTorch, through GraphPipe, against PyTorch's own training steps.

For each architecture (modern_models.MODERN: issue 37's 13; classic_models.CLASSIC: torchvision
CNNs with random weights, recommendation, MLP and transformer models; user_models.USER: the
same families as their users write them, Hugging Face's GPT-2 and BERT among them;
library_models.LIBRARY: the models torchvision, timm and Hugging Face's transformers ship, in
small configurations) and each export variant (torch_side.VARIANTS), this script
  1. exports the model with torch.onnx.export (Dropout and stochastic depth set to 0: GraphPipe
     passes Dropout through and refuses random draws),
  2. takes 3 SGD steps (lr 0.01) in PyTorch on the MSE loss of a seeded batch of 4 against a
     seeded target: 4 losses (before each step and after the last) and the output after them,
  3. imports the export with `graphpipe-plan import` (no flag but --max-bag for bags of
     varying length, and for legacy exports --padding-idx for nn.Embedding's padding rows, which
     that exporter does not record and the import warns about, and --freeze of the model's
     buffers where the import's refusal or a warning names the flag for one of them, then the
     row says so) and trains the same steps with `graphpipe-executor reference --data`,
  4. multi-rank: plans the model on 4 CPU devices of this machine in at least 2 stages
     (`graphpipe-plan search --cluster cpu-local`; the sequential and Piper searches when
     GraphPipe's keeps a small model on one device, and when they do too, its ops halved by
     hand through `graphpipe-plan lower`) and trains the same steps with every rank
     (`graphpipe-executor local --data`): the losses must equal the reference run's,
  5. export: writes the reference run's checkpoint after the 3 steps back into the source file
     (`graphpipe-executor export`) and runs it with onnxruntime on the same batch: its output
     must be PyTorch's after the same steps,
and prints one table row.

A row passes when
  - every loss is within 1e-5 of PyTorch's (relative), or -- for networks whose fp32 step is
    ill-conditioned (batch norm over a few values on tiny feature maps) -- ours is at least as
    close to PyTorch's float64 result as PyTorch's own fp32 is (within twice its error),
  - the multi-rank plan has >= 2 stages and its losses are within 1e-6 (relative) of the
    reference run's, or as close to PyTorch's float64 result as PyTorch's fp32 is (micro-batches
    and replicas sum gradients in another order; a model with batch norm in train mode is
    planned with the whole batch on each device at once: its statistics are over the samples a
    device holds),
  - the exported model's output is within 1e-4 of PyTorch's (max abs error relative to the max
    abs value; the same float64 rule applies).
Eval-mode exports train like the others (no model here has dropout left); a model with batch
norm in eval mode is n/a (PyTorch normalises with the running statistics: the export folds it,
or GraphPipe trains it with batch statistics). Graph-only exports (export_params=False) are
imported and planned only. Also not ours to judge, marked n/a:
  - what torch cannot export, and exports ONNX's checker rejects,
  - the steps of an export that lacks some of the module's parameters (dynamo's optimiser
    folds CLIP's exp(logit_scale) into a constant and drops all-zero biases): the file cannot
    train them, so when our losses differ from PyTorch's, they are compared with PyTorch's with
    those parameters frozen, and the row is n/a if they match (it fails if not),
  - the export check where onnxruntime cannot run torch's own file or computes it unlike
    PyTorch (a dynamo export's train-mode batch norm).

Needs torch and onnxruntime (torchvision, timm and transformers for their rows, else n/a) in the
Python running it;
nothing is downloaded (random weights). Usage:
  python3 tools/torch-check/architectures.py [--bin build/bin] [--only resnet18,nanogpt]
          [--modern] [--variants dynamo_train,legacy17,dynamo] [--out DIR]
Exit status 1 when any row fails.
"""
import argparse
import dataclasses
import math
import operator
import os
import re
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import classic_models  # noqa: E402
import library_models  # noqa: E402
import modern_models  # noqa: E402
import user_models  # noqa: E402
import torch_side  # noqa: E402
from graphpipe_side import Blocked, GraphPipe, trained_initializers, write_data  # noqa: E402

BATCH = 4
TOLERANCE = 1e-5  # our losses against PyTorch's (relative, per loss): issue 37's bar
RANKS_TOLERANCE = 1e-6  # the multi-rank run against the reference run (relative, per loss)
EXPORT_TOLERANCE = 1e-4  # onnxruntime's output against PyTorch's (relative to its max abs)
MODERN_NAMES = {name for name, _, _ in modern_models.MODERN}
ARCHITECTURES = (classic_models.CLASSIC + modern_models.MODERN + user_models.USER +
                 library_models.LIBRARY)


@dataclasses.dataclass
class Row:
    name: str
    variant: str
    result: str = "ok"  # ok, FAIL, or n/a (not ours to judge)
    imported: str = ""
    torch_losses: list = dataclasses.field(default_factory=list)
    our_losses: list = dataclasses.field(default_factory=list)
    loss_diff: float = None
    ranks: str = ""
    exported: str = ""
    notes: list = dataclasses.field(default_factory=list)
    blocker: str = ""  # the first failure

    def fail(self, why):
        if self.result != "FAIL":
            self.result, self.blocker = "FAIL", why

    def not_applicable(self, why):
        if self.result != "FAIL":
            self.result = "n/a"
        self.notes.append(why)
        return self


def worst_relative(got, want):
    if len(got) != len(want):
        return float("inf")
    return max((abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, want)), default=0.0)


def fmt(values):
    return " ".join(f"{v:.6g}" for v in values)


def first_line(e):
    """An exception's message in a line: torch.export's own summary where it gives one (its
    first line only says which step failed), without terminal colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    lines = [line.strip() for line in text.split("## Exception summary")[-1].splitlines()
             if line.strip()]
    return lines[0][:200] if lines else type(e).__name__


def listed(names, most=3):
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


class Architecture:
    """One model with its batch and target, and PyTorch's steps on them (each computed once)."""

    def __init__(self, name, build, make_inputs):
        self.name = name
        torch.manual_seed(0)
        self.model = torch_side.no_dropout(build())
        self.inputs = make_inputs(torch.Generator().manual_seed(1))
        with torch.no_grad():
            y = self.model.eval()(*[t for _, t in self.inputs])
        self.target = torch.randn(y.shape, generator=torch.Generator().manual_seed(2))
        # Bags of varying length: every sample holds up to 4 ids (dlrm_offsets' longest bag).
        self.max_bag = 4 if any(n.startswith("off") for n, _ in self.inputs) else 0
        self.batch_norm = torch_side.has_batch_norm(self.model)
        self.steps = {}  # torch_steps' results by (train mode, dtype, frozen parameters)

    def torch_steps(self, train_mode, dtype=torch.float32, frozen=()):
        key = (train_mode, dtype, tuple(frozen))
        if key not in self.steps:
            self.steps[key] = torch_side.train(self.model, self.inputs, self.target, train_mode,
                                               dtype, frozen)
        return self.steps[key]


def judge(arch, train_mode, frozen, got, pick, error, tolerance, what, notes):
    """got (pick selects from a torch_steps result) against PyTorch's: (whether within
    tolerance, the difference). An fp32 step that is ill-conditioned is judged against float64
    instead: ours within twice PyTorch fp32's own error."""
    want = pick(arch.torch_steps(train_mode, frozen=frozen))
    diff = error(got, want)
    if diff <= tolerance:
        return True, diff
    if diff == float("inf"):  # a different number of losses or another output shape
        return False, diff
    exact = pick(arch.torch_steps(train_mode, torch.float64, frozen))
    theirs, mine = error(want, exact), error(got, exact)
    notes.append(f"{what} vs float64: ours {mine:.1e}, PyTorch fp32 {theirs:.1e}")
    return math.isfinite(theirs) and mine <= 2 * theirs + tolerance, diff


def check_losses(row, arch, train_mode, onnx_path, model, got):
    """Our losses against PyTorch's. Returns the parameters PyTorch keeps frozen for the
    comparison: none, unless the export lost some (torch_side.folded_parameters) and PyTorch
    with those frozen trains as we do -- the file itself cannot train them."""
    row.our_losses = got
    notes = []
    losses = operator.attrgetter("losses")
    ok, row.loss_diff = judge(arch, train_mode, (), got, losses, worst_relative, TOLERANCE,
                              "losses", notes)
    if ok:
        row.notes += notes
        return ()
    folded = tuple(torch_side.folded_parameters(arch.model, onnx_path,
                                                trained_initializers(model)))
    if folded:
        ok, diff = judge(arch, train_mode, folded, got, losses, worst_relative, TOLERANCE,
                         "losses", [])
        if ok:
            want = arch.torch_steps(train_mode, frozen=folded).losses
            row.not_applicable(f"the export lacks {listed(folded)} (torch's exporter folded or "
                               f"dropped them), so it cannot train as the module; PyTorch with "
                               f"them frozen: {fmt(want)} (ours within {diff:.1e})")
            return folded
    row.notes += notes
    row.fail(f"losses: {row.loss_diff:.2e} relative from PyTorch's, over {TOLERANCE:g}")
    return ()


def check_ranks(row, gp, arch, train_mode, frozen, model, data, reference):
    """Every rank of a plan of >= 2 stages trains the reference run's losses. Batch norm in
    train mode normalises over the samples one device holds at once, so such a model is planned
    with the whole batch as one micro-batch and no stage replicated (as torch's DDP, without
    SyncBatchNorm, would differ from one process just the same). Losses that differ from the
    reference run's pass where they are as close to float64 as PyTorch's fp32 is: micro-batches
    and replicas sum gradients in another order, and an ill-conditioned step (a loss falling
    300-fold in 3 steps) magnifies that as it does PyTorch's fp32."""
    whole_batch = train_mode and arch.batch_norm
    if whole_batch:
        row.notes.append("multi-rank: batch norm, so one micro-batch and no replicas")
    try:
        plan, strategy, report = gp.split_plan(model, BATCH, whole_batch)
        row.ranks = f"{report['num_stages']} stages ({strategy})"
        ranks = gp.local(plan, data, len(reference))
    except Blocked as e:
        row.ranks = (row.ranks + ", " if row.ranks else "") + f"{e.step} failed"
        row.fail(str(e))
        return
    diff = worst_relative(ranks, reference)
    if diff <= RANKS_TOLERANCE:
        row.ranks += ", equal"
        return
    losses = operator.attrgetter("losses")
    exact = losses(arch.torch_steps(train_mode, torch.float64, frozen))
    theirs = worst_relative(losses(arch.torch_steps(train_mode, frozen=frozen)), exact)
    mine = worst_relative(ranks, exact)
    if math.isfinite(theirs) and mine <= 2 * theirs + RANKS_TOLERANCE:
        row.notes.append(f"multi-rank vs float64: ours {mine:.1e}, PyTorch fp32 {theirs:.1e}")
        row.ranks += f", {diff:.1e} off"
        return
    row.ranks += f", DIFFER {diff:.1e}"
    row.fail(f"local: losses {fmt(ranks)} against reference {fmt(reference)}")


def check_export(row, gp, arch, train_mode, frozen, model, data, onnx_path):
    """The reference run's weights after the steps, exported, run by onnxruntime: PyTorch's
    output after the same steps (with the parameters in frozen kept constant)."""
    checkpoint = gp.path("checkpoint")
    shutil.rmtree(checkpoint, ignore_errors=True)
    try:
        gp.reference(model, data, BATCH, torch_side.STEPS, checkpoint)
        trained, warned = gp.export(checkpoint, model, onnx_path)
    except Blocked as e:
        row.exported = f"{e.step} failed"
        row.fail(str(e))
        return
    if warned:
        row.notes.append(f"export warned: {warned[0]}" +
                         (f" (and {len(warned) - 1} more)" if len(warned) > 1 else ""))
    steps = arch.torch_steps(train_mode, frozen=frozen)
    # onnxruntime judges the export only where it computes torch's own file as PyTorch does
    # (it runs a train-mode dynamo batch norm with the running statistics).
    try:
        untrained = torch_side.onnxruntime_output(onnx_path, arch.inputs)
    except Exception as e:
        row.exported = "n/a"
        row.notes.append(f"onnxruntime cannot run torch's export: {first_line(e)}")
        return
    source_err = torch_side.output_error(untrained, steps.output_before)
    if source_err > EXPORT_TOLERANCE:
        row.exported = "n/a"
        row.notes.append(f"onnxruntime computes torch's own export {source_err:.1e} from "
                         f"PyTorch's forward: it cannot judge the trained one")
        return
    try:
        got = torch_side.onnxruntime_output(trained, arch.inputs)
    except Exception as e:
        row.exported = "ort failed"
        row.fail(f"onnxruntime on trained.onnx (it runs the source file): {first_line(e)}")
        return
    # The steps must move the output further than the tolerance, or the check proves nothing.
    moved = torch_side.output_error(untrained, steps.output_after)
    if moved <= EXPORT_TOLERANCE:
        row.notes.append(f"the steps moved the output by only {moved:.1e}")
    ok, err = judge(arch, train_mode, frozen, got, operator.attrgetter("output_after"),
                    torch_side.output_error, EXPORT_TOLERANCE, "export", row.notes)
    row.exported = f"{err:.1e}"
    if not ok:
        # Whether the file holds what we trained: its loss against our loss after the steps.
        loss = float(np.mean((got.astype(np.float64) - arch.target.numpy()) ** 2))
        row.fail(f"export: onnxruntime's output {err:.1e} from PyTorch's, over "
                 f"{EXPORT_TOLERANCE:g} (its loss {loss:.7g}, ours after the steps "
                 f"{row.our_losses[-1]:.7g})")


def check(arch, variant, gp):
    """One (architecture, variant) row."""
    row = Row(arch.name, variant)
    spec = torch_side.VARIANTS[variant]
    onnx_path = gp.path(arch.name + ".onnx")
    try:
        torch_side.export(arch.model, arch.inputs, onnx_path, variant)
    except Exception as e:  # the exporter's own failure: not ours to judge
        return row.not_applicable(f"torch could not export: {first_line(e)}")
    try:
        onnx.checker.check_model(onnx_path)
    except Exception as e:  # nor an export ONNX itself rejects
        return row.not_applicable(f"torch wrote an invalid model: {first_line(e)}")
    try:
        # The legacy exporter does not record nn.Embedding(padding_idx): the import warns and
        # names the flag; the user, who knows the model, passes it.
        padding = {} if spec["kwargs"].get("dynamo") else torch_side.padding_rows(arch.model, onnx_path)
        try:
            model, stderr = gp.import_onnx(onnx_path, arch.max_bag, padding)
            # An initializer added to activations imports as a learned bias, with a warning
            # naming --freeze: where it is one of the model's buffers (BART's
            # final_logits_bias), the user, who knows the model, freezes them.
            buffers = [] if spec["kwargs"].get("dynamo") else torch_side.buffer_initializers(
                arch.model, onnx_path)
            if any(f"--freeze {b} " in stderr for b in buffers):
                model, _ = gp.import_onnx(onnx_path, arch.max_bag, padding, buffers)
                row.notes.append(f"imported with --freeze of its {len(buffers)} buffers "
                                 f"({buffers[0]}, ...), which a warning named")
        except Blocked as e:
            # Nor its buffers: where the import's refusal says to --freeze one, the user names
            # the model's buffers, and the row says so.
            buffers = [] if spec["kwargs"].get("dynamo") else torch_side.buffer_initializers(
                arch.model, onnx_path)
            # (The refusal, not the warnings before it: a scalar's warning names the flag too.)
            refusal = e.stderr[e.stderr.find("error:"):] if "error:" in e.stderr else ""
            if "--freeze" not in refusal or not buffers:
                raise
            model, _ = gp.import_onnx(onnx_path, arch.max_bag, padding, buffers)
            row.notes.append(f"imported with --freeze of its {len(buffers)} buffers "
                             f"({buffers[0]}, ...)")
    except Blocked as e:
        row.imported = "refused"
        row.fail(str(e))
        return row
    row.imported = "ok"
    if spec.get("graph_only"):
        try:
            _, strategy, report = gp.split_plan(model, BATCH)
            row.ranks = f"{report['num_stages']} stages ({strategy}), planned"
        except Blocked as e:
            row.fail(str(e))
        row.notes.append("graph only: imported and planned")
        return row
    if not spec["train"] and arch.batch_norm:
        return row.not_applicable("eval-mode batch norm: PyTorch normalises with the running "
                                  "statistics, the export folds it or GraphPipe trains it with "
                                  "batch statistics (the import warns)")
    row.torch_losses = arch.torch_steps(spec["train"]).losses
    data = write_data(gp.path("data"), arch.inputs, arch.target)
    try:
        got = gp.reference(model, data, BATCH, torch_side.STEPS + 1)
    except Blocked as e:
        row.fail(str(e))
        return row
    frozen = check_losses(row, arch, spec["train"], onnx_path, model, got)
    check_ranks(row, gp, arch, spec["train"], frozen, model, data, got)
    check_export(row, gp, arch, spec["train"], frozen, model, data, onnx_path)
    return row


COLUMNS = [("architecture", 20), ("variant", 14), ("result", 6), ("import", 7),
           ("torch losses", 38), ("ours", 38), ("rel.diff", 8), ("multi-rank", 30),
           ("export", 10)]


def print_row(values):
    cells = [f"{v:<{w}}" for v, (_, w) in zip(values, COLUMNS)]
    print(" ".join(cells + [values[len(COLUMNS)]]).rstrip())
    sys.stdout.flush()


def print_result(row, seconds):
    diff = "" if row.loss_diff is None else f"{row.loss_diff:.1e}"
    note = "; ".join(([f"BLOCKER {row.blocker}"] if row.blocker else []) + row.notes +
                     [f"{seconds:.0f} s"])
    print_row([row.name, row.variant, row.result, row.imported, fmt(row.torch_losses),
               fmt(row.our_losses), diff, row.ranks, row.exported, note])


def main():
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                  "bin"))
    ap.add_argument("--only", default="", help="comma-separated architecture names")
    ap.add_argument("--modern", action="store_true", help="only issue 37's architectures")
    ap.add_argument("--variants", default=",".join(torch_side.VARIANTS))
    ap.add_argument("--out", default="", help="keep the exports here (default: a temp dir)")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    variants = args.variants.split(",")
    for v in variants:
        if v not in torch_side.VARIANTS:
            ap.error(f"--variants: unknown variant '{v}' (known: {', '.join(torch_side.VARIANTS)})")
    for binary in ("graphpipe-plan", "graphpipe-executor"):
        if not os.access(os.path.join(args.bin, binary), os.X_OK):
            ap.error(f"--bin: no executable {binary} in '{args.bin}'")
    out = args.out or tempfile.mkdtemp(prefix="gp_torch_check_")
    print(f"torch {torch.__version__}; batch {BATCH}, {torch_side.STEPS} SGD steps (lr "
          f"{torch_side.LR}); losses within {TOLERANCE:g}, multi-rank within "
          f"{RANKS_TOLERANCE:g}, export within {EXPORT_TOLERANCE:g} (relative)")
    print_row([name for name, _ in COLUMNS] + ["note"])
    counts = {"ok": 0, "FAIL": 0, "n/a": 0}
    for name, build, make_inputs in ARCHITECTURES:
        if (only and name not in only) or (args.modern and name not in MODERN_NAMES):
            continue
        try:
            arch = Architecture(name, build, make_inputs)
        except ImportError as e:  # a library's models without the library
            for variant in variants:
                counts["n/a"] += 1
                print_result(Row(name, variant, result="n/a", notes=[first_line(e)]), 0)
            continue
        for variant in variants:
            work = os.path.join(out, f"{name}_{variant}")
            os.makedirs(work, exist_ok=True)
            started = time.time()
            row = check(arch, variant, GraphPipe(args.bin, work))
            counts[row.result] += 1
            print_result(row, time.time() - started)
    print(", ".join(f"{n} {k}" for k, n in counts.items()) +
          (f"; exports kept in {out}" if args.out else ""))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
