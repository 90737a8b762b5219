// Progress lines of long planner work, such as a search of a graph of thousands of operators.
// They go to the "plan" logger so that a search that takes more than a few seconds says what it
// is doing, while a short one prints what it printed before. Never call them from a DP's inner
// loop: once per step of work (a partition, a simulated plan) is the grain.
#pragma once

#include <string_view>

namespace gp::planner {

// Logs `line` at info when at least two seconds have passed since the first progress line of
// the process and since the last one at info; else at debug. Thread-safe.
void log_progress(std::string_view line);

// Logs `line` at info unless it repeats the last line logged this way (then at debug): a fact
// worth one line, stated once although the work that finds it repeats (the search for fewer
// devices builds the same units again). Thread-safe.
void log_note(std::string_view line);

}  // namespace gp::planner
