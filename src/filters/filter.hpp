#pragma once
// Request policies as filters (docs/phases.md, "Filters"): each policy that acts on a
// request (model access, billed fields, message caps, rate limits and token quotas, the
// concurrency gate; later the cache, coalescing, guardrails) is one Filter with
//   - its configuration (read from its section of the Config when the chain is built;
//     a policy that is off is not in the chain at all),
//   - its per-request state (a struct; the chain keeps every filter's state of one request
//     in one buffer, without an allocation per filter),
//   - hooks at named phases, called in the chain's order:
//       request  after parse and route, on the request in chat-completions form;
//       admit    admission: may wait (Redis, the queue) and may refuse;
//       answered the upstream's answer is whole and good, before its last bytes go to the
//                client (a 200's body, a stream's end): what a filter keeps of it (the
//                cache) is kept before the client can ask again. Not called for an answer
//                that failed, or one a filter gave (a cache hit);
//       end      after the answer (or a refusal, or an exception), before the record:
//                settle, release. Called, last filter first, for every filter that saw
//                the request (one of its request or admit hooks ran).
// A filter that needs the client's whole answer in its end hook asks for it in its
// request hook (*Request::keep_answer = true): the handler then keeps a copy of it
// (Request::answer), for that request only.
// A hook answers go, stop (the request ends with the filter's Stop: a local reply with
// its reason, message, param and Retry-After), or wait (the chain then awaits the
// filter's wait(), which answers go or stop): the common case stays a plain call, and a
// coroutine frame is made only for a filter that really waits.
//
// The handler orchestrates (authenticate, parse, route, chain, dispatch, record); it knows
// no filter's insides. A new policy is a new file in src/filters/, declared and listed in
// registry.cpp. Modelled on Envoy's HTTP filters (per-request filter state, StopIteration)
// and Pingora's ProxyHttp phases.
#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/reason.hpp"
#include "http/server.hpp"

namespace sluice::config {
struct ApiKey;
struct Config;
struct Route;
enum class Provider;
}  // namespace sluice::config
namespace sluice::llm {
struct ChatRequest;
}
namespace sluice::cache {
class Flight;
}
namespace sluice::telemetry {
struct RequestRecord;
}
namespace sluice::tokenizer {
enum class Encoding;
}

namespace sluice::filters {

enum class Phase : std::uint8_t { request, admit, answered, end };
inline constexpr unsigned bit(Phase p) { return 1u << static_cast<unsigned>(p); }

// What the request asks of the upstream.
enum class Kind : std::uint8_t {
  generate,      // /v1/chat/completions, /v1/messages
  count_tokens,  // /v1/messages/count_tokens: nothing is generated
};

// The route a request resolved to (its alias's), as the filters need it.
struct RouteView {
  const config::Route* config = nullptr;
  // The routing table's configuration (every route as last reloaded): a filter's own model
  // calls (the semantic cache's embedding route) find their route there.
  const config::Config* table = nullptr;
  // Every wire that may serve it: its backends', its canary's and its fallbacks'.
  std::span<const config::Provider> wires;
  // Those whose route refuses the fields they cannot honour (no drop_params).
  std::span<const config::Provider> strict_wires;
  // Whether all of them serve the client's API natively (api::Codec::native_on).
  bool native = false;
  tokenizer::Encoding encoding{};
};

// Where a filter sent the request instead of its route (models[].overload): a light
// model's backends, or the route's canned reply.
struct Reroute {
  std::string model;  // the alias whose backends serve it ("" = none)
  bool canned = false;
};

// How a request is ended from outside while a filter waits (an operator's cancel,
// /admin/requests): the waiting filter sets `wake` for the time it waits; the handler sets
// `reason` and calls it. (On the request's own worker thread.)
struct Interrupt {
  std::function<void()> wake;
  Reason reason = Reason::ok;
};

// What a filter sees of one request. `chat` is the request in chat-completions form, as
// it goes upstream: for /v1/messages, Anthropic's `system` is a system message and each
// `tool_result` block a tool message (docs/translation.md). `http` is the client's
// request as it was sent (headers, body bytes).
struct Request {
  Kind kind = Kind::generate;
  const config::ApiKey& key;
  llm::ChatRequest& chat;
  std::string_view api;    // the client API (api::Codec::name): "chat.completions", "messages"
  http::Exchange& ex;      // the client's request and connection (a waiting filter watches it)
  RouteView route;
  http::HeaderList& reply_headers;  // sent on the request's reply, whatever it is
  telemetry::RequestRecord& rec;    // the record: filters fill their columns
  // The client's whole answer as it was sent (a 200's body, or a stream's final object),
  // for the end hooks, when a filter set *keep_answer in its request hook; else empty.
  const std::string* answer = nullptr;
  bool* keep_answer = nullptr;
  // The same answer in the internal form (a chat.completion, also for a stream once it
  // ended well), for the end hooks, when a filter set *keep_completion in its request
  // hook; empty otherwise, and for an answer a backend gave in the client's API itself.
  const std::string* completion = nullptr;
  bool* keep_completion = nullptr;
  // A filter that lets other requests share this one's generation (coalescing) sets
  // *shares in its admit hook: the handler hands it the answer's chat.completion.chunk
  // frames as they come, and goes on generating after the client left while another
  // request still reads. (The filter publishes the end in its end hook.)
  cache::Flight** shares = nullptr;
  // Set by a filter (the gate, on overload) to serve the request elsewhere.
  Reroute* reroute = nullptr;
  // Set by the load_options filter (policy steer): the request's load options
  // (upstream::load_signature); the handler prefers a backend loaded with them.
  std::uint64_t* load_signature = nullptr;
  Interrupt* interrupt = nullptr;
};

// An answer a filter gives itself instead of the upstream (a cache hit): a chat.completion,
// sent in the client's API, whole or streamed, under the request's own id.
struct LocalAnswer {
  std::string completion;
  std::int64_t prompt_tokens = 0, completion_tokens = 0;  // what generating it cost (saved now)
  // Or a generation in flight that this request joined (coalescing): the answer is read
  // from it, from the start and then as it comes, and the client is charged what it got.
  std::shared_ptr<cache::Flight> flight;
};

// Why a filter ended the request: the local reply. retry_after_ms < 0: no Retry-After.
// With `answer` set (and reason ok), the request is answered with it (a 200): the end
// hooks then run after it was sent.
struct Stop {
  Reason reason = Reason::ok;
  std::string message;
  std::string param;
  std::int64_t retry_after_ms = -1;
  std::optional<LocalAnswer> answer;
  // With reason `queued`: the 202's JSON body ({"status":"queued","eta":...}).
  std::string body;
};

enum class Next : std::uint8_t { go, stop, wait };

class Filter {
 public:
  virtual ~Filter() = default;
  virtual std::string_view name() const = 0;
  virtual unsigned phases() const = 0;  // bit(Phase::...) of each hook it has

  // Per-request state, made before the request's first hook and dropped with the request.
  virtual std::size_t state_size() const { return 0; }
  virtual std::size_t state_align() const { return 1; }
  virtual void make_state(void*) const {}
  virtual void drop_state(void*) const {}

  virtual Next on(Phase, Request&, void* state, Stop&) { return Next::go; }
  // Called after on() answered wait; answers go or stop.
  virtual boost::asio::awaitable<Next> wait(Phase, Request&, void* state, Stop&);
  virtual void answered(Request&, void* state) {}
  virtual void end(Request&, void* state) {}
};

// A filter with a typed per-request state S (default-constructed per request).
template <class S>
class FilterWith : public Filter {
 public:
  std::size_t state_size() const final { return sizeof(S); }
  std::size_t state_align() const final { return alignof(S); }
  void make_state(void* p) const final { ::new (p) S(); }
  void drop_state(void* p) const final { static_cast<S*>(p)->~S(); }

  Next on(Phase ph, Request& r, void* s, Stop& stop) final { return on(ph, r, *static_cast<S*>(s), stop); }
  boost::asio::awaitable<Next> wait(Phase ph, Request& r, void* s, Stop& stop) final {
    return wait(ph, r, *static_cast<S*>(s), stop);
  }
  void answered(Request& r, void* s) final { answered(r, *static_cast<S*>(s)); }
  void end(Request& r, void* s) final { end(r, *static_cast<S*>(s)); }

 protected:
  virtual Next on(Phase, Request&, S&, Stop&) { return Next::go; }
  virtual boost::asio::awaitable<Next> wait(Phase, Request&, S&, Stop&);
  virtual void answered(Request&, S&) {}
  virtual void end(Request&, S&) {}
};

// The filters of one worker, in order; built once per worker (registry.hpp) and shared
// with every pass, so a request frame destroyed late (a forced stop) still finds it.
class Chain {
 public:
  static constexpr std::size_t kMaxFilters = 64;
  void add(std::unique_ptr<Filter> f);  // null (a policy that is off) is skipped; throws beyond kMaxFilters
  std::size_t size() const { return filters_.size(); }
  const Filter& at(std::size_t i) const { return *filters_[i].filter; }

 private:
  friend class Pass;
  struct Entry {
    std::unique_ptr<Filter> filter;
    std::size_t offset = 0;  // of its state in a pass's buffer
  };
  std::vector<Entry> filters_;
  unsigned phases_ = 0;  // every filter's hooks
  std::size_t state_bytes_ = 0;
  std::size_t state_align_ = 1;  // the strictest of the states'
};

// One request's way through a chain: the filters' states and how far it got.
class Pass {
 public:
  Pass(std::shared_ptr<const Chain> chain, Request& req);
  ~Pass();
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  // Runs phase `p` (request or admit) over the filters: go, stop (see stop()), or wait,
  // after which the caller awaits resume(p) for the answer.
  Next run(Phase p);
  boost::asio::awaitable<Next> resume(Phase p);
  // The end hooks of every filter that saw the request, last first; each runs once (a
  // second call runs none again). A hook that throws does not keep the others from
  // running; the first exception is rethrown after them.
  void end();
  // The answered hooks of every filter that saw the request, first first; once (a second
  // call, or one after end(), runs none). Exceptions as in end().
  void answered();
  Stop& stop() { return stop_; }
  Request& request() { return req_; }

 private:
  Next step(Phase p, std::size_t from);  // the hooks of phase p from filter `from` on
  std::shared_ptr<const Chain> chain_;
  Request& req_;
  Stop stop_;
  std::size_t at_ = 0;         // the filter run() stopped at (wait), for resume()
  std::uint64_t entered_ = 0;  // bit i: filter i saw the request and its end hook is due
  bool answered_ = false;
  // Room for every filter's state without an allocation per request: the full set of
  // limits (the rate limits' state alone is 256 bytes) needs 576.
  static constexpr std::size_t kInline = 768;
  alignas(std::max_align_t) std::byte inline_[kInline];
  std::byte* heap_ = nullptr;  // when the states do not fit inline_ (or need more alignment)
  std::byte* states_ = nullptr;
  void* state(std::size_t i) { return states_ + chain_->filters_[i].offset; }
  Filter& filter(std::size_t i) { return *chain_->filters_[i].filter; }
};

template <class S>
boost::asio::awaitable<Next> FilterWith<S>::wait(Phase, Request&, S&, Stop&) {
  co_return Next::go;
}

}  // namespace sluice::filters
