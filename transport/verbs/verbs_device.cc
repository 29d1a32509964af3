// Device, port and GID selection for the verbs backend.
#include "transport/verbs/verbs_device.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "common/log.h"
#include "transport/verbs/verbs_wire.h"

namespace ciuic::transport::verbs {

namespace {

// IBV_QPF_GRH_REQUIRED in ibv_port_attr::flags (IB spec: the port's subnet
// manager asks for a GRH on every packet).
constexpr uint8_t kPortFlagGrhRequired = 1;

std::string ReadSysfsLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

int DeviceNumaNode(const std::string& name) {
  const std::string v = ReadSysfsLine("/sys/class/infiniband/" + name + "/device/numa_node");
  if (v.empty()) return -1;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  return (end != v.c_str() && n >= 0 && n < 4096) ? static_cast<int>(n) : -1;
}

// The NUMA node (OS index) of the CPU this thread runs on, -1 unknown.
int CurrentNumaNode() {
  const int cpu = sched_getcpu();
  if (cpu < 0) return -1;
  for (int node = 0; node < 64; ++node) {
    std::ifstream probe("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/node" + std::to_string(node) +
                        "/cpulist");
    if (probe) return node;
  }
  return -1;
}

const char* PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
  }
  return "?";
}

// The GID type of entry `index`: "RoCE v2", "RoCE v1", "IB", or "" when the
// entry is empty/unknown. ibv_query_gid_ex first, sysfs as the fallback
// (older kernels, containers that hide the verbs ioctl).
std::string GidType(ibv_context* ctx, const std::string& dev, int port, int index, uint8_t gid[16]) {
  ibv_gid_entry entry{};
  const int rc = ibv_query_gid_ex(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(index), &entry, 0);
  if (rc == 0) {
    std::memcpy(gid, entry.gid.raw, 16);
    switch (entry.gid_type) {
      case IBV_GID_TYPE_IB: return "IB";
      case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
      case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    }
    return "";
  }
  if (rc == ENODATA || rc == EINVAL) return "";  // an empty slot
  ibv_gid g{};
  if (ibv_query_gid(ctx, static_cast<uint8_t>(port), index, &g) != 0) return "";
  std::memcpy(gid, g.raw, 16);
  std::string t = ReadSysfsLine("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) +
                                      "/gid_attrs/types/" + std::to_string(index));
  if (t.find("v2") != std::string::npos) return "RoCE v2";
  if (t.find("v1") != std::string::npos) return "RoCE v1";
  return t;
}

Status ChooseGid(const Config& config, DeviceSelection* sel) {
  const int table = sel->port_attr.gid_tbl_len;
  const std::string where = sel->name + " port " + std::to_string(sel->port);
  if (config.ib_gid_index >= table) {
    return InvalidArgumentError("CIUIC_IB_GID_INDEX=" + std::to_string(config.ib_gid_index) + ": " + where +
                                " has " + std::to_string(table) + " GID entries");
  }
  if (sel->link_layer == kLinkInfiniBand) {
    sel->grh_required = (sel->port_attr.flags & kPortFlagGrhRequired) != 0;
    const int index = config.ib_gid_index >= 0 ? config.ib_gid_index : 0;
    if (table > 0) sel->gid_type = GidType(sel->ctx, sel->name, sel->port, index, sel->gid);
    sel->gid_index = sel->grh_required ? index : -1;
    if (sel->grh_required && GidIsZero(sel->gid)) {
      return InvalidArgumentError("CIUIC_IB_GID_INDEX: GID " + std::to_string(index) + " of " + where +
                                  " is empty but the port requires a GRH");
    }
    return Status::Ok();
  }
  if (config.ib_gid_index >= 0) {
    sel->gid_index = config.ib_gid_index;
    sel->gid_type = GidType(sel->ctx, sel->name, sel->port, sel->gid_index, sel->gid);
    if (GidIsZero(sel->gid)) {
      return InvalidArgumentError("CIUIC_IB_GID_INDEX=" + std::to_string(config.ib_gid_index) + ": GID entry of " +
                                  where + " is empty");
    }
    return Status::Ok();
  }
  // Auto: the IPv4-mapped RoCE v2 GID (routable, what RoCE v2 fabrics are
  // configured for), else any non-empty RoCE v2 GID.
  int any_v2 = -1;
  uint8_t any_gid[16] = {};
  for (int i = 0; i < table; ++i) {
    uint8_t gid[16] = {};
    const std::string type = GidType(sel->ctx, sel->name, sel->port, i, gid);
    if (type != "RoCE v2" || GidIsZero(gid)) continue;
    if (GidIsIpv4Mapped(gid)) {
      sel->gid_index = i;
      sel->gid_type = type;
      std::memcpy(sel->gid, gid, 16);
      return Status::Ok();
    }
    if (any_v2 < 0) {
      any_v2 = i;
      std::memcpy(any_gid, gid, 16);
    }
  }
  if (any_v2 >= 0) {
    sel->gid_index = any_v2;
    sel->gid_type = "RoCE v2";
    std::memcpy(sel->gid, any_gid, 16);
    return Status::Ok();
  }
  return UnavailableError("no RoCE v2 GID on " + where +
                          " (is an IP address configured on its netdev? or set CIUIC_IB_GID_INDEX)");
}

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};

}  // namespace

std::vector<size_t> DeviceOrder(const std::vector<std::string>& names, const std::vector<int>& numas, int here,
                                const std::string& preferred) {
  std::vector<size_t> order(names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto rank = [&](size_t i) { return !preferred.empty() && names[i] == preferred ? 0 : here >= 0 && numas[i] == here ? 1 : 2; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
  return order;
}

StatusOr<DeviceSelection> OpenDevice(const Config& config, const std::string& preferred) {
  CIUIC_ASSIGN_OR_RETURN(HcaSpec spec, ParseHcaSpec(config.ib_hca));
  int n = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&n));
  if (list == nullptr || n <= 0) return UnavailableError("no RDMA devices found");

  struct Candidate {
    ibv_device* dev;
    std::string name;
    int numa;
  };
  std::vector<Candidate> listed;
  std::vector<std::string> names;
  std::vector<int> numas;
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list.get()[i]);
    if (name == nullptr) continue;
    listed.push_back(Candidate{list.get()[i], name, DeviceNumaNode(name)});
    names.push_back(name);
    numas.push_back(listed.back().numa);
  }
  // The plan's device, then the nearest (this CPU's NUMA node), then the
  // rest; CIUIC_IB_HCA filters every one of them below.
  std::vector<Candidate> candidates;
  for (size_t i : DeviceOrder(names, numas, CurrentNumaNode(), preferred)) candidates.push_back(listed[i]);
  if (!preferred.empty() && std::find(names.begin(), names.end(), preferred) == names.end()) {
    CIUIC_LOG(kInfo, "verbs: the topology plan's %s is not among the devices here", preferred.c_str());
  }

  std::string seen;  // what was found and why it was not taken
  auto note = [&seen](const std::string& s) { seen += (seen.empty() ? "" : ", ") + s; };
  for (const Candidate& c : candidates) {
    bool any_port_allowed = false;
    for (int p = 1; p <= 255 && !any_port_allowed; ++p) any_port_allowed = HcaAllows(spec, c.name, p);
    if (!any_port_allowed) continue;
    ibv_context* ctx = ibv_open_device(c.dev);
    if (ctx == nullptr) {
      note(c.name + " (cannot open: " + std::strerror(errno) + ")");
      continue;
    }
    DeviceSelection sel;
    sel.ctx = ctx;
    sel.name = c.name;
    sel.numa_node = c.numa;
    if (ibv_query_device(ctx, &sel.device_attr) != 0) {
      note(c.name + " (ibv_query_device failed)");
      ibv_close_device(ctx);
      continue;
    }
    bool taken = false;
    for (int p = 1; p <= sel.device_attr.phys_port_cnt && !taken; ++p) {
      if (!HcaAllows(spec, c.name, p)) continue;
      ibv_port_attr attr{};
      if (ibv_query_port(ctx, static_cast<uint8_t>(p), &attr) != 0) {
        note(c.name + ":" + std::to_string(p) + " (ibv_query_port failed)");
        continue;
      }
      if (attr.state != IBV_PORT_ACTIVE) {
        note(c.name + ":" + std::to_string(p) + " " + PortStateName(attr.state));
        continue;
      }
      sel.port = p;
      sel.port_attr = attr;
      sel.link_layer = attr.link_layer == IBV_LINK_LAYER_ETHERNET ? kLinkEthernet : kLinkInfiniBand;
      Status gid = ChooseGid(config, &sel);
      if (gid.code() == StatusCode::kInvalidArgument) {
        ibv_close_device(ctx);
        return gid;
      }
      if (!gid.ok()) {
        note(c.name + ":" + std::to_string(p) + " (" + gid.message() + ")");
        continue;
      }
      taken = true;
    }
    if (taken) {
      CIUIC_LOG(kInfo, "verbs: using %s port %d (%s)", sel.name.c_str(), sel.port,
                sel.link_layer == kLinkEthernet ? "RoCE" : "InfiniBand");
      return sel;
    }
    ibv_close_device(ctx);
  }
  const std::string filter = config.ib_hca.empty() ? "" : " allowed by CIUIC_IB_HCA='" + config.ib_hca + "'";
  if (seen.empty()) {
    std::string names;
    for (const Candidate& c : candidates) names += (names.empty() ? "" : ", ") + c.name;
    return UnavailableError("no RDMA device" + filter + " (devices: " + names + ")");
  }
  return UnavailableError("no active RDMA port" + filter + ": " + seen);
}

}  // namespace ciuic::transport::verbs
