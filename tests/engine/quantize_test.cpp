// `quantize_int8` on the tiny Clef release (tests/data/vectors/clef-omni-tiny, fp32, 8 experts
// top-2; read, never written): the format on disk, the engine's answers against fp32, the
// refusals, and the loader's checks of half-quantized copies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/answers.hpp"
#include "engine/clef/clef_engine.hpp"
#include "engine/clef/model/cpu_kernels.hpp"
#include "engine/clef/model/packed_linear.hpp"
#include "engine/clef/model/quantize.hpp"
#include "engine/clef/model/tensors.hpp"
#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace baton::clef {
namespace {

namespace fs = std::filesystem;

fs::path tiny_dir() { return test::data_dir() / "vectors/clef-omni-tiny"; }
fs::path tiny_release() { return tiny_dir() / "release"; }

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(test::read_file(p)); }

void write_json(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(2); }

// One small safetensors file of F32 / I8 tensors filled with zeros.
void write_safetensors(const fs::path& p,
                       const std::vector<std::tuple<std::string, std::string, std::vector<std::int64_t>>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, type, shape] : tensors) {
    std::uint64_t bytes = type == "I8" ? 1 : 4;
    for (const auto d : shape) bytes *= static_cast<std::uint64_t>(d);
    header[name] = {{"dtype", type}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  const std::string text = header.dump();
  const std::uint64_t length = text.size();
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text << std::string(offset, '\0');
}

std::string load_message(const fs::path& dir) {
  try {
    const release r(dir);
  } catch (const load_error& e) {
    return e.what();
  }
  return "loaded";
}

// Bytes of every layer's q, k, v and o packed for oneDNN in fp32 (where it wins them at load).
std::int64_t packed_projection_bytes(const text_config& c) {
  using detail::packed_linear;
  const std::int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, h = c.hidden_size;
  return c.num_layers * (packed_linear::bytes_for(q, h, at::kFloat) + 2 * packed_linear::bytes_for(kv, h, at::kFloat) +
                         packed_linear::bytes_for(h, q, at::kFloat));
}

class quantize_int8_test : public ::testing::Test {
 protected:
  // The model's final hidden states for `ids` (its trace's "final_hidden").
  static std::vector<float> final_hidden_of(model& m, const std::vector<std::int32_t>& ids) {
    std::vector<float> out;
    m.trace(ids, nullptr, [&](std::string_view stage, std::span<const float> v, std::int64_t) {
      if (stage == "final_hidden") out.assign(v.begin(), v.end());
    });
    return out;
  }
  static void SetUpTestSuite() {
    tmp_ = new test::scratch_dir("baton-quantize");
    quantize_int8(tiny_release(), int8_dir());
  }
  static void TearDownTestSuite() {
    delete tmp_;
  }
  static fs::path int8_dir() { return *tmp_ / "int8"; }
  // A fresh copy of the int8 release to break.
  static fs::path copy_of_int8(const std::string& name) {
    const fs::path dir = *tmp_ / name;
    fs::copy(int8_dir(), dir, fs::copy_options::recursive);
    return dir;
  }
  static test::scratch_dir* tmp_;  // for the suite: the int8 release is written once
};
test::scratch_dir* quantize_int8_test::tmp_ = nullptr;

TEST_F(quantize_int8_test, experts_are_int8_with_a_scale_per_row_and_the_rest_is_unchanged) {
  const release src(tiny_release());
  const release dst(int8_dir());
  EXPECT_FALSE(src.int8_experts());
  ASSERT_TRUE(dst.int8_experts());
  EXPECT_EQ(read_json(int8_dir() / "config.json")["quantization_config"], int8_quantization_config());
  std::size_t experts = 0;
  for (const auto& [name, shape] : expected_text_tensors(src.text())) {
    const tensor_view& w = src.thinker_tensor(name);
    const tensor_view& q = dst.thinker_tensor(name);
    ASSERT_EQ(q.shape, shape) << name;
    if (!is_expert_weight(name)) {
      ASSERT_EQ(q.type, w.type) << name;
      ASSERT_EQ(q.bytes, w.bytes) << name;
      EXPECT_EQ(std::memcmp(q.data, w.data, w.bytes), 0) << name;
      continue;
    }
    ++experts;
    ASSERT_EQ(q.type, dtype::i8) << name;
    const tensor_view& s = dst.thinker_tensor(name + "_scale");
    ASSERT_EQ(s.type, dtype::f32);
    ASSERT_EQ(s.shape, (std::vector<std::int64_t>{shape[0]}));
    const auto* wf = reinterpret_cast<const float*>(w.data);
    const auto* qi = reinterpret_cast<const std::int8_t*>(q.data);
    const auto* sf = reinterpret_cast<const float*>(s.data);
    for (std::int64_t r = 0; r < shape[0]; ++r) {
      int largest = 0;
      float amax = 0;
      for (std::int64_t c = 0; c < shape[1]; ++c) {
        const std::int64_t i = r * shape[1] + c;
        largest = std::max(largest, std::abs(static_cast<int>(qi[i])));
        amax = std::max(amax, std::abs(wf[i]));
        // Round to nearest: within half a step of the weight.
        ASSERT_LE(std::abs(qi[i] * sf[r] - wf[i]), 0.5f * sf[r] * (1 + 1e-4f)) << name << " " << i;
      }
      EXPECT_EQ(largest, 127) << name << " row " << r;
      EXPECT_FLOAT_EQ(sf[r], amax / 127) << name << " row " << r;
    }
  }
  EXPECT_EQ(experts, 3u * 3 * 8);  // 3 layers x 8 experts x gate, up, down
  EXPECT_EQ(dst.thinker_tensor_count(), src.thinker_tensor_count() + experts);
  // The head, tokenizer and processor files are copied byte for byte.
  for (const char* file : {"joint_head.safetensors", "joint_head_config.json", "tokenizer.json",
                           "tokenizer_config.json", "vocab.json", "merges.txt", "preprocessor_config.json"}) {
    EXPECT_EQ(test::read_file(int8_dir() / file), test::read_file(tiny_release() / file)) << file;
  }
  // The index maps each scale to its weight's shard and counts the new bytes.
  const auto index = read_json(int8_dir() / "model.safetensors.index.json");
  const std::string gate = "thinker.model.layers.2.mlp.experts.7.gate_proj.weight";
  EXPECT_EQ(index["weight_map"][gate + "_scale"], index["weight_map"][gate]);
  std::uint64_t shard_bytes = 0;
  for (const auto& e : fs::directory_iterator(int8_dir())) {
    const std::string n = e.path().filename().string();
    if (n.starts_with("model-")) shard_bytes += e.file_size();
  }
  EXPECT_GT(index["metadata"]["total_size"].get<std::uint64_t>(), 0u);
  EXPECT_LT(index["metadata"]["total_size"].get<std::uint64_t>(), shard_bytes);
  EXPECT_LT(index["metadata"]["total_size"].get<std::uint64_t>(),
            read_json(tiny_release() / "model.safetensors.index.json")["metadata"]["total_size"].get<std::uint64_t>());
}

TEST_F(quantize_int8_test, the_copy_has_its_own_fingerprint) {
  EXPECT_NE(release_fingerprint(int8_dir()), release_fingerprint(tiny_release()));
  EXPECT_EQ(release_fingerprint(int8_dir()).rfind("sha256:", 0), 0u);
}

struct record_case {
  json line, expected;
};

std::vector<record_case> all_records() {
  std::ifstream records(tiny_dir() / "records.jsonl"), expected(tiny_dir() / "expected.jsonl");
  std::vector<record_case> out;
  for (std::string a, b; std::getline(records, a) && std::getline(expected, b);) {
    out.push_back({test::parse(a), test::parse(b)});
  }
  return out;
}

// Largest difference between two rendered answers objects of the same questions, failing the test
// when they decide differently: another type, another choice, another set of options.
double answer_difference(const json& a, const json& b) {
  double worst = 0;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [id, x] : a.items()) {
    SCOPED_TRACE(id);
    const json& y = b[id];
    EXPECT_EQ(x["type"], y["type"]);
    if (x.contains("choice")) {
      EXPECT_EQ(x["choice"], y["choice"]);
    }
    for (const char* field : {"noul", "confidence"}) {
      if (x.contains(field)) worst = std::max(worst, std::abs(x[field].get<double>() - y[field].get<double>()));
    }
    if (x.contains("score")) {
      // Σ k·p_k over up to 10 levels: 10 times a probability's difference at most.
      EXPECT_NEAR(x["score"].get<double>(), y["score"].get<double>(), 10 * 0.005);
    }
    if (!x.contains("probabilities")) continue;
    EXPECT_EQ(x["probabilities"].size(), y["probabilities"].size());
    for (const auto& [option, p] : x["probabilities"].items()) {
      worst = std::max(worst, std::abs(p.get<double>() - y["probabilities"][option].get<double>()));
    }
  }
  return worst;
}

// The reference records (text and media) through the engine on the int8 copy: the answers, as the
// API renders them, decide as the fp32 release's do (the same choices), every probability within
// 0.005. Not to the last of their 4 decimals: the tiny release's random experts carry much of its
// output, and int8 moves its probabilities by up to ~0.002.
TEST_F(quantize_int8_test, the_engine_answers_every_record_as_the_fp32_release_does) {
  clef_engine_options options;
  options.model.threads = 1;  // see clef_engine_test.cpp
  options.media.sources.roots = {tiny_dir()};
  options.model_dir = tiny_release();
  clef_engine fp32(options);
  options.model_dir = int8_dir();
  clef_engine int8(options);
  std::size_t compared = 0;
  double worst_logit = 0, worst_probability = 0;
  for (const auto& c : all_records()) {
    SCOPED_TRACE(c.line["id"].get<std::string>());
    auto req = request_from_json(json(c.line["request"]), fp32.describe().limits, "m");
    if (!req) continue;
    const std::size_t window = c.line.contains("max_length") ? c.line["max_length"].get<std::size_t>() : 64000;
    std::vector<std::optional<clef_trace>> ta, tb;
    const auto a = fp32.decide({&*req, 1}, {&window, 1}, &ta);
    const auto b = int8.decide({&*req, 1}, {&window, 1}, &tb);
    ASSERT_EQ(static_cast<bool>(a[0]), static_cast<bool>(b[0]));
    if (!a[0]) continue;
    const json ra = test::parse(render_response(*make_response(*req, *a[0], confidence_metric::p_max, "m")));
    const json rb = test::parse(render_response(*make_response(*req, *b[0], confidence_metric::p_max, "m")));
    const double d = answer_difference(ra["answers"], rb["answers"]);
    EXPECT_LE(d, 0.005);
    worst_probability = std::max(worst_probability, d);
    for (std::size_t q = 0; q < ta[0]->logits.size(); ++q) {
      for (std::size_t k = 0; k < ta[0]->logits[q].size(); ++k) {
        worst_logit = std::max<double>(worst_logit, std::abs(ta[0]->logits[q][k] - tb[0]->logits[q][k]));
      }
    }
    ++compared;
  }
  EXPECT_EQ(compared, 13u);      // 10 text records and 3 media ones
  EXPECT_GT(worst_logit, 0.0);   // the experts really are the int8 ones
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", worst_logit);
  RecordProperty("worst_logit_difference", text);
  std::snprintf(text, sizeof text, "%.4f", worst_probability);
  RecordProperty("worst_probability_difference", text);
}

// Every layer of the tiny thinker on the int8 copy, computed in fp32 and in bf16, stays within
// int8's error of the fp32 release's.
TEST_F(quantize_int8_test, int8_layers_stay_close_to_fp32_in_both_compute_dtypes) {
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299, 1, 2, 3, 4};
  auto trace = [&](const fs::path& dir, compute_dtype type) {
    model_options options;
    options.head = false;
    options.threads = 1;
    options.dtype = type;
    std::map<std::string, std::vector<float>, std::less<>> stages;
    model::load(dir, options)->trace(ids, nullptr, [&](std::string_view stage, std::span<const float> v, std::int64_t) {
      stages.emplace(std::string(stage), std::vector<float>(v.begin(), v.end()));
    });
    return stages;
  };
  const auto want = trace(tiny_release(), compute_dtype::f32);
  for (const auto type : {compute_dtype::f32, compute_dtype::bf16}) {
    const auto got = trace(int8_dir(), type);
    for (int l = 0; l < 3; ++l) {
      const std::string stage = "layer_out." + std::to_string(l);
      const auto& a = want.at(stage);
      const auto& b = got.at(stage);
      ASSERT_EQ(a.size(), b.size());
      double dot = 0, na = 0, nb = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        dot += static_cast<double>(a[i]) * b[i];
        na += static_cast<double>(a[i]) * a[i];
        nb += static_cast<double>(b[i]) * b[i];
      }
      EXPECT_GT(dot / std::sqrt(na * nb), 0.999) << stage << (type == compute_dtype::bf16 ? " bf16" : " f32");
    }
    EXPECT_TRUE(got.contains("router_logits.0"));
  }
}

// An int8 release in fp32 (an AVX2-only CPU's default) times its int8 experts at load as an fp32
// release times its own: widened per block on libxsmm's kernels, or per matmul by ATen onto the
// BLAS. It keeps the faster, and its attention projections go to the faster library too.
TEST_F(quantize_int8_test, in_fp32_the_experts_and_projections_libraries_are_chosen) {
  if (!detail::onednn_built() || !detail::packed_linear::blas_available()) {
    GTEST_SKIP() << "no oneDNN build or no cblas_sgemm: nothing to choose between";
  }
  model_options options;
  options.dtype = compute_dtype::f32;
  options.threads = 2;
  const auto m = model::load(int8_dir(), options);
  const std::string choice = m->matmul_choice();
  EXPECT_EQ(choice.rfind("fp32 ", 0), 0u) << choice;
  EXPECT_NE(choice.find("projections on "), std::string::npos) << choice;
  EXPECT_NE(choice.find("q_proj: BLAS "), std::string::npos) << choice;
  const text_config& c = m->files().text();
  const std::int64_t h = c.hidden_size, projections = packed_projection_bytes(c);
  using detail::packed_linear;
  const bool projections_packed = choice.find("on oneDNN, packed") != std::string::npos;
  if (!packed_linear::xsmm_available()) {  // ATen's widening is all there is: nothing timed
    EXPECT_EQ(choice.find("experts"), std::string::npos) << choice;
    EXPECT_EQ(m->packed_bytes() > 0, projections_packed) << choice;
    return;
  }
  EXPECT_NE(choice.find("int8 experts on "), std::string::npos) << choice;
  EXPECT_NE(choice.find("the BLAS, widened per matmul by ATen "), std::string::npos) << choice;
  EXPECT_NE(choice.find("libxsmm packed, widened per block "), std::string::npos) << choice;
  // Packed: the experts' int8 copies (a 4 KiB-aligned slot per weight) where libxsmm won, and the
  // projections where oneDNN won them.
  const std::int64_t i = c.moe_intermediate_size;
  auto aligned = [](std::int64_t n) { return (n + 4095) / 4096 * 4096; };
  const std::int64_t experts = c.num_layers * c.num_experts *
                               (aligned(packed_linear::xsmm_int8_bytes_for(2 * i, h)) +
                                aligned(packed_linear::xsmm_int8_bytes_for(h, i)));
  const bool on_xsmm = choice.find("int8 experts on libxsmm") != std::string::npos;
  EXPECT_EQ(m->packed_bytes(), (on_xsmm ? experts : 0) + (projections_packed ? projections : 0)) << choice;
  // An fp32 release of the same shape makes its own choice, among its own candidates.
  const std::string full = model::load(tiny_release(), options)->matmul_choice();
  EXPECT_NE(full.find("fp32 experts on "), std::string::npos) << full;
  EXPECT_EQ(full.find("int8"), std::string::npos) << full;
}

// Each library the int8 experts may run on, named: the same hidden states within fp32's rounding
// (only the order of each product's sum differs); oneDNN, which takes no int8 weights, and any
// library in bf16 (baton's byte kernel reads them there) are load errors that say why.
TEST_F(quantize_int8_test, int8_experts_on_each_library_trace_alike_and_the_others_are_refused) {
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299, 1, 2, 3, 4};
  auto options_for = [](expert_library library, compute_dtype type) {
    model_options options;
    options.head = false;
    options.threads = 2;
    options.dtype = type;
    options.experts = library;
    return options;
  };
  auto trace = [&](expert_library library, const char* named) {
    std::vector<float> out;
    const auto m = model::load(int8_dir(), options_for(library, compute_dtype::f32));
    EXPECT_NE(m->matmul_choice().find(std::string("int8 experts on ") + named + " (asked for)"), std::string::npos)
        << m->matmul_choice();
    m->trace(ids, nullptr, [&](std::string_view stage, std::span<const float> v, std::int64_t) {
      if (stage == "final_hidden") out.assign(v.begin(), v.end());
    });
    return out;
  };
  auto refusal = [&](expert_library library, compute_dtype type) -> std::string {
    try {
      (void)model::load(int8_dir(), options_for(library, type));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "loaded";
  };
  if (!detail::onednn_built() || !detail::packed_linear::blas_available()) {
    GTEST_SKIP() << "no oneDNN build or no cblas_sgemm: the int8 experts have one path";
  }
  const std::vector<float> blas = trace(expert_library::blas, "the BLAS");
  ASSERT_FALSE(blas.empty());
  if (detail::packed_linear::xsmm_available()) {
    const std::vector<float> xsmm = trace(expert_library::xsmm, "libxsmm, packed");
    ASSERT_EQ(xsmm.size(), blas.size());
    double worst = 0;
    for (std::size_t k = 0; k < blas.size(); ++k) worst = std::max(worst, std::abs(static_cast<double>(xsmm[k]) - blas[k]));
    EXPECT_LT(worst, 1e-4);
  }
  const std::string onednn = refusal(expert_library::onednn, compute_dtype::f32);
  EXPECT_NE(onednn.find("not int8 ones"), std::string::npos) << onednn;
  const std::string bf16 = refusal(expert_library::xsmm, compute_dtype::bf16);
  EXPECT_NE(bf16.find("experts are int8 in bf16, which baton's own kernel runs"), std::string::npos) << bf16;
}

// In bf16 the CPU's int8 experts run on baton's byte kernel: copied byte for byte into memory of
// their own where that fits (packed_bytes counts it), read from the mapping where it does not, the
// same hidden states bit for bit either way; and those of the grouped path, which widens the int8
// weights for ATen's matmuls, within bf16's rounding.
TEST_F(quantize_int8_test, int8_experts_in_bf16_run_on_the_byte_kernel_copied_or_mapped) {
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299, 1, 2, 3, 4};
  auto load = [](std::int64_t memory, bool grouped) {
    model_options options;
    options.head = false;
    options.threads = 2;
    options.dtype = compute_dtype::bf16;
    options.load_memory_bytes = memory;
    options.grouped_experts = grouped;
    return model::load(int8_dir(), options);
  };
  auto final_hidden = [&](model& m) { return final_hidden_of(m, ids); };
  const auto copied = load(1ll << 40, false), mapped = load(4096, false);
  const std::string choice = copied->matmul_choice();
  EXPECT_NE(choice.find("bf16 int8 experts on baton's byte kernel ("), std::string::npos) << choice;
  EXPECT_NE(choice.find(", copied into huge pages"), std::string::npos) << choice;
  EXPECT_NE(mapped->matmul_choice().find(", read from the mapping (a copy, "), std::string::npos) << mapped->matmul_choice();
  const text_config& c = copied->files().text();
  auto aligned = [](std::int64_t n) { return (n + 4095) / 4096 * 4096; };
  const std::int64_t copy = c.num_layers * c.num_experts *
                            (aligned(2 * c.moe_intermediate_size * c.hidden_size) + aligned(c.hidden_size * c.moe_intermediate_size));
  EXPECT_EQ(copied->packed_bytes() - mapped->packed_bytes(), copy);
  const std::vector<float> a = final_hidden(*copied), b = final_hidden(*mapped), g = final_hidden(*load(0, true));
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a, b);
  ASSERT_EQ(g.size(), a.size());
  double worst = 0, largest = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    worst = std::max(worst, std::abs(static_cast<double>(a[k]) - g[k]));
    largest = std::max(largest, std::abs(static_cast<double>(g[k])));
  }
  EXPECT_LT(worst, 0.02 * (1 + largest)) << "largest " << largest;
}

// Where the experts' packed copy would not fit in four fifths of the memory the load plans with,
// they stay mapped, and the choice says why: an int8 release's through ATen (the hidden states of
// asking for the BLAS; each load times its projections' library itself, so not bit for bit), an
// fp32 one's over the BLAS. Only the projections may be packed.
TEST_F(quantize_int8_test, experts_stay_mapped_where_their_packed_copy_would_not_fit) {
  if (!detail::onednn_built() || !detail::packed_linear::blas_available()) {
    GTEST_SKIP() << "no oneDNN build or no cblas_sgemm: nothing is packed";
  }
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299, 1, 2, 3, 4};
  auto load = [](const fs::path& dir, std::int64_t memory, expert_library library) {
    model_options options;
    options.head = false;
    options.threads = 2;
    options.dtype = compute_dtype::f32;
    options.load_memory_bytes = memory;
    options.experts = library;
    return model::load(dir, options);
  };
  auto final_hidden = [&](model& m) { return final_hidden_of(m, ids); };
  const auto cramped = load(int8_dir(), 4096, expert_library::measured);
  const std::string choice = cramped->matmul_choice();
  const std::int64_t projections = packed_projection_bytes(cramped->files().text());
  EXPECT_LE(cramped->packed_bytes(), projections) << choice;
  // An fp32 release: over the BLAS, no copy.
  const auto fp32 = load(tiny_release(), 4096, expert_library::measured);
  EXPECT_NE(fp32->matmul_choice().find("fp32 experts on the BLAS (a packed copy ("), std::string::npos)
      << fp32->matmul_choice();
  EXPECT_NE(fp32->matmul_choice().find("would not fit in the 1 MiB the load leaves it"), std::string::npos)
      << fp32->matmul_choice();
  EXPECT_LE(fp32->packed_bytes(), projections) << fp32->matmul_choice();
  if (!detail::packed_linear::xsmm_available()) {  // int8 experts are never packed without libxsmm
    EXPECT_EQ(choice.find("would not fit"), std::string::npos) << choice;
    return;
  }
  EXPECT_NE(choice.find("int8 experts on the BLAS (a packed copy ("), std::string::npos) << choice;
  EXPECT_NE(choice.find("would not fit in the 1 MiB the load leaves it"), std::string::npos) << choice;
  const std::vector<float> got = final_hidden(*cramped);
  ASSERT_FALSE(got.empty());
  const std::vector<float> asked = final_hidden(*load(int8_dir(), 0, expert_library::blas));
  ASSERT_EQ(got.size(), asked.size());
  double worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::abs(static_cast<double>(got[k]) - asked[k]));
  EXPECT_LT(worst, 1e-4);
  // Room enough: packed as usual where libxsmm wins.
  const auto roomy = load(int8_dir(), 1ll << 40, expert_library::measured);
  EXPECT_EQ(roomy->matmul_choice().find("would not fit"), std::string::npos) << roomy->matmul_choice();
}

// The grouped expert path (a CUDA model's) with int8 experts: widened per layer, each row scaled
// by its own expert's scales; on the CPU with a matmul per expert in place of at::_grouped_mm.
TEST_F(quantize_int8_test, int8_grouped_experts_trace_as_the_per_expert_loop) {
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299, 1, 2, 3, 4};
  auto trace = [&](bool grouped) {
    model_options options;
    options.head = false;
    options.threads = 1;
    options.dtype = compute_dtype::f32;
    options.grouped_experts = grouped;
    std::vector<float> out;
    model::load(int8_dir(), options)->trace(ids, nullptr, [&](std::string_view stage, std::span<const float> v, std::int64_t) {
      if (stage == "final_hidden") out.assign(v.begin(), v.end());
    });
    return out;
  };
  const auto want = trace(false), got = trace(true);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty());
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  EXPECT_LT(worst, 1e-4);  // hidden values of O(1): only the order of each token's sum differs
}

TEST_F(quantize_int8_test, refuses_a_non_release_an_int8_release_and_a_destination_in_use) {
  const fs::path out = *tmp_ / "refused";
  EXPECT_THROW(quantize_int8(*tmp_ / "nothing-here", out), load_error);
  EXPECT_THROW(quantize_int8(tiny_dir(), out), load_error);  // no config.json
  try {
    quantize_int8(int8_dir(), out);
    ADD_FAILURE() << "quantized an int8 release";
  } catch (const load_error& e) {
    EXPECT_NE(std::string(e.what()).find("already int8"), std::string::npos) << e.what();
  }
  try {
    quantize_int8(tiny_release(), int8_dir());
    ADD_FAILURE() << "wrote over a release";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("exists and is not an empty directory"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(int8_dir().string() + ".partial"));
  EXPECT_TRUE(release(int8_dir()).int8_experts());  // untouched
  // An empty directory is taken.
  fs::create_directories(out);
  quantize_int8(tiny_release(), out);
  EXPECT_TRUE(release(out).int8_experts());
  EXPECT_FALSE(fs::exists(out.string() + ".partial"));
}

// The loader tests' valid release (bf16 experts, mixed dtypes, a talker/code2wav shard that is not
// even a safetensors file): quantized without opening that shard, which is copied as it is.
TEST_F(quantize_int8_test, a_bf16_release_is_quantized_and_its_talker_shard_copied_unread) {
  const fs::path src = fs::path(BATON_TEST_RELEASES) / "valid";
  ASSERT_TRUE(fs::is_directory(src)) << src << " missing: run the make_test_releases test";
  const fs::path dst = *tmp_ / "valid-int8";
  quantize_int8(src, dst);
  const release a(src), b(dst);
  ASSERT_TRUE(b.int8_experts());
  const char* talker = "model-00003-of-00003.safetensors";
  EXPECT_EQ(test::read_file(dst / talker), test::read_file(src / talker));
  const std::string down = "thinker.model.layers.1.mlp.experts.3.down_proj.weight";
  const tensor_view& w = a.thinker_tensor(down);
  const tensor_view& q = b.thinker_tensor(down);
  const tensor_view& s = b.thinker_tensor(down + "_scale");
  ASSERT_EQ(w.type, dtype::bf16);
  ASSERT_EQ(q.type, dtype::i8);
  const auto* wb = reinterpret_cast<const std::uint16_t*>(w.data);
  const auto* qi = reinterpret_cast<const std::int8_t*>(q.data);
  const auto* sf = reinterpret_cast<const float*>(s.data);
  for (std::int64_t i = 0; i < w.numel(); ++i) {
    const float weight = std::bit_cast<float>(std::uint32_t{wb[i]} << 16);
    const float scale = sf[i / w.shape[1]];
    ASSERT_LE(std::abs(qi[i] * scale - weight), 0.5f * scale * (1 + 1e-4f)) << i;
  }
  model_options options;
  options.threads = 1;
  const std::vector<std::int32_t> ids = {3, 17, 42, 99, 5, 250, 7, 8, 131, 64, 12, 299};
  const std::vector<question_layout> questions = {{1, {1, 4}, {{5, 7}, {8, 11}}}};
  const record_input record{ids, questions};
  const auto out = model::load(dst, options)->forward({&record, 1});
  ASSERT_EQ(out[0][0].size(), 2u);
  for (const float logit : out[0][0]) EXPECT_TRUE(std::isfinite(logit)) << logit;
}

TEST_F(quantize_int8_test, half_quantized_copies_are_refused_naming_the_fault) {
  const std::string gate = "thinker.model.layers.0.mlp.experts.0.gate_proj.weight";
  {
    const fs::path dir = copy_of_int8("no_config");
    auto config = read_json(dir / "config.json");
    config.erase("quantization_config");
    write_json(dir / "config.json", config);
    const std::string m = load_message(dir);
    EXPECT_NE(m.find("has dtype I8; F32, F16 or BF16 expected"), std::string::npos) << m;
  }
  {
    const fs::path dir = copy_of_int8("missing_scale");
    auto index = read_json(dir / "model.safetensors.index.json");
    index["weight_map"].erase(gate + "_scale");
    write_json(dir / "model.safetensors.index.json", index);
    const std::string m = load_message(dir);
    EXPECT_NE(m.find("missing tensor " + gate + "_scale"), std::string::npos) << m;
  }
  {
    const fs::path dir = copy_of_int8("wrong_scale_shape");
    write_safetensors(dir / "extra.safetensors", {{gate + "_scale", "F32", {3}}});
    auto index = read_json(dir / "model.safetensors.index.json");
    index["weight_map"][gate + "_scale"] = "extra.safetensors";
    write_json(dir / "model.safetensors.index.json", index);
    const std::string m = load_message(dir);
    EXPECT_NE(m.find(gate + "_scale has shape [3], expected [48]"), std::string::npos) << m;
  }
  {
    const fs::path dir = copy_of_int8("float_expert");
    write_safetensors(dir / "extra.safetensors", {{gate, "F32", {48, 64}}});
    auto index = read_json(dir / "model.safetensors.index.json");
    index["weight_map"][gate] = "extra.safetensors";
    write_json(dir / "model.safetensors.index.json", index);
    const std::string m = load_message(dir);
    EXPECT_NE(m.find(gate + " has dtype F32; I8 (config.json declares int8 experts) expected"), std::string::npos) << m;
  }
  {
    const fs::path dir = copy_of_int8("other_method");
    auto config = read_json(dir / "config.json");
    config["quantization_config"]["quant_method"] = "awq";
    write_json(dir / "config.json", config);
    const std::string m = load_message(dir);
    EXPECT_NE(m.find("unsupported quant_method \"awq\""), std::string::npos) << m;
  }
}

// The CPU widens int8 experts in its own loop, not ATen's: every int8 value, both dtypes, a
// weight of the real expert shape, and the fallbacks must give exactly what to() gives.
TEST(quantize_int8, widening_equals_aten_for_every_value_and_reuses_the_thread_buffer) {
  const at::Tensor all = at::arange(-128, 128, at::TensorOptions().dtype(at::kChar)).view({16, 16});
  const at::Tensor expert = at::randint(-127, 128, {768, 2048}, at::TensorOptions().dtype(at::kChar));
  for (const auto type : {at::kBFloat16, at::kFloat}) {
    for (const auto& q : {all, expert, all.t()}) {
      const at::Tensor w = detail::widen_int8(q, type);
      EXPECT_EQ(w.scalar_type(), type);
      EXPECT_EQ(w.sizes(), q.sizes());
      EXPECT_TRUE(at::equal(w, q.to(type)));
    }
  }
  // One buffer per thread: the next call overwrites the last result (one matmul each).
  const at::Tensor first = detail::widen_int8(all, at::kBFloat16);
  const void* at_first = first.data_ptr();
  const at::Tensor second = detail::widen_int8(at::ones({4, 4}, at::TensorOptions().dtype(at::kChar)), at::kBFloat16);
  EXPECT_EQ(second.data_ptr(), at_first);
  EXPECT_EQ(first.view(-1)[0].item<float>(), 1.0f);
}

}  // namespace
}  // namespace baton::clef
