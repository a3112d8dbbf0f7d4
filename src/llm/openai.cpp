// OpenAI-compatible upstreams: the non-streaming body passes through (usage is read
// from it); the SSE stream passes through event by event, inspected with simdjson.
#include <simdjson.h>

#include <cstring>
#include <string>

#include "common/reason.hpp"
#include "llm/chat.hpp"
#include "llm/padded.hpp"
#include "llm/framing.hpp"

namespace sluice::llm {
namespace od = simdjson::ondemand;

namespace {

// A usage count: valid only as a non-negative integer within int64 (a string, a fraction,
// 1e30 or a negative number is -1: unknown).
std::int64_t read_count(od::value v) {
  std::int64_t n = 0;
  if (v.get_int64().get(n) != simdjson::SUCCESS) return -1;
  return usage_count(n);
}

// Reads {"prompt_tokens":..,"completion_tokens":..} into u; false if v is not an object.
bool read_usage(od::value v, Usage& u) {
  od::object o;
  if (v.get_object().get(o) != simdjson::SUCCESS) return false;
  for (auto field : o) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    if (key == "prompt_tokens") {
      u.prompt_tokens = read_count(field.value());
    } else if (key == "completion_tokens") {
      u.completion_tokens = read_count(field.value());
    }
  }
  return true;
}

class OpenAiStream final : public StreamTranslator {
 public:
  explicit OpenAiStream(const ChatRequest& req) : include_usage_(req.include_usage) {}

  bool feed(std::string_view bytes, std::string& out) override {
    if (failed_) return false;
    const bool ok = sse_.feed(bytes, [&](const SseEvent& ev) { on_event(ev, out); });
    if (!ok && !failed_) fail(out, "upstream SSE event exceeds the size limit");
    return !failed_;
  }

  bool finish(std::string& out) override {
    if (failed_) return true;  // already ended with an error frame
    if (done_) return true;
    if (!error_.empty()) {
      // The upstream's error event was relayed; end the client stream cleanly.
      out += "data: [DONE]\n\n";
      return true;
    }
    return false;  // truncated: no [DONE] from upstream
  }

 private:
  void fail(std::string& out, std::string message) {
    failed_ = true;
    error_ = std::move(message);
    out += error_frame(Reason::upstream_bad_response, error_);
  }

  static void emit(std::string& out, const SseEvent& ev) {
    if (!ev.event.empty()) {
      out += "event: ";
      out += ev.event;
      out += '\n';
    }
    out += "data: ";
    // A multi-line data field stays multi-line on the way out.
    std::string_view d = ev.data;
    for (auto nl = d.find('\n'); nl != std::string_view::npos; nl = d.find('\n')) {
      out += d.substr(0, nl);
      out += "\ndata: ";
      d.remove_prefix(nl + 1);
    }
    out += d;
    out += "\n\n";
  }

  void on_event(const SseEvent& ev, std::string& out) {
    if (failed_ || done_) return;  // nothing is relayed after [DONE] or a failure
    if (ev.data == "[DONE]") {
      done_ = true;
      out += "data: [DONE]\n\n";
      return;
    }
    bool has_choices = false, content = false, has_usage = false;
    null_usage_ = false;
    if (!inspect(ev.data, has_choices, content, has_usage)) {
      fail(out, "upstream sent an event that is not a JSON object");
      return;
    }
    if (content) ++content_chunks_;
    // The usage-only chunk exists because the gateway always asks for it; the client
    // sees it only if it asked too.
    if (has_usage && !has_choices && !include_usage_) return;
    // For the same reason an upstream marks every other chunk "usage": null; a client that
    // did not ask gets chunks without the field, as the spec has them. (Compact JSON, as
    // OpenAI and the simulator write it; an object's first or last bytes can only be its
    // own member.)
    // Only the top-level member is taken: the last (where OpenAI writes it) or the first.
    if (null_usage_ && !include_usage_ && ev.event.empty() && ev.data.find('\n') == std::string_view::npos) {
      static constexpr std::string_view kLast = R"(,"usage":null})", kFirst = R"({"usage":null,)";
      const std::string_view d = ev.data;
      if (d.ends_with(kLast) || d.starts_with(kFirst)) {
        out += "data: ";
        if (d.ends_with(kLast)) {
          out += d.substr(0, d.size() - kLast.size());
          out += '}';
        } else {
          out += '{';
          out += d.substr(kFirst.size());
        }
        out += "\n\n";
        return;
      }
    }
    emit(out, ev);
  }

  // Reads what the gateway needs from one chunk. False if it is not a JSON object.
  bool inspect(std::string_view data, bool& has_choices, bool& content, bool& has_usage) {
    od::document doc;
    if (detail::scratch_parser().iterate(data).get(doc) != simdjson::SUCCESS) return false;
    od::object obj;
    if (doc.get_object().get(obj) != simdjson::SUCCESS) return false;
    for (auto field : obj) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      if (key == "choices") {
        od::array choices;
        if (field.value().get_array().get(choices) != simdjson::SUCCESS) continue;
        for (auto choice : choices) {
          has_choices = true;
          od::object c;
          if (choice.get_object().get(c) != simdjson::SUCCESS) continue;
          for (auto cf : c) {
            std::string_view ck;
            if (cf.unescaped_key().get(ck) != simdjson::SUCCESS) return false;
            if (ck == "delta") {
              od::object delta;
              if (cf.value().get_object().get(delta) != simdjson::SUCCESS) continue;
              for (auto df : delta) {
                std::string_view dk;
                if (df.unescaped_key().get(dk) != simdjson::SUCCESS) return false;
                if (dk == "content" || dk == "reasoning_content" || dk == "reasoning" || dk == "refusal") {
                  std::string_view s;
                  if (df.value().get_string().get(s) == simdjson::SUCCESS && !s.empty()) {
                    content = true;
                    relayed(s);
                  }
                } else if (dk == "tool_calls") {
                  od::array calls;
                  if (df.value().get_array().get(calls) == simdjson::SUCCESS) {
                    for (auto call : calls) {
                      content = true;
                      od::value cv;
                      if (counter_ && call.get(cv) == simdjson::SUCCESS) relay_tool_call(cv);
                    }
                  }
                }
              }
            } else if (ck == "finish_reason") {
              std::string_view fr;
              if (cf.value().get_string().get(fr) == simdjson::SUCCESS) {
                finish_reason_.assign(fr);
              }
            }
          }
        }
      } else if (key == "usage") {
        Usage u;
        if (bool null = false; field.value().is_null().get(null) == simdjson::SUCCESS && null) {
          null_usage_ = true;
        } else if (read_usage(field.value(), u)) {
          usage_ = u;
          has_usage = true;
        }
      } else if (key == "error") {
        error_ = "upstream error";
        od::value ev = field.value();
        od::json_type t;
        if (ev.type().get(t) == simdjson::SUCCESS) {
          std::string_view s;
          if (t == od::json_type::string && ev.get_string().get(s) == simdjson::SUCCESS) {
            error_.assign(s);
          } else if (t == od::json_type::object) {
            od::object eo;
            if (ev.get_object().get(eo) == simdjson::SUCCESS) {
              for (auto ef : eo) {
                std::string_view ek;
                if (ef.unescaped_key().get(ek) != simdjson::SUCCESS) break;
                if (ek == "message" && ef.value().get_string().get(s) == simdjson::SUCCESS) {
                  error_.assign(s);
                }
              }
            }
          }
        }
      }
    }
    return true;
  }

  // A delta's tool call: its function's name and arguments are relayed output.
  void relay_tool_call(od::value call) {
    od::object co;
    if (call.get_object().get(co) != simdjson::SUCCESS) return;
    for (auto f : co) {
      std::string_view k;
      if (f.unescaped_key().get(k) != simdjson::SUCCESS) return;
      if (k != "function") continue;
      od::object fn;
      if (f.value().get_object().get(fn) != simdjson::SUCCESS) return;
      for (auto ff : fn) {
        std::string_view fk, text;
        if (ff.unescaped_key().get(fk) != simdjson::SUCCESS) return;
        if ((fk == "name" || fk == "arguments") && ff.value().get_string().get(text) == simdjson::SUCCESS) relayed(text);
      }
    }
  }

  bool include_usage_;
  bool null_usage_ = false;  // the event being read has "usage": null
  bool failed_ = false;
  SseParser sse_;
};

}  // namespace

std::optional<Completion> read_openai_completion(std::string upstream_body) {
  // One parser per thread: a parser allocates its buffers on first use, which cost more
  // than the parse itself when done per request.
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(upstream_body.data(), upstream_body.size()).get(root) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  simdjson::dom::object obj;
  if (root.get_object().get(obj) != simdjson::SUCCESS) return std::nullopt;
  Completion c;
  simdjson::dom::object usage;
  if (obj["usage"].get_object().get(usage) == simdjson::SUCCESS) {
    std::int64_t n;
    if (usage["prompt_tokens"].get_int64().get(n) == simdjson::SUCCESS) c.usage.prompt_tokens = usage_count(n);
    if (usage["completion_tokens"].get_int64().get(n) == simdjson::SUCCESS) {
      c.usage.completion_tokens = usage_count(n);
    }
  }
  simdjson::dom::array choices;
  if (obj["choices"].get_array().get(choices) == simdjson::SUCCESS) {
    std::string_view fr;
    if (choices.at(0)["finish_reason"].get_string().get(fr) == simdjson::SUCCESS) {
      c.finish_reason = std::string(fr);
    }
  }
  c.body = std::move(upstream_body);
  return c;
}

std::unique_ptr<StreamTranslator> make_openai_stream(const ChatRequest& req) {
  return std::make_unique<OpenAiStream>(req);
}

std::string error_frame(Reason reason, std::string_view message) {
  std::string out = "data: ";
  out += error_body(reason, message);
  out += "\n\ndata: [DONE]\n\n";
  return out;
}

}  // namespace sluice::llm
