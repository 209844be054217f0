/* A per-request arena: replies are trees of protobuf-c messages built from
 * many small pieces, so they are allocated here and freed in one go after
 * packing. It also serves as a protobuf-c allocator, so specs unpacked from
 * the database live (and die) with the request. The wall clock of the
 * daemon (coord_now_ms) sits here too: every file uses both, and neither
 * calls anything of the daemon's. */
#include <string.h>
#include <time.h>

#include "coord.h"

#define COORD_ARENA_CHUNK 8192

struct coord_arena_chunk {
  coord_arena_chunk_t *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

static void *coord_pb_alloc(void *ud, size_t size) { return coord_alloc(ud, size); }
static void coord_pb_free(void *ud, void *p) {
  (void)ud;
  (void)p; /* freed with the arena */
}

void coord_arena_init(coord_arena_t *a) {
  a->head = NULL;
  a->pb.alloc = coord_pb_alloc;
  a->pb.free = coord_pb_free;
  a->pb.allocator_data = a;
}

void coord_arena_free(coord_arena_t *a) {
  coord_arena_chunk_t *c = a->head;
  while (c) {
    coord_arena_chunk_t *next = c->next;
    px_free(c);
    c = next;
  }
  a->head = NULL;
}

void *coord_alloc(coord_arena_t *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (size == 0) size = 16;
  coord_arena_chunk_t *c = a->head;
  if (!c || c->cap - c->used < size) {
    size_t cap = size > COORD_ARENA_CHUNK ? size : COORD_ARENA_CHUNK;
    c = px_malloc(sizeof *c + cap, "coordd.arena");
    if (!c) return NULL;
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += size;
  memset(p, 0, size);
  return p;
}

char *coord_strdup(coord_arena_t *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = coord_alloc(a, n);
  if (d) memcpy(d, s, n);
  return d;
}

void *coord_push(coord_arena_t *a, void **arr, size_t *n, size_t *cap, size_t elem) {
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 8;
    void *grown = coord_alloc(a, ncap * elem);
    if (!grown) return NULL;
    if (*n) memcpy(grown, *arr, *n * elem);
    *arr = grown;
    *cap = ncap;
  }
  void *slot = (char *)*arr + (*n)++ * elem;
  memset(slot, 0, elem);
  return slot;
}

int64_t coord_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
