// The concurrency gate (docs/limits.md, "Concurrency"): slots per key, model and backend,
// and the priority queue. A request whose slots are free takes them at once (no
// coroutine); one that waits is taken out of the queue the moment its client leaves. The
// slots go back at the end hook (before the record), or with the request's state however
// it ends.
#include <algorithm>
#include <cstdio>
#include <boost/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "config/config.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "limits/gate.hpp"
#include "llm/chat.hpp"
#include "telemetry/record.hpp"

namespace sluice::filters {

namespace {

// Whether the request's last user message holds one of the urgent keywords (ASCII
// letters in any case; other bytes as they are).
bool urgent(const llm::ChatRequest& chat, const std::vector<std::string>& words) {
  if (words.empty()) return false;
  const auto* messages = chat.body.if_contains("messages");
  if (!messages || !messages->is_array()) return false;
  const boost::json::object* last = nullptr;
  for (const auto& m : messages->get_array()) {
    const auto* o = m.if_object();
    const auto* role = o ? o->if_contains("role") : nullptr;
    if (role && role->is_string() && role->get_string() == "user") last = o;
  }
  if (!last) return false;
  auto lower = [](unsigned char c) { return c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c - 'A' + 'a') : c; };
  auto holds = [&](std::string_view text) {
    for (const auto& w : words) {
      auto it = std::search(text.begin(), text.end(), w.begin(), w.end(),
                            [&](char a, char b) { return lower(static_cast<unsigned char>(a)) == lower(static_cast<unsigned char>(b)); });
      if (it != text.end()) return true;
    }
    return false;
  };
  const auto* content = last->if_contains("content");
  if (!content) return false;
  if (content->is_string()) return holds(content->get_string());
  if (content->is_array()) {
    for (const auto& part : content->get_array()) {
      const auto* p = part.if_object();
      const auto* text = p ? p->if_contains("text") : nullptr;
      if (text && text->is_string() && holds(text->get_string())) return true;
    }
  }
  return false;
}

// RFC 7240's wait preference (Prefer: wait=N, alone or with respond-async): how many
// seconds the client accepts to wait; < 0 when not given. (Other preferences are ignored.)
double accepted_wait_ms(std::string_view prefer) {
  const auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  while (!prefer.empty()) {
    const auto comma = prefer.find(',');
    std::string_view item = prefer.substr(0, comma);
    prefer = comma == std::string_view::npos ? std::string_view{} : prefer.substr(comma + 1);
    item = item.substr(0, item.find(';'));  // its parameters
    // preference = token [ BWS "=" BWS word ] (RFC 7240): spaces may stand around '='.
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || !iequals(trim(item.substr(0, eq)), "wait")) continue;
    std::string_view v = trim(item.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    if (v.empty() || v.size() > 9) return -1;
    std::int64_t n = 0;
    for (char c : v) {
      if (c < '0' || c > '9') return -1;
      n = n * 10 + (c - '0');
    }
    return static_cast<double>(n) * 1000.0;
  }
  return -1;
}

struct State {
  limits::Gate::Need need;
  config::Priority prio = config::Priority::standard;
  std::optional<limits::GatePass> pass;
};

class Concurrency final : public FilterWith<State> {
 public:
  Concurrency(const Deps& d) : gate_(*d.gate) {}
  std::string_view name() const override { return "concurrency"; }
  unsigned phases() const override { return bit(Phase::admit) | bit(Phase::end); }

 protected:
  Next on(Phase, Request& r, State& s, Stop&) override {
    if (r.kind != Kind::generate) return Next::go;  // counting tokens holds no slot
    s.need = gate_.need(r.key, r.chat.model);
    if (s.need.empty()) return Next::go;
    s.prio = gate_.priority(r.key, r.ex.request().header("x-priority"), urgent(r.chat, gate_.settings().urgent_keywords));
    if (!gate_.try_enter(s.need)) return Next::wait;
    r.rec.priority = config::to_string(s.prio);
    s.pass.emplace(&gate_, s.need);
    return Next::go;
  }

  boost::asio::awaitable<Next> wait(Phase, Request& r, State& s, Stop& stop) override {
    if (r.interrupt && r.interrupt->reason != Reason::ok) {  // cancelled before it came to wait
      stop.reason = r.interrupt->reason;
      stop.message = "cancelled by an operator";
      co_return Next::stop;
    }
    limits::Gate::Cancel cancel;
    // A client that leaves while queued is removed from the queue at once; the watch ends
    // with this frame however it ends (it refers to `cancel`).
    r.ex.watch_client([&cancel] { cancel(); });
    struct Unwatch {
      http::Exchange& ex;
      Interrupt* interrupt;
      ~Unwatch() {
        ex.unwatch_client();
        if (interrupt) interrupt->wake = nullptr;
      }
    } unwatch{r.ex, r.interrupt};
    // So does one an operator cancels (it gets its answer: 410 cancelled).
    if (r.interrupt) r.interrupt->wake = [&cancel] { cancel(); };
    const config::Overload* ov = r.route.config && r.route.config->overload ? &*r.route.config->overload : nullptr;
    limits::Gate::Wait opts;
    // The route's own wait ends in its canned reply at worst; without one, a request whose
    // light model is busy too keeps waiting its class's time.
    if (ov && ov->canned) opts.max_wait = ov->max_wait;
    // Overload may serve it elsewhere: a refusal is counted below, if it stays one.
    opts.degradable = ov && r.reroute && r.chat.task == llm::Task::chat;
    opts.accept_ms = accepted_wait_ms(r.ex.request().header_list("prefer"));
    const auto res = co_await gate_.enter(s.need, s.prio, cancel, opts);
    r.rec.priority = config::to_string(res.served_as);
    if (res.queued) r.rec.queue_ms = res.waited_ms;
    if (res.outcome == limits::Gate::Outcome::granted) {
      s.pass.emplace(&gate_, s.need);
      co_return Next::go;
    }
    const auto& cc = gate_.settings();
    if (res.outcome == limits::Gate::Outcome::queued) {
      // The client would wait longer than it accepts: when to come back, instead.
      const auto eta = static_cast<std::int64_t>(res.eta_ms + 0.5);
      stop.reason = Reason::queued;
      stop.body = R"({"status":"queued","eta":)" + std::to_string(eta) + R"(,"position":)" +
                  std::to_string(res.position) + "}";
      stop.message = "estimated wait " + std::to_string(eta) + " ms is longer than the client accepts";
      stop.retry_after_ms = eta;
      char applied[32];
      std::snprintf(applied, sizeof applied, "wait=%lld", static_cast<long long>(opts.accept_ms / 1000));
      r.reply_headers.emplace_back("Preference-Applied", applied);
      co_return Next::stop;
    }
    // Overload degrades instead of refusing: the light model if it has a free slot at once,
    // else the canned reply. Chat only: another model's embeddings are in another space.
    const bool overloaded =
        res.outcome == limits::Gate::Outcome::queue_full || res.outcome == limits::Gate::Outcome::timed_out;
    if (ov && overloaded && r.reroute && r.chat.task == llm::Task::chat) {
      if (!ov->model.empty() && r.key.may_use(ov->model)) {
        auto light = gate_.need(r.key, ov->model);
        if (gate_.try_enter(light)) {
          s.need = light;
          s.pass.emplace(&gate_, s.need);
          r.reroute->model = ov->model;
          r.reply_headers.emplace_back("X-Sluice-Overload", "model");
          co_return Next::go;
        }
      }
      if (ov->canned) {
        r.reroute->canned = true;
        r.reply_headers.emplace_back("X-Sluice-Overload", "canned");
        co_return Next::go;
      }
    }
    if (opts.degradable) gate_.refused(res.outcome);
    switch (res.outcome) {
      case limits::Gate::Outcome::queue_full:
        stop.reason = Reason::queue_full;
        stop.message = "too many requests waiting: the queue holds " + std::to_string(cc.queue_size);
        stop.retry_after_ms = 1000;
        break;
      case limits::Gate::Outcome::timed_out:
        stop.reason = Reason::queue_timeout;
        stop.message = "waited " + std::to_string(static_cast<std::int64_t>(res.waited_ms)) +
                       " ms in the queue without a free slot";
        stop.retry_after_ms = cc.max_wait[static_cast<int>(config::Priority::standard)].count();
        break;
      default:
        if (r.interrupt && r.interrupt->reason != Reason::ok) {
          stop.reason = r.interrupt->reason;
          stop.message = "cancelled by an operator while queued";
          break;
        }
        r.rec.client_cancelled = true;
        stop.reason = Reason::client_closed;
        stop.message = "client left while queued";
        break;
    }
    co_return Next::stop;
  }

  // The slots go back as soon as the answer is done (before the record and the other
  // filters' end hooks): a queued request need not wait for them.
  void end(Request&, State& s) override { s.pass.reset(); }

 private:
  limits::Gate& gate_;
};

}  // namespace

std::unique_ptr<Filter> make_concurrency(const Deps& d) {
  if (!d.gate || !d.gate->active()) return nullptr;
  return std::make_unique<Concurrency>(d);
}

}  // namespace sluice::filters
