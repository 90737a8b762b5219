// graphpipe-plan: inspect models, search graph-pipeline plans, and check plan files.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/logging.h"
#include "gp/common/version.h"

namespace {

using gp::plan_cli::PlanFileOptions;
using gp::plan_cli::SearchOptions;

void add_search_options(CLI::App* cmd, SearchOptions* o, bool compare) {
  cmd->add_option("--model", o->model, "zoo:NAME[?k=v&...] or a model file (.pbtxt, .json, .pb)")
      ->required();
  cmd->add_option("--cluster", o->cluster,
                  "cluster preset (summit-v100, dgx-a100, dgx-h100, h200, cpu-local) or a file")
      ->capture_default_str();
  cmd->add_option("--devices", o->devices,
                  "use the first N devices of the cluster, whole nodes first (default: all)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--exclude-devices", o->exclude_devices,
                  "ranks of the cluster not to use, e.g. failed GPUs: 3,17")
      ->delimiter(',');
  cmd->add_option("--batch", o->batch, "mini-batch size: samples per optimizer step")->required();
  if (!compare) {
    cmd->add_option("--strategy", o->strategy, "graphpipe, sequential (PipeDream) or piper")
        ->capture_default_str();
  } else {
    cmd->add_option("--strategies", o->strategies, "strategies to compare")
        ->delimiter(',')
        ->capture_default_str();
  }
  cmd->add_option("--profile", o->profile,
                  "profile DB from graphpipe-profile (measured costs; analytic model otherwise)");
  cmd->add_option("--micro-batches", o->micro_batches,
                  "micro-batch sizes to try, powers of two (default: all dividing --batch)")
      ->delimiter(',');
  cmd->add_option("--optimizer", o->optimizer, "adam, momentum or sgd (memory and plan config)")
      ->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32, or bf16 (bf16 compute, fp32 master)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "parameter initialisation seed stored in the plan")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr,
                  "learning rate stored in the plan (default: 0.01 for sgd and momentum, 0.001 "
                  "for adam)");
  cmd->add_option("--momentum", o->momentum, "momentum factor (--optimizer momentum; default 0.9)");
  cmd->add_option("--beta1", o->beta1, "Adam's first-moment decay (default 0.9)");
  cmd->add_option("--beta2", o->beta2, "Adam's second-moment decay (default 0.999)");
  cmd->add_option("--eps", o->eps, "Adam's epsilon (default 1e-8)");
  cmd->add_option("--weight-decay", o->weight_decay,
                  "L2 weight decay, as PyTorch's weight_decay (default 0)");
  cmd->add_option("--clip-grad-norm", o->clip_grad_norm,
                  "scale the gradients so that their L2 norm over the whole model is at most "
                  "this, as torch.nn.utils.clip_grad_norm_ (default 0: no clipping)");
  cmd->add_option("--lr-schedule", o->lr_schedule,
                  "constant, or warmup-cosine: linear warm-up over --warmup-steps, then cosine "
                  "decay to --min-lr at --total-steps")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o->warmup_steps, "warm-up steps of warmup-cosine");
  cmd->add_option("--total-steps", o->total_steps, "steps at which warmup-cosine reaches --min-lr");
  cmd->add_option("--min-lr", o->min_lr, "the learning rate warmup-cosine decays to (default 0)");
  auto* per_stage = cmd->add_flag(
      "--per-stage-microbatch", o->per_stage_microbatch,
      "then refine: let single stages double or halve their micro-batch when the simulated "
      "throughput improves (the default for graphpipe; this turns it on for the baselines too)");
  cmd->add_flag("--uniform-microbatch", o->uniform_microbatch,
                "graphpipe without that refinement: one micro-batch size for every stage, as the "
                "paper evaluates")
      ->excludes(per_stage);
  cmd->add_option("--piper-downset-limit", o->piper_downset_limit,
                  "Piper gives up beyond this many downsets, as Piper itself does")
      ->capture_default_str();
  cmd->add_flag("--piper-compress-branches", o->piper_compress_branches,
                "Piper plans each parallel branch as one unit (PipeDream's compress_branches), "
                "so it runs on multi-branch models but never cuts inside a branch");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gp::plan_cli;
  CLI::App app{
      "graphpipe-plan: plan graph-pipeline-parallel training.\n"
      "Models come from the built-in zoo (--model zoo:mmt) or a file (.pbtxt, .json, .pb).\n"
      "Typical use: graphpipe-plan search --model zoo:mmt --cluster summit-v100 --devices 32 "
      "--batch 256 --out plan.pb"};
  app.set_version_flag("--version", std::string("graphpipe-plan ") + GP_VERSION_STRING);
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error or off (default info, or $GP_LOG_LEVEL)");
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may follow the subcommand

  auto* zoo = app.add_subcommand("zoo", "List or export the built-in models");
  zoo->require_subcommand(1);
  zoo->add_subcommand("list", "List zoo models with their parameters and defaults");
  ZooExportOptions export_opts;
  auto* zoo_export = zoo->add_subcommand("export", "Write a zoo model to a file");
  zoo_export->add_option("name", export_opts.name, "Zoo spec, e.g. mmt or mmt?branches=2")
      ->required();
  zoo_export->add_option("--out", export_opts.out, "Output file: .pbtxt, .json or .pb")->required();

  ModelInfoOptions info_opts;
  auto* info = app.add_subcommand(
      "model-info", "Summarise a model: operators, parameters, FLOPs, activations, branches");
  info->add_option("--model", info_opts.model, "zoo:NAME[?k=v&...] or a model file")->required();
  info->add_flag("--json", info_opts.json, "Print one JSON object instead of a table");

  app.add_subcommand("ops", "List the operator catalogue with each op's attributes");

  ImportOptions import_opts;
  auto* import = app.add_subcommand(
      "import", "Convert an ONNX model (torch.onnx.export) into a GraphPipe model file");
  import->add_option("file", import_opts.file, "the .onnx file")->required();
  import->add_option("--out", import_opts.out, "model file to write (.pbtxt, .json or .pb)")
      ->required();
  import
      ->add_option("--loss", import_opts.loss,
                   "loss attached to every graph output: mse (against a new target input) or "
                   "cross_entropy (against new int64 labels)")
      ->capture_default_str();
  import->add_flag("--allow-opaque", import_opts.allow_opaque,
                   "keep ONNX nodes without a GraphPipe operator as opaque operators (cost from a "
                   "FLOP estimate): the model can be planned but not trained or profiled");
  import->add_flag("--inline-weights", import_opts.inline_weights,
                   "keep the imported parameter values inside the model file (default: in "
                   "<out>.weights next to it, which the model and its plans refer to by hash)");
  import
      ->add_option("--max-bag", import_opts.max_bag,
                   "nn.EmbeddingBag with offsets (bags of varying length): give every sample "
                   "this many ids, padded with -1; --data then reads <ids>.npy and "
                   "<offsets>.npy as torch takes them")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import->add_flag("--untie-weights", import_opts.untie_weights,
                   "give every operator that reads a tied (shared) weight its own copy; without "
                   "it such models are refused, since training would no longer tie them");

  SearchOptions search_opts;
  auto* search = app.add_subcommand(
      "search", "Search a plan: stages, devices, micro-batch and schedule; write it to --out");
  add_search_options(search, &search_opts, /*compare=*/false);
  search->add_option("--out", search_opts.out, "plan file to write (.pb, .pbtxt or .json)")
      ->required();
  search->add_option("--report", search_opts.report, "write a JSON report of the search");
  search->add_option("--trace", search_opts.trace, "write the simulated Chrome trace (Perfetto)");
  search->add_option("--dot", search_opts.dot, "write the stage graph as Graphviz");

  gp::plan_cli::LowerOptions lower_opts;
  auto* lower = app.add_subcommand(
      "lower",
      "Turn your own stage assignment (from PipeDream, Piper, Megatron or by hand) into a "
      "verified plan: placed, scheduled, lowered and simulated like a searched plan "
      "(format: docs/plan-format.md)");
  lower
      ->add_option("--assignment", lower_opts.assignment,
                   "stage assignment file (.json, .pbtxt or .pb): per stage its op ids, "
                   "replicas and optionally micro_batch")
      ->required();
  add_search_options(lower, &lower_opts.search, /*compare=*/false);
  lower->remove_option(lower->get_option("--strategy"));
  lower->remove_option(lower->get_option("--per-stage-microbatch"));
  lower->remove_option(lower->get_option("--uniform-microbatch"));
  lower->remove_option(lower->get_option("--piper-downset-limit"));
  lower->remove_option(lower->get_option("--piper-compress-branches"));
  lower
      ->add_option("--lowering", lower_opts.lowering,
                   "chain (tensors relayed along a sequential pipeline), dag (graph pipeline) or "
                   "best (both; the faster simulated plan is written)")
      ->capture_default_str();
  lower
      ->add_option("--compare", lower_opts.compare,
                   "also search with these strategies and show them in the same table, e.g. "
                   "graphpipe,sequential")
      ->delimiter(',');
  lower->add_option("--out", lower_opts.search.out, "plan file to write (.pb, .pbtxt or .json)")
      ->required();
  lower->add_option("--report", lower_opts.search.report, "write a JSON report of the plan");
  lower->add_option("--trace", lower_opts.search.trace, "write the simulated Chrome trace");
  lower->add_option("--dot", lower_opts.search.dot, "write the stage graph as Graphviz");

  SearchOptions compare_opts;
  auto* compare =
      app.add_subcommand("compare", "Search with several strategies and print a comparison table");
  add_search_options(compare, &compare_opts, /*compare=*/true);
  compare->add_option("--out-dir", compare_opts.out_dir,
                      "write each strategy's plan, report, trace and stage graph here");

  ReplanOptions replan_opts;
  auto* replan = app.add_subcommand(
      "replan",
      "Plan a plan's model and training again for the devices left after a failure (the "
      "executor resumes it from the last checkpoint)");
  replan->add_option("--plan", replan_opts.plan, "the plan that was running")->required();
  replan->add_option("--out", replan_opts.out, "new plan file")->required();
  replan
      ->add_option("--exclude-ranks", replan_opts.exclude_ranks,
                   "ranks of the old plan whose devices are gone, e.g. 2 or 1,5")
      ->delimiter(',');
  replan->add_option("--devices", replan_opts.devices,
                     "use only the first N remaining devices (default: all of them)");
  replan->add_option("--profile", replan_opts.profile, "profile DB for measured costs");

  PlanFileOptions sim_opts, inspect_opts, verify_opts;
  auto* simulate = app.add_subcommand("simulate", "Simulate a plan file: time, bubbles, memory");
  simulate->add_option("--plan", sim_opts.plan, "plan file")->required();
  simulate->add_option("--report", sim_opts.report, "write a JSON report");
  simulate->add_option("--trace", sim_opts.trace, "write the simulated Chrome trace");
  simulate->add_option("--profile", sim_opts.profile, "profile DB for measured costs");
  auto* inspect = app.add_subcommand("inspect", "Print a readable summary with the stage graph");
  inspect->add_option("--plan", inspect_opts.plan, "plan file")->required();
  inspect->add_flag("--json", inspect_opts.json,
                    "print the plan's shape as JSON (ranks, nodes, devices_per_node, stages, "
                    "mini_batch, model hash), for scripts");
  auto* verify = app.add_subcommand(
      "verify", "Check a plan: coverage, acyclicity, memory, matched sends, deadlock freedom");
  verify->add_option("--plan", verify_opts.plan, "plan file")->required();
  verify->add_option("--model", verify_opts.model, "reject the plan unless it is for this model");
  verify->add_option("--cluster", verify_opts.cluster,
                     "reject the plan unless it is for this cluster");
  verify->add_option("--devices", verify_opts.devices, "with --cluster: its first N devices");
  verify->add_option("--profile", verify_opts.profile, "profile DB for measured costs");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
  }
  if (auto st = gp::log::init("graphpipe-plan", log_level); !st.ok()) {
    return gp::cli::report("graphpipe-plan", st);
  }
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
  search_opts.command_line = compare_opts.command_line = replan_opts.command_line = command_line;
  lower_opts.search.command_line = command_line;

  gp::Status status;
  if (zoo->got_subcommand("list")) {
    status = run_zoo_list();
  } else if (zoo->got_subcommand("export")) {
    status = run_zoo_export(export_opts);
  } else if (import->parsed()) {
    status = run_import(import_opts);
  } else if (replan->parsed()) {
    status = run_replan(replan_opts);
  } else if (info->parsed()) {
    status = run_model_info(info_opts);
  } else if (app.got_subcommand("ops")) {
    status = run_ops_list();
  } else if (search->parsed()) {
    status = run_search(search_opts);
  } else if (lower->parsed()) {
    status = run_lower(lower_opts);
  } else if (compare->parsed()) {
    status = run_compare(compare_opts);
  } else if (simulate->parsed()) {
    status = run_simulate(sim_opts);
  } else if (inspect->parsed()) {
    status = run_inspect(inspect_opts);
  } else if (verify->parsed()) {
    status = run_verify(verify_opts);
  }
  return gp::cli::report("graphpipe-plan", status);
}
