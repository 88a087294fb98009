// Every error code baton answers with: the `code` of the one error body (docs/systemone.md,
// docs/protocol.md and docs/escalations.md list them), a tool run's error_code, a log row's. Named
// once, here: a name that is misspelt does not compile, and control flow compares names, not
// strings (tests/core/repository_test.cpp refuses a code's string anywhere else in the
// production code). The values are the wire's and never change. Grouped by where they arise.
#pragma once

#include "core/error.hpp"

namespace baton::codes {

// Requests, bodies and the one error body (core/, the SystemOne API's validation).
inline constexpr const char* bad_upstream_response = "BAD_UPSTREAM_RESPONSE";
inline constexpr const char* inference_failed = "INFERENCE_FAILED";
inline constexpr const char* invalid_json = "INVALID_JSON";
inline constexpr const char* invalid_request = "INVALID_REQUEST";
inline constexpr const char* model_not_cached = "MODEL_NOT_CACHED";
inline constexpr const char* request_too_large = "REQUEST_TOO_LARGE";
inline constexpr const char* too_many_options = "TOO_MANY_OPTIONS";

// Engines: the clef engine, media, the systemone engine and its upstream, the scheduler.
inline constexpr const char* deadline_exceeded = "DEADLINE_EXCEEDED";
inline constexpr const char* engine_load_failed = "ENGINE_LOAD_FAILED";
inline constexpr const char* engine_needs_credentials = "ENGINE_NEEDS_CREDENTIALS";
inline constexpr const char* engine_needs_model = "ENGINE_NEEDS_MODEL";
inline constexpr const char* engine_unavailable = "ENGINE_UNAVAILABLE";
inline constexpr const char* input_too_long = "INPUT_TOO_LONG";
inline constexpr const char* invalid_engine_ca_file = "INVALID_ENGINE_CA_FILE";
inline constexpr const char* invalid_engine_url = "INVALID_ENGINE_URL";
inline constexpr const char* invalid_media = "INVALID_MEDIA";
inline constexpr const char* media_source_refused = "MEDIA_SOURCE_REFUSED";
inline constexpr const char* media_timeout = "MEDIA_TIMEOUT";
inline constexpr const char* media_too_large = "MEDIA_TOO_LARGE";
inline constexpr const char* media_unavailable = "MEDIA_UNAVAILABLE";
inline constexpr const char* out_of_memory = "OUT_OF_MEMORY";
inline constexpr const char* overloaded = "OVERLOADED";
inline constexpr const char* shutting_down = "SHUTTING_DOWN";
inline constexpr const char* unknown_engine = "UNKNOWN_ENGINE";
inline constexpr const char* upstream_auth_failed = "UPSTREAM_AUTH_FAILED";
inline constexpr const char* upstream_not_found = "UPSTREAM_NOT_FOUND";
inline constexpr const char* upstream_refused = "UPSTREAM_REFUSED";
inline constexpr const char* upstream_unreachable = "UPSTREAM_UNREACHABLE";

// The registry and the executors (a tool run's error_code).
inline constexpr const char* executor_exit_status = "EXECUTOR_EXIT_STATUS";
inline constexpr const char* executor_http_status = "EXECUTOR_HTTP_STATUS";
inline constexpr const char* executor_invalid_arguments = "EXECUTOR_INVALID_ARGUMENTS";  // an MCP call lacks a required argument
inline constexpr const char* executor_not_runnable = "EXECUTOR_NOT_RUNNABLE";
inline constexpr const char* executor_output_too_large = "EXECUTOR_OUTPUT_TOO_LARGE";
inline constexpr const char* executor_spawn_failed = "EXECUTOR_SPAWN_FAILED";
inline constexpr const char* executor_timeout = "EXECUTOR_TIMEOUT";
inline constexpr const char* executor_tool_error = "EXECUTOR_TOOL_ERROR";  // an MCP tool answered isError
inline constexpr const char* executor_unreachable = "EXECUTOR_UNREACHABLE";
inline constexpr const char* invalid_history = "INVALID_HISTORY";
inline constexpr const char* invalid_registry = "INVALID_REGISTRY";
inline constexpr const char* question_conflict = "QUESTION_CONFLICT";

// Policies.
inline constexpr const char* invalid_policy = "INVALID_POLICY";

// The agent and review protocols' frames.
inline constexpr const char* invalid_frame = "INVALID_FRAME";
inline constexpr const char* invalid_resolution = "INVALID_RESOLUTION";
inline constexpr const char* unknown_type = "UNKNOWN_TYPE";

// The decision log.
inline constexpr const char* chain_broken = "CHAIN_BROKEN";
inline constexpr const char* copy_mismatch = "COPY_MISMATCH";
inline constexpr const char* copy_refused = "COPY_REFUSED";
inline constexpr const char* duplicate_row = "DUPLICATE_ROW";
inline constexpr const char* log_backlog = "LOG_BACKLOG";
inline constexpr const char* log_chains_mismatch = "LOG_CHAINS_MISMATCH";
inline constexpr const char* log_damaged = "LOG_DAMAGED";
inline constexpr const char* log_not_empty = "LOG_NOT_EMPTY";
inline constexpr const char* log_open_failed = "LOG_OPEN_FAILED";
inline constexpr const char* log_outcome_unknown = "LOG_OUTCOME_UNKNOWN";
inline constexpr const char* log_read_failed = "LOG_READ_FAILED";
inline constexpr const char* log_schema_too_new = "LOG_SCHEMA_TOO_NEW";
inline constexpr const char* log_unavailable = "LOG_UNAVAILABLE";
inline constexpr const char* log_write_failed = "LOG_WRITE_FAILED";
inline constexpr const char* not_a_log = "NOT_A_LOG";
inline constexpr const char* no_log = "NO_LOG";
inline constexpr const char* sql_failed = "SQL_FAILED";
inline constexpr const char* sql_refused = "SQL_REFUSED";

// `baton pull` and the hub.
inline constexpr const char* bad_endpoint = "BAD_ENDPOINT";
inline constexpr const char* bad_revision = "BAD_REVISION";
inline constexpr const char* blob_locked = "BLOB_LOCKED";
inline constexpr const char* cannot_write = "CANNOT_WRITE";
inline constexpr const char* checksum_mismatch = "CHECKSUM_MISMATCH";
inline constexpr const char* disk_full = "DISK_FULL";
inline constexpr const char* hub_not_found = "HUB_NOT_FOUND";
inline constexpr const char* hub_unauthorized = "HUB_UNAUTHORIZED";
inline constexpr const char* hub_unavailable = "HUB_UNAVAILABLE";
inline constexpr const char* interrupted = "INTERRUPTED";
inline constexpr const char* transfer_incomplete = "TRANSFER_INCOMPLETE";

// The runtime: configuration, sessions, turns, escalations, reloads.
inline constexpr const char* already_resolved = "ALREADY_RESOLVED";
inline constexpr const char* duplicate_tool_result = "DUPLICATE_TOOL_RESULT";
inline constexpr const char* engine_timeout = "ENGINE_TIMEOUT";
inline constexpr const char* fallback_timeout = "FALLBACK_TIMEOUT";
inline constexpr const char* history_too_large = "HISTORY_TOO_LARGE";
inline constexpr const char* invalid_config = "INVALID_CONFIG";
inline constexpr const char* model_not_found = "MODEL_NOT_FOUND";
inline constexpr const char* not_found = "NOT_FOUND";
inline constexpr const char* queue_full = "QUEUE_FULL";
inline constexpr const char* reload_in_progress = "RELOAD_IN_PROGRESS";
inline constexpr const char* resolution_in_progress = "RESOLUTION_IN_PROGRESS";
inline constexpr const char* session_busy = "SESSION_BUSY";
inline constexpr const char* too_many_sessions = "TOO_MANY_SESSIONS";
inline constexpr const char* turn_out_of_order = "TURN_OUT_OF_ORDER";
inline constexpr const char* unknown_decision = "UNKNOWN_DECISION";
inline constexpr const char* unknown_resolution = "UNKNOWN_RESOLUTION";
inline constexpr const char* unknown_session = "UNKNOWN_SESSION";
inline constexpr const char* version_changed = "VERSION_CHANGED";

// The server: HTTP, keys, browsers, WebSocket upgrades.
inline constexpr const char* bad_request = "BAD_REQUEST";
inline constexpr const char* binary_frame = "BINARY_FRAME";
inline constexpr const char* forbidden = "FORBIDDEN";
inline constexpr const char* frame_too_large = "FRAME_TOO_LARGE";
inline constexpr const char* headers_too_large = "HEADERS_TOO_LARGE";
inline constexpr const char* host_refused = "HOST_REFUSED";
inline constexpr const char* internal = "INTERNAL";
inline constexpr const char* invalid_handshake = "INVALID_HANDSHAKE";
inline constexpr const char* listen_failed = "LISTEN_FAILED";
inline constexpr const char* method_not_allowed = "METHOD_NOT_ALLOWED";
inline constexpr const char* origin_refused = "ORIGIN_REFUSED";
inline constexpr const char* rate_limited = "RATE_LIMITED";
inline constexpr const char* server_busy = "SERVER_BUSY";
inline constexpr const char* unauthorized = "UNAUTHORIZED";
inline constexpr const char* unsupported_media_type = "UNSUPPORTED_MEDIA_TYPE";
inline constexpr const char* unsupported_websocket_version = "UNSUPPORTED_WEBSOCKET_VERSION";
inline constexpr const char* upgrade_required = "UPGRADE_REQUIRED";

// The command line.
inline constexpr const char* invalid_text = "INVALID_TEXT";
inline constexpr const char* not_a_release = "NOT_A_RELEASE";

}  // namespace baton::codes

namespace baton {

// A media item refused as the caller's fault: missing, unreadable, too large, not media (a 4xx
// of the engine's media path). Not the engine's own failure.
inline bool is_media_refusal(const error& e) {
  return e.status >= 400 && e.status < 500 &&
         (e.code == codes::invalid_media || e.code == codes::media_source_refused || e.code == codes::media_unavailable ||
          e.code == codes::media_too_large);
}

}  // namespace baton
