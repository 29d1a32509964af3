// Private: which network interface the tcp backend listens on, chosen from
// CIUIC_SOCKET_IFNAME the way NCCL_SOCKET_IFNAME chooses.
// Thread contract: free functions; ListInterfaces reads the system.
#ifndef CIUIC_TRANSPORT_TCP_TCP_IFACE_H_
#define CIUIC_TRANSPORT_TCP_TCP_IFACE_H_

#include <sys/socket.h>

#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::transport::tcp {

// One address of a network interface.
struct Interface {
  std::string name;
  bool up = false;
  bool loopback = false;
  sockaddr_storage addr{};  // AF_INET or AF_INET6, port 0
};

// Every IPv4 and IPv6 address of every interface (getifaddrs order), link-local
// IPv6 addresses left out (they need a scope id). Errors: kUnavailable.
StatusOr<std::vector<Interface>> ListInterfaces();

// Picks the address to listen on from `spec` (CIUIC_SOCKET_IFNAME):
//   ""            the first interface that is up and not loopback with an
//                 IPv4 address, else one with IPv6, else loopback;
//   "eth,ib"      interfaces whose name starts with one of the prefixes;
//   "=eth0,eth1"  interfaces named exactly so;
//   "^docker,lo"  interfaces matching none of the prefixes ("^=" exact);
// among the matches (up only) the first IPv4 address wins, else the first
// IPv6 one; in "^" mode non-loopback interfaces are preferred.
// Errors: kInvalidArgument naming CIUIC_SOCKET_IFNAME (a spec with no name),
// kUnavailable naming CIUIC_SOCKET_IFNAME and listing the interfaces seen
// (nothing matches).
StatusOr<Interface> SelectInterface(const std::string& spec, const std::vector<Interface>& seen);

}  // namespace ciuic::transport::tcp

#endif  // CIUIC_TRANSPORT_TCP_TCP_IFACE_H_
