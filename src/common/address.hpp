#pragma once
// Client addresses behind proxies: networks (CIDR) an operator trusts, and the client a
// request came from, read from X-Forwarded-For only as far as those proxies vouch for it.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// An IPv4 or IPv6 address; IPv4 is kept as its IPv4-mapped IPv6 form (::ffff:a.b.c.d), so
// that a v4 client on a dual-stack listener and its plain v4 spelling are one address.
struct IpAddress {
  std::array<std::uint8_t, 16> bytes{};
  bool v4 = false;

  // A literal: "10.0.0.1", "::1", "[::1]", "::ffff:10.0.0.1" (taken as 10.0.0.1). Nothing
  // else (no port, no zone, no host name).
  static std::optional<IpAddress> parse(std::string_view text);
  std::string str() const;  // canonical text: "10.0.0.1", "2001:db8::1"
  bool operator==(const IpAddress&) const = default;
};

// "10.0.0.0/8", "2001:db8::/32", or an address alone (its own /32 or /128).
struct IpNetwork {
  IpAddress base;
  int bits = 0;  // prefix length, over the address's own width (32 for IPv4)

  // Empty error on success; else why `text` is not a network.
  static std::string parse(std::string_view text, IpNetwork& out);
  bool contains(const IpAddress& a) const;
  bool operator==(const IpNetwork&) const = default;
};

class TrustedProxies {
 public:
  TrustedProxies() = default;
  explicit TrustedProxies(std::vector<IpNetwork> nets) : nets_(std::move(nets)) {}
  bool empty() const { return nets_.empty(); }
  bool trusts(const IpAddress& a) const;

  // The client of a request that arrived from `peer` (the connection's address) with
  // `forwarded_for` (X-Forwarded-For, every line joined with ", "). The list is read from
  // its right end, each hop only while the address that added it is trusted: the first
  // untrusted address is the client. An entry that is not an address stops the walk at
  // the last address known (a client can write anything at the list's left end); an
  // element may carry a port ("192.0.2.1:4711", "[2001:db8::1]:4711"). With no
  // trusted proxy, or a peer that is not one, the peer is the client.
  std::string client(std::string_view peer, std::string_view forwarded_for) const;

 private:
  std::vector<IpNetwork> nets_;
};

}  // namespace sluice
