// The stream translators (src/llm/chat.hpp, anthropic.hpp) fed arbitrary upstream bytes:
// OpenAI SSE (passed through), Ollama NDJSON and Anthropic SSE (translated to OpenAI
// chunks), each also wrapped in the Anthropic output (re-encoded as Messages events) and
// the Responses output; and the Responses API's own events relayed natively. The
// input arrives in two pieces split at a position taken from it, then finish(). What the
// gateway writes itself must be JSON in every data line.
#include <cstdint>
#include <memory>
#include <string>

#include "api/messages.hpp"
#include "api/responses.hpp"
#include "fuzz_util.hpp"
#include "llm/anthropic.hpp"
#include "llm/chat.hpp"
#include "llm/fold.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::size_t split = in.u16();
  const std::string_view bytes = in.rest();

  llm::ChatRequest req;
  req.model = "m";
  req.stream = true;
  req.include_usage = mode & 0x10;
  req.prompt_tokens_estimate = 7;
  if (mode & 0x20) req.max_tokens = 16;

  const int kind = (mode & 0x0f) % 10;
  req.extra["id"] = "resp_0123";
  std::unique_ptr<llm::StreamTranslator> t;
  switch (kind % 3) {
    case 0: t = llm::make_openai_stream(req); break;
    case 1: t = llm::make_ollama_stream(req, "req-1"); break;
    default: t = llm::make_anthropic_stream(req, "req-1"); break;
  }
  // The response cache's fold (llm/fold.hpp): the chunks folded into the chat.completion
  // they amount to, which must then be keepable and replay, whole and as chunks.
  std::string whole;
  const bool fold = (mode & 0x40) && kind != 9;
  if (fold) t = llm::fold_stream(std::move(t), &whole, 1 << 20, [](std::string_view) {});
  const bool anthropic_out = kind >= 3 && kind < 6;
  if (anthropic_out) t = api::make_anthropic_output(std::move(t), "m", "req-1", 7);
  if (kind >= 6 && kind < 9) t = api::make_responses_output(std::move(t), req);  // the Responses API's events
  // A backend serving the Responses API itself: its events relayed, re-serialized with
  // the gateway's ids.
  if (kind == 9) t = api::responses_native_stream(req);
  // The OpenAI stream passes upstream bytes through; everything else is written by sluice.
  const bool written_by_us = kind != 0;

  std::string out;
  const std::size_t cut = std::min(split, bytes.size());
  bool ok = t->feed(bytes.substr(0, cut), out);
  if (ok && !t->done()) ok = t->feed(bytes.substr(cut), out);
  if (ok) {
    if (!t->finish(out)) {
      const std::string own = t->error_event(Reason::upstream_error, "truncated");
      out += !own.empty()    ? own
             : anthropic_out ? api::anthropic_error_event(Reason::upstream_error, "truncated")
                             : llm::error_frame(Reason::upstream_error, "truncated");
    }
  }
  if (written_by_us) fuzz::expect_sse_json(out, "translator wrote a data line that is not JSON");
  if (fold && !whole.empty()) {
    if (!llm::keepable(whole)) __builtin_trap();  // a fold that renders is a whole answer
    if (!llm::replay_whole(whole, "req-2")) __builtin_trap();
    const std::string chunks = llm::replay_stream(whole, req, "req-2");
    if (chunks.empty()) __builtin_trap();
    fuzz::expect_sse_json(chunks, "a replay wrote a data line that is not JSON");
  }
  (void)t->usage();
  (void)t->content_chunks();
  return 0;
}
