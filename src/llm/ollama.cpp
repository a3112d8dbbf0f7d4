// Ollama /api/chat upstreams: the non-streaming answer and the NDJSON stream are
// translated into OpenAI chat.completion / chat.completion.chunk bodies.
#include <simdjson.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cstring>
#include <ctime>
#include <string>

#include "common/reason.hpp"
#include "common/text.hpp"
#include "llm/json_parse.hpp"
#include "llm/chat.hpp"
#include "llm/padded.hpp"
#include "llm/framing.hpp"

namespace sluice::llm {
namespace od = simdjson::ondemand;
namespace json = boost::json;

namespace {

std::string_view sv(const json::string& s) { return {s.data(), s.size()}; }

void append_int(std::string& out, std::int64_t n) { out += std::to_string(n); }

std::string_view map_finish_reason(std::string_view done_reason, bool tool_calls) {
  if (tool_calls) return "tool_calls";
  if (done_reason == "length") return "length";
  return "stop";
}

// One OpenAI tool call: {"index":i,"id":"call_<rid>_<i>","type":"function",
// "function":{"name":...,"arguments":"<json text>"}}. `with_index` for stream deltas.
void append_tool_call(std::string& out, std::string_view request_id, std::size_t i,
                      std::string_view name, std::string_view arguments_json,
                      bool with_index) {
  out += '{';
  if (with_index) {
    out += R"("index":)";
    append_int(out, static_cast<std::int64_t>(i));
    out += ',';
  }
  out += R"("id":)";
  append_json_string(out, "call_" + std::string(request_id.substr(0, 24)) + "_" +
                              std::to_string(i));
  out += R"(,"type":"function","function":{"name":)";
  append_json_string(out, name);
  out += R"(,"arguments":)";
  append_json_string(out, arguments_json.empty() ? std::string_view("{}") : arguments_json);
  out += "}}";
}

class OllamaStream final : public StreamTranslator {
 public:
  OllamaStream(const ChatRequest& req, std::string_view request_id)
      : include_usage_(req.include_usage),
        prompt_estimate_(req.prompt_tokens_estimate),
        request_id_(request_id) {
    prefix_ = chunk_prefix(request_id, req.model);
  }

  bool feed(std::string_view bytes, std::string& out) override {
    if (failed_) return false;
    const bool ok = ndjson_.feed(bytes, [&](std::string_view line) { on_line(line, out); });
    if (!ok && !failed_) fail(out, Reason::upstream_bad_response, "upstream NDJSON line exceeds the size limit");
    return !failed_;
  }

  bool finish(std::string& out) override {
    if (!failed_) ndjson_.finish([&](std::string_view line) { on_line(line, out); });
    if (failed_) return true;  // already ended with an error frame
    return done_;              // false: the done line never came (truncated)
  }

 private:
  void fail(std::string& out, Reason r, std::string message) {
    failed_ = true;
    error_ = std::move(message);
    out += error_frame(r, error_);
  }

  struct Line {
    std::string_view content;
    std::string tool_calls;  // OpenAI delta tool_calls elements, comma-separated
    std::size_t tool_call_count = 0;
    bool done = false;
    std::string_view done_reason;
    std::int64_t prompt_eval_count = -1;
    std::int64_t eval_count = -1;
    bool has_error = false;
    std::string_view error;
  };

  void read_message(od::value v, Line& l) {
    od::object m;
    if (v.get_object().get(m) != simdjson::SUCCESS) return;
    for (auto f : m) {
      std::string_view k;
      if (f.unescaped_key().get(k) != simdjson::SUCCESS) return;
      if (k == "content") {
        std::string_view c;
        if (f.value().get_string().get(c) == simdjson::SUCCESS) l.content = c;
      } else if (k == "tool_calls") {
        od::array calls;
        if (f.value().get_array().get(calls) != simdjson::SUCCESS) continue;
        for (auto call : calls) {
          od::object co;
          if (call.get_object().get(co) != simdjson::SUCCESS) continue;
          std::string_view name, args;
          std::string args_copy;
          for (auto cf : co) {
            std::string_view ck;
            if (cf.unescaped_key().get(ck) != simdjson::SUCCESS || ck != "function") continue;
            od::object fn;
            if (cf.value().get_object().get(fn) != simdjson::SUCCESS) continue;
            for (auto ff : fn) {
              std::string_view fk;
              if (ff.unescaped_key().get(fk) != simdjson::SUCCESS) break;
              if (fk == "name") {
                std::string_view n;
                if (ff.value().get_string().get(n) == simdjson::SUCCESS) name = n;
                // name points into the parser's string buffer, valid for this document
              } else if (fk == "arguments") {
                od::value av = ff.value();
                if (simdjson::to_json_string(av).get(args) == simdjson::SUCCESS) {
                  args_copy.assign(args);
                }
              }
            }
          }
          if (l.tool_call_count) l.tool_calls += ',';
          append_tool_call(l.tool_calls, request_id_, tool_call_index_ + l.tool_call_count,
                           name, args_copy, true);
          relayed(name);
          relayed(args_copy.empty() ? std::string_view("{}") : std::string_view(args_copy));
          ++l.tool_call_count;
        }
      }
    }
  }

  bool parse_line(std::string_view line, Line& l) {
    od::document doc;
    if (detail::scratch_parser().iterate(line).get(doc) != simdjson::SUCCESS) return false;
    od::object obj;
    if (doc.get_object().get(obj) != simdjson::SUCCESS) return false;
    for (auto field : obj) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      if (key == "message") {
        read_message(field.value(), l);
      } else if (key == "done") {
        bool b = false;
        if (field.value().get_bool().get(b) == simdjson::SUCCESS) l.done = b;
      } else if (key == "done_reason") {
        std::string_view s;
        if (field.value().get_string().get(s) == simdjson::SUCCESS) l.done_reason = s;
      } else if (key == "prompt_eval_count") {
        std::int64_t n = 0;
        if (field.value().get_int64().get(n) == simdjson::SUCCESS) l.prompt_eval_count = usage_count(n);
      } else if (key == "eval_count") {
        std::int64_t n = 0;
        if (field.value().get_int64().get(n) == simdjson::SUCCESS) l.eval_count = usage_count(n);
      } else if (key == "error") {
        l.has_error = true;
        od::value ev = field.value();
        std::string_view s;
        if (ev.get_string().get(s) == simdjson::SUCCESS ||
            simdjson::to_json_string(ev).get(s) == simdjson::SUCCESS) {
          l.error = s;
        }
      }
    }
    return true;
  }

  void begin_chunk(std::string& out) {
    out += prefix_;
    out += R"({"index":0,"delta":{)";
    if (!role_sent_) {
      out += R"("role":"assistant")";
      role_sent_ = true;
    }
  }

  void on_line(std::string_view line, std::string& out) {
    if (failed_ || done_) return;
    Line l;
    if (!parse_line(line, l)) {
      fail(out, Reason::upstream_bad_response, "upstream sent a line that is not a JSON object");
      return;
    }
    if (l.has_error) {
      fail(out, Reason::upstream_stream_failed,
           l.error.empty() ? std::string("upstream error") : std::string(l.error));
      return;
    }
    if (!l.content.empty() || l.tool_call_count > 0) {
      const bool role = !role_sent_;
      begin_chunk(out);
      bool comma = role;
      if (!l.content.empty()) {
        if (comma) out += ',';
        out += R"("content":)";
        append_json_string(out, l.content);
        relayed(l.content);
        comma = true;
      }
      if (l.tool_call_count > 0) {
        if (comma) out += ',';
        out += R"("tool_calls":[)";
        out += l.tool_calls;
        out += ']';
        tool_call_index_ += l.tool_call_count;
      }
      out += R"(},"finish_reason":null})";
      out += chunk_close(include_usage_);
      ++content_chunks_;
    }
    if (!l.done) return;

    done_ = true;
    finish_reason_ = map_finish_reason(l.done_reason, tool_call_index_ > 0);
    usage_.prompt_tokens = l.prompt_eval_count;
    usage_.completion_tokens = l.eval_count;
    // The closing chunk: empty delta (role too, if nothing was sent) and finish_reason.
    const bool role = !role_sent_;
    begin_chunk(out);
    if (role) out += R"(,"content":"")";
    out += R"(},"finish_reason":)";
    append_json_string(out, finish_reason_);
    out += '}';
    out += chunk_close(include_usage_);
    append_stream_end(out, prefix_, include_usage_, l.prompt_eval_count >= 0 ? l.prompt_eval_count : prompt_estimate_,
                      l.eval_count >= 0 ? l.eval_count : relayed_tokens());
  }

  bool include_usage_;
  std::int64_t prompt_estimate_;
  std::string request_id_;
  std::string prefix_;  // "data: {"id":...,"choices":["
  bool role_sent_ = false;
  bool failed_ = false;
  std::size_t tool_call_index_ = 0;
  NdjsonParser ndjson_;
};

}  // namespace

std::optional<Completion> translate_ollama_completion(std::string_view upstream_body,
                                                      const ChatRequest& req,
                                                      std::string_view request_id) {
  boost::system::error_code ec;
  json::value root = detail::parse_json(upstream_body, ec);
  if (ec || !root.is_object()) return std::nullopt;
  const auto& obj = root.get_object();
  if (obj.contains("error")) return std::nullopt;
  const auto* msg = obj.if_contains("message");
  if (!msg || !msg->is_object()) return std::nullopt;
  const auto& m = msg->get_object();

  std::string_view content;
  if (const auto* c = m.if_contains("content"); c && c->is_string()) content = sv(c->get_string());

  std::string tool_calls;
  std::size_t n_calls = 0;
  if (const auto* tc = m.if_contains("tool_calls"); tc && tc->is_array()) {
    for (const auto& call : tc->get_array()) {
      const json::object* fn = nullptr;
      if (call.is_object()) {
        if (const auto* f = call.get_object().if_contains("function"); f && f->is_object()) {
          fn = &f->get_object();
        }
      }
      if (!fn) continue;
      std::string_view name;
      if (const auto* n = fn->if_contains("name"); n && n->is_string()) name = sv(n->get_string());
      std::string args;
      if (const auto* a = fn->if_contains("arguments")) {
        args = a->is_string() ? std::string(sv(a->get_string())) : json::serialize(*a);
      }
      if (n_calls) tool_calls += ',';
      append_tool_call(tool_calls, request_id, n_calls, name, args, false);
      ++n_calls;
    }
  }

  auto count = [&](const char* k) -> std::int64_t {
    const auto* v = obj.if_contains(k);
    // Valid only as a non-negative integer within int64 (not a string, a fraction, 1e30).
    if (v && v->is_int64()) return usage_count(v->get_int64());
    return -1;
  };
  Completion c;
  c.usage.prompt_tokens = count("prompt_eval_count");
  c.usage.completion_tokens = count("eval_count");
  std::string_view done_reason;
  if (const auto* dr = obj.if_contains("done_reason"); dr && dr->is_string()) {
    done_reason = sv(dr->get_string());
  }
  c.finish_reason = map_finish_reason(done_reason, n_calls > 0);

  std::string& out = c.body;
  out.reserve(256 + content.size() + tool_calls.size());
  append_completion_head(out, request_id, req.model);
  out += R"({"index":0,"message":{"role":"assistant","refusal":null,"content":)";
  if (content.empty() && n_calls > 0) {
    out += "null";
  } else {
    append_json_string(out, content);
  }
  if (n_calls > 0) {
    out += R"(,"tool_calls":[)";
    out += tool_calls;
    out += ']';
  }
  out += R"(},"logprobs":null,"finish_reason":)";
  append_json_string(out, c.finish_reason);
  out += R"(}],"usage":)";
  append_usage(out,
               c.usage.prompt_tokens >= 0 ? c.usage.prompt_tokens : req.prompt_tokens_estimate,
               c.usage.completion_tokens >= 0 ? c.usage.completion_tokens
                                              : estimate_tokens(content));
  out += '}';
  return c;
}

std::unique_ptr<StreamTranslator> make_ollama_stream(const ChatRequest& req,
                                                     std::string_view request_id) {
  return std::make_unique<OllamaStream>(req, request_id);
}

}  // namespace sluice::llm
