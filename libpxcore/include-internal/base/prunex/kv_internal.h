/* The part of prunex/kv.h internal to libpxcore, its programs and its tests
 * (not installed, not exported: docs/architecture.md, "libpxcore"). */
#ifndef PRUNEX_KV_INTERNAL_H
#define PRUNEX_KV_INTERNAL_H

#include "prunex/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PX_OK if the key is well formed, else PX_ERR_INVALID naming it. */
px_status_t px_kv_key_validate(const char *key);

#ifdef __cplusplus
}
#endif

#endif
