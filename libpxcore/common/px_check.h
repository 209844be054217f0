/* What every file of the library includes: the check macros (public in
 * prunex/check.h, the daemons use them too) and PX_FREE_ALL. */
#ifndef PX_CHECK_SHIM_H
#define PX_CHECK_SHIM_H
#include <stddef.h>

#include "prunex/check.h"

/* px_free of every pointer listed (NULL ones too), in order: a destructor's
 * list of owned buffers in one statement. Not for C++ (.cu) files. */
#define PX_FREE_ALL(...)                                        \
  px__free_all((void *const[]){__VA_ARGS__},                    \
               sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))
void px__free_all(void *const *p, size_t n);
/* A px_malloc'd copy of the NUL-terminated s under name; NULL when out of
 * memory. The caller frees it with px_free. */
char *px__strdup(const char *s, const char *name);

/* The one ending of a create function whose steps jump to a single label:
 *   done:
 *     return PX_CREATED(st, obj, out, destroy);
 * st < 0 (a step failed): destroys the partly built obj (every destroy
 * accepts one) and returns st; else hands obj to *out and returns PX_OK.
 * st must be set on every path (PX_OK where nothing has run yet). */
#define PX_CREATED(st, obj, out, destroy) \
  ((st) < 0 ? ((destroy)(obj), (st)) : (*(out) = (obj), PX_OK))
#endif
