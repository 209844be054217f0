/* pxctl's command line on getopt_long (pxctl_args.c): a command's options
 * are one table of pxctl_arg_t, declared once (pxctl.c), from which both
 * the parse (the struct option array and optstring getopt_long takes) and
 * the option lines of `pxctl COMMAND --help` are made. The module knows no
 * command: it turns argv into calls of the caller's apply and positional
 * functions and says what is wrong with a line it cannot parse; it prints
 * nothing but help lines, so that a test can drive it in-process
 * (tests/test_pxctl_args.c). pxctl.c imports it; it imports nothing of
 * pxctl. */
#ifndef PXCTL_ARGS_H
#define PXCTL_ARGS_H

#include <stddef.h>
#include <stdio.h>

/* Option ids start above every character, so that getopt_long's return
 * value (and optopt) tells an option of a table from a short option
 * character or one of its error codes. */
#define PXCTL_ARG_ID0 256
/* The most options one table (and the program as a whole) may have. */
#define PXCTL_ARGS_MAX 64

typedef struct {
  const char *name;  /* the long name without "--" ("coordinator") */
  char short_name;   /* 'f' for -f; 0: none */
  const char *arg;   /* the value's name in the help ("HOST:PORT"); NULL: a flag */
  int id;            /* >= PXCTL_ARG_ID0; what the caller's apply switches on */
  const char *help;  /* its help, lines separated by '\n'; NULL: accepted, not listed */
} pxctl_arg_t;

/* One parse: the options accepted (args), every option the program has
 * anywhere (known: an option of another command "does not apply" here
 * rather than being unknown), and what to do with what is found. The two
 * functions return -1 to go on, else the exit status to stop with (after
 * saying why, or after printing the help: 0). */
typedef struct {
  const pxctl_arg_t *args;
  size_t nargs;
  const pxctl_arg_t *known;
  size_t nknown;
  const char *command;  /* named in the messages ("status"); NULL: none */
  /* An option found, with its value (NULL for a flag; "" for --opt=). */
  int (*apply)(void *ctx, const pxctl_arg_t *a, const char *value);
  /* A positional argument, in order. */
  int (*positional)(void *ctx, const char *arg);
  void *ctx;
} pxctl_args_t;

/* A line the module finds wrong: what it says, and for an option that
 * exists but not here, that option (of known); else NULL. */
typedef struct {
  char msg[320];
  const pxctl_arg_t *elsewhere;
} pxctl_args_error_t;

/* pxctl_args_parse's answer for a line wrong in a way the module sees. */
#define PXCTL_ARGS_BAD (-2)

/* Parses argv[1..argc) (argv[0] is a program name, not read) in order:
 * options as --name VALUE, --name=VALUE (a value may start with '-'), -c
 * (a short option alone in its word), positional arguments before, between
 * and after them, and after "--" every word as a positional one. Long
 * names are matched exactly, never abbreviated (a script's --out must not
 * become --output, nor break when an option is added). Returns -1 when
 * the whole line was taken, the status an apply or positional function
 * stopped with, or PXCTL_ARGS_BAD with *e filled: "unknown option
 * '--frob'", "option --layers does not apply to 'status'", "--limit needs
 * a value", "--json takes no value". Resets getopt_long (optind = 0) on
 * entry, so that parses follow each other; argv is not reordered, and
 * POSIXLY_CORRECT changes nothing. */
int pxctl_args_parse(const pxctl_args_t *p, int argc, char **argv, pxctl_args_error_t *e);

/* Where the command is: the first word of argv[1..) that is neither an
 * option of p->known nor the value of one ("--" ends the options: the word
 * after it) goes to *cmd_at (0: there is none). The flags of p->known met
 * before it go to p->apply (value NULL), which may stop (--version); other
 * words that start with '-' are skipped here (a flag's word at most: an
 * unknown option takes no value), left for the command's own parse.
 * Returns -1, or the status p->apply stopped with. */
int pxctl_args_command(const pxctl_args_t *p, int argc, char **argv, int *cmd_at);

/* Prints the option lines of args as the help texts show them: "  --name
 * ARG" (or "  -c, --name") in 25 columns, then the help's first line, its
 * other lines under it; options without help are left out. */
void pxctl_args_print_help(FILE *f, const pxctl_arg_t *args, size_t n);

/* The option of args with this id; NULL when none. */
const pxctl_arg_t *pxctl_args_find(const pxctl_arg_t *args, size_t n, int id);

#endif
