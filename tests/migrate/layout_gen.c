/* Random layouts for the migration tests (see layout_gen.h). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "layout_gen.h"

static uint64_t state = 0x9e3779b97f4a7c15ull;

void gen_seed(uint64_t seed)
{
    state = seed * 0x9e3779b97f4a7c15ull + 1;
}

uint64_t gen_rnd(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

int gen_in(int lo, int hi)
{
    return lo + (int)(gen_rnd() % (uint64_t)(hi - lo + 1));
}

void gen_shape(gen_shape_t *s, int max_dim)
{
    static const weft_dtype_t types[] = {WEFT_F32, WEFT_F64, WEFT_U8};
    s->ntensors = gen_in(1, 4);
    for (int t = 0; t < s->ntensors; t++) {
        s->nd[t] = gen_in(1, 3);
        for (int d = 0; d < s->nd[t]; d++) {
            s->dims[t][d] = (uint64_t)gen_in(1, max_dim);
        }
        s->dtype[t] = types[gen_rnd() % 3];
    }
}

/* Split @p b recursively into random boxes; each leaf goes to 1..3 members. */
static int random_boxes(weft_layout_t *l, int tensor, int nd, weft_box_t b, int depth,
                        const int *members, int nm)
{
    int d = gen_in(0, nd - 1);
    if (depth > 0 && b.extent[d] > 1 && gen_rnd() % 4 != 0) {
        uint64_t cut = 1 + gen_rnd() % (b.extent[d] - 1);
        weft_box_t lo = b, hi = b;
        lo.extent[d] = cut;
        hi.offset[d] += cut;
        hi.extent[d] -= cut;
        int st = random_boxes(l, tensor, nd, lo, depth - 1, members, nm);
        return st != WEFT_OK ? st : random_boxes(l, tensor, nd, hi, depth - 1, members, nm);
    }
    int copies = gen_in(1, nm < 3 ? nm : 3), first = gen_in(0, nm - 1);
    for (int c = 0; c < copies; c++) {
        int st = weft_layout_add_region(l, members[(first + c) % nm], tensor, &b);
        if (st != WEFT_OK) {
            return st;
        }
    }
    return WEFT_OK;
}

weft_layout_t *gen_layout(const gen_shape_t *s, const int *pool, int npool)
{
    weft_layout_t *l;
    if (weft_layout_create(&l) != WEFT_OK) {
        return NULL;
    }
    char name[16];
    for (int t = 0; t < s->ntensors; t++) {
        snprintf(name, sizeof(name), "t%d", t);
        if (weft_layout_add_tensor(l, name, s->dtype[t], s->nd[t], s->dims[t], NULL) != WEFT_OK) {
            goto fail;
        }
    }
    int members[64], nm = gen_in(1, npool < 8 ? npool : 8);
    for (int k = 0; k < nm;) { /* distinct, in random order */
        int id = pool[gen_in(0, npool - 1)];
        bool dup = false;
        for (int i = 0; i < k; i++) {
            dup |= members[i] == id;
        }
        if (!dup) {
            members[k++] = id;
        }
    }
    int kind = gen_in(0, 4);
    if (kind == 0) {
        int tensors[4] = {0, 1, 2, 3};
        if (weft_layout_flat(l, tensors, s->ntensors, members, nm) != WEFT_OK) {
            goto fail;
        }
        return l;
    }
    for (int t = 0; t < s->ntensors; t++) {
        weft_box_t whole;
        memset(&whole, 0, sizeof(whole));
        for (int d = 0; d < s->nd[t]; d++) {
            whole.extent[d] = s->dims[t][d];
        }
        int st;
        switch (kind) {
        case 1: st = weft_layout_shard(l, t, gen_in(0, s->nd[t] - 1), members, nm); break;
        case 2: st = weft_layout_whole(l, t, members[gen_in(0, nm - 1)]); break;
        case 3: st = weft_layout_replicate(l, t, members, gen_in(1, nm)); break;
        default: st = random_boxes(l, t, s->nd[t], whole, 4, members, nm);
        }
        if (st != WEFT_OK) {
            goto fail;
        }
    }
    return l;
fail:
    fprintf(stderr, "gen_layout: %s\n", weft_last_error(NULL));
    weft_layout_free(l);
    return NULL;
}

/* Fill (@p fill) or count wrong bytes of (@p check) @p member's packed buffer. */
static size_t walk(const weft_layout_t *l, int member, unsigned char *fill,
                   const unsigned char *check)
{
    size_t wrong = 0;
    for (int k = 0; k < weft_layout_num_regions(l, member); k++) {
        int t;
        weft_box_t b;
        size_t bytes, off;
        weft_layout_region(l, member, k, &t, &b, &bytes, &off);
        weft_tensor_info_t ti;
        weft_layout_tensor(l, t, &ti);
        size_t elem = weft_dtype_size(ti.dtype);
        for (size_t i = 0; i < bytes; i++) {
            uint64_t c[WEFT_LAYOUT_MAX_DIMS], r = i / elem, g = 0;
            for (int d = ti.ndims - 1; d >= 0; d--) {
                c[d] = b.offset[d] + r % b.extent[d];
                r /= b.extent[d];
            }
            for (int d = 0; d < ti.ndims; d++) {
                g = g * ti.shape[d] + c[d];
            }
            unsigned char v = gen_byte(t, g, i % elem);
            if (fill != NULL) {
                fill[off + i] = v;
            } else {
                wrong += check[off + i] != v;
            }
        }
    }
    return wrong;
}

void gen_fill(const weft_layout_t *l, int member, unsigned char *buf)
{
    walk(l, member, buf, NULL);
}

size_t gen_check(const weft_layout_t *l, int member, const unsigned char *buf)
{
    return walk(l, member, NULL, buf);
}
