// The exit statuses every `baton` subcommand shares (each command's --help lists its own).
#pragma once

namespace baton {

// Exit codes, after sysexits.h where one fits.
enum exit_code : int {
  exit_ok = 0,
  exit_engine_failed = 1,
  exit_refused = 2,  // a single request was refused; its error body is on stdout
  exit_usage = 64,
  exit_no_input = 66,
  exit_cant_create = 73,
  exit_config = 78,  // a bad configuration or a failed start
};

}  // namespace baton
