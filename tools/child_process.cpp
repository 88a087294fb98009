#include "tools/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <system_error>

namespace baton::tools::detail {

namespace {

std::string errno_text(int e) { return std::generic_category().message(e); }

// A descriptor that closes itself unless released.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace

bool spawn_child(const child_spec& spec, child_process& child, std::string& why) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    why = "no program to start";
    return false;
  }
  int in[2], out[2], err[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    why = "socketpair: " + errno_text(errno);
    return false;
  }
  unique_fd in_parent(in[0]), in_child(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) {
    why = "pipe: " + errno_text(errno);
    return false;
  }
  unique_fd out_parent(out[0]), out_child(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    why = "pipe: " + errno_text(errno);
    return false;
  }
  unique_fd err_parent(err[0]), err_child(err[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_child.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out_child.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_child.get(), 2);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, spec.cwd.c_str());
  // Descriptors other threads open without O_CLOEXEC (server sockets) stay in baton.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  // Baton's blocked and ignored signals (SIGPIPE) are not the child's; its own process group
  // lets a timeout kill what it started too.
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // baton's environment, read now, less the withheld variables and those `env` sets.
  std::vector<std::string> set;
  for (const auto& [name, value] : spec.env) set.push_back(name + "=" + value);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool withheld = std::find(spec.withheld_env.begin(), spec.withheld_env.end(), name) != spec.withheld_env.end();
    const bool replaced = std::any_of(spec.env.begin(), spec.env.end(), [&](const auto& v) { return v.first == name; });
    if (!withheld && !replaced) env.push_back(*e);
  }
  for (std::string& s : set) env.push_back(s.data());
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    why = "cannot start `" + spec.argv[0] + "`: " + errno_text(rc);
    return false;
  }
  unique_fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (pidfd.get() < 0) {
    why = "pidfd_open: " + errno_text(errno);
    kill_and_reap(pid);
    return false;
  }
  // The child holds its ends now; ours would keep the pipes from ever reaching end of file.
  child.pid = pid;
  child.stdin_fd = in_parent.release();
  child.stdout_fd = out_parent.release();
  child.stderr_fd = err_parent.release();
  child.pidfd = pidfd.release();
  return true;
}

void kill_and_reap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace baton::tools::detail
