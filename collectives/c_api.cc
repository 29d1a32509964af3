// The C ABI of the collectives (include/ciuic/ciuic.h) over ciuic::Communicator.
#include <cstring>
#include <memory>
#include <new>

#include "ciuic/ciuic.h"
#include "ciuic/collectives.h"
#include "common/c_api.h"
#include "transport/store_wire.h"

struct ciuic_comm {
  std::unique_ptr<ciuic::Communicator> comm;
};
struct ciuic_request {
  ciuic::Request request;
};
struct ciuic_bucket {
  std::unique_ptr<ciuic::FusionBucket> bucket;
};

namespace {

using ciuic::DataType;
using ciuic::InvalidArgumentError;
using ciuic::ReduceOp;
using ciuic::Status;
using ciuic::ToCStatus;

DataType T(ciuic_datatype_t t) { return static_cast<DataType>(t); }
ReduceOp O(ciuic_redop_t o) { return static_cast<ReduceOp>(o); }

ciuic_status_t NullComm() { return ToCStatus(InvalidArgumentError("comm is null")); }

ciuic_status_t Issue(ciuic::StatusOr<ciuic::Request> r, ciuic_request_t* req) {
  if (!r.ok()) return ToCStatus(r.status());
  auto* h = new (std::nothrow) ciuic_request{std::move(*r)};
  if (h == nullptr) return ToCStatus(ciuic::ResourceExhaustedError("out of memory for a request"));
  *req = h;
  return ToCStatus(Status::Ok());
}

}  // namespace

#define CIUIC_COMM_OR_FAIL(c) \
  if ((c) == nullptr || (c)->comm == nullptr) return NullComm()
#define CIUIC_REQ_OR_FAIL(r) \
  if ((r) == nullptr) return ToCStatus(InvalidArgumentError("req is null"))

extern "C" {

ciuic_status_t ciuic_comm_init_from_env(ciuic_comm_t* comm) {
  if (comm == nullptr) return ToCStatus(InvalidArgumentError("comm is null"));
  auto c = ciuic::Communicator::CreateFromEnv();
  if (!c.ok()) return ToCStatus(c.status());
  *comm = new ciuic_comm{std::move(*c)};
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_comm_init(ciuic_comm_t* comm, int rank, int size, const char* store_addr) {
  if (comm == nullptr) return ToCStatus(InvalidArgumentError("comm is null"));
  if (store_addr == nullptr) return ToCStatus(InvalidArgumentError("store_addr is null"));
  auto config = ciuic::Config::FromEnv();
  if (!config.ok()) return ToCStatus(config.status());
  auto c = ciuic::Communicator::Create(rank, size, store_addr, *config);
  if (!c.ok()) return ToCStatus(c.status());
  *comm = new ciuic_comm{std::move(*c)};
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_get_unique_id(ciuic_unique_id_t* id) {
  static_assert(sizeof(ciuic_unique_id_t) == ciuic::UniqueId::kBytes, "the C id is the C++ one");
  if (id == nullptr) return ToCStatus(InvalidArgumentError("id is null"));
  ciuic::UniqueId made;
  Status s = [&]() -> Status {
    auto config = ciuic::Config::FromEnv();
    if (!config.ok()) {
      ciuic::transport::store_wire::EncodeStoreIdError("making a unique id: " + config.status().message(),
                                                       made.bytes);
      return config.status();
    }
    return ciuic::Communicator::MakeUniqueId(*config, &made);
  }();
  std::memcpy(id->internal, made.bytes, sizeof(made.bytes));
  return ToCStatus(s);
}

ciuic_status_t ciuic_comm_init_from_id(ciuic_comm_t* comm, int rank, int size, const ciuic_unique_id_t* id) {
  if (comm == nullptr) return ToCStatus(InvalidArgumentError("comm is null"));
  if (id == nullptr) return ToCStatus(InvalidArgumentError("id is null"));
  auto config = ciuic::Config::FromEnv();
  if (!config.ok()) return ToCStatus(config.status());
  ciuic::UniqueId copy;
  std::memcpy(copy.bytes, id->internal, sizeof(copy.bytes));
  auto c = ciuic::Communicator::CreateFromId(rank, size, copy, *config);
  if (!c.ok()) return ToCStatus(c.status());
  *comm = new ciuic_comm{std::move(*c)};
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_unique_id_set_error(ciuic_unique_id_t* id, const char* why) {
  if (id == nullptr) return ToCStatus(InvalidArgumentError("id is null"));
  if (why == nullptr) return ToCStatus(InvalidArgumentError("why is null"));
  ciuic::transport::store_wire::EncodeStoreIdError(why, id->internal);
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_comm_split(ciuic_comm_t comm, int color, int key, ciuic_comm_t* newcomm) {
  static_assert(CIUIC_UNDEFINED == ciuic::kUndefinedColor, "one undefined color");
  CIUIC_COMM_OR_FAIL(comm);
  if (newcomm == nullptr) return ToCStatus(InvalidArgumentError("newcomm is null"));
  *newcomm = nullptr;
  auto c = comm->comm->Split(color, key);
  if (!c.ok()) return ToCStatus(c.status());
  if (*c != nullptr) *newcomm = new ciuic_comm{std::move(*c)};
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_comm_dup(ciuic_comm_t comm, ciuic_comm_t* newcomm) {
  CIUIC_COMM_OR_FAIL(comm);
  if (newcomm == nullptr) return ToCStatus(InvalidArgumentError("newcomm is null"));
  *newcomm = nullptr;
  auto c = comm->comm->Dup();
  if (!c.ok()) return ToCStatus(c.status());
  *newcomm = new ciuic_comm{std::move(*c)};
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_comm_rank(ciuic_comm_t comm, int* rank) {
  CIUIC_COMM_OR_FAIL(comm);
  if (rank == nullptr) return ToCStatus(InvalidArgumentError("rank is null"));
  *rank = comm->comm->rank();
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_comm_size(ciuic_comm_t comm, int* size) {
  CIUIC_COMM_OR_FAIL(comm);
  if (size == nullptr) return ToCStatus(InvalidArgumentError("size is null"));
  *size = comm->comm->size();
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_comm_destroy(ciuic_comm_t comm) {
  CIUIC_COMM_OR_FAIL(comm);
  delete comm;
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_comm_abort(ciuic_comm_t comm) {
  CIUIC_COMM_OR_FAIL(comm);
  comm->comm->Abort();
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_redop_create_premul_sum(ciuic_redop_t* op, double factor, ciuic_comm_t comm) {
  CIUIC_COMM_OR_FAIL(comm);
  if (op == nullptr) return ToCStatus(InvalidArgumentError("op is null"));
  ciuic::StatusOr<ReduceOp> made = comm->comm->CreatePremulSum(factor);
  if (!made.ok()) return ToCStatus(made.status());
  *op = static_cast<ciuic_redop_t>(*made);
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_redop_destroy(ciuic_redop_t op, ciuic_comm_t comm) {
  CIUIC_COMM_OR_FAIL(comm);
  return ToCStatus(comm->comm->DestroyReduceOp(static_cast<ReduceOp>(op)));
}

ciuic_status_t ciuic_iallreduce(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_redop_t o,
                                ciuic_comm_t comm, ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IAllReduce(s, r, n, T(t), O(o)), req);
}
ciuic_status_t ciuic_ibroadcast(void* b, size_t n, ciuic_datatype_t t, int root, ciuic_comm_t comm,
                                ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IBroadcast(b, n, T(t), root), req);
}
ciuic_status_t ciuic_ireduce(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_redop_t o, int root,
                             ciuic_comm_t comm, ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IReduce(s, r, n, T(t), O(o), root), req);
}
ciuic_status_t ciuic_iallgather(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_comm_t comm,
                                ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IAllGather(s, r, n, T(t)), req);
}
ciuic_status_t ciuic_iallgatherv(const void* s, void* r, const size_t* c, ciuic_datatype_t t,
                                 ciuic_comm_t comm, ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IAllGatherV(s, r, c, T(t)), req);
}
ciuic_status_t ciuic_ireduce_scatter(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_redop_t o,
                                     ciuic_comm_t comm, ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IReduceScatter(s, r, n, T(t), O(o)), req);
}
ciuic_status_t ciuic_ireduce_scatterv(const void* s, void* r, const size_t* c, ciuic_datatype_t t,
                                      ciuic_redop_t o, ciuic_comm_t comm, ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IReduceScatterV(s, r, c, T(t), O(o)), req);
}
ciuic_status_t ciuic_ialltoall(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_comm_t comm,
                               ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IAllToAll(s, r, n, T(t)), req);
}
ciuic_status_t ciuic_ibarrier(ciuic_comm_t comm, ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IBarrier(), req);
}
ciuic_status_t ciuic_isend(const void* b, size_t n, ciuic_datatype_t t, int peer, ciuic_comm_t comm,
                           ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->ISend(b, n, T(t), peer), req);
}
ciuic_status_t ciuic_irecv(void* b, size_t n, ciuic_datatype_t t, int peer, ciuic_comm_t comm,
                           ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IRecv(b, n, T(t), peer), req);
}
ciuic_status_t ciuic_isend_tagged(const void* b, size_t n, ciuic_datatype_t t, int peer, int tag, ciuic_comm_t comm,
                                  ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->ISend(b, n, T(t), peer, tag), req);
}
ciuic_status_t ciuic_irecv_tagged(void* b, size_t n, ciuic_datatype_t t, int peer, int tag, ciuic_comm_t comm,
                                  ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IRecv(b, n, T(t), peer, tag), req);
}
ciuic_status_t ciuic_igather(const void* s, void* r, size_t n, ciuic_datatype_t t, int root, ciuic_comm_t comm,
                             ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IGather(s, r, n, T(t), root), req);
}
ciuic_status_t ciuic_iscatter(const void* s, void* r, size_t n, ciuic_datatype_t t, int root, ciuic_comm_t comm,
                              ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IScatter(s, r, n, T(t), root), req);
}
ciuic_status_t ciuic_ialltoallv(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                                const size_t* rd, ciuic_datatype_t t, ciuic_comm_t comm, ciuic_request_t* req) {
  CIUIC_COMM_OR_FAIL(comm);
  CIUIC_REQ_OR_FAIL(req);
  return Issue(comm->comm->IAllToAllV(s, sc, sd, r, rc, rd, T(t)), req);
}

ciuic_status_t ciuic_wait(ciuic_request_t req) {
  CIUIC_REQ_OR_FAIL(req);
  Status s = req->request.Wait();
  delete req;
  return ToCStatus(s);
}

ciuic_status_t ciuic_test(ciuic_request_t req, int* done) {
  CIUIC_REQ_OR_FAIL(req);
  if (done == nullptr) return ToCStatus(InvalidArgumentError("done is null"));
  auto r = req->request.Test();
  if (r.ok() && !*r) {
    *done = 0;
    return ToCStatus(Status::Ok());
  }
  *done = 1;
  delete req;
  return ToCStatus(r.ok() ? Status::Ok() : r.status());
}

// Blocking forms: the C++ blocking calls, which run a collective on the
// calling thread when nothing is queued (no request, no hand-off to the
// progress thread: the small-message path).
#define CIUIC_BLOCKING_C(call)      \
  do {                              \
    CIUIC_COMM_OR_FAIL(comm);       \
    return ToCStatus(comm->comm->call); \
  } while (0)

ciuic_status_t ciuic_allreduce(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_redop_t o,
                               ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(AllReduce(s, r, n, T(t), O(o)));
}
ciuic_status_t ciuic_broadcast(void* b, size_t n, ciuic_datatype_t t, int root, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Broadcast(b, n, T(t), root));
}
ciuic_status_t ciuic_reduce(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_redop_t o, int root,
                            ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Reduce(s, r, n, T(t), O(o), root));
}
ciuic_status_t ciuic_allgather(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(AllGather(s, r, n, T(t)));
}
ciuic_status_t ciuic_allgatherv(const void* s, void* r, const size_t* c, ciuic_datatype_t t, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(AllGatherV(s, r, c, T(t)));
}
ciuic_status_t ciuic_reduce_scatter(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_redop_t o,
                                    ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(ReduceScatter(s, r, n, T(t), O(o)));
}
ciuic_status_t ciuic_reduce_scatterv(const void* s, void* r, const size_t* c, ciuic_datatype_t t,
                                     ciuic_redop_t o, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(ReduceScatterV(s, r, c, T(t), O(o)));
}
ciuic_status_t ciuic_alltoall(const void* s, void* r, size_t n, ciuic_datatype_t t, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(AllToAll(s, r, n, T(t)));
}
ciuic_status_t ciuic_barrier(ciuic_comm_t comm) { CIUIC_BLOCKING_C(Barrier()); }
ciuic_status_t ciuic_send(const void* b, size_t n, ciuic_datatype_t t, int peer, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Send(b, n, T(t), peer));
}
ciuic_status_t ciuic_send_tagged(const void* b, size_t n, ciuic_datatype_t t, int peer, int tag, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Send(b, n, T(t), peer, tag));
}
ciuic_status_t ciuic_recv_tagged(void* b, size_t n, ciuic_datatype_t t, int peer, int tag, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Recv(b, n, T(t), peer, tag));
}
ciuic_status_t ciuic_gather(const void* s, void* r, size_t n, ciuic_datatype_t t, int root, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Gather(s, r, n, T(t), root));
}
ciuic_status_t ciuic_scatter(const void* s, void* r, size_t n, ciuic_datatype_t t, int root, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Scatter(s, r, n, T(t), root));
}
ciuic_status_t ciuic_alltoallv(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                               const size_t* rd, ciuic_datatype_t t, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(AllToAllV(s, sc, sd, r, rc, rd, T(t)));
}
ciuic_status_t ciuic_recv(void* b, size_t n, ciuic_datatype_t t, int peer, ciuic_comm_t comm) {
  CIUIC_BLOCKING_C(Recv(b, n, T(t), peer));
}
#undef CIUIC_BLOCKING_C

ciuic_status_t ciuic_bucket_create(ciuic_comm_t comm, ciuic_datatype_t dtype, ciuic_redop_t op,
                                   size_t capacity_bytes, ciuic_bucket_t* bucket) {
  CIUIC_COMM_OR_FAIL(comm);
  if (bucket == nullptr) return ToCStatus(InvalidArgumentError("bucket is null"));
  if (static_cast<int>(dtype) < 0 || dtype >= CIUIC_NUM_DATATYPES) return ToCStatus(InvalidArgumentError("dtype: unknown datatype"));
  // Built-in ops, or a premul_sum op of the communicator (checked by Add).
  if (static_cast<int>(op) < 0 || (op >= CIUIC_NUM_REDOPS && static_cast<int>(op) < 256)) {
    return ToCStatus(InvalidArgumentError("op: unknown reduction"));
  }
  *bucket = new ciuic_bucket{std::make_unique<ciuic::FusionBucket>(*comm->comm, T(dtype), O(op), capacity_bytes)};
  return ToCStatus(Status::Ok());
}
ciuic_status_t ciuic_bucket_add(ciuic_bucket_t bucket, void* tensor, size_t count) {
  if (bucket == nullptr) return ToCStatus(InvalidArgumentError("bucket is null"));
  return ToCStatus(bucket->bucket->Add(tensor, count));
}
ciuic_status_t ciuic_bucket_flush(ciuic_bucket_t bucket) {
  if (bucket == nullptr) return ToCStatus(InvalidArgumentError("bucket is null"));
  return ToCStatus(bucket->bucket->Flush());
}
ciuic_status_t ciuic_bucket_wait(ciuic_bucket_t bucket) {
  if (bucket == nullptr) return ToCStatus(InvalidArgumentError("bucket is null"));
  return ToCStatus(bucket->bucket->Wait());
}
ciuic_status_t ciuic_bucket_destroy(ciuic_bucket_t bucket) {
  if (bucket == nullptr) return ToCStatus(InvalidArgumentError("bucket is null"));
  delete bucket;
  return ToCStatus(Status::Ok());
}

ciuic_status_t ciuic_partition(const double* costs, size_t n, int parts, size_t* bounds) {
  if (costs == nullptr && n > 0) return ToCStatus(InvalidArgumentError("costs is null"));
  if (bounds == nullptr) return ToCStatus(InvalidArgumentError("bounds is null"));
  std::vector<double> c(costs, costs + n);
  auto b = ciuic::PartitionByCost(c, parts);
  if (!b.ok()) return ToCStatus(b.status());
  for (size_t i = 0; i < b->size(); ++i) bounds[i] = (*b)[i];
  return ToCStatus(Status::Ok());
}

}  // extern "C"
