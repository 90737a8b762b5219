// Small shared helpers: hexadecimal, random ids, and words quoted for a shell.
#include "gp/common/util.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

TEST_CASE("hexadecimal is two lowercase digits a byte, random ids differ call to call") {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  CHECK(gp::to_hex(bytes, 4) == "000fa5ff");
  const std::string a = gp::random_hex(8), b = gp::random_hex(8);
  CHECK(a.size() == 16);
  CHECK(gp::random_hex(3).size() == 6);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("shell words: plain ones as they are, others single-quoted, joined by spaces") {
  CHECK(gp::shell_quote("dir/plan.pb") == "dir/plan.pb");
  CHECK(gp::shell_quote("") == "''");
  CHECK(gp::shell_quote("it's") == "'it'\\''s'");
  CHECK(gp::shell_command({"graphpipe-launch", "--plan", "a b.pb", "--resume"}) ==
        "graphpipe-launch --plan 'a b.pb' --resume");
}
