#include "adapters/cli/check_cli.hpp"

#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/exit_codes.hpp"
#include "adapters/runtime/routing.hpp"
#include "adapters/runtime/server_config.hpp"
#include "core/error_codes.hpp"
#include "engine/clef/clef_engine.hpp"
#include "engine/clef/schema_cost.hpp"
#include "engine/factory/make_engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "policies/policy_check.hpp"
#include "tools/registry.hpp"
#include "tools/yaml.hpp"

namespace baton {

namespace {

constexpr const char* check_help = R"(Usage: baton check [--config FILE] [--tokenizer DIR|ORG/NAME[@REV]] [--json] [--strict]

Loads the config, its registry and its policy as `baton serve` does, without listening, loading
model weights or calling a remote engine, and prints:

  the schema   the questions every turn asks the engine, in order, with their options (the same
               on every turn: only the history changes);
  its size     what the schema costs on every turn: in tokens of the engine's tokenizer (clef: the
               release's tokenizer files, no weights), with how much of engine.max_length the
               prompt leaves for the history; engines without a tokenizer here (keyword,
               systemone) get bytes of the prompt the clef engine would build, or tokens of the
               --tokenizer release's. With routing.fallback, the same for the fallback engine.
               A registry routed in two stages (routing.max_options): the schema shown is the
               first (which group), and each engine's size is given for both stages, the second
               the costliest group's;
  warnings     what the policy can never use: thresholds that are always met, lanes and escalation
               terms a rule always pre-empts, triggers that never fire, always fire or shadow one
               another, denied tools offered every turn, global questions no trigger reads
               (policies/README.md, "Checking a policy"). Each as FILE:LINE: warning: why, and
               what to do.

What `baton serve` would refuse, and a schema that alone exceeds the clef engine's max_length (every
decision would be refused), goes to standard error as FILE:LINE: reason.

Options:
  --config FILE       the server configuration (default config/baton.yaml)
  --tokenizer DIR     count tokens with this Clef release's tokenizer (a directory, or ORG/NAME[@REV]
                      in the Hugging Face cache) for engines that have none here
  --json              one JSON object on standard output instead: {"ok", "config", "registry",
                      "policy", "schema_hash", "questions": [{"id","type","instructions","options"}],
                      "engines": [{"role","name","unit","tokenizer","prompt","header","questions",
                      "schema","max_length","history_room","second_stage"}], "stages",
                      "warnings": [{"file","line","kind","message"}]}; "stages" is null, or
                      {"groups": {GROUP: [tool ids]}} in two stages, when "second_stage" is
                      {"group", "schema", "prompt", "history_room"} (the costliest group's) and
                      "groups": {GROUP: schema}; on an error, {"ok": false, "config", "error"}
  --strict            warnings fail the check too (exit 78), for CI
  -h, --help          show this help

Exit status: 0 the config loads (with or without warnings); 64 usage; 66 --tokenizer ORG/NAME is
not in the cache; 78 the config, registry or policy does not load, the schema does not fit, or
(with --strict) there is a warning.
)";

// The line of the deepest of `keys` (a path of mapping keys) that `file` holds; 1 when none.
int config_line(const std::filesystem::path& file, std::initializer_list<std::string_view> keys) {
  int line = 1;
  try {
    YAML::Node n = YAML::LoadFile(file.string());
    for (std::string_view key : keys) {
      if (!n.IsMap()) break;
      YAML::Node next;
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == key) {
          line = tools::yaml::line_of(it->first);
          next = it->second;
        }
      }
      if (!next.IsDefined()) break;
      n = next;
    }
  } catch (const YAML::Exception&) {
    // The loader read it already; a file changed meanwhile gets its first line.
  }
  return line;
}

struct check_failure {
  std::string message;  // FILE:LINE: reason
};

// A registry or policy that cannot be read has no line of its own: the config's line naming it.
std::string located(const error& e, const std::filesystem::path& file, const server_config& config, std::string_view key) {
  const std::string prefix = file.string() + ": ";
  if (e.message.rfind(prefix, 0) != 0) return e.message;
  return config.file.string() + ":" + std::to_string(config_line(config.file, {key})) + ": `" + std::string(key) +
         "` " + e.message;
}

// What a request of this schema holds before any history: the prompt's text and the schema.
std::size_t without_history(const clef::schema_cost& c) { return c.prompt + c.schema(); }

// One engine the schema goes to, and what it costs there.
struct engine_size {
  std::string role;  // "engine" or "routing.fallback": its section in the config
  engine_options options;
  std::optional<std::filesystem::path> tokenizer;  // none: bytes
  clef::schema_cost cost;
  std::optional<std::size_t> max_length;  // the clef engine's window
  // In two stages: each group's second stage, and the group whose costs the most.
  std::map<std::string, clef::schema_cost> second;
  std::string widest;

  std::string unit() const { return tokenizer ? "tokens" : "bytes"; }
  std::size_t every_turn() const { return without_history(cost); }
  std::size_t second_every_turn() const { return widest.empty() ? 0 : without_history(second.at(widest)); }
};

struct report {
  server_config config;
  tools::registry registry;
  policies::policy policy;
  request questions;
  std::optional<tools::staged_questions> stages;
  std::string schema_hash;
  std::vector<engine_size> engines;
  std::vector<policies::finding> warnings;
};

// A release's tokenizer as the record encoder takes it: each piece on its own.
class release_pieces final : public clef::piece_tokenizer {
 public:
  explicit release_pieces(const tokenizer& t) : tokenizer_(t) {}
  void encode(std::string_view text, std::vector<std::int32_t>& out) const override { tokenizer_.encode(text, out); }

 private:
  const tokenizer& tokenizer_;
};

// In tokens of `encoder`'s tokenizer, or bytes without one.
result<clef::schema_cost> schema_cost_of(const request& questions, const clef::clef_encoder* encoder) {
  try {  // the tokenizer's own limits throw, as clef_encoder::encode catches them
    return encoder ? clef::measure_schema(questions, release_pieces(encoder->text_tokenizer()))
                   : clef::measure_schema(questions, clef::byte_tokenizer());
  } catch (const std::exception& e) {
    return make_error(500, codes::inference_failed, e.what());
  }
}

// --tokenizer: a release's tokenizer for the engines that have none here.
struct given_tokenizer {
  std::filesystem::path dir;
  clef::clef_encoder encoder;
};

std::optional<check_failure> measure(const report& r, engine_size& size, const given_tokenizer* given) {
  const server_config& config = r.config;
  auto line = [&](std::string_view key) {
    return size.role == "engine" ? config_line(config.file, {"engine", key}) : config_line(config.file, {"routing", "fallback", key});
  };
  // The clef engine's own release, else --tokenizer's, else bytes.
  std::optional<clef::clef_encoder> own;
  const clef::clef_encoder* encoder = nullptr;
  if (size.options.name == "clef") {
    size.tokenizer = size.options.clef.model_dir;
    try {
      encoder = &own.emplace(*size.tokenizer);
    } catch (const std::exception& e) {
      return check_failure{config.file.string() + ":" + std::to_string(line("model")) + ": cannot load the tokenizer in " +
                           size.tokenizer->string() + ": " + e.what()};
    }
  } else if (given) {
    size.tokenizer = given->dir;
    encoder = &given->encoder;
  }
  auto cost = schema_cost_of(r.questions, encoder);
  if (!cost) return check_failure{r.registry.source.file + ":1: the schema cannot be encoded: " + cost.error().message};
  size.cost = std::move(*cost);
  if (r.stages) {
    for (const auto& [group, second] : r.stages->second) {
      auto c = schema_cost_of(second, encoder);
      if (!c) return check_failure{r.registry.source.file + ":1: group `" + group + "`'s second stage cannot be encoded: " + c.error().message};
      if (size.widest.empty() || size.second_every_turn() < without_history(*c)) size.widest = group;
      size.second[group] = std::move(*c);
    }
  }
  if (size.options.name == "clef") {
    size.max_length = size.options.clef.max_length;
    const bool second_longer = size.second_every_turn() > size.every_turn();
    const std::size_t longest = second_longer ? size.second_every_turn() : size.every_turn();
    if (longest > *size.max_length) {
      const std::string key = size.role == "engine" ? "engine.max_length" : "routing.fallback.max_length";
      const std::string what = second_longer ? "the second stage of group `" + size.widest + "` (its schema " +
                                                   std::to_string(size.second.at(size.widest).schema()) + ")"
                                             : "the schema " + std::to_string(size.cost.schema());
      return check_failure{config.file.string() + ":" + std::to_string(line("max_length")) + ": the prompt without any history takes " +
                           std::to_string(longest) + " tokens (" + what + "), over `" + key + "` (" +
                           std::to_string(*size.max_length) +
                           "): every decision would be refused (INPUT_TOO_LONG); raise it, or shorten the registry's "
                           "descriptions and instructions"};
    }
  }
  return std::nullopt;
}

// Everything `baton serve` loads before it listens, in its order, and the sizes and warnings.
std::variant<report, check_failure> run_check(const std::filesystem::path& file, const given_tokenizer* given) {
  report r;
  auto config = load_server_config(file);
  if (!config) return check_failure{config.error().message};
  r.config = std::move(*config);
  const server_config& c = r.config;

  // serve's own loader, against the engines' limits; the executors it makes are never run.
  const request_limits limits = question_limits(c.engine);
  std::optional<request_limits> fallback_limits;
  if (c.fallback) fallback_limits = question_limits(*c.fallback);
  boost::asio::io_context io;
  auto routing = load_routing(c, limits, fallback_limits ? &*fallback_limits : nullptr, io.get_executor());
  if (!routing) {
    const bool policy = routing.error().code == codes::invalid_policy;
    return check_failure{located(routing.error(), policy ? c.policy : c.registry, c, policy ? "policy" : "registry")};
  }
  r.registry = (*routing)->registry;
  r.policy = (*routing)->policy;
  r.questions = (*routing)->questions;
  r.stages = (*routing)->stages;
  r.schema_hash = (*routing)->schema_hash;

  r.engines.push_back({"engine", c.engine, {}, {}, {}});
  if (c.fallback) r.engines.push_back({"routing.fallback", *c.fallback, {}, {}, {}});
  for (engine_size& e : r.engines) {
    if (auto failed = measure(r, e, given)) return *failed;
  }
  r.warnings = policies::check_policy(r.policy, r.registry, {.fallback_engine = c.fallback.has_value()});
  return r;
}

std::vector<std::string> option_labels(const question& q) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < q.option_count(); ++i) {
    if (q.type == question_type::score) {
      const json& level = q.criteria[i];
      out.push_back(std::to_string(i) + " " + (level.is_string() ? level.get<std::string>() : render_json(level, true)));
    } else {
      out.push_back(q.option_id(i));
    }
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

std::string padded(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string right(const std::string& s, std::size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

// What follows "engine NAME" in the size lines.
std::string where_counted(const engine_size& e) {
  if (!e.tokenizer) {
    return " has no tokenizer here: bytes of the prompt the clef engine would build (--tokenizer DIR counts tokens)";
  }
  if (e.options.name == "clef") return ": tokens of its release's tokenizer (" + e.tokenizer->string() + ")";
  return ": tokens of the --tokenizer release's (" + e.tokenizer->string() + ")";
}

void write_text(const report& r, std::ostream& out) {
  const server_config& c = r.config;
  out << c.file.string() << ": engine " << c.engine.name;
  if (c.fallback) out << ", fallback " << c.fallback->name;
  out << "\n  registry " << c.registry.string() << "  " << r.registry.hash << "\n  policy   " << c.policy.string() << "  "
      << r.policy.hash << "\n  schema   " << r.schema_hash << "\n\n";

  const engine_size& main = r.engines.front();
  if (r.stages) {
    out << "Routed in two stages (routing.max_options " << c.max_options << "): " << r.stages->groups.size()
        << " groups; the first stage asks which group, the second which of its tools\n";
  }
  out << (r.stages ? "Schema of the first stage: " : "Schema: ") << r.questions.questions.size()
      << " questions, the same on every turn\n";
  std::size_t id_width = 8;
  for (const question& q : r.questions.questions) id_width = std::max(id_width, q.id.size());
  out << "   #  " << padded("question", id_width) << "  type    " << right(main.unit(), 6) << "  options\n";
  for (std::size_t i = 0; i < r.questions.questions.size(); ++i) {
    const question& q = r.questions.questions[i];
    out << right(std::to_string(i + 1), 4) << "  " << padded(q.id, id_width) << "  " << padded(std::string(to_string(q.type)), 6)
        << "  " << right(std::to_string(main.cost.questions[i]), 6) << "  " << joined(option_labels(q)) << "\n";
  }

  out << "\nSize per turn, before any history:\n";
  for (const engine_size& e : r.engines) {
    out << "  " << e.role << " " << e.options.name << where_counted(e) << "\n    " << e.cost.schema() << " "
        << e.unit() << " of schema (its header " << e.cost.frame << ", the questions " << e.cost.schema() - e.cost.frame
        << ") + " << e.cost.prompt << " of the prompt's own text = " << e.every_turn();
    if (e.max_length) {
      out << " of max_length " << *e.max_length << ": " << *e.max_length - e.every_turn() << " left for the history";
    }
    out << "\n";
    if (!e.widest.empty()) {
      const clef::schema_cost& w = e.second.at(e.widest);
      out << "    second stage, at most (group " << e.widest << ", " << r.stages->members.at(e.widest).size() << " tools): "
          << w.schema() << " " << e.unit() << " of schema + " << w.prompt << " = " << e.second_every_turn();
      if (e.max_length) out << ": " << *e.max_length - e.second_every_turn() << " left for the history";
      out << "\n";
    }
    if (e.role != "engine") out << "    the registry's questions fit its limits too\n";
  }

  out << "\n";
  for (const policies::finding& f : r.warnings) out << f.file << ":" << f.line << ": warning: " << f.message << "\n";
  if (r.warnings.empty()) out << "no warnings\n";
  else out << r.warnings.size() << (r.warnings.size() == 1 ? " warning\n" : " warnings\n");
}

json report_json(const report& r, bool ok) {
  const server_config& c = r.config;
  json questions = json::array();
  for (const question& q : r.questions.questions) {
    questions.push_back({{"id", q.id}, {"type", to_string(q.type)}, {"instructions", q.instructions}, {"options", option_labels(q)}});
  }
  json engines = json::array();
  for (const engine_size& e : r.engines) {
    engines.push_back({{"role", e.role},
                       {"name", e.options.name},
                       {"unit", e.unit()},
                       {"tokenizer", e.tokenizer ? json(e.tokenizer->string()) : json(nullptr)},
                       {"prompt", e.cost.prompt},
                       {"header", e.cost.frame},
                       {"questions", e.cost.questions},
                       {"schema", e.cost.schema()},
                       {"max_length", e.max_length ? json(*e.max_length) : json(nullptr)},
                       {"history_room", e.max_length ? json(*e.max_length - e.every_turn()) : json(nullptr)},
                       {"second_stage", nullptr}});
    if (!e.widest.empty()) {
      json groups = json::object();
      for (const auto& [group, cost] : e.second) groups[group] = cost.schema();
      const clef::schema_cost& w = e.second.at(e.widest);
      engines.back()["second_stage"] = {
          {"group", e.widest},
          {"schema", w.schema()},
          {"prompt", w.prompt},
          {"history_room", e.max_length ? json(*e.max_length - e.second_every_turn()) : json(nullptr)},
          {"groups", std::move(groups)}};
    }
  }
  json warnings = json::array();
  for (const policies::finding& f : r.warnings) {
    warnings.push_back({{"file", f.file}, {"line", f.line}, {"kind", f.kind}, {"message", f.message}});
  }
  json o = json::object();
  o["ok"] = ok;
  o["config"] = c.file.string();
  o["registry"] = {{"file", c.registry.string()}, {"hash", r.registry.hash}};
  o["policy"] = {{"file", c.policy.string()}, {"hash", r.policy.hash}};
  o["schema_hash"] = r.schema_hash;
  o["questions"] = std::move(questions);
  o["engines"] = std::move(engines);
  o["stages"] = nullptr;
  if (r.stages) o["stages"] = {{"groups", r.stages->members}};
  o["warnings"] = std::move(warnings);
  return o;
}

}  // namespace

int check_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  command_args a;
  if (auto problem = parse_args(args, {"--config", "--tokenizer"}, {"--json", "--strict"}, a)) {
    return usage_error(err, *problem, "check");
  }
  if (a.help) {
    out << check_help;
    return exit_ok;
  }
  if (a.file) return usage_error(err, "unexpected argument " + *a.file, "check");
  const std::filesystem::path file(a.get("--config").value_or("config/baton.yaml"));
  std::optional<given_tokenizer> tokenizer;
  if (const auto t = a.get("--tokenizer")) {
    if (t->empty()) return usage_error(err, "--tokenizer needs a release directory or ORG/NAME", "check");
    const auto dir = model_dir_arg(*t, "check", err);
    if (!dir) return exit_no_input;
    try {
      tokenizer.emplace(given_tokenizer{*dir, clef::clef_encoder(*dir)});
    } catch (const std::exception& e) {
      err << "baton check: --tokenizer: cannot load the tokenizer in " << dir->string() << ": " << e.what() << "\n";
      return exit_no_input;
    }
  }
  const bool as_json = a.has("--json");

  auto checked = run_check(file, tokenizer ? &*tokenizer : nullptr);
  if (const auto* failed = std::get_if<check_failure>(&checked)) {
    err << failed->message << "\n";
    if (as_json) out << render_json(json{{"ok", false}, {"config", file.string()}, {"error", failed->message}}, false) << "\n";
    return exit_config;
  }
  const report& r = std::get<report>(checked);
  const bool ok = r.warnings.empty() || !a.has("--strict");
  if (as_json) {
    out << render_json(report_json(r, ok), false) << "\n";
  } else {
    write_text(r, out);
  }
  if (!ok) err << "baton check: " << r.warnings.size() << " warning(s), and --strict\n";
  return ok ? exit_ok : exit_config;
}

}  // namespace baton
