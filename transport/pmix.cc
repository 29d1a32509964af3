// The PMIx bootstrap (see pmix.h): rank, size and the store rendezvous
// through the launcher's PMIx server.
#include <pmix.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "transport/pmix.h"

namespace ciuic::transport::pmix {
namespace {

// Process-wide client state: PMIx_Init may run once per process, and every
// later Discover / Rendezvous reuses it. Never destroyed (the atexit
// finalizer may run after static destructors would have).
struct State {
  std::mutex mu;
  bool tried = false;  // PMIx_Init was attempted
  Status init_status;  // its outcome (sticky)
  pmix_proc_t self;
  Identity id;
};

State& GetState() {
  static State* state = new State;
  return *state;
}

// The launcher (Open MPI's mpirun among them) expects every process that
// connected to say goodbye, else it reports the job as failed.
void FinalizeAtExit() { PMIx_Finalize(nullptr, 0); }

std::string Why(pmix_status_t rc) { return std::string(PMIx_Error_string(rc)) + " (" + std::to_string(rc) + ")"; }

// An integer value of any of the types servers use for sizes and ranks.
StatusOr<long long> ToInt(const pmix_value_t& v, const char* key) {
  switch (v.type) {
    case PMIX_UINT32: return static_cast<long long>(v.data.uint32);
    case PMIX_UINT16: return static_cast<long long>(v.data.uint16);
    case PMIX_UINT8: return static_cast<long long>(v.data.uint8);
    case PMIX_UINT64: return static_cast<long long>(v.data.uint64);
    case PMIX_UINT: return static_cast<long long>(v.data.uint);
    case PMIX_INT: return static_cast<long long>(v.data.integer);
    case PMIX_INT32: return static_cast<long long>(v.data.int32);
    case PMIX_INT64: return static_cast<long long>(v.data.int64);
    case PMIX_SIZE: return static_cast<long long>(v.data.size);
    case PMIX_PROC_RANK: return static_cast<long long>(v.data.rank);
    default: break;
  }
  return InternalError(std::string("PMIx key ") + key + " has unexpected type " + std::to_string(v.type));
}

// PMIx_Get of `key` for `proc`; kNotFound when the server has no such key.
StatusOr<pmix_value_t*> Get(const pmix_proc_t& proc, const char* key) {
  pmix_value_t* val = nullptr;
  const pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS || val == nullptr) {
    const std::string msg = std::string("PMIx_Get(") + key + ", rank " + std::to_string(proc.rank) + "): " + Why(rc);
    return rc == PMIX_ERR_NOT_FOUND ? NotFoundError(msg) : UnavailableError(msg);
  }
  return val;
}

StatusOr<long long> GetInt(const pmix_proc_t& proc, const char* key) {
  CIUIC_ASSIGN_OR_RETURN(pmix_value_t * val, Get(proc, key));
  StatusOr<long long> n = ToInt(*val, key);
  PMIX_VALUE_RELEASE(val);
  return n;
}

StatusOr<std::string> GetString(const pmix_proc_t& proc, const char* key) {
  CIUIC_ASSIGN_OR_RETURN(pmix_value_t * val, Get(proc, key));
  StatusOr<std::string> s = InternalError(std::string("PMIx key ") + key + " is not a string");
  if (val->type == PMIX_STRING) s = std::string(val->data.string != nullptr ? val->data.string : "");
  PMIX_VALUE_RELEASE(val);
  return s;
}

Status Put(const char* key, const std::string& value) {
  pmix_value_t val;
  PMIX_VALUE_CONSTRUCT(&val);
  pmix_status_t rc = PMIx_Value_load(&val, value.c_str(), PMIX_STRING);
  if (rc == PMIX_SUCCESS) rc = PMIx_Put(PMIX_GLOBAL, key, &val);
  PMIX_VALUE_DESTRUCT(&val);
  if (rc != PMIX_SUCCESS) return UnavailableError(std::string("PMIx_Put(") + key + "): " + Why(rc));
  return Status::Ok();
}

// Connects and reads the identity; called once, under the state's lock.
Status Init(State* st) {
  const pmix_status_t rc = PMIx_Init(&st->self, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    return UnavailableError("PMIx_Init failed (PMIX_NAMESPACE=" + std::string(std::getenv("PMIX_NAMESPACE")) +
                            "): " + Why(rc));
  }
  std::atexit(FinalizeAtExit);
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, st->self.nspace, PMIX_RANK_WILDCARD);
  StatusOr<long long> size = GetInt(job, PMIX_JOB_SIZE);
  if (!size.ok()) return InternalError("PMIx: no job size: " + size.status().message());
  if (*size < 1 || *size > 0x7fffffff || static_cast<long long>(st->self.rank) >= *size) {
    return InternalError("PMIx: rank " + std::to_string(st->self.rank) + " in a job of size " +
                         std::to_string(*size));
  }
  st->id.rank = static_cast<int>(st->self.rank);
  st->id.world_size = static_cast<int>(*size);
  // Optional: not every server knows it.
  StatusOr<long long> local = GetInt(st->self, PMIX_LOCAL_RANK);
  if (local.ok() && *local >= 0 && *local < *size) st->id.local_rank = static_cast<int>(*local);
  return Status::Ok();
}

}  // namespace

bool Available() { return true; }

StatusOr<Identity> Discover(const Lookup& lookup) {
  if (!VariablesPresent(lookup)) return UnavailableError("PMIX_NAMESPACE / PMIX_RANK are not set");
  // The client library finds its server through the real environment only.
  const char* real = std::getenv("PMIX_NAMESPACE");
  if (real == nullptr || std::strcmp(real, lookup("PMIX_NAMESPACE")) != 0) {
    return UnavailableError(std::string("PMIX_NAMESPACE=") + lookup("PMIX_NAMESPACE") +
                            " is not this process's environment, where the PMIx client looks for its server");
  }
  State& st = GetState();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.tried) {
    st.tried = true;
    st.init_status = Init(&st);
  }
  CIUIC_RETURN_IF_ERROR(st.init_status);
  return st.id;
}

StatusOr<std::unique_ptr<TcpStoreServer>> Rendezvous(JobInfo* job, const std::string& socket_ifname) {
  State& st = GetState();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.tried || !st.init_status.ok()) {
    return FailedPreconditionError("PMIx rendezvous without a PMIx job (DiscoverJob did not find one)");
  }
  std::unique_ptr<TcpStoreServer> server;
  if (st.id.rank == 0) {
    // Rank 0 always publishes something and joins the fence, so a failure
    // here reaches the other ranks at once instead of after their timeout.
    std::string published;
    std::string new_secret;
    Status s = Status::Ok();
    if (job->secret.empty()) {
      StatusOr<std::string> made = MakeSecret();
      if (made.ok()) new_secret = *made;
      s = made.status();
    }
    StatusOr<std::string> host = s.ok() ? AdvertisedHost(socket_ifname) : StatusOr<std::string>(s);
    if (host.ok()) {
      const std::string& secret = new_secret.empty() ? job->secret : new_secret;
      StatusOr<std::unique_ptr<TcpStoreServer>> started = TcpStoreServer::Start("", 0, secret);
      if (started.ok()) {
        server = std::move(*started);
        published = FormatStoreAddress(*host, server->port());
      } else {
        s = started.status();
      }
    } else {
      s = host.status();
    }
    if (!s.ok()) published = "error: " + s.message();
    CIUIC_RETURN_IF_ERROR(Put(kStoreKey, published));
    CIUIC_RETURN_IF_ERROR(Put(kSecretKey, new_secret));
    const pmix_status_t rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return UnavailableError("PMIx_Commit: " + Why(rc));
    if (!s.ok()) {
      // Still join the fence so the others read the error; ignore its result.
      pmix_proc_t all;
      PMIX_LOAD_PROCID(&all, st.self.nspace, PMIX_RANK_WILDCARD);
      (void)PMIx_Fence(&all, 1, nullptr, 0);
      return Status(s.code(), "rank 0 serving the store for the PMIx rendezvous: " + s.message());
    }
    if (!new_secret.empty()) job->secret = new_secret;
    job->store_host = *host;
    job->store_port = server->port();
  }

  pmix_proc_t all;
  PMIX_LOAD_PROCID(&all, st.self.nspace, PMIX_RANK_WILDCARD);
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  const long long ms = job->timeout.count();
  int seconds = ms <= 0 ? 0 : static_cast<int>(std::min<long long>((ms + 999) / 1000, 0x7fffffff));
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  const pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS) {
    return UnavailableError("PMIx_Fence of the store rendezvous (rank " + std::to_string(st.id.rank) + " of " +
                            std::to_string(st.id.world_size) + "): " + Why(rc));
  }

  if (st.id.rank != 0) {
    pmix_proc_t root;
    PMIX_LOAD_PROCID(&root, st.self.nspace, 0);
    CIUIC_ASSIGN_OR_RETURN(std::string addr, GetString(root, kStoreKey));
    if (addr.rfind("error: ", 0) == 0) {
      return UnavailableError("rank 0 could not serve the store for the PMIx rendezvous: " + addr.substr(7));
    }
    CIUIC_RETURN_IF_ERROR(ParseStoreAddress(addr, &job->store_host, &job->store_port));
    if (job->secret.empty()) {
      CIUIC_ASSIGN_OR_RETURN(job->secret, GetString(root, kSecretKey));
    }
  }
  CIUIC_LOG(kInfo, "PMIx rendezvous: rank %d of %d, store at %s", st.id.rank, st.id.world_size,
            FormatStoreAddress(job->store_host, job->store_port).c_str());
  return server;
}

}  // namespace ciuic::transport::pmix
