// Where and how to reach the apiserver: parsed from a kubeconfig file
// (yaml-cpp) or from the in-cluster service account. Inline "-data" fields
// and file references are both resolved to PEM text here, so the transport
// never touches the filesystem except to re-read a rotating token file.
#pragma once

#include <string>

#include "common/status.h"

namespace kubicle::kube {

struct RestConfig {
  std::string server;            // https://127.0.0.1:6443
  std::string ca_pem;            // empty: system roots
  std::string client_cert_pem;   // client certificate chain
  std::string client_key_pem;
  std::string bearer_token;
  std::string bearer_token_file; // re-read periodically (bound SA tokens rotate)
  bool insecure_skip_verify = false;
  std::string ns = "default";    // the context's namespace
};

// Loads `path` (or $KUBECONFIG, or ~/.kube/config when empty); `context`
// empty means current-context.
Result<RestConfig> LoadKubeconfig(const std::string& path, const std::string& context = {});
// Same, from YAML text (relative file references resolve against `dir`).
Result<RestConfig> ParseKubeconfig(const std::string& yaml_text, const std::string& dir,
                                   const std::string& context = {});
// The pod's service account: KUBERNETES_SERVICE_HOST/PORT and the files in
// /var/run/secrets/kubernetes.io/serviceaccount (`root` overrides the dir).
Result<RestConfig> InClusterConfig(
    const std::string& root = "/var/run/secrets/kubernetes.io/serviceaccount");

}  // namespace kubicle::kube
