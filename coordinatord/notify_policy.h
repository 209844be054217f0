/* Where job notifications may go (docs/security.md,
 * "Notifications"): the operator's notify_allow list and notify_public
 * switch, checked against a spec's notify.url at SubmitJob and again, after
 * a fresh DNS resolution, by the sender right before each POST, which then
 * connects only to the addresses checked. And how a notify URL is shown to
 * anyone but its job's owner and the admins (userinfo and query hidden).
 *
 * Everything here may run on any thread: it reads only its arguments (and
 * the machine's interface addresses). */
#ifndef PX_COORD_NOTIFY_POLICY_H
#define PX_COORD_NOTIFY_POLICY_H

#include <stddef.h>
#include <sys/socket.h>
#include <time.h>

#include "coord.h"

#define COORD_NOTIFY_ADDRS 16 /* addresses of one destination checked and pinned */

/* The policy as the sender needs it: a copy of the settings and the
 * coordinator's own listening ports (0: none). */
typedef struct {
  char allow[COORD_NOTIFY_ALLOW_LEN]; /* notify_allow: entries separated by blanks or commas */
  int public_ok;                      /* notify_public */
  int own_ports[2];                   /* the gRPC and HTTP listeners' ports */
} coord_notify_policy_t;

/* A checked destination: the URL's host and port as libcurl reads them, the
 * addresses it resolved to (all allowed) and the CURLOPT_RESOLVE entry that
 * pins them ("" for an IP literal, which libcurl does not look up). */
typedef struct {
  char host[256];
  int port;
  int n;
  struct sockaddr_storage addr[COORD_NOTIFY_ADDRS];
  char resolve[COORD_NOTIFY_ADDRS * 48 + 300];
} coord_notify_dest_t;

/* 1 when text is a valid notify_allow value, else 0 with the bad entry
 * named in err. */
int coord_notify_allow_ok(const char *text, char *err, size_t cap);

/* The policy in force: c's settings and its listeners' ports. Loop thread. */
void coord_notify_policy_get(coord_t *c, coord_notify_policy_t *p);

/* Hands the senders the policy in force (after SIGHUP re-read the
 * settings; notify.c). Loop thread. */
void coord_notify_policy_update(coord_t *c);

/* Checks url against p: resolves its host (waiting at most resolve_ms; 0:
 * as long as getaddrinfo takes) and checks every address. Returns 1 (d
 * filled), 0 when the policy refuses it, -1 when it cannot be told now (a
 * temporary DNS failure, the wait ran out); why says why for 0 and -1,
 * naming the URL with its secrets hidden. Blocks for the resolution. */
int coord_notify_check(const coord_notify_policy_t *p, const char *url, int resolve_ms,
                       coord_notify_dest_t *d, char *why, size_t cap);

/* 1 when sa is one of d's checked addresses (what libcurl is about to
 * connect to: a DNS answer that changed since is not followed). */
int coord_notify_dest_has(const coord_notify_dest_t *d, const struct sockaddr *sa);

/* url with its userinfo and its query each replaced by three asterisks
 * (user:pw@ and ?token=x become ***@ and ?***), into out (truncated to
 * cap). Cannot fail. */
void coord_notify_url_redact(const char *url, char *out, size_t cap);

/* The URL's destination, "host:port" as libcurl reads them, into key: 0,
 * or -1 when libcurl does not read url as an http or https URL. */
int coord_notify_url_dest(const char *url, char *key, size_t cap);

/* The CLOCK_REALTIME time ms milliseconds from now (a deadline for
 * pthread_cond_timedwait). */
struct timespec coord_notify_deadline(int64_t ms);

/* The authority of url (after "scheme://", or url itself) and its '@'
 * (NULL without userinfo): *alen is the authority's length. */
const char *coord_notify_url_auth(const char *url, size_t *alen, const char **at);

/* 1 when coord_notify_url_redact changes url (it has userinfo or a query). */
int coord_notify_url_secret(const char *url);

/* ---- what others see of a job (redact.c) -------------------------------- */

/* The job as who may see it: unchanged for its owner, an admin (and every
 * caller of a coordinator without tokens); for anyone else spec.notify.url
 * and spec_yaml with the URL's userinfo and query hidden (spec_yaml is
 * edited where it holds the URL as written, else replaced by the canonical
 * YAML of the redacted spec). The new strings are a's. PX_ERR_NOMEM. */
px_status_t coord_job_redact(coord_arena_t *a, const coord_identity_t *who, Prunex__V1__Job *j);

/* 1 when who sees owner's jobs whole: the owner, an admin, anyone on a
 * coordinator without tokens (coord_auth_may_manage's rule). */
int coord_job_visible(const coord_identity_t *who, const char *owner);

/* spec.notify.url redacted in place (a spec sent to nodes). PX_ERR_NOMEM. */
px_status_t coord_spec_redact(coord_arena_t *a, Prunex__V1__JobSpec *spec);

#endif
