// Send and receive: one kSend of input[0, count) to the peer / one kRecv
// into output[0, count) from it, on the tag's channel (a count-0 message
// when count is 0).
#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status SendToPeer(const CollectiveArgs& a, Builder& b) {
  b.Channels(TagChannel(a.tag) + 1);
  b.Send(a.peer, TagChannel(a.tag), In(0, a.count));
  return Status::Ok();
}

Status RecvFromPeer(const CollectiveArgs& a, Builder& b) {
  b.Channels(TagChannel(a.tag) + 1);
  b.Recv(a.peer, TagChannel(a.tag), Out(0, a.count));
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
