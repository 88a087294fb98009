// `baton decide`, `baton encode` and `baton tokenize`: the engines and the tokenizer on SystemOne
// requests and text read from a file or standard input.
#pragma once

#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "adapters/cli/cli_args.hpp"
#include "core/answers.hpp"
#include "engine/decision_engine.hpp"
#include "engine/factory/engine_options.hpp"

namespace baton {

struct decide_options {
  engine_options engine;  // --engine and the clef flags (clef.max_length: a record's default window)
  std::string dump;       // clef: file for the per-record trace (ids, spans, logits)
  confidence_metric confidence = confidence_metric::p_max;
  std::string input = "-";
  bool jsonl = false;  // force JSONL; otherwise detected
  std::size_t batch_size = 64;
};

// Answers the requests read from `in` with `engine` (lines may also be record wrappers
// {"id","request","max_length"}), writing one response (or error body) per
// request to `out`. JSONL when `jsonl` or when the first line is a whole JSON value; otherwise the
// whole input is one request.
// With `dump`, the clef engine's trace of every line goes there (`baton decide --dump`).
int run_decide(std::istream& in, std::ostream& out, decision_engine& engine, const decide_options& options,
               std::ostream* dump = nullptr);

// The engine flags as `baton decide` takes them (--engine, and --model, --model-id, --dtype,
// --head-dtype, --device, --max-length, --threads, --batch-tokens, --prefix-cache and --media-root
// for clef) into `options`; the exit status once "baton COMMAND: why" is on `err` (64 usage, 66
// --model ORG/NAME not in the cache). The systemone engine is refused: it is configured for serve.
std::optional<int> read_engine_flags(const command_args& a, engine_options& options, const char* command,
                                     std::ostream& err);

// `args` exclude the command's name.
int decide_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);
int encode_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);
int tokenize_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace baton
