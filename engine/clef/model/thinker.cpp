#include "engine/clef/model/thinker.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <sys/mman.h>
#include <torch/version.h>  // the version macros only
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

// at::_grouped_mm (bf16 on CUDA) is libtorch 2.8's; scaled_dot_product_attention takes
// enable_gqa from 2.5. Debian's 1.13 has neither: the per-expert loop and the chunked attention.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define BATON_GROUPED_MM 1
#else
#define BATON_GROUPED_MM 0
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define BATON_SDPA_GQA 1
#else
#define BATON_SDPA_GQA 0
#endif

namespace baton::clef::detail {

namespace {

// RMSNorm as the reference computes it: statistics in fp32, normalised value cast back to the
// activation dtype before the weight multiplies it (qwen3-omni-thinker.md §3).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * at::rsqrt(variance + eps)).to(x.scalar_type());
}

const char* expert_library_name(expert_library library) {
  switch (library) {
    case expert_library::onednn: return "oneDNN, packed";
    case expert_library::xsmm: return "libxsmm, packed";
    case expert_library::blas: return "the BLAS";
    case expert_library::measured: break;
  }
  return "the library timed at load";
}

// Hands the pages of a mapped weight that is no longer read back to the kernel (whole pages
// inside it only): they were read once to pack it, and would otherwise count as resident.
void release_pages(const tensor_view& v) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(v.data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(v.data) + v.bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Whether the CPU's experts go through experts_cpu (packed_linear): fp32 and bf16 ones with oneDNN,
// and int8 ones computed in fp32, on libxsmm's kernels, where choose_matmuls times them against
// ATen's path (it runs where the process has the BLAS). ATen widens int8 ones per matmul otherwise,
// and where the BLAS is asked for.
bool packs_experts(bool int8, at::ScalarType type, bool cpu_attention, bool grouped, expert_library asked) {
  if (!cpu_attention || grouped) return false;
  if (!int8) return true;
  return type == at::kFloat && asked != expert_library::blas && packed_linear::xsmm_available() &&
         packed_linear::blas_available();
}

// `bytes` rounded up to whole 4 KiB pages: each packed expert weight starts on its own page.
std::int64_t page_aligned(std::int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

// release_pages for expert e's three mapped weights in the layer at `prefix`.
void release_expert_pages(const release& files, const std::string& prefix, std::int64_t e) {
  const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
  for (const char* name : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) {
    release_pages(files.thinker_tensor(x + name));
  }
}

// Whether at::_grouped_mm runs on `device`: libtorch 2.8 has it for compute capability 9.x only,
// and says so by throwing; elsewhere the per-expert loop serves. Asked once, at load.
bool grouped_mm_runs([[maybe_unused]] at::Device device) {
#if BATON_GROUPED_MM
  try {
    const auto options = at::TensorOptions().dtype(at::kBFloat16).device(device);
    const at::Tensor a = at::zeros({8, 8}, options), b = at::zeros({1, 8, 8}, options);
    const at::Tensor offs = at::full({1}, 8, options.dtype(at::kInt));
    (void)at::_grouped_mm(a, b.transpose(1, 2), offs);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
#else
  return false;
#endif
}

// x [rows, in] times w [groups, in, out] group by group, rows [offs[g - 1], offs[g]) belonging to
// group g (offs: int32 group ends): at::_grouped_mm where it runs, else a matmul per group (the
// offsets read back to the host), recorded as one operation as the grouped kernel is.
at::Tensor grouped_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& offs, bool native) {
#if BATON_GROUPED_MM
  if (native) return at::_grouped_mm(x, w, offs);
#else
  (void)native;
#endif
  at::RecordFunction guard(at::RecordScope::FUNCTION);
  if (guard.isActive()) guard.before("baton::grouped_mm");
  const at::Tensor ends = offs.to(at::kCPU, at::kLong);
  const auto* end = ends.data_ptr<std::int64_t>();
  at::Tensor y = at::empty({x.size(0), w.size(2)}, x.options());
  std::int64_t begin = 0;
  for (std::int64_t g = 0; g < w.size(0); ++g) {
    if (end[g] > begin) {
      at::Tensor rows = y.narrow(0, begin, end[g] - begin);
      at::mm_out(rows, x.narrow(0, begin, end[g] - begin), w[g]);
    }
    begin = end[g];
  }
  return y;
}

}  // namespace

thinker::thinker(const release& files, at::ScalarType type, at::Device device,
                 std::int64_t score_budget_bytes, bool grouped_experts, expert_library experts,
                 std::int64_t packing_budget_bytes)
    : config_(files.text()),
      type_(type),
      device_(device),
      score_budget_bytes_(score_budget_bytes),
      // The CPU has its own fused kernels (cpu_kernels.hpp). _grouped_mm wants rows of 16-byte
      // multiples, and (2.8) a Hopper-class GPU: probed.
      native_grouped_(BATON_GROUPED_MM && device.is_cuda() && type == at::kBFloat16 && config_.hidden_size % 8 == 0 &&
                      config_.moe_intermediate_size % 8 == 0 && grouped_mm_runs(device)),
      grouped_(native_grouped_ || grouped_experts),
      // bf16 only: in fp32 there is no flash kernel, and the math kernel would write the whole
      // [heads, len, len] score square (34 GB at 16k tokens) where the chunked path keeps 1 GiB.
      fused_attention_(BATON_SDPA_GQA && !device.is_cpu() && type == at::kBFloat16),
      cpu_attention_(device.is_cpu() && onednn_runs(type)),
      int8_experts_(files.int8_experts()),
      packed_experts_(packs_experts(int8_experts_, type, cpu_attention_, grouped_, experts)),
      experts_asked_(experts) {
  auto w = [&](const std::string& name) {
    return weight_tensor(files.thinker_tensor(name), type_, device_);
  };
  auto raw = [&](const std::string& name) {
    at::Tensor t = view_tensor(files.thinker_tensor(name));
    return device_.is_cpu() ? t : t.to(device_);
  };
  embed_ = raw("thinker.model.embed_tokens.weight");
  lm_head_ = raw("thinker.lm_head.weight");
  final_norm_ = w("thinker.model.norm.weight");
  layers_.resize(static_cast<std::size_t>(config_.num_layers));
  if (experts != expert_library::measured) {
    std::string why;
    // int8 ones on the BLAS: widened per matmul by ATen, whose fp32 matmul is the BLAS's.
    const bool int8_on_blas = int8_experts_ && experts == expert_library::blas && cpu_attention_ && !grouped_ &&
                              type_ == at::kFloat && packed_linear::blas_available();
    if (int8_experts_ && experts == expert_library::onednn) {
      why = "it packs fp32 and bf16 weights, not int8 ones";
    } else if (!packed_experts_) {
      if (!int8_on_blas) {
        why = "this model's experts are not packed on the CPU (int8 experts in bf16 or without libxsmm, the grouped "
              "path, a GPU or no oneDNN)";
      }
    } else if (experts != expert_library::onednn && type_ != at::kFloat) {
      why = "it multiplies fp32 only";
    } else if (experts == expert_library::blas && !packed_linear::blas_available()) {
      why = "the process has no cblas_sgemm";
    } else if (experts == expert_library::xsmm && !packed_linear::xsmm_available()) {
      why = "this build or this CPU has no libxsmm kernels";
    }
    if (!why.empty()) {
      throw std::invalid_argument(std::string("clef model: experts on ") + expert_library_name(experts) +
                                  " were asked for, but " + why);
    }
    experts_on_ = experts;
  } else if (const std::int64_t copy = packed_experts_ ? packed_copy_bytes() : 0;
             packing_budget_bytes > 0 && copy > packing_budget_bytes) {
    // A packed copy replaces mapped pages the kernel could evict with memory it cannot.
    const auto text = [](std::int64_t bytes) {  // rounded up, in GiB from 1 GiB on
      const int shift = bytes >= (1ll << 30) ? 30 : 20;
      return std::to_string((bytes + (1ll << shift) - 1) >> shift) + (shift == 30 ? " GiB" : " MiB");
    };
    no_room_ = "a packed copy (" + text(copy) + ") would not fit in the " + text(packing_budget_bytes) +
               " the load leaves it";
    experts_on_ = expert_library::blas;
    // In fp32 the BLAS multiplies them as they are; otherwise ATen's path, int8 ones widened per matmul.
    if (type_ != at::kFloat || int8_experts_ || !packed_linear::blas_available()) packed_experts_ = false;
    // Said here where choose_matmuls will not say it (bf16, no BLAS); it replaces this otherwise.
    if (!packed_experts_) {
      matmul_choice_ = std::string(type_ == at::kFloat ? "fp32" : "bf16") + (int8_experts_ ? " int8" : "") +
                       " experts through ATen (" + no_room_ + ")";
    }
  }
  // fp32 on a CPU with oneDNN: the experts (fp32 ones; int8 ones, libxsmm's per-block widening
  // against ATen's per matmul; not the grouped path's stacks; unless a library was asked for) and
  // the attention projections go to the fastest library.
  if (cpu_attention_ && type_ == at::kFloat && packed_linear::blas_available() && config_.num_layers > 0) {
    choose_matmuls(files);
  }
  expert_staging staging;
  if (grouped_) {
    const std::int64_t experts = config_.num_experts, inter = config_.moe_intermediate_size,
                       hidden = config_.hidden_size;
    // Pageable: a pinned buffer would stay in libtorch's host cache (1.2 GB) for the process's life.
    const auto host = at::TensorOptions().dtype(files.int8_experts() ? at::kChar : type_);
    staging.gate_up = at::empty({experts, 2 * inter, hidden}, host);
    staging.down = at::empty({experts, hidden, inter}, host);
    if (files.int8_experts()) {
      staging.gate_up_scale = at::empty({experts, 2 * inter}, host.dtype(at::kFloat));
      staging.down_scale = at::empty({experts, hidden}, host.dtype(at::kFloat));
    }
  }
  for (std::int64_t l = 0; l < config_.num_layers; ++l) {
    const std::string p = "thinker.model.layers." + std::to_string(l) + ".";
    layer& y = layers_[static_cast<std::size_t>(l)];
    y.input_norm = w(p + "input_layernorm.weight");
    y.q = w(p + "self_attn.q_proj.weight");
    y.k = w(p + "self_attn.k_proj.weight");
    y.v = w(p + "self_attn.v_proj.weight");
    y.o = w(p + "self_attn.o_proj.weight");
    y.q_norm = w(p + "self_attn.q_norm.weight");
    y.k_norm = w(p + "self_attn.k_norm.weight");
    y.post_norm = w(p + "post_attention_layernorm.weight");
    y.router = w(p + "mlp.gate.weight");
    if (cpu_attention_ && type_ == at::kFloat && !blas_projections_) {  // q, k, v and o packed too (fp32 only)
      for (auto [weight, packed, name] : {std::tuple{&y.q, &y.q_packed, "q_proj"}, std::tuple{&y.k, &y.k_packed, "k_proj"},
                                          std::tuple{&y.v, &y.v_packed, "v_proj"}, std::tuple{&y.o, &y.o_packed, "o_proj"}}) {
        *packed = packed_linear(*weight);
        packed_bytes_ += packed->bytes();
        *weight = at::Tensor();
        release_pages(files.thinker_tensor(p + "self_attn." + name + ".weight"));
      }
    }
    if (grouped_) {
      stack_experts(files, p, y, staging);
      continue;
    }
    if (packed_experts_) {
      if (experts_on_ == expert_library::blas) {
        blas_experts(files, p, y);
      } else if (y.gate_up_packed.empty()) {  // layer 0 may be packed already (choose_matmuls)
        packed_bytes_ += pack_experts(files, p, y, experts_on_);
      }
      continue;
    }
    aten_experts(files, p, y);
  }
  if (packed_experts_ && !layers_.empty()) calibrate_experts();
  // inv_freq exactly as the reference builds it: fp32 from an int64 arange.
  const auto dim = config_.head_dim;
  inv_freq_ = at::reciprocal(at::pow(config_.rope_theta,
                                     at::arange(0, dim, 2, at::kLong).to(at::kFloat) /
                                         static_cast<double>(dim)))
                  .to(device_);
  // Slot i rotates by the H position when i % 3 == 1 and i < 3 * section[1], by W when
  // i % 3 == 2 and i < 3 * section[2], by T otherwise (transformers' apply_interleaved_mrope).
  std::vector<std::int64_t> axis(static_cast<std::size_t>(dim / 2), 0);
  for (std::size_t i = 0; i < axis.size(); ++i) {
    const auto s = static_cast<std::int64_t>(i);
    if (s % 3 == 1 && s < 3 * config_.mrope_section[1]) axis[i] = 1;
    if (s % 3 == 2 && s < 3 * config_.mrope_section[2]) axis[i] = 2;
  }
  mrope_axis_ = long_tensor(axis, device_).view({1, 1, -1});
  if (grouped_) expert_ids_ = at::arange(config_.num_experts, at::TensorOptions().dtype(at::kLong).device(device_));
}

std::int64_t thinker::pack_experts(const release& files, const std::string& prefix, layer& y,
                                  expert_library library) const {
  const std::int64_t experts = config_.num_experts;
  const bool xsmm = library == expert_library::xsmm, int8 = int8_experts_;
  if (int8 && !xsmm) throw std::logic_error("clef model: int8 experts are packed for libxsmm only");
  const auto [gate_up_bytes, down_bytes] = packed_expert_bytes(library);
  // One arena per layer; 4 KiB alignment keeps each packed weight on its own pages.
  const std::int64_t per_expert = page_aligned(gate_up_bytes) + page_aligned(down_bytes);
  const at::Tensor arena = packed_linear::arena(per_expert * experts);
  y.gate_up_packed.resize(static_cast<std::size_t>(experts));
  y.down_packed.resize(static_cast<std::size_t>(experts));
  // Experts packed side by side; the mapped weights' pages are handed back once packed.
  at::parallel_for(0, experts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) {
      const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
      auto w = [&](const char* name) { return weight_tensor(files.thinker_tensor(x + name), type_, device_); };
      auto raw = [&](const char* name) { return view_tensor(files.thinker_tensor(x + name)); };
      const at::Tensor slot = arena.narrow(0, e * per_expert, per_expert);
      const at::Tensor gate_up_slot = slot.narrow(0, 0, gate_up_bytes),
                       down_slot = slot.narrow(0, page_aligned(gate_up_bytes), down_bytes);
      const auto i = static_cast<std::size_t>(e);
      if (int8) {
        y.gate_up_packed[i] = packed_linear::for_xsmm_int8({raw("gate_proj.weight"), raw("up_proj.weight")},
                                                           {raw("gate_proj.weight_scale"), raw("up_proj.weight_scale")},
                                                           gate_up_slot);
        y.down_packed[i] = packed_linear::for_xsmm_int8({raw("down_proj.weight")}, {raw("down_proj.weight_scale")}, down_slot);
      } else if (xsmm) {
        y.gate_up_packed[i] = packed_linear::for_xsmm({w("gate_proj.weight"), w("up_proj.weight")}, gate_up_slot);
        y.down_packed[i] = packed_linear::for_xsmm({w("down_proj.weight")}, down_slot);
      } else {
        y.gate_up_packed[i] = packed_linear(at::cat({w("gate_proj.weight"), w("up_proj.weight")}), gate_up_slot);
        y.down_packed[i] = packed_linear(w("down_proj.weight"), down_slot);
      }
      release_expert_pages(files, prefix, e);
    }
  });
  return per_expert * experts;
}

namespace {

// 1,024 tokens of random activations for timing layer 0's experts, routed unevenly as trained
// routers are (random activations through the router spread evenly): each token's experts drawn
// without replacement with odds 1, 1/2, 1/3, …, so the busiest expert gets ~10 % of the rows, as on
// a transformers-initialised release.
struct calibration_batch {
  at::Tensor b, experts, weights;
  std::int64_t busiest = 0;  // rows of the busiest expert

  calibration_batch(const text_config& config, at::ScalarType type, std::int64_t tokens) {
    const std::int64_t top_k = config.experts_per_token;
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(20261204);  // the global one untouched
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    b = at::randn({tokens, config.hidden_size}, generator, f32).to(type);
    const at::Tensor odds = at::reciprocal(at::arange(1, config.num_experts + 1, f32)).expand({tokens, config.num_experts});
    experts = at::multinomial(odds, top_k, /*replacement=*/false, generator);
    weights = at::full({tokens, top_k}, 1.0 / static_cast<double>(top_k), f32).to(type);
    busiest = at::bincount(experts.reshape({-1}), {}, config.num_experts).max().item<std::int64_t>();
  }
};

// Each candidate's best of `rounds` timings, in ms, after one untimed call each (first touch of
// buffers, kernels generated). The candidates take turns within every round, so a slow minute of
// the VM slows all of them, not the one it falls on.
std::vector<double> best_ms_in_turn(int rounds, const std::vector<std::function<void()>>& candidates) {
  for (const auto& f : candidates) f();
  std::vector<double> best(candidates.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      candidates[i]();
      best[i] = std::min(best[i], std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  return best;
}

std::string ms_text(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", ms);
  return text;
}

}  // namespace

std::pair<std::int64_t, std::int64_t> thinker::packed_expert_bytes(expert_library library) const {
  const std::int64_t inter = config_.moe_intermediate_size, hidden = config_.hidden_size;
  auto bytes = [&](std::int64_t out, std::int64_t in) {
    return int8_experts_                        ? packed_linear::xsmm_int8_bytes_for(out, in)
           : library == expert_library::xsmm ? packed_linear::xsmm_bytes_for(out, in)
                                             : packed_linear::bytes_for(out, in, type_);
  };
  return {bytes(2 * inter, hidden), bytes(hidden, inter)};
}

std::int64_t thinker::packed_copy_bytes() const {
  // The smallest copy: libxsmm's layout in fp32 (and int8), oneDNN's in bf16.
  const auto [gate_up, down] =
      packed_expert_bytes(type_ == at::kFloat ? expert_library::xsmm : expert_library::onednn);
  return config_.num_layers * config_.num_experts * (page_aligned(gate_up) + page_aligned(down));
}

void thinker::aten_experts(const release& files, const std::string& prefix, layer& y) const {
  for (std::int64_t e = 0; e < config_.num_experts; ++e) {
    const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
    if (!int8_experts_) {
      for (auto [list, name] : {std::pair{&y.gate, "gate_proj.weight"}, std::pair{&y.up, "up_proj.weight"},
                                std::pair{&y.down, "down_proj.weight"}}) {
        list->push_back(weight_tensor(files.thinker_tensor(x + name), type_, device_));
      }
      continue;
    }
    // int8 weights stay int8 (a view of the mapping on the CPU) and are converted per matmul;
    // the scales stay fp32, so the output is scaled with one rounding.
    for (auto [list, name] : {std::pair{&y.gate, "gate_proj.weight"}, std::pair{&y.up, "up_proj.weight"},
                              std::pair{&y.down, "down_proj.weight"}, std::pair{&y.gate_scale, "gate_proj.weight_scale"},
                              std::pair{&y.up_scale, "up_proj.weight_scale"},
                              std::pair{&y.down_scale, "down_proj.weight_scale"}}) {
      const at::Tensor t = view_tensor(files.thinker_tensor(x + name));
      list->push_back(device_.is_cpu() ? t : t.to(device_));
    }
  }
}

void thinker::blas_experts(const release& files, const std::string& prefix, layer& y) const {
  y.gate_up_packed.resize(static_cast<std::size_t>(config_.num_experts));
  y.down_packed.resize(static_cast<std::size_t>(config_.num_experts));
  for (std::int64_t e = 0; e < config_.num_experts; ++e) {
    const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
    auto w = [&](const char* name) { return weight_tensor(files.thinker_tensor(x + name), type_, device_).contiguous(); };
    y.gate_up_packed[static_cast<std::size_t>(e)] = packed_linear::over_blas({w("gate_proj.weight"), w("up_proj.weight")});
    y.down_packed[static_cast<std::size_t>(e)] = packed_linear::over_blas({w("down_proj.weight")});
  }
}

void thinker::choose_matmuls(const release& files) {
  static std::mutex chosen_mutex;
  static std::map<
      std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, bool, bool, int, std::string>,
      std::tuple<expert_library, bool, bool, std::string>>
      chosen;
  const bool int8 = int8_experts_;
  const auto key = std::make_tuple(config_.hidden_size, config_.num_heads * config_.head_dim,
                                   config_.moe_intermediate_size, config_.num_experts, config_.experts_per_token,
                                   at::get_num_threads(), packed_experts_, int8, static_cast<int>(experts_asked_),
                                   no_room_);
  {
    const std::lock_guard lock(chosen_mutex);
    if (const auto it = chosen.find(key); it != chosen.end()) {
      std::tie(experts_on_, packed_experts_, blas_projections_, matmul_choice_) = it->second;
      matmul_choice_ += ", kept from an earlier load in this process";
      return;
    }
  }
  const std::string p = "thinker.model.layers.0.";
  const calibration_batch batch(config_, type_, 1024);
  matmul_choice_ = "fp32 ";
  const std::string experts_on = int8 ? "int8 experts on " : "experts on ";
  if ((experts_asked_ != expert_library::measured || !no_room_.empty()) && (packed_experts_ || int8)) {
    matmul_choice_ += experts_on + expert_library_name(experts_on_) + " (" +
                      (no_room_.empty() ? std::string("asked for") : no_room_) + "), ";
  } else if (packed_experts_) {
    // Every candidate made first, then timed in turn. Schedules aside (calibrate_experts picks
    // among them afterwards): whole experts per work item. int8 experts: widened per matmul by
    // ATen (onto the BLAS) or per block of outputs on libxsmm.
    struct candidate {
      expert_library library;
      const char* name;
      layer y;
      std::int64_t bytes = 0;
    };
    std::vector<candidate> candidates;
    candidates.reserve(3);
    if (int8) {
      candidates.push_back({expert_library::blas, "the BLAS, widened per matmul by ATen ", {}});
      aten_experts(files, p, candidates.back().y);
      candidates.push_back({expert_library::xsmm, "libxsmm packed, widened per block ", {}});
    } else {
      candidates.push_back({expert_library::blas, "BLAS ", {}});
      blas_experts(files, p, candidates.back().y);
      candidates.push_back({expert_library::onednn, "oneDNN packed ", {}});
      if (packed_linear::xsmm_available()) candidates.push_back({expert_library::xsmm, "libxsmm packed ", {}});
    }
    std::string dropped;
    for (auto c = candidates.begin(); c != candidates.end();) {
      try {
        if (c->y.gate_up_packed.empty() && c->y.gate.empty()) c->bytes = pack_experts(files, p, c->y, c->library);
        ++c;
      } catch (const std::runtime_error& e) {  // libxsmm made no kernel for this shape: not a candidate
        dropped += std::string(", ") + c->name + "not run: " + e.what();
        c = candidates.erase(c);
      }
    }
    std::vector<std::function<void()>> runs;
    for (const auto& c : candidates) {
      runs.emplace_back([this, &batch, &y = c.y] {
        (void)(y.gate.empty() ? experts_cpu(batch.b, batch.experts, batch.weights, y.gate_up_packed, y.down_packed, 0)
                              : experts_aten(y, batch.b, batch.experts, batch.weights));
      });
    }
    const std::vector<double> ms = best_ms_in_turn(3, runs);
    const auto pick = static_cast<std::size_t>(std::min_element(ms.begin(), ms.end()) - ms.begin());
    candidate& winner = candidates[pick];
    experts_on_ = winner.library;
    if (int8 && experts_on_ == expert_library::blas) {
      packed_experts_ = false;  // ATen's path: the layer loop keeps the int8 weights as they are
    } else if (experts_on_ != expert_library::blas) {  // layer 0 stays packed: the loop does not pack it again
      layer& kept = layers_.front();
      kept.gate_up_packed = std::move(winner.y.gate_up_packed);
      kept.down_packed = std::move(winner.y.down_packed);
      packed_bytes_ += winner.bytes;
      // The BLAS's timing read the mapped weights again after packing had handed them back.
      for (std::int64_t e = 0; e < config_.num_experts; ++e) release_expert_pages(files, p, e);
    }
    matmul_choice_ += experts_on + expert_library_name(experts_on_) + " (layer 0, 1024 tokens, best of 3 in turn: ";
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      matmul_choice_ += std::string(i == 0 ? "" : ", ") + candidates[i].name + ms_text(ms[i]);
    }
    matmul_choice_ += dropped + "), ";
  }
  const at::Tensor q = weight_tensor(files.thinker_tensor(p + "self_attn.q_proj.weight"), type_, device_);
  const at::Tensor x = batch.b;
  const packed_linear q_packed(q);
  const std::vector<double> q_ms = best_ms_in_turn(3, {[&] { (void)dense(x, q); }, [&] { (void)q_packed.parallel(x); }});
  const double q_blas = q_ms[0], q_onednn = q_ms[1];
  blas_projections_ = q_blas < q_onednn;
  matmul_choice_ += std::string("projections on ") + (blas_projections_ ? "the BLAS" : "oneDNN, packed") +
                    " (q_proj: BLAS " + ms_text(q_blas) + ", oneDNN packed " + ms_text(q_onednn) + ")";
  const std::lock_guard lock(chosen_mutex);
  chosen.emplace(key, std::make_tuple(experts_on_, packed_experts_, blas_projections_, matmul_choice_));
}

void thinker::calibrate_experts() {
  prepare_experts_cpu();  // libtorch's bf16 silu asked now, not in the first forward
  const std::int64_t tokens = 1024, top_k = config_.experts_per_token;
  if (at::get_num_threads() == 1) {  // every schedule is the same work on one thread
    expert_schedule_ = "whole experts per work item on 1 thread";
    return;
  }
  // Measured once per process for a shape, dtype and thread count: a model loaded again (a
  // reload, a second engine on the same release) keeps the earlier choice.
  static std::mutex measured_mutex;
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, bool, int>,
                  std::pair<std::int64_t, std::string>>
      measured;
  const auto key = std::make_tuple(config_.hidden_size, config_.moe_intermediate_size, config_.num_experts, top_k,
                                   static_cast<int>(type_), int8_experts_, at::get_num_threads());
  {
    const std::lock_guard lock(measured_mutex);
    if (const auto it = measured.find(key); it != measured.end()) {
      expert_chunk_rows_ = it->second.first;
      expert_schedule_ = it->second.second + ", kept from an earlier load in this process";
      return;
    }
  }
  const layer& w = layers_.front();
  const calibration_batch batch(config_, type_, tokens);
  const at::Tensor &b = batch.b, &experts = batch.experts, &weights = batch.weights;
  const std::int64_t busiest = batch.busiest;
  // Chunks no expert fills would repeat "whole experts" (an expert has at most `tokens` rows).
  std::vector<std::int64_t> candidates = {0};
  for (const std::int64_t chunk : {256, 512}) {
    if (busiest > chunk) candidates.push_back(chunk);
  }
  std::vector<double> best(candidates.size(), std::numeric_limits<double>::infinity());
  if (candidates.size() > 1) {
    std::vector<std::function<void()>> runs;
    for (const std::int64_t chunk : candidates) {
      runs.emplace_back([&, chunk] { (void)experts_cpu(b, experts, weights, w.gate_up_packed, w.down_packed, chunk); });
    }
    best = best_ms_in_turn(3, runs);
  }
  const auto pick = static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin());
  expert_chunk_rows_ = candidates[pick];
  auto name = [](std::int64_t chunk) {
    return chunk == 0 ? std::string("whole experts") : std::to_string(chunk) + "-row chunks";
  };
  expert_schedule_ = name(expert_chunk_rows_) + " per work item on " + std::to_string(at::get_num_threads()) + " threads";
  if (candidates.size() == 1) {
    expert_schedule_ += " (no expert had over 256 of " + std::to_string(tokens * top_k) + " rows at load)";
    return;
  }
  expert_schedule_ += " (measured at load, " + std::to_string(tokens) + " tokens through layer 0, best of 3:";
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    expert_schedule_ += std::string(i == 0 ? " " : ", ") + name(candidates[i]) + " " + ms_text(best[i]);
  }
  expert_schedule_ += ")";
  const std::lock_guard lock(measured_mutex);
  measured.emplace(key, std::make_pair(expert_chunk_rows_, expert_schedule_));
}

void thinker::stack_experts(const release& files, const std::string& prefix, layer& y,
                            expert_staging& staging) const {
  const std::int64_t inter = config_.moe_intermediate_size;
  auto put = [&](const at::Tensor& into, const std::string& name) {
    into.copy_(view_tensor(files.thinker_tensor(name)));  // converted here when the file's dtype differs
  };
  for (std::int64_t e = 0; e < config_.num_experts; ++e) {
    const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
    put(staging.gate_up[e].narrow(0, 0, inter), x + "gate_proj.weight");
    put(staging.gate_up[e].narrow(0, inter, inter), x + "up_proj.weight");
    put(staging.down[e], x + "down_proj.weight");
    if (staging.gate_up_scale.defined()) {
      put(staging.gate_up_scale[e].narrow(0, 0, inter), x + "gate_proj.weight_scale");
      put(staging.gate_up_scale[e].narrow(0, inter, inter), x + "up_proj.weight_scale");
      put(staging.down_scale[e], x + "down_proj.weight_scale");
    }
  }
  // Blocking copies (a copy on the CPU too): the buffer is free for the next layer on return.
  auto copy = [&](const at::Tensor& t) { return t.to(device_, /*non_blocking=*/false, /*copy=*/true); };
  y.gate_up_all = copy(staging.gate_up).transpose(1, 2);
  y.down_all = copy(staging.down).transpose(1, 2);
  if (staging.gate_up_scale.defined()) {
    y.gate_up_scale_all = copy(staging.gate_up_scale);
    y.down_scale_all = copy(staging.down_scale);
  }
}

at::Tensor thinker::norm(const at::Tensor& x, const at::Tensor& w) const {
  return device_.is_cpu() ? rms_norm_cpu(x, w, config_.rms_norm_eps) : rms_norm(x, w, config_.rms_norm_eps);
}

at::Tensor thinker::output_rows(const at::Tensor& ids, at::ScalarType type) const {
  return lm_head_.index_select(0, ids).to(type);
}

at::Tensor thinker::embed(const at::Tensor& ids) const { return embed_.index_select(0, ids).to(type_); }

std::int64_t prefix_state::bytes() const noexcept {
  std::int64_t n = hidden.defined() ? hidden.nbytes() : 0;
  for (const auto& k : keys) n += k.nbytes();
  for (const auto& v : values) n += v.nbytes();
  return n;
}

std::pair<at::Tensor, at::Tensor> thinker::rotary(const at::Tensor& positions, const std::vector<std::int64_t>& lengths,
                                                  const std::vector<std::int64_t>& first) const {
  at::Tensor freqs;
  if (!positions.defined()) {
    // Text-only positions are 0..len-1 on all three MRoPE axes, so every frequency slot sees the
    // same position and the interleaving reduces to plain RoPE.
    std::vector<at::Tensor> pieces;
    pieces.reserve(lengths.size());
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      pieces.push_back(at::arange(first[r], first[r] + lengths[r], at::TensorOptions().dtype(at::kFloat).device(device_)));
    }
    freqs = at::cat(pieces).unsqueeze(1) * inv_freq_.unsqueeze(0);
  } else {
    // Interleaved MRoPE (§3.1): each frequency slot takes the angle of its own axis.
    const at::Tensor all = positions.unsqueeze(2) * inv_freq_.view({1, 1, -1});  // [3, N, half]
    freqs = all.gather(0, mrope_axis_.expand({1, all.size(1), all.size(2)})).squeeze(0);
  }
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(type_).unsqueeze(1), emb.sin().to(type_).unsqueeze(1)};  // broadcast over heads
}

at::Tensor thinker::forward(const thinker_input& input, const std::vector<std::int64_t>& lengths,
                            const stage_observer* observe, forward_profile* profile, const prefix_list& past,
                            std::vector<prefix_state>* kept) const {
  if (!past.empty() && past.size() != lengths.size()) throw std::invalid_argument("thinker: one prefix per record");
  std::vector<std::int64_t> past_lengths(lengths.size(), 0);
  bool any_past = false;
  for (std::size_t r = 0; r < past.size(); ++r) {
    if (past[r] == nullptr) continue;
    if (past[r]->keys.size() != layers_.size() || past[r]->values.size() != layers_.size()) {
      throw std::invalid_argument("thinker: a cached prefix with another number of layers");
    }
    past_lengths[r] = past[r]->length();
    any_past = true;
  }
  // From here on a list of prefixes is empty unless some record has one.
  const prefix_list none;
  const prefix_list& prefixes = any_past ? past : none;
  if (kept) {
    kept->assign(lengths.size(), {});
    for (auto& k : *kept) {
      k.keys.resize(layers_.size());
      k.values.resize(layers_.size());
    }
  }
  at::Tensor x = input.embeds;
  if (input.positions.defined()) report(observe, "position_ids", input.positions);
  report(observe, "inputs_embeds", x);

  at::Tensor cos, sin;
  {
    scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
    std::tie(cos, sin) = rotary(input.positions, lengths, past_lengths);
  }

  const attention_scratch scratch = make_attention_scratch(lengths, past_lengths);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const layer& w = layers_[l];
    at::Tensor a;
    {
      scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
      a = norm(x, w.input_norm);
    }
    {
      scoped_timer t(profile ? &profile->attention_ms : nullptr, device_, profile ? &profile->attention_ops : nullptr);
      x = x + attention(l, a, cos, sin, lengths, scratch, prefixes, past_lengths, kept);
    }
    at::Tensor b;
    {
      scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
      b = norm(x, w.post_norm);
    }
    if (observe) report(observe, "router_logits." + std::to_string(l), dense(b, w.router));
    {
      scoped_timer t(profile ? &profile->moe_ms : nullptr, device_, profile ? &profile->moe_ops : nullptr);
      x = x + moe(w, b);
    }
    if (observe) report(observe, "layer_out." + std::to_string(l), x);
    if (l < input.deepstack.size()) x.index_add_(0, input.visual_rows, input.deepstack[l]);
  }
  {
    scoped_timer t(profile ? &profile->norms_ms : nullptr, device_);
    x = norm(x, final_norm_);
  }
  report(observe, "final_hidden", x);
  return x;
}

thinker::attention_scratch thinker::make_attention_scratch(const std::vector<std::int64_t>& lengths,
                                                           const std::vector<std::int64_t>& past_lengths) const {
  const bool any_past = std::any_of(past_lengths.begin(), past_lengths.end(), [](std::int64_t n) { return n > 0; });
  if (cpu_attention_ || (fused_attention_ && !any_past)) return {};  // the fused kernels keep their own
  const std::int64_t heads = config_.num_heads;
  std::int64_t rows = 1, most = 1;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t len = lengths[i], keys = past_lengths[i] + len;
    const std::int64_t r = chunk_rows(score_budget_bytes_, heads, keys, len);
    rows = std::max(rows, r);
    most = std::max(most, heads * r * keys);
  }
  const auto options = at::TensorOptions().dtype(type_).device(device_);
  attention_scratch s;
  s.causal = at::ones({rows, rows}, options.dtype(at::kBool)).triu(1);
  s.scores = at::empty({most}, options);
  s.probs_f32 = at::empty({most}, options.dtype(at::kFloat));
  s.probs = type_ == at::kFloat ? s.probs_f32 : at::empty({most}, options);
  s.ctx = at::empty({heads * rows * config_.head_dim}, options);
  return s;
}

// Each record's keys (or values) with its cached prefix's first: [Σ (past + length), kv, dim], as
// attention_cpu and chunked_attention take them; `own` as it is when no record has a prefix. With
// `kept`, each record's rows are handed to it (copied apart when the batch has several records,
// so that a kept record does not hold the whole batch's tensor).
static at::Tensor with_prefixes(const at::Tensor& own, std::size_t l, bool values, const prefix_list& past,
                         const std::vector<std::int64_t>& lengths, std::vector<prefix_state>* kept) {
  at::Tensor all = own;
  if (!past.empty()) {
    std::vector<at::Tensor> pieces;
    std::int64_t offset = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      if (past[r] != nullptr) pieces.push_back(values ? past[r]->values[l] : past[r]->keys[l]);
      pieces.push_back(own.narrow(0, offset, lengths[r]));
      offset += lengths[r];
    }
    all = at::cat(pieces);
  }
  if (kept) {
    std::int64_t offset = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      const std::int64_t rows = lengths[r] + (past.empty() || past[r] == nullptr ? 0 : past[r]->length());
      at::Tensor mine = lengths.size() == 1 ? all : all.narrow(0, offset, rows).clone();
      (values ? (*kept)[r].values[l] : (*kept)[r].keys[l]) = std::move(mine);
      offset += rows;
    }
  }
  return all;
}

at::Tensor thinker::attention(std::size_t l, const at::Tensor& a, const at::Tensor& cos, const at::Tensor& sin,
                              const std::vector<std::int64_t>& lengths, const attention_scratch& scratch,
                              const prefix_list& past, const std::vector<std::int64_t>& past_lengths,
                              std::vector<prefix_state>* kept) const {
  const layer& w = layers_[l];
  const std::int64_t n_tokens = a.size(0), heads = config_.num_heads,
                     kv_heads = config_.num_kv_heads, dim = config_.head_dim;
  const double eps = config_.rms_norm_eps;
  auto project = [&](const at::Tensor& x, const at::Tensor& weight, const packed_linear& packed) {
    return packed.packed() ? packed.parallel(x) : dense(x, weight);
  };
  if (device_.is_cpu()) {
    // Norm and rotary in one pass over the projections.
    at::Tensor q = project(a, w.q, w.q_packed).view({n_tokens, heads, dim});
    at::Tensor k = project(a, w.k, w.k_packed).view({n_tokens, kv_heads, dim});
    at::Tensor v = project(a, w.v, w.v_packed).view({n_tokens, kv_heads, dim});
    rms_norm_rope_cpu(q, w.q_norm, eps, cos, sin);
    rms_norm_rope_cpu(k, w.k_norm, eps, cos, sin);
    k = with_prefixes(k, l, false, past, lengths, kept);
    v = with_prefixes(v, l, true, past, lengths, kept);
    if (cpu_attention_) {
      at::Tensor out = at::empty({n_tokens, heads * dim}, a.options());
      attention_cpu(q, k, v, lengths, 1.0 / std::sqrt(static_cast<double>(dim)), /*causal=*/true, out, {},
                    past_lengths);
      return project(out, w.o, w.o_packed);
    }
    return chunked_attention(w, q, k, v, lengths, scratch, past_lengths);
  }
  at::Tensor q = rms_norm(dense(a, w.q).view({n_tokens, heads, dim}), w.q_norm, eps);
  at::Tensor k = rms_norm(dense(a, w.k).view({n_tokens, kv_heads, dim}), w.k_norm, eps);
  at::Tensor v = dense(a, w.v).view({n_tokens, kv_heads, dim});
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  k = with_prefixes(k, l, false, past, lengths, kept);
  v = with_prefixes(v, l, true, past, lengths, kept);
#if BATON_SDPA_GQA
  // A record continuing a cached prefix goes through chunked_attention: its causal mask is offset
  // by the prefix, which SDPA's is_causal (aligned to the first key) does not express.
  if (fused_attention_ && past.empty()) {
    // One fused causal kernel per record (flash or memory-efficient attention on a GPU): the
    // scores are never written out, and the KV heads are shared by their query groups in it.
    at::Tensor out = at::empty({n_tokens, heads * dim}, a.options());
    std::int64_t offset = 0;
    for (const auto len : lengths) {
      auto heads_first = [&](const at::Tensor& t) { return t.narrow(0, offset, len).transpose(0, 1).unsqueeze(0); };
      const at::Tensor o = at::scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v), {}, 0.0,
                                                            /*is_causal=*/true, std::nullopt, /*enable_gqa=*/true);
      out.narrow(0, offset, len).view({len, heads, dim}).copy_(o.squeeze(0).transpose(0, 1));
      offset += len;
    }
    return dense(out, w.o);
  }
#endif
  return chunked_attention(w, q, k, v, lengths, scratch, past_lengths);
}

at::Tensor thinker::chunked_attention(const layer& w, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const std::vector<std::int64_t>& lengths, const attention_scratch& scratch,
                                      const std::vector<std::int64_t>& past) const {
  const std::int64_t n_tokens = q.size(0), heads = config_.num_heads, kv_heads = config_.num_kv_heads,
                     dim = config_.head_dim, group = heads / kv_heads;
  // Per KV head, its `group` query heads share one matmul: q rows ordered (head in group, token).
  const at::Tensor qg = q.view({n_tokens, kv_heads, group, dim}).permute({1, 2, 0, 3});
  const at::Tensor kt = k.permute({1, 2, 0});  // [kv, dim, N]
  const at::Tensor vt = v.permute({1, 0, 2});  // [kv, N, dim]
  at::Tensor out = at::empty({n_tokens, heads * dim}, q.options());
  const at::Tensor out_heads = out.view({n_tokens, kv_heads, group, dim}).permute({1, 2, 0, 3});
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const float neg_inf = -std::numeric_limits<float>::infinity();

  std::int64_t offset = 0, key_offset = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t len = lengths[i], before = past[i];
    const std::int64_t rows_per_chunk = chunk_rows(score_budget_bytes_, heads, before + len, len);
    for (std::int64_t r0 = 0; r0 < len; r0 += rows_per_chunk) {
      const std::int64_t rows = std::min(rows_per_chunk, len - r0), keys = before + r0 + rows;
      const std::int64_t n = heads * rows * keys;
      // [kv, group, rows, dim] -> [kv, group*rows, dim]
      const at::Tensor qc = qg.narrow(2, offset + r0, rows).reshape({kv_heads, group * rows, dim});
      at::Tensor scores = scratch.scores.narrow(0, 0, n).view({kv_heads, group * rows, keys});
      at::bmm_out(scores, qc, kt.narrow(2, key_offset, keys));
      scores.mul_(scale);
      scores = scores.view({kv_heads, group, rows, keys});
      // Query r0+i sees keys 0..before+r0+i: the strictly-upper part of the last `rows` keys is masked.
      if (rows > 1) {
        scores.narrow(3, before + r0, rows)
            .masked_fill_(scratch.causal.narrow(0, 0, rows).narrow(1, 0, rows), neg_inf);
      }
      at::Tensor probs_f32 = scratch.probs_f32.narrow(0, 0, n).view({kv_heads, group, rows, keys});
      at::softmax_out(probs_f32, scores, -1, at::kFloat);
      at::Tensor probs = scratch.probs.narrow(0, 0, n).view({kv_heads, group * rows, keys});
      if (probs.data_ptr() != probs_f32.data_ptr()) probs.copy_(probs_f32.view({kv_heads, group * rows, keys}));
      at::Tensor ctx = scratch.ctx.narrow(0, 0, heads * rows * dim).view({kv_heads, group * rows, dim});
      at::bmm_out(ctx, probs, vt.narrow(1, key_offset, keys));
      out_heads.narrow(2, offset + r0, rows).copy_(ctx.view({kv_heads, group, rows, dim}));
    }
    offset += len;
    key_offset += before + len;
  }
  return dense(out, w.o);
}

at::Tensor thinker::moe(const layer& w, const at::Tensor& b) const {
  // Tokens are routed independently, so long inputs go through in blocks: the experts' outputs
  // for one block are all held until they are summed (8192 tokens x top-8 x 2048 x 4 bytes = 512
  // MiB on the real thinker in fp32).
  constexpr std::int64_t block = 8192;
  auto run = [&](const at::Tensor& part) { return grouped_ ? moe_grouped(w, part) : moe_block(w, part); };
  if (b.size(0) <= block) return run(b);
  std::vector<at::Tensor> parts;
  for (std::int64_t t = 0; t < b.size(0); t += block) {
    parts.push_back(run(b.narrow(0, t, std::min(block, b.size(0) - t))));
  }
  return at::cat(parts);
}

at::Tensor thinker::moe_grouped(const layer& w, const at::Tensor& b) const {
  const std::int64_t n_tokens = b.size(0), top_k = config_.experts_per_token;
  const at::Tensor logits = at::linear(b, w.router);
  at::Tensor weights, experts;
  if (config_.norm_topk_prob) {
    // The top-k of the softmax renormalised is the softmax of the top-k logits (softmax keeps
    // the order): two operations where four were.
    std::tie(weights, experts) = at::topk(logits, top_k, -1);
    weights = at::softmax(weights, -1, at::kFloat);
  } else {
    std::tie(weights, experts) = at::topk(at::softmax(logits, 1, at::kFloat), top_k, -1);
  }
  // The (token, slot) pairs sorted by expert: `sorted` is each row's expert, `order` its pair.
  auto [sorted, order] = at::sort(experts.view({-1}), c10::optional<bool>(true), 0, false);
  // Group ends as int32 on the device. Not bincount: on CUDA it reads the input's maximum back
  // to the host.
  const at::Tensor offs = at::searchsorted(sorted, expert_ids_, /*out_int32=*/true, /*right=*/true);
  const at::Tensor x = b.index_select(0, at::floor_divide(order, top_k));  // rows grouped by expert
  // int8 weights widened for the layer (exact), their scales applied to each row's outputs
  // by its expert, as the per-expert path does.
  const bool int8 = w.gate_up_scale_all.defined();
  at::Tensor gu = grouped_mm(x, int8 ? w.gate_up_all.to(b.scalar_type()) : w.gate_up_all, offs, native_grouped_);
  if (int8) gu.mul_(w.gate_up_scale_all.index_select(0, sorted));
  const std::vector<at::Tensor> halves = gu.chunk(2, 1);  // gate, up
  const at::Tensor h = at::silu(halves[0]).mul_(halves[1]);
  at::Tensor y = grouped_mm(h, int8 ? w.down_all.to(b.scalar_type()) : w.down_all, offs, native_grouped_);
  if (int8) y.mul_(w.down_scale_all.index_select(0, sorted));
  // Back to (token, slot) order in one copy, then each token's rows weighted and summed in one
  // batched matmul (rounded to the dtype once; cuBLAS accumulates bf16 in fp32): deterministic,
  // where one index_add_ would add a token's rows in bf16 by atomics in any order.
  const at::Tensor by_token = at::empty_like(y).index_copy_(0, order, y);
  return at::einsum("nk,nkh->nh", {weights.to(b.scalar_type()), by_token.view({n_tokens, top_k, y.size(1)})});
}

at::Tensor thinker::moe_block(const layer& w, const at::Tensor& b) const {
  const std::int64_t top_k = config_.experts_per_token;
  const at::Tensor router_logits = dense(b, w.router);
  const at::Tensor probs = at::softmax(router_logits, 1, at::kFloat);
  auto [weights, experts] = at::topk(probs, top_k, -1);
  if (config_.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(b.scalar_type());
  if (packed_experts_) return experts_cpu(b, experts, weights, w.gate_up_packed, w.down_packed, expert_chunk_rows_);
  return experts_aten(w, b, experts, weights);
}

at::Tensor thinker::experts_aten(const layer& w, const at::Tensor& b, const at::Tensor& experts,
                                 const at::Tensor& weights) const {
  const std::int64_t n_tokens = b.size(0), top_k = config_.experts_per_token;
  const auto n_experts = static_cast<std::size_t>(config_.num_experts);
  // Group the (token, slot) pairs by expert: one matmul per active expert over all its tokens.
  const at::Tensor flat = experts.reshape({-1});
  const at::Tensor order = std::get<1>(at::sort(flat, c10::optional<bool>(true), 0, false));
  const at::Tensor token_of = at::floor_divide(order, top_k);
  const at::Tensor counts = at::bincount(flat, {}, config_.num_experts).to(at::kCPU);
  const at::Tensor sorted_weights = weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  const auto* count = counts.data_ptr<std::int64_t>();
  std::vector<std::int64_t> start(n_experts + 1, 0);
  std::vector<std::size_t> busy;  // active experts, most tokens first
  for (std::size_t e = 0; e < n_experts; ++e) {
    start[e + 1] = start[e] + count[e];
    if (count[e] > 0) busy.push_back(e);
  }
  std::stable_sort(busy.begin(), busy.end(),
                   [&](std::size_t x, std::size_t y) { return count[x] > count[y]; });

  // Each expert gathers its own rows and keeps its weighted output: no [N * top_k, hidden]
  // staging buffers (64 MB each at 2048 tokens, mapped afresh and page-faulted every layer).
  std::vector<at::Tensor> results(n_experts);
  const bool int8 = !w.gate_scale.empty();
  // An int8 weight is converted to the activations' dtype for its one matmul (exact: |q| <= 127
  // fits bf16's mantissa) and its fp32 per-channel scale applied to the output columns.
  auto expert_dense = [&](const at::Tensor& x, const std::vector<at::Tensor>& weights,
                          const std::vector<at::Tensor>& scales, std::size_t e) {
    return int8 ? dense(x, widen_int8(weights[e], x.scalar_type())).mul_(scales[e]) : dense(x, weights[e]);
  };
  auto run_expert = [&](std::size_t e) {
    const at::Tensor x = b.index_select(0, token_of.narrow(0, start[e], count[e]));
    at::Tensor h = expert_dense(x, w.gate, w.gate_scale, e);
    at::silu_(h).mul_(expert_dense(x, w.up, w.up_scale, e));
    results[e] = expert_dense(h, w.down, w.down_scale, e).mul_(sorted_weights.narrow(0, start[e], count[e]));
  };
  if (device_.is_cpu()) {
    // Whole experts per thread, largest first: inside a parallel region each matmul runs on one
    // thread, which beats splitting these few-row matmuls (weight packing and thread hand-offs
    // are paid per call). Threads take the next expert as they finish, so one held up by the
    // machine does not hold up the layer. Each row's arithmetic is the same either way.
    std::atomic<std::size_t> next{0};
    at::parallel_for(0, at::get_num_threads(), 1, [&](std::int64_t, std::int64_t) {
      for (std::size_t i = next++; i < busy.size(); i = next++) run_expert(busy[i]);
    });
  } else {
    for (const auto e : busy) run_expert(e);
  }

  // Summed in expert order, as transformers' per-expert index_add_ loop does.
  if (device_.is_cpu() && n_tokens > 0) return sum_in_expert_order(results, flat, order, start, n_tokens, top_k);
  at::Tensor out = at::zeros({n_tokens, b.size(1)}, b.options());
  for (std::size_t e = 0; e < n_experts; ++e) {
    if (count[e] > 0) out.index_add_(0, token_of.narrow(0, start[e], count[e]), results[e]);
  }
  return out;
}

}  // namespace baton::clef::detail
