#pragma once
// OpenAI's Responses API as a client API (POST /v1/responses): a CreateResponse request is
// turned into the equivalent chat request (instructions a system message, input items
// messages, function tools chat tools, function calls and their outputs assistant
// tool_calls and tool messages); the answer comes back as a Response object, or as the
// Responses stream events. Stored responses and previous_response_id are the conversations
// filter's (filters/conversations.cpp). No I/O here; public for the tests and fuzzing.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "llm/chat.hpp"

namespace sluice::config {
struct Backend;
}

namespace sluice::api {

// A CreateResponse body -> the chat body (JSON), what the answer echoes (`extra`: id,
// instructions, store, previous_response_id, metadata, tools, tool_choice, text...) and
// the request as a backend serving the API itself takes it (`native`: input as items,
// without previous_response_id). Fields the gateway cannot honour (background,
// conversation) are refused naming the field; what only such a backend can serve (tools
// other than functions, input files, prompt templates...) is left out of the chat form
// and named in `native_only`.
struct ResponsesConversion {
  std::string chat;
  boost::json::object extra;
  boost::json::object native;
  std::optional<llm::RequestError> native_only;
  std::vector<llm::ChatRequest::Billed> native_billed;
};
std::variant<ResponsesConversion, llm::RequestError> responses_to_chat(std::string_view body);

// A chat.completion body -> the Response object (JSON text).
std::string chat_to_response(const llm::Completion& done, const llm::ChatRequest& req);

// Wraps a translator of chat.completion.chunk frames into the Responses events
// (response.created, response.in_progress, output items and their deltas,
// response.completed or response.incomplete, or an error event).
std::unique_ptr<llm::StreamTranslator> make_responses_output(std::unique_ptr<llm::StreamTranslator> inner,
                                                             const llm::ChatRequest& req);

// The Responses API on a backend that serves it itself (responses_native.cpp): the call
// (the request's native form for the backend's model, store false), the answer and the
// stream relayed with the gateway's ids (the response's, and item ids that name it) and
// the client's model, store and previous_response_id.
llm::UpstreamCall responses_native_call(const llm::ChatRequest& req, const config::Backend& backend);
std::optional<llm::Completion> responses_native_answer(std::string body, const llm::ChatRequest& req);
std::unique_ptr<llm::StreamTranslator> responses_native_stream(const llm::ChatRequest& req);

// The part of the response id its items' ids carry ("resp_<r>": "<r>").
std::string response_suffix(const llm::ChatRequest& req);

// The field of a placeholder message that stands for an `item_reference` input item
// (its value the item's id) until the conversations filter resolves it from the store.
inline constexpr std::string_view kItemRef = "sluice_item_reference";

// The stored response an item id of ours (msg_<r>, fc_<r>_<n>, rs_<r>_<n>...) belongs to
// ("resp_<r>"), or empty when it is not one of ours.
std::string response_of_item(std::string_view item_id);

// A stored Response's output item `item_id`, or null.
const boost::json::object* output_item(const boost::json::object& response, std::string_view item_id);
// The same as a chat message (assistant text, or an assistant tool call); nullopt when the
// response has no such item.
std::optional<boost::json::object> output_item_message(const boost::json::object& response, std::string_view item_id);

// Items of a stored conversation (inputs and outputs) -> chat messages; what chat cannot
// hold (reasoning, built-in tool calls) is left out.
boost::json::array items_to_messages(const boost::json::array& items);

// A Response object's output items -> the chat messages that continue the conversation
// (an assistant message with its text and tool calls). Empty when there is none.
boost::json::array response_output_messages(const boost::json::object& response);

// A stored response's own input items (`count` of its conversation's items, JSON array,
// from `from`) as GET .../input_items answers them: a list whose items have an id and a
// type, message content as parts.
std::string input_item_list(std::string_view items_json, std::size_t from, std::size_t count,
                            std::string_view response_id);

}  // namespace sluice::api
