#include "console/console.hpp"

#include "assets.hpp"

namespace sluice::console {
namespace {

constexpr std::string_view kPrefix = "/console/";

// The page's own scripts and styles only: no inline script, nothing from another origin,
// never framed (the console holds an admin key while it is open).
void harden(Reply& r) {
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                         "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
}

Reply text(int status, std::string body) {
  Reply r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  harden(r);
  return r;
}

// ETags in If-None-Match: a list, `*`, weak ones (W/"...").
bool matches(std::string_view if_none_match, std::string_view etag) {
  while (!if_none_match.empty()) {
    const auto comma = if_none_match.find(',');
    std::string_view one = if_none_match.substr(0, comma);
    while (!one.empty() && (one.front() == ' ' || one.front() == '\t')) one.remove_prefix(1);
    while (!one.empty() && (one.back() == ' ' || one.back() == '\t')) one.remove_suffix(1);
    if (one.starts_with("W/")) one.remove_prefix(2);
    if (one == "*" || one == etag) return true;
    if (comma == std::string_view::npos) break;
    if_none_match.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

Reply serve(std::string_view method, std::string_view path, std::string_view if_none_match, bool admin_listener) {
  if (method != "GET" && method != "HEAD") {
    Reply r = text(405, "use GET for the console\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  if (path == "/console") {  // the files' links are relative to /console/
    Reply r = text(308, "");
    r.headers.emplace_back("Location", std::string(kPrefix));
    return r;
  }
  if (!path.starts_with(kPrefix)) return text(404, "not found\n");
  std::string_view name = path.substr(kPrefix.size());
  if (name.empty()) name = "index.html";
  if (name == "env.json") {
    Reply r;
    r.content_type = "application/json";
    r.body = admin_listener ? R"({"listener":"admin"})" : R"({"listener":"main"})";
    r.headers.emplace_back("Cache-Control", "no-store");
    harden(r);
    return r;
  }
  for (const Asset& a : assets()) {
    if (a.name != name) continue;
    Reply r;
    r.content_type = std::string(a.content_type);
    r.headers.emplace_back("ETag", std::string(a.etag));
    // Checked again on every load (a new build serves new files at once), sent again only
    // when changed.
    r.headers.emplace_back("Cache-Control", "no-cache");
    harden(r);
    if (matches(if_none_match, a.etag)) {
      r.status = 304;
      return r;
    }
    r.body = std::string(a.body);
    return r;
  }
  return text(404, "no such console file\n");
}

bool foreign_browser(std::string_view origin, std::string_view host, std::string_view fetch_site,
                     std::string_view fetch_mode) {
  if (fetch_site == "cross-site" || fetch_site == "same-site") return true;
  if (origin.empty() && fetch_mode.empty() && fetch_site.empty()) return false;  // not a browser
  if (!origin.empty()) {
    const auto scheme = origin.find("://");
    if (scheme == std::string_view::npos || origin.substr(scheme + 3) != host) return true;
  }
  // The host without its port: an IPv6 literal, an IPv4 literal or localhost.
  if (host.starts_with('[')) return host.find(']') == std::string_view::npos;
  const std::string_view name = host.substr(0, host.rfind(':'));
  if (name == "localhost") return false;
  if (name.empty()) return true;
  for (char c : name) {
    if (!(c == '.' || (c >= '0' && c <= '9'))) return true;
  }
  return false;
}

}  // namespace sluice::console
