/* Image folders (the ImageFolder layout, data.h): the layout check that job
 * submission runs, and the loader that decodes a split once into a cache
 * file and maps it for every later epoch and every rank of the node.
 *
 * Cache file, little-endian as written by this host:
 *   [0, 128)       header (px__cache_hdr_t): magic, version, shape, counts,
 *                  the checksum of the file list and settings, per-channel
 *                  mean/std of the stored pixels
 *   [128, ...)     images [n][channels][size][size] uint8
 *   then           labels [n] uint8
 * The file is built under an exclusive flock of "<cache>.lock" into
 * "<cache>.tmp.<pid>" and renamed into place, so a reader that maps the
 * cache path sees either nothing or a complete file; a file whose checksum
 * or size does not match is rebuilt, never trusted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "image/image_int.h"
#include "prunex/text.h"
#include "px_check.h"

#define PX__CACHE_MAGIC "PXIMGC01"
/* Version 2: written by a decoder that recovers from a corrupt
 * JPEG. A version 1 file that skipped images may have lost good ones after
 * a bad one and is rebuilt; one that skipped none is still valid. The list
 * checksum keeps hashing 1, so that those stay valid. */
#define PX__CACHE_VERSION 2u
#define PX__CACHE_HASH_VERSION 1u
#define PX__CACHE_HDR 128
#define PX__PATH 4096

typedef struct {
  char magic[8];
  uint32_t version, channels, size, num_classes;
  uint64_t n, files, skipped, list_hash;
  float mean[3], std[3];
  uint8_t pad[PX__CACHE_HDR - 8 - 16 - 32 - 24];
} px__cache_hdr_t;
_Static_assert(sizeof(px__cache_hdr_t) == PX__CACHE_HDR, "cache header is 128 bytes");

typedef struct {
  uint32_t name;       /* offset of the name in the arena */
  uint16_t cls;        /* class index */
  uint8_t outside;     /* 1: a link that leads out of the root (never opened) */
  uint8_t pad;
  int64_t size, mtime_ns;
} px__fent_t;

/* The files of one split, in label order then name order. */
typedef struct {
  int32_t nclasses;
  char (*classes)[NAME_MAX + 1];  /* [nclasses] sorted */
  px__fent_t *e;                  /* [n] */
  size_t n, cap;
  char *names;                    /* arena of NUL-terminated "CLASS/NAME" */
  size_t names_len, names_cap;
} px__flist_t;

static void px__flist_free(px__flist_t *l) { PX_FREE_ALL(l->classes, l->e, l->names); }

static int px__is_image_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int px__cmp_name(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

static px_status_t px__join(char *out, const char *a, const char *b) {
  int len = snprintf(out, PX__PATH, "%s/%s", a, b);
  if (len < 0 || len >= PX__PATH)
    return px_set_error(PX_ERR_FORMAT, "image folder: the path %s/%s is longer than %d bytes", a,
                        b, PX__PATH - 1);
  return PX_OK;
}

/* ---- opening beneath the root ----------------------------------------------- */

/* The directory nothing of a folder is read from outside of. */
typedef struct {
  int fd;                  /* O_PATH: the root */
  char real[PATH_MAX];     /* its real path */
  char rel[PX__PATH];      /* the folder relative to the root ("": the root itself) */
  const char *dir;         /* the folder as given, for messages */
} px__root_t;

/* p made absolute against the working directory, into out[PX__PATH]. */
static px_status_t px__absolute(const char *p, char *out) {
  char cwd[PX__PATH];
  if (p[0] == '/') return snprintf(out, PX__PATH, "%s", p) < PX__PATH ? PX_OK : PX_ERR_FORMAT;
  if (!getcwd(cwd, sizeof cwd))
    return px_set_error(PX_ERR_IO, "image folder %s: the working directory: %s", p,
                        strerror(errno));
  return px__join(out, cwd, p);
}

/* Opens dir's root (root, or dir itself when root is NULL or ""). */
static px_status_t px__root_open(px__root_t *r, const char *dir, const char *root) {
  r->fd = -1;
  r->dir = dir;
  if (!root || !root[0]) root = dir;
  char adir[PX__PATH], aroot[PX__PATH];
  if (px__absolute(dir, adir) != PX_OK || px__absolute(root, aroot) != PX_OK)
    return px_set_error(PX_ERR_FORMAT, "image folder %s: the path is too long", dir);
  size_t n = strlen(aroot);
  while (n > 1 && aroot[n - 1] == '/') aroot[--n] = '\0';
  if (strncmp(adir, aroot, n) != 0 || (n > 1 && adir[n] != '\0' && adir[n] != '/'))
    return px_set_error(PX_ERR_INVALID, "image folder %s is not under its data root %s", dir,
                        root);
  const char *rel = adir + n;
  while (*rel == '/') rel++;
  snprintf(r->rel, sizeof r->rel, "%s", rel);
  r->fd = open(aroot, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (r->fd < 0)
    return px_set_error(errno == ENOENT ? PX_ERR_FORMAT : PX_ERR_IO,
                        "image folder: %s: %s (an image folder needs train/ and val/, each with "
                        "one subdirectory per class)", root, strerror(errno));
  if (!realpath(aroot, r->real)) {
    int err = errno;
    close(r->fd);
    r->fd = -1;
    return px_set_error(PX_ERR_IO, "image folder: %s: %s", root, strerror(err));
  }
  return PX_OK;
}

static void px__root_close(px__root_t *r) {
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
}

/* rel (beneath the root's real path, no link in it) opened one component at
 * a time without following a link: a link that appeared since is EXDEV. */
static int px__walk_nofollow(int rootfd, const char *rel, int flags) {
  char buf[PX__PATH];
  snprintf(buf, sizeof buf, "%s", rel);
  int cur = -1;
  char *save = NULL, *c = strtok_r(buf, "/", &save);
  if (!c) return openat(rootfd, ".", flags);
  while (c) {
    char *next = strtok_r(NULL, "/", &save);
    int fd = openat(cur < 0 ? rootfd : cur, c,
                    next ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC : flags | O_NOFOLLOW);
    int err = errno;
    if (cur >= 0) close(cur);
    if (fd < 0) {
      /* a link where the real path had none: swapped in since */
    errno = err == ELOOP || (next && err == ENOTDIR) ? EXDEV : err;
      return -1;
    }
    cur = fd;
    c = next;
  }
  return cur;
}

/* path (relative to the root) opened with flags beneath the root: links are
 * followed only while they stay below it. -1 with errno EXDEV when the path
 * leads out (nothing of the target is opened or reported), else its errno. */
static int px__open_beneath(const px__root_t *r, const char *path, int flags) {
  flags |= O_CLOEXEC;
  struct open_how how = {.flags = (uint64_t)flags,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, r->fd, path, &how, sizeof how);
  if (fd >= 0) return (int)fd;
  int first = errno;
  if (first != EXDEV && first != ELOOP && first != EAGAIN && first != ENOSYS) return -1;
  /* A link given as an absolute path (RESOLVE_BENEATH refuses every one),
   * or a kernel without openat2 (before 5.6): where the path leads now,
   * which must be below the root's real path, opened from the root with no
   * link followed, so that a link swapped in meanwhile fails. */
  char full[2 * PX__PATH], real[PATH_MAX];
  snprintf(full, sizeof full, "%s/%s", r->real, path);
  if (!realpath(full, real)) {
    errno = first == ENOSYS && errno == ENOENT ? ENOENT : EXDEV;
    return -1;
  }
  size_t n = strlen(r->real);
  if (n == 1) n = 0; /* the root is "/" */
  if (strncmp(real, r->real, n) != 0 || (real[n] != '\0' && real[n] != '/')) {
    errno = EXDEV;
    return -1;
  }
  return px__walk_nofollow(r->fd, real + n + (real[n] == '/'), flags);
}

/* sub (a path inside the folder) opened beneath the root. */
static int px__open_sub(const px__root_t *r, const char *sub, int flags) {
  char path[PX__PATH];
  int len = r->rel[0] ? snprintf(path, sizeof path, "%s/%s", r->rel, sub)
                      : snprintf(path, sizeof path, "%s", sub);
  if (len < 0 || len >= (int)sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return px__open_beneath(r, path, flags);
}

/* The error of a directory of the folder that could not be opened. */
static px_status_t px__dir_error(const char *shown, int err, const char *hint) {
  if (err == EXDEV)
    return px_set_error(PX_ERR_FORMAT, "image folder: %s: a link that leads outside the data root",
                        shown);
  return px_set_error(err == ENOENT ? PX_ERR_FORMAT : PX_ERR_IO, "image folder: %s: %s (%s)",
                      shown, strerror(err), hint);
}

/* Opens the directory sub of the folder for reading; NULL with the error set. */
static DIR *px__open_dir(const px__root_t *r, const char *sub, const char *hint, px_status_t *st) {
  char shown[PX__PATH];
  if ((*st = px__join(shown, r->dir, sub)) != PX_OK) return NULL;
  int fd = px__open_sub(r, sub, O_RDONLY | O_DIRECTORY);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    int err = errno;
    if (fd >= 0) close(fd);
    *st = px__dir_error(shown, err, hint);
  }
  return d;
}

/* What the entry name of directory d (the folder's sub) is, its link
 * followed beneath the root: 'd' a directory, 'f' a regular file (*sb its
 * status), 'o' a link that leads out of the root (*sb the link's own
 * status), 0 anything else or gone. */
static int px__entry_kind(const px__root_t *r, DIR *d, const char *sub, const char *name,
                          struct stat *sb) {
  if (fstatat(dirfd(d), name, sb, AT_SYMLINK_NOFOLLOW) != 0) return 0;
  if (S_ISDIR(sb->st_mode)) return 'd';
  if (S_ISREG(sb->st_mode)) return 'f';
  if (!S_ISLNK(sb->st_mode)) return 0;
  char path[PX__PATH];
  if (snprintf(path, sizeof path, "%s/%s", sub, name) >= (int)sizeof path) return 0;
  int fd = px__open_sub(r, path, O_PATH);
  if (fd < 0) return errno == EXDEV ? 'o' : 0;
  struct stat t;
  int kind = fstat(fd, &t) == 0 ? S_ISDIR(t.st_mode) ? 'd' : S_ISREG(t.st_mode) ? 'f' : 0 : 0;
  close(fd);
  if (kind) *sb = t;
  return kind;
}

/* Sorted subdirectory names of the folder's split (those not starting with '.'). */
static px_status_t px__list_classes(const px__root_t *r, const char *split, px__flist_t *l) {
  px_status_t st;
  DIR *d = px__open_dir(r, split, "an image folder needs train/ and val/, each with one "
                        "subdirectory per class", &st);
  if (!d) return st;
  l->classes = px_calloc(PX_FOLDER_MAX_CLASSES, sizeof *l->classes, "data.folder_classes");
  if (!l->classes) st = PX_ERR_NOMEM;
  struct dirent *de;
  char shown[PX__PATH];
  snprintf(shown, sizeof shown, "%s/%s", r->dir, split);
  while (st == PX_OK && (de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    struct stat sb;
    int kind = px__entry_kind(r, d, split, de->d_name, &sb);
    if (kind == 'o')
      st = px_set_error(PX_ERR_FORMAT, "image folder: %s/%s: a link that leads outside the data "
                        "root", shown, de->d_name);
    if (kind != 'd') continue;
    if (l->nclasses == PX_FOLDER_MAX_CLASSES) {
      st = px_set_error(PX_ERR_FORMAT, "image folder: %s has more than %d class directories",
                        shown, PX_FOLDER_MAX_CLASSES);
      break;
    }
    snprintf(l->classes[l->nclasses++], NAME_MAX + 1, "%s", de->d_name);
  }
  closedir(d);
  if (st == PX_OK && l->nclasses == 0)
    st = px_set_error(PX_ERR_FORMAT, "image folder: %s has no class directories (expected %s/CLASS/"
                      "*.jpg|*.png)", shown, shown);
  if (st == PX_OK) qsort(l->classes, (size_t)l->nclasses, sizeof *l->classes, px__cmp_name);
  return st;
}

static px_status_t px__flist_push(px__flist_t *l, uint32_t cls, const char *cname,
                                  const char *fname, const struct stat *sb, int outside) {
  if (l->n == PX_FOLDER_MAX_FILES)
    return px_set_error(PX_ERR_FORMAT, "image folder: more than %d image files in one split",
                        PX_FOLDER_MAX_FILES);
  size_t need = strlen(cname) + 1 + strlen(fname) + 1;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 1024;
    void *p = px_realloc(l->e, cap * sizeof *l->e, "data.folder_files");
    if (!p) return PX_ERR_NOMEM;
    l->e = p;
    l->cap = cap;
  }
  if (l->names_len + need > l->names_cap) {
    size_t cap = l->names_cap ? 2 * l->names_cap : 65536;
    while (cap < l->names_len + need) cap *= 2;
    void *p = px_realloc(l->names, cap, "data.folder_names");
    if (!p) return PX_ERR_NOMEM;
    l->names = p;
    l->names_cap = cap;
  }
  px__fent_t *e = &l->e[l->n++];
  e->cls = (uint16_t)cls;
  e->outside = (uint8_t)(outside != 0);
  e->pad = 0;
  e->name = (uint32_t)l->names_len;
  e->size = (int64_t)sb->st_size;
  e->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
  snprintf(l->names + l->names_len, need, "%s/%s", cname, fname);
  l->names_len += need;
  return PX_OK;
}

static int px__cmp_entry(const void *a, const void *b, void *arena) {
  const px__fent_t *x = a, *y = b;
  if (x->cls != y->cls) return x->cls < y->cls ? -1 : 1;
  return strcmp((const char *)arena + x->name, (const char *)arena + y->name);
}

/* The image files of the folder's split for the classes of l (which must
 * all be there, each with at least one image). Names over NAME_MAX cannot
 * occur (readdir). A link that leads out of the root is listed (its own
 * size and time), marked, and never followed. */
static px_status_t px__list_files(const px__root_t *r, const char *split, px__flist_t *l) {
  char sub[PX__PATH];
  for (int32_t c = 0; c < l->nclasses; c++) {
    PX_CHECK(px__join(sub, split, l->classes[c]));
    px_status_t st;
    DIR *d = px__open_dir(r, sub, "every class needs images in both train/ and val/", &st);
    if (!d) return st;
    size_t before = l->n;
    struct dirent *de;
    while (st == PX_OK && (de = readdir(d)) != NULL) {
      if (de->d_name[0] == '.' || !px__is_image_name(de->d_name)) continue;
      struct stat sb;
      int kind = px__entry_kind(r, d, sub, de->d_name, &sb);
      if (kind == 'f' || kind == 'o')
        st = px__flist_push(l, (uint32_t)c, l->classes[c], de->d_name, &sb, kind == 'o');
    }
    closedir(d);
    PX_CHECK(st);
    if (l->n == before)
      return px_set_error(PX_ERR_FORMAT, "image folder: %s/%s has no .jpg, .jpeg or .png files (an "
                          "empty class)", r->dir, sub);
  }
  qsort_r(l->e, l->n, sizeof *l->e, px__cmp_entry, l->names);
  return PX_OK;
}

/* Both splits' classes must agree: the classes of train/ (into l) are those
 * of val/. */
static px_status_t px__check_classes(const px__root_t *r, px__flist_t *l) {
  PX_CHECK(px__list_classes(r, "train", l));
  px__flist_t v;
  memset(&v, 0, sizeof v);
  px_status_t st = px__list_classes(r, "val", &v);
  for (int32_t i = 0; st == PX_OK && i < v.nclasses; i++) {
    if (!bsearch(v.classes[i], l->classes, (size_t)l->nclasses, sizeof *l->classes, px__cmp_name))
      st = px_set_error(PX_ERR_FORMAT, "image folder: %s/val/%s is a class that %s/train does "
                        "not have", r->dir, v.classes[i], r->dir);
  }
  px__flist_free(&v);
  return st;
}

px_status_t px_folder_check(const char *dir, int32_t *num_classes, int64_t *train_files) {
  PX_REQUIRE(dir && dir[0], "image folder: no directory given (dataset.path)");
  px__flist_t l;
  memset(&l, 0, sizeof l);
  px__root_t r;
  px_status_t st = px__root_open(&r, dir, "/");
  if (st == PX_OK) st = px__check_classes(&r, &l);
  if (st == PX_OK) st = px__list_files(&r, "train", &l);
  int64_t ntrain = (int64_t)l.n;
  l.n = 0;
  l.names_len = 0;
  if (st == PX_OK) st = px__list_files(&r, "val", &l);
  if (st == PX_OK && num_classes) *num_classes = l.nclasses;
  if (st == PX_OK && train_files) *train_files = ntrain;
  px__root_close(&r);
  px__flist_free(&l);
  return st;
}

px_status_t px_folder_class_names(const char *dir, char **out) {
  PX_REQUIRE(dir && dir[0] && out, "image folder: no directory given (dataset.path)");
  *out = NULL;
  px__flist_t l;
  memset(&l, 0, sizeof l);
  px__root_t r;
  px_status_t st = px__root_open(&r, dir, "/");
  if (st == PX_OK) st = px__list_classes(&r, "train", &l);
  px__root_close(&r);
  size_t cap = 1, len = 0;
  for (int32_t i = 0; st == PX_OK && i < l.nclasses; i++) cap += 2 * strlen(l.classes[i]) + 1;
  char *s = st == PX_OK ? px_malloc(cap, "data.folder_class_names") : NULL;
  if (st == PX_OK && !s) st = PX_ERR_NOMEM;
  for (int32_t i = 0; st == PX_OK && i < l.nclasses; i++) {
    if (i) s[len++] = ',';
    for (const char *c = l.classes[i]; *c; c++) {
      if (*c == ',' || *c == '\\') s[len++] = '\\';
      s[len++] = *c;
    }
  }
  if (st == PX_OK) {
    s[len] = '\0';
    *out = s;
  }
  px__flist_free(&l);
  return st;
}

/* ---- the cache ------------------------------------------------------------- */

static uint64_t px__hash_bytes(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull; /* FNV-1a */
  return h;
}

static uint64_t px__list_hash(const px__flist_t *l, const px_folder_config_t *cfg) {
  uint64_t h = 0xcbf29ce484222325ull;
  uint32_t k[3] = {PX__CACHE_HASH_VERSION, (uint32_t)cfg->channels, (uint32_t)cfg->size};
  h = px__hash_bytes(h, k, sizeof k);
  for (size_t i = 0; i < l->n; i++) {
    const char *name = l->names + l->e[i].name;
    h = px__hash_bytes(h, name, strlen(name) + 1);
    h = px__hash_bytes(h, &l->e[i].size, sizeof l->e[i].size);
    h = px__hash_bytes(h, &l->e[i].mtime_ns, sizeof l->e[i].mtime_ns);
    if (l->e[i].outside) h = px__hash_bytes(h, "outside", 7); /* caches of before stay valid */
  }
  return px__mix64(h);
}

/* ---- the cache directory -------------------------------------------------------- */

/* Where the split's cache lives: its directory, opened once, and the file's
 * name in it. Every cache file is made and opened by name in fd with no
 * link followed, so a link swapped in for a component of the directory's
 * path later changes nothing. */
typedef struct {
  int fd;                   /* O_RDONLY | O_DIRECTORY */
  char name[NAME_MAX + 1];  /* the cache file */
  char shown[PX__PATH];     /* directory/name, for messages and the report */
} px__cache_loc_t;

/* 1 when the directory fd is the effective user's and no one else may
 * write to it (mask: the mode bits no one else may hold, 022 or 077): a
 * user who may write there could plant a cache that maps as valid. */
static int px__dir_is_private(int fd, mode_t mask, struct stat *sb) {
  return fstat(fd, sb) == 0 && sb->st_uid == geteuid() && !(sb->st_mode & mask);
}

static px_status_t px__not_private(const char *dir, const struct stat *sb, mode_t mask,
                                   const char *why) {
  if (sb->st_uid != geteuid())
    return px_set_error(PX_ERR_INVALID, "image folder cache directory %s%s is owned by uid %u, "
                        "not by this user (uid %u): another user could plant a cache there "
                        "(remove it, or give a dataset.cache_dir of this user's)", dir, why,
                        (unsigned)sb->st_uid, (unsigned)geteuid());
  return px_set_error(PX_ERR_INVALID, "image folder cache directory %s%s has mode %04o: other "
                      "users could plant a cache there (it must be %s)", dir, why,
                      (unsigned)(sb->st_mode & 07777),
                      mask == 077 ? "mode 0700" : "writable by its owner only: chmod go-w");
}

/* rel opened beneath the directory rootfd: openat2 RESOLVE_BENEATH, or on a
 * kernel without it a walk that follows no link (rel holds no ".."). */
static int px__openat_beneath(int rootfd, const char *rel, int flags) {
  flags |= O_CLOEXEC;
  struct open_how how = {.flags = (uint64_t)flags,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, rootfd, rel[0] ? rel : ".", &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return (int)fd;
  return px__walk_nofollow(rootfd, rel, flags);
}

/* The components of rel (beneath rootfd) opened, each missing one made
 * (0700) in its parent: *fd the last. err: errno of the failure. */
static int px__mkdirs_at(int rootfd, const char *rel, char *prefix, int *err) {
  int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t len = strlen(rel);
  for (size_t i = 1; fd >= 0 && i <= len; i++) {
    if ((rel[i] != '/' && rel[i] != '\0') || rel[i - 1] == '/') continue;
    memcpy(prefix, rel, i);
    prefix[i] = '\0';
    int next = px__openat_beneath(rootfd, prefix, O_RDONLY | O_DIRECTORY);
    if (next < 0 && errno == ENOENT) {
      const char *leaf = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
      if (mkdirat(fd, leaf, 0700) == 0 || errno == EEXIST)
        next = px__openat_beneath(rootfd, prefix, O_RDONLY | O_DIRECTORY);
    }
    *err = errno;
    close(fd);
    fd = next;
  }
  if (fd < 0 && !*err) *err = errno;
  return fd;
}

/* cache_dir (dataset.cache_dir) made and opened beneath croot, which it
 * must be under as text; a link that leads out of croot is refused. */
static px_status_t px__cache_dir_beneath(const char *cdir, const char *croot, int *out) {
  *out = -1;
  for (const char *c = cdir; *c;) {
    const char *e = strchr(c, '/');
    size_t len = e ? (size_t)(e - c) : strlen(c);
    if (len == 2 && c[0] == '.' && c[1] == '.')
      return px_set_error(PX_ERR_INVALID, "image folder cache directory %s (dataset.cache_dir): "
                          "'..' is not allowed in it", cdir);
    c = e ? e + 1 : c + len;
  }
  char adir[PX__PATH], aroot[PX__PATH], prefix[PX__PATH];
  if (px__absolute(cdir, adir) != PX_OK || px__absolute(croot, aroot) != PX_OK)
    return px_set_error(PX_ERR_INVALID, "image folder cache directory %s: the path is too long",
                        cdir);
  size_t n = strlen(aroot);
  while (n > 1 && aroot[n - 1] == '/') aroot[--n] = '\0';
  if (strncmp(adir, aroot, n) != 0 || (n > 1 && adir[n] != '\0' && adir[n] != '/'))
    return px_set_error(PX_ERR_INVALID, "image folder cache directory %s (dataset.cache_dir) is "
                        "not under %s, where this worker may write its cache: nothing written",
                        cdir, croot);
  const char *rel = adir + n;
  while (*rel == '/') rel++;
  int rootfd = open(aroot, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return px_set_error(PX_ERR_IO, "image folder cache directory %s: %s: %s", cdir, croot,
                        strerror(errno));
  int err = 0;
  prefix[0] = '\0';
  *out = px__mkdirs_at(rootfd, rel, prefix, &err);
  close(rootfd);
  if (*out >= 0) return PX_OK;
  if (err == EXDEV || err == ELOOP)
    return px_set_error(PX_ERR_INVALID, "image folder cache directory %s (dataset.cache_dir): "
                        "%s/%s is a symbolic link that leads out of %s: nothing written", cdir,
                        aroot, prefix, croot);
  return px_set_error(err == ENOTDIR ? PX_ERR_INVALID : PX_ERR_IO, "image folder cache directory "
                      "%s: %s/%s: %s", cdir, aroot, prefix, strerror(err));
}

/* dir/.prunex-cache made and opened beneath the folder's root; -1 when it
 * is not to be used (not writable, a link, another user's). */
static int px__cache_dir_default(const px__root_t *r) {
  int dfd = px__open_beneath(r, r->rel[0] ? r->rel : ".", O_RDONLY | O_DIRECTORY);
  if (dfd < 0) return -1;
  int fd = -1;
  if (mkdirat(dfd, ".prunex-cache", 0700) == 0 || errno == EEXIST)
    fd = openat(dfd, ".prunex-cache", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  close(dfd);
  struct stat sb;
  if (fd >= 0 && (faccessat(fd, ".", W_OK, 0) != 0 || !px__dir_is_private(fd, 022, &sb))) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* $XDG_CACHE_HOME/prunex or $HOME/.cache/prunex (the user's own), else
 * $TMPDIR/prunex-cache-UID (TMPDIR: /tmp), which another user could have
 * made first: it must be this user's, mode 0700, and not a link.
 * base[PX__PATH]: its name. */
static px_status_t px__cache_dir_fallback(const px_folder_config_t *cfg, char *base, int *out) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME"), *tmpdir = getenv("TMPDIR");
  int len, tmp = 0;
  if (xdg && xdg[0] == '/') {
    len = snprintf(base, PX__PATH, "%s/prunex", xdg);
  } else if (home && home[0] == '/') {
    len = snprintf(base, PX__PATH, "%s/.cache/prunex", home);
  } else {
    len = snprintf(base, PX__PATH, "%s/prunex-cache-%u",
                   tmpdir && tmpdir[0] == '/' ? tmpdir : "/tmp", (unsigned)geteuid());
    tmp = 1;
  }
  if (len <= 0 || len >= PX__PATH)
    return px_set_error(PX_ERR_IO, "image folder %s: the cache directory name is too long",
                        cfg->dir);
  int made = tmp ? mkdir(base, 0700) == 0 || errno == EEXIST : px_mkdirs(base, 0700) == PX_OK;
  *out = made ? open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (tmp ? O_NOFOLLOW : 0)) : -1;
  if (*out < 0)
    return px_set_error(PX_ERR_IO, "image folder %s is not writable and the cache directory %s "
                        "cannot be made: %s", cfg->dir, base, strerror(errno));
  struct stat sb;
  mode_t mask = tmp ? 077 : 022;
  if (px__dir_is_private(*out, mask, &sb)) return PX_OK;
  close(*out);
  *out = -1;
  return px__not_private(base, &sb, mask, "");
}

/* An explicit cache_dir: beneath cache_root (else root) when one is given,
 * else made where it leads (the caller's own choice). */
static px_status_t px__cache_dir_given(const px_folder_config_t *cfg, int *out) {
  const char *croot = cfg->cache_root && cfg->cache_root[0] ? cfg->cache_root
                      : cfg->root && cfg->root[0]           ? cfg->root
                                                            : NULL;
  if (croot) {
    PX_CHECK(px__cache_dir_beneath(cfg->cache_dir, croot, out));
  } else {
    PX_CHECK(px_mkdirs(cfg->cache_dir, 0700));
    if ((*out = open(cfg->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
      return px_set_error(PX_ERR_IO, "image folder cache directory %s: %s", cfg->cache_dir,
                          strerror(errno));
  }
  struct stat sb;
  if (px__dir_is_private(*out, 022, &sb)) return PX_OK;
  close(*out);
  *out = -1;
  return px__not_private(cfg->cache_dir, &sb, 022, " (dataset.cache_dir)");
}

/* Where the cache of this split lives (see px_folder_config_t): loc->fd
 * open on success, the caller closes it. */
static px_status_t px__cache_open(const px_folder_config_t *cfg, const px__root_t *r,
                                  px__cache_loc_t *loc) {
  const char *split = cfg->split == PX_SPLIT_TRAIN ? "train" : "val";
  char base[PX__PATH];
  int hashed = 1;
  loc->fd = -1;
  if (cfg->cache_dir && cfg->cache_dir[0]) {
    PX_CHECK(px__cache_dir_given(cfg, &loc->fd));
    snprintf(base, sizeof base, "%s", cfg->cache_dir);
  } else if ((loc->fd = px__cache_dir_default(r)) >= 0) {
    snprintf(base, sizeof base, "%s/.prunex-cache", cfg->dir);
    hashed = 0;
  } else {
    PX_CHECK(px__cache_dir_fallback(cfg, base, &loc->fd));
  }
  /* elsewhere than beside the data: the file is named after the folder's
   * absolute path */
  char real[PATH_MAX];
  if (hashed && !realpath(cfg->dir, real)) {
    px_status_t st = px_set_error(PX_ERR_IO, "image folder %s: %s", cfg->dir, strerror(errno));
    close(loc->fd);
    loc->fd = -1;
    return st;
  }
  uint64_t h = hashed ? px__mix64(px__hash_bytes(0xcbf29ce484222325ull, real, strlen(real))) : 0;
  if (hashed)
    snprintf(loc->name, sizeof loc->name, "%016llx-%s-%dx%dx%d.pxc", (unsigned long long)h, split,
             cfg->channels, cfg->size, cfg->size);
  else
    snprintf(loc->name, sizeof loc->name, "%s-%dx%dx%d.pxc", split, cfg->channels, cfg->size,
             cfg->size);
  int len = snprintf(loc->shown, sizeof loc->shown, "%s/%s", base, loc->name);
  if (len > 0 && len < PX__PATH) return PX_OK;
  close(loc->fd);
  loc->fd = -1;
  return px_set_error(PX_ERR_IO, "image folder cache path under %s is too long", base);
}

/* Maps the cache file of loc when it is a complete cache for (cfg, hash): 1
 * and *out set, 0 when it is missing, stale or damaged (to be rebuilt),
 * < 0 on errors that rebuilding cannot cure. */
static int px__cache_map(const px__cache_loc_t *loc, const px_folder_config_t *cfg, uint64_t hash,
                         int32_t nclasses, px_dataset_t **out, px__cache_hdr_t *hdr_out) {
  const char *path = loc->shown;
  /* a link: rebuilt over */
  int fd = openat(loc->fd, loc->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  px__cache_hdr_t hdr;
  struct stat sb;
  size_t img = (size_t)cfg->channels * cfg->size * cfg->size;
  int ok = fstat(fd, &sb) == 0 && pread(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr &&
           !memcmp(hdr.magic, PX__CACHE_MAGIC, 8) &&
           (hdr.version == PX__CACHE_VERSION || (hdr.version == 1 && hdr.skipped == 0)) &&
           hdr.channels == (uint32_t)cfg->channels && hdr.size == (uint32_t)cfg->size &&
           hdr.num_classes == (uint32_t)nclasses && hdr.list_hash == hash && hdr.n >= 1 &&
           hdr.n <= hdr.files && hdr.files <= PX_FOLDER_MAX_FILES &&
           hdr.skipped == hdr.files - hdr.n &&
           (uint64_t)sb.st_size == PX__CACHE_HDR + hdr.n * (img + 1);
  for (int c = 0; ok && c < cfg->channels; c++)
    ok = hdr.mean[c] >= 0.0f && hdr.mean[c] <= 1.0f && hdr.std[c] >= 0.0f && hdr.std[c] <= 1.0f;
  if (!ok) {
    close(fd);
    return 0;
  }
  /* a cache of before 0600 caches: made the owner's alone */
  if ((sb.st_mode & 077) && sb.st_uid == geteuid() && fchmod(fd, sb.st_mode & 0700) != 0)
    px_log(PX_LOG_WARN, "image folder cache %s: chmod: %s", path, strerror(errno));
  void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    return px_set_error(PX_ERR_IO, "image folder cache %s: mmap: %s", path, strerror(errno));
  }
  uint8_t *base = map;
  px_dataset_info_t info;
  memset(&info, 0, sizeof info);
  info.n = (int64_t)hdr.n;
  info.channels = cfg->channels;
  info.height = info.width = cfg->size;
  info.num_classes = nclasses;
  for (int c = 0; c < cfg->channels; c++) {
    info.mean[c] = hdr.mean[c];
    info.std[c] = hdr.std[c] > 1e-3f ? hdr.std[c] : 1e-3f;
  }
  const uint8_t *labels = base + PX__CACHE_HDR + hdr.n * img;
  for (uint64_t i = 0; i < hdr.n; i++) {
    if (labels[i] >= nclasses) {
      munmap(map, (size_t)sb.st_size);
      return 0;
    }
  }
  px_dataset_t *ds = px_calloc(1, sizeof *ds, "data.dataset");
  if (!ds) {
    munmap(map, (size_t)sb.st_size);
    return PX_ERR_NOMEM;
  }
  ds->info = info;
  for (int c = info.channels; c < PX_DATA_MAX_CHANNELS; c++) ds->info.std[c] = 1.0f;
  ds->map = map;
  ds->map_len = (size_t)sb.st_size;
  ds->images = base + PX__CACHE_HDR;
  ds->labels = base + PX__CACHE_HDR + hdr.n * img;
  snprintf(ds->name, sizeof ds->name, "folder/%s", cfg->split == PX_SPLIT_TRAIN ? "train" : "val");
  *out = ds;
  *hdr_out = hdr;
  return 1;
}

/* The skipped files of a build: how many, and the first reasons. */
typedef struct {
  uint64_t n;
  char first[1024];  /* "CLASS/NAME: reason; ..." of the first PX__REASONS */
} px__skips_t;
#define PX__REASONS 3
#define PX__OUTSIDE "a link that leads outside the data root"

/* Decodes file i of l (in the folder's split) into pix, opened beneath the
 * root. PX_ERR_FORMAT with why[256] set: the file is to be skipped; other
 * errors end the build. */
static px_status_t px__decode_entry(const px__root_t *r, const char *split, const px__flist_t *l,
                                    size_t i, const px_folder_config_t *cfg,
                                    px_image_decoder_t *dec, uint8_t *pix, char *why) {
  const char *name = l->names + l->e[i].name;
  char sub[PX__PATH];
  PX_CHECK(px__join(sub, split, name));
  /* a link out of the root: said by its name only, its target never opened */
  if (l->e[i].outside) return snprintf(why, 256, PX__OUTSIDE), PX_ERR_FORMAT;
  int fd = px__open_sub(r, sub, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == EXDEV) snprintf(why, 256, PX__OUTSIDE);
    else snprintf(why, 256, "cannot open: %s", strerror(errno));
    return PX_ERR_FORMAT;
  }
  px_status_t st = px__image_decode_fd(dec, fd, cfg->channels, cfg->size, pix);
  close(fd);
  if (st == PX_ERR_FORMAT || st == PX_ERR_IO) {
    snprintf(why, 256, "%s", px_image_decoder_reason(dec));
    return PX_ERR_FORMAT;
  }
  return st;
}

static void px__skip(px__skips_t *sk, const px__root_t *r, const char *split, const char *name,
                     const char *why) {
  px_log(PX_LOG_WARN, "image folder: skipped %s/%s/%s: %s", r->dir, split, name, why);
  if (sk->n++ < PX__REASONS) {
    size_t len = strlen(sk->first);
    snprintf(sk->first + len, sizeof sk->first - len, "%s%s: %s", len ? "; " : "", name, why);
  }
}

/* Decodes every file of l into a new cache file at loc, an atomic file
 * (prunex/text.h): the header, whose statistics are known only at the end,
 * is written as a placeholder first and over it before the commit. */
static px_status_t px__cache_build(const px__cache_loc_t *loc, const px__root_t *r,
                                   const char *split,
                                   const px_folder_config_t *cfg, const px__flist_t *l,
                                   uint64_t hash, px__skips_t *sk) {
  px_atomic_file_t f;
  PX_CHECK(px_atomic_file_openat(&f, loc->fd, loc->name, 0600, 0));
  size_t img = (size_t)cfg->channels * cfg->size * cfg->size;
  size_t plane = (size_t)cfg->size * cfg->size;
  px_status_t st = PX_OK;
  px_image_decoder_t *dec = NULL;
  uint8_t *pix = px_malloc(img, "data.folder_pixels");
  uint8_t *labels = px_malloc(l->n, "data.folder_labels");
  px__cache_hdr_t hdr;
  memset(&hdr, 0, sizeof hdr);
  double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
  if (!pix || !labels) st = PX_ERR_NOMEM;
  if (st == PX_OK) st = px_image_decoder_create(&dec);
  if (st == PX_OK) st = px_atomic_file_write(&f, &hdr, sizeof hdr);
  uint64_t n = 0;
  char why[256];
  for (size_t i = 0; st == PX_OK && i < l->n; i++) {
    px_status_t ds = px__decode_entry(r, split, l, i, cfg, dec, pix, why);
    if (ds == PX_ERR_FORMAT) {
      px__skip(sk, r, split, l->names + l->e[i].name, why);
      continue;
    }
    if ((st = ds) != PX_OK) break;
    for (int32_t c = 0; c < cfg->channels; c++) {
      uint64_t s = 0, q = 0;
      for (size_t p = 0; p < plane; p++) {
        uint32_t v = pix[(size_t)c * plane + p];
        s += v;
        q += v * v;
      }
      sum[c] += (double)s;
      sq[c] += (double)q;
    }
    labels[n++] = (uint8_t)l->e[i].cls;
    st = px_atomic_file_write(&f, pix, img);
  }
  if (st == PX_OK && n == 0)
    st = px_set_error(PX_ERR_FORMAT, "image folder: none of the %zu images of %s/%s could be "
                      "decoded: %s", l->n, r->dir, split, sk->first);
  if (st == PX_OK) st = px_atomic_file_write(&f, labels, n);
  if (st == PX_OK) {
    memcpy(hdr.magic, PX__CACHE_MAGIC, 8);
    hdr.version = PX__CACHE_VERSION;
    hdr.channels = (uint32_t)cfg->channels;
    hdr.size = (uint32_t)cfg->size;
    hdr.num_classes = (uint32_t)l->nclasses;
    hdr.n = n;
    hdr.files = l->n;
    hdr.skipped = sk->n;
    hdr.list_hash = hash;
    for (int32_t c = 0; c < cfg->channels; c++) {
      double cnt = (double)n * (double)plane * 255.0;
      double m = sum[c] / cnt, var = sq[c] / (cnt * 255.0) - m * m;
      hdr.mean[c] = (float)m;
      hdr.std[c] = (float)sqrt(var > 0 ? var : 0);
    }
    if (pwrite(f.fd, &hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
      st = px_set_error(PX_ERR_IO, "image folder cache %s: write: %s", loc->shown,
                        strerror(errno));
  }
  if (st == PX_OK) st = px_atomic_file_commit(&f);
  else px_atomic_file_abort(&f);
  if (st == PX_OK && sk->n)
    px_log(PX_LOG_WARN, "image folder %s/%s: %llu of %zu images skipped (unreadable or corrupt)",
           r->dir, split, (unsigned long long)sk->n, l->n);
  px_image_decoder_destroy(dec);
  PX_FREE_ALL(pix, labels);
  return st;
}

/* ---- streaming ------------------------------------------------------------- */

/* A split too large to cache decoded: its files, opened beneath the root as
 * the loader asks for them (data/stream.c). */
struct px__fstream {
  px__root_t r;
  px__flist_t l;
  double max_skipped;
  char dir[PX__PATH];  /* "DIR/SPLIT", for messages */
  char split[8];
};

void px__fstream_free(px__fstream_t *fs) {
  if (!fs) return;
  px__root_close(&fs->r);
  px__flist_free(&fs->l);
  px_free(fs);
}

int px__fstream_open(const px__fstream_t *fs, int64_t i, char *why) {
  const px__fent_t *e = &fs->l.e[i];
  char sub[PX__PATH];
  if (e->outside) return snprintf(why, 256, PX__OUTSIDE), -1;
  if (snprintf(sub, sizeof sub, "%s/%s", fs->split, fs->l.names + e->name) >= (int)sizeof sub)
    return snprintf(why, 256, "the path is too long"), -1;
  int fd = px__open_sub(&fs->r, sub, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == EXDEV) snprintf(why, 256, PX__OUTSIDE);
    else snprintf(why, 256, "cannot open: %s", strerror(errno));
  }
  return fd;
}

const char *px__fstream_name(const px__fstream_t *fs, int64_t i) {
  return fs->l.names + fs->l.e[i].name;
}
const char *px__fstream_dir(const px__fstream_t *fs) { return fs->dir; }
double px__fstream_max_skipped(const px__fstream_t *fs) { return fs->max_skipped; }

/* The decoded bytes a split of nfiles may take in the cache: cfg's budget,
 * else PX_FOLDER_CACHE_SHARE of the machine's memory. */
static int px__folder_fits(const px_folder_config_t *cfg, size_t nfiles) {
  double budget = (double)cfg->cache_budget;
  if (cfg->cache_budget <= 0) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    budget = pages > 0 && page > 0 ? PX_FOLDER_CACHE_SHARE * (double)pages * (double)page : 1e18;
  }
  double img = (double)cfg->channels * cfg->size * cfg->size + 1.0;
  return (double)nfiles * img <= budget;
}

/* The streamed data set of the split listed in *l, under *r: both are moved
 * into it (and emptied here) on success. Its normalisation is ImageNet's
 * (torchvision's constants): the pixels are never all seen at once. */
static px_status_t px__stream_make(const px_folder_config_t *cfg, const char *split,
                                   px__root_t *r, px__flist_t *l, px_dataset_t **out) {
  static const float mean3[3] = {0.485f, 0.456f, 0.406f}, std3[3] = {0.229f, 0.224f, 0.225f};
  px__fstream_t *fs = px_calloc(1, sizeof *fs, "data.fstream");
  px_dataset_t *ds = px_calloc(1, sizeof *ds, "data.dataset");
  uint8_t *labels = px_malloc(l->n, "data.labels");
  if (!fs || !ds || !labels) {
    PX_FREE_ALL(fs, ds, labels);
    return PX_ERR_NOMEM;
  }
  for (size_t i = 0; i < l->n; i++) labels[i] = (uint8_t)l->e[i].cls;
  fs->r = *r;
  fs->l = *l;
  r->fd = -1;
  memset(l, 0, sizeof *l);
  fs->max_skipped = cfg->max_skipped > 0 ? cfg->max_skipped : PX_FOLDER_MAX_SKIPPED;
  snprintf(fs->dir, sizeof fs->dir, "%s/%s", cfg->dir, split);
  snprintf(fs->split, sizeof fs->split, "%s", split);
  ds->info.n = (int64_t)fs->l.n;
  ds->info.channels = cfg->channels;
  ds->info.height = ds->info.width = cfg->size;
  ds->info.num_classes = fs->l.nclasses;
  for (int c = 0; c < PX_DATA_MAX_CHANNELS; c++) ds->info.std[c] = 1.0f;
  for (int c = 0; c < cfg->channels; c++) {
    ds->info.mean[c] = cfg->channels == 3 ? mean3[c] : 0.449f; /* grey: the channels' average */
    ds->info.std[c] = cfg->channels == 3 ? std3[c] : 0.226f;
  }
  ds->labels = labels;
  ds->stream = fs;
  snprintf(ds->name, sizeof ds->name, "folder/%s (streamed)", split);
  *out = ds;
  return PX_OK;
}

/* More than max_skipped of the split's files left out fails the load (the
 * cache stays: another job may allow more). first: the reasons when this
 * call built the cache, NULL when it was mapped. */
static px_status_t px__skipped_ok(const px_folder_config_t *cfg, const char *split,
                                  const px__cache_hdr_t *hdr, const char *first,
                                  const char *cache) {
  double m = cfg->max_skipped > 0 ? cfg->max_skipped : PX_FOLDER_MAX_SKIPPED;
  if ((double)hdr->skipped <= m * (double)hdr->files + 1e-9) return PX_OK;
  if (first)
    return px_set_error(PX_ERR_FORMAT, "image folder %s/%s: %llu of %llu images could not be "
                        "decoded (more than dataset.max_skipped = %g%%): %s%s", cfg->dir, split,
                        (unsigned long long)hdr->skipped, (unsigned long long)hdr->files,
                        100.0 * m, first, hdr->skipped > PX__REASONS ? "; ..." : "");
  return px_set_error(PX_ERR_FORMAT, "image folder %s/%s: %llu of %llu images could not be "
                      "decoded (more than dataset.max_skipped = %g%%); the warnings of the rank "
                      "that built the cache %s name them", cfg->dir, split,
                      (unsigned long long)hdr->skipped, (unsigned long long)hdr->files,
                      100.0 * m, cache);
}

/* The split's cache mapped, built first under the lock when it is missing
 * or stale. *built: this call built it (sk then holds the reasons). */
static px_status_t px__cache_get(const px__cache_loc_t *loc, const px__root_t *r,
                                 const char *split,
                                 const px_folder_config_t *cfg, const px__flist_t *l,
                                 px_dataset_t **out, px__cache_hdr_t *hdr, int *built,
                                 px__skips_t *sk) {
  uint64_t hash = px__list_hash(l, cfg);
  int got = px__cache_map(loc, cfg, hash, l->nclasses, out, hdr);
  if (got != 0) return got < 0 ? (px_status_t)got : PX_OK;
  /* Missing or stale: one process of the node builds it, the rest wait. */
  char lock[NAME_MAX + 8];
  snprintf(lock, sizeof lock, "%s.lock", loc->name);
  px_status_t st = PX_OK;
  int lfd = openat(loc->fd, lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lfd < 0 || flock(lfd, LOCK_EX) != 0) {
    st = px_set_error(PX_ERR_IO, "image folder cache lock %s.lock: %s", loc->shown,
                      strerror(errno));
  } else {
    got = px__cache_map(loc, cfg, hash, l->nclasses, out, hdr);
    if (got == 0) {
      st = px__cache_build(loc, r, split, cfg, l, hash, sk);
      *built = 1;
      if (st == PX_OK) got = px__cache_map(loc, cfg, hash, l->nclasses, out, hdr);
      if (st == PX_OK && got == 0)
        st = px_set_error(PX_ERR_IO, "image folder cache %s: unreadable right after writing it",
                          loc->shown);
    }
  }
  if (lfd >= 0) close(lfd); /* releases the flock */
  if (st == PX_OK && got < 0) st = (px_status_t)got;
  return st;
}

px_status_t px_dataset_load_folder(const px_folder_config_t *cfg, px_folder_report_t *report,
                                   px_dataset_t **out) {
  PX_REQUIRE(cfg && out, "px_dataset_load_folder: NULL argument");
  PX_REQUIRE(cfg->dir && cfg->dir[0], "image folder: no directory given (dataset.path)");
  PX_REQUIRE(cfg->split == PX_SPLIT_TRAIN || cfg->split == PX_SPLIT_TEST,
             "image folder: unknown split %d", (int)cfg->split);
  PX_REQUIRE(cfg->channels == 1 || cfg->channels == 3, "image folder: channels %d: must be 1 or 3",
             cfg->channels);
  PX_REQUIRE(cfg->size >= 1 && cfg->size <= PX_IMAGE_MAX_SIZE,
             "image folder: image size %d: must be 1..%d", cfg->size, PX_IMAGE_MAX_SIZE);
  PX_REQUIRE(cfg->max_skipped >= 0 && cfg->max_skipped <= 1,
             "image folder: max_skipped %g: must be 0..1", cfg->max_skipped);
  *out = NULL;
  const char *split = cfg->split == PX_SPLIT_TRAIN ? "train" : "val";
  px__flist_t l;
  memset(&l, 0, sizeof l);
  px__root_t r;
  px__cache_loc_t loc = {.fd = -1};
  px_status_t st = px__root_open(&r, cfg->dir, cfg->root);
  if (st == PX_OK) st = px__check_classes(&r, &l);
  if (st == PX_OK) st = px__list_files(&r, split, &l);
  int stream = st == PX_OK && !px__folder_fits(cfg, l.n);
  if (stream && report) {
    memset(report, 0, sizeof *report);
    report->files = (int64_t)l.n;
    report->num_classes = l.nclasses;
    report->streamed = 1;
  }
  if (stream) st = px__stream_make(cfg, split, &r, &l, out);
  if (st == PX_OK && !stream) st = px__cache_open(cfg, &r, &loc);
  px__cache_hdr_t hdr;
  px__skips_t sk;
  memset(&hdr, 0, sizeof hdr);
  memset(&sk, 0, sizeof sk);
  int built = 0;
  if (st == PX_OK && !stream) st = px__cache_get(&loc, &r, split, cfg, &l, out, &hdr, &built, &sk);
  if (st == PX_OK && !stream) st = px__skipped_ok(cfg, split, &hdr, built ? sk.first : NULL, loc.shown);
  if (st != PX_OK && *out) { /* what px__cache_map made (px_dataset_destroy is engine code) */
    munmap((*out)->map, (*out)->map_len);
    px_free(*out);
    *out = NULL;
  }
  if (st == PX_OK && report && !stream) {
    memset(report, 0, sizeof *report); /* streamed 0, as every field not set below */
    report->files = (int64_t)hdr.files;
    report->skipped = (int64_t)hdr.skipped;
    report->num_classes = l.nclasses;
    report->built = built;
    snprintf(report->cache_path, sizeof report->cache_path, "%s", loc.shown);
  }
  if (loc.fd >= 0) close(loc.fd);
  px__root_close(&r);
  px__flist_free(&l);
  return st;
}
