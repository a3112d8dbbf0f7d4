#include "sim/responses.hpp"

#include <array>
#include <boost/json.hpp>
#include <utility>

#include "sim/engine.hpp"

namespace sluice::sim {

namespace json = boost::json;

namespace {

// ---------------------------------------------------------------------------------------
// The request

// A field's value; a null is as good as absent.
const json::value* field(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && !v->is_null() ? v : nullptr;
}

std::string_view str(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

enum class Kind { boolean, number, string, object, array };

struct Typed {
  std::string_view name;
  Kind kind;
};

// Fields of one JSON type (input, max_output_tokens and tool_choice are checked where they
// are read). A wrong type would otherwise be echoed into a Response the schema refuses.
constexpr std::array<Typed, 14> kTyped = {{
    {"instructions", Kind::string}, {"stream", Kind::boolean},       {"store", Kind::boolean},
    {"temperature", Kind::number},  {"top_p", Kind::number},         {"metadata", Kind::object},
    {"user", Kind::string},         {"parallel_tool_calls", Kind::boolean},
    {"truncation", Kind::string},   {"include", Kind::array},        {"stream_options", Kind::object},
    {"text", Kind::object},         {"reasoning", Kind::object},     {"tools", Kind::array},
}};

bool has_kind(const json::value& v, Kind k) {
  switch (k) {
    case Kind::boolean: return v.is_bool();
    case Kind::number: return v.is_number();
    case Kind::string: return v.is_string();
    case Kind::object: return v.is_object();
    case Kind::array: return v.is_array();
  }
  return false;
}

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::boolean: return "a boolean";
    case Kind::number: return "a number";
    case Kind::string: return "a string";
    case Kind::object: return "an object";
    case Kind::array: return "an array";
  }
  return "";
}

bool check_types(const json::object& o, std::string& error) {
  for (const auto& [name, kind] : kTyped) {
    const json::value* v = field(o, name);
    if (v && !has_kind(*v, kind)) {
      error = "'" + std::string(name) + "' must be " + std::string(kind_name(kind));
      return false;
    }
  }
  const std::string_view t = str(o, "truncation");
  if (field(o, "truncation") && t != "auto" && t != "disabled") {
    error = "'truncation' must be \"auto\" or \"disabled\"";
    return false;
  }
  return true;
}

// State kept from earlier requests, which this server never has: a gateway in front of it
// must resolve it itself and never forward it.
bool refuse_stored_state(const json::object& o, std::string& error) {
  for (std::string_view k : {"previous_response_id", "conversation"}) {
    if (field(o, k)) {
      error = std::string(k) + " is not supported by this server (it stores nothing)";
      return false;
    }
  }
  return true;
}

// Prompt bytes of an input item: the text of its content (a message), arguments (a
// function call), output (a tool's result) or summary (reasoning); other items have none.
std::size_t item_bytes(const json::object& item) {
  std::size_t n = 0;
  for (std::string_view k : {"content", "arguments", "output", "summary"}) {
    if (const json::value* v = item.if_contains(k)) n += content_bytes(*v);
  }
  return n;
}

// "input": a string (one user message) or an array of items. Adds their bytes to `bytes`;
// sets the last user message's text and whether the last item is a tool's result.
bool read_input(const json::value* in, GenRequest& r, std::size_t& bytes, std::string& error) {
  if (in && in->is_string()) {
    bytes += in->get_string().size();
    r.last_user_text = std::string(in->get_string());
    return true;
  }
  if (!in || !in->is_array()) {
    error = "'input' must be a string or an array of input items";
    return false;
  }
  const json::object* last_user = nullptr;
  for (const auto& item : in->get_array()) {
    const json::object* io = item.if_object();
    const json::value* type = io ? io->if_contains("type") : nullptr;
    // A message may leave out its type (it has a role); any other item must say it.
    if (!io || (type ? !type->is_string() : str(*io, "role").empty())) {
      error = "each input item must be an object with a string 'type' (a message: a 'role')";
      return false;
    }
    bytes += item_bytes(*io);
    if ((!type || type->get_string() == "message") && str(*io, "role") == "user") last_user = io;
  }
  const json::array& items = in->get_array();
  r.last_is_tool_result = !items.empty() && str(items.back().get_object(), "type") == "function_call_output";
  if (const json::value* c = last_user ? last_user->if_contains("content") : nullptr)
    r.last_user_text = content_text(*c, "input_text");
  return true;
}

bool read_max_output_tokens(const json::value* v, GenRequest& r, std::string& error) {
  if (!v) return true;
  std::int64_t n = 0;
  if (!get_int(*v, n) || n < 1) {
    error = "'max_output_tokens' must be an integer >= 1";
    return false;
  }
  r.max_tokens = n;
  return true;
}

// Function tools ({"type":"function","name","parameters"}) may be called; tools of other
// types (web search, file search, MCP ...) are accepted and never called.
bool read_tools(const json::value* tools, GenRequest& r, std::string& error) {
  if (!tools) return true;
  for (const auto& t : tools->get_array()) {
    const json::object* to = t.if_object();
    if (!to || str(*to, "type").empty()) {
      error = "each tool must be an object with a string 'type'";
      return false;
    }
    if (str(*to, "type") != "function") continue;
    if (str(*to, "name").empty()) {
      error = "a function tool must have a non-empty 'name'";
      return false;
    }
    GenRequest::Tool tool{std::string(str(*to, "name")), json::value()};
    if (const json::value* p = to->if_contains("parameters"); p && p->is_object()) tool.parameters = *p;
    r.tools.push_back(std::move(tool));
  }
  return true;
}

// "none" | "auto" | "required" | {"type":"function","name"}; another object (a built-in
// tool, allowed_tools) leaves the function tools to "auto".
bool read_tool_choice(const json::value* tc, GenRequest& r, std::string& error) {
  if (!tc) return true;
  const std::string_view s = tc->is_string() ? std::string_view(tc->get_string()) : "";
  if (s == "none") {
    r.tool_choice = ToolChoice::none;
  } else if (s == "required") {
    r.tool_choice = ToolChoice::required;
  } else if (tc->is_object() && str(tc->get_object(), "type") == "function") {
    r.tool_choice = ToolChoice::named;
    r.tool_choice_name = std::string(str(tc->get_object(), "name"));
  } else if (s != "auto" && !tc->is_object()) {
    error = "'tool_choice' must be \"none\", \"auto\", \"required\" or an object";
    return false;
  }
  return true;
}

// text.format: {"type":"text"}, {"type":"json_object"}, {"type":"json_schema","schema"}.
bool read_text_format(const json::value* text, GenRequest& r, std::string& error) {
  const json::value* f = text ? field(text->get_object(), "format") : nullptr;
  if (!f) return true;
  const json::object* fo = f->if_object();
  if (!fo || !set_format(r, str(*fo, "type"), fo->if_contains("schema"))) {
    error = "'text.format.type' must be text, json_object or json_schema";
    return false;
  }
  return true;
}

// Each key of `defaults` takes the value `given` has for it, unless that is null.
json::object filled(json::object defaults, const json::object& given) {
  for (auto& kv : defaults) {
    if (const json::value* v = field(given, kv.key())) kv.value() = *v;
  }
  return defaults;
}

// Tools as a Response lists them: a function tool with description, parameters and strict
// (true unless it says otherwise, as OpenAI's), which the schema requires; others as given.
json::array tools_echo(const json::value* tools) {
  json::array out;
  if (!tools) return out;
  for (const auto& t : tools->get_array()) {
    if (str(t.get_object(), "type") != "function") {
      out.push_back(t);
      continue;
    }
    out.push_back(filled({{"type", "function"}, {"name", ""}, {"description", nullptr},
                          {"parameters", nullptr}, {"strict", true}},
                         t.get_object()));
  }
  return out;
}

// The fields of a Response that repeat the request, with OpenAI's defaults.
json::object response_echo(const json::object& o) {
  json::object e = filled({{"instructions", nullptr},
                           {"max_output_tokens", nullptr},
                           {"metadata", json::object{}},
                           {"parallel_tool_calls", true},
                           {"previous_response_id", nullptr},
                           {"service_tier", "default"},
                           {"store", true},
                           {"temperature", 1},
                           {"text", json::object{{"format", json::object{{"type", "text"}}}}},
                           {"tool_choice", "auto"},
                           {"top_p", 1},
                           {"truncation", "disabled"}},
                          o);
  const json::value* reasoning = field(o, "reasoning");
  e["reasoning"] = filled({{"effort", nullptr}, {"summary", nullptr}},
                          reasoning ? reasoning->get_object() : json::object());
  e["tools"] = tools_echo(field(o, "tools"));
  if (const json::value* user = field(o, "user")) e["user"] = *user;
  return e;
}

// ---------------------------------------------------------------------------------------
// The answer

bool cut(const Answer& a) { return a.finish == Finish::length; }
bool has_reasoning(const Answer& a) { return a.reasoning.size() > 0; }

// An output item's id: its prefix and the response id's hex ("resp_<hex>" -> "msg_<hex>").
std::string item_id(const ReplyInfo& r, std::string_view prefix) {
  std::string_view hex = r.id;
  if (hex.starts_with("resp_")) hex.remove_prefix(5);
  std::string id(prefix);
  id += hex;
  return id;
}

json::object summary_part(std::string_view text) { return {{"type", "summary_text"}, {"text", text}}; }

json::object text_part(std::string_view text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array{}}, {"logprobs", json::array{}}};
}

// The reasoning item: its summary is there once done.
json::object reasoning_item(const ReplyInfo& r, const Answer& a, bool done) {
  json::array summary;
  if (done) summary.push_back(summary_part(a.reasoning.text));
  return {{"type", "reasoning"}, {"id", item_id(r, "rs_")}, {"summary", std::move(summary)}};
}

// The answer's item, a message or a function call: in progress and empty, or done.
json::object answer_item(const ReplyInfo& r, const Answer& a, bool done) {
  const std::string_view status = !done ? "in_progress" : cut(a) ? "incomplete" : "completed";
  if (a.tool_call) {
    return {{"type", "function_call"}, {"id", item_id(r, "fc_")},  {"call_id", a.tool_call->id},
            {"name", a.tool_call->name},  {"arguments", done ? std::string_view(a.content.text) : ""},
            {"status", status}};
  }
  json::array content;
  if (done) content.push_back(text_part(a.content.text));
  return {{"type", "message"}, {"id", item_id(r, "msg_")}, {"status", status}, {"role", "assistant"},
          {"content", std::move(content)}};
}

json::object usage(const ReplyInfo& r, const Answer& a) {
  const auto reasoning = static_cast<std::int64_t>(a.reasoning.size());
  const std::int64_t out = a.tokens() + reasoning;
  return {{"input_tokens", r.prompt_tokens},
          {"input_tokens_details", json::object{{"cached_tokens", 0}, {"cache_write_tokens", 0}}},
          {"output_tokens", out},
          {"output_tokens_details", json::object{{"reasoning_tokens", reasoning}}},
          {"total_tokens", r.prompt_tokens + out}};
}

// The Response: in progress (no output yet, no usage: the field is not nullable), or done:
// completed, or incomplete when a limit cut the answer.
json::object response(const ReplyInfo& r, const Answer& a, bool done) {
  json::object o{{"id", r.id},
                 {"object", "response"},
                 {"created_at", r.created},
                 {"status", !done ? "in_progress" : cut(a) ? "incomplete" : "completed"},
                 {"background", false},
                 {"error", nullptr},
                 {"incomplete_details", nullptr},
                 {"model", r.model},
                 {"output", json::array{}}};
  for (const auto& kv : r.echo) o[kv.key()] = kv.value();
  if (!done) return o;
  if (cut(a)) o["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
  json::array& output = o["output"].as_array();
  if (has_reasoning(a)) output.push_back(reasoning_item(r, a, true));
  output.push_back(answer_item(r, a, true));
  o["usage"] = usage(r, a);
  return o;
}

// Events before the answer's first delta: response.created and .in_progress, the
// reasoning item's six, the answer's item opened (a message's with its content part).
std::int64_t head_events(const Answer& a) { return 2 + (has_reasoning(a) ? 6 : 0) + (a.tool_call ? 1 : 2); }

// The sequence number of the first event sent with token `index` (the end: index ==
// tokens). A tool call's token 0 is its head, without a delta.
std::int64_t first_seq(const Answer& a, std::int64_t index) {
  return index == 0 ? 0 : head_events(a) + index - (a.tool_call ? 1 : 0);
}

// Writes the events of a stream, numbered from `seq`.
class Events {
 public:
  Events(const ReplyInfo& r, const Answer& a, std::int64_t seq) : r_(r), a_(a), seq_(seq) {}

  void head() {
    send("response.created", {{"response", response(r_, a_, false)}});
    send("response.in_progress", {{"response", response(r_, a_, false)}});
    if (has_reasoning(a_)) reasoning();
    send("response.output_item.added", {{"output_index", answer_index()}, {"item", answer_item(r_, a_, false)}});
    if (!a_.tool_call) send("response.content_part.added", at_content("part", text_part("")));
  }

  void token(std::int64_t index) {
    if (a_.tool_call) {
      send("response.function_call_arguments.delta", at_answer("delta", json::string(a_.token(index))));
      return;
    }
    json::object e = at_content("delta", json::string(a_.token(index)));
    e["logprobs"] = json::array{};
    send("response.output_text.delta", std::move(e));
  }

  void end() {
    const std::string& content = a_.content.text;
    if (a_.tool_call) {
      json::object e = at_answer("arguments", json::string(content));
      e["name"] = a_.tool_call->name;
      send("response.function_call_arguments.done", std::move(e));
    } else {
      json::object e = at_content("text", json::string(content));
      e["logprobs"] = json::array{};
      send("response.output_text.done", std::move(e));
      send("response.content_part.done", at_content("part", text_part(content)));
    }
    send("response.output_item.done", {{"output_index", answer_index()}, {"item", answer_item(r_, a_, true)}});
    send(cut(a_) ? "response.incomplete" : "response.completed", {{"response", response(r_, a_, true)}});
  }

  std::string take() { return std::move(out_); }

 private:
  // The event: its type and number first (as OpenAI writes them), then `fields`.
  void send(std::string_view type, json::object fields) {
    json::object e{{"type", type}, {"sequence_number", seq_++}};
    for (auto& kv : fields) e.emplace(kv.key(), std::move(kv.value()));
    out_ += sse_event(type, e);
  }

  // The reasoning item (output 0) whole: added, its summary's one part and text, done.
  void reasoning() {
    const std::string id = item_id(r_, "rs_");
    const std::string& text = a_.reasoning.text;
    auto at_summary = [&](std::string_view k, json::value v) {
      json::object e{{"item_id", id}, {"output_index", 0}, {"summary_index", 0}};
      e[k] = std::move(v);
      return e;
    };
    send("response.output_item.added", {{"output_index", 0}, {"item", reasoning_item(r_, a_, false)}});
    send("response.reasoning_summary_part.added", at_summary("part", summary_part("")));
    send("response.reasoning_summary_text.delta", at_summary("delta", json::string(text)));
    send("response.reasoning_summary_text.done", at_summary("text", json::string(text)));
    send("response.reasoning_summary_part.done", at_summary("part", summary_part(text)));
    send("response.output_item.done", {{"output_index", 0}, {"item", reasoning_item(r_, a_, true)}});
  }

  std::int64_t answer_index() const { return has_reasoning(a_) ? 1 : 0; }

  // {"item_id","output_index",k:v} of the answer's item.
  json::object at_answer(std::string_view k, json::value v) const {
    json::object e{{"item_id", item_id(r_, a_.tool_call ? "fc_" : "msg_")}, {"output_index", answer_index()}};
    e[k] = std::move(v);
    return e;
  }

  // The same for the message's one content part.
  json::object at_content(std::string_view k, json::value v) const {
    json::object e = at_answer(k, std::move(v));
    e["content_index"] = 0;
    return e;
  }

  const ReplyInfo& r_;
  const Answer& a_;
  std::int64_t seq_;
  std::string out_;
};

}  // namespace

std::optional<GenRequest> parse_responses_request(std::string_view body, std::string& error) {
  std::optional<json::value> v = parse_body(body, error);
  if (!v) return std::nullopt;
  const json::object& o = v->get_object();
  GenRequest r;
  r.api = Api::responses;
  std::size_t bytes = 0;
  if (!read_model(o, r.model, error) || !refuse_stored_state(o, error) || !check_types(o, error) ||
      !read_input(field(o, "input"), r, bytes, error) ||
      !read_max_output_tokens(field(o, "max_output_tokens"), r, error) || !read_tools(field(o, "tools"), r, error) ||
      !read_tool_choice(field(o, "tool_choice"), r, error) || !read_text_format(field(o, "text"), r, error))
    return std::nullopt;
  if (const json::value* i = field(o, "instructions")) bytes += i->get_string().size();
  r.prompt_tokens = estimate_prompt_tokens(bytes);
  if (const json::value* s = field(o, "stream")) r.stream = s->get_bool();
  r.reasoning = field(o, "reasoning") != nullptr;
  r.echo = response_echo(o);
  return r;
}

std::string responses_stream_token(const ReplyInfo& r, const Answer& a, std::int64_t index) {
  Events ev(r, a, first_seq(a, index));
  if (index == 0) ev.head();
  if (index > 0 || !a.tool_call) ev.token(index);
  return ev.take();
}

std::string responses_stream_end(const ReplyInfo& r, const Answer& a) {
  Events ev(r, a, first_seq(a, a.tokens()));
  if (a.tokens() == 0) ev.head();
  ev.end();
  return ev.take();
}

std::string responses_body(const ReplyInfo& r, const Answer& a) { return json::serialize(response(r, a, true)); }

}  // namespace sluice::sim
