/* Loads the Felix wire test vectors from $FX_SHARED_DIR/vectors/felix-wire
 * (the reference material beside the checkout). When the directory is absent
 * the calling test reports itself skipped; the vectors are never copied into
 * the project. Header-only: include from one test file. */
#ifndef FX_WIRE_VECTORS_H
#define FX_WIRE_VECTORS_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_test.h"

typedef struct fx_vector {
    json_t *doc;        /* the whole X.json; owned */
    uint8_t *frame;     /* decoded frame_hex; owned */
    size_t frame_len;
    uint8_t *file;      /* decoded X.hex; owned */
    size_t file_len;
} fx_vector;

static inline uint8_t *fx_vec_unhex(const char *hex, size_t *plen)
{
    size_t n = 0;
    uint8_t *out = malloc(strlen(hex) / 2 + 1);
    assert_non_null(out);
    for (const char *p = hex; *p;) {
        if (*p == '\n' || *p == '\r' || *p == ' ') {
            p++;
            continue;
        }
        unsigned v;
        assert_int_equal(sscanf(p, "%2x", &v), 1);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    *plen = n;
    return out;
}

/* Directory of the vectors, or skips the test when it does not exist. */
static inline const char *fx_vec_dir(void)
{
    static char dir[4096];
    const char *shared = getenv("FX_SHARED_DIR");
    if (!shared)
        fx_test_skip("FX_SHARED_DIR not set; the Felix wire vectors are not available");
    snprintf(dir, sizeof(dir), "%s/vectors/felix-wire", shared);
    FILE *f = fopen(dir, "r");
    if (!f)
        fx_test_skip("shared wire vectors not found beside the checkout (../shared/vectors/felix-wire)");
    fclose(f);
    return dir;
}

/* Loads vector |name| ("publish", "binary_publish_acked", ...). Fails the
 * test if a file is missing or malformed, or if X.hex and frame_hex differ. */
static inline void fx_vec_load(fx_vector *v, const char *name)
{
    char path[4200];
    const char *dir = fx_vec_dir();
    memset(v, 0, sizeof(*v));
    snprintf(path, sizeof(path), "%s/%s.json", dir, name);
    json_error_t jerr;
    v->doc = json_load_file(path, 0, &jerr);
    if (!v->doc)
        fail_msg("%s: %s", path, jerr.text);
    const char *fh = json_string_value(json_object_get(v->doc, "frame_hex"));
    assert_non_null(fh);
    v->frame = fx_vec_unhex(fh, &v->frame_len);

    snprintf(path, sizeof(path), "%s/%s.hex", dir, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    v->file = fx_vec_unhex(buf, &v->file_len);
    assert_int_equal(v->file_len, v->frame_len);
    assert_memory_equal(v->file, v->frame, v->frame_len);
}

static inline const char *fx_vec_str(const fx_vector *v, const char *key)
{
    return json_string_value(json_object_get(v->doc, key));
}

static inline void fx_vec_free(fx_vector *v)
{
    json_decref(v->doc);
    free(v->frame);
    free(v->file);
    memset(v, 0, sizeof(*v));
}

#endif
