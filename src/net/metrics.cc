// Metrics registry and Prometheus text rendering (see metrics.h).
#include "net/metrics.h"

#include <algorithm>
#include <cstdio>

namespace tlr {

namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Num(double v) {
  char b[40];
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 1e15 && v > -1e15) {
    std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(b, sizeof b, "%.9g", v);
  }
  return b;
}

// Adds one label to a rendered key "{a="x"}" -> "{a="x",le="0.5"}".
std::string WithLabel(const std::string& key, const std::string& name, const std::string& value) {
  const std::string l = name + "=\"" + value + "\"";
  if (key.empty()) return "{" + l + "}";
  return key.substr(0, key.size() - 1) + "," + l + "}";
}

}  // namespace

std::string Metrics::LabelKey(const Labels& labels) {
  if (labels.empty()) return "";
  std::string k = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) k += ',';
    k += labels[i].first + "=\"" + EscapeLabel(labels[i].second) + "\"";
  }
  return k + "}";
}

Metrics::Family& Metrics::Get(const std::string& name, Kind kind) {
  auto [it, fresh] = families_.try_emplace(name);
  if (fresh) it->second.kind = kind;
  return it->second;
}

void Metrics::DeclareCounter(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> l(mu_);
  Get(name, Kind::kCounter).help = help;
}

void Metrics::DeclareGauge(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> l(mu_);
  Get(name, Kind::kGauge).help = help;
}

void Metrics::DeclareHistogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::lock_guard<std::mutex> l(mu_);
  Family& f = Get(name, Kind::kHistogram);
  f.help = help;
  std::sort(bounds.begin(), bounds.end());
  f.bounds = std::move(bounds);
}

void Metrics::Add(const std::string& name, double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Get(name, Kind::kCounter).series[LabelKey(labels)].value += v;
}

void Metrics::Set(const std::string& name, double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Get(name, Kind::kGauge).series[LabelKey(labels)].value = v;
}

void Metrics::Observe(const std::string& name, double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Family& f = Get(name, Kind::kHistogram);
  Series& s = f.series[LabelKey(labels)];
  if (s.buckets.empty()) s.buckets.assign(f.bounds.size() + 1, 0);
  const size_t b = std::lower_bound(f.bounds.begin(), f.bounds.end(), v) - f.bounds.begin();
  ++s.buckets[b];
  ++s.count;
  s.sum += v;
}

double Metrics::Value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0;
  auto s = f->second.series.find(LabelKey(labels));
  return s == f->second.series.end() ? 0 : s->second.value;
}

Metrics::HistogramSnapshot Metrics::Histogram(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  HistogramSnapshot snap;
  auto f = families_.find(name);
  if (f == families_.end()) return snap;
  snap.bounds = f->second.bounds;
  snap.counts.assign(snap.bounds.size() + 1, 0);
  auto s = f->second.series.find(LabelKey(labels));
  if (s == f->second.series.end()) return snap;
  snap.counts = s->second.buckets;
  snap.count = s->second.count;
  snap.sum = s->second.sum;
  return snap;
}

std::string Metrics::RenderPrometheus() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter" : f.kind == Kind::kGauge ? "gauge" : "histogram";
    if (!f.help.empty()) out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const auto& [key, s] : f.series) {
      if (f.kind != Kind::kHistogram) {
        out += name + key + " " + Num(s.value) + "\n";
        continue;
      }
      uint64_t cum = 0;
      for (size_t b = 0; b < f.bounds.size(); ++b) {
        cum += s.buckets[b];
        out += name + "_bucket" + WithLabel(key, "le", Num(f.bounds[b])) + " " + Num(static_cast<double>(cum)) + "\n";
      }
      out += name + "_bucket" + WithLabel(key, "le", "+Inf") + " " + Num(static_cast<double>(s.count)) + "\n";
      out += name + "_sum" + key + " " + Num(s.sum) + "\n";
      out += name + "_count" + key + " " + Num(static_cast<double>(s.count)) + "\n";
    }
  }
  return out;
}

}  // namespace tlr
