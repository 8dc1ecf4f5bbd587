#include "kube/kubeconfig.h"

#include <cstdlib>

#include <cpprest/asyncrt_utils.h>
#include <yaml-cpp/yaml.h>

#include "common/file_io.h"

namespace kubicle::kube {
namespace {

Result<std::string> DecodeBase64(const std::string& b64) {
  try {
    std::vector<unsigned char> bytes = utility::conversions::from_base64(b64);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("bad base64 in kubeconfig: ") + e.what());
  }
}

std::string Resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return dir + "/" + path;
}

// Reads `<field>-data` (base64) or `<field>` (a file) from `node`.
Result<std::string> PemField(const YAML::Node& node, const std::string& field,
                             const std::string& dir) {
  if (node[field + "-data"]) return DecodeBase64(node[field + "-data"].as<std::string>());
  if (node[field]) return ReadFileToString(Resolve(dir, node[field].as<std::string>()));
  return std::string();
}

YAML::Node FindNamed(const YAML::Node& list, const std::string& name) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const YAML::Node& item : list) {
    if (item["name"] && item["name"].as<std::string>() == name) return item;
  }
  return YAML::Node();
}

Result<RestConfig> ParseKubeconfigOrThrow(const std::string& text, const std::string& dir,
                                          const std::string& want_context) {
  YAML::Node root = YAML::Load(text);
  std::string ctx_name = want_context;
  if (ctx_name.empty() && root["current-context"]) {
    ctx_name = root["current-context"].as<std::string>();
  }
  YAML::Node ctx = FindNamed(root["contexts"], ctx_name);
  if (!ctx || !ctx["context"]) {
    return Status::NotFound("kubeconfig has no context \"" + ctx_name + "\"");
  }
  YAML::Node c = ctx["context"];
  RestConfig cfg;
  if (c["namespace"]) cfg.ns = c["namespace"].as<std::string>();
  std::string cluster_name = c["cluster"] ? c["cluster"].as<std::string>() : "";
  YAML::Node cluster = FindNamed(root["clusters"], cluster_name);
  if (!cluster || !cluster["cluster"] || !cluster["cluster"]["server"]) {
    return Status::NotFound("kubeconfig has no cluster \"" + cluster_name + "\" with a server");
  }
  YAML::Node cl = cluster["cluster"];
  cfg.server = cl["server"].as<std::string>();
  if (cl["insecure-skip-tls-verify"]) cfg.insecure_skip_verify = cl["insecure-skip-tls-verify"].as<bool>();
  ASSIGN_OR_RETURN(cfg.ca_pem, PemField(cl, "certificate-authority", dir));
  if (c["user"]) {
    YAML::Node user = FindNamed(root["users"], c["user"].as<std::string>());
    if (user && user["user"]) {
      YAML::Node u = user["user"];
      ASSIGN_OR_RETURN(cfg.client_cert_pem, PemField(u, "client-certificate", dir));
      ASSIGN_OR_RETURN(cfg.client_key_pem, PemField(u, "client-key", dir));
      if (u["token"]) cfg.bearer_token = u["token"].as<std::string>();
      if (u["tokenFile"]) cfg.bearer_token_file = Resolve(dir, u["tokenFile"].as<std::string>());
    }
  }
  return cfg;
}

}  // namespace

Result<RestConfig> ParseKubeconfig(const std::string& yaml_text, const std::string& dir,
                                   const std::string& context) {
  try {
    return ParseKubeconfigOrThrow(yaml_text, dir, context);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("bad kubeconfig: ") + e.what());
  }
}

Result<RestConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  std::string p = path;
  if (p.empty() && std::getenv("KUBECONFIG")) p = std::getenv("KUBECONFIG");
  if (p.empty() && std::getenv("HOME")) p = std::string(std::getenv("HOME")) + "/.kube/config";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(p));
  std::string dir = p.find('/') == std::string::npos ? "." : p.substr(0, p.rfind('/'));
  return ParseKubeconfig(text, dir, context);
}

Result<RestConfig> InClusterConfig(const std::string& root) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    return Status::FailedPrecondition("not in a cluster: KUBERNETES_SERVICE_HOST/PORT unset");
  }
  RestConfig cfg;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  cfg.server = "https://" + h + ":" + port;
  ASSIGN_OR_RETURN(cfg.ca_pem, ReadFileToString(root + "/ca.crt"));
  cfg.bearer_token_file = root + "/token";
  ASSIGN_OR_RETURN(cfg.bearer_token, ReadFileToString(cfg.bearer_token_file));
  auto ns = ReadFileToString(root + "/namespace");
  if (ns.ok()) cfg.ns = *ns;
  return cfg;
}

}  // namespace kubicle::kube
