// HttpKubeClient::Watch: a streaming GET ?watch=1 read line by line. Each
// line is one JSON watch event. Reads are polled so a CancelToken stops the
// watch promptly (cancelling the request closes its connection).
#include <future>

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include "common/query_escape.h"
#include "kube/http_kube_client.h"

namespace kubicle::kube {

namespace http = web::http;
namespace client = web::http::client;

namespace {

struct LineRead {
  concurrency::streams::container_buffer<std::string> buf;
  std::promise<size_t> done;
};

// Reads one line; returns false (with *eof) at the end of the stream.
Result<bool> ReadLine(concurrency::streams::istream& body, std::string* line,
                      const CancelToken& cancel, pplx::cancellation_token_source& cts) {
  auto read = std::make_shared<LineRead>();
  std::future<size_t> f = read->done.get_future();
  body.read_line(read->buf).then([read](pplx::task<size_t> t) {
    try {
      read->done.set_value(t.get());
    } catch (...) {
      read->done.set_exception(std::current_exception());
    }
  });
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (cancel.IsCancelled()) {
      cts.cancel();
      return false;
    }
  }
  size_t n = f.get();  // may throw; the caller catches
  *line = read->buf.collection();
  return n > 0 || !body.is_eof();
}

}  // namespace

Status HttpKubeClient::Watch(const Resource& r, std::string_view ns, const WatchOptions& opts,
                             const WatchHandler& handler, const CancelToken& cancel) {
  std::string path = r.Path(ns) + "?watch=1";
  if (!opts.label_selector.empty()) path += "&labelSelector=" + QueryEscape(opts.label_selector);
  if (!opts.field_selector.empty()) path += "&fieldSelector=" + QueryEscape(opts.field_selector);
  if (!opts.resource_version.empty()) {
    path += "&resourceVersion=" + QueryEscape(opts.resource_version);
  }
  if (opts.allow_bookmarks) path += "&allowWatchBookmarks=true";
  path += "&timeoutSeconds=" + std::to_string(opts.timeout_seconds);
  pplx::cancellation_token_source cts;
  try {
    client::http_client watch_client(config_.server, MakeConfig(opts.timeout_seconds + 60));
    http::http_request req(http::methods::GET);
    req.set_request_uri(path);
    req.headers().add("Accept", "application/json");
    std::string token = Token();
    if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
    http::http_response resp = watch_client.request(req, cts.get_token()).get();
    if (resp.status_code() != 200) {
      std::string text = resp.extract_utf8string(true).get();
      Json body = Json::parse(text, nullptr, false);
      return StatusFromHttp(resp.status_code(), body.is_discarded() ? Json() : body);
    }
    concurrency::streams::istream body = resp.body();
    std::string line;
    while (true) {
      ASSIGN_OR_RETURN(bool more, ReadLine(body, &line, cancel, cts));
      if (!more) return Status::Ok();
      if (line.empty() || line == "\r") continue;
      Json ev = Json::parse(line, nullptr, false);
      if (ev.is_discarded() || !ev.contains("type")) {
        return Status::Unavailable("malformed watch event: " + line.substr(0, 200));
      }
      ASSIGN_OR_RETURN(WatchEventType type, ParseEventType(ev["type"].get<std::string>()));
      if (type == WatchEventType::kError) {
        const Json& st = ev["object"];
        return StatusFromHttp(st.value("code", 500), st);
      }
      if (!handler(WatchEvent{type, std::move(ev["object"])})) {
        cts.cancel();
        return Status::Ok();
      }
    }
  } catch (const std::exception& e) {
    if (cancel.IsCancelled()) return Status::Ok();
    return Status::Unavailable("watch " + r.GroupResource() + ": " + e.what());
  }
}

}  // namespace kubicle::kube
