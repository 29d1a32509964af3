#include "collectives/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <tuple>

namespace ciuic::collectives {
namespace {

// Per-chunk latency l and period q of a step, its chunk count and bytes.
struct StepCost {
  double l = 0, q = 0;
  double l_in = 0;  // forwarding steps: the store stage alone
  size_t chunks = 1;
  double bytes = 0;
};

// Whether ranks a and b share a host in `p`'s map (never without one).
bool SameHost(const CostParams& p, int a, int b) {
  const size_t n = p.host_of.size();
  return n > 0 && a >= 0 && b >= 0 && static_cast<size_t>(a) < n && static_cast<size_t>(b) < n &&
         p.host_of[static_cast<size_t>(a)] == p.host_of[static_cast<size_t>(b)];
}

// The step of `rank`; its sends cost the level of (rank, send_peer).
StepCost CostOf(const Step& st, const CostParams& p, int rank) {
  StepCost c;
  const bool intra = StepSends(st.op) && SameHost(p, rank, st.send_peer);
  const double alpha = intra ? p.intra_alpha_s : p.alpha_s;
  const double beta = intra ? p.intra_beta_s_per_byte : p.beta_s_per_byte;
  c.bytes = static_cast<double>(StepCount(st)) * static_cast<double>(p.elem_size);
  const double chunk = static_cast<double>(std::max<size_t>(1, p.chunk_bytes));
  c.chunks = c.bytes == 0 ? 1 : static_cast<size_t>(std::ceil(c.bytes / chunk));
  const double cb = c.bytes / static_cast<double>(c.chunks);
  const double send = alpha + cb * beta;
  const double reduce = cb * p.gamma_s_per_byte;
  const double copy = cb * p.copy_s_per_byte;
  switch (st.op) {
    case StepOp::kSend: c.l = c.q = send; break;
    case StepOp::kRecv: c.l = c.q = copy; break;
    case StepOp::kRecvReduce: c.l = c.q = reduce; break;
    case StepOp::kRecvReduceSend:
      c.l_in = reduce;
      c.l = reduce + send;
      c.q = std::max(reduce, send);
      break;
    case StepOp::kRecvCopySend:
      c.l_in = copy;
      c.l = copy + send;
      c.q = std::max(copy, send);
      break;
    case StepOp::kCopy: c.l = c.q = copy; break;
    case StepOp::kReduce:
      c.l = c.q = reduce * static_cast<double>(st.inputs.size() > 2 ? st.inputs.size() - 1 : 1);
      break;
  }
  return c;
}

struct RankLoad {
  double egress = 0, ingress = 0, cpu = 0;
  // The bytes x beta of egress and ingress that cross to other hosts (two
  // levels only): the host's link carries the sum over its ranks; a
  // message's alpha is its rank's cost, not the link's.
  double inter_egress = 0, inter_ingress = 0;
  // Each message's alpha at its level: the network's when a peer of the
  // step is on another host.
  double latency = 0;
  size_t messages = 0;
  size_t bytes_sent = 0;
};

RankLoad LoadOf(const Schedule& s, const CostParams& p) {
  RankLoad load;
  const bool levels = !p.host_of.empty();
  for (const Step& st : s.steps) {
    const StepCost c = CostOf(st, p, s.rank);
    bool crosses = false;
    if (StepSends(st.op)) {
      const bool intra = SameHost(p, s.rank, st.send_peer);
      const double wire = c.bytes * (intra ? p.intra_beta_s_per_byte : p.beta_s_per_byte);
      load.egress += static_cast<double>(c.chunks) * (intra ? p.intra_alpha_s : p.alpha_s) + wire;
      if (levels && !intra) load.inter_egress += wire;
      load.bytes_sent += static_cast<size_t>(c.bytes);
      crosses |= !intra;
    }
    if (StepReceives(st.op)) {
      const bool intra = SameHost(p, s.rank, st.recv_peer);
      const double wire = c.bytes * (intra ? p.intra_beta_s_per_byte : p.beta_s_per_byte);
      load.ingress += wire;
      if (levels && !intra) load.inter_ingress += wire;
      crosses |= !intra;
    }
    if (StepSends(st.op) || StepReceives(st.op)) {
      ++load.messages;
      load.latency += crosses ? p.alpha_s : p.intra_alpha_s;
    }
    if (st.op == StepOp::kRecvReduce || st.op == StepOp::kRecvReduceSend || st.op == StepOp::kReduce) {
      const size_t operands = st.op == StepOp::kReduce && st.inputs.size() > 2 ? st.inputs.size() - 1 : 1;
      load.cpu += c.bytes * p.gamma_s_per_byte * static_cast<double>(operands);
    } else if (st.op == StepOp::kCopy || st.op == StepOp::kRecv || st.op == StepOp::kRecvCopySend) {
      load.cpu += c.bytes * p.copy_s_per_byte;
    }
  }
  return load;
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

// `p` with a host map of the wrong size dropped: such a map would put some
// ranks on hosts and leave the rest nowhere, so it counts as none.
CostParams WithHostMapFor(const CostParams& p, size_t nranks) {
  CostParams q = p;
  if (q.host_of.size() != nranks) q.host_of.clear();
  return q;
}

}  // namespace

StatusOr<Prediction> PredictSchedules(const std::vector<Schedule>& schedules, const CostParams& params) {
  CIUIC_RETURN_IF_ERROR(CheckMessageMatching(schedules));
  const CostParams p = WithHostMapFor(params, schedules.size());
  const size_t n = schedules.size();
  std::vector<size_t> base(n + 1, 0);
  for (size_t r = 0; r < n; ++r) base[r + 1] = base[r] + schedules[r].steps.size();
  const size_t total = base[n];
  // Predecessors of every node and how they constrain it: a stream passes
  // chunk times through (kPerChunk deps, a message to its receiver); after
  // last waits for the predecessor's end (kWhole deps, the previous message
  // sent on a link); after received waits until the predecessor has
  // received all its chunks (the previous message received on a link: a
  // forwarding step stores chunks without waiting for its own sends).
  enum class Edge : uint8_t { kStream, kAfterLast, kAfterReceived };
  std::vector<std::vector<std::pair<size_t, Edge>>> preds(total);
  std::vector<std::vector<size_t>> succs(total);
  auto edge = [&](size_t from, size_t to, Edge kind) {
    preds[to].emplace_back(from, kind);
    succs[from].push_back(to);
  };
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::vector<size_t>> sends, recvs;
  for (size_t r = 0; r < n; ++r) {
    const Schedule& s = schedules[r];
    std::map<Key, size_t> last_send, last_recv;
    for (size_t i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      const size_t id = base[r] + i;
      for (int d : st.deps) {
        if (d < 0 || static_cast<size_t>(d) >= i) {
          return InvalidArgumentError("PredictSchedules: rank " + std::to_string(r) + " step #" + std::to_string(i) +
                                      " has a bad dep " + std::to_string(d));
        }
        edge(base[r] + d, id, st.dep_mode == DepMode::kPerChunk ? Edge::kStream : Edge::kAfterLast);
      }
      if (StepSends(st.op)) {
        const Key k(static_cast<int>(r), st.send_peer, st.channel);
        auto it = last_send.find(k);
        if (it != last_send.end()) edge(it->second, id, Edge::kAfterLast);
        last_send[k] = id;
        sends[k].push_back(id);
      }
      if (StepReceives(st.op)) {
        const Key k(st.recv_peer, static_cast<int>(r), st.channel);
        auto it = last_recv.find(k);
        if (it != last_recv.end()) edge(it->second, id, Edge::kAfterReceived);
        last_recv[k] = id;
        recvs[k].push_back(id);
      }
    }
  }
  for (const auto& [k, ids] : sends) {
    const std::vector<size_t>& rv = recvs[k];
    for (size_t m = 0; m < ids.size() && m < rv.size(); ++m) edge(ids[m], rv[m], Edge::kStream);
  }
  // Longest path in topological order (Kahn).
  std::vector<size_t> indeg(total, 0);
  for (size_t v = 0; v < total; ++v) indeg[v] = preds[v].size();
  std::vector<size_t> ready;
  for (size_t v = 0; v < total; ++v) {
    if (indeg[v] == 0) ready.push_back(v);
  }
  std::vector<double> first(total, 0), last(total, 0), received(total, 0);
  std::vector<const Step*> step_of(total);
  std::vector<int> rank_of(total);
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < schedules[r].steps.size(); ++i) {
      step_of[base[r] + i] = &schedules[r].steps[i];
      rank_of[base[r] + i] = schedules[r].rank;
    }
  }
  size_t done = 0;
  double critical = 0;
  while (!ready.empty()) {
    const size_t v = ready.back();
    ready.pop_back();
    ++done;
    double in_first = 0, in_last = 0;
    for (const auto& [u, kind] : preds[v]) {
      const double end = kind == Edge::kAfterReceived ? received[u] : last[u];
      in_first = std::max(in_first, kind == Edge::kStream ? first[u] : end);
      in_last = std::max(in_last, end);
    }
    const StepCost c = CostOf(*step_of[v], p, rank_of[v]);
    const double n1 = static_cast<double>(c.chunks - 1);
    first[v] = in_first + c.l;
    last[v] = std::max(in_last + c.l, in_first + c.l + n1 * c.q);
    // A forwarding step has stored its last chunk one send stage earlier.
    received[v] = last[v];
    if (step_of[v]->op == StepOp::kRecvReduceSend || step_of[v]->op == StepOp::kRecvCopySend) {
      received[v] = std::max(in_last + c.l_in, in_first + c.l_in + n1 * c.l_in);
    }
    critical = std::max(critical, last[v]);
    for (size_t w : succs[v]) {
      if (--indeg[w] == 0) ready.push_back(w);
    }
  }
  if (done != total) {
    return InvalidArgumentError("PredictSchedules: the schedules of " + schedules[0].algorithm +
                                " wait on each other in a cycle (a deadlock even with unbounded links)");
  }
  Prediction pred;
  pred.critical_path_s = critical;
  std::map<int, std::pair<double, double>> host_link;  // inter-host egress, ingress per host
  for (const Schedule& s : schedules) {
    const RankLoad load = LoadOf(s, p);
    if (SameHost(p, s.rank, s.rank)) {
      auto& l = host_link[p.host_of[static_cast<size_t>(s.rank)]];
      l.first += load.inter_egress;
      l.second += load.inter_ingress;
      pred.resource_bound_s = std::max({pred.resource_bound_s, l.first, l.second});
    }
    pred.resource_bound_s = std::max({pred.resource_bound_s, load.egress, load.ingress, load.cpu});
    pred.max_messages_per_rank = std::max(pred.max_messages_per_rank, load.messages);
    pred.max_bytes_sent_per_rank = std::max(pred.max_bytes_sent_per_rank, load.bytes_sent);
    pred.total_bytes_sent += load.bytes_sent;
  }
  pred.seconds = std::max(pred.critical_path_s, pred.resource_bound_s);
  return pred;
}

StatusOr<Prediction> Predict(Collective collective, Algorithm algorithm, size_t bytes, int nranks,
                             const CostParams& params) {
  if (params.elem_size == 0) return InvalidArgumentError("Predict: elem_size must be > 0");
  if (nranks < 1) return InvalidArgumentError("Predict: nranks must be >= 1");
  const CostParams p = WithHostMapFor(params, static_cast<size_t>(nranks));
  CollectiveArgs args;
  args.collective = collective;
  args.nranks = nranks;
  args.count = bytes / p.elem_size + (bytes % p.elem_size ? 1 : 0);
  args.nchannels = p.nchannels;
  args.radix = p.radix;
  args.root = p.root;
  args.host_of = p.host_of;
  if (collective == Collective::kAllGatherv || collective == Collective::kReduceScatterv) {
    args.counts.assign(nranks, args.count);
  }
  if (collective == Collective::kAllToAllv) {
    // `count` to every peer, packed.
    const size_t n = static_cast<size_t>(nranks);
    args.counts.assign(4 * n, args.count);
    for (size_t i = 0; i < n; ++i) args.counts[n + i] = args.counts[3 * n + i] = i * args.count;
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
    const RankLoad load = LoadOf(s, p);
    Prediction pred;
    pred.exact = false;
    pred.resource_bound_s = std::max({load.egress, load.ingress, load.cpu});
    if (!p.host_of.empty()) {
      // Rank 0's host link, as if its every rank crossed like rank 0.
      const auto mates = static_cast<double>(std::count(p.host_of.begin(), p.host_of.end(), p.host_of[0]));
      pred.resource_bound_s = std::max({pred.resource_bound_s, load.inter_egress * mates, load.inter_ingress * mates});
    }
    pred.critical_path_s = load.latency;
    pred.seconds = pred.resource_bound_s + pred.critical_path_s;
    pred.max_messages_per_rank = load.messages;
    pred.max_bytes_sent_per_rank = load.bytes_sent;
    pred.total_bytes_sent = load.bytes_sent * static_cast<size_t>(nranks);
    return pred;
  }
  std::vector<Schedule> all;
  all.reserve(nranks);
  for (int r = 0; r < nranks; ++r) {
    args.rank = r;
    CIUIC_ASSIGN_OR_RETURN(Schedule s, MakeSchedule(algorithm, args));
    all.push_back(std::move(s));
  }
  return PredictSchedules(all, p);
}

}  // namespace ciuic::collectives
