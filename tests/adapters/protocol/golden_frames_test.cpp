// The golden frames: every ```json block of docs/protocol.md and docs/escalations.md is a frame or a
// wire object that adapters/protocol reads and renders back to the same JSON (the same text, once
// the doc's layout whitespace is taken out). A block no module reads fails, unless it is one of
// the few listed below as no frame at all.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <sstream>

#include "adapters/protocol/agent_protocol.hpp"
#include "adapters/protocol/review_protocol.hpp"
#include "support/protocol_readback.hpp"
#include "support/files.hpp"

namespace baton {
namespace {

using namespace protocol;

struct doc_block {
  std::string section;  // the heading it is under
  int line = 0;         // its first line in the file, 1-based
  std::string text;
};

// The ```json blocks, also those indented in a list item.
std::vector<doc_block> json_blocks(const std::string& markdown) {
  std::vector<doc_block> out;
  std::istringstream in(markdown);
  std::string line, section;
  int number = 0;
  enum { prose, json_fence, other_fence } state = prose;
  std::size_t indent = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::size_t first = line.find_first_not_of(' ');
    const std::string trimmed = first == std::string::npos ? "" : line.substr(first);
    if (state == prose) {
      if (line.starts_with("#")) section = line.substr(line.find(' ') + 1);
      if (trimmed == "```json") {
        state = json_fence;
        indent = first;
        out.push_back({section, number + 1, ""});
      } else if (trimmed.starts_with("```")) {
        state = other_fence;
      }
    } else if (trimmed == "```") {
      state = prose;
    } else if (state == json_fence) {
      out.back().text += line.substr(std::min(indent, first == std::string::npos ? line.size() : first)) + "\n";
    }
  }
  EXPECT_EQ(state, prose) << "a fence is not closed";
  return out;
}

// The JSON text without the whitespace between tokens.
std::string minified(const std::string& text) {
  std::string out;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      continue;
    }
    out += c;
  }
  return out;
}

template <class frame_variant>
std::string render_any(const frame_variant& f) {
  return std::visit([](const auto& x) { return render(x); }, f);
}

template <class T>
result<std::string> rendered(const result<T>& r) {
  if (!r) return r.error();
  return render(*r);
}

// Where two texts part, for a message that a reader can act on.
std::string first_difference(const std::string& got, const std::string& want) {
  std::size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  const std::size_t from = at < 40 ? 0 : at - 40;
  return "from byte " + std::to_string(at) + ": …" + got.substr(from, 80) + "… where the doc has …" +
         want.substr(from, 80) + "…";
}

// One way to read a block: what it is, whether it may be one, and the round trip.
struct reader {
  std::string kind;
  std::function<bool(const json&)> applies;
  std::function<result<std::string>(const std::string& text, const json& doc)> round_trip;
};

bool typed(const json& doc, std::initializer_list<const char*> types) {
  const auto t = doc.find("type");
  if (t == doc.end() || !t->is_string()) return false;
  for (const char* type : types) {
    if (*t == type) return true;
  }
  return false;
}

bool id_prefixed(const json& doc, const char* prefix) {
  const auto id = doc.find("id");
  return !doc.contains("type") && id != doc.end() && id->is_string() && id->get<std::string>().starts_with(prefix);
}

const std::vector<reader>& readers() {
  static const std::vector<reader> all = {
      {"agent client frame",
       [](const json& d) { return typed(d, {"decide", "tool_result", "resume", "ack", "end"}); },
       [](const std::string& text, const json&) -> result<std::string> {
         json id;
         auto f = parse_frame(text, request_limits{}, id);
         if (!f) return f.error();
         return std::visit([&](const auto& x) { return render(x, id); }, *f);
       }},
      {"agent server frame",
       [](const json& d) { return typed(d, {"decision", "tool_result", "resumed", "ack", "resolution"}); },
       [](const std::string& text, const json&) -> result<std::string> {
         auto f = parse_server_frame(text);
         if (!f) return f.error();
         return render_any(*f);
       }},
      {"error frame", [](const json& d) { return typed(d, {"error"}); },
       [](const std::string&, const json& doc) { return rendered(parse_error_frame(doc)); }},
      {"review client frame", [](const json& d) { return typed(d, {"resolve"}); },
       [](const std::string& text, const json&) -> result<std::string> {
         json id;
         auto f = parse_review_frame(text, id);
         if (!f) return f.error();
         return render(*f, id);
       }},
      {"review server frame",
       [](const json& d) { return typed(d, {"snapshot", "escalation", "resolved", "tool_run", "resolve_result"}); },
       [](const std::string& text, const json&) -> result<std::string> {
         auto f = parse_review_server_frame(text);
         if (!f) return f.error();
         return render_any(*f);
       }},
      // Objects carry no type: baton's ids say what they are (e- escalation, v- resolution, r- run).
      {"escalation object", [](const json& d) { return id_prefixed(d, "e-"); },
       [](const std::string&, const json& doc) { return rendered(parse_escalation(doc)); }},
      {"resolution object", [](const json& d) { return id_prefixed(d, "v-"); },
       [](const std::string&, const json& doc) { return rendered(parse_resolution(doc)); }},
      {"tool run object", [](const json& d) { return id_prefixed(d, "r-"); },
       [](const std::string&, const json& doc) { return rendered(parse_tool_run(doc)); }},
      {"escalation list", [](const json& d) { return d.size() == 1 && d.contains("escalations"); },
       [](const std::string&, const json& doc) { return rendered(parse_escalation_list(doc)); }},
      {"tools list", [](const json& d) { return d.contains("tools") && d.contains("registry_hash"); },
       [](const std::string&, const json& doc) { return rendered(parse_tools_list(doc)); }},
  };
  return all;
}

// Blocks that are no frame of either protocol, by the heading they are under, and why.
const std::map<std::string, std::string>& exceptions() {
  static const std::map<std::string, std::string> all = {
      {"`GET /health`", "an HTTP body of the server's state (agent_service::health_json), no frame or reviewer body"},
  };
  return all;
}

// What a block is ("agent server frame decision", "exception: …"), or its problems.
struct verdict {
  std::string kind;
  std::vector<std::string> problems;
};

verdict check(const doc_block& b) {
  verdict v;
  json doc;
  json_parse_error err;
  if (!parse_json(b.text, doc, err, json_parse_options{})) {
    v.problems.push_back("not JSON: " + err.message + " at byte " + std::to_string(err.byte));
    return v;
  }
  std::vector<std::string> tried;
  std::optional<std::string> text;
  for (const reader& r : readers()) {
    if (!doc.is_object() || !r.applies(doc)) continue;
    auto back = r.round_trip(b.text, doc);
    if (!back) {
      tried.push_back(r.kind + ": " + back.error().code + " " + back.error().message);
      continue;
    }
    if (text) {
      v.problems.push_back("read as " + v.kind + " and as " + r.kind);
      return v;
    }
    const auto type = doc.find("type");
    v.kind = r.kind;
    if (type != doc.end() && type->is_string()) v.kind.append(" ").append(type->get_ref<const std::string&>());
    text = *back;
  }
  if (!text) {
    if (const auto e = exceptions().find(b.section); e != exceptions().end()) {
      v.kind = "exception: " + e->second;
      return v;
    }
    v.problems.push_back("no module of adapters/protocol reads it" + std::string(tried.empty() ? "" : ":"));
    for (const std::string& t : tried) v.problems.push_back("  " + t);
    return v;
  }
  // The same JSON: keys in the same order, numbers spelled as Python spells them.
  json back;
  if (!parse_json(*text, back, err, json_parse_options{})) {
    v.problems.push_back("the render is not JSON: " + *text);
    return v;
  }
  if (back != doc || render_json(back, false) != render_json(doc, false)) {
    v.problems.push_back("rendered back otherwise, " + first_difference(*text, render_json(doc, false)));
    return v;
  }
  // Written as baton writes it (but for the layout): the text itself.
  const std::string doc_text = minified(b.text);
  if (doc_text == render_json(doc, false) && *text != doc_text) {
    v.problems.push_back("rendered back as another text, " + first_difference(*text, doc_text));
  }
  return v;
}

// Checks every block of one doc; returns the kinds in doc order.
std::vector<std::string> check_doc(const std::string& relative) {
  std::vector<std::string> kinds;
  for (const doc_block& b : json_blocks(test::read_file(test::source_dir() / relative))) {
    const verdict v = check(b);
    for (const std::string& p : v.problems) ADD_FAILURE() << relative << ":" << b.line << " (" << b.section << "): " << p;
    kinds.push_back(v.kind);
  }
  return kinds;
}

TEST(golden_frames, protocol_md) {
  const std::vector<std::string> expected = {
      "agent client frame decide",
      "agent client frame decide",  // with an image (Media in events)
      "agent client frame tool_result",
      "agent client frame resume",
      "agent client frame ack",
      "agent client frame end",
      "agent server frame decision",
      "agent server frame tool_result",
      "agent server frame resolution",
      "error frame error",
      "exception: " + exceptions().at("`GET /health`"),
  };
  EXPECT_EQ(check_doc("docs/protocol.md"), expected) << "a new example needs a decision on how it is checked";
}

TEST(golden_frames, escalations_md) {
  const std::vector<std::string> expected = {"escalation object", "resolution object", "tool run object"};
  EXPECT_EQ(check_doc("docs/escalations.md"), expected) << "a new example needs a decision on how it is checked";
}

// The check itself: a doc example of a shape no module renders fails it.
TEST(golden_frames, an_undocumented_shape_fails) {
  const auto problems = [](const std::string& markdown) {
    const auto blocks = json_blocks(markdown);
    EXPECT_EQ(blocks.size(), 1u);
    return blocks.empty() ? std::vector<std::string>() : check(blocks[0]).problems;
  };
  // Passes: a frame as baton writes it, indented in a list item.
  EXPECT_EQ(problems("## A\n\n- x:\n\n  ```json\n  {\"type\": \"ack\", \"ref\": 1,\n   \"decision\": \"d-1\"}\n  ```\n"),
            std::vector<std::string>());
  // A placeholder, a key the frame does not have, keys in another order, 1 for 1.0, no module.
  EXPECT_EQ(problems("```json\n{\"type\": \"ack\", \"ref\": 1, \"decision\": \"d-…\"…}\n```\n").size(), 1u);
  EXPECT_EQ(problems("```json\n{\"type\": \"ack\", \"ref\": 1, \"decision\": \"d-1\", \"ok\": true}\n```\n").size(), 1u);
  EXPECT_EQ(problems("```json\n{\"type\": \"ack\", \"decision\": \"d-1\", \"ref\": 1}\n```\n").size(), 1u);
  EXPECT_EQ(problems("```json\n{\"type\": \"resumed\", \"ref\": 1, \"session\": \"s\", \"pending\": [], \"resolutions\": 1.0}\n```\n")
                .size(),
            2u);
  EXPECT_FALSE(problems("```json\n{\"type\": \"pong\"}\n```\n").empty());
  EXPECT_FALSE(problems("## `GET /metrics`\n```json\n{\"up\": 1}\n```\n").empty());
  // The listed exception, by its heading.
  EXPECT_EQ(problems("## `GET /health`\n```json\n{\"status\": \"ok\"}\n```\n"), std::vector<std::string>());
}

}  // namespace
}  // namespace baton
