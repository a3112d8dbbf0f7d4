#include "sim/wire.hpp"

#include "common/text.hpp"
#include "sim/responses.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace sluice::sim {

namespace json = boost::json;

namespace {

// A copy that owns its memory (the request is parsed into a scratch buffer).
json::value owned(const json::value& v) { return json::value(v, json::storage_ptr()); }

}  // namespace

std::size_t content_bytes(const json::value& c) {
  if (c.is_string()) return c.get_string().size();
  std::size_t n = 0;
  if (c.is_array()) {
    for (const auto& part : c.get_array()) {
      if (part.is_string()) {
        n += part.get_string().size();
      } else if (part.is_object()) {
        if (auto* t = part.get_object().if_contains("text"); t && t->is_string())
          n += t->get_string().size();
      }
    }
  }
  return n;
}

std::string content_text(const json::value& c, std::string_view text_type) {
  if (c.is_string()) return std::string(c.get_string());
  std::string s;
  if (c.is_array()) {
    for (const auto& part : c.get_array()) {
      if (part.is_string()) {
        s += part.get_string();
      } else if (part.is_object()) {
        const auto& po = part.get_object();
        const auto* type = po.if_contains("type");
        if (type && type->is_string() && type->get_string() != text_type) continue;
        if (auto* t = po.if_contains("text"); t && t->is_string()) s += t->get_string();
      }
    }
  }
  return s;
}

bool get_int(const json::value& v, std::int64_t& out) {
  if (v.is_int64()) {
    out = v.get_int64();
    return true;
  }
  if (v.is_uint64()) {
    out = v.get_uint64() > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX
                                                                  : static_cast<std::int64_t>(v.get_uint64());
    return true;
  }
  if (v.is_double() && std::isfinite(v.get_double()) && std::abs(v.get_double()) < 9e18 &&
      v.get_double() == static_cast<double>(static_cast<std::int64_t>(v.get_double()))) {
    out = static_cast<std::int64_t>(v.get_double());
    return true;
  }
  return false;
}

bool read_model(const json::object& body, std::string& model, std::string& error) {
  const json::value* m = body.if_contains("model");
  if (!m || !m->is_string() || m->get_string().empty()) {
    error = "'model' must be a non-empty string";
    return false;
  }
  model = std::string(m->get_string());
  return true;
}

bool set_format(GenRequest& r, std::string_view type, const json::value* schema) {
  if (type == "json_object") {
    r.format = Format::json_object;
  } else if (type == "json_schema") {
    r.format = Format::json_schema;
    if (schema && (schema->is_object() || schema->is_bool())) r.schema = owned(*schema);
    else r.format = Format::json_object;  // no schema: any object
  } else if (type != "text") {
    return false;
  }
  return true;
}

std::optional<json::value> parse_body(std::string_view body, std::string& error, json::storage_ptr sp) {
  json::error_code ec;
  json::value v = json::parse(body, ec, std::move(sp));
  if (ec) {
    error = "request body is not valid JSON";
    return std::nullopt;
  }
  if (!v.is_object()) {
    error = "request body must be a JSON object";
    return std::nullopt;
  }
  return v;
}

bool keep_alive_zero(const json::value* v) {
  if (!v) return false;
  if (v->is_int64()) return v->get_int64() == 0;
  if (v->is_uint64()) return v->get_uint64() == 0;
  if (v->is_double()) return v->get_double() == 0;
  if (v->is_string()) {
    // A Go duration ("0", "0s", "0ms", "0.0m"...): zero when every digit is 0.
    const std::string_view s = v->get_string();
    const auto digits = s.find_first_not_of("0123456789.");
    const std::string_view number = s.substr(0, digits);
    const std::string_view unit = digits == std::string_view::npos ? std::string_view{} : s.substr(digits);
    static constexpr std::string_view kUnits[] = {"", "ns", "us", "\u00b5s", "ms", "s", "m", "h"};
    return !number.empty() && number.find_first_not_of("0.") == std::string_view::npos &&
           number.find_first_of('0') != std::string_view::npos &&
           std::find(std::begin(kUnits), std::end(kUnits), unit) != std::end(kUnits);
  }
  return false;
}

bool read_load_options(const json::object& options, LoadOptions& o, std::string& error) {
  struct Field {
    const char* name;
    std::int64_t LoadOptions::*member;
    std::int64_t min, max;
  };
  for (const Field f : {Field{"num_ctx", &LoadOptions::num_ctx, 1, 1 << 24}, Field{"num_gpu", &LoadOptions::num_gpu, -1, 1 << 20},
                        Field{"num_batch", &LoadOptions::num_batch, 1, 1 << 20}}) {
    const json::value* v = options.if_contains(f.name);
    if (!v || v->is_null()) continue;
    std::int64_t n = 0;
    if (!get_int(*v, n) || n < f.min || n > f.max) {
      error = std::string("'options.") + f.name + "' must be an integer from " + std::to_string(f.min) + " to " +
              std::to_string(f.max);
      return false;
    }
    o.*f.member = n;
  }
  return true;
}

std::optional<GenRequest> parse_request(Api api, std::string_view body, std::string& error) {
  if (api == Api::responses) return parse_responses_request(body, error);
  // Small bodies parse into this buffer without a heap allocation.
  unsigned char scratch[4096];
  json::monotonic_resource mr(scratch, sizeof scratch);
  std::optional<json::value> v = parse_body(body, error, &mr);
  if (!v) return std::nullopt;
  const json::object& o = v->get_object();
  GenRequest r;
  r.api = api;
  r.stream = api == Api::ollama;

  if (!read_model(o, r.model, error)) return std::nullopt;

  const json::value* messages = o.if_contains("messages");
  if (!messages || !messages->is_array()) {
    error = "'messages' must be an array";
    return std::nullopt;
  }
  std::size_t bytes = 0;
  const json::object* last_user = nullptr;
  for (const auto& m : messages->get_array()) {
    if (!m.is_object()) {
      error = "each message must be an object";
      return std::nullopt;
    }
    const json::object& mo = m.get_object();
    if (auto* c = mo.if_contains("content")) bytes += content_bytes(*c);
    if (auto* role = mo.if_contains("role"); role && role->is_string() && role->get_string() == "user")
      last_user = &mo;
  }
  if (!messages->get_array().empty()) {
    const json::object& last = messages->get_array().back().get_object();
    const json::value* role = last.if_contains("role");
    const std::string_view rs = role && role->is_string() ? std::string_view(role->get_string()) : "";
    if (api == Api::anthropic) {
      // A user message carrying tool_result blocks.
      const json::value* c = last.if_contains("content");
      if (rs == "user" && c && c->is_array()) {
        for (const auto& b : c->get_array()) {
          if (!b.is_object()) continue;
          const json::value* t = b.get_object().if_contains("type");
          if (t && t->is_string() && t->get_string() == "tool_result") r.last_is_tool_result = true;
        }
      }
    } else {
      r.last_is_tool_result = rs == "tool" || rs == "function";
    }
  }
  if (api == Api::anthropic) {
    if (auto* sys = o.if_contains("system")) bytes += content_bytes(*sys);
  }
  r.prompt_tokens = std::max<std::int64_t>(1, static_cast<std::int64_t>(bytes / 4));

  if (auto* s = o.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool()) {
      error = "'stream' must be a boolean";
      return std::nullopt;
    }
    r.stream = s->get_bool();
  }

  auto read_limit = [&](const char* name, const json::value* lv, bool positive) {
    if (!lv || lv->is_null()) return true;
    std::int64_t n = 0;
    if (!get_int(*lv, n) || (positive && n < 1)) {
      error = std::string("'") + name + "' must be an integer" + (positive ? " >= 1" : "");
      return false;
    }
    r.max_tokens = n;
    return true;
  };

  auto read_seed = [&](const char* name, const json::value* sv) {
    if (!sv || sv->is_null()) return true;
    if (sv->is_int64()) r.seed = static_cast<std::uint64_t>(sv->get_int64());
    else if (sv->is_uint64()) r.seed = sv->get_uint64();
    else {
      error = std::string("'") + name + "' must be an integer";
      return false;
    }
    return true;
  };
  // A string or an array of strings.
  auto read_stop = [&](const char* name, const json::value* sv, bool string_ok) {
    if (!sv || sv->is_null()) return true;
    if (string_ok && sv->is_string()) {
      if (!sv->get_string().empty()) r.stop.emplace_back(sv->get_string());
      return true;
    }
    if (sv->is_array()) {
      for (const auto& e : sv->get_array()) {
        if (!e.is_string()) {
          error = std::string("'") + name + "' must be " + (string_ok ? "a string or " : "") + "an array of strings";
          return false;
        }
        if (!e.get_string().empty()) r.stop.emplace_back(e.get_string());
      }
      return true;
    }
    error = std::string("'") + name + "' must be " + (string_ok ? "a string or " : "") + "an array of strings";
    return false;
  };
  // OpenAI and Ollama function tools: [{"type":"function","function":{"name","parameters"}}].
  auto read_function_tools = [&](const json::value* tv) {
    if (!tv || !tv->is_array()) return;
    for (const auto& t : tv->get_array()) {
      if (!t.is_object()) continue;
      const json::object& to = t.get_object();
      const json::value* type = to.if_contains("type");
      if (type && !(type->is_string() && type->get_string() == "function")) continue;
      const json::value* fn = to.if_contains("function");
      if (!fn || !fn->is_object()) continue;
      const json::value* name = fn->get_object().if_contains("name");
      if (!name || !name->is_string()) continue;
      GenRequest::Tool tool;
      tool.name = std::string(name->get_string());
      if (const json::value* p = fn->get_object().if_contains("parameters"); p && p->is_object())
        tool.parameters = owned(*p);
      r.tools.push_back(std::move(tool));
    }
  };

  switch (api) {
    case Api::openai: {
      if (auto* so = o.if_contains("stream_options"); so && so->is_object()) {
        if (auto* iu = so->get_object().if_contains("include_usage"); iu && iu->is_bool())
          r.include_usage = iu->get_bool();
      }
      if (!read_limit("max_tokens", o.if_contains("max_tokens"), true)) return std::nullopt;
      if (!read_limit("max_completion_tokens", o.if_contains("max_completion_tokens"), true))
        return std::nullopt;
      if (!read_seed("seed", o.if_contains("seed"))) return std::nullopt;
      if (!read_stop("stop", o.if_contains("stop"), true)) return std::nullopt;
      if (auto* rf = o.if_contains("response_format"); rf && !rf->is_null()) {
        const json::value* type = rf->is_object() ? rf->get_object().if_contains("type") : nullptr;
        const std::string_view t = type && type->is_string() ? std::string_view(type->get_string()) : "";
        const json::value* js = rf->is_object() ? rf->get_object().if_contains("json_schema") : nullptr;
        if (!set_format(r, t, js && js->is_object() ? js->get_object().if_contains("schema") : nullptr)) {
          error = "'response_format.type' must be text, json_object or json_schema";
          return std::nullopt;
        }
      }
      read_function_tools(o.if_contains("tools"));
      if (auto* tc = o.if_contains("tool_choice"); tc && !tc->is_null()) {
        if (tc->is_string()) {
          if (tc->get_string() == "none") r.tool_choice = ToolChoice::none;
          else if (tc->get_string() == "required") r.tool_choice = ToolChoice::required;
        } else if (tc->is_object()) {
          const json::value* fn = tc->get_object().if_contains("function");
          const json::value* name = fn && fn->is_object() ? fn->get_object().if_contains("name") : nullptr;
          if (name && name->is_string()) {
            r.tool_choice = ToolChoice::named;
            r.tool_choice_name = std::string(name->get_string());
          }
        }
      }
      if (auto* lp = o.if_contains("logprobs"); lp && !lp->is_null()) {
        if (!lp->is_bool()) {
          error = "'logprobs' must be a boolean";
          return std::nullopt;
        }
        r.logprobs = lp->get_bool();
      }
      if (auto* tl = o.if_contains("top_logprobs"); tl && !tl->is_null()) {
        std::int64_t k = 0;
        if (!get_int(*tl, k) || k < 0 || k > 20) {
          error = "'top_logprobs' must be an integer from 0 to 20";
          return std::nullopt;
        }
        r.top_logprobs = static_cast<int>(k);
      }
      break;
    }
    case Api::ollama: {
      if (auto* opts = o.if_contains("options"); opts && opts->is_object()) {
        const json::object& oo = opts->get_object();
        if (!read_limit("options.num_predict", oo.if_contains("num_predict"), false))
          return std::nullopt;
        if (r.max_tokens && *r.max_tokens < 0) r.max_tokens.reset();  // -1: no limit
        if (!read_seed("options.seed", oo.if_contains("seed"))) return std::nullopt;
        if (!read_stop("options.stop", oo.if_contains("stop"), true)) return std::nullopt;
        if (!read_load_options(oo, r.load, error)) return std::nullopt;
      }
      r.unload_after = keep_alive_zero(o.if_contains("keep_alive"));
      if (auto* f = o.if_contains("format"); f && !f->is_null()) {
        if (f->is_string() && f->get_string() == "json") {
          r.format = Format::json_object;
        } else if (f->is_object()) {
          r.format = Format::json_schema;
          r.schema = owned(*f);
        }
      }
      read_function_tools(o.if_contains("tools"));
      break;
    }
    case Api::anthropic: {
      if (!read_limit("max_tokens", o.if_contains("max_tokens"), true)) return std::nullopt;
      if (!read_stop("stop_sequences", o.if_contains("stop_sequences"), false)) return std::nullopt;
      if (auto* tv = o.if_contains("tools"); tv && tv->is_array()) {
        for (const auto& t : tv->get_array()) {
          if (!t.is_object()) continue;
          const json::object& to = t.get_object();
          const json::value* type = to.if_contains("type");
          if (type && !(type->is_string() && type->get_string() == "custom")) continue;  // server tools
          const json::value* name = to.if_contains("name");
          if (!name || !name->is_string()) continue;
          GenRequest::Tool tool;
          tool.name = std::string(name->get_string());
          if (const json::value* p = to.if_contains("input_schema"); p && p->is_object()) tool.parameters = owned(*p);
          r.tools.push_back(std::move(tool));
        }
      }
      if (auto* tc = o.if_contains("tool_choice"); tc && tc->is_object()) {
        const json::value* type = tc->get_object().if_contains("type");
        const std::string_view t = type && type->is_string() ? std::string_view(type->get_string()) : "";
        if (t == "none") r.tool_choice = ToolChoice::none;
        else if (t == "any") r.tool_choice = ToolChoice::required;
        else if (t == "tool") {
          const json::value* name = tc->get_object().if_contains("name");
          if (name && name->is_string()) {
            r.tool_choice = ToolChoice::named;
            r.tool_choice_name = std::string(name->get_string());
          }
        }
      }
      break;
    }
    case Api::responses:
      break;  // parse_responses_request (above)
  }
  // Read only when a tool may be called by name.
  if (last_user && !r.tools.empty()) {
    if (auto* c = last_user->if_contains("content")) r.last_user_text = content_text(*c, "text");
  }
  return r;
}

std::string_view stream_content_type(Api api) {
  return api == Api::ollama ? "application/x-ndjson" : "text/event-stream";
}

std::string sse_event(std::string_view type, const json::object& data) {
  std::string s = "event: ";
  s += type;
  s += "\ndata: ";
  s += json::serialize(data);
  s += "\n\n";
  return s;
}

std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(ns % 1'000'000'000));
  return buf;
}

namespace {

std::string sse(std::string_view data) {
  std::string s = "data: ";
  s += data;
  s += "\n\n";
  return s;
}

void append_int(std::string& s, std::int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, end);
}

std::string_view openai_finish(Finish f) {
  switch (f) {
    case Finish::stop:
    case Finish::stop_sequence: return "stop";
    case Finish::length: return "length";
    case Finish::tool_calls: return "tool_calls";
  }
  return "stop";
}

std::string_view ollama_done_reason(Finish f) { return f == Finish::length ? "length" : "stop"; }

std::string_view anthropic_stop_reason(Finish f) {
  switch (f) {
    case Finish::stop: return "end_turn";
    case Finish::length: return "max_tokens";
    case Finish::stop_sequence: return "stop_sequence";
    case Finish::tool_calls: return "tool_use";
  }
  return "end_turn";
}

json::value anthropic_stop_sequence(const Answer& a) {
  if (a.finish == Finish::stop_sequence) return json::value(a.stop_sequence);
  return nullptr;
}

// A tool call's arguments as an object (Ollama, Anthropic): {} when they were cut short.
json::value arguments_object(const Answer& a) {
  if (a.finish != Finish::length) {
    json::error_code ec;
    json::value v = json::parse(a.content.text, ec);
    if (!ec && v.is_object()) return v;
  }
  return json::object{};
}

// A log probability in its shortest form ("-0.123"; Boost.JSON would write "-1.23E-1").
void append_double(std::string& s, double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, end);
}

void append_bytes(std::string& s, std::string_view t) {
  s += '[';
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (i) s += ',';
    append_int(s, static_cast<unsigned char>(t[i]));
  }
  s += ']';
}

// {"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}...]} of token `index`.
void append_logprob_entry(std::string& s, const Answer& a, std::int64_t index, std::string_view token, int k) {
  s += "{\"token\":";
  append_json_string(s, token);
  s += ",\"logprob\":";
  append_double(s, token_logprob(a.seed, index));
  s += ",\"bytes\":";
  append_bytes(s, token);
  s += ",\"top_logprobs\":[";
  bool first = true;
  for (const auto& alt : top_logprobs(a.seed, index, token, k)) {
    if (!first) s += ',';
    first = false;
    s += "{\"token\":";
    append_json_string(s, alt.token);
    s += ",\"logprob\":";
    append_double(s, alt.logprob);
    s += ",\"bytes\":";
    append_bytes(s, alt.token);
    s += '}';
  }
  s += "]}";
}

// A choice's "logprobs" for tokens [from, to): {"content":[entries],"refusal":null}.
std::string logprobs_json(const Answer& a, std::int64_t from, std::int64_t to, int k) {
  std::string s = "{\"content\":[";
  for (std::int64_t i = from; i < to; ++i) {
    if (i > from) s += ',';
    append_logprob_entry(s, a, i, a.token(i), k);
  }
  s += "],\"refusal\":null}";
  return s;
}

// `{"id":...,"object":...,"created":...,"model":...` of an OpenAI answer or chunk.
void append_openai_head(std::string& s, const ReplyInfo& r, std::string_view object) {
  s += "{\"id\":";
  append_json_string(s, r.id);
  s += ",\"object\":\"";
  s += object;
  s += "\",\"created\":";
  append_int(s, r.created);
  s += ",\"model\":";
  append_json_string(s, r.model);
}

json::object openai_chunk(const ReplyInfo& r, json::object delta, json::value finish) {
  json::object choice;
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = std::move(finish);
  json::object c;
  c["id"] = r.id;
  c["object"] = "chat.completion.chunk";
  c["created"] = r.created;
  c["model"] = r.model;
  c["choices"] = json::array{std::move(choice)};
  // With include_usage every chunk but the last (the usage chunk) carries usage: null.
  if (r.include_usage) c["usage"] = nullptr;
  return c;
}

json::object openai_usage(std::int64_t prompt, std::int64_t completion) {
  json::object u;
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = completion;
  u["total_tokens"] = prompt + completion;
  return u;
}

// The tool call of an OpenAI message (whole) or delta (index 0, arguments as given).
json::object openai_tool_call(const ToolCall& c, std::string_view arguments, bool delta) {
  json::object fn;
  fn["name"] = c.name;
  fn["arguments"] = arguments;
  json::object tc;
  if (delta) tc["index"] = 0;
  tc["id"] = c.id;
  tc["type"] = "function";
  tc["function"] = std::move(fn);
  return tc;
}

json::object ollama_message(std::string_view content) {
  json::object m;
  m["role"] = "assistant";
  m["content"] = content;
  return m;
}

json::object ollama_tool_message(const Answer& a) {
  json::object fn;
  fn["name"] = a.tool_call->name;
  fn["arguments"] = arguments_object(a);
  json::object call;
  call["function"] = std::move(fn);
  json::object m = ollama_message("");
  m["tool_calls"] = json::array{std::move(call)};
  return m;
}

json::object ollama_final(const ReplyInfo& r, json::object message, const Answer& a, const Timing& t) {
  json::object o;
  o["model"] = r.model;
  o["created_at"] = rfc3339_now();
  o["message"] = std::move(message);
  o["done"] = true;
  o["done_reason"] = ollama_done_reason(a.finish);
  o["total_duration"] = t.total_ns;
  o["load_duration"] = t.load_ns;
  o["prompt_eval_count"] = r.prompt_tokens;
  o["prompt_eval_duration"] = t.prompt_eval_ns;
  o["eval_count"] = a.tokens();
  o["eval_duration"] = t.eval_ns;
  return o;
}

std::string anthropic_head(const ReplyInfo& r, const Answer& a) {
  json::object usage;
  usage["input_tokens"] = r.prompt_tokens;
  usage["output_tokens"] = 1;
  json::object msg;
  msg["id"] = r.id;
  msg["type"] = "message";
  msg["role"] = "assistant";
  msg["model"] = r.model;
  msg["content"] = json::array{};
  msg["stop_reason"] = nullptr;
  msg["stop_sequence"] = nullptr;
  msg["usage"] = std::move(usage);
  json::object start;
  start["type"] = "message_start";
  start["message"] = std::move(msg);

  json::object block;
  if (a.tool_call) {
    block["type"] = "tool_use";
    block["id"] = a.tool_call->id;
    block["name"] = a.tool_call->name;
    block["input"] = json::object{};
  } else {
    block["type"] = "text";
    block["text"] = "";
  }
  json::object cbs;
  cbs["type"] = "content_block_start";
  cbs["index"] = 0;
  cbs["content_block"] = std::move(block);

  json::object ping;
  ping["type"] = "ping";

  return sse_event("message_start", start) + sse_event("content_block_start", cbs) +
         sse_event("ping", ping);
}

std::string openai_role_chunk(const ReplyInfo& r, std::string_view content) {
  json::object delta;
  delta["role"] = "assistant";
  delta["content"] = content;
  return sse(json::serialize(openai_chunk(r, std::move(delta), nullptr)));
}

std::string openai_stream_token(const ReplyInfo& r, const Answer& a, std::int64_t index) {
  if (a.tool_call) {
    json::object delta;
    if (index == 0) {
      delta["role"] = "assistant";
      delta["content"] = nullptr;
      delta["tool_calls"] = json::array{openai_tool_call(*a.tool_call, "", true)};
    } else {
      json::object fn;
      fn["arguments"] = a.token(index);
      json::object tc;
      tc["index"] = 0;
      tc["function"] = std::move(fn);
      delta["tool_calls"] = json::array{std::move(tc)};
    }
    return sse(json::serialize(openai_chunk(r, std::move(delta), nullptr)));
  }
  const std::string_view text = a.token(index);
  if (index == 0 && !r.logprobs) return openai_role_chunk(r, text);
  // The hot path of streamed benchmarks: written directly, in openai_chunk's shape.
  std::string s = "data: ";
  append_openai_head(s, r, "chat.completion.chunk");
  s += index == 0 ? ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":"
                  : ",\"choices\":[{\"index\":0,\"delta\":{\"content\":";
  append_json_string(s, text);
  s += "},\"logprobs\":";
  s += r.logprobs ? logprobs_json(a, index, index + 1, r.top_logprobs) : std::string("null");
  s += r.include_usage ? ",\"finish_reason\":null}],\"usage\":null}\n\n" : ",\"finish_reason\":null}]}\n\n";
  return s;
}

}  // namespace

std::string stream_token(const ReplyInfo& r, const Answer& a, std::int64_t index) {
  switch (r.api) {
    case Api::openai:
      return openai_stream_token(r, a, index);
    case Api::responses:
      return responses_stream_token(r, a, index);
    case Api::ollama: {
      json::object o;
      o["model"] = r.model;
      o["created_at"] = rfc3339_now();
      if (a.tool_call) {
        // Ollama parses a tool call out of the model's output and sends it whole.
        if (index + 1 != a.tokens()) return {};
        o["message"] = ollama_tool_message(a);
      } else {
        o["message"] = ollama_message(a.token(index));
      }
      o["done"] = false;
      std::string s = json::serialize(o);
      s += '\n';
      return s;
    }
    case Api::anthropic: {
      std::string s = index == 0 ? anthropic_head(r, a) : std::string();
      if (a.tool_call && index == 0) return s;
      json::object delta;
      if (a.tool_call) {
        delta["type"] = "input_json_delta";
        delta["partial_json"] = a.token(index);
      } else {
        delta["type"] = "text_delta";
        delta["text"] = a.token(index);
      }
      json::object d;
      d["type"] = "content_block_delta";
      d["index"] = 0;
      d["delta"] = std::move(delta);
      s += sse_event("content_block_delta", d);
      return s;
    }
  }
  return {};
}

std::string stream_end(const ReplyInfo& r, const Answer& a, const Timing& t) {
  const std::int64_t n = a.tokens();
  switch (r.api) {
    case Api::responses:
      return responses_stream_end(r, a);
    case Api::openai: {
      std::string s = n == 0 ? openai_role_chunk(r, "") : std::string();
      s += sse(json::serialize(openai_chunk(r, json::object{}, json::string(openai_finish(a.finish)))));
      if (r.include_usage) {
        json::object c;
        c["id"] = r.id;
        c["object"] = "chat.completion.chunk";
        c["created"] = r.created;
        c["model"] = r.model;
        c["choices"] = json::array{};
        c["usage"] = openai_usage(r.prompt_tokens, n);
        s += sse(json::serialize(c));
      }
      s += "data: [DONE]\n\n";
      return s;
    }
    case Api::ollama: {
      std::string s = json::serialize(ollama_final(r, ollama_message(""), a, t));
      s += '\n';
      return s;
    }
    case Api::anthropic: {
      std::string s = n == 0 ? anthropic_head(r, a) : std::string();
      json::object stop;
      stop["type"] = "content_block_stop";
      stop["index"] = 0;
      s += sse_event("content_block_stop", stop);
      json::object delta;
      delta["stop_reason"] = anthropic_stop_reason(a.finish);
      delta["stop_sequence"] = anthropic_stop_sequence(a);
      json::object usage;
      usage["output_tokens"] = n;
      json::object md;
      md["type"] = "message_delta";
      md["delta"] = std::move(delta);
      md["usage"] = std::move(usage);
      s += sse_event("message_delta", md);
      json::object ms;
      ms["type"] = "message_stop";
      s += sse_event("message_stop", ms);
      return s;
    }
  }
  return {};
}

std::string full_body(const ReplyInfo& r, const Answer& a, const Timing& t) {
  const std::int64_t n = a.tokens();
  const std::string& content = a.content.text;
  switch (r.api) {
    case Api::responses:
      return responses_body(r, a);
    case Api::openai: {
      // Written directly (the hot path of non-streamed benchmarks).
      std::string s;
      s.reserve(256 + content.size() + r.id.size() + r.model.size());
      append_openai_head(s, r, "chat.completion");
      s += ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"refusal\":null,\"content\":";
      if (a.tool_call) {
        s += "null,\"tool_calls\":[";
        s += json::serialize(openai_tool_call(*a.tool_call, content, false));
        s += ']';
      } else {
        append_json_string(s, content);
      }
      s += "},\"logprobs\":";
      if (r.logprobs && !a.tool_call) {
        s += logprobs_json(a, 0, n, r.top_logprobs);
      } else {
        s += "null";
      }
      s += ",\"finish_reason\":\"";
      s += openai_finish(a.finish);
      s += "\"}],\"usage\":{\"prompt_tokens\":";
      append_int(s, r.prompt_tokens);
      s += ",\"completion_tokens\":";
      append_int(s, n);
      s += ",\"total_tokens\":";
      append_int(s, r.prompt_tokens + n);
      s += "}}";
      return s;
    }
    case Api::ollama:
      return json::serialize(ollama_final(r, a.tool_call ? ollama_tool_message(a) : ollama_message(content), a, t));
    case Api::anthropic: {
      json::object block;
      if (a.tool_call) {
        block["type"] = "tool_use";
        block["id"] = a.tool_call->id;
        block["name"] = a.tool_call->name;
        block["input"] = arguments_object(a);
      } else {
        block["type"] = "text";
        block["text"] = content;
      }
      json::object usage;
      usage["input_tokens"] = r.prompt_tokens;
      usage["output_tokens"] = n;
      json::object o;
      o["id"] = r.id;
      o["type"] = "message";
      o["role"] = "assistant";
      o["model"] = r.model;
      o["content"] = json::array{std::move(block)};
      o["stop_reason"] = anthropic_stop_reason(a.finish);
      o["stop_sequence"] = anthropic_stop_sequence(a);
      o["usage"] = std::move(usage);
      return json::serialize(o);
    }
  }
  return {};
}

int status_of(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::bad_request: return 400;
    case ErrorKind::not_found: return 404;
    case ErrorKind::rate_limited: return 429;
    case ErrorKind::internal: return 500;
    case ErrorKind::unavailable: return 503;
    case ErrorKind::queue_full: return 503;
  }
  return 500;
}

http::Response error_response(Api api, ErrorKind kind, std::string_view message) {
  http::Response resp;
  resp.status = status_of(kind);
  resp.content_type = "application/json";
  if (kind == ErrorKind::rate_limited) resp.headers.emplace_back("Retry-After", "1");
  switch (api) {
    case Api::openai:
    case Api::responses: {
      std::string_view type, code;
      switch (kind) {
        case ErrorKind::bad_request: type = "invalid_request_error"; code = "invalid_request"; break;
        case ErrorKind::not_found: type = "invalid_request_error"; code = "not_found"; break;
        case ErrorKind::rate_limited: type = "rate_limit_error"; code = "rate_limit_exceeded"; break;
        case ErrorKind::internal: type = "server_error"; code = "internal_error"; break;
        case ErrorKind::unavailable: type = "server_error"; code = "service_unavailable"; break;
        case ErrorKind::queue_full: type = "server_error"; code = "queue_full"; break;
      }
      json::object e;
      e["message"] = message;
      e["type"] = type;
      e["code"] = code;
      e["param"] = nullptr;
      json::object o;
      o["error"] = std::move(e);
      resp.body = json::serialize(o);
      break;
    }
    case Api::ollama: {
      json::object o;
      o["error"] = message;
      resp.body = json::serialize(o);
      break;
    }
    case Api::anthropic: {
      std::string_view type;
      switch (kind) {
        case ErrorKind::bad_request: type = "invalid_request_error"; break;
        case ErrorKind::not_found: type = "not_found_error"; break;
        case ErrorKind::rate_limited: type = "rate_limit_error"; break;
        case ErrorKind::internal: type = "api_error"; break;
        case ErrorKind::unavailable:
        case ErrorKind::queue_full: type = "overloaded_error"; break;
      }
      json::object e;
      e["type"] = type;
      e["message"] = message;
      json::object o;
      o["type"] = "error";
      o["error"] = std::move(e);
      resp.body = json::serialize(o);
      break;
    }
  }
  return resp;
}

std::string openai_models_body(const std::vector<std::string>& models, std::int64_t created) {
  json::array data;
  for (const auto& m : models) {
    json::object e;
    e["id"] = m;
    e["object"] = "model";
    e["created"] = created;
    e["owned_by"] = "sluice-sim";
    data.push_back(std::move(e));
  }
  json::object o;
  o["object"] = "list";
  o["data"] = std::move(data);
  return json::serialize(o);
}

std::string ollama_tags_body(const std::vector<std::string>& models) {
  static constexpr char kHex[] = "0123456789abcdef";
  json::array list;
  const std::string now = rfc3339_now();
  for (const auto& m : models) {
    // A stable fake digest: 64 hex chars derived from the name (FNV-1a, repeated).
    std::uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : m) h = (h ^ c) * 1099511628211ULL;
    std::string digest;
    for (int i = 0; i < 64; ++i) {
      digest.push_back(kHex[(h >> ((i % 16) * 4)) & 0xf]);
      if (i % 16 == 15) h = (h ^ static_cast<std::uint64_t>(i)) * 1099511628211ULL;
    }
    json::object details;
    details["format"] = "gguf";
    details["family"] = "sluice-sim";
    details["parameter_size"] = "0B";
    details["quantization_level"] = "none";
    json::object e;
    e["name"] = m;
    e["model"] = m;
    e["modified_at"] = now;
    e["size"] = 0;
    e["digest"] = digest;
    e["details"] = std::move(details);
    list.push_back(std::move(e));
  }
  json::object o;
  o["models"] = std::move(list);
  return json::serialize(o);
}

}  // namespace sluice::sim
