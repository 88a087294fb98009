#include "adapters/cli/quantize_cli.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "adapters/cli/cli_args.hpp"
#include "adapters/cli/exit_codes.hpp"
#include "engine/clef/clef_engine.hpp"
#include "engine/clef/model/quantize.hpp"
#include "engine/clef/model/safetensors.hpp"

namespace baton {

namespace {

constexpr const char* quantize_help = R"(Usage: baton quantize (--int8 | --int4 [--group-size N]) SRC DST

Writes a copy of the Clef release SRC to DST whose expert weights (every
thinker.model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight) are quantized, and everything
else as it was: the other tensors, the joint head, the tokenizer and processor files. config.json
records the quantization, so `baton decide` and `baton serve` load DST like any release (its
fingerprint is its own). SRC is a release directory or ORG/NAME[@REV] in the Hugging Face cache
(`baton pull`). SRC is read, never written, and its tokenizer checked first as the engine checks
it; DST is written as DST.partial, checked by loading it, then renamed, so a DST that exists is
complete.

Options:
  --int8            int8 experts, one fp32 scale per output channel (symmetric): half of
                    bf16's memory
  --int4            int4 experts in GPTQ's layout (qweight, qzeros, scales, g_idx; config.json's
                    quant_method gptq), which other engines read too: a quarter of bf16's memory.
                    Round to nearest with zero points, each group's range clipped where that
                    reproduces its weights best
  --group-size N    inputs per int4 scale and zero point: 32, 64 or 128 (default 128)
  -h, --help        show this help

Exit status:
  0   DST was written
  64  usage error
  66  SRC cannot be read, is not a release, or is quantized already
  73  DST exists and is not an empty directory, or cannot be written
)";

}  // namespace

int quantize_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  // Two positional arguments, which the shared parser does not take.
  bool int8 = false, int4 = false;
  std::optional<std::int64_t> group_size;
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      out << quantize_help;
      return exit_ok;
    }
    if (a == "--int8") {
      int8 = true;
    } else if (a == "--int4") {
      int4 = true;
    } else if (a == "--group-size") {
      if (i + 1 >= args.size()) return usage_error(err, "--group-size needs a value", "quantize");
      const std::string_view v = args[++i];
      if (v != "32" && v != "64" && v != "128") {
        return usage_error(err, "--group-size must be 32, 64 or 128 (not " + std::string(v) + ")", "quantize");
      }
      group_size = std::stoll(std::string(v));
    } else if (a.size() > 1 && a[0] == '-') {
      return usage_error(err, "unknown option " + std::string(a), "quantize");
    } else {
      paths.emplace_back(a);
    }
  }
  if (int8 == int4) return usage_error(err, "one of --int8 and --int4 is required", "quantize");
  if (group_size && !int4) return usage_error(err, "--group-size is for --int4", "quantize");
  if (paths.size() != 2) return usage_error(err, "needs SRC and DST", "quantize");
  // SRC as every --model takes it: a directory, or ORG/NAME[@REV] in the Hugging Face cache.
  const auto resolved = model_dir_arg(paths[0], "quantize", err);
  if (!resolved) return exit_no_input;
  const std::filesystem::path src = *resolved, dst = paths[1];

  int reported = -1;  // the last tenth reported
  const auto progress = [&](std::string_view, std::uint64_t done, std::uint64_t total) {
    const int tenth = total == 0 ? 10 : static_cast<int>(done * 10 / total);
    if (tenth == reported) return;
    reported = tenth;
    err << "baton quantize: " << tenth * 10 << " %\n";
  };
  try {
    // The copy takes SRC's tokenizer as it is: one the engine would refuse is refused here, before
    // the weights are written.
    clef::check_release_tokenizer(src);
    if (int4) {
      clef::quantize_int4(src, dst, group_size.value_or(128), progress);
    } else {
      clef::quantize_int8(src, dst, progress);
    }
  } catch (const clef::load_error& e) {
    err << "baton quantize: " << e.what() << "\n";
    return exit_no_input;
  } catch (const std::exception& e) {
    err << "baton quantize: " << e.what() << "\n";
    return exit_cant_create;
  }
  out << dst.string() << (int4 ? ": int4 release written\n" : ": int8 release written\n");
  return exit_ok;
}

}  // namespace baton
