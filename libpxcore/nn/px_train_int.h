/* Internals of the trainer (train.c) for the strategies: the local steps
 * of px_trainer_steps on another model and optimiser (the compact model of
 * strategy/compact_train.c), with the trainer's data stream, learning-rate
 * schedule, global step, gradient hook and statistics as they are. */
#ifndef PX_TRAIN_INT_H
#define PX_TRAIN_INT_H

#include "prunex/nn.h"

/* From the next px_trainer_steps on, steps train m with s (both borrowed;
 * m is built for the trainer's batch and input); NULL, NULL: the trainer's
 * own model and optimiser again. px_trainer_model and px_trainer_sgd keep
 * returning the trainer's own. */
void px__trainer_use(px_trainer_t *t, px_model_t *m, px_sgd_t *s);
/* The trainer's SGD hyper-parameters (lr, momentum, weight decay, nesterov)
 * as its optimiser was created with them. */
void px__trainer_sgd_config(const px_trainer_t *t, px_sgd_config_t *out);

/* Epochs of training data the px_trainer_steps stream has seen (steps over
 * steps per epoch, counted across px_trainer_reshard's changes of it). */
double px__trainer_epochs(const px_trainer_t *t);

/* Where the px_trainer_steps stream stands, for a rank that joins: s[0] the
 * global step, s[1] the epoch in progress (or beginning next), s[2] its
 * steps left, s[3] 1 when between epochs. Cannot fail. */
void px__trainer_stream(const px_trainer_t *t, int64_t s[4]);
/* A joining rank's trainer follows another's stream s (px__trainer_stream)
 * as rank `rank` of world_size: its shard of the new world at once, the
 * global step (the learning-rate schedule) and the epoch numbers of s, its
 * epoch in progress ending with the others' where its shard allows. Fails
 * with PX_ERR_INVALID (a bad s, a shard smaller than one batch). */
px_status_t px__trainer_follow(px_trainer_t *t, const int64_t s[4], int32_t rank,
                               int32_t world_size);

/* px_model_create, an imported file checked against sha256 as
 * px__onnx_load does (the trainer: the file the job was submitted with). */
px_status_t px__model_create_ex(px_ops_t *ops, const px_model_config_t *cfg, const char *sha256,
                                px_model_t **out);

#endif
