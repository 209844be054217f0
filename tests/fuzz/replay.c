/* The main of a fuzz harness built without libFuzzer (gcc builds): runs
 * LLVMFuzzerTestOneInput once on each file named on the command line (or
 * each file of each directory named), so that the seeds and every crash
 * found earlier (tests/fuzz/regressions/) are replayed by ctest in every
 * build, the sanitizer build included. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = nb;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      bad++;
      continue;
    }
    if (!S_ISDIR(sb.st_mode)) {
      bad += run_file(argv[i]) != 0;
      files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      bad += run_file(p) != 0;
      files++;
    }
    if (d) closedir(d);
  }
  printf("replayed %d input%s\n", files, files == 1 ? "" : "s");
  return bad ? 1 : 0;
}
