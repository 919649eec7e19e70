#include "cli/command_line.h"

#include <algorithm>

#include "cli/text.h"

namespace dlock::cli {
namespace {

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<const CLI::App*> Subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

CLI::App* FindSubcommand(CLI::App& app, const std::string& name) {
  auto found = app.get_subcommands([&](CLI::App* sub) { return sub->check_name(name); });
  return found.empty() ? nullptr : found.front();
}

std::vector<std::string> SubcommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : Subcommands(app)) {
    if (!sub->get_group().empty()) names.push_back(sub->get_name());  // hidden ones are ours
  }
  return names;
}

std::vector<std::string> OptionNames(const CLI::App& app) {
  std::vector<std::string> names = {"--help"};
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
  }
  return names;
}

std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* p = app.get_parent(); p != nullptr; p = p->get_parent()) {
    path = p->get_name() + " " + path;
  }
  return path;
}

Status Unknown(std::string_view what, std::string_view word, const std::string& nearest,
               const CLI::App& where) {
  std::string message = "unknown " + std::string(what) + " " + Quoted(word) + " for '" +
                        CommandPath(where) + "'";
  if (!nearest.empty()) message += "; did you mean '" + nearest + "'?";
  return InvalidArgumentError(message + " (see '" + CommandPath(where) + " --help')");
}

// An option word: checked against the subcommand's options; returns how
// many following words are its value (0 or 1).
Result<int> OptionWord(const CLI::App& app, const std::string& word) {
  const std::string name = word.substr(0, word.find('='));
  if (name == "-h" || name == "--help" || (app.get_parent() == nullptr && name == "--version")) {
    return 0;
  }
  const CLI::Option* opt = app.get_option_no_throw(name);
  if (opt == nullptr) return Unknown("option", name, NearestName(name, OptionNames(app)), app);
  // Not get_type_size(): CLI11 2.1 reports 1 for a flag too, and a flag
  // would then take the next word (`--no-wait --ttl 5s` lost its --ttl).
  const bool takes_value = opt->get_expected_min() > 0;
  return takes_value && word.find('=') == std::string::npos ? 1 : 0;
}

}  // namespace

std::string NearestName(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const std::string& name : names) {
    const std::size_t d = name.starts_with(word) && word.size() >= 2 ? 1 : EditDistance(word, name);
    if (d < best_distance) {
      best = name;
      best_distance = d;
    }
  }
  return best;
}

Result<SplitCommandLine> Split(CLI::App& app, const std::vector<std::string>& words,
                               const std::vector<const CLI::App*>& runs_command) {
  SplitCommandLine split;
  split.dlock_end = words.size();
  CLI::App* current = &app;
  bool key_seen = false;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    const bool takes_command = split.subcommand != nullptr &&
                               std::find(runs_command.begin(), runs_command.end(),
                                         split.subcommand) != runs_command.end();
    if (takes_command && word == "--") {
      split.command.emplace(words.begin() + static_cast<long>(i) + 1, words.end());
      split.dlock_end = i;
      break;
    }
    if (word.size() > 1 && word[0] == '-' && word != "--") {
      DLOCK_ASSIGN_OR_RETURN(const int values, OptionWord(*current, word));
      for (int v = 0; v <= values && i < words.size(); ++v) split.dlock_words.push_back(words[i++]);
      --i;
      continue;
    }
    if (CLI::App* sub = FindSubcommand(*current, word); sub != nullptr && !key_seen) {
      current = split.subcommand = sub;
      split.dlock_words.push_back(word);
      continue;
    }
    if (split.subcommand == nullptr || !Subcommands(*current).empty()) {
      return Unknown("command", word, NearestName(word, SubcommandNames(*current)), *current);
    }
    if (takes_command && key_seen) {
      split.command.emplace(words.begin() + static_cast<long>(i), words.end());
      split.dlock_end = i;
      break;
    }
    key_seen = true;
    split.dlock_words.push_back(word);
  }
  return split;
}

}  // namespace dlock::cli
