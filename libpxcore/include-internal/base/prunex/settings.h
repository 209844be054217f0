/* One table per program for its settings, after redis's standardConfig
 * (config.c): each setting is declared once, with its name, type, bounds,
 * default, help text, whether SIGHUP reloads it and the struct field it
 * sets (offsetof), and that table drives the config file (px_conf.h), the
 * command-line flags, the environment variables that stand for a setting,
 * --help and the reload. pxcoordd (coordinatord/settings.c), pxagent and
 * pxworker (agent/) use it; public for the daemons of this repository, as
 * prunex/conf.h is.
 *
 * A setting NAME is the config-file key `NAME` (dashes or underscores) and
 * the flag `--NAME` with dashes (`heartbeat_timeout_ms`,
 * `--heartbeat-timeout-ms`). Precedence, lowest first: the table's default,
 * the config file, the environment variable, the flag. Every error names
 * where the value came from (FILE:LINE, --flag or $VARIABLE), the key, the
 * value and what was expected (the bounds, or the allowed values). */
#ifndef PX_SETTINGS_H
#define PX_SETTINGS_H

#include <stddef.h>
#include <stdio.h>

#include "prunex/px.h"

typedef enum {
  PX_SETTING_BOOL,   /* int: on/off, true/false, yes/no, 1/0; a flag without value: on */
  PX_SETTING_INT,    /* int or int64_t (by size), an integer in [min, max] */
  PX_SETTING_NUMBER, /* double in [min, max] */
  PX_SETTING_STRING, /* char[size]: not empty, shorter than size */
  PX_SETTING_STRREF, /* const char *: argv's string, or a copy the settings keep */
  PX_SETTING_ENUM,   /* int: the index of the value in values[] (no default: -1, unset) */
  PX_SETTING_CUSTOM, /* the entry's set function does it all */
} px_setting_type_t;

enum {
  PX_SETTING_RELOAD = 1u << 0,    /* SIGHUP applies a changed value (px_settings_reload) */
  PX_SETTING_FLAG_ONLY = 1u << 1, /* no config-file key (--read-only, --config) */
  PX_SETTING_FILE_ONLY = 1u << 2, /* no flag (share.NAME) */
  PX_SETTING_PREFIX = 1u << 3,    /* name ends with '.': the key is NAME + a suffix */
  PX_SETTING_REQUIRED = 1u << 4,  /* parsing fails without it ("--job is required") */
  PX_SETTING_CONFIG = 1u << 5,    /* this flag names the config file (STRREF or STRING) */
};

/* A STRING or STRREF value's own check, after the type's: 0 when value is
 * good, else the reason written into why (what is expected). */
typedef int (*px_setting_check_fn)(const char *value, char *why, size_t cap);

/* A CUSTOM setting: stores value (key is the whole key, with the suffix of a
 * PREFIX setting) into obj, 0; else -1 with the reason written into why. */
typedef int (*px_setting_set_fn)(void *obj, const char *key, const char *value, char *why,
                                 size_t cap);

typedef struct {
  const char *name;           /* key, underscores; a PREFIX setting's ends with '.' */
  px_setting_type_t type;
  unsigned flags;             /* PX_SETTING_* */
  size_t offset, size;        /* the field in the program's struct: offsetof, sizeof */
  double min, max;            /* INT, NUMBER: inclusive bounds */
  const char *const *values;  /* ENUM: the names, NULL-terminated */
  const char *def;            /* the default as text, parsed like a value; NULL: zero
                                 (an ENUM -1, a STRREF NULL) or what help says */
  const char *arg;            /* its value's name in --help: "HOST:PORT", "N", "FILE" */
  const char *help;           /* what it does; --help adds the default, the variable and
                                 "re-read on SIGHUP" */
  const char *env;            /* an environment variable that stands for it, or NULL */
  px_setting_check_fn check;  /* STRING, STRREF: extra check, or NULL */
  px_setting_set_fn set;      /* CUSTOM: the setter */
} px_setting_t;

/* A program's table and the text of its --help around the options. */
typedef struct {
  const char *program;        /* "pxcoordd": messages, --version */
  const char *synopsis;       /* after "usage: PROGRAM " (may hold newlines) */
  const char *about;          /* paragraph(s) before the options */
  const char *epilogue;       /* paragraph(s) after them */
  const px_setting_t *table;
  size_t n;                   /* at most PX_SETTINGS_MAX */
} px_settings_spec_t;

#define PX_SETTINGS_MAX 64

/* A table bound to the program's struct, and the copies of STRREF values
 * read from a file (or the environment) that it keeps. */
typedef struct px_settings px_settings_t;

/* Binds spec (borrowed, must outlive the handle) to obj. Can fail (NOMEM).
 * Caller owns *out and destroys it with px_settings_destroy after the last
 * use of obj's STRREF fields. */
px_status_t px_settings_create(const px_settings_spec_t *spec, void *obj,
                                      px_settings_t **out);
/* Frees the kept strings: obj's STRREF fields that point at them dangle. */
void px_settings_destroy(px_settings_t *s);

/* Sets every field of the table to its default (a bad default fails,
 * naming the setting: a table error). */
px_status_t px_settings_defaults(px_settings_t *s);

/* One setting by key (dashes or underscores; with a PREFIX setting's
 * suffix). where names its origin in errors ("FILE:LINE", "--flag",
 * "$VARIABLE"). PX_ERR_INVALID for an unknown key or a bad value: "WHERE:
 * KEY = 'VALUE': expected ..." (an unknown key lists nothing). */
px_status_t px_settings_set(px_settings_t *s, const char *key, const char *value,
                                   const char *where);

/* Reads a config file (px_conf_load's formats) into the settings; errors
 * name FILE:LINE. FLAG_ONLY settings are unknown keys there. */
px_status_t px_settings_load(px_settings_t *s, const char *path);

/* The command line: --help (-h) or --version print and return 0; else the
 * config file (the CONFIG flag's, when given), then the environment
 * variables, then the flags in order; REQUIRED settings checked. -1: go on;
 * 2: a bad flag or setting, said on stderr as "PROGRAM: ERROR" and a hint to
 * run --help. argv is kept by STRREF fields: it must outlive obj's use. */
int px_settings_parse_args(px_settings_t *s, int argc, char **argv);

/* The environment variables, then the flags of argv (not the config file,
 * not --help): what px_settings_parse_args does after reading the file, for
 * a reload that reads the file again. PX_ERR_INVALID naming the flag or
 * variable, the key and the value; nothing printed. */
px_status_t px_settings_apply_args(px_settings_t *s, int argc, char **argv);

/* 1 when the last px_settings_parse_args or px_settings_set gave the
 * setting a value (any origin; not the default). name as in the table. */
int px_settings_given(const px_settings_t *s, const char *name);

/* --help from the table: usage, about, every flag (its argument, help,
 * default, variable, "re-read on SIGHUP"), the config-file-only keys, and
 * the epilogue. */
void px_settings_usage(const px_settings_spec_t *spec, FILE *f);

/* SIGHUP: fresh holds the settings as re-read (same spec, same flags);
 * running those in force. Copies into running every RELOAD setting whose
 * field differs; writes into changed (comma-separated, truncated to cap)
 * the names of the other settings that differ, which need a restart, and
 * returns how many they are. Neither struct may hold STRREF fields kept by
 * different handles past the life of those handles. */
int px_settings_reload(const px_settings_spec_t *spec, void *running, const void *fresh,
                              char *changed, size_t cap);

#endif
