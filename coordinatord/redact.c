/* What others see of a job: a notify URL may carry credentials
 * (https://user:password@host/, ?token=...), and every user may read every
 * job, so anyone but the job's owner and the admins gets the URL with its
 * userinfo and query hidden, in the spec and in the spec's text. Used by
 * GetJob, ListJobs, WatchJob (jobs.c, watch.c) and the assignments sent to
 * nodes (assign.c). */
#include <stdio.h>
#include <string.h>

#include "notify_policy.h"
#include "prunex/check.h"
#include "prunex/jobspec.h"

/* The secret parts of url (userinfo, query) that a text must no longer
 * hold once redacted; "" where there is none. */
static void coord_url_secrets(const char *url, char *user, char *query, size_t cap) {
  size_t alen;
  const char *at;
  const char *auth = coord_notify_url_auth(url, &alen, &at);
  snprintf(user, cap, "%.*s", at ? (int)(at - auth) : 0, auth);
  const char *q = strchr(at ? at : auth, '?');
  snprintf(query, cap, "%s", q ? q + 1 : "");
}

/* text with every occurrence of from replaced by to, in a; *count how many
 * (NULL when memory runs out). */
static char *coord_replace_all(coord_arena_t *a, const char *text, const char *from,
                               const char *to, size_t *count) {
  size_t n = 0, fl = strlen(from), tl = strlen(to);
  for (const char *p = strstr(text, from); p; p = strstr(p + fl, from)) n++;
  *count = n;
  char *out = coord_alloc(a, strlen(text) + n * (tl > fl ? tl - fl : 0) + 1);
  if (!out) return NULL;
  char *w = out;
  for (const char *p = text;;) {
    const char *hit = strstr(p, from);
    size_t keep = hit ? (size_t)(hit - p) : strlen(p);
    memcpy(w, p, keep);
    w += keep;
    if (!hit) break;
    memcpy(w, to, tl);
    w += tl;
    p = hit + fl;
  }
  *w = '\0';
  return out;
}

px_status_t coord_spec_redact(coord_arena_t *a, Prunex__V1__JobSpec *spec) {
  if (!spec || !spec->notify || !spec->notify->url || !coord_notify_url_secret(spec->notify->url))
    return PX_OK;
  char shown[1200];
  coord_notify_url_redact(spec->notify->url, shown, sizeof shown);
  spec->notify->url = coord_strdup(a, shown);
  return spec->notify->url ? PX_OK : PX_ERR_NOMEM;
}

/* spec_yaml for others: the URL replaced where it is written as is; when it
 * is not (quoted with escapes, folded) or a secret part is still there, the
 * canonical YAML of the redacted spec. */
static px_status_t coord_yaml_redact(coord_arena_t *a, Prunex__V1__Job *j, const char *url,
                                     const char *shown) {
  if (!j->spec_yaml || !j->spec_yaml[0]) return PX_OK;
  char user[1100], query[1100];
  coord_url_secrets(url, user, query, sizeof user);
  size_t n = 0;
  char *text = coord_replace_all(a, j->spec_yaml, url, shown, &n);
  if (!text) return PX_ERR_NOMEM;
  if (n > 0 && (!user[0] || !strstr(text, user)) && (!query[0] || !strstr(text, query))) {
    j->spec_yaml = text;
    return PX_OK;
  }
  char *canonical = NULL;
  PX_CHECK(px_jobspec_to_yaml(j->spec, &canonical));
  j->spec_yaml = coord_strdup(a, canonical);
  px_free(canonical);
  return j->spec_yaml ? PX_OK : PX_ERR_NOMEM;
}

/* coord_auth_may_manage's rule, written again: auth.c calls watch.c, which
 * calls here (no circles between the files, scripts/file_circles.py). */
int coord_job_visible(const coord_identity_t *who, const char *owner) {
  if (who->role == COORD_ROLE_ANON || who->role == COORD_ROLE_ADMIN) return 1;
  return who->role == COORD_ROLE_USER && owner && !strcmp(who->name, owner);
}

px_status_t coord_job_redact(coord_arena_t *a, const coord_identity_t *who, Prunex__V1__Job *j) {
  if (!j || coord_job_visible(who, j->owner)) return PX_OK;
  Prunex__V1__JobSpec *spec = j->spec;
  if (!spec || !spec->notify || !spec->notify->url || !coord_notify_url_secret(spec->notify->url))
    return PX_OK;
  const char *url = spec->notify->url;
  PX_CHECK(coord_spec_redact(a, spec));
  return coord_yaml_redact(a, j, url, spec->notify->url);
}
