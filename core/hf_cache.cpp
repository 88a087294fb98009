#include "core/hf_cache.hpp"

#include "core/error_codes.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

namespace baton::hf_cache {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view folder_prefix = "models--";

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}

// One half of ORG/NAME as the hub allows it.
bool hub_name(std::string_view s) {
  return !s.empty() && s.size() <= 96 && std::all_of(s.begin(), s.end(), name_char) && s.front() != '.' &&
         s.front() != '-' && s.back() != '.' && s.back() != '-' && s.find("--") == std::string_view::npos &&
         s.find("..") == std::string_view::npos;
}

// huggingface_hub's HF_HOME: HF_HOME, else XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
fs::path hf_home() {
  if (auto v = env("HF_HOME")) return expand_path(*v);
  if (auto v = env("XDG_CACHE_HOME")) return expand_path(*v) / "huggingface";
  return fs::path(env("HOME").value_or(".")) / ".cache" / "huggingface";
}

bool var_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

// A refs/ file's commit: huggingface_hub writes the sha without a newline; a hand-made one may
// have one.
std::string read_ref(const fs::path& p) { return read_token(p).value_or(""); }

}  // namespace

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

fs::path expand_path(std::string_view text) {
  std::string path(text);
  if (path == "~" || path.starts_with("~/")) {
    if (auto home = env("HOME")) path = *home + path.substr(1);
  }
  // posixpath.expandvars: $NAME or ${NAME}, replaced only when the variable exists.
  std::string out;
  for (std::size_t i = 0; i < path.size();) {
    if (path[i] != '$') {
      out += path[i++];
      continue;
    }
    std::size_t begin = i + 1, end = begin;
    const bool braced = begin < path.size() && path[begin] == '{';
    if (braced) {
      end = path.find('}', begin + 1);
      if (end == std::string::npos) {
        out += path.substr(i);
        break;
      }
    } else {
      while (end < path.size() && var_char(path[end])) ++end;
    }
    const std::string name = braced ? path.substr(begin + 1, end - begin - 1) : path.substr(begin, end - begin);
    const std::size_t next = braced ? end + 1 : end;
    const char* value = name.empty() ? nullptr : std::getenv(name.c_str());
    out += value != nullptr ? std::string(value) : path.substr(i, next - i);
    i = std::max(next, i + 1);
  }
  return out;
}

fs::path default_root() {
  if (auto v = env("HF_HUB_CACHE")) return expand_path(*v);
  return hf_home() / "hub";
}

fs::path default_token_file() {
  if (auto v = env("HF_TOKEN_PATH")) return expand_path(*v);
  return hf_home() / "token";
}

std::optional<std::string> clean_token(std::string_view text) {
  std::string token;
  for (const char c : text) {
    if (c != '\r' && c != '\n') token += c;
  }
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; };
  while (!token.empty() && space(token.back())) token.pop_back();
  std::size_t lead = 0;
  while (lead < token.size() && space(token[lead])) ++lead;
  token.erase(0, lead);
  if (token.empty()) return std::nullopt;
  return token;
}

std::optional<std::string> read_token(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return clean_token(text.str());
}

std::optional<found_token> implicit_token() {
  // `HF_TOKEN or HUGGING_FACE_HUB_TOKEN`, then cleaned: a blank HF_TOKEN hides the legacy one.
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    const auto value = env(name);
    if (!value) continue;
    if (auto token = clean_token(*value)) return found_token{std::move(*token), name, false};
    break;
  }
  const fs::path file = default_token_file();
  if (auto token = read_token(file)) return found_token{std::move(*token), file.string(), true};
  return std::nullopt;
}

bool implicit_token_disabled() {
  auto value = env("HF_HUB_DISABLE_IMPLICIT_TOKEN").value_or("");
  for (char& c : value) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return value == "1" || value == "ON" || value == "YES" || value == "TRUE";
}

std::optional<model_ref> parse_model_ref(std::string_view text) {
  model_ref ref;
  if (const auto at = text.find('@'); at != std::string_view::npos) {
    const std::string_view rev = text.substr(at + 1);
    if (rev.empty() || std::any_of(rev.begin(), rev.end(), [](char c) { return c <= ' ' || c == '@'; })) {
      return std::nullopt;
    }
    ref.revision = std::string(rev);
    text = text.substr(0, at);
  }
  const auto slash = text.find('/');
  if (slash == std::string_view::npos || !hub_name(text.substr(0, slash)) || !hub_name(text.substr(slash + 1))) {
    return std::nullopt;
  }
  ref.repo = std::string(text);
  return ref;
}

bool is_lower_hex(std::string_view text, std::size_t size) {
  return text.size() == size &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_commit(std::string_view revision) { return is_lower_hex(revision, 40); }

fs::path repo_dir(const fs::path& root, std::string_view repo) {
  std::string folder(folder_prefix);
  for (char c : repo) {
    if (c == '/') folder += "--";
    else folder += c;
  }
  return root / folder;
}

std::optional<fs::path> ref_file(const fs::path& repo_folder, std::string_view revision) {
  const fs::path rev(revision);
  if (rev.empty() || rev.is_absolute()) return std::nullopt;
  for (const auto& part : rev) {
    if (part == ".." || part == ".") return std::nullopt;
  }
  return repo_folder / "refs" / rev;
}

result<fs::path> find_snapshot(const fs::path& root, const model_ref& ref) {
  const fs::path repo = repo_dir(root, ref.repo);
  std::error_code ec;
  const std::string pull = "; `baton pull " + ref.repo + (ref.revision == "main" ? "" : " --revision " + ref.revision) +
                           "` downloads it";
  if (!fs::is_directory(repo, ec)) {
    return make_error(404, codes::model_not_cached, ref.repo + " is not in the model cache " + root.string() + pull);
  }
  std::string commit;
  if (const auto file = ref_file(repo, ref.revision); file && fs::is_regular_file(*file, ec)) {
    commit = read_ref(*file);
  } else if (is_commit(ref.revision)) {
    commit = ref.revision;
  }
  if (!commit.empty() && commit.find('/') == std::string::npos && fs::is_directory(repo / "snapshots" / commit, ec)) {
    return repo / "snapshots" / commit;
  }
  return make_error(404, codes::model_not_cached,
                    ref.repo + " has no snapshot of revision " + ref.revision + " in " + repo.string() + pull);
}

result<fs::path> resolve_model_dir(std::string_view arg, const fs::path& base, const fs::path& root) {
  const fs::path p(arg);
  const fs::path path = (p.is_absolute() || base.empty() ? p : base / p).lexically_normal();
  std::error_code ec;
  if (fs::exists(path, ec)) return path;
  const auto ref = parse_model_ref(arg);
  if (!ref) return path;  // the loader says that it does not exist
  return find_snapshot(root, *ref);
}

std::vector<cached_snapshot> list_snapshots(const fs::path& root) {
  std::vector<cached_snapshot> out;
  std::error_code ec;
  // increment(ec), not range-for: a folder that cannot be read ends that listing, never the process.
  for (auto repos = fs::directory_iterator(root, ec); !ec && repos != fs::directory_iterator(); repos.increment(ec)) {
    const fs::directory_entry& repo = *repos;
    const std::string folder = repo.path().filename().string();
    if (!folder.starts_with(folder_prefix) || !repo.is_directory(ec)) continue;
    std::string id = folder.substr(folder_prefix.size());
    const auto split = id.find("--");
    if (split == std::string::npos) continue;
    id = id.substr(0, split) + "/" + id.substr(split + 2);
    // Every refs/ file, nested ones (refs/pr/1) included: revision → commit.
    std::vector<std::pair<std::string, std::string>> refs;
    const fs::path refs_dir = repo.path() / "refs";
    for (auto it = fs::recursive_directory_iterator(refs_dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->is_regular_file(ec)) refs.emplace_back(fs::relative(it->path(), refs_dir).generic_string(), read_ref(it->path()));
    }
    std::error_code snaps_ec;
    for (auto snaps = fs::directory_iterator(repo.path() / "snapshots", snaps_ec);
         !snaps_ec && snaps != fs::directory_iterator(); snaps.increment(snaps_ec)) {
      const fs::directory_entry& snap = *snaps;
      if (!snap.is_directory(ec)) continue;
      cached_snapshot s{id, snap.path().filename().string(), {}, snap.path(), 0, 0};
      for (const auto& [rev, commit] : refs) {
        if (commit == s.commit) s.refs.push_back(rev);
      }
      std::sort(s.refs.begin(), s.refs.end());
      for (auto it = fs::recursive_directory_iterator(snap.path(), ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        std::error_code size_ec;
        const auto size = fs::file_size(it->path(), size_ec);  // follows the link to its blob
        if (size_ec) continue;  // a folder, or a link whose blob is gone
        s.bytes += size;
        ++s.files;
      }
      ec.clear();
      out.push_back(std::move(s));
    }
    ec.clear();
  }
  std::sort(out.begin(), out.end(), [](const cached_snapshot& a, const cached_snapshot& b) {
    return std::tie(a.repo, a.commit) < std::tie(b.repo, b.commit);
  });
  return out;
}

}  // namespace baton::hf_cache
