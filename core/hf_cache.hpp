// The Hugging Face hub cache on disk, as huggingface_hub lays it out and `baton pull` writes it:
// ROOT/models--ORG--NAME/{blobs/HASH, snapshots/COMMIT/FILE → ../../blobs/HASH, refs/REVISION}.
// Pure filesystem: finding a model by ORG/NAME[@REV] never touches the network, so every place
// that takes a release directory (`--model`, `engine.model`) takes a cached model too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace baton::hf_cache {

// An environment variable; nullopt when unset or empty, as huggingface_hub reads its own.
std::optional<std::string> env(const char* name);

// A path taken from the environment, expanded as huggingface_hub expands its own (constants.py:
// os.path.expanduser, then expandvars): a leading `~` or `~/` is $HOME, and $NAME / ${NAME} are
// the variables' values (unset ones stay as written).
std::filesystem::path expand_path(std::string_view text);

// HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub: where huggingface-cli looks, so both share one cache.
std::filesystem::path default_root();

// HF_TOKEN_PATH, else HF_HOME/token, else XDG_CACHE_HOME/huggingface/token, else
// ~/.cache/huggingface/token: where `hf auth login` (formerly `huggingface-cli login`) keeps the token.
std::filesystem::path default_token_file();

// `text` without its line breaks and surrounding whitespace; nullopt when nothing is left
// (huggingface_hub's _clean_token).
std::optional<std::string> clean_token(std::string_view text);

// The token in `file`, cleaned; nullopt when the file is absent, unreadable or blank.
std::optional<std::string> read_token(const std::filesystem::path& file);

// The token huggingface_hub sends when it is given none (utils/_auth.py get_token, v1.28.0):
// HF_TOKEN, else HUGGING_FACE_HUB_TOKEN (the legacy name), else the file default_token_file();
// each cleaned, a blank one counting as none. `source` is the variable's name or the file's path.
// (The hub's OIDC exchange, HF_OIDC_RESOURCE, and Colab's secret vault are not read.)
struct found_token {
  std::string token;
  std::string source;
  bool from_file = false;
};
std::optional<found_token> implicit_token();

// HF_HUB_DISABLE_IMPLICIT_TOKEN set to 1, ON, YES or TRUE (any case): huggingface_hub then sends
// none of implicit_token()'s (utils/_headers.py get_token_to_send).
bool implicit_token_disabled();

// A model as the hub names it: "ORG/NAME", with "@REV" for a branch, tag or commit.
struct model_ref {
  std::string repo;
  std::string revision = "main";
};

// Nullopt unless `text` is ORG/NAME[@REV] with hub-valid names (letters, digits, `-`, `_`, `.`;
// no `--`, which the cache's folder names use as the separator).
std::optional<model_ref> parse_model_ref(std::string_view text);

// A 40-hex-digit git commit sha, which names a snapshot folder directly.
bool is_commit(std::string_view revision);
// `text` is `size` lowercase hex digits (a commit, a git blob id, a sha256).
bool is_lower_hex(std::string_view text, std::size_t size);

// ROOT/models--ORG--NAME.
std::filesystem::path repo_dir(const std::filesystem::path& root, std::string_view repo);
// refs/REVISION under a repo folder; nullopt for a revision with `..` or an absolute path in it.
std::optional<std::filesystem::path> ref_file(const std::filesystem::path& repo_folder, std::string_view revision);

// The snapshot folder of `ref`: the commit its refs/ file names, or the commit itself.
// 404 MODEL_NOT_CACHED naming the cache and the `baton pull` that would fetch it.
result<std::filesystem::path> find_snapshot(const std::filesystem::path& root, const model_ref& ref);

// What `--model ARG` means: ARG as a path (relative to `base` when given) when it exists or is not
// ORG/NAME[@REV]; otherwise the cached snapshot. Errors only for a model reference not cached.
result<std::filesystem::path> resolve_model_dir(std::string_view arg, const std::filesystem::path& base,
                                                const std::filesystem::path& root);

// One snapshot in the cache, for `baton models`.
struct cached_snapshot {
  std::string repo;                // ORG/NAME
  std::string commit;              // the snapshot folder's name
  std::vector<std::string> refs;   // the revisions whose refs/ file names this commit
  std::filesystem::path dir;
  std::uint64_t bytes = 0;         // the files it holds, symbolic links followed
  std::size_t files = 0;
};

// Every model snapshot under `root`, ordered by repo then commit; none when there is no cache.
std::vector<cached_snapshot> list_snapshots(const std::filesystem::path& root);

}  // namespace baton::hf_cache
