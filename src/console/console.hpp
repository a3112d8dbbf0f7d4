#pragma once
// The web console (docs/console.md): static files built into the binary, served under
// /console/. The page holds no data; everything it shows it reads from /admin/, /metrics,
// /infra and /history with the admin or viewer key the operator signs in with (kept in the
// tab's session storage), or with none on the admin listener.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::console {

struct Reply {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// GET or HEAD of `path` ("/console", "/console/", "/console/app.js"...). `if_none_match`:
// the request's If-None-Match (a 304 when it names the file's ETag). `/console/env.json`
// tells the page which listener serves it (`admin_listener`: the one that asks no key).
Reply serve(std::string_view method, std::string_view path, std::string_view if_none_match, bool admin_listener);

// Whether a request on the admin listener (which asks no key) comes from a browser it must
// refuse: one sent by another site's page (Sec-Fetch-Site cross-site or same-site, or an
// Origin that is not this listener's), or one addressed by a host name rather than an IP
// address or localhost (a page of another site whose name was pointed here, DNS
// rebinding). Clients that are not browsers (curl, Prometheus, probes) send none of these
// headers and are never refused.
bool foreign_browser(std::string_view origin, std::string_view host, std::string_view fetch_site,
                     std::string_view fetch_mode);

}  // namespace sluice::console
