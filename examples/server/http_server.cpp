// infer serve's HTTP/1.1 server (see http_server.h).
#include "http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace http {

using Clock = std::chrono::steady_clock;

namespace {

bool iequals(const std::string& a, const char* b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

const char* reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string Request::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name.c_str())) return v;
  return "";
}

// ---- one connection ----

enum class State { Idle, Header, Body, Queued, Writing, Draining };

class Connection {
 public:
  int fd = -1;
  std::string addr;
  int port = 0;
  State state = State::Idle;
  std::string in;  // bytes read, not yet consumed
  size_t pos = 0;  // consumed prefix of `in`
  Clock::time_point since = Clock::now();  // the state's start (deadlines)
  std::string out;                         // I/O thread: response bytes left to write
  size_t out_pos = 0;
  bool close_after = false;
  bool in_epoll = false;
  // The request being read.
  Request req;
  bool chunked = false;
  size_t content_length = 0;
  int chunk_phase = 0;  // 0: size line, 1: data, 2: CRLF after data, 3: trailers
  size_t chunk_left = 0;
  size_t trailer_bytes = 0;
  size_t drained = 0;  // Draining: bytes read and thrown away
  bool keep_alive = true;
  double write_timeout = 30;

  // Worker side: every byte of [p, p+n) written, waiting for the socket at
  // most write_timeout without progress.
  bool write_all(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
      if (k > 0) {
        p += k;
        n -= static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd pf{fd, POLLOUT, 0};
        const int r = ::poll(&pf, 1, static_cast<int>(write_timeout * 1000));
        if (r <= 0 || (pf.revents & (POLLERR | POLLHUP))) return false;
        continue;
      }
      return false;
    }
    return true;
  }
  bool gone() const {
    pollfd p{fd, static_cast<short>(POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }
};

bool Response::start_stream(const std::string& type) {
  if (!conn_ || streaming_) return false;
  streaming_ = true;
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\nContent-Type: " + type +
                  "\r\nTransfer-Encoding: chunked\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  if (!conn_->keep_alive) h += "Connection: close\r\n";
  h += "\r\n";
  if (!conn_->write_all(h.data(), h.size())) failed_ = true;
  return !failed_;
}

bool Response::write(const char* data, size_t n) {
  if (!conn_ || !streaming_ || failed_) return false;
  if (n == 0) return true;
  char head[32];
  const int hn = std::snprintf(head, sizeof head, "%zx\r\n", n);
  std::string buf;
  buf.reserve(static_cast<size_t>(hn) + n + 2);
  buf.append(head, static_cast<size_t>(hn)).append(data, n).append("\r\n");
  if (!conn_->write_all(buf.data(), buf.size())) failed_ = true;
  return !failed_;
}

bool Response::client_gone() const { return failed_ || (conn_ && conn_->gone()); }

// ---- the server ----

struct Route {
  std::string method, path;
  Handler h;
  bool inline_ = false, prefix = false;
};

struct Server::Impl {
  Options opt;
  ErrorBody error_body;
  Logger logger;
  std::vector<Route> routes;
  int listen_fd = -1;
  int ep = -1;
  int wake = -1;  // eventfd: workers hand connections back, stop()
  std::atomic<bool> stopping{false};
  std::thread io;
  std::vector<std::thread> workers;
  std::unordered_map<int, std::shared_ptr<Connection>> conns;  // I/O thread only
  std::vector<int> pending;  // I/O thread: idle connections with buffered bytes (pipelining)

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::shared_ptr<Connection>, const Route*>> queue;  // to workers
  std::deque<std::shared_ptr<Connection>> returned;                       // from workers

  void watch(Connection& c, uint32_t events) {
    epoll_event e{};
    e.events = events;
    e.data.fd = c.fd;
    epoll_ctl(ep, c.in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &e);
    c.in_epoll = true;
  }
  void unwatch(Connection& c) {
    if (c.in_epoll) epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
    c.in_epoll = false;
  }
  void close_conn(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    unwatch(*it->second);
    ::close(fd);
    conns.erase(it);
  }

  std::string serialize(const Response& r, bool keep_alive) {
    std::string h = "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) + "\r\nContent-Type: " + r.content_type +
                    "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
    for (const auto& [k, v] : r.headers) h += k + ": " + v + "\r\n";
    if (!keep_alive) h += "Connection: close\r\n";
    h += "\r\n";
    return h;
  }

  // I/O thread: queue a whole response on c and start writing it.
  void respond_inline(Connection& c, const Response& r) {
    if (logger) logger(c.req, r.status);
    c.out = serialize(r, c.keep_alive && !c.close_after) + r.body;
    c.out_pos = 0;
    c.state = State::Writing;
    c.since = Clock::now();
    flush(c);
  }
  void respond_error(Connection& c, int status, const std::string& message, const std::string& code) {
    Response r;
    r.status = status;
    r.set_content(error_body(status, message, code), "application/json");
    c.close_after = true;
    respond_inline(c, r);
  }

  // Writes what it can of c.out; when done, the connection reads its next request.
  void flush(Connection& c) {
    while (c.out_pos < c.out.size()) {
      const ssize_t k = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (k > 0) {
        c.out_pos += static_cast<size_t>(k);
        c.since = Clock::now();  // progress
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        watch(c, EPOLLOUT);
        return;
      }
      close_conn(c.fd);
      return;
    }
    c.out.clear();
    c.out.shrink_to_fit();
    c.out_pos = 0;
    if (c.close_after) return linger(c);
    next_request(c);
  }

  // After a last answer: the write side is shut and what the client still
  // sends is read and dropped for a moment (bounded in bytes and time), so
  // that closing with unread bytes does not reset the connection before the
  // client has read the answer (a 413 or 431 sent while it was still sending).
  void linger(Connection& c) {
    ::shutdown(c.fd, SHUT_WR);
    c.state = State::Draining;
    c.since = Clock::now();
    c.drained = 0;
    c.in.clear();
    c.in.shrink_to_fit();
    c.pos = 0;
    watch(c, EPOLLIN | EPOLLRDHUP);
  }

  // The connection is ready for its next request: one already in its buffer
  // (pipelined) is parsed at once, else it waits for bytes (idle).
  void next_request(Connection& c) {
    c.state = State::Idle;
    c.since = Clock::now();
    c.req = Request{};
    c.req.remote_addr = c.addr;
    c.req.remote_port = c.port;
    if (c.pos > 0) {
      c.in.erase(0, c.pos);
      c.pos = 0;
    }
    if (c.in.size() < 4096) c.in.shrink_to_fit();
    watch(c, EPOLLIN | EPOLLRDHUP);
    // Parsed from the I/O loop, not here: a long run of pipelined requests
    // answered inline must not recurse.
    if (!c.in.empty()) pending.push_back(c.fd);
  }

  // Parses what c.in holds; dispatches a complete request.
  void parse(Connection& c) {
    const int fd = c.fd;
    if (c.state == State::Idle && c.pos < c.in.size()) {
      // Blank lines before a request are allowed (RFC 9112 2.2).
      while (c.pos < c.in.size() && (c.in[c.pos] == '\r' || c.in[c.pos] == '\n')) ++c.pos;
      if (c.pos == c.in.size()) return;
      c.state = State::Header;
      c.since = Clock::now();
    }
    if (c.state == State::Header) {
      size_t end = c.in.find("\r\n\r\n", c.pos);
      size_t skip = 4;
      const size_t lf = c.in.find("\n\n", c.pos);
      if (lf != std::string::npos && (end == std::string::npos || lf < end)) end = lf, skip = 2;
      if (end == std::string::npos) {
        if (c.in.size() - c.pos > opt.max_header_bytes)
          respond_error(c, 431, "the request header is larger than " + std::to_string(opt.max_header_bytes) + " bytes",
                        "header_too_large");
        return;
      }
      if (end - c.pos > opt.max_header_bytes)
        return respond_error(c, 431, "the request header is larger than " + std::to_string(opt.max_header_bytes) + " bytes",
                             "header_too_large");
      if (!parse_header(c, c.in.substr(c.pos, end - c.pos))) return;
      c.pos = end + skip;
      c.state = State::Body;
      c.since = Clock::now();
      if (c.req.header("Expect").size() && iequals(trim(c.req.header("Expect")), "100-continue")) {
        static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)!::send(c.fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL);
      }
    }
    if (c.state == State::Body) {
      if (!c.chunked) {
        const size_t have = c.in.size() - c.pos;
        if (have < c.content_length) return;
        c.req.body.assign(c.in, c.pos, c.content_length);
        c.pos += c.content_length;
      } else if (!decode_chunks(c)) {
        return;
      }
      if (conns.count(fd)) dispatch(c);
    }
  }

  // The request line and headers; false after an error response.
  bool parse_header(Connection& c, const std::string& text) {
    std::vector<std::string> lines;
    size_t b = 0;
    while (b <= text.size()) {
      size_t e = text.find('\n', b);
      if (e == std::string::npos) e = text.size();
      std::string line = text.substr(b, e - b);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(std::move(line));
      b = e + 1;
      if (lines.size() > opt.max_header_lines + 1) {
        respond_error(c, 431, "the request has more than " + std::to_string(opt.max_header_lines) + " header lines",
                      "header_too_large");
        return false;
      }
    }
    // Request line: METHOD SP target SP HTTP/1.x
    const std::string& rl = lines[0];
    const size_t s1 = rl.find(' '), s2 = s1 == std::string::npos ? s1 : rl.find(' ', s1 + 1);
    if (s1 == std::string::npos || s2 == std::string::npos || rl.find(' ', s2 + 1) != std::string::npos || s1 == 0 ||
        s2 == s1 + 1) {
      respond_error(c, 400, "malformed request line (expected 'METHOD /path HTTP/1.1')", "bad_request_line");
      return false;
    }
    Request& q = c.req;
    q.method = rl.substr(0, s1);
    q.target = rl.substr(s1 + 1, s2 - s1 - 1);
    q.version = rl.substr(s2 + 1);
    for (char ch : q.method)
      if (!std::isupper(static_cast<unsigned char>(ch))) {
        respond_error(c, 400, "malformed request line: bad method", "bad_request_line");
        return false;
      }
    if (q.version != "HTTP/1.1" && q.version != "HTTP/1.0") {
      respond_error(c, 400, "unsupported HTTP version '" + q.version.substr(0, 32) + "' (HTTP/1.1 or HTTP/1.0)",
                    "bad_request_line");
      return false;
    }
    if (q.target.empty() || q.target[0] != '/') {
      respond_error(c, 400, "malformed request target (expected a path starting with '/')", "bad_request_line");
      return false;
    }
    const size_t qm = q.target.find('?');
    q.path = q.target.substr(0, qm);
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::string& l = lines[i];
      if (l.empty()) continue;
      const size_t colon = l.find(':');
      if (colon == std::string::npos || colon == 0 || l[0] == ' ' || l[0] == '\t' ||
          l.find_first_of(" \t") < colon) {
        respond_error(c, 400, "malformed header line " + std::to_string(i) + " (expected 'Name: value')", "bad_header");
        return false;
      }
      q.headers.emplace_back(l.substr(0, colon), trim(l.substr(colon + 1)));
    }
    // Framing: Content-Length or chunked, never both, never another coding.
    std::string te, cl;
    int n_cl = 0;
    for (const auto& [k, v] : q.headers) {
      if (iequals(k, "Transfer-Encoding")) te += (te.empty() ? "" : ",") + v;
      if (iequals(k, "Content-Length")) {
        if (n_cl++ && v != cl) {
          respond_error(c, 400, "conflicting Content-Length headers", "bad_content_length");
          return false;
        }
        cl = v;
      }
    }
    c.chunked = false;
    c.content_length = 0;
    c.chunk_phase = 0;
    c.chunk_left = 0;
    c.trailer_bytes = 0;
    if (!te.empty()) {
      if (!cl.empty()) {
        respond_error(c, 400, "both Transfer-Encoding and Content-Length given", "bad_framing");
        return false;
      }
      if (!iequals(trim(te), "chunked")) {
        respond_error(c, 501, "unsupported Transfer-Encoding '" + te.substr(0, 64) + "' (only 'chunked')",
                      "unsupported_transfer_encoding");
        return false;
      }
      c.chunked = true;
    } else if (!cl.empty()) {
      if (cl.size() > 18 || cl.find_first_not_of("0123456789") != std::string::npos) {
        respond_error(c, 400, "Content-Length is not a number", "bad_content_length");
        return false;
      }
      c.content_length = std::stoull(cl);
      if (c.content_length > opt.max_body) {
        respond_error(c, 413, "the request body is too large (" + std::to_string(c.content_length) + " bytes; --max-body-mb allows " +
                                  std::to_string(opt.max_body) + ")",
                      "payload_too_large");
        return false;
      }
    } else if (q.method == "POST" || q.method == "PUT" || q.method == "PATCH") {
      respond_error(c, 411, q.method + " needs a Content-Length or Transfer-Encoding: chunked", "length_required");
      return false;
    }
    const std::string conn_h = q.header("Connection");
    c.keep_alive = q.version == "HTTP/1.1" ? !iequals(trim(conn_h), "close") : iequals(trim(conn_h), "keep-alive");
    return true;
  }

  // Decodes chunks from c.in into c.req.body; true once the body is complete.
  // The body limit is checked as each chunk size is read.
  bool decode_chunks(Connection& c) {
    for (;;) {
      if (c.chunk_phase == 0 || c.chunk_phase == 2 || c.chunk_phase == 3) {
        const size_t e = c.in.find('\n', c.pos);
        if (e == std::string::npos) {
          if (c.in.size() - c.pos > 1024) {
            respond_error(c, 400, "malformed chunked body: a chunk-size or trailer line is too long", "bad_chunk");
            return false;
          }
          return false;
        }
        std::string line = c.in.substr(c.pos, e - c.pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        c.pos = e + 1;
        if (c.chunk_phase == 2) {
          if (!line.empty()) {
            respond_error(c, 400, "malformed chunked body: chunk data longer than its size", "bad_chunk");
            return false;
          }
          c.chunk_phase = 0;
          continue;
        }
        if (c.chunk_phase == 3) {
          c.trailer_bytes += line.size() + 2;
          if (c.trailer_bytes > opt.max_header_bytes) {
            respond_error(c, 431, "chunked body trailers too large", "header_too_large");
            return false;
          }
          if (line.empty()) return true;
          continue;
        }
        const std::string hex = trim(line.substr(0, line.find(';')));
        if (hex.empty() || hex.size() > 15 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
          respond_error(c, 400, "malformed chunked body: bad chunk size '" + hex.substr(0, 32) + "'", "bad_chunk");
          return false;
        }
        const size_t n = std::stoull(hex, nullptr, 16);
        if (n > opt.max_body || c.req.body.size() + n > opt.max_body) {
          respond_error(c, 413, "the request body is too large (more than --max-body-mb allows: " + std::to_string(opt.max_body) +
                                    " bytes)",
                        "payload_too_large");
          return false;
        }
        if (n == 0) {
          c.chunk_phase = 3;
          continue;
        }
        c.chunk_left = n;
        c.chunk_phase = 1;
      }
      if (c.chunk_phase == 1) {
        const size_t take = std::min(c.chunk_left, c.in.size() - c.pos);
        c.req.body.append(c.in, c.pos, take);
        c.pos += take;
        c.chunk_left -= take;
        // Drop consumed bytes so a long body is not held twice.
        if (c.pos > (1u << 16)) {
          c.in.erase(0, c.pos);
          c.pos = 0;
        }
        if (c.chunk_left > 0) return false;
        c.chunk_phase = 2;
      }
    }
  }

  const Route* find_route(Connection& c, bool* method_mismatch) {
    *method_mismatch = false;
    for (const Route& r : routes) {
      const bool path_ok = r.prefix ? c.req.path.size() > r.path.size() && c.req.path.compare(0, r.path.size(), r.path) == 0
                                    : c.req.path == r.path;
      if (!path_ok) continue;
      if (r.method != c.req.method) {
        *method_mismatch = true;
        continue;
      }
      if (r.prefix) c.req.match = c.req.path.substr(r.path.size());
      return &r;
    }
    return nullptr;
  }

  void dispatch(Connection& c) {
    unwatch(c);  // no reading while the request runs: pipelined bytes wait in c.in
    bool mismatch = false;
    const Route* r = find_route(c, &mismatch);
    if (!r) {
      c.close_after = false;
      Response res;
      res.status = mismatch ? 405 : 404;
      res.set_content(error_body(res.status, mismatch ? "method not allowed" : "no such endpoint",
                                 mismatch ? "method_not_allowed" : "not_found"),
                      "application/json");
      return respond_inline(c, res);
    }
    if (r->inline_) {
      Response res;
      run_handler(*r, c.req, res);
      return respond_inline(c, res);
    }
    std::shared_ptr<Connection> sp = conns[c.fd];
    {
      std::lock_guard<std::mutex> lk(mu);
      if (queue.size() < opt.queue) {
        c.state = State::Queued;
        queue.emplace_back(sp, r);
        cv.notify_one();
        return;
      }
    }
    respond_error(c, 503, "the server is busy (every worker is taken and the queue is full); retry later", "busy");
  }

  void run_handler(const Route& r, const Request& q, Response& res) {
    try {
      r.h(q, res);
    } catch (const std::bad_alloc&) {
      res = Response{};
      res.status = 500;
      res.set_content(error_body(500, "out of memory", "internal_error"), "application/json");
    } catch (const std::exception& e) {
      res = Response{};
      res.status = 500;
      res.set_content(error_body(500, e.what(), "internal_error"), "application/json");
    }
  }

  void worker_loop() {
    for (;;) {
      std::shared_ptr<Connection> c;
      const Route* r = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stopping.load() || !queue.empty(); });
        if (queue.empty()) return;
        c = std::move(queue.front().first);
        r = queue.front().second;
        queue.pop_front();
      }
      Response res;
      res.conn_ = c.get();
      run_handler(*r, c->req, res);
      bool ok = true;
      if (res.streaming_) {
        static const char kEnd[] = "0\r\n\r\n";
        ok = !res.failed_ && c->write_all(kEnd, sizeof kEnd - 1);
      } else {
        const std::string head = serialize(res, c->keep_alive);
        ok = c->write_all(head.data(), head.size()) && c->write_all(res.body.data(), res.body.size());
      }
      if (logger) logger(c->req, res.status);
      const bool big = res.body.size() > (1u << 20) || c->req.body.size() > (1u << 20);
      res = Response{};
      c->req.body.clear();
      c->req.body.shrink_to_fit();
      if (big) malloc_trim(0);  // give a large answer's memory back
      c->close_after = !ok || !c->keep_alive;
      {
        std::lock_guard<std::mutex> lk(mu);
        returned.push_back(std::move(c));
      }
      const uint64_t one = 1;
      (void)!::write(wake, &one, sizeof one);
    }
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (conns.size() >= opt.max_open) {
        ::close(fd);  // over the cap: refused at once
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_shared<Connection>();
      c->fd = fd;
      c->write_timeout = opt.write_timeout;
      char host[INET6_ADDRSTRLEN] = {0};
      if (ss.ss_family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        c->port = ntohs(a->sin_port);
      } else if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        c->port = ntohs(a->sin6_port);
      }
      c->addr = host;
      conns[fd] = c;
      next_request(*c);
    }
  }

  void on_readable(Connection& c) {
    char buf[65536];
    const int fd = c.fd;
    if (c.state == State::Draining) {
      for (;;) {
        const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
        if (k > 0 && (c.drained += static_cast<size_t>(k)) < (64u << 20)) continue;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        close_conn(fd);
        return;
      }
    }
    for (int rounds = 0; rounds < 4; ++rounds) {
      const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
      if (k > 0) {
        c.in.append(buf, static_cast<size_t>(k));
        parse(c);
        if (!conns.count(fd) || !c.in_epoll || c.state == State::Writing) return;
        if (static_cast<size_t>(k) < sizeof buf) return;
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (k < 0 && errno == EINTR) continue;
      close_conn(fd);  // closed by the client, or failed
      return;
    }
  }

  // Deadlines: the whole header, the whole body, idle keep-alive, stalled writes.
  void sweep() {
    const auto now = Clock::now();
    std::vector<int> expired;
    std::vector<std::pair<int, int>> timed_out;  // fd, status
    for (auto& [fd, c] : conns) {
      const double age = secs(now - c->since);
      if (c->state == State::Idle && age > opt.idle_timeout) expired.push_back(fd);
      else if (c->state == State::Draining && age > 2) expired.push_back(fd);
      else if (c->state == State::Writing && age > opt.write_timeout) expired.push_back(fd);
      else if (c->state == State::Header && age > opt.header_timeout) timed_out.emplace_back(fd, 0);
      else if (c->state == State::Body && age > opt.body_timeout) timed_out.emplace_back(fd, 1);
    }
    for (int fd : expired) close_conn(fd);
    for (auto [fd, body] : timed_out) {
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      respond_error(*it->second, 408,
                    body ? "the request body did not arrive within --read-timeout" : "the request header did not arrive in time",
                    "request_timeout");
    }
  }

  void io_loop() {
    epoll_event evs[256];
    auto last_sweep = Clock::now();
    while (!stopping.load()) {
      const int n = epoll_wait(ep, evs, 256, 100);
      for (int i = 0; i < n; ++i) {
        const int fd = evs[i].data.fd;
        if (fd == listen_fd) {
          accept_all();
          continue;
        }
        if (fd == wake) {
          uint64_t v;
          (void)!::read(wake, &v, sizeof v);
          std::deque<std::shared_ptr<Connection>> back;
          {
            std::lock_guard<std::mutex> lk(mu);
            back.swap(returned);
          }
          for (auto& c : back) {
            if (c->close_after) {
              linger(*c);
            } else {
              next_request(*c);
            }
          }
          continue;
        }
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        Connection& c = *it->second;
        if (c.state == State::Writing) {
          if (evs[i].events & (EPOLLERR | EPOLLHUP)) close_conn(fd);
          else flush(c);
          continue;
        }
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(c);
      }
      while (!pending.empty()) {
        std::vector<int> now;
        now.swap(pending);
        for (int fd : now) {
          auto it = conns.find(fd);
          if (it != conns.end() && it->second->state == State::Idle) parse(*it->second);
        }
      }
      if (secs(Clock::now() - last_sweep) > 0.1) {
        sweep();
        last_sweep = Clock::now();
      }
    }
  }
};

Server::Server(Options o, ErrorBody e, Logger l) : impl_(std::make_unique<Impl>()) {
  impl_->opt = o;
  impl_->error_body = std::move(e);
  impl_->logger = std::move(l);
}

Server::~Server() { stop(); }

void Server::route(const std::string& method, const std::string& path, Handler h, bool inline_, bool prefix) {
  impl_->routes.push_back(Route{method, path, std::move(h), inline_, prefix});
}

int Server::bind(const std::string& host, int port, std::string* why) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0 || !res) {
    if (why) *why = gai != 0 ? gai_strerror(gai) : "no address";
    return -1;
  }
  int fd = -1, err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
    err = errno;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (why) *why = std::strerror(err);
    return -1;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  impl_->listen_fd = fd;
  return ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void Server::start() {
  Impl& m = *impl_;
  m.ep = epoll_create1(EPOLL_CLOEXEC);
  m.wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = m.listen_fd;
  epoll_ctl(m.ep, EPOLL_CTL_ADD, m.listen_fd, &e);
  e.data.fd = m.wake;
  epoll_ctl(m.ep, EPOLL_CTL_ADD, m.wake, &e);
  for (int i = 0; i < std::max(1, m.opt.workers); ++i) m.workers.emplace_back([&m] { m.worker_loop(); });
  m.io = std::thread([&m] { m.io_loop(); });
}

void Server::stop() {
  Impl& m = *impl_;
  if (m.stopping.exchange(true)) return;
  if (m.io.joinable()) m.io.join();
  m.cv.notify_all();
  for (std::thread& t : m.workers) t.join();
  m.workers.clear();
  {
    std::lock_guard<std::mutex> lk(m.mu);
    m.queue.clear();
    m.returned.clear();
  }
  std::vector<int> fds;
  for (auto& [fd, c] : m.conns) fds.push_back(fd);
  for (int fd : fds) m.close_conn(fd);
  if (m.listen_fd >= 0) ::close(m.listen_fd);
  if (m.ep >= 0) ::close(m.ep);
  if (m.wake >= 0) ::close(m.wake);
  m.listen_fd = m.ep = m.wake = -1;
}

void append_json_string(std::string& out, const char* s, size_t n) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  size_t i = 0;
  while (i < n) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch < 0x80) {
      if (ch == '"') out += "\\\"";
      else if (ch == '\\') out += "\\\\";
      else if (ch == '\n') out += "\\n";
      else if (ch == '\r') out += "\\r";
      else if (ch == '\t') out += "\\t";
      else if (ch < 0x20) out += "\\u00", out += hex[ch >> 4], out += hex[ch & 15];
      else out += static_cast<char>(ch);
      ++i;
      continue;
    }
    // A whole, valid UTF-8 sequence is copied; anything else is U+FFFD.
    size_t len = ch >= 0xF0 && ch <= 0xF4 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC2 && ch < 0xE0 ? 2 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(ch == 0xE0 && c1 < 0xA0) && !(ch == 0xED && c1 >= 0xA0);
    } else if (ok && len == 4) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(ch == 0xF0 && c1 < 0x90) && !(ch == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  out += '"';
}

}  // namespace http
