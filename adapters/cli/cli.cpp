#include "adapters/cli/cli.hpp"

#include <unistd.h>

#include <iostream>
#include <ostream>

#include "adapters/cli/check_cli.hpp"
#include "adapters/cli/calibrate_cli.hpp"
#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/hub_cli.hpp"
#include "adapters/cli/log_cli.hpp"
#include "adapters/cli/quantize_cli.hpp"
#include "adapters/cli/replay_cli.hpp"
#include "adapters/cli/serve_cli.hpp"

namespace baton {

namespace {

constexpr const char* main_help = R"(baton: an agent-routing runtime around the Clef-Omni decision model

Usage: baton <command> [options]

Commands:
  serve       run the routing server: agents over WebSocket at /v1/agent (docs/protocol.md)
  check       load a config's registry and policy as serve would: the schema every turn asks,
              its size in tokens, and what the policy can never use
  decide      answer SystemOne requests (JSON or JSONL) with a decision engine
  encode      show how the clef engine encodes requests (token ids and spans), without weights
  log         read the decision log: sql queries, show a decision, tail, verify the hash chains
  replay      decide the logged answers again under another policy: what changes, what reviewers said
  calibrate   per-tool precision and calibration from reviewers' resolutions; proposes lanes
  pull        download a Clef-Omni release from the Hugging Face hub (only what the engine reads)
  models      list the models in the Hugging Face cache: size, revision, fingerprint
  quantize    write a copy of a Clef release with int8 or int4 experts (--int8/--int4 SRC DST)
  tokenize    token ids of text lines with a Hugging Face tokenizer

Options:
  -h, --help  show this help (and `baton <command> --help` for a command)
  --version   print the version

Exit status: 64 for a usage error; each command documents its own.
)";

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
  if (command == "serve") return serve_main(args.subspan(1), out, err);
  if (command == "check") return check_main(args.subspan(1), out, err);
  if (command == "decide") return decide_main(args.subspan(1), in, out, err);
  if (command == "encode") return encode_main(args.subspan(1), in, out, err);
  if (command == "tokenize") return tokenize_main(args.subspan(1), in, out, err);
  if (command == "log") return log_main(args.subspan(1), in, out, err);
  if (command == "replay") return replay_main(args.subspan(1), out, err);
  if (command == "calibrate") return calibrate_main(args.subspan(1), out, err);
  // A bar redrawn in place only where a person watches it: the process's own terminal.
  if (command == "pull") return pull_main(args.subspan(1), out, err, &err == &std::cerr && ::isatty(STDERR_FILENO));
  if (command == "models") return models_main(args.subspan(1), out, err);
  if (command == "quantize") return quantize_main(args.subspan(1), out, err);
  return usage_error(err, "unknown command '" + std::string(command) + "'", nullptr);
}

}  // namespace baton
