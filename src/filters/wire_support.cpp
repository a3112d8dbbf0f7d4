// What the route's upstreams can serve: a request that one of the wires that may serve it
// (its backends', canary's, fallbacks') cannot honour is the client's to change, so it is
// refused before anything is counted, naming the field and the model: embeddings from an
// Anthropic route, token ids to Ollama, a field with no translation (n > 1, logprobs,
// reasoning_effort... on Ollama and Anthropic) unless the route drops those (drop_params).
// What only a backend serving the client's API itself can do is refused unless every
// backend of the route is one. Generation requests only (count_tokens sends nothing).
#include <algorithm>
#include <string>

#include "config/models.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/wire.hpp"

namespace sluice::filters {

namespace {

class WireSupport final : public Filter {
 public:
  std::string_view name() const override { return "wire_support"; }
  unsigned phases() const override { return bit(Phase::request); }

  Next on(Phase, Request& r, void*, Stop& stop) override {
    if (r.kind != Kind::generate) return Next::go;
    // What only a backend serving the client's API itself can do (a built-in tool of the
    // Responses API...), unless every backend that may serve the route is one.
    if (r.chat.native_only && !r.route.native) {
      stop.reason = r.chat.native_only->reason;
      stop.message = "model '" + r.chat.model + "' cannot serve this request: " + r.chat.native_only->message +
                     " (a backend that does is set with native_responses)";
      stop.param = r.chat.native_only->param;
      return Next::stop;
    }
    for (const config::Provider wire : r.route.wires) {
      // A wire reached only through routes that drop such fields (drop_params) refuses
      // only what it cannot serve at all.
      const bool drop = std::find(r.route.strict_wires.begin(), r.route.strict_wires.end(), wire) ==
                        r.route.strict_wires.end();
      auto no = llm::unsupported(r.chat, wire, drop);
      if (!no) continue;
      stop.reason = no->reason;
      stop.message = "model '" + r.chat.model + "' cannot serve this request: " + no->message;
      if (no->reason == Reason::option_not_allowed) stop.message += " (the route may drop such fields: drop_params)";
      stop.param = std::move(no->param);
      return Next::stop;
    }
    return Next::go;
  }
};

}  // namespace

std::unique_ptr<Filter> make_wire_support(const Deps&) { return std::make_unique<WireSupport>(); }

}  // namespace sluice::filters
