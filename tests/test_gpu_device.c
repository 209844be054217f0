/* The CUDA layer: without CUDA compiled in every call says so; with it, a
 * machine without a GPU reports zero devices (the test then skips), and a
 * GPU runs the self-test kernel and reports its name, memory and PCI bus id. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "prunex/cuda.h"

static void test_cuda_device_discovery(void **state) {
  (void)state;
  int n = -1;
  px_status_t st = px_cuda_device_count(&n);
  if (!px_cuda_built()) {
    assert_int_equal(st, PX_ERR_NOT_BUILT);
    assert_non_null(strstr(px_last_error(), "without CUDA"));
    assert_int_equal(px_cuda_selftest(0), PX_ERR_NOT_BUILT);
    char bus[32] = "x";
    assert_int_equal(px_cuda_device_bus_id(0, bus, sizeof bus), PX_ERR_NOT_BUILT);
    assert_string_equal(bus, "");
    return;
  }
  assert_int_equal(st, PX_OK);
  assert_int_equal(px_cuda_device_info(n, NULL, 0, NULL), PX_ERR_INVALID);
  char bus[32];
  assert_int_equal(px_cuda_device_bus_id(n, bus, sizeof bus), PX_ERR_INVALID);
  assert_int_equal(px_cuda_device_bus_id(-1, bus, sizeof bus), PX_ERR_INVALID);
  if (n == 0) {
    printf("no CUDA device on this machine: GPU checks skipped\n");
    skip();
  }
  for (int d = 0; d < n; d++) {
    char name[256] = "";
    uint64_t mem = 0;
    assert_int_equal(px_cuda_device_info(d, name, sizeof name, &mem), PX_OK);
    assert_int_equal(px_cuda_device_bus_id(d, bus, sizeof bus), PX_OK);
    printf("device %d: %s, %.1f GiB, PCI %s\n", d, name, mem / 1073741824.0, bus);
    assert_true(name[0] != '\0' && mem > 0);
    assert_non_null(strchr(bus, ':')); /* domain:bus:device.function */
    assert_int_equal(px_cuda_selftest(d), PX_OK);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_device_discovery)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
