// The guardrails' screen (src/guard) over arbitrary client text: the injection phrasings,
// hidden tag characters, base64, configured patterns and PII, each redacting. Whatever
// the bytes (invalid UTF-8 included), nothing crashes or loops (libFuzzer's timeout); a
// redacted text is no longer than the input plus the labels, and screened again it holds
// no hidden tag character. (The PII detectors read numbers and addresses in their context,
// which a redaction changes: a second look may find another, e.g. digits that touched a
// redacted address.)
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "guard/guard.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const guard::Screen* screen = [] {
    config::GuardPolicy p;
    p.name = "fuzz";
    p.unicode_tags = config::GuardAction::redact;
    p.base64 = config::GuardAction::flag;
    p.base64_min_chars = 32;
    p.patterns = {"secret\\s+project\\s+\\w+"};
    p.pattern_action = config::GuardAction::flag;
    p.email = p.phone = p.card = p.iban = config::GuardAction::redact;
    return new guard::Screen(p);
  }();
  fuzz::Input in(data, size);
  std::string text(in.rest());
  guard::Verdict v;
  screen->inspect_text(text, false, v);
  std::size_t redacted = 0;
  for (const auto& f : v.findings) {
    if (f.action == config::GuardAction::redact && f.kind != guard::Kind::unicode_tags) redacted += f.count;
  }
  if (text.size() > in.rest().size() + 8 * redacted) __builtin_trap();
  // Screened again, nothing redactable is left (the labels hold no PII).
  guard::Verdict again;
  std::string second = text;
  screen->inspect_text(second, false, again);
  for (const auto& f : again.findings) {
    if (f.kind == guard::Kind::unicode_tags) __builtin_trap();
  }
  (void)v.summary();
  return 0;
}
