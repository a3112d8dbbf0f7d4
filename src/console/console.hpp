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

}  // namespace sluice::console
