#include "engine/clef/model/model.hpp"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <optional>
#include <thread>

#include "engine/clef/model/audio_encoder.hpp"
#include "engine/clef/model/blas_cpu.hpp"
#include "engine/clef/model/joint_head.hpp"
#include "engine/clef/model/prefix_cache.hpp"
#include "engine/clef/model/rope_index.hpp"
#include "engine/clef/model/thinker.hpp"
#include "engine/clef/model/vision_encoder.hpp"

namespace baton::clef {

dtype_choice choose_dtype(bool file_bf16, bool native_bf16, std::int64_t f32_copy_bytes, std::int64_t available_bytes,
                          std::int64_t int8_f32_copy_bytes) {
  if (!file_bf16) return {compute_dtype::f32, "the release's dtype"};
  if (native_bf16) return {compute_dtype::bf16, "the release's dtype"};
  // Emulated bf16 is slower than f32 (docs/performance.md), but f32 doubles the converted weights:
  // f32 only while the copy leaves a fifth of the free memory.
  const std::int64_t gib = 1ll << 30;
  auto fits = [&](std::int64_t bytes) { return available_bytes > 0 && bytes <= available_bytes / 5 * 4; };
  auto gib_text = [&](std::int64_t bytes) { return std::to_string((bytes + gib - 1) / gib) + " GiB"; };
  if (fits(f32_copy_bytes)) {
    return {compute_dtype::f32,
            "this CPU has neither avx512_bf16 nor AMX-BF16, where f32 is faster; the f32 copy takes " + gib_text(f32_copy_bytes)};
  }
  std::string reason = "the release's dtype: this CPU has no bf16 arithmetic, but an f32 copy (" + gib_text(f32_copy_bytes) +
                       ") would not fit in the " + std::to_string(available_bytes / gib) + " GiB available";
  // Emulated bf16 runs ~50x slower than f32 on such a CPU (docs/performance.md); an int8 copy's
  // f32 weights are the attention's and routers' only.
  if (int8_f32_copy_bytes > 0 && fits(int8_f32_copy_bytes)) {
    reason += "; an int8 copy (`baton quantize --int8`) would run in f32 here, its f32 weights taking " +
              gib_text(int8_f32_copy_bytes);
  }
  return {compute_dtype::bf16, std::move(reason)};
}

bool parse_compute_dtype(std::string_view text, compute_dtype& out) noexcept {
  if (text == "f32" || text == "fp32" || text == "float32") {
    out = compute_dtype::f32;
    return true;
  }
  if (text == "bf16" || text == "bfloat16") {
    out = compute_dtype::bf16;
    return true;
  }
  return false;
}

namespace {

at::Device parse_device(const std::string& text) {
  std::optional<at::Device> device;
  try {
    device.emplace(text);
  } catch (const std::exception&) {
    throw load_error("unknown device `" + text + "` (cpu, cuda or cuda:N)");
  }
  if (!device->is_cpu() && !device->is_cuda()) {
    throw load_error("unsupported device `" + text + "` (cpu, cuda or cuda:N)");
  }
  if (device->is_cuda() && !at::hasCUDA()) {
    throw load_error("device `" + text + "`: this libtorch was built without CUDA or sees no GPU");
  }
  return *device;
}

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
std::int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// Whether the thinker's weights are bf16 in the release (its first projection's dtype, or its
// embeddings' where that projection is quantized).
bool bf16_release(const release& files) {
  const std::string q = "thinker.model.layers.0.self_attn.q_proj.weight";
  return (files.form(q) == weight_form::plain ? files.thinker_tensor(q).type : files.float_type()) == dtype::bf16;
}

// Bytes of the thinker's text weights in f32 when its bf16 matrices are converted (int8 experts
// stay int8; embeddings and lm_head stay in the file's dtype, converted by the row).
// `int8_experts`: as if its experts were int8 (an int8 copy of it).
std::int64_t f32_copy_bytes(const release& files, bool int8_experts) {
  const text_config& c = files.text();
  const std::int64_t attention = 2 * c.hidden_size * c.num_heads * c.head_dim + 2 * c.hidden_size * c.num_kv_heads * c.head_dim;
  const std::int64_t experts = int8_experts ? 0 : 3 * c.num_experts * c.moe_intermediate_size * c.hidden_size;
  return 4 * c.num_layers * (attention + experts + c.num_experts * c.hidden_size);
}

// The options with every default decided: the compute dtype (choose_dtype), the score budget
// 4 MiB on the CPU (blocks that stay in cache and come from the allocator's free lists; 64 MiB
// blocks were mapped afresh and page-faulted for every chunk) and 1 GiB on a GPU.
model_options resolved(model_options options, const release& files, const at::Device& device) {
  if (options.load_memory_bytes <= 0 && device.is_cpu()) options.load_memory_bytes = available_memory();
  if (!options.dtype) {
    const bool file_bf16 = bf16_release(files);
    const bool native = !device.is_cpu() || cpu_has_native_bf16();
    // Quantized experts are not copied to f32: int8 ones stay int8, int4 and FP8 ones are read in place.
    const bool kept = files.int8_experts() || files.int4_experts() || files.fp8_experts();
    dtype_choice choice = choose_dtype(file_bf16, native, f32_copy_bytes(files, kept), options.load_memory_bytes,
                                       kept ? 0 : f32_copy_bytes(files, true));
    options.dtype = choice.dtype;
    options.dtype_reason = std::move(choice.reason);
  }
  if (options.score_budget_bytes <= 0) options.score_budget_bytes = device.is_cuda() ? (1ll << 30) : (4ll << 20);
  return options;
}

// The most the CPU experts' packed copy may take: four fifths of the memory the load plans with,
// less the other weights it converts to f32 (a bf16 release computed in f32); 0 where that memory
// is unknown (not limited).
std::int64_t packing_budget(const model_options& options, const release& files) {
  if (options.load_memory_bytes <= 0) return 0;
  const bool converted = options.dtype == compute_dtype::f32 && bf16_release(files);
  return std::max<std::int64_t>(1, options.load_memory_bytes / 5 * 4 - (converted ? f32_copy_bytes(files, true) : 0));
}

// Keeps the activations' memory in the process between forwards. glibc hands blocks above its
// mmap threshold (32 MiB at most), and freed memory above its trim threshold (per thread arena
// too), back to the kernel, and every forward then page-faults them in afresh: 127,000 faults
// (~1.3 s) per fp32 forward of 2,048 tokens on the mid-size release, 197,000 per bf16 forward of
// 8,192 tokens on two real-shape layers, whose [8,192 x 4,096] activations are 64 MiB
// (docs/performance.md). So no block is mmapped (it comes from the heap, where freed blocks are
// reused) and the heap is trimmed only past 2 GiB free: the process keeps its high-water mark of
// activations instead. Once per process, on the CPU.
void keep_freed_memory() {
  static const bool done = [] {
    ::mallopt(M_MMAP_MAX, 0);
    ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());  // mallopt takes an int
    return true;
  }();
  (void)done;
}

// The device, with the process set up for it before any weight is touched: libtorch's threads
// (packing the CPU's weights at load runs on them) and, on the CPU, glibc keeping freed memory
// (packing frees a 2-4 MiB staging copy per expert, which would be mapped and zeroed afresh).
at::Device prepared_device(const model_options& options) {
  const at::Device device = parse_device(options.device);
  at::set_num_threads(options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (device.is_cpu()) keep_freed_memory();
  return device;
}

class model_impl final : public model {
 public:
  model_impl(const std::filesystem::path& dir, const model_options& options)
      : files_(dir, options.head),
        device_(prepared_device(options)),
        options_(resolved(options, files_, device_)),
        thinker_(files_, detail::scalar_type(*options_.dtype), device_, options_.score_budget_bytes,
                 options_.grouped_experts, options_.experts, packing_budget(options_, files_)) {
    if (options.head) {
      head_.emplace(files_, detail::scalar_type(options_.head_dtype), device_, options_.score_budget_bytes);
    }
    const media_tokens& t = files_.tokens();
    if (files_.vision() && t.image && t.video && t.vision_start && t.vision_end) {
      vision_.emplace(files_, detail::scalar_type(*options_.dtype), device_, options_.score_budget_bytes);
    }
    if (files_.audio() && t.audio && t.audio_start && t.audio_end) {
      audio_.emplace(files_, detail::scalar_type(*options_.dtype), device_, options_.score_budget_bytes);
    }
    // On the CPU weights are used in place from the mapping; elsewhere each one is a copy now.
    if (!device_.is_cpu()) files_.unmap();
    if (options.head && options_.prefix_cache.enabled) {
      // Sized once the weights are in, against what they left. A GPU's free memory is not asked
      // (a CPU build has no CUDA API): 2 GiB there unless configured.
      if (options_.prefix_cache.max_bytes <= 0) {
        options_.prefix_cache.max_bytes = device_.is_cpu() ? available_memory() / 4 : (2ll << 30);
      }
      cache_.emplace(options_.prefix_cache.max_bytes, options_.prefix_cache.block_tokens);
    }
  }

  const release& files() const noexcept override { return files_; }
  const std::vector<std::int64_t>& last_cached_tokens() const noexcept override { return last_cached_; }
  std::int64_t cached_prefix(const record_input& r) override {
    if (!cache_ || !r.use_cache) return 0;
    return cache_->find(r.cache_scope, r.media_key, r.ids, media_end(r), /*use=*/false).length();
  }
  std::optional<prefix_cache_counters> cache_stats() const override {
    if (!cache_) return std::nullopt;
    return cache_->stats();
  }
  std::int64_t packed_bytes() const noexcept override { return thinker_.packed_bytes(); }
  std::string expert_schedule() const override { return thinker_.expert_schedule(); }
  std::string matmul_choice() const override { return thinker_.matmul_choice(); }
  const model_options& options() const noexcept override { return options_; }

  std::vector<record_logits> forward(std::span<const record_input> batch) override {
    if (!head_) throw std::logic_error("this model was loaded without its joint head");
    try {
      return run(batch);
    } catch (const c10::Error& e) {
      // Callers see the message, not libtorch's C++ backtrace.
      throw std::runtime_error(e.what_without_backtrace());
    }
  }

  void trace(std::span<const std::int32_t> ids, const record_media* media,
             const stage_observer& observe) override {
    c10::InferenceMode guard;
    const record_input one{ids, {}, media};
    at::Tensor id_tensor;
    std::vector<std::int64_t> lengths;
    const detail::thinker_input input = prepare({&one, 1}, {}, id_tensor, lengths, &observe, nullptr);
    thinker_.forward(input, lengths, &observe, nullptr);
  }

  bool reads_images() const noexcept override { return vision_.has_value(); }
  bool reads_audio() const noexcept override { return audio_.has_value(); }

  ~model_impl() override {
    if (profiling_) detail::count_ops(false);
  }

  void set_profiling(bool on) noexcept override {
    if (on != profiling_) detail::count_ops(on);
    profiling_ = on;
  }
  const forward_profile& last_profile() const noexcept override { return profile_; }

 private:
  std::vector<record_logits> run(std::span<const record_input> batch) {
    c10::InferenceMode guard;
    profile_ = {};
    forward_profile* profile = profiling_ ? &profile_ : nullptr;
    const auto start = std::chrono::steady_clock::now();

    // Each record's cached prefix, pinned until the forward is done; only its later tokens run.
    const bool caching = cache_ && std::any_of(batch.begin(), batch.end(), [](const record_input& r) { return r.use_cache; });
    std::vector<detail::prefix_cache::handle> hits(batch.size());
    detail::prefix_list past;
    last_cached_.assign(batch.size(), 0);
    if (caching) {
      past.assign(batch.size(), nullptr);
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const record_input& r = batch[i];
        if (!r.use_cache) continue;
        hits[i] = cache_->find(r.cache_scope, r.media_key, r.ids, media_end(r), /*use=*/true);
        if (hits[i]) {
          past[i] = &hits[i].state();
          last_cached_[i] = hits[i].length();
        }
      }
    }

    at::Tensor id_tensor;
    std::vector<std::int64_t> lengths;
    const detail::thinker_input input = prepare(batch, last_cached_, id_tensor, lengths, nullptr, profile);
    std::vector<detail::prefix_state> kept;
    const at::Tensor hidden = thinker_.forward(input, lengths, nullptr, profile, past, caching ? &kept : nullptr);

    std::vector<record_logits> out;
    out.reserve(batch.size());
    {
      detail::scoped_timer t(profile ? &profile_.head_ms : nullptr, device_);
      std::int64_t offset = 0;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const record_input& r = batch[i];
        // The head reads every token's final hidden state: the prefix's come from the cache.
        at::Tensor h = hidden.narrow(0, offset, lengths[i]);
        at::Tensor ids = id_tensor.narrow(0, offset, lengths[i]);
        if (past.size() > i && past[i] != nullptr) {
          h = at::cat({past[i]->hidden, h});
          ids = detail::long_tensor(std::vector<std::int64_t>(r.ids.begin(), r.ids.end()), device_);
        }
        out.push_back(head_->forward(h, ids, r.questions, thinker_));
        if (caching && r.use_cache) {
          // Apart from the batch's tensor, so that an entry holds only its own rows.
          kept[i].hidden = batch.size() == 1 || past[i] != nullptr ? h : h.clone();
          cache_->insert(r.cache_scope, r.media_key, r.ids, std::move(kept[i]));
        }
        offset += lengths[i];
      }
    }
    profile_.tokens = id_tensor.size(0);
    profile_.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  // The thinker's input for `batch`: token embeddings with the media encoders' rows placed at their
  // pads, MRoPE positions and deepstack rows when any record has media.
  // `skip` (empty: none): per record, the leading tokens a cached prefix holds, which are left out.
  detail::thinker_input prepare(std::span<const record_input> batch, const std::vector<std::int64_t>& skip,
                                at::Tensor& id_tensor, std::vector<std::int64_t>& lengths,
                                const stage_observer* observe, forward_profile* profile) const {
    std::vector<std::int64_t> ids;
    lengths.clear();
    bool media = false;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& r = batch[i];
      const std::int64_t from = skip.empty() ? 0 : skip[i];
      ids.insert(ids.end(), r.ids.begin() + from, r.ids.end());
      lengths.push_back(static_cast<std::int64_t>(r.ids.size()) - from);
      media = media || (r.media && !r.media->empty());
    }
    id_tensor = detail::long_tensor(ids, device_);
    detail::thinker_input input;
    {
      detail::scoped_timer t(profile ? &profile->embed_ms : nullptr, device_);
      input.embeds = thinker_.embed(id_tensor);
    }
    if (!media) return input;

    detail::scoped_timer t(profile ? &profile->media_ms : nullptr, device_);
    const std::size_t n = ids.size();
    std::vector<float> positions(3 * n);
    const std::size_t deepstack = vision_ ? files_.vision()->deepstack_layers.size() : 0;
    placed images(deepstack), videos(deepstack), audio(0);
    std::size_t offset = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& r = batch[i];
      const record_media none;
      const auto from = static_cast<std::size_t>(lengths[i]);
      place_record(r.ids, r.media ? *r.media : none, r.ids.size() - from, offset, n, positions, images, videos, audio);
      offset += from;
    }
    input.positions = at::from_blob(positions.data(), {3, static_cast<std::int64_t>(n)}, at::kFloat).to(device_, at::kFloat, false, /*copy=*/true);
    auto place = [&](const placed& p, const char* stage) {
      if (p.rows.empty()) return;
      const at::Tensor features = at::cat(p.embeds);
      detail::report(observe, stage, features);
      input.embeds.index_copy_(0, at::cat(p.rows), features.to(input.embeds.scalar_type()));
    };
    place(audio, "audio_features");
    place(images, "image_embeds");
    place(videos, "video_embeds");
    if (!images.rows.empty() || !videos.rows.empty()) {
      std::vector<at::Tensor> rows = images.rows;
      rows.insert(rows.end(), videos.rows.begin(), videos.rows.end());
      input.visual_rows = at::cat(rows);
      for (std::size_t l = 0; l < deepstack; ++l) {
        if (observe && !images.deep[l].empty()) detail::report(observe, "image_deepstack." + std::to_string(l), at::cat(images.deep[l]));
        if (observe && !videos.deep[l].empty()) detail::report(observe, "video_deepstack." + std::to_string(l), at::cat(videos.deep[l]));
        std::vector<at::Tensor> parts = images.deep[l];
        parts.insert(parts.end(), videos.deep[l].begin(), videos.deep[l].end());
        input.deepstack.push_back(at::cat(parts).to(input.embeds.scalar_type()));
      }
    }
    return input;
  }

  // One kind of media over a batch: the rows its pads occupy and the encoders' outputs for them.
  struct placed {
    explicit placed(std::size_t deepstack) : deep(deepstack) {}
    std::vector<at::Tensor> rows, embeds;
    std::vector<std::vector<at::Tensor>> deep;  // per deepstack layer (vision only)
  };

  // The positions of one record's tokens from `skip` on (into `positions`, [3, n] at `offset`),
  // its media encoded and the rows of its pads. A record that skips its first tokens has its
  // media in the cached prefix (media_end): nothing is encoded. Throws when the release cannot
  // read the media or the pads do not match it.
  void place_record(std::span<const std::int32_t> ids, const record_media& m, std::size_t skip, std::size_t offset,
                    std::size_t n, std::vector<float>& positions, placed& images, placed& videos,
                    placed& audio) const {
    if ((!m.images.empty() || !m.videos.empty()) && !vision_) {
      throw std::runtime_error("this release has no vision tower (or no image and video token ids)");
    }
    if (!m.audio.empty() && !audio_) {
      throw std::runtime_error("this release has no audio tower (or no audio token ids)");
    }
    const std::int64_t merge = vision_ ? files_.vision()->spatial_merge_size : 2;
    const media_tokens& tok = files_.tokens();
    const media_shape shape = shape_of(m);
    auto rope = rope_positions(ids, tok, merge, shape.view());
    if (const auto* e = std::get_if<rope_error>(&rope)) throw std::runtime_error(e->message);
    const auto& pos = std::get<std::vector<float>>(rope);
    const std::size_t len = ids.size();
    for (std::size_t axis = 0; axis < 3; ++axis) {
      std::copy_n(pos.begin() + static_cast<std::ptrdiff_t>(axis * len + skip), len - skip,
                  positions.begin() + static_cast<std::ptrdiff_t>(axis * n + offset));
    }
    if (skip > 0) return;

    // The pads of one kind, in sequence order, take the encoders' rows in item order.
    auto rows_of = [&](const std::optional<std::int64_t>& token, std::int64_t expected, const char* kind) {
      std::vector<std::int64_t> rows;
      for (std::size_t i = 0; i < len && token; ++i) {
        if (ids[i] == *token) rows.push_back(static_cast<std::int64_t>(offset + i));
      }
      if (static_cast<std::int64_t>(rows.size()) != expected) {
        throw std::runtime_error(std::string("the prompt has ") + std::to_string(rows.size()) + " " + kind +
                                 " pads for " + std::to_string(expected) + " " + kind + " tokens");
      }
      return detail::long_tensor(rows, device_);
    };
    auto encode_vision = [&](std::span<const vision_patches> items, const std::optional<std::int64_t>& token,
                             const char* kind, placed& out) {
      if (items.empty()) return;
      std::int64_t count = 0;
      for (const auto& p : items) {
        detail::vision_features f = vision_->encode(p);
        count += f.embeds.size(0);
        out.embeds.push_back(std::move(f.embeds));
        for (std::size_t l = 0; l < out.deep.size(); ++l) out.deep[l].push_back(std::move(f.deepstack[l]));
      }
      out.rows.push_back(rows_of(token, count, kind));
    };
    encode_vision(m.images, tok.image, "image", images);
    encode_vision(m.videos, tok.video, "video", videos);
    if (m.audio.empty()) return;
    // The record's streams are one batch in the reference (one processor call, one audio tower
    // call): its longest stream sets the chunk width every stream is padded to.
    std::int64_t batch_frames = 0;
    for (const auto& a : m.audio) batch_frames = std::max(batch_frames, a.marked_frames());
    std::int64_t count = 0;
    for (const auto& a : m.audio) {
      audio.embeds.push_back(audio_->encode(a, batch_frames));
      count += audio.embeds.back().size(0);
    }
    audio.rows.push_back(rows_of(tok.audio, count, "audio"));
  }

  // The fewest leading tokens a cached prefix of `r` may cover: past its last media pad, since
  // the towers' rows are placed, and deepstack added, only in a forward that runs the pads.
  std::int64_t media_end(const record_input& r) const {
    if (!r.media || r.media->empty()) return 0;
    const media_tokens& tok = files_.tokens();
    for (std::size_t i = r.ids.size(); i-- > 0;) {
      const std::int64_t id = r.ids[i];
      if (id == tok.image.value_or(-1) || id == tok.video.value_or(-1) || id == tok.audio.value_or(-1)) {
        return static_cast<std::int64_t>(i) + 1;
      }
    }
    return 0;
  }

  release files_;
  at::Device device_;
  model_options options_;
  detail::thinker thinker_;
  std::optional<detail::joint_head> head_;
  std::optional<detail::vision_encoder> vision_;
  std::optional<detail::audio_encoder> audio_;
  bool profiling_ = false;
  forward_profile profile_;
  std::optional<detail::prefix_cache> cache_;  // declared after the thinker: its tensors go first
  std::vector<std::int64_t> last_cached_;
};

}  // namespace

std::unique_ptr<model> model::load(const std::filesystem::path& dir, const model_options& options) {
  return std::make_unique<model_impl>(dir, options);
}

}  // namespace baton::clef
