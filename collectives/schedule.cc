#include "collectives/schedule.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <tuple>

namespace ciuic::collectives {
namespace {

std::string RangeText(const Range& r) {
  std::ostringstream s;
  s << BufKindName(r.buf) << '[' << r.offset << ".." << r.offset + r.count << ')';
  return s.str();
}

std::string StepName(const Schedule& s, size_t i) {
  return "rank " + std::to_string(s.rank) + " step #" + std::to_string(i) + " (" +
         StepOpName(s.steps[i].op) + ")";
}

// An interval of the rank's memory once input, output and scratch are laid
// out in one address space according to the BufferLayout.
struct Span {
  size_t begin = 0;
  size_t count = 0;
  Range range;
};

bool Overlap(const Span& a, const Span& b) {
  return a.count != 0 && b.count != 0 && a.begin < b.begin + b.count && b.begin < a.begin + a.count;
}
bool Same(const Span& a, const Span& b) { return a.begin == b.begin && a.count == b.count; }

// Small dynamic bitset over step indices.
class Bits {
 public:
  explicit Bits(size_t n = 0) : w_((n + 63) / 64, 0) {}
  void Set(size_t i) { w_[i / 64] |= uint64_t{1} << (i % 64); }
  bool Test(size_t i) const { return (w_[i / 64] >> (i % 64)) & 1; }
  void Or(const Bits& o) {
    for (size_t k = 0; k < w_.size(); ++k) w_[k] |= o.w_[k];
  }

 private:
  std::vector<uint64_t> w_;
};

}  // namespace

const char* StepOpName(StepOp op) {
  switch (op) {
    case StepOp::kSend: return "send";
    case StepOp::kRecv: return "recv";
    case StepOp::kRecvReduce: return "recv_reduce";
    case StepOp::kRecvReduceSend: return "recv_reduce_send";
    case StepOp::kRecvCopySend: return "recv_copy_send";
    case StepOp::kCopy: return "copy";
    case StepOp::kReduce: return "reduce";
  }
  return "?";
}

const char* BufKindName(BufKind buf) {
  switch (buf) {
    case BufKind::kInput: return "in";
    case BufKind::kOutput: return "out";
    case BufKind::kScratch: return "scratch";
  }
  return "?";
}

bool StepSends(StepOp op) {
  return op == StepOp::kSend || op == StepOp::kRecvReduceSend || op == StepOp::kRecvCopySend;
}

bool StepReceives(StepOp op) {
  return op == StepOp::kRecv || op == StepOp::kRecvReduce || op == StepOp::kRecvReduceSend ||
         op == StepOp::kRecvCopySend;
}

size_t StepCount(const Step& step) { return step.op == StepOp::kSend ? step.src.count : step.dst.count; }

std::string Schedule::Dump() const {
  std::ostringstream s;
  s << "schedule " << algorithm << " rank " << rank << '/' << nranks << " channels " << nchannels
    << " scratch " << scratch_count << " steps " << steps.size() << '\n';
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& st = steps[i];
    s << "  #" << i << ' ' << StepOpName(st.op);
    if (StepReceives(st.op)) s << " <-" << st.recv_peer;
    if (StepSends(st.op)) s << " ->" << st.send_peer;
    if (StepSends(st.op) || StepReceives(st.op)) s << " ch" << st.channel;
    switch (st.op) {
      case StepOp::kSend: s << " src=" << RangeText(st.src); break;
      case StepOp::kRecv:
      case StepOp::kRecvCopySend: s << " dst=" << RangeText(st.dst); break;
      case StepOp::kRecvReduce:
      case StepOp::kRecvReduceSend:
      case StepOp::kCopy: s << " src=" << RangeText(st.src) << " dst=" << RangeText(st.dst); break;
      case StepOp::kReduce:
        s << " dst=" << RangeText(st.dst) << " inputs=";
        for (size_t k = 0; k < st.inputs.size(); ++k) s << (k ? "," : "") << RangeText(st.inputs[k]);
        break;
    }
    if (!st.deps.empty()) {
      s << " deps=";
      for (size_t k = 0; k < st.deps.size(); ++k) s << (k ? "," : "") << st.deps[k];
      if (st.dep_mode == DepMode::kPerChunk) s << " per-chunk";
    }
    s << '\n';
  }
  return s.str();
}

StatusOr<BufferBases> LayoutBases(const BufferLayout& layout, size_t scratch_count) {
  BufferBases b;
  switch (layout.alias) {
    case BufferLayout::Alias::kNone:
      b.output = 0;
      b.input = layout.output_count;
      b.scratch = layout.output_count + layout.input_count;
      break;
    case BufferLayout::Alias::kInputInOutput:
      if (layout.alias_offset > layout.output_count ||
          layout.input_count > layout.output_count - layout.alias_offset) {
        return InvalidArgumentError("layout puts the input (" + std::to_string(layout.input_count) +
                                    " elements at offset " + std::to_string(layout.alias_offset) +
                                    ") outside the output (" + std::to_string(layout.output_count) + ")");
      }
      b.output = 0;
      b.input = layout.alias_offset;
      b.scratch = layout.output_count;
      break;
    case BufferLayout::Alias::kOutputInInput:
      if (layout.alias_offset > layout.input_count ||
          layout.output_count > layout.input_count - layout.alias_offset) {
        return InvalidArgumentError("layout puts the output (" + std::to_string(layout.output_count) +
                                    " elements at offset " + std::to_string(layout.alias_offset) +
                                    ") outside the input (" + std::to_string(layout.input_count) + ")");
      }
      b.input = 0;
      b.output = layout.alias_offset;
      b.scratch = layout.input_count;
      break;
  }
  b.total = b.scratch + scratch_count;
  return b;
}

Status ValidateSchedule(const Schedule& s, const BufferLayout& layout, bool check_hazards) {
  const std::string who = "schedule " + s.algorithm + " rank " + std::to_string(s.rank);
  if (s.nranks < 1 || s.rank < 0 || s.rank >= s.nranks) {
    return InvalidArgumentError(who + ": rank " + std::to_string(s.rank) + " not in [0, " +
                                std::to_string(s.nranks) + ")");
  }
  if (s.nchannels < 1) return InvalidArgumentError(who + ": nchannels must be >= 1");
  auto bases = LayoutBases(layout, s.scratch_count);
  if (!bases.ok()) return bases.status().WithContext(who);
  const size_t base_in = bases->input, base_out = bases->output, base_scratch = bases->scratch;
  auto size_of = [&](BufKind b) {
    return b == BufKind::kInput ? layout.input_count
                                : b == BufKind::kOutput ? layout.output_count : s.scratch_count;
  };
  auto base_of = [&](BufKind b) {
    return b == BufKind::kInput ? base_in : b == BufKind::kOutput ? base_out : base_scratch;
  };
  auto span = [&](const Range& r) { return Span{base_of(r.buf) + r.offset, r.count, r}; };

  const size_t n = s.steps.size();
  std::vector<std::vector<Span>> reads(n), writes(n);
  for (size_t i = 0; i < n; ++i) {
    const Step& st = s.steps[i];
    const std::string at = StepName(s, i);
    auto check_peer = [&](int peer, const char* what) -> Status {
      if (peer < 0 || peer >= s.nranks || peer == s.rank) {
        return InvalidArgumentError(at + ": " + what + " " + std::to_string(peer) + " is not another rank in [0, " +
                                    std::to_string(s.nranks) + ")");
      }
      return Status::Ok();
    };
    if (StepSends(st.op)) {
      CIUIC_RETURN_IF_ERROR(check_peer(st.send_peer, "send_peer"));
    } else if (st.send_peer != -1) {
      return InvalidArgumentError(at + ": send_peer set on an op that does not send");
    }
    if (StepReceives(st.op)) {
      CIUIC_RETURN_IF_ERROR(check_peer(st.recv_peer, "recv_peer"));
    } else if (st.recv_peer != -1) {
      return InvalidArgumentError(at + ": recv_peer set on an op that does not receive");
    }
    if (st.channel < 0 || st.channel >= s.nchannels) {
      return InvalidArgumentError(at + ": channel " + std::to_string(st.channel) + " not in [0, " +
                                  std::to_string(s.nchannels) + ")");
    }
    // Which ranges the op uses.
    std::vector<const Range*> used;
    const bool has_src = st.op == StepOp::kSend || st.op == StepOp::kRecvReduce ||
                         st.op == StepOp::kRecvReduceSend || st.op == StepOp::kCopy;
    const bool has_dst = st.op != StepOp::kSend;
    if (has_src) used.push_back(&st.src);
    if (has_dst) used.push_back(&st.dst);
    if (st.op == StepOp::kReduce) {
      if (st.inputs.empty()) return InvalidArgumentError(at + ": reduce without inputs");
      for (const Range& r : st.inputs) used.push_back(&r);
    } else if (!st.inputs.empty()) {
      return InvalidArgumentError(at + ": inputs set on an op other than reduce");
    }
    const size_t count = StepCount(st);
    for (const Range* r : used) {
      if (r->count != count) {
        return InvalidArgumentError(at + ": range " + RangeText(*r) + " has " + std::to_string(r->count) +
                                    " elements, the step " + std::to_string(count));
      }
      const size_t size = size_of(r->buf);
      if (r->count > size || r->offset > size - r->count) {
        return InvalidArgumentError(at + ": range " + RangeText(*r) + " is out of bounds (" +
                                    BufKindName(r->buf) + " has " + std::to_string(size) + " elements)");
      }
    }
    for (int d : st.deps) {
      if (d < 0 || static_cast<size_t>(d) >= i) {
        return InvalidArgumentError(at + ": dep " + std::to_string(d) + " is not an earlier step");
      }
      if (st.dep_mode == DepMode::kPerChunk && StepCount(s.steps[d]) != count) {
        return InvalidArgumentError(at + ": per-chunk dep #" + std::to_string(d) + " has count " +
                                    std::to_string(StepCount(s.steps[d])) + ", the step " + std::to_string(count));
      }
    }
    // Aliasing inside the step, then its read and write sets.
    const Span dst = span(st.dst);
    auto same_or_disjoint = [&](const Range& r) -> Status {
      const Span sp = span(r);
      if (Overlap(sp, dst) && !Same(sp, dst)) {
        return InvalidArgumentError(at + ": dst " + RangeText(st.dst) + " partially overlaps " + RangeText(r));
      }
      return Status::Ok();
    };
    switch (st.op) {
      case StepOp::kSend: reads[i].push_back(span(st.src)); break;
      case StepOp::kRecv:
      case StepOp::kRecvCopySend:
        writes[i].push_back(dst);
        if (st.op == StepOp::kRecvCopySend) reads[i].push_back(dst);
        break;
      case StepOp::kRecvReduce:
      case StepOp::kRecvReduceSend:
        CIUIC_RETURN_IF_ERROR(same_or_disjoint(st.src));
        reads[i].push_back(span(st.src));
        if (st.op == StepOp::kRecvReduceSend) reads[i].push_back(dst);
        writes[i].push_back(dst);
        break;
      case StepOp::kCopy:
        CIUIC_RETURN_IF_ERROR(same_or_disjoint(st.src));
        if (Same(span(st.src), dst)) break;  // in-place no-op: skipped by executors
        reads[i].push_back(span(st.src));
        writes[i].push_back(dst);
        break;
      case StepOp::kReduce:
        CIUIC_RETURN_IF_ERROR(same_or_disjoint(st.inputs[0]));
        for (size_t k = 1; k < st.inputs.size(); ++k) {
          if (Overlap(span(st.inputs[k]), dst)) {
            return InvalidArgumentError(at + ": dst " + RangeText(st.dst) + " overlaps inputs[" + std::to_string(k) +
                                        "] (only inputs[0] may alias dst)");
          }
        }
        for (const Range& r : st.inputs) reads[i].push_back(span(r));
        writes[i].push_back(dst);
        break;
    }
  }

  if (!check_hazards) return Status::Ok();
  // Orderings: full[j] = steps entirely done before j starts; chunk[j] =
  // steps ordered with j only chunk by chunk (a path of kPerChunk deps).
  std::vector<Bits> full(n, Bits(n)), chunk(n, Bits(n));
  for (size_t j = 0; j < n; ++j) {
    const Step& st = s.steps[j];
    for (int d : st.deps) {
      full[j].Or(full[d]);
      if (st.dep_mode == DepMode::kWhole) {
        full[j].Set(d);
        full[j].Or(chunk[d]);  // d done => all of its per-chunk deps done
      } else {
        chunk[j].Set(d);
        chunk[j].Or(chunk[d]);
      }
    }
  }
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < j; ++i) {
      if (full[j].Test(i)) continue;
      const bool chunked = chunk[j].Test(i);
      auto check = [&](const std::vector<Span>& w, const std::vector<Span>& other, size_t wi, size_t oi,
                       const char* what) -> Status {
        for (const Span& a : w) {
          for (const Span& b : other) {
            if (!Overlap(a, b) || (chunked && Same(a, b))) continue;
            return InvalidArgumentError(
                who + ": steps #" + std::to_string(i) + " (" + StepOpName(s.steps[i].op) + ") and #" +
                std::to_string(j) + " (" + StepOpName(s.steps[j].op) + ") may run at the same time" +
                (chunked ? " (ordered only per chunk)" : "") + " but #" + std::to_string(wi) + " writes " +
                RangeText(a.range) + " which #" + std::to_string(oi) + " " + what + " " + RangeText(b.range) +
                " (add a dep)");
          }
        }
        return Status::Ok();
      };
      CIUIC_RETURN_IF_ERROR(check(writes[i], reads[j], i, j, "reads as"));
      CIUIC_RETURN_IF_ERROR(check(writes[i], writes[j], i, j, "writes as"));
      CIUIC_RETURN_IF_ERROR(check(writes[j], reads[i], j, i, "reads as"));
    }
  }
  return Status::Ok();
}

Status CheckMessageMatching(const std::vector<Schedule>& schedules) {
  const int n = static_cast<int>(schedules.size());
  if (n == 0) return InvalidArgumentError("CheckMessageMatching: no schedules");
  for (int r = 0; r < n; ++r) {
    const Schedule& s = schedules[r];
    if (s.rank != r || s.nranks != n) {
      return InvalidArgumentError("schedule #" + std::to_string(r) + " (" + s.algorithm + ") says rank " +
                                  std::to_string(s.rank) + " of " + std::to_string(s.nranks) + ", expected rank " +
                                  std::to_string(r) + " of " + std::to_string(n));
    }
  }
  // (sender, receiver, channel) -> message (count, step) sequences.
  using Key = std::tuple<int, int, int>;
  struct Msg {
    size_t count;
    size_t step;
  };
  std::map<Key, std::vector<Msg>> sent, received;
  for (int r = 0; r < n; ++r) {
    const Schedule& s = schedules[r];
    for (size_t i = 0; i < s.steps.size(); ++i) {
      const Step& st = s.steps[i];
      if (StepSends(st.op)) sent[Key(r, st.send_peer, st.channel)].push_back({StepCount(st), i});
      if (StepReceives(st.op)) received[Key(st.recv_peer, r, st.channel)].push_back({StepCount(st), i});
    }
  }
  auto link = [](const Key& k) {
    return "rank " + std::to_string(std::get<0>(k)) + " -> rank " + std::to_string(std::get<1>(k)) + " channel " +
           std::to_string(std::get<2>(k));
  };
  static const std::vector<Msg> kNone;
  auto compare = [&](const Key& k) -> Status {
    auto si = sent.find(k);
    auto ri = received.find(k);
    const std::vector<Msg>& snd = si == sent.end() ? kNone : si->second;
    const std::vector<Msg>& rcv = ri == received.end() ? kNone : ri->second;
    const size_t common = std::min(snd.size(), rcv.size());
    for (size_t m = 0; m < common; ++m) {
      if (snd[m].count != rcv[m].count) {
        return InvalidArgumentError(link(k) + ": message #" + std::to_string(m) + " count mismatch: sent " +
                                    std::to_string(snd[m].count) + " elements by step #" + std::to_string(snd[m].step) +
                                    ", received as " + std::to_string(rcv[m].count) + " by step #" +
                                    std::to_string(rcv[m].step));
      }
    }
    if (snd.size() > rcv.size()) {
      return InvalidArgumentError(link(k) + ": message #" + std::to_string(common) + " (step #" +
                                  std::to_string(snd[common].step) + " of the sender) is never received (" +
                                  std::to_string(snd.size()) + " sent, " + std::to_string(rcv.size()) + " received)");
    }
    if (rcv.size() > snd.size()) {
      return InvalidArgumentError(link(k) + ": message #" + std::to_string(common) + " (step #" +
                                  std::to_string(rcv[common].step) + " of the receiver) is never sent (" +
                                  std::to_string(snd.size()) + " sent, " + std::to_string(rcv.size()) + " received)");
    }
    return Status::Ok();
  };
  for (const auto& [k, v] : sent) CIUIC_RETURN_IF_ERROR(compare(k));
  for (const auto& [k, v] : received) CIUIC_RETURN_IF_ERROR(compare(k));
  return Status::Ok();
}

}  // namespace ciuic::collectives
