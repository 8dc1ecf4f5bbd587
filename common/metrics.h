// Prometheus metrics in the text exposition format (version 0.0.4), small
// enough to own: counters, gauges and histograms, each a family with fixed
// label names; gauges may also be computed at scrape time by a callback.
//
//   metrics::Registry reg;
//   auto& lat = reg.AddHistogram("kubicle_reconcile_seconds", "...", {"kind"},
//                                metrics::ExponentialBuckets(0.001, 2, 14));
//   lat.WithLabels({"Sandbox"}).Observe(0.004);
//   std::string body = reg.Render();  // serve as text/plain; version=0.0.4
//
// Contracts: names and label names must match Prometheus' grammar (checked
// when added: a bad name is a programming error and aborts at startup, never
// at scrape time). Label values are escaped. Families and series are never
// removed, so references returned stay valid for the registry's lifetime.
// All operations are thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kubicle::metrics {

using LabelValues = std::vector<std::string>;

class Counter {
 public:
  void Inc(double v = 1) {
    std::lock_guard l(mu_);
    if (v > 0) value_ += v;
  }
  double Value() const {
    std::lock_guard l(mu_);
    return value_;
  }

 private:
  mutable std::mutex mu_;
  double value_ = 0;
};

class Gauge {
 public:
  void Set(double v) {
    std::lock_guard l(mu_);
    value_ = v;
  }
  void Add(double v) {
    std::lock_guard l(mu_);
    value_ += v;
  }
  double Value() const {
    std::lock_guard l(mu_);
    return value_;
  }

 private:
  mutable std::mutex mu_;
  double value_ = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Cumulative counts per bound (then +Inf), sum and count: one snapshot.
  void Snapshot(std::vector<uint64_t>* cumulative, double* sum, uint64_t* count) const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, non-cumulative, last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

std::vector<double> ExponentialBuckets(double start, double factor, int count);

template <typename T>
class Family {
 public:
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<T>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}
  // The series for these label values (created on first use). The number of
  // values must equal the number of label names (else the empty-label series).
  T& WithLabels(const LabelValues& values);
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Visits series in label order.
  void ForEach(const std::function<void(const LabelValues&, const T&)>& fn) const;

 private:
  std::vector<std::string> label_names_;
  std::function<std::unique_ptr<T>()> make_;
  mutable std::mutex mu_;
  std::map<LabelValues, std::unique_ptr<T>> series_;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> labels = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> labels = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> labels, std::vector<double> bounds);
  // A gauge family computed at scrape time: fn returns (label values, value).
  void AddGaugeCallback(const std::string& name, const std::string& help,
                        std::vector<std::string> labels,
                        std::function<std::vector<std::pair<LabelValues, double>>()> fn);
  std::string Render() const;

 private:
  struct Entry;
  Entry& Add(const std::string& name, const std::string& help, const char* type,
             const std::vector<std::string>& labels);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// Text-format helpers (exposed for tests).
std::string EscapeLabelValue(std::string_view v);
std::string FormatValue(double v);
bool ValidMetricName(std::string_view name);
bool ValidLabelName(std::string_view name);

}  // namespace kubicle::metrics
