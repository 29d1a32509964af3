/* What the C test programs of this folder share: the calling rank for
 * messages, and checks that name the call or line that went wrong and make
 * the function return 1. */
#ifndef CIUIC_TESTS_INTEGRATION_C_CHECKS_H_
#define CIUIC_TESTS_INTEGRATION_C_CHECKS_H_

#include <ciuic/ciuic.h>
#include <stdio.h>

static int g_rank = -1;

#define CHECK(call)                                                                              \
  do {                                                                                           \
    ciuic_status_t s_ = (call);                                                                  \
    if (s_ != CIUIC_SUCCESS) {                                                                   \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call, ciuic_status_string(s_),   \
              ciuic_last_error());                                                               \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

#define EXPECT(cond, ...)                                            \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "rank %d: line %d: ", g_rank, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, "\n");                                         \
      return 1;                                                      \
    }                                                                \
  } while (0)

#endif /* CIUIC_TESTS_INTEGRATION_C_CHECKS_H_ */
