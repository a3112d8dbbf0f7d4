#include "sim/wire.hpp"

#include "common/text.hpp"

#include <boost/json.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace sluice::sim {

namespace json = boost::json;

namespace {

// Bytes of a message "content": a string, or an array of parts whose "text" is counted.
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
  if (v.is_double() && v.get_double() == static_cast<double>(static_cast<std::int64_t>(v.get_double()))) {
    out = static_cast<std::int64_t>(v.get_double());
    return true;
  }
  return false;
}

}  // namespace

std::optional<GenRequest> parse_request(Api api, std::string_view body, std::string& error) {
  // Small bodies parse into this buffer without a heap allocation.
  unsigned char scratch[4096];
  json::monotonic_resource mr(scratch, sizeof scratch);
  json::error_code ec;
  json::value v = json::parse(body, ec, &mr);
  if (ec) {
    error = "request body is not valid JSON";
    return std::nullopt;
  }
  if (!v.is_object()) {
    error = "request body must be a JSON object";
    return std::nullopt;
  }
  const json::object& o = v.get_object();
  GenRequest r;
  r.api = api;
  r.stream = api == Api::ollama;

  const json::value* model = o.if_contains("model");
  if (!model || !model->is_string() || model->get_string().empty()) {
    error = "'model' must be a non-empty string";
    return std::nullopt;
  }
  r.model = std::string(model->get_string());

  const json::value* messages = o.if_contains("messages");
  if (!messages || !messages->is_array()) {
    error = "'messages' must be an array";
    return std::nullopt;
  }
  std::size_t bytes = 0;
  for (const auto& m : messages->get_array()) {
    if (!m.is_object()) {
      error = "each message must be an object";
      return std::nullopt;
    }
    if (auto* c = m.get_object().if_contains("content")) bytes += content_bytes(*c);
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

  switch (api) {
    case Api::openai: {
      if (auto* so = o.if_contains("stream_options"); so && so->is_object()) {
        if (auto* iu = so->get_object().if_contains("include_usage"); iu && iu->is_bool())
          r.include_usage = iu->get_bool();
      }
      if (!read_limit("max_tokens", o.if_contains("max_tokens"), true)) return std::nullopt;
      if (!read_limit("max_completion_tokens", o.if_contains("max_completion_tokens"), true))
        return std::nullopt;
      break;
    }
    case Api::ollama: {
      if (auto* opts = o.if_contains("options"); opts && opts->is_object()) {
        if (!read_limit("options.num_predict", opts->get_object().if_contains("num_predict"), false))
          return std::nullopt;
        if (r.max_tokens && *r.max_tokens < 0) r.max_tokens.reset();  // -1: no limit
      }
      break;
    }
    case Api::anthropic: {
      if (!read_limit("max_tokens", o.if_contains("max_tokens"), true)) return std::nullopt;
      break;
    }
  }
  return r;
}

std::string_view stream_content_type(Api api) {
  return api == Api::ollama ? "application/x-ndjson" : "text/event-stream";
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

std::string sse_event(std::string_view type, const json::object& data) {
  std::string s = "event: ";
  s += type;
  s += "\ndata: ";
  s += json::serialize(data);
  s += "\n\n";
  return s;
}

void append_int(std::string& s, std::int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, end);
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

json::object ollama_message(std::string_view content) {
  json::object m;
  m["role"] = "assistant";
  m["content"] = content;
  return m;
}

json::object ollama_final(const ReplyInfo& r, std::string_view content, std::int64_t n,
                          bool length_limited, const Timing& t) {
  json::object o;
  o["model"] = r.model;
  o["created_at"] = rfc3339_now();
  o["message"] = ollama_message(content);
  o["done"] = true;
  o["done_reason"] = length_limited ? "length" : "stop";
  o["total_duration"] = t.total_ns;
  o["load_duration"] = t.load_ns;
  o["prompt_eval_count"] = r.prompt_tokens;
  o["prompt_eval_duration"] = t.prompt_eval_ns;
  o["eval_count"] = n;
  o["eval_duration"] = t.eval_ns;
  return o;
}

std::string anthropic_head(const ReplyInfo& r) {
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
  block["type"] = "text";
  block["text"] = "";
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

}  // namespace

std::string stream_token(const ReplyInfo& r, std::int64_t index, std::string_view text) {
  switch (r.api) {
    case Api::openai: {
      if (index == 0) return openai_role_chunk(r, text);
      // The hot path of streamed benchmarks: written directly, in openai_chunk's shape.
      std::string s = "data: ";
      append_openai_head(s, r, "chat.completion.chunk");
      s += ",\"choices\":[{\"index\":0,\"delta\":{\"content\":";
      append_json_string(s, text);
      s += r.include_usage ? "},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
                           : "},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
      return s;
    }
    case Api::ollama: {
      json::object o;
      o["model"] = r.model;
      o["created_at"] = rfc3339_now();
      o["message"] = ollama_message(text);
      o["done"] = false;
      std::string s = json::serialize(o);
      s += '\n';
      return s;
    }
    case Api::anthropic: {
      json::object delta;
      delta["type"] = "text_delta";
      delta["text"] = text;
      json::object d;
      d["type"] = "content_block_delta";
      d["index"] = 0;
      d["delta"] = std::move(delta);
      std::string s = index == 0 ? anthropic_head(r) : std::string();
      s += sse_event("content_block_delta", d);
      return s;
    }
  }
  return {};
}

std::string stream_end(const ReplyInfo& r, std::int64_t n, bool length_limited, const Timing& t) {
  switch (r.api) {
    case Api::openai: {
      std::string s = n == 0 ? openai_role_chunk(r, "") : std::string();
      s += sse(json::serialize(openai_chunk(r, json::object{}, length_limited ? "length" : "stop")));
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
      std::string s = json::serialize(ollama_final(r, "", n, length_limited, t));
      s += '\n';
      return s;
    }
    case Api::anthropic: {
      std::string s = n == 0 ? anthropic_head(r) : std::string();
      json::object stop;
      stop["type"] = "content_block_stop";
      stop["index"] = 0;
      s += sse_event("content_block_stop", stop);
      json::object delta;
      delta["stop_reason"] = length_limited ? "max_tokens" : "end_turn";
      delta["stop_sequence"] = nullptr;
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

std::string full_body(const ReplyInfo& r, std::string_view content, std::int64_t n,
                      bool length_limited, const Timing& t) {
  switch (r.api) {
    case Api::openai: {
      // Written directly (the hot path of non-streamed benchmarks).
      std::string s;
      s.reserve(256 + content.size() + r.id.size() + r.model.size());
      append_openai_head(s, r, "chat.completion");
      s += ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"refusal\":null,\"content\":";
      append_json_string(s, content);
      s += "},\"logprobs\":null,\"finish_reason\":";
      s += length_limited ? "\"length\"" : "\"stop\"";
      s += "}],\"usage\":{\"prompt_tokens\":";
      append_int(s, r.prompt_tokens);
      s += ",\"completion_tokens\":";
      append_int(s, n);
      s += ",\"total_tokens\":";
      append_int(s, r.prompt_tokens + n);
      s += "}}";
      return s;
    }
    case Api::ollama:
      return json::serialize(ollama_final(r, content, n, length_limited, t));
    case Api::anthropic: {
      json::object block;
      block["type"] = "text";
      block["text"] = content;
      json::object usage;
      usage["input_tokens"] = r.prompt_tokens;
      usage["output_tokens"] = n;
      json::object o;
      o["id"] = r.id;
      o["type"] = "message";
      o["role"] = "assistant";
      o["model"] = r.model;
      o["content"] = json::array{std::move(block)};
      o["stop_reason"] = length_limited ? "max_tokens" : "end_turn";
      o["stop_sequence"] = nullptr;
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
    case Api::openai: {
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
