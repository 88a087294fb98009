// The command executor: argv exec'd directly (no shell), the call on stdin, stdout as the output.
// Everything waits on the I/O context: pipes and a pidfd, never a blocking waitpid on a live child.
#include <algorithm>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <system_error>
#include <vector>

#include "core/error_codes.hpp"
#include "tools/child_process.hpp"
#include "tools/executor_kinds.hpp"

namespace baton::tools::detail {

namespace {

namespace net = boost::asio;
using boost::system::error_code;

struct command_config {
  std::vector<std::string> argv;
  std::chrono::milliseconds timeout;
  std::size_t max_output_bytes = 0;
  std::vector<std::string> withheld_env;
};

// How much of stderr the detail of a failed run quotes.
constexpr std::size_t stderr_tail_bytes = 1024;

std::string errno_text(int e) { return std::generic_category().message(e); }

// One run. It owns its strand, descriptors and timer, so it outlives the executor that started it.
class command_run : public std::enable_shared_from_this<command_run> {
 public:
  command_run(std::shared_ptr<const command_config> config, net::any_io_executor io, const tool_call& call,
              std::function<void(tool_outcome)> done)
      : config_(std::move(config)),
        strand_(net::make_strand(io)),
        stdin_(strand_),
        stdout_(strand_),
        stderr_(strand_),
        exit_(strand_),
        timer_(strand_),
        input_(call_body(call)),
        done_(std::move(done)) {}

  // When the I/O context goes away with the run unfinished, the child must not outlive it.
  ~command_run() {
    if (pid_ > 0 && !reaped_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  void start() {
    net::post(strand_, [self = shared_from_this()] { self->spawn(); });
  }

 private:
  enum class stop_reason { none, timeout, too_large };

  void spawn() {
    child_spec spec;
    spec.argv = config_->argv;
    spec.withheld_env = config_->withheld_env;
    child_process child;
    std::string why;
    if (!spawn_child(spec, child, why)) return spawn_failed(std::move(why));
    pid_ = child.pid;
    if (const error_code ec = adopt(child, exit_, stdin_, stdout_, stderr_)) {
      return abandon("cannot watch the child: " + ec.message());
    }

    timer_.expires_after(config_->timeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->finished_) self->stop(stop_reason::timeout);
    });
    net::async_write(stdin_, net::buffer(input_), [self = shared_from_this()](error_code, std::size_t) {
      // EPIPE when the child does not read its input: its exit status says whether that is wrong.
      error_code ignored;
      self->stdin_.close(ignored);
    });
    read_stdout();
    read_stderr();
    wait_exit();
  }

  void read_stdout() {
    stdout_.async_read_some(net::buffer(out_buf_), [self = shared_from_this()](error_code ec, std::size_t n) {
      if (self->finished_) return;
      self->out_.append(self->out_buf_.data(), n);
      if (self->out_.size() > self->config_->max_output_bytes) {
        self->out_open_ = false;
        return self->stop(stop_reason::too_large);
      }
      if (ec) {
        self->out_open_ = false;
        return self->maybe_finish();
      }
      self->read_stdout();
    });
  }

  void read_stderr() {
    stderr_.async_read_some(net::buffer(err_buf_), [self = shared_from_this()](error_code ec, std::size_t n) {
      if (self->finished_) return;
      // Only the tail goes into the detail; reading on keeps the child from blocking on a full pipe.
      self->err_.append(self->err_buf_.data(), n);
      if (self->err_.size() > 2 * stderr_tail_bytes) {
        self->err_.erase(0, self->err_.size() - stderr_tail_bytes);
        self->err_cut_ = true;
      }
      if (ec) {
        self->err_open_ = false;
        return self->maybe_finish();
      }
      self->read_stderr();
    });
  }

  void wait_exit() {
    exit_.async_wait(net::posix::stream_descriptor::wait_read, [self = shared_from_this()](error_code ec) {
      if (ec == net::error::operation_aborted) return;
      int status = 0;
      const pid_t r = ::waitpid(self->pid_, &status, WNOHANG);
      if (r == 0) return self->wait_exit();
      self->reaped_ = true;
      self->exited_ = true;
      // ECHILD: someone else reaped it (SIGCHLD ignored process-wide): the status is lost.
      if (r < 0) self->wait_errno_ = errno;
      self->status_ = status;
      self->maybe_finish();
    });
  }

  void stop(stop_reason why) {
    if (stop_ == stop_reason::none) stop_ = why;
    // The whole group: a grandchild holding stdout would otherwise keep the run open.
    if (pid_ > 0) ::kill(-pid_, SIGKILL);
    maybe_finish();
  }

  // A run ends when the child is reaped and its output read to the end, or, once it was killed,
  // when it is reaped.
  void maybe_finish() {
    if (finished_ || !exited_) return;
    if (stop_ == stop_reason::none && (out_open_ || err_open_)) return;
    tool_outcome o;
    o.attempts = 1;
    if (stop_ == stop_reason::too_large) {
      o.error_code = codes::executor_output_too_large;
      o.detail = "stdout went over " + std::to_string(config_->max_output_bytes) + " bytes; the command was killed";
    } else if (stop_ == stop_reason::timeout) {
      o.error_code = codes::executor_timeout;
      o.detail = "no answer within " + std::to_string(config_->timeout.count()) + " ms; the command was killed";
    } else if (wait_errno_) {
      o.error_code = codes::executor_exit_status;
      o.detail = "the exit status was lost: " + errno_text(wait_errno_);
    } else if (WIFEXITED(status_) && WEXITSTATUS(status_) == 0) {
      o.ok = true;
      o.output = output_from_text(out_);
    } else {
      o.error_code = codes::executor_exit_status;
      o.detail = failure_detail();
    }
    finish(std::move(o));
  }

  std::string failure_detail() const {
    std::string d;
    if (WIFEXITED(status_)) {
      d = "exit status " + std::to_string(WEXITSTATUS(status_));
    } else {
      const int sig = WTERMSIG(status_);
      const char* name = ::sigabbrev_np(sig);
      d = "killed by signal " + std::to_string(sig) + (name ? " (SIG" + std::string(name) + ")" : "");
    }
    std::string_view tail = err_;
    const bool cut = err_cut_ || tail.size() > stderr_tail_bytes;
    if (cut) tail.remove_prefix(tail.size() - std::min(tail.size(), stderr_tail_bytes));
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r' || tail.back() == ' ')) tail.remove_suffix(1);
    if (!tail.empty()) d += "; stderr: " + std::string(cut ? "…" : "") + replace_invalid_utf8(tail);
    return d;
  }

  // Ends a run whose child never started or could not be watched.
  void spawn_failed(std::string detail) {
    tool_outcome o;
    o.attempts = 1;
    o.error_code = codes::executor_spawn_failed;
    o.detail = std::move(detail);
    finish(std::move(o));
  }

  // A child that started but cannot be waited for asynchronously is killed at once; reaping it
  // right after SIGKILL does not hold the thread.
  void abandon(std::string detail) {
    kill_and_reap(pid_);
    reaped_ = true;
    spawn_failed(std::move(detail));
  }

  void finish(tool_outcome o) {
    finished_ = true;
    timer_.cancel();
    error_code ignored;
    stdin_.close(ignored);
    stdout_.close(ignored);
    stderr_.close(ignored);
    exit_.close(ignored);
    o.duration_ms = ms_since(start_);
    auto done = std::move(done_);
    done(std::move(o));
  }

  std::shared_ptr<const command_config> config_;
  net::strand<net::any_io_executor> strand_;
  net::local::stream_protocol::socket stdin_;
  net::posix::stream_descriptor stdout_;
  net::posix::stream_descriptor stderr_;
  net::posix::stream_descriptor exit_;  // the pidfd: readable once the child has exited
  net::steady_timer timer_;
  std::string input_;
  std::function<void(tool_outcome)> done_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();

  pid_t pid_ = -1;
  bool reaped_ = false;
  bool exited_ = false;
  bool out_open_ = true;
  bool err_open_ = true;
  bool finished_ = false;
  bool err_cut_ = false;
  stop_reason stop_ = stop_reason::none;
  int status_ = 0;
  int wait_errno_ = 0;
  std::array<char, 16384> out_buf_;
  std::array<char, 4096> err_buf_;
  std::string out_;
  std::string err_;
};

class command_executor final : public executor {
 public:
  command_executor(std::shared_ptr<const command_config> config, net::any_io_executor io)
      : config_(std::move(config)), io_(std::move(io)) {}

  std::string_view kind() const noexcept override { return "command"; }

  void run(tool_call call, std::function<void(tool_outcome)> done) override {
    std::make_shared<command_run>(config_, io_, call, std::move(done))->start();
  }

 private:
  std::shared_ptr<const command_config> config_;
  net::any_io_executor io_;
};

}  // namespace

std::unique_ptr<executor> make_command_executor(const json& config, net::any_io_executor io,
                                                const executor_limits& limits) {
  auto c = std::make_shared<command_config>();
  if (const auto argv = config.find("argv"); argv != config.end() && argv->is_array()) {
    for (const json& a : *argv) {
      if (a.is_string()) c->argv.push_back(a.get<std::string>());
    }
  }
  if (c->argv.empty() || c->argv[0].empty()) {
    return make_failing_executor("command", codes::executor_spawn_failed, "the executor has no argv", std::move(io));
  }
  c->timeout = timeout_of(config, limits);
  c->max_output_bytes = limits.max_output_bytes;
  c->withheld_env = limits.withheld_env;
  return std::make_unique<command_executor>(std::move(c), std::move(io));
}

}  // namespace baton::tools::detail
