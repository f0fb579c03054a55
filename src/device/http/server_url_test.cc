// ParseServerUrl and DiagnoseConnection (server_url.h).
#include "device/http/server_url.h"

#include <gtest/gtest.h>

namespace tlr {
namespace {

TEST(ServerUrl, TrailingSlashesAndPathsAreKeptApart) {
  auto u = ParseServerUrl("http://127.0.0.1:8080/");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->Origin(), "http://127.0.0.1:8080");
  EXPECT_EQ(u->prefix, "");
  EXPECT_EQ(u->ToString(), "http://127.0.0.1:8080");
  u = ParseServerUrl("https://example.com/llm/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->prefix, "/llm");
  EXPECT_EQ(u->ToString(), "https://example.com:443/llm");
  u = ParseServerUrl("http://gpu-box");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 80);
  u = ParseServerUrl("http://[::1]:9000/a/b//");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "[::1]");
  EXPECT_EQ(u->port, 9000);
  EXPECT_EQ(u->prefix, "/a/b");
}

TEST(ServerUrl, BadUrlsSayWhatIsWrong) {
  const struct {
    const char* url;
    const char* says;
  } cases[] = {
      {"ftp://x", "must start with http"},       {"127.0.0.1:8080", "must start with http"},
      {"http://", "host is empty"},              {"http://:80", "host is empty"},
      {"http://h:", "port after ':' is missing"}, {"http://h:99999", "not a number in 1..65535"},
      {"http://h:8o", "not a number"},           {"http://h/?a=1", "query or fragment"},
      {"http://h/#x", "query or fragment"},      {"http://u:p@h", "credentials"},
      {"http://h /x", "space"},                  {"http://[::1", "closing ']'"},
      {"http://h/a//b", "empty segment"},
  };
  for (const auto& c : cases) {
    auto u = ParseServerUrl(c.url);
    ASSERT_FALSE(u.ok()) << c.url;
    EXPECT_NE(u.status().message().find(c.says), std::string::npos) << c.url << ": " << u.status().message();
  }
}

TEST(ServerUrl, DiagnosisNamesARefusedConnectionAndAnUnknownHost) {
  auto u = ParseServerUrl("http://127.0.0.1:1");  // tcpmux: nothing listens there
  ASSERT_TRUE(u.ok());
  EXPECT_NE(DiagnoseConnection(*u, 1).find("connection refused"), std::string::npos) << DiagnoseConnection(*u, 1);
  EXPECT_FALSE(SpeaksPlainHttp(*u, 1));
  u = ParseServerUrl("http://no-such-host.invalid:80");
  ASSERT_TRUE(u.ok());
  EXPECT_NE(DiagnoseConnection(*u, 1).find("not resolved"), std::string::npos) << DiagnoseConnection(*u, 1);
}

}  // namespace
}  // namespace tlr
