/*
 * Which host a process runs on, as weft counts hosts: processes on one host may share
 * memory (segments in /dev/shm, reads of each other's memory with process_vm_readv),
 * processes on different hosts never try to.
 *
 * A host is one kernel (its boot id), and within it one network namespace, one PID
 * namespace and one /dev/shm (the device number of the file system mounted there). The
 * host name is not part of it: machines of a cluster may share one, and a UTS namespace
 * alone changes nothing that matters here. The namespaces are: containers and network
 * namespaces that emulate hosts have their own network namespace, and where they do not
 * share /dev/shm or the PID namespace, segments or process_vm_readv would not work
 * between them anyway. The id is 16 hex digits of FNV-1a over those four; a part that
 * cannot be read (no /proc) counts as empty, so processes that cannot read it agree
 * among themselves.
 */
#ifndef WEFT_UTIL_HOST_ID_H
#define WEFT_UTIL_HOST_ID_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/hash.h"

#define WEFT__HOST_ID_LEN 17 /* 16 hex digits and the NUL */

/* Continue @p h over the target of the namespace link @p path ("net:[4026531840]"). */
static inline uint64_t weft__host_id_ns(uint64_t h, const char *path)
{
    char link[64];
    ssize_t n = readlink(path, link, sizeof(link));
    return weft__fnv1a(h, link, n > 0 ? (size_t)n : 0) * 1099511628211ull;
}

/* This process's host id (16 hex digits) into @p out. */
static inline void weft__host_id(char out[WEFT__HOST_ID_LEN])
{
    char boot[64] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL) {
            boot[0] = '\0';
        }
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    uint64_t h = weft__fnv1a(WEFT__FNV1A_SEED, boot, strlen(boot) + 1);
    h = weft__host_id_ns(h, "/proc/self/ns/net");
    h = weft__host_id_ns(h, "/proc/self/ns/pid");
    struct stat st;
    unsigned long long dev = stat("/dev/shm", &st) == 0 ? (unsigned long long)st.st_dev : 0;
    h = weft__fnv1a(h, &dev, sizeof(dev));
    snprintf(out, WEFT__HOST_ID_LEN, "%016llx", (unsigned long long)h);
}

#endif
