// The API over TLS: an in-process ApiServer with a serving certificate from
// its own CA, reached with cpprestsdk's client verifying against that CA.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ssl.hpp>
#include <cpprest/http_client.h>

#include <fstream>

#include "noderuntime/server/api_server.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "noderuntime/server/serving_cert.h"

namespace kubicle::noderuntime::server {

using testing::FakeSandboxService;
namespace {

namespace http = web::http;
using namespace std::chrono_literals;
constexpr char kAdmin[] = "admin-secret-token";

class ApiTlsTest : public ::testing::Test {
 protected:
  // Roomy: a TLS handshake on a loaded machine must not meet it.
  virtual std::chrono::milliseconds HeaderTimeout() const { return 10s; }
  void SetUp() override {
    ca_ = *MakeCa("test CA", 24h);
    auto leaf = MakeServingCert(ca_, {"127.0.0.1", "localhost"}, 24h);
    ASSERT_TRUE(leaf.ok());
    ApiServerOptions o;
    o.admin_token = kAdmin;
    o.header_timeout = HeaderTimeout();
    o.tls_cert_pem = leaf->cert_pem + ca_.cert_pem;
    o.tls_key_pem = leaf->key_pem;
    server_ = std::make_unique<ApiServer>(&fake_, &registry_, o);
    Status st = Status::Unavailable("no attempt");
    for (int i = 0; i < 5 && !st.ok(); ++i) {
      port_ = *PickFreePort();
      st = server_->Start("127.0.0.1", port_);
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    ca_file_ = "/tmp/kn-tls-ca-" + std::to_string(::getpid()) + ".pem";
    std::ofstream(ca_file_) << ca_.cert_pem;
  }
  void TearDown() override {
    server_->Stop();
    ::unlink(ca_file_.c_str());
  }
  // A client that trusts `ca_file` (none: the system's CAs only).
  std::unique_ptr<http::client::http_client> Client(const std::string& scheme,
                                                    const std::string& ca_file) {
    http::client::http_client_config c;
    c.set_timeout(5s);
    if (!ca_file.empty()) {
      c.set_ssl_context_callback(
          [ca_file](boost::asio::ssl::context& ctx) { ctx.load_verify_file(ca_file); });
    }
    return std::make_unique<http::client::http_client>(
        scheme + "://127.0.0.1:" + std::to_string(port_), c);
  }
  int Get(http::client::http_client& c, const std::string& path) {
    http::http_request req(http::methods::GET);
    req.set_request_uri(path);
    req.headers().add("Authorization", std::string("Bearer ") + kAdmin);
    return c.request(req).get().status_code();
  }

  CertAndKey ca_;
  FakeSandboxService fake_;
  metrics::Registry registry_;
  std::unique_ptr<ApiServer> server_;
  int port_ = 0;
  std::string ca_file_;
};

TEST_F(ApiTlsTest, VerifiedClientIsServed) {
  auto c = Client("https", ca_file_);
  EXPECT_EQ(Get(*c, "/healthz"), 200);
  EXPECT_EQ(Get(*c, "/v1/templates"), 200);
  // Streamed exec over TLS.
  http::http_request put(http::methods::PUT);
  put.set_request_uri("/v1/templates/tg");
  put.headers().add("Authorization", std::string("Bearer ") + kAdmin);
  put.set_body(std::string(R"({"kernel":"/k"})"), "application/json");
  ASSERT_EQ(c->request(put).get().status_code(), 202);
  http::http_request create(http::methods::POST);
  create.set_request_uri("/v1/sandboxes");
  create.headers().add("Authorization", std::string("Bearer ") + kAdmin);
  create.set_body(std::string(R"({"template":"tg","id":"s"})"), "application/json");
  ASSERT_EQ(c->request(create).get().status_code(), 201);
  http::http_request exec(http::methods::POST);
  exec.set_request_uri("/v1/sandboxes/s/exec?stream=true");
  exec.headers().add("Authorization", std::string("Bearer ") + kAdmin);
  exec.set_body(std::string(R"({"argv":["echo","over","tls"]})"), "application/json");
  auto r = c->request(exec).get();
  EXPECT_EQ(r.status_code(), 200);
  auto bytes = r.extract_vector().get();
  std::string body(bytes.begin(), bytes.end());
  EXPECT_NE(body.find("\"exit\""), std::string::npos) << body;
  EXPECT_NE(body.find("b3ZlciB0bHMK"), std::string::npos) << body;  // "over tls\n"
}

TEST_F(ApiTlsTest, UnverifiedClientsAndPlainHttpAreRefused) {
  // The system's CAs do not know the node's CA: the handshake fails.
  auto c = Client("https", "");
  EXPECT_THROW(Get(*c, "/healthz"), http::http_exception);
  // Another CA: the same.
  auto other = *MakeCa("other CA", 24h);
  std::string other_file = ca_file_ + ".other";
  std::ofstream(other_file) << other.cert_pem;
  auto c2 = Client("https", other_file);
  EXPECT_THROW(Get(*c2, "/healthz"), http::http_exception);
  ::unlink(other_file.c_str());
  // Plain HTTP on the TLS port gets no answer.
  auto plain = Client("http", "");
  EXPECT_THROW(Get(*plain, "/healthz"), http::http_exception);
  // The server is fine afterwards.
  EXPECT_EQ(Get(*Client("https", ca_file_), "/healthz"), 200);
}

class ApiTlsStallTest : public ApiTlsTest {
 protected:
  std::chrono::milliseconds HeaderTimeout() const override { return 1s; }
};

TEST_F(ApiTlsStallTest, StalledHandshakeIsClosedAtTheHeaderDeadline) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::send(fd, "\x16\x03", 2, 0), 2);  // the start of a ClientHello, then nothing
  pollfd p{fd, POLLIN, 0};
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  char buf[64];
  EXPECT_LE(::recv(fd, buf, sizeof buf, 0), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 800ms);
  ::close(fd);
}

TEST(ApiTls, BadCertificatesAreAStatus) {
  FakeSandboxService fake;
  metrics::Registry registry;
  ApiServerOptions o;
  o.admin_token = "t";
  o.tls_cert_pem = "garbage";
  o.tls_key_pem = "garbage";
  ApiServer s(&fake, &registry, o);
  EXPECT_EQ(s.Start("127.0.0.1", *PickFreePort()).code(), StatusCode::kInvalidArgument);
  metrics::Registry registry2;
  auto ca = *MakeCa("a", 1h);
  auto leaf = *MakeServingCert(ca, {"127.0.0.1"}, 1h);
  o.tls_cert_pem = leaf.cert_pem;
  o.tls_key_pem = ca.key_pem;  // not the certificate's key
  ApiServer s2(&fake, &registry2, o);
  EXPECT_EQ(s2.Start("127.0.0.1", *PickFreePort()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubicle::noderuntime::server
