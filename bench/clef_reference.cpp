// The reference records on any device: loads a release, runs every text record of an
// expected.jsonl (the reference's input ids, spans and float32 logits, as
// tests/data/vectors/clef-omni-tiny has them) through the model on --device, and compares the
// logits. Needs only libtorch and engine/clef/model, so it builds standalone against a CUDA
// libtorch (cmake -S engine/clef/model) and checks a GPU build without the rest of baton.
//
//   clef_reference --release DIR --expected FILE [--device cpu|cuda[:N]] [--dtype f32|bf16]
//                  [--tolerance 1e-4]
//
// Prints one line per record (its largest |Δlogit|) and exits 0 when every record is within the
// tolerance, one at a time and all in one batch; 1 when one is not (a NaN never is); 2 on bad
// arguments or input. The ids are the reference's: that baton's encoder gives the same ids is
// checked on the CPU (tests/engine/clef_engine_test.cpp), and ids do not depend on the device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/clef/model/model.hpp"

namespace {

using namespace baton::clef;
using nlohmann::json;

struct reference_record {
  std::string id;
  std::vector<std::int32_t> ids;
  std::vector<question_layout> questions;
  std::vector<std::vector<float>> logits;
};

token_span span_of(const json& pair) {
  return token_span{pair.at(0).get<std::int32_t>(), pair.at(1).get<std::int32_t>()};
}

// The reference's accepted records without media (the towers need the media preprocessing,
// which lives outside engine/clef/model).
std::vector<reference_record> read_records(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file.string() + ": cannot read");
  std::vector<reference_record> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json r = json::parse(line);
    if (!r.value("ok", false) || r.contains("media")) continue;
    reference_record rec;
    rec.id = r.at("id").get<std::string>();
    rec.ids = r.at("input_ids").get<std::vector<std::int32_t>>();
    for (const json& q : r.at("questions")) {
      question_layout layout;
      layout.type = q.at("type").get<std::uint8_t>();
      layout.question = span_of(q.at("question_span"));
      for (const json& o : q.at("option_spans")) layout.options.push_back(span_of(o));
      rec.questions.push_back(std::move(layout));
      rec.logits.push_back(q.at("logits").get<std::vector<float>>());
    }
    out.push_back(std::move(rec));
  }
  return out;
}

double max_difference(const record_logits& got, const reference_record& want) {
  if (got.size() != want.logits.size()) return INFINITY;
  double worst = 0;
  for (std::size_t q = 0; q < got.size(); ++q) {
    if (got[q].size() != want.logits[q].size()) return INFINITY;
    for (std::size_t o = 0; o < got[q].size(); ++o) {
      const double d = std::abs(static_cast<double>(got[q][o]) - want.logits[q][o]);
      if (std::isnan(d)) return INFINITY;  // a NaN logit never passes
      worst = std::max(worst, d);
    }
  }
  return worst;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "clef_reference: %s\nusage: clef_reference --release DIR --expected FILE "
               "[--device cpu|cuda[:N]] [--dtype f32|bf16] [--tolerance 1e-4]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path release, expected;
  model_options options;
  options.dtype = compute_dtype::f32;
  double tolerance = 1e-4;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (i + 1 >= argc) return usage((key + " needs a value").c_str());
    const std::string value = argv[++i];
    if (key == "--release") {
      release = value;
    } else if (key == "--expected") {
      expected = value;
    } else if (key == "--device") {
      options.device = value;
    } else if (key == "--dtype") {
      compute_dtype d;
      if (!parse_compute_dtype(value, d)) return usage("--dtype must be f32 or bf16");
      options.dtype = d;
      options.head_dtype = d;
    } else if (key == "--tolerance") {
      char* end = nullptr;
      tolerance = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(tolerance >= 0)) return usage("--tolerance must be a number >= 0");
    } else {
      return usage(("unknown option " + key).c_str());
    }
  }
  if (release.empty() || expected.empty()) return usage("--release and --expected are required");

  std::vector<reference_record> records;
  std::unique_ptr<model> m;
  try {
    records = read_records(expected);
    m = model::load(release, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clef_reference: %s\n", e.what());
    return 2;
  }
  if (records.empty()) return usage("no text records in the expected file");

  std::vector<record_input> batch;
  for (const reference_record& r : records) batch.push_back({r.ids, r.questions, nullptr});
  double worst = 0;
  try {
    const std::vector<record_logits> together = m->forward(batch);
    for (std::size_t i = 0; i < records.size(); ++i) {
      const double alone = max_difference(m->forward(std::span(&batch[i], 1)).at(0), records[i]);
      const double batched = max_difference(together.at(i), records[i]);
      std::printf("%-24s %5zu tokens  max |dlogit| alone %.3g, in the batch %.3g\n", records[i].id.c_str(),
                  records[i].ids.size(), alone, batched);
      worst = std::max({worst, alone, batched});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clef_reference: forward on %s failed: %s\n", options.device.c_str(), e.what());
    return 2;
  }
  const bool ok = worst <= tolerance;
  std::printf("%zu records on %s: max |dlogit| %.3g, tolerance %.3g: %s\n", records.size(), options.device.c_str(),
              worst, tolerance, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
