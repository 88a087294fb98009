// `baton quantize --int8 / --int4 SRC DST`: a copy of a Clef release with int8 or int4 experts
// (engine/clef/model/quantize.hpp), which the engine then loads like any release.
#pragma once

#include <iosfwd>
#include <span>
#include <string_view>

namespace baton {

// `args` exclude "quantize".
int quantize_main(std::span<const std::string_view> args, std::ostream& out, std::ostream& err);

}  // namespace baton
