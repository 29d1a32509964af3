/* Uses the installed C ABI, built with the flags pkg-config gives. */
#include <ciuic/ciuic.h>
#include <stdio.h>

int main(void) {
  double a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, out[4];
  const void* srcs[2] = {a, b};
  if (ciuic_reduce_local(out, srcs, 2, 4, CIUIC_FLOAT64, CIUIC_SUM) != CIUIC_SUCCESS) {
    fprintf(stderr, "%s\n", ciuic_last_error());
    return 1;
  }
  if (out[3] != 44) return 1;
  /* A bad argument comes back as an error with a message, not a crash. */
  if (ciuic_reduce_local(out, srcs, 0, 4, CIUIC_FLOAT64, CIUIC_SUM) != CIUIC_ERROR_INVALID_ARGUMENT) return 1;
  printf("consumer_c ok: %s (%s)\n", ciuic_version(), ciuic_last_error());
  return 0;
}
