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
                                  score max(0, 1 - sum p_i*|i-mode| / mean |i-(K-1)/2|)
  --jsonl               read JSONL even if there is only one line. Without it, JSONL is read
                        when FILE ends in .jsonl or the first line is a whole JSON value; then
                        each line is answered as soon as the input pauses (a process that
                        writes a line and waits gets its answer)
  -h, --help            show this help

Exit status:
  0   every request was answered (in JSONL, refused requests get their error body on their line)
  1   the engine failed (on at least one request)
  2   the single request was refused; its error body is on standard output
  64  usage error
  66  FILE cannot be read
)";

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// std::getline that keeps at most `keep` bytes of a line, so that one huge line costs no more
// memory than the request limit; the full length is still counted for the error message.
class line_reader {
 public:
  line_reader(std::istream& in, std::size_t keep) : in_(in), keep_(keep) {}

  // The next line without its "\n" (or "\r\n"); `size` is its full length. False at the end.
  bool next(std::string& line, std::size_t& size) {
    line.clear();
    size = 0;
    bool any = false;
    for (;;) {
      in_.getline(chunk_, sizeof chunk_);
      const auto got = static_cast<std::size_t>(in_.gcount());
      const bool ended = !in_.fail() && !in_.eof();  // the newline was read (and counted by gcount)
      const std::size_t data = ended ? got - 1 : got;
      any = any || got > 0;
      if (line.size() < keep_) line.append(chunk_, std::min(data, keep_ - line.size()));
      size += data;
      if (in_.fail() && !in_.eof() && got == sizeof chunk_ - 1) {
        in_.clear();  // the chunk filled up before the end of the line
        continue;
      }
      break;
    }
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
      --size;
    }
    return any;
  }

  // Skips blank lines; false at the end.
  bool next_nonblank(std::string& line, std::size_t& size) {
    while (next(line, size))
      if (!blank(line)) return true;
    return false;
  }

  // Whether the next read would wait for input (nothing is buffered).
  bool drained() { return in_.rdbuf()->in_avail() <= 0; }

 private:
  std::istream& in_;
  std::size_t keep_;
  char chunk_[8192];
};

// Answers requests in batches, each one's answer (or refusal) in input order: the JSONL lines, or
// the one request of a multi-line document.
class jsonl_decider {
 public:
  jsonl_decider(std::ostream& out, decision_engine& engine, const decide_options& options)
      : out_(out), engine_(engine), options_(options) {}

  // `size` is the request's full length; one over the limit was cut short when it was read.
  void add(std::string_view line, std::size_t size) {
    const engine_description& d = engine_.describe();
    auto parsed = size > d.limits.max_body_bytes ? result<request>(body_too_large(size, d.limits))
                                                 : parse_request(line, d.limits, d.model_id);
    if (parsed) {
      slots_.emplace_back(requests_.size());
      requests_.push_back(std::move(*parsed));
    } else {
      slots_.emplace_back(std::move(parsed.error()));
    }
    if (requests_.size() >= options_.batch_size || slots_.size() >= 4 * options_.batch_size) flush();
  }

  // How the last answered request went, as an exit code.
  int last_status() const noexcept { return last_status_; }
  std::size_t engine_failures() const noexcept { return engine_failures_; }

  void flush() {
    if (slots_.empty()) return;
    auto results = engine_.decide(requests_);
    buffer_.clear();
    for (auto& slot : slots_) {
      if (auto* e = std::get_if<error>(&slot)) {
        render_error(*e, buffer_);
        last_status_ = exit_refused;
      } else {
        const std::size_t i = std::get<std::size_t>(slot);
        auto answered = results[i] ? make_response(requests_[i], *results[i], options_.confidence,
                                                   engine_.describe().model_id)
                                   : result<response>(results[i].error());
        if (answered) {
          render_response(*answered, buffer_);
          last_status_ = exit_ok;
        } else {
          render_error(answered.error(), buffer_);
          last_status_ = exit_engine_failed;
          ++engine_failures_;
        }
      }
      buffer_.push_back('\n');
    }
    out_ << buffer_;
    out_.flush();
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
  int last_status_ = exit_ok;
  std::size_t engine_failures_ = 0;
};

}  // namespace

int run_decide(std::istream& in, std::ostream& out, decision_engine& engine, const decide_options& options) {
  const request_limits& limits = engine.describe().limits;
  line_reader reader(in, limits.max_body_bytes + 1);
  std::string line;
  std::size_t size = 0;
  if (!reader.next_nonblank(line, size)) {
    out << render_error(make_error(400, "INVALID_JSON", "no request: the input is empty")) << '\n';
    return exit_refused;
  }

  // A first line that is a whole JSON value (or is refused for anything but ending too soon) is
  // answered at once, whatever follows: as one request or as the first of a JSONL stream, its
  // answer is the same. Only a first line that ends inside its value starts a multi-line request.
  json probe;
  json_parse_error first_error;
  const bool unfinished = size <= limits.max_body_bytes && !parse_json(line, probe, first_error) &&
                          first_error.truncated;
  if (!options.jsonl && unfinished) {
    // One request spread over several lines.
    std::string body = std::move(line);
    std::size_t body_size = size;
    while (reader.next(line, size)) {
      body_size += size + 1;
      if (body.size() <= limits.max_body_bytes) {
        body += '\n';
        body += line;
      }
    }
    jsonl_decider decider(out, engine, options);
    decider.add(body, body_size);
    decider.flush();
    return decider.last_status();
  }

  jsonl_decider decider(out, engine, options);
  std::size_t requests = 0;
  do {
    decider.add(line, size);
    ++requests;
    // When the producer pauses, answer what has arrived before waiting for more: a process that
    // writes a line and waits for its answer gets it.
    if (reader.drained()) decider.flush();
  } while (reader.next_nonblank(line, size));
  decider.flush();
  // One request not asked for as JSONL is a single request: its exit status says how it went.
  if (requests == 1 && !options.jsonl) return decider.last_status();
  return decider.engine_failures() > 0 ? exit_engine_failed : exit_ok;
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
