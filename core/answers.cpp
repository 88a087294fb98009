#include "core/answers.hpp"

#include "core/error_codes.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace baton {

std::optional<confidence_metric> parse_confidence_metric(std::string_view name) noexcept {
  if (name == "p_max") return confidence_metric::p_max;
  if (name == "margin") return confidence_metric::margin;
  return std::nullopt;
}

std::string_view to_string(confidence_metric m) noexcept {
  return m == confidence_metric::p_max ? "p_max" : "margin";
}

namespace {

std::size_t argmax(std::span<const double> p) noexcept {
  std::size_t best = 0;
  for (std::size_t i = 1; i < p.size(); ++i)
    if (p[i] > p[best]) best = i;
  return best;
}

}  // namespace

double choice_confidence(std::span<const double> p, confidence_metric m) noexcept {
  if (p.empty()) return 0;
  const double pmax = p[argmax(p)];
  if (m == confidence_metric::p_max) return pmax;
  const auto n = static_cast<double>(p.size());
  if (p.size() < 2) return 1.0;
  return std::clamp((n * pmax - 1.0) / (n - 1.0), 0.0, 1.0);
}

double score_confidence(std::span<const double> p, confidence_metric m) noexcept {
  if (p.empty()) return 0;
  const std::size_t mode = argmax(p);
  if (m == confidence_metric::p_max) return p[mode];
  if (p.size() < 2) return 1.0;
  const auto n = static_cast<double>(p.size());
  const double centre = (n - 1.0) / 2.0;
  double spread = 0;  // mean distance of a uniform distribution from the centre
  double distance = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    spread += std::abs(static_cast<double>(i) - centre);
    distance += p[i] * std::abs(static_cast<double>(i) - static_cast<double>(mode));
  }
  spread /= n;
  return std::max(0.0, 1.0 - distance / spread);
}

std::vector<double> softmax(std::span<const float> logits) {
  std::vector<double> out(logits.size());
  if (logits.empty()) return out;
  const float top = *std::max_element(logits.begin(), logits.end());
  float sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float e = std::exp(logits[i] - top);
    out[i] = e;  // a float held exactly in a double until the sum is known
    sum += e;
  }
  for (double& p : out) p = static_cast<double>(static_cast<float>(p) / sum);
  return out;
}

result<response> make_response(const request& req, const decision& d, confidence_metric metric,
                                std::string model) {
  auto failed = [](std::string why) { return make_error(500, codes::inference_failed, std::move(why)); };
  if (d.probabilities.size() != req.questions.size())
    return failed("the engine answered " + std::to_string(d.probabilities.size()) + " questions of " +
                  std::to_string(req.questions.size()));
  response r;
  r.model = std::move(model);
  r.usage.input_tokens = d.input_tokens;
  r.usage.output_tokens = 0;
  r.usage.state_truncated = d.state_truncated;
  r.usage.cached_tokens = d.cached_tokens;
  r.answers.reserve(req.questions.size());
  for (std::size_t qi = 0; qi < req.questions.size(); ++qi) {
    const question& q = req.questions[qi];
    const std::vector<double>& p = d.probabilities[qi];
    if (p.size() != q.option_count())
      return failed("the engine gave " + std::to_string(p.size()) + " probabilities for the " +
                    std::to_string(q.option_count()) + " options of question " + q.id);
    for (double x : p)
      if (!(x >= 0.0 && x <= 1.0)) return failed("the engine gave a value that is not a probability for question " + q.id);

    probability_list named;
    if (q.type != question_type::noul) {
      named.reserve(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) named.emplace_back(q.option_id(i), p[i]);
    }
    switch (q.type) {
      case question_type::noul:
        r.answers.emplace_back(q.id, noul_answer{p[0]});
        break;
      case question_type::choice: {
        choice_answer a;
        a.choice = named[argmax(p)].first;
        a.confidence = choice_confidence(p, metric);
        a.probabilities = std::move(named);
        r.answers.emplace_back(q.id, std::move(a));
        break;
      }
      case question_type::score: {
        score_answer a;
        for (std::size_t i = 0; i < p.size(); ++i) a.score += static_cast<double>(i) * p[i];
        a.confidence = score_confidence(p, metric);
        a.legend.reserve(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) a.legend.emplace_back(named[i].first, q.criteria[i]);
        a.probabilities = std::move(named);
        r.answers.emplace_back(q.id, std::move(a));
        break;
      }
    }
  }
  return r;
}

namespace {

void put_number(double v, int decimals, std::string& out) {
  if (decimals < 0) {
    render_double(v, out);
  } else {
    render_rounded(v, decimals, out);
  }
}

void put_probabilities(const probability_list& p, int decimals, std::string& out) {
  out.push_back('{');
  bool first = true;
  for (const auto& [id, v] : p) {
    if (!first) out.push_back(',');
    first = false;
    render_string(id, out);
    out.push_back(':');
    put_number(v, decimals, out);
  }
  out.push_back('}');
}

struct answer_writer {
  std::string& out;
  int decimals;

  void operator()(const noul_answer& a) const {
    out += "{\"type\":\"noul\",\"noul\":";
    put_number(a.noul, decimals, out);
    out.push_back('}');
  }
  void operator()(const choice_answer& a) const {
    out += "{\"type\":\"choice\",\"choice\":";
    render_string(a.choice, out);
    out += ",\"confidence\":";
    put_number(a.confidence, decimals, out);
    out += ",\"probabilities\":";
    put_probabilities(a.probabilities, decimals, out);
    out.push_back('}');
  }
  void operator()(const score_answer& a) const {
    out += "{\"type\":\"score\",\"score\":";
    put_number(a.score, decimals, out);
    out += ",\"confidence\":";
    put_number(a.confidence, decimals, out);
    out += ",\"legend\":{";
    bool first = true;
    for (const auto& [k, v] : a.legend) {
      if (!first) out.push_back(',');
      first = false;
      render_string(k, out);
      out.push_back(':');
      render_json(v, out, false);
    }
    out += "},\"probabilities\":";
    put_probabilities(a.probabilities, decimals, out);
    out.push_back('}');
  }
};

}  // namespace

void render_answers(const response& r, std::string& out, int decimals) {
  out.push_back('{');
  bool first = true;
  for (const auto& [id, a] : r.answers) {
    if (!first) out.push_back(',');
    first = false;
    render_string(id, out);
    out.push_back(':');
    std::visit(answer_writer{out, decimals}, a);
  }
  out.push_back('}');
}

void render_response(const response& r, std::string& out, int decimals) {
  out += "{\"model\":";
  render_string(r.model, out);
  out += ",\"answers\":";
  render_answers(r, out, decimals);
  out += ",\"usage\":{\"input_tokens\":";
  out += std::to_string(r.usage.input_tokens);
  out += ",\"output_tokens\":";
  out += std::to_string(r.usage.output_tokens);
  if (r.usage.state_truncated) {
    out += ",\"state_truncated\":";
    out += *r.usage.state_truncated ? "true" : "false";
  }
  if (r.usage.cached_tokens) {
    out += ",\"cached_tokens\":";
    out += std::to_string(*r.usage.cached_tokens);
  }
  out += "}}";
}

const answer* find_answer(const response& r, std::string_view id) {
  for (const auto& [qid, a] : r.answers) {
    if (qid == id) return &a;
  }
  return nullptr;
}

std::string render_response(const response& r, int decimals) {
  std::string out;
  render_response(r, out, decimals);
  return out;
}

namespace {

struct response_reader {
  std::string problem;

  bool fail(std::string what) {
    problem = std::move(what);
    return false;
  }

  bool number(const json& obj, const char* key, const std::string& where, double& out) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number() || it->is_boolean())
      return fail(where + "." + key + " is missing or not a number");
    out = it->get<double>();
    return true;
  }

  static bool integer_key(const std::string& k) {
    int v = 0;
    auto [p, ec] = std::from_chars(k.data(), k.data() + k.size(), v);
    return ec == std::errc() && p == k.data() + k.size();
  }

  bool probabilities(const json& obj, const std::string& where, bool integer_keys, probability_list& out) {
    auto it = obj.find("probabilities");
    if (it == obj.end() || !it->is_object()) return fail(where + ".probabilities is missing or not an object");
    for (const auto& [k, v] : it->items()) {
      if (!v.is_number() || v.is_boolean()) return fail(where + ".probabilities." + k + " is not a number");
      if (integer_keys && !integer_key(k)) return fail(where + ".probabilities key " + k + " is not a level number");
      out.emplace_back(k, v.get<double>());
    }
    return true;
  }

  bool read_answer(const std::string& id, const json& a, answer& out) {
    const std::string where = "answers." + id;
    if (!a.is_object()) return fail(where + " is not an object");
    auto type = a.find("type");
    if (type == a.end() || !type->is_string()) return fail(where + ".type is missing");
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "noul") {
      noul_answer n;
      if (!number(a, "noul", where, n.noul)) return false;
      out = n;
    } else if (t == "choice") {
      choice_answer c;
      auto ch = a.find("choice");
      if (ch == a.end() || !ch->is_string()) return fail(where + ".choice is missing or not a string");
      c.choice = ch->get<std::string>();
      if (!number(a, "confidence", where, c.confidence) || !probabilities(a, where, false, c.probabilities))
        return false;
      out = std::move(c);
    } else if (t == "score") {
      score_answer s;
      if (!number(a, "score", where, s.score) || !number(a, "confidence", where, s.confidence) ||
          !probabilities(a, where, true, s.probabilities))
        return false;
      auto legend = a.find("legend");
      if (legend == a.end() || !legend->is_object()) return fail(where + ".legend is missing or not an object");
      for (const auto& [k, v] : legend->items()) {
        if (!integer_key(k)) return fail(where + ".legend key " + k + " is not a level number");
        s.legend.emplace_back(k, v);
      }
      out = std::move(s);
    } else {
      return fail(where + ".type '" + t + "' is not noul, choice or score");
    }
    return true;
  }

  bool integer(const json& obj, const char* key, std::int64_t& out) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number_integer()) return fail(std::string("usage.") + key + " is missing or not an integer");
    out = it->get<std::int64_t>();
    return true;
  }

  bool read(const json& body, response& r) {
    if (!body.is_object()) return fail("the body is not an object");
    auto model = body.find("model");
    if (model == body.end() || !model->is_string()) return fail("model is missing or not a string");
    r.model = model->get<std::string>();
    auto answers = body.find("answers");
    if (answers == body.end() || !answers->is_object()) return fail("answers is missing or not an object");
    for (const auto& [id, a] : answers->items()) {
      answer out;
      if (!read_answer(id, a, out)) return false;
      r.answers.emplace_back(id, std::move(out));
    }
    auto u = body.find("usage");
    if (u == body.end() || !u->is_object()) return fail("usage is missing or not an object");
    if (!integer(*u, "input_tokens", r.usage.input_tokens) || !integer(*u, "output_tokens", r.usage.output_tokens))
      return false;
    if (auto st = u->find("state_truncated"); st != u->end()) {
      if (!st->is_boolean()) return fail("usage.state_truncated is not a boolean");
      r.usage.state_truncated = st->get<bool>();
    }
    if (auto ct = u->find("cached_tokens"); ct != u->end()) {
      if (!ct->is_number_integer() || ct->get<std::int64_t>() < 0) return fail("usage.cached_tokens is not a count");
      r.usage.cached_tokens = ct->get<std::int64_t>();
    }
    return true;
  }
};

}  // namespace

result<response> response_from_json(const json& body) {
  response r;
  response_reader reader;
  if (!reader.read(body, r))
    return make_error(502, codes::bad_upstream_response, "not a SystemOne response: " + reader.problem);
  return r;
}

}  // namespace baton
