// The help text of `graphpipe-executor launch`.
#pragma once

#include <string>

namespace gp::exec::daemon {

std::string launch_description();  // the first paragraph
std::string launch_help_text();    // the rest, after the flags

}  // namespace gp::exec::daemon
