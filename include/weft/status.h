/**
 * @file status.h
 * @brief Status codes returned by every weft call.
 *
 * Errors are negative and grouped by what is damaged: the arguments, local resources,
 * a peer, or the system. Output parameters are written only when a call returns
 * WEFT_OK (or WEFT_INPROGRESS where the call says so).
 */
#ifndef WEFT_STATUS_H
#define WEFT_STATUS_H

#include "weft/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Result of a weft call. */
typedef enum weft_status {
    WEFT_OK = 0,          /**< Success. */
    WEFT_INPROGRESS = 1,  /**< A nonblocking operation has not completed yet. */

    /* Argument errors: the caller can fix the call. */
    WEFT_ERR_INVALID_ARG = -1, /**< An argument is out of range or NULL. */
    WEFT_ERR_MISMATCH = -2,    /**< Ranks disagree on count, dtype, op or root. */

    /* Resource errors: local, the operation may succeed later or elsewhere. */
    WEFT_ERR_NO_MEMORY = -10,   /**< An allocation failed. */
    WEFT_ERR_UNSUPPORTED = -11, /**< Not built in, or not possible on this machine. */

    /* Peer errors: another member is gone or the group was revoked. */
    WEFT_ERR_PEER_FAILED = -20, /**< A peer process died or became unreachable. */
    WEFT_ERR_REVOKED = -21,     /**< The group was revoked after a failure elsewhere. */
    WEFT_ERR_TIMEOUT = -22,     /**< The operation did not complete in time. */

    /* System errors. */
    WEFT_ERR_TRANSPORT = -30, /**< The transport library reported an error. */
    WEFT_ERR_AUTH = -31,      /**< Authentication with the rendezvous store failed. */
    WEFT_ERR_IO = -32,        /**< A system call or socket operation failed. */
    WEFT_ERR_PROTOCOL = -33,  /**< A peer or the store sent a malformed message. */
} weft_status_t;

/**
 * @brief Name of a status code, e.g. "WEFT_ERR_TIMEOUT: operation timed out".
 * @param[in] status Any value; unknown values give "unknown status".
 * @return A static string; never NULL.
 */
WEFT_API const char *weft_status_str(weft_status_t status);

#ifdef __cplusplus
}
#endif
#endif
