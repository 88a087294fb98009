// The last guard of the server's I/O handlers: an exception must never leave a handler (Asio would
// carry it out of io_context::run() and the process would end). A handler that throws is logged
// and its connection is answered 500 INTERNAL or closed; every other connection goes on.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/require.hpp>
#include <spdlog/spdlog.h>

#include <exception>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

namespace baton {

// A connection that is told when one of its handlers threw (on its strand, already logged): it
// answers 500 INTERNAL or closes. Must not throw.
class guard_target {
 public:
  virtual ~guard_target() = default;
  virtual void handler_failed() noexcept = 0;
};

// Runs `f`; an exception is logged with `where` and told to `target` (may be null).
template <class F>
void run_guarded(std::string_view where, F&& f, guard_target* target) noexcept {
  try {
    std::forward<F>(f)();
    return;
  } catch (const std::exception& e) {
    spdlog::error("{} threw: {}; its connection is answered 500 INTERNAL or closed", where, e.what());
  } catch (...) {
    spdlog::error("{} threw a non-standard exception; its connection is answered 500 INTERNAL or closed", where);
  }
  if (target) target->handler_failed();
}

// A connection's strand whose every handler runs guarded: what other parts post to the connection
// (the engine's, the log's and the executors' completions) and its timers fail only that
// connection. Asio's executor requirements: execute, equality, and the properties forwarded to the
// strand it wraps.
class guarded_executor {
 public:
  guarded_executor(boost::asio::any_io_executor inner, std::weak_ptr<guard_target> target) noexcept
      : inner_(std::move(inner)), target_(std::move(target)) {}

  template <class F>
  void execute(F&& f) const {
    inner_.execute([f = std::decay_t<F>(std::forward<F>(f)), target = target_]() mutable {
      const auto t = target.lock();
      run_guarded("a connection's handler", f, t.get());
    });
  }

  template <class Property>
  auto query(const Property& p) const -> decltype(boost::asio::query(std::declval<const boost::asio::any_io_executor&>(), p)) {
    return boost::asio::query(inner_, p);
  }

  template <class Property>
  auto require(const Property& p) const
      -> decltype(boost::asio::require(std::declval<const boost::asio::any_io_executor&>(), p), guarded_executor(
                      std::declval<boost::asio::any_io_executor>(), std::weak_ptr<guard_target>())) {
    return guarded_executor(boost::asio::require(inner_, p), target_);
  }

  template <class Property>
  auto prefer(const Property& p) const
      -> decltype(boost::asio::prefer(std::declval<const boost::asio::any_io_executor&>(), p), guarded_executor(
                      std::declval<boost::asio::any_io_executor>(), std::weak_ptr<guard_target>())) {
    return guarded_executor(boost::asio::prefer(inner_, p), target_);
  }

  friend bool operator==(const guarded_executor& a, const guarded_executor& b) noexcept {
    return a.inner_ == b.inner_ && !a.target_.owner_before(b.target_) && !b.target_.owner_before(a.target_);
  }
  friend bool operator!=(const guarded_executor& a, const guarded_executor& b) noexcept { return !(a == b); }

 private:
  boost::asio::any_io_executor inner_;
  std::weak_ptr<guard_target> target_;
};

// Runs the I/O context on this thread until it stops. A handler that threw past its own guard
// (one of no connection: the acceptor's, a deadline's) is logged and the loop goes on: Asio lets
// run() be called again after a handler's exception.
void run_io(boost::asio::io_context& ioc) noexcept;

}  // namespace baton
