#pragma once
// Guardrails (docs/guardrails.md): a fast screen of the text a request sends to a model —
// known prompt-injection phrasings, hidden Unicode tag characters, base64 blobs, oversized
// system prompts, configured patterns — and PII (e-mail addresses, phone numbers, payment
// cards with the Luhn check, IBANs with mod 97), each found, flagged, redacted or
// blocking as its policy says. No I/O; the request filter is filters/guardrails.cpp.
#include <boost/json/object.hpp>
#include <array>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <string>
#include <string_view>
#include <vector>

#include "config/guardrails.hpp"

namespace sluice::guard {

enum class Kind : std::uint8_t { injection, unicode_tags, base64, system_size, pattern, email, phone, card, iban, model };
inline constexpr std::size_t kKinds = 10;
std::string_view to_string(Kind k) noexcept;

struct Finding {
  Kind kind;
  config::GuardAction action;
  std::size_t count = 0;
};

struct Verdict {
  config::GuardAction worst = config::GuardAction::off;  // block > redact > flag > off
  std::vector<Finding> findings;                          // one per kind found (count: how often)
  // For the records: "<worst>:<kind>[,<kind>...]" (e.g. "block:injection",
  // "redact:email,phone"); empty when nothing was found.
  std::string summary() const;
  const Finding* first(config::GuardAction a) const;  // the first finding with that action
};

// One policy, compiled. Shared by the workers (const use is thread-safe).
class Screen {
 public:
  explicit Screen(const config::GuardPolicy& policy);
  ~Screen();
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  // The texts of a chat-completions body (every message's content, string or text parts);
  // where a finding redacts, the text is rewritten in place.
  Verdict inspect(boost::json::object& body) const;
  // The same over a Responses API request in its own form (`instructions`, `input` as a
  // string or items with text parts), for a backend that is sent that form: redacts it
  // alike; what it finds is in `v` too.
  void inspect_native(boost::json::object& native, Verdict& v) const;
  // One text (system: whether it is a system or developer message's).
  void inspect_text(std::string& text, bool system, Verdict& v) const;

  const config::GuardPolicy& policy() const noexcept { return policy_; }

 private:
  struct Impl;
  config::GuardPolicy policy_;
  std::unique_ptr<Impl> impl_;
};

// The text a guard model is asked about: every message's text, one per line, with its
// role ("user: ...").
std::string guard_text(const boost::json::object& body);
// The guard model's call (its path after the backend's prefix, and body) and its answer:
// true flagged, false safe, nullopt unreadable.
std::string guard_call_body(config::GuardModelApi api, std::string_view model, std::string_view text);
std::string_view guard_call_path(config::GuardModelApi api);
std::optional<bool> read_guard_answer(config::GuardModelApi api, std::string_view body);

// Verdicts of the guard model by policy and text (SHA-256 of both: a text cannot be made
// to pass for another), for verdict_ttl. Thread-safe; at most kMax entries (beyond, the
// expired ones go, then half of the rest).
class VerdictCache {
 public:
  static constexpr std::size_t kMax = 100'000;
  std::optional<bool> get(const std::string& key);
  void put(const std::string& key, bool flagged, std::chrono::milliseconds ttl);
  void clear();
  static std::string key(std::string_view policy, std::string_view text);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::pair<bool, std::chrono::steady_clock::time_point>> map_;
};

// The process's screens, by policy name, and what they found (metrics).
class Guards {
 public:
  explicit Guards(const std::vector<config::GuardPolicy>& policies);
  // The policies of a reloaded file, in force from the next find(). A Screen found before
  // stays valid (every set is kept: reloads are few); cached guard-model verdicts are
  // dropped (a policy of the same name may now say otherwise). Not concurrent with itself.
  void reconfigure(const std::vector<config::GuardPolicy>& policies);
  // Whether any policy is in force.
  bool any() const noexcept { return !current_.load(std::memory_order_acquire)->empty(); }
  const Screen* find(std::string_view name) const noexcept;
  void count(const Verdict& v) noexcept;
  void count_model(bool ok) noexcept;  // a guard model's call: answered, or failed / timed out
  void render_metrics(std::string& out) const;
  VerdictCache& verdicts() noexcept { return verdicts_; }

 private:
  using Set = std::vector<std::unique_ptr<Screen>>;
  std::vector<std::unique_ptr<const Set>> sets_;  // every set installed, the last in force
  std::atomic<const Set*> current_{nullptr};
  std::array<std::array<std::atomic<std::uint64_t>, 4>, kKinds> counts_{};  // [kind][action]
  std::atomic<std::uint64_t> model_calls_{0}, model_failures_{0};
  VerdictCache verdicts_;
};

// Luhn and mod-97 checks (exposed for tests).
bool luhn_valid(std::string_view digits) noexcept;
bool iban_valid(std::string_view iban) noexcept;

}  // namespace sluice::guard
