/* The built-in architectures as data: names and shapes of the ResNet family
 * (px_arch_int.h). Engine-free on purpose: the job-spec checks of pxctl
 * (the spec layer) and the model builder (nn/model.c, the engine) read this
 * one table, so a name is valid in a spec exactly when the engine builds it. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "arch/px_arch_int.h"
#include "prunex/arch.h"

static const px__arch_t px__archs[] = {
    {"resnet20", 0, 3, {3, 3, 3, 0}, 16, 1},      {"resnet32", 0, 3, {5, 5, 5, 0}, 16, 1},
    {"resnet56", 0, 3, {9, 9, 9, 0}, 16, 1},      {"resnet18", 0, 4, {2, 2, 2, 2}, 64, 1},
    {"resnet34", 0, 4, {3, 4, 6, 3}, 64, 1},      {"resnet50", 1, 4, {3, 4, 6, 3}, 64, 1},
    {"resnet101", 1, 4, {3, 4, 23, 3}, 64, 1},    {"resnet152", 1, 4, {3, 8, 36, 3}, 64, 1},
    {"wrn50_2", 1, 4, {3, 4, 6, 3}, 64, 2},
};
#define PX__NARCHS (sizeof px__archs / sizeof px__archs[0])

const px__arch_t *px__arch_find(const char *name) {
  for (size_t i = 0; i < PX__NARCHS; i++)
    if (name && !strcmp(px__archs[i].name, name)) return &px__archs[i];
  return NULL;
}

int px_model_arch_known(const char *arch) { return px__arch_find(arch) != NULL; }

const char *px_model_arch_name(const char *arch) {
  const px__arch_t *a = px__arch_find(arch);
  return a ? a->name : NULL;
}

/* The names joined by spaces, made once from the table. */
static char px__arch_names[256];
static pthread_once_t px__arch_names_once = PTHREAD_ONCE_INIT;

static void px__arch_names_make(void) {
  size_t len = 0;
  for (size_t i = 0; i < PX__NARCHS && len < sizeof px__arch_names; i++)
    len += (size_t)snprintf(px__arch_names + len, sizeof px__arch_names - len, "%s%s",
                            i ? " " : "", px__archs[i].name);
}

const char *px_model_arch_list(void) {
  pthread_once(&px__arch_names_once, px__arch_names_make);
  return px__arch_names;
}
