// Fuzzes the node's HTTP front door as a client meets it: raw bytes through
// the real connection code (noderuntime/server/http_connection.cc: Beast's
// parser, the header cap, the Gate decided from the header alone, declared
// and chunked body caps, 100-continue, keep-alive and pipelining, a refusal
// and its lingering close, StopAccepting) with ApiServer's own Gate (route,
// auth, budgets) and handlers, over a FakeSandboxService; and the upgrade
// to a guest port stream (Connection/Upgrade parsed from the header, the
// Gate's 426, the port rule, the stream budget, the 101 and the relay that
// follows it, to a guest that closes at once).
//
// Transport: one real loopback TCP connection per input. Its server side is
// served by an HttpServer::Core whose io_context runs on the fuzzer's thread
// (no I/O threads): each piece of the input is sent, then the server runs
// until it has nothing left to do, so it sees the pieces exactly as cut.
// Handlers run inline on that thread too (no request threads), and the
// ApiServer is told it is stopping so a followed console ends at once
// instead of following for ever.
//
// Input: byte 0 is flags:
//   bits 0-1  how the client ends: 0 or 1, it half-closes after the last
//             piece and reads every answer; 2, the node stops accepting
//             (StopAccepting) once the last piece is in, then the same; 3,
//             the client closes outright (answers not read by then are lost)
//   bits 2-3  the header cap: 256, 1024, 4096 or 16384 bytes
//   bit 4     small bodies (64-byte JSON and file bodies; else 4 and 8 KiB)
//   bit 5     no budget for sandbox tokens; bit 6, none for the admin token
//             and /healthz either (so every such request is a 503)
// The rest is what the client sends, cut into pieces at every 0xFF byte
// that is not doubled ("\xff\xff" sends one 0xFF). The node has the admin
// token "admin-token" and sandbox sb-1 (template tg) with the token
// "sandbox-token"; a port stream's guest is one end of a socket pair whose
// other end is already closed.
//
// Checked beyond no crash and no ASan/UBSan report:
//  - the service is called only by an admitted request's handler, never by
//    the Gate but CheckToken: with the admin token anything, with sb-1's
//    token only sb-1's reads, exec and files, without either nothing (the
//    bearer token is read here independently of routes.cc);
//  - what the client reads is HTTP/1.1 responses (the interim ones only
//    100 Continue, never before the Gate's refusal) whose final status
//    codes are, in order, the handlers' answers and then the refusal's, if
//    any (the server's 431/413/400 or the Gate's); only a streamed answer
//    the handler aborted may be cut;
//  - the Gate has decided each request once its header is in, before the
//    client sends another piece (where headers end is found here with
//    Beast's parser under the same cap), until a refusal;
//  - an answer without keep-alive is the last bytes sent; a refusal is such
//    an answer, and the client sees the connection's end before it sends
//    another piece (the body is never waited for); after a refusal the Gate
//    is not asked again and no handler runs;
//  - a 101 is the last answer: after it the connection carries no HTTP,
//    nothing more is decided, and what the client reads past it is what
//    the guest sent (nothing: it closes at once);
//  - a half-closed or gone client's connection ends without any deadline,
//    no timeout or eviction fires, and every budget is back afterwards.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/beast/http.hpp>

#include "common/metrics.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "fuzz/common/fuzz_input.h"
#include "noderuntime/server/api_server.h"
#include "fuzz/noderuntime/guarded_service.h"
#include "noderuntime/server/http_server_internal.h"

namespace kubicle::fuzz {
namespace {

namespace server = noderuntime::server;
namespace http = boost::beast::http;
using namespace std::chrono_literals;

// Rounds of waiting for the kernel before an end that should come is
// missing (about two seconds on an idle machine).
constexpr int kRounds = 2000;

// What the server answered or refused, in order.
struct Answer {
  int code = 0;
  bool refusal = false;
  bool by_gate = false;  // a refusal from the header alone
  bool aborted = false;  // a stream the handler gave up on: may arrive cut
  bool upgraded = false;  // 101: the connection is a relay from then on
};

// The Responder a handler gets: records its answer, then passes it on.
class Recorder final : public server::Responder {
 public:
  Recorder(std::shared_ptr<server::Responder> inner, std::vector<Answer>* answers)
      : inner_(std::move(inner)), answers_(answers) {}
  void Send(server::Response r) override {
    Record(r.code);
    inner_->Send(std::move(r));
  }
  void StartStream(int code, const std::string& content_type) override {
    Record(code);
    inner_->StartStream(code, content_type);
  }
  bool Write(std::string data) override { return inner_->Write(std::move(data)); }
  void EndStream() override { inner_->EndStream(); }
  void Abort() override {
    if (index_) (*answers_)[*index_].aborted = true;
    inner_->Abort();
  }
  void SwitchProtocols(server::Response r, UniqueFd upstream, std::shared_ptr<void> hold) override {
    Record(101);
    (*answers_)[*index_].upgraded = true;
    inner_->SwitchProtocols(std::move(r), std::move(upstream), std::move(hold));
  }
  bool replied() const override { return inner_->replied(); }

 private:
  void Record(int code) {
    FUZZ_CHECK(!index_);  // a handler answers once
    index_ = answers_->size();
    answers_->push_back({.code = code});
  }
  std::shared_ptr<server::Responder> inner_;
  std::vector<Answer>* answers_;
  std::optional<size_t> index_;
};

// The listening socket every input's connection is made through.
int Listener() {
  static int fd = [] {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    FUZZ_CHECK(::listen(s, 16) == 0);
    return s;
  }();
  return fd;
}

// A request body the parse in HeaderEnds steps over (string_body would
// reserve a declared Content-Length up front).
struct SkipBody {
  struct value_type {};
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type&) {}
    void init(const boost::optional<uint64_t>&, boost::beast::error_code& ec) { ec = {}; }
    template <class Buffers>
    size_t put(const Buffers& buffers, boost::beast::error_code& ec) {
      ec = {};
      return boost::asio::buffer_size(buffers);
    }
    void finish(boost::beast::error_code& ec) { ec = {}; }
  };
};
using MirrorParser = http::request_parser<SkipBody>;

// Where each request's header ends in what the client sends, for every
// request the server must decide: parsed here with Beast's parser under
// the server's header cap, up to a request the parser refuses, one that
// closes the connection (no keep-alive) or one cut short.
std::vector<size_t> HeaderEnds(std::string_view stream, size_t header_cap) {
  std::vector<size_t> ends;
  size_t at = 0;
  while (at < stream.size()) {
    MirrorParser p;
    p.header_limit(static_cast<uint32_t>(header_cap));
    p.body_limit(std::numeric_limits<uint64_t>::max());
    size_t used = 0;
    // False at the end of the stream or at an error.
    auto parse = [&](bool (MirrorParser::*done)() const) {
      while (!(p.*done)()) {
        boost::beast::error_code ec;
        const size_t n = p.put(boost::asio::buffer(stream.substr(at + used)), ec);
        used += n;
        if (ec || n == 0) return false;
      }
      return true;
    };
    if (!parse(&MirrorParser::is_header_done)) break;
    ends.push_back(at + used);
    if (!p.keep_alive() || !parse(&MirrorParser::is_done)) break;
    at += used;
  }
  return ends;
}

server::ApiServerOptions OptionsFor(uint8_t flags) {
  server::ApiServerOptions o;
  o.admin_token = kAdminToken;
  o.max_header_bytes = size_t{256} << (2 * ((flags >> 2) & 3));
  const bool small = flags & 0x10;
  o.max_json_bytes = small ? 64 : 4096;
  o.max_file_bytes = small ? 64 : 8192;
  // No deadline may pass during an input (one that fires is a failure),
  // even on a machine so loaded that an input takes many seconds.
  o.header_timeout = o.idle_timeout = o.body_timeout = o.write_timeout = 1h;
  if (flags & 0x20) o.max_in_flight_tenants = 0;
  if (flags & 0x40) o.max_in_flight_admin = o.max_in_flight_health = 0;
  return o;
}

// One input: a node, a connection to it, and what each side saw.
class Session {
 public:
  // `stream` is all the client will send (for HeaderEnds).
  Session(uint8_t flags, std::string_view stream)
      : api_(&svc_, &registry_, OptionsFor(flags)),
        door_(api_.front_door()),
        header_ends_(HeaderEnds(stream, door_.limits.max_header_bytes)) {
    svc_.handling = Who::kAdmin;
    noderuntime::TemplateSpec t;
    t.name = "tg";
    t.kernel = "/k";
    FUZZ_CHECK(svc_.PutTemplate(t).ok());
    noderuntime::SandboxSpec s;
    s.id = kSandboxId;
    s.template_name = "tg";
    s.token_sha256 = Sha256Hex(kSandboxToken);
    FUZZ_CHECK(svc_.CreateSandbox(s).ok());
    noderuntime::WorkspaceSpec w;
    w.name = kWorkspaceName;
    w.size_mib = 64;
    w.token_sha256 = Sha256Hex(kWorkspaceToken);
    FUZZ_CHECK(svc_.PutWorkspace(w).ok());
    svc_.handling.reset();
    // A stopping ApiServer ends a followed console at once (its handler
    // would follow for ever on this, the only thread).
    (void)api_.Stop(0ms);
    core_ = std::make_shared<server::HttpServer::Core>(
        door_.limits, [this](const server::RequestHead& h) { return Decide(h); },
        [this](const char* reason) { Event(reason); }, std::nullopt);
    Connect();
  }

  // Sends one piece, then lets the server do all it can with it.
  void Send(std::string_view piece) {
    if (client_closed_) return;
    const size_t refusals = refusals_;
    bool delivered = true;
    while (!piece.empty()) {
      const int before = Queued();
      ssize_t n = ::send(client_.get(), piece.data(), piece.size(), MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && errno != EAGAIN) break;  // the server has gone
        // Its receive buffer is full: let it read (or not) and try again.
        Pump();
        Drain();
        pollfd p{client_.get(), POLLOUT, 0};
        if (::poll(&p, 1, 10) <= 0) break;  // it stopped reading: drop the rest
        continue;
      }
      piece.remove_prefix(size_t(n));
      sent_ += size_t(n);
      delivered = WaitDelivered(before, size_t(n)) && delivered;
      Pump();
      Drain();
    }
    if (delivered && refusals_ == 0 && !Upgraded()) {
      // The Gate has decided every request whose header is in, without
      // waiting for a body byte.
      size_t due = 0;
      while (due < header_ends_.size() && header_ends_[due] <= sent_) ++due;
      FUZZ_CHECK(decisions_ >= due);
    }
    if (refusals_ > refusals) {
      // Refused from what it had so far: the answer and the end of the
      // stream arrive without another byte from the client.
      FUZZ_CHECK(DrainToEnd());
    }
  }

  void End(int how) {
    if (how == 2) {
      core_->StopAccepting();
      Pump();
      Drain();
    }
    if (how == 3) {
      Drain();
      client_.reset();
      client_closed_ = true;
    } else {
      ::shutdown(client_.get(), SHUT_WR);
    }
    for (int round = 0;; ++round) {
      Pump();
      if (!client_closed_) Drain();
      if (core_->connections() == 0 && (client_closed_ || eof_)) break;
      // A half-closed (or gone) client ends the connection without waiting
      // for any deadline: only the kernel's delivery may take a moment.
      FUZZ_CHECK(round < kRounds);
      Wait();
    }
    FUZZ_CHECK(api_.Stop(0ms));  // every budget is back
    if (std::getenv("KUBICLE_FUZZ_VERBOSE")) Dump();
    CheckAnswers(/*whole=*/how != 3);
  }

 private:
  server::Decision Decide(const server::RequestHead& h) {
    FUZZ_CHECK(refusals_ == 0);  // nothing is decided after a refusal
    ++decisions_;
    svc_.in_gate = true;
    server::Decision d = door_.gate(h);
    svc_.in_gate = false;
    if (auto* r = std::get_if<server::Response>(&d)) {
      FUZZ_CHECK(r->code >= 400 && r->code < 600);
      Refused(r->code, /*by_gate=*/true);
      return d;
    }
    auto& a = std::get<server::Admitted>(d);
    a.inline_handler = true;
    a.handler = [this, who = WhoIs(h.authorization), inner = std::move(a.handler)](
                    std::string body, std::shared_ptr<server::Responder> responder) {
      FUZZ_CHECK(refusals_ == 0);
      auto recorder = std::make_shared<Recorder>(std::move(responder), &answers_);
      svc_.handling = who;
      inner(std::move(body), recorder);
      svc_.handling.reset();
      FUZZ_CHECK(recorder->replied());
    };
    return d;
  }

  // The refusals and closes the server decides itself.
  void Event(const char* reason) {
    door_.events(reason);
    const std::string_view r = reason;
    if (r == "header_too_large") return Refused(431);
    if (r == "body_too_large") return Refused(413);
    if (r == "bad_request") return Refused(400);
    std::fprintf(stderr, "unexpected http server event: %s\n", reason);
    FUZZ_CHECK(!"a timeout, eviction or limit fired during an input");
  }
  // A handler answered 101: what the client sends next is relayed.
  bool Upgraded() const {
    return std::any_of(answers_.begin(), answers_.end(),
                       [](const Answer& a) { return a.upgraded; });
  }
  void Refused(int code, bool by_gate = false) {
    ++refusals_;
    FUZZ_CHECK(refusals_ == 1);
    answers_.push_back({.code = code, .refusal = true, .by_gate = by_gate});
  }

  void Connect() {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    FUZZ_CHECK(::getsockname(Listener(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    client_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    // Each input's client from the next of 65,000 loopback addresses: the
    // client often closes first, and a thousand connections a second left
    // in TIME_WAIT would use up one address's ports within a minute.
    static uint32_t next = 0;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f010001 + next++ % 65000);  // 127.1.0.1 on
    int one = 1;
    ::setsockopt(client_.get(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    FUZZ_CHECK(::bind(client_.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    if (::connect(client_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 && !Connected()) {
      std::fprintf(stderr, "connect: %s\n", std::strerror(errno));
      FUZZ_CHECK(!"the client connects");
    }
    // Small pieces go out at once, not after the peer's delayed ACK.
    ::setsockopt(client_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(client_.get(), F_SETFL, O_NONBLOCK);
    server_fd_ = ::accept4(Listener(), nullptr, nullptr, SOCK_CLOEXEC);
    FUZZ_CHECK(server_fd_ >= 0);
    struct stat st{};
    FUZZ_CHECK(::fstat(server_fd_, &st) == 0);
    server_ino_ = st.st_ino;
    // As HttpServer's acceptor hands it over: on a strand, no Nagle.
    server::tcp::socket socket(boost::asio::make_strand(core_->ioc));
    boost::system::error_code ec;
    socket.assign(server::tcp::v4(), server_fd_, ec);
    FUZZ_CHECK(!ec);
    socket.set_option(server::tcp::no_delay(true), ec);
    server::StartConnection(core_, std::move(socket));
    Pump();
  }

  // After a connect() that failed: true if it was only interrupted (by
  // libFuzzer's -timeout alarm: connect is not restarted) and completes.
  bool Connected() const {
    if (errno != EINTR) return false;
    pollfd p{client_.get(), POLLOUT, 0};
    while (::poll(&p, 1, 1000) < 0 && errno == EINTR) {
    }
    int err = -1;
    socklen_t n = sizeof err;
    return ::getsockopt(client_.get(), SOL_SOCKET, SO_ERROR, &err, &n) == 0 && err == 0 &&
           (p.revents & POLLOUT);
  }

  // Bytes the server has not read yet; -1 once its socket is closed.
  int Queued() const {
    struct stat st{};
    if (::fstat(server_fd_, &st) != 0 || st.st_ino != server_ino_) return -1;
    int n = 0;
    return ::ioctl(server_fd_, FIONREAD, &n) == 0 ? n : -1;
  }
  // Loopback delivers within send() almost always; when the kernel defers
  // it, wait (a little), so the server sees the piece whole. False if it
  // is still not there.
  bool WaitDelivered(int before, size_t sent) const {
    if (before < 0) return true;  // the server's socket is closed
    for (int round = 0; round < 1000; ++round) {
      const int q = Queued();
      if (q < 0 || size_t(q) >= size_t(before) + sent) return true;
      std::this_thread::sleep_for(50us);
    }
    return false;
  }

  // Runs the server until it has nothing left to do.
  void Pump() {
    for (;;) {
      core_->ioc.restart();
      if (core_->ioc.poll() == 0) return;
    }
  }

  // Reads what has arrived (no waiting).
  void Drain() {
    char buf[16384];
    while (!eof_) {
      ssize_t n = ::recv(client_.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        received_.append(buf, size_t(n));
        continue;
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) eof_ = true;
      if (n < 0 && errno == EINTR) continue;
      return;
    }
  }
  // Reads until the server's end of the stream; false if it does not come
  // while the server runs on (kRounds rounds).
  bool DrainToEnd() {
    for (int round = 0; round < kRounds; ++round) {
      Drain();
      if (eof_) return true;
      Pump();
      Wait();
    }
    return false;
  }
  // One round of waiting for the kernel (a loopback delivery deferred to
  // ksoftirqd): a millisecond, or less if the client has more to read.
  // Bounds count rounds, not seconds, so a starved process fails none.
  void Wait() const {
    if (client_closed_ || eof_) return std::this_thread::sleep_for(1ms);
    pollfd p{client_.get(), POLLIN, 0};
    ::poll(&p, 1, 1);
  }

  // For triage (KUBICLE_FUZZ_VERBOSE=1 http_server_fuzzer FILE): what the
  // server decided and what the client read.
  void Dump() const {
    std::fprintf(stderr, "decided:");
    for (const Answer& a : answers_) {
      std::fprintf(stderr, " %d%s%s", a.code, a.refusal ? " (refusal)" : "",
                   a.aborted ? " (aborted)" : "");
    }
    std::fprintf(stderr, "\nread %zu bytes:\n%.*s\n", received_.size(),
                 int(std::min<size_t>(received_.size(), 4096)), received_.data());
  }

  // The responses the client read, against what the server decided.
  void CheckAnswers(bool whole) {
    size_t at = 0, finals = 0;
    bool continued = false;
    std::string_view rest = received_;
    while (!rest.empty()) {
      http::response_parser<http::string_body> p;
      p.eager(true);
      p.header_limit(64 << 10);
      p.body_limit(64u << 20);
      boost::beast::error_code ec;
      size_t used = 0;
      while (!p.is_done() && used < rest.size()) {
        size_t n = p.put(boost::asio::buffer(rest.data() + used, rest.size() - used), ec);
        used += n;
        if (ec == http::error::need_more) {
          ec = {};
          if (n == 0) break;
        }
        if (ec) break;
      }
      if (ec) std::fprintf(stderr, "unparsable answer at byte %zu: %s\n", at, ec.message().c_str());
      FUZZ_CHECK(!ec);
      if (!p.is_done()) {
        // Cut short: only the client's own close, or a stream its handler
        // aborted, leaves an answer unfinished; it is the last one.
        if (!whole) break;
        FUZZ_CHECK(p.is_header_done() && finals < answers_.size());
        FUZZ_CHECK(answers_[finals].aborted);
        FUZZ_CHECK(answers_[finals].code == int(p.get().result_int()));
        ++finals;
        break;
      }
      const auto& m = p.get();
      FUZZ_CHECK(m.version() == 11);
      rest.remove_prefix(used);
      at += used;
      if (m.result_int() < 200 && m.result() != http::status::switching_protocols) {
        FUZZ_CHECK(m.result() == http::status::continue_ && !continued);
        continued = true;
        continue;
      }
      FUZZ_CHECK(finals < answers_.size());
      const Answer& want = answers_[finals++];
      // 100 Continue only once the header is accepted: never before the
      // Gate's refusal.
      FUZZ_CHECK(!(continued && want.by_gate));
      continued = false;
      if (int(m.result_int()) != want.code) {
        std::fprintf(stderr, "answer %zu: got %u, the server decided %d\n", finals - 1,
                     m.result_int(), want.code);
      }
      FUZZ_CHECK(int(m.result_int()) == want.code);
      if (want.upgraded) {
        // The relay's guest sends nothing: nothing follows, nothing more
        // was decided.
        FUZZ_CHECK(m.result() == http::status::switching_protocols);
        FUZZ_CHECK(rest.empty() && finals == answers_.size());
        break;
      }
      // A refusal closes; nothing follows an answer that closes.
      if (want.refusal) FUZZ_CHECK(!m.keep_alive());
      if (!m.keep_alive()) FUZZ_CHECK(rest.empty() && finals == answers_.size());
    }
    if (whole) FUZZ_CHECK(finals == answers_.size());
  }

  GuardedService svc_;
  metrics::Registry registry_;
  server::ApiServer api_;
  server::ApiServer::FrontDoor door_;
  std::shared_ptr<server::HttpServer::Core> core_;
  UniqueFd client_;
  bool client_closed_ = false;
  int server_fd_ = -1;  // owned by the server's socket
  ino_t server_ino_ = 0;
  std::string received_;
  bool eof_ = false;
  std::vector<Answer> answers_;
  size_t refusals_ = 0;
  const std::vector<size_t> header_ends_;
  size_t sent_ = 0;       // bytes the client has sent
  size_t decisions_ = 0;  // requests the Gate has decided
};

}  // namespace
}  // namespace kubicle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kubicle::fuzz;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::vector<std::string> pieces(1);
  std::string stream;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0xff && !(i + 1 < size && data[i + 1] == 0xff)) {
      pieces.emplace_back();
      continue;
    }
    pieces.back().push_back(char(data[i]));
    stream.push_back(char(data[i]));
    if (data[i] == 0xff) ++i;
  }
  Session s(flags, stream);
  for (const std::string& piece : pieces) s.Send(piece);
  s.End(flags & 3);
  return 0;
}
