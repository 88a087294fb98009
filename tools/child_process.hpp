// A child process as the command executor and MCP servers over stdio start it: argv exec'd
// directly (no shell), stdin a socket (Asio writes to sockets with MSG_NOSIGNAL, so a child that
// stops reading cannot raise SIGPIPE in baton), stdout and stderr pipes, its own process group,
// default signal handling, no descriptor of baton's besides 0, 1 and 2, and a pidfd to wait for it
// on an I/O context. Internal to baton_tools.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace baton::tools::detail {

struct child_spec {
  std::vector<std::string> argv;                          // argv[0] searched in PATH when it has no '/'
  std::vector<std::string> withheld_env;                  // baton's variables the child does not see
  std::vector<std::pair<std::string, std::string>> env;   // set (or replaced) in the child's environment
  std::string cwd;                                        // empty: baton's
};

// The parent's ends, to be handed to Asio (or closed): -1 where not open.
struct child_process {
  pid_t pid = -1;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, pidfd = -1;
};

// Starts `spec`; on failure returns false with `why` (a sentence), nothing left running or open.
bool spawn_child(const child_spec& spec, child_process& child, std::string& why);

// SIGKILL to the child's whole group, then reaps it (after SIGKILL that does not hold the thread).
void kill_and_reap(pid_t pid);

}  // namespace baton::tools::detail
