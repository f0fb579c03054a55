// Tests of the typed JSON readers (util layer, label unit): every wrong shape is an error that
// names the field, never an exception; deep nesting is refused before parsing.
#include "util/json_fields.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace tlr {
namespace {

using nlohmann::json;

TEST(ParseJson, RefusesDeepNestingWithoutRecursing) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  auto r = ParseJson(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested deeper than 64"), std::string::npos);
  // Inside an object member too, and unterminated.
  EXPECT_FALSE(ParseJson("{\"prompt\":" + std::string(100000, '[')).ok());
  // Exactly the limit is fine; brackets inside strings do not count.
  EXPECT_TRUE(ParseJson(std::string(64, '[') + std::string(64, ']')).ok());
  EXPECT_FALSE(ParseJson(std::string(65, '[') + std::string(65, ']')).ok());
  EXPECT_TRUE(ParseJson("{\"a\":\"" + std::string(1000, '[') + "\\\"[\"}").ok());
  EXPECT_EQ(JsonNestingDepth("[\"\\\\\",[[]]]", 100), 3);
}

TEST(ParseJson, RefusesInvalidText) {
  EXPECT_FALSE(ParseJson("").ok());
  EXPECT_FALSE(ParseJson("{\"a\":").ok());
  EXPECT_FALSE(ParseJson("nul").ok());
  EXPECT_TRUE(ParseJson("null").ok());
}

TEST(DumpJson, ReplacesInvalidUtf8InsteadOfThrowing) {
  json j = {{"path", std::string("/\xff")}};
  EXPECT_THROW((void)j.dump(), json::exception);  // what the handlers used to do
  EXPECT_EQ(DumpJson(j), "{\"path\":\"/\xEF\xBF\xBD\"}");
}

TEST(JsonFields, ReadsPresentFieldsAndKeepsDefaults) {
  json j = json::parse(R"({"n":3,"x":0.5,"b":true,"s":"hi","ids":[1,2],"lp":[-1.5,null],"nul":null})");
  int64_t n = 0, absent = 7;
  double x = 0;
  bool b = false;
  std::string s;
  std::vector<int32_t> ids;
  std::vector<float> lp;
  JsonFields f(j, "reply");
  f.Int("n", 0, 10, &n, kRequired).Int("absent", 0, 10, &absent).Int("nul", 0, 10, &absent).Number("x", 0, 1, &x);
  f.Bool("b", &b).String("s", &s).TokenIds("ids", 3, &ids).Numbers("lp", &lp, -9.0f);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(n, 3);
  EXPECT_EQ(absent, 7);
  EXPECT_EQ(x, 0.5);
  EXPECT_TRUE(b);
  EXPECT_EQ(s, "hi");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(lp, (std::vector<float>{-1.5f, -9.0f}));
  EXPECT_TRUE(f.Has("n"));
  EXPECT_FALSE(f.Has("nul"));
}

// Each reader given each wrong shape: an error naming the field; nothing thrown.
TEST(JsonFields, EveryWrongShapeIsAnErrorNamingTheField) {
  const std::vector<json> shapes = {json(nullptr), json(true),  json(1),           json(-1),
                                    json(1.5),     json("s"),   json::array(),     json::object(),
                                    json::array({"x"}), json(18446744073709551615ull), json::array({-1}),
                                    json::array({1.0})};
  for (const json& v : shapes) {
    json j = {{"k", v}};
    int64_t i = 0;
    double d = 0;
    bool b = false;
    std::string s;
    std::vector<int32_t> ids;
    std::vector<float> nums;
    const json* p = nullptr;
    auto check = [&](JsonFields& f, bool should_fail) {
      EXPECT_EQ(!f.ok(), should_fail) << v.dump();
      if (!f.ok()) {
        EXPECT_NE(f.status().message().find("'k'"), std::string::npos) << f.status().message();
      }
    };
    { JsonFields f(j); f.Int("k", 0, 10, &i, kRequired); check(f, !(v.is_number_integer() && v == 1)); }
    { JsonFields f(j); f.Number("k", 0, 10, &d, kRequired); check(f, !(v.is_number() && (v == 1 || v == 1.5))); }
    { JsonFields f(j); f.Bool("k", &b, kRequired); check(f, !v.is_boolean()); }
    { JsonFields f(j); f.String("k", &s, kRequired); check(f, !v.is_string()); }
    { JsonFields f(j); f.TokenIds("k", 5, &ids, kRequired); check(f, !(v.is_array() && v.empty())); }
    { JsonFields f(j); f.Numbers("k", &nums, 0, kRequired); check(f, !(v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); }))); }
    { JsonFields f(j); f.Array("k", &p, kRequired); check(f, !v.is_array()); }
    { JsonFields f(j); f.Object("k", &p, kRequired); check(f, !v.is_object()); }
  }
}

TEST(JsonFields, TokenIdsOutsideTheVocabularyAreRefused) {
  for (const char* text : {R"({"t":[0,5]})", R"({"t":[-1]})", R"({"t":[4294967296]})", R"({"t":[18446744073709551615]})"}) {
    std::vector<int32_t> ids;
    const json j = json::parse(text);
    JsonFields f(j, "reply");
    f.TokenIds("t", 5, &ids);
    ASSERT_FALSE(f.ok()) << text;
    EXPECT_NE(f.status().message().find("outside the vocabulary"), std::string::npos);
  }
}

TEST(JsonFields, FirstErrorWinsAndLaterReadsAreSkipped) {
  json j = {{"a", "x"}, {"b", 2}};
  int64_t a = 0, b = 0;
  JsonFields f(j, "req");
  f.Int("a", 0, 5, &a).Int("b", 0, 5, &b).Fail("later");
  EXPECT_EQ(f.status().message(), "req: 'a' must be an integer");
  EXPECT_EQ(b, 0);
  JsonFields range(j);
  range.Int("b", 3, 5, &b);
  EXPECT_EQ(range.status().message(), "'b' must be in 3..5");
  JsonFields missing(j);
  missing.String("c", nullptr, kRequired);
  EXPECT_EQ(missing.status().message(), "'c' is required");
  double d = 0;
  const json with_nan = {{"x", std::nan("")}};
  JsonFields nan(with_nan);
  nan.Number("x", 0, 1, &d);
  EXPECT_FALSE(nan.ok());
}

TEST(JsonFields, NonObjectFailsEveryRead) {
  for (const json& v : {json(nullptr), json::array(), json(3), json("s")}) {
    int64_t i = 0;
    JsonFields f(v, "the reply");
    f.Int("k", 0, 1, &i);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().message(), "the reply is not a JSON object");
    EXPECT_FALSE(f.Has("k"));
  }
}

}  // namespace
}  // namespace tlr
