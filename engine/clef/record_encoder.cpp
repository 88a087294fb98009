#include "engine/clef/record_encoder.hpp"

#include "core/error_codes.hpp"
#include "engine/clef/schema_cost.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace baton::clef {

namespace {

constexpr std::string_view schema_header = "\n\nSCHEMA FIELDS:\n";
constexpr std::string_view options_header = "\nALLOWED OPTIONS:\n";
constexpr std::string_view field_end = "END FIELD\n";

json question_loc(const std::string& id) { return json::array({"body", "questions", id}); }

error no_questions() {
  issue i{json::array({"body", "questions"}), "Dictionary should have at least 1 item after validation, not 0",
          "too_short", json{{"field_type", "Dictionary"}, {"min_length", 1}, {"actual_length", 0}}};
  return make_error(422, codes::invalid_request, {std::move(i)});
}

// The reference indexes choice criteria as a dict and score criteria as a list and refuses empty
// ones; a request that skipped validation must not reach those accessors with anything else.
bool criteria_ok(const question& q, std::vector<issue>& issues) {
  const bool ok = q.type == question_type::choice  ? q.criteria.is_object() && !q.criteria.empty()
                  : q.type == question_type::score ? q.criteria.is_array() && !q.criteria.empty()
                                                   : true;
  if (!ok) {
    json loc = question_loc(q.id);
    loc.push_back(to_string(q.type));
    loc.push_back("criteria");
    const bool choice = q.type == question_type::choice;
    issues.push_back(issue{std::move(loc),
                           choice ? "choice criteria must be a non-empty object"
                                  : "score criteria must be a non-empty list",
                           choice ? "dict_type" : "list_type", json{}});
  }
  return ok;
}

issue empty_question_span(const std::string& id) {
  json loc = question_loc(id);
  loc.push_back("instructions");
  return issue{std::move(loc),
               "the question text (its instructions, or its id when instructions are empty) has no tokens",
               "empty_question_span", json{}};
}

error input_too_long(std::size_t fixed, std::size_t max_length) {
  std::string msg = "schema requires " + std::to_string(fixed) + " tokens before state; maximum is " +
                    std::to_string(max_length);
  issue i{json::array({"body"}), std::move(msg), "input_too_long",
          json{{"max_tokens", max_length}, {"tokens", fixed}}};
  return make_error(422, codes::input_too_long, {std::move(i)});
}

// Request option indexes in encoded order (§2.3): choice keys sorted by code point, which is
// the byte order of their UTF-8; noul and score keep request order.
void option_order(const question& q, std::vector<std::uint32_t>& order) {
  order.resize(q.option_count());
  std::iota(order.begin(), order.end(), 0u);
  if (q.type == question_type::choice)
    std::sort(order.begin(), order.end(),
              [&](std::uint32_t a, std::uint32_t b) { return q.choice_label(a) < q.choice_label(b); });
}

// json.dumps({"option_id": id, "description": d}, sort_keys=True): "description" sorts first and
// is left out when d is null.
void append_option_json(std::string_view id, const json& description, std::string& out) {
  out += '{';
  if (!description.is_null()) {
    out += "\"description\":";
    render_json(description, out, true);
    out += ',';
  }
  out += "\"option_id\":";
  render_string(id, out);
  out += '}';
}

}  // namespace

void byte_tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  out.insert(out.end(), bytes, bytes + text.size());
}

result<encoded_record> encode_record(const request& r, const piece_tokenizer& tok,
                                     const encode_options& options) {
  if (r.questions.empty()) return no_questions();
  // Spans are int32: a window within that range keeps every index representable.
  const std::size_t max_length =
      std::min<std::size_t>(options.max_length, std::numeric_limits<std::int32_t>::max());

  encoded_record rec;
  std::vector<std::int32_t>& ids = rec.ids;
  tok.encode(prompt_prefix, ids);
  ids.insert(ids.end(), options.media_ids.begin(), options.media_ids.end());
  rec.prefix_tokens = ids.size();

  std::string text;  // one scratch buffer for every rendered piece
  // A string state is its own text: no copy of what may be the largest piece.
  tok.encode(state_text(r, text), ids);
  const std::size_t state_tokens = ids.size() - rec.prefix_tokens;

  // The schema and suffix go to their own buffer: how much state fits depends on their length.
  // Spans are relative to it until the kept state length is known.
  std::vector<std::int32_t> schema;
  auto piece = [&](std::string_view s) {
    const auto begin = static_cast<std::int32_t>(schema.size());
    tok.encode(s, schema);
    return span{begin, static_cast<std::int32_t>(schema.size())};
  };

  std::vector<issue> issues;
  rec.questions.reserve(r.questions.size());
  piece(schema_header);
  for (std::size_t k = 0; k < r.questions.size(); ++k) {
    const question& q = r.questions[k];
    if (!criteria_ok(q, issues)) continue;
    encoded_question& eq = rec.questions.emplace_back();
    eq.id = q.id;
    eq.type = q.type;

    text.assign("\nFIELD ");
    text += std::to_string(k + 1);
    text += "\nID: ";
    text += q.id;
    text += "\nTYPE: ";
    text += to_string(q.type);
    text += "\nINSTRUCTION: ";
    piece(text);
    text.clear();
    append_instruction_text(q, text);
    eq.question = piece(text);
    if (eq.question.size() == 0) issues.push_back(empty_question_span(q.id));
    piece(options_header);

    option_order(q, eq.request_option);
    const std::vector<std::uint32_t>& order = eq.request_option;
    eq.options.reserve(order.size());
    eq.option_ids.reserve(order.size());
    for (std::size_t j = 0; j < order.size(); ++j) {
      text.assign("OPTION ");
      text += std::to_string(j + 1);
      text += ": ";
      piece(text);
      std::string& id = eq.option_ids.emplace_back(q.option_id(order[j]));
      text.clear();
      append_option_json(id, q.option_description(order[j]), text);
      eq.options.push_back(piece(text));
      piece("\n");
    }
    piece(field_end);
  }
  piece(prompt_suffix);
  if (!issues.empty()) return make_error(422, codes::invalid_request, std::move(issues));

  const std::size_t fixed = rec.prefix_tokens + schema.size();
  if (fixed > max_length) return input_too_long(fixed, max_length);

  // Only the state is cut, from its end; the reference does it silently, baton reports it.
  rec.state_kept = std::min(state_tokens, max_length - fixed);
  rec.state_dropped = state_tokens - rec.state_kept;
  ids.resize(rec.prefix_tokens + rec.state_kept);
  ids.insert(ids.end(), schema.begin(), schema.end());

  const auto offset = static_cast<std::int32_t>(rec.prefix_tokens + rec.state_kept);
  for (encoded_question& eq : rec.questions) {
    eq.question.begin += offset;
    eq.question.end += offset;
    for (span& s : eq.options) {
      s.begin += offset;
      s.end += offset;
    }
  }
  return rec;
}

std::size_t schema_cost::schema() const noexcept {
  std::size_t n = frame;
  for (const std::size_t q : questions) n += q;
  return n;
}

result<schema_cost> measure_schema(const request& r, const piece_tokenizer& tok) {
  schema_cost c;
  std::vector<std::int32_t> ids;
  tok.encode(prompt_prefix, ids);
  tok.encode(prompt_suffix, ids);
  c.prompt = ids.size();
  ids.clear();
  tok.encode(schema_header, ids);
  c.frame = ids.size();
  // Each piece is tokenized on its own, so a question's field is what it adds after those before
  // it (its number included) to a record with an empty state.
  request part;
  part.state = "";
  encode_options whole;
  whole.max_length = std::numeric_limits<std::size_t>::max();
  std::size_t before = c.prompt + c.frame;
  for (const question& q : r.questions) {
    part.questions.push_back(q);
    auto encoded = encode_record(part, tok, whole);
    if (!encoded) return encoded.error();
    c.questions.push_back(encoded->ids.size() - before);
    before = encoded->ids.size();
  }
  return c;
}

}  // namespace baton::clef
