#include "tools/schema_compiler.hpp"

#include "core/sha256.hpp"

namespace baton::tools {

result<request> compile_questions(const registry& r, const request_limits& limits, const json& extra_questions) {
  json tools = json::object();
  for (const tool& t : r.tools) tools[t.id] = t.description;
  if (r.finish) tools[finish_option] = *r.finish;

  json questions = json::object();
  questions[tool_question_id] = {
      {"type", "choice"}, {"instructions", "Which tool should the agent call next?"}, {"criteria", std::move(tools)}};
  for (const tool& t : r.tools) {
    for (const parameter& p : t.parameters) {
      if (p.type == parameter_type::choice) {
        questions[parameter_question_id(t, p)] = {
            {"type", "choice"}, {"instructions", p.instructions}, {"criteria", p.values}};
      } else if (p.type == parameter_type::boolean) {
        questions[parameter_question_id(t, p)] = {{"type", "noul"}, {"instructions", p.instructions}};
      }
    }
  }
  for (const auto& [id, q] : r.questions.items()) questions[id] = q;
  if (extra_questions.is_object()) {
    for (const auto& [id, q] : extra_questions.items()) {
      if (questions.contains(id)) {
        return make_error(422, "QUESTION_CONFLICT",
                          "question `" + id + "` is one the registry asks; give extra questions other ids");
      }
      questions[id] = q;
    }
  } else if (!extra_questions.is_null()) {
    return make_error(422, "INVALID_REQUEST", "questions: extra questions must be an object of id → question");
  }

  json body = json::object();
  body["state"] = json::array();
  body["questions"] = std::move(questions);
  return request_from_json(std::move(body), limits);
}

result<request> compile_schema(const registry& r, json history, const request_limits& limits,
                               const json& extra_questions) {
  if (!history.is_array()) {
    return make_error(422, "INVALID_HISTORY", "the history must be a JSON array of events");
  }
  auto req = compile_questions(r, limits, extra_questions);
  if (req) req->state = std::move(history);
  return req;
}

std::string schema_hash(const request& r) {
  json questions = json::array();
  for (const question& q : r.questions) {
    questions.push_back(json::array({q.id, to_string(q.type), q.instructions, q.criteria}));
  }
  return sha256_hex(render_json(questions, false));
}

}  // namespace baton::tools
