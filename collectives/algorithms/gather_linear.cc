// Gather, linear: every other rank sends its block straight to the root,
// which copies its own into place (a no-op in place: its input is its block
// of the output). Scatter, linear: the root sends block q straight to rank
// q and copies its own. One message per rank; the root's link to each rank
// carries one block.
#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status GatherLinear(const CollectiveArgs& a, Builder& b) {
  const size_t count = a.count;
  if (a.rank != a.root) {
    b.Send(a.root, 0, In(0, count));
    return Status::Ok();
  }
  b.Copy(In(0, count), Out(static_cast<size_t>(a.root) * count, count));
  for (int q = 0; q < a.nranks; ++q) {
    if (q != a.root) b.Recv(q, 0, Out(static_cast<size_t>(q) * count, count));
  }
  return Status::Ok();
}

Status ScatterLinear(const CollectiveArgs& a, Builder& b) {
  const size_t count = a.count;
  if (a.rank != a.root) {
    b.Recv(a.root, 0, Out(0, count));
    return Status::Ok();
  }
  // Sends first: the own copy may overwrite nothing they read (in place
  // the output is the root's own block of the input).
  for (int q = 0; q < a.nranks; ++q) {
    if (q != a.root) b.Send(q, 0, In(static_cast<size_t>(q) * count, count));
  }
  b.Copy(In(static_cast<size_t>(a.root) * count, count), Out(0, count));
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
