/* Shared by the fault-injection tests: deaths at random points, recovery checks. */
#ifndef WEFT_TEST_FAULT_COMMON_H
#define WEFT_TEST_FAULT_COMMON_H

#include <stdint.h>

#include "weft/weft.h"

/* Die by SIGKILL after a random delay in [min_us, max_us), from a timer signal, so the
 * death lands at an arbitrary point of whatever this process is doing. The time of death
 * is left in a file for the survivors' detection check. */
void fault_arm_death(int member_id, unsigned seed, long min_us, long max_us);

/* Like fault_arm_death, but the process stops (SIGSTOP) instead of dying: it hangs
 * without exiting, and leaves its pid for fault_stopped_gone(). */
void fault_arm_stop(int member_id, unsigned seed, long min_us, long max_us);
/* 0 once the process member @p member_id stopped as is gone (weftrun kills a process
 * whose lease lapsed, and reaps it), waiting at most @p timeout_ms; -1 if it never went
 * or left no pid. Kills it itself then, so that the test ends either way. */
int fault_stopped_gone(int member_id, int timeout_ms);

/* Time (CLOCK_MONOTONIC, ms) a member recorded just before dying; -1 if unknown. */
double fault_death_time_ms(int member_id);
double fault_now_ms(void);

/* sum over ranks of (rank+1), checked against size*(size+1)/2. */
weft_status_t fault_checked_allreduce(weft_group_t *g);

/* Repair until a checked allreduce succeeds at the new epoch (bounded attempts). */
weft_status_t fault_recover(weft_group_t *g, weft_edit_info_t *info);

/* Every member holds the same membership and epoch (checked with MIN/MAX reductions of
 * an FNV-1a hash of the member ids): WEFT_OK, WEFT_ERR_MISMATCH or the allreduce's error. */
weft_status_t fault_membership_agrees(weft_group_t *g);

/* 1 if member @p id is in @p g. */
int fault_has_member(weft_group_t *g, int id);
/* Whether this process maps the world group's shared-memory segment of its current epoch
 * (after a collective at that epoch): the group collects through shared memory. */
int fault_uses_shm(weft_group_t *g);

#define SURVIVOR_OK(rank) printf("SURVIVOR-OK rank %d\n", (rank))
#define SURVIVOR_FAIL(rank, why) printf("SURVIVOR-FAIL rank %d: %s\n", (rank), (why))

#endif
