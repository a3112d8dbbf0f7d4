// The Responses API's stored conversations (POST /v1/responses): a request with
// previous_response_id continues the stored conversation of that response (its messages
// go before the new input, after the new instructions; the previous instructions do not
// carry over, as in OpenAI's API), and an answered request with `store` (the default) is
// stored for its tenant: the Response object, the conversation in chat form, the input
// items. A response of one tenant is never found by another. Before admission, so the
// quota reserves the whole conversation. The store may be Redis: the look-up waits.
#include <boost/json.hpp>
#include <string>

#include "api/responses.hpp"
#include "config/config.hpp"
#include "config/keys.hpp"
#include "conversations/store.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"

namespace sluice::filters {

namespace {

namespace json = boost::json;

bool instructed(const llm::ChatRequest& chat) {
  const auto* i = chat.extra.if_contains("instructions");
  return i && i->is_string();
}

class Conversations final : public Filter {
 public:
  Conversations(std::shared_ptr<conversations::WorkerStore> store, std::size_t max_bytes)
      : store_(std::move(store)), max_bytes_(max_bytes) {}

  std::string_view name() const override { return "conversations"; }
  unsigned phases() const override { return bit(Phase::request) | bit(Phase::end); }

  Next on(Phase, Request& r, void*, Stop&) override {
    if (r.api != "responses" || r.kind != Kind::generate) return Next::go;
    const auto* store = r.chat.extra.if_contains("store");
    if (!(store && store->is_bool() && !store->get_bool()) && r.keep_answer) *r.keep_answer = true;
    const auto* prev = r.chat.extra.if_contains("previous_response_id");
    return prev && prev->is_string() ? Next::wait : Next::go;
  }

  boost::asio::awaitable<Next> wait(Phase, Request& r, void*, Stop& stop) override {
    const std::string id(r.chat.extra.at("previous_response_id").get_string());
    auto stored = co_await store_->get(r.key.tenant, id);
    boost::system::error_code ec;
    json::value earlier = stored ? json::parse(stored->messages, ec, {}, parse_options()) : json::value();
    if (!stored || ec || !earlier.is_array()) {
      stop.reason = Reason::invalid_request;
      stop.message = "previous response '" + id + "' was not found";
      stop.param = "previous_response_id";
      co_return Next::stop;
    }
    // A conversation goes upstream whole: it is held to the size of one request body.
    if (stored->messages.size() + r.ex.request().body().size() > max_bytes_) {
      stop.reason = Reason::invalid_request;
      stop.message = "the conversation of previous response '" + id + "' with this input is over " +
                     std::to_string(max_bytes_) + " bytes (limits.max_body_bytes): start a new one";
      stop.param = "previous_response_id";
      co_return Next::stop;
    }
    auto& messages = r.chat.body["messages"].as_array();
    // After this request's instructions (a first system message), before its input.
    auto at = messages.begin() + (instructed(r.chat) && !messages.empty() ? 1 : 0);
    messages.insert(at, earlier.as_array().begin(), earlier.as_array().end());
    llm::recount_prompt(r.chat);
    co_return Next::go;
  }

  void end(Request& r, void*) override {
    if (r.api != "responses" || !r.answer || r.answer->empty()) return;
    const auto* store = r.chat.extra.if_contains("store");
    if (store && store->is_bool() && !store->get_bool()) return;
    boost::system::error_code ec;
    json::value response = json::parse(*r.answer, ec, {}, parse_options());
    if (ec || !response.is_object()) return;
    const auto* id = response.as_object().if_contains("id");
    if (!id || !id->is_string()) return;
    // The conversation so far without this request's instructions, then this answer.
    json::array messages = r.chat.body.at("messages").as_array();
    if (instructed(r.chat) && !messages.empty()) messages.erase(messages.begin());
    for (auto& m : api::response_output_messages(response.as_object())) messages.push_back(std::move(m));
    conversations::StoredResponse s;
    s.response = *r.answer;
    s.messages = json::serialize(messages);
    const auto* items = r.chat.extra.if_contains("input_items");
    s.input_items = items ? json::serialize(*items) : "[]";
    store_->put(r.key.tenant, std::string(id->get_string()), std::move(s));
  }

 private:
  // As deep as a request may be (the parsers of client bodies allow 64 levels).
  static json::parse_options parse_options() {
    json::parse_options o;
    o.max_depth = 128;
    return o;
  }

  std::shared_ptr<conversations::WorkerStore> store_;
  const std::size_t max_bytes_;
};

}  // namespace

std::unique_ptr<Filter> make_conversations(const Deps& d) {
  if (!d.conversations) return nullptr;
  return std::make_unique<Conversations>(d.conversations, d.cfg.max_body_bytes);
}

}  // namespace sluice::filters
