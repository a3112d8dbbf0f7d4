// Rate limits and token quotas (docs/limits.md): admission counts the request and
// reserves an upper bound of the tokens the upstream may charge; the end settles what it
// really used. The x-ratelimit-* headers go on the reply, whatever it is.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>

#include "config/config.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "limits/limiter.hpp"
#include "llm/chat.hpp"
#include "telemetry/record.hpp"
#include "tokenizer/tokenizer.hpp"

namespace sluice::filters {

namespace {

struct State {
  limits::Admission adm;
  bool exact = false;    // the prompt may be counted exactly if its bound is refused
  bool decided = false;  // admit_now decided the first ask
  std::int64_t tokens = 0;  // the first ask's reservation
};

// What a request is charged: the prompt and the completion tokens the client received
// (a client that left mid-stream pays for what reached it, the rest is refunded);
// nothing when the upstream failed before producing any output. The sum saturates (an
// upstream may report absurd counts) and one charge is at most kMaxCharge.
std::int64_t charged_tokens(const telemetry::RequestRecord& r) {
  const std::int64_t completion = std::max<std::int64_t>(r.completion_tokens, 0);
  if (r.status != 200 && completion == 0) return 0;
  return std::min(llm::saturating_add(std::max<std::int64_t>(r.prompt_tokens, 0), completion),
                  limits::WorkerLimiter::kMaxCharge);
}

// The x-ratelimit-* headers, formatted into one block: one allocation, written in
// place (they are on every limited request). The generic three repeat the figures of
// the OpenAI-named ones they stand for: those digits are copied, not formatted again.
void add_ratelimit_headers(http::HeaderList& h, const limits::Admission& a) {
  const limits::HeaderLimit& main = a.requests.set ? a.requests : a.tokens;
  if (!main.set) return;
  char block[512];  // at most 451 bytes: the 9 names, 20-digit numbers, 32-byte resets
  char* p = block;
  auto name = [&p](std::string_view n) {
    std::memcpy(p, n.data(), n.size());
    p += n.size();
  };
  auto number = [&](std::string_view n, std::int64_t v) {
    name(n);
    const char* from = p;
    p = std::to_chars(p, p + 20, v).ptr;
    return std::string_view(from, static_cast<std::size_t>(p - from));
  };
  // A limit is a configured figure: its digits are kept (per thread) once formatted.
  struct Digits {
    std::int64_t v = -1;
    std::uint8_t n = 0;
    char d[20];
  };
  thread_local Digits limits_seen[2];
  thread_local unsigned next_seen = 0;
  auto limit_number = [&](std::string_view n, std::int64_t v) {
    name(n);
    Digits* hit = limits_seen[0].v == v ? &limits_seen[0] : limits_seen[1].v == v ? &limits_seen[1] : nullptr;
    if (!hit) {
      hit = &limits_seen[next_seen++ & 1];
      hit->v = v;
      hit->n = static_cast<std::uint8_t>(std::to_chars(hit->d, hit->d + sizeof hit->d, v).ptr - hit->d);
    }
    const char* from = p;
    name(std::string_view(hit->d, hit->n));
    return std::string_view(from, hit->n);
  };
  std::string_view main_limit, main_remaining;
  auto openai = [&](const limits::HeaderLimit& l, std::string_view limit, std::string_view remaining,
                    std::string_view reset) {
    const auto lim = limit_number(limit, l.limit);
    const auto rem = number(remaining, std::max<std::int64_t>(l.remaining, 0));
    name(reset);
    p = limits::write_reset(p, l.reset_ms);
    name("\r\n");
    if (&l == &main) main_limit = lim, main_remaining = rem;
  };
  if (a.requests.set) {
    openai(a.requests, "x-ratelimit-limit-requests: ", "\r\nx-ratelimit-remaining-requests: ",
           "\r\nx-ratelimit-reset-requests: ");
  }
  if (a.tokens.set) {
    openai(a.tokens, "x-ratelimit-limit-tokens: ", "\r\nx-ratelimit-remaining-tokens: ",
           "\r\nx-ratelimit-reset-tokens: ");
  }
  name("x-ratelimit-limit: ");
  name(main_limit);
  name("\r\nx-ratelimit-remaining: ");
  name(main_remaining);
  number("\r\nx-ratelimit-reset: ", (main.reset_ms + 999) / 1000);
  h.emplace_back(std::string(), std::string(block, static_cast<std::size_t>(p - block)));
}

class RateLimits final : public FilterWith<State> {
 public:
  explicit RateLimits(const Deps& d) : d_(d), limiter_(*d.limiter) {}
  std::string_view name() const override { return "rate_limits"; }
  unsigned phases() const override { return bit(Phase::admit) | bit(Phase::end); }

 protected:
  // Decided at once when it can be (leases, local counting); Redis is awaited otherwise.
  Next on(Phase, Request& r, State& s, Stop& stop) override {
    if (!limiter_.active()) return Next::go;  // no limit in force (until a reload brings some)
    if (r.kind == Kind::count_tokens) {
      // Metered by the key's request rate limits only: it spends no tokens, but counting a
      // large prompt exactly is real work.
      if (!limiter_.admit_now(r.key, r.chat.model, 0, false, s.adm, /*requests_only=*/true)) return Next::wait;
      return decide(r, s, stop);
    }
    // Token quotas reserve an upper bound of what the upstream may charge
    // (llm::reservation): every prompt part, and the output bound sent upstream by any wire
    // that may serve the request. Far from a limit the prompt's byte bound does; it is
    // counted exactly (BPE, rank files loaded) only when that bound is refused. A huge
    // body keeps the byte bound, which is never below the exact count.
    s.exact = d_.count_prompts && d_.tokens && d_.tokens->exact(r.route.encoding) &&
              r.ex.request().body().size() <= llm::kExactCountMaxBytes;
    s.tokens = llm::reservation(r.chat, r.route.wires, limiter_.config()).total();
    if (!limiter_.admit_now(r.key, r.chat.model, s.tokens, s.exact, s.adm)) return Next::wait;
    s.decided = true;
    if (s.exact && s.adm.recount) return Next::wait;
    return decide(r, s, stop);
  }

  boost::asio::awaitable<Next> wait(Phase, Request& r, State& s, Stop& stop) override {
    if (r.kind == Kind::count_tokens) {
      s.adm = co_await limiter_.admit(r.key, r.chat.model, 0, false, /*requests_only=*/true);
      co_return decide(r, s, stop);
    }
    if (!s.decided) s.adm = co_await limiter_.admit(r.key, r.chat.model, s.tokens, s.exact);
    if (s.exact && s.adm.recount) {
      const llm::Reservation resv = llm::reservation(r.chat, r.route.wires, limiter_.config(), d_.tokens, r.route.encoding);
      r.chat.prompt_tokens_estimate = resv.prompt;
      s.adm = {};
      if (!limiter_.admit_now(r.key, r.chat.model, resv.total(), false, s.adm)) {
        s.adm = co_await limiter_.admit(r.key, r.chat.model, resv.total());
      }
    }
    co_return decide(r, s, stop);
  }

  void end(Request& r, State& s) override {
    if (!s.adm.reserved.empty()) limiter_.settle(s.adm, charged_tokens(r.rec));
  }

 private:
  Next decide(Request& r, State& s, Stop& stop) {
    limits::Admission& adm = s.adm;
    r.rec.limiter = adm.counted == limits::Counted::redis   ? "redis"
                    : adm.counted == limits::Counted::local ? "local"
                                                            : "";
    add_ratelimit_headers(r.reply_headers, adm);
    if (!adm.allowed()) {
      stop.reason = adm.reason;
      stop.message = std::move(adm.message);
      // request_too_large never passes at this limit: no Retry-After (a client would
      // retry forever).
      if (adm.reason != Reason::request_too_large) stop.retry_after_ms = adm.retry_after_ms;
      return Next::stop;
    }
    if (!adm.reserved.empty()) r.rec.reserved_tokens = adm.reserved_tokens;
    return Next::go;
  }

  const Deps d_;
  limits::WorkerLimiter& limiter_;
};

}  // namespace

std::unique_ptr<Filter> make_rate_limits(const Deps& d) {
  if (!d.limiter) return nullptr;
  return std::make_unique<RateLimits>(d);
}

}  // namespace sluice::filters
