// ONNX's own shape inference for the importer, isolated in a child process.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <set>

#include "onnx/importer.h"
#include "onnx/shape_inference/implementation.h"

namespace gp::model::onnx_detail {
namespace {

// ONNX's own shape inference (libonnx), which records the shapes of intermediate tensors in the
// graph's value_info. torch's TorchScript exporter writes none, and an opaque operator (a node
// without a GraphPipe operator, --allow-opaque) takes its output shape from there.
//
// libonnx 1.12 crashes on some malformed models, and the importer reads untrusted files, so the
// inference runs in a child process (fork; the importer runs before any thread is started) that
// returns only the inferred value_info through a pipe. A crash, a hang past the deadline or
// anything else leaves the model as the file has it. Best effort: nodes it cannot infer (newer
// opsets than the library knows) keep what the file says.
constexpr int kShapeInferenceDeadlineMs = 20000;
constexpr size_t kMaxInferredBytes = size_t{64} << 20;

[[noreturn]] void shape_inference_child(const onnx::ModelProto& model, int out) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
  alarm(kShapeInferenceDeadlineMs / 1000 + 1);
  std::string bytes;
  try {
    onnx::ModelProto m = model;
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type_val=*/false,
                                                                   /*strict_mode_val=*/0,
                                                                   /*data_prop_val=*/true));
    onnx::GraphProto inferred;
    *inferred.mutable_value_info() = m.graph().value_info();
    bytes = inferred.SerializeAsString();
  } catch (...) {
    _exit(3);
  }
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = write(out, bytes.data() + done, bytes.size() - done);
    if (n <= 0) _exit(4);
    done += static_cast<size_t>(n);
  }
  _exit(0);
}

}  // namespace

void infer_onnx_shapes(onnx::ModelProto* model, const std::string& path,
                       std::vector<std::string>* warnings) {
  auto warn = [&](const std::string& why) {
    if (warnings != nullptr) {
      warnings->push_back(path + ": ONNX shape inference " + why +
                          "; opaque operators take their shapes from the file only");
    }
  };
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return warn("could not start (pipe)");
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    return warn("could not start (fork)");
  }
  if (child == 0) {
    close(fds[0]);
    shape_inference_child(*model, fds[1]);
  }
  close(fds[1]);
  std::string bytes;
  bool overflow = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kShapeInferenceDeadlineMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fds[0], POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[65536];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > kMaxInferredBytes) {
      overflow = true;
      break;
    }
  }
  close(fds[0]);
  kill(child, SIGKILL);  // a no-op once it has exited
  int status = 0;
  waitpid(child, &status, 0);
  if (overflow) return warn("returned more than 64 MiB");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return warn(WIFSIGNALED(status)
                    ? "crashed on this model (signal " + std::to_string(WTERMSIG(status)) + ")"
                    : "failed on this model");
  }
  onnx::GraphProto inferred;
  if (!inferred.ParseFromString(bytes)) return warn("returned an unreadable result");
  std::set<std::string> known;
  for (const auto& vi : model->graph().value_info()) known.insert(vi.name());
  for (const auto& vi : inferred.value_info()) {
    if (known.insert(vi.name()).second) *model->mutable_graph()->add_value_info() = vi;
  }
}

}  // namespace gp::model::onnx_detail
