// graphpipe-executor export: writes a checkpoint's trained parameters out, as the ONNX model
// they were imported from, or as .safetensors or .npz under the model's own tensor names.
#include <string>
#include <vector>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/logging.h"
#include "runtime/export.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

struct ExportCommandOptions {
  std::string model;
  std::string plan;
  gp::exec::ExportOptions exp;
};

gp::Status run_export(const ExportCommandOptions& o) {
  graphpipe::v1::Plan plan;
  GP_ASSIGN_OR_RETURN(auto model, model_or_plan("export", o.model, o.plan, &plan));
  std::vector<std::string> notes;
  GP_RETURN_IF_ERROR(gp::exec::export_trained(model, o.exp, &notes));
  auto log = gp::log::get("exec");
  for (const auto& n : notes) log->warn("{}", n);
  log->info("wrote the trained parameters of {} to {}", o.exp.checkpoint, o.exp.out);
  return gp::ok_status();
}

class ExportCommand final : public Command {
 public:
  explicit ExportCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "export",
            "Write a checkpoint's trained parameters out: as the ONNX model they were imported "
            "from (initializers replaced), or as .safetensors or .npz under the names the "
            "model came with (ONNX initializers: torch's state_dict keys)")) {
    cmd_->add_option("--checkpoint", o_.exp.checkpoint, "checkpoint directory")->required();
    cmd_->add_option("--out", o_.exp.out, "file to write: .onnx, .safetensors or .npz")->required();
    cmd_->add_option("--model", o_.model, "the model that was trained (or --plan)");
    cmd_->add_option("--plan", o_.plan, "a plan of the model that was trained");
    cmd_->add_option("--onnx", o_.exp.onnx,
                     "the file the model was imported from (default: the model's recorded "
                     "source); .safetensors and .npz take their names and shapes from it");
    cmd_->add_option("--names", o_.exp.names,
                     ".safetensors and .npz: source (the model's tensor names; <op>.<param> for "
                     "zoo and .pbtxt models) or ops (<op>.<param> in GraphPipe's layout)")
        ->check(CLI::IsMember({"source", "ops"}))
        ->default_val("source");
  }

  int run() override { return gp::cli::report("graphpipe-executor", run_export(o_)); }

 private:
  ExportCommandOptions o_;
};

}  // namespace

std::unique_ptr<Command> add_export_command(CLI::App& app) {
  return std::make_unique<ExportCommand>(app);
}

}  // namespace gp::exec::daemon
