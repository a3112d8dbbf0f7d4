#include "common/address.hpp"

#include <gtest/gtest.h>

namespace sluice {
namespace {

IpNetwork net(std::string_view s) {
  IpNetwork n;
  EXPECT_EQ(IpNetwork::parse(s, n), "") << s;
  return n;
}

bool in(std::string_view network, std::string_view addr) {
  const auto a = IpAddress::parse(addr);
  EXPECT_TRUE(a) << addr;
  return a && net(network).contains(*a);
}

TEST(Address, ParsesLiteralsOnly) {
  EXPECT_EQ(IpAddress::parse("10.0.0.1")->str(), "10.0.0.1");
  EXPECT_EQ(IpAddress::parse("[::1]")->str(), "::1");
  EXPECT_EQ(IpAddress::parse("2001:DB8::1")->str(), "2001:db8::1");
  EXPECT_EQ(IpAddress::parse("::ffff:192.0.2.7")->str(), "192.0.2.7");  // mapped: the v4 address
  EXPECT_TRUE(IpAddress::parse("::ffff:192.0.2.7")->v4);
  for (const char* bad : {"", "10.0.0", "10.0.0.1:80", "example.com", "10.0.0.256", "fe80::1%eth0", "unknown", "[::1"}) {
    EXPECT_FALSE(IpAddress::parse(bad)) << bad;
  }
}

TEST(Address, NetworksContainTheirPrefix) {
  EXPECT_TRUE(in("10.0.0.0/8", "10.255.1.2"));
  EXPECT_FALSE(in("10.0.0.0/8", "11.0.0.1"));
  EXPECT_TRUE(in("192.168.4.0/22", "192.168.7.255"));
  EXPECT_FALSE(in("192.168.4.0/22", "192.168.8.0"));
  EXPECT_TRUE(in("127.0.0.1", "127.0.0.1"));
  EXPECT_FALSE(in("127.0.0.1", "127.0.0.2"));
  EXPECT_TRUE(in("0.0.0.0/0", "203.0.113.9"));
  EXPECT_FALSE(in("0.0.0.0/0", "::1"));  // v4 networks hold v4 addresses only
  EXPECT_TRUE(in("10.0.0.0/8", "::ffff:10.1.1.1"));
  EXPECT_TRUE(in("2001:db8::/32", "2001:db8:ffff::1"));
  EXPECT_FALSE(in("2001:db8::/33", "2001:db8:8000::1"));
  EXPECT_TRUE(in("::/0", "fe80::1"));
  EXPECT_TRUE(in("10.1.2.3/8", "10.9.9.9"));  // host bits ignored
}

TEST(Address, BadNetworksSayWhy) {
  IpNetwork n;
  EXPECT_NE(IpNetwork::parse("10.0.0.0/33", n).find("prefix length (0 to 32)"), std::string::npos);
  EXPECT_NE(IpNetwork::parse("::/129", n).find("0 to 128"), std::string::npos);
  EXPECT_NE(IpNetwork::parse("10.0.0.0/", n).find("prefix length"), std::string::npos);
  EXPECT_NE(IpNetwork::parse("10.0.0.0/8x", n).find("prefix length"), std::string::npos);
  EXPECT_NE(IpNetwork::parse("lb.internal/24", n).find("not an IP address"), std::string::npos);
}

TEST(Address, ClientIsThePeerUnlessATrustedProxyVouches) {
  const TrustedProxies none;
  EXPECT_EQ(none.client("10.0.0.5", "203.0.113.1"), "10.0.0.5");  // nothing trusted: the header is ignored
  const TrustedProxies lb{{net("10.0.0.0/8"), net("::1")}};
  EXPECT_EQ(lb.client("10.0.0.5", "203.0.113.1"), "203.0.113.1");
  EXPECT_EQ(lb.client("10.0.0.5", ""), "10.0.0.5");
  EXPECT_EQ(lb.client("192.0.2.9", "203.0.113.1"), "192.0.2.9");  // an untrusted peer cannot claim another address
  // Rightmost first; hops through trusted proxies are skipped; what the client itself
  // wrote at the left is never reached.
  EXPECT_EQ(lb.client("10.0.0.5", "1.1.1.1, 203.0.113.1, 10.0.0.7"), "203.0.113.1");
  EXPECT_EQ(lb.client("::1", "1.1.1.1,203.0.113.1"), "203.0.113.1");
  EXPECT_EQ(lb.client("10.0.0.5", "10.0.0.8, 10.0.0.7"), "10.0.0.8");  // all trusted: the leftmost
  EXPECT_EQ(lb.client("10.0.0.5", "garbage, 203.0.113.1"), "203.0.113.1");
  EXPECT_EQ(lb.client("10.0.0.5", "203.0.113.1, garbage"), "10.0.0.5");  // a hop that is no address stops the walk
  EXPECT_EQ(lb.client("10.0.0.5", " , 203.0.113.1 , "), "203.0.113.1");
  EXPECT_EQ(lb.client("::ffff:10.0.0.5", "2001:db8::7"), "2001:db8::7");
  // Elements with a port, as some proxies write them.
  EXPECT_EQ(lb.client("10.0.0.5", "203.0.113.1:4711"), "203.0.113.1");
  EXPECT_EQ(lb.client("10.0.0.5", "[2001:db8::9]:443, 10.0.0.7:80"), "2001:db8::9");
  EXPECT_EQ(lb.client("10.0.0.5", "203.0.113.1:port"), "10.0.0.5");
  EXPECT_EQ(lb.client("10.0.0.5", "2001:db8::9:443"), "2001:db8::9:443");  // a bare IPv6 address: no port
}

}  // namespace
}  // namespace sluice
