#include "engine/clef/model/expert_plan.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/quantized_weights.hpp"
#include "engine/clef/model/tensors.hpp"

namespace baton::clef::detail {

namespace {

const char* expert_library_name(expert_library library) {
  switch (library) {
    case expert_library::onednn: return "oneDNN, packed";
    case expert_library::xsmm: return "libxsmm, packed";
    case expert_library::blas: return "the BLAS";
    case expert_library::measured: break;
  }
  return "the library timed at load";
}

// Whether the CPU's float experts go through experts_cpu (packed_linear): fp32 and bf16 ones with
// oneDNN, and int8 ones computed in fp32, on libxsmm's kernels, where choose_matmuls times them
// against ATen's path (it runs where the process has the BLAS). ATen widens int8 ones in fp32 per
// matmul otherwise, and where the BLAS is asked for (int8 ones in bf16 are read in place).
bool packs_experts(bool int8, at::ScalarType type, bool onednn, bool grouped, expert_library asked) {
  if (!onednn || grouped) return false;
  if (!int8) return true;
  return type == at::kFloat && asked != expert_library::blas && packed_linear::xsmm_available() &&
         packed_linear::blas_available();
}

// `bytes` rounded up to whole 4 KiB pages: each packed expert weight starts on its own page.
std::int64_t page_aligned(std::int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

// release_weight_pages for expert e's three weights in the layer at `prefix`.
void release_expert_pages(const release& files, const std::string& prefix, std::int64_t e) {
  const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
  for (const char* name : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) {
    release_weight_pages(files, x + name);
  }
}

// The kernel that in-place experts of `form` run on in a model of `type`, and its path (bf16 x:
// AVX-512 BF16 where the CPU has it).
std::string in_place_kernel(weight_form form, at::ScalarType type) {
  if (form == weight_form::fp8 || form == weight_form::int8) {
    return std::string(form == weight_form::fp8 ? "FP8" : "int8") + " experts on baton's byte kernel (" +
           byte_gemm_isa_name(type == at::kBFloat16 ? byte_gemm_best_isa() : byte_gemm_isa::avx2) + ")";
  }
  return std::string("int4 experts on baton's int4 kernel (") +
         int4_isa_name(type == at::kBFloat16 ? int4_best_isa_bf16() : int4_best_isa()) + ")";
}

// The calibration batch's tokens.
constexpr std::int64_t calibration_tokens = 1024;

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

expert_plan::expert_plan(const release& files, at::ScalarType type, at::Device device, bool grouped_experts,
                         expert_library asked, std::int64_t packing_budget_bytes)
    : config_(files.text()),
      type_(type),
      device_(device),
      // The CPU has its own fused kernels (cpu_kernels.hpp). _grouped_mm wants rows of 16-byte
      // multiples, and (2.8) a Hopper-class GPU: probed.
      native_grouped_(device.is_cuda() && type == at::kBFloat16 && config_.hidden_size % 8 == 0 &&
                      config_.moe_intermediate_size % 8 == 0 && grouped_mm_runs(device)),
      grouped_(native_grouped_ || grouped_experts),
      onednn_(device.is_cpu() && onednn_runs(type)),
      int8_(files.int8_experts()),
      // int4 or FP8 experts on the CPU: read in place by baton's kernels, whatever else is there;
      // on a GPU, dequantized at load for ATen's or the grouped path. int8 ones in bf16 likewise
      // (ATen would widen a whole expert per matmul: 1.5-2.1x bf16's MoE time); in fp32 they are
      // libxsmm's or ATen's, as timed.
      in_place_(!device.is_cpu()                                   ? weight_form::plain
                : files.int4_experts()                              ? weight_form::int4
                : files.fp8_experts()                               ? weight_form::fp8
                : int8_ && type == at::kBFloat16 && !grouped_       ? weight_form::int8
                                                                    : weight_form::plain),
      packed_(in_place_ != weight_form::plain || packs_experts(int8_, type, onednn_, grouped_, asked)),
      asked_(asked) {
  if (in_place_ != weight_form::plain) {
    if (asked != expert_library::measured) {
      throw std::invalid_argument(std::string("clef model: experts on ") + expert_library_name(asked) +
                                  " were asked for, but this release's experts are " +
                                  (in_place_ == weight_form::int4 ? "int4" : in_place_ == weight_form::fp8 ? "FP8" : "int8 in bf16") +
                                  ", which baton's own kernel runs");
    }
    matmul_choice_ = std::string(type_ == at::kFloat ? "fp32 " : "bf16 ") + in_place_kernel(in_place_, type_);
    if (in_place_ == weight_form::int8) {
      // Copied, byte for byte, into memory on huge pages where that fits: read from the mapping's 4
      // KiB pages the kernel's conversion stalled, 1.26-1.35x bf16's MoE time at 2,048 tokens
      // against 1.01x from the copy (docs/performance.md).
      const std::int64_t copy = int8_copy_bytes();
      int8_copy_ = packing_budget_bytes == 0 || copy <= packing_budget_bytes;
      matmul_choice_ += int8_copy_ ? ", copied into huge pages"
                                   : ", read from the mapping (a copy, " + std::to_string(copy >> 20) +
                                         " MiB, would not fit in the " + std::to_string(packing_budget_bytes >> 20) +
                                         " MiB the load leaves it)";
    }
  } else if (asked != expert_library::measured) {
    std::string why;
    // int8 ones on the BLAS: widened per matmul by ATen, whose fp32 matmul is the BLAS's.
    const bool int8_on_blas = int8_ && asked == expert_library::blas && onednn_ && !grouped_ &&
                              type_ == at::kFloat && packed_linear::blas_available();
    if (int8_ && asked == expert_library::onednn) {
      why = "it packs fp32 and bf16 weights, not int8 ones";
    } else if (!packed_) {
      if (!int8_on_blas) {
        why = "this model's experts are not packed on the CPU (int8 experts without libxsmm, the grouped "
              "path, a GPU or no oneDNN)";
      }
    } else if (asked != expert_library::onednn && type_ != at::kFloat) {
      why = "it multiplies fp32 only";
    } else if (asked == expert_library::blas && !packed_linear::blas_available()) {
      why = "the process has no cblas_sgemm";
    } else if (asked == expert_library::xsmm && !packed_linear::xsmm_available()) {
      why = "this build or this CPU has no libxsmm kernels";
    }
    if (!why.empty()) {
      throw std::invalid_argument(std::string("clef model: experts on ") + expert_library_name(asked) +
                                  " were asked for, but " + why);
    }
    library_ = asked;
  } else if (const std::int64_t copy = packed_ && in_place_ == weight_form::plain ? packed_copy_bytes() : 0;
             packing_budget_bytes > 0 && copy > packing_budget_bytes) {
    // A packed copy replaces mapped pages the kernel could evict with memory it cannot.
    const auto text = [](std::int64_t bytes) {  // rounded up, in GiB from 1 GiB on
      const int shift = bytes >= (1ll << 30) ? 30 : 20;
      return std::to_string((bytes + (1ll << shift) - 1) >> shift) + (shift == 30 ? " GiB" : " MiB");
    };
    no_room_ = "a packed copy (" + text(copy) + ") would not fit in the " + text(packing_budget_bytes) +
               " the load leaves it";
    library_ = expert_library::blas;
    // In fp32 the BLAS multiplies them as they are; otherwise ATen's path, int8 ones widened per matmul.
    if (type_ != at::kFloat || int8_ || !packed_linear::blas_available()) packed_ = false;
    // Said here where choose_matmuls will not say it (bf16, no BLAS); it replaces this otherwise.
    if (!packed_) {
      matmul_choice_ = std::string(type_ == at::kFloat ? "fp32" : "bf16") + (int8_ ? " int8" : "") +
                       " experts through ATen (" + no_room_ + ")";
    }
  }
  // fp32 on a CPU with oneDNN: the experts (fp32 ones; int8 ones, libxsmm's per-block widening
  // against ATen's per matmul; not the grouped path's stacks; unless a library was asked for) and
  // the attention projections go to the fastest library.
  if (onednn_ && type_ == at::kFloat && packed_linear::blas_available() && config_.num_layers > 0) {
    choose_matmuls(files);
  }
}

bool expert_plan::packed_projections() const noexcept {
  return onednn_ && type_ == at::kFloat && !blas_projections_;
}

// Random activations, routed unevenly as trained routers are (random activations through the
// router spread evenly): each token's experts drawn without replacement with odds 1, 1/2, 1/3, …,
// so the busiest expert gets ~10 % of the rows, as on a transformers-initialised release.
const expert_plan::calibration_batch& expert_plan::calibration() {
  if (calibration_) return *calibration_;
  const std::int64_t tokens = calibration_tokens, top_k = config_.experts_per_token;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(20261204);  // the global one untouched
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  calibration_batch batch;
  batch.b = at::randn({tokens, config_.hidden_size}, generator, f32).to(type_);
  const at::Tensor odds = at::reciprocal(at::arange(1, config_.num_experts + 1, f32)).expand({tokens, config_.num_experts});
  batch.experts = at::multinomial(odds, top_k, /*replacement=*/false, generator);
  batch.weights = at::full({tokens, top_k}, 1.0 / static_cast<double>(top_k), f32).to(type_);
  batch.busiest = at::bincount(batch.experts.reshape({-1}), {}, config_.num_experts).max().item<std::int64_t>();
  return calibration_.emplace(std::move(batch));
}

std::vector<expert_weights> expert_plan::load_experts(const release& files) {
  std::vector<expert_weights> layers(static_cast<std::size_t>(config_.num_layers));
  staging buffer;
  if (grouped_) {
    const std::int64_t experts = config_.num_experts, inter = config_.moe_intermediate_size,
                       hidden = config_.hidden_size;
    // Pageable: a pinned buffer would stay in libtorch's host cache (1.2 GB) for the process's life.
    const auto host = at::TensorOptions().dtype(int8_ ? at::kChar : type_);
    buffer.gate_up = at::empty({experts, 2 * inter, hidden}, host);
    buffer.down = at::empty({experts, hidden, inter}, host);
    if (int8_) {
      buffer.gate_up_scale = at::empty({experts, 2 * inter}, host.dtype(at::kFloat));
      buffer.down_scale = at::empty({experts, hidden}, host.dtype(at::kFloat));
    }
  }
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string p = "thinker.model.layers." + std::to_string(l) + ".";
    if (l == 0 && layer0_) {  // made already, as choose_matmuls timed them
      layers[l] = std::move(*layer0_);
      layer0_.reset();
    } else if (grouped_) {
      layers[l] = stack_experts(files, p, buffer);
    } else if (!packed_) {
      layers[l] = aten_experts(files, p);
    } else {
      layers[l] = pack_experts(files, p, library_);
    }
  }
  if (packed_ && !layers.empty()) calibrate_experts(layers.front());
  calibration_.reset();  // every timing done
  return layers;
}

expert_weights expert_plan::pack_experts(const release& files, const std::string& prefix,
                                         expert_library library) const {
  const std::int64_t experts = config_.num_experts;
  if (in_place_ != weight_form::plain) return in_place_experts(files, prefix);
  const bool xsmm = library == expert_library::xsmm, blas = library == expert_library::blas, int8 = int8_;
  if (int8 && !xsmm) throw std::logic_error("clef model: int8 experts are packed for libxsmm only");
  const auto [gate_up_bytes, down_bytes] = blas ? std::pair<std::int64_t, std::int64_t>() : packed_expert_bytes(library);
  // One arena per layer (none over the BLAS); 4 KiB alignment keeps each packed weight on its own pages.
  const std::int64_t per_expert = page_aligned(gate_up_bytes) + page_aligned(down_bytes);
  const at::Tensor arena = blas ? at::Tensor() : packed_linear::arena(per_expert * experts);
  expert_weights y;
  y.gate_up_packed.resize(static_cast<std::size_t>(experts));
  y.down_packed.resize(static_cast<std::size_t>(experts));
  // Experts packed side by side; the mapped weights' pages are handed back once packed.
  at::parallel_for(0, experts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) {
      const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
      auto w = [&](const char* name) { return linear_weight(files, x + name, type_, device_); };
      auto raw = [&](const char* name) { return view_tensor(files.thinker_tensor(x + name)); };
      const auto i = static_cast<std::size_t>(e);
      if (blas) {  // multiplied as they are: the BLAS reads the mapping (an fp32 release's), which stays
        auto rows = [&](const char* name) { return w(name).contiguous(); };
        y.gate_up_packed[i] = packed_linear::over_blas({rows("gate_proj.weight"), rows("up_proj.weight")});
        y.down_packed[i] = packed_linear::over_blas({rows("down_proj.weight")});
        continue;
      }
      const at::Tensor slot = arena.narrow(0, e * per_expert, per_expert);
      const at::Tensor gate_up_slot = slot.narrow(0, 0, gate_up_bytes),
                       down_slot = slot.narrow(0, page_aligned(gate_up_bytes), down_bytes);
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
  y.packed_bytes = per_expert * experts;
  return y;
}

namespace {

// One expert's place in the int8 copy (int8_copy_): its gate and up, then its down, each from a
// page of its own.
struct int8_copy_layout {
  std::int64_t gate_up, down, per_expert;
};
int8_copy_layout int8_layout(const text_config& c) {
  const std::int64_t gate_up = 2 * c.moe_intermediate_size * c.hidden_size, down = c.hidden_size * c.moe_intermediate_size;
  return {gate_up, down, page_aligned(gate_up) + page_aligned(down)};
}

}  // namespace

std::int64_t expert_plan::int8_copy_bytes() const {
  return config_.num_layers * config_.num_experts * int8_layout(config_).per_expert;
}

expert_weights expert_plan::in_place_experts(const release& files, const std::string& prefix) const {
  const std::int64_t experts = config_.num_experts;
  expert_weights y;
  // int8 ones copied (int8_copy_): one arena per layer, each expert's gate and up, and down, on their own pages.
  const int8_copy_layout copy = int8_layout(config_);
  const at::Tensor arena = int8_copy_ ? packed_linear::arena(copy.per_expert * experts) : at::Tensor();
  y.gate_up_packed.resize(static_cast<std::size_t>(experts));
  y.down_packed.resize(static_cast<std::size_t>(experts));
  std::atomic<std::int64_t> reordered{0};
  at::parallel_for(0, experts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t e = begin; e < end; ++e) {
      const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
      // A weight of a mixed release left float is multiplied as the float path would.
      auto linear = [&](std::vector<const char*> names) {
        bool kept = true;
        for (const char* n : names) kept = kept && files.form(x + n) == in_place_;
        if (kept && in_place_ == weight_form::int4) {
          std::vector<int4_part> parts;
          for (const char* n : names) parts.push_back(int4_weight(files, x + n));
          return packed_linear::for_int4(std::move(parts), type_);
        }
        if (kept && in_place_ == weight_form::int8) {
          std::vector<int8_matrix> parts;
          for (const char* n : names) parts.push_back(int8_weight(files, x + n));
          if (!arena.defined()) return packed_linear::for_int8(std::move(parts), type_);
          const bool down = names.size() == 1;
          at::Tensor slot = arena.narrow(0, e * copy.per_expert + (down ? page_aligned(copy.gate_up) : 0),
                                         down ? copy.down : copy.gate_up);
          auto* to = static_cast<std::int8_t*>(slot.data_ptr());
          for (std::size_t i = 0; i < parts.size(); ++i) {
            const std::int64_t bytes = parts[i].out * parts[i].in;
            std::memcpy(to, parts[i].weight, static_cast<std::size_t>(bytes));
            release_pages(files.thinker_tensor(x + names[i]));  // the scales stay mapped
            parts[i].weight = to;
            to += bytes;
          }
          return packed_linear::for_int8(std::move(parts), type_, std::move(slot));
        }
        if (kept) {
          std::vector<fp8_matrix> parts;
          for (const char* n : names) parts.push_back(fp8_weight(files, x + n));
          return packed_linear::for_fp8(std::move(parts), type_);
        }
        std::vector<at::Tensor> parts;
        for (const char* n : names) parts.push_back(linear_weight(files, x + n, type_, device_).contiguous());
        if (onednn_) return packed_linear(at::cat(parts));
        if (type_ == at::kFloat && packed_linear::blas_available()) return packed_linear::over_blas(std::move(parts));
        throw load_error(files.dir().string() + ": " + x + "* are float in a quantized release, which in bf16 needs "
                         "oneDNN's bf16 kernels (this CPU has none): load it in f32");
      };
      const auto i = static_cast<std::size_t>(e);
      y.gate_up_packed[i] = linear({"gate_proj.weight", "up_proj.weight"});
      y.down_packed[i] = linear({"down_proj.weight"});
      reordered += y.gate_up_packed[i].bytes() + y.down_packed[i].bytes();
    }
  });
  y.packed_bytes = arena.defined() ? arena.numel() : reordered.load();
  return y;
}

std::pair<std::int64_t, std::int64_t> expert_plan::packed_expert_bytes(expert_library library) const {
  const std::int64_t inter = config_.moe_intermediate_size, hidden = config_.hidden_size;
  auto bytes = [&](std::int64_t out, std::int64_t in) {
    return int8_                             ? packed_linear::xsmm_int8_bytes_for(out, in)
           : library == expert_library::xsmm ? packed_linear::xsmm_bytes_for(out, in)
                                             : packed_linear::bytes_for(out, in, type_);
  };
  return {bytes(2 * inter, hidden), bytes(hidden, inter)};
}

std::int64_t expert_plan::packed_copy_bytes() const {
  // The smallest copy: libxsmm's layout in fp32 (and int8), oneDNN's in bf16.
  const auto [gate_up, down] =
      packed_expert_bytes(type_ == at::kFloat ? expert_library::xsmm : expert_library::onednn);
  return config_.num_layers * config_.num_experts * (page_aligned(gate_up) + page_aligned(down));
}

expert_weights expert_plan::aten_experts(const release& files, const std::string& prefix) const {
  expert_weights y;
  for (std::int64_t e = 0; e < config_.num_experts; ++e) {
    const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
    // int8 weights stay int8 (a view of the mapping on the CPU) and are converted per matmul;
    // the scales stay fp32, so the output is scaled with one rounding.
    for (auto [list, scales, name] : {std::tuple{&y.gate, &y.gate_scale, "gate_proj."},
                                      std::tuple{&y.up, &y.up_scale, "up_proj."},
                                      std::tuple{&y.down, &y.down_scale, "down_proj."}}) {
      list->push_back(int8_ ? mapped_tensor(files.thinker_tensor(x + name + "weight"), device_) : linear_weight(files, x + name + "weight", type_, device_));
      if (int8_) scales->push_back(mapped_tensor(files.thinker_tensor(x + name + "weight_scale"), device_));
    }
  }
  return y;
}

expert_weights expert_plan::stack_experts(const release& files, const std::string& prefix, staging& buffer) const {
  const std::int64_t inter = config_.moe_intermediate_size;
  auto put = [&](const at::Tensor& into, const std::string& name) {
    // Converted here when the file's dtype differs; int4 and FP8 ones dequantized.
    const weight_form form = files.form(name);
    into.copy_(form == weight_form::int4 || form == weight_form::fp8 ? linear_weight(files, name, at::kFloat, at::kCPU)
                                                                      : view_tensor(files.thinker_tensor(name)));
  };
  for (std::int64_t e = 0; e < config_.num_experts; ++e) {
    const std::string x = prefix + "mlp.experts." + std::to_string(e) + ".";
    put(buffer.gate_up[e].narrow(0, 0, inter), x + "gate_proj.weight");
    put(buffer.gate_up[e].narrow(0, inter, inter), x + "up_proj.weight");
    put(buffer.down[e], x + "down_proj.weight");
    if (buffer.gate_up_scale.defined()) {
      put(buffer.gate_up_scale[e].narrow(0, 0, inter), x + "gate_proj.weight_scale");
      put(buffer.gate_up_scale[e].narrow(0, inter, inter), x + "up_proj.weight_scale");
      put(buffer.down_scale[e], x + "down_proj.weight_scale");
    }
  }
  // Blocking copies (a copy on the CPU too): the buffer is free for the next layer on return.
  auto copy = [&](const at::Tensor& t) { return t.to(device_, /*non_blocking=*/false, /*copy=*/true); };
  expert_weights y;
  y.gate_up_all = copy(buffer.gate_up).transpose(1, 2);
  y.down_all = copy(buffer.down).transpose(1, 2);
  if (buffer.gate_up_scale.defined()) {
    y.gate_up_scale_all = copy(buffer.gate_up_scale);
    y.down_scale_all = copy(buffer.down_scale);
  }
  return y;
}

void expert_plan::choose_matmuls(const release& files) {
  static std::mutex chosen_mutex;
  static std::map<
      std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, bool, bool, int, int, std::string>,
      std::tuple<expert_library, bool, bool, std::string>>
      chosen;
  const bool int8 = int8_;
  const auto key = std::make_tuple(config_.hidden_size, config_.num_heads * config_.head_dim,
                                   config_.moe_intermediate_size, config_.num_experts, config_.experts_per_token,
                                   at::get_num_threads(), packed_, int8, static_cast<int>(in_place_), static_cast<int>(asked_), no_room_);
  {
    const std::lock_guard lock(chosen_mutex);
    if (const auto it = chosen.find(key); it != chosen.end()) {
      std::tie(library_, packed_, blas_projections_, matmul_choice_) = it->second;
      matmul_choice_ += ", kept from an earlier load in this process";
      return;
    }
  }
  const std::string p = "thinker.model.layers.0.";
  const calibration_batch& batch = calibration();
  const bool in_place = in_place_ != weight_form::plain;
  matmul_choice_ = in_place ? matmul_choice_ + ", " : "fp32 ";  // in-place experts: no choice, said in the constructor
  const std::string experts_on = int8 ? "int8 experts on " : "experts on ";
  if (!in_place && (asked_ != expert_library::measured || !no_room_.empty()) && (packed_ || int8)) {
    matmul_choice_ += experts_on + expert_library_name(library_) + " (" +
                      (no_room_.empty() ? std::string("asked for") : no_room_) + "), ";
  } else if (!in_place && packed_) {
    // Every candidate made first, then timed in turn. Schedules aside (calibrate_experts picks
    // among them afterwards): whole experts per work item. int8 experts: widened per matmul by
    // ATen (onto the BLAS) or per block of outputs on libxsmm.
    struct candidate {
      expert_library library;
      const char* name;
      expert_weights y;
    };
    std::vector<candidate> candidates;
    candidates.reserve(3);
    if (int8) {
      candidates.push_back({expert_library::blas, "the BLAS, widened per matmul by ATen ", aten_experts(files, p)});
      candidates.push_back({expert_library::xsmm, "libxsmm packed, widened per block ", {}});
    } else {
      candidates.push_back({expert_library::blas, "BLAS ", pack_experts(files, p, expert_library::blas)});
      candidates.push_back({expert_library::onednn, "oneDNN packed ", {}});
      if (packed_linear::xsmm_available()) candidates.push_back({expert_library::xsmm, "libxsmm packed ", {}});
    }
    std::string dropped;
    for (auto c = candidates.begin(); c != candidates.end();) {
      try {
        if (c->y.gate_up_packed.empty() && c->y.gate.empty()) c->y = pack_experts(files, p, c->library);
        ++c;
      } catch (const std::runtime_error& e) {  // libxsmm made no kernel for this shape: not a candidate
        dropped += std::string(", ") + c->name + "not run: " + e.what();
        c = candidates.erase(c);
      }
    }
    std::vector<std::function<void()>> runs;
    for (const auto& c : candidates) {
      runs.emplace_back([&batch, &y = c.y] { (void)run_experts(y, batch.b, batch.experts, batch.weights, 0); });
    }
    const std::vector<double> ms = best_ms_in_turn(3, runs);
    const auto pick = static_cast<std::size_t>(std::min_element(ms.begin(), ms.end()) - ms.begin());
    candidate& winner = candidates[pick];
    library_ = winner.library;
    if (int8 && library_ == expert_library::blas) packed_ = false;  // ATen's path: the int8 weights as they are
    if (library_ != expert_library::blas) {
      // Packed: the BLAS's timing read the mapped weights again after packing had handed them back.
      // Over the BLAS, or through ATen, the winner multiplies the mapping: its pages stay.
      for (std::int64_t e = 0; e < config_.num_experts; ++e) release_expert_pages(files, p, e);
    }
    layer0_ = std::move(winner.y);  // whatever its form: load_experts does not make layer 0 again
    matmul_choice_ += experts_on + expert_library_name(library_) + " (layer 0, 1024 tokens, best of 3 in turn: ";
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      matmul_choice_ += std::string(i == 0 ? "" : ", ") + candidates[i].name + ms_text(ms[i]);
    }
    matmul_choice_ += dropped + "), ";
  }
  const at::Tensor q = linear_weight(files, p + "self_attn.q_proj.weight", type_, device_);
  const at::Tensor x = batch.b;
  packed_linear q_packed(q);
  const std::vector<double> q_ms = best_ms_in_turn(3, {[&] { (void)dense(x, q); }, [&] { (void)q_packed.parallel(x); }});
  const double q_blas = q_ms[0], q_onednn = q_ms[1];
  blas_projections_ = q_blas < q_onednn;
  if (!blas_projections_) layer0_q_ = std::move(q_packed);  // the thinker packs it no second time
  matmul_choice_ += std::string("projections on ") + (blas_projections_ ? "the BLAS" : "oneDNN, packed") +
                    " (q_proj: BLAS " + ms_text(q_blas) + ", oneDNN packed " + ms_text(q_onednn) + ")";
  const std::lock_guard lock(chosen_mutex);
  chosen.emplace(key, std::make_tuple(library_, packed_, blas_projections_, matmul_choice_));
}

void expert_plan::calibrate_experts(const expert_weights& layer0) {
  prepare_experts_cpu();  // libtorch's bf16 silu asked now, not in the first forward
  const std::int64_t tokens = calibration_tokens, top_k = config_.experts_per_token;
  if (at::get_num_threads() == 1) {  // every schedule is the same work on one thread
    expert_schedule_ = "whole experts per work item on 1 thread";
    return;
  }
  // Measured once per process for a shape, dtype and thread count: a model loaded again (a
  // reload, a second engine on the same release) keeps the earlier choice.
  static std::mutex measured_mutex;
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int, bool, int, int>,
                  std::pair<std::int64_t, std::string>>
      measured;
  const auto key = std::make_tuple(config_.hidden_size, config_.moe_intermediate_size, config_.num_experts, top_k,
                                   static_cast<int>(type_), int8_, static_cast<int>(in_place_), at::get_num_threads());
  {
    const std::lock_guard lock(measured_mutex);
    if (const auto it = measured.find(key); it != measured.end()) {
      chunk_rows_ = it->second.first;
      expert_schedule_ = it->second.second + ", kept from an earlier load in this process";
      return;
    }
  }
  const calibration_batch& batch = calibration();
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
      runs.emplace_back([&, chunk] {
        (void)experts_cpu(b, experts, weights, layer0.gate_up_packed, layer0.down_packed, chunk);
      });
    }
    best = best_ms_in_turn(3, runs);
  }
  const auto pick = static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin());
  chunk_rows_ = candidates[pick];
  auto name = [](std::int64_t chunk) {
    return chunk == 0 ? std::string("whole experts") : std::to_string(chunk) + "-row chunks";
  };
  expert_schedule_ = name(chunk_rows_) + " per work item on " + std::to_string(at::get_num_threads()) + " threads";
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
  measured.emplace(key, std::make_pair(chunk_rows_, expert_schedule_));
}

}  // namespace baton::clef::detail
