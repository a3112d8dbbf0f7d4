// The request filters, in the order they run. A new policy: a new file in this folder
// defining its factory, declared and listed here (docs/phases.md, "Filters").
#include "filters/registry.hpp"

namespace sluice::filters {

// Each returns null when its policy is not configured.
std::unique_ptr<Filter> make_model_access(const Deps&);
std::unique_ptr<Filter> make_wire_support(const Deps&);
std::unique_ptr<Filter> make_billed_fields(const Deps&);
std::unique_ptr<Filter> make_max_messages(const Deps&);
std::unique_ptr<Filter> make_load_options(const Deps&);
std::unique_ptr<Filter> make_guardrails(const Deps&);
std::unique_ptr<Filter> make_conversations(const Deps&);
std::unique_ptr<Filter> make_rate_limits(const Deps&);
std::unique_ptr<Filter> make_cache(const Deps&);
std::unique_ptr<Filter> make_concurrency(const Deps&);

Chain make_chain(const Deps& d) {
  Chain c;
  c.add(make_model_access(d));  // model_not_allowed
  c.add(make_wire_support(d));   // what the route's upstreams cannot serve (invalid_request, option_not_allowed)
  c.add(make_billed_fields(d));  // option_not_allowed: service_tier, store, web_search_options, native built-in tools...
  c.add(make_load_options(d));   // option_not_allowed: num_ctx, num_gpu, num_batch by the route's policy (or pinned)
  c.add(make_guardrails(d));     // guardrail_blocked; PII redacted before anything is spent or kept
  c.add(make_conversations(d));  // Responses API: previous_response_id continued, store kept
  c.add(make_max_messages(d));   // too_many_messages (of the whole conversation)
  c.add(make_rate_limits(d));    // rate limits and token quotas
  c.add(make_cache(d));          // the response cache: a hit is answered here (no slot, no tokens)
  c.add(make_concurrency(d));    // slots and the priority queue
  return c;
}

}  // namespace sluice::filters
