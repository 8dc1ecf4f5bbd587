// NodeClient: the CA given as PEM, raw GETs and NDJSON streams read as they
// arrive (a followed console).
#include <boost/asio/ssl.hpp>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include "noderuntime/client/node_client.h"

namespace kubicle::noderuntime::client {

namespace http = web::http;

Result<std::unique_ptr<NodeClient>> NodeClient::CreateWithCaPem(const std::string& url,
                                                                const std::string& token,
                                                                const std::string& ca_pem) {
  if (!ca_pem.empty() && ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return Status::InvalidArgument("the CA is not a PEM certificate");
  }
  try {
    std::unique_ptr<NodeClient> c(new NodeClient(url, token));
    http::client::http_client_config config;
    config.set_timeout(std::chrono::seconds(600));
    if (!ca_pem.empty()) {
      config.set_ssl_context_callback([ca_pem](boost::asio::ssl::context& ctx) {
        boost::system::error_code ec;
        // A CA that does not load fails the handshake, as it should.
        ctx.add_certificate_authority(boost::asio::buffer(ca_pem.data(), ca_pem.size()), ec);
      });
    }
    c->http_ = std::make_unique<http::client::http_client>(url, config);
    return c;
  } catch (const std::exception& e) {
    return Status::InvalidArgument("server URL " + url + ": " + e.what());
  }
}

Result<std::string> NodeClient::GetRaw(const std::string& path) {
  try {
    http::http_request req(http::methods::GET);
    req.set_request_uri(path);
    req.headers().add(http::header_names::authorization, "Bearer " + token_);
    auto resp = http_->request(req).get();
    auto v = resp.extract_vector().get();
    std::string text(v.begin(), v.end());
    if (resp.status_code() >= 300) return StatusFromHttp(resp.status_code(), text);
    return text;
  } catch (const std::exception& e) {
    return Status::Unavailable("GET " + url_ + path + ": " + e.what());
  }
}

Status NodeClient::GetLines(const std::string& path,
                            const std::function<bool(const json&)>& on_line) {
  try {
    http::http_request req(http::methods::GET);
    req.set_request_uri(path);
    req.headers().add(http::header_names::authorization, "Bearer " + token_);
    auto resp = http_->request(req).get();
    if (resp.status_code() >= 300) {
      auto v = resp.extract_vector().get();
      return StatusFromHttp(resp.status_code(), std::string(v.begin(), v.end()));
    }
    auto body = resp.body();
    std::string pending;
    while (true) {
      size_t nl = pending.find('\n');
      if (nl == std::string::npos) {
        // Whatever is there, or wait for one more byte: a line is handed
        // over as soon as its newline arrives.
        size_t avail = body.streambuf().in_avail();
        concurrency::streams::container_buffer<std::string> chunk;
        size_t n = body.read(chunk, avail > 0 ? std::min<size_t>(avail, 256 * 1024) : 1).get();
        if (n == 0) {
          if (pending.empty()) return Status::Ok();
          nl = pending.size();  // a last line without its newline
        } else {
          pending += chunk.collection();
          continue;
        }
      }
      std::string text = pending.substr(0, nl);
      pending.erase(0, std::min(nl + 1, pending.size()));
      if (text.empty()) continue;
      json j = json::parse(text, nullptr, false);
      if (!j.is_object()) return Status::DataLoss("bad stream line: " + text.substr(0, 200));
      if (!on_line(j)) return Status::Ok();
    }
  } catch (const std::exception& e) {
    return Status::Unavailable("GET " + url_ + path + ": " + e.what());
  }
}

}  // namespace kubicle::noderuntime::client
