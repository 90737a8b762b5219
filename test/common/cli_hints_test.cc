// "Did you mean": the closest flag or subcommand to a word the command line could not place.
#include "gp/common/cli_hints.h"

#include <catch2/catch.hpp>

TEST_CASE("edit distance counts insertions, deletions, substitutions and swaps once each") {
  CHECK(gp::cli::edit_distance("", "") == 0);
  CHECK(gp::cli::edit_distance("search", "serach") == 1);  // a swap
  CHECK(gp::cli::edit_distance("--optimizer", "--optimzer") == 1);
  CHECK(gp::cli::edit_distance("effort", "efort") == 1);
  CHECK(gp::cli::edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("the closest name is offered only when it is close enough to be a typo") {
  const std::vector<std::string> flags = {"--optimizer", "--out", "--effort", "--effort-seed"};
  CHECK(gp::cli::closest_name("--optimzer", flags) == std::optional<std::string>("--optimizer"));
  CHECK(gp::cli::closest_name("--effrt", flags) == std::optional<std::string>("--effort"));
  CHECK_FALSE(gp::cli::closest_name("--batch-size", flags).has_value());  // nothing near
  CHECK_FALSE(gp::cli::closest_name("--out", flags).has_value());  // the name itself is no typo
}

TEST_CASE("hints name the flag of the selected subcommand and the subcommands") {
  CLI::App app{"test"};
  auto* search = app.add_subcommand("search", "");
  std::string optimizer;
  search->add_option("--optimizer", optimizer, "");
  app.require_subcommand(1);
  const char* argv[] = {"prog", "search", "--optimzer", "sgd"};
  CHECK_THROWS_AS(app.parse(4, const_cast<char**>(argv)), CLI::ParseError);
  CHECK(gp::cli::selected_command(app) == search);
  const auto left = app.remaining(true);
  CHECK(std::find(left.begin(), left.end(), "--optimzer") != left.end());
}
