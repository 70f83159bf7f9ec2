/*
 * The same-host stream mechanisms (transports/stream.h) within one process: CMA reads
 * this process's own memory through its pid, memfd makes memory, offers it and maps the
 * offer of this process's own pid a second time; failures map to the statuses the
 * header lists; can_reach says no where a mechanism cannot work.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "transports/stream.h"

static weft_tl_stream_peer_t host_peer(void)
{
    return (weft_tl_stream_peer_t){
        .size = sizeof(weft_tl_stream_peer_t),
        .same_host = true,
        .pid = (uint64_t)getpid(),
        .mem = WEFT_MEM_HOST,
        .peer_mem = WEFT_MEM_HOST,
        .refused = false,
    };
}

/* A table's kind is which capability tables it fills, each with every entry. */
static void test_tables(void **state)
{
    (void)state;
    const weft_tl_stream_ops_t *cma = &weft__tl_stream_cma, *memfd = &weft__tl_stream_memfd;
    assert_int_equal(cma->size, sizeof(weft_tl_stream_ops_t));
    assert_int_equal(memfd->size, sizeof(weft_tl_stream_ops_t));
    assert_string_equal(cma->name, "cma");
    assert_string_equal(memfd->name, "memfd");
    assert_non_null(cma->can_reach);
    assert_non_null(memfd->can_reach);
    assert_non_null(cma->read);
    assert_null(cma->shm);
    assert_int_equal(cma->read->size, sizeof(weft_tl_stream_read_ops_t));
    assert_non_null(cma->read->read);
    assert_null(memfd->read);
    assert_non_null(memfd->shm);
    assert_int_equal(memfd->shm->size, sizeof(weft_tl_stream_shm_ops_t));
    assert_non_null(memfd->shm->create);
    assert_non_null(memfd->shm->map);
    assert_non_null(memfd->shm->unmap);
}

static void test_can_reach(void **state)
{
    (void)state;
    const weft_tl_stream_ops_t *ops[] = {&weft__tl_stream_cma, &weft__tl_stream_memfd};
    for (size_t i = 0; i < 2; i++) {
        weft_tl_stream_peer_t p = host_peer();
        assert_true(ops[i]->can_reach(&p));
        p.pid = 0; /* not known yet */
        assert_true(ops[i]->can_reach(&p));
        p = host_peer();
        p.same_host = false;
        assert_false(ops[i]->can_reach(&p));
        p = host_peer();
        p.mem = WEFT_MEM_CUDA;
        assert_false(ops[i]->can_reach(&p));
        p = host_peer();
        p.peer_mem = WEFT_MEM_CUDA;
        assert_false(ops[i]->can_reach(&p));
        p = host_peer();
        p.refused = true;
        assert_false(ops[i]->can_reach(&p));
        p = host_peer();
        p.pid = (uint64_t)INT32_MAX + 1;
        assert_false(ops[i]->can_reach(&p));
        p = host_peer();
        p.size = 0; /* a caller that did not fill it */
        assert_false(ops[i]->can_reach(&p));
        assert_false(ops[i]->can_reach(NULL));
    }
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(i * 131u + seed + (i >> 12));
    }
}

static void test_cma_read_self(void **state)
{
    (void)state;
    const weft_tl_stream_read_ops_t *r = weft__tl_stream_cma.read;
    size_t n = (3u << 20) + 123; /* more than one page run, not page-aligned */
    uint8_t *src = malloc(n), *dst = calloc(1, n);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, n, 7);
    uint64_t pid = (uint64_t)getpid();
    assert_int_equal(r->read(pid, (uint64_t)(uintptr_t)src, dst, n), WEFT_OK);
    assert_memory_equal(dst, src, n);
    /* An unaligned piece from the middle. */
    memset(dst, 0, n);
    assert_int_equal(r->read(pid, (uint64_t)(uintptr_t)(src + 4097), dst + 3, 1000), WEFT_OK);
    assert_memory_equal(dst + 3, src + 4097, 1000);
    assert_int_equal(r->read(pid, (uint64_t)(uintptr_t)src, dst, 0), WEFT_OK);
    /* Failures, each with its status and errno. */
    errno = 0;
    assert_int_equal(r->read(0, (uint64_t)(uintptr_t)src, dst, 16), WEFT_ERR_INVALID_ARG);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(r->read((uint64_t)INT32_MAX + 1, (uint64_t)(uintptr_t)src, dst, 16),
                     WEFT_ERR_INVALID_ARG);
    errno = 0;
    assert_int_equal(r->read(pid, 16, dst, 16), WEFT_ERR_INVALID_ARG); /* not mapped */
    assert_int_equal(errno, EFAULT);
    free(src);
    free(dst);
}

static void test_memfd_self(void **state)
{
    (void)state;
    const weft_tl_stream_shm_ops_t *shm = weft__tl_stream_memfd.shm;
    size_t len = (1u << 20) + 4096;
    weft_tl_stream_region_t made = {NULL, 0, -1}, mapped = {NULL, 0, -1};
    weft_tl_stream_offer_t offer;
    memset(&offer, 0, sizeof(offer));
    assert_int_equal(shm->create(len, &made, &offer), WEFT_OK);
    assert_non_null(made.base);
    assert_int_equal(made.len, len);
    assert_true(made.fd >= 0);
    assert_int_equal(offer.pid, (uint64_t)getpid());
    assert_int_equal(offer.handle, (uint64_t)made.fd);
    assert_int_equal(offer.len, len);
    uint8_t *zero = calloc(1, len);
    assert_non_null(zero);
    assert_memory_equal(made.base, zero, len); /* zeroed */
    free(zero);

    assert_int_equal(shm->map(&offer, &mapped), WEFT_OK);
    assert_non_null(mapped.base);
    assert_ptr_not_equal(mapped.base, made.base);
    assert_int_equal(mapped.len, len);
    assert_int_equal(mapped.fd, -1);
    /* One memory: writes through either mapping are seen through the other. */
    fill(made.base, len, 3);
    assert_memory_equal(mapped.base, made.base, len);
    ((uint8_t *)mapped.base)[len - 1] ^= 0xff;
    assert_int_equal(((uint8_t *)made.base)[len - 1], ((uint8_t *)mapped.base)[len - 1]);

    /* Offers that do not hold. */
    weft_tl_stream_region_t none = {NULL, 0, -1};
    weft_tl_stream_offer_t bad = offer;
    bad.len = len + 4096; /* more than there is */
    errno = 0;
    assert_int_equal(shm->map(&bad, &none), WEFT_ERR_INVALID_ARG);
    assert_int_equal(errno, EINVAL);
    assert_null(none.base);
    bad = offer;
    bad.pid = 0;
    assert_int_equal(shm->map(&bad, &none), WEFT_ERR_INVALID_ARG);
    bad = offer;
    bad.len = 0;
    assert_int_equal(shm->map(&bad, &none), WEFT_ERR_INVALID_ARG);
    bad = offer;
    bad.handle = (uint64_t)INT32_MAX + 1;
    assert_int_equal(shm->map(&bad, &none), WEFT_ERR_INVALID_ARG);
    assert_null(none.base);

    shm->unmap(&mapped);
    assert_null(mapped.base);
    assert_int_equal(mapped.fd, -1);
    shm->unmap(&made);
    assert_null(made.base);
    assert_int_equal(made.fd, -1);
    /* The maker closed it: the offer is stale. Its number may name another descriptor by
     * now (here the pidfd the map opens takes it), which is not the memory offered. */
    assert_int_not_equal(shm->map(&offer, &none), WEFT_OK);
    assert_null(none.base);
    bad = offer;
    bad.handle = 1u << 30; /* past any descriptor table */
    errno = 0;
    assert_int_equal(shm->map(&bad, &none), WEFT_ERR_PEER_FAILED);
    assert_int_equal(errno, EBADF);
    shm->unmap(&none); /* nothing there: a no-op */
    assert_int_equal(shm->create(0, &made, &offer), WEFT_ERR_INVALID_ARG);

    /* An offer naming a descriptor that is no anonymous memory (a file the peer holds
     * open, here one of ours on a file system, as large as asked) is refused: the ring
     * would write into that file. */
    char path[] = "/tmp/weft-test-stream-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)len), 0);
    bad = offer;
    bad.handle = (uint64_t)fd;
    errno = 0;
    assert_int_not_equal(shm->map(&bad, &none), WEFT_OK);
    assert_int_equal(errno, EPERM);
    assert_null(none.base);
    close(fd);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_can_reach),
        cmocka_unit_test(test_cma_read_self),
        cmocka_unit_test(test_memfd_self),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
