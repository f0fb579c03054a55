// Metrics (net layer): counters, gauges and histograms with labels, rendered in the
// Prometheus text exposition format (version 0.0.4) for the server's /metrics. Thread-safe;
// an update is one short critical section, so handlers and the batch loop can all record.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tlr {

class Metrics {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Declares a metric (help text and, for histograms, the bucket upper bounds). Updating an
  // undeclared name declares it without help.
  void DeclareCounter(const std::string& name, const std::string& help);
  void DeclareGauge(const std::string& name, const std::string& help);
  void DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  void Add(const std::string& name, double v, const Labels& labels = {});
  void Set(const std::string& name, double v, const Labels& labels = {});
  void Observe(const std::string& name, double v, const Labels& labels = {});

  // Current value of a counter or gauge (0 if never set); for tests and summaries.
  double Value(const std::string& name, const Labels& labels = {}) const;
  // Histogram sample count and per-bucket (non-cumulative) counts.
  struct HistogramSnapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // bounds.size() + 1 (the last is +Inf)
    uint64_t count = 0;
    double sum = 0;
  };
  HistogramSnapshot Histogram(const std::string& name, const Labels& labels = {}) const;

  std::string RenderPrometheus() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Series {
    double value = 0;
    std::vector<uint64_t> buckets;
    uint64_t count = 0;
    double sum = 0;
  };
  struct Family {
    Kind kind = Kind::kCounter;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // key: rendered label set
  };
  Family& Get(const std::string& name, Kind kind);
  static std::string LabelKey(const Labels& labels);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

}  // namespace tlr
