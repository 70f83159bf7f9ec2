/*
 * Editing a group (a fixture of the path check): names that exist, edit.c,
 * comm/group/edit.c, the system's stdio.h and sys/uio.h, and names that do not:
 * comm/ctx.h and group_core.c.
 */
#include <stdio.h>

static const char *key = "$root/nowhere.c"; /* a shell variable's path is not checked */
int weft_fixture_edit(void); // the collectives of coll_*.c
