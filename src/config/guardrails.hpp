#pragma once
// Guardrails (docs/guardrails.md): named policies that screen what goes to a model
// (`guardrails`), applied by route (`models[].guardrails`) or key (`keys[].guardrails`,
// which wins). Declared in config/sections/guardrails.cpp.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

// What a finding does: nothing, recorded only (flag), rewritten out of the text (redact:
// PII and hidden tag characters), or the request refused (block).
enum class GuardAction : std::uint8_t { off, flag, redact, block };

// How the guard model is asked: OpenAI's moderation endpoint (POST <base>/moderations,
// `results[].flagged`), or a chat model that answers "safe" or "unsafe ..." (Llama Guard's
// format, POST <base>/chat/completions).
enum class GuardModelApi : std::uint8_t { moderation, chat };

struct GuardPolicy {
  std::string name;
  // The built-in fast screen.
  GuardAction injection = GuardAction::block;     // known prompt-injection phrasings
  GuardAction unicode_tags = GuardAction::block;  // hidden Unicode tag characters (U+E0000..U+E007F)
  GuardAction base64 = GuardAction::flag;         // base64 blobs of at least base64_min_chars
  std::size_t base64_min_chars = 256;
  GuardAction system_size = GuardAction::off;     // system prompts over max_system_bytes (role-play setups)
  std::size_t max_system_bytes = 8192;
  std::vector<std::string> patterns;              // more phrasings (PCRE2, case-insensitive)
  GuardAction pattern_action = GuardAction::block;
  // PII in the request's text.
  GuardAction email = GuardAction::off;
  GuardAction phone = GuardAction::off;
  GuardAction card = GuardAction::off;            // payment card numbers (Luhn-valid, 13-19 digits)
  GuardAction iban = GuardAction::off;            // IBANs (mod-97 valid)
  // An external guard: a model route asked for a verdict on the request's text.
  std::string model;                              // its alias; "" = none
  GuardModelApi model_api = GuardModelApi::moderation;
  GuardAction model_action = GuardAction::block;  // what a flagged verdict does (flag or block)
  std::chrono::milliseconds model_timeout{2000};
  bool fail_closed = false;                       // the guard unreachable or too slow: refuse (else pass)
  std::chrono::milliseconds verdict_ttl{600'000}; // verdicts kept per text, this long
};

std::string_view to_string(GuardAction a) noexcept;

}  // namespace sluice::config
