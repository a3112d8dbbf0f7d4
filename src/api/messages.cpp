// The Anthropic Messages API as a client API (POST /v1/messages, /v1/messages/count_tokens):
// its codec, and the translation of its requests and answers to and from chat completions
// (docs/translation.md, "Anthropic clients").
#include "api/messages.hpp"

#include <boost/json.hpp>
#include <ctime>
#include <map>

#include "api/codec.hpp"
#include "api/reencode.hpp"
#include "common/text.hpp"
#include "llm/framing.hpp"
#include "llm/json_parse.hpp"

namespace sluice::api {

using namespace llm;

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
              b["input"] = detail::arguments_object(fo->if_contains("arguments"));
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

class AnthropicOutput final : public ChunkReencoder {
 public:
  AnthropicOutput(std::unique_ptr<StreamTranslator> inner, std::string model, std::string id, std::int64_t input)
      : ChunkReencoder(std::move(inner)), model_(std::move(model)), id_(std::move(id)), input_(input) {}

 private:
  void on_text(std::string& out, std::string_view text) override { text_delta(out, text); }
  void on_error(std::string& out, std::string_view message) override { event(out, "error", error_json(502, message)); }
  void on_end(std::string& out) override { end(out); }

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

  // The first fragment of a call (a new index) starts a tool_use block, every arguments
  // piece is an input_json_delta.
  void on_tool(std::string& out, const ToolFragment& f) override {
    start(out);
    auto it = tool_blocks_.find(f.index);
    if (it == tool_blocks_.end()) {
      stop_block(out);
      open_ = next_block_++;
      open_tool_ = f.index;
      it = tool_blocks_.emplace(f.index, open_).first;
      std::string d = R"({"type":"content_block_start","index":)";
      d += std::to_string(open_);
      d += R"(,"content_block":{"type":"tool_use","id":)";
      if (!f.id.empty()) append_json_string(d, f.id);
      else append_json_string(d, "toolu_" + id_ + "_" + std::to_string(f.index));
      d += R"(,"name":)";
      append_json_string(d, f.name);
      d += R"(,"input":{}}})";
      event(out, "content_block_start", d);
    }
    // (Fragments of a call whose block was stopped, when an upstream interleaves calls,
    // still name that block's index.)
    if (!f.arguments.empty()) {
      std::string d = R"({"type":"content_block_delta","index":)";
      d += std::to_string(it->second);
      d += R"(,"delta":{"type":"input_json_delta","partial_json":)";
      append_json_string(d, f.arguments);
      d += "}}";
      event(out, "content_block_delta", d);
    }
  }

  void end(std::string& out) {
    start(out);
    if (next_block_ == 0) text_delta(out, {});  // an empty answer still has its text block
    stop_block(out);
    std::string d = R"({"type":"message_delta","delta":{"stop_reason":")";
    d += stop_reason_for(inner().finish_reason(), !tool_blocks_.empty());
    d += R"(","stop_sequence":null},"usage":{)";
    const auto& u = inner().usage();
    // message_start could only carry the gateway's estimate of the prompt: the upstream's
    // count, known now, corrects it (the SDKs take input_tokens from message_delta).
    if (u.prompt_tokens >= 0) {
      d += R"("input_tokens":)";
      d += std::to_string(u.prompt_tokens);
      d += ',';
    }
    d += R"("output_tokens":)";
    d += std::to_string(u.completion_tokens >= 0 ? u.completion_tokens : inner().relayed_tokens());
    d += "}}";
    event(out, "message_delta", d);
    event(out, "message_stop", R"({"type":"message_stop"})");
  }

  std::string model_, id_;
  std::int64_t input_;
  bool started_ = false;
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

namespace {

class Messages final : public Codec {
 public:
  std::string_view name() const override { return "messages"; }

  llm::ParseResult decode(std::string_view body, Op op, const config::Config& cfg) const override {
    auto conv = anthropic_to_chat(body, op == Op::count_tokens);
    if (auto* err = std::get_if<RequestError>(&conv)) return std::move(*err);
    return llm::parse_chat_request(std::get<std::string>(conv), cfg);
  }

  std::string answer(llm::Completion& done, const llm::ChatRequest& req, std::string_view request_id) const override {
    return chat_to_anthropic(done, req.model, request_id);
  }

  std::unique_ptr<StreamTranslator> stream(std::unique_ptr<StreamTranslator> chunks, const llm::ChatRequest& req,
                                           std::string_view request_id) const override {
    return make_anthropic_output(std::move(chunks), req.model, std::string(request_id), req.prompt_tokens_estimate);
  }

  std::string error_body(Reason reason, std::string_view message, std::string_view) const override {
    return anthropic_error_body(reason, message);
  }

  std::string error_event(Reason reason, std::string_view message) const override {
    return anthropic_error_event(reason, message);
  }

  std::string upstream_error(int status, std::string chat_error_body) const override {
    return anthropic_error_from_chat(status, chat_error_body);
  }

  // Anthropic's Models API: {"type":"model","id","display_name","created_at"}, listed with
  // has_more, first_id and last_id.
  void model(std::string& out, const ModelEntry& m) const override {
    out += R"({"type":"model","id":)";
    append_json_string(out, m.id);
    out += R"(,"display_name":)";
    append_json_string(out, m.id);
    out += R"(,"created_at":"1970-01-01T00:00:00Z"})";
  }

  void model_list(std::string& out, std::span<const ModelEntry> models) const override {
    out += R"({"data":[)";
    for (std::size_t i = 0; i < models.size(); ++i) {
      if (i) out += ',';
      model(out, models[i]);
    }
    out += R"(],"has_more":false,"first_id":)";
    if (models.empty()) out += "null";
    else append_json_string(out, models.front().id);
    out += R"(,"last_id":)";
    if (models.empty()) out += "null";
    else append_json_string(out, models.back().id);
    out += '}';
  }
};

}  // namespace

const Codec& anthropic_messages() noexcept {
  static const Messages codec;
  return codec;
}

}  // namespace sluice::api
