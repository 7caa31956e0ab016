// tcp_socket.cpp — address parsing, resolution, connect with a timeout, listen; see tcp_socket.hpp.
#include "engine/trace/tcp_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

void set_non_blocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  check(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, "cannot make a socket non-blocking: ",
        errno_words(errno));
}

using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

// A system message ("Connection refused") as words inside a sentence ("connection refused").
std::string in_sentence(std::string words) {
  if (!words.empty()) words[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(words[0])));
  return words;
}

// Every address `address` resolves to, for connecting or (passive) for binding.
AddressList resolve(const SocketAddress& address, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  const int status = getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
  check(status == 0, status == EAI_NONAME ? std::string("no such host") : in_sentence(gai_strerror(status)));
  return AddressList(found, freeaddrinfo);
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
    return IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) ||
           (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && v6->sin6_addr.s6_addr[12] == 127);
  }
  return false;
}

std::string numeric_name(const sockaddr* a, socklen_t length) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(a, length, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  const bool v6 = a->sa_family == AF_INET6;
  return (v6 ? "[" : "") + std::string(host) + (v6 ? "]:" : ":") + port;
}

// One connect attempt to one resolved address: the connected socket, or why not.
OwnedFd try_connect(const addrinfo& a, std::chrono::milliseconds timeout, std::string& why) {
  OwnedFd s(socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC, a.ai_protocol));
  if (!s.open()) {
    why = errno_words(errno);
    return {};
  }
  set_non_blocking(s.fd());
  if (connect(s.fd(), a.ai_addr, a.ai_addrlen) == 0) return s;
  if (errno != EINPROGRESS) {
    why = errno_words(errno);
    return {};
  }
  pollfd p{s.fd(), POLLOUT, 0};
  int ready = 0;
  do {
    ready = poll(&p, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) {
    why = "timed out after " + std::to_string(timeout.count()) + " ms";
    return {};
  }
  int error = 0;
  socklen_t size = sizeof error;
  if (ready < 0 || getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
  if (error != 0) {
    why = errno_words(error);
    return {};
  }
  return s;
}

}  // namespace

std::string errno_words(int error) { return in_sentence(std::strerror(error)); }

std::string SocketAddress::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

SocketAddress parse_socket_address(std::string_view text, std::string_view flag, std::string_view default_host,
                                   bool any_port) {
  const std::string expected = default_host.empty() ? "HOST:PORT (e.g. 127.0.0.1:7077)"
                                                     : "[HOST:]PORT (e.g. 7077 or 127.0.0.1:7077)";
  const auto bad = [&](std::string_view why) {
    fail(flag, " '", text, "': ", why, "; expected ", expected);
  };
  SocketAddress address;
  std::string_view port = text;
  if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    std::string_view host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    } else if (host.find(':') != std::string_view::npos) {
      bad("an IPv6 address needs brackets");
    }
    if (host.empty()) bad("no host before the ':'");
    address.host = std::string(host);
  } else if (default_host.empty()) {
    bad("no port");
  } else {
    address.host = std::string(default_host);
  }
  int value = -1;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc() || end != port.data() + port.size()) bad("the port is not a number");
  if (value < (any_port ? 0 : 1) || value > 65535)
    bad("port " + std::to_string(value) + " is outside " + (any_port ? "0" : "1") + "..65535");
  address.port = value;
  return address;
}

OwnedFd& OwnedFd::operator=(OwnedFd&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

int OwnedFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void OwnedFd::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

OwnedFd connect_tcp(const SocketAddress& address, std::chrono::milliseconds timeout) {
  const AddressList list = resolve(address, false);
  std::string why = "no address";
  for (const addrinfo* a = list.get(); a; a = a->ai_next)
    if (OwnedFd s = try_connect(*a, timeout, why); s.open()) return s;
  fail(why);
}

ListeningSocket listen_tcp(const SocketAddress& address) {
  const AddressList list = resolve(address, true);
  std::string why = "no address";
  for (const addrinfo* a = list.get(); a; a = a->ai_next) {
    OwnedFd s(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.open()) {
      why = errno_words(errno);
      continue;
    }
    // A dashboard restarted at once may rebind the port its last run left in TIME_WAIT.
    const int yes = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || listen(s.fd(), SOMAXCONN) != 0) {
      why = errno_words(errno);
      continue;
    }
    set_non_blocking(s.fd());
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    check(getsockname(s.fd(), reinterpret_cast<sockaddr*>(&bound), &length) == 0, errno_words(errno));
    const int port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                                                 : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    return ListeningSocket{std::move(s), port, is_loopback(a->ai_addr)};
  }
  fail(why);
}

std::string peer_name(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return "unknown peer";
  return numeric_name(reinterpret_cast<const sockaddr*>(&peer), length);
}

}  // namespace fsdplab
