// The exit statuses every `baton` subcommand shares (each command's --help lists its own).
#pragma once

namespace baton {

// Exit codes, after sysexits.h where one fits.
enum exit_code : int {
  exit_ok = 0,
  exit_engine_failed = 1,
  exit_refused = 2,  // a single request was refused; its error body is on stdout
  exit_usage = 64,
  exit_data_error = 65,  // a download whose checksum does not match
  exit_no_input = 66,
  exit_unavailable = 69,  // a remote service (the hub) cannot be reached or fails
  exit_cant_create = 73,
  exit_io_error = 74,   // a disk full or a file that cannot be written
  exit_temp_fail = 75,  // a transfer cut short: the same command resumes it
  exit_no_perm = 77,    // refused credentials (401, 403)
  exit_config = 78,     // a bad configuration or a failed start
  exit_interrupted = 130,  // SIGINT, as a shell reports it
};

}  // namespace baton
