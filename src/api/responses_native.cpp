// The Responses API passed to a backend that serves it itself (native_responses: OpenAI,
// vLLM): the client's request goes as it came (the backend's model; the conversation,
// which the gateway keeps, already in its input; store false), and the answer comes back
// as the backend wrote it, with the gateway's ids in it: the response id the gateway
// stores it under, and item ids that name that response (so item references find them),
// and the client's own model alias, store and previous_response_id (docs/api.md,
// "Responses").
#include <algorithm>
#include <boost/json.hpp>
#include <limits>
#include <map>
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

  // An output item's id: by its output index (nullopt: none valid), remembered for the
  // events that name it by item_id; an item named before keeps the name it got.
  void item(json::object& item, std::optional<std::size_t> index) {
    const auto* id = item.if_contains("id");
    const std::string upstream = id && id->is_string() ? std::string(id->get_string()) : std::string();
    if (!index) {
      if (auto it = by_upstream_.find(upstream); it != by_upstream_.end()) {
        item["id"] = it->second;
        return;
      }
    }
    std::string ours = std::string(id_prefix(item)) + "_" + suffix_ + "_" +
                       (index ? std::to_string(*index) : "u" + std::to_string(unplaced_++));
    if (!upstream.empty()) by_upstream_[upstream] = ours;
    item["id"] = std::move(ours);
  }

  // An event's item_id: as its item was renamed, else as an item of its output index.
  void item_id(json::object& event) {
    auto* id = event.if_contains("item_id");
    if (!id || !id->is_string()) return;
    if (auto it = by_upstream_.find(std::string(id->get_string())); it != by_upstream_.end()) {
      *id = it->second;
      return;
    }
    json::object named{{"id", *id}};
    item(named, output_index(event));
    *id = named["id"];
  }

  std::size_t named() const noexcept { return by_upstream_.size(); }

  // The event's output_index when it is one (a non-negative integer).
  static std::optional<std::size_t> output_index(const json::object& event) {
    const auto* idx = event.if_contains("output_index");
    if (!idx || !idx->is_int64() || idx->get_int64() < 0) return std::nullopt;
    return static_cast<std::size_t>(idx->get_int64());
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
  std::size_t unplaced_ = 0;  // items named without an output index
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
  if (usage.completion_tokens < 0) {
    // No valid count: the output's text (messages' text, calls' arguments), estimated.
    std::string text;
    if (const auto* output = response.if_contains("output"); output && output->is_array()) {
      for (const auto& item : output->get_array()) {
        const auto* o = item.if_object();
        if (!o) continue;
        text += str(o->if_contains("arguments"));
        if (const auto* content = o->if_contains("content"); content && content->is_array()) {
          for (const auto& part : content->get_array()) {
            if (const auto* po = part.if_object()) text += str(po->if_contains("text"));
          }
        }
      }
    }
    usage.completion_tokens = llm::estimate_tokens(text);
  }
  finish = str(response.if_contains("status")) == "incomplete" ? "length" : "stop";
}

json::value parse(std::string_view text, boost::system::error_code& ec) {
  json::parse_options po;
  po.max_depth = 128;
  return llm::detail::parse_json(text, ec, {}, po);
}

// An event's type as written on its `event:` line: OpenAI's event names only (a type
// with a line break would write lines of the upstream's own into the client's stream).
bool event_name(std::string_view type) {
  return !type.empty() && type.size() <= 128 && std::all_of(type.begin(), type.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
  });
}

// The backend's events, relayed with the gateway's ids, counted as any stream is. What it
// keeps (the items done, for a response.failed of its own; the latest Response) is bounded
// by kMaxKeptBytes of the upstream's events.
class NativeStream final : public llm::StreamTranslator {
 public:
  // As large as a whole answer may be: one event can carry a whole item (an image).
  static constexpr std::size_t kMaxEventBytes = 16u << 20;
  static constexpr std::size_t kMaxKeptBytes = 16u << 20;
  static constexpr std::size_t kMaxItems = 4096;

  explicit NativeStream(const llm::ChatRequest& req) : ids_(req), sse_(kMaxEventBytes) {}

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
    if (ec || !v.is_object() || !event_name(str(v.as_object().if_contains("type")))) {
      fail(out, Reason::upstream_bad_response, "upstream sent an event that is not a Responses event");
      return;
    }
    auto& event = v.as_object();
    if (const auto* seq = event.if_contains("sequence_number"); seq && seq->is_int64()) {
      const std::int64_t n = seq->get_int64();
      next_seq_ = std::max(next_seq_, n < std::numeric_limits<std::int64_t>::max() ? n + 1 : n);
    }
    const std::string type(str(event.if_contains("type")));
    if (auto* r = event.if_contains("response"); r && r->is_object()) {
      ids_.response(r->as_object());
      snapshot_ = r->as_object();
    }
    if (auto* item = event.if_contains("item"); item && item->is_object()) {
      const auto index = Ids::output_index(event);
      ids_.item(item->as_object(), index);
      if (type == "response.output_item.done" && index) {
        kept_bytes_ += ev.data.size();
        done_items_[*index] = *item;  // once per index, the last word
      }
    }
    if (kept_bytes_ > kMaxKeptBytes || ids_.named() > kMaxItems) {
      fail(out, Reason::upstream_bad_response, "upstream stream holds more output items than the gateway keeps");
      return;
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
      // Either ends the stream (OpenAI sends nothing after them).
      const auto* e = type == "error" ? &v : snapshot_.if_contains("error");
      const std::string_view said = e && e->is_object() ? str(e->get_object().if_contains("message")) : "";
      error_ = said.empty() ? "the upstream's response failed" : std::string(said);
      ended_ = true;
    }
  }

  // An error event, then response.failed with the items done so far.
  void fail(std::string& out, Reason reason, std::string_view message) {
    if (error_.empty()) error_ = std::string(message);
    failed_ = ended_ = true;
    send(out, {{"type", "error"}, {"code", reason_code(reason)}, {"message", message}, {"param", nullptr},
               {"sequence_number", take_seq()}});
    if (snapshot_.empty()) return;  // nothing began: the error alone ends it
    json::object response = snapshot_;
    response["status"] = "failed";
    response["error"] = json::object{{"code", "server_error"}, {"message", message}};
    json::array output;
    for (auto& [_, item] : done_items_) output.push_back(item);
    response["output"] = std::move(output);
    send(out, {{"type", "response.failed"}, {"response", std::move(response)}, {"sequence_number", take_seq()}});
  }

  // The next number of an event of the gateway's own (it saturates: an upstream may have
  // used the largest).
  std::int64_t take_seq() noexcept {
    const std::int64_t n = next_seq_;
    if (n < std::numeric_limits<std::int64_t>::max()) ++next_seq_;
    return n;
  }

  Ids ids_;
  llm::SseParser sse_;
  std::int64_t next_seq_ = 0;
  json::object snapshot_;  // the latest Response object the events carried
  std::map<std::size_t, json::value> done_items_;  // by output index
  std::size_t kept_bytes_ = 0;
  std::string final_;
  bool failed_ = false;  // the gateway ended it (a bad event, a failure it saw)
  bool ended_ = false;   // nothing more is relayed
};

// An input item as a backend that stores nothing takes it (store false): messages and
// function calls without an id (it would look up the gateway's, or a stored one); a
// reasoning item only with its encrypted content (null: left out).
json::value for_upstream(const json::value& v) {
  const auto* item = v.if_object();
  if (!item) return v;
  const std::string_view type = str(item->if_contains("type"));
  if (type == "reasoning") return item->contains("encrypted_content") ? v : json::value(nullptr);
  if (!item->contains("id") || !(type.empty() || type == "message" || type == "function_call" ||
                                 type == "function_call_output")) {
    return v;
  }
  json::object o = *item;
  o.erase("id");
  return o;
}

}  // namespace

llm::UpstreamCall responses_native_call(const llm::ChatRequest& req, const config::Backend& backend) {
  json::object body = req.native;
  body["model"] = backend.model;
  if (auto* input = body.if_contains("input"); input && input->is_array()) {
    json::array items;
    for (const auto& item : input->get_array()) {
      if (auto v = for_upstream(item); !v.is_null()) items.push_back(std::move(v));
    }
    *input = std::move(items);
  }
  body["store"] = false;  // the gateway stores it (and continues it on any backend)
  return {backend.path_prefix + "/responses", json::serialize(body)};
}

std::optional<llm::Completion> responses_native_answer(std::string body, const llm::ChatRequest& req) {
  boost::system::error_code ec;
  json::value v = parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  auto& r = v.as_object();
  // A finished answer only: a failed (or still queued) response is the upstream's failure.
  const std::string_view status = str(r.if_contains("status"));
  if (str(r.if_contains("object")) != "response" || !r.contains("output") ||
      (status != "completed" && status != "incomplete")) {
    return std::nullopt;
  }
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
