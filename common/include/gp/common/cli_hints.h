// "Did you mean": after a command line CLI11 refused, the closest flag or subcommand to each word
// it could not place, so that `--optimzer sgd` or `serach` says what was meant.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gp::cli {

// Edit distance (insertions, deletions, substitutions, adjacent swaps count one each).
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The candidate closest to `word` when it is close enough to be a typo of it: within a third of
// the word's length (at least 1, at most 3 edits); ties go to the first listed.
inline std::optional<std::string> closest_name(std::string_view word,
                                               const std::vector<std::string>& candidates) {
  const size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance && c != word) best = c, best_distance = d;
  }
  return best;
}

// The deepest subcommand the command line selected (the app itself if none).
inline const CLI::App* selected_command(const CLI::App& app) {
  const CLI::App* at = &app;
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (const CLI::App* sub : at->get_subcommands()) {
      at = sub;
      deeper = true;
      break;
    }
  }
  return at;
}

// After app.exit(error): "did you mean" lines on stderr for the words the parse left over.
inline void print_hints(const char* program, const CLI::App& app,
                        const std::vector<std::string>& left_over) {
  const CLI::App* command = selected_command(app);
  std::vector<std::string> flags, commands;
  for (const CLI::App* at = command; at != nullptr; at = at->get_parent()) {
    for (const CLI::Option* opt : at->get_options()) {
      for (const auto& name : opt->get_lnames()) flags.push_back("--" + name);
    }
  }
  for (const CLI::App* sub : command->get_subcommands({})) commands.push_back(sub->get_name());
  for (const auto& arg : left_over) {
    const bool flag = arg.rfind("--", 0) == 0;
    const std::string word = flag ? arg.substr(0, arg.find('=')) : arg;
    if (auto near = closest_name(word, flag ? flags : commands)) {
      std::fprintf(stderr, "%s: '%s' is not a %s here; did you mean '%s'?\n", program, word.c_str(),
                   flag ? "flag" : "command", near->c_str());
    }
  }
}

}  // namespace gp::cli
