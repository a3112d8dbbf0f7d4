// Guardrails (docs/guardrails.md): the route's policy (`models[].guardrails`), or the key's
// (`keys[].guardrails`, which wins; `none` for none), screens the request's text before
// anything else is spent on it: a finding that blocks ends the request with 400
// `guardrail_blocked` (no rate-limit count, no tokens, no upstream call); one that redacts
// rewrites the text the model gets (and the prompt is counted again); one that flags is
// recorded only. A policy with a guard model then asks it (the request waits, at most
// model_timeout; verdicts are kept per text for verdict_ttl). Before the stored
// conversation is added (it was screened when it was sent) and before the cache (whose
// key is then the redacted text).
#include <chrono>

#include "config/config.hpp"
#include "config/keys.hpp"
#include "filters/filter.hpp"
#include "filters/model_call.hpp"
#include "filters/registry.hpp"
#include "guard/guard.hpp"
#include "http/client.hpp"
#include "llm/chat.hpp"
#include "telemetry/record.hpp"

namespace sluice::filters {

namespace {

struct State {
  const guard::Screen* screen = nullptr;
  guard::Verdict verdict;
  std::string text;  // what the guard model is asked about
  std::string key;   // its verdict's key
};

class Guardrails final : public FilterWith<State> {
 public:
  Guardrails(const config::Config& cfg, guard::Guards& guards, http::Client* client)
      : cfg_(cfg), guards_(guards), client_(client) {}
  std::string_view name() const override { return "guardrails"; }
  unsigned phases() const override { return bit(Phase::request); }

 protected:
  Next on(Phase, Request& r, State& s, Stop& stop) override {
    if (r.kind != Kind::generate || r.chat.task != llm::Task::chat || !r.route.config) return Next::go;
    const std::string& name = r.key.guardrails.empty() ? r.route.config->guardrails : r.key.guardrails;
    if (name.empty() || name == "none") return Next::go;
    s.screen = guards_.find(name);
    if (!s.screen) {
      // Named but not in force (a reload removed it while this request held an older
      // route or key): refused, never passed unscreened.
      stop.reason = Reason::guard_unavailable;
      stop.message = "the guardrails policy '" + name + "' is not configured";
      stop.retry_after_ms = 1000;
      return Next::stop;
    }
    s.verdict = s.screen->inspect(r.chat.body);
    if (!r.chat.native.empty()) {
      // The form a backend of the Responses API is sent: redacted alike (what it finds
      // is the same text: not counted twice).
      guard::Verdict native;
      s.screen->inspect_native(r.chat.native, native);
    }
    const auto& p = s.screen->policy();
    if (s.verdict.worst != config::GuardAction::block && !p.model.empty() && client_) {
      s.text = guard::guard_text(r.chat.body);  // (after redaction: the guard sees no PII either)
      s.key = guard::VerdictCache::key(p.name, s.text);
      if (auto flagged = guards_.verdicts().get(s.key)) {
        model_verdict(s, *flagged);
      } else {
        return Next::wait;
      }
    }
    return decide(r, s, stop);
  }

  boost::asio::awaitable<Next> wait(Phase, Request& r, State& s, Stop& stop) override {
    const auto& p = s.screen->policy();
    std::optional<bool> flagged;
    std::string why;
    // (The guard's route as the routing table has it now: a reload may have moved it.)
    const config::Config& routes = r.route.table ? *r.route.table : cfg_;
    if (const config::Route* route = routes.find_route(p.model)) {
      const config::Backend& b = route->primary();
      std::string target = b.path_prefix + std::string(guard::guard_call_path(p.model_api));
      std::string body = guard::guard_call_body(p.model_api, b.model, s.text);
      auto reply = co_await call_model(*client_, b, std::move(target), std::move(body), p.model_timeout);
      if (!reply.ok()) why = reply.error;
      else if (!(flagged = guard::read_guard_answer(p.model_api, reply.body))) why = "an answer that is not a verdict";
    } else {
      why = "its route is gone";
    }
    guards_.count_model(flagged.has_value());
    if (!flagged) {
      // No verdict: the policy says whether the request goes on unscreened.
      r.rec.guard = s.verdict.summary();
      r.rec.guard += r.rec.guard.empty() ? "unscreened:model" : ";unscreened:model";
      if (!p.fail_closed) co_return decide(r, s, stop, true);
      stop.reason = Reason::guard_unavailable;
      stop.message = "the guardrails policy '" + p.name + "' could not get its guard's verdict (" + why + ")";
      stop.retry_after_ms = 1000;
      co_return Next::stop;
    }
    guards_.verdicts().put(s.key, *flagged, p.verdict_ttl);
    model_verdict(s, *flagged);
    co_return decide(r, s, stop);
  }

 private:
  static void model_verdict(State& s, bool flagged) {
    if (!flagged) return;
    const auto a = s.screen->policy().model_action;
    if (a == config::GuardAction::off) return;
    s.verdict.findings.push_back({guard::Kind::model, a, 1});
    if (static_cast<int>(a) > static_cast<int>(s.verdict.worst)) s.verdict.worst = a;
  }

  Next decide(Request& r, State& s, Stop& stop, bool keep_record = false) {
    if (s.verdict.findings.empty()) return Next::go;
    guards_.count(s.verdict);
    if (!keep_record) r.rec.guard = s.verdict.summary();
    if (s.verdict.worst == config::GuardAction::block) {
      const auto* f = s.verdict.first(config::GuardAction::block);
      stop.reason = Reason::guardrail_blocked;
      stop.param = std::string(guard::to_string(f->kind));
      stop.message = "the request was blocked by the guardrails policy '" + s.screen->policy().name + "': " +
                     (f->kind == guard::Kind::model ? std::string("its guard model flagged it")
                                                    : std::string(guard::to_string(f->kind)) + " found");
      return Next::stop;
    }
    if (s.verdict.first(config::GuardAction::redact)) llm::recount_prompt(r.chat);
    return Next::go;
  }

  const config::Config& cfg_;
  guard::Guards& guards_;
  http::Client* client_;
};

}  // namespace

std::unique_ptr<Filter> make_guardrails(const Deps& d) {
  if (!d.guards) return nullptr;  // (policies may come with a reload: the filter is there from the start)
  return std::make_unique<Guardrails>(d.cfg, *d.guards, d.client);
}

}  // namespace sluice::filters
