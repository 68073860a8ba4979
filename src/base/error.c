/* fx_strerror(): names FX_E* codes and negative errno values. Any thread. */
#include "felix/error.h"

#include <string.h>

const char *fx_strerror(int rv)
{
    switch (rv) {
    case 0:
        return "success";
#define FX_ERR_MSG(name, value, msg)                                                               \
    case name:                                                                                     \
        return msg;
        FX_ERRORS(FX_ERR_MSG)
#undef FX_ERR_MSG
    default:
        break;
    }
    if (rv < 0 && rv > -4096)
        return strerrordesc_np(-rv) ? strerrordesc_np(-rv) : "unknown error";
    return "unknown error";
}

const char *fx_errname(int rv)
{
    switch (rv) {
#define FX_ERR_NAME(name, value, msg)                                                              \
    case name:                                                                                     \
        return #name;
        FX_ERRORS(FX_ERR_NAME)
#undef FX_ERR_NAME
    default:
        break;
    }
    if (rv < 0 && rv > -4096 && strerrorname_np(-rv))
        return strerrorname_np(-rv);
    return "?";
}
