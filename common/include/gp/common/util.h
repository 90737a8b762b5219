// Small helpers shared across components.
#pragma once

#include <string>
#include <string_view>

namespace gp {

// The current time as ISO 8601 UTC, e.g. "2026-11-29T12:00:00Z" (records' dates).
std::string utc_now_iso8601();

// Compares without an early exit, so that the time taken says nothing about a secret (tokens).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace gp
