/* pxcoordd's HTTP side: a second listener, next to gRPC, that
 * serves Prometheus /metrics, JSON for the dashboard, the dashboard's
 * static files and the charting library from its Debian package.
 *
 * Threads: the listener is libmicrohttpd with its own internal polling
 * thread (MHD_USE_INTERNAL_POLLING_THREAD), so no request ever runs on the
 * libuv loop. That thread reads the coordinator database through its own
 * read-only SQLite connection (a px_store opened read-only; the queries are
 * db/http_read.c's) (the database is in WAL mode: readers never
 * block the loop's writer and always see a committed snapshot) and never
 * touches coord_t. The only state shared with the loop thread is the RPC
 * statistics below, which are C11 atomics. */
#ifndef PX_COORD_HTTP_H
#define PX_COORD_HTTP_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "prunex/px.h"
#include "prunex/text.h"

/* ---- RPC statistics (service.c; written on the loop thread, read by
 * /metrics on the HTTP thread) ------------------------------------------- */

#define COORD_RPC_NBUCKETS 14
/* Upper bounds (seconds) of the handler-latency histogram buckets; a last
 * bucket, +Inf, follows. */
extern const double coord_rpc_bucket_le[COORD_RPC_NBUCKETS];

typedef struct {
  const char *name;                             /* "SubmitJob" */
  _Atomic uint64_t calls;
  _Atomic uint64_t nanos;                       /* sum of handler times */
  _Atomic uint64_t bucket[COORD_RPC_NBUCKETS + 1]; /* per bucket, not cumulative */
} coord_rpc_stat_t;

/* One per entry of coord_methods, same order. */
extern coord_rpc_stat_t coord_rpc_stats[];
extern const int coord_rpc_nstats;

/* ---- response buffer ----------------------------------------------------- */

/* Responses are written into a px_buf_t (prunex/text.h) bounded at
 * COORD_HBUF_MAX bytes: past it (or on allocation failure) it stops
 * growing and sets oom, so a handler can write freely and check once at the
 * end. */
#define COORD_HBUF_MAX ((size_t)64 << 20)
typedef px_buf_t coord_hbuf_t;
#define COORD_HBUF_INIT {.max = COORD_HBUF_MAX}

/* {"error": msg} and a newline, the body of every error (http_api.c). */
void coord_http_error_body(coord_hbuf_t *b, const char *msg);
/* A Prometheus label value (no quotes): backslash, quote, newline escaped. */
void coord_hb_plabel(coord_hbuf_t *b, const char *s);
/* A Prometheus sample value (NaN, +Inf, -Inf spelled as the format wants). */
void coord_hb_pnum(coord_hbuf_t *b, double v);

/* ---- handlers (http_api.c, http_metrics.c): run on the HTTP thread -------- */

#include "prunex/store.h"

/* Query parameters, already looked up (NULL when absent). */
typedef struct {
  const char *limit;
  const char *cursor;
} coord_http_page_t;

/* Each returns the HTTP status and writes the body (JSON, or on an error a
 * {"error": "..."} object) into out. job_id is the URL's job segment. */
int coord_http_jobs(px_store_t *db, const coord_http_page_t *pg, coord_hbuf_t *out);
int coord_http_job(px_store_t *db, const char *job_id, coord_hbuf_t *out);
int coord_http_iterations(px_store_t *db, const char *job_id, const coord_http_page_t *pg,
                          coord_hbuf_t *out);
int coord_http_layers(px_store_t *db, const char *job_id, const coord_http_page_t *pg,
                      coord_hbuf_t *out);
int coord_http_nodes(px_store_t *db, const coord_http_page_t *pg, coord_hbuf_t *out);
/* Prometheus text format 0.0.4: the running jobs' series, and those of the
 * jobs that ended in the last ended_s seconds with their final values
 * (0: none). */
int coord_http_metrics(px_store_t *db, int64_t started_unix_ms, int ended_s, coord_hbuf_t *out);

/* ---- the listener (http.c) ----------------------------------------------- */

typedef struct coord_http coord_http_t;

/* Connection limits: far more connections than any
 * honest set of clients needs; each address has a budget, per_address
 * (http_max_per_address), or per_proxy (http_max_per_proxy) for the
 * addresses of trusted_proxies; a request's headers within the deadline.
 * A connection from an address at its budget closes that address's
 * connection idle the longest (waiting for its first request's headers or
 * between requests), so idle connections never keep a client out; it is
 * refused only when all of them are serving requests. */
#define COORD_HTTP_MAX_CONNECTIONS 1000
#define COORD_HTTP_HEADER_DEADLINE_MS 5000
#define COORD_HTTP_IDLE_TIMEOUT_S 30
#define COORD_HTTP_MAX_PROXIES 16

/* An address of a connection: AF_INET (addr[0..3]) or AF_INET6; an
 * IPv4-mapped IPv6 address is its IPv4 address. */
typedef struct {
  int family;
  unsigned char addr[16];
} coord_http_addr_t;

/* An address or CIDR block of http_trusted_proxies. */
typedef struct {
  int family;
  unsigned char addr[16];
  int bits; /* prefix length: 32 or 128 for one address */
} coord_http_net_t;

/* Parses "127.0.0.1, ::1 10.1.0.0/16" (commas or blanks between entries)
 * into out[max]; *n entries. PX_ERR_INVALID naming the bad entry (the
 * caller adds the setting's name). (http_nets.c) */
px_status_t coord_http_nets_parse(const char *list, coord_http_net_t *out, int max, int *n);
/* The key of an AF_INET or AF_INET6 sockaddr (any other: family 0). */
void coord_http_addr_key(const struct sockaddr *sa, coord_http_addr_t *k);
/* 1 when k is in one of nets[n]. */
int coord_http_nets_match(const coord_http_net_t *nets, int n, const coord_http_addr_t *k);
/* k as text ("127.0.0.1", "::1"; "?" for family 0) into out[cap]. */
void coord_http_addr_str(const coord_http_addr_t *k, char *out, size_t cap);

/* The listener's limits: budgets per address (>= 1) and the trusted
 * proxies ("" : none), as http_trusted_proxies spells them. */
typedef struct {
  int per_address;
  int per_proxy;
  const char *trusted_proxies;
  int metrics_ended_s; /* http_metrics_ended_s: an ended job's series stay this long */
} coord_http_limits_t;

/* Starts the HTTP listener on listen ("HOST:PORT"; port 0 picks a free
 * one), reading db_path read-only, serving the dashboard from www_dir and
 * the charting library from js_dir. With tokens_path (the coordinator's
 * tokens file; NULL or "": none) /metrics and /api/v1 need a user or admin
 * bearer token. lim sets the connection budgets (read during the call
 * only). Fails with PX_ERR_IO when the address cannot be bound or the
 * database not opened, PX_ERR_INVALID for a bad tokens file or proxy list.
 * *out is owned by the caller: coord_http_stop frees it. */
px_status_t coord_http_start(const char *listen, const char *db_path, const char *www_dir,
                             const char *js_dir, const char *tokens_path,
                             const coord_http_limits_t *lim, coord_http_t **out);
/* Re-reads the tokens file into the listener's copy (SIGHUP, loop thread);
 * on failure the old tokens stay. */
px_status_t coord_http_reload_tokens(coord_http_t *h);
int coord_http_port(const coord_http_t *h);
/* Stops the listener (waits for the request in progress, which is bounded)
 * and frees it. NULL is a no-op. */
void coord_http_stop(coord_http_t *h);

#endif
