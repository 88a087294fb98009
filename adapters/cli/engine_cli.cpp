#include "adapters/cli/engine_cli.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <istream>
#include <optional>
#include <ostream>
#include <variant>
#include <vector>

#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/exit_codes.hpp"
#include "core/error_codes.hpp"
#include "core/request.hpp"
#include "engine/clef/clef_engine.hpp"
#include "engine/factory/engine_settings.hpp"
#include "engine/factory/make_engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace baton {

namespace {

constexpr const char* decide_help = R"(Usage: baton decide [--engine NAME] [--confidence p_max|margin] [--jsonl] [FILE|-]
       baton decide --engine clef --model DIR|ORG/NAME[@REV] [--model-id NAME] [--dtype f32|bf16] [--device cpu|cuda[:N]]
                    [--head-dtype f32|bf16] [--max-length N] [--threads N] [--batch-tokens N]
                    [--prefix-cache on|off] [--media-root DIR] [--dump FILE] [FILE|-]

Reads one SystemOne request (a JSON object) or many (JSONL: one object per line; blank lines are
skipped) from FILE, or from standard input when FILE is - or absent, and writes one response per
request in the same form and order: a SystemOne response, or an error body
{"error","code","detail"} for a refused request.
Every request is answered by the chosen engine whatever its "model" field names; the response's
"model" says which model answered.

Options:
  --engine NAME         the decision engine: keyword (default; no weights, word overlap) or
                        clef (the Clef-Omni model of --model)
  --model DIR           clef: a release directory (config.json, *.safetensors + index,
                        joint_head_config.json, joint_head.safetensors, tokenizer files), or
                        ORG/NAME[@REV] (revision main by default) in the Hugging Face cache
                        where `baton pull` and huggingface-cli put it
  --model-id NAME       clef: the responses' "model" (default: ORG/NAME for a Hugging Face
                        cache snapshot models--ORG--NAME/snapshots/REV, else the name of DIR)
  --dtype TYPE          clef: f32 or bf16 for the thinker (default: the weights' own dtype)
  --head-dtype TYPE     clef: f32 (default) or bf16 for the joint head (the reference runs it in
                        the model's dtype; parity tests are f32)
  --device DEV          clef: cpu (default), cuda or cuda:N when libtorch has CUDA
  --max-length N        clef: tokens per record (default 64000); the state is cut from its end
                        to fit. A record line {"id","request","max_length"} sets its own
  --threads N           clef: CPU threads (default: every core)
  --batch-tokens N      clef: records are packed into one forward up to N tokens (default
                        16384; 1: one record per forward, as the reference runs them)
  --prefix-cache on|off clef: keep the computed prefixes of records to reuse them for later
                        records that start the same way (default on; a quarter of the
                        available memory, 64-token blocks: engine.prefix_cache in baton serve)
  --media-root DIR      clef: media items given as file paths ("images": ["cat.png"]) are read
                        from under DIR, and from nowhere else (without it, paths are refused);
                        data URLs and {"content_type","base64"} items need no root
  --dump FILE           clef: one line per request with its "id" (the record's, else its
                        line number in FILE), the record's input_ids, question and option
                        spans and logits, the media placeholders' spans, and the response
                        (or the refusal)
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
  1   the engine failed (on at least one request), or the model cannot be loaded
  2   the single request was refused; its error body is on standard output
  64  usage error
  66  FILE cannot be read, or --model ORG/NAME is not in the cache
  73  the --dump FILE cannot be written, or is the input FILE
)";

constexpr const char* encode_help = R"(Usage: baton encode --model DIR|ORG/NAME[@REV] [--max-length N] [FILE|-]

Encodes SystemOne requests (JSONL: one request, or one record {"id","request","max_length"}, per
line) as the clef engine would, and writes one line per input: {"id","ok":true,"num_tokens",
"input_ids","questions":[{"id","type","question_span","option_ids","option_spans"}]} or
{"id","ok":false,"error","code"}. Only the release's tokenizer files are read.

Options:
  --model DIR       the release directory (or any directory with the tokenizer files), or
                    ORG/NAME[@REV] in the Hugging Face cache
  --max-length N    tokens per record (default 64000)
  -h, --help        show this help

Exit status: 0 every line was written; 1 the tokenizer cannot be loaded; 64 usage; 66 FILE
cannot be read, or --model ORG/NAME is not in the cache.
)";

constexpr const char* tokenize_help = R"(Usage: baton tokenize --tokenizer PATH [--jsonl] [FILE|-]

Writes the token ids of each input line as a JSON array, one per line, as Hugging Face's
tokenizer(text, add_special_tokens=False) gives them (added tokens are matched in the text).

Options:
  --tokenizer PATH  a tokenizer.json, or a directory with tokenizer.json or vocab.json + merges.txt
  --jsonl           each line is a JSON string (so a text may hold newlines)
  -h, --help        show this help

A line that is not valid UTF-8 (or, with --jsonl, not a JSON string) gets an error body
{"error","code","detail"} on its line. Exit status: 0 every line was tokenized; 2 at least one
line was refused; 1 the tokenizer cannot be loaded; 64 usage; 66 FILE cannot be read.
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
    if (any) ++number_;
    return any;
  }

  // The number of the line `next` read last, from 1.
  std::size_t number() const noexcept { return number_; }

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
  std::size_t number_ = 0;
  char chunk_[8192];
};

// One line of a clef trace, in the format of tests/data/vectors/clef-omni-tiny/expected.jsonl:
// ids, spans and (when run) logits and response of a record, or why it was refused; a record with
// media also gets "media": {"use_audio_in_video", "placeholders": [{"kind","index","span","pads"}]}.
void write_dump_line(const json& id, const clef::clef_trace* trace, const response* answer,
                     const error* refusal, std::string& out) {
  const clef::encoded_record* encoded = trace ? &trace->encoded : nullptr;
  const clef::record_logits* logits = trace && !trace->logits.empty() ? &trace->logits : nullptr;
  json line = json::object();
  line["id"] = id;
  line["ok"] = encoded != nullptr && refusal == nullptr;
  if (encoded == nullptr || refusal != nullptr) {
    line["error"] = refusal ? refusal->message : std::string("not run");
    line["code"] = refusal ? refusal->code : std::string(codes::internal);
    render_json(line, out, false);
    out.push_back('\n');
    return;
  }
  line["num_tokens"] = encoded->ids.size();
  line["input_ids"] = encoded->ids;
  json questions = json::array();
  for (std::size_t q = 0; q < encoded->questions.size(); ++q) {
    const auto& eq = encoded->questions[q];
    json item = json::object();
    item["id"] = eq.id;
    item["type"] = static_cast<int>(eq.type);
    item["question_span"] = {eq.question.begin, eq.question.end};
    item["option_ids"] = eq.option_ids;
    json spans = json::array();
    for (const auto& sp : eq.options) spans.push_back({sp.begin, sp.end});
    item["option_spans"] = std::move(spans);
    if (logits) {
      json values = json::array();
      // A non-finite logit (a broken model) is null: the line must stay valid JSON.
      for (const float v : (*logits)[q]) {
        values.push_back(std::isfinite(v) ? json(static_cast<double>(v)) : json(nullptr));
      }
      item["logits"] = std::move(values);
    }
    questions.push_back(std::move(item));
  }
  line["questions"] = std::move(questions);
  if (!trace->media.empty()) {
    json places = json::array();
    for (const auto& p : trace->media) {
      places.push_back({{"kind", p.kind}, {"index", p.index}, {"span", {p.begin, p.end}}, {"pads", p.pads}});
    }
    line["media"] = {{"use_audio_in_video", trace->audio_in_video}, {"placeholders", std::move(places)}};
  }
  render_json(line, out, false);
  if (answer) {
    out.pop_back();  // splice the response in as the reference renders it
    out += ",\"response\":";
    render_response(*answer, out);
    out.push_back('}');
  }
  out.push_back('\n');
}

// Answers requests in batches, each one's answer (or refusal) in input order: the JSONL lines, or
// the one request of a multi-line document.
class jsonl_decider {
 public:
  jsonl_decider(std::ostream& out, decision_engine& engine, const decide_options& options,
                std::ostream* dump)
      : out_(out),
        engine_(engine),
        clef_(dynamic_cast<clef::clef_engine*>(&engine)),
        options_(options),
        dump_(dump) {}

  // `size` is the request's full length; one over the limit was cut short when it was read.
  // `number` is its (first) line's number in the input.
  void add(std::string_view line, std::size_t size, std::size_t number) {
    const engine_description& d = engine_.describe();
    request_line meta;
    auto parsed = size > d.limits.max_body_bytes ? result<request>(body_too_large(size, d.limits))
                                                 : parse_request_line(line, d.limits, d.model_id, meta);
    if (meta.id.is_null()) meta.id = number;
    ids_.push_back(std::move(meta.id));
    if (parsed) {
      slots_.emplace_back(requests_.size());
      requests_.push_back(std::move(*parsed));
      max_lengths_.push_back(meta.max_length.value_or(options_.engine.clef.max_length));
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
    std::vector<std::optional<clef::clef_trace>> traces;
    auto results = clef_ ? clef_->decide(requests_, max_lengths_, dump_ ? &traces : nullptr)
                         : engine_.decide(requests_);
    buffer_.clear();
    dump_buffer_.clear();
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      // The request's answer, or why it has none: refused when read, by the engine, or by
      // make_response (an engine that broke its contract, 500).
      result<response> outcome = make_error(500, codes::inference_failed, "no answer");
      const clef::clef_trace* trace = nullptr;
      if (const error* refused = std::get_if<error>(&slots_[s])) {
        outcome = *refused;
      } else {
        const std::size_t i = std::get<std::size_t>(slots_[s]);
        if (i < traces.size() && traces[i]) trace = &*traces[i];
        outcome = results[i] ? make_response(requests_[i], *results[i], options_.confidence,
                                             engine_.describe().model_id)
                             : result<response>(results[i].error());
      }
      std::optional<error> failure;
      if (outcome) {
        render_response(*outcome, buffer_);
        last_status_ = exit_ok;
      } else {
        failure = outcome.error();
        render_error(*failure, buffer_);
        const bool engine_failed = failure->status >= 500;
        last_status_ = engine_failed ? exit_engine_failed : exit_refused;
        if (engine_failed) ++engine_failures_;
      }
      buffer_.push_back('\n');
      if (dump_) {
        write_dump_line(ids_[s], trace, outcome ? &*outcome : nullptr,
                        failure ? &*failure : nullptr, dump_buffer_);
      }
    }
    out_ << buffer_;
    out_.flush();
    if (dump_) {
      *dump_ << dump_buffer_;
      dump_->flush();
    }
    slots_.clear();
    requests_.clear();
    max_lengths_.clear();
    ids_.clear();
  }

 private:
  std::ostream& out_;
  decision_engine& engine_;
  clef::clef_engine* clef_;  // the same engine when it is clef: per-record windows and traces
  const decide_options& options_;
  std::ostream* dump_;
  std::vector<request> requests_;
  std::vector<std::size_t> max_lengths_;  // per request
  std::vector<std::variant<std::size_t, error>> slots_;  // a request's index in requests_, or its refusal
  std::vector<json> ids_;                                // per slot: the record id or line number
  std::string buffer_;
  std::string dump_buffer_;
  int last_status_ = exit_ok;
  std::size_t engine_failures_ = 0;
};

}  // namespace

int run_decide(std::istream& in, std::ostream& out, decision_engine& engine, const decide_options& options,
               std::ostream* dump) {
  const request_limits& limits = engine.describe().limits;
  line_reader reader(in, limits.max_body_bytes + 1);
  std::string line;
  std::size_t size = 0;
  if (!reader.next_nonblank(line, size)) {
    out << render_error(make_error(400, codes::invalid_json, "no request: the input is empty")) << '\n';
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
    const std::size_t first = reader.number();
    while (reader.next(line, size)) {
      body_size += size + 1;
      if (body.size() <= limits.max_body_bytes) {
        body += '\n';
        body += line;
      }
    }
    jsonl_decider decider(out, engine, options, dump);
    decider.add(body, body_size, first);
    decider.flush();
    return decider.last_status();
  }

  jsonl_decider decider(out, engine, options, dump);
  std::size_t requests = 0;
  do {
    decider.add(line, size, reader.number());
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

// A setting's flag: `max_length` is --max-length.
std::string flag_of(std::string_view key) {
  std::string flag = "--" + std::string(key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace

std::optional<int> read_engine_flags(const command_args& a, engine_options& options, const char* command,
                                     std::ostream& err) {
  clef::clef_engine_options& clef_options = options.clef;
  if (auto v = a.get("--engine")) options.name = std::string(*v);
  if (auto v = a.get("--model")) {
    auto dir = model_dir_arg(*v, command, err);
    if (!dir) return exit_no_input;
    clef_options.model_dir = std::move(*dir);
  }
  // The settings the config takes too, by the same rules (engine/factory/engine_settings.hpp).
  for (const auto& [key, kind] : clef_settings()) {
    const std::string flag = flag_of(key);
    const auto v = a.get(flag);
    if (!v) continue;
    json value = std::string(*v);
    std::int64_t n = 0;
    if (const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
        kind == setting_kind::integer && ec == std::errc() && end == v->data() + v->size()) {
      value = n;
    }
    if (auto problem = set_clef_setting(options, key, value)) return usage_error(err, flag + " " + *problem, command);
  }
  if (auto v = a.get("--prefix-cache")) {
    if (*v != "on" && *v != "off") return usage_error(err, "--prefix-cache takes on or off", command);
    clef_options.model.prefix_cache.enabled = *v == "on";
  }
  if (auto v = a.get("--media-root")) {
    if (!std::filesystem::is_directory(*v)) return usage_error(err, "--media-root needs a directory", command);
    clef_options.media.sources.roots = {std::string(*v)};
  }
  const bool is_clef = options.name == "clef";
  if (is_clef && clef_options.model_dir.empty()) return usage_error(err, "--engine clef needs --model DIR", command);
  const bool clef_flags = a.has("--model") || a.has("--prefix-cache") || a.has("--media-root") ||
                          std::any_of(clef_settings().begin(), clef_settings().end(),
                                      [&](const clef_setting_name& s) { return a.has(flag_of(s.key)); });
  if (!is_clef && clef_flags) {
    return usage_error(err, "--model, --model-id, --dtype, --head-dtype, --device, --max-length, --threads, "
                       "--batch-tokens, --prefix-cache and --media-root need --engine clef",
                       command);
  }
  // Another SystemOne server is reached with `baton serve` (engine.url in its configuration), not here.
  if (options.name == "systemone") {
    return usage_error(err, std::string(command) + " answers with the keyword or the clef engine; the systemone "
                       "engine is configured for baton serve (engine.url in config/baton.yaml)", command);
  }
  return std::nullopt;
}

namespace {

// Opens FILE (or returns `in` for - or none); nullptr after reporting an unreadable file.
std::istream* open_input(const std::optional<std::string>& file, std::istream& in, std::ifstream& storage,
                         std::ostream& err, const char* command) {
  if (!file || *file == "-") return &in;
  storage.open(*file, std::ios::binary);
  std::error_code ec;
  if (!storage || std::filesystem::is_directory(*file, ec)) {
    err << "baton " << command << ": cannot read " << *file << (storage ? ": it is a directory" : "") << "\n";
    return nullptr;
  }
  return &storage;
}

}  // namespace

int decide_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err) {
  command_args a;
  if (auto problem = parse_args(args, {"--engine", "--confidence", "--model", "--model-id", "--dtype", "--head-dtype",
                                       "--device", "--max-length", "--threads", "--batch-tokens", "--prefix-cache",
                                       "--dump", "--media-root"},
                                {"--jsonl"}, a)) {
    return usage_error(err, *problem, "decide");
  }
  if (a.help) {
    out << decide_help;
    return exit_ok;
  }
  decide_options options;
  options.jsonl = a.has("--jsonl");
  if (auto v = a.get("--confidence")) {
    auto metric = parse_confidence_metric(*v);
    if (!metric) return usage_error(err, "--confidence takes p_max or margin", "decide");
    options.confidence = *metric;
  }
  if (auto v = a.get("--dump")) options.dump = std::string(*v);
  if (auto failed = read_engine_flags(a, options.engine, "decide", err)) return *failed;
  if (!options.dump.empty() && options.engine.name != "clef") return usage_error(err, "--dump needs --engine clef", "decide");
  const std::optional<std::string>& file = a.file;
  auto made = make_engine(options.engine);
  if (!made) {
    // A 400 is the options' fault (an unknown engine); a release that does not load is not.
    if (made.error().status < 500) return usage_error(err, made.error().message, "decide");
    err << "baton decide: " << made.error().message << "\n";
    return exit_engine_failed;
  }
  const std::unique_ptr<decision_engine> engine = std::move(*made);

  std::ofstream dump_file;
  if (!options.dump.empty()) {
    if (file && *file != "-" && overwrites_an_input(options.dump, {std::filesystem::path(*file)})) {
      err << "baton decide: --dump " << options.dump << " is the input; name another file\n";
      return exit_cant_create;
    }
    dump_file.open(options.dump, std::ios::binary | std::ios::trunc);
    if (!dump_file) {
      err << "baton decide: cannot write " << options.dump << "\n";
      return exit_cant_create;
    }
  }
  std::ostream* dump = options.dump.empty() ? nullptr : &dump_file;
  std::ifstream storage;
  std::istream* input = open_input(file, in, storage, err, "decide");
  if (!input) return exit_no_input;
  options.jsonl = options.jsonl || (file && file->ends_with(".jsonl"));
  return run_decide(*input, out, *engine, options, dump);
}


int encode_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err) {
  command_args a;
  if (auto problem = parse_args(args, {"--model", "--max-length"}, {}, a)) return usage_error(err, *problem, "encode");
  if (a.help) {
    out << encode_help;
    return exit_ok;
  }
  std::size_t max_length = 64000;
  if (!read_count(a, "--max-length", max_length)) {
    return usage_error(err, "--max-length needs a positive number of tokens", "encode");
  }
  const auto model_dir = a.get("--model");
  const std::optional<std::string>& file = a.file;
  if (!model_dir) return usage_error(err, "--model DIR is required", "encode");
  const auto dir = model_dir_arg(*model_dir, "encode", err);
  if (!dir) return exit_no_input;
  std::optional<clef::clef_encoder> encoder;
  try {
    encoder.emplace(*dir);
  } catch (const std::exception& e) {
    err << "baton encode: cannot load the tokenizer: " << e.what() << "\n";
    return exit_engine_failed;
  }
  std::ifstream storage;
  std::istream* input = open_input(file, in, storage, err, "encode");
  if (!input) return exit_no_input;

  const request_limits limits = request_limits::text_only();
  line_reader reader(*input, limits.max_body_bytes + 1);
  std::string line, buffer;
  std::size_t size = 0, lines = 0;
  while (reader.next_nonblank(line, size)) {
    ++lines;
    request_line meta;
    auto parsed = size > limits.max_body_bytes ? result<request>(body_too_large(size, limits))
                                               : parse_request_line(line, limits, {}, meta);
    if (meta.id.is_null()) meta.id = lines;
    buffer.clear();
    if (!parsed) {
      const error refused = parsed.error();
      write_dump_line(meta.id, nullptr, nullptr, &refused, buffer);
    } else if (auto encoded = encoder->encode(*parsed, meta.max_length.value_or(max_length)); !encoded) {
      const error refused = encoded.error();
      write_dump_line(meta.id, nullptr, nullptr, &refused, buffer);
    } else {
      const clef::clef_trace trace{std::move(*encoded), {}, false, {}};
      write_dump_line(meta.id, &trace, nullptr, nullptr, buffer);
    }
    out << buffer;
  }
  out.flush();
  return exit_ok;
}

int tokenize_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err) {
  command_args a;
  if (auto problem = parse_args(args, {"--tokenizer"}, {"--jsonl"}, a)) return usage_error(err, *problem, "tokenize");
  if (a.help) {
    out << tokenize_help;
    return exit_ok;
  }
  const bool jsonl = a.has("--jsonl");
  const auto path = a.get("--tokenizer");
  const std::optional<std::string>& file = a.file;
  if (!path) return usage_error(err, "--tokenizer PATH is required", "tokenize");
  std::unique_ptr<tokenizer> tok;
  try {
    tok = tokenizer::load(std::string(*path));
  } catch (const std::exception& e) {
    err << "baton tokenize: cannot load the tokenizer: " << e.what() << "\n";
    return exit_engine_failed;
  }
  std::ifstream storage;
  std::istream* input = open_input(file, in, storage, err, "tokenize");
  if (!input) return exit_no_input;

  int status = exit_ok;
  std::string line, buffer;
  std::vector<std::int32_t> ids;
  json value;
  json_parse_error parse_error;
  while (std::getline(*input, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string_view text = line;
    std::optional<error> refused;
    if (jsonl) {
      if (!parse_json(line, value, parse_error) || !value.is_string()) {
        refused = make_error(422, codes::invalid_text, "the line is not a JSON string");
      } else {
        text = value.get_ref<const std::string&>();
      }
    } else if (!valid_utf8(text)) {
      refused = make_error(422, codes::invalid_text, "the line is not valid UTF-8");
    }
    buffer.clear();
    if (refused) {
      render_error(*refused, buffer);
      status = exit_refused;
    } else {
      ids.clear();
      tok->encode(text, ids);
      buffer.push_back('[');
      for (std::size_t k = 0; k < ids.size(); ++k) {
        if (k) buffer.push_back(',');
        buffer += std::to_string(ids[k]);
      }
      buffer.push_back(']');
    }
    buffer.push_back('\n');
    out << buffer;
  }
  out.flush();
  return status;
}

}  // namespace baton
