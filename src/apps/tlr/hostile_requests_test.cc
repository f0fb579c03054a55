// Hostile requests to the real `tlr serve` and `tlr ui` processes on loopback: a path that is
// not UTF-8, a prompt nested 200k levels deep, chat content with a non-string type, a POST
// without Content-Length. Each gets its 4xx with a JSON error body, and the process still
// answers afterwards (before the fixes: exit 134, exit 139, a 500 and a request that waited
// for the connection to close).
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/tlr/child_process.h"
#include "apps/tlr/raw_http.h"
#include "util/test_support.h"

namespace tlr {
namespace {

const std::string kTlr = std::string(TLR_BIN_DIR) + "/tlr";

int PortOf(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

void ExpectAlive(ChildProcess& p, int port, const std::string& probe) {
  int status = 0;
  ASSERT_FALSE(p.Exited(&status)) << "the process died: "
                                  << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                          : "exit " + std::to_string(WEXITSTATUS(status)));
  EXPECT_EQ(Send(port, Get(probe)).status, 200) << probe;
}

TEST(HostileRequests, ServeAnswersEachWithA4xxAndKeepsServing) {
  ChildProcess serve;
  std::string url;
  ASSERT_TRUE(serve.Start(kTlr, {"serve", "-m", kDemo + "llm.gguf", "--port", "0", "-t", "1"}, &url));
  const int port = PortOf(url);

  // A path that is not UTF-8: the 404 body quotes it with U+FFFD.
  RawResponse r = Send(port, Get("/%FF%FE"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorCode(r), "not_found");
  ExpectAlive(serve, port, "/health");

  // Deep nesting in every body that is read: refused before anything recurses over it.
  // (POST /tlr/v1/sessions takes no options and never parses its body.)
  const std::string deep = Nested("[", "]", 200000);
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/completions", R"({"prompt":)" + deep + "}"},
           {"/v1/chat/completions", R"({"messages":[{"role":"user","content":)" + deep + "}]}"},
           {"/tlr/v1/next", R"({"session":"x","append":)" + deep + "}"}}) {
    r = Send(port, Post(path, body));
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(ErrorCode(r), "invalid_json") << path;
    EXPECT_NE(r.body.find("nested deeper than 64"), std::string::npos) << r.body;
    ExpectAlive(serve, port, "/health");
  }

  // Chat content parts with a type that is not a string: 400, not 500.
  for (const char* part : {R"({"type":5,"text":"hi"})", R"({"type":null,"text":"hi"})", R"({"type":"text","text":7})"}) {
    r = Send(port, Post("/v1/chat/completions",
                        std::string(R"({"max_tokens":1,"messages":[{"role":"user","content":[)") + part + "]}]}"));
    EXPECT_EQ(r.status, 400) << part;
    EXPECT_EQ(ErrorCode(r), "invalid_request_error") << part;
  }

  // A POST without Content-Length: the documented 400 at once, not a wait for the close.
  r = Send(port, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCode(r), "bad_http_request");
  ExpectAlive(serve, port, "/health");

  // Invalid UTF-8 inside a field the error message quotes.
  r = Send(port, Post("/v1/chat/completions", "{\"messages\":[{\"role\":\"\xff\xfe\",\"content\":\"x\"}]}"));
  EXPECT_EQ(r.status, 400);
  ExpectAlive(serve, port, "/health");
}

TEST(HostileRequests, UiAnswersEachWithA4xxAndKeepsServing) {
  ChildProcess ui;
  std::string url;
  ASSERT_TRUE(ui.Start(kTlr, {"ui", "--port", "0", "-t", "1", "--examples", "0"}, &url));
  const int port = PortOf(url);

  RawResponse r = Send(port, Get("/%FF"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorCode(r), "not_found");
  ExpectAlive(ui, port, "/api/info");

  r = Send(port, Post("/api/generate", R"({"prompt":)" + Nested("[", "]", 200000) + "}"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCode(r), "invalid_json");
  ExpectAlive(ui, port, "/api/info");

  r = Send(port, Post("/api/generate", R"({"prompt":"hi","temperature":"hot"})"));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("'temperature' must be a number"), std::string::npos) << r.body;

  r = Send(port, "POST /api/stop HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCode(r), "bad_http_request");
  ExpectAlive(ui, port, "/api/info");
}

}  // namespace
}  // namespace tlr
