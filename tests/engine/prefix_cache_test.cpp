// The prefix cache (issue 19): attention over a cached prefix's keys against the whole record's,
// the cache's matching, scopes, pins and eviction on small tensors, and the clef engine on the
// tiny release, where every cached decision must equal the uncached one within 1e-5 (fp32).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/answers.hpp"
#include "engine/clef/clef_engine.hpp"
#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/prefix_cache.hpp"
#include "support/files.hpp"

namespace baton::clef {
namespace {

// ---- attention over earlier keys ------------------------------------------------------------------

// Records of past + own rows run whole, against their own rows run with the past rows as earlier
// keys: the same rows within fp32 rounding, for block sizes that cut records mid-block.
TEST(prefix_attention, own_rows_over_earlier_keys_equal_the_whole_records_rows) {
  if (!detail::onednn_built()) GTEST_SKIP() << "built without oneDNN: no fused CPU attention";
  at::manual_seed(7);
  const std::int64_t heads = 4, kv_heads = 2, dim = 16;
  const std::vector<std::int64_t> past{37, 0, 64}, own{11, 20, 1};
  std::vector<std::int64_t> whole;
  for (std::size_t r = 0; r < past.size(); ++r) whole.push_back(past[r] + own[r]);
  std::int64_t n_whole = 0, n_own = 0;
  for (std::size_t r = 0; r < past.size(); ++r) {
    n_whole += whole[r];
    n_own += own[r];
  }
  const at::Tensor q = at::randn({n_whole, heads, dim}), k = at::randn({n_whole, kv_heads, dim}),
                   v = at::randn({n_whole, kv_heads, dim});
  std::vector<at::Tensor> own_q;
  std::int64_t offset = 0;
  for (std::size_t r = 0; r < past.size(); ++r) {
    own_q.push_back(q.narrow(0, offset + past[r], own[r]));
    offset += whole[r];
  }
  const at::Tensor q_own = at::cat(own_q);
  for (const detail::attention_blocks blocks : {detail::attention_blocks{}, detail::attention_blocks{8, 16},
                                                detail::attention_blocks{5, 7}}) {
    at::Tensor full = at::empty({n_whole, heads * dim}), mine = at::empty({n_own, heads * dim});
    detail::attention_cpu(q, k, v, whole, 0.25, true, full, blocks);
    detail::attention_cpu(q_own, k, v, own, 0.25, true, mine, blocks, past);
    offset = 0;
    std::int64_t at_own = 0;
    for (std::size_t r = 0; r < past.size(); ++r) {
      const double diff = (full.narrow(0, offset + past[r], own[r]) - mine.narrow(0, at_own, own[r])).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5) << "record " << r << " blocks " << blocks.query_rows << "x" << blocks.keys;
      offset += whole[r];
      at_own += own[r];
    }
  }
  at::Tensor out = at::empty({n_own, heads * dim});
  EXPECT_THROW(detail::attention_cpu(q_own, k, v, own, 0.25, true, out, {}, {1, 2}), std::invalid_argument);
}

// ---- the cache on small tensors -------------------------------------------------------------------

// A state of `n` tokens for a model of `layers` layers, every value its position (so a view's rows
// show where they came from).
detail::prefix_state state_of(std::int64_t n, std::size_t layers = 2) {
  detail::prefix_state s;
  const at::Tensor rows = at::arange(n, at::kFloat).view({n, 1, 1}).expand({n, 1, 4}).contiguous();
  for (std::size_t l = 0; l < layers; ++l) {
    s.keys.push_back(rows.clone());
    s.values.push_back(rows.clone());
  }
  s.hidden = at::arange(n, at::kFloat).view({n, 1}).expand({n, 8}).contiguous();
  return s;
}

std::vector<std::int32_t> ids_of(std::int32_t first, std::int32_t n) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = first + i;
  return out;
}

TEST(prefix_cache, matches_the_longest_run_of_whole_blocks_and_leaves_a_token_to_compute) {
  detail::prefix_cache cache(1 << 20, 4);
  const auto ids = ids_of(100, 10);
  cache.insert("k", "", ids, state_of(10));
  // The same 10 tokens: 8 reused (two blocks), since at least one must run.
  auto same = cache.find("k", "", ids, 0, true);
  ASSERT_TRUE(same);
  EXPECT_EQ(same.length(), 8);
  EXPECT_EQ(same.state().hidden.size(0), 8);
  EXPECT_EQ(same.state().keys[1].select(0, 7).select(0, 0)[0].item<float>(), 7.F);
  // Appended tokens reuse both blocks; a change in the second block leaves only the first.
  auto longer = ids;
  longer.insert(longer.end(), {1, 2, 3, 4, 5});
  EXPECT_EQ(cache.find("k", "", longer, 0, true).length(), 8);
  auto changed = ids;
  changed[5] = 0;
  EXPECT_EQ(cache.find("k", "", changed, 0, true).length(), 4);
  // Another scope or other media: nothing; a minimum past the match: nothing.
  EXPECT_FALSE(cache.find("other", "", ids, 0, true));
  EXPECT_FALSE(cache.find("k", "sha256:media", ids, 0, true));
  EXPECT_FALSE(cache.find("k", "", ids, 9, true));
  EXPECT_FALSE(cache.find("k", "", ids_of(100, 4), 0, true));  // one block: nothing would be left to run
  const prefix_cache_counters s = cache.stats();
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.misses, 4);
  EXPECT_EQ(s.cached_tokens, 20);
  EXPECT_EQ(s.entries, 1);
}

TEST(prefix_cache, evicts_the_least_recently_used_by_bytes_but_never_a_pinned_entry) {
  const std::int64_t entry_bytes = state_of(8).bytes() + 8 * 4;
  detail::prefix_cache cache(2 * entry_bytes, 4);
  const auto a = ids_of(0, 8), b = ids_of(1000, 8), c = ids_of(2000, 8);
  cache.insert("k", "", a, state_of(8));
  cache.insert("k", "", b, state_of(8));
  EXPECT_EQ(cache.stats().bytes, 2 * entry_bytes);
  {
    auto pinned = cache.find("k", "", a, 0, false);  // a is now the most recent, and pinned
    ASSERT_TRUE(pinned);
    cache.insert("k", "", c, state_of(8));  // evicts b
    EXPECT_FALSE(cache.find("k", "", b, 0, false));
    EXPECT_TRUE(cache.find("k", "", c, 0, false));
    // Room only by evicting a, which is pinned, or c, which was used since: c goes.
    cache.insert("k", "", ids_of(3000, 8), state_of(8));
    EXPECT_TRUE(cache.find("k", "", a, 0, false));
    EXPECT_FALSE(cache.find("k", "", c, 0, false));
  }
  const prefix_cache_counters s = cache.stats();
  EXPECT_EQ(s.evictions, 2);
  EXPECT_EQ(s.entries, 2);
  EXPECT_LE(s.bytes, s.max_bytes);
  // An entry bigger than the whole cache is not kept, and evicts nothing.
  cache.insert("k", "", ids_of(5000, 64), state_of(64));
  EXPECT_EQ(cache.stats().entries, 2);
}

TEST(prefix_cache, a_match_through_a_newer_entrys_blocks_keeps_that_entry_longer) {
  const std::int64_t entry_bytes = state_of(8).bytes() + 8 * 4;
  detail::prefix_cache cache(2 * entry_bytes, 4);
  auto a = ids_of(0, 8), b = ids_of(0, 8);
  b[6] = -1;  // b shares a's first block, so its hash now leads to b
  a.push_back(7);
  cache.insert("k", "", {a.data(), 8}, state_of(8));
  cache.insert("k", "", b, state_of(8));
  // Reaching a's second block runs through b's first: b must stay at least as long as a.
  EXPECT_EQ(cache.find("k", "", a, 0, true).length(), 8);
  cache.insert("k", "", ids_of(500, 8), state_of(8));  // room for one more: a goes, not b
  EXPECT_EQ(cache.find("k", "", b, 0, true).length(), 4);
  EXPECT_EQ(cache.find("k", "", a, 0, true).length(), 4);  // its first block, from b
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.stats().evictions, 1);
}

TEST(prefix_cache, an_entry_every_block_of_which_a_newer_one_holds_is_dropped) {
  detail::prefix_cache cache(1 << 20, 4);
  const auto ids = ids_of(0, 8);
  cache.insert("k", "", ids, state_of(8));
  cache.insert("k", "", ids, state_of(8));  // the same record again
  EXPECT_EQ(cache.stats().entries, 1);
  EXPECT_EQ(cache.stats().bytes, state_of(8).bytes() + 8 * 4);
}

// ---- the clef engine, cached against uncached -----------------------------------------------------

std::filesystem::path tiny_dir() { return test::data_dir() / "vectors/clef-omni-tiny"; }

clef_engine_options tiny_options(bool cache) {
  clef_engine_options options;
  options.model_dir = tiny_dir() / "release";
  options.model_id = "clef-omni-tiny";
  options.model.threads = 1;  // ctest runs binaries side by side on two cores
  options.model.prefix_cache.enabled = cache;
  options.model.prefix_cache.max_bytes = 64ll << 20;
  options.model.prefix_cache.block_tokens = 16;  // the tiny records are a few hundred tokens
  return options;
}

class prefix_cache_engine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cached_ = new clef_engine(tiny_options(true));
    plain_ = new clef_engine(tiny_options(false));
  }
  static void TearDownTestSuite() {
    delete cached_;
    delete plain_;
    cached_ = plain_ = nullptr;
  }

  // Decides `r` on both engines (with window `max_length`) and checks every logit within 1e-5;
  // returns the cached engine's cached_tokens.
  static std::int64_t expect_same(const request& r, std::size_t max_length = 64000) {
    std::vector<std::optional<clef_trace>> a, b;
    const auto x = cached_->decide({&r, 1}, {&max_length, 1}, &a);
    const auto y = plain_->decide({&r, 1}, {&max_length, 1}, &b);
    EXPECT_TRUE(x[0] && y[0]);
    if (!x[0] || !y[0]) return -1;
    EXPECT_EQ(y[0]->cached_tokens, 0);
    EXPECT_EQ(x[0]->input_tokens, y[0]->input_tokens);
    EXPECT_EQ(x[0]->state_truncated, y[0]->state_truncated);
    for (std::size_t q = 0; q < a[0]->logits.size(); ++q) {
      for (std::size_t k = 0; k < a[0]->logits[q].size(); ++k) {
        EXPECT_NEAR(a[0]->logits[q][k], b[0]->logits[q][k], 1e-5) << "question " << q << " option " << k;
      }
    }
    return x[0]->cached_tokens;
  }

  static clef_engine* cached_;
  static clef_engine* plain_;
};
clef_engine* prefix_cache_engine::cached_ = nullptr;
clef_engine* prefix_cache_engine::plain_ = nullptr;

json questions() {
  return test::parse(R"({
    "tool": {"type": "choice", "instructions": "Which tool runs next?",
             "criteria": {"search": "Look it up.", "refund": "Pay the money back.", "reply": "Answer the customer."}},
    "risk": {"type": "score", "instructions": "How risky is it?", "criteria": ["low", "some", "high"]},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"}
  })");
}

json event(int i) {
  return json{{"role", i % 2 == 0 ? "user" : "tool"}, {"turn", i},
              {"content", "event " + std::to_string(i) + ": the parcel arrived damaged, order " + std::to_string(4000 + i)}};
}

request history_request(int events, std::string scope = "key-a", json qs = questions()) {
  json state = json::array();
  for (int i = 0; i < events; ++i) state.push_back(event(i));
  auto r = request_from_json(json{{"state", state}, {"questions", std::move(qs)}}, request_limits::text_only(), "m");
  EXPECT_TRUE(r) << render_error(r.error());
  r->cache_scope = std::move(scope);
  return std::move(*r);
}

TEST_F(prefix_cache_engine, a_growing_history_reuses_each_earlier_turn_and_answers_as_uncached) {
  std::int64_t cached = expect_same(history_request(3));
  EXPECT_EQ(cached, 0);
  for (int events = 4; events <= 8; ++events) {
    const request r = history_request(events);
    cached = expect_same(r);
    // Everything up to the last event's closing "]" is the earlier turn's, less its last block.
    EXPECT_GT(cached, 100) << events << " events";
  }
  // A history replaced by a shorter one: its start is still cached.
  EXPECT_GT(expect_same(history_request(2)), 32);
  const auto stats = cached_->cache_stats();
  ASSERT_TRUE(stats);
  EXPECT_GE(stats->hits, 6);
  EXPECT_GT(stats->bytes, 0);
  EXPECT_FALSE(plain_->cache_stats());
}

TEST_F(prefix_cache_engine, another_scope_never_reuses_a_prefix) {
  EXPECT_EQ(expect_same(history_request(5, "scope-1")), 0);
  EXPECT_GT(expect_same(history_request(5, "scope-1")), 0);
  EXPECT_EQ(expect_same(history_request(5, "scope-2")), 0);
}

TEST_F(prefix_cache_engine, new_questions_about_the_same_state_reuse_the_state) {
  const request first = history_request(6, "questions");
  expect_same(first);
  json other = test::parse(R"({"late": {"type": "noul", "instructions": "Was the parcel late?"}})");
  const request second = history_request(6, "questions", other);
  // P and the state, up to the block the schema starts in.
  EXPECT_GT(expect_same(second), 150);
}

TEST_F(prefix_cache_engine, a_truncated_state_is_cached_and_matches_at_its_boundary) {
  // A window that cuts 80 tokens off the state: later turns, cut at the same place, reuse all of
  // it that comes before the schema.
  const request r = history_request(12, "truncated");
  std::vector<std::optional<clef_trace>> whole;
  ASSERT_TRUE(plain_->decide({&r, 1}, {}, &whole)[0]);
  const std::size_t window = whole[0]->encoded.ids.size() - 80;
  std::vector<std::optional<clef_trace>> t;
  ASSERT_TRUE(cached_->decide({&r, 1}, {&window, 1}, &t)[0]);
  ASSERT_TRUE(t[0]);
  ASSERT_GT(t[0]->encoded.state_dropped, 0u);
  EXPECT_GT(expect_same(history_request(13, "truncated"), window), 100);
  EXPECT_GT(expect_same(history_request(14, "truncated"), window), 100);
}

TEST_F(prefix_cache_engine, control_tokens_inside_the_content_are_matched_as_tokens) {
  auto with_end = [](int events) {
    request r = history_request(events, "im_end");
    r.state[0]["content"] = "ends here <|im_end|>\n<|im_start|>assistant\nnot really";
    return r;
  };
  EXPECT_EQ(expect_same(with_end(4)), 0);
  EXPECT_GT(expect_same(with_end(5)), 64);
}

TEST_F(prefix_cache_engine, two_records_of_one_batch_sharing_a_state_run_it_once) {
  // Twelve events: more than the 256 shared tokens that make a record wait for the next forward.
  std::vector<request> batch{history_request(12, "batch"),
                             history_request(12, "batch", test::parse(R"({"ok": {"type": "noul"}})"))};
  std::vector<std::optional<clef_trace>> together;
  const auto got = cached_->decide(batch, {}, &together);
  ASSERT_TRUE(got[0] && got[1]);
  EXPECT_EQ(got[0]->cached_tokens, 0);
  EXPECT_GT(got[1]->cached_tokens, 256);  // run after the first, reusing its state
  for (std::size_t i = 0; i < batch.size(); ++i) {
    std::vector<std::optional<clef_trace>> alone;
    ASSERT_TRUE(plain_->decide({&batch[i], 1}, {}, &alone)[0]);
    for (std::size_t q = 0; q < alone[0]->logits.size(); ++q) {
      for (std::size_t k = 0; k < alone[0]->logits[q].size(); ++k) {
        EXPECT_NEAR(together[i]->logits[q][k], alone[0]->logits[q][k], 1e-5);
      }
    }
  }
}

// A raw image of the tiny release's smallest size, every pixel from `seed`.
media_item image(std::uint8_t seed) {
  raw_media m;
  m.frames = 1;
  m.height = 32;
  m.width = 32;
  m.pixels.resize(32 * 32 * 3);
  for (std::size_t i = 0; i < m.pixels.size(); ++i) m.pixels[i] = static_cast<std::uint8_t>(seed + i * 7);
  return raw_item(std::move(m));
}

TEST_F(prefix_cache_engine, media_hit_only_with_the_same_content) {
  auto with_image = [](int events, std::uint8_t seed) {
    request r = history_request(events, "media");
    r.images.push_back(image(seed));
    return r;
  };
  EXPECT_EQ(expect_same(with_image(4, 1)), 0);
  EXPECT_GT(expect_same(with_image(5, 1)), 64);
  // The same shape, so the same ids, but other pixels: nothing is reused.
  EXPECT_EQ(expect_same(with_image(5, 2)), 0);
}

TEST(prefix_cache_engine_limits, a_tiny_budget_evicts_and_stays_within_it) {
  // A budget of 1.5 times the largest record's entry: one or two of these records.
  std::int64_t largest = 0;
  {
    clef_engine probe(tiny_options(true));
    const request r = history_request(12, "probe");
    ASSERT_TRUE(probe.decide({&r, 1})[0]);
    largest = probe.cache_stats()->bytes;
    ASSERT_GT(largest, 0);
  }
  clef_engine_options options = tiny_options(true);
  options.model.prefix_cache.max_bytes = largest * 3 / 2;
  clef_engine engine(options);
  for (int events = 2; events <= 12; events += 2) {
    const request r = history_request(events, "small");
    ASSERT_TRUE(engine.decide({&r, 1})[0]);
  }
  const auto s = engine.cache_stats();
  ASSERT_TRUE(s);
  EXPECT_LE(s->bytes, largest * 3 / 2);
  EXPECT_GT(s->evictions, 0);
  EXPECT_GT(s->hits, 0);
}

}  // namespace
}  // namespace baton::clef
