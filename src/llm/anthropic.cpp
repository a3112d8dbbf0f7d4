// Anthropic as an upstream (provider: anthropic): a chat request as a Messages call, and
// the Messages answer or event stream back as chat completions (docs/translation.md).
#include "llm/anthropic.hpp"

#include <boost/json.hpp>
#include <ctime>
#include <map>

#include "common/text.hpp"
#include "llm/framing.hpp"
#include "llm/json_parse.hpp"

namespace json = boost::json;

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
    out += '}';
    out += chunk_close(include_usage_);
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
    out += R"(}}]},"finish_reason":null})";
    out += chunk_close(include_usage_);
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
                                      {"input", detail::arguments_object(fo->if_contains("arguments"))}});
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
  out += R"({"index":0,"message":{"role":"assistant","refusal":null,"content":)";
  if (text.empty() && !tool_calls.empty()) out += "null";
  else append_json_string(out, text);
  if (!tool_calls.empty()) {
    out += R"(,"tool_calls":)";
    out += json::serialize(tool_calls);
  }
  out += R"(},"logprobs":null,"finish_reason":)";
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
