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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_int.h"
#include "prunex/text.h"
#include "px_check.h"

#define PX__CACHE_MAGIC "PXIMGC01"
#define PX__CACHE_VERSION 1u
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
  uint32_t cls, name;  /* class index; offset of the name in the arena */
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

/* Sorted subdirectory names of dir (those not starting with '.'). */
static px_status_t px__list_classes(const char *dir, px__flist_t *l) {
  DIR *d = opendir(dir);
  if (!d) {
    return px_set_error(errno == ENOENT ? PX_ERR_FORMAT : PX_ERR_IO,
                        "image folder: %s: %s (an image folder needs train/ and val/, each with "
                        "one subdirectory per class)", dir, strerror(errno));
  }
  px_status_t st = PX_OK;
  l->classes = px_calloc(PX_FOLDER_MAX_CLASSES, sizeof *l->classes, "data.folder_classes");
  if (!l->classes) st = PX_ERR_NOMEM;
  struct dirent *de;
  char path[PX__PATH];
  while (st == PX_OK && (de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    struct stat sb;
    if (px__join(path, dir, de->d_name) != PX_OK) {
      st = PX_ERR_FORMAT;
      break;
    }
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
    if (l->nclasses == PX_FOLDER_MAX_CLASSES) {
      st = px_set_error(PX_ERR_FORMAT, "image folder: %s has more than %d class directories", dir,
                        PX_FOLDER_MAX_CLASSES);
      break;
    }
    snprintf(l->classes[l->nclasses++], NAME_MAX + 1, "%s", de->d_name);
  }
  closedir(d);
  if (st == PX_OK && l->nclasses == 0)
    st = px_set_error(PX_ERR_FORMAT, "image folder: %s has no class directories (expected %s/CLASS/"
                      "*.jpg|*.png)", dir, dir);
  if (st == PX_OK) qsort(l->classes, (size_t)l->nclasses, sizeof *l->classes, px__cmp_name);
  return st;
}

static px_status_t px__flist_push(px__flist_t *l, uint32_t cls, const char *cname,
                                  const char *fname, const struct stat *sb) {
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
  e->cls = cls;
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

/* The image files of split_dir for the classes of l (which must all be there,
 * each with at least one image). Names over NAME_MAX cannot occur (readdir). */
static px_status_t px__list_files(const char *split_dir, px__flist_t *l) {
  char cdir[PX__PATH], path[PX__PATH];
  for (int32_t c = 0; c < l->nclasses; c++) {
    PX_CHECK(px__join(cdir, split_dir, l->classes[c]));
    DIR *d = opendir(cdir);
    if (!d)
      return px_set_error(errno == ENOENT ? PX_ERR_FORMAT : PX_ERR_IO,
                          "image folder: %s: %s (every class needs images in both train/ and "
                          "val/)", cdir, strerror(errno));
    size_t before = l->n;
    struct dirent *de;
    px_status_t st = PX_OK;
    while (st == PX_OK && (de = readdir(d)) != NULL) {
      if (de->d_name[0] == '.' || !px__is_image_name(de->d_name)) continue;
      struct stat sb;
      st = px__join(path, cdir, de->d_name);
      if (st != PX_OK) break;
      if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
      st = px__flist_push(l, (uint32_t)c, l->classes[c], de->d_name, &sb);
    }
    closedir(d);
    PX_CHECK(st);
    if (l->n == before)
      return px_set_error(PX_ERR_FORMAT, "image folder: %s has no .jpg, .jpeg or .png files (an "
                          "empty class)", cdir);
  }
  qsort_r(l->e, l->n, sizeof *l->e, px__cmp_entry, l->names);
  return PX_OK;
}

/* Both splits' classes must agree: the classes of train/ (into l) are those
 * of val/. */
static px_status_t px__check_classes(const char *dir, px__flist_t *l) {
  char tdir[PX__PATH], vdir[PX__PATH];
  PX_CHECK(px__join(tdir, dir, "train"));
  PX_CHECK(px__join(vdir, dir, "val"));
  PX_CHECK(px__list_classes(tdir, l));
  px__flist_t v;
  memset(&v, 0, sizeof v);
  px_status_t st = px__list_classes(vdir, &v);
  for (int32_t i = 0; st == PX_OK && i < v.nclasses; i++) {
    if (!bsearch(v.classes[i], l->classes, (size_t)l->nclasses, sizeof *l->classes, px__cmp_name))
      st = px_set_error(PX_ERR_FORMAT, "image folder: %s/%s is a class that %s does not have",
                        vdir, v.classes[i], tdir);
  }
  px__flist_free(&v);
  return st;
}

px_status_t px_folder_check(const char *dir, int32_t *num_classes, int64_t *train_files) {
  PX_REQUIRE(dir && dir[0], "image folder: no directory given (dataset.path)");
  px__flist_t l;
  memset(&l, 0, sizeof l);
  char sdir[PX__PATH];
  px_status_t st = px__check_classes(dir, &l);
  if (st == PX_OK) st = px__join(sdir, dir, "train");
  if (st == PX_OK) st = px__list_files(sdir, &l);
  int64_t ntrain = (int64_t)l.n;
  l.n = 0;
  l.names_len = 0;
  if (st == PX_OK) st = px__join(sdir, dir, "val");
  if (st == PX_OK) st = px__list_files(sdir, &l);
  if (st == PX_OK && num_classes) *num_classes = l.nclasses;
  if (st == PX_OK && train_files) *train_files = ntrain;
  px__flist_free(&l);
  return st;
}

px_status_t px_folder_class_names(const char *dir, char **out) {
  PX_REQUIRE(dir && dir[0] && out, "image folder: no directory given (dataset.path)");
  *out = NULL;
  px__flist_t l;
  memset(&l, 0, sizeof l);
  char tdir[PX__PATH];
  px_status_t st = px__join(tdir, dir, "train");
  if (st == PX_OK) st = px__list_classes(tdir, &l);
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
  uint32_t k[3] = {PX__CACHE_VERSION, (uint32_t)cfg->channels, (uint32_t)cfg->size};
  h = px__hash_bytes(h, k, sizeof k);
  for (size_t i = 0; i < l->n; i++) {
    const char *name = l->names + l->e[i].name;
    h = px__hash_bytes(h, name, strlen(name) + 1);
    h = px__hash_bytes(h, &l->e[i].size, sizeof l->e[i].size);
    h = px__hash_bytes(h, &l->e[i].mtime_ns, sizeof l->e[i].mtime_ns);
  }
  return px__mix64(h);
}

static int px__mkdir(const char *p) { return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1; }

/* Where the cache of this split lives (see px_folder_config_t). */
static px_status_t px__cache_path(const px_folder_config_t *cfg, char *out) {
  const char *split = cfg->split == PX_SPLIT_TRAIN ? "train" : "val";
  char base[PX__PATH];
  int len;
  if (!cfg->cache_dir || !cfg->cache_dir[0]) {
    len = snprintf(base, sizeof base, "%s/.prunex-cache", cfg->dir);
    if (len > 0 && len < PX__PATH && px__mkdir(base) == 0 && access(base, W_OK) == 0) {
      len = snprintf(out, PX__PATH, "%s/%s-%dx%dx%d.pxc", base, split, cfg->channels, cfg->size,
                     cfg->size);
      if (len > 0 && len < PX__PATH) return PX_OK;
    }
  }
  /* Elsewhere: name the file after the folder's absolute path. */
  char real[PATH_MAX];
  if (!realpath(cfg->dir, real))
    return px_set_error(PX_ERR_IO, "image folder %s: %s", cfg->dir, strerror(errno));
  if (cfg->cache_dir && cfg->cache_dir[0]) {
    len = snprintf(base, sizeof base, "%s", cfg->cache_dir);
    if (len <= 0 || len >= PX__PATH || px__mkdir(base) != 0)
      return px_set_error(PX_ERR_IO, "image folder cache directory %s: %s", cfg->cache_dir,
                          len >= PX__PATH ? "name too long" : strerror(errno));
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') {
      len = snprintf(base, sizeof base, "%s", xdg);
    } else if (home && home[0] == '/') {
      len = snprintf(base, sizeof base, "%s/.cache", home);
    } else {
      len = snprintf(base, sizeof base, "/tmp/prunex-cache-%u", (unsigned)getuid());
    }
    if (len <= 0 || len + 8 >= PX__PATH || px__mkdir(base) != 0)
      return px_set_error(PX_ERR_IO, "image folder %s is not writable and the cache directory %s "
                          "cannot be made: %s", cfg->dir, base, strerror(errno));
    if (strncmp(base, "/tmp/prunex-cache-", 18) != 0) {
      strcat(base, "/prunex");
      if (px__mkdir(base) != 0)
        return px_set_error(PX_ERR_IO, "image folder cache directory %s: %s", base,
                            strerror(errno));
    }
  }
  uint64_t h = px__mix64(px__hash_bytes(0xcbf29ce484222325ull, real, strlen(real)));
  len = snprintf(out, PX__PATH, "%s/%016llx-%s-%dx%dx%d.pxc", base, (unsigned long long)h, split,
                 cfg->channels, cfg->size, cfg->size);
  if (len <= 0 || len >= PX__PATH)
    return px_set_error(PX_ERR_IO, "image folder cache path under %s is too long", base);
  return PX_OK;
}

/* Maps path when it is a complete cache for (cfg, hash): 1 and *out set,
 * 0 when it is missing, stale or damaged (to be rebuilt), < 0 on errors
 * that rebuilding cannot cure. */
static int px__cache_map(const char *path, const px_folder_config_t *cfg, uint64_t hash,
                         int32_t nclasses, px_dataset_t **out, px__cache_hdr_t *hdr_out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  px__cache_hdr_t hdr;
  struct stat sb;
  size_t img = (size_t)cfg->channels * cfg->size * cfg->size;
  int ok = fstat(fd, &sb) == 0 && pread(fd, &hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr &&
           !memcmp(hdr.magic, PX__CACHE_MAGIC, 8) && hdr.version == PX__CACHE_VERSION &&
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

/* Decodes every file of l into a new cache file at path, an atomic file
 * (prunex/text.h): the header, whose statistics are known only at the end,
 * is written as a placeholder first and over it before the commit. */
static px_status_t px__cache_build(const char *path, const char *split_dir,
                                   const px_folder_config_t *cfg, const px__flist_t *l,
                                   uint64_t hash) {
  char file[PX__PATH];
  px_atomic_file_t f;
  PX_CHECK(px_atomic_file_open(&f, path, 0644, 0));
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
  uint64_t n = 0, skipped = 0;
  for (size_t i = 0; st == PX_OK && i < l->n; i++) {
    st = px__join(file, split_dir, l->names + l->e[i].name);
    if (st != PX_OK) break;
    px_status_t ds = px_image_decode_file(dec, file, cfg->channels, cfg->size, pix);
    if (ds == PX_ERR_NOMEM) {
      st = ds;
      break;
    }
    if (ds != PX_OK) {
      skipped++;
      px_log(PX_LOG_WARN, "image folder: skipped %s: %s", file, px_image_decoder_reason(dec));
      continue;
    }
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
    st = px_set_error(PX_ERR_FORMAT, "image folder: none of the %zu images of %s could be decoded "
                      "(see the warnings above)", l->n, split_dir);
  if (st == PX_OK) st = px_atomic_file_write(&f, labels, n);
  if (st == PX_OK) {
    memcpy(hdr.magic, PX__CACHE_MAGIC, 8);
    hdr.version = PX__CACHE_VERSION;
    hdr.channels = (uint32_t)cfg->channels;
    hdr.size = (uint32_t)cfg->size;
    hdr.num_classes = (uint32_t)l->nclasses;
    hdr.n = n;
    hdr.files = l->n;
    hdr.skipped = skipped;
    hdr.list_hash = hash;
    for (int32_t c = 0; c < cfg->channels; c++) {
      double cnt = (double)n * (double)plane * 255.0;
      double m = sum[c] / cnt, var = sq[c] / (cnt * 255.0) - m * m;
      hdr.mean[c] = (float)m;
      hdr.std[c] = (float)sqrt(var > 0 ? var : 0);
    }
    if (pwrite(f.fd, &hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
      st = px_set_error(PX_ERR_IO, "image folder cache %s: write: %s", f.tmp, strerror(errno));
  }
  if (st == PX_OK) st = px_atomic_file_commit(&f);
  else px_atomic_file_abort(&f);
  if (st == PX_OK && skipped)
    px_log(PX_LOG_WARN, "image folder %s: %llu of %zu images skipped (unreadable or corrupt)",
           split_dir, (unsigned long long)skipped, l->n);
  px_image_decoder_destroy(dec);
  PX_FREE_ALL(pix, labels);
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
  px__flist_t l;
  memset(&l, 0, sizeof l);
  char split_dir[PX__PATH], path[PX__PATH], lock[PX__PATH + 8];
  px_status_t st = px__check_classes(cfg->dir, &l);
  if (st == PX_OK)
    st = px__join(split_dir, cfg->dir, cfg->split == PX_SPLIT_TRAIN ? "train" : "val");
  if (st == PX_OK) st = px__list_files(split_dir, &l);
  if (st == PX_OK) st = px__cache_path(cfg, path);
  if (st != PX_OK) {
    px__flist_free(&l);
    return st;
  }
  uint64_t hash = px__list_hash(&l, cfg);
  px__cache_hdr_t hdr;
  int built = 0;
  int got = px__cache_map(path, cfg, hash, l.nclasses, out, &hdr);
  if (got == 0) {
    /* Missing or stale: one process of the node builds it, the rest wait. */
    snprintf(lock, sizeof lock, "%s.lock", path);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0 || flock(lfd, LOCK_EX) != 0) {
      st = px_set_error(PX_ERR_IO, "image folder cache lock %s: %s", lock, strerror(errno));
    } else {
      got = px__cache_map(path, cfg, hash, l.nclasses, out, &hdr);
      if (got == 0) {
        st = px__cache_build(path, split_dir, cfg, &l, hash);
        built = 1;
        if (st == PX_OK) got = px__cache_map(path, cfg, hash, l.nclasses, out, &hdr);
        if (st == PX_OK && got == 0)
          st = px_set_error(PX_ERR_IO, "image folder cache %s: unreadable right after writing it",
                            path);
      }
    }
    if (lfd >= 0) close(lfd); /* releases the flock */
  }
  if (st == PX_OK && got < 0) st = (px_status_t)got;
  if (st == PX_OK && report) {
    report->files = (int64_t)hdr.files;
    report->skipped = (int64_t)hdr.skipped;
    report->num_classes = l.nclasses;
    report->built = built;
    snprintf(report->cache_path, sizeof report->cache_path, "%s", path);
  }
  px__flist_free(&l);
  return st;
}
