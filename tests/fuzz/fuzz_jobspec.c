/* libFuzzer harness: the job-spec parser (YAML text from pxctl or a gRPC
 * client), then what the coordinator does with a parsed spec: defaults,
 * validation, canonical YAML, and that the canonical YAML parses back. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "prunex/jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pxf_quiet();
  Prunex__V1__JobSpec *spec = NULL;
  if (px_jobspec_parse_string((const char *)data, size, "fuzz.yaml", &spec) != PX_OK) return 0;
  char *yaml = NULL;
  if (px_jobspec_validate(spec) == PX_OK && px_jobspec_to_yaml(spec, &yaml) == PX_OK) {
    Prunex__V1__JobSpec *again = NULL;
    /* A valid spec's canonical form is a valid spec. */
    if (px_jobspec_parse_string(yaml, strlen(yaml), "canonical.yaml", &again) != PX_OK) abort();
    px_jobspec_free(again);
    px_free(yaml);
  }
  px_jobspec_free(spec);
  return 0;
}
