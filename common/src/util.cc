#include "gp/common/util.h"

#include <ctime>
#include <random>

namespace gp {

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string to_hex(const unsigned char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

std::string random_hex(size_t bytes) {
  std::random_device rd;
  std::string out;
  while (out.size() < 2 * bytes) {
    const unsigned int v = rd();
    const unsigned char four[4] = {
        static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
        static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
    out += to_hex(four, 4);
  }
  return out.substr(0, 2 * bytes);
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_@%+=:,./-") == std::string::npos) {
    return word;
  }
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_command(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

namespace {

// HOST:PORT with a port of digits in [min_port, 65535]; `where` names the flag and its value.
Status check_host_port(const std::string& where, std::string_view address, int min_port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return invalid_argument(where + ": expected HOST:PORT, e.g. 127.0.0.1:29600");
  }
  const std::string_view port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) > 65535 || std::stoi(std::string(port)) < min_port) {
    return invalid_argument(where + ": port " + std::string(port) + " is outside " +
                            std::to_string(min_port) + "..65535");
  }
  return ok_status();
}

}  // namespace

Status check_listen_address(std::string_view flag, std::string_view address) {
  return check_host_port(std::string(flag) + " " + std::string(address), address, 0);
}

Status check_connect_address(std::string_view what, std::string_view address) {
  // gRPC's own target forms (unix:/path, dns:///host:port, ipv4:...) are passed through.
  if (address.find("://") != std::string_view::npos || address.rfind("unix:", 0) == 0 ||
      address.rfind("ipv4:", 0) == 0 || address.rfind("ipv6:", 0) == 0) {
    return ok_status();
  }
  return check_host_port(std::string(what) + " " + std::string(address), address, 1);
}

}  // namespace gp
