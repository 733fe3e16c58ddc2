// Thread-local last-error storage for the C ABI. It lives in a .c file of its own (not in a cgo
// preamble, which cgo copies into two translation units) so there is exactly one variable.
#include <stdlib.h>
#include <string.h>

static __thread char *mc_last_error_msg;

void mc_set_last_error(const char *msg, size_t len) {
  free(mc_last_error_msg);
  mc_last_error_msg = NULL;
  if (msg == NULL) return;
  mc_last_error_msg = malloc(len + 1);
  if (mc_last_error_msg == NULL) return;
  memcpy(mc_last_error_msg, msg, len);
  mc_last_error_msg[len] = 0;
}

const char *mooncake_last_error(void) { return mc_last_error_msg ? mc_last_error_msg : ""; }
