#include "llm/fold.hpp"

#include <boost/json.hpp>
#include <chrono>
#include <map>
#include <vector>

#include "common/text.hpp"
#include "llm/json_parse.hpp"

namespace sluice::llm {

namespace json = boost::json;

namespace {

std::string_view str(const json::value* v) {
  return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

// One choice as its deltas arrive.
struct Choice {
  std::string role = "assistant";
  std::string content, refusal, reasoning;
  bool has_content = false, has_refusal = false, has_reasoning = false;
  struct Call {
    std::string id, type = "function", name, arguments;
  };
  std::map<std::int64_t, Call> calls;  // by the fragment's index
  std::string finish_reason;
  json::array logprobs;  // logprobs.content, concatenated
  bool has_logprobs = false;
};

class FoldingStream final : public StreamTranslator {
 public:
  FoldingStream(std::unique_ptr<StreamTranslator> inner, std::string* whole, std::size_t max_bytes,
                std::function<void(std::string_view)> on_frames)
      : inner_(std::move(inner)), whole_(whole), max_bytes_(max_bytes), on_frames_(std::move(on_frames)) {}

  bool feed(std::string_view bytes, std::string& out) override {
    const std::size_t from = out.size();
    const bool ok = inner_->feed(bytes, out);
    passed(std::string_view(out).substr(from));
    return ok;
  }
  bool finish(std::string& out) override {
    const std::size_t from = out.size();
    const bool ok = inner_->finish(out);
    passed(std::string_view(out).substr(from));
    return ok;
  }
  void count_output(const tokenizer::Counter* counter, tokenizer::Encoding encoding) override {
    inner_->count_output(counter, encoding);
  }
  std::int64_t relayed_tokens() const override { return inner_->relayed_tokens(); }
  std::string final_answer() const override { return inner_->final_answer(); }
  std::string error_event(Reason r, std::string_view m) override { return inner_->error_event(r, m); }

 private:
  // The frames the inner translator wrote: folded, handed on; once the end marker passed
  // (the answer is whole, whether or not the upstream body ends soon after), rendered.
  void passed(std::string_view frames) {
    fold(frames);
    sync();
    if (on_frames_ && !frames.empty()) on_frames_(frames);
    if (!rendered_ && ended_ && done_ && error_.empty() && !failed_) {
      rendered_ = true;
      // A whole answer only: every choice ended with a finish reason.
      bool whole = !choices_.empty();
      for (const auto& [i, c] : choices_) whole = whole && !c.finish_reason.empty();
      if (whole) *whole_ = render();
    }
  }

  void sync() {
    content_chunks_ = inner_->content_chunks();
    usage_ = inner_->usage();
    finish_reason_ = inner_->finish_reason();
    done_ = inner_->done();
    error_ = inner_->error();
  }

  // Whole "data: ...\n\n" frames (the wire translators write nothing else).
  void fold(std::string_view frames) {
    while (!frames.empty() && !failed_) {
      const auto end = frames.find("\n\n");
      std::string_view frame = frames.substr(0, end);
      frames = end == std::string_view::npos ? std::string_view{} : frames.substr(end + 2);
      if (!frame.starts_with("data: ")) continue;
      frame.remove_prefix(6);
      if (frame == "[DONE]") {
        ended_ = true;
        continue;
      }
      bytes_ += frame.size();
      if (bytes_ > max_bytes_) {
        failed_ = true;
        return;
      }
      boost::system::error_code ec;
      json::value v = detail::parse_json(frame, ec);
      if (ec || !v.is_object()) continue;
      chunk(v.get_object());
    }
  }

  void chunk(json::object& o) {
    // An error however the upstream shapes it ({"error":...}; vLLM's {"object":"error"}).
    if (o.contains("error") || str(o.if_contains("object")) == "error") {
      failed_ = true;
      return;
    }
    for (std::string_view k : {"id", "model", "system_fingerprint", "service_tier"}) {
      if (const auto* v = o.if_contains(k); v && !head_.contains(k)) head_[k] = *v;
    }
    if (const auto* u = o.if_contains("usage"); u && u->is_object()) usage_json_ = *u;
    const auto* ch = o.if_contains("choices");
    if (!ch || !ch->is_array()) return;
    for (const auto& cv : ch->get_array()) {
      const auto* c = cv.if_object();
      if (!c) continue;
      std::int64_t index = 0;
      if (const auto* i = c->if_contains("index"); i && i->is_int64()) index = i->get_int64();
      Choice& ch_ = choices_[index];
      if (const auto* d = c->if_contains("delta"); d && d->is_object()) delta(ch_, d->get_object());
      if (auto f = str(c->if_contains("finish_reason")); !f.empty()) ch_.finish_reason = f;
      if (const auto* lp = c->if_contains("logprobs"); lp && lp->is_object()) {
        if (const auto* content = lp->get_object().if_contains("content"); content && content->is_array()) {
          ch_.has_logprobs = true;
          for (const auto& t : content->get_array()) ch_.logprobs.push_back(t);
        }
      }
    }
  }

  static void delta(Choice& c, const json::object& d) {
    if (auto r = str(d.if_contains("role")); !r.empty()) c.role = r;
    auto text = [&d](std::string_view k, std::string& into, bool& has) {
      if (const auto* v = d.if_contains(k); v && v->is_string()) {
        into += v->get_string();
        has = true;
      }
    };
    text("content", c.content, c.has_content);
    text("refusal", c.refusal, c.has_refusal);
    text("reasoning_content", c.reasoning, c.has_reasoning);
    const auto* tc = d.if_contains("tool_calls");
    if (!tc || !tc->is_array()) return;
    for (const auto& call : tc->get_array()) {
      const auto* co = call.if_object();
      if (!co) continue;
      std::int64_t index = static_cast<std::int64_t>(c.calls.size());
      if (const auto* i = co->if_contains("index"); i && i->is_int64()) index = i->get_int64();
      auto& slot = c.calls[index];
      if (auto id = str(co->if_contains("id")); !id.empty()) slot.id = id;
      if (auto t = str(co->if_contains("type")); !t.empty()) slot.type = t;
      if (const auto* fn = co->if_contains("function"); fn && fn->is_object()) {
        const auto& f = fn->get_object();
        slot.name += str(f.if_contains("name"));
        slot.arguments += str(f.if_contains("arguments"));
      }
    }
  }

  std::string render() const {
    json::object c;
    c["id"] = head_.contains("id") ? head_.at("id") : json::value("chatcmpl-folded");
    c["object"] = "chat.completion";
    c["created"] = static_cast<std::int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    c["model"] = head_.contains("model") ? head_.at("model") : json::value("");
    json::array list;
    for (const auto& [index, ch] : choices_) {
      json::object m;
      m["role"] = ch.role;
      m["content"] = ch.has_content || (ch.calls.empty() && !ch.has_refusal) ? json::value(ch.content)
                                                                              : json::value(nullptr);
      m["refusal"] = ch.has_refusal ? json::value(ch.refusal) : json::value(nullptr);
      if (ch.has_reasoning) m["reasoning_content"] = ch.reasoning;
      if (!ch.calls.empty()) {
        json::array calls;
        for (const auto& [i, call] : ch.calls) {
          calls.push_back(json::object{{"id", call.id},
                                       {"type", call.type},
                                       {"function", json::object{{"name", call.name}, {"arguments", call.arguments}}}});
        }
        m["tool_calls"] = std::move(calls);
      }
      json::object one{{"index", index}, {"message", std::move(m)}};
      one["logprobs"] = ch.has_logprobs ? json::value(json::object{{"content", ch.logprobs}, {"refusal", nullptr}})
                                        : json::value(nullptr);
      one["finish_reason"] = ch.finish_reason;
      list.push_back(std::move(one));
    }
    c["choices"] = std::move(list);
    if (usage_json_.is_object()) {
      c["usage"] = usage_json_;
    } else if (usage_.prompt_tokens >= 0 && usage_.completion_tokens >= 0) {
      // The client did not ask for the usage chunk; the translator read it all the same.
      c["usage"] = json::object{{"prompt_tokens", usage_.prompt_tokens},
                                {"completion_tokens", usage_.completion_tokens},
                                {"total_tokens", saturating_add(usage_.prompt_tokens, usage_.completion_tokens)}};
    }
    for (std::string_view k : {"system_fingerprint", "service_tier"}) {
      if (const auto* v = head_.if_contains(k)) c[k] = *v;
    }
    return json::serialize(c);
  }

  std::unique_ptr<StreamTranslator> inner_;
  std::string* whole_;
  std::size_t max_bytes_;
  std::size_t bytes_ = 0;
  bool failed_ = false, ended_ = false, rendered_ = false;
  std::function<void(std::string_view)> on_frames_;
  json::object head_;
  json::value usage_json_;
  std::map<std::int64_t, Choice> choices_;
};

std::int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<json::object> read_kept(std::string_view kept) {
  boost::system::error_code ec;
  json::value v = detail::parse_json(kept, ec);
  if (ec || !v.is_object()) return std::nullopt;
  auto& o = v.get_object();
  const auto* ch = o.if_contains("choices");
  if (!ch || !ch->is_array()) return std::nullopt;
  return std::move(o);
}

}  // namespace

bool keepable(std::string_view body) {
  boost::system::error_code ec;
  json::value v = detail::parse_json(body, ec);
  if (ec || !v.is_object()) return false;
  const auto& o = v.get_object();
  if (str(o.if_contains("object")) != "chat.completion") return false;
  const auto* ch = o.if_contains("choices");
  if (!ch || !ch->is_array() || ch->get_array().empty()) return false;
  for (const auto& c : ch->get_array()) {
    const auto* co = c.if_object();
    if (!co) return false;
    const auto* m = co->if_contains("message");
    if (!m || !m->is_object() || str(co->if_contains("finish_reason")).empty()) return false;
  }
  return true;
}

std::string reid_frames(std::string_view frames, std::string& first_id, std::string_view request_id) {
  if (first_id.empty()) {
    const auto data = frames.find("data: {");
    if (data == std::string_view::npos) return std::string(frames);
    const auto end = frames.find("\n\n", data);
    boost::system::error_code ec;
    json::value v = detail::parse_json(frames.substr(data + 6, end == std::string_view::npos ? end : end - data - 6), ec);
    if (ec || !v.is_object()) return std::string(frames);
    const auto id = str(v.get_object().if_contains("id"));
    if (id.empty()) return std::string(frames);
    first_id = id;
  }
  std::string from = R"("id":)";
  append_json_string(from, first_id);
  std::string to = R"("id":)";
  append_json_string(to, "chatcmpl-" + std::string(request_id));
  std::string out;
  out.reserve(frames.size());
  std::size_t at = 0;
  for (std::size_t hit; (hit = frames.find(from, at)) != std::string_view::npos; at = hit + from.size()) {
    out.append(frames.substr(at, hit - at));
    out += to;
  }
  out.append(frames.substr(at));
  return out;
}

std::unique_ptr<StreamTranslator> fold_stream(std::unique_ptr<StreamTranslator> inner, std::string* whole,
                                              std::size_t max_bytes, std::function<void(std::string_view)> on_frames) {
  whole->clear();
  return std::make_unique<FoldingStream>(std::move(inner), whole, max_bytes, std::move(on_frames));
}

std::optional<Completion> replay_whole(std::string_view kept, std::string_view request_id) {
  auto o = read_kept(kept);
  if (!o) return std::nullopt;
  (*o)["id"] = "chatcmpl-" + std::string(request_id);
  (*o)["created"] = now_s();
  return read_openai_completion(json::serialize(*o));
}

std::string replay_stream(std::string_view kept, const ChatRequest& req, std::string_view request_id) {
  auto o = read_kept(kept);
  if (!o) return {};
  const std::string prefix = chunk_prefix(request_id, str(o->if_contains("model")).empty() ? std::string_view(req.model)
                                                                                           : str(o->if_contains("model")));
  std::string out;
  std::vector<std::pair<std::int64_t, std::string>> finishes;
  for (const auto& cv : o->at("choices").get_array()) {
    const auto* c = cv.if_object();
    if (!c) continue;
    std::int64_t index = 0;
    if (const auto* i = c->if_contains("index"); i && i->is_int64()) index = i->get_int64();
    json::object d;
    if (const auto* m = c->if_contains("message"); m && m->is_object()) {
      const auto& msg = m->get_object();
      d["role"] = str(msg.if_contains("role")).empty() ? std::string_view("assistant") : str(msg.if_contains("role"));
      for (std::string_view k : {"content", "refusal", "reasoning_content"}) {
        if (const auto* v = msg.if_contains(k); v && v->is_string()) d[k] = *v;
      }
      if (const auto* tc = msg.if_contains("tool_calls"); tc && tc->is_array()) {
        json::array calls;
        std::int64_t i = 0;
        for (const auto& call : tc->get_array()) {
          if (!call.is_object()) continue;
          json::object f = call.get_object();
          f["index"] = i++;
          calls.push_back(std::move(f));
        }
        d["tool_calls"] = std::move(calls);
      }
    }
    json::object one{{"index", index}, {"delta", std::move(d)}};
    if (const auto* lp = c->if_contains("logprobs"); lp && lp->is_object()) one["logprobs"] = *lp;
    one["finish_reason"] = nullptr;
    out += prefix;
    out += json::serialize(one);
    out += chunk_close(req.include_usage);
    std::string f(str(c->if_contains("finish_reason")));
    finishes.emplace_back(index, f.empty() ? std::string("stop") : std::move(f));
  }
  for (const auto& [index, f] : finishes) {
    out += prefix;
    out += R"({"index":)" + std::to_string(index) + R"(,"delta":{},"finish_reason":)";
    append_json_string(out, f);
    out += '}';
    out += chunk_close(req.include_usage);
  }
  std::int64_t prompt = 0, completion = 0;
  if (const auto* u = o->if_contains("usage"); u && u->is_object()) {
    if (const auto* p = u->get_object().if_contains("prompt_tokens"); p && p->is_int64()) prompt = p->get_int64();
    if (const auto* c = u->get_object().if_contains("completion_tokens"); c && c->is_int64()) completion = c->get_int64();
  }
  append_stream_end(out, prefix, true, prompt, completion);
  return out;
}

}  // namespace sluice::llm
