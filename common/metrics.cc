#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/log.h"

namespace kubicle::metrics {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard l(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Snapshot(std::vector<uint64_t>* cumulative, double* sum, uint64_t* count) const {
  std::lock_guard l(mu_);
  cumulative->clear();
  uint64_t acc = 0;
  for (uint64_t c : counts_) cumulative->push_back(acc += c);
  *sum = sum_;
  *count = count_;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(start * std::pow(factor, i));
  return out;
}

template <typename T>
T& Family<T>::WithLabels(const LabelValues& values) {
  LabelValues key = values;
  if (key.size() != label_names_.size()) key.assign(label_names_.size(), "");
  std::lock_guard l(mu_);
  auto& slot = series_[key];
  if (!slot) slot = make_();
  return *slot;
}

template <typename T>
void Family<T>::ForEach(const std::function<void(const LabelValues&, const T&)>& fn) const {
  std::lock_guard l(mu_);
  for (const auto& [k, v] : series_) fn(k, *v);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

bool ValidMetricName(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  });
}

bool ValidLabelName(std::string_view n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0])) || n.starts_with("__")) {
    return false;
  }
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {
std::string EscapeHelp(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string Labels(const std::vector<std::string>& names, const LabelValues& values,
                   const std::string& extra = {}) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra.empty()) out += (out.empty() ? "" : ",") + extra;
  return out.empty() ? "" : "{" + out + "}";
}
}  // namespace

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

struct Registry::Entry {
  std::string name, help, type;
  std::vector<std::string> labels;
  std::unique_ptr<Family<Counter>> counter;
  std::unique_ptr<Family<Gauge>> gauge;
  std::unique_ptr<Family<Histogram>> histogram;
  std::function<std::vector<std::pair<LabelValues, double>>()> callback;
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry::Entry& Registry::Add(const std::string& name, const std::string& help, const char* type,
                               const std::vector<std::string>& labels) {
  bool ok = ValidMetricName(name);
  for (const std::string& l : labels) ok = ok && ValidLabelName(l) && l != "le";
  if (!ok) {
    log::Error("invalid metric definition", {{"name", name}});
    std::abort();  // programming error, caught by any test that builds the registry
  }
  std::lock_guard l(mu_);
  entries_.push_back(std::make_unique<Entry>());
  Entry& e = *entries_.back();
  e.name = name;
  e.help = help;
  e.type = type;
  e.labels = labels;
  return e;
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> labels) {
  Entry& e = Add(name, help, "counter", labels);
  e.counter = std::make_unique<Family<Counter>>(labels, [] { return std::make_unique<Counter>(); });
  return *e.counter;
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> labels) {
  Entry& e = Add(name, help, "gauge", labels);
  e.gauge = std::make_unique<Family<Gauge>>(labels, [] { return std::make_unique<Gauge>(); });
  return *e.gauge;
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<std::string> labels,
                                          std::vector<double> bounds) {
  Entry& e = Add(name, help, "histogram", labels);
  e.histogram = std::make_unique<Family<Histogram>>(
      labels, [bounds] { return std::make_unique<Histogram>(bounds); });
  return *e.histogram;
}

void Registry::AddGaugeCallback(const std::string& name, const std::string& help,
                                std::vector<std::string> labels,
                                std::function<std::vector<std::pair<LabelValues, double>>()> fn) {
  Entry& e = Add(name, help, "gauge", labels);
  e.callback = std::move(fn);
}

std::string Registry::Render() const {
  std::lock_guard l(mu_);
  std::string out;
  for (const auto& ep : entries_) {
    const Entry& e = *ep;
    out += "# HELP " + e.name + " " + EscapeHelp(e.help) + "\n";
    out += "# TYPE " + e.name + " " + e.type + "\n";
    if (e.counter) {
      e.counter->ForEach([&](const LabelValues& lv, const Counter& c) {
        out += e.name + Labels(e.labels, lv) + " " + FormatValue(c.Value()) + "\n";
      });
    } else if (e.gauge) {
      e.gauge->ForEach([&](const LabelValues& lv, const Gauge& g) {
        out += e.name + Labels(e.labels, lv) + " " + FormatValue(g.Value()) + "\n";
      });
    } else if (e.callback) {
      for (const auto& [lv, v] : e.callback()) {
        out += e.name + Labels(e.labels, lv) + " " + FormatValue(v) + "\n";
      }
    } else if (e.histogram) {
      e.histogram->ForEach([&](const LabelValues& lv, const Histogram& h) {
        std::vector<uint64_t> cum;
        double sum;
        uint64_t count;
        h.Snapshot(&cum, &sum, &count);
        for (size_t i = 0; i < cum.size(); ++i) {
          std::string le = i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf";
          out += e.name + "_bucket" + Labels(e.labels, lv, "le=\"" + le + "\"") + " " +
                 std::to_string(cum[i]) + "\n";
        }
        out += e.name + "_sum" + Labels(e.labels, lv) + " " + FormatValue(sum) + "\n";
        out += e.name + "_count" + Labels(e.labels, lv) + " " + std::to_string(count) + "\n";
      });
    }
  }
  return out;
}

}  // namespace kubicle::metrics
