#include "engine/clef/clef_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <tuple>

#include "core/answers.hpp"
#include "core/error_codes.hpp"
#include "core/sha256.hpp"
#include "engine/clef/model/blas_cpu.hpp"
#include "engine/clef/model/release_files.hpp"

namespace baton::clef {

namespace {

std::unique_ptr<tokenizer> load_tokenizer(const std::filesystem::path& dir) {
  // A path that is a file would be read as a tokenizer file, and a missing one reported as one.
  check_model_dir(dir);
  std::unique_ptr<tokenizer> t;
  try {
    t = tokenizer::load(dir);
  } catch (const std::exception& e) {
    throw load_error(e.what());
  }
  // The prompt's control tokens must each encode to one token, or the encoding silently differs
  // from the one the model was trained on.
  for (const char* token : {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
    if (t->encode(token).size() != 1) {
      throw load_error(dir.string() + ": the tokenizer does not read " + token + " as one token");
    }
  }
  return t;
}

// Each control id config.json names (<|im_start|>, <|im_end|>, the media ones) must be the id the
// tokenizer reads its token as: a media id
// that is another token (or past the vocabulary) would fail every media request as the caller's
// fault, or an index past the embeddings.
void check_control_ids(const std::filesystem::path& dir, const release& files, const tokenizer& t) {
  const nlohmann::json& config = files.config();
  const auto check = [&](const char* key, const char* token, std::int64_t id) {
    const auto ids = t.encode(token);
    if (ids.size() != 1 || ids[0] != id) {
      throw load_error((dir / "config.json").string() + ": " + key + " is " + std::to_string(id) +
                       " but the tokenizer reads " + token + " as " +
                       (ids.size() == 1 ? std::to_string(ids[0]) : std::string("several tokens")));
    }
  };
  for (const auto& [key, token] : {std::pair{"im_start_token_id", "<|im_start|>"}, std::pair{"im_end_token_id", "<|im_end|>"}}) {
    const auto it = config.find(key);
    if (it != config.end() && it->is_number_integer()) check(key, token, it->get<std::int64_t>());
  }
  const media_tokens& m = files.tokens();
  for (const auto& [key, token, id] :
       {std::tuple{"image_token_id", "<|image_pad|>", &m.image}, std::tuple{"video_token_id", "<|video_pad|>", &m.video},
        std::tuple{"audio_token_id", "<|audio_pad|>", &m.audio},
        std::tuple{"vision_start_token_id", "<|vision_start|>", &m.vision_start},
        std::tuple{"vision_end_token_id", "<|vision_end|>", &m.vision_end},
        std::tuple{"audio_start_token_id", "<|audio_start|>", &m.audio_start},
        std::tuple{"audio_end_token_id", "<|audio_end|>", &m.audio_end}}) {
    if (*id) check(key, token, **id);
  }
}

// The tokenizer against the release: its control ids, and no id past the thinker's vocabulary.
void check_vocabulary(const std::filesystem::path& dir, const release& files, const tokenizer& t) {
  const std::int64_t vocab_size = files.text().vocab_size;
  check_control_ids(dir, files, t);
  if (t.size() > static_cast<std::size_t>(vocab_size)) {
    throw load_error(dir.string() + ": the tokenizer has " + std::to_string(t.size()) +
                     " ids but the thinker's vocabulary only " + std::to_string(vocab_size));
  }
}

std::vector<question_layout> layouts(const encoded_record& r) {
  std::vector<question_layout> out;
  out.reserve(r.questions.size());
  for (const auto& q : r.questions) {
    question_layout l;
    l.type = static_cast<std::uint8_t>(q.type);
    l.question = {q.question.begin, q.question.end};
    l.options.reserve(q.options.size());
    for (const auto& s : q.options) l.options.push_back({s.begin, s.end});
    out.push_back(std::move(l));
  }
  return out;
}

// Probabilities in the request's option order from logits in the encoded order.
decision to_decision(const encoded_record& r, const record_logits& logits) {
  decision d;
  d.input_tokens = static_cast<std::int64_t>(r.ids.size());
  d.state_truncated = r.state_dropped > 0;
  d.probabilities.reserve(r.questions.size());
  for (std::size_t i = 0; i < r.questions.size(); ++i) {
    const std::vector<double> p = softmax(logits[i]);
    std::vector<double> ordered(p.size());
    for (std::size_t k = 0; k < p.size(); ++k) ordered[r.questions[i].request_option[k]] = p[k];
    d.probabilities.push_back(std::move(ordered));
  }
  return d;
}

// The prefix cache's key for a record's media: a digest of what the towers read (the preprocessed
// patches and features, with their grids), so that two items of one shape never share cached
// rows, and a path whose file changed misses.
std::string media_key(const prepared_media& m) {
  sha256 h;
  auto count = [&](std::int64_t n) { h.update(&n, sizeof n); };
  for (const auto* items : {&m.images, &m.videos}) {
    count(static_cast<std::int64_t>(items->size()));
    for (const auto& p : *items) {
      for (const std::int64_t d : {p.grid_t, p.grid_h, p.grid_w}) count(d);
      h.update(&p.second_per_grid, sizeof p.second_per_grid);
      h.update(p.pixel_values.data(), p.pixel_values.size() * sizeof(float));
    }
  }
  count(static_cast<std::int64_t>(m.audio.size()));
  for (const auto& a : m.audio) {
    count(a.frames);
    h.update(a.values.data(), a.values.size() * sizeof(float));
    h.update(a.frame_mask.data(), a.frame_mask.size() * sizeof(std::int32_t));
  }
  count(m.audio_in_video ? 1 : 0);
  return h.digest();
}

}  // namespace

clef_encoder::clef_encoder(const std::filesystem::path& model_dir)
    : tokenizer_(load_tokenizer(model_dir)), pieces_(*tokenizer_) {}

result<encoded_record> clef_encoder::encode(const request& r, std::size_t max_length,
                                            std::span<const std::int32_t> media_ids) const {
  encode_options options;
  options.max_length = max_length;
  options.media_ids = media_ids;
  try {
    return encode_record(r, pieces_, options);
  } catch (const std::exception& e) {  // the tokenizer's regex limits, memory
    return make_error(500, codes::inference_failed, std::string("the record could not be encoded: ") + e.what());
  }
}

namespace {

// The day a release file was written (UTC), as its release date: releases carry none of their own.
std::string file_date(const std::filesystem::path& p) {
  std::error_code ec;
  const auto written = std::filesystem::last_write_time(p, ec);
  if (ec) return "1970-01-01";
  const auto days = std::chrono::floor<std::chrono::days>(std::chrono::file_clock::to_sys(written));
  const std::chrono::year_month_day ymd{days};
  char out[16];
  std::snprintf(out, sizeof out, "%04d-%02u-%02u", int(ymd.year()), unsigned(ymd.month()), unsigned(ymd.day()));
  return out;
}

}  // namespace

clef_engine::clef_engine(const clef_engine_options& options)
    : options_(options),
      encoder_(options.model_dir),
      model_(model::load(options.model_dir, options.model)) {
  description_.model_id = options.model_id.empty() ? served_model_id(options.model_dir) : options.model_id;
  description_.fingerprint = release_fingerprint(options.model_dir);
  options_.media.bounds = read_pixel_bounds(options.model_dir);
  options_.media.soundtracks = model_->reads_audio();
  description_.limits = request_limits::text_only();
  const request_limits defaults;
  if (model_->reads_images()) {
    description_.limits.images = {options_.media.max_images, defaults.images.max_item_bytes};
    description_.limits.videos = {options_.media.max_videos, defaults.videos.max_item_bytes};
  }
  if (model_->reads_audio()) description_.limits.audio = {options_.media.max_audio, defaults.audio.max_item_bytes};
  {
    const auto newline = encoder_.text_tokenizer().encode("\n");
    if (newline.size() != 1) throw load_error(options.model_dir.string() + ": the tokenizer does not read \"\\n\" as one token");
    newline_id_ = newline[0];
  }
  description_.description = "Clef-Omni decision model (release " + description_.model_id + ")";
  // Which dtype runs, and why: a bf16 release on a CPU without bf16 arithmetic is slow in bf16.
  const model_options& used = model_->options();
  const bool bf16 = used.dtype == compute_dtype::bf16;
  spdlog::info("clef engine: {} on {}, {} ({}), joint head {}", description_.model_id, used.device, bf16 ? "bf16" : "f32",
               options.model.dtype ? "engine.dtype" : used.dtype_reason,
               used.head_dtype == compute_dtype::bf16 ? "bf16" : "f32");
  if (model_->packed_bytes() > 0) {
    spdlog::info("clef engine: {} MiB of weights packed at load for oneDNN or libxsmm (their mapped pages handed back)",
                 model_->packed_bytes() >> 20);
  }
  if (const std::string choice = model_->matmul_choice(); !choice.empty()) {
    spdlog::info("clef engine: {}", choice);
  }
  if (const std::string schedule = model_->expert_schedule(); !schedule.empty()) {
    spdlog::info("clef engine: experts scheduled as {}", schedule);
  }
  if (const auto stats = model_->cache_stats()) {
    spdlog::info("clef engine: prefix cache on, up to {} MiB (engine.prefix_cache.max_bytes{}), matched in blocks of {} tokens",
                 stats->max_bytes >> 20, options.model.prefix_cache.max_bytes > 0 ? "" : ": a quarter of the memory available",
                 used.prefix_cache.block_tokens);
  } else {
    spdlog::info("clef engine: prefix cache off (engine.prefix_cache.enabled)");
  }
  if (bf16 && used.device == "cpu" && !cpu_has_native_bf16()) {
    // A bf16 release's 512-token forward on an AVX2-only EPYC: 48.0 s in bf16, 0.95-0.99 s in f32.
    spdlog::warn("clef engine: this CPU has neither avx512_bf16 nor AMX-BF16, so bf16 matmuls are emulated, "
                 "~50x slower than f32 (docs/performance.md); engine.dtype: f32 where the memory allows, or an "
                 "int8 copy of the release (baton quantize --int8), which computes in f32 here");
  }
  description_.release_date = file_date(options.model_dir / "config.json");
  check_vocabulary(options.model_dir, model_->files(), encoder_.text_tokenizer());
}

void check_release_tokenizer(const std::filesystem::path& dir) {
  const std::unique_ptr<tokenizer> t = load_tokenizer(dir);
  const release files(dir, /*head=*/false);  // mapped, not read: only its config is looked at
  check_vocabulary(dir, files, *t);
}

std::vector<result<decision>> clef_engine::decide(std::span<const request> batch) {
  return decide(batch, {}, nullptr);
}

result<decision> clef_engine::decide_media(const request& r, std::size_t max_length, std::optional<clef_trace>* trace) {
  // describe().limits refuse what the release cannot read; a caller that skipped validation must
  // not get an answer that silently ignored its media.
  if ((!r.images.empty() || !r.videos.empty()) && !model_->reads_images()) {
    return make_error(422, codes::invalid_request, "this model does not read images or videos");
  }
  if (!r.audio.empty() && !model_->reads_audio()) return make_error(422, codes::invalid_request, "this model does not read audio");
  // The preprocessors run ATen kernels (resize, STFT), which report failures by throwing.
  prepared_media media;
  media_block block;
  try {
    auto prepared = prepare_media(r, options_.media);
    if (!prepared) return std::move(prepared.error());
    media = std::move(*prepared);
    block = media_block_ids(media, model_->files().tokens(), newline_id_);
  } catch (const std::exception& e) {
    return make_error(500, codes::inference_failed, std::string("the media could not be prepared: ") + e.what());
  }
  auto e = encoder_.encode(r, max_length, block.ids);
  if (!e) return std::move(e.error());
  // Control tokens in the request's own text are read as tokens (as the reference does); media
  // pads or start tokens there would misplace the media, so such a record is refused alone.
  if (auto checked = check_media_prompt(e->ids, media, model_->files().tokens()); !checked) {
    return std::move(checked.error());
  }
  // The block sits right before the state: shift its places to the record's offsets.
  const auto start = static_cast<std::int32_t>(e->prefix_tokens - block.ids.size());
  for (auto& p : block.placeholders) {
    p.begin += start;
    p.end += start;
  }
  const std::vector<question_layout> layout = layouts(*e);
  const record_media view = media.view();
  std::vector<record_logits> logits;
  std::int64_t cached = 0;
  try {
    // The media's digest only where a cache will read it: it hashes every patch.
    const bool cache = model_->options().prefix_cache.enabled;
    const std::string key = cache ? media_key(media) : std::string();
    const record_input input{e->ids, layout, &view, cache, r.cache_scope, key};
    logits = model_->forward({&input, 1});
    cached = model_->last_cached_tokens().at(0);
  } catch (const std::exception& ex) {
    return make_error(500, codes::inference_failed, std::string("the model failed: ") + ex.what());
  }
  decision d = to_decision(*e, logits[0]);
  d.cached_tokens = cached;
  if (trace) *trace = clef_trace{std::move(*e), std::move(block.placeholders), media.audio_in_video, std::move(logits[0])};
  return d;
}

std::vector<result<decision>> clef_engine::decide(std::span<const request> batch,
                                                  std::span<const std::size_t> max_lengths,
                                                  std::vector<std::optional<clef_trace>>* traces) {
  std::vector<result<decision>> out;
  out.reserve(batch.size());
  if (traces) traces->assign(batch.size(), std::nullopt);
  std::vector<std::optional<encoded_record>> encoded(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::size_t max_length = i < max_lengths.size() ? max_lengths[i] : options_.max_length;
    // A record with media runs alone, as soon as its media are ready, and frees them after: a
    // request's videos can be hundreds of MB of patches, so a batch never holds more than one's.
    // The reference runs every media record alone too.
    if (batch[i].has_media()) {
      out.push_back(decide_media(batch[i], max_length, traces ? &(*traces)[i] : nullptr));
      continue;
    }
    auto e = encoder_.encode(batch[i], max_length);
    if (e) {
      encoded[i] = std::move(*e);
      out.emplace_back(decision{});
    } else {
      out.emplace_back(std::move(e.error()));
    }
  }

  // Pack encoded records into forwards of about batch_tokens tokens each, counting only the tokens
  // a record's cached prefix leaves to compute. A record that shares 256 leading tokens or more
  // with one already packed waits for the next forward, which reuses them; fewer (the system
  // prompt every record starts with) are not worth a forward of its own.
  const std::size_t shared_enough = model_->options().prefix_cache.enabled ? 256 : 0;
  auto shared = [](const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
    return static_cast<std::size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
  };
  std::vector<std::vector<question_layout>> layout(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (encoded[i]) layout[i] = layouts(*encoded[i]);
  }
  auto input_of = [&](std::size_t i) {
    return record_input{encoded[i]->ids, layout[i], nullptr, /*use_cache=*/true, batch[i].cache_scope, {}};
  };
  std::size_t next = 0;
  while (next < batch.size()) {
    std::vector<std::size_t> members;
    std::size_t tokens = 0;
    for (; next < batch.size(); ++next) {
      if (!encoded[next]) continue;
      const auto& ids = encoded[next]->ids;
      const std::size_t n = ids.size() - static_cast<std::size_t>(model_->cached_prefix(input_of(next)));
      if (!members.empty() && tokens + n > options_.batch_tokens) break;
      if (shared_enough > 0 && std::any_of(members.begin(), members.end(), [&](std::size_t m) {
            return batch[m].cache_scope == batch[next].cache_scope && shared(encoded[m]->ids, ids) >= shared_enough;
          })) {
        break;
      }
      members.push_back(next);
      tokens += n;
    }
    if (members.empty()) break;
    std::vector<record_input> inputs;
    inputs.reserve(members.size());
    for (const std::size_t i : members) inputs.push_back(input_of(i));
    std::vector<record_logits> logits;
    try {
      logits = model_->forward(inputs);
    } catch (const std::exception& e) {
      for (const auto i : members) {
        out[i] = make_error(500, codes::inference_failed, std::string("the model failed: ") + e.what());
      }
      continue;
    }
    for (std::size_t k = 0; k < members.size(); ++k) {
      const std::size_t i = members[k];
      out[i] = to_decision(*encoded[i], logits[k]);
      out[i]->cached_tokens = model_->last_cached_tokens().at(k);
      if (traces) (*traces)[i] = clef_trace{std::move(*encoded[i]), {}, false, std::move(logits[k])};
    }
  }
  return out;
}

result<std::size_t> clef_engine::state_overflow(const request& r) {
  // The media block's length is known only once the media are decoded, which a turn pays for in
  // decide(): the text's overflow is measured, as if the block were empty.
  auto e = encoder_.encode(r, options_.max_length);
  if (!e) return std::move(e.error());
  return result<std::size_t>(boost::system::in_place_value, e->state_dropped);
}

std::optional<prefix_cache_stats> clef_engine::cache_stats() const {
  const auto c = model_->cache_stats();
  if (!c) return std::nullopt;
  return prefix_cache_stats{c->hits, c->misses, c->evictions, c->cached_tokens, c->entries, c->bytes, c->max_bytes};
}

std::string served_model_id(const std::filesystem::path& model_dir) {
  std::filesystem::path dir = std::filesystem::absolute(model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "release/" normalises to "release/"
  const std::filesystem::path snapshots = dir.parent_path();
  const std::string repo = snapshots.parent_path().filename().string();
  // The hub cache spells repo "ORG/NAME" as "models--ORG--NAME"; hub names cannot hold "--".
  constexpr std::string_view prefix = "models--";
  if (snapshots.filename() == "snapshots" && repo.starts_with(prefix) && repo.size() > prefix.size()) {
    const std::string id = repo.substr(prefix.size());
    const auto split = id.find("--");
    return split == std::string::npos ? id : id.substr(0, split) + "/" + id.substr(split + 2);
  }
  const std::string name = dir.filename().string();
  return name.empty() ? "clef-omni" : name;  // "/" has no name
}

std::string release_fingerprint(const std::filesystem::path& model_dir) {
  sha256 hash;
  std::vector<char> buffer(1 << 20);
  // The small files whole, named so that moving bytes between files changes the fingerprint. The
  // index is kept: it names the shards below.
  std::string index_text;
  for (const std::string_view file : {release_files::index_json, release_files::config_json,
                                      release_files::head_config_json, release_files::head_weights}) {
    const std::string name(file);
    std::ifstream in(model_dir / name, std::ios::binary);
    if (!in) continue;  // a single-file checkpoint has no index
    hash.update(name.c_str(), name.size() + 1);
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      hash.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
      if (name == release_files::index_json) index_text.append(buffer.data(), static_cast<std::size_t>(in.gcount()));
    }
  }
  // Shards are tens of GB: their size, header and 16 windows of 64 KiB spread over the data tell
  // apart releases with the same tensor layout (a merged thinker from the stock one) without
  // reading them whole.
  // Only the shards the loader reads: a release downloaded whole and one `baton pull` fetched
  // without its talker / code2wav shards serve the same weights, and share a fingerprint.
  std::vector<std::filesystem::path> shards;
  const auto index = index_text.empty() ? nlohmann::json()
                                         : nlohmann::json::parse(index_text, nullptr, /*allow_exceptions=*/false);
  if (index.is_object()) {
    for (const auto& name : release_files::shards_read(index)) shards.push_back(model_dir / name);  // sorted
  } else {
    for (const auto& entry : std::filesystem::directory_iterator(model_dir)) {
      const std::string name = entry.path().filename().string();
      if (name.ends_with(".safetensors") && name != release_files::head_weights) shards.push_back(entry.path());
    }
    std::sort(shards.begin(), shards.end());
  }
  constexpr std::size_t windows = 16, window_bytes = 64 << 10;
  for (const auto& shard : shards) {
    const mapped_file file(shard);
    const std::string name = shard.filename().string();
    hash.update(name.c_str(), name.size() + 1);
    const std::uint64_t size = file.size();
    hash.update(&size, sizeof size);
    std::uint64_t header = 0;
    if (size >= 8) std::memcpy(&header, file.data(), 8);
    hash.update(file.data(), static_cast<std::size_t>(std::min<std::uint64_t>(size, 8 + header)));
    for (std::size_t w = 0; w < windows && size > 0; ++w) {
      const std::size_t at = static_cast<std::size_t>(size * w / windows);
      hash.update(file.data() + at, std::min<std::size_t>(window_bytes, static_cast<std::size_t>(size) - at));
    }
  }
  return hash.digest();
}

}  // namespace baton::clef
