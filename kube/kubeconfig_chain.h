// Which kubeconfig a command-line tool uses, by kubectl's rules: the file
// of --kubeconfig alone when given; else every file listed in $KUBECONFIG
// (':'-separated; missing ones skipped), merged as kubectl merges them —
// for each cluster, context and user name, and for current-context, the
// first file that sets it wins; else ~/.kube/config. kubectl-kubicle loads
// its cluster through this, so it reaches what `kubectl` reaches.
//
// Contracts: never throws. A relative file reference inside a file
// (certificate-authority, client-certificate, client-key, tokenFile)
// resolves against that file's directory, as kubectl does, also after a
// merge.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kube/kubeconfig.h"

namespace kubicle::kube {

// One kubeconfig file: its text and the directory it was read from.
struct KubeconfigFile {
  std::string text;
  std::string dir;
};

// Merges the files into one kubeconfig (YAML text) whose file references
// are absolute. InvalidArgument for a file that is not YAML.
Result<std::string> MergeKubeconfigs(const std::vector<KubeconfigFile>& files);

// The files kubectl would read, in order: {explicit_path} when set, else the
// entries of `kubeconfig_env` (the value of $KUBECONFIG), else
// `home`/.kube/config.
std::vector<std::string> KubeconfigPaths(const std::string& explicit_path,
                                         const std::string& kubeconfig_env,
                                         const std::string& home);

// Loads the RestConfig of `context` (empty: the current context) from the
// files above, read from the environment ($KUBECONFIG, $HOME). An explicit
// path that cannot be read is an error; missing $KUBECONFIG entries are
// skipped, and none readable is NotFound naming them.
Result<RestConfig> LoadKubeconfigLikeKubectl(const std::string& explicit_path,
                                             const std::string& context);

}  // namespace kubicle::kube
