// The `baton` command line: subcommands over the libraries. main() only forwards to run_cli().
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>

#include "core/answers.hpp"
#include "engine/decision_engine.hpp"

namespace baton {

inline constexpr const char* baton_version = "0.1.0";

// Exit codes, after sysexits.h where one fits.
enum exit_code : int {
  exit_ok = 0,
  exit_engine_failed = 1,
  exit_refused = 2,  // a single request was refused; its error body is on stdout
  exit_usage = 64,
  exit_no_input = 66,
};

struct decide_options {
  std::string engine = "keyword";
  confidence_metric confidence = confidence_metric::p_max;
  std::string input = "-";
  bool jsonl = false;  // force JSONL; otherwise detected
  std::size_t batch_size = 64;
};

// Answers the requests read from `in` with `engine`, writing one response (or error body) per
// request to `out`. JSONL when `jsonl` or when the first line is a whole JSON value; otherwise the
// whole input is one request.
int run_decide(std::istream& in, std::ostream& out, decision_engine& engine, const decide_options& options);

// `args` excludes the program name.
int run_cli(std::span<const std::string_view> args, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace baton
