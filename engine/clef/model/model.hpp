// The Clef-Omni model on token ids: the Qwen3-Omni thinker's text backbone and the joint schema
// head, reimplemented on libtorch (ATen) from Cloudflare's reference joint_schema_model.py.
// This header is torch-free so that the rest of baton compiles without ATen.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/clef/model/model_types.hpp"
#include "engine/clef/model/release.hpp"

namespace baton::clef {

// The prefix cache (model::forward): the backbone's keys and values and the final hidden states of
// records already run, reused by later records that start with the same tokens.
struct prefix_cache_options {
  bool enabled = true;
  // Bytes the cache may hold; 0: a quarter of the memory available when the model has loaded
  // on the CPU, 2 GiB on a GPU (reported at start-up).
  std::int64_t max_bytes = 0;
  // Prefixes are matched in blocks of this many tokens (hashed, chained): a record reuses the
  // longest run of whole blocks it shares with a cached one, so it recomputes on average half a
  // block of what the cache holds (16: 11 % less time with the cache than 64 over the bench's
  // 30-turn bf16 session, docs/performance.md).
  std::int32_t block_tokens = 16;
};

struct model_options {
  // Thinker weights and activations. None: the file's (bf16 stays bf16, nothing is converted),
  // except a bf16 release on a CPU without bf16 arithmetic, which runs in f32 where the copy fits
  // (choose_dtype).
  std::optional<compute_dtype> dtype;
  compute_dtype head_dtype = compute_dtype::f32;  // the reference runs the head in the model dtype
  std::string device = "cpu";                     // "cpu", "cuda", "cuda:N"
  int threads = 0;                                // CPU threads; 0 = every core
  bool head = true;                               // false: a bare thinker checkpoint
  // Bytes of fp32 attention scores per chunk of query rows (at least 32 rows); 0: 4 MiB on the
  // CPU (cache-sized, no fresh pages per chunk), 1 GiB on a GPU (fewer, larger kernels).
  std::int64_t score_budget_bytes = 0;
  // The MoE as two grouped matmuls (thinker::moe_grouped) on any device, a matmul per expert
  // standing in for at::_grouped_mm where libtorch lacks it: for tests and the bench, which check
  // and count that path on the CPU. A CUDA bf16 model takes it anyway where at::_grouped_mm
  // runs (libtorch >= 2.8, a GPU it supports: probed at load).
  bool grouped_experts = false;
  // A library named instead of the one timed at load, for the tests and the bench (the memory check
  // below is then skipped). One the build or the CPU lacks, one without kernels for the dtype or
  // for int8 weights (oneDNN), or experts no library multiplies (quantized ones read in place by
  // baton's kernels, int8 ones in bf16 included; the grouped path, a GPU) make the load fail, saying which; the BLAS for int8 experts in fp32 is ATen's widening.
  expert_library experts = expert_library::measured;
  // Free memory the load plans with: an f32 copy of a bf16 release (choose_dtype) and the CPU
  // experts' packed copy, with the other weights converted to f32, are made only where they fit in
  // four fifths of it (the packed copy replaces mapped pages the kernel could evict with memory it
  // cannot; without it the experts are multiplied as they are, over the BLAS in fp32, through ATen
  // otherwise). 0: MemAvailable at load; set by the tests.
  std::int64_t load_memory_bytes = 0;
  prefix_cache_options prefix_cache;
  // Set at load when `dtype` was not given: why the model runs the dtype it does.
  std::string dtype_reason;
};

// The dtype a model runs when none is asked for. `file_bf16`: the thinker's weights are bf16 in the
// release; `native_bf16`: the device multiplies bf16 natively (always on a GPU); `f32_copy_bytes`:
// what converting the thinker's bf16 weights to f32 would cost; `available_bytes`: free memory;
// `int8_f32_copy_bytes`: the same for an int8 copy of the release (`baton quantize --int8`, whose
// experts stay int8: mapped, or packed at a byte a weight where that copy fits, checked apart by
// the thinker), 0 when the release is one already. Where bf16
// would be emulated for want of memory and that copy would fit, the reason says so.
struct dtype_choice {
  compute_dtype dtype;
  std::string reason;
};
dtype_choice choose_dtype(bool file_bf16, bool native_bf16, std::int64_t f32_copy_bytes, std::int64_t available_bytes,
                          std::int64_t int8_f32_copy_bytes = 0);

// Parses "f32"/"fp32"/"float32" and "bf16"/"bfloat16"; false on anything else.
bool parse_compute_dtype(std::string_view text, compute_dtype& out) noexcept;

struct record_input {
  std::span<const std::int32_t> ids;
  std::span<const question_layout> questions;
  const record_media* media = nullptr;
  // Whether the record may reuse, and then keeps, a cached prefix (model_options::prefix_cache):
  // only a record in the same `cache_scope` whose media have the same `media_key` (a digest of
  // their content; empty without media) is reused. Off for benches and tests that time forwards.
  bool use_cache = false;
  std::string_view cache_scope{}, media_key{};
};

class model {
 public:
  // Maps the release and prepares every weight (zero-copy where the file's dtype is the compute
  // dtype on the CPU; copied once to the device otherwise). Throws load_error.
  static std::unique_ptr<model> load(const std::filesystem::path& dir, const model_options& options);
  virtual ~model() = default;

  virtual const release& files() const noexcept = 0;
  virtual const model_options& options() const noexcept = 0;

  // Scores a batch of records in one backbone pass (records packed end to end; each attends only
  // to itself, so a record's logits do not depend on its batch). Spans must be validated: non-empty
  // question and option spans inside the record. Throws std::exception on device failures and on
  // media the release cannot read or whose pads do not match.
  virtual std::vector<record_logits> forward(std::span<const record_input> batch) = 0;

  // Per record of the last forward: how many of its tokens came from the prefix cache.
  virtual const std::vector<std::int64_t>& last_cached_tokens() const noexcept = 0;
  // How many leading tokens of `r` the prefix cache holds now (0 when off, or for none): what a
  // forward would not recompute. Counts nothing.
  virtual std::int64_t cached_prefix(const record_input& r) = 0;
  // The prefix cache's counters; none when it is off.
  virtual std::optional<prefix_cache_counters> cache_stats() const = 0;

  // The media encoders and the thinker on one sequence, reporting each stage (no head).
  virtual void trace(std::span<const std::int32_t> ids, const record_media* media,
                     const stage_observer& observe) = 0;

  // Bytes of the weights packed at load for oneDNN's matmul or libxsmm's kernels (the CPU's
  // experts, and in fp32 its attention projections); their mapped pages were handed back. 0 when
  // nothing was packed.
  virtual std::int64_t packed_bytes() const noexcept = 0;
  // How the CPU's packed experts are shared among threads, chosen by timing them at load, with
  // the timings (expert_plan::calibrate_experts); empty when the experts are not packed.
  virtual std::string expert_schedule() const = 0;
  // Which library runs the CPU's fp32 matmuls of the experts (oneDNN or libxsmm on weights packed
  // at load, or the BLAS on them as they are) and of the attention projections (oneDNN or the
  // BLAS), chosen by timing each at load, with the timings (expert_plan::choose_matmuls); empty where
  // there was no choice.
  virtual std::string matmul_choice() const = 0;
  // Whether the release has the tower that reads this kind of media and the token ids to place it.
  virtual bool reads_images() const noexcept = 0;
  virtual bool reads_audio() const noexcept = 0;

  virtual void set_profiling(bool on) noexcept = 0;
  virtual const forward_profile& last_profile() const noexcept = 0;
};

}  // namespace baton::clef
