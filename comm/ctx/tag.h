/*
 * Every message carries (source member id, group id, epoch, class, payload) in its
 * 64-bit transport tag, so a message of an old epoch can never match a receive of a
 * new one, and collectives on different groups never cross-talk: no two groups that a
 * process holds at once have the same tag id (the world's is 0; weft_group_split gives
 * each new subgroup one that none of the parent's members uses, comm/group/tag_ids.c).
 *
 *   63..48 source member id (16 bits)     47..36 group tag id (12 bits)
 *   35..28 epoch mod 256 (8 bits)         27..26 class (2 bits)
 *   25..0  payload: user tag (24 bits) for P2P; sequence (18) | step (8) for COLL
 */
#ifndef WEFT_TAG_H
#define WEFT_TAG_H

#include <stdint.h>

enum weft_tag_class {
    WEFT_TAG_P2P = 0,     /* user point-to-point */
    WEFT_TAG_COLL = 1,    /* collective algorithms */
    WEFT_TAG_CTRL = 2,    /* group membership, agreement, heartbeats */
    WEFT_TAG_MIGRATE = 3, /* parameter migration */
};

#define WEFT_TAG_SRC_SHIFT 48
#define WEFT_TAG_GROUP_SHIFT 36
#define WEFT_TAG_EPOCH_SHIFT 28
#define WEFT_TAG_CLASS_SHIFT 26
#define WEFT_TAG_PAYLOAD_BITS 26
#define WEFT_TAG_MAX_MEMBERS (1u << 16)
#define WEFT_TAG_MAX_GROUPS (1u << 12)
#define WEFT_TAG_COLL_SEQ_BITS 18
#define WEFT_TAG_COLL_STEP_BITS 8

#define WEFT_TAG_MASK_ALL UINT64_MAX
/* Everything but the payload: selects one (source, group, epoch, class). */
#define WEFT_TAG_MASK_STREAM (~((UINT64_C(1) << WEFT_TAG_PAYLOAD_BITS) - 1))
/* Group only: the messages of every epoch of a group (freed, its tag id to be reused). */
#define WEFT_TAG_MASK_GROUP (UINT64_C(0xfff) << WEFT_TAG_GROUP_SHIFT)
/* Group and epoch only: used to discard stale messages of one group epoch. */
#define WEFT_TAG_MASK_GROUP_EPOCH (UINT64_C(0xfffff) << WEFT_TAG_EPOCH_SHIFT)

static inline uint64_t weft__tag(uint32_t src_id, uint32_t group_id, uint32_t epoch,
                                 enum weft_tag_class cls, uint32_t payload)
{
    return ((uint64_t)(src_id & 0xffff) << WEFT_TAG_SRC_SHIFT) |
           ((uint64_t)(group_id & 0xfff) << WEFT_TAG_GROUP_SHIFT) |
           ((uint64_t)(epoch & 0xff) << WEFT_TAG_EPOCH_SHIFT) |
           ((uint64_t)(cls & 0x3) << WEFT_TAG_CLASS_SHIFT) |
           (uint64_t)(payload & ((1u << WEFT_TAG_PAYLOAD_BITS) - 1));
}

static inline uint32_t weft__tag_coll_payload(uint32_t seq, uint32_t step)
{
    return ((seq & ((1u << WEFT_TAG_COLL_SEQ_BITS) - 1)) << WEFT_TAG_COLL_STEP_BITS) |
           (step & ((1u << WEFT_TAG_COLL_STEP_BITS) - 1));
}

static inline uint32_t weft__tag_src(uint64_t tag)
{
    return (uint32_t)(tag >> WEFT_TAG_SRC_SHIFT) & 0xffff;
}

#endif
