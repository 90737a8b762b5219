// Small helpers shared across components.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"

namespace gp {

// The current time as ISO 8601 UTC, e.g. "2026-11-29T12:00:00Z" (records' dates).
std::string utc_now_iso8601();

// `bytes` as lowercase hexadecimal, two digits a byte.
std::string to_hex(const unsigned char* bytes, size_t n);
// `bytes` random bytes (std::random_device: the kernel's generator) as hexadecimal: job ids,
// tokens.
std::string random_hex(size_t bytes);

// `word` as a POSIX shell reads it back: as it is when it holds only characters no shell treats
// specially, else in single quotes.
std::string shell_quote(const std::string& word);
// `words` quoted and joined by spaces: a command line to print or to hand a remote shell.
std::string shell_command(const std::vector<std::string>& words);

// Compares without an early exit, so that the time taken says nothing about a secret (tokens).
bool constant_time_equal(std::string_view a, std::string_view b);

// Checks a "HOST:PORT" listen address before a server binds it: a host, and a port of decimal
// digits in [0, 65535] (0: any free port), so that 70000 is refused instead of wrapping to 4464.
// Errors name the flag: "--listen 127.0.0.1:70000: port 70000 is outside 0..65535".
Status check_listen_address(std::string_view flag, std::string_view address);
// The same for an address to connect to (port 0 refused), e.g. a coordinator; gRPC target URIs
// (unix:/path, dns:///host:port) pass unchecked. `what` names where the address came from.
Status check_connect_address(std::string_view what, std::string_view address);

}  // namespace gp
