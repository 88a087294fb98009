// What a request's questions cost in a Clef record whatever its state: the part of the prompt an
// agent pays on every turn (`baton check`). Defined in record_encoder.cpp, next to the prompt's pieces.
#pragma once

#include <cstddef>
#include <vector>

#include "core/error.hpp"
#include "core/request.hpp"
#include "engine/clef/record_encoder.hpp"

namespace baton::clef {

struct schema_cost {
  std::size_t prompt = 0;               // the fixed text around state and schema (P and X of §2.1)
  std::size_t frame = 0;                // the schema's own header
  std::vector<std::size_t> questions;   // each question's field, request order

  std::size_t schema() const noexcept;  // frame and questions: what encode_record puts after the state
};

// In ids of `tok`, with encode_record's pieces: the questions add up to the schema, and prompt +
// schema is what a record with an empty state holds. encode_record's refusals (422) come back.
result<schema_cost> measure_schema(const request& r, const piece_tokenizer& tok);

}  // namespace baton::clef
