#include "common/address.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>

namespace sluice {

namespace {

constexpr std::array<std::uint8_t, 12> kMappedPrefix{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

std::string_view trim_space(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One X-Forwarded-For element: an address, or one with a port as some proxies write it
// ("192.0.2.1:4711", "[2001:db8::1]:4711").
std::optional<IpAddress> parse_hop(std::string_view e) {
  if (auto a = IpAddress::parse(e)) return a;
  const auto colon = e.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto host = e.substr(0, colon);
  const auto port = e.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') return IpAddress::parse(host);
  if (host.find(':') != std::string_view::npos) return std::nullopt;  // a bare IPv6 address has no port
  return IpAddress::parse(host);
}

}  // namespace

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  if (text.empty() || text.size() > 45) return std::nullopt;  // INET6_ADDRSTRLEN - 1
  char buf[46];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  IpAddress a;
  std::uint8_t v4[4];
  if (::inet_pton(AF_INET, buf, v4) == 1) {
    std::memcpy(a.bytes.data(), kMappedPrefix.data(), kMappedPrefix.size());
    std::memcpy(a.bytes.data() + 12, v4, 4);
    a.v4 = true;
    return a;
  }
  if (::inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return std::nullopt;
  a.v4 = std::memcmp(a.bytes.data(), kMappedPrefix.data(), kMappedPrefix.size()) == 0;
  return a;
}

std::string IpAddress::str() const {
  char buf[INET6_ADDRSTRLEN];
  const char* s = v4 ? ::inet_ntop(AF_INET, bytes.data() + 12, buf, sizeof buf)
                     : ::inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
  return s ? std::string(s) : std::string();
}

std::string IpNetwork::parse(std::string_view text, IpNetwork& out) {
  text = trim_space(text);
  const auto slash = text.find('/');
  const auto addr = IpAddress::parse(text.substr(0, slash));
  if (!addr) {
    return "'" + std::string(text.substr(0, slash)) + "' is not an IP address (a network is `10.0.0.0/8`, "
           "`2001:db8::/32` or one address)";
  }
  const int width = addr->v4 ? 32 : 128;
  int bits = width;
  if (slash != std::string_view::npos) {
    const auto len = text.substr(slash + 1);
    const auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), bits);
    if (len.empty() || ec != std::errc() || end != len.data() + len.size() || bits < 0 || bits > width) {
      return "'" + std::string(len) + "' is not a prefix length (0 to " + std::to_string(width) + ")";
    }
  }
  out.base = *addr;
  out.bits = bits;
  // Host bits set ("10.1.2.3/8") are ignored: the network is what the prefix names.
  return {};
}

bool IpNetwork::contains(const IpAddress& a) const {
  if (a.v4 != base.v4) return false;
  const int offset = base.v4 ? 96 : 0;  // the IPv4 bits are the mapped form's last 32
  const int total = offset + bits;
  const int full = total / 8;
  if (std::memcmp(a.bytes.data() + offset / 8, base.bytes.data() + offset / 8, full - offset / 8) != 0) return false;
  if (const int rest = total % 8; rest != 0) {
    const std::uint8_t mask = static_cast<std::uint8_t>(0xff << (8 - rest));
    if ((a.bytes[full] & mask) != (base.bytes[full] & mask)) return false;
  }
  return true;
}

bool TrustedProxies::trusts(const IpAddress& a) const {
  for (const auto& n : nets_) {
    if (n.contains(a)) return true;
  }
  return false;
}

std::string TrustedProxies::client(std::string_view peer, std::string_view forwarded_for) const {
  auto current = IpAddress::parse(peer);
  if (!current) return std::string(peer);
  if (nets_.empty() || forwarded_for.empty() || !trusts(*current)) return current->str();
  std::string_view rest = forwarded_for;
  while (trusts(*current) && !rest.empty()) {
    const auto comma = rest.rfind(',');
    const auto entry = trim_space(comma == std::string_view::npos ? rest : rest.substr(comma + 1));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(0, comma);
    if (entry.empty()) continue;  // "a, , b": an empty element (RFC 9110 list syntax)
    const auto next = parse_hop(entry);
    if (!next) break;
    current = next;
  }
  return current->str();
}

}  // namespace sluice
