// FakeTemplates: TemplateService in memory, for the API's unit tests, and
// the templates' run tokens. A put bakes at once (its answer reads Baking,
// every later read Ready); FailTemplate makes one Failed. A template in
// use (user_of) is not deleted, as the manager refuses. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::server::testing {

class FakeTemplates : public TemplateService {
 public:
  Result<TemplateInfo> PutTemplate(const TemplateSpec& spec) override;
  Result<TemplateInfo> GetTemplate(const std::string& name) override;
  std::vector<TemplateInfo> ListTemplates() override;
  Status DeleteTemplate(const std::string& name) override;

  // TokenService's part for runs: NotFound for an unknown template.
  Status SetRunToken(const std::string& template_name, const std::string& token_sha256);
  bool CheckRunToken(const std::string& template_name, const std::string& token);  // not counted

  void FailTemplate(const std::string& name, const std::string& message);
  // The template, if any (creates and runs read it; not counted).
  std::optional<TemplateInfo> Find(const std::string& name) const;
  // Who uses template `name` ("" nobody): DeleteTemplate refuses then.
  std::function<std::string(const std::string& name)> user_of;

  int calls() const { return calls_.load(); }

 private:
  mutable std::mutex mu_;
  std::map<std::string, TemplateInfo> templates_;
  std::map<std::string, std::string> run_tokens_;  // template -> hex SHA-256
  std::atomic<int> calls_{0};
};

}  // namespace kubicle::noderuntime::server::testing
