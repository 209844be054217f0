/* pxctl's option tables on getopt_long (pxctl_args.h says what for).
 *
 * getopt_long is driven in two modes. A command's own parse ("-" at the
 * head of the optstring) returns every word in order, positional ones as
 * code 1: no reordering of argv, options and positional arguments mixed
 * as pxctl has always taken them, whatever POSIXLY_CORRECT says, and the
 * errors reported in the order of the line. Finding the command ("+")
 * stops at the first word that is no option. Both run with opterr = 0 and
 * a leading ':' so that the messages are pxctl's own, which need the word
 * getopt_long was reading: with "-" or "+" it never skips a word, so that
 * is argv[optind] as it stood before the call. getopt_long accepts an
 * unambiguous prefix of a long name; pxctl never has, so the word is
 * compared with the name found and a prefix is refused as unknown. */
#include <assert.h>
#include <getopt.h>
#include <string.h>

#include "pxctl_args.h"

const pxctl_arg_t *pxctl_args_find(const pxctl_arg_t *args, size_t n, int id) {
  for (size_t i = 0; i < n; i++)
    if (args[i].id == id) return &args[i];
  return NULL;
}

/* getopt_long's view of args: lo[i] is args[i] (so that its longindex
 * indexes args), ended by a zero entry; optstring is head followed by
 * the short options. */
static void pxctl_args_table(const pxctl_arg_t *args, size_t n, const char *head,
                             struct option *lo, char *optstring, size_t cap) {
  assert(n <= PXCTL_ARGS_MAX && cap > strlen(head) + 2 * n);
  size_t k = strlen(head);
  memcpy(optstring, head, k);
  for (size_t i = 0; i < n; i++) {
    assert(args[i].id >= PXCTL_ARG_ID0);
    lo[i].name = args[i].name;
    lo[i].has_arg = args[i].arg ? required_argument : no_argument;
    lo[i].flag = NULL;
    lo[i].val = args[i].id;
    if (args[i].short_name) {
      optstring[k++] = args[i].short_name;
      if (args[i].arg) optstring[k++] = ':';
    }
  }
  optstring[k] = '\0';
  memset(&lo[n], 0, sizeof lo[n]);
}

/* 1 when word is --name or --name=VALUE for this name (not a prefix of it). */
static int pxctl_args_exact(const char *word, const char *name) {
  size_t n = strlen(name);
  return !strncmp(word, "--", 2) && !strncmp(word + 2, name, n) &&
         (word[2 + n] == '\0' || word[2 + n] == '=');
}

/* The option of known that word names (exactly: "--name[=V]" or "-c[=V]"). */
static const pxctl_arg_t *pxctl_args_named(const pxctl_arg_t *known, size_t n, const char *word) {
  for (size_t i = 0; i < n; i++) {
    if (pxctl_args_exact(word, known[i].name)) return &known[i];
    if (known[i].short_name && word[0] == '-' && word[1] == known[i].short_name &&
        (!word[2] || word[2] == '='))
      return &known[i];
  }
  return NULL;
}

/* word is no option of this parse: an option of another command, or none. */
static int pxctl_args_not_here(const pxctl_args_t *p, const char *word, pxctl_args_error_t *e) {
  e->elsewhere = pxctl_args_named(p->known, p->nknown, word);
  if (!e->elsewhere) {
    snprintf(e->msg, sizeof e->msg, "unknown option '%s'", word);
    return PXCTL_ARGS_BAD;
  }
  int n = (int)strcspn(word, "=");
  if (p->command)
    snprintf(e->msg, sizeof e->msg, "option %.*s does not apply to '%s'", n, word, p->command);
  else
    snprintf(e->msg, sizeof e->msg, "option %.*s does not apply here", n, word);
  return PXCTL_ARGS_BAD;
}

/* What getopt_long returned (c, longindex li) for word, as an option of
 * p->args into *a; or PXCTL_ARGS_BAD with *e filled. */
static int pxctl_args_which(const pxctl_args_t *p, const char *word, int c, int li,
                            const pxctl_arg_t **a, pxctl_args_error_t *e) {
  *a = NULL;
  if (c == '?' || c == ':') {
    /* optopt is the option's id when the name was right and its value
     * wrong (given to a flag, or missing); 0 for an unknown long name,
     * the character for an unknown short one. */
    const pxctl_arg_t *o =
        optopt >= PXCTL_ARG_ID0 ? pxctl_args_find(p->args, p->nargs, optopt) : NULL;
    if (o && pxctl_args_exact(word, o->name)) {
      snprintf(e->msg, sizeof e->msg, c == ':' ? "--%s needs a value" : "--%s takes no value",
               o->name);
      e->elsewhere = NULL;
      return PXCTL_ARGS_BAD;
    }
    if (c == ':' && optopt > 0 && optopt < PXCTL_ARG_ID0 && word[0] == '-' && word[1] == optopt &&
        !word[2]) {
      snprintf(e->msg, sizeof e->msg, "-%c needs a value", optopt);
      e->elsewhere = NULL;
      return PXCTL_ARGS_BAD;
    }
    return pxctl_args_not_here(p, word, e);
  }
  if (li >= 0) {
    if (!pxctl_args_exact(word, p->args[li].name)) return pxctl_args_not_here(p, word, e);
    *a = &p->args[li];
    return 0;
  }
  /* a short option: alone in its word (no clusters such as -fh) */
  for (size_t i = 0; i < p->nargs && !*a; i++)
    if (p->args[i].short_name == c) *a = &p->args[i];
  if (*a && !(*a)->arg && word[0] == '-' && word[1] == c && word[2] == '=') {
    snprintf(e->msg, sizeof e->msg, "-%c takes no value", c);
    e->elsewhere = NULL;
    return PXCTL_ARGS_BAD;
  }
  if (!*a || word[0] != '-' || word[1] != c || word[2]) return pxctl_args_not_here(p, word, e);
  return 0;
}

int pxctl_args_parse(const pxctl_args_t *p, int argc, char **argv, pxctl_args_error_t *e) {
  struct option lo[PXCTL_ARGS_MAX + 1];
  char optstring[2 * PXCTL_ARGS_MAX + 4];
  pxctl_args_table(p->args, p->nargs, "-:", lo, optstring, sizeof optstring);
  e->msg[0] = '\0';
  e->elsewhere = NULL;
  opterr = 0;
  optind = 0; /* glibc starts over (and reads optstring's mode again) */
  for (;;) {
    int at = optind ? optind : 1, li = -1;
    int c = getopt_long(argc, argv, optstring, lo, &li);
    if (c == -1) break;
    int rc;
    if (c == 1) {
      rc = p->positional(p->ctx, optarg);
    } else {
      const pxctl_arg_t *a;
      if (pxctl_args_which(p, argv[at], c, li, &a, e)) return PXCTL_ARGS_BAD;
      rc = p->apply(p->ctx, a, a->arg ? optarg : NULL);
    }
    if (rc != -1) return rc;
  }
  for (int i = optind; i < argc; i++) { /* after "--" */
    int rc = p->positional(p->ctx, argv[i]);
    if (rc != -1) return rc;
  }
  return -1;
}

int pxctl_args_command(const pxctl_args_t *p, int argc, char **argv, int *cmd_at) {
  struct option lo[PXCTL_ARGS_MAX + 1];
  char optstring[2 * PXCTL_ARGS_MAX + 4];
  pxctl_args_table(p->known, p->nknown, "+:", lo, optstring, sizeof optstring);
  *cmd_at = 0;
  opterr = 0;
  optind = 0;
  for (;;) {
    int at = optind ? optind : 1, li = -1;
    int c = getopt_long(argc, argv, optstring, lo, &li);
    if (c == -1) break;
    if (c == '?' || c == ':') continue;
    const pxctl_arg_t *a = NULL;
    if (li >= 0) {
      a = &p->known[li];
      if (!pxctl_args_exact(argv[at], a->name)) {
        /* a prefix: an unknown option, which takes no value */
        optind = at + 1;
        continue;
      }
    } else {
      for (size_t i = 0; i < p->nknown && !a; i++)
        if (p->known[i].short_name == c) a = &p->known[i];
      if (!a || argv[at][1] != c || argv[at][2]) continue;
    }
    if (!a->arg) {
      int rc = p->apply(p->ctx, a, NULL);
      if (rc != -1) return rc;
    }
  }
  if (optind < argc) *cmd_at = optind;
  return -1;
}

void pxctl_args_print_help(FILE *f, const pxctl_arg_t *args, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const pxctl_arg_t *a = &args[i];
    if (!a->help) continue;
    char head[96];
    int k = a->short_name ? snprintf(head, sizeof head, "-%c, --%s", a->short_name, a->name)
                          : snprintf(head, sizeof head, "--%s", a->name);
    if (a->arg && k > 0 && (size_t)k < sizeof head)
      snprintf(head + k, sizeof head - (size_t)k, " %s", a->arg);
    if (!a->help[0]) {
      fprintf(f, "  %s\n", head);
      continue;
    }
    const char *line = a->help;
    int len = (int)strcspn(line, "\n");
    fprintf(f, "  %-24s %.*s\n", head, len, line);
    for (line += len; *line; line += len) {
      line++; /* the '\n' */
      len = (int)strcspn(line, "\n");
      fprintf(f, "%27s%.*s\n", "", len, line);
    }
  }
}
