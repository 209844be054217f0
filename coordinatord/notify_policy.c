/* Where job notifications may go: a spec's notify.url is a
 * request the coordinator makes on a user's behalf, so without the
 * operator's word it may reach public addresses only. The host is resolved
 * (getaddrinfo reads 2130706433, 0x7f.1 and 017700000001 as libcurl does)
 * and every address it gives is checked: loopback, private, link-local,
 * CGNAT, multicast, reserved, IPv4-mapped and this machine's own addresses
 * are refused unless notify_allow names them (an address or CIDR, a host
 * name, or a URL prefix), and the coordinator's own listeners are refused
 * unless a URL prefix names them exactly. The sender checks again before
 * each POST and pins libcurl to the addresses checked (notify.c), so a DNS
 * answer that changes in between (rebinding) is not followed. */
#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "notify_policy.h"
#include "prunex/check.h"

/* ---- the URL ------------------------------------------------------------ */

typedef struct {
  char scheme[8];
  char host[256]; /* lower case, no brackets */
  int port;
  char path[1100];
} coord_url_t;

/* url split by libcurl's own parser (so the host is the one it connects
 * to); 0, or -1 when libcurl does not take it. */
static int coord_url_parse(const char *url, coord_url_t *u) {
  CURLU *h = curl_url();
  char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL;
  int ok = h && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
           curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
           curl_url_get(h, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
           curl_url_get(h, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
           curl_url_get(h, CURLUPART_PATH, &path, 0) == CURLUE_OK;
  if (ok) {
    const char *hs = host;
    size_t n = strlen(hs);
    if (n >= 2 && hs[0] == '[' && hs[n - 1] == ']') {
      hs++;
      n -= 2;
    }
    ok = n > 0 && n < sizeof u->host && strlen(scheme) < sizeof u->scheme;
    if (ok) {
      for (size_t i = 0; i < n; i++) u->host[i] = (char)tolower((unsigned char)hs[i]);
      u->host[n] = '\0';
      for (size_t i = 0; i <= strlen(scheme); i++)
        u->scheme[i] = (char)tolower((unsigned char)scheme[i]);
      u->port = atoi(port);
      snprintf(u->path, sizeof u->path, "%s", path);
    }
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_free(path);
  curl_url_cleanup(h);
  return ok && (!strcmp(u->scheme, "http") || !strcmp(u->scheme, "https")) ? 0 : -1;
}

struct timespec coord_notify_deadline(int64_t ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  return until;
}

const char *coord_notify_url_auth(const char *url, size_t *alen, const char **at) {
  const char *auth = strstr(url, "://");
  auth = auth ? auth + 3 : url;
  *alen = strcspn(auth, "/?#");
  *at = NULL;
  for (const char *p = auth; p < auth + *alen; p++)
    if (*p == '@') *at = p;
  return auth;
}

void coord_notify_url_redact(const char *url, char *out, size_t cap) {
  size_t alen;
  const char *at;
  const char *auth = coord_notify_url_auth(url, &alen, &at);
  const char *host = at ? at + 1 : auth;
  const char *q = strchr(host, '?');
  snprintf(out, cap, "%.*s%s%.*s%s", (int)(auth - url), url, at ? "***@" : "",
           (int)(q ? (size_t)(q - host) : strlen(host)), host, q ? "?***" : "");
}

int coord_notify_url_dest(const char *url, char *key, size_t cap) {
  coord_url_t u;
  if (coord_url_parse(url, &u) != 0) return -1;
  snprintf(key, cap, "%s:%d", u.host, u.port);
  return 0;
}

int coord_notify_url_secret(const char *url) {
  char red[1200];
  coord_notify_url_redact(url, red, sizeof red);
  return strcmp(red, url) != 0;
}

/* ---- addresses ------------------------------------------------------------ */

/* The IPv4 address in a (host order). */
static uint32_t coord_v4(const struct sockaddr *sa) {
  return ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
}

/* What kind of non-public IPv4 address a is, or NULL for a public one. */
static const char *coord_v4_class(uint32_t a) {
  static const struct {
    uint32_t net, mask;
    const char *what;
  } t[] = {
      {0x00000000, 0xFF000000, "an unspecified (0.0.0.0/8) address"},
      {0x0A000000, 0xFF000000, "a private address"},
      {0x64400000, 0xFFC00000, "a shared (CGNAT, 100.64.0.0/10) address"},
      {0x7F000000, 0xFF000000, "a loopback address"},
      {0xA9FE0000, 0xFFFF0000, "a link-local address"},
      {0xAC100000, 0xFFF00000, "a private address"},
      {0xC0000000, 0xFFFFFF00, "an IETF protocol (192.0.0.0/24) address"},
      {0xC0000200, 0xFFFFFF00, "a documentation address"},
      {0xC0A80000, 0xFFFF0000, "a private address"},
      {0xC6120000, 0xFFFE0000, "a benchmarking (198.18.0.0/15) address"},
      {0xC6336400, 0xFFFFFF00, "a documentation address"},
      {0xCB007100, 0xFFFFFF00, "a documentation address"},
      {0xE0000000, 0xF0000000, "a multicast address"},
      {0xF0000000, 0xF0000000, "a reserved (240.0.0.0/4) or broadcast address"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if ((a & t[i].mask) == t[i].net) return t[i].what;
  return NULL;
}

/* The same for IPv6; NAT64 and 6to4 addresses are their IPv4 address's. */
static const char *coord_v6_class(const unsigned char *b) {
  static const unsigned char zero[16] = {0};
  if (!memcmp(b, zero, 15) && b[15] == 0) return "an unspecified address";
  if (!memcmp(b, zero, 15) && b[15] == 1) return "a loopback address";
  if (!memcmp(b, zero, 10) && b[10] == 0xff && b[11] == 0xff) return "an IPv4-mapped address";
  if (!memcmp(b, zero, 12)) return "an IPv4-compatible address";
  if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && !memcmp(b + 4, zero, 8))
    return coord_v4_class((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | b[14] << 8 | b[15]);
  if (b[0] == 0x20 && b[1] == 0x02)
    return coord_v4_class((uint32_t)b[2] << 24 | (uint32_t)b[3] << 16 | b[4] << 8 | b[5]);
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) return "a Teredo address";
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8)
    return "a documentation address";
  if (b[0] == 0x01 && !memcmp(b + 1, zero, 7)) return "a discard-only address";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "a link-local address";
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "a site-local address";
  if ((b[0] & 0xfe) == 0xfc) return "a private (unique local) address";
  if (b[0] == 0xff) return "a multicast address";
  return NULL;
}

static const unsigned char *coord_v6(const struct sockaddr *sa) {
  return ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
}

static int coord_addr_equal(const struct sockaddr *a, const struct sockaddr *b) {
  if (a->sa_family != b->sa_family) return 0;
  if (a->sa_family == AF_INET) return coord_v4(a) == coord_v4(b);
  return a->sa_family == AF_INET6 && !memcmp(coord_v6(a), coord_v6(b), 16);
}

/* 1 when sa is an address of one of this machine's interfaces. */
static int coord_addr_local(const struct sockaddr *sa) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return 0;
  int found = 0;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
    found = i->ifa_addr && coord_addr_equal(i->ifa_addr, sa);
  freeifaddrs(ifs);
  return found;
}

/* Why sa is not a public address, or NULL when it is. */
static const char *coord_addr_class(const struct sockaddr *sa) {
  const char *what = sa->sa_family == AF_INET    ? coord_v4_class(coord_v4(sa))
                     : sa->sa_family == AF_INET6 ? coord_v6_class(coord_v6(sa))
                                                 : "not an IP address";
  if (!what && coord_addr_local(sa)) what = "an address of the coordinator's machine";
  return what;
}

static void coord_addr_text(const struct sockaddr *sa, char *out, size_t cap) {
  const void *p = sa->sa_family == AF_INET
                      ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                      : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
  if (!inet_ntop(sa->sa_family, p, out, (socklen_t)cap)) snprintf(out, cap, "?");
}

/* ---- notify_allow entries ---------------------------------------------------- */

enum { COORD_ALLOW_CIDR, COORD_ALLOW_HOST, COORD_ALLOW_PREFIX };

typedef struct {
  int kind;
  int family, bits;           /* CIDR */
  unsigned char net[16];
  char host[256];             /* HOST ("*.example.org": its subdomains) */
  coord_url_t prefix;         /* PREFIX */
} coord_allow_t;

/* Parses one entry (len bytes at s): 0, or -1 when it is none of the three. */
static int coord_allow_parse(const char *s, size_t len, coord_allow_t *e) {
  char t[1100];
  if (len >= sizeof t) return -1;
  memcpy(t, s, len);
  t[len] = '\0';
  memset(e, 0, sizeof *e);
  if (!strncasecmp(t, "http://", 7) || !strncasecmp(t, "https://", 8)) {
    e->kind = COORD_ALLOW_PREFIX;
    return strpbrk(t, "@?#") ? -1 : coord_url_parse(t, &e->prefix);
  }
  char *slash = strchr(t, '/');
  if (slash) *slash = '\0';
  e->kind = COORD_ALLOW_CIDR;
  if (inet_pton(AF_INET, t, e->net) == 1) e->family = AF_INET;
  else if (inet_pton(AF_INET6, t, e->net) == 1) e->family = AF_INET6;
  if (e->family) {
    e->bits = e->family == AF_INET ? 32 : 128;
    if (!slash) return 0;
    char *end = NULL;
    long bits = strtol(slash + 1, &end, 10);
    if (end == slash + 1 || *end || bits < 0 || bits > e->bits) return -1;
    e->bits = (int)bits;
    return 0;
  }
  if (slash || !t[0] || strlen(t) >= sizeof e->host) return -1;
  e->kind = COORD_ALLOW_HOST;
  const char *h = !strncmp(t, "*.", 2) ? t + 2 : t;
  if (!h[0]) return -1;
  for (const char *p = h; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_') return -1;
  for (size_t i = 0; i <= strlen(t); i++) e->host[i] = (char)tolower((unsigned char)t[i]);
  return 0;
}

/* Calls fn for each entry of text; stops at the first that fn answers
 * non-zero (returned) or that does not parse (-1, its text in bad). */
static int coord_allow_each(const char *text, int (*fn)(const coord_allow_t *, void *), void *arg,
                            char *bad, size_t cap) {
  for (const char *p = text; *p;) {
    p += strspn(p, " \t\r\n,");
    size_t n = strcspn(p, " \t\r\n,");
    if (!n) break;
    coord_allow_t e;
    if (coord_allow_parse(p, n, &e) != 0) {
      snprintf(bad, cap, "%.*s", (int)n, p);
      return -1;
    }
    int r = fn(&e, arg);
    if (r) return r;
    p += n;
  }
  return 0;
}

static int coord_allow_nothing(const coord_allow_t *e, void *arg) {
  (void)e;
  (void)arg;
  return 0;
}

int coord_notify_allow_ok(const char *text, char *err, size_t cap) {
  char bad[256];
  if (coord_allow_each(text, coord_allow_nothing, NULL, bad, sizeof bad) == 0) return 1;
  snprintf(err, cap,
           "'%s' is not an IP address, a CIDR (10.0.0.0/8), a host name (hooks.example.org,"
           " *.example.org) or a URL prefix without userinfo or query"
           " (https://hooks.example.org/prunex/)", bad);
  return 0;
}

/* ---- matching ---------------------------------------------------------------- */

typedef struct {
  const coord_url_t *u;
  const struct sockaddr *sa; /* NULL: match names and prefixes only */
  int by_prefix, by_name, by_cidr;
} coord_match_t;

static int coord_cidr_has(const coord_allow_t *e, const struct sockaddr *sa) {
  unsigned char a[16];
  if (sa->sa_family == AF_INET && e->family == AF_INET) {
    uint32_t v = htonl(coord_v4(sa));
    memcpy(a, &v, 4);
  } else if (sa->sa_family == AF_INET6 && e->family == AF_INET6) {
    memcpy(a, coord_v6(sa), 16);
  } else {
    return 0;
  }
  int full = e->bits / 8, rest = e->bits % 8;
  if (memcmp(a, e->net, (size_t)full) != 0) return 0;
  unsigned char mask = (unsigned char)(0xff00 >> rest);
  return !rest || (a[full] & mask) == (e->net[full] & mask);
}

static int coord_allow_match(const coord_allow_t *e, void *arg) {
  coord_match_t *m = arg;
  const coord_url_t *u = m->u;
  if (e->kind == COORD_ALLOW_PREFIX) {
    const coord_url_t *p = &e->prefix;
    size_t n = strlen(p->path);
    if (!strcmp(p->scheme, u->scheme) && !strcmp(p->host, u->host) && p->port == u->port &&
        !strncmp(u->path, p->path, n) &&
        (n == 0 || p->path[n - 1] == '/' || u->path[n] == '\0' || u->path[n] == '/'))
      m->by_prefix = 1;
  } else if (e->kind == COORD_ALLOW_HOST) {
    if (!strncmp(e->host, "*.", 2)) {
      size_t hl = strlen(u->host), el = strlen(e->host + 1);
      if (hl > el && !strcmp(u->host + hl - el, e->host + 1)) m->by_name = 1;
    } else if (!strcmp(e->host, u->host)) {
      m->by_name = 1;
    }
  } else if (m->sa && coord_cidr_has(e, m->sa)) {
    m->by_cidr = 1;
  }
  return 0;
}

/* ---- resolution with a bound on the wait ---------------------------------------- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs, done, rc;
  char host[256], port[8];
  struct addrinfo *res;
} coord_gai_t;

static void coord_gai_unref(coord_gai_t *g) {
  pthread_mutex_lock(&g->mu);
  int last = --g->refs == 0;
  pthread_mutex_unlock(&g->mu);
  if (!last) return;
  if (g->res) freeaddrinfo(g->res);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  px_free(g);
}

static int coord_gai(const char *host, const char *port, struct addrinfo **res) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  return getaddrinfo(host, port, &hints, res);
}

/* Lookups still running on their own threads: a flood of submissions
 * naming hosts whose resolver never answers starts at most this many
 * threads; past it a lookup answers EAI_AGAIN at once (the URL is then
 * checked before each POST, as for a lookup that ran out of time). */
#define COORD_GAI_THREADS_MAX 16
static atomic_int coord_gai_running;

static void *coord_gai_main(void *arg) {
  coord_gai_t *g = arg;
  struct addrinfo *res = NULL;
  int rc = coord_gai(g->host, g->port, &res);
  pthread_mutex_lock(&g->mu);
  g->rc = rc;
  g->res = res;
  g->done = 1;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  coord_gai_unref(g);
  atomic_fetch_sub(&coord_gai_running, 1);
  return NULL;
}

/* getaddrinfo, waiting at most ms (0: no bound) for it: EAI_AGAIN when the
 * wait runs out (the lookup finishes on its own thread and is dropped) or
 * when COORD_GAI_THREADS_MAX lookups are still running. */
static int coord_resolve(const char *host, int port, int ms, struct addrinfo **res) {
  char ps[8];
  snprintf(ps, sizeof ps, "%d", port);
  *res = NULL;
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM};
  if (ms <= 0 || getaddrinfo(host, ps, &hints, res) == 0) return *res ? 0 : coord_gai(host, ps, res);
  if (atomic_fetch_add(&coord_gai_running, 1) >= COORD_GAI_THREADS_MAX) {
    atomic_fetch_sub(&coord_gai_running, 1);
    return EAI_AGAIN;
  }
  coord_gai_t *g = px_calloc(1, sizeof *g, "coordd.notify");
  if (!g) {
    atomic_fetch_sub(&coord_gai_running, 1);
    return EAI_MEMORY;
  }
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->refs = 2;
  snprintf(g->host, sizeof g->host, "%s", host);
  snprintf(g->port, sizeof g->port, "%s", ps);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, coord_gai_main, g) != 0) {
    pthread_attr_destroy(&attr);
    atomic_fetch_sub(&coord_gai_running, 1);
    g->refs = 1;
    coord_gai_unref(g);
    return coord_gai(host, ps, res);
  }
  pthread_attr_destroy(&attr);
  struct timespec until = coord_notify_deadline(ms);
  pthread_mutex_lock(&g->mu);
  while (!g->done && pthread_cond_timedwait(&g->cv, &g->mu, &until) != ETIMEDOUT) {
  }
  int rc = g->done ? g->rc : EAI_AGAIN;
  if (g->done) {
    *res = g->res;
    g->res = NULL;
  }
  pthread_mutex_unlock(&g->mu);
  coord_gai_unref(g);
  return rc;
}

/* ---- the check ------------------------------------------------------------------- */

void coord_notify_policy_get(coord_t *c, coord_notify_policy_t *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->allow, sizeof p->allow, "%s", c->cfg.notify_allow);
  p->public_ok = c->cfg.notify_public;
  p->own_ports[0] = c->own_ports[0];
  p->own_ports[1] = c->own_ports[1];
}

/* Checks one resolved address; 1, or 0 with why. */
static int coord_addr_ok(const coord_notify_policy_t *p, coord_match_t *m,
                         const struct sockaddr *sa, const char *shown, char *why, size_t cap) {
  char at[INET6_ADDRSTRLEN + 8], bad[8];
  coord_addr_text(sa, at, sizeof at);
  const char *cls = coord_addr_class(sa);
  int own = (m->u->port == p->own_ports[0] || m->u->port == p->own_ports[1]) && m->u->port > 0 &&
            cls && (strstr(cls, "loopback") || strstr(cls, "unspecified") ||
                    strstr(cls, "coordinator's machine") || coord_addr_local(sa));
  if (m->by_prefix) return 1;
  if (own) {
    snprintf(why, cap,
             "notify.url %s: %s port %d is the coordinator's own listener; only a URL prefix"
             " of the coordinator's notify_allow setting naming it allows it",
             shown, at, m->u->port);
    return 0;
  }
  m->sa = sa;
  m->by_cidr = 0;
  coord_allow_each(p->allow, coord_allow_match, m, bad, sizeof bad);
  if (m->by_name || m->by_cidr) return 1;
  if (cls) {
    snprintf(why, cap,
             "notify.url %s: %s is %s; the coordinator's notify_allow setting does not allow it",
             shown, at, cls);
    return 0;
  }
  if (p->public_ok) return 1;
  snprintf(why, cap,
           "notify.url %s: %s is not named by the coordinator's notify_allow setting"
           " (notify_public is off: notifications go only where it names)",
           shown, at);
  return 0;
}

/* The CURLOPT_RESOLVE entry of d ("" for a literal host). */
static void coord_dest_pin(coord_notify_dest_t *d, int literal) {
  d->resolve[0] = '\0';
  if (literal) return;
  size_t used = (size_t)snprintf(d->resolve, sizeof d->resolve, "%s:%d:", d->host, d->port);
  for (int i = 0; i < d->n && used < sizeof d->resolve; i++) {
    char at[INET6_ADDRSTRLEN];
    coord_addr_text((const struct sockaddr *)&d->addr[i], at, sizeof at);
    int v6 = d->addr[i].ss_family == AF_INET6;
    used += (size_t)snprintf(d->resolve + used, sizeof d->resolve - used, "%s%s%s%s",
                             i ? "," : "", v6 ? "[" : "", at, v6 ? "]" : "");
  }
}

int coord_notify_check(const coord_notify_policy_t *p, const char *url, int resolve_ms,
                       coord_notify_dest_t *d, char *why, size_t cap) {
  char shown[1200], bad[8];
  coord_notify_url_redact(url, shown, sizeof shown);
  memset(d, 0, sizeof *d);
  coord_url_t u;
  if (coord_url_parse(url, &u) != 0) {
    snprintf(why, cap, "notify.url %s: not an http or https URL libcurl can read", shown);
    return 0;
  }
  snprintf(d->host, sizeof d->host, "%s", u.host);
  d->port = u.port;
  coord_match_t m = {.u = &u};
  coord_allow_each(p->allow, coord_allow_match, &m, bad, sizeof bad);
  struct addrinfo *res = NULL;
  int rc = coord_resolve(u.host, u.port, resolve_ms, &res);
  if (rc != 0) {
    snprintf(why, cap, "notify.url %s: host %s does not resolve (%s)", shown, u.host,
             rc == EAI_AGAIN ? "no answer in time" : gai_strerror(rc));
    return -1;
  }
  int ok = 1;
  for (struct addrinfo *ai = res; ai && ok; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    ok = coord_addr_ok(p, &m, ai->ai_addr, shown, why, cap);
    int dup = 0;
    for (int i = 0; i < d->n; i++)
      dup |= coord_addr_equal((const struct sockaddr *)&d->addr[i], ai->ai_addr);
    if (ok && !dup && d->n < COORD_NOTIFY_ADDRS) memcpy(&d->addr[d->n++], ai->ai_addr, ai->ai_addrlen);
  }
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM};
  struct addrinfo *lit = NULL;
  int literal = getaddrinfo(u.host, NULL, &hints, &lit) == 0;
  if (lit) freeaddrinfo(lit);
  freeaddrinfo(res);
  if (ok && !d->n) {
    snprintf(why, cap, "notify.url %s: host %s has no IP address", shown, u.host);
    return -1;
  }
  if (ok) coord_dest_pin(d, literal);
  return ok;
}

int coord_notify_dest_has(const coord_notify_dest_t *d, const struct sockaddr *sa) {
  for (int i = 0; i < d->n; i++)
    if (coord_addr_equal((const struct sockaddr *)&d->addr[i], sa)) return 1;
  return 0;
}
