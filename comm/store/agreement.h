/*
 * The layout of a group-edit decision as a store value (comm/group/decision.c encodes
 * and decodes it), here because the store reads it too: the members of a decision's
 * epoch are who may count themselves under its "applied" key, and the count reaching
 * their number is what lets members delete the epoch's agreement keys
 * (comm/store/server_epochs.c).
 *
 * Words of 32 bits in the host's order: magic, kind, new epoch, join_hi (the highest
 * join slot the decision consumed), n_members, then the n_members member ids.
 */
#ifndef WEFT_STORE_AGREEMENT_H
#define WEFT_STORE_AGREEMENT_H

#define WEFT__DECISION_MAGIC 0x77656674u /* "weft" */
#define WEFT__DECISION_HEADER 5          /* words before the member ids */
#define WEFT__DECISION_W_JOIN_HI 3
#define WEFT__DECISION_W_N_MEMBERS 4

#endif
