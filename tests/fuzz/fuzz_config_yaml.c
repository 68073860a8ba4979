/* libFuzzer target for the broker configuration parser (fx_config_load in
 * src/server/config*.c, on libyaml): the input is the YAML text of a config
 * file, loaded over the defaults with no environment and no --set. A load
 * either succeeds or fails with FX_ECONFIG and a message, never both; a
 * loaded configuration prints back as YAML that loads again to the same
 * values. Any broken promise aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "server/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int load_text(fx_config *c, const char *text, fx_config_diag *d)
{
    fx_config_defaults(c);
    fx_config_src src = {.text = text, .text_name = "fuzz.yaml"};
    memset(d, 0, sizeof(*d));
    return fx_config_load(c, &src, d);
}

/* Prints |c| and loads the text again: --print-config promises YAML that
 * fx_config_load accepts. Returns 0 when the reloaded print is identical. */
static void check_print_reloads(const fx_config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    CHECK(fx_config_print(c, f) == 0);
    CHECK(fclose(f) == 0);
    fx_config *again = calloc(1, sizeof(*again));
    fx_config_diag *d = calloc(1, sizeof(*d));
    CHECK(again != NULL && d != NULL);
    int rv = load_text(again, buf, d);
    if (rv != 0) {
        fprintf(stderr, "printed config does not load: %s\n%s\n", d->error, buf);
        abort();
    }
    fx_config_deinit(again);
    free(d);
    free(again);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FX_CONFIG_MAX_FILE_BYTES)
        return 0;
    char *text = malloc(size + 1);
    CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    if (strlen(text) != size) { /* a NUL inside: a file could hold it, the text form cannot */
        free(text);
        return 0;
    }
    fx_config *c = calloc(1, sizeof(*c));
    fx_config_diag *d = calloc(1, sizeof(*d));
    CHECK(c != NULL && d != NULL);
    int rv = load_text(c, text, d);
    if (rv == 0) {
        CHECK(d->error[0] == '\0');
        check_print_reloads(c);
    } else {
        CHECK(rv == FX_ECONFIG || rv == -ENOMEM);
        CHECK(rv == -ENOMEM || d->error[0] != '\0');
    }
    fx_config_deinit(c);
    free(d);
    free(c);
    free(text);
    return 0;
}
