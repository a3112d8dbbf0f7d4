// OpenAI's Responses API (POST /v1/responses) as a client API: its codec, and the
// translation of its requests and answers to and from chat completions (docs/api.md,
// "Responses").
#include "api/responses.hpp"

#include <boost/json.hpp>
#include <algorithm>
#include <ctime>
#include <map>
#include <random>
#include <span>

#include "api/openai.hpp"
#include "api/reencode.hpp"
#include "common/text.hpp"
#include "config/backend.hpp"
#include "llm/json_parse.hpp"

namespace sluice::api {

namespace json = boost::json;
using llm::RequestError;

namespace {

RequestError bad(std::string message, std::string param, Reason r = Reason::invalid_request) {
  return RequestError{r, std::move(message), std::move(param)};
}

std::string_view str(const json::value* v) {
  return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

// What only a backend serving the Responses API itself can do (a built-in tool, a file
// input, an item type chat has no place for): the first one is noted, and it is left out
// of the chat form (which then serves the limits, the token counts and the filters). A
// route whose backends do not all serve the API natively refuses the request naming it.
// Some of it uses the operator's upstream account beyond the answer (`billed`: the
// allow_params names a route must list): built-in tools, files and stored prompts by id.
struct NativeOnly {
  std::optional<RequestError> first;
  std::vector<llm::ChatRequest::Billed> billed;
  void note(std::string message, std::string param, std::string_view billed_as = {}) {
    if (!billed_as.empty() && std::none_of(billed.begin(), billed.end(), [&](const auto& b) { return b.kind == billed_as; })) {
      billed.push_back({std::string(billed_as), param});
    }
    if (!first) first = bad(std::move(message), std::move(param), Reason::option_not_allowed);
  }
};

// One content part of an input message -> a chat content part; null for one chat cannot
// hold (noted in `native`).
std::variant<json::value, RequestError> convert_part(const json::value& v, const std::string& path, NativeOnly& native) {
  const auto* o = v.if_object();
  const auto* type = o ? o->if_contains("type") : nullptr;
  if (!type || !type->is_string()) return bad("'" + path + ".type' must be a string", path + ".type");
  const std::string_view t = type->get_string();
  if (t == "input_text" || t == "output_text" || t == "refusal") {
    const auto* text = o->if_contains(t == "refusal" ? "refusal" : "text");
    if (!text || !text->is_string()) return bad("'" + path + ".text' must be a string", path + ".text");
    return json::value(json::object{{"type", "text"}, {"text", *text}});
  }
  if (t == "input_image") {
    const auto* url = o->if_contains("image_url");
    if (!url || !url->is_string()) {
      native.note("'" + path + "': images by file_id need a backend that serves the Responses API", path + ".image_url",
                  o->contains("file_id") ? "file_ids" : "");
      return json::value(nullptr);
    }
    json::object image{{"url", *url}};
    if (const auto* d = o->if_contains("detail"); d && d->is_string()) image["detail"] = *d;
    return json::value(json::object{{"type", "image_url"}, {"image_url", std::move(image)}});
  }
  native.note("'" + path + "': content of type '" + std::string(t) +
                  "' needs a backend that serves the Responses API (translated: input_text, input_image)",
              path + ".type", o->contains("file_id") ? "file_ids" : "");
  return json::value(nullptr);
}

// An input message's content: a string, or parts (one text part stays a string).
std::variant<json::value, RequestError> convert_content(const json::value& v, const std::string& path,
                                                        NativeOnly& native) {
  if (v.is_string()) return v;
  if (!v.is_array()) return bad("'" + path + "' must be a string or an array of content parts", path);
  json::array parts;
  const auto& a = v.get_array();
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto p = convert_part(a[i], path + "[" + std::to_string(i) + "]", native);
    if (auto* e = std::get_if<RequestError>(&p)) return std::move(*e);
    if (!std::get<json::value>(p).is_null()) parts.push_back(std::move(std::get<json::value>(p)));
  }
  if (parts.size() == 1 && parts[0].as_object().at("type") == "text") return parts[0].as_object().at("text");
  return json::value(std::move(parts));
}

// Input items -> chat messages, appended. Consecutive function calls become one assistant
// message's tool_calls (joined to the assistant message just before them).
std::optional<RequestError> convert_items(const json::array& items, json::array& messages, NativeOnly& native) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string path = "input[" + std::to_string(i) + "]";
    const auto* o = items[i].if_object();
    if (!o) return bad("'" + path + "' must be an object", path);
    std::string_view type = str(o->if_contains("type"));
    if (type.empty() && o->contains("role")) type = "message";
    if (type == "message") {
      const auto* role = o->if_contains("role");
      if (!role || !role->is_string()) return bad("'" + path + ".role' must be a string", path + ".role");
      const auto* content = o->if_contains("content");
      if (!content) return bad("'" + path + ".content' is required", path + ".content");
      auto c = convert_content(*content, path + ".content", native);
      if (auto* e = std::get_if<RequestError>(&c)) return std::move(*e);
      messages.push_back(json::object{{"role", *role}, {"content", std::move(std::get<json::value>(c))}});
    } else if (type == "function_call") {
      const auto* call_id = o->if_contains("call_id");
      const auto* name = o->if_contains("name");
      const auto* args = o->if_contains("arguments");
      if (!call_id || !call_id->is_string()) return bad("'" + path + ".call_id' must be a string", path + ".call_id");
      if (!name || !name->is_string()) return bad("'" + path + ".name' must be a string", path + ".name");
      if (!args || !args->is_string()) return bad("'" + path + ".arguments' must be a string", path + ".arguments");
      json::object call{{"id", *call_id},
                        {"type", "function"},
                        {"function", json::object{{"name", *name}, {"arguments", *args}}}};
      json::object* last = messages.empty() ? nullptr : messages.back().if_object();
      if (last && last->at("role") == "assistant") {
        auto& calls = (*last)["tool_calls"];
        if (!calls.is_array()) calls = json::array{};
        calls.as_array().push_back(std::move(call));
      } else {
        messages.push_back(
            json::object{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array{std::move(call)}}});
      }
    } else if (type == "function_call_output") {
      const auto* call_id = o->if_contains("call_id");
      const auto* output = o->if_contains("output");
      if (!call_id || !call_id->is_string()) return bad("'" + path + ".call_id' must be a string", path + ".call_id");
      if (!output) return bad("'" + path + ".output' is required", path + ".output");
      auto c = convert_content(*output, path + ".output", native);
      if (auto* e = std::get_if<RequestError>(&c)) return std::move(*e);
      messages.push_back(
          json::object{{"role", "tool"}, {"tool_call_id", *call_id}, {"content", std::move(std::get<json::value>(c))}});
    } else if (type == "reasoning") {
      continue;  // a previous answer's reasoning: nothing a chat upstream takes
    } else if (type == "item_reference") {
      // An item of a stored response (the Vercel AI SDK sends earlier answers so): a
      // placeholder the conversations filter fills from the store, or refuses.
      const auto* id = o->if_contains("id");
      if (!id || !id->is_string() || id->get_string().empty()) {
        return bad("'" + path + ".id' must be a non-empty string", path + ".id");
      }
      messages.push_back(json::object{{"role", "assistant"}, {"content", ""}, {std::string(kItemRef), *id}});
    } else if (!type.empty()) {
      native.note("'" + path + "': items of type '" + std::string(type) +
                      "' need a backend that serves the Responses API (translated: message, function_call, "
                      "function_call_output, reasoning, item_reference)",
                  path + ".type");
    } else {
      return bad("'" + path + ".type' must be a string", path + ".type");
    }
  }
  return std::nullopt;
}

// Function tools -> chat tools.
std::optional<RequestError> convert_tools(const json::value& v, json::object& chat, NativeOnly& native) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_array()) return bad("'tools' must be an array", "tools");
  json::array tools;
  const auto& a = v.get_array();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string path = "tools[" + std::to_string(i) + "]";
    const auto* o = a[i].if_object();
    if (!o) return bad("'" + path + "' must be an object", path);
    const std::string_view type = str(o->if_contains("type"));
    if (type.empty()) return bad("'" + path + ".type' must be a string", path + ".type");
    if (type != "function") {
      native.note("'" + path + "': tools of type '" + std::string(type) +
                      "' need a backend that serves the Responses API (translated: function tools)",
                  path + ".type", "builtin_tools");
      continue;
    }
    const auto* name = o->if_contains("name");
    if (!name || !name->is_string()) return bad("'" + path + ".name' must be a string", path + ".name");
    json::object fn{{"name", *name}};
    for (const char* k : {"description", "parameters", "strict"}) {
      if (const auto* f = o->if_contains(k); f && !f->is_null()) fn[k] = *f;
    }
    tools.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
  }
  if (!tools.empty()) chat["tools"] = std::move(tools);
  return std::nullopt;
}

std::optional<RequestError> convert_tool_choice(const json::value& v, json::object& chat, NativeOnly& native) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    chat["tool_choice"] = v;  // none, auto, required: checked as chat's
    return std::nullopt;
  }
  const auto* o = v.if_object();
  if (o && str(o->if_contains("type")) == "function" && o->if_contains("name") && o->at("name").is_string()) {
    chat["tool_choice"] = json::object{{"type", "function"}, {"function", json::object{{"name", o->at("name")}}}};
    return std::nullopt;
  }
  if (const std::string_view type = o ? str(o->if_contains("type")) : ""; !type.empty() && type != "function") {
    native.note("'tool_choice' of type '" + std::string(type) + "' needs a backend that serves the Responses API",
                "tool_choice.type");
    return std::nullopt;
  }
  return bad("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}",
             "tool_choice");
}

// text: {format: {type: text | json_object | json_schema, name, schema, strict}, verbosity}.
std::optional<RequestError> convert_text(const json::value& v, json::object& chat) {
  if (v.is_null()) return std::nullopt;
  const auto* o = v.if_object();
  if (!o) return bad("'text' must be an object", "text");
  if (const auto* verbosity = o->if_contains("verbosity"); verbosity && !verbosity->is_null()) {
    chat["verbosity"] = *verbosity;
  }
  const auto* f = o->if_contains("format");
  if (!f || f->is_null()) return std::nullopt;
  const auto* fo = f->if_object();
  const std::string_view type = fo ? str(fo->if_contains("type")) : std::string_view();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    chat["response_format"] = json::object{{"type", "json_object"}};
    return std::nullopt;
  }
  if (type == "json_schema") {
    json::object schema;
    for (const char* k : {"name", "schema", "strict", "description"}) {
      if (const auto* x = fo->if_contains(k); x && !x->is_null()) schema[k] = *x;
    }
    chat["response_format"] = json::object{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
    return std::nullopt;
  }
  return bad("'text.format.type' must be one of \"text\", \"json_object\", \"json_schema\"", "text.format.type");
}

std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

// 128 bits from the kernel's generator (getrandom): a stored response's id is all that
// guards it within its tenant, so it must not be predictable from other ids.
std::string unguessable_id() {
  static thread_local std::random_device rd;
  std::string id;
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t v = rd();
    for (int k = 0; k < 8; ++k) id += kHex[(v >> (4 * k)) & 15];
  }
  return id;
}

const json::value* extra_field(const llm::ChatRequest& req, std::string_view k) { return req.extra.if_contains(k); }

json::value echo(const llm::ChatRequest& req, std::string_view k, json::value dflt) {
  const auto* v = extra_field(req, k);
  return v && !v->is_null() ? *v : dflt;
}

// The Response object around `output`. `status`: in_progress, completed, incomplete.
json::object response_object(const llm::ChatRequest& req, std::string_view status, json::array output,
                             const llm::Usage* usage, std::int64_t output_fallback = 0) {
  json::object r;
  r["id"] = echo(req, "id", "resp_");
  r["object"] = "response";
  r["created_at"] = echo(req, "created_at", unix_now());
  r["status"] = status;
  r["background"] = false;
  r["error"] = nullptr;
  r["incomplete_details"] =
      status == "incomplete" ? json::value(json::object{{"reason", "max_output_tokens"}}) : json::value(nullptr);
  r["instructions"] = echo(req, "instructions", nullptr);
  r["max_output_tokens"] = echo(req, "max_output_tokens", nullptr);
  r["metadata"] = echo(req, "metadata", json::object{});
  r["model"] = req.model;
  r["output"] = std::move(output);
  r["parallel_tool_calls"] = echo(req, "parallel_tool_calls", true);
  r["previous_response_id"] = echo(req, "previous_response_id", nullptr);
  r["reasoning"] = json::object{{"effort", echo(req, "reasoning_effort", nullptr)}, {"summary", nullptr}};
  r["service_tier"] = echo(req, "service_tier", "default");
  r["store"] = echo(req, "store", true);
  r["temperature"] = echo(req, "temperature", 1);
  r["text"] = echo(req, "text", json::object{{"format", json::object{{"type", "text"}}}});
  r["tool_choice"] = echo(req, "tool_choice", "auto");
  r["tools"] = echo(req, "tools", json::array{});
  r["top_p"] = echo(req, "top_p", 1);
  r["truncation"] = echo(req, "truncation", "disabled");
  if (const auto* u = extra_field(req, "user"); u && u->is_string()) r["user"] = *u;
  if (usage) {
    const std::int64_t in = usage->prompt_tokens >= 0 ? usage->prompt_tokens : req.prompt_tokens_estimate;
    const std::int64_t out = usage->completion_tokens >= 0 ? usage->completion_tokens : output_fallback;
    r["usage"] = json::object{{"input_tokens", in},
                              {"input_tokens_details", json::object{{"cached_tokens", 0}, {"cache_write_tokens", 0}}},
                              {"output_tokens", out},
                              {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
                              {"total_tokens", in + out}};
  }  // (while in progress it has none: the field is left out, it is not nullable)
  return r;
}

json::object message_item(const llm::ChatRequest& req, std::string_view status, std::string_view text,
                          std::string id = {}) {
  return json::object{{"type", "message"},
                      {"id", id.empty() ? "msg_" + response_suffix(req) : std::move(id)},
                      {"status", status},
                      {"role", "assistant"},
                      {"content", json::array{json::object{{"type", "output_text"},
                                                           {"text", text},
                                                           {"annotations", json::array{}},
                                                           {"logprobs", json::array{}}}}}};
}

json::object call_item(const llm::ChatRequest& req, std::size_t n, std::string_view status, std::string_view call_id,
                       std::string_view name, std::string_view arguments) {
  return json::object{{"type", "function_call"},
                      {"id", "fc_" + response_suffix(req) + "_" + std::to_string(n)},
                      {"call_id", call_id},
                      {"name", name},
                      {"arguments", arguments},
                      {"status", status}};
}

void event(std::string& out, std::string_view type, const json::object& data) {
  out += "event: ";
  out += type;
  out += "\ndata: ";
  out += json::serialize(data);
  out += "\n\n";
}

class ResponsesOutput final : public ChunkReencoder {
 public:
  ResponsesOutput(std::unique_ptr<llm::StreamTranslator> inner, const llm::ChatRequest& req)
      : ChunkReencoder(std::move(inner)), req_(req) {}

 private:
  struct Call {
    std::size_t output_index = 0;
    std::size_t n = 0;  // its place among the calls (its item id)
    std::string call_id, name, arguments;
    bool open = true;
  };

  void send(std::string& out, std::string_view type, json::object data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    event(out, type, data);
  }

  void start(std::string& out) {
    if (started_) return;
    started_ = true;
    send(out, "response.created", {{"response", response_object(req_, "in_progress", {}, nullptr)}});
    send(out, "response.in_progress", {{"response", response_object(req_, "in_progress", {}, nullptr)}});
  }

  void close_text(std::string& out) {
    if (text_index_ < 0) return;
    const auto idx = static_cast<std::size_t>(text_index_);
    const std::string& item_id = text_id_;
    send(out, "response.output_text.done",
         {{"item_id", item_id}, {"output_index", idx}, {"content_index", 0}, {"text", text_}, {"logprobs", json::array{}}});
    send(out, "response.content_part.done",
         {{"item_id", item_id},
          {"output_index", idx},
          {"content_index", 0},
          {"part", json::object{{"type", "output_text"}, {"text", text_}, {"annotations", json::array{}}, {"logprobs", json::array{}}}}});
    send(out, "response.output_item.done",
         {{"output_index", idx}, {"item", message_item(req_, "completed", text_, text_id_)}});
    items_[idx] = message_item(req_, "completed", text_, text_id_);
    text_index_ = -1;
    text_.clear();
    ++messages_;
  }

  void close_call(std::string& out, Call& c) {
    if (!c.open) return;
    c.open = false;
    const std::string item_id = "fc_" + response_suffix(req_) + "_" + std::to_string(c.n);
    send(out, "response.function_call_arguments.done",
         {{"item_id", item_id}, {"output_index", c.output_index}, {"name", c.name}, {"arguments", c.arguments}});
    auto item = call_item(req_, c.n, "completed", c.call_id, c.name, c.arguments);
    items_[c.output_index] = item;
    send(out, "response.output_item.done", {{"output_index", c.output_index}, {"item", std::move(item)}});
  }

  void on_text(std::string& out, std::string_view text) override {
    start(out);
    if (text_index_ < 0) {
      // A message item (the first is msg_<id>, one after a tool call msg_<id>_<n>).
      text_index_ = static_cast<std::int64_t>(items_.size());
      text_id_ = "msg_" + response_suffix(req_) + (messages_ ? "_" + std::to_string(messages_) : std::string());
      items_.emplace_back();
      const auto idx = static_cast<std::size_t>(text_index_);
      auto item = message_item(req_, "in_progress", "", text_id_);
      item["content"] = json::array{};
      send(out, "response.output_item.added", {{"output_index", idx}, {"item", std::move(item)}});
      send(out, "response.content_part.added",
           {{"item_id", text_id_},
            {"output_index", idx},
            {"content_index", 0},
            {"part", json::object{{"type", "output_text"}, {"text", ""}, {"annotations", json::array{}}, {"logprobs", json::array{}}}}});
    }
    text_ += text;
    send(out, "response.output_text.delta",
         {{"item_id", text_id_},
          {"output_index", static_cast<std::size_t>(text_index_)},
          {"content_index", 0},
          {"delta", text},
          {"logprobs", json::array{}}});
  }

  void on_tool(std::string& out, const ToolFragment& f) override {
    start(out);
    auto it = calls_.find(f.index);
    if (it == calls_.end()) {
      // Calls stay open until the end: an upstream may interleave their arguments.
      close_text(out);
      Call c;
      c.output_index = items_.size();
      c.n = calls_.size();
      c.call_id = f.id.empty() ? "call_" + response_suffix(req_) + "_" + std::to_string(c.n) : std::string(f.id);
      c.name = f.name;
      items_.emplace_back();
      it = calls_.emplace(f.index, std::move(c)).first;
      send(out, "response.output_item.added",
           {{"output_index", it->second.output_index},
            {"item", call_item(req_, it->second.n, "in_progress", it->second.call_id, it->second.name, "")}});
    }
    if (!f.arguments.empty()) {
      it->second.arguments += f.arguments;
      send(out, "response.function_call_arguments.delta",
           {{"item_id", "fc_" + response_suffix(req_) + "_" + std::to_string(it->second.n)},
            {"output_index", it->second.output_index},
            {"delta", f.arguments}});
    }
  }

  void on_error(std::string& out, std::string_view message) override { fail(out, "upstream_error", message); }

 public:
  // A failure the gateway saw after the stream began (a timeout, a cut upstream): the same
  // ending, in this stream's sequence.
  std::string error_event(Reason reason, std::string_view message) override {
    std::string out;
    if (!ended_) fail(out, reason_code(reason), message);
    ended_ = true;
    return out;
  }

 private:
  // An error event, then response.failed with what was produced so far.
  void fail(std::string& out, std::string_view code, std::string_view message) {
    start(out);
    send(out, "error", {{"code", code}, {"message", message}, {"param", nullptr}});
    json::array output;
    for (auto& item : items_) {
      if (!item.is_null()) output.push_back(item);
    }
    auto response = response_object(req_, "failed", std::move(output), nullptr);
    response["error"] = json::object{{"code", "server_error"}, {"message", message}};
    send(out, "response.failed", {{"response", std::move(response)}});
  }

  void on_end(std::string& out) override {
    start(out);
    close_text(out);
    for (auto& [_, c] : calls_) close_call(out, c);
    json::array output;
    for (auto& item : items_) {
      if (!item.is_null()) output.push_back(item);
    }
    const bool cut = inner().finish_reason() == "length";
    const llm::Usage usage = inner().usage();
    auto response = response_object(req_, cut ? "incomplete" : "completed", std::move(output), &usage,
                                    inner().relayed_tokens());
    final_ = json::serialize(response);
    send(out, cut ? "response.incomplete" : "response.completed", {{"response", std::move(response)}});
  }

 public:
  std::string final_answer() const override { return final_; }

 private:

  const llm::ChatRequest& req_;
  std::int64_t seq_ = 0;
  bool started_ = false;
  std::int64_t text_index_ = -1;  // the open message item's output index
  std::string text_id_;        // the open message item's id
  std::size_t messages_ = 0;   // message items closed
  std::string text_;
  std::map<std::int64_t, Call> calls_;  // by the chunks' tool call index
  std::vector<json::value> items_;      // the output items by output index (null while open)
  std::string final_;                   // the completed Response object
};

class Responses final : public OpenAiCodec {
 public:
  std::string_view name() const override { return "responses"; }

  llm::ParseResult decode(std::string_view body, Op, const config::Config& cfg) const override {
    auto conv = responses_to_chat(body);
    if (auto* err = std::get_if<RequestError>(&conv)) return std::move(*err);
    auto& c = std::get<ResponsesConversion>(conv);
    auto parsed = llm::parse_chat_request(c.chat, cfg);
    if (auto* req = std::get_if<llm::ChatRequest>(&parsed)) {
      req->extra = std::move(c.extra);
      req->native = std::move(c.native);
      req->native_only = std::move(c.native_only);
      req->native_billed = std::move(c.native_billed);
    }
    return parsed;
  }

  bool native_on(const config::Backend& b) const override { return b.native_responses; }
  llm::UpstreamCall native_call(const llm::ChatRequest& req, const config::Backend& b) const override {
    return responses_native_call(req, b);
  }
  std::optional<llm::Completion> native_answer(std::string body, const llm::ChatRequest& req) const override {
    return responses_native_answer(std::move(body), req);
  }
  std::unique_ptr<llm::StreamTranslator> native_stream(const llm::ChatRequest& req) const override {
    return responses_native_stream(req);
  }

  std::string answer(llm::Completion& done, const llm::ChatRequest& req, std::string_view) const override {
    return chat_to_response(done, req);
  }

  std::unique_ptr<llm::StreamTranslator> stream(std::unique_ptr<llm::StreamTranslator> chunks,
                                                const llm::ChatRequest& req, std::string_view) const override {
    return make_responses_output(std::move(chunks), req);
  }

  std::string error_event(Reason reason, std::string_view message) const override {
    json::object e{{"type", "error"},
                   {"code", reason_code(reason)},
                   {"message", message},
                   {"param", nullptr},
                   {"sequence_number", 0}};
    std::string out;
    event(out, "error", e);
    return out;
  }
};

}  // namespace

std::variant<ResponsesConversion, RequestError> responses_to_chat(std::string_view body) {
  boost::system::error_code ec;
  json::parse_options po;
  po.max_depth = 64;
  json::value v = llm::detail::parse_json(body, ec, {}, po);
  if (ec || !v.is_object()) return bad("request body must be a JSON object", "", Reason::bad_json);
  auto& in = v.as_object();
  ResponsesConversion out;
  NativeOnly native;
  json::object chat;
  json::array messages;
  // Echoed in the answer as the client sent them.
  static constexpr std::string_view kEchoed[] = {"instructions", "max_output_tokens", "metadata", "parallel_tool_calls",
                                                 "previous_response_id", "service_tier", "store", "temperature",
                                                 "text", "tool_choice", "tools", "top_p", "truncation", "user"};
  // Passed to the chat request as they are (checked there).
  static constexpr std::string_view kSame[] = {"model", "temperature", "top_p", "user", "parallel_tool_calls",
                                               "service_tier", "safety_identifier", "prompt_cache_key",
                                               "prompt_cache_retention", "prompt_cache_options", "moderation"};
  // Accepted, nothing to do for a chat upstream.
  static constexpr std::string_view kIgnored[] = {"include", "stream_options", "truncation"};
  for (const auto& kv : in) {
    const std::string_view k = kv.key();
    const json::value& val = kv.value();
    if (std::find(std::begin(kEchoed), std::end(kEchoed), k) != std::end(kEchoed)) out.extra[k] = val;
    if (k == "metadata") continue;  // echoed only: a chat upstream refuses metadata without store
    if (std::find(std::begin(kSame), std::end(kSame), k) != std::end(kSame)) {
      if (!val.is_null()) chat[k] = val;
    } else if (std::find(std::begin(kIgnored), std::end(kIgnored), k) != std::end(kIgnored)) {
      if (k == "truncation" && !val.is_null() && !(val.is_string() && (val.get_string() == "auto" || val.get_string() == "disabled"))) {
        return bad("'truncation' must be \"auto\" or \"disabled\"", "truncation");
      }
    } else if (k == "input") {
      if (val.is_string()) {
        messages.push_back(json::object{{"role", "user"}, {"content", val}});
      } else if (val.is_array()) {
        if (auto e = convert_items(val.get_array(), messages, native)) return std::move(*e);
      } else {
        return bad("'input' must be a string or an array of input items", "input");
      }
    } else if (k == "instructions") {
      if (!val.is_null() && !val.is_string()) return bad("'instructions' must be a string", "instructions");
    } else if (k == "stream") {
      if (!val.is_null() && !val.is_bool()) return bad("'stream' must be a boolean", "stream");
      if (val.is_bool() && val.get_bool()) {
        chat["stream"] = true;
        chat["stream_options"] = json::object{{"include_usage", true}};  // for response.completed's usage
      }
    } else if (k == "max_output_tokens") {
      if (!val.is_null()) chat["max_completion_tokens"] = val;
    } else if (k == "tools") {
      if (auto e = convert_tools(val, chat, native)) return std::move(*e);
    } else if (k == "tool_choice") {
      if (auto e = convert_tool_choice(val, chat, native)) return std::move(*e);
    } else if (k == "text") {
      if (auto e = convert_text(val, chat)) return std::move(*e);
    } else if (k == "reasoning") {
      if (val.is_null()) continue;
      if (!val.is_object()) return bad("'reasoning' must be an object", "reasoning");
      if (const auto* effort = val.get_object().if_contains("effort"); effort && !effort->is_null()) {
        chat["reasoning_effort"] = *effort;
        out.extra["reasoning_effort"] = *effort;
      }
    } else if (k == "store") {
      if (!val.is_null() && !val.is_bool()) return bad("'store' must be a boolean", "store");
    } else if (k == "previous_response_id") {
      if (!val.is_null() && (!val.is_string() || val.get_string().empty())) {
        return bad("'previous_response_id' must be a non-empty string", "previous_response_id");
      }
    } else if (k == "top_logprobs" || k == "prompt" || k == "context_management" || k == "max_tool_calls") {
      if (val.is_null() || (k == "top_logprobs" && val.is_int64() && val.get_int64() == 0)) continue;
      native.note("'" + std::string(k) + "' needs a backend that serves the Responses API", std::string(k),
                  k == "prompt" ? "prompt" : "");
    } else if (k == "background" || k == "conversation") {
      // The gateway keeps conversations itself (previous_response_id) and answers while
      // the client waits.
      if (val.is_null() || (val.is_bool() && !val.get_bool())) continue;
      return bad("'" + std::string(k) + "' is not supported by this gateway", std::string(k), Reason::option_not_allowed);
    } else {
      return bad("unknown parameter '" + std::string(k) + "'", std::string(k), Reason::option_not_allowed);
    }
  }
  if (const auto* instr = in.if_contains("instructions"); instr && instr->is_string()) {
    messages.insert(messages.begin(), json::object{{"role", "system"}, {"content", *instr}});
  }
  if (!in.contains("input")) return bad("missing required parameter 'input'", "input");
  // Input that only a backend serving the API itself can take: the chat form (limits,
  // counts, filters) holds an empty user message for it.
  if (messages.empty() && native.first) messages.push_back(json::object{{"role", "user"}, {"content", ""}});
  if (messages.empty()) return bad("'input' must hold at least one item", "input");
  chat["messages"] = std::move(messages);
  out.extra["id"] = "resp_" + unguessable_id();
  out.extra["created_at"] = unix_now();
  out.chat = json::serialize(chat);
  // The request as a backend serving the API itself takes it: its input as items (also
  // what GET .../input_items lists); the conversation is the gateway's
  // (previous_response_id is resolved into the input).
  if (auto& input = in["input"]; input.is_string()) {
    input = json::array{json::object{{"type", "message"},
                                     {"role", "user"},
                                     {"content", json::array{json::object{{"type", "input_text"}, {"text", input}}}}}};
  }
  in.erase("previous_response_id");
  out.native = std::move(in);
  out.native_only = std::move(native.first);
  out.native_billed = std::move(native.billed);
  return out;
}

std::string chat_to_response(const llm::Completion& done, const llm::ChatRequest& req) {
  json::array output;
  boost::system::error_code ec;
  json::value v = llm::detail::parse_json(done.body, ec);
  std::int64_t fallback = 0;
  if (!ec && v.is_object()) {
    if (const auto* ch = v.get_object().if_contains("choices"); ch && ch->is_array() && !ch->get_array().empty()) {
      const auto* c0 = ch->get_array()[0].if_object();
      const auto* msg = c0 ? c0->if_contains("message") : nullptr;
      if (const auto* mo = msg ? msg->if_object() : nullptr) {
        const std::string_view text = str(mo->if_contains("content"));
        const auto* calls = mo->if_contains("tool_calls");
        const bool has_calls = calls && calls->is_array() && !calls->get_array().empty();
        if (!text.empty() || !has_calls) output.push_back(message_item(req, "completed", text));
        if (has_calls) {
          std::size_t n = 0;
          for (const auto& call : calls->get_array()) {
            const auto* co = call.if_object();
            const auto* fn = co ? co->if_contains("function") : nullptr;
            const auto* fo = fn ? fn->if_object() : nullptr;
            if (!fo) continue;
            std::string call_id(str(co->if_contains("id")));
            if (call_id.empty()) call_id = "call_" + response_suffix(req) + "_" + std::to_string(n);
            output.push_back(
                call_item(req, n, "completed", call_id, str(fo->if_contains("name")), str(fo->if_contains("arguments"))));
            ++n;
          }
        }
        fallback = static_cast<std::int64_t>(text.size() / 4);
      }
    }
  }
  const bool cut = done.finish_reason == "length";
  return json::serialize(response_object(req, cut ? "incomplete" : "completed", std::move(output), &done.usage, fallback));
}

std::unique_ptr<llm::StreamTranslator> make_responses_output(std::unique_ptr<llm::StreamTranslator> inner,
                                                             const llm::ChatRequest& req) {
  return std::make_unique<ResponsesOutput>(std::move(inner), req);
}

json::array response_output_messages(const json::object& response) {
  json::array messages;
  const auto* output = response.if_contains("output");
  if (!output || !output->is_array()) return messages;
  std::string text;
  json::array calls;
  for (const auto& item : output->get_array()) {
    const auto* o = item.if_object();
    if (!o) continue;
    const std::string_view type = str(o->if_contains("type"));
    if (type == "message") {
      if (const auto* content = o->if_contains("content"); content && content->is_array()) {
        for (const auto& part : content->get_array()) {
          if (const auto* po = part.if_object(); po && str(po->if_contains("type")) == "output_text") {
            text += str(po->if_contains("text"));
          }
        }
      }
    } else if (type == "function_call") {
      calls.push_back(json::object{{"id", str(o->if_contains("call_id"))},
                                   {"type", "function"},
                                   {"function", json::object{{"name", str(o->if_contains("name"))},
                                                             {"arguments", str(o->if_contains("arguments"))}}}});
    }
  }
  if (text.empty() && calls.empty()) return messages;
  json::object m{{"role", "assistant"}};
  m["content"] = text.empty() && !calls.empty() ? json::value(nullptr) : json::value(text);
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  messages.push_back(std::move(m));
  return messages;
}

std::string response_suffix(const llm::ChatRequest& req) {
  std::string_view id = str(req.extra.if_contains("id"));
  if (id.starts_with("resp_")) id.remove_prefix(5);
  return std::string(id);
}

std::string response_of_item(std::string_view item_id) {
  const auto at = item_id.find('_');
  if (at == std::string_view::npos || at == 0) return {};
  std::string_view rest = item_id.substr(at + 1);
  rest = rest.substr(0, rest.find('_'));
  if (rest.empty()) return {};
  return "resp_" + std::string(rest);
}

const json::object* output_item(const json::object& response, std::string_view item_id) {
  const auto* output = response.if_contains("output");
  if (!output || !output->is_array()) return nullptr;
  for (const auto& item : output->get_array()) {
    const auto* o = item.if_object();
    if (o && str(o->if_contains("id")) == item_id) return o;
  }
  return nullptr;
}

std::optional<json::object> output_item_message(const json::object& response, std::string_view item_id) {
  const json::object* item = output_item(response, item_id);
  if (!item) return std::nullopt;
  json::object one{{"output", json::array{*item}}};
  auto messages = response_output_messages(one);
  if (messages.empty()) return json::object{{"role", "assistant"}, {"content", ""}};
  return messages.front().as_object();
}

json::array items_to_messages(const json::array& items) {
  json::array messages;
  NativeOnly skipped;  // what chat cannot hold is left out
  for (const auto& item : items) {
    // One at a time: an item chat cannot read (a malformed one an upstream answered) is
    // left out, not the whole conversation.
    (void)convert_items(json::array{item}, messages, skipped);
  }
  return messages;
}

std::string input_item_list(std::string_view items_json, std::size_t from, std::size_t count,
                            std::string_view response_id) {
  boost::system::error_code ec;
  json::value v = llm::detail::parse_json(items_json, ec);
  json::array data;
  if (!ec && v.is_array() && from <= v.as_array().size()) {
    std::string_view suffix = response_id;
    if (suffix.starts_with("resp_")) suffix.remove_prefix(5);
    std::size_t i = 0;
    auto& all = v.as_array();
    for (auto& item : std::span(all.begin() + from, std::min(count, all.size() - from))) {
      auto* o = item.if_object();
      if (!o) continue;
      json::object it = *o;
      if (!it.contains("type")) it["type"] = "message";
      if (!it.contains("id")) it["id"] = "item_" + std::string(suffix) + "_" + std::to_string(i);
      if (it["type"] == "message") {
        if (!it.contains("status")) it["status"] = "completed";
        if (auto* c = it.if_contains("content"); c && c->is_string()) {
          *c = json::array{json::object{{"type", "input_text"}, {"text", *c}}};
        }
      }
      data.push_back(std::move(it));
      ++i;
    }
  }
  json::object list{{"object", "list"}, {"has_more", false}};
  list["first_id"] = data.empty() ? json::value(nullptr) : data.front().as_object().at("id");
  list["last_id"] = data.empty() ? json::value(nullptr) : data.back().as_object().at("id");
  list["data"] = std::move(data);
  return json::serialize(list);
}

const Codec& openai_responses() noexcept {
  static const Responses codec;
  return codec;
}

}  // namespace sluice::api
