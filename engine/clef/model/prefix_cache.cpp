#include "engine/clef/model/prefix_cache.hpp"

#include <algorithm>
#include <functional>

namespace baton::clef::detail {

struct prefix_cache::entry {
  std::string scope, media_key;
  std::vector<std::int32_t> ids;
  prefix_state state;
  std::vector<std::uint64_t> hashes;  // of its whole blocks
  std::int64_t bytes = 0;
  std::int64_t mapped = 0;  // block hashes that lead here (a newer entry may have taken the others)
  int pins = 0;
  bool listed = false;  // in lru_ (dropped entries stay alive while a handle holds them)
  lru_list::iterator place;
};

namespace {

// splitmix64's finaliser: every input bit moves every output bit.
std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

prefix_cache::handle::handle(prefix_cache* cache, std::shared_ptr<entry> e, std::int64_t length)
    : cache_(cache), entry_(std::move(e)), length_(length) {
  if (!entry_) return;
  const prefix_state& s = entry_->state;
  view_.keys.reserve(s.keys.size());
  view_.values.reserve(s.values.size());
  for (const auto& k : s.keys) view_.keys.push_back(k.narrow(0, 0, length));
  for (const auto& v : s.values) view_.values.push_back(v.narrow(0, 0, length));
  view_.hidden = s.hidden.narrow(0, 0, length);
}

prefix_cache::handle::handle(handle&& other) noexcept
    : cache_(other.cache_), entry_(std::move(other.entry_)), length_(other.length_), view_(std::move(other.view_)) {
  other.cache_ = nullptr;
  other.length_ = 0;
}

prefix_cache::handle& prefix_cache::handle::operator=(handle&& other) noexcept {
  if (this != &other) {
    release();
    cache_ = other.cache_;
    entry_ = std::move(other.entry_);
    length_ = other.length_;
    view_ = std::move(other.view_);
    other.cache_ = nullptr;
    other.length_ = 0;
  }
  return *this;
}

prefix_cache::handle::~handle() { release(); }

void prefix_cache::handle::release() noexcept {
  if (cache_ && entry_) cache_->unpin(*entry_);
  view_ = {};
  entry_.reset();
  cache_ = nullptr;
}

prefix_cache::prefix_cache(std::int64_t max_bytes, std::int32_t block_tokens)
    : max_bytes_(max_bytes), block_tokens_(std::max<std::int32_t>(block_tokens, 1)) {
  stats_.max_bytes = max_bytes_;
}

std::vector<std::uint64_t> prefix_cache::block_hashes(std::string_view scope, std::string_view media_key,
                                                      std::span<const std::int32_t> ids, std::size_t blocks) const {
  const std::hash<std::string_view> text;
  std::uint64_t h = mix(text(scope)) ^ mix(text(media_key) + 0x9e3779b97f4a7c15ULL);
  std::vector<std::uint64_t> out(blocks);
  const auto b = static_cast<std::size_t>(block_tokens_);
  for (std::size_t i = 0; i < blocks; ++i) {
    for (std::size_t t = i * b; t < (i + 1) * b; ++t) h = mix(h ^ static_cast<std::uint32_t>(ids[t]));
    out[i] = h;
  }
  return out;
}

prefix_cache::handle prefix_cache::find(std::string_view scope, std::string_view media_key,
                                        std::span<const std::int32_t> ids, std::int64_t min_tokens, bool use) {
  const auto b = static_cast<std::size_t>(block_tokens_);
  const std::size_t usable = ids.empty() ? 0 : (ids.size() - 1) / b;  // one token is always computed
  const std::vector<std::uint64_t> hashes = block_hashes(scope, media_key, ids, usable);
  std::lock_guard lock(mutex_);
  std::shared_ptr<entry> best;
  std::size_t length = 0;
  std::vector<entry*> path;  // the entries the match ran through, in block order
  for (std::size_t i = 0; i < usable; ++i) {
    const auto it = blocks_.find(hashes[i]);
    if (it == blocks_.end()) break;
    const entry& e = *it->second;
    const std::size_t n = (i + 1) * b;
    // The same entry as the block before: only this block's tokens are new to compare.
    const std::size_t from = it->second == best ? n - b : 0;
    if (e.scope != scope || e.media_key != media_key || e.ids.size() < n ||
        !std::equal(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.begin() + static_cast<std::ptrdiff_t>(n),
                    e.ids.begin() + static_cast<std::ptrdiff_t>(from))) {
      break;
    }
    if (it->second != best) path.push_back(it->second.get());
    best = it->second;
    length = n;
  }
  if (static_cast<std::int64_t>(length) < std::max<std::int64_t>(min_tokens, 1)) {
    best.reset();
    length = 0;
  }
  if (use) {
    if (best) {
      ++stats_.hits;
      stats_.cached_tokens += static_cast<std::int64_t>(length);
    } else {
      ++stats_.misses;
    }
  }
  if (!best) return {};
  ++best->pins;
  if (use) {
    // A use refreshes every entry the match ran through, the ones holding its first blocks last
    // (most recent): an entry reached only through a newer one's blocks never outlives it there.
    for (auto p = path.rbegin(); p != path.rend(); ++p) lru_.splice(lru_.begin(), lru_, (*p)->place);
  }
  return handle(this, std::move(best), static_cast<std::int64_t>(length));
}

void prefix_cache::insert(std::string_view scope, std::string_view media_key, std::span<const std::int32_t> ids,
                          prefix_state state) {
  auto e = std::make_shared<entry>();
  e->scope = scope;
  e->media_key = media_key;
  e->ids.assign(ids.begin(), ids.end());
  e->bytes = state.bytes() + static_cast<std::int64_t>(ids.size() * sizeof(std::int32_t));
  e->state = std::move(state);
  e->hashes = block_hashes(scope, media_key, ids, ids.size() / static_cast<std::size_t>(block_tokens_));
  std::lock_guard lock(mutex_);
  if (e->hashes.empty() || e->bytes > max_bytes_) return;
  evict_until(max_bytes_ - e->bytes);
  if (stats_.bytes + e->bytes > max_bytes_) return;  // pinned entries hold the rest
  lru_.push_front(e);
  e->place = lru_.begin();
  e->listed = true;
  stats_.bytes += e->bytes;
  ++stats_.entries;
  for (const std::uint64_t h : e->hashes) {
    auto [it, fresh] = blocks_.try_emplace(h, e);
    if (!fresh && it->second == e) continue;  // two of its blocks hash alike: already mapped
    if (!fresh) {
      // The newer entry serves this block from now on; one no block leads to can never be found.
      entry& old = *it->second;
      it->second = e;
      if (--old.mapped == 0 && old.pins == 0 && old.listed) {
        old.listed = false;
        stats_.bytes -= old.bytes;
        --stats_.entries;
        lru_.erase(old.place);  // may destroy `old`: nothing reads it after this
      }
    }
    ++e->mapped;
  }
}

void prefix_cache::evict_until(std::int64_t budget) {
  auto it = lru_.end();
  while (stats_.bytes > budget && it != lru_.begin()) {
    --it;
    entry& e = **it;
    if (e.pins > 0) continue;
    for (const std::uint64_t h : e.hashes) {
      const auto m = blocks_.find(h);
      if (m != blocks_.end() && m->second.get() == &e) blocks_.erase(m);
    }
    e.listed = false;
    stats_.bytes -= e.bytes;
    --stats_.entries;
    ++stats_.evictions;
    it = lru_.erase(it);
  }
}

void prefix_cache::unpin(entry& e) noexcept {
  std::lock_guard lock(mutex_);
  if (--e.pins > 0 || !e.listed || e.mapped > 0) return;
  e.listed = false;
  stats_.bytes -= e.bytes;
  --stats_.entries;
  lru_.erase(e.place);
}

prefix_cache_counters prefix_cache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace baton::clef::detail
