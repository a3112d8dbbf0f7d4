// Answers made by the gateway itself, in the client's API: a route's canned reply, a
// filter's own answer (a cache hit), and a request following another's generation (worker.hpp).
#include "llm/fold.hpp"
#include "gateway/worker.hpp"

namespace sluice::gateway::worker {

awaitable<void> WorkerHandler::canned_reply(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const std::string& text,
                                            std::string why) {
  ctx.rec.reason = Reason::canned_reply;
  ctx.rec.error = std::move(why);
  ctx.rec.completion_tokens = 0;
  ctx.rec.prompt_tokens = 0;
  ctx.rec.status = 200;
  std::string upstream = llm::canned_openai_answer(creq, ctx.request_id, text);
  if (creq.stream) {
    co_await stream_at_once(ex, ctx, creq, upstream);
    co_return;
  }
  auto done = llm::read_openai_completion(std::move(upstream));
  std::string out = ctx.codec->answer(*done, creq, ctx.request_id);
  if (!co_await ex.reply(json_reply(200, std::move(out), ctx))) ctx.rec.client_cancelled = true;
}

awaitable<std::string> WorkerHandler::stream_at_once(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                                     std::string_view chunks) {
  auto tr = ctx.codec->stream(llm::make_openai_stream(creq), creq, ctx.request_id);
  std::string frames;
  tr->feed(chunks, frames);
  tr->finish(frames);
  http::HeaderList h = std::move(ctx.headers);
  h.emplace_back("Cache-Control", "no-cache");
  if (!co_await ex.begin_stream(200, "text/event-stream", h) || !co_await ex.write_chunk(frames) ||
      !co_await ex.end_stream()) {
    ctx.rec.client_cancelled = true;
  }
  co_return tr->final_answer();
}

awaitable<void> WorkerHandler::local_answer(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                            const filters::LocalAnswer& a) {
  if (a.flight) {
    struct Leave {  // also on an exception: the generation counts its readers
      cache::Flight& f;
      ~Leave() { f.leave(); }
    } leave{*a.flight};
    co_await follow(ex, ctx, creq, *a.flight);
    co_return;
  }
  ctx.rec.prompt_tokens = 0;
  ctx.rec.completion_tokens = 0;
  if (creq.stream) {
    std::string upstream = llm::replay_stream(a.completion, creq, ctx.request_id);
    if (upstream.empty()) {
      co_await local_reply(ex, ctx, Reason::internal, "a cached answer could not be read");
      co_return;
    }
    ctx.rec.status = 200;
    ctx.rec.ttft_ms = ms_since(ctx.start);
    std::string answer = co_await stream_at_once(ex, ctx, creq, upstream);
    if (ctx.keep_answer) ctx.answer = std::move(answer);
    co_return;
  }
  auto done = llm::replay_whole(a.completion, ctx.request_id);
  if (!done) {
    co_await local_reply(ex, ctx, Reason::internal, "a cached answer could not be read");
    co_return;
  }
  std::string out = ctx.codec->answer(*done, creq, ctx.request_id);
  if (ctx.keep_answer) ctx.answer = out;
  ctx.rec.status = 200;
  if (!co_await ex.reply(json_reply(200, std::move(out), ctx))) ctx.rec.client_cancelled = true;
}

awaitable<void> WorkerHandler::follow(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, cache::Flight& f) {
  std::size_t offset = 0;
  cache::FlightPart p;
  auto settle = [&](bool whole, std::int64_t relayed) {
    ctx.rec.prompt_tokens = p.ok ? f.prompt_tokens() : settled_prompt(-1, creq, ctx, ex.request().body().size());
    ctx.rec.completion_tokens = whole && p.ok ? f.completion_tokens() : relayed;
    if (p.ok) {
      ctx.rec.saved_tokens = f.prompt_tokens() + f.completion_tokens();
      ctx.rec.saved_prompt_tokens = f.prompt_tokens();
    }
  };
  auto left = [&] {
    ctx.rec.client_cancelled = true;
    ctx.rec.status = http_status(Reason::client_closed);
    ctx.rec.reason = Reason::client_closed;
    settle(false, 0);
  };
  if (!creq.stream) {
    // Waits for the end, looking four times a second whether the client is still there
    // (one that left stops reading the generation, which may then end).
    bool gone = false;
    ex.watch_client([&gone] { gone = true; });
    do p = co_await f.next(offset, Ms(250));
    while (!p.ended && !gone);
    ex.unwatch_client();
    if (gone || ex.client_gone()) {
      left();
      co_return;
    }
    auto done = p.ok ? llm::replay_whole(f.completion(), ctx.request_id) : std::nullopt;
    if (!done) {
      // (Named: GCC 12 destroys a conditional temporary passed to a co_await twice.)
      const Reason reason = p.ok ? Reason::internal : p.reason;
      std::string message = p.ok ? std::string("the shared answer could not be read") : p.message;
      co_await local_reply(ex, ctx, reason, std::move(message));
      co_return;
    }
    settle(true, 0);
    std::string out = ctx.codec->answer(*done, creq, ctx.request_id);
    if (ctx.keep_answer) ctx.answer = out;
    ctx.rec.status = 200;
    if (!co_await ex.reply(json_reply(200, std::move(out), ctx))) ctx.rec.client_cancelled = true;
    co_return;
  }
  auto tr = ctx.codec->stream(llm::make_openai_stream(creq), creq, ctx.request_id);
  if (ctx.rec.reserved_tokens >= 0) tr->count_output(&g_.tokens, ctx.encoding);
  std::string first_id, in, out;
  bool any = false, gone = false;
  http::HeaderList h = ctx.headers;
  h.emplace_back("Cache-Control", "no-cache");
  h.emplace_back("X-Accel-Buffering", "no");
  auto write = [&](std::string_view data) -> awaitable<bool> {
    ex.set_write_timeout(cfg_.timeouts.client_write);
    if (!ex.started()) {
      if (!co_await ex.begin_stream(200, "text/event-stream", h)) co_return false;
    }
    co_return co_await ex.write_chunk(data);  // (empty: the head goes out now)
  };
  static constexpr std::string_view kDone = "data: [DONE]\n\n";
  bool done_held = false;
  ctx.rec.status = 200;
  do {
    // A heartbeat while the generation is silent (also how a client that left is seen).
    p = co_await f.next(offset, cfg_.timeouts.heartbeat);
    in = std::move(p.frames);
    if (in.empty() && !p.ended) {
      if (!co_await write(": keep-alive\n\n")) {
        gone = true;
        break;
      }
      continue;
    }
    // A leader that was answered whole: its answer as chunks, at the end.
    if (!any && in.empty() && p.ended && p.ok) in = llm::replay_stream(f.completion(), creq, ctx.request_id);
    // The end marker is held back: the usage goes before it when the leader's frames had
    // none (its client did not ask for it; this one's API may need it).
    if (in.ends_with(kDone)) {
      in.resize(in.size() - kDone.size());
      done_held = true;
    }
    any = any || !in.empty();
    out.clear();
    if (!in.empty()) tr->feed(llm::reid_frames(in, first_id, ctx.request_id), out);
    if (p.ended && p.ok) {
      if (tr->usage().prompt_tokens < 0 || tr->usage().completion_tokens < 0) {
        std::string usage = llm::chunk_prefix(ctx.request_id, creq.model);
        usage += R"(],"usage":)";
        llm::append_usage(usage, f.prompt_tokens(), f.completion_tokens());
        usage += "}\n\n";
        tr->feed(usage, out);
      }
      if (done_held) tr->feed(kDone, out);
      tr->finish(out);
    }
    if (ctx.rec.ttft_ms < 0 && tr->first_token_seen()) ctx.rec.ttft_ms = ms_since(ctx.start);
    if (!co_await write(out)) {
      gone = true;
      break;
    }
  } while (!p.ended);
  if (gone) {
    left();
    ctx.rec.completion_tokens = tr->relayed_tokens();
    co_return;
  }
  if (!p.ok) {
    ctx.rec.reason = p.reason;
    ctx.rec.error = p.message;
    if (tr->error().empty()) {  // (an upstream error event already went out as the leader's frames)
      std::string frame = tr->error_event(p.reason, p.message);
      if (frame.empty()) frame = ctx.codec->error_event(p.reason, p.message);
      co_await ex.write_chunk(frame);
    }
  } else if (ctx.keep_answer) {
    ctx.answer = tr->final_answer();
  }
  settle(p.ok, tr->relayed_tokens());
  if (!co_await ex.end_stream()) ctx.rec.client_cancelled = true;
}

}  // namespace sluice::gateway::worker
