// DiscoverJob: rank / size from CIUIC_* or the launcher, store and secret.
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "transport/transport.h"
#include "common/log.h"
#include "transport/pmix.h"

namespace ciuic::transport {
namespace {

using Lookup = std::function<const char*(const char*)>;

// Parses the launcher variable `name` as a non-negative int.
StatusOr<int> ReadInt(const Lookup& lookup, const char* name) {
  const char* v = lookup(name);
  const std::string text = v == nullptr ? "" : v;
  bool ok = !text.empty() && text.size() <= 10;
  for (char c : text) ok = ok && c >= '0' && c <= '9';
  if (ok) {
    const unsigned long long n = std::strtoull(text.c_str(), nullptr, 10);
    if (n <= 0x7fffffffull) return static_cast<int>(n);
  }
  return InvalidArgumentError(std::string(name) + "='" + text + "': expected a non-negative integer");
}

struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;  // may be nullptr
};

constexpr Launcher kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"pmi", "PMI_RANK", "PMI_SIZE", nullptr},
};

StatusOr<std::string> ReadSecretFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return NotFoundError("CIUIC_SECRET_FILE=" + path + ": " + std::strerror(errno));
  }
  if (st.st_mode & (S_IROTH | S_IWOTH)) {
    return FailedPreconditionError("CIUIC_SECRET_FILE=" + path +
                                   " is world-readable or -writable; chmod o-rw it (e.g. 0600)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("CIUIC_SECRET_FILE=" + path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string secret = ss.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) return InvalidArgumentError("CIUIC_SECRET_FILE=" + path + " is empty");
  return secret;
}

}  // namespace

StatusOr<JobInfo> DiscoverJob(const Config& config, const Lookup& lookup) {
  JobInfo job;
  if (config.rank >= 0 || config.world_size >= 0) {
    if (config.rank < 0) return InvalidArgumentError("CIUIC_WORLD_SIZE is set but CIUIC_RANK is not");
    if (config.world_size < 0) return InvalidArgumentError("CIUIC_RANK is set but CIUIC_WORLD_SIZE is not");
    job.rank = config.rank;
    job.world_size = config.world_size;
    job.launcher = "ciuic";
    job.local_rank = config.local_rank;
    if (job.rank >= job.world_size) {
      return InvalidArgumentError("CIUIC_RANK=" + std::to_string(job.rank) + " is not below CIUIC_WORLD_SIZE=" +
                                  std::to_string(job.world_size));
    }
  } else {
    job.launcher = "none";
    // A PMIx server (mpirun, srun --mpi=pmix, prterun) comes first: it also
    // carries the store rendezvous when CIUIC_STORE_ADDR is not set.
    Status pmix_status;
    if (pmix::VariablesPresent(lookup)) {
      StatusOr<pmix::Identity> id = pmix::Discover(lookup);
      if (id.ok()) {
        job.rank = id->rank;
        job.world_size = id->world_size;
        job.local_rank = id->local_rank;
        job.launcher = "pmix";
      } else {
        pmix_status = id.status();
      }
    }
    for (const Launcher& l : kLaunchers) {
      if (job.launcher != "none") break;
      if (lookup(l.rank) == nullptr && lookup(l.size) == nullptr) continue;
      CIUIC_ASSIGN_OR_RETURN(job.rank, ReadInt(lookup, l.rank));
      CIUIC_ASSIGN_OR_RETURN(job.world_size, ReadInt(lookup, l.size));
      if (job.world_size == 0) {
        return InvalidArgumentError(std::string(l.size) + "='0': expected at least 1");
      }
      if (job.rank >= job.world_size) {
        return InvalidArgumentError(std::string(l.rank) + "=" + std::to_string(job.rank) + " is not below " +
                                    l.size + "=" + std::to_string(job.world_size));
      }
      if (l.local_rank != nullptr && lookup(l.local_rank) != nullptr) {
        CIUIC_ASSIGN_OR_RETURN(job.local_rank, ReadInt(lookup, l.local_rank));
      }
      job.launcher = l.name;
      break;
    }
    if (!pmix_status.ok()) {
      // PMIx variables without a usable server: fine when another launcher
      // said who we are, an error otherwise (a single rank would be wrong).
      if (job.launcher == "none") {
        return Status(pmix_status.code(), "PMIX_RANK and PMIX_NAMESPACE are set but PMIx is not usable (" +
                                              pmix_status.message() + "); set CIUIC_RANK and CIUIC_WORLD_SIZE");
      }
      CIUIC_LOG(kInfo, "PMIx not used (%s); rank and size from %s", pmix_status.message().c_str(),
                job.launcher.c_str());
    }
  }

  if (!config.store_addr.empty()) {
    // Syntax already checked by the knob parser.
    const size_t colon = config.store_addr.rfind(':');
    job.store_host = config.store_addr.substr(0, colon);
    job.store_port = static_cast<uint16_t>(std::strtoul(config.store_addr.c_str() + colon + 1, nullptr, 10));
  }
  job.store_external = config.store_external;
  CIUIC_ASSIGN_OR_RETURN(job.secret, ResolveSecret(config));
  job.timeout = std::chrono::milliseconds(config.timeout_ms);
  return job;
}

StatusOr<std::string> ResolveSecret(const Config& config) {
  if (!config.secret.empty() && !config.secret_file.empty()) {
    return InvalidArgumentError("both CIUIC_SECRET and CIUIC_SECRET_FILE are set; set only one");
  }
  if (!config.secret_file.empty()) return ReadSecretFile(config.secret_file);
  return config.secret;
}

StatusOr<JobInfo> DiscoverJob(const Config& config) {
  return DiscoverJob(config, [](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace ciuic::transport
