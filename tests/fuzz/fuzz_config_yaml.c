/* libFuzzer target for the broker configuration (fx_config_load in
 * src/server/config*.c, on libyaml): the input is up to three NUL-separated
 * parts, the YAML text of a config file, environment entries (NAME=value,
 * one per line) and --set overrides (key=value, one per line), layered over
 * the defaults as felix-broker does. A load either succeeds or fails with
 * FX_ECONFIG and a message, never both. A loaded configuration printed as
 * YAML (--print-config) loads again to the same value for every key. Any
 * broken promise aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "felix/error.h"
#include "server/config.h"
#include "server/config_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_LINES 16

/* Splits |s| at '\n' into at most MAX_LINES non-empty entries of |out|. */
static size_t split_lines(char *s, char **out)
{
    size_t n = 0;
    for (char *line = strtok(s, "\n"); line != NULL && n < MAX_LINES; line = strtok(NULL, "\n"))
        out[n++] = line;
    return n;
}

static int load(fx_config *c, const char *text, char **envp, const char **sets, size_t nsets,
                fx_config_diag *d)
{
    fx_config_defaults(c);
    fx_config_src src = {
        .text = text, .text_name = "fuzz.yaml", .envp = envp, .sets = sets, .nsets = nsets};
    memset(d, 0, sizeof(*d));
    return fx_config_load(c, &src, d);
}

/* Every key of |b| has the value it has in |a| (secrets are printed
 * redacted, so they are not compared). */
static void check_same_values(const fx_config *a, const fx_config *b, const char *printed)
{
    for (size_t i = 0; i < fx_config_nkeys; i++) {
        const struct key *k = &fx_config_keys[i];
        if (k->type == T_WARN || k->type == T_REJECT)
            continue;
        char va[512], vb[512];
        fx_config_format_value(a, (int)i, va, sizeof(va));
        fx_config_format_value(b, (int)i, vb, sizeof(vb));
        if (strcmp(va, vb) != 0 && strstr(vb, "<redacted>") == NULL) {
            fprintf(stderr, "%s: %s printed, %s reloaded, from:\n%s\n", k->name, va, vb, printed);
            abort();
        }
    }
    CHECK(a->nstreams == b->nstreams);
}

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
    if (load(again, buf, NULL, NULL, 0, d) != 0) {
        fprintf(stderr, "printed config does not load: %s\n%s\n", d->error, buf);
        abort();
    }
    check_same_values(c, again, buf);
    fx_config_deinit(again);
    free(d);
    free(again);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FX_CONFIG_MAX_FILE_BYTES)
        return 0;
    char *in = malloc(size + 2);
    CHECK(in != NULL);
    memcpy(in, data, size);
    in[size] = in[size + 1] = '\0';
    /* Parts: YAML, then the environment, then --set (each may be absent). */
    char *end = in + size, *env_part = NULL, *set_part = NULL;
    char *z = memchr(in, '\0', size);
    if (z != NULL) {
        env_part = z + 1;
        char *z2 = memchr(env_part, '\0', (size_t)(end - env_part));
        if (z2 != NULL)
            set_part = z2 + 1;
    }
    char *envp[MAX_LINES + 1] = {NULL}, *sets[MAX_LINES] = {NULL};
    size_t nenv = env_part != NULL ? split_lines(env_part, envp) : 0;
    size_t nsets = set_part != NULL ? split_lines(set_part, sets) : 0;
    envp[nenv] = NULL;
    fx_config *c = calloc(1, sizeof(*c));
    fx_config_diag *d = calloc(1, sizeof(*d));
    CHECK(c != NULL && d != NULL);
    int rv = load(c, in, envp, (const char **)sets, nsets, d);
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
    free(in);
    return 0;
}
