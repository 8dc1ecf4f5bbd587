// kubicle-bench-dataplane: figures for kubicle-node's front door (issue 10).
// Starts two kubicle-node daemons with the test guest, one plain HTTP and
// one --tls=on, and prints for each: create-to-ready and exec round-trip
// p50/p99 (a kept-alive connection, and a new connection per call, which
// pays the TLS handshake), exec output throughput (the test guest answers
// 64 KiB per exec, so: many `cat` of a 64 KiB RAM file; and the host side
// alone, an in-process ApiServer streaming 256 MiB from a fake), and the
// daemon's RSS and /healthz latency under 1,000 concurrent stalled
// connections (half headers; one tenant's stalled bodies; stalled TLS
// handshakes). Prints figures; never asserts on timing.
//
//   kubicle-bench-dataplane [--samples N] [--stalled N] [--stream-runs N]
//                           [--host-stream-mib N]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/node/bench_node.h"
#include "bench/stats.h"
#include "common/flag_args.h"
#include "common/unique_fd.h"
#include "noderuntime/server/api_server.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/server/serving_cert.h"
#include "noderuntime/client/node_client.h"

namespace kubicle::bench {
namespace {

using noderuntime::client::json;
using noderuntime::client::NodeClient;
namespace server = noderuntime::server;
using namespace std::chrono_literals;

struct Options {
  int samples = 50;
  int stalled = 1000;
  int stream_runs = 4;
  int host_stream_mib = 256;
};

// One of the two daemons compared: its label and an admin client.
struct Node {
  std::string name;  // "plain" or "tls"
  std::unique_ptr<BenchNode> node;
  std::unique_ptr<NodeClient> client;
};

Node StartNode(const std::string& name, bool tls) {
  Node n{name, BenchNode::Start({.pool_size = 4, .tls = tls}), nullptr};
  n.client = n.node->NewClient();
  n.node->BakeTestGuest("tg", 64);
  return n;
}

json Create(NodeClient& c, const std::string& run) { return CreateSandbox(c, run); }
void Sweep(NodeClient& c, const std::string& run) { SweepRun(c, run); }

uint64_t RssKib(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %llu kB", &kib) == 1) return kib;
  }
  return 0;
}

void CreateAndExec(Node& n, const Options& o) {
  std::vector<double> create, exec, exec_new;
  for (int i = 0; i < o.samples; ++i) {
    auto t0 = Clock::now();
    json s = Create(*n.client, "lat");
    create.push_back(MillisSince(t0));
    auto d = n.client->Call("DELETE", "/v1/sandboxes/" + s["id"].get<std::string>());
    if (!d.ok()) Die("delete", d.status());
  }
  json s = Create(*n.client, "exec");
  const std::string id = s["id"], tok = s["token"];
  const std::string path = "/v1/sandboxes/" + id + "/exec";
  auto own = n.node->NewClient(tok);
  for (int i = 0; i < o.samples * 2; ++i) {
    auto t0 = Clock::now();
    auto r = own->Call("POST", path, {{"argv", {"echo", "x"}}});
    exec.push_back(MillisSince(t0));
    if (!r.ok() || (*r)["stdout"] != "x\n") Die("exec", r.ok() ? Status::Internal(r->dump()) : r.status());
  }
  for (int i = 0; i < o.samples; ++i) {
    auto t0 = Clock::now();
    auto fresh = n.node->NewClient(tok);  // a new connection: TCP (and TLS) handshake included
    auto r = fresh->Call("POST", path, {{"argv", {"echo", "x"}}});
    exec_new.push_back(MillisSince(t0));
    if (!r.ok()) Die("exec (new connection)", r.status());
  }
  PrintPercentiles("[" + n.name + "] API create to ready", create, "ms");
  PrintPercentiles("[" + n.name + "] exec round trip, kept-alive", exec, "ms");
  PrintPercentiles("[" + n.name + "] exec round trip, new connection", exec_new, "ms");
  Sweep(*n.client, "exec");
}

// The test guest answers at most 64 KiB per exec (one reply burst), so the
// guest figure is many 64 KiB streams (`cat` of a 64 KiB RAM file), one
// after another and 8 sandboxes at once.
void GuestStreams(Node& n, const Options& o) {
  std::string file(64 * 1024, '\0');
  std::mt19937 rng(7);
  for (char& ch : file) ch = static_cast<char>(rng());
  auto run = [&](int sandboxes, int execs_each) {
    std::vector<std::string> ids;
    for (int i = 0; i < sandboxes; ++i) {
      json s = Create(*n.client, "stream");
      ids.push_back(s["id"]);
      Status put = n.client->PutFile(ids.back(), "/f", file, 0644);
      if (!put.ok()) Die("put-file", put);
    }
    std::atomic<size_t> bytes{0};
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (const std::string& id : ids) {
      threads.emplace_back([&, id] {
        auto c = n.node->NewClient();
        for (int e = 0; e < execs_each; ++e) {
          size_t got = 0;
          auto exit = c->ExecStream(id, {{"argv", {"cat", "/f"}}},
                                    [&](const std::string&, const std::string& d) { got += d.size(); });
          if (!exit.ok() || got != file.size()) {
            Die("streamed exec", exit.ok() ? Status::DataLoss(std::to_string(got) + " bytes") : exit.status());
          }
          bytes += got;
        }
      });
    }
    for (auto& t : threads) t.join();
    double secs = MillisSince(t0) / 1000;
    Sweep(*n.client, "stream");
    return bytes / 1048576.0 / secs;
  };
  const int execs = o.samples * 4;
  std::printf("%-44s %9.1f MiB/s (%d execs of 64 KiB, one sandbox)\n",
              ("[" + n.name + "] guest exec output stream").c_str(), run(1, execs), execs);
  std::printf("%-44s %9.1f MiB/s (8 sandboxes x %d execs of 64 KiB)\n",
              ("[" + n.name + "] guest exec output stream, 8-way").c_str(), run(8, execs / 4),
              execs / 4);
}

// The host side of a large stream on its own: an in-process ApiServer whose
// fake exec produces `mib` MiB in 64 KiB chunks, read by NodeClient.
void HostStream(bool tls, const Options& o) {
  server::testing::FakeSandboxService fake;
  metrics::Registry registry;
  server::ApiServerOptions opts;
  opts.admin_token = "bench";
  std::string ca_file;
  if (tls) {
    auto ca = server::MakeCa("bench CA", 24h);
    auto leaf = server::MakeServingCert(*ca, {"127.0.0.1"}, 24h);
    if (!ca.ok() || !leaf.ok()) Die("certificates", ca.ok() ? leaf.status() : ca.status());
    opts.tls_cert_pem = leaf->cert_pem + ca->cert_pem;
    opts.tls_key_pem = leaf->key_pem;
    ca_file = "/tmp/kubicle-bench-dp-ca-" + std::to_string(::getpid()) + ".pem";
    std::ofstream(ca_file) << ca->cert_pem;
  }
  const size_t chunk = 64 * 1024, chunks = size_t(o.host_stream_mib) * 16;
  const std::string data(chunk, 'o');
  fake.exec_hook = [&](const std::string&, const noderuntime::ExecOptions& e) {
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    for (size_t i = 0; i < chunks; ++i) e.io.on_output(guest::protocol::OutputStream::kStdout, {p, chunk});
    guest::client::ExecResult r;
    r.exit_code = 0;
    return Result<guest::client::ExecResult>(r);
  };
  server::ApiServer server(&fake, &registry, opts);
  auto port = server::PickFreePort();
  if (!port.ok() || !server.Start("127.0.0.1", *port).ok()) Die("in-process server", Status::Unavailable("start"));
  const std::string url = std::string(tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(*port);
  auto c = NodeClient::Create(url, "bench", ca_file);
  if (!c.ok()) Die("client", c.status());
  (void)(*c)->Call("PUT", "/v1/templates/t", {{"kernel", "/k"}});
  (void)(*c)->Call("POST", "/v1/sandboxes", {{"template", "t"}, {"id", "s"}});
  std::vector<double> mibs;
  for (int run = 0; run < o.stream_runs; ++run) {
    size_t bytes = 0;
    auto t0 = Clock::now();
    auto exit = (*c)->ExecStream("s", {{"argv", {"x"}}},
                                 [&](const std::string&, const std::string& d) { bytes += d.size(); });
    double secs = MillisSince(t0) / 1000;
    if (!exit.ok() || bytes != chunk * chunks) Die("host stream", exit.ok() ? Status::DataLoss("short") : exit.status());
    mibs.push_back(bytes / 1048576.0 / secs);
  }
  server.Stop();
  if (!ca_file.empty()) ::unlink(ca_file.c_str());
  std::printf("%-44s p50 %9.1f MiB/s (%d runs of %d MiB: NDJSON + base64, chunked)\n",
              (std::string("[") + (tls ? "tls" : "plain") + "] host-side exec stream (fake guest)").c_str(),
              Percentile(mibs, 50), o.stream_runs, o.host_stream_mib);
}

UniqueFd Connect(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return UniqueFd();
  return fd;
}

// Opens `count` connections that each send `first` and stall, then measures
// the daemon's RSS and /healthz and admin latency while they stall.
void Stalled(Node& n, const Options& o, const std::string& what, const std::string& first) {
  const uint64_t before = RssKib(n.node->pid());
  std::vector<UniqueFd> conns;
  int refused = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < o.stalled; ++i) {
    UniqueFd fd = Connect(n.node->port());
    if (!fd) {
      ++refused;
      continue;
    }
    if (!first.empty()) (void)::send(fd.get(), first.data(), first.size(), MSG_NOSIGNAL);
    conns.push_back(std::move(fd));
  }
  const double open_ms = MillisSince(t0);
  std::this_thread::sleep_for(300ms);
  std::vector<double> health, admin;
  auto probe = n.node->NewClient();
  for (int i = 0; i < 20; ++i) {
    auto h0 = Clock::now();
    auto h = probe->Call("GET", "/healthz");
    health.push_back(MillisSince(h0));
    auto a0 = Clock::now();
    auto l = probe->Call("GET", "/v1/sandboxes");
    admin.push_back(MillisSince(a0));
    if (!h.ok() || !l.ok()) Die("probe under stall", h.ok() ? l.status() : h.status());
  }
  const uint64_t during = RssKib(n.node->pid());
  std::printf("%-44s RSS %+.1f MiB (%.1f -> %.1f MiB); /healthz p50 %.2f ms, admin list p50 %.2f ms"
              " (%zu open in %.0f ms)\n",
              ("[" + n.name + "] " + std::to_string(o.stalled) + " stalled: " + what).c_str(),
              (double(during) - double(before)) / 1024, before / 1024.0, during / 1024.0,
              Percentile(health, 50), Percentile(admin, 50), conns.size(), open_ms);
  conns.clear();
  std::this_thread::sleep_for(500ms);
}

int Main(int argc, char** argv) {
  SetProgramName("kubicle-bench-dataplane");
  Options o;
  const std::vector<std::string> args = SplitFlagValues(std::vector<std::string>(argv + 1, argv + argc));
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string flag = i + 1 < args.size() ? args[i] : "";
    const int v = flag.empty() ? 0 : std::atoi(args[i + 1].c_str());
    if (flag == "--samples") o.samples = std::max(1, v);
    else if (flag == "--stalled") o.stalled = std::max(1, v);
    else if (flag == "--stream-runs") o.stream_runs = std::max(1, v);
    else if (flag == "--host-stream-mib") o.host_stream_mib = std::max(1, v);
    else {
      std::fprintf(stderr, "usage: kubicle-bench-dataplane [--samples N] [--stalled N] [--stream-runs N] [--host-stream-mib N]\n");
      return 2;
    }
  }
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  ::signal(SIGPIPE, SIG_IGN);
  Node plain = StartNode("plain", false);
  Node tls = StartNode("tls", true);
  std::printf("kubicle-node plain %s, tls %s (own CA), test guest 64 MiB, no cgroups, pool 4\n",
              plain.node->url().c_str(), tls.node->url().c_str());
  for (Node* n : {&plain, &tls}) CreateAndExec(*n, o);
  for (Node* n : {&plain, &tls}) GuestStreams(*n, o);
  HostStream(false, o);
  HostStream(true, o);
  // One tenant's token, each connection one byte into a declared 100-byte body.
  json s = Create(*plain.client, "stall");
  const std::string id = s["id"], tok = s["token"];
  Stalled(plain, o, "half headers", "GET /healthz HTTP/1.1\r\nX-Half: ");
  Stalled(plain, o, "one tenant's bodies",
          "POST /v1/sandboxes/" + id + "/exec HTTP/1.1\r\nAuthorization: Bearer " + tok +
              "\r\nContent-Length: 100\r\n\r\n{");
  Stalled(tls, o, "TLS handshakes", std::string("\x16\x03\x01", 3));
  Sweep(*plain.client, "stall");
  plain.node->Stop();
  tls.node->Stop();
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) { return kubicle::bench::Main(argc, argv); }
