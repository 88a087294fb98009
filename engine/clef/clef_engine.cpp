#include "engine/clef/clef_engine.hpp"

#include <openssl/evp.h>

#include <cstdio>
#include <fstream>

#include "core/answers.hpp"

namespace baton::clef {

namespace {

std::unique_ptr<tokenizer> load_tokenizer(const std::filesystem::path& dir) {
  std::unique_ptr<tokenizer> t;
  try {
    t = tokenizer::load(dir);
  } catch (const std::exception& e) {
    throw load_error(e.what());
  }
  // The prompt's control tokens must be single added tokens, or the encoding silently differs
  // from the one the model was trained on.
  for (const char* token : {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
    if (!t->token_to_id(token)) {
      throw load_error(dir.string() + ": the tokenizer has no token " + token);
    }
  }
  return t;
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

}  // namespace

clef_encoder::clef_encoder(const std::filesystem::path& model_dir)
    : tokenizer_(load_tokenizer(model_dir)), pieces_(*tokenizer_) {}

result<encoded_record> clef_encoder::encode(const request& r, std::size_t max_length) const {
  encode_options options;
  options.max_length = max_length;
  return encode_record(r, pieces_, options);
}

clef_engine::clef_engine(const clef_engine_options& options)
    : options_(options),
      encoder_(options.model_dir),
      model_(model::load(options.model_dir, options.model)) {
  description_.model_id = options.model_id.empty()
                              ? std::filesystem::absolute(options.model_dir).lexically_normal()
                                    .filename()
                                    .string()
                              : options.model_id;
  if (description_.model_id.empty()) description_.model_id = "clef-omni";
  description_.fingerprint = release_fingerprint(options.model_dir);
  description_.limits = request_limits::text_only();
  if (encoder_.text_tokenizer().size() > static_cast<std::size_t>(model_->files().text().vocab_size)) {
    throw load_error(options.model_dir.string() + ": the tokenizer has " +
                     std::to_string(encoder_.text_tokenizer().size()) +
                     " ids but the thinker's vocabulary only " +
                     std::to_string(model_->files().text().vocab_size));
  }
}

std::vector<result<decision>> clef_engine::decide(std::span<const request> batch) {
  return decide(batch, {}, nullptr);
}

std::vector<result<decision>> clef_engine::decide(std::span<const request> batch,
                                                  std::span<const std::size_t> max_lengths,
                                                  std::vector<std::optional<clef_trace>>* traces) {
  std::vector<result<decision>> out;
  out.reserve(batch.size());
  std::vector<std::optional<encoded_record>> encoded(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::size_t max_length = i < max_lengths.size() ? max_lengths[i] : options_.max_length;
    if (batch[i].has_media()) {
      // describe().limits refuse media; a caller that skipped validation must not get an answer
      // that silently ignored them.
      out.emplace_back(make_error(422, "INVALID_REQUEST", "this model does not read images, audio or videos yet"));
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
  if (traces) traces->assign(batch.size(), std::nullopt);

  // Pack encoded records into forwards of about batch_tokens tokens each.
  std::size_t next = 0;
  while (next < batch.size()) {
    std::vector<std::size_t> members;
    std::vector<std::vector<question_layout>> layout;
    std::size_t tokens = 0;
    for (; next < batch.size(); ++next) {
      if (!encoded[next]) continue;
      const std::size_t n = encoded[next]->ids.size();
      if (!members.empty() && tokens + n > options_.batch_tokens) break;
      members.push_back(next);
      layout.push_back(layouts(*encoded[next]));
      tokens += n;
    }
    if (members.empty()) break;
    std::vector<record_input> inputs;
    inputs.reserve(members.size());
    for (std::size_t k = 0; k < members.size(); ++k) {
      inputs.push_back({encoded[members[k]]->ids, layout[k]});
    }
    std::vector<record_logits> logits;
    try {
      logits = model_->forward(inputs);
    } catch (const std::exception& e) {
      for (const auto i : members) {
        out[i] = make_error(500, "INFERENCE_FAILED", std::string("the model failed: ") + e.what());
      }
      continue;
    }
    for (std::size_t k = 0; k < members.size(); ++k) {
      const std::size_t i = members[k];
      out[i] = to_decision(*encoded[i], logits[k]);
      if (traces) (*traces)[i] = clef_trace{std::move(*encoded[i]), std::move(logits[k])};
    }
  }
  return out;
}

std::string release_fingerprint(const std::filesystem::path& model_dir) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw load_error("sha256 is not available");
  }
  std::vector<char> buffer(1 << 20);
  for (const char* name : {"model.safetensors.index.json", "config.json", "joint_head_config.json",
                           "joint_head.safetensors"}) {
    const auto path = model_dir / name;
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;  // a single-file checkpoint has no index
    // The file name goes in too, so moving bytes between files changes the fingerprint.
    EVP_DigestUpdate(ctx.get(), name, std::char_traits<char>::length(name) + 1);
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<std::size_t>(in.gcount()));
    }
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &size);
  std::string hex = "sha256:";
  char byte[3];
  for (unsigned int i = 0; i < size; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

}  // namespace baton::clef
