// The prefix cache (docs/prefix-cache.md): records already run keep their keys and values in
// every layer and their final hidden states (thinker.hpp's prefix_state), and a later record that
// starts with the same tokens, in the same scope and with the same media, reuses them for its
// longest shared run of whole blocks. Keyed by content, not by session: a session's next turn, new
// questions about the same state and a fallback to the same engine all hit. As vLLM's automatic
// prefix caching, blocks are chained hashes (a block's hash covers every token before it); a match
// is confirmed token by token, so a hash collision only misses. LRU by bytes; an entry in use is
// pinned.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/clef/model/model_types.hpp"
#include "engine/clef/model/thinker.hpp"

namespace baton::clef::detail {

class prefix_cache {
 public:
  struct entry;

  // A match: `length` tokens of `entry` reused, and the entry pinned (never evicted) until the
  // handle goes.
  class handle {
   public:
    handle() = default;
    handle(prefix_cache* cache, std::shared_ptr<entry> e, std::int64_t length);
    handle(handle&& other) noexcept;
    handle& operator=(handle&& other) noexcept;
    handle(const handle&) = delete;
    handle& operator=(const handle&) = delete;
    ~handle();

    explicit operator bool() const noexcept { return length_ > 0; }
    std::int64_t length() const noexcept { return length_; }
    // The entry's first length() tokens: views of its tensors.
    const prefix_state& state() const noexcept { return view_; }

   private:
    void release() noexcept;
    prefix_cache* cache_ = nullptr;
    std::shared_ptr<entry> entry_;
    std::int64_t length_ = 0;
    prefix_state view_;
  };

  prefix_cache(std::int64_t max_bytes, std::int32_t block_tokens);

  // The longest run of whole blocks of `ids` a cached record of the same scope and media key starts
  // with, leaving at least one token of `ids` to compute (the forward needs a row to run), and no
  // fewer than `min_tokens` (a match that would end inside a media item is no match). `use`: a
  // forward will read it, so it counts as a hit or a miss and refreshes what it matched (not so
  // for a probe). An entry no block leads to any more is dropped; one whose leading blocks a
  // newer entry took and lost to eviction can no longer be found and ages out as unused.
  handle find(std::string_view scope, std::string_view media_key, std::span<const std::int32_t> ids,
              std::int64_t min_tokens, bool use);

  // Keeps `state` (every token of `ids`), making room by evicting the least recently used
  // entries that are not pinned; an entry bigger than the whole cache is not kept.
  void insert(std::string_view scope, std::string_view media_key, std::span<const std::int32_t> ids,
              prefix_state state);

  prefix_cache_counters stats() const;
  std::int64_t max_bytes() const noexcept { return max_bytes_; }
  std::int32_t block_tokens() const noexcept { return block_tokens_; }

 private:
  using lru_list = std::list<std::shared_ptr<entry>>;
  // Chained hashes of ids' whole blocks: [i] covers blocks 0..i.
  std::vector<std::uint64_t> block_hashes(std::string_view scope, std::string_view media_key,
                                          std::span<const std::int32_t> ids, std::size_t blocks) const;
  void evict_until(std::int64_t budget);  // mutex_ held
  void unpin(entry& e) noexcept;

  std::int64_t max_bytes_;
  std::int32_t block_tokens_;
  mutable std::mutex mutex_;
  lru_list lru_;  // most recent first
  std::unordered_map<std::uint64_t, std::shared_ptr<entry>> blocks_;  // block hash → newest entry holding it
  prefix_cache_counters stats_;
};

}  // namespace baton::clef::detail
