// The console's files as the gateway serves them (console/console.hpp).
#include <gtest/gtest.h>

#include <string>

#include "console/console.hpp"

using sluice::console::Reply;
using sluice::console::serve;

namespace {

std::string header(const Reply& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

}  // namespace

TEST(Console, ServesTheEmbeddedFiles) {
  const Reply index = serve("GET", "/console/", "", false);
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.content_type, "text/html; charset=utf-8");
  EXPECT_NE(index.body.find("<script type=\"module\" src=\"app.js\">"), std::string::npos);
  EXPECT_EQ(serve("GET", "/console/index.html", "", false).body, index.body);
  const Reply js = serve("HEAD", "/console/app.js", "", false);
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(js.body.find("textContent"), std::string::npos);
  EXPECT_EQ(serve("GET", "/console/style.css", "", false).content_type, "text/css; charset=utf-8");
  // Every reply, errors included, carries the policy.
  for (const Reply& r : {index, js, serve("GET", "/console/x", "", false), serve("PUT", "/console/", "", false)}) {
    EXPECT_NE(header(r, "Content-Security-Policy").find("script-src 'self'"), std::string::npos);
    EXPECT_EQ(header(r, "X-Content-Type-Options"), "nosniff");
  }
}

TEST(Console, ConditionalRequests) {
  const Reply index = serve("GET", "/console/", "", false);
  const std::string etag = header(index, "ETag");
  ASSERT_EQ(etag.size(), 22u) << etag;  // 20 hex digits, quoted
  EXPECT_EQ(serve("GET", "/console/", etag, false).status, 304);
  EXPECT_TRUE(serve("GET", "/console/", etag, false).body.empty());
  EXPECT_EQ(serve("GET", "/console/", "\"other\", W/" + etag, false).status, 304) << "a list, weak form";
  EXPECT_EQ(serve("GET", "/console/", " \"other\" ,  " + etag + " ", false).status, 304);
  EXPECT_EQ(serve("GET", "/console/", "*", false).status, 304);
  EXPECT_EQ(serve("GET", "/console/", "\"other\"", false).status, 200);
  EXPECT_EQ(serve("GET", "/console/", etag.substr(0, 10), false).status, 200);
  EXPECT_NE(header(serve("GET", "/console/app.js", "", false), "ETag"), etag) << "one per file";
}

TEST(Console, RedirectsRefusesAndTellsTheListener) {
  const Reply moved = serve("GET", "/console", "", false);
  EXPECT_EQ(moved.status, 308);
  EXPECT_EQ(header(moved, "Location"), "/console/");
  EXPECT_EQ(serve("GET", "/console/nope.js", "", false).status, 404);
  EXPECT_EQ(serve("GET", "/console/../admin/keys", "", false).status, 404);
  EXPECT_EQ(serve("GET", "/consoles", "", false).status, 404);
  const Reply post = serve("POST", "/console/", "", false);
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(header(post, "Allow"), "GET, HEAD");
  EXPECT_EQ(serve("GET", "/console/env.json", "", true).body, R"({"listener":"admin"})");
  EXPECT_EQ(serve("GET", "/console/env.json", "", false).body, R"({"listener":"main"})");
}

TEST(Console, ForeignBrowsersOnTheAdminListener) {
  using sluice::console::foreign_browser;
  // Not a browser: curl, Prometheus, probes (whatever the Host).
  EXPECT_FALSE(foreign_browser("", "sluice-admin.svc:9090", "", ""));
  EXPECT_FALSE(foreign_browser("", "", "", ""));
  // The console's own pages and fetches, at an address.
  EXPECT_FALSE(foreign_browser("", "127.0.0.1:8081", "none", "navigate"));
  EXPECT_FALSE(foreign_browser("http://127.0.0.1:8081", "127.0.0.1:8081", "same-origin", "cors"));
  EXPECT_FALSE(foreign_browser("", "localhost:8081", "same-origin", "cors"));
  EXPECT_FALSE(foreign_browser("http://[::1]:8081", "[::1]:8081", "same-origin", "cors"));
  EXPECT_FALSE(foreign_browser("", "10.0.0.7", "same-origin", "cors"));
  // Another site's page.
  EXPECT_TRUE(foreign_browser("https://evil.example", "127.0.0.1:8081", "", ""));
  EXPECT_TRUE(foreign_browser("", "127.0.0.1:8081", "cross-site", "no-cors"));
  EXPECT_TRUE(foreign_browser("", "127.0.0.1:8081", "same-site", "cors"));
  EXPECT_TRUE(foreign_browser("http://127.0.0.1:8081", "127.0.0.1:9999", "", "cors"));
  EXPECT_TRUE(foreign_browser("null", "127.0.0.1:8081", "", "cors"));
  // A name pointed here (DNS rebinding): same origin as far as the browser knows.
  EXPECT_TRUE(foreign_browser("http://evil.example:8081", "evil.example:8081", "same-origin", "cors"));
  EXPECT_TRUE(foreign_browser("", "evil.example", "", "navigate"));
  EXPECT_TRUE(foreign_browser("", "127.0.0.1.evil.example:8081", "same-origin", "cors"));
  EXPECT_TRUE(foreign_browser("", "[::1", "same-origin", "cors"));
  EXPECT_TRUE(foreign_browser("", ":8081", "same-origin", "cors"));
}
