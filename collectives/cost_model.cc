#include "collectives/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <tuple>

#include "collectives/schedule_builder.h"

namespace ciuic::collectives {

using internal::Mod;

bool HasTopology(const CostParams& p) {
  return !p.torus_dims.empty() || p.fattree_levels > 0 || p.rail_leaf_hosts > 0 || p.dragonfly_group > 0;
}

const char* PredictionMethodName(PredictionMethod m) {
  switch (m) {
    case PredictionMethod::kExact: return "exact";
    case PredictionMethod::kSymmetric: return "symmetric";
    case PredictionMethod::kEstimate: return "estimate";
  }
  return "?";
}

namespace {

// Where time on a path goes: per-message alpha, bytes on the wire, local
// reductions and copies.
// cont: what a message waits beyond its own bytes x beta because other
// messages share its links (a torus).
struct Split {
  double lat = 0, bw = 0, cpu = 0, cont = 0;
};
Split operator+(Split a, Split b) { return {a.lat + b.lat, a.bw + b.bw, a.cpu + b.cpu, a.cont + b.cont}; }
Split operator*(double k, Split a) { return {k * a.lat, k * a.bw, k * a.cpu, k * a.cont}; }

// A time and how the path to it splits.
struct Timed {
  double t = 0;
  Split split;
};
Timed Later(const Timed& a, const Timed& b) { return b.t > a.t ? b : a; }
Timed After(const Timed& a, double t, const Split& s) { return {a.t + t, a.split + s}; }

// Per-chunk latency l and period q of a step (each with its split), its
// chunk count and bytes.
struct StepCost {
  double l = 0, q = 0;
  double l_in = 0;  // forwarding steps: the store stage alone
  double l_out = 0, q_out = 0;  // forwarding steps: the send stage alone
  Split sl, sq, sin, sl_out, sq_out;
  size_t chunks = 1;
  double bytes = 0;
};

// Whether ranks a and b share a host in `p`'s map (never without one).
bool SameHost(const CostParams& p, int a, int b) {
  const size_t n = p.host_of.size();
  return n > 0 && a >= 0 && b >= 0 && static_cast<size_t>(a) < n && static_cast<size_t>(b) < n &&
         p.host_of[static_cast<size_t>(a)] == p.host_of[static_cast<size_t>(b)];
}

// What a network topology adds to one send step: hops x hop latency, and
// its bytes' time on its busiest link beyond bytes x beta (contention).
struct Routed {
  double hop_s = 0;
  double wire_s_per_byte = 0;  // 0: bytes x beta
};

// Beta for a step of `bytes` at its level. Where the CPU moves the bytes, a
// lone step's wire is as much faster than the stream as its CPU work
// (CpuOfWire); a link between hosts with a rate of its own (net_cpu) keeps
// its beta, and so does a topology's (its links' sharing is costed at beta).
double BetaOfStep(const CostParams& p, bool intra, double bytes) {
  const double beta = intra ? p.intra_beta_s_per_byte : p.beta_s_per_byte;
  const bool cpu_wire = p.cpu_cores > 0 && !HasTopology(p) && (intra || p.host_of.empty() || !(p.net_cpu_s_per_byte > 0));
  return cpu_wire ? beta * ExchangeStepFactor(intra ? p.intra_exchange_steps : p.exchange_steps, bytes) : beta;
}

// The step of `rank`; its sends cost the level of (rank, send_peer).
StepCost CostOf(const Step& st, const CostParams& p, int rank, const Routed& routed = Routed()) {
  StepCost c;
  const bool intra = StepSends(st.op) && SameHost(p, rank, st.send_peer);
  const double alpha = intra ? p.intra_alpha_s : p.alpha_s;
  c.bytes = static_cast<double>(StepCount(st)) * static_cast<double>(p.elem_size);
  const double beta = BetaOfStep(p, intra, c.bytes);
  const double chunk = static_cast<double>(std::max<size_t>(1, p.chunk_bytes));
  c.chunks = c.bytes == 0 ? 1 : static_cast<size_t>(std::ceil(c.bytes / chunk));
  const double cb = c.bytes / static_cast<double>(c.chunks);
  const double wire = routed.wire_s_per_byte > beta ? routed.wire_s_per_byte : beta;
  // A message's alpha and hops delay its first chunk; later chunks follow
  // at the stream's rate, which holds their per-chunk costs.
  const Split send{0, cb * beta, 0, cb * (wire - beta)};
  const Split send_first = send + Split{alpha + routed.hop_s, 0, 0, 0};
  // The whole copy and reduction, even where the exchange's figure holds
  // the receiver's copy out (LoadOf): this path's wire is beta, a one-way
  // stream whose receiver copies nothing.
  const Split reduce{0, 0, cb * p.gamma_s_per_byte};
  const Split copy{0, 0, cb * p.copy_s_per_byte};
  auto total = [](Split x) { return x.lat + x.bw + x.cpu + x.cont; };
  auto set = [&](Split l, Split q) {
    c.sl = l;
    c.sq = q;
    c.l = total(l);
    c.q = total(q);
  };
  switch (st.op) {
    case StepOp::kSend: set(send_first, send); break;
    case StepOp::kRecv: set(copy, copy); break;
    case StepOp::kRecvReduce: set(reduce, reduce); break;
    case StepOp::kRecvReduceSend:
    case StepOp::kRecvCopySend: {
      const Split store = st.op == StepOp::kRecvReduceSend ? reduce : copy;
      c.sin = store;
      c.l_in = total(store);
      c.sl_out = send_first;
      c.sq_out = send;
      c.l_out = total(send_first);
      c.q_out = total(send);
      set(store + send_first, total(store) >= total(send) ? store : send);
      break;
    }
    case StepOp::kCopy: set(copy, copy); break;
    case StepOp::kReduce: {
      const double operands = static_cast<double>(st.inputs.size() > 2 ? st.inputs.size() - 1 : 1);
      set(operands * reduce, operands * reduce);
      break;
    }
  }
  return c;
}

struct RankLoad {
  double egress = 0, ingress = 0, cpu = 0;
  // The bytes x beta of egress and ingress that cross to other hosts (two
  // levels only): the host's link carries the sum over its ranks; a
  // message's alpha is its rank's cost, not the link's.
  double inter_egress = 0, inter_ingress = 0;
  // The rank's own serial work where ranks share the cores (cpu_cores):
  // egress + ingress + cpu, with the bytes between hosts at
  // net_cpu_s_per_byte where that is set (the wire's time is the link's).
  double work = 0;
  // Each message's alpha at its level: the network's when a peer of the
  // step is on another host.
  double latency = 0;
  size_t messages = 0;
  size_t bytes_sent = 0;
};

// A rank's CPU time for `bytes` it sends or receives whose wire time is
// `wire`: the wire itself, unless the bytes cross to another host and the
// network's CPU cost per byte is known apart from its link's rate.
double CpuOfWire(const CostParams& p, bool intra, double bytes, double wire) {
  if (!intra && !p.host_of.empty() && p.net_cpu_s_per_byte > 0) return bytes * p.net_cpu_s_per_byte;
  const double exchange = intra ? p.intra_exchange_s_per_byte : p.exchange_s_per_byte;
  if (!(exchange > 0)) return wire;
  return bytes * exchange * ExchangeStepFactor(intra ? p.intra_exchange_steps : p.exchange_steps, bytes);
}

RankLoad LoadOf(const Schedule& s, const CostParams& p) {
  RankLoad load;
  const bool levels = !p.host_of.empty();
  for (const Step& st : s.steps) {
    const StepCost c = CostOf(st, p, s.rank);
    bool crosses = false;
    if (StepSends(st.op)) {
      const bool intra = SameHost(p, s.rank, st.send_peer);
      const double wire = c.bytes * BetaOfStep(p, intra, c.bytes);
      // One alpha a message: its chunks follow in a stream, whose measured
      // rate (beta, exchange) holds their per-chunk costs.
      const double alpha = intra ? p.intra_alpha_s : p.alpha_s;
      load.egress += alpha + wire;
      load.work += alpha + CpuOfWire(p, intra, c.bytes, wire);
      if (levels && !intra) load.inter_egress += wire;
      load.bytes_sent += static_cast<size_t>(c.bytes);
      crosses |= !intra;
    }
    if (StepReceives(st.op)) {
      const bool intra = SameHost(p, s.rank, st.recv_peer);
      const double wire = c.bytes * BetaOfStep(p, intra, c.bytes);
      load.ingress += wire;
      load.work += CpuOfWire(p, intra, c.bytes, wire);
      if (levels && !intra) load.inter_ingress += wire;
      crosses |= !intra;
    }
    if (StepSends(st.op) || StepReceives(st.op)) {
      ++load.messages;
      load.latency += crosses ? p.alpha_s : p.intra_alpha_s;
    }
    // Where the exchange's figure includes copying each received chunk out
    // (shm), the receiver's own pass over it is already paid: a copy costs
    // nothing more, a reduction only what it does beyond a copy.
    bool copied = false;
    if (StepReceives(st.op)) {
      const bool intra = SameHost(p, s.rank, st.recv_peer);
      const double exchange = intra ? p.intra_exchange_s_per_byte : p.exchange_s_per_byte;
      const bool measured_so = intra ? p.intra_exchange_copies_received : p.exchange_copies_received;
      copied = p.cpu_cores > 0 && exchange > 0 && measured_so;
    }
    if (st.op == StepOp::kRecvReduce || st.op == StepOp::kRecvReduceSend) {
      load.cpu += c.bytes * (copied ? std::max(0.0, p.gamma_s_per_byte - p.copy_s_per_byte) : p.gamma_s_per_byte);
    } else if (st.op == StepOp::kReduce) {
      const size_t operands = st.inputs.size() > 2 ? st.inputs.size() - 1 : 1;
      load.cpu += c.bytes * p.gamma_s_per_byte * static_cast<double>(operands);
    } else if (st.op == StepOp::kCopy || ((st.op == StepOp::kRecv || st.op == StepOp::kRecvCopySend) && !copied)) {
      load.cpu += c.bytes * p.copy_s_per_byte;
    }
  }
  load.work += load.cpu;
  return load;
}


// A schedule's share of an exact costing: its steps and the ranges its
// reductions name (a fold of p vectors names p).
size_t ScheduleSize(const Schedule& s) {
  size_t n = s.steps.size();
  for (const Step& st : s.steps) n += st.inputs.size();
  return n;
}

// The estimate from one rank's schedule: its busiest resource (its host's
// link as if every rank there crossed like it; its serial work where ranks
// share the cores) plus each of its message steps' alpha at its level.
Prediction EstimateFrom(const Schedule& s, const CostParams& p, int nranks) {
  const RankLoad load = LoadOf(s, p);
  Prediction pred;
  pred.method = PredictionMethod::kEstimate;
  pred.resource_bound_s = std::max({load.egress, load.ingress, load.cpu});
  pred.busiest = "rank " + std::to_string(s.rank) + " (estimate)";
  if (!p.host_of.empty()) {
    const auto mates = static_cast<double>(
        std::count(p.host_of.begin(), p.host_of.end(), p.host_of[static_cast<size_t>(s.rank)]));
    pred.resource_bound_s = std::max({pred.resource_bound_s, load.inter_egress * mates, load.inter_ingress * mates});
  }
  pred.critical_path_s = pred.latency_s = load.latency;
  if (p.cpu_cores > 0) {
    const double ranks = static_cast<double>(nranks);
    pred.resource_bound_s =
        std::max(pred.resource_bound_s, load.work * (p.cpu_cores < ranks ? ranks / p.cpu_cores : 1.0));
  }
  pred.seconds = pred.resource_bound_s + pred.critical_path_s;
  // The split: its latency, and its busiest resource as wire time or as
  // compute.
  (load.cpu >= std::max(load.egress, load.ingress) ? pred.compute_s : pred.bandwidth_s) = pred.resource_bound_s;
  pred.max_messages_per_rank = load.messages;
  pred.max_bytes_sent_per_rank = load.bytes_sent;
  pred.total_bytes_sent = load.bytes_sent * static_cast<size_t>(nranks);
  return pred;
}

}  // namespace

CostParams DefaultCostParams(transport::BackendKind kind) {
  CostParams p;
  switch (kind) {
    case transport::BackendKind::kShm:
      p.alpha_s = 1e-6;
      p.beta_s_per_byte = 1e-10;
      break;
    case transport::BackendKind::kTcp:
      p.alpha_s = 2e-5;
      p.beta_s_per_byte = 8e-10;
      break;
    case transport::BackendKind::kVerbs:
      p.alpha_s = 3e-6;
      p.beta_s_per_byte = 8e-11;
      break;
  }
  return p;
}

namespace {

// The value of curve `c` (points by increasing x, at least one) at x:
// log-linear in x between points, the end points' beyond.
double LogLinear(const std::vector<std::pair<double, double>>& c, double x) {
  if (!(x > c.front().first)) return c.front().second;
  for (size_t i = 1; i < c.size(); ++i) {
    if (x > c[i].first) continue;
    const double f = std::log(x / c[i - 1].first) / std::log(c[i].first / c[i - 1].first);
    return c[i - 1].second + f * (c[i].second - c[i - 1].second);
  }
  return c.back().second;
}

}  // namespace

namespace {

// AtWorkingSet; `core` > 0: `bytes` is every rank's on the machine (the
// shared cache's contents) and `core` one core's ranks' (its private
// caches'). Where the shared cache is known, the curve's fall up to it
// (the private caches' cliff) is taken at `core`, and the fall beyond it at
// `bytes`; bytes crossing between cores (beta, exchange), never in the
// receiver's private caches, slow only over the part beyond it.
CostParams TowardDram(const CostParams& p, double bytes, double core = 0) {
  CostParams q = p;
  const auto& c = p.memory_curve;
  if (c.size() < 2 || !(c.back().second > c.front().second) || !(bytes > c.front().first)) return q;
  const double first = c.front().second, span = c.back().second - first;
  double s = LogLinear(c, bytes);
  double tx = -1;
  if (core > 0 && p.shared_cache_bytes > 0) {
    const double shared = LogLinear(c, p.shared_cache_bytes);
    const double beyond = bytes > p.shared_cache_bytes ? std::max(0.0, s - shared) : 0.0;
    // Past the curve's end the shared cache says nothing: beyond it, DRAM.
    tx = !(bytes > p.shared_cache_bytes) ? 0.0 : !(c.back().second > shared) ? 1.0 : beyond / (c.back().second - shared);
    s = LogLinear(c, std::min(core, p.shared_cache_bytes)) + beyond;
  }
  const double t = std::clamp((s - first) / span, 0.0, 1.0);
  tx = tx < 0 ? t : std::clamp(tx, 0.0, 1.0);
  auto toward = [](double f, double& rate, double dram) {
    if (dram > 0) rate += f * (dram - rate);
  };
  toward(tx, q.beta_s_per_byte, p.dram_beta_s_per_byte);
  toward(tx, q.intra_beta_s_per_byte, p.dram_intra_beta_s_per_byte);
  toward(tx, q.exchange_s_per_byte, p.dram_exchange_s_per_byte);
  toward(tx, q.intra_exchange_s_per_byte, p.dram_intra_exchange_s_per_byte);
  toward(t, q.copy_s_per_byte, p.dram_copy_s_per_byte);
  toward(t, q.gamma_s_per_byte, p.dram_gamma_s_per_byte);
  return q;
}

}  // namespace

CostParams AtWorkingSet(const CostParams& p, double bytes) { return TowardDram(p, bytes); }

double ExchangeStepFactor(const std::vector<std::pair<double, double>>& steps, double bytes) {
  return steps.empty() ? 1 : LogLinear(steps, bytes);
}

void TakeIntraFrom(const CostParams& shm, CostParams* p) {
  p->intra_exchange_steps = shm.exchange_steps;
  p->intra_exchange_copies_received = shm.exchange_copies_received;
  p->intra_alpha_s = shm.alpha_s;
  p->intra_beta_s_per_byte = shm.beta_s_per_byte;
  p->dram_intra_beta_s_per_byte = shm.dram_beta_s_per_byte;
  p->intra_exchange_s_per_byte = shm.exchange_s_per_byte;
  p->dram_intra_exchange_s_per_byte = shm.dram_exchange_s_per_byte;
}

CostParams SharingTheMachine(const CostParams& p, double bytes, int nranks) {
  if (!(p.cpu_cores > 0) || nranks < 2) return AtWorkingSet(p, bytes);
  CostParams q = p;
  const double busy = std::min(p.cpu_cores, static_cast<double>(nranks));
  if (p.dram_shared_cores >= 2 && p.dram_shared_copy_s_per_byte > 0 && p.dram_copy_s_per_byte > 0 && busy > 1) {
    const double ratio = std::max(1.0, p.dram_shared_copy_s_per_byte / p.dram_copy_s_per_byte);
    const double measured = static_cast<double>(p.dram_shared_cores);
    double slow = busy <= measured ? 1 + (ratio - 1) * (busy - 1) / (measured - 1) : ratio * busy / measured;
    // Only the part of the working set the shared cache cannot hold comes
    // from DRAM, and only that part contends for it.
    const double all = bytes * static_cast<double>(nranks);
    if (p.shared_cache_bytes > 0) slow = 1 + (slow - 1) * std::max(0.0, 1 - p.shared_cache_bytes / all);
    // A link between hosts whose CPU cost is known apart (net_cpu) keeps
    // its own rate: the cores' DRAM does not slow the wire.
    if (p.host_of.empty() || !(p.net_cpu_s_per_byte > 0)) q.dram_beta_s_per_byte *= slow;
    q.dram_intra_beta_s_per_byte *= slow;
    q.dram_copy_s_per_byte *= slow;
    q.dram_gamma_s_per_byte *= slow;
  }
  // A core's ranks: nranks spread over the cores, as a launcher binds them.
  const double per_core = std::ceil(static_cast<double>(nranks) / std::min(p.cpu_cores, static_cast<double>(nranks)));
  return TowardDram(q, bytes * static_cast<double>(nranks), bytes * per_core);
}

namespace {

// `p` with a host map of the wrong size dropped: such a map would put some
// ranks on hosts and leave the rest nowhere, so it counts as none.
CostParams WithHostMapFor(const CostParams& p, size_t nranks) {
  CostParams q = p;
  if (q.host_of.size() != nranks) q.host_of.clear();
  return q;
}

}  // namespace

namespace {

// The steps of one or more ranks as a graph. Predecessors say how they
// constrain a step: a stream passes chunk times through (kPerChunk deps, a
// message to its receiver); after last waits for the predecessor's end
// (kWhole deps); send FIFO, the previous message sent on a link, is after
// last but for a forwarding step's store stage (below); after received waits
// until the predecessor has received all its chunks (the previous message
// received on a link: a forwarding step stores chunks without waiting for
// its own sends).
// kSendFifo: the step's sends queue behind an earlier send on the same link;
// a forwarding step's store stage does not wait for it (the executor
// receives ahead of sending), only its send stage does.
enum class Edge : uint8_t { kStream, kAfterLast, kAfterReceived, kSendFifo };

struct StepGraph {
  std::vector<const Step*> step;
  std::vector<int> rank;
  std::vector<Routed> routed;  // per step; empty: no topology
  std::vector<std::vector<std::pair<size_t, Edge>>> preds;
  std::vector<std::vector<size_t>> succs;

  void Add(const Step* st, int r) {
    step.push_back(st);
    rank.push_back(r);
    preds.emplace_back();
    succs.emplace_back();
  }
  void Link(size_t from, size_t to, Edge kind) {
    preds[to].emplace_back(from, kind);
    succs[from].push_back(to);
  }
};

using LinkKey = std::tuple<int, int, int>;  // sender, receiver, channel

// Adds schedule `s`'s steps (ids from `base`) with their deps and the FIFO
// order of its messages per link; records its sends and receives per link.
Status AddSchedule(const Schedule& s, size_t base, StepGraph& g, std::map<LinkKey, std::vector<size_t>>& sends,
                   std::map<LinkKey, std::vector<size_t>>& recvs) {
  std::map<LinkKey, size_t> last_send, last_recv;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& st = s.steps[i];
    const size_t id = base + i;
    g.Add(&st, s.rank);
    for (int d : st.deps) {
      if (d < 0 || static_cast<size_t>(d) >= i) {
        return InvalidArgumentError("PredictSchedules: rank " + std::to_string(s.rank) + " step #" +
                                    std::to_string(i) + " has a bad dep " + std::to_string(d));
      }
      g.Link(base + static_cast<size_t>(d), id, st.dep_mode == DepMode::kPerChunk ? Edge::kStream : Edge::kAfterLast);
    }
    if (StepSends(st.op)) {
      const LinkKey k(s.rank, st.send_peer, st.channel);
      auto it = last_send.find(k);
      if (it != last_send.end()) g.Link(it->second, id, Edge::kSendFifo);
      last_send[k] = id;
      sends[k].push_back(id);
    }
    if (StepReceives(st.op)) {
      const LinkKey k(st.recv_peer, s.rank, st.channel);
      auto it = last_recv.find(k);
      if (it != last_recv.end()) g.Link(it->second, id, Edge::kAfterReceived);
      last_recv[k] = id;
      recvs[k].push_back(id);
    }
  }
  return Status::Ok();
}

// The longest path through `g` (Kahn's order): its end and how it splits.
StatusOr<Timed> LongestPath(const StepGraph& g, const CostParams& p, const std::string& algorithm) {
  const size_t total = g.step.size();
  std::vector<size_t> indeg(total, 0);
  std::vector<size_t> ready;
  for (size_t v = 0; v < total; ++v) {
    indeg[v] = g.preds[v].size();
    if (indeg[v] == 0) ready.push_back(v);
  }
  std::vector<Timed> first(total), last(total), received(total);
  size_t done = 0;
  Timed critical;
  while (!ready.empty()) {
    const size_t v = ready.back();
    ready.pop_back();
    ++done;
    const bool forwards = g.step[v]->op == StepOp::kRecvReduceSend || g.step[v]->op == StepOp::kRecvCopySend;
    Timed in_first, in_last, gate;
    for (const auto& [u, kind] : g.preds[v]) {
      if (kind == Edge::kSendFifo && forwards) {
        gate = Later(gate, last[u]);
        continue;
      }
      const Timed& end = kind == Edge::kAfterReceived ? received[u] : last[u];
      in_first = Later(in_first, kind == Edge::kStream ? first[u] : end);
      in_last = Later(in_last, end);
    }
    const StepCost c = CostOf(*g.step[v], p, g.rank[v], g.routed.empty() ? Routed() : g.routed[v]);
    const double n1 = static_cast<double>(c.chunks - 1);
    first[v] = After(in_first, c.l, c.sl);
    last[v] = Later(After(in_last, c.l, c.sl), After(in_first, c.l + n1 * c.q, c.sl + n1 * c.sq));
    // A forwarding step has stored its last chunk one send stage earlier.
    received[v] = last[v];
    if (forwards) {
      received[v] = Later(After(in_last, c.l_in, c.sin), After(in_first, c.l_in + n1 * c.l_in, c.sin + n1 * c.sin));
      // Its sends wait for the link's earlier ones too: the first chunk
      // after both, the rest at the send stage's rate after the gate.
      first[v] = Later(first[v], After(Later(After(in_first, c.l_in, c.sin), gate), c.l_out, c.sl_out));
      last[v] = Later(last[v], Later(After(first[v], n1 * c.q_out, n1 * c.sq_out),
                                     After(Later(received[v], gate), c.l_out, c.sl_out)));
    }
    critical = Later(critical, last[v]);
    for (size_t w : g.succs[v]) {
      if (--indeg[w] == 0) ready.push_back(w);
    }
  }
  if (done != total) {
    return InvalidArgumentError("PredictSchedules: the schedules of " + algorithm +
                                " wait on each other in a cycle (a deadlock even with unbounded links)");
  }
  return critical;
}

// A link of a topology: an id unique within it, and its bandwidth in
// multiples of one rank's link (1 / beta).
struct TopoLink {
  size_t id;
  double capacity;
};

// Messages that are the k-th send of their ranks are taken to run at once:
// each link's load is the bytes of those that cross it, and a message's
// wire time is its busiest link's load over that link's capacity, times
// beta (fair sharing); each link crossed adds hop_latency_s.
template <typename PathFn>
void ShareLinks(const CostParams& p, size_t nranks, StepGraph& g, const PathFn& path) {
  std::vector<std::vector<size_t>> rounds;  // sends by their index among their rank's sends
  std::vector<size_t> sent(nranks, 0);
  for (size_t v = 0; v < g.step.size(); ++v) {
    if (!StepSends(g.step[v]->op)) continue;
    const size_t k = sent[static_cast<size_t>(g.rank[v])]++;
    if (rounds.size() <= k) rounds.resize(k + 1);
    rounds[k].push_back(v);
  }
  g.routed.assign(g.step.size(), Routed());
  std::map<size_t, double> load;
  for (const std::vector<size_t>& round : rounds) {
    load.clear();
    std::vector<std::vector<TopoLink>> paths;
    for (size_t v : round) {
      paths.push_back(path(g.rank[v], g.step[v]->send_peer));
      const double bytes = static_cast<double>(StepCount(*g.step[v]) * p.elem_size);
      for (const TopoLink& l : paths.back()) load[l.id] += bytes;
    }
    for (size_t i = 0; i < round.size(); ++i) {
      const size_t v = round[i];
      if (paths[i].empty()) continue;  // inside a host: no network link
      const double bytes = static_cast<double>(StepCount(*g.step[v]) * p.elem_size);
      double busiest = bytes;
      for (const TopoLink& l : paths[i]) busiest = std::max(busiest, load[l.id] / l.capacity);
      g.routed[v].hop_s = static_cast<double>(paths[i].size()) * p.hop_latency_s;
      g.routed[v].wire_s_per_byte = bytes > 0 ? busiest / bytes * p.beta_s_per_byte : 0;
    }
  }
}

// The torus of p.torus_dims: ranks in row-major order (the last dimension
// fastest), dimension-order routes, the shorter way round each ring (ties
// the positive way); every link one rank's bandwidth.
Status RouteOnTorus(const CostParams& p, size_t nranks, StepGraph& g) {
  size_t cells = 1;
  for (int d : p.torus_dims) {
    if (d < 1) return InvalidArgumentError("torus: a dimension of " + std::to_string(d));
    cells = std::min(cells * static_cast<size_t>(d), size_t{1} << 40);  // no wrap-around
  }
  if (cells != nranks) {
    return InvalidArgumentError("torus of " + std::to_string(cells) + " nodes for " + std::to_string(nranks) +
                                " ranks: the dimensions must multiply to the rank count");
  }
  const int ndims = static_cast<int>(p.torus_dims.size());
  auto dim = [&](int d) { return p.torus_dims[static_cast<size_t>(d)]; };
  // A link is (node, dim, +1/-1) as one id.
  ShareLinks(p, nranks, g, [&](int a, int b) {
    std::vector<TopoLink> links;
    std::vector<int> cur(static_cast<size_t>(ndims)), cb(static_cast<size_t>(ndims));
    for (int d = ndims - 1, x = a, y = b; d >= 0; --d) {
      cur[static_cast<size_t>(d)] = x % dim(d);
      cb[static_cast<size_t>(d)] = y % dim(d);
      x /= dim(d);
      y /= dim(d);
    }
    for (int d = 0; d < ndims; ++d) {
      const int len = dim(d);
      const int fwd = Mod(cb[static_cast<size_t>(d)] - cur[static_cast<size_t>(d)], len);
      const int dir = fwd <= len - fwd ? 1 : -1;
      for (int h = 0, hops = std::min(fwd, len - fwd); h < hops; ++h) {
        size_t node = 0;
        for (int e = 0; e < ndims; ++e) node = node * static_cast<size_t>(dim(e)) + static_cast<size_t>(cur[static_cast<size_t>(e)]);
        links.push_back({(node * static_cast<size_t>(ndims) + static_cast<size_t>(d)) * 2 + (dir > 0 ? 0 : 1), 1.0});
        cur[static_cast<size_t>(d)] = Mod(cur[static_cast<size_t>(d)] + dir, len);
      }
    }
    return links;
  });
  return Status::Ok();
}

// The fat tree of p.fattree_*: ranks fill leaf switches of `down` in order;
// a level-l group holds down^l ranks, and its links up and down carry
// down^l / oversub ranks' bandwidth. A message climbs from its rank's link
// to the lowest level whose group holds both ranks and descends to the
// other's link (above the top level a core joins all groups).
Status RouteOnFatTree(const CostParams& p, size_t nranks, StepGraph& g) {
  if (p.fattree_down < 2 || p.fattree_levels < 1 || !(p.fattree_oversub >= 1)) {
    return InvalidArgumentError("fat tree: down must be >= 2, levels >= 1 and oversub >= 1");
  }
  const size_t levels = static_cast<size_t>(p.fattree_levels);
  std::vector<size_t> size(levels + 1, 1);  // ranks per group at each level
  for (size_t l = 1; l <= levels; ++l) size[l] = size[l - 1] * static_cast<size_t>(p.fattree_down);
  // Link ids: ((group * (levels + 1) + level) * 2 + up/down).
  auto id = [&](size_t group, size_t level, bool up) { return (group * (levels + 1) + level) * 2 + (up ? 0 : 1); };
  ShareLinks(p, nranks, g, [&](int a, int b) {
    const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    std::vector<TopoLink> links = {{id(ua, 0, true), 1.0}, {id(ub, 0, false), 1.0}};
    for (size_t l = 1; l < levels + 1 && ua / size[l] != ub / size[l]; ++l) {
      const double cap = static_cast<double>(size[l]) / p.fattree_oversub;
      links.push_back({id(ua / size[l], l, true), cap});
      links.push_back({id(ub / size[l], l, false), cap});
    }
    return links;
  });
  return Status::Ok();
}

// Rails (p.rail_*): rank r is the i-th rank of its host (hosts in order of
// first appearance), on rail i, under leaf (i, host / rail_leaf_hosts).
// Link ids: 2r + up/down for rank r's NIC, then 2 per leaf.
Status RouteOnRails(const CostParams& p, size_t nranks, StepGraph& g) {
  if (p.host_of.size() != nranks) {
    return InvalidArgumentError("rails: need a host map of the " + std::to_string(nranks) +
                                " ranks (the i-th rank of each host is on rail i)");
  }
  if (p.rail_leaf_hosts < 1 || !(p.rail_oversub >= 1)) {
    return InvalidArgumentError("rails: rail_leaf_hosts must be >= 1 and rail_oversub >= 1");
  }
  std::map<int, std::pair<size_t, size_t>> hosts;  // host id -> (ordinal, ranks so far)
  std::vector<size_t> leaf(nranks);
  std::map<size_t, double> cap;  // leaf -> its spine links' capacity: its NICs / oversub
  const auto per_leaf = static_cast<size_t>(p.rail_leaf_hosts);
  for (size_t r = 0; r < nranks; ++r) {
    auto it = hosts.emplace(p.host_of[r], std::make_pair(hosts.size(), size_t{0})).first;
    const size_t rail = it->second.second++;
    leaf[r] = rail * nranks + it->second.first / per_leaf;
    cap[leaf[r]] += 1 / p.rail_oversub;
  }
  ShareLinks(p, nranks, g, [&](int a, int b) {
    std::vector<TopoLink> links;
    if (SameHost(p, a, b)) return links;
    const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    links.push_back({2 * ua, 1.0});
    links.push_back({2 * ub + 1, 1.0});
    if (leaf[ua] != leaf[ub]) {
      links.push_back({2 * nranks + 2 * leaf[ua], cap[leaf[ua]]});
      links.push_back({2 * nranks + 2 * leaf[ub] + 1, cap[leaf[ub]]});
    }
    return links;
  });
  return Status::Ok();
}

// The dragonfly of p.dragonfly_*: link ids 2r + up/down for rank r's link,
// then one per ordered pair of groups. Each link crossed is a hop of
// hop_latency_s: a message inside a group crosses its two rank links; one
// between groups also the global link and, as two links that never limit,
// the local hops to and from the routers that hold it (three more).
Status RouteOnDragonfly(const CostParams& p, size_t nranks, StepGraph& g) {
  if (p.dragonfly_group < 1 || !(p.dragonfly_global > 0)) {
    return InvalidArgumentError("dragonfly: group must be >= 1 and global > 0");
  }
  const auto group = static_cast<size_t>(p.dragonfly_group);
  const size_t groups = (nranks + group - 1) / group;
  ShareLinks(p, nranks, g, [&](int a, int b) {
    const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    std::vector<TopoLink> links = {{2 * ua, 1.0}, {2 * ub + 1, 1.0}};
    const size_t ga = ua / group, gb = ub / group;
    if (ga != gb) {
      links.push_back({2 * nranks + ga * groups + gb, p.dragonfly_global});
      links.push_back({2 * nranks + groups * groups + ga, 1e300});  // the hops to and from the global link's routers
      links.push_back({2 * nranks + groups * groups + groups + gb, 1e300});
    }
    return links;
  });
  return Status::Ok();
}

// Fills the critical-path fields of `pred` from `critical`.
void SetCriticalPath(const Timed& critical, Prediction& pred) {
  pred.critical_path_s = critical.t;
  pred.latency_s = critical.split.lat;
  pred.bandwidth_s = critical.split.bw;
  pred.compute_s = critical.split.cpu;
  pred.contention_s = critical.split.cont;
}

// Raises `pred`'s resource bound to `seconds` when larger, naming it.
void Bound(Prediction& pred, double seconds, const std::string& what) {
  if (seconds > pred.resource_bound_s) {
    pred.resource_bound_s = seconds;
    pred.busiest = what;
  }
}

// The resource bound of ranks whose loads are `loads` (one per rank, in
// rank order), the host links included.
void AddLoads(const std::vector<RankLoad>& loads, const CostParams& p, Prediction& pred, size_t copies = 1) {
  // With a core per rank, each rank's own work (below) is the bound.
  if (p.cpu_cores > 0 && p.cpu_cores < static_cast<double>(loads.size() * copies)) {
    double work = 0;
    for (const RankLoad& load : loads) work += load.work;
    Bound(pred, work * static_cast<double>(copies) / p.cpu_cores, "the machine's cores");
  }
  std::map<int, std::pair<double, double>> host_link;  // inter-host egress, ingress per host
  for (size_t r = 0; r < loads.size(); ++r) {
    const RankLoad& load = loads[r];
    const int rank = static_cast<int>(r);
    if (SameHost(p, rank, rank) && p.rail_leaf_hosts == 0) {  // rails: a NIC per rank, no shared host link
      const int h = p.host_of[r];
      auto& l = host_link[h];
      l.first += load.inter_egress;
      l.second += load.inter_ingress;
      Bound(pred, l.first, "host " + std::to_string(h) + " link out");
      Bound(pred, l.second, "host " + std::to_string(h) + " link in");
    }
    Bound(pred, load.egress, "rank " + std::to_string(rank) + " egress");
    Bound(pred, load.ingress, "rank " + std::to_string(rank) + " ingress");
    Bound(pred, load.cpu, "rank " + std::to_string(rank) + " reductions and copies");
    if (p.cpu_cores > 0) Bound(pred, load.work, "rank " + std::to_string(rank) + " CPU");
    pred.max_messages_per_rank = std::max(pred.max_messages_per_rank, load.messages);
    pred.max_bytes_sent_per_rank = std::max(pred.max_bytes_sent_per_rank, load.bytes_sent);
    pred.total_bytes_sent += load.bytes_sent;
  }
}

void Finish(Prediction& pred) {
  pred.seconds = std::max(pred.critical_path_s, pred.resource_bound_s);
  if (pred.critical_path_s >= pred.resource_bound_s) pred.busiest = "critical path";
}

}  // namespace

StatusOr<Prediction> PredictSchedules(const std::vector<Schedule>& schedules, const CostParams& params) {
  CIUIC_RETURN_IF_ERROR(CheckMessageMatching(schedules));
  const CostParams p = WithHostMapFor(params, schedules.size());
  StepGraph g;
  std::map<LinkKey, std::vector<size_t>> sends, recvs;
  size_t base = 0;
  for (const Schedule& s : schedules) {
    CIUIC_RETURN_IF_ERROR(AddSchedule(s, base, g, sends, recvs));
    base += s.steps.size();
  }
  for (const auto& [k, ids] : sends) {
    const std::vector<size_t>& rv = recvs[k];
    for (size_t m = 0; m < ids.size() && m < rv.size(); ++m) g.Link(ids[m], rv[m], Edge::kStream);
  }
  if (int{!p.torus_dims.empty()} + int{p.fattree_levels > 0} + int{p.rail_leaf_hosts > 0} + int{p.dragonfly_group > 0} > 1) {
    return InvalidArgumentError("PredictSchedules: at most one of torus, fat tree, rails and dragonfly");
  }
  if (!p.torus_dims.empty()) CIUIC_RETURN_IF_ERROR(RouteOnTorus(p, schedules.size(), g));
  if (p.fattree_levels > 0) CIUIC_RETURN_IF_ERROR(RouteOnFatTree(p, schedules.size(), g));
  if (p.rail_leaf_hosts > 0) CIUIC_RETURN_IF_ERROR(RouteOnRails(p, schedules.size(), g));
  if (p.dragonfly_group > 0) CIUIC_RETURN_IF_ERROR(RouteOnDragonfly(p, schedules.size(), g));
  CIUIC_ASSIGN_OR_RETURN(Timed critical, LongestPath(g, p, schedules.empty() ? "" : schedules[0].algorithm));
  Prediction pred;
  pred.method = PredictionMethod::kExact;
  SetCriticalPath(critical, pred);
  std::vector<RankLoad> loads;
  loads.reserve(schedules.size());
  for (const Schedule& s : schedules) loads.push_back(LoadOf(s, p));
  AddLoads(loads, p, pred);
  Finish(pred);
  return pred;
}

namespace {
// Whether n is a power of k (1 included).
bool IsPowerOf(int n, int k) {
  if (n < 1 || k < 2) return false;
  while (n % k == 0) n /= k;
  return n == 1;
}
// q and x added digit by digit in base k, without carries; -1 for a base
// below 2.
int AddDigits(int q, int x, int k) {
  if (k < 2) return -1;
  long long out = 0, w = 1;
  for (; q > 0 || x > 0; q /= k, x /= k, w *= k) out += ((q % k + x % k) % k) * w;
  return static_cast<int>(out);
}
// The x with g_q(x) = 0.
int PreimageOfZero(Symmetry sym, int q, int n) {
  switch (sym.kind) {
    case Symmetry::Kind::kTranslation: return Mod(-static_cast<long long>(q), n);
    case Symmetry::Kind::kXor: return q;
    case Symmetry::Kind::kSwing: return q % 2 == 0 ? Mod(-static_cast<long long>(q), n) : q;
    case Symmetry::Kind::kDigits: {
      if (sym.radix < 2) return -1;
      long long out = 0, w = 1;
      for (int r = q; r > 0; r /= sym.radix, w *= sym.radix) out += ((sym.radix - r % sym.radix) % sym.radix) * w;
      return static_cast<int>(out);
    }
  }
  return q;
}
}  // namespace

int SymmetryImage(Symmetry sym, int q, int x, int n) {
  switch (sym.kind) {
    case Symmetry::Kind::kTranslation: return Mod(static_cast<long long>(x) + q, n);
    case Symmetry::Kind::kXor: return x ^ q;
    case Symmetry::Kind::kSwing:
      return q % 2 == 0 ? Mod(static_cast<long long>(x) + q, n) : Mod(static_cast<long long>(q) - x, n);
    case Symmetry::Kind::kDigits: return AddDigits(q, x, sym.radix);
  }
  return x;
}

const char* SymmetryName(Symmetry sym) {
  switch (sym.kind) {
    case Symmetry::Kind::kTranslation: return "translation";
    case Symmetry::Kind::kXor: return "xor";
    case Symmetry::Kind::kSwing: return "swing";
    case Symmetry::Kind::kDigits: return "digits";
  }
  return "?";
}

bool IsSymmetryImage(const Schedule& s0, const Schedule& sq, Symmetry sym) {
  const int n = s0.nranks, q = sq.rank;
  if (sq.nranks != n || s0.rank != 0 || sq.steps.size() != s0.steps.size() || sq.nchannels != s0.nchannels) {
    return false;
  }
  if (sym == Symmetry::kXor && !IsPowerOf(n, 2)) return false;
  if (sym.kind == Symmetry::Kind::kDigits && !IsPowerOf(n, sym.radix)) return false;
  if (sym == Symmetry::kSwing && n % 2 != 0) return false;  // parity is not kept mod an odd n
  if (SymmetryImage(sym, q, 0, n) != q) return false;
  for (size_t i = 0; i < s0.steps.size(); ++i) {
    const Step& a = s0.steps[i];
    const Step& b = sq.steps[i];
    if (a.op != b.op || a.channel != b.channel || a.deps != b.deps || a.dep_mode != b.dep_mode ||
        StepCount(a) != StepCount(b) || a.inputs.size() != b.inputs.size()) {
      return false;
    }
    if (StepSends(a.op) && SymmetryImage(sym, q, a.send_peer, n) != b.send_peer) return false;
    if (StepReceives(a.op) && SymmetryImage(sym, q, a.recv_peer, n) != b.recv_peer) return false;
  }
  return true;
}

StatusOr<Prediction> PredictSymmetric(const Schedule& rank0, Symmetry sym, const CostParams& params) {
  const int n = rank0.nranks;
  if (sym.kind == Symmetry::Kind::kDigits && sym.radix < 2) {
    return InvalidArgumentError("PredictSymmetric: the digits symmetry needs a base >= 2, not " +
                                std::to_string(sym.radix));
  }
  const CostParams p = WithHostMapFor(params, static_cast<size_t>(n));
  if (!p.host_of.empty() || HasTopology(p)) {
    return InvalidArgumentError("PredictSymmetric: a host map or a topology breaks the symmetry between ranks");
  }
  StepGraph g;
  std::map<LinkKey, std::vector<size_t>> sends, recvs;
  CIUIC_RETURN_IF_ERROR(AddSchedule(rank0, 0, g, sends, recvs));
  // Rank q's k-th message to rank 0 is the image of rank 0's k-th message to
  // the rank that q's symmetry maps onto 0; it leaves when that one does.
  for (const auto& [k, ids] : recvs) {
    const int q = std::get<0>(k), ch = std::get<2>(k);
    const int pre = PreimageOfZero(sym, q, n);  // the rank q's map takes to 0
    if (pre < 0 || pre >= n || SymmetryImage(sym, q, pre, n) != 0) {
      return InvalidArgumentError("PredictSymmetric: no preimage of rank 0 under rank " + std::to_string(q));
    }
    auto it = sends.find(LinkKey(0, pre, ch));
    const size_t have = it == sends.end() ? 0 : it->second.size();
    if (have != ids.size()) {
      return InvalidArgumentError("PredictSymmetric: " + rank0.algorithm + " is not " + SymmetryName(sym) +
                                  "-symmetric: rank 0 receives " + std::to_string(ids.size()) + " messages from rank " +
                                  std::to_string(q) + " on channel " + std::to_string(ch) + " but sends " +
                                  std::to_string(have) + " to rank " + std::to_string(pre));
    }
    for (size_t m = 0; m < ids.size(); ++m) g.Link(it->second[m], ids[m], Edge::kStream);
  }
  CIUIC_ASSIGN_OR_RETURN(Timed critical, LongestPath(g, p, rank0.algorithm));
  Prediction pred;
  pred.method = PredictionMethod::kSymmetric;
  SetCriticalPath(critical, pred);
  // Every rank's load is rank 0's.
  AddLoads({LoadOf(rank0, p)}, p, pred, static_cast<size_t>(n));
  pred.total_bytes_sent = pred.max_bytes_sent_per_rank * static_cast<size_t>(n);
  Finish(pred);
  return pred;
}

namespace {

// Ranks to compare with rank 0 for a symmetry: the neighbours of 0 and of
// n/2, the last ones, and a spread of others (all of them up to 32 ranks).
std::vector<int> SampleRanks(int n) {
  std::vector<int> out;
  if (n <= 32) {
    for (int r = 1; r < n; ++r) out.push_back(r);
    return out;
  }
  for (int r : {1, 2, 3, n / 2 - 1, n / 2, n / 2 + 1, n - 2, n - 1}) out.push_back(r);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < 8; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out.push_back(1 + static_cast<int>((x >> 33) % static_cast<uint64_t>(n - 1)));
  }
  return out;
}

}  // namespace

StatusOr<Symmetry> FindSymmetry(Algorithm algorithm, const CollectiveArgs& args) {
  CollectiveArgs a = args;
  a.rank = 0;
  CIUIC_ASSIGN_OR_RETURN(Schedule s0, MakeSchedule(algorithm, a));
  const std::vector<int> sample = SampleRanks(args.nranks);
  std::vector<Schedule> others;
  for (int r : sample) {
    a.rank = r;
    CIUIC_ASSIGN_OR_RETURN(Schedule s, MakeSchedule(algorithm, a));
    others.push_back(std::move(s));
  }
  for (Symmetry sym : {Symmetry::kTranslation, Symmetry::kXor, Symmetry::kSwing, Symmetry::Digits(RadixOf(args))}) {
    bool all = true;
    for (const Schedule& s : others) all = all && IsSymmetryImage(s0, s, sym);
    if (all) return sym;
  }
  return NotFoundError(std::string(CollectiveName(args.collective)) + "/" + AlgorithmName(algorithm) + " on " +
                       std::to_string(args.nranks) + " ranks: no rank symmetry (translation, xor, swing, digits) holds");
}

namespace {

// Every rank's schedule, costed together.
StatusOr<Prediction> PredictAll(Algorithm algorithm, CollectiveArgs args, const CostParams& p) {
  std::vector<Schedule> all;
  all.reserve(static_cast<size_t>(args.nranks));
  for (int r = 0; r < args.nranks; ++r) {
    args.rank = r;
    CIUIC_ASSIGN_OR_RETURN(Schedule s, MakeSchedule(algorithm, args));
    all.push_back(std::move(s));
  }
  return PredictSchedules(all, p);
}

}  // namespace

size_t PipelineChunkBytes(Collective collective, size_t count, const std::vector<size_t>& counts, size_t elem_size,
                          int nranks) {
  constexpr size_t kDepth = 4, kMinChunk = 64u << 10;
  const size_t n = static_cast<size_t>(std::max(1, nranks));
  size_t block = 0;
  switch (collective) {
    case Collective::kAllReduce: block = count * elem_size / n; break;
    case Collective::kAllGatherv:
    case Collective::kReduceScatterv: {
      size_t total = 0;
      for (size_t c : counts) total += c;
      block = total * elem_size / n;
      break;
    }
    case Collective::kSend:
    case Collective::kRecv:
    case Collective::kBarrier:
    case Collective::kAllToAllv:
      return 0;  // the slot size: a send and its receive may name different counts
    default: block = count * elem_size; break;  // per-rank blocks, or the whole message
  }
  const size_t chunk = (block / kDepth + 4095) / 4096 * 4096;
  return std::max(chunk, kMinChunk);
}

StatusOr<Prediction> Predict(Collective collective, Algorithm algorithm, size_t bytes, int nranks,
                             const CostParams& params) {
  if (params.elem_size == 0) return InvalidArgumentError("Predict: elem_size must be > 0");
  if (nranks < 1) return InvalidArgumentError("Predict: nranks must be >= 1");
  CostParams p = WithHostMapFor(params, static_cast<size_t>(nranks));
  CollectiveArgs args;
  args.collective = collective;
  args.nranks = nranks;
  args.count = bytes / p.elem_size + (bytes % p.elem_size ? 1 : 0);
  args.nchannels = p.nchannels;
  args.radix = p.radix;
  args.aggregation = p.aggregation;
  args.root = p.root;
  args.host_of = p.host_of;
  args.torus_dims = p.torus_dims;
  if (collective == Collective::kAllGatherv || collective == Collective::kReduceScatterv) {
    args.counts.assign(nranks, args.count);
  }
  if (collective == Collective::kAllToAllv) {
    // `count` to every peer, packed.
    const size_t n = static_cast<size_t>(nranks);
    args.counts.assign(4 * n, args.count);
    for (size_t i = 0; i < n; ++i) args.counts[n + i] = args.counts[3 * n + i] = i * args.count;
  }
  // The executor's chunks (PipelineChunkBytes), never above a slot.
  if (const size_t chunk = PipelineChunkBytes(collective, args.count, args.counts, p.elem_size, nranks); chunk > 0) {
    p.chunk_bytes = std::min(p.chunk_bytes, chunk);
  }
  if (p.memory_curve.size() >= 2) {
    // The working set: a rank's input and output, all ranks' where they
    // share one machine (cpu_cores).
    if (StatusOr<BufferLayout> l = LayoutFor(args, false); l.ok()) {
      p = SharingTheMachine(p, static_cast<double>(l->input_count + l->output_count) * static_cast<double>(p.elem_size),
                            nranks);
    }
  }
  if (collective == Collective::kSend || collective == Collective::kRecv) {
    // A point-to-point pair: costed as rank 0 sending to rank 1.
    if (nranks < 2) return InvalidArgumentError("Predict: send/recv needs nranks >= 2");
    std::vector<Schedule> s;
    CollectiveArgs send = args, recv = args;
    send.collective = Collective::kSend;
    send.rank = 0;
    send.peer = 1;
    recv.collective = Collective::kRecv;
    recv.rank = 1;
    recv.peer = 0;
    CIUIC_ASSIGN_OR_RETURN(Schedule snd, MakeSchedule(algorithm, send));
    CIUIC_ASSIGN_OR_RETURN(Schedule rcv, MakeSchedule(algorithm, recv));
    s.push_back(std::move(snd));
    s.push_back(std::move(rcv));
    for (int r = 2; r < nranks; ++r) {
      Schedule idle = s[0];
      idle.rank = r;
      idle.steps.clear();
      s.push_back(std::move(idle));
    }
    return PredictSchedules(s, p);
  }
  if (nranks > kMaxExactRanks) {
    args.rank = 0;
    CIUIC_ASSIGN_OR_RETURN(Schedule s, MakeSchedule(algorithm, args));
    if (p.host_of.empty() && !HasTopology(p)) {
      StatusOr<Symmetry> sym = FindSymmetry(algorithm, args);
      if (sym.ok()) return PredictSymmetric(s, *sym, p);
    }
    // Rank 0 need not be typical (a rank folded out of a count that is not
    // a power of two has two steps and names two ranges, where swinglat's
    // others name every rank's vector): the budget and the estimate take
    // the largest of a few ranks.
    std::vector<Schedule> sample;
    sample.push_back(std::move(s));
    for (int r : {1, nranks / 2, nranks - 1}) {
      args.rank = r;
      CIUIC_ASSIGN_OR_RETURN(Schedule other, MakeSchedule(algorithm, args));
      sample.push_back(std::move(other));
    }
    args.rank = 0;
    size_t most = 0;
    for (const Schedule& x : sample) most = std::max(most, ScheduleSize(x));
    if (p.max_exact_steps > 0 && most * static_cast<size_t>(nranks) <= p.max_exact_steps) {
      return PredictAll(algorithm, args, p);
    }
    if (HasTopology(p)) {
      return FailedPreconditionError("Predict: " + std::string(AlgorithmName(algorithm)) + " on a topology of " +
                                     std::to_string(nranks) + " ranks needs every rank's schedule, " +
                                     std::to_string(most * static_cast<size_t>(nranks)) +
                                     " steps and reduction inputs, over max_exact_steps " +
                                     std::to_string(p.max_exact_steps));
    }
    Prediction pred = EstimateFrom(sample[0], p, nranks);
    for (size_t i = 1; i < sample.size(); ++i) {
      Prediction e = EstimateFrom(sample[i], p, nranks);
      if (e.seconds > pred.seconds) pred = std::move(e);
    }
    return pred;
  }
  return PredictAll(algorithm, args, p);
}

}  // namespace ciuic::collectives
