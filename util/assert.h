/*
 * WEFT_ASSERT: an invariant checked where a state machine moves (a request completing, a
 * counter that only grows, a turn handed on), in Debug and sanitizer builds; nothing in
 * Release and RelWithDebInfo builds (NDEBUG), whose hot paths stay as they are. A broken
 * invariant prints where and aborts: it is a bug of weft, never the caller's input (that
 * gets a status).
 */
#ifndef WEFT_UTIL_ASSERT_H
#define WEFT_UTIL_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#ifdef NDEBUG
#define WEFT_ASSERT(cond) ((void)sizeof(!(cond)))
#else
#define WEFT_ASSERT(cond)                                                                          \
    ((cond) ? (void)0 : weft__assert_fail(#cond, __FILE__, __LINE__, __func__))
#endif

__attribute__((noreturn, cold, unused)) static void
weft__assert_fail(const char *cond, const char *file, int line, const char *func)
{
    fprintf(stderr, "weft: invariant broken at %s:%d in %s(): %s\n", file, line, func, cond);
    fflush(stderr);
    abort();
}

#endif
