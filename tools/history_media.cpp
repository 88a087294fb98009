#include "tools/history_media.hpp"

#include "core/base64.hpp"
#include "core/sha256.hpp"

namespace baton::tools {

std::string_view field_name(media_kind k) noexcept {
  switch (k) {
    case media_kind::image: return "images";
    case media_kind::audio: return "audio";
    case media_kind::video: return "videos";
  }
  return "images";
}

std::optional<media_kind> kind_of_field(std::string_view field) noexcept {
  for (const media_kind k : media_kinds) {
    if (field_name(k) == field) return k;
  }
  return std::nullopt;
}

std::string placeholder(media_kind k, std::size_t number) {
  const char* noun = k == media_kind::image ? "image " : k == media_kind::audio ? "audio " : "video ";
  return noun + std::to_string(number);
}

history_item make_history_item(media_kind kind, std::size_t event, std::size_t slot, media_item item) {
  history_item h{kind, event, slot, 0, std::move(item), {}};
  if (h.item.source == media_source::inline_base64) {
    std::string reason;
    if (const auto bytes = base64_decode(h.item.base64(), reason)) {
      h.payload_sha256 = sha256_hex(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
    }
  }
  return h;
}

std::size_t held_bytes(const history_item& m) noexcept { return m.item.data.size(); }

json logged_item(const history_item& m) {
  json o = {{"field", field_name(m.kind)}, {"number", m.number}, {"event", m.event}};
  switch (m.item.source) {
    case media_source::inline_base64:
      o["source"] = "inline";
      o["content_type"] = m.item.mime;
      o["bytes"] = m.item.decoded_bytes;
      // A payload that is not base64 has no digest: the engine refuses the item (INVALID_MEDIA).
      o["sha256"] = m.payload_sha256.empty() ? json() : json(m.payload_sha256);
      break;
    case media_source::path:
      o["source"] = "path";
      o["path"] = m.item.data;
      break;
    case media_source::url:
      o["source"] = "url";
      o["url"] = m.item.data;
      break;
    case media_source::raw: o["source"] = "raw"; break;  // never from a frame
  }
  return o;
}

}  // namespace baton::tools
