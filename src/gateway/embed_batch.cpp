#include "gateway/embed_batch.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <functional>
#include <unordered_map>

#include "config/models.hpp"
#include "gateway/router.hpp"
#include "llm/embeddings.hpp"
#include "llm/wire.hpp"
#include "telemetry/metrics.hpp"

namespace sluice::gateway {

namespace net = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// One request in a batch: its inputs (copied: its frame may go before the batch is sent)
// and, once the call ended, its reply.
struct Waiter {
  explicit Waiter(net::any_io_executor ex) : wake(std::move(ex)) {}
  std::vector<json::value> inputs;
  std::int64_t weight = 1;  // its share of the usage: its prompt estimate
  BatchReply reply;
  bool done = false;
  net::steady_timer wake;
};

// Requests bound for one backend that can share a call; what the call needs is copied (a
// reload may drop the backend while the batch waits).
struct Batch {
  explicit Batch(net::any_io_executor ex) : window(std::move(ex)) {}
  std::string key;
  llm::ChatRequest first;  // the first request, without its input
  config::Provider wire{};
  config::Backend backend;
  http::Target target;
  http::HeaderList headers;
  milliseconds connect{0};
  std::size_t max_bytes = 0;
  Clock::time_point deadline = Clock::time_point::max();
  std::vector<std::shared_ptr<Waiter>> waiters;
  std::size_t inputs = 0;
  bool sent = false;
  net::steady_timer window;
};

milliseconds left_until(Clock::time_point t) {
  return std::max(std::chrono::duration_cast<milliseconds>(t - Clock::now()), milliseconds(1));
}

}  // namespace

struct EmbedBatcher::State {
  State(net::any_io_executor e, http::Client& c, BatchCounters& n) : ex(std::move(e)), client(c), counters(n) {}
  net::any_io_executor ex;
  http::Client& client;
  BatchCounters& counters;
  std::unordered_map<std::string, std::shared_ptr<Batch>> open;  // by key, until sent
};

namespace {

void finish(Batch& b, const std::function<BatchReply(std::size_t)>& reply_of) {
  for (std::size_t i = 0; i < b.waiters.size(); ++i) {
    b.waiters[i]->reply = reply_of(i);
    b.waiters[i]->reply.follower = i > 0;
    b.waiters[i]->done = true;
    b.waiters[i]->wake.cancel();
  }
}

net::awaitable<void> send(std::shared_ptr<EmbedBatcher::State> st, std::shared_ptr<Batch> b) {
  if (b->sent) co_return;
  b->sent = true;
  b->window.cancel();
  if (auto it = st->open.find(b->key); it != st->open.end() && it->second == b) st->open.erase(it);
  json::array inputs;
  std::vector<std::size_t> counts;
  std::vector<std::int64_t> weights;
  for (const auto& w : b->waiters) {
    for (auto& v : w->inputs) inputs.push_back(std::move(v));
    counts.push_back(w->inputs.size());
    weights.push_back(w->weight);
  }
  st->counters.calls.fetch_add(1, std::memory_order_relaxed);
  st->counters.requests.fetch_add(b->waiters.size(), std::memory_order_relaxed);
  st->counters.inputs.fetch_add(inputs.size(), std::memory_order_relaxed);
  const llm::ChatRequest merged = llm::merge_embeddings(b->first, std::move(inputs));
  auto call = llm::build_call(b->wire, merged, b->backend);
  http::ClientRequest req;
  req.target = std::move(call.target);
  req.body = std::move(call.body);
  req.headers = b->headers;
  const bool many = b->waiters.size() > 1;
  auto alone = [](std::size_t) { return BatchReply{.error = std::nullopt, .status = 0, .body = {}, .retry_after = {}, .alone = true}; };
  auto sent = co_await st->client.send(b->target, req, b->connect, left_until(b->deadline));
  if (auto* err = std::get_if<http::ClientError>(&sent)) {
    const http::ClientError e = *err;
    finish(*b, [&e](std::size_t) { return BatchReply{.error = e, .status = 0, .body = {}, .retry_after = {}}; });
    co_return;
  }
  auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
  const int status = resp.status();
  const std::string retry_after(resp.header("retry-after"));
  const bool ok = status >= 200 && status <= 299;
  auto body = co_await resp.read_all(ok ? b->max_bytes : 64 * 1024, ok ? left_until(b->deadline) : milliseconds(5000));
  if (auto* err = std::get_if<http::ClientError>(&body)) {
    resp.abort();
    if (ok && many && err->kind == http::ClientErrc::too_large) {  // each alone may fit
      finish(*b, alone);
      co_return;
    }
    if (ok) {
      const http::ClientError e = *err;
      finish(*b, [&e](std::size_t) { return BatchReply{.error = e, .status = 0, .body = {}, .retry_after = {}}; });
      co_return;
    }
  }
  std::string text = std::holds_alternative<std::string>(body) ? std::move(std::get<std::string>(body)) : std::string();
  if (!ok && many && status >= 400 && status <= 499 && status != 429) {
    finish(*b, alone);  // one input may be at fault (too long...): not the others' error
    co_return;
  }
  if (!ok) {  // every request gets the upstream's error answer (each may retry elsewhere)
    finish(*b, [&](std::size_t) { return BatchReply{.error = std::nullopt, .status = status, .body = text, .retry_after = retry_after}; });
    co_return;
  }
  auto parts = llm::split_embeddings_answer(b->wire, text, counts, weights);
  if (!parts && many) {
    finish(*b, alone);
    co_return;
  }
  if (!parts) {
    const http::ClientError e{http::ClientErrc::protocol, "the upstream's answer to a batched call does not hold one vector per input"};
    finish(*b, [&e](std::size_t) { return BatchReply{.error = e, .status = 0, .body = {}, .retry_after = {}}; });
    co_return;
  }
  finish(*b, [&](std::size_t i) {
    return BatchReply{.error = std::nullopt, .status = status, .body = std::move((*parts)[i]), .retry_after = {}};
  });
}

net::awaitable<void> after_window(std::shared_ptr<EmbedBatcher::State> st, std::shared_ptr<Batch> b, milliseconds window) {
  b->window.expires_after(window);
  boost::system::error_code ec;
  co_await b->window.async_wait(net::redirect_error(net::use_awaitable, ec));
  co_await send(st, b);
}

}  // namespace

EmbedBatcher::EmbedBatcher(net::any_io_executor ex, http::Client& client, BatchCounters& counters)
    : st_(std::make_shared<State>(std::move(ex), client, counters)) {}

EmbedBatcher::~EmbedBatcher() = default;

net::awaitable<BatchReply> EmbedBatcher::submit(const BackendRuntime& be, const config::EmbeddingBatch& cfg,
                                                const llm::ChatRequest& req, http::HeaderList headers,
                                                Clock::time_point deadline, milliseconds connect_timeout,
                                                std::size_t max_bytes) {
  auto w = std::make_shared<Waiter>(st_->ex);
  w->inputs = llm::embedding_inputs(req);
  w->weight = std::max<std::int64_t>(req.prompt_tokens_estimate, 1);
  std::string key = be.name;
  key += '\n';
  key += be.label;
  key += '\n';
  key += req.model;
  key += '\n';
  key += llm::embedding_batch_key(req);
  auto open_batch = [&]() {
    auto b = std::make_shared<Batch>(st_->ex);
    b->key = key;
    b->first = llm::merge_embeddings(req, {});
    b->wire = be.wire;
    b->backend = be.cfg;
    b->target = be.target;
    b->headers = std::move(headers);
    b->connect = connect_timeout;
    b->max_bytes = max_bytes;
    st_->open[key] = b;
    net::co_spawn(st_->ex, after_window(st_, b, cfg.window), net::detached);
    return b;
  };
  std::shared_ptr<Batch> b;
  if (auto it = st_->open.find(key); it != st_->open.end() && !it->second->sent) b = it->second;
  if (b && b->inputs + w->inputs.size() > cfg.max_inputs) {
    net::co_spawn(st_->ex, send(st_, b), net::detached);  // full: it leaves now, this one starts the next
    b.reset();
  }
  if (!b) b = open_batch();
  b->waiters.push_back(w);
  b->inputs += w->inputs.size();
  b->deadline = std::min(b->deadline, deadline);
  if (b->inputs >= cfg.max_inputs) net::co_spawn(st_->ex, send(st_, b), net::detached);
  while (!w->done) {
    w->wake.expires_at(Clock::time_point::max());
    boost::system::error_code ec;
    co_await w->wake.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  co_return std::move(w->reply);
}

void BatchCounters::render(std::string& out) const {
  auto counter = [&out](std::string_view name, std::string_view help, const std::atomic<std::uint64_t>& v) {
    telemetry::metric_help(out, name, "counter", help);
    telemetry::metric_line(out, name, "", static_cast<double>(v.load(std::memory_order_relaxed)));
  };
  counter("sluice_embedding_batch_calls_total", "Upstream calls made for embeddings micro-batches.", calls);
  counter("sluice_embedding_batch_requests_total", "Embeddings requests served through micro-batches.", requests);
  counter("sluice_embedding_batch_inputs_total", "Inputs those calls carried.", inputs);
}

}  // namespace sluice::gateway
