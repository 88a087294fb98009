#include "adapters/cli.hpp"

#include <fstream>
#include <istream>
#include <optional>
#include <ostream>
#include <variant>
#include <vector>

#include "core/request.hpp"
#include "engine/engines.hpp"

namespace baton {

namespace {

constexpr const char* main_help = R"(baton: an agent-routing runtime around the Clef-Omni decision model

Usage: baton <command> [options]

Commands:
  decide      answer SystemOne requests (JSON or JSONL) with a decision engine

Options:
  -h, --help  show this help (and `baton <command> --help` for a command)
  --version   print the version

Exit status: 64 for a usage error; each command documents its own.
)";

constexpr const char* decide_help = R"(Usage: baton decide [--engine NAME] [--confidence p_max|margin] [--jsonl] [FILE|-]

Reads one SystemOne request (a JSON object) or many (JSONL: one object per line) from FILE, or
from standard input when FILE is - or absent, and writes one response per request in the same
form: a SystemOne response, or an error body {"error","code","detail"} for a refused request.
Every request is answered by the chosen engine whatever its "model" field names; the response's
"model" says which model answered.

Options:
  --engine NAME         the decision engine: keyword (default; no weights, word overlap)
  --confidence METRIC   how "confidence" is computed for choice and score answers:
                          p_max   the largest probability (default, as the Clef reference)
                          margin  TypeSafe's normalised form: choice (K*p_max-1)/(K-1),
                                  score 1 - sum p_i*|i-mode| / (its value for a uniform p)
  --jsonl               read JSONL; without it, JSONL is assumed when FILE ends in .jsonl or
                        the first line is a complete JSON value with more lines after it
  -h, --help            show this help

Exit status:
  0   every request was read (in JSONL, refused requests get their error body on their line)
  1   the engine failed
  2   the single request was refused; its error body is on standard output
  64  usage error
  66  FILE cannot be read
)";

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

void chomp(std::string& line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
}

// Reads the JSONL stream in batches; each line's answer goes out in input order.
class jsonl_decider {
 public:
  jsonl_decider(std::ostream& out, decision_engine& engine, const decide_options& options)
      : out_(out), engine_(engine), options_(options) {}

  void add(std::string_view line) {
    const engine_description& d = engine_.describe();
    auto parsed = parse_request(line, d.limits, d.model_id);
    if (parsed) {
      slots_.emplace_back(requests_.size());
      requests_.push_back(std::move(*parsed));
    } else {
      slots_.emplace_back(std::move(parsed.error()));
    }
    if (requests_.size() >= options_.batch_size || slots_.size() >= 4 * options_.batch_size) flush();
  }

  void flush() {
    auto results = engine_.decide(requests_);
    buffer_.clear();
    for (auto& slot : slots_) {
      if (auto* e = std::get_if<error>(&slot)) {
        render_error(*e, buffer_);
      } else {
        const std::size_t i = std::get<std::size_t>(slot);
        auto answered = results[i] ? make_response(requests_[i], *results[i], options_.confidence,
                                                   engine_.describe().model_id)
                                   : result<response>(results[i].error());
        if (answered) {
          render_response(*answered, buffer_);
        } else {
          render_error(answered.error(), buffer_);
        }
      }
      buffer_.push_back('\n');
    }
    out_ << buffer_;
    slots_.clear();
    requests_.clear();
  }

 private:
  std::ostream& out_;
  decision_engine& engine_;
  const decide_options& options_;
  std::vector<request> requests_;
  std::vector<std::variant<std::size_t, error>> slots_;  // a request's index in requests_, or its refusal
  std::string buffer_;
};

int decide_single(std::string_view body, std::ostream& out, decision_engine& engine, const decide_options& options) {
  const engine_description& d = engine.describe();
  auto parsed = parse_request(body, d.limits, d.model_id);
  if (!parsed) {
    out << render_error(parsed.error()) << '\n';
    return exit_refused;
  }
  auto results = engine.decide(std::span<const request>(&*parsed, 1));
  auto answered = results[0] ? make_response(*parsed, *results[0], options.confidence, d.model_id)
                             : result<response>(results[0].error());
  if (!answered) {
    out << render_error(answered.error()) << '\n';
    return exit_engine_failed;
  }
  out << render_response(*answered) << '\n';
  return exit_ok;
}

}  // namespace

int run_decide(std::istream& in, std::ostream& out, decision_engine& engine, const decide_options& options) {
  std::string first;
  while (std::getline(in, first) && blank(first)) {
  }
  chomp(first);
  std::string second;
  while (std::getline(in, second) && blank(second)) {
  }
  chomp(second);
  const bool more = !blank(second);

  bool jsonl = options.jsonl;
  if (!jsonl && more) {
    json probe;
    json_parse_error ignored;
    jsonl = parse_json(first, probe, ignored);
  }
  if (!jsonl) {
    std::string body = first;
    if (more) {
      body += '\n';
      body += second;
      body += '\n';
      body.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (blank(body)) {
      out << render_error(make_error(400, "INVALID_JSON", "no request: the input is empty")) << '\n';
      return exit_refused;
    }
    return decide_single(body, out, engine, options);
  }

  jsonl_decider decider(out, engine, options);
  if (!blank(first)) decider.add(first);
  if (more) decider.add(second);
  for (std::string line; std::getline(in, line);) {
    chomp(line);
    if (!blank(line)) decider.add(line);
  }
  decider.flush();
  out.flush();
  return exit_ok;
}

namespace {

int usage_error(std::ostream& err, const std::string& what, const char* command) {
  err << "baton" << (command ? std::string(" ") + command : std::string()) << ": " << what << "\n"
      << "Try 'baton" << (command ? std::string(" ") + command : std::string()) << " --help'.\n";
  return exit_usage;
}

int decide_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err) {
  decide_options options;
  std::optional<std::string> file;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&](std::string_view flag) -> std::optional<std::string_view> {
      if (a.size() > flag.size() && a.substr(0, flag.size()) == flag && a[flag.size()] == '=')
        return a.substr(flag.size() + 1);
      if (a == flag && i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    if (a == "-h" || a == "--help") {
      out << decide_help;
      return exit_ok;
    }
    if (a == "--jsonl") {
      options.jsonl = true;
    } else if (a.starts_with("--engine")) {
      auto v = value("--engine");
      if (!v) return usage_error(err, "--engine needs a name", "decide");
      options.engine = std::string(*v);
    } else if (a.starts_with("--confidence")) {
      auto v = value("--confidence");
      auto metric = v ? parse_confidence_metric(*v) : std::nullopt;
      if (!metric) return usage_error(err, "--confidence takes p_max or margin", "decide");
      options.confidence = *metric;
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error(err, "unknown option " + std::string(a), "decide");
    } else if (file) {
      return usage_error(err, "more than one input file", "decide");
    } else {
      file = std::string(a);
    }
  }

  auto engine = make_engine(options.engine);
  if (!engine) return usage_error(err, engine.error().message, "decide");

  if (!file || *file == "-") return run_decide(in, out, **engine, options);
  std::ifstream input(*file, std::ios::binary);
  if (!input) {
    err << "baton decide: cannot read " << *file << "\n";
    return exit_no_input;
  }
  options.jsonl = options.jsonl || file->ends_with(".jsonl");
  return run_decide(input, out, **engine, options);
}

}  // namespace

int run_cli(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << main_help;
    return exit_usage;
  }
  const std::string_view command = args[0];
  if (command == "-h" || command == "--help" || command == "help") {
    out << main_help;
    return exit_ok;
  }
  if (command == "--version") {
    out << "baton " << baton_version << "\n";
    return exit_ok;
  }
  if (command == "decide") return decide_main(args.subspan(1), in, out, err);
  return usage_error(err, "unknown command '" + std::string(command) + "'", nullptr);
}

}  // namespace baton
