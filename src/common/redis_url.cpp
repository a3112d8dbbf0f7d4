#include "common/redis_url.hpp"

#include <charconv>

#include "common/text.hpp"

namespace sluice {

namespace {

std::optional<int> to_int(std::string_view s, long long max) {
  long long v = 0;
  if (s.empty() || s.size() > 12) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > max) return std::nullopt;
  return static_cast<int>(v);
}

// host[:port], [IPv6][:port]: an error, or "" with `out` set.
std::string parse_host(std::string_view authority, std::uint16_t default_port, RedisHost& out) {
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return "unclosed '[' in the host";
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "unexpected text after ']'";
      port = after.substr(1);
      if (port.empty()) return "bad port ''";
    }
  } else {
    const auto colon = authority.find(':');
    if (colon != std::string_view::npos && authority.find(':', colon + 1) != std::string_view::npos) {
      return "IPv6 addresses must be written in brackets: redis://[::1]:6379";
    }
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return "bad port ''";
    }
  }
  if (out.host.empty()) return "missing host";
  out.port = default_port;
  if (!port.empty()) {
    auto p = to_int(port, 65535);
    if (!p || *p == 0) return "bad port '" + std::string(port) + "'";
    out.port = static_cast<std::uint16_t>(*p);
  }
  return "";
}

}  // namespace

std::optional<RedisEndpoint> parse_redis_url(std::string_view url, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<RedisEndpoint> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  const auto sep = url.find("://");
  if (sep == std::string_view::npos) return fail("expected redis://[[user]:password@]host[:port][/db]");
  std::string scheme(url.substr(0, sep));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme == "rediss") return fail("rediss:// (TLS) is not supported yet; use redis://");
  if (scheme != "redis" && scheme != "redis-sentinel" && scheme != "redis-cluster") {
    return fail("unsupported scheme '" + scheme + "://': expected redis://, redis-sentinel:// or redis-cluster://");
  }
  std::string_view rest = url.substr(sep + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) return fail("query parameters are not supported");

  RedisEndpoint ep;
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);

  // The password may contain '@' unencoded: the host starts after the last one.
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view info = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = info.find(':');
    if (colon == std::string_view::npos) {
      return fail("user without a password; for a password alone write redis://:password@host");
    }
    if (!percent_decode(info.substr(0, colon), ep.username, false) ||
        !percent_decode(info.substr(colon + 1), ep.password, false)) {
      return fail("bad percent-encoding in the user or password");
    }
  }

  // host[:port][,host[:port]...] into `out`.
  auto host_list = [&](std::uint16_t default_port, std::vector<RedisHost>& out) -> std::string {
    while (!authority.empty()) {
      const auto comma = authority.find(',');
      RedisHost h;
      if (auto e = parse_host(authority.substr(0, comma), default_port, h); !e.empty()) return e;
      out.push_back(std::move(h));
      if (comma == std::string_view::npos) break;
      authority.remove_prefix(comma + 1);
      if (authority.empty()) return "missing host after ','";
    }
    return "";
  };
  if (scheme == "redis-cluster") {
    if (authority.empty()) return fail("missing cluster node host");
    if (auto e = host_list(6379, ep.cluster); !e.empty()) return fail(std::move(e));
    if (!path.empty() && path != "0") return fail("a Redis Cluster has only database 0: drop '/" + std::string(path) + "'");
    return ep;
  }
  const bool sentinel = scheme == "redis-sentinel";
  if (sentinel) {
    if (authority.empty()) return fail("missing sentinel host");
    if (auto e = host_list(26379, ep.sentinels); !e.empty()) return fail(std::move(e));
    const auto next = path.find('/');
    ep.master = std::string(path.substr(0, next));
    if (ep.master.empty()) return fail("missing master name: redis-sentinel://host:26379/<master>[/db]");
    path = next == std::string_view::npos ? std::string_view{} : path.substr(next + 1);
  } else {
    RedisHost h;
    if (auto e = parse_host(authority, 6379, h); !e.empty()) return fail(std::move(e));
    ep.host = std::move(h.host);
    ep.port = h.port;
  }
  if (!path.empty()) {
    auto db = to_int(path, 1'000'000);
    if (!db) return fail("bad database number '" + std::string(path) + "'");
    ep.db = *db;
  }
  return ep;
}

std::string describe(const RedisEndpoint& ep) {
  std::string s = ep.tls                    ? "rediss://"
                  : !ep.cluster.empty()     ? "redis-cluster://"
                  : !ep.sentinels.empty()   ? "redis-sentinel://"
                                            : "redis://";
  if (!ep.username.empty() || !ep.password.empty()) {
    s += ep.username;
    if (!ep.password.empty()) s += ":***";
    s += '@';
  }
  auto host = [&](const std::string& h, std::uint16_t port) {
    const bool v6 = h.find(':') != std::string::npos;
    if (v6) s += '[';
    s += h;
    if (v6) s += ']';
    s += ':' + std::to_string(port);
  };
  if (!ep.cluster.empty()) {
    for (std::size_t i = 0; i < ep.cluster.size(); ++i) {
      if (i) s += ',';
      host(ep.cluster[i].host, ep.cluster[i].port);
    }
    return s;
  }
  if (ep.sentinels.empty()) {
    host(ep.host, ep.port);
  } else {
    for (std::size_t i = 0; i < ep.sentinels.size(); ++i) {
      if (i) s += ',';
      host(ep.sentinels[i].host, ep.sentinels[i].port);
    }
    s += '/' + ep.master;
  }
  s += '/' + std::to_string(ep.db);
  return s;
}

}  // namespace sluice
