// The Anthropic Messages API on the client side: request and answer translation to and
// from chat completions (docs/translation.md, "Anthropic clients").
#include "llm/anthropic.hpp"

#include <boost/json.hpp>
#include <ctime>
#include <map>

#include "common/text.hpp"
#include "llm/framing.hpp"
#include "llm/json_parse.hpp"

namespace sluice::llm {

namespace json = boost::json;

namespace {

RequestError bad(Reason r, std::string message, std::string param) {
  return RequestError{r, std::move(message), std::move(param)};
}

// One text block (`bp` its path), appended to `out` (joined with '\n'). Other types are refused.
std::optional<RequestError> append_text_block(const json::object& o, const std::string& bp, std::string& out) {
  const auto* type = o.if_contains("type");
  if (!type || !type->is_string()) return bad(Reason::invalid_request, bp + " must be an object with a string type", bp);
  if (type->get_string() != "text") {
    return bad(Reason::invalid_request,
               bp + ": content blocks of type '" + std::string(type->get_string()) + "' are not supported (text only)",
               bp + ".type");
  }
  const auto* text = o.if_contains("text");
  if (!text || !text->is_string()) return bad(Reason::invalid_request, bp + ".text must be a string", bp + ".text");
  if (!out.empty()) out += '\n';
  out += text->get_string();
  return std::nullopt;
}

// Text of a content or system value: a string, or an array of text blocks (joined).
std::variant<std::string, RequestError> text_of(const json::value& v, const std::string& path) {
  if (v.is_string()) return std::string(v.get_string());
  if (!v.is_array()) return bad(Reason::invalid_request, path + " must be a string or an array of content blocks", path);
  std::string out;
  const auto& blocks = v.get_array();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::string bp = path + "[" + std::to_string(i) + "]";
    const auto* o = blocks[i].if_object();
    if (!o) return bad(Reason::invalid_request, bp + " must be an object with a string type", bp);
    if (auto e = append_text_block(*o, bp, out)) return std::move(*e);
  }
  return out;
}

std::string_view stop_reason(std::string_view finish) {
  if (finish == "length") return "max_tokens";
  if (finish == "tool_calls") return "tool_use";
  return "end_turn";
}

std::string_view error_type_for(int status) {
  switch (status) {
    case 400: case 405: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: case 431: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string error_json(int status, std::string_view message) {
  std::string o = R"({"type":"error","error":{"type":")";
  o += error_type_for(status);
  o += R"(","message":)";
  append_json_string(o, message);
  o += "}}";
  return o;
}

void event(std::string& out, std::string_view type, std::string_view data) {
  out += "event: ";
  out += type;
  out += "\ndata: ";
  out += data;
  out += "\n\n";
}


// One Messages turn -> chat messages, appended to `messages`. A user turn's tool_result
// blocks become `tool` messages (in order, before the rest of the turn, which becomes a user
// message when it has text or when the turn had no tool results); an assistant turn's
// tool_use blocks become its `tool_calls`. Other blocks: text only, as text_of.
std::optional<RequestError> convert_turn(bool assistant, const json::value& content, const std::string& path,
                                         json::array& messages) {
  const json::string_view role = assistant ? "assistant" : "user";
  if (!content.is_array()) {
    auto text = text_of(content, path);
    if (auto* e = std::get_if<RequestError>(&text)) return std::move(*e);
    messages.push_back(json::object{{"role", role}, {"content", std::get<std::string>(std::move(text))}});
    return std::nullopt;
  }
  std::string s;  // the text blocks, joined
  json::array tool_calls;
  std::size_t tool_results = 0;
  const auto& blocks = content.get_array();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::string bp = path + "[" + std::to_string(i) + "]";
    const auto* o = blocks[i].if_object();
    const auto* type = o ? o->if_contains("type") : nullptr;
    if (!type || !type->is_string()) return bad(Reason::invalid_request, bp + " must be an object with a string type", bp);
    const json::string_view t = type->get_string();
    if (t == "tool_use" && assistant) {
      const auto* id = o->if_contains("id");
      if (!id || !id->is_string()) return bad(Reason::invalid_request, bp + ".id must be a string", bp + ".id");
      const auto* name = o->if_contains("name");
      if (!name || !name->is_string()) return bad(Reason::invalid_request, bp + ".name must be a string", bp + ".name");
      const auto* input = o->if_contains("input");
      if (input && !input->is_object() && !input->is_null()) {
        return bad(Reason::invalid_request, bp + ".input must be an object", bp + ".input");
      }
      tool_calls.push_back(json::object{
          {"id", *id},
          {"type", "function"},
          {"function", json::object{{"name", *name},
                                    {"arguments", input && input->is_object() ? json::serialize(*input) : "{}"}}}});
    } else if (t == "tool_result" && !assistant) {
      const auto* id = o->if_contains("tool_use_id");
      if (!id || !id->is_string()) {
        return bad(Reason::invalid_request, bp + ".tool_use_id must be a string", bp + ".tool_use_id");
      }
      std::string text;
      if (const auto* c = o->if_contains("content"); c && !c->is_null()) {
        auto r = text_of(*c, bp + ".content");
        if (auto* e = std::get_if<RequestError>(&r)) return std::move(*e);
        text = std::get<std::string>(std::move(r));
      }
      if (const auto* err = o->if_contains("is_error"); err && err->is_bool() && err->get_bool()) {
        text = "Error: " + text;
      }
      messages.push_back(json::object{{"role", "tool"}, {"tool_call_id", *id}, {"content", std::move(text)}});
      ++tool_results;
    } else if (t == "tool_use" || t == "tool_result") {
      return bad(Reason::invalid_request,
                 bp + ": a '" + std::string(t) + "' block belongs in " + (assistant ? "a user" : "an assistant") + " turn",
                 bp + ".type");
    } else if (auto e = append_text_block(*o, bp, s)) {
      return std::move(*e);
    }
  }
  if (assistant) {
    json::object msg{{"role", role}};
    if (tool_calls.empty()) {
      msg["content"] = s;
    } else {
      msg["content"] = s.empty() ? json::value(nullptr) : json::value(s);
      msg["tool_calls"] = std::move(tool_calls);
    }
    messages.push_back(std::move(msg));
  } else if (tool_results == 0 || !s.empty()) {
    messages.push_back(json::object{{"role", role}, {"content", s}});
  }
  return std::nullopt;
}

// tools and tool_choice -> their chat-completions forms, in `out`.
std::optional<RequestError> convert_tools(const json::object& in, json::object& out) {
  json::array tools;
  if (const auto* tv = in.if_contains("tools"); tv && !tv->is_null()) {
    if (!tv->is_array()) return bad(Reason::invalid_request, "tools must be an array", "tools");
    const auto& arr = tv->get_array();
    for (std::size_t i = 0; i < arr.size(); ++i) {
      const std::string tp = "tools[" + std::to_string(i) + "]";
      const auto* o = arr[i].if_object();
      if (!o) return bad(Reason::invalid_request, tp + " must be an object", tp);
      if (const auto* type = o->if_contains("type"); type && !type->is_null()) {
        if (!type->is_string() || type->get_string() != "custom") {
          const std::string name = type->is_string() ? std::string(type->get_string()) : json::serialize(*type);
          return bad(Reason::option_not_allowed,
                     tp + ".type: tools of type '" + name + "' (server tools) are not supported; only client tools " +
                         "(no type, or 'custom') are",
                     tp + ".type");
        }
      }
      const auto* name = o->if_contains("name");
      if (!name || !name->is_string() || name->get_string().empty()) {
        return bad(Reason::invalid_request, tp + ".name must be a non-empty string", tp + ".name");
      }
      const auto* schema = o->if_contains("input_schema");
      if (!schema || !schema->is_object()) {
        return bad(Reason::invalid_request, tp + ".input_schema must be an object", tp + ".input_schema");
      }
      json::object fn{{"name", *name}};
      if (const auto* d = o->if_contains("description"); d && !d->is_null()) {
        if (!d->is_string()) return bad(Reason::invalid_request, tp + ".description must be a string", tp + ".description");
        fn["description"] = *d;
      }
      fn["parameters"] = *schema;
      tools.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
    }
  }
  const auto* tc = in.if_contains("tool_choice");
  json::value choice;
  bool serial = false;
  if (tc && !tc->is_null()) {
    const auto* o = tc->if_object();
    const auto* type = o ? o->if_contains("type") : nullptr;
    if (!type || !type->is_string()) {
      return bad(Reason::invalid_request, "tool_choice must be an object with a string type", "tool_choice");
    }
    const json::string_view t = type->get_string();
    if (t == "auto") {
      choice = "auto";
    } else if (t == "any") {
      choice = "required";
    } else if (t == "none") {
      choice = "none";
    } else if (t == "tool") {
      const auto* name = o->if_contains("name");
      if (!name || !name->is_string()) {
        return bad(Reason::invalid_request, "tool_choice.name must be a string", "tool_choice.name");
      }
      choice = json::object{{"type", "function"}, {"function", json::object{{"name", *name}}}};
    } else {
      return bad(Reason::invalid_request,
                 "tool_choice.type must be 'auto', 'any', 'tool' or 'none', not '" + std::string(t) + "'",
                 "tool_choice.type");
    }
    if (const auto* d = o->if_contains("disable_parallel_tool_use"); d && !d->is_null()) {
      if (!d->is_bool()) {
        return bad(Reason::invalid_request, "tool_choice.disable_parallel_tool_use must be a boolean",
                   "tool_choice.disable_parallel_tool_use");
      }
      serial = d->get_bool();
    }
  }
  // Without tools there is nothing to choose from: tool_choice is then left out (OpenAI
  // upstreams refuse a tool_choice without tools).
  if (tools.empty()) return std::nullopt;
  out["tools"] = std::move(tools);
  if (!choice.is_null()) out["tool_choice"] = std::move(choice);
  if (serial) out["parallel_tool_calls"] = false;
  return std::nullopt;
}

}  // namespace

AnthropicConversion anthropic_to_chat(std::string_view body, bool for_count) {
  boost::system::error_code ec;
  json::parse_options po;
  po.max_depth = 64;
  json::value v = detail::parse_json(body, ec, {}, po);
  if (ec || !v.is_object()) return bad(Reason::bad_json, "the body is not a JSON object", "");
  const auto& in = v.get_object();
  static constexpr std::string_view kKnown[] = {"model",       "max_tokens", "messages",       "system",
                                                "stream",      "temperature", "top_p",          "top_k",
                                                "stop_sequences", "metadata", "tools",          "tool_choice"};
  for (const auto& kv : in) {
    bool known = false;
    for (auto k : kKnown) known |= kv.key() == k;
    if (!known) {
      return bad(Reason::option_not_allowed,
                 "field '" + std::string(kv.key()) + "' is not supported on /v1/messages", std::string(kv.key()));
    }
  }
  json::object out;
  const auto* model = in.if_contains("model");
  if (!model || !model->is_string() || model->get_string().empty()) {
    return bad(Reason::invalid_request, "model must be a non-empty string", "model");
  }
  out["model"] = *model;
  const auto* max_tokens = in.if_contains("max_tokens");
  const bool max_ok = max_tokens && ((max_tokens->is_int64() && max_tokens->get_int64() >= 1) || max_tokens->is_uint64());
  if (!max_ok && !(for_count && !max_tokens)) {
    return bad(Reason::invalid_request, "max_tokens is required: an integer >= 1", "max_tokens");
  }
  json::array messages;
  if (const auto* sys = in.if_contains("system"); sys && !sys->is_null()) {
    auto text = text_of(*sys, "system");
    if (auto* e = std::get_if<RequestError>(&text)) return std::move(*e);
    messages.push_back(json::object{{"role", "system"}, {"content", std::get<std::string>(std::move(text))}});
  }
  const auto* msgs = in.if_contains("messages");
  if (!msgs || !msgs->is_array() || msgs->get_array().empty()) {
    return bad(Reason::invalid_request, "messages must be a non-empty array", "messages");
  }
  const auto& arr = msgs->get_array();
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const auto* m = arr[i].if_object();
    if (!m) return bad(Reason::invalid_request, p + " must be an object", p);
    const auto* role = m->if_contains("role");
    if (!role || !role->is_string() || (role->get_string() != "user" && role->get_string() != "assistant")) {
      return bad(Reason::invalid_request, p + ".role must be 'user' or 'assistant'", p + ".role");
    }
    const auto* content = m->if_contains("content");
    if (!content) return bad(Reason::invalid_request, p + ".content is required", p + ".content");
    if (auto e = convert_turn(role->get_string() == "assistant", *content, p + ".content", messages)) {
      return std::move(*e);
    }
  }
  out["messages"] = std::move(messages);
  if (auto e = convert_tools(in, out)) return std::move(*e);
  if (max_tokens) out["max_tokens"] = *max_tokens;
  bool stream = false;
  if (const auto* s = in.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool()) return bad(Reason::invalid_request, "stream must be a boolean", "stream");
    stream = s->get_bool();
  }
  out["stream"] = stream;
  if (stream) out["stream_options"] = json::object{{"include_usage", true}};  // for message_delta's usage
  for (const char* k : {"temperature", "top_p"}) {
    if (const auto* x = in.if_contains(k); x && !x->is_null()) {
      if (!x->is_number()) return bad(Reason::invalid_request, std::string(k) + " must be a number", k);
      out[k] = *x;
    }
  }
  if (const auto* k = in.if_contains("top_k"); k && !k->is_null()) {
    if (!k->is_int64()) return bad(Reason::invalid_request, "top_k must be an integer", "top_k");
    out["options"] = json::object{{"top_k", *k}};  // Ollama-style; validated by the options allow-list
  }
  if (const auto* st = in.if_contains("stop_sequences"); st && !st->is_null()) {
    bool ok = st->is_array();
    if (ok) {
      for (const auto& x : st->get_array()) ok &= x.is_string();
    }
    if (!ok) return bad(Reason::invalid_request, "stop_sequences must be an array of strings", "stop_sequences");
    if (!st->get_array().empty()) out["stop"] = *st;
  }
  if (const auto* md = in.if_contains("metadata"); md && !md->is_null()) {
    if (!md->is_object()) return bad(Reason::invalid_request, "metadata must be an object", "metadata");
    if (const auto* u = md->get_object().if_contains("user_id"); u && u->is_string()) out["user"] = *u;
  }
  return json::serialize(out);
}

namespace {

// A tool call's arguments (a JSON string) as the object a tool_use block's input is. Not
// valid JSON, or not an object: {} (the call still reaches the client, named).
json::value arguments_object(const json::value* args) {
  if (args && args->is_string()) {
    boost::system::error_code ec;
    json::value v = detail::parse_json(args->get_string(), ec);
    if (!ec && v.is_object()) return v;
  }
  return json::object{};
}

// "tool_calls" -> "tool_use"; so does a plain stop that carried tool calls (an upstream
// that says "stop" after calling tools: the client must still run them).
std::string_view stop_reason_for(std::string_view finish, bool has_tool_calls) {
  if (has_tool_calls && (finish.empty() || finish == "stop")) return "tool_use";
  return stop_reason(finish);
}

}  // namespace

std::string chat_to_anthropic(const Completion& done, std::string_view model, std::string_view id) {
  std::string text;
  json::array tool_uses;
  boost::system::error_code ec;
  json::value v = detail::parse_json(done.body, ec);
  if (!ec && v.is_object()) {
    if (const auto* ch = v.get_object().if_contains("choices"); ch && ch->is_array() && !ch->get_array().empty()) {
      if (const auto* c0 = ch->get_array()[0].if_object()) {
        if (const auto* msg = c0->if_contains("message"); msg && msg->is_object()) {
          const auto& mo = msg->get_object();
          if (const auto* c = mo.if_contains("content"); c && c->is_string()) text = c->get_string();
          if (const auto* tc = mo.if_contains("tool_calls"); tc && tc->is_array()) {
            for (const auto& call : tc->get_array()) {
              const auto* co = call.if_object();
              if (!co) continue;
              const auto* fn = co->if_contains("function");
              const auto* fo = fn ? fn->if_object() : nullptr;
              if (!fo) continue;
              json::object b{{"type", "tool_use"}};
              const auto* cid = co->if_contains("id");
              if (cid && cid->is_string()) b["id"] = *cid;
              else b["id"] = "toolu_" + std::string(id) + "_" + std::to_string(tool_uses.size());
              const auto* name = fo->if_contains("name");
              b["name"] = name && name->is_string() ? json::value(*name) : json::value("");
              b["input"] = arguments_object(fo->if_contains("arguments"));
              tool_uses.push_back(std::move(b));
            }
          }
        }
      }
    }
  }
  json::array content;
  if (!text.empty() || tool_uses.empty()) content.push_back(json::object{{"type", "text"}, {"text", text}});
  for (auto& b : tool_uses) content.push_back(std::move(b));
  std::string o = R"({"id":)";
  append_json_string(o, "msg_" + std::string(id));
  o += R"(,"type":"message","role":"assistant","model":)";
  append_json_string(o, model);
  o += R"(,"content":)";
  o += json::serialize(content);
  o += R"(,"stop_reason":")";
  o += stop_reason_for(done.finish_reason, !tool_uses.empty());
  o += R"(","stop_sequence":null,"usage":{"input_tokens":)";
  o += std::to_string(std::max<std::int64_t>(done.usage.prompt_tokens, 0));
  o += R"(,"output_tokens":)";
  o += std::to_string(std::max<std::int64_t>(done.usage.completion_tokens, 0));
  o += "}}";
  return o;
}

std::string anthropic_error_body(Reason reason, std::string_view message) {
  return error_json(http_status(reason), message);
}

std::string anthropic_error_body(int status, std::string_view message) { return error_json(status, message); }

std::string anthropic_error_from_chat(int status, std::string_view chat_error_body) {
  std::string message = "upstream answered HTTP " + std::to_string(status);
  boost::system::error_code ec;
  json::value v = detail::parse_json(chat_error_body, ec);
  if (!ec && v.is_object()) {
    if (const auto* e = v.get_object().if_contains("error"); e && e->is_object()) {
      if (const auto* m = e->get_object().if_contains("message"); m && m->is_string()) message = m->get_string();
    }
  }
  return error_json(status, message);
}

std::string anthropic_error_event(Reason reason, std::string_view message) {
  std::string out;
  event(out, "error", anthropic_error_body(reason, message));
  return out;
}

namespace {

class AnthropicOutput final : public StreamTranslator {
 public:
  AnthropicOutput(std::unique_ptr<StreamTranslator> inner, std::string model, std::string id, std::int64_t input)
      : inner_(std::move(inner)), model_(std::move(model)), id_(std::move(id)), input_(input) {}

  bool feed(std::string_view bytes, std::string& out) override {
    frames_.clear();
    const bool ok = inner_->feed(bytes, frames_);
    convert(out);
    sync();
    return ok;
  }

  bool finish(std::string& out) override {
    frames_.clear();
    const bool ok = inner_->finish(frames_);
    convert(out);
    sync();
    return ok;
  }

  // The inner translator sees the upstream's output: it counts it.
  void count_output(const tokenizer::Counter* counter, tokenizer::Encoding encoding) override {
    inner_->count_output(counter, encoding);
  }
  std::int64_t relayed_tokens() const override { return inner_->relayed_tokens(); }

 private:
  void sync() {
    content_chunks_ = inner_->content_chunks();
    usage_ = inner_->usage();
    finish_reason_ = inner_->finish_reason();
    done_ = inner_->done();
    error_ = inner_->error();
  }

  void start(std::string& out) {
    if (started_) return;
    started_ = true;
    std::string m = R"({"type":"message_start","message":{"id":)";
    append_json_string(m, "msg_" + id_);
    m += R"(,"type":"message","role":"assistant","model":)";
    append_json_string(m, model_);
    m += R"(,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":)";
    m += std::to_string(std::max<std::int64_t>(input_, 0));
    m += R"(,"output_tokens":0}}})";
    event(out, "message_start", m);
  }

  // Stops the open content block, if any.
  void stop_block(std::string& out) {
    if (open_ < 0) return;
    std::string d = R"({"type":"content_block_stop","index":)";
    d += std::to_string(open_);
    d += '}';
    event(out, "content_block_stop", d);
    open_ = -1;
    open_tool_ = -1;
  }

  void text_delta(std::string& out, std::string_view text) {
    start(out);
    if (open_ < 0 || open_tool_ >= 0) {
      stop_block(out);
      open_ = next_block_++;
      std::string d = R"({"type":"content_block_start","index":)";
      d += std::to_string(open_);
      d += R"(,"content_block":{"type":"text","text":""}})";
      event(out, "content_block_start", d);
    }
    if (text.empty()) return;
    std::string d = R"({"type":"content_block_delta","index":)";
    d += std::to_string(open_);
    d += R"(,"delta":{"type":"text_delta","text":)";
    append_json_string(d, text);
    d += "}}";
    event(out, "content_block_delta", d);
  }

  // One element of delta.tool_calls: the first fragment of a call (a new index) starts a
  // tool_use block, every arguments piece is an input_json_delta.
  void tool_fragment(std::string& out, const json::object& call) {
    std::int64_t index = static_cast<std::int64_t>(tool_blocks_.size());
    if (const auto* i = call.if_contains("index"); i && i->is_int64()) index = i->get_int64();
    const auto* fn = call.if_contains("function");
    const auto* fo = fn ? fn->if_object() : nullptr;
    const auto* args = fo ? fo->if_contains("arguments") : nullptr;
    start(out);
    auto it = tool_blocks_.find(index);
    if (it == tool_blocks_.end()) {
      stop_block(out);
      open_ = next_block_++;
      open_tool_ = index;
      it = tool_blocks_.emplace(index, open_).first;
      std::string d = R"({"type":"content_block_start","index":)";
      d += std::to_string(open_);
      d += R"(,"content_block":{"type":"tool_use","id":)";
      const auto* id = call.if_contains("id");
      if (id && id->is_string() && !id->get_string().empty()) append_json_string(d, id->get_string());
      else append_json_string(d, "toolu_" + id_ + "_" + std::to_string(index));
      d += R"(,"name":)";
      const auto* name = fo ? fo->if_contains("name") : nullptr;
      append_json_string(d, name && name->is_string() ? std::string_view(name->get_string()) : std::string_view());
      d += R"(,"input":{}}})";
      event(out, "content_block_start", d);
    }
    // (Fragments of a call whose block was stopped, when an upstream interleaves calls,
    // still name that block's index.)
    if (args && args->is_string() && !args->get_string().empty()) {
      std::string d = R"({"type":"content_block_delta","index":)";
      d += std::to_string(it->second);
      d += R"(,"delta":{"type":"input_json_delta","partial_json":)";
      append_json_string(d, args->get_string());
      d += "}}";
      event(out, "content_block_delta", d);
    }
  }

  void end(std::string& out) {
    if (ended_) return;
    start(out);
    ended_ = true;
    if (next_block_ == 0) text_delta(out, {});  // an empty answer still has its text block
    stop_block(out);
    std::string d = R"({"type":"message_delta","delta":{"stop_reason":")";
    d += stop_reason_for(inner_->finish_reason(), !tool_blocks_.empty());
    d += R"(","stop_sequence":null},"usage":{"output_tokens":)";
    const auto& u = inner_->usage();
    d += std::to_string(u.completion_tokens >= 0 ? u.completion_tokens : inner_->relayed_tokens());
    d += "}}";
    event(out, "message_delta", d);
    event(out, "message_stop", R"({"type":"message_stop"})");
  }

  // The inner translator's output: whole "data: ...\n\n" frames.
  void convert(std::string& out) {
    std::string_view rest = frames_;
    while (!rest.empty()) {
      const auto endf = rest.find("\n\n");
      std::string_view frame = rest.substr(0, endf);
      rest = endf == std::string_view::npos ? std::string_view{} : rest.substr(endf + 2);
      if (!frame.starts_with("data: ") || ended_) continue;
      frame.remove_prefix(6);
      if (frame == "[DONE]") {
        end(out);
        continue;
      }
      boost::system::error_code ec;
      json::value v = detail::parse_json(frame, ec);
      if (ec || !v.is_object()) continue;
      const auto& o = v.get_object();
      if (const auto* e = o.if_contains("error")) {
        std::string message = "upstream failed";
        if (const auto* m = e->is_object() ? e->get_object().if_contains("message") : nullptr; m && m->is_string()) {
          message = m->get_string();
        }
        event(out, "error", error_json(502, message));
        ended_ = true;
        continue;
      }
      const auto* ch = o.if_contains("choices");
      if (!ch || !ch->is_array() || ch->get_array().empty()) continue;  // the usage chunk
      const auto* c0 = ch->get_array()[0].if_object();
      const auto* delta = c0 ? c0->if_contains("delta") : nullptr;
      const auto* d = delta ? delta->if_object() : nullptr;
      if (!d) continue;
      const auto* text = d->if_contains("content");
      if (text && text->is_string() && !text->get_string().empty()) text_delta(out, text->get_string());
      if (const auto* tc = d->if_contains("tool_calls"); tc && tc->is_array()) {
        for (const auto& call : tc->get_array()) {
          if (const auto* co = call.if_object()) tool_fragment(out, *co);
        }
      }
    }
  }

  std::unique_ptr<StreamTranslator> inner_;
  std::string model_, id_;
  std::int64_t input_;
  std::string frames_;
  bool started_ = false, ended_ = false;
  std::int64_t next_block_ = 0;   // index of the next content block
  std::int64_t open_ = -1;        // the open block's index, -1: none
  std::int64_t open_tool_ = -1;   // the open block's tool call index (-1: a text block)
  std::map<std::int64_t, std::int64_t> tool_blocks_;  // tool call index -> block index
};

}  // namespace

std::unique_ptr<StreamTranslator> make_anthropic_output(std::unique_ptr<StreamTranslator> inner, std::string model,
                                                        std::string id, std::int64_t input_tokens) {
  return std::make_unique<AnthropicOutput>(std::move(inner), std::move(model), std::move(id), input_tokens);
}

}  // namespace sluice::llm

// ---- Anthropic as an upstream -------------------------------------------------------------

namespace sluice::llm {

namespace {

// Text of a chat message's content: a string, or the text of its parts.
std::string chat_text(const json::value* v) {
  if (!v) return {};
  if (v->is_string()) return std::string(v->get_string());
  std::string out;
  if (v->is_array()) {
    for (const auto& part : v->get_array()) {
      const auto* o = part.if_object();
      const auto* t = o ? o->if_contains("text") : nullptr;
      if (t && t->is_string()) {
        if (!out.empty()) out += '\n';
        out += t->get_string();
      }
    }
  }
  return out;
}

std::string_view finish_from_stop(std::string_view stop) {
  if (stop == "max_tokens") return "length";
  if (stop == "tool_use") return "tool_calls";
  return "stop";  // end_turn, stop_sequence, pause_turn...
}

class AnthropicUpstreamStream final : public StreamTranslator {
 public:
  AnthropicUpstreamStream(const ChatRequest& req, std::string_view request_id)
      : include_usage_(req.include_usage), prompt_estimate_(req.prompt_tokens_estimate) {
    prefix_ = chunk_prefix(request_id, req.model);
  }

  bool feed(std::string_view bytes, std::string& out) override {
    if (failed_) return false;
    const bool ok = sse_.feed(bytes, [&](const SseEvent& e) { on_event(e, out); });
    if (!ok && !failed_) fail(out, Reason::upstream_bad_response, "upstream event exceeds the size limit");
    return !failed_;
  }

  bool finish(std::string& out) override {
    if (failed_) return true;  // already ended with an error frame
    (void)out;
    return done_;              // false: message_stop never came (truncated)
  }

 private:
  void fail(std::string& out, Reason r, std::string message) {
    failed_ = true;
    error_ = std::move(message);
    out += error_frame(r, error_);
  }

  void chunk(std::string& out, std::string_view content, std::string_view finish) {
    out += prefix_;
    out += R"({"index":0,"delta":{)";
    bool comma = false;
    if (!role_sent_) {
      out += R"("role":"assistant")";
      role_sent_ = comma = true;
    }
    if (!content.empty() || (comma && !finish.empty())) {
      if (comma) out += ',';
      out += R"("content":)";
      append_json_string(out, content);
    }
    out += R"(},"finish_reason":)";
    if (finish.empty()) out += "null";
    else append_json_string(out, finish);
    out += "}]}\n\n";
  }

  // A delta.tool_calls chunk: the first names the call (id, type, function.name), the
  // others carry pieces of its arguments.
  void tool_chunk(std::string& out, std::int64_t index, std::string_view id, std::string_view name,
                  std::string_view args, bool first) {
    out += prefix_;
    out += R"({"index":0,"delta":{)";
    if (!role_sent_) {
      out += R"("role":"assistant",)";
      role_sent_ = true;
    }
    out += R"("tool_calls":[{"index":)";
    out += std::to_string(index);
    if (first) {
      out += R"(,"id":)";
      append_json_string(out, id);
      out += R"(,"type":"function","function":{"name":)";
      append_json_string(out, name);
      out += R"(,"arguments":)";
    } else {
      out += R"(,"function":{"arguments":)";
    }
    append_json_string(out, args);
    out += R"(}}]},"finish_reason":null}]})";
    out += "\n\n";
  }

  void on_event(const SseEvent& e, std::string& out) {
    if (failed_ || done_ || e.data.empty()) return;
    boost::system::error_code ec;
    json::value v = detail::parse_json(e.data, ec);
    if (ec || !v.is_object()) {
      fail(out, Reason::upstream_bad_response, "upstream sent an event that is not a JSON object");
      return;
    }
    const auto& o = v.get_object();
    std::string_view type = e.event;
    if (const auto* t = o.if_contains("type"); t && t->is_string()) type = t->get_string();
    auto int_at = [](const json::value* x) -> std::int64_t { return x && x->is_int64() ? usage_count(x->get_int64()) : -1; };
    auto index_at = [](const json::value* x) -> std::int64_t { return x && x->is_int64() ? x->get_int64() : -1; };
    if (type == "message_start") {
      if (const auto* m = o.if_contains("message"); m && m->is_object()) {
        if (const auto* u = m->get_object().if_contains("usage"); u && u->is_object()) {
          usage_.prompt_tokens = int_at(u->get_object().if_contains("input_tokens"));
        }
      }
    } else if (type == "content_block_start") {
      const auto* b = o.if_contains("content_block");
      const auto* bo = b ? b->if_object() : nullptr;
      const auto* bt = bo ? bo->if_contains("type") : nullptr;
      if (bt && bt->is_string() && bt->get_string() == "tool_use") {
        const std::int64_t tool = static_cast<std::int64_t>(tool_index_.size());
        tool_index_[index_at(o.if_contains("index"))] = tool;
        const auto* id = bo->if_contains("id");
        const auto* name = bo->if_contains("name");
        const auto* input = bo->if_contains("input");
        std::string args;  // normally {} here, the input following in input_json_delta
        if (input && input->is_object() && !input->get_object().empty()) args = json::serialize(*input);
        tool_chunk(out, tool, id && id->is_string() ? std::string_view(id->get_string()) : std::string_view(),
                   name && name->is_string() ? std::string_view(name->get_string()) : std::string_view(), args, true);
        if (name && name->is_string()) relayed(name->get_string());
        relayed(args);
        ++content_chunks_;
      }
    } else if (type == "content_block_delta") {
      const auto* d = o.if_contains("delta");
      const auto* dobj = d ? d->if_object() : nullptr;
      const auto* t = dobj ? dobj->if_contains("text") : nullptr;
      const auto* pj = dobj ? dobj->if_contains("partial_json") : nullptr;
      if (t && t->is_string() && !t->get_string().empty()) {
        chunk(out, t->get_string(), {});
        relayed(t->get_string());
        ++content_chunks_;
      } else if (pj && pj->is_string() && !pj->get_string().empty()) {
        const auto it = tool_index_.find(index_at(o.if_contains("index")));
        if (it != tool_index_.end()) {
          tool_chunk(out, it->second, {}, {}, pj->get_string(), false);
          relayed(pj->get_string());
          ++content_chunks_;
        }
      }
    } else if (type == "message_delta") {
      if (const auto* d = o.if_contains("delta"); d && d->is_object()) {
        if (const auto* s = d->get_object().if_contains("stop_reason"); s && s->is_string()) stop_ = s->get_string();
      }
      if (const auto* u = o.if_contains("usage"); u && u->is_object()) {
        usage_.completion_tokens = int_at(u->get_object().if_contains("output_tokens"));
      }
    } else if (type == "message_stop") {
      done_ = true;
      finish_reason_ = finish_from_stop(stop_);
      if (!tool_index_.empty() && finish_reason_ == "stop") finish_reason_ = "tool_calls";
      chunk(out, {}, finish_reason_);
      append_stream_end(out, prefix_, include_usage_,
                        usage_.prompt_tokens >= 0 ? usage_.prompt_tokens : prompt_estimate_,
                        usage_.completion_tokens >= 0 ? usage_.completion_tokens : relayed_tokens());
    } else if (type == "error") {
      std::string message = "upstream error";
      if (const auto* er = o.if_contains("error"); er && er->is_object()) {
        if (const auto* m = er->get_object().if_contains("message"); m && m->is_string()) message = m->get_string();
      }
      fail(out, Reason::upstream_stream_failed, std::move(message));
    }
    // ping, content_block_stop, other blocks' starts: nothing to relay
  }

  bool include_usage_;
  std::int64_t prompt_estimate_;
  std::string prefix_;
  std::string stop_;
  std::map<std::int64_t, std::int64_t> tool_index_;  // content block index -> tool call index
  bool role_sent_ = false;
  bool failed_ = false;
  SseParser sse_;
};

// Chat tools (type function) -> Messages tools; tool_choice and parallel_tool_calls ->
// tool_choice. Tools of other types are left out (the Messages API has no equivalent).
void add_anthropic_tools(const json::object& body, json::object& out) {
  json::array tools;
  if (const auto* tv = body.if_contains("tools"); tv && tv->is_array()) {
    for (const auto& t : tv->get_array()) {
      const auto* o = t.if_object();
      const auto* type = o ? o->if_contains("type") : nullptr;
      if (!type || !type->is_string() || type->get_string() != "function") continue;
      const auto* fn = o->if_contains("function");
      const auto* fo = fn ? fn->if_object() : nullptr;
      const auto* name = fo ? fo->if_contains("name") : nullptr;
      if (!name || !name->is_string()) continue;
      json::object a{{"name", *name}};
      if (const auto* d = fo->if_contains("description"); d && d->is_string()) a["description"] = *d;
      const auto* params = fo->if_contains("parameters");
      a["input_schema"] = params && params->is_object() ? *params : json::value(json::object{{"type", "object"}});
      tools.push_back(std::move(a));
    }
  }
  if (tools.empty()) return;  // (a tool_choice without tools means nothing)
  out["tools"] = std::move(tools);
  json::object choice;
  if (const auto* tc = body.if_contains("tool_choice"); tc && !tc->is_null()) {
    if (tc->is_string()) {
      const json::string_view c = tc->get_string();
      choice["type"] = c == "required" ? "any" : c == "none" ? "none" : "auto";
    } else if (const auto* o = tc->if_object()) {
      const auto* fn = o->if_contains("function");
      const auto* name = fn && fn->is_object() ? fn->get_object().if_contains("name") : nullptr;
      if (name && name->is_string()) {
        choice["type"] = "tool";
        choice["name"] = *name;
      } else {
        choice["type"] = "auto";
      }
    }
  }
  if (const auto* p = body.if_contains("parallel_tool_calls"); p && p->is_bool() && !p->get_bool()) {
    if (choice.empty()) choice["type"] = "auto";
    if (choice.at("type") != "none") choice["disable_parallel_tool_use"] = true;
  }
  if (!choice.empty()) out["tool_choice"] = std::move(choice);
}

}  // namespace

UpstreamCall build_anthropic_call(const ChatRequest& req, const config::Backend& backend) {
  UpstreamCall call;
  const std::string_view prefix = backend.path_prefix;
  call.target = std::string(prefix);
  call.target += prefix.ends_with("/v1") ? "/messages" : "/v1/messages";
  std::string system;
  // Turns as block arrays while they are built; a turn of text only is sent as a string.
  json::array messages;
  auto add = [&](std::string_view as, json::object block) {
    if (messages.empty() || messages.back().as_object().at("role").as_string() != as) {
      messages.push_back(json::object{{"role", as}, {"content", json::array{}}});
    }
    auto& blocks = messages.back().as_object()["content"].as_array();
    // Consecutive text of one role is joined (as before tool calls were translated).
    if (block.at("type") == "text" && !blocks.empty() && blocks.back().as_object().at("type") == "text") {
      auto& prev = blocks.back().as_object()["text"].as_string();
      prev.append("\n\n");
      prev.append(block.at("text").as_string());
      return;
    }
    blocks.push_back(std::move(block));
  };
  if (const auto* ms = req.body.if_contains("messages"); ms && ms->is_array()) {
    for (const auto& mv : ms->get_array()) {
      const auto* m = mv.if_object();
      if (!m) continue;
      const auto* rv = m->if_contains("role");
      const std::string_view role = rv && rv->is_string() ? std::string_view(rv->get_string()) : "user";
      std::string text = chat_text(m->if_contains("content"));
      if (role == "system" || role == "developer") {
        if (!system.empty()) system += "\n\n";
        system += text;
        continue;
      }
      const auto* call_id = role == "tool" ? m->if_contains("tool_call_id") : nullptr;
      if (call_id && call_id->is_string() && !call_id->get_string().empty()) {
        json::object b{{"type", "tool_result"}, {"tool_use_id", *call_id}};
        if (!text.empty()) b["content"] = text;
        add("user", std::move(b));
        continue;
      }
      // (a tool message naming no call cannot be a tool_result: it stays text)
      if (role == "tool") text = "[tool result] " + text;
      std::string_view as = role == "assistant" ? "assistant" : "user";
      if (!text.empty()) add(as, json::object{{"type", "text"}, {"text", text}});
      // (the Messages API refuses empty turns: a turn with neither text nor calls is left out)
      const auto* calls = as == "assistant" ? m->if_contains("tool_calls") : nullptr;
      if (!calls || !calls->is_array()) continue;
      for (const auto& cv : calls->get_array()) {
        const auto* c = cv.if_object();
        const auto* fn = c ? c->if_contains("function") : nullptr;
        const auto* fo = fn ? fn->if_object() : nullptr;
        if (!fo) continue;
        const auto* id = c->if_contains("id");
        const auto* name = fo->if_contains("name");
        add("assistant", json::object{{"type", "tool_use"},
                                      {"id", id && id->is_string() ? json::value(*id) : json::value("")},
                                      {"name", name && name->is_string() ? json::value(*name) : json::value("")},
                                      {"input", arguments_object(fo->if_contains("arguments"))}});
      }
    }
  }
  for (auto& mv : messages) {
    auto& content = mv.as_object()["content"];
    const auto& blocks = content.as_array();
    if (blocks.size() == 1 && blocks[0].as_object().at("type") == "text") {
      json::value text = blocks[0].as_object().at("text");
      content = std::move(text);
    }
  }
  json::object out;
  out["model"] = backend.model.empty() ? req.model : backend.model;
  if (!system.empty()) out["system"] = system;
  out["messages"] = std::move(messages);
  out["max_tokens"] = req.max_tokens.value_or(kAnthropicDefaultMaxTokens);
  if (req.stream) out["stream"] = true;
  if (const auto* t = req.body.if_contains("temperature"); t && t->is_number()) {
    out["temperature"] = std::min(t->to_number<double>(), 1.0);
  }
  if (const auto* t = req.body.if_contains("top_p"); t && t->is_number()) out["top_p"] = *t;
  if (const auto* st = req.body.if_contains("stop"); st && !st->is_null()) {
    if (st->is_string()) out["stop_sequences"] = json::array{*st};
    else if (st->is_array() && !st->get_array().empty()) out["stop_sequences"] = *st;
  }
  if (const auto* u = req.body.if_contains("user"); u && u->is_string()) {
    out["metadata"] = json::object{{"user_id", *u}};
  }
  add_anthropic_tools(req.body, out);
  call.body = json::serialize(out);
  return call;
}

std::optional<Completion> translate_anthropic_completion(std::string_view upstream_body, const ChatRequest& req,
                                                         std::string_view request_id) {
  boost::system::error_code ec;
  json::value v = detail::parse_json(upstream_body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const auto& o = v.get_object();
  const auto* content = o.if_contains("content");
  if (!content || !content->is_array()) return std::nullopt;
  std::string text;
  json::array tool_calls;
  for (const auto& b : content->get_array()) {
    const auto* bo = b.if_object();
    if (!bo) continue;
    const auto* type = bo->if_contains("type");
    if (type && type->is_string() && type->get_string() == "tool_use") {
      const auto* id = bo->if_contains("id");
      const auto* name = bo->if_contains("name");
      const auto* input = bo->if_contains("input");
      tool_calls.push_back(json::object{
          {"id", id && id->is_string() ? json::value(*id) : json::value("")},
          {"type", "function"},
          {"function", json::object{{"name", name && name->is_string() ? json::value(*name) : json::value("")},
                                    {"arguments", input && input->is_object() ? json::serialize(*input) : "{}"}}}});
      continue;
    }
    const auto* t = bo->if_contains("text");
    if (t && t->is_string()) text += t->get_string();
  }
  Completion c;
  std::string_view stop;
  if (const auto* s = o.if_contains("stop_reason"); s && s->is_string()) stop = s->get_string();
  c.finish_reason = finish_from_stop(stop);
  if (!tool_calls.empty() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
  if (const auto* u = o.if_contains("usage"); u && u->is_object()) {
    const auto& uo = u->get_object();
    if (const auto* i = uo.if_contains("input_tokens"); i && i->is_int64()) c.usage.prompt_tokens = usage_count(i->get_int64());
    if (const auto* x = uo.if_contains("output_tokens"); x && x->is_int64()) c.usage.completion_tokens = usage_count(x->get_int64());
  }
  std::string& out = c.body;
  out.clear();
  append_completion_head(out, request_id, req.model);
  out += R"({"index":0,"message":{"role":"assistant","content":)";
  if (text.empty() && !tool_calls.empty()) out += "null";
  else append_json_string(out, text);
  if (!tool_calls.empty()) {
    out += R"(,"tool_calls":)";
    out += json::serialize(tool_calls);
  }
  out += R"(},"finish_reason":)";
  append_json_string(out, c.finish_reason);
  out += R"(}],"usage":)";
  append_usage(out, std::max<std::int64_t>(c.usage.prompt_tokens, 0), std::max<std::int64_t>(c.usage.completion_tokens, 0));
  out += '}';
  return c;
}

std::string chat_error_from_anthropic(std::string_view anthropic_error_body) {
  std::string type = "upstream_error", message = "upstream error";
  boost::system::error_code ec;
  json::value v = detail::parse_json(anthropic_error_body, ec);
  if (!ec && v.is_object()) {
    if (const auto* e = v.get_object().if_contains("error"); e && e->is_object()) {
      const auto& eo = e->get_object();
      if (const auto* t = eo.if_contains("type"); t && t->is_string()) type = t->get_string();
      if (const auto* m = eo.if_contains("message"); m && m->is_string()) message = m->get_string();
    }
  }
  std::string o = R"({"error":{"message":)";
  append_json_string(o, message);
  o += R"(,"type":)";
  append_json_string(o, type);
  o += R"(,"code":null,"param":null}})";
  return o;
}

std::unique_ptr<StreamTranslator> make_anthropic_stream(const ChatRequest& req, std::string_view request_id) {
  return std::make_unique<AnthropicUpstreamStream>(req, request_id);
}

}  // namespace sluice::llm
