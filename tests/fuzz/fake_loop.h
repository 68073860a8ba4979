/* The harness side of fake_loop.c (a thread-free base/loop.c for fuzzing
 * and the broker's unit tests):
 * one fake clock shared by every loop, and explicit steps. */
#ifndef FX_FUZZ_FAKE_LOOP_H
#define FX_FUZZ_FAKE_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/loop.h"

/* Moves the clock (fx_now_ns, fx_loop_now) forward by |ns|. */
void fx_fake_clock_advance(uint64_t ns);
/* Runs the oldest queued task of |l|. Returns false if none was queued. */
bool fx_fake_loop_run_one(fx_loop *l);
bool fx_fake_loop_has_tasks(const fx_loop *l);
/* Called at the start of every fx_loop_ask / fx_loop_ask_all (NULL: none):
 * a test drives the rest of its world there, as the other threads would
 * while the caller waits. */
extern void (*fx_fake_loop_ask_hook)(void);
/* The |i|-th live loop (newest first), or NULL past the last: the harness
 * reaches every loop the code under test made without knowing where it
 * keeps them. */
fx_loop *fx_fake_loop_at(size_t i);
/* Fires the earliest timer of |l| that is due. Returns false if none is. */
bool fx_fake_loop_fire_one(fx_loop *l);
/* The earliest deadline armed on |l|, if any. */
bool fx_fake_loop_next_deadline(const fx_loop *l, uint64_t *pdeadline);

#endif
