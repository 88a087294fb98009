// `baton replay`: the logged answers decided again under another policy (no model is asked), what
// would change, and what the people who resolved the escalations said about it; with --engine, the
// logged states decided again by an engine, to measure how much a model change moves the answers.
// What it shares with `baton calibrate` is declared here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/cli/cli_args.hpp"
#include "adapters/log/decision_log.hpp"
#include "adapters/log/log_reader.hpp"
#include "core/answers.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "engine/decision_engine.hpp"
#include "policies/policy.hpp"
#include "tools/registry.hpp"
#include "tools/schema_compiler.hpp"

namespace baton {

// The log, the registry its rows must have been made under, a policy over that registry and
// where to start.
struct review_inputs {
  log::log_options db;  // the log: its file or its database
  std::filesystem::path registry_file, policy_file;
  tools::registry registry;
  policies::policy policy;
  std::int64_t since_ms = 0;
  tools::event_dropping history;  // the config's routing.keep_first / drop_fraction, when it was read
};

// --config, --db, --registry, --policy and --since as replay and calibrate take them: the config
// (default config/baton.yaml) is read only for what the flags leave out (its log, registry
// and policy). The exit status once "baton COMMAND: why" is on `err`: 64 usage, 66 a missing file, 78 an invalid
// config, registry or policy.
std::optional<int> read_review_inputs(const command_args& a, const char* command, review_inputs& out, std::ostream& err);

// --since: unix milliseconds (digits only), or an ISO 8601 date (2024-05-01, midnight UTC) or date
// and time (2024-05-01T12:30, 2024-05-01 12:30:05.250, with Z or ±HH:MM; none is UTC).
std::optional<std::int64_t> parse_since(std::string_view text);

// The logged answers of a decision as a response; none after an engine failure (no answers) or
// when they do not parse.
std::optional<response> logged_answers(const log::decision_record& d);

// What a person (or a deadline) said about a decision's proposed tool.
enum class review { none, pending, approved, changed, denied, deadline };
// `approved`: executed the proposed tool; `changed`: executed another; `denied`; `deadline`: nobody
// answered in time (not a judgement); `pending`: escalated, not resolved yet; `none`: not escalated.
review review_of(const log::reviewed_decision& r);

// One line of the old → new table: a tool, its logged action and lane, the new ones.
struct replay_key {
  std::string tool, old_action, old_lane, new_action, new_lane;
  auto operator<=>(const replay_key&) const = default;
};
struct replay_cell {
  std::size_t decisions = 0, approved = 0, changed = 0, denied = 0, deadline = 0, pending = 0;
};

// --engine: the logged states decided again.
struct drift_report {
  std::string model;  // what answered: the engine's model id
  std::size_t redecided = 0, no_state = 0, engine_errors = 0, flips = 0, actions_changed = 0;
  std::size_t with_media = 0;  // agent turns decided with media, which the log does not keep: not decided again
  std::vector<std::pair<std::string, std::pair<std::size_t, std::size_t>>> questions;  // id → compared, flipped
  std::vector<double> shifts;  // the tool choice's confidence, new − old (the policy's metric)
};

struct replay_report {
  std::string db;
  std::int64_t since_ms = 0;
  std::string policy_file, policy_hash, registry_file, registry_hash;
  // What --fail-if names, in the order --json writes them.
  std::vector<std::pair<std::string, double>> counters;
  std::map<std::string, std::pair<std::size_t, std::size_t>> actions;  // action → (old, new)
  std::map<replay_key, replay_cell> table;
  std::optional<drift_report> drift;
  std::vector<std::string> failed;  // the --fail-if conditions that hold

  double counter(std::string_view name) const;
};

// Replays the log's decisions from `since_ms` under `policy`; with `engine`, also decides the
// logged states again. Errors: the log's (500 LOG_READ_FAILED).
result<replay_report> replay_log(const log::log_reader& log, const review_inputs& in, decision_engine* engine = nullptr);

void render_replay(const replay_report& r, std::ostream& out);
json replay_json(const replay_report& r);

// `args` exclude the command's name.
int replay_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace baton
