#include "tools/schema_compiler.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <set>

#include "core/error_codes.hpp"
#include "core/sha256.hpp"

namespace baton::tools {

namespace {

// The tool's choice and boolean parameters as questions "<tool_id>.<param>" (choice, noul).
void add_parameter_questions(const tool& t, json& questions) {
  for (const parameter& p : t.parameters) {
    if (p.type == parameter_type::choice) {
      questions[parameter_question_id(t, p)] = {{"type", "choice"}, {"instructions", p.instructions}, {"criteria", p.values}};
    } else if (p.type == parameter_type::boolean) {
      questions[parameter_question_id(t, p)] = {{"type", "noul"}, {"instructions", p.instructions}};
    }
  }
}

}  // namespace

result<request> compile_questions(const registry& r, const request_limits& limits, const json& extra_questions) {
  json tools = json::object();
  for (const tool& t : r.tools) tools[t.id] = t.description;
  if (r.finish) tools[finish_option] = *r.finish;

  json questions = json::object();
  questions[tool_question_id] = {
      {"type", "choice"}, {"instructions", "Which tool should the agent call next?"}, {"criteria", std::move(tools)}};
  for (const tool& t : r.tools) add_parameter_questions(t, questions);
  for (const auto& [id, q] : r.questions.items()) questions[id] = q;
  if (extra_questions.is_object()) {
    for (const auto& [id, q] : extra_questions.items()) {
      if (questions.contains(id)) {
        return make_error(422, codes::question_conflict,
                          "question `" + id + "` is one the registry asks; give extra questions other ids");
      }
      questions[id] = q;
    }
  } else if (!extra_questions.is_null()) {
    return make_error(422, codes::invalid_request, "questions: extra questions must be an object of id → question");
  }

  json body = json::object();
  body["state"] = json::array();
  body["questions"] = std::move(questions);
  return request_from_json(std::move(body), limits);
}

result<request> compile_schema(const registry& r, json history, const request_limits& limits,
                               const json& extra_questions) {
  if (!history.is_array()) {
    return make_error(422, codes::invalid_history, "the history must be a JSON array of events");
  }
  auto req = compile_questions(r, limits, extra_questions);
  if (req) req->state = std::move(history);
  return req;
}

std::string group_of(const tool& t) { return t.group.empty() ? "default" : t.group; }

std::optional<std::string> second_stage_group(const staged_questions& stages, const registry& r, const response& first,
                                              const std::string* called) {
  if (called) {
    const tool* t = find_tool(r, *called);
    if (!t) return std::nullopt;
    return group_of(*t);
  }
  const answer* a = find_answer(first, tool_question_id);
  const auto* choice = a ? std::get_if<choice_answer>(a) : nullptr;
  return choice && stages.members.contains(choice->choice) ? choice->choice : std::string();
}

bool routed_in_two_stages(const registry& r, std::size_t max_options, const request_limits& limits) {
  std::set<std::string> groups;
  for (const tool& t : r.tools) groups.insert(group_of(t));
  const std::size_t options = r.tools.size() + (r.finish ? 1 : 0);
  return groups.size() >= 2 && (options > max_options || !compile_questions(r, limits));
}

result<staged_questions> compile_stages(const registry& r, const request_limits& limits) {
  staged_questions s;
  for (const tool& t : r.tools) {
    const std::string g = group_of(t);
    auto& members = s.members[g];
    if (members.empty()) s.groups.push_back(g);
    members.push_back(t.id);
  }
  // The first stage: each group an option (its tools named, as far as a description should go).
  registry first;
  first.finish = r.finish;
  first.questions = r.questions;
  for (const std::string& g : s.groups) {
    if (g == finish_option) return make_error(422, codes::invalid_registry, "a group cannot be named `finish` (the finish option)");
    std::string description = "Tools of " + g + ":";
    for (const std::string& id : s.members[g]) {
      const tool& t = *find_tool(r, id);
      const std::string entry = " " + id + " (" + t.description + ");";
      if (description.size() + entry.size() > max_group_description) {
        description += " …";
        break;
      }
      description += entry;
    }
    tool& option = first.tools.emplace_back();
    option.id = g;
    option.description = std::move(description);
  }
  auto first_request = compile_questions(first, limits);
  if (!first_request) {
    return make_error(422, codes::invalid_registry, "the first stage (which group): " + first_request.error().message);
  }
  s.first = std::move(*first_request);
  s.first_registry = std::move(first);
  std::string hashes = schema_hash(s.first);
  for (const std::string& g : s.groups) {
    registry group;
    for (const std::string& id : s.members[g]) group.tools.push_back(*find_tool(r, id));
    result<request> second = make_error(500, codes::internal, "unset");
    if (group.tools.size() == 1) {
      // The tool is known: only its choice and boolean parameters are left to ask, when it has any.
      json questions = json::object();
      add_parameter_questions(group.tools.front(), questions);
      if (questions.empty()) continue;
      second = request_from_json(json{{"state", json::array()}, {"questions", std::move(questions)}}, limits);
    } else {
      second = compile_questions(group, limits);
    }
    if (!second) {
      return make_error(422, codes::invalid_registry, "the second stage of group `" + g + "`: " + second.error().message);
    }
    hashes += schema_hash(*second);
    s.second.emplace(g, std::move(*second));
  }
  s.schema_hash = sha256_hex(hashes);
  return s;
}

namespace {

// The probability `c` gives `option`; 0 when it has no such option (or there is no answer).
double probability_of(const choice_answer* c, std::string_view option) {
  if (!c) return 0;
  for (const auto& [o, p] : c->probabilities) {
    if (o == option) return p;
  }
  return 0;
}

}  // namespace

response merge_stages(const staged_questions& stages, const response& first, const std::string& group,
                      const response* second) {
  response out;
  out.model = first.model;
  const answer* a1 = find_answer(first, tool_question_id);
  const auto* c1 = a1 ? std::get_if<choice_answer>(a1) : nullptr;
  const answer* a2 = second ? find_answer(*second, tool_question_id) : nullptr;
  const auto* c2 = a2 ? std::get_if<choice_answer>(a2) : nullptr;
  choice_answer merged;
  if (group.empty()) {  // finish: the first stage's choice, its groups named as such
    if (c1) {
      merged = *c1;
      for (auto& [o, p] : merged.probabilities) {
        if (o != finish_option) o = std::string(group_option_prefix) + o;
      }
    }
  } else {
    const double pg = probability_of(c1, group);
    const std::vector<std::string>& members = stages.members.at(group);
    for (const std::string& id : members) merged.probabilities.emplace_back(id, pg * (c2 ? probability_of(c2, id) : 1.0));
    merged.choice = c2 ? c2->choice : members.front();
    for (const std::string& g : stages.groups) {
      if (g != group) merged.probabilities.emplace_back(std::string(group_option_prefix) + g, probability_of(c1, g));
    }
    if (c1) {
      for (const auto& [o, p] : c1->probabilities) {
        if (o == finish_option) merged.probabilities.emplace_back(o, p);
      }
    }
    merged.confidence = probability_of(&merged, merged.choice);
  }
  out.answers.emplace_back(tool_question_id, std::move(merged));
  for (const response* r : {&first, second}) {
    if (!r) continue;
    for (const auto& [id, a] : r->answers) {
      if (id != tool_question_id) out.answers.emplace_back(id, a);
    }
    out.usage.input_tokens += r->usage.input_tokens;
    out.usage.output_tokens += r->usage.output_tokens;
    if (r->usage.cached_tokens) out.usage.cached_tokens = out.usage.cached_tokens.value_or(0) + *r->usage.cached_tokens;
    if (r->usage.state_truncated) out.usage.state_truncated = out.usage.state_truncated.value_or(false) || *r->usage.state_truncated;
  }
  return out;
}

std::string schema_hash(const request& r) {
  json questions = json::array();
  for (const question& q : r.questions) {
    questions.push_back(json::array({q.id, to_string(q.type), q.instructions, q.criteria}));
  }
  return sha256_hex(render_json(questions, false));
}

namespace {

// The events [at, at + n) of an array, moved out of it.
std::vector<json> take_events(json::array_t& events, std::size_t at, std::size_t n) {
  const auto first = events.begin() + std::ptrdiff_t(at);
  std::vector<json> out(std::make_move_iterator(first), std::make_move_iterator(first + std::ptrdiff_t(n)));
  events.erase(first, first + std::ptrdiff_t(n));
  return out;
}

void put_events(json::array_t& events, std::size_t at, std::vector<json>&& taken) {
  events.insert(events.begin() + std::ptrdiff_t(at), std::make_move_iterator(taken.begin()),
                std::make_move_iterator(taken.end()));
}

}  // namespace

result<dropped_events> drop_oldest_events(request& req, const event_dropping& how, const overflow_measure& overflow) {
  dropped_events out;
  out.at = how.keep_first;
  history_view& view = req.history;
  view.dropped = 0;  // measured whole first, whatever an earlier window left out
  if (!view && !req.state.is_array()) return out;
  auto over = overflow(req);
  if (!over) return over.error();
  const std::size_t total = view ? view.events->size() : req.state.size();
  if (*over == 0 || total <= how.keep_first + 1) return out;
  const std::size_t droppable = total - how.keep_first - 1;

  // The `n` oldest droppable events left out: a referred history is read without them, a held
  // array loses them (moved out, to be put back).
  auto leave_out = [&](std::size_t n) {
    if (view) {
      view.dropped_at = how.keep_first;
      view.dropped = n;
      return std::vector<json>();
    }
    return take_events(req.state.get_ref<json::array_t&>(), how.keep_first, n);
  };
  auto put_back = [&](std::vector<json>&& taken) {
    if (view) {
      view.dropped = 0;
    } else {
      put_events(req.state.get_ref<json::array_t&>(), how.keep_first, std::move(taken));
    }
  };
  // Whether the state fits with the `n` oldest droppable events left out.
  auto fits_without = [&](std::size_t n) -> result<bool> {
    std::vector<json> taken = leave_out(n);
    auto o = overflow(req);
    put_back(std::move(taken));
    if (!o) return o.error();
    return result<bool>(boost::system::in_place_value, *o == 0);
  };
  // The smallest cut that fits, by bisection (overflow only shrinks as events are left out).
  std::size_t tightest = droppable;
  auto fits = fits_without(droppable);
  if (!fits) return fits.error();
  if (*fits) {
    std::size_t lo = 0;  // does not fit
    while (tightest - lo > 1) {
      const std::size_t mid = lo + (tightest - lo) / 2;
      fits = fits_without(mid);
      if (!fits) return fits.error();
      (*fits ? tightest : lo) = mid;
    }
  }
  const std::size_t kept = droppable - tightest;
  const auto share = static_cast<std::size_t>(std::ceil(how.fraction * double(kept)));
  const std::size_t chunk = std::bit_floor(std::max<std::size_t>(share, 1));
  const std::size_t cut = std::min(droppable, (tightest + chunk - 1) / chunk * chunk);

  out.events = leave_out(cut);
  if (view) out.skipped = cut;
  return out;
}

void restore_events(json& state, dropped_events dropped) {
  if (dropped.events.empty()) return;
  put_events(state.get_ref<json::array_t&>(), dropped.at, std::move(dropped.events));
}

attached_media attach_media(request& req, const std::vector<history_item>& media, const request_limits& limits,
                            const dropped_events& dropped) {
  const std::size_t gone_from = dropped.at, gone_to = dropped.at + dropped.count();
  // Per kind, the indices of the items that may go, oldest first.
  std::array<std::vector<std::size_t>, media_kinds.size()> chosen;
  for (std::size_t i = 0; i < media.size(); ++i) {
    if (media[i].event >= gone_from && media[i].event < gone_to) continue;
    chosen[std::size_t(media[i].kind)].push_back(i);
  }
  auto lim = [&](media_kind k) -> const media_limits& {
    return k == media_kind::image ? limits.images : k == media_kind::audio ? limits.audio : limits.videos;
  };
  for (const media_kind k : media_kinds) {
    std::vector<std::size_t>& c = chosen[std::size_t(k)];
    if (lim(k).max_items > 0 && c.size() > lim(k).max_items) c.erase(c.begin(), c.end() - std::ptrdiff_t(lim(k).max_items));
  }
  auto bytes = [&](std::initializer_list<media_kind> kinds) {
    std::size_t n = 0;
    for (const media_kind k : kinds) {
      if (lim(k).max_items == 0) continue;  // refused whole: its bytes are not the others' concern
      for (const std::size_t i : chosen[std::size_t(k)]) n += media[i].item.decoded_bytes;
    }
    return n;
  };
  std::vector<std::size_t>& images = chosen[std::size_t(media_kind::image)];
  if (lim(media_kind::image).max_items > 0) {
    while (!images.empty() && bytes({media_kind::image}) > limits.max_image_bytes_total) images.erase(images.begin());
  }
  std::vector<std::size_t>& audio = chosen[std::size_t(media_kind::audio)];
  std::vector<std::size_t>& videos = chosen[std::size_t(media_kind::video)];
  while (bytes({media_kind::audio, media_kind::video}) > limits.max_audio_video_bytes_total) {
    // The older of the oldest clip and the oldest video, among the kinds the model reads.
    const bool audio_read = lim(media_kind::audio).max_items > 0 && !audio.empty();
    const bool videos_read = lim(media_kind::video).max_items > 0 && !videos.empty();
    if (audio_read && (!videos_read || audio.front() < videos.front())) {
      audio.erase(audio.begin());
    } else {
      videos.erase(videos.begin());
    }
  }

  attached_media out;
  for (const media_kind k : media_kinds) {
    std::vector<media_item>& into = k == media_kind::image ? req.images : k == media_kind::audio ? req.audio : req.videos;
    into.clear();
    for (const std::size_t i : chosen[std::size_t(k)]) {
      into.push_back(media[i].item);
      out.sent.push_back(i);
    }
  }
  out.left_out = media.size() - out.sent.size();
  return out;
}

}  // namespace baton::tools
