/* libFuzzer harness: what pxcoordd does with a request's bytes before any
 * state is touched, for every method it serves: protobuf-c unpack with the
 * method's request type (the first input byte picks the method), a pack of
 * the unpacked message that must give the size it announced, and for
 * SubmitJob the spec checks the coordinator applies (YAML spec text parsed,
 * the proto spec completed with the defaults and validated). The handlers'
 * database work is covered by the coordinator tests. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "prunex.pb-c.h"
#include "prunex/jobspec.h"

static const ProtobufCMessageDescriptor *const requests[] = {
    &prunex__v1__register_node_request__descriptor,
    &prunex__v1__heartbeat_request__descriptor,
    &prunex__v1__watch_assignments_request__descriptor,
    &prunex__v1__kv_put_request__descriptor,
    &prunex__v1__kv_get_request__descriptor,
    &prunex__v1__iteration_report__descriptor,
    &prunex__v1__rank_exit__descriptor,
    &prunex__v1__submit_job_request__descriptor,
    &prunex__v1__get_job_request__descriptor,
    &prunex__v1__list_jobs_request__descriptor,
    &prunex__v1__cancel_job_request__descriptor,
    &prunex__v1__list_nodes_request__descriptor,
    &prunex__v1__get_iterations_request__descriptor,
    &prunex__v1__watch_job_request__descriptor,
    &prunex__v1__delete_job_request__descriptor,
    &prunex__v1__rank_log_chunk__descriptor,
    &prunex__v1__get_rank_log_request__descriptor,
};

static void submit_checks(const Prunex__V1__SubmitJobRequest *r) {
  if (r->spec_yaml && r->spec_yaml[0]) {
    Prunex__V1__JobSpec *s = NULL;
    if (px_jobspec_parse_string(r->spec_yaml, strlen(r->spec_yaml), "spec_yaml", &s) == PX_OK)
      px_jobspec_free(s);
  }
  if (!r->spec) return;
  /* The coordinator completes a copy of the client's spec: repack it and
   * unpack with the default allocator, as px_jobspec_fill_defaults needs. */
  size_t n = protobuf_c_message_get_packed_size(&r->spec->base);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return;
  protobuf_c_message_pack(&r->spec->base, buf);
  Prunex__V1__JobSpec *copy = prunex__v1__job_spec__unpack(NULL, n, buf);
  free(buf);
  /* protobuf-c accepts a field number 0 under a non-canonical tag and then
   * cannot read its own repacked form: the coordinator refuses such a spec
   * ("cannot be re-read"; test coord_recovery), so stop here too. */
  if (!copy) return;
  if (px_jobspec_fill_defaults(copy) == PX_OK) (void)px_jobspec_validate(copy);
  px_jobspec_free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pxf_quiet();
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *d = requests[data[0] % (sizeof requests / sizeof requests[0])];
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
  if (!m) return 0; /* answered INVALID_ARGUMENT */
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (buf) {
    if (protobuf_c_message_pack(m, buf) != n) abort();
    free(buf);
  }
  if (d == &prunex__v1__submit_job_request__descriptor)
    submit_checks((const Prunex__V1__SubmitJobRequest *)m);
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
