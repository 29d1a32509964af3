// tcp_exchange_probe: what loopback TCP itself can do here, for reading the
// tcp all-reduce figures. Two forked processes on one connection (each
// pinned to its own core when there are two), plain blocking-free sockets,
// no library: for each size,
//   oneway    rank 0 sends SIZE, rank 1 receives it (then a 1-byte ack);
//   exchange  both send SIZE to each other at once and receive the other's
//             (the traffic of a 2-rank all-reduce: each rank sends and
//             receives the whole buffer, as recursive doubling, or half of it
//             twice, as a ring).
// Each line: "mode bytes us gbs", the best of 5 batches of the mean time of
// one transfer, gbs = SIZE / time / 1e9 (one direction's bytes). The
// exchange time is the floor of any 2-rank tcp all-reduce here that moves
// SIZE bytes each way (reduction and copies come on top).
//
//   tcp_exchange_probe SIZE...    sizes take K/M/G suffixes
//
// Exit status 0, 1 when a transfer failed or the data was wrong, 2 on bad
// usage.
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "size_arg.h"

static int ParseSize(const char* text, size_t* out) {
  uint64_t v = 0;
  if (ParseSizeArg(text, &v) != 0 || v == 0 || v > (1ull << 32)) return -1;
  *out = (size_t)v;
  return 0;
}

static double Now(void) { return MonotonicSeconds(); }

// Sends `out_len` bytes of `out` and receives `in_len` into `in` at once
// (non-blocking socket, poll while neither can move). 0 or -1.
static int Transfer(int fd, const char* out, size_t out_len, char* in, size_t in_len) {
  size_t sent = 0, got = 0;
  while (sent < out_len || got < in_len) {
    int moved = 0;
    if (sent < out_len) {
      const ssize_t k = send(fd, out + sent, out_len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) sent += (size_t)k, moved = 1;
      else if (k < 0 && errno != EAGAIN && errno != EINTR) return -1;
    }
    if (got < in_len) {
      const ssize_t k = recv(fd, in + got, in_len - got, MSG_DONTWAIT);
      if (k > 0) got += (size_t)k, moved = 1;
      else if (k == 0) return -1;
      else if (errno != EAGAIN && errno != EINTR) return -1;
    }
    if (!moved) {
      struct pollfd p = {fd, (short)((got < in_len ? POLLIN : 0) | (sent < out_len ? POLLOUT : 0)), 0};
      poll(&p, 1, 1000);
    }
  }
  return 0;
}

static void Pin(int cpu) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) return;
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == cpu) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      sched_setaffinity(0, sizeof(one), &one);
      return;
    }
  }
}

// One rank's part for every size; rank 0 prints. 0 ok, 1 failure.
static int Run(int rank, int fd, size_t* sizes, int nsizes) {
  size_t max = 0;
  for (int i = 0; i < nsizes; ++i) max = sizes[i] > max ? sizes[i] : max;
  char* out = malloc(max);
  char* in = malloc(max);
  if (out == NULL || in == NULL) return 1;
  for (size_t i = 0; i < max; ++i) out[i] = (char)(i * 7 + rank), in[i] = 0;
  char ack = 0;
  for (int s = 0; s < nsizes; ++s) {
    const size_t n = sizes[s];
    const long iters = n >= (64u << 20) ? 4 : (long)((256u << 20) / n > 2000 ? 2000 : (256u << 20) / n);
    for (int mode = 0; mode < 2; ++mode) {  // 0 oneway, 1 exchange
      double best = 1e30;
      for (int batch = 0; batch < 6; ++batch) {  // the first is warm-up
        const double t0 = Now();
        for (long it = 0; it < iters; ++it) {
          int rc;
          if (mode == 1) {
            rc = Transfer(fd, out, n, in, n);
          } else if (rank == 0) {
            rc = Transfer(fd, out, n, &ack, 1);
          } else {
            rc = Transfer(fd, &ack, 1, in, n);
          }
          if (rc != 0) return 1;
        }
        const double t = (Now() - t0) / (double)iters;
        if (batch > 0 && t < best) best = t;
      }
      if (rank == 1 || mode == 1) {
        // What arrived is the other rank's pattern.
        const int from = 1 - rank;
        for (size_t i = 0; i < n; ++i) {
          if (in[i] != (char)(i * 7 + from)) {
            fprintf(stderr, "tcp_exchange_probe: wrong byte %zu at %zu B (%s)\n", i, n,
                    mode ? "exchange" : "oneway");
            return 1;
          }
        }
      }
      if (rank == 0) printf("%s %zu %.2f %.3f\n", mode ? "exchange" : "oneway", n, best * 1e6, (double)n / best / 1e9);
    }
  }
  fflush(stdout);
  free(out);
  free(in);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tcp_exchange_probe SIZE...\n");
    return 2;
  }
  size_t sizes[64];
  int nsizes = 0;
  for (int i = 1; i < argc && nsizes < 64; ++i) {
    if (ParseSize(argv[i], &sizes[nsizes]) != 0) {
      fprintf(stderr, "tcp_exchange_probe: bad size '%s' (a number with K/M/G, up to 4G)\n", argv[i]);
      return 2;
    }
    ++nsizes;
  }
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (lfd < 0 || bind(lfd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(lfd, 1) != 0 ||
      getsockname(lfd, (struct sockaddr*)&a, &len) != 0) {
    perror("tcp_exchange_probe: listen");
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) return 1;
  int fd;
  if (child == 0) {
    close(lfd);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) _exit(1);
  } else {
    fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd < 0) return 1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int rank = child == 0 ? 1 : 0;
  Pin(rank);
  const int rc = Run(rank, fd, sizes, nsizes);
  close(fd);
  if (child == 0) _exit(rc);
  int status = 0;
  waitpid(child, &status, 0);
  return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ? 1 : 0;
}
