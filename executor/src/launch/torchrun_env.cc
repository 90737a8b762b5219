#include "launch/torchrun_env.h"

#include <cstdlib>

namespace gp::exec::launch {
namespace {

// A decimal integer and nothing else (no sign, no spaces); nullopt otherwise or on overflow.
std::optional<int> parse_number(const std::string& s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::atoi(s.c_str());
}

// RANK or WORLD_SIZE into `flag` (named `flag_name`), within [low, high].
Status apply_count(const EnvLookup& env, const char* var, const std::string& flag_name, int low,
                   int high, std::optional<int>* flag) {
  const char* raw = env(var);
  if (raw == nullptr) {
    if (!flag->has_value()) {
      return invalid_argument(flag_name + " is required (or $" + var + ", as torchrun sets it)");
    }
    return ok_status();
  }
  const auto value = parse_number(raw);
  if (!value || *value < low || *value > high) {
    return invalid_argument("$" + std::string(var) + "='" + raw + "' must be an integer in [" +
                            std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  if (flag->has_value() && **flag != *value) {
    return invalid_argument(flag_name + " " + std::to_string(**flag) + " conflicts with $" + var +
                            "=" + raw + " (give one of them, or the same value)");
  }
  *flag = value;
  return ok_status();
}

// MASTER_ADDR:MASTER_PORT as the coordinator, unless a flag says where it is.
Status apply_master(const EnvLookup& env, RankFlags* flags) {
  const char* addr = env("MASTER_ADDR");
  const char* port = env("MASTER_PORT");
  if (addr == nullptr && port == nullptr) return ok_status();
  const std::string master = std::string(addr ? addr : "") + ":" + (port ? port : "");
  if (addr == nullptr || *addr == '\0' || port == nullptr) {
    return invalid_argument(
        std::string(addr == nullptr || *addr == '\0' ? "$MASTER_ADDR" : "$MASTER_PORT") +
        " is not set, but " + (addr == nullptr ? "$MASTER_PORT" : "$MASTER_ADDR") +
        " is: give both (the coordinator's address, as torchrun's), or neither");
  }
  const auto number = parse_number(port);
  if (!number || *number > 65535) {
    return invalid_argument("$MASTER_PORT='" + std::string(port) + "' must be a port, 0 to 65535");
  }
  if (!flags->coordinator_file.empty()) {
    return invalid_argument("--coordinator-file " + flags->coordinator_file +
                            " conflicts with $MASTER_ADDR:$MASTER_PORT=" + master +
                            " (both say where the coordinator is; give one of them)");
  }
  if (flags->coordinator.empty()) {
    flags->coordinator = master;
  } else if (flags->coordinator != master) {
    return invalid_argument("--coordinator " + flags->coordinator +
                            " conflicts with $MASTER_ADDR:$MASTER_PORT=" + master +
                            " (give one of them, or the same address)");
  }
  return ok_status();
}

// --device cuda:N names the GPU that LOCAL_RANK would pick: they must agree.
Status check_local_rank(const EnvLookup& env, const RankFlags& flags) {
  const char* raw = env("LOCAL_RANK");
  if (raw == nullptr) return ok_status();
  const auto local = parse_number(raw);
  if (!local) {
    return invalid_argument("$LOCAL_RANK='" + std::string(raw) +
                            "' must be a non-negative integer (the rank's GPU on its host)");
  }
  if (flags.device.rfind("cuda:", 0) == 0 && flags.device != "cuda:" + std::string(raw)) {
    return invalid_argument("--device " + flags.device + " conflicts with $LOCAL_RANK=" + raw +
                            " (--device cuda takes the GPU of $LOCAL_RANK; give one of them)");
  }
  return ok_status();
}

}  // namespace

Result<RankFlags> apply_torchrun_env(RankFlags flags, const EnvLookup& env, int max_world_size) {
  GP_RETURN_IF_ERROR(apply_count(env, "RANK", "--rank", 0, max_world_size - 1, &flags.rank));
  GP_RETURN_IF_ERROR(
      apply_count(env, "WORLD_SIZE", "--world-size", 1, max_world_size, &flags.world_size));
  // Flags alone are checked against the plan later ("--rank = 5 has no program"); a variable
  // is named here, where it is known which value came from where.
  if (*flags.rank >= *flags.world_size &&
      (env("RANK") != nullptr || env("WORLD_SIZE") != nullptr)) {
    const auto origin = [&](const char* var, const char* flag) {
      return std::string(env(var) != nullptr ? std::string("$") + var : flag);
    };
    return invalid_argument(origin("RANK", "--rank") + " = " + std::to_string(*flags.rank) +
                            " must be below " + origin("WORLD_SIZE", "--world-size") + " = " +
                            std::to_string(*flags.world_size));
  }
  GP_RETURN_IF_ERROR(apply_master(env, &flags));
  GP_RETURN_IF_ERROR(check_local_rank(env, flags));
  return flags;
}

}  // namespace gp::exec::launch
