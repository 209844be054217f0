/* Settings files for the daemons: one reader for the two formats pxcoordd
 * has always accepted (`key = value` lines, or a YAML mapping of scalars),
 * handing each setting to the program's own setter, so that a program
 * validates flags and file settings with the same code. pxagent reads
 * /etc/prunex/pxagent.conf through it. Internal: for the daemons of this repository. */
#ifndef PX_CONF_H
#define PX_CONF_H

#include "prunex/px.h"

/* Applies one setting. key has dashes turned into underscores (up to its
 * first '.': `share.NAME` keeps NAME's); where is
 * "FILE:LINE" for messages. Returns PX_OK or an error set with
 * px_set_error naming where, the key and the value. */
typedef px_status_t (*px_conf_set_fn)(void *ctx, const char *key, const char *value,
                                      const char *where);

/* Reads path and calls set for every setting, in file order; stops at the
 * first error (the setter's, or a syntax error naming FILE:LINE). The first
 * setting line decides the format: '=' before any ':' means `key = value`
 * ('#' comments, values may be "quoted"), anything else YAML. */
px_status_t px_conf_load(const char *path, px_conf_set_fn set, void *ctx);

#endif
