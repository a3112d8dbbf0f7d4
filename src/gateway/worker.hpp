// The worker's request handler (one per worker thread, http::Handler): the per-request
// context the phases fill in, and the class whose members the phases are. Internal to the
// gateway library. Its definitions are split by concern:
//   handler.cpp   the phases in order: identify, authenticate, generate, filters, dispatch
//                 over backends, one attempt, record (docs/phases.md)
//   exchange.cpp  one upstream exchange and its relay: whole, or streamed frame by frame
//   answers.cpp   answers made here: a route's canned reply, a filter's own answer (a cache
//                 hit), a request following another's generation (coalescing)
//   local.cpp     what never reaches a model: probes, status pages, CORS preflights, the
//                 console, the admin API, history, models, count_tokens, stored responses,
//                 and the live requests' list (LiveSource)
#pragma once
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <random>

#include "api/codec.hpp"
#include "api/responses.hpp"
#include "common/ids.hpp"
#include "common/clock.hpp"
#include "common/reason.hpp"
#include "common/text.hpp"
#include "filters/registry.hpp"
#include "filters/load_options.hpp"
#include "gateway/live.hpp"
#include "gateway/embed_batch.hpp"
#include "gateway/state.hpp"
#include "http/beast.hpp"
#include "cache/cache.hpp"
#include "llm/chat.hpp"
#include "llm/wire.hpp"

namespace sluice::gateway::worker {

namespace net = boost::asio;
using net::awaitable;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// A client's text kept in a record (path, error message) is cut here: records wait in the
// access log's queue (65,536 of them at most), and a 16 KiB path twice over each would
// let a flood of 404s hold gigabytes.
inline constexpr std::size_t kRecordedTextMax = 1024;

// At most `max` bytes of `s`, cut between characters, with "..." when cut.
inline std::string cut_text(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(s.substr(0, cut)) + "...";
}

inline std::string recorded_text(std::string_view s) { return cut_text(s, kRecordedTextMax); }

inline double ms_since(Clock::time_point t0, Clock::time_point t1 = Clock::now()) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

inline Ms left_until(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<Ms>(deadline - Clock::now());
  return d.count() > 0 ? d : Ms(0);
}


// Per-request context: written by the phases in order, read by `record`.
struct LiveRequest;

struct Context {
  Clock::time_point start = Clock::now();
  std::string request_id;
  telemetry::RequestRecord rec;
  const config::ApiKey* key = nullptr;  // into `keys`, which the request holds
  std::shared_ptr<const keys::KeySet> keys;
  http::HeaderList headers;  // sent on every reply of this request
  int metrics_model = -1;    // label indexes (telemetry::Metrics)
  int metrics_tier = -1;
  // The client API (api/codec.hpp): its request, answer and error shapes. OpenAI's for
  // every path that is not a client API's.
  const api::Codec* codec = &api::openai_chat();
  tokenizer::Encoding encoding = tokenizer::Encoding::cl100k_base;  // the route's, for counting tokens
  std::string answer;        // the client's whole answer, kept only when a filter asked (keep_answer)
  bool keep_answer = false;
  std::string completion;    // the same as a chat.completion, kept only when a filter asked (keep_completion)
  bool keep_completion = false;
  cache::Flight* shares = nullptr;  // other requests share this one's generation (filters::Request::shares)
  std::optional<config::Price> price;  // the route's (models[].price): the record's money estimates
  bool batch_follower = false;  // this attempt's answer came from another request's batched call
  filters::Pass* pass = nullptr;  // the request's filters, for their answered hooks
  filters::Reroute reroute;       // where a filter sent the request instead (overload)
  std::uint64_t load_signature = 0;  // load_options steer: prefer a backend loaded with these (0: none)
  std::string_view rerouted_to;   // the light model serving it (the record's served_by)
  LiveRequest* live = nullptr;    // in the worker's list while it runs
  filters::Interrupt interrupt;   // a waiting filter's wake-up, for a cancel from outside
};

// The outcome of relaying one upstream answer.
struct Relay {
  Reason reason = Reason::ok;
  std::string error;
  double ttft_ms = -1;
  Clock::time_point first_token_at{};
  Clock::time_point last_token_at{};
  bool client_gone = false;
  bool error_frame_sent = false;  // the translator already wrote it
};

// The response headers a browser script may read on a CORS reply.
inline constexpr const char* kCorsExposed =
    "x-request-id, retry-after, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, "
    "x-ratelimit-reset-requests, x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens, "
    "x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset, x-sluice-instance";

// A stream's last writes after its total deadline (the error event, the end) get this
// long: every request ends within timeouts.total and this grace.
inline constexpr Ms kEndGrace{1000};

// A stream open on a worker: what the drain's cut needs to end it.
// A request in flight on a worker: what /admin/requests lists (live.hpp), and what the
// drain's cut and an operator's cancel need to end it.
struct LiveRequest {
  Context* ctx;
  std::uint64_t id = 0;  // the gateway's own (/admin/requests/<id>/cancel): random, unique in the fleet
  http::AbortHandle* abort = nullptr;  // its upstream exchange, while one runs
  Reason stop = Reason::ok;  // ended from outside: shutting_down (the drain's cut) or cancelled
  bool stream = false;       // streaming to its client now
  std::size_t slot = 0;      // its place in the worker's list
};

// A worker's requests in flight (/admin/requests, cancel, the drain's cut). Held by the
// handler and by each request's frame.
struct LiveList {
  std::vector<LiveRequest*> all;
  void add(LiveRequest& r) {
    r.slot = all.size();
    all.push_back(&r);
  }
  void remove(LiveRequest& r) {
    all[r.slot] = all.back();
    all[r.slot]->slot = r.slot;
    all.pop_back();
  }
};

inline std::string stop_message(Reason r) {
  return r == Reason::cancelled ? "an operator cancelled this request" : "the gateway is shutting down";
}

class WorkerHandler final : public LiveSource {
 public:
  WorkerHandler(Shared& g, net::any_io_executor ex, bool admin_listener);

  awaitable<void> handle(http::Exchange& ex);

 private:
  // What is served before a request is in flight (and never reaches a model): CORS
  // preflights, the probes, the console's files, the status pages, the admin API, the
  // admin listener's own paths. True when it answered. (Its own coroutine: the frame of
  // a request in flight, held for a whole stream, keeps none of this.)
  awaitable<bool> serve_local(http::Exchange& ex, Context& ctx);

  // The request by its path and method (all but the probes and the status pages). Not a
  // coroutine: it returns the one that serves the request, so no frame of its own stays
  // on a stream's stack.
  awaitable<void> route(http::Exchange& ex, Context& ctx, std::string_view path, std::string_view method);

  // A CORS preflight from an allowed origin (its Allow-Origin header is set): the methods,
  // the headers it asked for (when they are plain header names) and how long to keep it.
  awaitable<void> cors_preflight(http::Exchange& ex, Context& ctx);

  // The request's reply: takes the headers collected for it (a request has one reply).
  http::Response json_reply(int status, std::string body, Context& ctx) {
    http::Response r;
    r.status = status;
    r.body = std::move(body);
    r.headers = std::move(ctx.headers);
    return r;
  }

  awaitable<void> local_reply(http::Exchange& ex, Context& ctx, Reason reason, std::string message,
                              std::string_view param = {});

  // Phase: authenticate. Deny by default. Returns the reason of a failure.
  std::optional<Reason> authenticate(http::Exchange& ex, Context& ctx);

  awaitable<void> auth_failure(http::Exchange& ex, Context& ctx, Reason reason);

  // GET /history and /history/stats. A key sees its own requests only; an admin key sees
  // everyone's. The query runs on the query thread: a database read never blocks a worker.
  awaitable<void> history_query(http::Exchange& ex, Context& ctx, bool stats);

  static std::string_view query_string(const http::Exchange& ex);

  // /admin/ (admin.cpp). Reading needs an admin or viewer key, a change an admin key; on the
  // admin listener no key is asked. Not a request record: the access log keeps the line,
  // and a change is an audit record of its own.
  awaitable<void> admin(http::Exchange& ex, Context& ctx, std::string_view method, std::string_view path);

  // Who acts on the admin listener, where no key is asked.
  static const config::ApiKey& admin_listener_key();

  // POST /v1/messages/count_tokens: the prompt's tokens by OpenAI's chat formula, exact
  // with the BPE where its rank files are loaded (with token quotas), else estimated.
  // Anthropic's tokenizer is not public: for Claude models this is an approximation.
  awaitable<void> count_tokens(http::Exchange& ex, Context& ctx);

  // GET /v1/models (`one` empty) and GET /v1/models/{model}: the aliases the key may use.
  // Anthropic clients (they send anthropic-version) get the Models API's shapes. A model
  // the key may not use is as absent as one that does not exist (404 model_not_found).
  awaitable<void> models(http::Exchange& ex, Context& ctx, std::string_view one);

  // GET /v1/responses/{id}, DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items:
  // the tenant's stored responses (filters/conversations.cpp stores them).
  awaitable<void> stored_response(http::Exchange& ex, Context& ctx, std::string_view rest, std::string_view method);

  // Phases 4..13 for a generation (any client API: its codec decodes the request).
  awaitable<void> generate(http::Exchange& ex, Context& ctx);

  // Admitted: to the route's backends, or where the gate sent it on overload (the light
  // model's backends, or the canned reply).
  awaitable<void> overload_or_dispatch(http::Exchange& ex, Context& ctx, llm::ChatRequest& creq, const RouteRuntime& rr,
                                       const RoutingTable& tab);

  // The answer is whole and good, its last bytes not yet sent: the filters' answered hooks
  // (what the cache keeps is kept before the client can ask again). A hook that fails
  // costs the client nothing.
  static void answered(Context& ctx) noexcept;

  filters::Request filter_request(filters::Kind kind, http::Exchange& ex, Context& ctx, llm::ChatRequest& creq,
                                  const RouteRuntime& rr, const RoutingTable& tab);

  // Whether every backend that may serve the route (its own, its canary's, its fallbacks')
  // serves the client's API itself.
  static bool served_natively(const RouteRuntime& rr, const api::Codec& codec);

  // One phase of the chain; false when a filter ended the request. Its end hooks then run
  // at once (a reservation or a slot is not held while the refusal is written), and the
  // reply is made here: a local reply with the filter's reason, and Retry-After if set.
  awaitable<bool> run_phase(filters::Pass& pass, filters::Phase phase, http::Exchange& ex, Context& ctx);

  // Settlement's rule, on every path: the upstream's usage where it is valid (a
  // non-negative integer; the parsers read anything else as -1), else the exact count of
  // what was sent and relayed. The prompt: counted with the route's BPE when its rank file
  // is loaded (and the body is small enough to count), else the reservation's prompt bound.
  std::int64_t settled_prompt(std::int64_t reported, const llm::ChatRequest& creq, const Context& ctx,
                              std::size_t body_bytes) const;

  // The request options worth grouping by in the history (set by the client only).
  static void record_options(const llm::ChatRequest& creq, telemetry::RequestRecord& rec);

  struct ErrorAnswer {
    int status = 0;
    std::string body;
    std::string retry_after;
  };

  // A failure before any byte reached the client: the dispatcher may still try elsewhere.
  struct Failure {
    Reason reason = Reason::upstream_error;
    std::string message;
    std::optional<ErrorAnswer> answer;  // a non-2xx upstream answer
  };

  // Whether another backend might do better (the upstream's fault, and time is left).
  static bool retryable(const Failure& f);

  // Whether a finished exchange that was answered counts against the backend.
  static bool upstream_failed(const telemetry::RequestRecord& r);

  awaitable<void> reply_failure(http::Exchange& ex, Context& ctx, Failure& f, config::Provider wire);

  // Phase: choose a backend and call it; retry elsewhere, then on the fallbacks, while
  // nothing has reached the client. The canary or the stable set first, then the other.
  awaitable<void> dispatch(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const RouteRuntime& rr);

  // Every backend the request could go to was tried or out: the route's canned reply, or
  // no_backend naming what each said. (Its own coroutine: dispatch's frame, held for a
  // whole stream, keeps none of these strings.)
  awaitable<void> exhausted(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const RouteRuntime& rr,
                            std::string tried);

  // Where a request falls in [0, 1) for the canary split: a hash of the key or the user
  // when the canary is sticky (the same client stays on one side while the weight holds),
  // else a draw.
  double canary_draw(const Context& ctx, const llm::ChatRequest& creq, const config::CanaryConfig& c) noexcept;

  // A live request's id: xorshift64* on a 64-bit random seed per worker (a few ns; ids of
  // requests in flight at once across a fleet do not meet).
  std::uint64_t next_live_id() noexcept {
    live_rng_ ^= live_rng_ >> 12;
    live_rng_ ^= live_rng_ << 25;
    live_rng_ ^= live_rng_ >> 27;
    return live_rng_ * 0x2545F4914F6CDD1Dull;
  }

  static std::string live_id_text(std::uint64_t id) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
    return buf;
  }

  // A uniform number in [0, 1) (canary split), per worker.
  double next_unit() noexcept {
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return static_cast<double>((rng_ * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
  }

  // The route's canned reply: answered as if an OpenAI upstream had sent it, through the
  // same translation as a real answer (so every dialect and streaming work alike).
  awaitable<void> canned_reply(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const std::string& text,
                               std::string why);

  // A stream made here (a canned reply, a kept answer: chat.completion.chunk frames, as
  // an OpenAI upstream would send them), sent at once in the client's API. Returns the
  // stream's final object (the Responses API's).
  awaitable<std::string> stream_at_once(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                        std::string_view chunks);

  // A filter's own answer (filters::LocalAnswer: a cache hit), under this request's id, in
  // the client's API, whole or streamed at once. Nothing was generated: no tokens are
  // charged (the record's saved_tokens says what it spared).
  awaitable<void> local_answer(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                               const filters::LocalAnswer& a);

  // A request that joined a generation in flight (coalescing, filters/cache.cpp): the
  // answer is read from it as it comes, from the start, under this request's own id, in
  // its own API, whole or streamed (whatever the leader asked). The client is charged what
  // it got: the whole answer's usage, or (a stream it left) the prompt and what it read.
  awaitable<void> follow(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, cache::Flight& f);

  // What a request got from a backend's breakers before going there.
  struct Passes {
    upstream::Breaker::Pass backend{true, false, 0}, provider{true, false, 0};
  };

  // One upstream exchange on one backend, with its bookkeeping (in flight, balancer,
  // breakers, health, canary judge, metrics). Returns the failure when nothing reached the
  // client and it was not answered; nullopt when the exchange concluded.
  awaitable<std::optional<Failure>> attempt(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                            const RouteRuntime& owner, const RouteRuntime& set, int member,
                                            BackendRuntime& be, Passes passes, bool judged, bool is_canary);

  void rolled_back(const RouteRuntime& rr);

  // The failure of a request ended from outside (an operator's cancel), if it was.
  static std::optional<Failure> stopped_from_outside(const Context& ctx);

  static awaitable<std::optional<Failure>> failed_now(Failure f);

  // Phases 7..13: the upstream call and the relay. Not a coroutine: it builds the upstream
  // request and returns the exchange that sends it (streamed or whole), which holds the
  // request in its own frame; a stream's stack has one frame fewer.
  awaitable<std::optional<Failure>> relay(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                          const BackendRuntime& be, const config::Route& route);

  // The non-streamed exchange.
  awaitable<std::optional<Failure>> whole_exchange(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                                   const BackendRuntime& be, const config::Route& route, bool native,
                                                   http::ClientRequest ureq, Clock::time_point deadline);

  // How a failed upstream exchange is reported (before any byte reached the client).
  static std::pair<Reason, std::string> classify(const http::ClientError& err, bool awaiting_first_token);

  // The body of a non-2xx upstream answer, bounded in size and time.
  static awaitable<ErrorAnswer> read_error_answer(http::ClientResponse& resp);

  // A non-2xx upstream answer, before anything reached the client. Client errors that an
  // OpenAI-compatible upstream found in a valid request pass through unchanged, so SDKs see
  // the provider's own message; the rest is the gateway's problem to report (502).
  awaitable<void> reply_upstream_error(http::Exchange& ex, Context& ctx, ErrorAnswer& a, config::Provider wire);

  // The message of a structured API error ({"error":{"message":...}} from OpenAI-compatible
  // servers and Anthropic, {"error":"..."} from Ollama), cut to 300 bytes; empty for
  // anything else. An upstream's raw bytes (a stack trace, an HTML page, an internal host
  // name) never reach a client.
  static std::string api_error_message(std::string_view body);

  awaitable<std::optional<Failure>> reply_whole(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                                 config::Provider wire, bool native, std::string& text);

  // Streaming, as one loop: the upstream is read only when the client took the frames of
  // the last read, so a slow client holds back the upstream (TCP back-pressure reaches the
  // model server) and a stream never holds more than one read's frames. The waits of the
  // loop carry the deadlines (first token, idle gap, total), the heartbeat (served while
  // the upstream is silent, see http::Quiet) and two ways out: a watch on the client
  // connection and the drain's cut both abort the upstream exchange, which ends the wait
  // at once. The response head goes out with the first frame (or the first heartbeat), so
  // a failure before that is still a plain HTTP error.
  awaitable<std::optional<Failure>> stream_exchange(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                                     const BackendRuntime& be, bool native,
                                                     http::ClientRequest ureq, Clock::time_point deadline);

  // The stream loop's body: reads the upstream, translates, writes to the client, until
  // the upstream ends, something fails, the client leaves or the drain cuts the stream.
  template <class Fail, class Write>
  awaitable<void> pump(http::ClientResponse& resp, llm::StreamTranslator& tr, Relay& relay,
                              const LiveRequest& live, Fail& fail, Write& write, http::Quiet& quiet,
                              Clock::time_point start, Clock::time_point first_token_deadline,
                              Clock::time_point deadline);

  // The streams open on this worker. While there are any, a timer looks four times a
  // second whether the drain's cut time (g_.cut_streams_at) has come, and ends them with a
  // `shutting_down` event: their loops may be waiting on a silent upstream.
  void stream_opened(LiveRequest& s, http::AbortHandle& abort);


  // LiveSource (live.hpp), on this worker's thread.
  void live(std::vector<LiveInfo>& out) const override;

  Cancelled cancel(std::string_view id_text) override;

  void arm_cut_timer();

  // What the tokens charged cost at the route's price, and what the saved ones would have.
  static void estimate_money(const config::Price& p, telemetry::RequestRecord& r);

  void record(Context& ctx);

  // The routing table, refreshed when a reload installed a new one.
  const std::shared_ptr<const RoutingTable>& table() {
    if (g_.router->version() != table_->version) table_ = g_.router->table();
    return table_;
  }

  const bool admin_listener_;  // serves the probes and status pages only, without a key
  Shared& g_;
  const config::Config& cfg_;
  std::shared_ptr<const RoutingTable> table_;
  keys::Registry::Reader keys_;  // the keys in force, as this worker last saw them
  TrustedProxies proxies_;  // trusted_proxies: whose X-Forwarded-For names the client
  std::uint64_t rng_ = std::random_device{}() | 1;  // canary split
  std::uint64_t live_rng_ = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32 | rd()) | 1;
  }();
  std::unique_ptr<http::Client> client_;
  std::unique_ptr<limits::WorkerLimiter> limiter_;
  std::shared_ptr<conversations::WorkerStore> conversations_;  // stored responses (null on the admin listener)
  std::shared_ptr<cache::WorkerCache> cache_;                  // the response cache (null on the admin listener)
  std::unique_ptr<EmbedBatcher> batcher_;                      // embeddings micro-batching (not on the admin listener)
  // The request policies, in order; each pass holds it too (a frame destroyed after the
  // handler, at a forced stop, drops its filters' states through it).
  std::shared_ptr<const filters::Chain> chain_ = std::make_shared<const filters::Chain>();
  telemetry::Metrics::Worker* metrics_ = nullptr;
  std::shared_ptr<LiveList> live_ = std::make_shared<LiveList>();  // the requests in flight
  net::steady_timer cut_timer_;
  bool cut_timer_armed_ = false;
};

}  // namespace sluice::gateway::worker
