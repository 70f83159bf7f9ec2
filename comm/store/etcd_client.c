/* The etcd backend of the store client (backend.h): not there yet, an etcd:// address is
 * refused. */
#include "comm/store/backend.h"

weft_status_t weft__store_etcd_connect(const char *url, const char *token, int member,
                                       bool launcher, int timeout_ms, const weft_logger_t *lg,
                                       weft_store_client_t **client)
{
    (void)token;
    (void)member;
    (void)launcher;
    (void)timeout_ms;
    (void)client;
    WEFT_ERROR(lg, "store %s: this build has no etcd backend", url);
    return WEFT_ERR_UNSUPPORTED;
}
