#include "adapters/runtime/server_config.hpp"

#include <boost/algorithm/string/case_conv.hpp>
#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cstdlib>
#include <set>

#include "core/error_codes.hpp"
#include "core/hf_cache.hpp"
#include "engine/factory/engine_settings.hpp"
#include "tools/yaml.hpp"

namespace baton {

namespace {

using namespace tools::yaml;

std::int64_t read_integer(const YAML::Node& v, const std::string& what, std::int64_t min, std::int64_t max) {
  const json n = to_json(v, what);
  if (!n.is_number_integer() || n.get<std::int64_t>() < min || n.get<std::int64_t>() > max) {
    fail(v, what + " must be an integer within [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return n.get<std::int64_t>();
}

std::size_t read_count(const YAML::Node& v, const std::string& what, std::int64_t max = std::int64_t(1) << 40) {
  return static_cast<std::size_t>(read_integer(v, what, 1, max));
}

bool read_bool(const YAML::Node& v, const std::string& what) {
  const json b = to_json(v, what);
  if (!b.is_boolean()) fail(v, what + " must be true or false");
  return b.get<bool>();
}

std::filesystem::path read_path(const YAML::Node& v, const std::string& what, const std::filesystem::path& base) {
  const std::string s = read_string(v, what);
  if (s.empty()) fail(v, what + " must not be empty");
  const std::filesystem::path p(s);
  // Lexically normal, so that start-up logs and /health name `var/baton.db`, not `config/../var/baton.db`.
  return (p.is_absolute() ? p : base / p).lexically_normal();
}

// A host as a URL or a Host header names it: a name of letters, digits, dashes and dots, an IPv4
// address, or an IPv6 address in brackets.
bool is_host(std::string_view h) {
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') {
    boost::system::error_code ec;
    boost::asio::ip::make_address_v6(h.substr(1, h.size() - 2), ec);
    return !ec;
  }
  return !h.empty() && h.size() <= 253 && std::all_of(h.begin(), h.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  });
}

// server.allowed_origins: each exactly what a browser sends as `Origin`, scheme://host[:port].
std::vector<std::string> read_origins(const YAML::Node& v, const std::string& what) {
  if (!v.IsSequence()) fail(v, what + " must be a list of origins, e.g. [\"https://ops.example.com\"]");
  std::vector<std::string> out;
  for (const auto& item : v) {
    const std::string o = boost::algorithm::to_lower_copy(read_string(item, what + " items"));
    const auto sep = o.find("://");
    bool ok = sep != std::string::npos && sep > 0 &&
              std::all_of(o.begin(), o.begin() + std::ptrdiff_t(sep), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
              });
    if (ok) {
      std::string_view authority = std::string_view(o).substr(sep + 3);
      const auto colon = authority.rfind(':');
      if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
        const std::string_view port = authority.substr(colon + 1);
        ok = !port.empty() && port.size() <= 5 && std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
        // A browser leaves the scheme's default port out of Origin: such an entry would never match.
        const std::string_view scheme = std::string_view(o).substr(0, sep);
        if (ok && ((scheme == "https" && port == "443") || (scheme == "http" && port == "80"))) {
          fail(item, what + " items are origins as browsers send them, without the scheme's default port: " +
                         ticked(o) + " is sent as " + ticked(std::string(o, 0, o.size() - port.size() - 1)));
        }
        authority = authority.substr(0, colon);
      }
      ok = ok && is_host(authority);
    }
    if (!ok) {
      fail(item, what + " items must be origins as browsers send them, scheme://host[:port] with no path "
                        "and no wildcard: " + ticked(o));
    }
    out.push_back(o);
  }
  return out;
}

// server.allowed_hosts: host names or addresses without a port; IPv6 is kept without brackets.
std::vector<std::string> read_hosts(const YAML::Node& v, const std::string& what) {
  if (!v.IsSequence()) fail(v, what + " must be a list of host names, e.g. [baton.internal.example]");
  std::vector<std::string> out;
  for (const auto& item : v) {
    std::string h = boost::algorithm::to_lower_copy(read_string(item, what + " items"));
    boost::system::error_code bare_v6;
    boost::asio::ip::make_address_v6(h, bare_v6);
    if (!bare_v6) h = "[" + h + "]";
    if (!is_host(h)) {
      fail(item, what + " items must be host names or addresses without a port or scheme: " + ticked(h));
    }
    if (h.front() == '[') h = h.substr(1, h.size() - 2);
    // A fully qualified name's trailing dot: the Host check compares names without it.
    if (h.size() > 1 && h.back() == '.') h.pop_back();
    out.push_back(std::move(h));
  }
  return out;
}

void read_server(const YAML::Node& n, server_options& s) {
  for (const field& f : read_map(n, "`server`",
                                 {"listen", "io_threads", "max_frame_bytes", "max_frames_per_second", "max_bad_frames",
                                  "max_history_bytes", "max_history_bytes_total", "max_sessions", "session_idle_s", "max_pending_tool_results",
                                  "max_body_bytes", "request_deadline_ms", "max_connections", "max_buffered_bytes",
                                  "allowed_origins", "allowed_hosts"})) {
    const std::string what = ticked("server." + f.key);
    if (f.key == "listen") {
      if (!parse_listen(read_string(f.value, what), s)) fail(f.value, what + " must be HOST:PORT, e.g. 127.0.0.1:8470");
    } else if (f.key == "io_threads") {
      s.io_threads = read_count(f.value, what, 256);
    } else if (f.key == "max_frame_bytes") {
      s.max_frame_bytes = read_count(f.value, what, std::int64_t(1) << 30);
    } else if (f.key == "max_frames_per_second") {
      s.max_frames_per_second = read_count(f.value, what);
    } else if (f.key == "max_bad_frames") {
      s.max_bad_frames = read_count(f.value, what);
    } else if (f.key == "max_history_bytes") {
      s.max_history_bytes = read_count(f.value, what, std::int64_t(1) << 32);
    } else if (f.key == "max_history_bytes_total") {
      s.max_history_bytes_total = read_count(f.value, what, std::int64_t(1) << 40);
    } else if (f.key == "max_sessions") {
      s.max_sessions = read_count(f.value, what);
    } else if (f.key == "session_idle_s") {
      s.session_idle = std::chrono::seconds(read_count(f.value, what));
    } else if (f.key == "max_pending_tool_results") {
      s.max_pending_tool_results = read_count(f.value, what);
    } else if (f.key == "max_body_bytes") {
      s.max_body_bytes = read_count(f.value, what, std::int64_t(1) << 32);
    } else if (f.key == "max_connections") {
      s.max_connections = read_count(f.value, what, std::int64_t(1) << 24);
    } else if (f.key == "max_buffered_bytes") {
      s.max_buffered_bytes = read_count(f.value, what, std::int64_t(1) << 40);
    } else if (f.key == "allowed_origins") {
      s.allowed_origins = read_origins(f.value, what);
    } else if (f.key == "allowed_hosts") {
      s.allowed_hosts = read_hosts(f.value, what);
    } else {
      s.request_deadline = std::chrono::milliseconds(read_count(f.value, what));
    }
  }
}

// The value of the environment variable named at `v` (its name into `name`); `what` names the
// setting in the message when it is not set. The value is never echoed.
std::string read_env(const YAML::Node& v, const std::string& name_what, const std::string& what, std::string& name) {
  name = read_string(v, name_what);
  const char* value = name.empty() ? nullptr : std::getenv(name.c_str());
  if (value == nullptr) fail(v, what + ": the environment variable " + ticked(name) + " is not set");
  return value;
}

std::vector<std::string> read_strings(const YAML::Node& v, const std::string& what) {
  if (!v.IsSequence()) fail(v, what + " must be a list");
  std::vector<std::string> out;
  for (const auto& item : v) {
    out.push_back(read_string(item, what + " items"));
    if (out.back().empty()) fail(item, what + " items must not be empty");
  }
  return out;
}

// engine.media: local roots, URL fetching and the decode limits (docs/media.md).
void read_media(const YAML::Node& n, clef::media_settings& m, const std::filesystem::path& base,
                const std::string& section) {
  for (const field& f : read_map(n, ticked(section), {"roots", "urls", "max_images", "max_audio", "max_videos",
                                                      "max_bytes", "max_pixels", "max_audio_seconds",
                                                      "max_video_seconds", "decode_timeout_ms"})) {
    const std::string what = ticked(section + "." + f.key);
    if (f.key == "roots") {
      m.sources.roots.clear();
      for (const auto& r : read_strings(f.value, what)) {
        const std::filesystem::path p(r);
        m.sources.roots.push_back(p.is_absolute() ? p : base / p);
      }
    } else if (f.key == "urls") {
      for (const field& u : read_map(f.value, what, {"enabled", "hosts", "ca_file", "timeout_ms"})) {
        const std::string uwhat = ticked(section + ".urls." + u.key);
        if (u.key == "enabled") {
          m.sources.urls = read_bool(u.value, uwhat);
        } else if (u.key == "hosts") {
          m.sources.url_hosts = read_strings(u.value, uwhat);
        } else if (u.key == "ca_file") {
          m.sources.ca_file = read_path(u.value, uwhat, base);
        } else {
          m.sources.url_timeout = std::chrono::milliseconds(read_count(u.value, uwhat, 600000));
        }
      }
      if (m.sources.urls && m.sources.url_hosts.empty()) {
        fail(f.value, what + ": enabled URLs need `hosts`, the host names media may be fetched from");
      }
    } else if (f.key == "max_images") {
      m.max_images = read_count(f.value, what, 64);
    } else if (f.key == "max_audio") {
      m.max_audio = read_count(f.value, what, 64);
    } else if (f.key == "max_videos") {
      m.max_videos = read_count(f.value, what, 64);
    } else if (f.key == "max_bytes") {
      const auto b = read_count(f.value, what, std::int64_t(1) << 32);
      m.sources.max_bytes = m.images.max_bytes = m.audio.max_bytes = m.videos.max_bytes = b;
    } else if (f.key == "max_pixels") {
      const auto p = static_cast<std::int64_t>(read_count(f.value, what, std::int64_t(1) << 30));
      m.images.max_pixels = m.videos.max_pixels = p;
    } else if (f.key == "max_audio_seconds") {
      m.audio.max_seconds = static_cast<double>(read_count(f.value, what, 86400));
    } else if (f.key == "max_video_seconds") {
      m.videos.max_seconds = static_cast<double>(read_count(f.value, what, 86400));
    } else {
      const std::chrono::milliseconds t(read_count(f.value, what, 3600000));
      m.images.time_budget = m.audio.time_budget = m.videos.time_budget = t;
    }
  }
}

// engine.prefix_cache: the clef engine's cache of computed prefixes (issue 19).
void read_prefix_cache(const YAML::Node& n, clef::prefix_cache_options& p, const std::string& section) {
  for (const field& f : read_map(n, ticked(section), {"enabled", "max_bytes", "block_tokens"})) {
    const std::string what = ticked(section + "." + f.key);
    if (f.key == "enabled") {
      p.enabled = read_bool(f.value, what);
    } else if (f.key == "max_bytes") {
      // 0: a quarter of the memory available once the model has loaded.
      p.max_bytes = read_integer(f.value, what, 0, std::int64_t(1) << 50);
    } else {
      p.block_tokens = static_cast<std::int32_t>(read_integer(f.value, what, 16, 4096));
    }
  }
}

void read_engine(const YAML::Node& n, engine_options& e, const std::filesystem::path& base,
                 const std::string& section = "engine") {
  const auto fields = read_map(n, ticked(section),
                               {"name", "model", "model_id", "dtype", "head_dtype", "device", "threads", "max_length",
                                "batch_tokens", "max_batch", "queue_capacity", "timeout_ms", "flavor", "url", "ca_file", "key_env",
                                "account_env", "connections", "retries", "connect_timeout_ms", "request_timeout_ms", "media",
                                "prefix_cache"});
  const field* name = find(fields, "name");
  if (name) {
    e.name = read_string(name->value, ticked(section + ".name"));
    if (e.name != "keyword" && e.name != "clef" && e.name != "systemone") {
      fail(name->value, ticked(section + ".name") + " must be keyword, clef or systemone");
    }
  }
  const bool remote = e.name == "systemone";
  // Read first: which keys apply, and their defaults, depend on it.
  const field* flavor = find(fields, "flavor");
  if (remote && flavor) {
    const std::string f = read_string(flavor->value, ticked(section + ".flavor"));
    if (f == "workers-ai") {
      e.systemone.flavor = systemone_flavor::workers_ai;
    } else if (f != "systemone") {
      fail(flavor->value, ticked(section + ".flavor") + " must be systemone or workers-ai");
    }
  }
  const bool cloudflare = e.systemone.flavor == systemone_flavor::workers_ai;
  const field* key_env = nullptr;
  const field* account_env = nullptr;
  for (const field& f : fields) {
    const std::string what = ticked(section + "." + f.key);
    if (f.key == "name") {
      continue;
    } else if (f.key == "model") {
      // systemone: the name sent; otherwise the release directory, or ORG/NAME[@REV] in the
      // Hugging Face cache (`baton pull`).
      if (remote) {
        e.systemone.model = read_string(f.value, what);
      } else {
        const std::string s = read_string(f.value, what);
        if (s.empty()) fail(f.value, what + " must not be empty");
        auto dir = hf_cache::resolve_model_dir(s, base, hf_cache::default_root());
        if (!dir) fail(f.value, what + ": " + dir.error().message);
        e.clef.model_dir = std::move(*dir);
      }
    } else if (const auto kind = clef_setting(f.key)) {
      if (f.key == "model_id" && e.name != "clef") fail(f.value, what + " is read only by the clef engine");
      const json value = *kind == setting_kind::text ? json(read_string(f.value, what)) : to_json(f.value, what);
      if (auto problem = set_clef_setting(e, f.key, value)) fail(f.value, what + " " + *problem);
    } else if (f.key == "max_batch") {
      e.max_batch = read_count(f.value, what, 65536);
    } else if (f.key == "queue_capacity") {
      e.queue_capacity = read_count(f.value, what);
    } else if (f.key == "timeout_ms") {
      e.timeout = std::chrono::milliseconds(read_count(f.value, what));
    } else if (f.key == "media") {
      if (e.name != "clef") fail(f.value, what + " is read only by the clef engine");
      read_media(f.value, e.clef.media, base, section + ".media");
    } else if (f.key == "prefix_cache") {
      if (e.name != "clef") fail(f.value, what + " is read only by the clef engine");
      read_prefix_cache(f.value, e.clef.model.prefix_cache, section + ".prefix_cache");
    } else if (!remote) {
      fail(f.value, what + " is read only by the systemone engine");
    } else if (f.key == "flavor") {
      continue;
    } else if (f.key == "url") {
      e.systemone.url = read_string(f.value, what);
    } else if (f.key == "ca_file") {
      e.systemone.ca_file = read_path(f.value, what, base);
    } else if (f.key == "key_env") {
      key_env = &f;
    } else if (f.key == "account_env") {
      if (!cloudflare) fail(f.value, what + " is read only by the workers-ai flavor (" + ticked(section + ".flavor: workers-ai") + ")");
      account_env = &f;
    } else if (f.key == "connections") {
      e.systemone.connections = read_count(f.value, what, 1024);
    } else if (f.key == "retries") {
      e.systemone.retries = static_cast<int>(read_integer(f.value, what, 0, 10));
    } else if (f.key == "connect_timeout_ms") {
      e.systemone.connect_timeout = std::chrono::milliseconds(read_count(f.value, what));
    } else {
      e.systemone.timeout = std::chrono::milliseconds(read_count(f.value, what));
    }
  }
  if (e.name == "clef" && e.clef.model_dir.empty()) fail(n, ticked(section + ".name: clef") + " needs " + ticked(section + ".model") + ", a release directory");
  if (e.name == "keyword" && !e.clef.model_dir.empty()) fail(n, ticked(section + ".model") + " is read only by the clef and systemone engines");
  if (remote && cloudflare) {
    // The account and the token from the environment (Cloudflare's names unless told others),
    // refused here rather than on the first call.
    auto needed = [&](const field* named, std::string_view fallback, const std::string& key, const std::string& what_for,
                      std::string& env_name) {
      env_name = named ? read_string(named->value, ticked(section + "." + key)) : std::string(fallback);
      const char* value = env_name.empty() ? nullptr : std::getenv(env_name.c_str());
      if (value == nullptr || *value == '\0') {
        fail(named ? named->value : flavor->value,
             ticked(section + ".flavor: workers-ai") + " needs " + what_for + " in the environment variable " + ticked(env_name) +
                 " (" + ticked(section + "." + key) + " names another), which is unset or empty");
      }
      return std::string(value);
    };
    e.systemone.api_key = needed(key_env, workers_ai_defaults::key_env, "key_env", "a Cloudflare API token", e.systemone.key_env);
    e.systemone.account = needed(account_env, workers_ai_defaults::account_env, "account_env", "the Cloudflare account id",
                                 e.systemone.account_env);
  } else if (remote) {
    if (key_env) e.systemone.api_key = read_env(key_env->value, ticked(section + ".key_env"), ticked(section + ".key_env"), e.systemone.key_env);
    if (e.systemone.url.empty()) fail(n, ticked(section + ".name: systemone") + " needs " + ticked(section + ".url") + ", the server's base URL");
  }
}

// An API key (16 characters or more, no white space) or a password (any, not empty).
enum class secret_kind { api_key, password };
std::string read_secret(const std::vector<field>& fields, const YAML::Node& at, const std::string& what,
                        const std::filesystem::path& base, std::string& env_name,
                        secret_kind kind = secret_kind::api_key);

void read_log(const YAML::Node& n, server_config& c, const std::filesystem::path& base) {
  const auto fields = read_map(n, "`log`", {"path", "url", "password", "instance", "chains", "retry_ms", "durable_ack",
                                           "synchronous", "store_state", "max_batch", "queue_capacity"});
  if (find(fields, "path") && find(fields, "url")) {
    fail(find(fields, "url")->value, "`log.url` and `log.path` exclude each other: the log is a PostgreSQL database or a SQLite file");
  }
  if (!find(fields, "url")) {
    for (const char* key : {"password", "instance", "chains", "retry_ms"}) {
      if (const field* f = find(fields, key)) fail(f->value, ticked(std::string("log.") + key) + " is for the PostgreSQL store: it needs `log.url`");
    }
  }
  for (const field& f : fields) {
    const std::string what = ticked("log." + f.key);
    if (f.key == "url") {
      c.log.url = read_string(f.value, what);
      if (auto problem = log::postgres_url_problem(c.log.url)) fail(f.value, what + ": " + *problem);
    } else if (f.key == "password") {
      if (!f.value.IsMap()) fail(f.value, what + " must be {env: NAME} or {file: PATH}");
      std::string env_name;
      c.log.password = read_secret(read_map(f.value, what, {"env", "file"}), f.value, what, base, env_name,
                                   secret_kind::password);
    } else if (f.key == "instance") {
      c.log.instance = read_string(f.value, what);
      if (c.log.instance.empty() || c.log.instance.size() > 128) fail(f.value, what + " must be 1 to 128 characters");
    } else if (f.key == "chains") {
      const std::string s = read_string(f.value, what);
      if (s == "instance") {
        c.log.chains = log::log_options::chain_mode::instance;
      } else if (s == "global") {
        c.log.chains = log::log_options::chain_mode::global;
      } else {
        fail(f.value, what + " must be instance or global");
      }
    } else if (f.key == "retry_ms") {
      c.log.retry_ms = static_cast<int>(read_count(f.value, what, 600000));
    } else if (f.key == "path") {
      c.log.path = read_path(f.value, what, base);
    } else if (f.key == "durable_ack") {
      c.durable_ack = read_bool(f.value, what);
    } else if (f.key == "synchronous") {
      const std::string s = read_string(f.value, what);
      if (s == "off") {
        c.log.synchronous = log::log_options::sync_mode::off;
      } else if (s == "normal") {
        c.log.synchronous = log::log_options::sync_mode::normal;
      } else if (s == "full") {
        c.log.synchronous = log::log_options::sync_mode::full;
      } else {
        fail(f.value, what + " must be off, normal or full");
      }
    } else if (f.key == "store_state") {
      c.log.store_state = read_bool(f.value, what);
    } else if (f.key == "max_batch") {
      c.log.max_batch = read_count(f.value, what, 1 << 20);
    } else {
      c.log.queue_capacity = read_count(f.value, what);
    }
  }
}

void read_executors(const YAML::Node& n, tools::executor_limits& x) {
  for (const field& f : read_map(n, "`executors`", {"timeout_ms", "max_output_bytes"})) {
    const std::string what = ticked("executors." + f.key);
    if (f.key == "timeout_ms") {
      x.default_timeout = std::chrono::milliseconds(read_count(f.value, what));
    } else {
      x.max_output_bytes = read_count(f.value, what, std::int64_t(1) << 32);
    }
  }
}

double read_rate(const YAML::Node& v, const std::string& what) {
  const json n = to_json(v, what);
  if (!n.is_number() || !(n.get<double>() > 0) || n.get<double>() > 1e9) fail(v, what + " must be a number above 0");
  return n.get<double>();
}

// `requests_per_second` and `burst` (default: one second's worth, at least 1) from `fields`.
std::optional<rate_limit> read_rate_limit(const std::vector<field>& fields, const YAML::Node& at, const std::string& prefix) {
  const field* rate = find(fields, "requests_per_second");
  const field* burst = find(fields, "burst");
  if (!rate) {
    if (burst) fail(burst->value, ticked(prefix + "burst") + " needs " + ticked(prefix + "requests_per_second"));
    return std::nullopt;
  }
  rate_limit l;
  l.per_second = read_rate(rate->value, ticked(prefix + "requests_per_second"));
  l.burst = burst ? read_rate(burst->value, ticked(prefix + "burst")) : std::max(1.0, l.per_second);
  if (l.burst < 1) fail(at, ticked(prefix + "burst") + " must be at least 1");
  return l;
}

// The key itself, from the environment or a file; never echoed in a message.
std::string read_secret(const std::vector<field>& fields, const YAML::Node& at, const std::string& what,
                        const std::filesystem::path& base, std::string& env_name, secret_kind kind) {
  const field* env = find(fields, "env");
  const field* file = find(fields, "file");
  if (!env == !file) fail(at, what + " needs exactly one of `env` (an environment variable) or `file`");
  std::string secret;
  if (env) {
    secret = read_env(env->value, "the `env` of " + what, what, env_name);
  } else {
    const std::filesystem::path p = read_path(file->value, "the `file` of " + what, base);
    auto text = read_text(p, codes::invalid_config, 64 * 1024);  // a regular file of a key or two
    if (!text) fail(file->value, what + ": " + text.error().message);
    secret = text->substr(0, text->find('\n'));
  }
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) secret.pop_back();
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.front()))) secret.erase(0, 1);
  if (secret.empty()) fail(at, what + ": it is empty");
  if (kind == secret_kind::password) return secret;
  if (secret.size() < 16) fail(at, what + ": the key must be at least 16 characters");
  if (secret.find_first_of(" \t\r\n") != std::string::npos) fail(at, what + ": the key must not hold white space");
  return secret;
}

void read_auth(const YAML::Node& n, auth_options& a, const std::filesystem::path& base) {
  if (n.IsNull()) return;  // a section of comments only: no keys
  const auto fields = read_map(n, "`auth`", {"keys", "requests_per_second", "burst"});
  a.limit = read_rate_limit(fields, n, "auth.");
  const field* keys = find(fields, "keys");
  if (!keys || keys->value.IsNull()) return;
  if (!keys->value.IsSequence()) fail(keys->value, "`auth.keys` must be a list of {name, role, env | file}");
  std::set<std::string> names, secrets;
  for (std::size_t i = 0; i < keys->value.size(); ++i) {
    const YAML::Node k = keys->value[i];
    const std::string at = "auth.keys[" + std::to_string(i) + "]";
    const std::string what = ticked(at);
    const auto kf = read_map(k, what, {"name", "role", "env", "file", "requests_per_second", "burst"});
    api_key key;
    const field* name = find(kf, "name");
    if (!name) fail(k, what + " needs a `name`");
    key.name = read_string(name->value, ticked(at + ".name"));
    if (key.name.empty() || key.name.size() > 100) fail(name->value, ticked(at + ".name") + " must be 1 to 100 characters");
    if (!names.insert(key.name).second) fail(name->value, "two keys are named " + ticked(key.name));
    const field* r = find(kf, "role");
    if (!r) fail(k, what + " needs a `role`: agent, reviewer, auditor or admin");
    const auto parsed = parse_role(read_string(r->value, ticked(at + ".role")));
    if (!parsed) fail(r->value, ticked(at + ".role") + " must be agent, reviewer, auditor or admin");
    key.role = *parsed;
    key.secret = read_secret(kf, k, "key " + ticked(key.name), base, key.env);
    if (!secrets.insert(key.secret).second) fail(k, "key " + ticked(key.name) + " has the same secret as another key");
    key.limit = read_rate_limit(kf, k, at + ".");
    a.keys.push_back(std::move(key));
  }
}

void read_systemone(const YAML::Node& n, systemone_options& o) {
  for (const field& f : read_map(n, "`systemone`", {"model_aliases", "confidence"})) {
    const std::string what = ticked("systemone." + f.key);
    if (f.key == "model_aliases") {
      o.model_aliases.clear();
      if (f.value.IsNull()) continue;
      if (!f.value.IsSequence()) fail(f.value, what + " must be a list of model names");
      for (const YAML::Node& a : f.value) {
        std::string name = read_string(a, what);
        if (name.empty()) fail(a, what + " holds an empty name");
        o.model_aliases.push_back(std::move(name));
      }
    } else {
      const auto m = parse_confidence_metric(read_string(f.value, what));
      if (!m) fail(f.value, what + " must be p_max or margin");
      o.confidence = *m;
    }
  }
}

void read_routing(const YAML::Node& n, server_config& c, const std::filesystem::path& base) {
  for (const field& f : read_map(n, "`routing`", {"fallback", "keep_first", "drop_fraction", "max_options"})) {
    const std::string what = ticked("routing." + f.key);
    if (f.key == "max_options") {
      c.max_options = static_cast<std::size_t>(read_integer(f.value, what, 2, 255));
    } else if (f.key == "fallback") {
      c.fallback.emplace();
      read_engine(f.value, *c.fallback, base, "routing.fallback");
    } else if (f.key == "keep_first") {
      c.history.keep_first = static_cast<std::size_t>(read_integer(f.value, what, 0, std::int64_t(1) << 20));
    } else {
      const json v = to_json(f.value, what);
      if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 1) {
        fail(f.value, what + " must be a number above 0 and at most 1 (the share of the droppable events "
                             "that fit which one cut drops)");
      }
      c.history.fraction = v.get<double>();
    }
  }
}

}  // namespace

bool parse_listen(std::string_view text, server_options& out) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return false;
    host = host.substr(1, host.size() - 2);
  }
  unsigned p = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p > 65535) return false;
  out.host = std::string(host);
  out.port = static_cast<unsigned short>(p);
  return true;
}

result<server_config> parse_server_config(std::string_view yaml_text, const std::filesystem::path& file) {
  const std::filesystem::path base = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  return parse(yaml_text, file.string(), codes::invalid_config, [&](const YAML::Node& root) {
    server_config c;
    c.file = file;
    c.registry = (base / c.registry).lexically_normal();
    c.policy = (base / c.policy).lexically_normal();
    c.log.path = (base / c.log.path).lexically_normal();
    if (root.IsNull()) return c;
    for (const field& f : read_map(root, "the config", {"server", "engine", "registry", "policy", "log", "executors",
                                                        "auth", "systemone", "routing"})) {
      if (f.key == "server") {
        read_server(f.value, c.server);
      } else if (f.key == "engine") {
        read_engine(f.value, c.engine, base);
      } else if (f.key == "registry") {
        c.registry = read_path(f.value, "`registry`", base);
      } else if (f.key == "policy") {
        c.policy = read_path(f.value, "`policy`", base);
      } else if (f.key == "log") {
        read_log(f.value, c, base);
      } else if (f.key == "auth") {
        read_auth(f.value, c.auth, base);
      } else if (f.key == "systemone") {
        read_systemone(f.value, c.systemone);
      } else if (f.key == "routing") {
        read_routing(f.value, c, base);
      } else {
        read_executors(f.value, c.executors);
      }
    }
    return c;
  });
}

result<server_config> load_server_config(const std::filesystem::path& file) {
  auto text = read_text(file, codes::invalid_config);
  if (!text) return text.error();
  return parse_server_config(*text, file);
}

}  // namespace baton
