// The Responses API passed to a backend that serves it itself (native_responses: OpenAI,
// vLLM): the client's request goes as it came (the backend's model; the conversation,
// which the gateway keeps, already in its input; store false), and the answer comes back
// as the backend wrote it, with the gateway's ids in it: the response id the gateway
// stores it under, and item ids that name that response (so item references find them),
// and the client's own model alias, store and previous_response_id (docs/api.md,
// "Responses").
#include <boost/json.hpp>
#include <string>
#include <unordered_map>

#include "api/responses.hpp"
#include "common/reason.hpp"
#include "config/backend.hpp"
#include "llm/framing.hpp"
#include "llm/json_parse.hpp"

namespace sluice::api {

namespace json = boost::json;

namespace {

std::string_view str(const json::value* v) {
  return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

// The kind of an item's id, as OpenAI writes it ("msg_...": "msg"), else by its type.
std::string_view id_prefix(const json::object& item) {
  const std::string_view id = str(item.if_contains("id"));
  const auto at = id.find('_');
  if (at != std::string_view::npos && at > 0 && at <= 8) return id.substr(0, at);
  const std::string_view type = str(item.if_contains("type"));
  if (type == "message") return "msg";
  if (type == "function_call") return "fc";
  if (type == "reasoning") return "rs";
  return "item";
}

// Rewrites the ids of one answer: the upstream's to the gateway's.
class Ids {
 public:
  explicit Ids(const llm::ChatRequest& req) : req_(req), suffix_(response_suffix(req)) {}

  // Output item `index`'s id (remembered for the events that name it by item_id).
  void item(json::object& item, std::size_t index) {
    std::string ours = std::string(id_prefix(item)) + "_" + suffix_ + "_" + std::to_string(index);
    if (const auto* id = item.if_contains("id"); id && id->is_string()) by_upstream_[std::string(id->get_string())] = ours;
    item["id"] = std::move(ours);
  }

  // An event's item_id: as its item was renamed, else from its output index.
  void item_id(json::object& event) {
    auto* id = event.if_contains("item_id");
    if (!id || !id->is_string()) return;
    if (auto it = by_upstream_.find(std::string(id->get_string())); it != by_upstream_.end()) {
      *id = it->second;
    } else if (const auto* idx = event.if_contains("output_index"); idx && idx->is_int64()) {
      json::object named{{"id", *id}};
      item(named, static_cast<std::size_t>(idx->get_int64()));
      *id = named["id"];
    }
  }

  // A Response object: its id, its output items', and what the client asked as it asked.
  void response(json::object& r) {
    r["id"] = str(req_.extra.if_contains("id"));
    r["model"] = req_.model;
    const auto* store = req_.extra.if_contains("store");
    r["store"] = store && store->is_bool() ? store->get_bool() : true;
    const auto* prev = req_.extra.if_contains("previous_response_id");
    r["previous_response_id"] = prev && prev->is_string() ? *prev : json::value(nullptr);
    if (auto* output = r.if_contains("output"); output && output->is_array()) {
      auto& items = output->get_array();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (auto* o = items[i].if_object()) item(*o, i);
      }
    }
  }

 private:
  const llm::ChatRequest& req_;
  const std::string suffix_;
  std::unordered_map<std::string, std::string> by_upstream_;
};

// A Response's usage and finish, for the records and settlement.
void read_outcome(const json::object& response, llm::Usage& usage, std::string& finish) {
  auto count = [](const json::object& u, std::string_view k) -> std::int64_t {
    const auto* v = u.if_contains(k);
    return v && v->is_int64() && v->get_int64() >= 0 ? v->get_int64() : -1;
  };
  if (const auto* u = response.if_contains("usage"); u && u->is_object()) {
    usage.prompt_tokens = count(u->get_object(), "input_tokens");
    usage.completion_tokens = count(u->get_object(), "output_tokens");
  }
  finish = str(response.if_contains("status")) == "incomplete" ? "length" : "stop";
}

json::value parse(std::string_view text, boost::system::error_code& ec) {
  json::parse_options po;
  po.max_depth = 128;
  return llm::detail::parse_json(text, ec, {}, po);
}

// The backend's events, relayed with the gateway's ids, counted as any stream is.
class NativeStream final : public llm::StreamTranslator {
 public:
  explicit NativeStream(const llm::ChatRequest& req) : ids_(req) {}

  bool feed(std::string_view bytes, std::string& out) override {
    if (failed_) return false;
    const bool ok = sse_.feed(bytes, [&](const llm::SseEvent& ev) { on_event(ev, out); });
    if (!ok && !failed_) fail(out, Reason::upstream_bad_response, "upstream SSE event exceeds the size limit");
    return !failed_;
  }

  bool finish(std::string&) override { return failed_ || done_ || !error_.empty(); }

  std::string final_answer() const override { return final_; }

  std::string error_event(Reason reason, std::string_view message) override {
    std::string out;
    if (!ended_) fail(out, reason, message);
    return out;
  }

 private:
  void send(std::string& out, const json::object& event) {
    out += "event: ";
    out += str(event.if_contains("type"));
    out += "\ndata: ";
    out += json::serialize(event);
    out += "\n\n";
  }

  void on_event(const llm::SseEvent& ev, std::string& out) {
    if (failed_ || ended_) return;  // nothing is relayed after the end
    if (ev.data == "[DONE]") return;  // not a Responses event (some servers send it)
    boost::system::error_code ec;
    json::value v = parse(ev.data, ec);
    if (ec || !v.is_object()) {
      fail(out, Reason::upstream_bad_response, "upstream sent an event that is not a JSON object");
      return;
    }
    auto& event = v.as_object();
    if (const auto* seq = event.if_contains("sequence_number"); seq && seq->is_int64()) {
      next_seq_ = std::max(next_seq_, seq->get_int64() + 1);
    }
    const std::string type(str(event.if_contains("type")));
    if (auto* r = event.if_contains("response"); r && r->is_object()) {
      ids_.response(r->as_object());
      snapshot_ = r->as_object();
    }
    if (auto* item = event.if_contains("item"); item && item->is_object()) {
      if (const auto* idx = event.if_contains("output_index"); idx && idx->is_int64() && idx->get_int64() >= 0) {
        ids_.item(item->as_object(), static_cast<std::size_t>(idx->get_int64()));
        if (type == "response.output_item.done") done_items_.push_back(*item);
      }
    }
    ids_.item_id(event);
    if (type.ends_with(".delta")) {
      if (const auto* d = event.if_contains("delta"); d && d->is_string() && !d->get_string().empty()) {
        ++content_chunks_;
        relayed(d->get_string());
      }
    }
    send(out, event);
    if (type == "response.completed" || type == "response.incomplete") {
      read_outcome(snapshot_, usage_, finish_reason_);
      final_ = json::serialize(snapshot_);
      done_ = ended_ = true;
    } else if (type == "response.failed" || type == "error") {
      const auto* e = type == "error" ? &v : snapshot_.if_contains("error");
      const std::string_view said = e && e->is_object() ? str(e->get_object().if_contains("message")) : "";
      error_ = said.empty() ? "the upstream's response failed" : std::string(said);
      ended_ = type == "response.failed";
    }
  }

  // An error event, then response.failed with the items done so far.
  void fail(std::string& out, Reason reason, std::string_view message) {
    if (error_.empty()) error_ = std::string(message);
    failed_ = ended_ = true;
    send(out, {{"type", "error"}, {"code", reason_code(reason)}, {"message", message}, {"param", nullptr},
               {"sequence_number", next_seq_++}});
    if (snapshot_.empty()) return;  // nothing began: the error alone ends it
    json::object response = snapshot_;
    response["status"] = "failed";
    response["error"] = json::object{{"code", "server_error"}, {"message", message}};
    response["output"] = done_items_;
    send(out, {{"type", "response.failed"}, {"response", std::move(response)}, {"sequence_number", next_seq_++}});
  }

  Ids ids_;
  llm::SseParser sse_;
  std::int64_t next_seq_ = 0;
  json::object snapshot_;  // the latest Response object the events carried
  json::array done_items_;
  std::string final_;
  bool failed_ = false;  // the gateway ended it (a bad event, a failure it saw)
  bool ended_ = false;   // nothing more is relayed
};

}  // namespace

llm::UpstreamCall responses_native_call(const llm::ChatRequest& req, const config::Backend& backend) {
  json::object body = req.native;
  body["model"] = backend.model;
  body["store"] = false;  // the gateway stores it (and continues it on any backend)
  return {backend.path_prefix + "/responses", json::serialize(body)};
}

std::optional<llm::Completion> responses_native_answer(std::string body, const llm::ChatRequest& req) {
  boost::system::error_code ec;
  json::value v = parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  auto& r = v.as_object();
  if (str(r.if_contains("object")) != "response" || !r.contains("output")) return std::nullopt;
  Ids ids(req);
  ids.response(r);
  llm::Completion done;
  read_outcome(r, done.usage, done.finish_reason);
  done.body = json::serialize(r);
  return done;
}

std::unique_ptr<llm::StreamTranslator> responses_native_stream(const llm::ChatRequest& req) {
  return std::make_unique<NativeStream>(req);
}

}  // namespace sluice::api
