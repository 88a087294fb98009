#include "engine/tokenizer/tokenizer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace baton {
namespace {

namespace fs = std::filesystem;
using ids = std::vector<std::int32_t>;

fs::path vectors() { return test::data_dir() / "vectors" / "tokenizer"; }

// The full Qwen3-Omni tokenizer.json is 5 MB of JSON: loaded once for the whole binary.
const tokenizer& qwen() {
  static const std::unique_ptr<tokenizer> t = tokenizer::load(vectors() / "qwen3_omni_tokenizer.json");
  return *t;
}

const json& hf_cases() {
  static const json cases = test::read_json(vectors() / "qwen3_omni_hf_reference_vectors.json").at("cases");
  return cases;
}

// llama.cpp's test-tokenizer-0 format: each input is followed by "\n__ggml_vocab_test__\n" (so the
// text after the last separator is empty and no case), and the .out file has one line of
// space-separated ids per input, with a leading space.
std::vector<std::pair<std::string, ids>> llama_cpp_cases() {
  const std::string inp = test::read_file(vectors() / "ggml-vocab-qwen2.gguf.inp");
  const std::string out = test::read_file(vectors() / "ggml-vocab-qwen2.gguf.out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::pair<std::string, ids>> cases;
  std::size_t at = 0, line = 0;
  for (std::size_t next; (next = inp.find(separator, at)) != std::string::npos; at = next + separator.size()) {
    const std::size_t eol = out.find('\n', line);
    std::istringstream numbers(out.substr(line, eol - line));
    ids expected;
    for (std::int32_t id; numbers >> id;) expected.push_back(id);
    cases.emplace_back(inp.substr(at, next - at), expected);
    line = eol + 1;
  }
  EXPECT_EQ(at, inp.size()) << "text after the last separator";
  EXPECT_EQ(line, out.size()) << "more expected lines than inputs";
  return cases;
}

ids concat(std::initializer_list<ids> parts) {
  ids all;
  for (const ids& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// The test's folder, with a way to write a file into it.
struct temp_dir : test::scratch_dir {
  temp_dir() : scratch_dir("baton-tokenizer") {}
  fs::path write(const std::string& name, std::string_view text) const {
    std::ofstream(path() / name, std::ios::binary) << text;
    return path() / name;
  }
};

// The load error of `path`, or "" when it loads.
std::string load_error(const fs::path& path) {
  try {
    tokenizer::load(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// ---- reference vectors ------------------------------------------------------------------------

TEST(tokenizer, llama_cpp_qwen2_vectors) {
  const auto cases = llama_cpp_cases();
  ASSERT_EQ(cases.size(), 43u);
  EXPECT_EQ(cases[0].first, "ied 4 \xC2\xBD months");
  EXPECT_EQ(cases[2].first, "");
  for (const auto& [text, expected] : cases) EXPECT_EQ(qwen().encode(text), expected) << '"' << text << '"';
}

TEST(tokenizer, hugging_face_reference_vectors) {
  ASSERT_EQ(hf_cases().size(), 130u);
  for (const json& c : hf_cases()) {
    const std::string name = c.at("name").get<std::string>();
    const ids got = qwen().encode(c.at("input").get<std::string>());
    EXPECT_EQ(got, c.at("ids").get<ids>()) << name;
    // The byte-level token strings name the same ids.
    const auto& tokens = c.at("tokens");
    for (std::size_t i = 0; i < tokens.size() && i < got.size(); ++i)
      EXPECT_EQ(qwen().token_to_id(tokens[i].get<std::string>()), got[i]) << name << " token " << i;
  }
}

TEST(tokenizer, known_ids) {
  const tokenizer& t = qwen();
  EXPECT_EQ(t.encode("\n"), ids{198});
  EXPECT_EQ(t.encode("user"), ids{872});
  EXPECT_EQ(t.encode("system"), ids{8948});
  EXPECT_EQ(t.encode("assistant"), ids{77091});
  EXPECT_EQ(t.encode("Hello, world!"), (ids{9707, 11, 1879, 0}));
  EXPECT_EQ(t.encode("Phoenix \xE2\x86\x92 \xE6\x9D\xB1\xE4\xBA\xAC caf\xC3\xA9"), (ids{78825, 11397, 60596, 109, 46553, 51950}));
  EXPECT_EQ(t.encode("cafe\xCC\x81"), (ids{924, 58858}));
  EXPECT_EQ(t.encode("raw completion <|endoftext|> caf\xC3\xA9\n"), (ids{1041, 9755, 220, 151643, 51950, 198}));
  EXPECT_EQ(t.encode("a   b    "), (ids{64, 256, 293, 257}));
  EXPECT_EQ(t.encode(""), ids{});
}

TEST(tokenizer, vocabulary_lookup_and_size) {
  const tokenizer& t = qwen();
  EXPECT_EQ(t.size(), 151676u);
  EXPECT_EQ(t.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(t.token_to_id("<|audio_pad|>"), 151675);
  EXPECT_EQ(t.token_to_id("</think>"), 151668);
  EXPECT_EQ(t.token_to_id("!"), 0);
  EXPECT_EQ(t.token_to_id("\xC4\xA0"), 220);  // "Ġ", the byte-level space
  EXPECT_EQ(t.token_to_id(" "), std::nullopt);  // vocab entries are byte-level strings
  EXPECT_EQ(t.token_to_id("<|im_start"), std::nullopt);
}

// ---- the regex ----------------------------------------------------------------------------------

// HF's `\s` is Unicode White_Space. PCRE2's `\s` with UCP also matches U+180E MONGOLIAN VOWEL
// SEPARATOR (no longer White_Space); HF splits " \u180Ex" as " \u180E" + "x", PCRE2's \s as " " + "\u180Ex".
TEST(tokenizer, white_space_is_the_unicode_property) {
  const tokenizer& t = qwen();
  const std::string mvs = "\xE1\xA0\x8E";
  const ids got = t.encode(" " + mvs + "x");
  EXPECT_EQ(got, concat({t.encode(" " + mvs), t.encode("x")}));
  EXPECT_NE(got.front(), 220);
  // NBSP is White_Space: "a\u00A0 b" keeps the no-break space apart from " b".
  EXPECT_EQ(t.encode("a\xC2\xA0 b"), concat({t.encode("a"), t.encode("\xC2\xA0"), t.encode(" b")}));
}

TEST(tokenizer, long_runs_stay_linear) {
  const tokenizer& t = qwen();
  const ids spaces = t.encode(std::string(1 << 20, ' ') + " x");
  ASSERT_GE(spaces.size(), 2u);
  EXPECT_EQ(spaces.back(), t.encode(" x").front());
  EXPECT_LT(spaces.size(), (1u << 20) / 8);

  const ids letters = t.encode(std::string(200000, 'a'));
  EXPECT_LT(letters.size(), 200000u / 2);
  EXPECT_EQ(t.encode(std::string(200000, 'a')), letters);
}

// ---- UTF-8 --------------------------------------------------------------------------------------

TEST(tokenizer, valid_utf8) {
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("plain ASCII text, longer than eight bytes"));
  EXPECT_TRUE(valid_utf8("caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x98\x81 \xF4\x8F\xBF\xBF \xEF\xBB\xBF"));
  EXPECT_TRUE(valid_utf8(std::string_view("\0", 1)));
  EXPECT_FALSE(valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(valid_utf8("\xF0\x80\x80\xAF"));  // overlong
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(valid_utf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(valid_utf8("abc\xE6\x9D"));       // truncated
  EXPECT_FALSE(valid_utf8("\x80"));              // lone continuation
  EXPECT_FALSE(valid_utf8("abcdefgh\xFF"));
}

TEST(tokenizer, ill_formed_utf8_becomes_byte_tokens) {
  const tokenizer& t = qwen();
  const auto byte_id = [&](std::string_view symbol) { return *t.token_to_id(symbol); };
  // 0xFF is "ÿ" in bytes_to_unicode; 0xE6 0x9D (a cut 3-byte sequence) are "æ" and "Ŀ".
  EXPECT_EQ(t.encode("a\xFF b"), concat({t.encode("a"), {byte_id("\xC3\xBF")}, t.encode(" b")}));
  EXPECT_EQ(t.encode("x\xE6\x9D"), concat({t.encode("x"), {byte_id("\xC3\xA6"), byte_id("\xC4\xBF")}}));
  EXPECT_EQ(t.encode("<|im_end|>\xC0"), (ids{151645, byte_id("\xC3\x80")}));
}

// ---- threads and cache --------------------------------------------------------------------------

TEST(tokenizer, threads_encode_alike) {
  const tokenizer& t = qwen();
  std::vector<std::string> texts;
  for (const json& c : hf_cases()) texts.push_back(c.at("input").get<std::string>());
  for (auto& [text, expected] : llama_cpp_cases()) texts.push_back(text);
  std::vector<ids> expected;
  for (const auto& text : texts) expected.push_back(t.encode(text));

  t.clear_cache();
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 6; ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round)
        for (std::size_t i = 0; i < texts.size(); ++i) {
          const std::size_t j = (i * 7 + static_cast<std::size_t>(k + round)) % texts.size();
          if (t.encode(texts[j]) != expected[j]) ++mismatches;
        }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- other ways to load -------------------------------------------------------------------------

// vocab.json + merges.txt + tokenizer_config.json's added_tokens_decoder (a Qwen release
// directory without tokenizer.json) encode as the assembled tokenizer.json.
TEST(tokenizer, vocab_and_merges_directory) {
  temp_dir dir;
  fs::create_symlink(vectors() / "vocab.json", dir.path() / "vocab.json");
  fs::create_symlink(vectors() / "merges.txt", dir.path() / "merges.txt");
  const json added = test::read_json(vectors() / "qwen3_omni_added_tokens.json");
  json decoder = json::object();
  for (const json& t : added.at("added_tokens")) {
    json entry = t;
    entry.erase("id");
    decoder[std::to_string(t.at("id").get<int>())] = entry;
  }
  dir.write("tokenizer_config.json", json{{"added_tokens_decoder", decoder}}.dump());

  const auto from_dir = tokenizer::load(dir.path());
  EXPECT_EQ(from_dir->size(), qwen().size());
  for (const json& c : hf_cases()) {
    const std::string text = c.at("input").get<std::string>();
    EXPECT_EQ(from_dir->encode(text), c.at("ids").get<ids>()) << c.at("name");
  }
  for (const auto& [text, expected] : llama_cpp_cases()) EXPECT_EQ(from_dir->encode(text), expected) << text;
}

// Without tokenizer_config.json, the added tokens come from added_tokens.json (Qwen2-Instruct's 3).
TEST(tokenizer, vocab_and_merges_with_added_tokens_json) {
  temp_dir dir;
  fs::create_symlink(vectors() / "vocab.json", dir.path() / "vocab.json");
  fs::create_symlink(vectors() / "merges.txt", dir.path() / "merges.txt");
  fs::create_symlink(vectors() / "qwen2_added_tokens.json", dir.path() / "added_tokens.json");
  const auto t = tokenizer::load(dir.path());
  EXPECT_EQ(t->size(), 151646u);
  EXPECT_EQ(t->encode("<|im_start|>user\nHi<|im_end|>"), concat({{151644}, qwen().encode("user\nHi"), {151645}}));
  // <think> is no added token of Qwen2.
  EXPECT_EQ(t->token_to_id("<think>"), std::nullopt);
  EXPECT_EQ(t->encode("<think>"), (ids{13708, 766, 29}));  // "<th" "ink" ">"
}

// The Clef-Omni tiny release: 256 byte tokens, 75 merges, the Qwen added tokens at 331-363.
TEST(tokenizer, tiny_release_tokenizer) {
  const fs::path release = test::data_dir() / "vectors" / "clef-omni-tiny" / "release";
  const auto t = tokenizer::load(release);
  EXPECT_EQ(t->size(), 364u);
  EXPECT_EQ(t->encode("<|im_start|>system\n"), (ids{332, 82, 88, 273, 68, 76, 198}));
  EXPECT_EQ(t->encode("<|im_start|>system\nRead"), (ids{332, 82, 88, 273, 68, 76, 198, 49, 68, 64, 67}));
  EXPECT_EQ(tokenizer::load(release / "tokenizer.json")->encode("<|im_end|> the"), (ids{333, 267}));
}

// The tiny end-to-end records: each prompt piece is tokenized on its own (Cloudflare's reference encode_record), so
// every accepted record's ids start with those of the prefix piece and end with the suffix piece.
TEST(tokenizer, tiny_release_record_prefix_and_suffix) {
  const fs::path dir = test::data_dir() / "vectors" / "clef-omni-tiny";
  const auto t = tokenizer::load(dir / "release");
  const ids prefix = t->encode(
      "<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer must be "
      "exactly one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n");
  const ids suffix = t->encode("\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:");
  EXPECT_EQ(std::count(prefix.begin(), prefix.end(), 332), 2);
  EXPECT_EQ(std::count(suffix.begin(), suffix.end(), 333), 1);  // <|im_end|>
  std::istringstream lines(test::read_file(dir / "expected.jsonl"));
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    const json record = test::parse(line);
    if (!record.at("ok").get<bool>()) continue;
    const ids expected = record.at("input_ids").get<ids>();
    ASSERT_GT(expected.size(), prefix.size() + suffix.size()) << record.at("id");
    EXPECT_EQ(ids(expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(prefix.size())), prefix) << record.at("id");
    EXPECT_EQ(ids(expected.end() - static_cast<std::ptrdiff_t>(suffix.size()), expected.end()), suffix) << record.at("id");
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}

// clef/tiny: merges as [a, b] arrays, null subword prefixes, trim_offsets=true.
TEST(tokenizer, merges_as_pairs) {
  const auto t = tokenizer::load(test::data_dir() / "vectors" / "clef" / "tiny" / "tokenizer.json");
  EXPECT_EQ(t->size(), 262u);
  EXPECT_EQ(t->encode(" t"), ids{256});
  EXPECT_EQ(t->encode("<think> tt</think>"), (ids{260, 256, 116, 261}));  // bytes in byte order here
}

// ---- variants of the tiny tokenizer ------------------------------------------------------------

// The tiny release tokenizer with extra added tokens or another split regex; `base_` is as released.
class tiny_variant : public ::testing::Test {
 protected:
  static json tiny() {
    return test::read_json(test::data_dir() / "vectors" / "clef-omni-tiny" / "release" / "tokenizer.json");
  }

  std::unique_ptr<tokenizer> with(std::initializer_list<json> extra) {
    json j = tiny();
    for (const json& t : extra) j["added_tokens"].push_back(t);
    return tokenizer::load(dir_.write("tokenizer.json", j.dump()));
  }
  std::unique_ptr<tokenizer> with_regex(const std::string& pattern) {
    json j = tiny();
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
    return tokenizer::load(dir_.write("tokenizer.json", j.dump()));
  }
  static json token(int id, std::string content, bool single_word, bool lstrip, bool rstrip, bool normalized) {
    return json{{"id", id}, {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
                {"rstrip", rstrip}, {"normalized", normalized}, {"special", false}};
  }

  temp_dir dir_;
  std::unique_ptr<tokenizer> base_ = tokenizer::load(dir_.write("tokenizer.json", tiny().dump()));
};

TEST_F(tiny_variant, lstrip_and_rstrip_take_the_white_space) {
  const auto t = with({token(400, "<mask>", false, true, true, false)});
  EXPECT_EQ(t->encode("Hi <mask> there"), concat({base_->encode("Hi"), {400}, base_->encode("there")}));
  // Unicode white space too; spaces already taken by the previous token stay with it.
  EXPECT_EQ(t->encode("there\t<mask>\t<mask>\xE2\x80\x80!"), concat({base_->encode("there"), {400, 400}, base_->encode("!")}));
  const auto plain = with({token(400, "<mask>", false, false, false, false)});
  EXPECT_EQ(plain->encode("Hi <mask> there"), concat({base_->encode("Hi "), {400}, base_->encode(" there")}));
}

TEST_F(tiny_variant, single_word_needs_non_word_neighbours) {
  const auto t = with({token(400, "<mask>", true, false, false, false)});
  EXPECT_EQ(t->encode("<mask> My name <mask> A<mask> <mask>ony <mask>"),
            concat({{400}, base_->encode(" My name "), {400}, base_->encode(" A<mask> <mask>ony "), {400}}));
  // Punctuation is no word character; a combining mark is.
  EXPECT_EQ(t->encode("<mask>, <mask>- \xE2\x97\x8C\xCC\xB0<mask>"),
            concat({{400}, base_->encode(", "), {400}, base_->encode("- \xE2\x97\x8C\xCC\xB0<mask>")}));
}

TEST_F(tiny_variant, normalized_tokens_match_after_nfc) {
  // Given decomposed, stored and matched as NFC "café".
  const auto t = with({token(400, "cafe\xCC\x81", false, false, false, true), token(401, "e\xCC\x81!", false, false, false, false)});
  EXPECT_EQ(t->encode("caf\xC3\xA9"), ids{400});
  EXPECT_EQ(t->encode("cafe\xCC\x81"), ids{400});
  // A raw token matches the text as given, before NFC.
  EXPECT_EQ(t->encode("xe\xCC\x81!"), concat({base_->encode("x"), {401}}));
  EXPECT_EQ(t->encode("x\xC3\xA9!"), base_->encode("x\xC3\xA9!"));
}

TEST_F(tiny_variant, longest_match_wins) {
  const auto t = with({token(400, "<a>", false, false, false, false), token(401, "<a><b>", false, false, false, false)});
  EXPECT_EQ(t->encode("<a><b><a>"), (ids{401, 400}));
  EXPECT_EQ(t->encode("<a><c>"), concat({{400}, base_->encode("<c>")}));
}

// ignore_merges: a piece that is a vocabulary entry is that token, whatever the merges would give.
TEST_F(tiny_variant, ignore_merges_takes_whole_vocabulary_pieces) {
  json j = tiny();
  j["model"]["vocab"]["xyz"] = 364;
  const auto merging = tokenizer::load(dir_.write("merging.json", j.dump()));
  j["model"]["ignore_merges"] = true;
  const auto ignoring = tokenizer::load(dir_.write("ignoring.json", j.dump()));
  EXPECT_EQ(merging->encode(" xyz"), base_->encode(" xyz"));
  EXPECT_EQ(merging->encode("xyz"), base_->encode("xyz"));
  EXPECT_EQ(ignoring->encode("xyz"), ids{364});
  EXPECT_EQ(ignoring->encode("xyz xyz"), concat({{364}, base_->encode(" xyz")}));
}

// Each repetition of a group costs JIT stack; past 32 KB the interpreter, which backtracks on the
// heap, takes over.
TEST_F(tiny_variant, deep_regex_backtracking_falls_back_to_the_interpreter) {
  std::string text;
  for (int i = 0; i < 30000; ++i) text += i % 3 == 0 ? "he" : "e";
  const ids flat = with_regex("[he]+")->encode(text);
  EXPECT_EQ(with_regex("(?:e|he)+")->encode(text), flat);
  EXPECT_LT(flat.size(), text.size());
}

// ---- load errors --------------------------------------------------------------------------------

TEST(tokenizer, load_errors_name_the_file_and_the_problem) {
  temp_dir dir;
  const fs::path missing = dir.path() / "nothing.json";
  EXPECT_NE(load_error(missing).find(missing.string() + ": does not exist"), std::string::npos) << load_error(missing);

  const fs::path bad = dir.write("bad.json", "{\"model\": ");
  EXPECT_NE(load_error(bad).find(bad.string() + ": is not valid JSON"), std::string::npos) << load_error(bad);

  json tiny = test::read_json(test::data_dir() / "vectors" / "clef-omni-tiny" / "release" / "tokenizer.json");
  const auto variant = [&](const std::string& name, auto&& edit) {
    json j = tiny;
    edit(j);
    return load_error(dir.write(name, j.dump()));
  };
  const std::pair<std::string, std::string> cases[] = {
      {variant("wordpiece.json", [](json& j) { j["model"]["type"] = "WordPiece"; }), "model type WordPiece is not supported"},
      {variant("nfkc.json", [](json& j) { j["normalizer"]["type"] = "NFKC"; }), "normalizer NFKC is not supported"},
      {variant("prefix.json", [](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }),
       "ByteLevel add_prefix_space=true"},
      {variant("gpt2.json", [](json& j) { j["pre_tokenizer"] = json{{"type", "ByteLevel"}, {"use_regex", true}}; }),
       "pre_tokenizer is not supported: type ByteLevel"},
      {variant("contiguous.json", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext"; }),
       "Split behavior \"MergedWithNext\""},
      {variant("dropout.json", [](json& j) { j["model"]["dropout"] = 0.1; }), "model.dropout 0.1"},
      {variant("regex.json", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; }),
       "the split regex does not compile"},
      {variant("merge.json", [](json& j) { j["model"]["merges"].push_back("Ġ zz"); }), "merge 76 (\"Ġ\", \"zz\"): \"zz\" is not in the vocabulary"},
      {variant("merged.json", [](json& j) { j["model"]["merges"].push_back("z z"); }), "merge 76 (\"z\", \"z\"): the merged token is not in the vocabulary"},
      {variant("bytes.json", [](json& j) { j["model"]["vocab"].erase("a"); }), "no token for byte 0x61"},
      {variant("no_model.json", [](json& j) { j.erase("model"); }), "unexpected JSON"},
  };
  for (const auto& [error, expected] : cases) {
    EXPECT_NE(error.find(expected), std::string::npos) << "got: " << error << "\nwanted: " << expected;
    EXPECT_NE(error.find(dir.path().string()), std::string::npos) << error;
  }

  // A directory without tokenizer.json needs vocab.json.
  EXPECT_NE(load_error(dir.path()).find((dir.path() / "vocab.json").string() + ": does not exist"), std::string::npos)
      << load_error(dir.path());
}

}  // namespace
}  // namespace baton
