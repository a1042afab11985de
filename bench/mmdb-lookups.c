// The libmaxminddb contender of `npm run bench:export`, in a process of its
// own: lookups per second on a MaxMind DB, or on an IPv4 and an IPv6 file as
// DB-IP ships them. bench/export.js compiles it at bench time against
// Debian's libmaxminddb-dev:
//   cc -O2 bench/mmdb-lookups.c -lmaxminddb -o mmdb-lookups
//   mmdb-lookups ADDRESSES IPV4_DB IPV6_DB PATH...
// ADDRESSES holds one address a line; each is parsed once (inet_pton) before
// any timing, so the figures are the database's, not the parser's. Two
// measures, each the best of three timed passes (after a warm-up pass) over
// the addresses REPEAT times:
//   walk:  MMDB_lookup_sockaddr, the tree walk to the record;
//   field: the walk and MMDB_aget_value of PATH (e.g. "country iso_code"),
//          what nginx's GeoIP2 module does for a variable.
// Prints one JSON line per measure.
#include <arpa/inet.h>
#include <maxminddb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { REPEAT = 10 };

struct address {
  struct sockaddr_storage sa;
  MMDB_s *db;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void open_db(const char *file, MMDB_s *db) {
  int status = MMDB_open(file, MMDB_MODE_MMAP, db);
  if (status != MMDB_SUCCESS) {
    fprintf(stderr, "%s: %s\n", file, MMDB_strerror(status));
    exit(1);
  }
}

// One pass: every address REPEAT times; returns a sum of what was found, so
// that nothing can be left out by the compiler, and counts the records found.
static unsigned long pass(const struct address *a, size_t n, const char *const *path, unsigned long *found) {
  unsigned long sum = 0;
  *found = 0;
  for (int r = 0; r < REPEAT; ++r) {
    for (size_t i = 0; i < n; ++i) {
      int error = 0;
      MMDB_lookup_result_s result = MMDB_lookup_sockaddr(a[i].db, (const struct sockaddr *)&a[i].sa, &error);
      if (error != MMDB_SUCCESS || !result.found_entry) continue;
      ++*found;
      sum += result.netmask + result.entry.offset;
      if (path == NULL) continue;
      MMDB_entry_data_s data;
      if (MMDB_aget_value(&result.entry, &data, path) == MMDB_SUCCESS && data.has_data) sum += data.data_size;
    }
  }
  return sum;
}

static void measure(const char *name, const struct address *a, size_t n, const char *const *path) {
  unsigned long found = 0;
  unsigned long sum = pass(a, n, path, &found);
  double best = 1e9;
  for (int p = 0; p < 3; ++p) {
    double start = now();
    sum += pass(a, n, path, &found);
    double seconds = now() - start;
    if (seconds < best) best = seconds;
  }
  double lookups = (double)n * REPEAT;
  printf("{\"measure\":\"%s\",\"lookups\":%.0f,\"seconds\":%.6f,\"per_second\":%.0f,\"found\":%lu,\"checksum\":%lu}\n", name, lookups, best,
         lookups / best, found, sum);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: mmdb-lookups ADDRESSES IPV4_DB IPV6_DB PATH...\n");
    return 2;
  }
  MMDB_s v4, v6;
  open_db(argv[2], &v4);
  int shared = strcmp(argv[2], argv[3]) == 0;
  if (!shared) open_db(argv[3], &v6);
  FILE *in = fopen(argv[1], "r");
  if (in == NULL) {
    perror(argv[1]);
    return 1;
  }
  size_t n = 0, capacity = 1024;
  struct address *a = malloc(capacity * sizeof *a);
  char line[128];
  while (fgets(line, sizeof line, in) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    if (n == capacity) a = realloc(a, (capacity *= 2) * sizeof *a);
    memset(&a[n], 0, sizeof a[n]);
    struct sockaddr_in *s4 = (struct sockaddr_in *)&a[n].sa;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a[n].sa;
    if (inet_pton(AF_INET, line, &s4->sin_addr) == 1) {
      s4->sin_family = AF_INET;
      a[n].db = &v4;
    } else if (inet_pton(AF_INET6, line, &s6->sin6_addr) == 1) {
      s6->sin6_family = AF_INET6;
      a[n].db = shared ? &v4 : &v6;
    } else {
      fprintf(stderr, "not an address: %s\n", line);
      return 1;
    }
    ++n;
  }
  fclose(in);
  const char **path = (const char **)&argv[4];  // argv ends with NULL, as MMDB_aget_value wants
  measure("walk", a, n, NULL);
  measure("field", a, n, path);
  free(a);
  MMDB_close(&v4);
  if (!shared) MMDB_close(&v6);
  return 0;
}
