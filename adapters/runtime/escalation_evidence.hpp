// What made the policy escalate a decision, in words and numbers (docs/escalations.md,
// "evidence"): the rule and its inputs, the global answers and the escalated tool's own, and
// whether the tool question was a flat tie. Derived, not stored: from the decision's answers
// when it is raised, from its logged answers when it is read back.
#pragma once

#include <string_view>

#include "adapters/log/records.hpp"
#include "core/answers.hpp"
#include "core/json.hpp"
#include "policies/policy.hpp"
#include "tools/registry.hpp"

namespace baton {

// `answers` may be null (an engine failure: `error_code` says which). The thresholds shown are
// `policy`'s, only when it is the one that raised the escalation (its hash).
json escalation_evidence(const log::escalation_record& r, const response* answers, std::string_view error_code,
                         const tools::registry& registry, const policies::policy& policy);

// The same from the decision row's logged `answers` text ("" when it has none).
json escalation_evidence(const log::escalation_record& r, std::string_view logged_answers, std::string_view error_code,
                         const tools::registry& registry, const policies::policy& policy);

}  // namespace baton
