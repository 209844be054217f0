/* Who is calling, and may they: pxcoordd's one place for authentication and
 * authorisation (docs/security.md).
 *
 * Credentials are bearer tokens in the `authorization` metadata entry
 * ("Bearer TOKEN"). A token is either a line of the tokens file
 * (`TOKEN NAME ROLE`, ROLE admin, user or node; for role node NAME is the
 * node's name) or a rank secret that the coordinator made when it placed a
 * job (prefix "pxr_", stored in job_ranks.secret, handed to the node's agent
 * in the assignment and by the agent to its worker). coord_auth_identify
 * turns a header into an identity; it is what any other listener (the HTTP
 * one) calls too. coord_authorize is the gRPC server's hook: it runs before
 * every handler and applies the policy below, then leaves the identity in
 * c->who for the handler (owners of jobs, owner-or-admin checks).
 *
 * Policy with tokens configured (without them every call is let through as
 * an anonymous admin, which the listen check in main.c restricts to
 * loopback addresses):
 *   Jobs service          admin and user tokens only (nodes and ranks are
 *                         refused); cancel/delete: the job's owner or an admin
 *   RegisterNode          a node token whose NAME is the name registered
 *   Heartbeat, WatchAssignments   a node token of the node that node_id is
 *   KvPut, KvGet          the secret of a rank of that job, job live
 *   ReportIteration       the secret of that very rank of that job, job live
 *   ReportRankExit        the node holding that rank, or that rank itself
 * Missing or unknown credentials: UNAUTHENTICATED; a known caller asking for
 * what it may not touch: PERMISSION_DENIED.
 *
 * The tokens file is read at start and on SIGHUP (a bad file keeps the old
 * tokens and logs why) and must be mode 0600 or 0400. Only the SHA-256 of
 * each token is kept, and a lookup compares the presented token's digest
 * with every entry in constant time (CRYPTO_memcmp, no early exit), so
 * neither the order nor the bytes of the tokens leak through timing. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "coord.h"
#include "db/auth.h"
#include "prunex/check.h"

#define COORD_TOKENS_MAX_BYTES (4 << 20)
#define COORD_TOKEN_MIN 16
#define COORD_TOKEN_MAX 256

typedef struct {
  unsigned char digest[SHA256_DIGEST_LENGTH]; /* SHA-256 of the token */
  char name[COORD_NAME_MAX];
  int role;
} coord_token_t;

struct coord_tokens {
  coord_token_t *v;
  size_t n;
};

void coord_tokens_free(coord_tokens_t *t) {
  if (!t) return;
  if (t->v) OPENSSL_cleanse(t->v, t->n * sizeof *t->v);
  px_free(t->v);
  px_free(t);
}

static int coord_token_cmp(const void *a, const void *b) {
  return memcmp(((const coord_token_t *)a)->digest, ((const coord_token_t *)b)->digest,
                SHA256_DIGEST_LENGTH);
}

/* The entry whose digest is d, or NULL. Every entry is compared, each in
 * constant time, whatever matches: the time depends on the number of
 * tokens only. */
static const coord_token_t *coord_tokens_find_digest(const coord_tokens_t *t,
                                                     const unsigned char *d) {
  const coord_token_t *hit = NULL;
  for (size_t i = 0; i < t->n; i++) {
    int same = CRYPTO_memcmp(d, t->v[i].digest, SHA256_DIGEST_LENGTH) == 0;
    hit = same ? &t->v[i] : hit;
  }
  return hit;
}

/* The entry of token (its digest into d), or NULL. */
static const coord_token_t *coord_tokens_find(const coord_tokens_t *t, const char *token,
                                              unsigned char d[SHA256_DIGEST_LENGTH]) {
  SHA256((const unsigned char *)token, strlen(token), d);
  return coord_tokens_find_digest(t, d);
}

int coord_secret_equal(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)a, na, da);
  SHA256((const unsigned char *)b, nb, db);
  int eq = CRYPTO_memcmp(da, db, sizeof da) == 0;
  OPENSSL_cleanse(da, sizeof da);
  OPENSSL_cleanse(db, sizeof db);
  return eq;
}

int coord_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= COORD_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (!isalnum(ch) && ch != '.' && ch != '_' && ch != '-' && ch != '@') return 0;
  }
  return 1;
}

/* The tokens file, whole: a regular file only its owner may read (0600, or
 * 0400 for a file nobody edits in place: a group, even the service's own,
 * is more than one user), at most COORD_TOKENS_MAX_BYTES. *text is
 * NUL-terminated; the caller cleanses and frees it. */
static px_status_t coord_tokens_read(const char *path, char **text, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return px_set_error(PX_ERR_IO, "tokens file %s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  px_status_t st = PX_OK;
  unsigned mode = 0;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    st = px_set_error(PX_ERR_INVALID, "tokens file %s: not a regular file", path);
  else if ((mode = (unsigned)(sb.st_mode & 07777)) != 0600 && mode != 0400)
    st = px_set_error(PX_ERR_INVALID,
                      "tokens file %s: mode %04o, but it must be 0600 or 0400 (readable by "
                      "its owner only); run chmod 600 %s",
                      path, mode, path);
  else if (sb.st_size > COORD_TOKENS_MAX_BYTES)
    st = px_set_error(PX_ERR_INVALID, "tokens file %s: bigger than %d bytes", path,
                      COORD_TOKENS_MAX_BYTES);
  else if (!(*text = px_malloc((size_t)sb.st_size + 1, "coordd.tokens.text")))
    st = PX_ERR_NOMEM;
  if (st != PX_OK) {
    close(fd);
    return st;
  }
  size_t got = 0;
  while (got < (size_t)sb.st_size) {
    ssize_t r = read(fd, *text + got, (size_t)sb.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  (*text)[got] = '\0';
  *len = got;
  return PX_OK;
}

/* One line `TOKEN NAME ROLE` (comments after '#', blank lines skipped) into
 * *e; *used is 0 for a line with nothing on it. The line is cut up. */
static px_status_t coord_tokens_line(const char *path, int lineno, char *line, coord_token_t *e,
                                     int *used) {
  *used = 0;
  char *hash = strchr(line, '#');
  if (hash) *hash = '\0';
  char *f[4] = {0};
  int nf = 0;
  for (char *p = line; *p && nf < 4;) {
    while (*p && isspace((unsigned char)*p)) *p++ = '\0';
    if (!*p) break;
    f[nf++] = p;
    while (*p && !isspace((unsigned char)*p)) p++;
  }
  if (nf == 0) return PX_OK;
  if (nf != 3)
    return px_set_error(PX_ERR_INVALID, "%s:%d: expected `TOKEN NAME ROLE` (3 fields)", path,
                        lineno);
  size_t tl = strlen(f[0]);
  int printable = 1;
  for (size_t i = 0; i < tl; i++)
    printable &= (unsigned char)f[0][i] > ' ' && (unsigned char)f[0][i] < 0x7f;
  if (tl < COORD_TOKEN_MIN || tl > COORD_TOKEN_MAX || !printable)
    return px_set_error(PX_ERR_INVALID,
                        "%s:%d: the token must be %d to %d printable ASCII characters "
                        "(make one with: openssl rand -hex 32)",
                        path, lineno, COORD_TOKEN_MIN, COORD_TOKEN_MAX);
  if (!strncmp(f[0], COORD_RANK_SECRET_PREFIX, strlen(COORD_RANK_SECRET_PREFIX)))
    return px_set_error(PX_ERR_INVALID, "%s:%d: tokens may not start with '%s' (rank secrets do)",
                        path, lineno, COORD_RANK_SECRET_PREFIX);
  if (!coord_name_ok(f[1]))
    return px_set_error(PX_ERR_INVALID, "%s:%d: name '%.64s': use 1 to %d of A-Z a-z 0-9 . _ - @",
                        path, lineno, f[1], COORD_NAME_MAX - 1);
  int role = !strcmp(f[2], "admin") ? COORD_ROLE_ADMIN
             : !strcmp(f[2], "user") ? COORD_ROLE_USER
             : !strcmp(f[2], "node") ? COORD_ROLE_NODE
                                     : 0;
  if (!role)
    return px_set_error(PX_ERR_INVALID, "%s:%d: role '%.32s': expected admin, user or node", path,
                        lineno, f[2]);
  SHA256((const unsigned char *)f[0], tl, e->digest);
  snprintf(e->name, sizeof e->name, "%s", f[1]);
  e->role = role;
  *used = 1;
  return PX_OK;
}

/* The tokens, sorted by digest: none twice, at least one. */
static px_status_t coord_tokens_check(const char *path, coord_tokens_t *t) {
  qsort(t->v, t->n, sizeof *t->v, coord_token_cmp);
  for (size_t i = 1; i < t->n; i++)
    if (!coord_token_cmp(&t->v[i], &t->v[i - 1]))
      return px_set_error(PX_ERR_INVALID, "%s: a token appears twice (for %s and %s)", path,
                          t->v[i - 1].name, t->v[i].name);
  if (t->n == 0) return px_set_error(PX_ERR_INVALID, "%s: no tokens in it", path);
  return PX_OK;
}

px_status_t coord_tokens_load(const char *path, coord_tokens_t **out) {
  *out = NULL;
  char *text = NULL;
  size_t got = 0;
  PX_CHECK(coord_tokens_read(path, &text, &got));
  size_t lines = 1;
  for (size_t i = 0; i < got; i++) lines += text[i] == '\n';
  coord_tokens_t *t = px_calloc(1, sizeof *t, "coordd.tokens");
  px_status_t st = t ? PX_OK : PX_ERR_NOMEM;
  if (t && !(t->v = px_calloc(lines, sizeof *t->v, "coordd.tokens.v"))) st = PX_ERR_NOMEM;
  int lineno = 0;
  char *save = NULL;
  for (char *line = text; st == PX_OK && line; line = save) {
    lineno++;
    char *nl = strchr(line, '\n');
    save = nl ? nl + 1 : NULL;
    if (nl) *nl = '\0';
    int used;
    st = coord_tokens_line(path, lineno, line, &t->v[t->n], &used);
    t->n += (size_t)used;
  }
  OPENSSL_cleanse(text, got); /* only the digests are kept */
  px_free(text);
  if (st == PX_OK) st = coord_tokens_check(path, t);
  if (st != PX_OK) {
    coord_tokens_free(t);
    return st;
  }
  *out = t;
  return PX_OK;
}

size_t coord_tokens_count(const coord_tokens_t *t) { return t ? t->n : 0; }

int coord_tokens_lookup(const coord_tokens_t *t, const char *token, char *name, size_t cap,
                        int *role) {
  if (!t || !token) return 0;
  unsigned char d[SHA256_DIGEST_LENGTH];
  const coord_token_t *e = coord_tokens_find(t, token, d);
  OPENSSL_cleanse(d, sizeof d);
  if (!e) return 0;
  if (name) snprintf(name, cap, "%s", e->name);
  if (role) *role = e->role;
  return 1;
}

px_status_t coord_auth_reload(coord_t *c) {
  if (!c->cfg.tokens[0]) return PX_OK;
  coord_tokens_t *t = NULL;
  PX_CHECK(coord_tokens_load(c->cfg.tokens, &t));
  coord_tokens_free(c->tokens);
  c->tokens = t;
  px_log(PX_LOG_INFO, "tokens: %zu from %s", t->n, c->cfg.tokens);
  return PX_OK;
}

static const char *coord_role_name(int role);

/* 1 when the identity a stream was opened with still holds under the
 * tokens now in force: its token is in the file, for the same name and
 * role. Identities that are not from the file (anonymous, rank secrets)
 * are not the file's to revoke. */
static int coord_auth_still_valid(const coord_t *c, const coord_identity_t *who) {
  if (!who->from_file) return 1;
  if (!c->tokens) return 0;
  const coord_token_t *e = coord_tokens_find_digest(c->tokens, who->digest);
  return e && e->role == who->role && !strcmp(e->name, who->name);
}

size_t coord_auth_revoke_streams(coord_t *c) {
  size_t ended = 0;
  for (int lists = 0; lists < 2; lists++) {
    coord_watch_t *w = lists ? c->node_watches : c->job_watches, *next;
    for (; w; w = next) {
      next = w->next;
      if (coord_auth_still_valid(c, &w->who)) continue;
      px_log(PX_LOG_INFO, "tokens: closing the %s stream of %s %s (%s): its token was revoked",
             w->is_job ? "WatchJob" : "WatchAssignments", coord_role_name(w->who.role),
             w->who.name, w->id);
      coord_watch_end(c, w, PX_RPC_UNAUTHENTICATED,
                      "the token of %s %s was revoked (the tokens file no longer holds it)",
                      coord_role_name(w->who.role), w->who.name);
      ended++;
    }
  }
  return ended;
}

/* getrandom() until n bytes are in. */
static px_status_t coord_random(unsigned char *out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(out + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return px_set_error(PX_ERR_IO, "getrandom: %s", strerror(errno));
    got += (size_t)r;
  }
  return PX_OK;
}

static void coord_hex(const unsigned char *b, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * n] = '\0';
}

void coord_sha256_hex(const char *s, char out[65]) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)s, strlen(s), d);
  coord_hex(d, sizeof d, out);
}

px_status_t coord_secret_key_load(coord_t *c) {
  char path[sizeof c->cfg.db + 8];
  snprintf(path, sizeof path, "%s.key", c->cfg.db);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    /* First start on this database: a new key, 0600 whatever the umask. */
    unsigned char raw[COORD_SECRET_KEY_BYTES];
    char hex[2 * COORD_SECRET_KEY_BYTES + 2];
    PX_CHECK(coord_random(raw, sizeof raw));
    coord_hex(raw, sizeof raw, hex);
    OPENSSL_cleanse(raw, sizeof raw);
    strcat(hex, "\n");
    int w = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ok = w >= 0 && fchmod(w, 0600) == 0 && write(w, hex, strlen(hex)) == (ssize_t)strlen(hex) &&
             fsync(w) == 0;
    int err = errno;
    if (w >= 0) close(w);
    OPENSSL_cleanse(hex, sizeof hex);
    if (!ok) {
      if (w >= 0) unlink(path);
      return px_set_error(PX_ERR_IO, "%s: cannot write the rank-secret key: %s", path,
                          strerror(err));
    }
    px_log(PX_LOG_INFO, "rank-secret key %s created", path);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  }
  if (fd < 0)
    return px_set_error(PX_ERR_IO, "%s: cannot open the rank-secret key: %s", path,
                        strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return px_set_error(PX_ERR_INVALID, "%s: the rank-secret key is not a regular file", path);
  }
  if (sb.st_mode & 077) {
    close(fd);
    return px_set_error(PX_ERR_INVALID,
                        "%s: mode %04o lets other users read the rank-secret key; run chmod "
                        "600 %s",
                        path, (unsigned)(sb.st_mode & 07777), path);
  }
  char hex[2 * COORD_SECRET_KEY_BYTES + 8];
  ssize_t n = read(fd, hex, sizeof hex - 1);
  close(fd);
  if (n < 0) n = 0;
  hex[n] = '\0';
  while (n > 0 && (hex[n - 1] == '\n' || hex[n - 1] == '\r')) hex[--n] = '\0';
  px_status_t st = PX_OK;
  if (n != 2 * COORD_SECRET_KEY_BYTES) st = PX_ERR_INVALID;
  for (int i = 0; st == PX_OK && i < COORD_SECRET_KEY_BYTES; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1 || !isxdigit((unsigned char)hex[2 * i]) ||
        !isxdigit((unsigned char)hex[2 * i + 1]))
      st = PX_ERR_INVALID;
    else c->secret_key[i] = (unsigned char)v;
  }
  OPENSSL_cleanse(hex, sizeof hex);
  if (st != PX_OK)
    return px_set_error(PX_ERR_INVALID,
                        "%s: not a rank-secret key (expected %d hex digits); the jobs running "
                        "now need the original (remove it only when none run)",
                        path, 2 * COORD_SECRET_KEY_BYTES);
  return PX_OK;
}

px_status_t coord_rank_secret_derive(const coord_t *c, const char *salt, char *out, size_t cap) {
  size_t pre = strlen(COORD_RANK_SECRET_PREFIX);
  PX_REQUIRE(cap > pre + 64, "rank secret buffer too small");
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), c->secret_key, COORD_SECRET_KEY_BYTES, (const unsigned char *)salt,
            strlen(salt), mac, &len) ||
      len != 32)
    return px_set_error(PX_ERR_BACKEND, "HMAC-SHA256 failed");
  memcpy(out, COORD_RANK_SECRET_PREFIX, pre);
  coord_hex(mac, 32, out + pre);
  OPENSSL_cleanse(mac, sizeof mac);
  return PX_OK;
}

px_status_t coord_rank_secret_new(const coord_t *c, char salt[33], char hash[65]) {
  unsigned char raw[16];
  PX_CHECK(coord_random(raw, sizeof raw));
  coord_hex(raw, sizeof raw, salt);
  char secret[COORD_RANK_SECRET_LEN + 8];
  PX_CHECK(coord_rank_secret_derive(c, salt, secret, sizeof secret));
  coord_sha256_hex(secret, hash);
  OPENSSL_cleanse(secret, sizeof secret);
  return PX_OK;
}

px_status_t coord_rank_secrets_upgrade(coord_t *c) {
  coord_arena_t a;
  coord_arena_init(&a);
  coord_db_auth_clear_t *rows = NULL;
  size_t n = 0;
  px_status_t rc = coord_db_auth_clear_secrets(c, &a, &rows, &n);
  if (rc == PX_OK && n) {
    /* secure_delete: the plaintext is overwritten in the file, not left in
     * a free block */
    rc = coord_db_auth_secure_delete(c, 1);
    if (rc == PX_OK) rc = px_store_begin(c->db);
    for (size_t i = 0; rc == PX_OK && i < n; i++) {
      char hash[65];
      coord_sha256_hex(rows[i].secret, hash);
      rc = coord_db_auth_secret_hash_set(c, rows[i].job_id, rows[i].rank, hash,
                                         coord_job_active(rows[i].state));
    }
    if (rc == PX_OK) rc = px_store_commit(c->db);
    else px_store_rollback(c->db);
    if (rc == PX_OK) rc = coord_db_auth_secure_delete(c, 0);
    if (rc == PX_OK)
      px_log(PX_LOG_INFO, "rank secrets: %zu stored in clear by an older pxcoordd now hashed", n);
  }
  coord_arena_free(&a);
  return rc;
}

px_rpc_code_t coord_auth_identify(coord_t *c, const char *authorization, coord_identity_t *who,
                                  char *err, size_t cap) {
  memset(who, 0, sizeof *who);
  who->rank = -1;
  if (!c->tokens) {
    who->role = COORD_ROLE_ANON;
    return PX_RPC_OK;
  }
  if (!authorization || !authorization[0]) {
    snprintf(err, cap, "no credentials: this coordinator needs a bearer token (PRUNEX_TOKEN)");
    return PX_RPC_UNAUTHENTICATED;
  }
  if (strncmp(authorization, "Bearer ", 7) != 0) {
    snprintf(err, cap, "the authorization metadata is not `Bearer TOKEN`");
    return PX_RPC_UNAUTHENTICATED;
  }
  const char *token = authorization + 7;
  size_t pre = strlen(COORD_RANK_SECRET_PREFIX);
  if (!strncmp(token, COORD_RANK_SECRET_PREFIX, pre)) {
    /* Only the secrets' SHA-256 is stored: the index is searched by the
     * hash of what was presented, so its timing tells nothing about a
     * secret's bytes. */
    char hash[65];
    coord_sha256_hex(token, hash);
    int found = 0;
    if (coord_db_auth_rank_by_secret(c, hash, &found, who->job_id, sizeof who->job_id, &who->rank,
                                     who->node_id, sizeof who->node_id) != PX_OK) {
      snprintf(err, cap, "%s", px_last_error());
      return PX_RPC_INTERNAL;
    }
    if (found) {
      who->role = COORD_ROLE_RANK;
      snprintf(who->name, sizeof who->name, "rank %d of %s", who->rank, who->job_id);
      return PX_RPC_OK;
    }
    who->rank = -1;
  } else {
    const coord_token_t *e = coord_tokens_find(c->tokens, token, who->digest);
    if (e) {
      who->from_file = 1;
      who->role = e->role;
      snprintf(who->name, sizeof who->name, "%s", e->name);
      return PX_RPC_OK;
    }
  }
  snprintf(err, cap, "unknown token");
  return PX_RPC_UNAUTHENTICATED;
}

int coord_auth_may_manage(const coord_identity_t *who, const char *owner) {
  if (who->role == COORD_ROLE_ANON || who->role == COORD_ROLE_ADMIN) return 1;
  return who->role == COORD_ROLE_USER && !strcmp(who->name, owner);
}

static const char *coord_role_name(int role) {
  switch (role) {
    case COORD_ROLE_ADMIN: return "admin";
    case COORD_ROLE_USER: return "user";
    case COORD_ROLE_NODE: return "node";
    case COORD_ROLE_RANK: return "rank";
    default: return "anonymous";
  }
}

/* 1 when attempt is set and is not job_id's current attempt (an exit of a
 * restarted attempt, which ReportRankExit ignores), else 0; < 0 on error. */
static int coord_auth_old_attempt(coord_t *c, const char *job_id, int attempt) {
  if (attempt <= 0) return 0;
  int found = 0, state, now = 0;
  PX_CHECK(coord_db_auth_job(c, job_id, &found, &state, &now));
  return found && now != attempt;
}

#define COORD_DENY(...)                                                   \
  do {                                                                    \
    px_rpc_srv_finish(call, PX_RPC_PERMISSION_DENIED, __VA_ARGS__);       \
    return 0;                                                             \
  } while (0)

/* A rank's call for job_id (and rank, when >= 0): its own job, still live. */
static int coord_auth_rank_call(coord_t *c, px_rpc_srv_call_t *call, const coord_identity_t *who,
                                const char *job_id, int rank) {
  if (who->role != COORD_ROLE_RANK)
    COORD_DENY("%s: only a rank's secret may call this (the caller is %s %s)",
               px_rpc_srv_method(call), coord_role_name(who->role), who->name);
  if (strcmp(who->job_id, job_id) != 0)
    COORD_DENY("the secret of %s does not open job %s", who->name, job_id);
  if (rank >= 0 && rank != who->rank)
    COORD_DENY("the secret of %s cannot report for rank %d", who->name, rank);
  int state, found, attempt;
  if (coord_db_auth_job(c, job_id, &found, &state, &attempt) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (!coord_job_active(state))
    COORD_DENY("job %s is not running (%s): its secrets are void", job_id,
               state < 0 ? "unknown" : px_rpc_job_state_name(state));
  return 1;
}

/* The caller must be the node that holds this rank of this job. */
static int coord_auth_node_of_rank(coord_t *c, px_rpc_srv_call_t *call,
                                   const coord_identity_t *who, const char *m, const char *job_id,
                                   int rank) {
  if (who->role != COORD_ROLE_NODE)
    COORD_DENY("%s: needs the node holding the rank (the caller is %s %s)", m,
               coord_role_name(who->role), who->name);
  int holds = 0;
  if (coord_db_auth_node_holds(c, who->name, job_id, rank, &holds) != PX_OK) {
    coord_fail_internal(c, call);
    return 0;
  }
  if (!holds)
    COORD_DENY("%s: node %s does not hold rank %d of job %.64s", m, who->name, rank, job_id);
  return 1;
}

/* --read-only: the queries of the Jobs service only; everything that would
 * change the database (or wait for agents that never come) is refused. */
static int coord_read_only_serves(const char *m) {
  static const char *const reads[] = {PX_RPC_GET_JOB,        PX_RPC_LIST_JOBS,
                                      PX_RPC_LIST_NODES,     PX_RPC_GET_ITERATIONS,
                                      PX_RPC_WATCH_JOB,      PX_RPC_GET_RANK_LOG,
                                      PX_RPC_GET_ACCOUNTING};
  for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++)
    if (!strcmp(m, reads[i])) return 1;
  return 0;
}

int coord_authorize(px_rpc_srv_call_t *call, const ProtobufCMessage *req, void *data) {
  coord_t *c = data;
  coord_identity_t *who = &c->who;
  if (c->cfg.read_only && !coord_read_only_serves(px_rpc_srv_method(call))) {
    px_rpc_srv_finish(call, PX_RPC_FAILED_PRECONDITION,
                      "this pxcoordd is read-only (--read-only): it answers queries of %s and "
                      "changes nothing",
                      c->cfg.db);
    return 0;
  }
  char hdr[COORD_TOKEN_MAX + 16] = "";
  if (px_rpc_srv_metadata(call, "authorization", hdr, sizeof hdr) < 0) hdr[0] = '\0';
  char err[256] = "";
  px_rpc_code_t code = coord_auth_identify(c, hdr, who, err, sizeof err);
  if (code != PX_RPC_OK) {
    px_rpc_srv_finish(call, code, "%s: %s", px_rpc_srv_method(call), err);
    return 0;
  }
  if (who->role == COORD_ROLE_ANON) return 1;
  const char *m = px_rpc_srv_method(call);
  if (!strncmp(m, "/prunex.v1.Jobs/", 16)) {
    if (who->role != COORD_ROLE_ADMIN && who->role != COORD_ROLE_USER)
      COORD_DENY("%s: the Jobs service takes user or admin tokens, not the %s credential of %s", m,
                 coord_role_name(who->role), who->name);
    return 1;
  }
  if (!strcmp(m, PX_RPC_REGISTER_NODE)) {
    const Prunex__V1__RegisterNodeRequest *r = (const void *)req;
    if (who->role != COORD_ROLE_NODE)
      COORD_DENY("RegisterNode: needs a node token (the caller is %s %s)",
                 coord_role_name(who->role), who->name);
    if (strcmp(r->name, who->name) != 0)
      COORD_DENY("RegisterNode: the token of node %s cannot register node '%.128s'", who->name,
                 r->name);
    return 1;
  }
  if (!strcmp(m, PX_RPC_HEARTBEAT) || !strcmp(m, PX_RPC_WATCH_ASSIGNMENTS)) {
    const char *node_id = !strcmp(m, PX_RPC_HEARTBEAT)
                              ? ((const Prunex__V1__HeartbeatRequest *)(const void *)req)->node_id
                              : ((const Prunex__V1__WatchAssignmentsRequest *)(const void *)req)
                                    ->node_id;
    if (who->role != COORD_ROLE_NODE)
      COORD_DENY("%s: needs a node token (the caller is %s %s)", m, coord_role_name(who->role),
                 who->name);
    char name[COORD_NAME_MAX];
    if (coord_db_auth_node_name(c, node_id, name, sizeof name) != PX_OK) {
      coord_fail_internal(c, call);
      return 0;
    }
    if (name[0] && strcmp(name, who->name) != 0)
      COORD_DENY("%s: node id %.64s is node %s, not %s", m, node_id, name, who->name);
    return 1;
  }
  if (!strcmp(m, PX_RPC_KV_PUT))
    return coord_auth_rank_call(c, call, who, ((const Prunex__V1__KvPutRequest *)(const void *)req)->job_id, -1);
  if (!strcmp(m, PX_RPC_KV_GET))
    return coord_auth_rank_call(c, call, who, ((const Prunex__V1__KvGetRequest *)(const void *)req)->job_id, -1);
  if (!strcmp(m, PX_RPC_REPORT_ITERATION)) {
    const Prunex__V1__IterationReport *r = (const void *)req;
    return coord_auth_rank_call(c, call, who, r->job_id, r->rank);
  }
  if (!strcmp(m, PX_RPC_REPORT_RANK_EXIT)) {
    const Prunex__V1__RankExit *r = (const void *)req;
    if (who->role == COORD_ROLE_RANK) {
      if (strcmp(who->job_id, r->job_id) != 0 || who->rank != r->rank)
        COORD_DENY("ReportRankExit: the secret of %s cannot report rank %d of %.64s", who->name,
                   r->rank, r->job_id);
      return 1;
    }
    /* A node's report of a rank of a restarted attempt: the rank may now
     * be elsewhere; the handler answers OK and records nothing. */
    int old = who->role == COORD_ROLE_NODE ? coord_auth_old_attempt(c, r->job_id, r->attempt) : 0;
    if (old < 0) {
      coord_fail_internal(c, call);
      return 0;
    }
    if (old) return 1;
    return coord_auth_node_of_rank(c, call, who, "ReportRankExit", r->job_id, r->rank);
  }
  if (!strcmp(m, PX_RPC_APPEND_RANK_LOG)) {
    const Prunex__V1__RankLogChunk *r = (const void *)req;
    return coord_auth_node_of_rank(c, call, who, "AppendRankLog", r->job_id, r->rank);
  }
  COORD_DENY("%s: no policy for this method", m);
}

