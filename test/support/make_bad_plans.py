#!/usr/bin/env python3
"""Writes malformed variants of a JSON plan, one file per defect, each named after the field or
the defect its error must name: make_bad_plans.py PLAN.json OUT_DIR. Prints "<file> <expected
text>" per line."""
import copy
import json
import os
import sys

plan = json.load(open(sys.argv[1]))
out = sys.argv[2]


def drop_gradient_receive(p):
    """Removes the first gradient receive; returns the message the error must name as never
    received."""
    for prog in p["programs"]:
        for k, ins in enumerate(prog["instructions"]):
            if ins.get("kind") == "INSTRUCTION_KIND_RECV_GRADIENT":
                del prog["instructions"][k]
                m = ins.get("message", 0)
                msg = p["messages"][m]
                return "gradient message %d (edge %d, rank %d -> rank %d" % (
                    m, msg.get("edge", 0), msg.get("src_rank", 0), msg.get("dst_rank", 0))
    sys.exit("make_bad_plans.py: the plan has no gradient receive to drop")


def swap_channel_order(p):
    """Swaps a rank's first two sends to one peer; returns the channel the error must name."""
    for prog in p["programs"]:
        first = {}
        for k, ins in enumerate(prog["instructions"]):
            if not ins.get("kind", "").startswith("INSTRUCTION_KIND_SEND"):
                continue
            dst = p["messages"][ins.get("message", 0)].get("dst_rank", 0)
            if dst in first:
                instrs = prog["instructions"]
                instrs[first[dst]], instrs[k] = instrs[k], instrs[first[dst]]
                return "channel %d->%d: rank %d sends" % (prog.get("rank", 0), dst,
                                                          prog.get("rank", 0))
            first[dst] = k
    sys.exit("make_bad_plans.py: no rank sends twice to one peer")


def first_send(p):
    for prog in p["programs"]:
        for ins in prog["instructions"]:
            if ins.get("kind", "").startswith("INSTRUCTION_KIND_SEND"):
                return ins
    sys.exit("make_bad_plans.py: the plan has no send")


# Cases whose expected text depends on the plan: the mutation returns it.
computed = {"missing_gradient_receive": drop_gradient_receive,
            "channel_order_swapped": swap_channel_order}
cases = {
    "edge_to_missing_stage": (lambda p: p["edges"][0].update(dst_stage=99), "edges[0]: stages"),
    "edge_bytes_negative": (lambda p: p["edges"][0].update(bytes_per_sample="-1"),
                            "edges[0].bytes_per_sample = -1, but its tensors hold"),
    "edge_bytes_huge": (lambda p: p["edges"][0].update(bytes_per_sample=str(2**63 - 1)),
                        "edges[0].bytes_per_sample = 9223372036854775807, but its tensors hold"),
    "no_stages": (lambda p: p.update(stages=[]), "plan.stages: empty"),
    "huge_mini_batch": (lambda p: p.update(mini_batch=str(2**40)), "plan.mini_batch = 1099511627776"),
    "devices_per_node_0": (lambda p: p["cluster"].update(devices_per_node=0), "devices_per_node = 0"),
    "huge_cluster": (lambda p: p["cluster"].update(num_nodes=2**30), "devices, more than the"),
    "optimizer_99": (lambda p: p["training"].update(optimizer=99), "training.optimizer = 99"),
    "nan_learning_rate": (lambda p: p["training"].update(learning_rate="NaN"),
                          "training.learning_rate = nan"),
    "inf_learning_rate": (lambda p: p["training"].update(learning_rate="Infinity"),
                          "training.learning_rate = inf"),
    "no_programs": (lambda p: p.update(programs=[]), "has no program"),
    "format_version_1": (lambda p: p.update(format_version=1),
                         "plan.format_version = 1: a plan from an older graphpipe-plan"),
    "message_out_of_range": (lambda p: first_send(p).update(message=10**6),
                             ".message = 1000000 is not an index of plan.messages"),
    # Edited after planning: the embedded cluster or model no longer hashes to the plan's digest.
    "cluster_edited": (lambda p: p["cluster"]["device"].update(memory_capacity_bytes=str(2**33)),
                       "does not match the embedded cluster"),
    "model_edited": (lambda p: p["model"].update(description="edited"),
                     "does not match the embedded model"),
    # Fields a run reads or a tool prints, each out of its range.
    "in_flight_negative": (lambda p: p["stages"][0].update(in_flight_samples="-1"),
                           "stages[0].in_flight_samples = -1"),
    "warmup_huge": (lambda p: p["stages"][0].update(warmup_forwards=2**31 - 1),
                    "stages[0].warmup_forwards = 2147483647"),
    "nan_prediction": (lambda p: p["predicted"].update(iteration_time_s="NaN"),
                       "predicted.iteration_time_s = nan"),
    "learning_rate_0": (lambda p: p["training"].update(learning_rate=0),
                        "training.learning_rate = 0"),
    "optimizer_unspecified": (lambda p: p["training"].update(optimizer="OPTIMIZER_KIND_UNSPECIFIED"),
                              "training.optimizer = OPTIMIZER_KIND_UNSPECIFIED"),
}
for name, (mutate, expected) in cases.items():
    bad = copy.deepcopy(plan)
    mutate(bad)
    path = os.path.join(out, name + ".json")
    json.dump(bad, open(path, "w"))
    print(path, expected)
for name, mutate in computed.items():
    bad = copy.deepcopy(plan)
    expected = mutate(bad)
    path = os.path.join(out, name + ".json")
    json.dump(bad, open(path, "w"))
    print(path, expected)
open(os.path.join(out, "empty_file.pb"), "w").close()
print(os.path.join(out, "empty_file.pb"), "num_nodes = 0")
