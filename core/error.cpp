#include "core/error.hpp"

#include "core/error_codes.hpp"

namespace baton {

std::string issues_message(const std::vector<issue>& detail) {
  std::string out;
  for (const issue& i : detail) {
    if (!out.empty()) out += "; ";
    std::string where;
    for (std::size_t k = 0; k < i.loc.size(); ++k) {
      const json& part = i.loc[k];
      if (k == 0 && part == "body") continue;
      if (!where.empty()) where += '.';
      where += part.is_string() ? part.get<std::string>() : render_json(part, false);
    }
    out += where.empty() ? i.msg : where + ": " + i.msg;
  }
  return out;
}

error make_error(int status, std::string code, std::vector<issue> detail) {
  error e;
  e.status = status;
  e.code = std::move(code);
  e.message = issues_message(detail);
  e.detail = std::move(detail);
  return e;
}

error make_error(int status, std::string code, std::string message) {
  error e;
  e.status = status;
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

void render_error(const error& e, std::string& out) {
  out += "{\"error\":";
  render_string(e.message, out);
  out += ",\"code\":";
  render_string(e.code, out);
  out += ",\"detail\":[";
  bool first = true;
  for (const issue& i : e.detail) {
    if (!first) out.push_back(',');
    first = false;
    out += "{\"loc\":";
    render_json(i.loc, out, false);
    out += ",\"msg\":";
    render_string(i.msg, out);
    out += ",\"type\":";
    render_string(i.type, out);
    if (!i.ctx.is_null()) {
      out += ",\"ctx\":";
      render_json(i.ctx, out, false);
    }
    out.push_back('}');
  }
  out += "]}";
}

std::string render_error(const error& e) {
  std::string out;
  render_error(e, out);
  return out;
}

result<error> error_from_json(const json& body, int status) {
  // T and E are both `error` here, so each return says which one it is.
  auto bad = [](std::string what) {
    return result<error>(boost::system::in_place_error,
                         make_error(502, codes::bad_upstream_response, "error body: " + std::move(what)));
  };
  if (!body.is_object()) return bad("not an object");
  const auto msg = body.find("error");
  const auto code = body.find("code");
  if (msg == body.end() || !msg->is_string()) return bad("\"error\" is not a string");
  if (code == body.end() || !code->is_string()) return bad("\"code\" is not a string");
  error e;
  e.status = status;
  e.message = msg->get<std::string>();
  e.code = code->get<std::string>();
  if (const auto d = body.find("detail"); d != body.end() && !d->is_null()) {
    if (!d->is_array()) return bad("\"detail\" is not a list");
    for (const json& item : *d) {
      if (!item.is_object()) return bad("a \"detail\" item is not an object");
      issue i;
      const auto loc = item.find("loc");
      const auto m = item.find("msg");
      const auto t = item.find("type");
      if (loc == item.end() || !loc->is_array()) return bad("\"detail[].loc\" is not a list");
      if (m == item.end() || !m->is_string()) return bad("\"detail[].msg\" is not a string");
      if (t == item.end() || !t->is_string()) return bad("\"detail[].type\" is not a string");
      i.loc = *loc;
      i.msg = m->get<std::string>();
      i.type = t->get<std::string>();
      if (const auto c = item.find("ctx"); c != item.end()) i.ctx = *c;
      e.detail.push_back(std::move(i));
    }
  }
  return result<error>(boost::system::in_place_value, std::move(e));
}

error_exception::error_exception(error e) : std::runtime_error(e.message), error_(std::move(e)) {}

void throw_exception_from_error(const error& e, const boost::source_location&) {
  throw error_exception(e);
}

}  // namespace baton
