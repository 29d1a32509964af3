#include "common/c_api.h"

#include <string>

#include "common/version.h"

namespace ciuic {
namespace {
thread_local std::string g_last_error;  // per thread by contract
}  // namespace

ciuic_status_t ToCStatus(const Status& status) {
  if (status.ok()) {
    g_last_error.clear();
    return CIUIC_SUCCESS;
  }
  g_last_error = status.message();
  return static_cast<ciuic_status_t>(status.code());
}
}  // namespace ciuic

extern "C" {

const char* ciuic_status_string(ciuic_status_t status) {
  switch (status) {
    case CIUIC_SUCCESS: return "CIUIC_SUCCESS";
    case CIUIC_ERROR_INVALID_ARGUMENT: return "CIUIC_ERROR_INVALID_ARGUMENT";
    case CIUIC_ERROR_NOT_FOUND: return "CIUIC_ERROR_NOT_FOUND";
    case CIUIC_ERROR_FAILED_PRECONDITION: return "CIUIC_ERROR_FAILED_PRECONDITION";
    case CIUIC_ERROR_RESOURCE_EXHAUSTED: return "CIUIC_ERROR_RESOURCE_EXHAUSTED";
    case CIUIC_ERROR_UNAVAILABLE: return "CIUIC_ERROR_UNAVAILABLE";
    case CIUIC_ERROR_DEADLINE_EXCEEDED: return "CIUIC_ERROR_DEADLINE_EXCEEDED";
    case CIUIC_ERROR_ABORTED: return "CIUIC_ERROR_ABORTED";
    case CIUIC_ERROR_UNIMPLEMENTED: return "CIUIC_ERROR_UNIMPLEMENTED";
    case CIUIC_ERROR_DATA_LOSS: return "CIUIC_ERROR_DATA_LOSS";
    case CIUIC_ERROR_INTERNAL: return "CIUIC_ERROR_INTERNAL";
  }
  return "CIUIC_ERROR_UNKNOWN";
}

const char* ciuic_last_error(void) { return ciuic::g_last_error.c_str(); }

const char* ciuic_version(void) { return ciuic::Version(); }

}  // extern "C"
