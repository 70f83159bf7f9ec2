#include "weft/core.h"
#include "weft/status.h"

#define VERSION_STR_(x) #x
#define VERSION_STR(x) VERSION_STR_(x)

const char *weft_version(int *major, int *minor, int *patch)
{
    if (major != NULL) {
        *major = WEFT_VERSION_MAJOR;
    }
    if (minor != NULL) {
        *minor = WEFT_VERSION_MINOR;
    }
    if (patch != NULL) {
        *patch = WEFT_VERSION_PATCH;
    }
    return VERSION_STR(WEFT_VERSION_MAJOR) "." VERSION_STR(WEFT_VERSION_MINOR) "." VERSION_STR(
        WEFT_VERSION_PATCH);
}

const char *weft_status_str(weft_status_t status)
{
    switch (status) {
    case WEFT_OK: return "WEFT_OK: success";
    case WEFT_INPROGRESS: return "WEFT_INPROGRESS: operation in progress";
    case WEFT_ERR_INVALID_ARG: return "WEFT_ERR_INVALID_ARG: invalid argument";
    case WEFT_ERR_MISMATCH: return "WEFT_ERR_MISMATCH: ranks disagree on count, dtype, op or root";
    case WEFT_ERR_NO_MEMORY: return "WEFT_ERR_NO_MEMORY: out of memory";
    case WEFT_ERR_UNSUPPORTED: return "WEFT_ERR_UNSUPPORTED: not supported";
    case WEFT_ERR_PEER_FAILED: return "WEFT_ERR_PEER_FAILED: a peer process failed";
    case WEFT_ERR_REVOKED: return "WEFT_ERR_REVOKED: group revoked after a failure";
    case WEFT_ERR_TIMEOUT: return "WEFT_ERR_TIMEOUT: operation timed out";
    case WEFT_ERR_TRANSPORT: return "WEFT_ERR_TRANSPORT: transport error";
    case WEFT_ERR_AUTH: return "WEFT_ERR_AUTH: authentication failed";
    case WEFT_ERR_IO: return "WEFT_ERR_IO: input/output error";
    case WEFT_ERR_PROTOCOL: return "WEFT_ERR_PROTOCOL: malformed message";
    }
    return "unknown status";
}
