// This machine's host name when DNS/hosts resolution maps it to a loopback address: a name
// (not a literal) that points back at us, the DNS-rebinding shape the SSRF guard must catch
// at resolve/connect time. "" when the name does not resolve to loopback here.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <string>

namespace agentq::test {

inline std::string loopback_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || std::string(name) == "localhost") return "";
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(name, nullptr, &hints, &res) != 0) return "";
  bool loopback = false;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET)
      loopback |= (ntohl(reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    if (ai->ai_family == AF_INET6)
      loopback |= IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr);
  }
  freeaddrinfo(res);
  return loopback ? name : "";
}

}  // namespace agentq::test
