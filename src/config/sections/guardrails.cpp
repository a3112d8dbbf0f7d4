// Guardrails: named screening policies (`guardrails`), used by routes and keys by name.
// See docs/guardrails.md.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Enum<GuardModelApi>& model_api_enum() {
  static const Enum<GuardModelApi> e{"guard model api", {{"moderation", GuardModelApi::moderation}, {"chat", GuardModelApi::chat}}};
  return e;
}

const Enum<GuardAction>& action_enum() {
  static const Enum<GuardAction> e{"guardrail action",
                                   {{"off", GuardAction::off},
                                    {"flag", GuardAction::flag},
                                    {"redact", GuardAction::redact},
                                    {"block", GuardAction::block}}};
  return e;
}

// Redact rewrites text: only where there is something to take out.
Key<GuardPolicy> screen_action(std::string_view name, GuardAction GuardPolicy::*m, std::string doc) {
  return choice(name, m, action_enum(), std::move(doc))
      .then([m, name](Loader& l, const YAML::Node& n, const std::string& p, GuardPolicy& g) {
        if (g.*m == GuardAction::redact) l.fail(p, n, std::string(name) + " cannot be redacted: use off, flag or block");
        return true;
      });
}

const Table<GuardPolicy>& policy_table() {
  static const Table<GuardPolicy> t{
      "guardrails[]",
      {
          text("name", &GuardPolicy::name, "What routes and keys call it (`models[].guardrails`, `keys[].guardrails`).")
              .needed(),
          screen_action("injection", &GuardPolicy::injection,
                        "Known prompt-injection phrasings (\"ignore all previous instructions\", \"reveal your system "
                        "prompt\", \"you are now DAN\"... in English and Chinese; `docs/guardrails.md`)."),
          choice("unicode_tags", &GuardPolicy::unicode_tags, action_enum(),
                 "Hidden Unicode tag characters (U+E0000–U+E007F), which smuggle instructions past a reader; "
                 "`redact` strips them."),
          screen_action("base64", &GuardPolicy::base64, "Base64 blobs of at least `base64_min_chars` characters."),
          integer("base64_min_chars", &GuardPolicy::base64_min_chars, 16, 100'000'000, "See `base64`."),
          screen_action("system_size", &GuardPolicy::system_size,
                        "System (and developer) messages over `max_system_bytes` in total: oversized role-play setups."),
          integer("max_system_bytes", &GuardPolicy::max_system_bytes, 1, 100'000'000, "See `system_size`."),
          custom<GuardPolicy>("patterns", "list of strings", "none",
                              "More phrasings to screen for: PCRE2 patterns, matched case-insensitively against each "
                              "message's text; a pattern that does not compile is an error.",
                              [](Loader& l, const YAML::Node& v, const std::string& p, GuardPolicy& g) {
                                if (!v.IsSequence()) {
                                  l.fail(p, v, std::string("expected a list of patterns, got ") + kind_of(v));
                                  return false;
                                }
                                for (std::size_t i = 0; i < v.size(); ++i) {
                                  std::string pat;
                                  const std::string ip = index(p, i);
                                  if (!l.get_string(v[i], ip, pat)) continue;
                                  int err = 0;
                                  PCRE2_SIZE off = 0;
                                  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                                                   PCRE2_UTF | PCRE2_CASELESS, &err, &off, nullptr);
                                  if (!code || pat.empty()) {
                                    PCRE2_UCHAR msg[256] = {};
                                    if (!code) pcre2_get_error_message(err, msg, sizeof msg);
                                    l.fail(ip, v[i], pat.empty() ? std::string("must not be empty")
                                                                 : "does not compile at offset " + std::to_string(off) +
                                                                       ": " + reinterpret_cast<const char*>(msg));
                                    continue;
                                  }
                                  pcre2_code_free(code);
                                  g.patterns.push_back(std::move(pat));
                                }
                                return true;
                              }),
          screen_action("pattern_action", &GuardPolicy::pattern_action, "What a match of `patterns` does."),
          choice("email", &GuardPolicy::email, action_enum(), "E-mail addresses."),
          choice("phone", &GuardPolicy::phone, action_enum(), "Phone numbers (10 to 15 digits, `+`, spaces, dots, dashes, brackets)."),
          choice("card", &GuardPolicy::card, action_enum(), "Payment card numbers: 13 to 19 digits passing the Luhn check."),
          choice("iban", &GuardPolicy::iban, action_enum(), "IBANs passing the mod-97 check."),
          text("model", &GuardPolicy::model,
               "An external guard: the alias of a route (provider `openai`: OpenAI, vLLM, llama.cpp...) asked for a "
               "verdict on the request's text before it goes on.")
              .with_default("none"),
          choice("model_api", &GuardPolicy::model_api, model_api_enum(),
                 "`moderation`: POST `<base_url>/moderations` (OpenAI's shape; flagged when a result is); `chat`: a "
                 "chat completion whose answer starts with `unsafe` (Llama Guard's format) flags."),
          screen_action("model_action", &GuardPolicy::model_action, "What a flagged verdict does."),
          duration("model_timeout", &GuardPolicy::model_timeout, Millis{1}, "How long the guard may take."),
          boolean("fail_closed", &GuardPolicy::fail_closed,
                  "When the guard fails or takes longer than `model_timeout`: refuse the request (503 "
                  "`guard_unavailable`). Off: it goes on, recorded as unscreened."),
          duration("verdict_ttl", &GuardPolicy::verdict_ttl, Millis{0},
                   "How long a verdict is kept for the same text (this instance; 0 = asked every time)."),
      }};
  return t;
}

}  // namespace

void read_guardrails(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  if (!n.IsSequence()) {
    l.error("guardrails", l.line_of(n), std::string("expected a list of policies, got ") + kind_of(n));
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    GuardPolicy g;
    const std::string p = index("guardrails", i);
    if (!policy_table().read(l, n[i], p, g)) continue;
    for (const auto& other : c.guardrails) {
      if (other.name == g.name) l.error(join(p, "name"), l.line_of(n[i]), "duplicate guardrails name " + q(g.name));
    }
    c.guardrails.push_back(std::move(g));
  }
}

void check_guardrails(Loader& l, Config& c) {
  for (std::size_t i = 0; i < c.guardrails.size(); ++i) {
    const auto& g = c.guardrails[i];
    if (g.model.empty()) continue;
    const Route* r = c.find_route(g.model);
    const std::string p = join(index("guardrails", i), "model");
    if (!r) l.error(p, 0, "unknown model alias " + q(g.model));
    else if (r->primary().provider != Provider::openai) l.error(p, 0, "the guard route must have provider openai");
  }
  for (std::size_t i = 0; i < c.routes.size(); ++i) {
    const auto& name = c.routes[i].guardrails;
    if (!name.empty() && !c.find_guardrails(name)) {
      l.error(join(index("models", i), "guardrails"), 0, "unknown guardrails policy " + q(name));
    }
  }
  for (std::size_t i = 0; i < c.keys.size(); ++i) {
    const auto& name = c.keys[i].guardrails;
    if (!name.empty() && name != "none" && !c.find_guardrails(name)) {
      l.error(join(index("keys", i), "guardrails"), 0, "unknown guardrails policy " + q(name));
    }
  }
}

void guardrails_reference(std::vector<TableDoc>& out) { out.push_back(policy_table().doc()); }

}  // namespace sluice::config::detail

namespace sluice::config {

const GuardPolicy* Config::find_guardrails(std::string_view name) const noexcept {
  for (const auto& g : guardrails) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

std::string_view to_string(GuardAction a) noexcept {
  switch (a) {
    case GuardAction::off: return "off";
    case GuardAction::flag: return "flag";
    case GuardAction::redact: return "redact";
    case GuardAction::block: return "block";
  }
  return "?";
}

}  // namespace sluice::config
