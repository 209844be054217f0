/* The HTTP listener's address lists: http_trusted_proxies, the
 * addresses and CIDR blocks whose connections count against the proxy
 * budget (http_max_per_proxy) rather than one client's
 * (http_max_per_address). Parsed once by the settings (to refuse a bad
 * value at start, naming it) and again by coord_http_start; matched on the
 * HTTP thread for each accepted connection. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http.h"
#include "prunex/check.h"

/* One entry: "A.B.C.D", "A.B.C.D/N", "IPV6" or "IPV6/N". */
static px_status_t http_net_parse(const char *s, coord_http_net_t *out) {
  char a[64];
  const char *slash = strchr(s, '/');
  size_t n = slash ? (size_t)(slash - s) : strlen(s);
  PX_REQUIRE(n > 0 && n < sizeof a, "'%s' is not an address", s);
  memcpy(a, s, n);
  a[n] = '\0';
  memset(out, 0, sizeof *out);
  if (inet_pton(AF_INET, a, out->addr) == 1) {
    out->family = AF_INET;
    out->bits = 32;
  } else if (inet_pton(AF_INET6, a, out->addr) == 1) {
    out->family = AF_INET6;
    out->bits = 128;
  } else {
    return px_set_error(PX_ERR_INVALID, "'%s' is not an IPv4 or IPv6 address", s);
  }
  if (slash) {
    char *end = NULL;
    long bits = strtol(slash + 1, &end, 10);
    PX_REQUIRE(end != slash + 1 && *end == '\0' && bits >= 0 && bits <= out->bits,
               "'%s': the prefix length must be 0 to %d", s, out->bits);
    out->bits = (int)bits;
  }
  return PX_OK;
}

px_status_t coord_http_nets_parse(const char *list, coord_http_net_t *out, int max, int *n) {
  *n = 0;
  const char *p = list;
  while (*p) {
    size_t len = strcspn(p, ", \t");
    if (len > 0) {
      char item[80];
      PX_REQUIRE(len < sizeof item, "'%.*s' is not an address", (int)(len > 60 ? 60 : len), p);
      memcpy(item, p, len);
      item[len] = '\0';
      PX_REQUIRE(*n < max, "more than %d addresses", max);
      PX_CHECK(http_net_parse(item, &out[*n]));
      (*n)++;
    }
    p += len;
    p += strspn(p, ", \t");
  }
  return PX_OK;
}

void coord_http_addr_key(const struct sockaddr *sa, coord_http_addr_t *k) {
  memset(k, 0, sizeof *k);
  if (sa && sa->sa_family == AF_INET) {
    k->family = AF_INET;
    memcpy(k->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else if (sa && sa->sa_family == AF_INET6) {
    const unsigned char *a6 = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(a6, mapped, sizeof mapped)) { /* ::ffff:A.B.C.D is A.B.C.D */
      k->family = AF_INET;
      memcpy(k->addr, a6 + 12, 4);
    } else {
      k->family = AF_INET6;
      memcpy(k->addr, a6, 16);
    }
  }
}

int coord_http_nets_match(const coord_http_net_t *nets, int n, const coord_http_addr_t *k) {
  for (int i = 0; i < n; i++) {
    if (nets[i].family != k->family) continue;
    int full = nets[i].bits / 8, rest = nets[i].bits % 8;
    if (memcmp(nets[i].addr, k->addr, (size_t)full) != 0) continue;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    if (rest && (nets[i].addr[full] & mask) != (k->addr[full] & mask)) continue;
    return 1;
  }
  return 0;
}

void coord_http_addr_str(const coord_http_addr_t *k, char *out, size_t cap) {
  if (k->family != AF_INET && k->family != AF_INET6) {
    snprintf(out, cap, "?");
    return;
  }
  if (!inet_ntop(k->family, k->addr, out, (socklen_t)cap)) snprintf(out, cap, "?");
}
