// The Responses API's stored conversations (POST /v1/responses): a request with
// previous_response_id continues the stored conversation of that response (its items go
// before the new input, in the chat form after the new instructions; the previous
// instructions do not carry over, as in OpenAI's API), and an answered request with
// `store` (the default) is stored for its tenant: the Response object, the conversation
// as Responses items (so it continues on a backend that serves the API itself as on one
// that is sent chat), with where its own input lies among them (GET .../input_items). A response of one tenant is never found by another. Before admission, so the
// quota reserves the whole conversation. The store may be Redis: the look-up waits.
#include <algorithm>
#include <boost/json.hpp>
#include <map>
#include <optional>
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

// Whether the request's input holds item references (placeholders, see api::kItemRef).
bool references_items(const llm::ChatRequest& chat) {
  const auto* messages = chat.body.if_contains("messages");
  if (!messages || !messages->is_array()) return false;
  for (const auto& m : messages->get_array()) {
    if (m.is_object() && m.get_object().contains(api::kItemRef)) return true;
  }
  return false;
}

// The request's input items in the native form (decoded as an array).
json::array& input(Request& r) {
  auto& in = r.chat.native["input"];
  if (!in.is_array()) in = json::array{};
  return in.as_array();
}

bool instructed(const llm::ChatRequest& chat) {
  const auto* i = chat.extra.if_contains("instructions");
  return i && i->is_string();
}

// Per request: how many items of the stored conversation went before its input.
struct State {
  std::size_t earlier = 0;
  std::size_t referenced = 0;  // bytes of the stored items its item references stand for
};

class Conversations final : public FilterWith<State> {
 public:
  Conversations(std::shared_ptr<conversations::WorkerStore> store, std::size_t max_bytes)
      : store_(std::move(store)), max_bytes_(max_bytes) {}

  std::string_view name() const override { return "conversations"; }
  unsigned phases() const override { return bit(Phase::request) | bit(Phase::end); }

  Next on(Phase, Request& r, State&, Stop&) override {
    if (r.api != "responses" || r.kind != Kind::generate) return Next::go;
    const auto* store = r.chat.extra.if_contains("store");
    if (!(store && store->is_bool() && !store->get_bool()) && r.keep_answer) *r.keep_answer = true;
    const auto* prev = r.chat.extra.if_contains("previous_response_id");
    return (prev && prev->is_string()) || references_items(r.chat) ? Next::wait : Next::go;
  }

  boost::asio::awaitable<Next> wait(Phase, Request& r, State& s, Stop& stop) override {
    if (!co_await resolve_references(r, s, stop)) co_return Next::stop;
    const auto* prev = r.chat.extra.if_contains("previous_response_id");
    if (!prev || !prev->is_string()) {
      llm::recount_prompt(r.chat);
      co_return Next::go;
    }
    co_return co_await continue_conversation(r, s, stop);
  }

  // Each item_reference (a placeholder message in the chat form, an item in the native
  // form) becomes the stored item it names (the tenant's only). What they stand for goes
  // upstream too: with the body, it is held to the size of one request body.
  boost::asio::awaitable<bool> resolve_references(Request& r, State& s, Stop& stop) {
    Fetched responses;
    auto missing = [&stop](std::string_view item) {
      stop.reason = Reason::invalid_request;
      stop.message = "item '" + std::string(item) + "' was not found among the stored responses";
      stop.param = "input";
      return false;
    };
    auto& messages = r.chat.body["messages"].as_array();
    for (auto& m : messages) {
      const auto* ref = m.is_object() ? m.get_object().if_contains(api::kItemRef) : nullptr;
      if (!ref || !ref->is_string()) continue;
      const std::string item(ref->get_string());
      const json::object* found = co_await find(r, responses, item);
      if (!found) co_return missing(item);
      // (Each reference is one placeholder: counted here, before anything is copied.)
      s.referenced += json::serialize(*found).size();
      if (s.referenced + r.ex.request().body().size() > max_bytes_) {
        stop.reason = Reason::invalid_request;
        stop.message = "the items this input references are over " + std::to_string(max_bytes_) +
                       " bytes with it (limits.max_body_bytes)";
        stop.param = "input";
        co_return false;
      }
      auto as_chat = api::items_to_messages(json::array{*found});
      m = as_chat.empty() ? json::object{{"role", "assistant"}, {"content", ""}} : std::move(as_chat.front());
    }
    for (auto& i : input(r)) {
      auto* o = i.if_object();
      if (!o || !o->contains("type") || o->at("type") != "item_reference") continue;
      const auto* id = o->if_contains("id");
      const std::string item(id && id->is_string() ? std::string_view(id->get_string()) : std::string_view());
      const json::object* found = co_await find(r, responses, item);
      if (!found) co_return missing(item);
      i = *found;
    }
    co_return true;
  }

  boost::asio::awaitable<Next> continue_conversation(Request& r, State& s, Stop& stop) {
    const std::string id(r.chat.extra.at("previous_response_id").get_string());
    auto stored = co_await store_->get(r.key.tenant, id);
    boost::system::error_code ec;
    json::value earlier = stored ? json::parse(stored->items, ec, {}, parse_options()) : json::value();
    if (!stored || ec || !earlier.is_array()) {
      stop.reason = Reason::invalid_request;
      stop.message = "previous response '" + id + "' was not found";
      stop.param = "previous_response_id";
      co_return Next::stop;
    }
    // A conversation goes upstream whole: it is held to the size of one request body.
    if (stored->items.size() + s.referenced + r.ex.request().body().size() > max_bytes_) {
      stop.reason = Reason::invalid_request;
      stop.message = "the conversation of previous response '" + id + "' with this input is over " +
                     std::to_string(max_bytes_) + " bytes (limits.max_body_bytes): start a new one";
      stop.param = "previous_response_id";
      co_return Next::stop;
    }
    // The chat form: after this request's instructions (a first system message), before
    // its input.
    auto& messages = r.chat.body["messages"].as_array();
    auto earlier_messages = api::items_to_messages(earlier.as_array());
    auto at = messages.begin() + (instructed(r.chat) && !messages.empty() ? 1 : 0);
    messages.insert(at, earlier_messages.begin(), earlier_messages.end());
    // The native form: before its input.
    auto& in = input(r);
    in.insert(in.begin(), earlier.as_array().begin(), earlier.as_array().end());
    s.earlier = earlier.as_array().size();
    llm::recount_prompt(r.chat);
    co_return Next::go;
  }

  void end(Request& r, State& state) override {
    if (r.api != "responses" || !r.answer || r.answer->empty()) return;
    const auto* store = r.chat.extra.if_contains("store");
    if (store && store->is_bool() && !store->get_bool()) return;
    boost::system::error_code ec;
    json::value response = json::parse(*r.answer, ec, {}, parse_options());
    if (ec || !response.is_object()) return;
    const auto* id = response.as_object().if_contains("id");
    if (!id || !id->is_string()) return;
    // The conversation so far (without this request's instructions), then this answer.
    json::array items = input(r);
    conversations::StoredResponse s;
    s.input_from = std::min(state.earlier, items.size());
    s.input_count = items.size() - s.input_from;
    if (const auto* output = response.as_object().if_contains("output"); output && output->is_array()) {
      for (const auto& item : output->get_array()) items.push_back(item);
    }
    s.response = *r.answer;
    s.items = json::serialize(items);
    store_->put(r.key.tenant, std::string(id->get_string()), std::move(s));
  }

 private:
  using Fetched = std::map<std::string, json::object>;  // stored responses, fetched once each

  // The stored output item `item` of the tenant, or null.
  boost::asio::awaitable<const json::object*> find(Request& r, Fetched& responses, const std::string& item) {
    const std::string resp = api::response_of_item(item);
    if (resp.empty()) co_return nullptr;
    auto it = responses.find(resp);
    if (it == responses.end()) {
      auto stored = co_await store_->get(r.key.tenant, resp);
      boost::system::error_code ec;
      json::value v = stored ? json::parse(stored->response, ec, {}, parse_options()) : json::value();
      it = responses.emplace(resp, !ec && v.is_object() ? std::move(v.as_object()) : json::object{}).first;
    }
    co_return api::output_item(it->second, item);
  }

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
