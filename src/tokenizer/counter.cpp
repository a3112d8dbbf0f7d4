// Encoding names and model mapping, the Counter (exact where loaded, estimate otherwise)
// and the chat prompt formula.
#include <cstdint>
#include <filesystem>
#include <functional>

#include "tokenizer/tokenizer.hpp"

namespace sluice::tokenizer {

std::optional<Encoding> encoding_from_name(std::string_view name) noexcept {
  if (name == "cl100k_base") return Encoding::cl100k_base;
  if (name == "o200k_base") return Encoding::o200k_base;
  return std::nullopt;
}

std::string_view encoding_name(Encoding e) noexcept {
  return e == Encoding::o200k_base ? "o200k_base" : "cl100k_base";
}

Encoding encoding_for_model(std::string_view model) noexcept {
  // Fine-tuned models are named "ft:<base>:<org>...": the base decides.
  if (model.starts_with("ft:")) model.remove_prefix(3);
  static constexpr std::string_view o200k_prefixes[] = {
      "gpt-4o", "chatgpt-4o", "o1", "o3", "o4", "gpt-4.1", "gpt-4.5", "gpt-5"};
  for (const auto prefix : o200k_prefixes) {
    if (model.starts_with(prefix)) return Encoding::o200k_base;
  }
  return Encoding::cl100k_base;
}

Counter Counter::load_dir(const std::string& dir, std::string* warnings) {
  Counter c;
  std::string notes;
  for (const Encoding e : {Encoding::cl100k_base, Encoding::o200k_base}) {
    const std::string base = dir + "/" + std::string(encoding_name(e));
    std::string path = base + ".json";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && std::filesystem::exists(base + ".tiktoken", ec))
      path = base + ".tiktoken";
    std::string error;
    auto bpe = Bpe::load(path, e, &error);
    if (bpe) {
      c.set(e, std::move(bpe));
    } else {
      notes += std::string(encoding_name(e)) + ": token counts are estimates (" + error + ")\n";
    }
  }
  if (warnings) *warnings = std::move(notes);
  return c;
}

void Counter::set(Encoding encoding, std::shared_ptr<const Bpe> bpe) {
  bpes_[static_cast<std::size_t>(encoding)] = std::move(bpe);
}

namespace {

// Counts this thread computed, by text: a chat client sends the whole conversation with
// every turn (and a system prompt with every request), so most texts were counted before.
// Direct-mapped, no allocation: a slot keeps the latest text that hashed to it. A hit needs
// the same 64-bit hash, length and encoding.
struct CountCache {
  static constexpr std::size_t kSlots = 4096;
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t size = 0;
    std::uint32_t count = 0;
    std::uint8_t encoding = 0xff;  // no entry
  };
  Slot slots[kSlots];
};

}  // namespace

std::size_t Counter::count(std::string_view text, Encoding encoding) const {
  const Bpe* b = bpe(encoding);
  if (!b) return estimate(text, encoding);
  if (text.size() > UINT32_MAX) return b->count(text);
  thread_local CountCache cache;
  const std::uint64_t h = std::hash<std::string_view>{}(text);
  auto& slot = cache.slots[(h ^ (h >> 29)) % CountCache::kSlots];
  const auto enc = static_cast<std::uint8_t>(encoding);
  if (slot.encoding == enc && slot.hash == h && slot.size == text.size()) return slot.count;
  const std::size_t n = b->count(text);
  if (n <= UINT32_MAX) slot = {h, static_cast<std::uint32_t>(text.size()), static_cast<std::uint32_t>(n), enc};
  return n;
}

std::size_t count_chat(const Counter& counter, Encoding encoding,
                       std::span<const ChatMessage> messages) {
  std::size_t total = kReplyPrimingTokens;
  for (const ChatMessage& m : messages) {
    total += kTokensPerMessage + counter.count(m.role, encoding) + counter.count(m.content, encoding);
    if (!m.name.empty()) total += kTokensPerName + counter.count(m.name, encoding);
  }
  return total;
}

}  // namespace sluice::tokenizer
