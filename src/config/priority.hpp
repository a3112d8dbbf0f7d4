#pragma once
// Queue classes of the concurrency gate, lowest first (a key's priority, a tier's class).
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::config {

enum class Priority : std::uint8_t { standard = 0, premium = 1, vip = 2 };
inline constexpr int kPriorities = 3;

std::string_view to_string(Priority) noexcept;
std::optional<Priority> priority_from_name(std::string_view) noexcept;

}  // namespace sluice::config
