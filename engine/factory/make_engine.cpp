#include "engine/factory/make_engine.hpp"

#include <exception>
#include <string>

#include "core/error_codes.hpp"
#include "engine/keyword/keyword_engine.hpp"

namespace baton {

result<std::unique_ptr<decision_engine>> make_engine(const engine_options& options) {
  if (options.name == "keyword") return std::unique_ptr<decision_engine>(std::make_unique<keyword_engine>());
  if (options.name == "clef") {
    if (options.clef.model_dir.empty()) {
      return make_error(400, codes::engine_needs_model, "the clef engine needs a release directory (--model DIR)");
    }
    // Loading throws (clef::load_error, or torch's own): this is the boundary where it becomes a value.
    try {
      return std::unique_ptr<decision_engine>(std::make_unique<clef::clef_engine>(options.clef));
    } catch (const std::exception& e) {
      return make_error(500, codes::engine_load_failed,
                        "cannot load the model in " + options.clef.model_dir.string() + ": " + e.what());
    }
  }
  if (options.name == "systemone") {
    auto made = systemone_engine::make(options.systemone);
    if (!made) return made.error();
    return std::unique_ptr<decision_engine>(std::move(*made));
  }
  return make_error(400, codes::unknown_engine,
                    "unknown engine '" + options.name + "'; known engines: keyword, clef, systemone");
}

request_limits question_limits(const engine_options&) {
  // Every engine takes the wire's question limits: keyword and clef report text_only() plus the
  // media they read, systemone the wire's defaults (the other server checks its own).
  return request_limits::text_only();
}

}  // namespace baton
