// One engine's settings, as config/baton.yaml (`engine`, `routing.fallback`) and `baton decide`'s
// flags give them: which engine, how the runtime schedules it, and each engine's own options,
// which make_engine hands over as they are.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "engine/clef/clef_engine.hpp"
#include "engine/systemone/systemone_engine.hpp"

namespace baton {

struct engine_options {
  std::string name = "keyword";  // keyword | clef | systemone
  // The engine's scheduler (engine/scheduler.hpp) and how long a decision may wait for it.
  std::size_t max_batch = 64;
  std::size_t queue_capacity = 4096;
  std::chrono::milliseconds timeout{30000};  // past it, the policy's on_engine_error decides
  clef::clef_engine_options clef;      // read only when name is clef
  systemone_engine_options systemone;  // read only when name is systemone
};

}  // namespace baton
