// The PMIx bootstrap's parts that need no PMIx library (see pmix.h).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdlib>

#include "transport/net.h"
#include "transport/pmix.h"
#include "transport/tcp/tcp_iface.h"

namespace ciuic::transport::pmix {

bool VariablesPresent(const Lookup& lookup) {
  return lookup("PMIX_NAMESPACE") != nullptr && lookup("PMIX_RANK") != nullptr;
}

std::string FormatStoreAddress(const std::string& host, uint16_t port) {
  return host + ":" + std::to_string(port);
}

Status ParseStoreAddress(const std::string& value, std::string* host, uint16_t* port) {
  const size_t colon = value.rfind(':');
  const std::string digits = colon == std::string::npos ? "" : value.substr(colon + 1);
  bool ok = colon != std::string::npos && colon > 0 && !digits.empty() && digits.size() <= 5;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  const long p = ok ? std::strtol(digits.c_str(), nullptr, 10) : 0;
  if (!ok || p < 1 || p > 65535) {
    return DataLossError(std::string("PMIx key ") + kStoreKey + "='" + value + "' from rank 0: expected host:port");
  }
  *host = value.substr(0, colon);
  *port = static_cast<uint16_t>(p);
  return Status::Ok();
}

StatusOr<std::string> MakeSecret() {
  unsigned char bytes[32];
  CIUIC_RETURN_IF_ERROR(net::RandomBytes(bytes, sizeof(bytes)));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

StatusOr<std::string> AdvertisedHost(const std::string& socket_ifname) {
  CIUIC_ASSIGN_OR_RETURN(std::vector<tcp::Interface> seen, tcp::ListInterfaces());
  CIUIC_ASSIGN_OR_RETURN(tcp::Interface chosen, tcp::SelectInterface(socket_ifname, seen));
  char buf[INET6_ADDRSTRLEN] = "";
  if (chosen.addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&chosen.addr)->sin_addr, buf, sizeof(buf));
  } else if (chosen.addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&chosen.addr)->sin6_addr, buf, sizeof(buf));
  }
  if (buf[0] == '\0') return UnavailableError("interface " + chosen.name + " has no numeric address");
  return std::string(buf);
}

}  // namespace ciuic::transport::pmix
