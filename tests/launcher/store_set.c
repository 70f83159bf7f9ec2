/*
 * store_set KEY VALUE: set a key in the job's store (WEFT_STORE, WEFT_JOB_TOKEN), as a
 * member does when it reports another failed. For launcher tests whose ranks are shell
 * scripts. Exits 0 on success, 1 with a message otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/store/store.h"

int main(int argc, char **argv)
{
    const char *addr = getenv("WEFT_STORE"), *token = getenv("WEFT_JOB_TOKEN");
    if (argc != 3 || addr == NULL || token == NULL) {
        fprintf(stderr, "usage: store_set KEY VALUE (with WEFT_STORE and WEFT_JOB_TOKEN)\n");
        return 1;
    }
    weft_store_client_t *c;
    weft_status_t st = weft__store_connect(addr, token, 10000, NULL, &c);
    if (st == WEFT_OK) {
        st = weft__store_set(c, argv[1], argv[2], strlen(argv[2]));
        weft__store_close(c);
    }
    if (st != WEFT_OK) {
        fprintf(stderr, "store_set %s: %s\n", argv[1], weft_status_str(st));
        return 1;
    }
    return 0;
}
