#include <gtest/gtest.h>


#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "core/hf_cache.hpp"
#include "support/env_var.hpp"
#include "support/scratch_dir.hpp"

namespace baton {
namespace {

namespace fs = std::filesystem;

const std::string commit = "0123456789abcdef0123456789abcdef01234567";

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A snapshot laid out as huggingface-cli leaves it: blobs, relative links, refs/main.
fs::path make_snapshot(const fs::path& root) {
  const fs::path repo = root / "models--Cloudflare--clef-omni";
  write(repo / "blobs" / "aaaa", "{\"a\":1}");
  write(repo / "blobs" / "bbbb", std::string(1000, 'x'));
  fs::create_directories(repo / "snapshots" / commit / "sub");
  fs::create_symlink("../../blobs/aaaa", repo / "snapshots" / commit / "config.json");
  fs::create_symlink("../../../blobs/bbbb", repo / "snapshots" / commit / "sub" / "weights.bin");
  write(repo / "refs" / "main", commit);
  return repo / "snapshots" / commit;
}

TEST(hf_cache, model_references_are_hub_names) {
  const auto plain = hf_cache::parse_model_ref("Cloudflare/clef-omni");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->repo, "Cloudflare/clef-omni");
  EXPECT_EQ(plain->revision, "main");
  const auto pinned = hf_cache::parse_model_ref("Qwen/Qwen3-Omni_30B.A3B@refs/pr/1");
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->repo, "Qwen/Qwen3-Omni_30B.A3B");
  EXPECT_EQ(pinned->revision, "refs/pr/1");
  for (const char* bad : {"clef-omni", "a/b/c", "/abs/dir", "./a/b", "a--b/c", "a/..", "a/b@", "a/b@x@y", "", "a/"}) {
    EXPECT_FALSE(hf_cache::parse_model_ref(bad)) << bad;
  }
  EXPECT_TRUE(hf_cache::is_commit(commit));
  EXPECT_FALSE(hf_cache::is_commit("main"));
  EXPECT_EQ(hf_cache::repo_dir("/c", "Cloudflare/clef-omni"), fs::path("/c/models--Cloudflare--clef-omni"));
  EXPECT_FALSE(hf_cache::ref_file("/c/r", "../../etc"));
  EXPECT_EQ(*hf_cache::ref_file("/c/r", "refs/pr/1"), fs::path("/c/r/refs/refs/pr/1"));
}

TEST(hf_cache, root_follows_huggingface_hub) {
  test::env_var cache("HF_HUB_CACHE", "/x/hub-cache"), home("HF_HOME", "/x/hf-home"), xdg("XDG_CACHE_HOME", "/x/xdg");
  EXPECT_EQ(hf_cache::default_root(), fs::path("/x/hub-cache"));
  {
    test::env_var unset("HF_HUB_CACHE", nullptr);
    EXPECT_EQ(hf_cache::default_root(), fs::path("/x/hf-home/hub"));
    test::env_var unset_home("HF_HOME", nullptr);
    EXPECT_EQ(hf_cache::default_root(), fs::path("/x/xdg/huggingface/hub"));
    test::env_var unset_xdg("XDG_CACHE_HOME", nullptr), user("HOME", "/home/u");
    EXPECT_EQ(hf_cache::default_root(), fs::path("/home/u/.cache/huggingface/hub"));
  }
}

TEST(hf_cache, the_token_file_is_where_huggingface_cli_login_saves_it) {
  test::env_var path("HF_TOKEN_PATH", "/x/token-path"), home("HF_HOME", "/x/hf-home"), xdg("XDG_CACHE_HOME", "/x/xdg");
  EXPECT_EQ(hf_cache::default_token_file(), fs::path("/x/token-path"));
  test::env_var unset_path("HF_TOKEN_PATH", nullptr);
  EXPECT_EQ(hf_cache::default_token_file(), fs::path("/x/hf-home/token"));
  test::env_var unset_home("HF_HOME", nullptr);
  EXPECT_EQ(hf_cache::default_token_file(), fs::path("/x/xdg/huggingface/token"));
  test::env_var unset_xdg("XDG_CACHE_HOME", nullptr), user("HOME", "/home/u");
  EXPECT_EQ(hf_cache::default_token_file(), fs::path("/home/u/.cache/huggingface/token"));
}

TEST(hf_cache, a_token_file_is_read_without_its_whitespace) {
  const test::scratch_dir dir("baton-hf-token");
  std::ofstream(dir / "token") << "hf_abc123\n";
  std::ofstream(dir / "crlf") << "  hf_abc\r\n123 \t\r\n";  // _clean_token drops every \r and \n
  std::ofstream(dir / "blank") << "  \r\n";
  EXPECT_EQ(hf_cache::read_token(dir / "token"), std::optional<std::string>("hf_abc123"));
  EXPECT_EQ(hf_cache::read_token(dir / "crlf"), std::optional<std::string>("hf_abc123"));
  EXPECT_EQ(hf_cache::read_token(dir / "blank"), std::nullopt);
  EXPECT_EQ(hf_cache::read_token(dir / "absent"), std::nullopt);
}

// huggingface_hub's expanduser and expandvars on HF_HOME, HF_TOKEN_PATH and HF_HUB_CACHE.
TEST(hf_cache, paths_from_the_environment_expand_home_and_variables) {
  test::env_var home("HOME", "/home/u"), scratch("BATON_TEST_SCRATCH", "/srv/s"), unset("BATON_TEST_UNSET", nullptr);
  EXPECT_EQ(hf_cache::expand_path("~/hf"), fs::path("/home/u/hf"));
  EXPECT_EQ(hf_cache::expand_path("~"), fs::path("/home/u"));
  EXPECT_EQ(hf_cache::expand_path("/a/~/b"), fs::path("/a/~/b"));
  EXPECT_EQ(hf_cache::expand_path("$BATON_TEST_SCRATCH/hf/${BATON_TEST_SCRATCH}x"), fs::path("/srv/s/hf//srv/sx"));
  EXPECT_EQ(hf_cache::expand_path("$BATON_TEST_UNSET/${BATON_TEST_UNSET}/$/${"), fs::path("$BATON_TEST_UNSET/${BATON_TEST_UNSET}/$/${"));
  test::env_var path("HF_TOKEN_PATH", "~/t/token"), hf_home("HF_HOME", "$BATON_TEST_SCRATCH/hf"), cache("HF_HUB_CACHE", nullptr);
  EXPECT_EQ(hf_cache::default_token_file(), fs::path("/home/u/t/token"));
  EXPECT_EQ(hf_cache::default_root(), fs::path("/srv/s/hf/hub"));
}

// get_token's order (huggingface_hub 1.28.0, utils/_auth.py): HF_TOKEN, HUGGING_FACE_HUB_TOKEN,
// the login's file; HF_HUB_DISABLE_IMPLICIT_TOKEN turns all three off.
TEST(hf_cache, the_implicit_token_is_looked_up_as_huggingface_hub_does) {
  const test::scratch_dir dir("baton-hf-token-order");
  std::ofstream(dir / "token") << "hf_from_file\n";
  test::env_var hf("HF_TOKEN", " hf_from_env\n"), legacy("HUGGING_FACE_HUB_TOKEN", "hf_legacy"),
      path("HF_TOKEN_PATH", (dir / "token").c_str()), disable("HF_HUB_DISABLE_IMPLICIT_TOKEN", nullptr);
  auto t = hf_cache::implicit_token();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->token, "hf_from_env");
  EXPECT_EQ(t->source, "HF_TOKEN");
  EXPECT_FALSE(t->from_file);
  {
    test::env_var empty("HF_TOKEN", "");  // empty is unset: the legacy name is asked
    t = hf_cache::implicit_token();
    ASSERT_TRUE(t);
    EXPECT_EQ(t->token, "hf_legacy");
    EXPECT_EQ(t->source, "HUGGING_FACE_HUB_TOKEN");
  }
  {
    test::env_var blank("HF_TOKEN", "  ");  // `HF_TOKEN or ...` takes it, cleaned to nothing: the file
    t = hf_cache::implicit_token();
    ASSERT_TRUE(t);
    EXPECT_EQ(t->token, "hf_from_file");
    EXPECT_TRUE(t->from_file);
    EXPECT_EQ(t->source, (dir / "token").string());
  }
  test::env_var unset_hf("HF_TOKEN", nullptr), unset_legacy("HUGGING_FACE_HUB_TOKEN", nullptr);
  t = hf_cache::implicit_token();
  ASSERT_TRUE(t);
  EXPECT_EQ(t->token, "hf_from_file");
  test::env_var no_file("HF_TOKEN_PATH", (dir / "absent").c_str());
  EXPECT_FALSE(hf_cache::implicit_token());

  EXPECT_FALSE(hf_cache::implicit_token_disabled());
  for (const char* yes : {"1", "on", "Yes", "TRUE"}) {
    test::env_var d("HF_HUB_DISABLE_IMPLICIT_TOKEN", yes);
    EXPECT_TRUE(hf_cache::implicit_token_disabled()) << yes;
  }
  for (const char* no : {"0", "false", "", "2"}) {
    test::env_var d("HF_HUB_DISABLE_IMPLICIT_TOKEN", no);
    EXPECT_FALSE(hf_cache::implicit_token_disabled()) << no;
  }
}

TEST(hf_cache, finds_a_snapshot_by_ref_or_commit) {
  const test::scratch_dir t{"baton-hf-cache"};
  const fs::path snap = make_snapshot(t.path());
  const auto by_ref = hf_cache::find_snapshot(t.path(), {"Cloudflare/clef-omni", "main"});
  ASSERT_TRUE(by_ref) << by_ref.error().message;
  EXPECT_EQ(*by_ref, snap);
  const auto by_commit = hf_cache::find_snapshot(t.path(), {"Cloudflare/clef-omni", commit});
  ASSERT_TRUE(by_commit);
  EXPECT_EQ(*by_commit, snap);

  const auto no_repo = hf_cache::find_snapshot(t.path(), {"Other/model", "main"});
  ASSERT_FALSE(no_repo);
  EXPECT_EQ(no_repo.error().code, "MODEL_NOT_CACHED");
  EXPECT_NE(no_repo.error().message.find("`baton pull Other/model` downloads it"), std::string::npos)
      << no_repo.error().message;
  const auto no_rev = hf_cache::find_snapshot(t.path(), {"Cloudflare/clef-omni", "v2"});
  ASSERT_FALSE(no_rev);
  EXPECT_NE(no_rev.error().message.find("no snapshot of revision v2"), std::string::npos) << no_rev.error().message;
  EXPECT_NE(no_rev.error().message.find("--revision v2"), std::string::npos) << no_rev.error().message;
}

TEST(hf_cache, a_model_argument_is_a_path_first_then_a_cached_model) {
  const test::scratch_dir t{"baton-hf-cache"};
  const fs::path snap = make_snapshot(t.path() / "cache");
  // A folder that exists wins, even when it is spelled like ORG/NAME.
  fs::create_directories(t.path() / "Cloudflare" / "clef-omni");
  const auto local = hf_cache::resolve_model_dir("Cloudflare/clef-omni", t.path(), t.path() / "cache");
  ASSERT_TRUE(local);
  EXPECT_EQ(*local, t.path() / "Cloudflare" / "clef-omni");
  const auto cached = hf_cache::resolve_model_dir("Cloudflare/clef-omni@main", t.path() / "elsewhere", t.path() / "cache");
  ASSERT_TRUE(cached) << cached.error().message;
  EXPECT_EQ(*cached, snap);
  // Not a model reference: the path as given, for the loader to report.
  const auto missing = hf_cache::resolve_model_dir("no-such-dir", t.path(), t.path() / "cache");
  ASSERT_TRUE(missing);
  EXPECT_EQ(*missing, t.path() / "no-such-dir");
  EXPECT_FALSE(hf_cache::resolve_model_dir("Other/model", t.path(), t.path() / "cache"));
}

TEST(hf_cache, lists_snapshots_with_their_refs_and_sizes) {
  const test::scratch_dir t{"baton-hf-cache"};
  make_snapshot(t.path());
  fs::create_directories(t.path() / "models--Cloudflare--clef-omni" / "snapshots" / std::string(40, 'f'));
  fs::create_directories(t.path() / "datasets--a--b" / "snapshots" / commit);  // not a model
  const auto list = hf_cache::list_snapshots(t.path());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].repo, "Cloudflare/clef-omni");
  EXPECT_EQ(list[0].commit, commit);
  EXPECT_EQ(list[0].refs, std::vector<std::string>{"main"});
  EXPECT_EQ(list[0].files, 2u);
  EXPECT_EQ(list[0].bytes, 7u + 1000u);  // the blobs behind the links
  EXPECT_TRUE(list[1].refs.empty());
  EXPECT_EQ(list[1].bytes, 0u);
  EXPECT_TRUE(hf_cache::list_snapshots(t.path() / "none").empty());
}

}  // namespace
}  // namespace baton
