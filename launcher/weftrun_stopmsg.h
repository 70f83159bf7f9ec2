/*
 * The value of weftrun/stop, "<code> <node> <why>", which one node's weftrun writes and
 * every other node's reads (weftrun_nodes.c). It comes from the store, written by another
 * process: read as hostile (any whitespace between the fields, any bytes in the reason).
 */
#ifndef WEFTRUN_STOPMSG_H
#define WEFTRUN_STOPMSG_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Parse @p val into the exit code (0..255), the node that stopped (0..INT32_MAX) and its
 * reason, copied into @p why[len] with every byte that is not printable ASCII written as
 * '?' (it goes to the log) and cut to fit; "no reason given" when there is none. False,
 * with nothing written, when the code or the node does not parse.
 */
bool weftrun_stop_parse(const char *val, int *code, int *node, char *why, size_t len);

#endif
