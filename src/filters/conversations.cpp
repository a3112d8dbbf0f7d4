// The Responses API's stored conversations (POST /v1/responses): a request with
// previous_response_id continues the stored conversation of that response (its messages
// go before the new input, after the new instructions; the previous instructions do not
// carry over, as in OpenAI's API), and an answered request with `store` (the default) is
// stored for its tenant: the Response object, the conversation in chat form, the input
// items. A response of one tenant is never found by another. Before admission, so the
// quota reserves the whole conversation.
#include <boost/json.hpp>
#include <string>

#include "api/conversations.hpp"
#include "api/responses.hpp"
#include "config/keys.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"

namespace sluice::filters {

namespace {

namespace json = boost::json;

class Conversations final : public Filter {
 public:
  explicit Conversations(api::ConversationStore& store) : store_(store) {}

  std::string_view name() const override { return "conversations"; }
  unsigned phases() const override { return bit(Phase::request) | bit(Phase::end) | bit(Phase::answer); }

  Next on(Phase, Request& r, void*, Stop& stop) override {
    if (r.api != "responses" || r.kind != Kind::generate) return Next::go;
    const auto* prev = r.chat.extra.if_contains("previous_response_id");
    if (!prev || !prev->is_string()) return Next::go;
    auto stored = store_.get(r.key.tenant, prev->get_string());
    boost::system::error_code ec;
    json::value earlier = stored ? json::parse(stored->messages, ec) : json::value();
    if (!stored || ec || !earlier.is_array()) {
      stop.reason = Reason::invalid_request;
      stop.message = "previous response '" + std::string(prev->get_string()) + "' was not found";
      stop.param = "previous_response_id";
      return Next::stop;
    }
    auto& messages = r.chat.body["messages"].as_array();
    // After this request's instructions (a first system message), before its input.
    const bool instructed = r.chat.extra.contains("instructions") && r.chat.extra.at("instructions").is_string();
    auto at = messages.begin() + (instructed && !messages.empty() ? 1 : 0);
    messages.insert(at, earlier.as_array().begin(), earlier.as_array().end());
    llm::recount_prompt(r.chat);
    return Next::go;
  }

  void end(Request& r, void*) override {
    if (r.api != "responses" || !r.answer || r.answer->empty()) return;
    const auto* store = r.chat.extra.if_contains("store");
    if (store && store->is_bool() && !store->get_bool()) return;
    boost::system::error_code ec;
    json::value response = json::parse(*r.answer, ec);
    if (ec || !response.is_object()) return;
    const auto* id = response.as_object().if_contains("id");
    if (!id || !id->is_string()) return;
    // The conversation so far without this request's instructions, then this answer.
    json::array messages = r.chat.body.at("messages").as_array();
    const bool instructed = r.chat.extra.contains("instructions") && r.chat.extra.at("instructions").is_string();
    if (instructed && !messages.empty()) messages.erase(messages.begin());
    for (auto& m : api::response_output_messages(response.as_object())) messages.push_back(std::move(m));
    api::StoredResponse s;
    s.response = *r.answer;
    s.messages = json::serialize(messages);
    const auto* items = r.chat.extra.if_contains("input_items");
    s.input_items = items ? json::serialize(*items) : "[]";
    store_.put(r.key.tenant, id->get_string(), std::move(s));
  }

 private:
  api::ConversationStore& store_;
};

}  // namespace

std::unique_ptr<Filter> make_conversations(const Deps& d) {
  if (!d.conversations) return nullptr;
  return std::make_unique<Conversations>(*d.conversations);
}

}  // namespace sluice::filters
