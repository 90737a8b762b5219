#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "gp/common/logging.h"
#include "gp/model/graph.h"
#include "gp/model/model_io.h"
#include "gp/model/onnx_import.h"
#include "gp/model/summary.h"
#include "gp/model/zoo.h"

namespace gp::plan_cli {

Status run_zoo_list() {
  for (const auto& entry : model::zoo_entries()) {
    std::printf("%s\n  %.*s\n", std::string(entry.name).c_str(),
                static_cast<int>(entry.summary.size()), entry.summary.data());
    for (const auto& p : entry.params) {
      std::printf("    %-16s default %-36s %.*s\n", std::string(p.name).c_str(),
                  std::string(p.default_value).c_str(), static_cast<int>(p.help.size()),
                  p.help.data());
    }
  }
  std::printf("\nUse as --model zoo:NAME or zoo:NAME?key=value&key=value\n");
  return ok_status();
}

Status run_import(const ImportOptions& opts) {
  GP_RETURN_IF_ERROR(model::format_for_path(opts.out).status().with_context("--out"));
  model::OnnxImportOptions io;
  io.loss = opts.loss;
  io.allow_opaque = opts.allow_opaque;
  io.untie_weights = opts.untie_weights;
  io.freeze = opts.freeze;
  for (const auto& given : opts.padding_idx) {
    const size_t eq = given.rfind('=');
    int64_t row = 0;
    const char* end = given.data() + given.size();
    const auto parsed = eq == std::string::npos
                            ? std::from_chars_result{given.data(), std::errc::invalid_argument}
                            : std::from_chars(given.data() + eq + 1, end, row);
    if (eq == std::string::npos || eq == 0 || parsed.ec != std::errc() || parsed.ptr != end) {
      return invalid_argument("--padding-idx '" + given +
                              "': expected TABLE=ROW (an initializer name and a row number)");
    }
    io.padding_idx[given.substr(0, eq)] = row;
  }
  io.max_bag = opts.max_bag;
  std::vector<std::string> warnings;
  io.warnings = &warnings;
  GP_ASSIGN_OR_RETURN(auto model, model::import_onnx(opts.file, io));
  for (const auto& w : warnings) log::get("plan")->warn("{}", w);
  std::string weights_note;
  if (!opts.inline_weights) {
    // The values go next to the model, once; the model (and every plan of it) refers to them.
    const std::filesystem::path out(opts.out);
    const std::filesystem::path weights = std::filesystem::path(out).replace_extension(".weights");
    GP_RETURN_IF_ERROR(
        model::externalize_weights(model, weights.string(), weights.filename().string()));
    if (!model.weights_file().empty()) weights_note = ", weights in " + weights.string();
  }
  // For the summary below; built once the weights went to their file, so it copies no weights
  // (import_onnx validated the model).
  auto built = model::Graph::build(model);
  if (!built.ok()) return built.status();
  GP_RETURN_IF_ERROR(model::write_message(opts.out, model));
  int opaque = 0;
  for (const auto& op : model.ops()) opaque += op.type() == "opaque" ? 1 : 0;
  std::printf("imported %s: %d ops, %lld parameters, %d branch(es) -> %s%s\n", opts.file.c_str(),
              built->num_ops(), static_cast<long long>(built->total_params()),
              built->max_parallel_branches(), opts.out.c_str(), weights_note.c_str());
  if (opaque > 0) {
    std::printf("%d opaque op(s): the model can be planned, not trained or profiled\n", opaque);
  }
  return ok_status();
}

Status run_zoo_export(const ZooExportOptions& opts) {
  GP_ASSIGN_OR_RETURN(auto model, model::build_zoo_model(opts.name));
  GP_ASSIGN_OR_RETURN(auto validated, model::Graph::build(model));
  GP_RETURN_IF_ERROR(model::format_for_path(opts.out).status().with_context("--out"));
  GP_RETURN_IF_ERROR(model::write_message(opts.out, validated.model()));
  log::get("plan")->info("wrote {} ({} ops) to {}", model.name(), model.ops_size(), opts.out);
  return ok_status();
}

Status run_model_info(const ModelInfoOptions& opts) {
  GP_ASSIGN_OR_RETURN(auto model, model::load_model(opts.model));
  auto built = model::Graph::build(model);
  if (!built.ok()) return built.status().with_context("model '" + opts.model + "'");
  const auto summary = model::summarize(*built);
  if (opts.json) {
    std::printf("%s\n", model::summary_json(summary).c_str());
  } else {
    std::printf("%s", model::summary_text(summary).c_str());
  }
  return ok_status();
}

Status run_ops_list() {
  for (const auto& info : model::op_catalogue()) {
    std::printf("%-22.*s %.*s\n%-22s attributes: %.*s\n", static_cast<int>(info.type.size()),
                info.type.data(), static_cast<int>(info.summary.size()), info.summary.data(), "",
                static_cast<int>(info.attrs_help.size()), info.attrs_help.data());
  }
  return ok_status();
}

Command add_zoo_command(CLI::App& app) {
  auto* zoo = app.add_subcommand("zoo", "List or export the built-in models");
  zoo->require_subcommand(1);
  auto* list = zoo->add_subcommand("list", "List zoo models with their parameters and defaults");
  auto opts = std::make_shared<ZooExportOptions>();
  auto* zoo_export = zoo->add_subcommand("export", "Write a zoo model to a file");
  zoo_export->add_option("name", opts->name, "Zoo spec, e.g. mmt or mmt?branches=2")->required();
  zoo_export->add_option("--out", opts->out, "Output file: .pbtxt, .json or .pb")->required();
  return {zoo, [list, zoo_export, opts](const std::string&) {
            if (list->parsed()) return run_zoo_list();
            if (zoo_export->parsed()) return run_zoo_export(*opts);
            return ok_status();
          }};
}

Command add_model_info_command(CLI::App& app) {
  auto opts = std::make_shared<ModelInfoOptions>();
  auto* info = app.add_subcommand(
      "model-info", "Summarise a model: operators, parameters, FLOPs, activations, branches");
  info->add_option("--model", opts->model, "zoo:NAME[?k=v&...] or a model file")->required();
  info->add_flag("--json", opts->json, "Print one JSON object instead of a table");
  return {info, [opts](const std::string&) { return run_model_info(*opts); }};
}

Command add_ops_command(CLI::App& app) {
  auto* ops = app.add_subcommand("ops", "List the operator catalogue with each op's attributes");
  return {ops, [](const std::string&) { return run_ops_list(); }};
}

Command add_import_command(CLI::App& app) {
  auto opts = std::make_shared<ImportOptions>();
  auto* import = app.add_subcommand(
      "import", "Convert an ONNX model (torch.onnx.export) into a GraphPipe model file");
  import->add_option("file", opts->file, "the .onnx file")->required();
  import->add_option("--out", opts->out, "model file to write (.pbtxt, .json or .pb)")->required();
  import
      ->add_option("--loss", opts->loss,
                   "loss attached to every graph output: mse (against a new target input) or "
                   "cross_entropy (against new int64 labels)")
      ->capture_default_str();
  import->add_flag("--allow-opaque", opts->allow_opaque,
                   "keep ONNX nodes without a GraphPipe operator as opaque operators (cost from a "
                   "FLOP estimate): the model can be planned but not trained or profiled");
  import->add_flag("--inline-weights", opts->inline_weights,
                   "keep the imported parameter values inside the model file (default: in "
                   "<out>.weights next to it, which the model and its plans refer to by hash)");
  import
      ->add_option("--max-bag", opts->max_bag,
                   "nn.EmbeddingBag with offsets (bags of varying length): give every sample "
                   "this many ids, padded with -1; --data then reads <ids>.npy and "
                   "<offsets>.npy as torch takes them")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  import->add_flag("--untie-weights", opts->untie_weights,
                   "import a tied (shared) weight as independent copies, one per operator that "
                   "reads it, trained separately; without it the copies are tied (their "
                   "gradients summed), and copies in different layouts are refused");
  import->add_option("--freeze", opts->freeze,
                     "an initializer that is a registered buffer, not a parameter (an additive "
                     "attention mask, a fixed table), or a parameter frozen in torch "
                     "(requires_grad_(False), which no exporter records): kept constant, never "
                     "trained; repeatable. "
                     "torch's dynamo exports mark their buffers, so buffers need it only in "
                     "legacy exports, where the import warns about an initializer added as a "
                     "learned bias");
  import->add_option("--padding-idx", opts->padding_idx,
                     "TABLE=ROW: the embedding table initializer TABLE was torch's "
                     "nn.Embedding(padding_idx=ROW): that row is looked up as any other but "
                     "never trained; repeatable. torch's dynamo exports record padding_idx, so "
                     "this is for legacy exports, where the import warns about a table with one "
                     "all-zero row");
  return {import, [opts](const std::string&) { return run_import(*opts); }};
}

}  // namespace gp::plan_cli
