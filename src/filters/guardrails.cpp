// Guardrails (docs/guardrails.md): the route's policy (`models[].guardrails`), or the key's
// (`keys[].guardrails`, which wins; `none` for none), screens the request's text before
// anything else is spent on it: a finding that blocks ends the request with 400
// `guardrail_blocked` (no rate-limit count, no tokens, no upstream call); one that redacts
// rewrites the text the model gets (and the prompt is counted again); one that flags is
// recorded only. Before the stored conversation is added (it was screened when it was
// sent) and before the cache (whose key is then the redacted text).
#include "config/config.hpp"
#include "config/keys.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "guard/guard.hpp"
#include "llm/chat.hpp"
#include "telemetry/record.hpp"

namespace sluice::filters {

namespace {

class Guardrails final : public Filter {
 public:
  explicit Guardrails(guard::Guards& guards) : guards_(guards) {}
  std::string_view name() const override { return "guardrails"; }
  unsigned phases() const override { return bit(Phase::request); }

  Next on(Phase, Request& r, void*, Stop& stop) override {
    if (r.kind != Kind::generate || r.chat.task != llm::Task::chat || !r.route.config) return Next::go;
    const std::string& name = r.key.guardrails.empty() ? r.route.config->guardrails : r.key.guardrails;
    const guard::Screen* screen = name.empty() || name == "none" ? nullptr : guards_.find(name);
    if (!screen) return Next::go;
    guard::Verdict v = screen->inspect(r.chat.body);
    if (!r.chat.native.empty()) {
      // The form a backend of the Responses API is sent: redacted alike (what it finds
      // is the same text: not counted twice).
      guard::Verdict native;
      screen->inspect_native(r.chat.native, native);
    }
    if (v.findings.empty()) return Next::go;
    guards_.count(v);
    r.rec.guard = v.summary();
    if (v.worst == config::GuardAction::block) {
      const auto* f = v.first(config::GuardAction::block);
      stop.reason = Reason::guardrail_blocked;
      stop.param = std::string(guard::to_string(f->kind));
      stop.message = "the request was blocked by the guardrails policy '" + screen->policy().name + "': " +
                     std::string(guard::to_string(f->kind)) + " found";
      return Next::stop;
    }
    if (v.first(config::GuardAction::redact)) llm::recount_prompt(r.chat);
    return Next::go;
  }

 private:
  guard::Guards& guards_;
};

}  // namespace

std::unique_ptr<Filter> make_guardrails(const Deps& d) {
  if (!d.guards || d.cfg.guardrails.empty()) return nullptr;
  return std::make_unique<Guardrails>(*d.guards);
}

}  // namespace sluice::filters
