/* Internals of the architecture table (arch/arch.c): the built-in ResNet
 * family as plain data, the one list of their names and shapes. It is
 * engine-free (the spec layer, libpxcore/LAYERS): job-spec checks read the names from it without the engine, and the model
 * builder (nn/model.c) builds from the same entries. */
#ifndef PX_ARCH_INT_H
#define PX_ARCH_INT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *name;
  int bottleneck;            /* 0: basic blocks (2 x 3x3), 1: bottleneck (1x1, 3x3, 1x1) */
  int nstages;
  int blocks[4];
  int base;                  /* channels of the stem and first stage */
  int width_factor;          /* bottleneck inner width = planes * width_factor */
} px__arch_t;

/* The entry named name, or NULL (name NULL or unknown). Static storage. */
const px__arch_t *px__arch_find(const char *name);

#ifdef __cplusplus
}
#endif
#endif
