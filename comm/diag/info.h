/*
 * weft_info_print() (include/weft/info.h), in two files: info.c checks the parameters
 * and prints the summary and the settings, info_topo.c the topology and the transport
 * decisions it leads to.
 */
#ifndef WEFT_COMM_INFO_H
#define WEFT_COMM_INFO_H

#include <stdio.h>

#include "weft/info.h"

/* The value in effect of setting @p name (environment or default), or NULL. */
const char *weft__info_setting(const char *name);

/* The WEFT_INFO_TOPOLOGY section of @p p, checked by the caller. Returns as
 * weft_info_print(); on failure the last line printed says why. */
weft_status_t weft__info_topology(FILE *out, const weft_info_params_t *p);

#endif
