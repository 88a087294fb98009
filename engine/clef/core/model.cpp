#include "engine/clef/core/model.hpp"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <optional>
#include <thread>

#include "engine/clef/core/joint_head.hpp"
#include "engine/clef/core/thinker.hpp"

namespace baton::clef {

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

// The options with every default decided: the compute dtype is the file's when none is asked for
// (bf16 stays bf16, so nothing is converted or copied; f16 files compute in f32), the score budget
// 4 MiB on the CPU (blocks that stay in cache and come from the allocator's free lists; 64 MiB
// blocks were mapped afresh and page-faulted for every chunk) and 1 GiB on a GPU.
model_options resolved(model_options options, const release& files, const at::Device& device) {
  if (!options.dtype) {
    const auto& v = files.thinker_tensor("thinker.model.layers.0.self_attn.q_proj.weight");
    options.dtype = v.type == dtype::bf16 ? compute_dtype::bf16 : compute_dtype::f32;
  }
  if (options.score_budget_bytes <= 0) options.score_budget_bytes = device.is_cuda() ? (1ll << 30) : (4ll << 20);
  return options;
}

class model_impl final : public model {
 public:
  model_impl(const std::filesystem::path& dir, const model_options& options)
      : files_(dir, options.head),
        device_(parse_device(options.device)),
        options_(resolved(options, files_, device_)),
        thinker_(files_, detail::scalar_type(*options_.dtype), device_, options_.score_budget_bytes) {
    const int threads = options.threads > 0
                            ? options.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(threads);
    if (options.head) {
      head_.emplace(files_, detail::scalar_type(options_.head_dtype), device_, options_.score_budget_bytes);
    }
  }

  const release& files() const noexcept override { return files_; }
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

  void trace_thinker(std::span<const std::int32_t> ids, const stage_observer& observe) override {
    c10::InferenceMode guard;
    const std::vector<std::int64_t> wide(ids.begin(), ids.end());
    thinker_.forward(detail::long_tensor(wide, device_), {static_cast<std::int64_t>(wide.size())}, &observe,
                     nullptr);
  }

  void set_profiling(bool on) noexcept override { profiling_ = on; }
  const forward_profile& last_profile() const noexcept override { return profile_; }

 private:
  std::vector<record_logits> run(std::span<const record_input> batch) {
    c10::InferenceMode guard;
    profile_ = {};
    forward_profile* profile = profiling_ ? &profile_ : nullptr;
    const auto start = std::chrono::steady_clock::now();

    std::vector<std::int64_t> ids, lengths;
    for (const auto& r : batch) {
      ids.insert(ids.end(), r.ids.begin(), r.ids.end());
      lengths.push_back(static_cast<std::int64_t>(r.ids.size()));
    }
    const at::Tensor id_tensor = detail::long_tensor(ids, device_);
    const at::Tensor hidden = thinker_.forward(id_tensor, lengths, nullptr, profile);

    std::vector<record_logits> out;
    out.reserve(batch.size());
    {
      detail::scoped_timer t(profile ? &profile_.head_ms : nullptr);
      std::int64_t offset = 0;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        out.push_back(head_->forward(hidden.narrow(0, offset, lengths[i]),
                                     id_tensor.narrow(0, offset, lengths[i]), batch[i].questions,
                                     thinker_));
        offset += lengths[i];
      }
    }
    profile_.tokens = static_cast<std::int64_t>(ids.size());
    profile_.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  release files_;
  at::Device device_;
  model_options options_;
  detail::thinker thinker_;
  std::optional<detail::joint_head> head_;
  bool profiling_ = false;
  forward_profile profile_;
};

}  // namespace

std::unique_ptr<model> model::load(const std::filesystem::path& dir, const model_options& options) {
  return std::make_unique<model_impl>(dir, options);
}

}  // namespace baton::clef
