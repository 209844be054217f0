/* The rendezvous store in a shared directory (px_kv_open_dir): what tests and
 * single-host runs use instead of the coordinator's KvPut/KvGet. One file
 * per key, written to a temporary name and renamed into place so that a
 * reader sees either no file or the whole value; get polls until the key
 * appears or its deadline passes.
 *
 * File names: "k_" + the key with '/' and ':' written as %2F and %3A ('%' is
 * not a key character, so the encoding is unambiguous); keys whose encoding
 * would be too long for a file name become "h_" + a 128-bit hash. Temporary
 * files start with '.', so they never collide with a key's file. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prunex/kv.h"
#include "prunex/text.h"
#include "px_check.h"
#include "px_clock.h"

#define PX__KV_NAME_MAX 240

typedef struct {
  char *dir;
} px__kv_dir_t;


static uint64_t px__fnv1a(const char *s, uint64_t h) {
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

/* The file name of key into name[PX__KV_NAME_MAX + 8]. */
static void px__kv_file_name(const char *key, char *name) {
  size_t o = 0;
  name[o++] = 'k';
  name[o++] = '_';
  for (const char *p = key; *p; p++) {
    if (o + 4 > PX__KV_NAME_MAX) {
      uint64_t h1 = px__fnv1a(key, 0xcbf29ce484222325ull);
      uint64_t h2 = px__fnv1a(key, 0x84222325cbf29ce4ull ^ 0x5bd1e995ull);
      snprintf(name, PX__KV_NAME_MAX + 8, "h_%016llx%016llx", (unsigned long long)h1,
               (unsigned long long)h2);
      return;
    }
    if (*p == '/' || *p == ':') {
      snprintf(name + o, 4, "%%%02X", (unsigned)(unsigned char)*p);
      o += 3;
    } else {
      name[o++] = *p;
    }
  }
  name[o] = '\0';
}

static px_status_t px__kv_dir_put(void *ctx, const char *key, const void *val, size_t len) {
  px__kv_dir_t *d = ctx;
  char name[PX__KV_NAME_MAX + 8], path[4400];
  px__kv_file_name(key, name);
  snprintf(path, sizeof path, "%s/%s", d->dir, name);
  /* rendezvous files of one run: a crash loses the run anyway, so no fsync */
  px_status_t st = px_file_write_atomic(path, val, len, 0644, PX_FILE_NO_SYNC);
  if (st == PX_OK) return PX_OK;
  char why[512];
  snprintf(why, sizeof why, "%s", px_last_error());
  return px_set_error(st, "kv put '%s': %s", key, why);
}

/* Reads a whole file into a px_malloc'd buffer. PX_ERR_TIMEOUT (no message)
 * when the file does not exist yet. */
static px_status_t px__kv_read(const char *path, const char *key, void **val, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return PX_ERR_TIMEOUT;
    return px_set_error(PX_ERR_IO, "kv get '%s': cannot open %s: %s", key, path, strerror(errno));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return px_set_error(PX_ERR_IO, "kv get '%s': stat failed: %s", key, strerror(e));
  }
  size_t n = (size_t)sb.st_size;
  char *buf = px_malloc(n ? n : 1, "kv.value");
  if (!buf) {
    close(fd);
    return PX_ERR_NOMEM;
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) {
    px_free(buf);
    return px_set_error(PX_ERR_IO, "kv get '%s': short read of %s", key, path);
  }
  *val = buf;
  *len = n;
  return PX_OK;
}

static px_status_t px__kv_dir_get(void *ctx, const char *key, int wait_ms, void **val,
                                  size_t *len) {
  px__kv_dir_t *d = ctx;
  char name[PX__KV_NAME_MAX + 8], path[4400];
  px__kv_file_name(key, name);
  snprintf(path, sizeof path, "%s/%s", d->dir, name);
  double deadline = px__now_ms() + wait_ms;
  long sleep_us = 200;
  for (;;) {
    px_status_t st = px__kv_read(path, key, val, len);
    if (st != PX_ERR_TIMEOUT) return st;
    double now = px__now_ms();
    if (now >= deadline)
      return px_set_error(PX_ERR_TIMEOUT, "kv get '%s': no value after %d ms", key, wait_ms);
    long left_us = (long)((deadline - now) * 1e3) + 1;
    long us = sleep_us < left_us ? sleep_us : left_us;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    if (sleep_us < 10000) sleep_us *= 2;
  }
}

static void px__kv_dir_destroy(void *ctx) {
  px__kv_dir_t *d = ctx;
  if (!d) return;
  px_free(d->dir);
  px_free(d);
}

px_status_t px_kv_open_dir(const char *dir, px_kv_t **out) {
  *out = NULL;
  PX_REQUIRE(dir != NULL && dir[0] != '\0', "px_kv_open_dir: empty directory name");
  PX_REQUIRE(strlen(dir) < 4000, "px_kv_open_dir: directory name too long");
  PX_CHECK(px_mkdirs(dir, 0777));
  px__kv_dir_t *d = px_calloc(1, sizeof *d, "kv.dir");
  if (!d) return PX_ERR_NOMEM;
  size_t n = strlen(dir);
  d->dir = px_malloc(n + 1, "kv.dir.path");
  if (!d->dir) {
    px_free(d);
    return PX_ERR_NOMEM;
  }
  memcpy(d->dir, dir, n + 1);
  static const px_kv_ops_t ops = {px__kv_dir_put, px__kv_dir_get, px__kv_dir_destroy};
  return px_kv_create(&ops, d, out);
}
