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
// Across simulated hosts (`ciuic-run --hosts 2 --net-only`, which sets
// CIUIC_SIM_NS_PREFIX): --netns A,B puts each pair's rank 0 in network
// namespace A and rank 1 in B (so the bytes cross the veths, the bridge and
// any rate limit), and --pairs P runs P pairs at once (a hierarchical
// all-reduce's cross-host stage: every local rank exchanges with its
// counterpart). Then us is the slowest pair's and gbs all pairs' bytes per
// second one way: what the host link carries, the CPU limit of tcp between
// the namespaces where that is below the link.
//
// --quick measures the exchange only, in 2 batches after a warm-up of up to
// 64 MiB each (a 1 Gbit/s link would otherwise take minutes).
//
//   tcp_exchange_probe [--netns A,B] [--pairs P] [--quick] SIZE...    sizes take K/M/G suffixes
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
#include <ifaddrs.h>
#include <arpa/inet.h>
#include <net/if.h>

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
static int quick = 0;  // --quick

static int Run(int rank, int fd, size_t* sizes, int nsizes, FILE* report) {
  size_t max = 0;
  for (int i = 0; i < nsizes; ++i) max = sizes[i] > max ? sizes[i] : max;
  char* out = malloc(max);
  char* in = malloc(max);
  if (out == NULL || in == NULL) return 1;
  for (size_t i = 0; i < max; ++i) out[i] = (char)(i * 7 + rank), in[i] = 0;
  char ack = 0;
  for (int s = 0; s < nsizes; ++s) {
    const size_t n = sizes[s];
    const size_t budget = quick ? (64u << 20) : (256u << 20);
    const long iters = n >= budget ? (quick ? 1 : 4) : (long)(budget / n > 2000 ? 2000 : budget / n);
    for (int mode = quick; mode < 2; ++mode) {  // 0 oneway, 1 exchange
      double best = 1e30;
      for (int batch = 0; batch < (quick ? 3 : 6); ++batch) {  // the first is warm-up
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
      if (rank == 0) fprintf(report, "%s %zu %.2f %.3f\n", mode ? "exchange" : "oneway", n, best * 1e6, (double)n / best / 1e9);
    }
  }
  fflush(report);
  free(out);
  free(in);
  return 0;
}

// Enters the network namespace `name` (/run/netns/name). 0 or -1.
static int EnterNetns(const char* name) {
  char path[256];
  snprintf(path, sizeof(path), "/run/netns/%s", name);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "tcp_exchange_probe: cannot enter %s: %s\n", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return 0;
}

// This namespace's first IPv4 address that is not loopback (the host's
// veth), else loopback. 0 or -1.
static int LocalAddress(struct in_addr* out) {
  struct ifaddrs* list = NULL;
  out->s_addr = htonl(INADDR_LOOPBACK);
  if (getifaddrs(&list) != 0) return -1;
  for (struct ifaddrs* i = list; i != NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
    *out = ((struct sockaddr_in*)i->ifa_addr)->sin_addr;
    break;
  }
  freeifaddrs(list);
  return 0;
}

// One pair: rank 0 here (in namespace ns0 when given), rank 1 forked (in
// ns1). Rank 0's lines go to `report`. 0 ok, 1 failure.
static int RunPair(const char* ns0, const char* ns1, size_t* sizes, int nsizes, FILE* report) {
  if (ns0 != NULL && EnterNetns(ns0) != 0) return 1;
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  if (LocalAddress(&a.sin_addr) != 0) return 1;
  if (ns0 == NULL) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
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
    if (ns1 != NULL && EnterNetns(ns1) != 0) _exit(1);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) {
      perror("tcp_exchange_probe: connect");
      _exit(1);
    }
  } else {
    fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd < 0) return 1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const int rank = child == 0 ? 1 : 0;
  Pin(rank);
  const int rc = Run(rank, fd, sizes, nsizes, report);
  close(fd);
  if (child == 0) _exit(rc);
  int status = 0;
  waitpid(child, &status, 0);
  return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  size_t sizes[64];
  int nsizes = 0, pairs = 1;
  char ns_buf[256] = "";
  const char *ns0 = NULL, *ns1 = NULL;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--netns") == 0 && i + 1 < argc) {
      snprintf(ns_buf, sizeof(ns_buf), "%s", argv[++i]);
      char* comma = strchr(ns_buf, ',');
      if (comma == NULL || comma == ns_buf || comma[1] == '\0') {
        fprintf(stderr, "tcp_exchange_probe: --netns '%s': expected A,B (two namespace names)\n", argv[i]);
        return 2;
      }
      *comma = '\0';
      ns0 = ns_buf;
      ns1 = comma + 1;
    } else if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc) {
      pairs = atoi(argv[++i]);
      if (pairs < 1 || pairs > 16) {
        fprintf(stderr, "tcp_exchange_probe: --pairs '%s': expected 1..16\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (nsizes < 64) {
      if (ParseSize(argv[i], &sizes[nsizes]) != 0) {
        fprintf(stderr, "tcp_exchange_probe: bad size '%s' (a number with K/M/G, up to 4G)\n", argv[i]);
        return 2;
      }
      ++nsizes;
    }
  }
  if (nsizes == 0) {
    fprintf(stderr, "usage: tcp_exchange_probe [--netns A,B] [--pairs P] [--quick] SIZE...\n");
    return 2;
  }
  if (pairs == 1) return RunPair(ns0, ns1, sizes, nsizes, stdout);
  // P pairs at once, each reporting through a pipe; then per line the
  // slowest pair's time and every pair's bytes.
  FILE* reports[16];
  pid_t pids[16];
  for (int p = 0; p < pairs; ++p) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    pids[p] = fork();
    if (pids[p] < 0) return 1;
    if (pids[p] == 0) {
      close(fds[0]);
      FILE* out = fdopen(fds[1], "w");
      _exit(out == NULL ? 1 : RunPair(ns0, ns1, sizes, nsizes, out));
    }
    close(fds[1]);
    reports[p] = fdopen(fds[0], "r");
    if (reports[p] == NULL) return 1;
  }
  int failed = 0;
  char line[256];
  for (;;) {
    char mode[16] = "";
    size_t bytes = 0;
    double worst = 0;
    int got = 0;
    for (int p = 0; p < pairs; ++p) {
      double us = 0, gbs = 0;
      if (fgets(line, sizeof(line), reports[p]) == NULL) continue;
      if (sscanf(line, "%15s %zu %lf %lf", mode, &bytes, &us, &gbs) != 4) continue;
      worst = us > worst ? us : worst;
      ++got;
    }
    if (got == 0) break;
    if (got != pairs) failed = 1;
    printf("%s %zu %.2f %.3f\n", mode, bytes, worst, (double)bytes * pairs / (worst * 1e-6) / 1e9);
  }
  for (int p = 0; p < pairs; ++p) {
    int status = 0;
    fclose(reports[p]);
    waitpid(pids[p], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
