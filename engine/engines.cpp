#include "engine/engines.hpp"

#include "engine/keyword/keyword_engine.hpp"

namespace baton {

std::vector<std::string_view> engine_names() { return {"keyword", "clef"}; }

result<std::unique_ptr<decision_engine>> make_engine(std::string_view name) {
  if (name == "keyword") return std::unique_ptr<decision_engine>(std::make_unique<keyword_engine>());
  if (name == "clef") {
    return make_error(400, "ENGINE_NEEDS_MODEL", "the clef engine needs a release directory (--model DIR)");
  }
  std::string known;
  for (std::string_view n : engine_names()) known += (known.empty() ? "" : ", ") + std::string(n);
  return make_error(400, "UNKNOWN_ENGINE", "unknown engine '" + std::string(name) + "'; known engines: " + known);
}

}  // namespace baton
