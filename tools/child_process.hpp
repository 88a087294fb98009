// A child process as the command executor and MCP servers over stdio start it: argv exec'd
// directly (no shell), stdin a socket (Asio writes to sockets with MSG_NOSIGNAL, so a child that
// stops reading cannot raise SIGPIPE in baton), stdout and stderr pipes, its own process group,
// default signal handling, no descriptor of baton's besides 0, 1 and 2, and a pidfd to wait for it
// on an I/O context. Internal to baton_tools.
#pragma once

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/system/error_code.hpp>

#include <sys/types.h>
#include <unistd.h>

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

// Hands `child`'s descriptors to their Asio objects (the pidfd, stdin's socket, stdout's and
// stderr's stream descriptors): each is the object's once assigned, and closed with it; those not
// assigned after a failure are closed here. The first failure, if any.
template <class Pidfd, class Stdin, class Stdout, class Stderr>
boost::system::error_code adopt(const child_process& child, Pidfd& pidfd, Stdin& in, Stdout& out, Stderr& err) {
  boost::system::error_code ec;
  const auto take = [&ec](auto& object, int fd, auto&&... protocol) {
    if (!ec) object.assign(protocol..., fd, ec);
    if (ec && !object.is_open()) ::close(fd);
  };
  take(pidfd, child.pidfd);
  take(in, child.stdin_fd, boost::asio::local::stream_protocol());
  take(out, child.stdout_fd);
  take(err, child.stderr_fd);
  return ec;
}

// SIGKILL to the child's whole group, then reaps it (after SIGKILL that does not hold the thread).
void kill_and_reap(pid_t pid);

}  // namespace baton::tools::detail
