/*
 * edgetune: the POSIX TCP socket handle TVM 0.27's RPC sources use (a copyable file descriptor;
 * Close closes it), written for cross-building that runtime from the sources its wheel ships.
 */
#ifndef EDGETUNE_SUPPORT_SOCKET_H_
#define EDGETUNE_SUPPORT_SOCKET_H_

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <tvm/ffi/error.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace tvm {
namespace support {

/*! \brief An IPv4 or IPv6 address and port, resolved from a host name. */
class SockAddr {
 public:
  SockAddr() { std::memset(&addr_, 0, sizeof(addr_)); }
  SockAddr(const char* host, int port) : SockAddr() {
    addrinfo hints;
    std::memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host, nullptr, &hints, &res);
    TVM_FFI_ICHECK(rc == 0 && res != nullptr) << "cannot resolve host " << host << ": " << gai_strerror(rc);
    std::memcpy(&addr_, res->ai_addr, res->ai_addrlen);
    len_ = res->ai_addrlen;
    freeaddrinfo(res);
    if (addr_.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&addr_)->sin_port = htons(static_cast<uint16_t>(port));
    } else {
      reinterpret_cast<sockaddr_in6*>(&addr_)->sin6_port = htons(static_cast<uint16_t>(port));
    }
  }
  int ss_family() const { return addr_.ss_family; }
  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&addr_); }
  socklen_t size() const { return len_; }
  std::string AsString() const {
    char host[NI_MAXHOST] = "?";
    char port[NI_MAXSERV] = "?";
    getnameinfo(addr(), len_, host, sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
    return std::string(host) + ":" + port;
  }

 private:
  sockaddr_storage addr_;
  socklen_t len_{0};
};

/*! \brief Socket errors. */
class Socket {
 public:
  [[noreturn]] static void Error(const char* what) {
    TVM_FFI_THROW(InternalError) << "Socket " << what << " error: " << std::strerror(errno);
    throw;  // unreachable: TVM_FFI_THROW throws
  }
};

/*! \brief A TCP socket (a plain descriptor: copies share it). */
class TCPSocket {
 public:
  using SockType = int;
  static constexpr SockType kInvalid = -1;
  TCPSocket() = default;
  explicit TCPSocket(SockType fd) : sockfd(fd) {}
  void Create(int family) {
    sockfd = socket(family, SOCK_STREAM, 0);
    if (sockfd == kInvalid) Socket::Error("Create");
  }
  bool Connect(const SockAddr& addr) { return connect(sockfd, addr.addr(), addr.size()) == 0; }
  bool BadSocket() const { return sockfd == kInvalid; }
  void Close() {
    if (sockfd != kInvalid) close(sockfd);
    sockfd = kInvalid;
  }
  ssize_t Send(const void* data, size_t size) {
    ssize_t n;
    do {
      n = send(sockfd, data, size, MSG_NOSIGNAL);
    } while (n == -1 && errno == EINTR);
    return n;
  }
  ssize_t Recv(void* data, size_t size) {
    ssize_t n;
    do {
      n = recv(sockfd, data, size, 0);
    } while (n == -1 && errno == EINTR);
    return n;
  }
  /*! \brief Send all size bytes; how many went (size unless the peer closed). */
  size_t SendAll(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    size_t done = 0;
    while (done < size) {
      ssize_t n = Send(p + done, size - done);
      if (n == -1) Socket::Error("SendAll");
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  /*! \brief Receive exactly size bytes; how many came (size unless the peer closed). */
  size_t RecvAll(void* data, size_t size) {
    char* p = static_cast<char*>(data);
    size_t done = 0;
    while (done < size) {
      ssize_t n = Recv(p + done, size - done);
      if (n == -1) Socket::Error("RecvAll");
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  SockType sockfd{kInvalid};
};

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_SUPPORT_SOCKET_H_
