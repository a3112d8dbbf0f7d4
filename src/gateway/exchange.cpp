// One upstream exchange and its relay to the client: the whole answer, or the stream frame
// by frame with its deadlines, heartbeat and the ways out (worker.hpp).
#include <boost/json/parse.hpp>

#include "llm/fold.hpp"
#include "gateway/worker.hpp"

namespace sluice::gateway::worker {

auto WorkerHandler::relay(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                          const BackendRuntime& be, const config::Route& route) -> awaitable<std::optional<Failure>> {
  // Upstream request: the adapter rewrites the body (or the codec, for a backend that
  // serves the client's API itself); credentials and trace go in headers.
  // Cancelled by an operator while it waited (queued, in the filters, between attempts).
  if (auto stopped = stopped_from_outside(ctx)) return failed_now(std::move(*stopped));
  const bool native = ctx.codec->native_on(be.cfg);
  // Answered in the client's own API: nothing in the internal form to share (the
  // requests that joined generate their own at once).
  if (native && ctx.shares) ctx.shares->fail(Reason::upstream_error, "answered natively: not shared");
  auto call = native ? ctx.codec->native_call(creq, be.cfg) : llm::build_call(be.wire, creq, be.cfg);
  http::ClientRequest ureq;
  ureq.target = std::move(call.target);
  ureq.body = std::move(call.body);
  ureq.headers.insert(ureq.headers.end(), be.credentials.begin(), be.credentials.end());
  ureq.headers.emplace_back("traceparent", next_traceparent(ex.request().header("traceparent")));
  ureq.headers.emplace_back("X-Request-Id", ctx.request_id);

  const auto deadline = ctx.start + cfg_.timeouts.total;
  if (creq.stream) return stream_exchange(ex, ctx, creq, be, native, std::move(ureq), deadline);
  return whole_exchange(ex, ctx, creq, be, route, native, std::move(ureq), deadline);
}

auto WorkerHandler::whole_exchange(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                   const BackendRuntime& be, const config::Route& route, bool native,
                                   http::ClientRequest ureq, Clock::time_point deadline) -> awaitable<std::optional<Failure>> {
  const auto& to = cfg_.timeouts;
  // Non-streaming: the answer arrives whole, so only the total deadline bounds it. A
  // watch on the client connection aborts the upstream exchange if the client leaves
  // (measured: a coroutine race here cost about 11,000 instructions per request).
  std::variant<std::monostate, http::ClientError, ErrorAnswer, std::string> outcome;
  bool batched = false;
  ctx.batch_follower = false;
  if (creq.task == llm::Task::embed && route.embedding_batch && !native && batcher_) {
    // Micro-batched with other embeddings requests to this backend (embed_batch.hpp);
    // sent alone when the batch's call failed in a way one request may have caused.
    http::HeaderList headers = ureq.headers;
    auto got = co_await batcher_->submit(be, *route.embedding_batch, creq, std::move(headers), deadline, to.connect,
                                         cfg_.max_upstream_response_bytes);
    if (!got.alone) {
      batched = true;
      ctx.batch_follower = got.follower;
      if (got.error) {
        outcome = std::move(*got.error);
      } else {
        ctx.rec.upstream_status = got.status;
        if (got.status >= 200 && got.status <= 299) outcome = std::move(got.body);
        else outcome = ErrorAnswer{got.status, std::move(got.body), std::move(got.retry_after)};
      }
    }
  }
  if (!batched) {
    http::AbortHandle abort;
    // (Unless others share the generation: then it is read whole for them.)
    ex.watch_client([&abort, shares = ctx.shares] {
      if (!shares || !shares->others_reading()) abort.abort();
    });
    struct Unwatch {  // also on an exception: the watch and the live list refer to `abort`
      http::Exchange& ex;
      LiveRequest* live;
      ~Unwatch() {
        ex.unwatch_client();
        if (live) live->abort = nullptr;
      }
    } unwatch{ex, ctx.live};
    if (ctx.live) ctx.live->abort = &abort;  // an operator's cancel ends the exchange
    auto sent = co_await client_->send(be.target, ureq, to.connect, left_until(deadline), &abort);
    if (auto* err = std::get_if<http::ClientError>(&sent)) {
      outcome = std::move(*err);
    } else {
      auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
      abort.bind([&resp] { resp.abort(); });
      ctx.rec.upstream_status = resp.status();
      if (resp.status() < 200 || resp.status() > 299) {
        outcome = co_await read_error_answer(resp);
      } else {
        auto body = co_await resp.read_all(cfg_.max_upstream_response_bytes, left_until(deadline));
        if (auto* err = std::get_if<http::ClientError>(&body)) {
          resp.abort();
          outcome = std::move(*err);
        } else {
          outcome = std::move(std::get<std::string>(body));
        }
      }
      abort.unbind();
    }
  }
  ex.unwatch_client();  // (idempotent) before replying
  if (auto stopped = stopped_from_outside(ctx)) co_return stopped;
  if (ex.client_gone() && ctx.shares && !native && std::holds_alternative<std::string>(outcome)) {
    // The client left; the requests sharing the generation get the answer.
    if (auto done = llm::read_answer(be.wire, std::move(std::get<std::string>(outcome)), creq, ctx.request_id)) {
      ctx.rec.prompt_tokens = settled_prompt(done->usage.prompt_tokens, creq, ctx, ex.request().body().size());
      ctx.rec.completion_tokens = std::max<std::int64_t>(done->usage.completion_tokens, 0);
      ctx.completion = std::move(done->body);
    }
    ctx.rec.client_cancelled = true;
    ctx.rec.status = http_status(Reason::client_closed);
    ctx.rec.reason = Reason::client_closed;
    co_return std::nullopt;
  }
  if (ex.client_gone() || outcome.index() == 0) {
    outcome = http::ClientError{http::ClientErrc::cancelled, "client closed the connection"};
  }
  if (auto* err = std::get_if<http::ClientError>(&outcome)) {
    auto [reason, message] = classify(*err, false);
    if (reason == Reason::client_closed) {
      ctx.rec.client_cancelled = true;
      co_await local_reply(ex, ctx, reason, std::move(message));
      co_return std::nullopt;
    }
    co_return Failure{reason, std::move(message), std::nullopt};
  }
  if (auto* answer = std::get_if<ErrorAnswer>(&outcome)) {
    co_return Failure{Reason::upstream_error, "upstream answered HTTP " + std::to_string(answer->status),
                      std::move(*answer)};
  }
  co_return co_await reply_whole(ex, ctx, creq, be.wire, native, std::get<std::string>(outcome));
}

std::pair<Reason, std::string> WorkerHandler::classify(const http::ClientError& err, bool awaiting_first_token) {
  switch (err.kind) {
    case http::ClientErrc::cancelled:
      return {Reason::client_closed, "client closed the connection"};
    case http::ClientErrc::connect_failed:
      return {Reason::upstream_unreachable, "upstream unreachable: " + err.message};
    case http::ClientErrc::local_resources:
      // This process, not the upstream: no verdict on the backend (see Settle).
      return {Reason::local_resources, "the gateway could not open a connection: " + err.message};
    case http::ClientErrc::timeout:
      return {awaiting_first_token ? Reason::first_token_timeout : Reason::upstream_timeout,
              "upstream did not answer in time"};
    default:
      return {Reason::upstream_error, "upstream failed: " + err.message};
  }
}

auto WorkerHandler::read_error_answer(http::ClientResponse& resp) -> awaitable<ErrorAnswer> {
  ErrorAnswer a;
  a.status = resp.status();
  a.retry_after = std::string(resp.header("retry-after"));
  auto body = co_await resp.read_all(64 * 1024, Ms(5000));
  if (auto* text = std::get_if<std::string>(&body)) a.body = std::move(*text);
  co_return a;
}

awaitable<void> WorkerHandler::reply_upstream_error(http::Exchange& ex, Context& ctx, ErrorAnswer& a, config::Provider wire) {
  const int st = a.status;
  const bool pass = (st == 400 || st == 413 || st == 422 || st == 429) &&
                    (wire == config::Provider::openai || wire == config::Provider::anthropic) &&
                    !a.body.empty() && a.body.front() == '{';
  if (pass) {
    ctx.rec.status = st;
    ctx.rec.reason = Reason::upstream_error;
    ctx.rec.error = "upstream answered " + std::to_string(st);
    // In the client's dialect, keeping the provider's message.
    std::string body = ctx.codec->upstream_error(st, llm::read_error(wire, std::move(a.body)));
    http::Response r = json_reply(st, std::move(body), ctx);
    if (!a.retry_after.empty()) r.headers.emplace_back("Retry-After", a.retry_after);
    co_await ex.reply(std::move(r));
    co_return;
  }
  // Built in a named local: GCC 12 destroys a temporary made by a conditional inside a
  // co_await expression twice.
  std::string message = "upstream answered HTTP " + std::to_string(st);
  if (auto said = api_error_message(a.body); !said.empty()) message += ": " + said;
  co_await local_reply(ex, ctx, Reason::upstream_error, std::move(message));
}

std::string WorkerHandler::api_error_message(std::string_view body) {
  if (body.empty() || body.front() != '{') return {};
  boost::system::error_code ec;
  auto v = boost::json::parse(body, ec);
  if (ec || !v.is_object()) return {};
  const auto* e = v.get_object().if_contains("error");
  if (!e) return {};
  const boost::json::string* m = nullptr;
  if (e->is_string()) m = &e->get_string();
  else if (e->is_object()) {
    if (const auto* mm = e->get_object().if_contains("message"); mm && mm->is_string()) m = &mm->get_string();
  }
  return m ? cut_text(std::string_view(m->data(), m->size()), 300) : std::string();
}

auto WorkerHandler::reply_whole(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                config::Provider wire, bool native, std::string& text) -> awaitable<std::optional<Failure>> {
  auto done = native ? ctx.codec->native_answer(std::move(text), creq)
                     : llm::read_answer(wire, std::move(text), creq, ctx.request_id);
  if (!done) co_return Failure{Reason::upstream_bad_response, "upstream sent a body that is not a completion", {}};
  const double gen_ms = ms_since(ctx.start);
  // Settlement's rule (settled_prompt): an invalid completion count falls back to the
  // count of the completion text the client receives.
  ctx.rec.prompt_tokens = settled_prompt(done->usage.prompt_tokens, creq, ctx, ex.request().body().size());
  ctx.rec.completion_tokens =
      done->usage.completion_tokens >= 0
          ? done->usage.completion_tokens
          : static_cast<std::int64_t>(g_.tokens.count(llm::completion_output_text(done->body), ctx.encoding));
  if (ctx.rec.completion_tokens > 0 && gen_ms > 0) {
    ctx.rec.tokens_per_s = ctx.rec.completion_tokens * 1000.0 / gen_ms;
  }
  ctx.rec.status = 200;
  if (ctx.keep_completion && !native) ctx.completion = done->body;
  std::string body = native ? std::move(done->body) : ctx.codec->answer(*done, creq, ctx.request_id);
  if (ctx.keep_answer) ctx.answer = body;
  answered(ctx);
  http::Response r = json_reply(200, std::move(body), ctx);
  if (!co_await ex.reply(std::move(r))) ctx.rec.client_cancelled = true;
  co_return std::nullopt;
}

auto WorkerHandler::stream_exchange(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                    const BackendRuntime& be, bool native,
                                    http::ClientRequest ureq, Clock::time_point deadline) -> awaitable<std::optional<Failure>> {
  const auto& to = cfg_.timeouts;
  std::unique_ptr<llm::StreamTranslator> translator;
  if (native) {
    translator = ctx.codec->native_stream(creq);
  } else {
    auto chunks = llm::make_stream(be.wire, creq, ctx.request_id);
    // A filter keeps the answer (the cache): folded as its chunks go by; others share
    // the generation (coalescing): its chunks are handed to them too.
    if (ctx.keep_completion) {
      std::function<void(std::string_view)> share;
      if (ctx.shares) share = [f = ctx.shares](std::string_view frames) { f->publish(frames); };
      chunks = llm::fold_stream(std::move(chunks), &ctx.completion, cfg_.max_upstream_response_bytes, std::move(share));
    }
    translator = ctx.codec->stream(std::move(chunks), creq, ctx.request_id);
  }
  // With token quotas, the relayed output is counted with the tokenizer (what a client
  // that leaves before the usage chunk pays); otherwise content chunks approximate it.
  if (ctx.rec.reserved_tokens >= 0) translator->count_output(&g_.tokens, ctx.encoding);
  Relay relay;
  std::optional<ErrorAnswer> upstream_answer;  // a non-2xx head
  // Each attempt gets its own first-token time (a retry after a timeout starts afresh).
  const auto first_token_deadline = std::min(Clock::now() + to.first_token, deadline);

  // The first failure wins; later ones are consequences of it.
  auto fail = [&](Reason r, std::string message) {
    if (relay.reason != Reason::ok) return;
    relay.reason = r;
    relay.error = std::move(message);
  };

  http::AbortHandle abort;
  LiveRequest& live = *ctx.live;
  struct Unlist {  // also on an exception: the worker's list refers to `abort`
    LiveRequest& s;
    http::Exchange& ex;
    telemetry::Metrics::Worker* m;
    ~Unlist() {
      ex.unwatch_client();
      if (m) m->stream_closed();
      s.stream = false;
      s.abort = nullptr;
    }
  } unlist{live, ex, metrics_};
  stream_opened(live, abort);
  // A client that leaves ends the exchange, unless others share the generation: then it
  // goes on for them (its frames written nowhere) until the last of them left too.
  bool detached = false;
  ex.watch_client([&abort, &detached, shares = ctx.shares] {
    if (shares && shares->others_reading()) detached = true;
    else abort.abort();
  });

  auto begin = [&]() -> awaitable<bool> {
    http::HeaderList h = ctx.headers;
    h.emplace_back("Cache-Control", "no-cache");
    h.emplace_back("X-Accel-Buffering", "no");
    co_return co_await ex.begin_stream(200, "text/event-stream", h);
  };
  http::Quiet quiet;
  quiet.at = Clock::now() + to.heartbeat;
  // A write to the client: the head first if it has not gone yet. A client that takes
  // nothing for timeouts.client_write is dropped; past the total deadline, only a short
  // grace is left for the last frames.
  auto write = [&](std::string_view data) -> awaitable<bool> {
    if (detached) co_return ctx.shares->others_reading();
    ex.set_write_timeout(std::min<Ms>(to.client_write, left_until(deadline) + kEndGrace));
    if ((!ex.started() && !co_await begin()) || !co_await ex.write_chunk(data)) {
      detached = ctx.shares && ctx.shares->others_reading();
      co_return detached;
    }
    quiet.at = Clock::now() + to.heartbeat;
    co_return true;
  };
  // Heartbeat: a comment line while nothing was written for timeouts.heartbeat.
  quiet.on_quiet = [&]() -> awaitable<bool> {
    if (co_await write(": keep-alive\n\n")) co_return true;
    relay.client_gone = true;
    co_return false;
  };

  auto sent = co_await client_->send(be.target, ureq, to.connect, left_until(first_token_deadline), &abort, &quiet);
  ureq = {};  // sent: its body (the prompt, maybe long) is not held while the stream lasts
  if (auto* err = std::get_if<http::ClientError>(&sent)) {
    auto [reason, message] = classify(*err, true);
    // The request's whole time ran out (not this attempt's first-token time): no retry.
    if (reason == Reason::first_token_timeout && left_until(deadline).count() == 0) reason = Reason::upstream_timeout;
    if (live.stop != Reason::ok) reason = live.stop, message = stop_message(live.stop);
    fail(reason, std::move(message));
  } else {
    auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
    abort.bind([&resp] { resp.abort(); });
    ctx.rec.upstream_status = resp.status();
    if (resp.status() < 200 || resp.status() > 299) {
      upstream_answer = co_await read_error_answer(resp);
    } else {
      co_await pump(resp, *translator, relay, live, fail, write, quiet, ctx.start, first_token_deadline, deadline);
    }
    abort.unbind();
    // The upstream exchange ends here, before the last writes to the client: its
    // connection goes back to the pool if it was read to the end, else it is closed
    // (and the upstream stops generating).
    std::get<std::unique_ptr<http::ClientResponse>>(sent).reset();
  }
  ex.unwatch_client();
  if (ex.client_gone()) relay.client_gone = true;

  // Settle what happened.
  ctx.rec.ttft_ms = relay.ttft_ms;
  // Settlement's rule (settled_prompt): the upstream's usage where valid, else counted:
  // the prompt as sent, the output as relayed. (A stream that produced nothing is charged
  // nothing unless it ended well: its prompt is not counted.)
  const auto& usage = translator->usage();
  const bool produced = translator->first_token_seen() || translator->done() || usage.completion_tokens >= 0;
  ctx.rec.prompt_tokens = produced ? settled_prompt(usage.prompt_tokens, creq, ctx, ex.request().body().size())
                          : usage.prompt_tokens >= 0 ? usage.prompt_tokens
                                                     : creq.prompt_tokens_estimate;
  ctx.rec.completion_tokens = usage.completion_tokens >= 0 ? usage.completion_tokens : translator->relayed_tokens();
  if (relay.ttft_ms >= 0 && relay.last_token_at > relay.first_token_at && ctx.rec.completion_tokens > 1) {
    ctx.rec.tokens_per_s =
        (ctx.rec.completion_tokens - 1) * 1000.0 / ms_since(relay.first_token_at, relay.last_token_at);
  }
  if (relay.client_gone) {
    // (Followers of a generation this client left get what really ended it.)
    if (ctx.shares && relay.reason != Reason::ok) ctx.shares->fail(relay.reason, relay.error);
    ctx.rec.client_cancelled = true;
    ctx.rec.status = http_status(Reason::client_closed);
    ctx.rec.reason = Reason::client_closed;
    co_return std::nullopt;
  }
  if (upstream_answer) {
    if (!ex.started()) {
      const int st = upstream_answer->status;
      co_return Failure{Reason::upstream_error, "upstream answered HTTP " + std::to_string(st),
                        std::move(*upstream_answer)};
    }
    fail(Reason::upstream_error, "upstream answered HTTP " + std::to_string(upstream_answer->status));
  }
  ex.set_write_timeout(std::min<Ms>(to.client_write, left_until(deadline) + kEndGrace));
  if (relay.reason == Reason::ok) {
    ctx.rec.status = 200;
    if (ctx.keep_answer) ctx.answer = translator->final_answer();
    if (!ex.started()) co_await begin();  // an empty but well-formed stream
    answered(ctx);  // before the end: a client that asks again at once finds it kept
    if (!co_await ex.end_stream()) ctx.rec.client_cancelled = true;
    co_return std::nullopt;
  }
  if (!ex.started()) {
    // Nothing reached the client yet: a plain HTTP error, or another backend.
    if (relay.reason != Reason::shutting_down) co_return Failure{relay.reason, std::move(relay.error), {}};
    co_await local_reply(ex, ctx, relay.reason, relay.error);
    co_return std::nullopt;
  }
  // Mid-stream failure: an error event, then a clean end.
  ctx.rec.status = 200;
  ctx.rec.reason = relay.reason;
  ctx.rec.error = relay.error;
  if (!relay.error_frame_sent) {
    std::string frame = translator->error_event(relay.reason, relay.error);
    if (frame.empty()) frame = ctx.codec->error_event(relay.reason, relay.error);
    co_await ex.write_chunk(frame);
  }
  co_await ex.end_stream();
  co_return std::nullopt;
}

template <class Fail, class Write>
awaitable<void> WorkerHandler::pump(http::ClientResponse& resp, llm::StreamTranslator& tr, Relay& relay,
                                    const LiveRequest& live, Fail& fail, Write& write, http::Quiet& quiet,
                                    Clock::time_point start, Clock::time_point first_token_deadline,
                                    Clock::time_point deadline) {
  std::string frames;
  // After the stream's end marker, only the body's own end is read (so the connection
  // can be pooled), for kEndGrace at most: an upstream that keeps it open, or sends
  // more, does not fail an answer that is whole.
  std::optional<Clock::time_point> end_by;
  for (;;) {
    if (tr.done()) {
      if (!end_by) end_by = std::min(Clock::now() + kEndGrace, deadline);
      if (live.stop != Reason::ok || Clock::now() >= *end_by) co_return;
    }
    if (live.stop != Reason::ok) {
      fail(live.stop, stop_message(live.stop));
      co_return;
    }
    // An upstream that never pauses still ends at the total deadline.
    if (Clock::now() >= deadline) {
      fail(Reason::upstream_timeout, "the request ran past timeouts.total");
      co_return;
    }
    const Ms timeout = end_by                  ? left_until(*end_by)
                       : tr.first_token_seen() ? std::min(cfg_.timeouts.idle, left_until(deadline))
                                               : left_until(first_token_deadline);
    auto piece = co_await resp.read_some(timeout, &quiet);
    frames.clear();
    if (auto* err = std::get_if<http::ClientError>(&piece)) {
      if (relay.client_gone || tr.done()) co_return;  // (after the end: the answer is whole)
      if (live.stop != Reason::ok) {
        fail(live.stop, stop_message(live.stop));
      } else if (err->kind == http::ClientErrc::timeout) {
        const bool out_of_time = left_until(deadline).count() == 0;
        fail(out_of_time                ? Reason::upstream_timeout
             : !tr.first_token_seen()  ? Reason::first_token_timeout
                                       : Reason::upstream_idle_timeout,
             "upstream stream timed out");
      } else if (err->kind == http::ClientErrc::cancelled) {
        relay.client_gone = true;  // the watch aborted the exchange: the client left
      } else {
        fail(Reason::upstream_stream_failed, err->message);
      }
      co_return;
    }
    auto bytes = std::get<std::string_view>(piece);
    if (bytes.empty()) {
      if (!tr.finish(frames)) {
        fail(Reason::upstream_stream_failed, "upstream stream ended before its end marker");
      } else if (!tr.error().empty()) {
        // The upstream sent an error event; it was relayed as is.
        fail(Reason::upstream_stream_failed, tr.error());
        relay.error_frame_sent = true;
      }
      if (!frames.empty() && !co_await write(frames)) relay.client_gone = true;
      co_return;
    }
    const bool had_token = tr.first_token_seen();
    const bool ok = tr.feed(bytes, frames);
    const auto now = Clock::now();
    if (!had_token && tr.first_token_seen()) {
      relay.first_token_at = now;
      relay.ttft_ms = ms_since(start, now);
    }
    if (tr.first_token_seen()) relay.last_token_at = now;
    if (!frames.empty() && !co_await write(frames)) {
      relay.client_gone = true;
      co_return;
    }
    if (!ok) {
      // The translator already produced the error frame.
      fail(Reason::upstream_stream_failed, tr.error().empty() ? "upstream sent an invalid stream" : tr.error());
      relay.error_frame_sent = true;
      co_return;
    }
  }
}

void WorkerHandler::stream_opened(LiveRequest& s, http::AbortHandle& abort) {
  if (metrics_) metrics_->stream_opened();
  s.stream = true;
  s.abort = &abort;
  if (!cut_timer_armed_) arm_cut_timer();
}

void WorkerHandler::arm_cut_timer() {
  cut_timer_armed_ = true;
  cut_timer_.expires_after(Ms(250));
  cut_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || live_->all.empty()) {
      cut_timer_armed_ = false;
      return;
    }
    const auto cut = g_.cut_streams_at.load(std::memory_order_relaxed);
    if (cut != 0 && Clock::now().time_since_epoch().count() >= cut) {
      for (LiveRequest* s : live_->all) {
        if (!s->stream || s->stop != Reason::ok) continue;
        s->stop = Reason::shutting_down;
        s->abort->abort();  // the stream's wait on its upstream ends at once
      }
    }
    arm_cut_timer();
  });
}

}  // namespace sluice::gateway::worker
