#include "tools/schema_compiler.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>

#include "core/error_codes.hpp"
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
