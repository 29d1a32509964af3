// Interface selection for the tcp backend (see tcp_iface.h).
#include "transport/tcp/tcp_iface.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

#include "transport/net.h"

namespace ciuic::transport::tcp {

StatusOr<std::vector<Interface>> ListInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return UnavailableError(std::string("tcp: getifaddrs: ") + std::strerror(errno));
  }
  std::vector<Interface> out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_name == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    Interface itf;
    itf.name = a->ifa_name;
    itf.up = (a->ifa_flags & IFF_UP) != 0;
    itf.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (family == AF_INET) {
      std::memcpy(&itf.addr, a->ifa_addr, sizeof(sockaddr_in));
      reinterpret_cast<sockaddr_in*>(&itf.addr)->sin_port = 0;
    } else {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      std::memcpy(&itf.addr, in6, sizeof(sockaddr_in6));
      reinterpret_cast<sockaddr_in6*>(&itf.addr)->sin6_port = 0;
    }
    out.push_back(itf);
  }
  freeifaddrs(list);
  return out;
}

namespace {

// The address without its ":0" port.
std::string AddressText(const sockaddr_storage& ss) {
  std::string s = net::ToString(reinterpret_cast<const sockaddr*>(&ss));
  const size_t colon = s.rfind(':');
  if (colon != std::string::npos) s.resize(colon);
  if (s.size() >= 2 && s.front() == '[') s = s.substr(1, s.size() - 2);
  return s;
}

std::string Seen(const std::vector<Interface>& seen) {
  if (seen.empty()) return "none";
  std::string s;
  for (const Interface& i : seen) {
    if (!s.empty()) s += ", ";
    s += i.name + " " + AddressText(i.addr) + (i.up ? "" : " (down)");
  }
  return s;
}

}  // namespace

StatusOr<Interface> SelectInterface(const std::string& spec, const std::vector<Interface>& seen) {
  const bool exclude = !spec.empty() && spec[0] == '^';
  size_t pos = exclude ? 1 : 0;
  const bool exact = pos < spec.size() && spec[pos] == '=';
  if (exact) ++pos;
  std::vector<std::string> names;
  while (pos <= spec.size() && !spec.empty()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    if (comma > pos) names.push_back(spec.substr(pos, comma - pos));
    pos = comma + 1;
  }
  if (!spec.empty() && names.empty()) {
    return InvalidArgumentError("tcp: CIUIC_SOCKET_IFNAME='" + spec +
                                "' names no interface (expected e.g. eth0, =eth0, ^docker)");
  }
  auto matches = [&](const Interface& itf) {
    for (const std::string& n : names) {
      if (exact ? itf.name == n : itf.name.compare(0, n.size(), n) == 0) return true;
    }
    return false;
  };
  auto eligible = [&](const Interface& itf) {
    if (!itf.up) return false;
    if (spec.empty()) return true;
    return exclude ? !matches(itf) : matches(itf);
  };
  // Preference passes: (non-loopback first unless names were given to
  // include) x (IPv4 before IPv6).
  const bool prefer_non_loopback = spec.empty() || exclude;
  for (int pass = 0; pass < 4; ++pass) {
    const bool want_loopback = pass >= 2;
    const int family = pass % 2 == 0 ? AF_INET : AF_INET6;
    for (const Interface& itf : seen) {
      if (!eligible(itf) || itf.addr.ss_family != family) continue;
      if (prefer_non_loopback && itf.loopback != want_loopback) continue;
      if (!prefer_non_loopback && want_loopback) continue;  // passes 0-1 saw them all
      return itf;
    }
  }
  return UnavailableError("tcp: " +
                          (spec.empty() ? std::string("no network interface is up")
                                        : "CIUIC_SOCKET_IFNAME='" + spec +
                                              "' matches no interface that is up") +
                          "; interfaces seen: " + Seen(seen));
}

}  // namespace ciuic::transport::tcp
