#pragma once
// A chat answer kept whole and served again (the response cache, docs/cache.md), in the
// internal form every client API is made from: the chat.completion body.
//   - fold_stream: a streamed answer, as its chat.completion.chunk frames went by, folded
//     into the chat.completion it amounts to;
//   - replay_*: a kept chat.completion answered again under a new request id, whole or as
//     chat.completion.chunk frames (at once: no pacing).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "llm/chat.hpp"

namespace sluice::llm {

// Wraps a wire's translator (which writes chat.completion.chunk frames): the frames pass
// through unchanged, and once the stream ended well (the end marker, no error), *whole is
// the chat.completion they amount to: every choice's role, content, refusal, reasoning,
// tool calls and log-probabilities, its finish reason, the usage. *whole stays empty when
// the stream failed, or when the folded answer grew beyond max_bytes (then folding stops).
// The counters (content chunks, usage, finish, errors, tokens relayed) are the inner
// translator's. `whole` must outlive the translator.
// `on_frames`, when set, is handed the frames as they pass (a generation shared with
// other requests).
std::unique_ptr<StreamTranslator> fold_stream(std::unique_ptr<StreamTranslator> inner, std::string* whole,
                                              std::size_t max_bytes,
                                              std::function<void(std::string_view)> on_frames = {});

// Whether `body` is an answer worth keeping: a chat.completion whose every choice (at
// least one) has a message and a finish reason.
bool keepable(std::string_view body);

// A kept chat.completion under a new id ("chatcmpl-<request_id>") and creation time; its
// usage (read_openai_completion). nullopt when `kept` is not a chat.completion.
std::optional<Completion> replay_whole(std::string_view kept, std::string_view request_id);

// The same as the chat.completion.chunk frames of an OpenAI stream (as make_openai_stream
// reads them, for `req`): per choice one chunk with its whole message, then its finish
// chunk; the usage chunk; [DONE]. Empty when `kept` is not a chat.completion.
std::string replay_stream(std::string_view kept, const ChatRequest& req, std::string_view request_id);

// Frames of a stream generated for another request, under this one's id: every
// `"id":"<the first chunk's id>"` becomes `"id":"chatcmpl-<request_id>"`. `first_id` is
// read from the first frame when empty (and kept for the next call).
std::string reid_frames(std::string_view frames, std::string& first_id, std::string_view request_id);

}  // namespace sluice::llm
