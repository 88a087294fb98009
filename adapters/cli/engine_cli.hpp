// `baton decide`, `baton encode` and `baton tokenize`: the engines and the tokenizer on SystemOne
// requests and text read from a file or standard input.
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

#include "core/answers.hpp"
#include "engine/decision_engine.hpp"

namespace baton {

struct decide_options {
  std::string engine = "keyword";
  std::string model_dir;              // clef: the release directory
  std::string model_id;               // clef: the responses' model; empty: from the release's path
  std::string dtype;                  // clef: f32 or bf16; empty: the weights' own dtype
  std::string head_dtype;             // clef: f32 or bf16; empty: f32
  std::string device = "cpu";         // clef: cpu, cuda, cuda:N
  std::size_t max_length = 64000;     // clef: tokens per record
  std::size_t threads = 0;            // clef: CPU threads (0: every core)
  std::size_t batch_tokens = 16384;   // clef: tokens packed into one forward
  std::string dump;                   // clef: file for the per-record trace (ids, spans, logits)
  std::string media_root;             // clef: local media paths resolve under this directory only
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

// `args` exclude the command's name.
int decide_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);
int encode_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);
int tokenize_main(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace baton
