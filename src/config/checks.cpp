// Text-level validators and formatting shared by every section of the loader: YAML values
// and environment variables are checked by the same functions. Each check returns "" when
// the value is fine, else the message of the error.
#include "config/checks.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

#include "common/text.hpp"

namespace sluice::config::detail {

// ---------------------------------------------------------------------------------------
// Text-level validators, shared by YAML values and environment variables. Each returns ""
// when the value is fine, else the message of the error.

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string q(std::string_view s) {
  // Values echoed in messages are cut short and stripped of control characters.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
  }
  if (s.size() > 80) out += "...";
  out += "'";
  return out;
}

std::string fmt_num(double v) {
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 1e16) {
    return std::to_string(static_cast<long long>(v));
  }
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string fmt_duration(Millis d) {
  const auto ms = d.count();
  if (ms != 0 && ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms != 0 && ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

bool parse_i64(std::string_view s, long long& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string range_msg(long long lo, long long hi, std::string_view got) {
  if (hi == kMaxI64) return "out of range: must be at least " + std::to_string(lo) + ", got " + std::string(got);
  return "out of range: must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
         ", got " + std::string(got);
}

std::string check_int(std::string_view s, long long lo, long long hi, long long& out) {
  if (!parse_i64(s, out)) return "expected an integer, got " + q(s);
  if (out < lo || out > hi) return range_msg(lo, hi, s);
  return {};
}

std::string check_double(std::string_view s, double lo, double hi, double& out) {
  std::string_view t = s;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !std::isfinite(out)) {
    return "expected a number, got " + q(s);
  }
  if (out < lo || out > hi) {
    return "out of range: must be between " + fmt_num(lo) + " and " + fmt_num(hi) + ", got " +
           std::string(s);
  }
  return {};
}

std::string check_bool(std::string_view s, bool& out) {
  std::string l(s);
  for (auto& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (l == "true") { out = true; return {}; }
  if (l == "false") { out = false; return {}; }
  return "expected a boolean (true or false), got " + q(s);
}

constexpr const char* kDurationHelp =
    "expected a duration like 250ms, 5s, 10m or 1h (a bare integer means milliseconds)";

std::string check_duration(std::string_view s, Millis min, Millis& out) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  const std::string_view digits = s.substr(0, i), unit = s.substr(i);
  std::uint64_t n = 0;
  if (digits.empty() || !sluice::parse_u64(digits, n)) return std::string(kDurationHelp) + ", got " + q(s);
  std::uint64_t mult = 0;
  if (unit.empty() || unit == "ms") mult = 1;
  else if (unit == "s") mult = 1000;
  else if (unit == "m") mult = 60'000;
  else if (unit == "h") mult = 3'600'000;
  else return std::string(kDurationHelp) + ", got " + q(s);
  // Cap at about 100 years; more is surely a mistake and would overflow time arithmetic.
  constexpr std::uint64_t kMaxMs = 100ull * 365 * 24 * 3'600'000;
  if (n > kMaxMs / mult) return "duration too long: " + q(s);
  out = Millis(static_cast<Millis::rep>(n * mult));
  if (out < min) {
    return min.count() == 1 ? "must be greater than 0, got " + std::string(s)
                            : "must be at least " + fmt_duration(min) + ", got " + std::string(s);
  }
  return {};
}

bool has_space_or_ctl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return c <= 0x20 || c == 0x7f;
  });
}

bool has_ctl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return c < 0x20 || c == 0x7f;
  });
}

// Names that appear in logs and metric labels (key names, tenants, tiers).
std::string check_ident(std::string_view s) {
  if (s.empty()) return "must not be empty";
  if (s.size() > 128) return "too long (at most 128 characters)";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '@' || c == '/')) {
      return "invalid character in " + q(s) + " (allowed: letters, digits and . _ - : @ /)";
    }
  }
  return {};
}

// Secrets: never echoed back in a message.
std::string check_secret(std::string_view s) {
  if (s.empty()) return "secret must not be empty";
  if (s.size() > 4096) return "secret too long (at most 4096 characters)";
  if (has_space_or_ctl(s) || std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) > 0x7e; })) {
    return "secret must be printable ASCII without spaces";
  }
  return {};
}

// An environment variable's name as errors show it. A secret pasted where a variable's
// name belongs must not reach a log or /infra (a reload's error is shown there): only a
// conventional name (upper case, digits, '_', at most 64) is echoed.
std::string env_name_for_error(std::string_view s) {
  const bool conventional = !s.empty() && s.size() <= 64 && !std::isdigit(static_cast<unsigned char>(s.front())) &&
                            std::all_of(s.begin(), s.end(), [](char c) {
                              return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
                            });
  return conventional ? std::string(s) : "(not shown: it does not look like a variable name; is it a secret?)";
}

// A client API key's secret: also long enough not to be guessed. The message names the
// key (`name`), never the secret.
std::string check_key_secret(std::string_view s, std::string_view name) {
  auto e = check_secret(s);
  if (e.empty() && s.size() < kMinKeySecretLength) {
    e = "secret too short (" + std::to_string(s.size()) + " characters; at least " +
        std::to_string(kMinKeySecretLength) + " are required)";
  }
  if (e.empty() || name.empty()) return e;
  return "key " + q(name) + ": " + e;
}

std::string check_env_name(std::string_view s) {
  const bool ok = !s.empty() && !std::isdigit(static_cast<unsigned char>(s.front())) &&
                  std::all_of(s.begin(), s.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                  });
  return ok ? std::string() : "invalid environment variable name " + env_name_for_error(s);
}

std::string check_host(std::string_view h) {
  if (h.empty()) return "host must not be empty";
  if (has_space_or_ctl(h) || h.find_first_of("/?#@[]") != std::string_view::npos) {
    return "invalid host " + q(h);
  }
  return {};
}

// The address to listen on: an IP literal (what the server binds without resolving
// anything), or "localhost", taken as 127.0.0.1. Rewrites "localhost" in place.
std::string check_listen_host(std::string& h) {
  if (h == "localhost") {
    h = "127.0.0.1";
    return {};
  }
  unsigned char addr[16];
  if (::inet_pton(AF_INET, h.c_str(), addr) == 1 || ::inet_pton(AF_INET6, h.c_str(), addr) == 1) return {};
  return "listen host must be an IP address (e.g. 127.0.0.1, 0.0.0.0 or [::]) or localhost; got " + q(h) +
         " (host names are not resolved)";
}

// "host:port" or "[v6]:port" to listen on; the host is stored without brackets.
std::string check_host_port(std::string_view s, std::string& host, std::uint16_t& port) {
  std::string_view h, p;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return "expected host:port (IPv6 as [addr]:port), got " + q(s);
    }
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
    if (h.empty()) return "host must not be empty";
  } else {
    const auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return "expected host:port, got " + q(s);
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) {
      return "IPv6 addresses must be in brackets, e.g. [::1]:8080; got " + q(s);
    }
    if (auto e = check_host(h); !e.empty()) return e;
  }
  long long v = 0;
  if (auto e = check_int(p, 0, 65535, v); !e.empty()) return "port " + e;
  std::string parsed(h);
  if (auto e = check_listen_host(parsed); !e.empty()) return e;
  host = std::move(parsed);
  port = static_cast<std::uint16_t>(v);
  return {};
}

// http(s)://host[:port][/path]; fills tls, host, port, path_prefix.
std::string check_url(std::string_view s, Backend& b) {
  const auto sep = s.find("://");
  if (sep == std::string_view::npos) return "expected an http:// or https:// URL, got " + q(s);
  std::string scheme(s.substr(0, sep));
  for (auto& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  bool tls = false;
  std::uint16_t port = 80;
  if (scheme == "https") { tls = true; port = 443; }
  else if (scheme != "http") return "unsupported URL scheme " + q(scheme) + " (expected http:// or https://)";
  std::string_view rest = s.substr(sep + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) return "URL must not contain a query or fragment";
  if (has_space_or_ctl(rest)) return "URL must not contain spaces or control characters";
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return "URL must not contain credentials (user:password@); use api_key or api_key_env";
  }
  std::string_view host, port_text;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return "unterminated IPv6 address in URL";
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "unexpected text after the IPv6 address in URL";
      port_text = after.substr(1);
      if (port_text.empty()) return "empty port in URL";
    }
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return "empty port in URL";
    }
    if (host.find_first_of("[]") != std::string_view::npos) return "invalid host in URL";
  }
  if (host.empty()) return "URL has no host";
  if (!port_text.empty()) {
    long long v = 0;
    if (auto e = check_int(port_text, 1, 65535, v); !e.empty()) return "URL port " + e;
    port = static_cast<std::uint16_t>(v);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  b.tls = tls;
  b.host = std::string(host);
  b.port = port;
  b.path_prefix = std::string(path);
  return {};
}

// A webhook URL: like a backend URL, but a query is allowed (some receivers carry a token
// in it). Fills `b` from the part before the query.
std::string check_webhook_url(std::string_view s, Backend& b) {
  const auto qm = s.find('?');
  if (qm != std::string_view::npos) {
    const std::string_view query = s.substr(qm + 1);
    if (query.find('#') != std::string_view::npos) return "URL must not contain a fragment";
    if (has_space_or_ctl(query)) return "URL must not contain spaces or control characters";
  }
  return check_url(s.substr(0, qm), b);
}

std::string env_model_var(std::string_view alias) {
  std::string out = "SLUICE_MODEL_";
  for (char ch : alias) {
    const unsigned char c = static_cast<unsigned char>(ch);
    out.push_back(std::isalnum(c) ? static_cast<char>(std::toupper(c)) : '_');
  }
  out += "_API_KEY";
  return out;
}

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string host_for_display(const std::string& h) {
  return h.find(':') != std::string::npos ? "[" + h + "]" : h;
}

}  // namespace sluice::config::detail
