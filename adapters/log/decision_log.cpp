// The decision log's queue and writer thread: group commits over a decision_store.
#include "adapters/log/decision_log.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <variant>

#include <spdlog/spdlog.h>

#include "adapters/log/pg_log.hpp"
#include "core/error_codes.hpp"

namespace baton::log {

struct decision_log::impl {
  struct entry {
    log_row row;
    durable_callback done;
  };

  impl(std::unique_ptr<decision_store> s, const log_options& o) : options(o), store(std::move(s)) {
    writer = std::thread([this] { run(); });
  }

  result<void> push(entry e) {
    {
      std::lock_guard lock(mutex);
      if (closing) return make_error(503, codes::shutting_down, "the decision log is closed");
      if (queue.size() >= options.queue_capacity) {
        return make_error(503, codes::log_backlog, "the decision log cannot keep up; retry later");
      }
      queue.push_back(std::move(e));
    }
    wake.notify_one();
    return {};
  }

  // Takes everything queued (up to max_batch), writes it in one transaction, then tells each
  // row's caller, in queue order. Returns once closing and drained.
  void run() {
    std::vector<log_row> rows;
    std::vector<durable_callback> done;
    std::vector<std::optional<error>> refused;
    for (;;) {
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return closing || !queue.empty(); });
        if (queue.empty()) return;
        const std::size_t n = std::min(queue.size(), std::max<std::size_t>(options.max_batch, 1));
        for (std::size_t i = 0; i < n; ++i) {
          rows.push_back(std::move(queue[i].row));
          done.push_back(std::move(queue[i].done));
        }
        queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
      }
      const result<void> written = store->write(rows, refused);
      for (std::size_t k = 0; k < rows.size(); ++k) {
        if (!done[k]) continue;
        if (!written) {
          done[k](written.error());
        } else if (k < refused.size() && refused[k]) {
          done[k](*refused[k]);
        } else {
          done[k](result<void>());
        }
      }
      rows.clear();
      done.clear();
    }
  }

  void close() {
    {
      std::lock_guard lock(mutex);
      closing = true;
    }
    wake.notify_all();
    std::lock_guard lock(join_mutex);
    if (writer.joinable()) writer.join();
    store.reset();  // releases the database file
  }

  const log_options options;
  std::unique_ptr<decision_store> store;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<entry> queue;
  bool closing = false;
  std::mutex join_mutex;
  std::thread writer;
};

decision_log::decision_log(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

decision_log::~decision_log() { close(); }

std::unique_ptr<decision_log> decision_log::open(const log_options& options) {
  log_options o = options;
  // Named once, so that the store and whoever reads options() (the escalation desk, which skips
  // its own notifications) agree.
  if (o.shared() && o.instance.empty()) o.instance = default_instance_name();
  return open(open_store(o), o);
}

std::string default_instance_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::snprintf(host, sizeof host, "baton");
  return std::string(host) + "-" + std::to_string(getpid());
}

bool is_postgres_url(std::string_view db) { return db.starts_with("postgresql://") || db.starts_with("postgres://"); }

log_options log_at(std::string_view db) {
  log_options o;
  if (is_postgres_url(db)) {
    o.url = std::string(db);
  } else {
    o.path = std::filesystem::path(db);
  }
  return o;
}

std::optional<std::string> postgres_url_problem(const std::string& url) {
  if (!is_postgres_url(url)) return "must start with postgresql://";
  return check_postgres_url(url);
}

std::unique_ptr<decision_store> open_store(const log_options& options) {
  return options.shared() ? open_postgres_store(options) : open_sqlite_store(options);
}

std::unique_ptr<decision_log> decision_log::open(std::unique_ptr<decision_store> store, const log_options& options) {
  return std::unique_ptr<decision_log>(new decision_log(std::make_unique<impl>(std::move(store), options)));
}

result<void> decision_log::append(log_row r, durable_callback done) {
  return impl_->push({std::move(r), std::move(done)});
}

void decision_log::append_unwaited(decision_record r) {
  std::string id = r.id;
  auto report = [id](result<void> ok) {
    if (!ok) spdlog::error("decision {} is not in the log: {}", id, ok.error().message);
  };
  report(append(std::move(r), report));
}

void decision_log::close() { impl_->close(); }

const log_options& decision_log::options() const noexcept { return impl_->options; }

}  // namespace baton::log
