// Private to the verbs backend: choosing and opening the RDMA device, port
// and GID (CIUIC_IB_HCA, CIUIC_IB_GID_INDEX).
//
// Thread contract: OpenDevice may be called from any thread; the returned
// context belongs to the caller.
#ifndef CIUIC_TRANSPORT_VERBS_VERBS_DEVICE_H_
#define CIUIC_TRANSPORT_VERBS_VERBS_DEVICE_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"

namespace ciuic::transport::verbs {

struct DeviceSelection {
  ibv_context* ctx = nullptr;  // open; the caller closes it
  std::string name;            // "mlx5_0", "rxe0"
  int port = 0;
  ibv_device_attr device_attr{};
  ibv_port_attr port_attr{};
  uint8_t link_layer = 0;      // kLinkInfiniBand or kLinkEthernet
  int gid_index = -1;          // -1: InfiniBand without a GRH (LID routing)
  uint8_t gid[16] = {};
  std::string gid_type;        // "RoCE v2", "RoCE v1", "IB", "" unknown
  bool grh_required = false;   // InfiniBand port that needs a GRH
  int numa_node = -1;          // OS index of the device's node; -1 unknown
};

// Opens the first device port that CIUIC_IB_HCA allows (all when empty) and
// that is ACTIVE, trying devices on the calling CPU's NUMA node first, and
// chooses its address: on RoCE the GID CIUIC_IB_GID_INDEX names, else the
// IPv4-mapped RoCE v2 GID (else any RoCE v2 GID); on InfiniBand the LID
// (and GID CIUIC_IB_GID_INDEX, default 0, when the port requires a GRH).
// Errors: kInvalidArgument naming CIUIC_IB_HCA / CIUIC_IB_GID_INDEX (bad
// syntax, index outside the table or an empty entry); kUnavailable with the
// reason: "no RDMA devices found", no allowed device, no ACTIVE port (each
// port's state listed), no RoCE v2 GID.
StatusOr<DeviceSelection> OpenDevice(const Config& config, const std::string& preferred = "");

// The order devices are tried in: `preferred` first (the topology plan's),
// then those on NUMA node `here` (-1: unknown), then the rest, each group
// in the order verbs lists them. Indices into `names`.
std::vector<size_t> DeviceOrder(const std::vector<std::string>& names, const std::vector<int>& numas, int here,
                                const std::string& preferred);

}  // namespace ciuic::transport::verbs

#endif  // CIUIC_TRANSPORT_VERBS_VERBS_DEVICE_H_
