#include "engine/clef/model/audio_features.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace baton::clef {
namespace {

constexpr int frequency_bins = mel_window_samples / 2 + 1;  // onesided rfft of 400 samples

// The Slaney mel scale: linear below 1 kHz (mel = 3f/200), logarithmic above.
double hertz_to_mel(double hertz) {
  if (hertz < 1000.0) return 3.0 * hertz / 200.0;
  return 15.0 + std::log(hertz / 1000.0) * (27.0 / std::log(6.4));
}

double mel_to_hertz(double mel) {
  if (mel < 15.0) return 200.0 * mel / 3.0;
  return 1000.0 * std::exp(std::log(6.4) / 27.0 * (mel - 15.0));
}

// numpy.linspace: start + i * step, the last point exactly `stop`.
std::vector<double> linspace(double start, double stop, int count) {
  std::vector<double> out(static_cast<std::size_t>(count));
  const double step = (stop - start) / (count - 1);
  for (int i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = i * step + start;
  out.back() = stop;
  return out;
}

}  // namespace

// Computed in double in the operation order of transformers' mel_filter_bank, then rounded: equal
// to its float32 cast bit for bit.
std::vector<float> mel_filter_bank() {
  const auto fft_freqs = linspace(0.0, audio_sample_rate / 2, frequency_bins);
  auto filter_freqs = linspace(hertz_to_mel(0.0), hertz_to_mel(audio_sample_rate / 2.0), mel_bins + 2);
  for (double& f : filter_freqs) f = mel_to_hertz(f);
  std::vector<float> out(static_cast<std::size_t>(frequency_bins) * mel_bins);
  for (int bin = 0; bin < frequency_bins; ++bin) {
    for (int m = 0; m < mel_bins; ++m) {
      const double down = -(filter_freqs[m] - fft_freqs[bin]) / (filter_freqs[m + 1] - filter_freqs[m]);
      const double up = (filter_freqs[m + 2] - fft_freqs[bin]) / (filter_freqs[m + 2] - filter_freqs[m + 1]);
      const double area_norm = 2.0 / (filter_freqs[m + 2] - filter_freqs[m]);
      out[static_cast<std::size_t>(bin) * mel_bins + m] =
          static_cast<float>(std::max(0.0, std::min(down, up)) * area_norm);
    }
  }
  return out;
}

log_mel log_mel_features(std::span<const float> samples, std::size_t padded_samples) {
  const std::size_t total = std::max(samples.size(), padded_samples);
  at::Tensor wave = at::zeros({static_cast<std::int64_t>(total)}, at::kFloat);
  std::copy(samples.begin(), samples.end(), wave.data_ptr<float>());
  // float32 throughout, as the processor's torch path (the one it takes when torch is installed);
  // the numpy path computes in float64 and differs by up to ~5e-5.
  const at::Tensor window = at::hann_window(mel_window_samples, /*periodic=*/true, at::kFloat);
  const at::Tensor spectrum = at::stft(wave, mel_window_samples, mel_hop_samples, mel_window_samples,
                                       window, /*center=*/true, "reflect", /*normalized=*/false,
                                       /*onesided=*/true, /*return_complex=*/true);
  const std::int64_t frames = spectrum.size(1) - 1;
  const at::Tensor power = spectrum.narrow(1, 0, frames).abs().pow(2);
  // The same for every call: built once (thread-safe static initialisation), read-only after.
  static const std::vector<float> bank = mel_filter_bank();
  const at::Tensor filters =
      at::from_blob(const_cast<float*>(bank.data()), {frequency_bins, mel_bins}, at::TensorOptions(at::kFloat));
  at::Tensor mel = at::matmul(filters.t(), power).clamp_min(1e-10).log10();
  mel = at::maximum(mel, mel.max() - 8.0);
  mel = ((mel + 4.0) / 4.0).contiguous();

  log_mel out;
  out.frames = frames;
  out.values.assign(mel.data_ptr<float>(), mel.data_ptr<float>() + mel.numel());
  const auto marked = static_cast<std::int64_t>((samples.size() + mel_hop_samples - 1) / mel_hop_samples);
  out.frame_mask.assign(static_cast<std::size_t>(frames), 0);
  std::fill_n(out.frame_mask.begin(), std::min(marked, frames), 1);
  return out;
}

}  // namespace baton::clef
