// NodeClient: a C++ client for kubicle-node's HTTP API (docs/node.md), used
// by kubicle-nodectl, kubectl-kubicle, the benches and the e2e and daemon
// tests. It is on the contract library (noderuntime/api) and links no
// server or runtime code.
//
// Contracts: never throws; cpprestsdk errors (connection refused, reset, a
// TLS certificate that does not verify) come back as Unavailable, and an API error reply as the Status its HTTP
// code stands for, with "HTTP <code> <error.code>: <error.message>".
// Thread-safe: one client may be used from many threads at once.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/query_escape.h"
#include "common/status.h"

namespace web::http::client {
class http_client;
}

namespace kubicle::noderuntime::client {

using nlohmann::json;

// Whose files a file call reaches: a sandbox's guest, or a workspace's disk
// without a VM (/v1/workspaces/{id}/files, docs/workspaces.md).
enum class FilesOwner { kSandbox, kWorkspace };

class NodeClient {
 public:
  // `url` like http://127.0.0.1:7070 or https://node:7443; `token` the
  // admin or a sandbox token. `ca_file` (PEM): for https, the CA the node's
  // serving certificate must chain to (a node's own DIR/tls/ca.crt, or its
  // Lease's kubicle.dev/serving-ca), besides the system's; the host name or
  // address in `url` is checked against the certificate too. Verification
  // is never turned off.
  static Result<std::unique_ptr<NodeClient>> Create(const std::string& url,
                                                    const std::string& token,
                                                    const std::string& ca_file = "");
  // The same with the CA as PEM text (a Lease's kubicle.dev/serving-ca)
  // instead of a file; empty `ca_pem`: the system's roots only.
  static Result<std::unique_ptr<NodeClient>> CreateWithCaPem(const std::string& url,
                                                             const std::string& token,
                                                             const std::string& ca_pem);
  ~NodeClient();

  // One JSON request; `body` null sends none. Returns the reply's JSON.
  Result<json> Call(const std::string& method, const std::string& path,
                    const json& body = nullptr);
  // HTTP status of the last reply is not kept: errors carry it in the message.

  Result<std::string> GetFile(const std::string& id, const std::string& path,
                              FilesOwner owner = FilesOwner::kSandbox);
  Status PutFile(const std::string& id, const std::string& path, const std::string& data,
                 uint32_t mode, FilesOwner owner = FilesOwner::kSandbox);
  // POST /v1/sandboxes/{id}/exec?stream=true: on_output("stdout"|"stderr",
  // bytes) as lines arrive; returns the final "exit" object.
  Result<json> ExecStream(const std::string& id, const json& request,
                          const std::function<void(const std::string& stream,
                                                   const std::string& data)>& on_output);

  // node_client_stream.cc. GET `path`: the body as it is (a file, the
  // console).
  Result<std::string> GetRaw(const std::string& path);
  // GET `path` answered as NDJSON (a followed console): on_line gets each
  // line parsed, as it arrives, until the body ends (OK) or on_line returns
  // false (OK, the connection is dropped). DataLoss for a line that is not
  // a JSON object.
  Status GetLines(const std::string& path, const std::function<bool(const json& line)>& on_line);

  const std::string& url() const { return url_; }

 private:
  NodeClient(std::string url, std::string token);
  std::string url_;
  std::string token_;
  std::unique_ptr<web::http::client::http_client> http_;
};

// "a=b,c=d" style list of k=v to a JSON object; InvalidArgument on "k".
Result<json> ParseLabelArgs(const std::vector<std::string>& kvs);
// What the node client leaves unescaped in a query value (QueryEscape's
// `keep`): "/", so label keys and guest paths stay readable.
inline constexpr std::string_view kQueryKeep = "/";
Status StatusFromHttp(int code, const std::string& body);

}  // namespace kubicle::noderuntime::client
