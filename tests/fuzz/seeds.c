/* Writes the seed corpus of the wire fuzz targets at fuzz time: frames built
 * with the encoders from the golden layouts of felix-facts.md §3, plus the
 * shared wire vectors (X.hex) when they exist beside the checkout (they are
 * read in place, never copied into the repository); and the durable logs of
 * fuzz_dlog_recover, written by the log itself on the in-memory I/O layer
 * (the copies in tests/fuzz/corpus/fuzz_dlog_recover were made so); and
 * the catalogues of fuzz_catalog_parse, written by fx_catalog on it too
 * (copied likewise into tests/fuzz/corpus/fuzz_catalog_parse).
 * Usage: fx_fuzz_seeds OUT_DIR [VECTORS_DIR]. Single-threaded tool. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "storage/catalog.h"
#include "storage/dlog.h"
#include "storage/format.h"
#include "storage/memio.h"
#include "wire/binary.h"
#include "wire/message.h"

static const char *out_dir;

static int ensure_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    fprintf(stderr, "fx_fuzz_seeds: mkdir %s: %s\n", path, strerror(errno));
    return -1;
}

/* Writes |prefix| (|plen| bytes) + |p| (|n| bytes) as OUT_DIR/|target|/|name|. */
static int write_seed(const char *target, const char *name, const uint8_t *prefix, size_t plen,
                      const uint8_t *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", out_dir, target);
    if (ensure_dir(path) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "fx_fuzz_seeds: %s: %s\n", path, strerror(errno));
        return -1;
    }
    bool ok = fwrite(prefix, 1, plen, f) == plen && fwrite(p, 1, n, f) == n;
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "fx_fuzz_seeds: writing %s failed\n", path);
        return -1;
    }
    return 0;
}

/* A stream for fuzz_frame_decoder: chunking seed 0x5a, full 16 MiB limit. */
static const uint8_t stream_prefix[2] = {0x5a, 0x80};

/* Everything the golden seeds are appended to, for a multi-frame stream seed. */
static uint8_t all[8192];
static size_t all_len;

/* Writes one encoded frame as a body seed for |target| (with |sel| as the
 * selector byte unless |sel| < 0) and as a stream seed. */
static int golden(const char *target, const char *name, int sel, const uint8_t *frame, ssize_t n)
{
    if (n < (ssize_t)FX_WIRE_HEADER_LEN) {
        fprintf(stderr, "fx_fuzz_seeds: encoding %s failed: %s\n", name, fx_strerror((int)n));
        return -1;
    }
    uint8_t s = (uint8_t)sel;
    int rv = write_seed(target, name, &s, sel < 0 ? 0 : 1, frame + FX_WIRE_HEADER_LEN,
                        (size_t)n - FX_WIRE_HEADER_LEN);
    if (rv == 0)
        rv = write_seed("fuzz_frame_decoder", name, stream_prefix, 2, frame, (size_t)n);
    if (rv == 0 && all_len + (size_t)n <= sizeof(all)) {
        memcpy(all + all_len, frame, (size_t)n);
        all_len += (size_t)n;
    }
    return rv;
}

static fx_wire_slice str(const char *s)
{
    return (fx_wire_slice){(const uint8_t *)s, strlen(s)};
}

static int golden_seeds(void)
{
    uint8_t f[512];
    fx_wire_slice hello = str("hello"), ab[2] = {str("a"), str("bc")};
    fx_wire_publish_batch pb = {.tenant = str("t1"),
                                .ns = str("default"),
                                .stream = str("demo"),
                                .count = 1,
                                .payloads = &hello};
    int rv = golden("fuzz_publish_batch", "publish_batch", 0, f,
                    fx_wire_publish_batch_encode(&pb, f, sizeof(f)));
    pb.request_id = 7;
    pb.ack = FX_WIRE_ACK_PER_BATCH;
    rv |= golden("fuzz_publish_batch", "publish_batch_acked", 1, f,
                 fx_wire_publish_batch_encode(&pb, f, sizeof(f)));
    fx_wire_event_batch eb = {
        .shared = true, .has_offsets = true, .base_offset = 5, .count = 2, .payloads = ab};
    rv |= golden("fuzz_event_batch", "shared_offsets", 3, f,
                 fx_wire_event_batch_encode(&eb, f, sizeof(f)));
    eb.has_offsets = false;
    rv |= golden("fuzz_event_batch", "shared", 2, f, fx_wire_event_batch_encode(&eb, f, sizeof(f)));
    eb.shared = false;
    eb.subscription_id = 42;
    rv |=
        golden("fuzz_event_batch", "per_sub", 0, f, fx_wire_event_batch_encode(&eb, f, sizeof(f)));
    eb.has_offsets = true;
    rv |= golden("fuzz_event_batch", "per_sub_offsets", 1, f,
                 fx_wire_event_batch_encode(&eb, f, sizeof(f)));
    fx_wire_publish_ack ack = {.ok = false, .request_id = 9, .message = str("stream not found")};
    rv |= golden("fuzz_publish_ack", "ack_error", -1, f,
                 fx_wire_publish_ack_encode(&ack, f, sizeof(f)));
    ack = (fx_wire_publish_ack){.ok = true, .request_id = 7};
    rv |=
        golden("fuzz_publish_ack", "ack_ok", -1, f, fx_wire_publish_ack_encode(&ack, f, sizeof(f)));
    return rv;
}

/* ---- fuzz_bidi_input: option bytes, then operations (tests/fuzz/fuzz_bidi_input.c) ---- */

typedef struct seedbuf {
    uint8_t p[16384];
    size_t n;
} seedbuf;

static void put(seedbuf *b, const uint8_t *p, size_t n)
{
    if (b->n + n <= sizeof(b->p)) {
        memcpy(b->p + b->n, p, n);
        b->n += n;
    }
}

static void put1(seedbuf *b, uint8_t v)
{
    put(b, &v, 1);
}

/* Data on client bidi stream 4*|stream|, in chunks of at most |chunk| bytes
 * (operation 0, two length bytes). */
static void op_data(seedbuf *b, int stream, const uint8_t *p, size_t n, size_t chunk)
{
    while (n > 0) {
        size_t k = n < chunk ? n : chunk;
        put1(b, (uint8_t)(stream << 4));
        put1(b, (uint8_t)(0x80 | (k >> 8)));
        put1(b, (uint8_t)k);
        put(b, p, k);
        p += k;
        n -= k;
    }
}

/* Appends |m| encoded as a frame to |out|. Returns 0 or -1. */
static int msg_frame(seedbuf *out, const fx_msg *m)
{
    uint8_t *f;
    size_t n;
    if (fx_msg_encode_frame(m, &f, &n) != 0)
        return -1;
    put(out, f, n);
    free(f);
    return 0;
}

static const uint8_t op_run_all = 0x07, op_ack = 0x09, op_turn = 0x0a, op_time = 0x08;

/* The frames of a client session: auth, a JSON publish, an acked JSON
 * publish_batch, a binary batch and an acked binary batch. */
static int publish_frames(seedbuf *f, const char *token)
{
    fx_msg m;
    fx_msg_init_auth(&m, "t1", token, true, 0x3f);
    int rv = msg_frame(f, &m);
    fx_msg_bytes hello = {(const uint8_t *)"hello", 5},
                 two[2] = {{(const uint8_t *)"a", 1}, {(const uint8_t *)"bc", 2}};
    m = (fx_msg){.type = FX_MSG_PUBLISH,
                 .tenant_id = "t1",
                 .ns = "default",
                 .stream = "demo",
                 .payload = hello};
    rv |= msg_frame(f, &m);
    m = (fx_msg){.type = FX_MSG_PUBLISH_BATCH,
                 .tenant_id = "t1",
                 .ns = "default",
                 .stream = "demo",
                 .payloads = two,
                 .n_payloads = 2,
                 .request_id = 3,
                 .has_request_id = true,
                 .ack = FX_WIRE_ACK_PER_BATCH,
                 .has_ack = true};
    rv |= msg_frame(f, &m);
    fx_wire_slice p = {(const uint8_t *)"hello", 5};
    fx_wire_publish_batch pb = {.tenant = str("t1"),
                                .ns = str("default"),
                                .stream = str("demo"),
                                .count = 1,
                                .payloads = &p};
    uint8_t buf[256];
    ssize_t n = fx_wire_publish_batch_encode(&pb, buf, sizeof(buf));
    if (n > 0)
        put(f, buf, (size_t)n);
    pb.request_id = 9;
    pb.ack = FX_WIRE_ACK_PER_BATCH;
    ssize_t k = fx_wire_publish_batch_encode(&pb, buf, sizeof(buf));
    if (k > 0)
        put(f, buf, (size_t)k);
    return rv | (n > 0 && k > 0 ? 0 : -1);
}

static int subscribe_frames(seedbuf *f, const char *stream, fx_msg_start_kind start)
{
    fx_msg m;
    fx_msg_init_auth(&m, "t1", "tok", true, 0x3f);
    int rv = msg_frame(f, &m);
    m = (fx_msg){.type = FX_MSG_SUBSCRIBE,
                 .tenant_id = "t1",
                 .ns = "default",
                 .stream = stream,
                 .start = {start, 0}};
    return rv | msg_frame(f, &m);
}

/* One seed: |opts| then |ops|. */
static int bidi_seed(const char *name, const uint8_t opts[3], const seedbuf *ops)
{
    return write_seed("fuzz_bidi_input", name, opts, 3, ops->p, ops->n);
}

static int bidi_seeds(void)
{
    seedbuf pubs = {0}, sub = {0}, sub_early = {0};
    int rv = publish_frames(&pubs, "tok");
    rv |= subscribe_frames(&sub, "demo", FX_MSG_START_LATEST);
    rv |= subscribe_frames(&sub_early, "demo", FX_MSG_START_EARLIEST);
    static seedbuf ops; /* large: not on the stack */
    /* Publishes alone, whole, with the default budgets. */
    static const uint8_t roomy[3] = {0x00, 0xff, 0x0f};
    ops.n = 0;
    op_data(&ops, 0, pubs.p, pubs.n, 0x7fff);
    put1(&ops, 0x44); /* FIN on stream 0 */
    put1(&ops, op_run_all);
    put1(&ops, op_ack);
    put1(&ops, op_turn);
    rv |= bidi_seed("publish", roomy, &ops);
    /* A subscriber on stream 4, then publishes on stream 0 in 7-byte pieces
     * with tiny budgets and windows: reservation waits, parking, credit. */
    static const uint8_t tight[3] = {0x04, 0x05, 0x01};
    ops.n = 0;
    op_data(&ops, 1, sub.p, sub.n, 0x7fff);
    put1(&ops, 0x14); /* FIN on stream 4 */
    put1(&ops, op_run_all);
    op_data(&ops, 0, pubs.p, pubs.n, 7);
    put1(&ops, op_run_all);
    put1(&ops, op_time);
    put1(&ops, 20);
    put1(&ops, op_ack);
    put1(&ops, op_run_all);
    rv |= bidi_seed("subscribe_publish_tight", tight, &ops);
    /* The same with the defaults, two workers, commit acks and auth. */
    static const uint8_t commit[3] = {0x19, 0xff, 0x0f};
    ops.n = 0;
    op_data(&ops, 1, sub_early.p, sub_early.n, 0x7fff);
    put1(&ops, 0x14);
    op_data(&ops, 0, pubs.p, pubs.n, 0x7fff);
    put1(&ops, op_run_all);
    put1(&ops, op_ack);
    put1(&ops, op_run_all);
    put1(&ops, 0x0b); /* the subscriber resets its event stream */
    put1(&ops, op_turn);
    rv |= bidi_seed("subscribe_publish_commit", commit, &ops);
    /* A refused token, then publishes without auth on another stream. */
    seedbuf bad = {0};
    rv |= publish_frames(&bad, "bad");
    ops.n = 0;
    op_data(&ops, 2, bad.p, bad.n, 64);
    op_data(&ops, 3, pubs.p + 8, pubs.n - 8, 64);
    put1(&ops, op_run_all);
    rv |= bidi_seed("auth_refused", (const uint8_t[3]){0x10, 0xff, 0x0f}, &ops);
    /* Commit acks behind a job queue of one that nobody drains: the acked
     * publishes park (Wait) and time out. */
    ops.n = 0;
    op_data(&ops, 0, pubs.p, pubs.n, 0x7fff);
    for (int i = 0; i < 4; i++) {
        put1(&ops, 0x88); /* 255 x 2 ms */
        put1(&ops, 0xff);
    }
    put1(&ops, op_run_all);
    rv |= bidi_seed("commit_wait_expires", (const uint8_t[3]){0x08, 0xcf, 0x0f}, &ops);
    /* 1920 frames with an unknown flag, each answered with an error, on a
     * connection whose sends are refused (unacked cap of 1 byte): the reply
     * queue fills, reading stops, and resumes once acknowledged. */
    static const uint8_t bad_flags[12] = {'F', 'L', 'X', '1', 0, 1, 0, 0x40, 0, 0, 0, 0};
    ops.n = 0;
    op_data(&ops, 0, pubs.p, FX_WIRE_HEADER_LEN + fx_be32(pubs.p + 8), 0x7fff); /* auth */
    op_data(&ops, 0, bad_flags, sizeof(bad_flags), 0x7fff);
    put1(&ops, 0xfe); /* repeat it 15 x 128 times */
    put1(&ops, op_run_all);
    put1(&ops, op_ack);
    put1(&ops, op_run_all);
    rv |= bidi_seed("reply_flood", (const uint8_t[3]){0x00, 0xff, 0x03}, &ops);
    return rv;
}

/* ---- fuzz_client_events: option bytes, [early chunk], operations ------------------------ */

/* Data on the broker's event stream |k| (operation 0, two length bytes). */
static void op_events(seedbuf *b, int k, const uint8_t *p, size_t n, size_t piece, bool fin)
{
    do {
        size_t m = n < piece ? n : piece;
        bool last = m == n;
        put1(b, (uint8_t)(((k & 3) | (last && fin ? 4 : 0)) << 3));
        put1(b, (uint8_t)(0x80 | (m >> 8)));
        put1(b, (uint8_t)m);
        put(b, p, m);
        p += m;
        n -= m;
    } while (n > 0);
}

/* The hello of subscription |id| and three batches: per subscriber with
 * offsets (base |base|), per subscriber without, shared with offsets. */
static int event_frames(seedbuf *f, uint64_t id, uint64_t base)
{
    fx_msg m;
    fx_msg_init_event_stream_hello(&m, id);
    int rv = msg_frame(f, &m);
    fx_wire_slice ab[3] = {str("a"), str("bc"), str("")};
    fx_wire_event_batch eb = {.subscription_id = id,
                              .has_offsets = true,
                              .base_offset = base,
                              .count = 3,
                              .payloads = ab};
    uint8_t buf[256];
    ssize_t n = fx_wire_event_batch_encode(&eb, buf, sizeof(buf));
    rv |= n > 0 ? 0 : -1;
    if (n > 0)
        put(f, buf, (size_t)n);
    eb.has_offsets = false;
    eb.count = 1;
    n = fx_wire_event_batch_encode(&eb, buf, sizeof(buf));
    rv |= n > 0 ? 0 : -1;
    if (n > 0)
        put(f, buf, (size_t)n);
    eb = (fx_wire_event_batch){
        .shared = true, .has_offsets = true, .base_offset = base + 7, .count = 2, .payloads = ab};
    n = fx_wire_event_batch_encode(&eb, buf, sizeof(buf));
    rv |= n > 0 ? 0 : -1;
    if (n > 0)
        put(f, buf, (size_t)n);
    return rv;
}

static int client_seed(const char *name, uint8_t b0, uint8_t b1, const seedbuf *ops)
{
    const uint8_t opts[2] = {b0, b1};
    return write_seed("fuzz_client_events", name, opts, 2, ops->p, ops->n);
}

static const uint8_t op_consume_all = 0xfc, op_turn_ack = 0x06;

static int client_seeds(void)
{
    seedbuf ev1 = {0}, ev2 = {0};
    int rv = event_frames(&ev1, 1, 5);
    rv |= event_frames(&ev2, 2, 0);
    static seedbuf ops;
    /* next(), drop_new, roomy window: all of it at once, then the FIN. */
    ops.n = 0;
    op_events(&ops, 0, ev1.p, ev1.n, 0x7fff, true);
    put1(&ops, op_consume_all);
    rv |= client_seed("next", 0x00, 0x0f, &ops);
    /* Block, a queue of one batch, a 64-byte window: pieces, reads, turns. */
    ops.n = 0;
    for (int i = 0; i < 3; i++) {
        op_events(&ops, 0, ev1.p, ev1.n, 20, false);
        put1(&ops, op_turn_ack);
        put1(&ops, op_consume_all);
        put1(&ops, op_turn_ack);
    }
    rv |= client_seed("block_small_window", 0x01, 0x00, &ops);
    /* Two subscriptions, the first by callback; their streams interleaved. */
    ops.n = 0;
    op_events(&ops, 1, ev2.p, ev2.n, 30, false);
    op_events(&ops, 0, ev1.p, ev1.n, 30, false);
    put1(&ops, 0xfc | 0x08); /* read subscription 1 */
    put1(&ops, 0x07);        /* unsubscribe 0 */
    rv |= client_seed("callback_two", 0x0c, 0x0e, &ops);
    /* The event stream's hello before `subscribed`, drop_old, earliest. */
    ops.n = 0;
    size_t hello = FX_WIRE_HEADER_LEN + fx_be32(ev1.p + 8);
    put1(&ops, 0x80);
    put1(&ops, (uint8_t)hello);
    put(&ops, ev1.p, hello);
    op_events(&ops, 0, ev1.p + hello, ev1.n - hello, 0x7fff, false);
    put1(&ops, op_consume_all);
    put1(&ops, 0x27); /* the connection is lost */
    rv |= client_seed("early_hello_drop_old", 0x32, 0x0d, &ops);
    /* Start at offset 5, a 4 KiB frame limit, block with two slots. */
    ops.n = 0;
    op_events(&ops, 0, ev1.p, ev1.n, 0x7fff, false);
    put1(&ops, 0x03); /* reset by the broker */
    rv |= client_seed("offset_reset", 0xc1, 0x0d, &ops);
    return rv;
}

/* Reads a hex text file into a new buffer; NULL if unreadable or not hex. */
static uint8_t *read_hex(const char *path, size_t *plen)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *out = malloc(cap);
    int hi = -1, c;
    while (out && (c = fgetc(fp)) != EOF) {
        int v = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (v < 0)
            continue; /* whitespace */
        if (hi < 0) {
            hi = v;
            continue;
        }
        if (n == cap) {
            uint8_t *bigger = realloc(out, cap * 2);
            if (!bigger) {
                free(out);
                out = NULL;
                break;
            }
            out = bigger;
            cap *= 2;
        }
        out[n++] = (uint8_t)(hi << 4 | v);
        hi = -1;
    }
    fclose(fp);
    *plen = n;
    return out;
}

/* Each vector X.hex becomes a stream seed; JSON ones (flags 0) also seed
 * fuzz_message with their body. */
static int vector_seeds(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        printf("fx_fuzz_seeds: no vectors at %s; golden seeds only\n", dir);
        return 0;
    }
    int rv = 0, count = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 5 || strcmp(de->d_name + nl - 4, ".hex") != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        size_t n;
        uint8_t *frame = read_hex(path, &n);
        if (!frame || n < FX_WIRE_HEADER_LEN) {
            fprintf(stderr, "fx_fuzz_seeds: %s is not a hex frame\n", path);
            free(frame);
            rv = -1;
            continue;
        }
        rv |= write_seed("fuzz_frame_decoder", de->d_name, stream_prefix, 2, frame, n);
        if (fx_be16(frame + 6) == 0)
            rv |= write_seed("fuzz_message", de->d_name, (const uint8_t *)"", 0,
                             frame + FX_WIRE_HEADER_LEN, n - FX_WIRE_HEADER_LEN);
        if (all_len + n <= sizeof(all)) {
            memcpy(all + all_len, frame, n);
            all_len += n;
        }
        free(frame);
        count++;
    }
    closedir(d);
    printf("fx_fuzz_seeds: %d vectors from %s\n", count, dir);
    return rv;
}

/* ---- fuzz_dlog_recover ---------------------------------------------------- */

/* A seed of fuzz_dlog_recover under construction: the options byte, then
 * (kind, u16be length, bytes) per file. */
static uint8_t dlog_seed[16384];
static size_t dlog_len;

/* Appends file |id| (.index with |index|) of |m|'s "/s" to dlog_seed,
 * cut to |max| bytes. */
static int dlog_add_file(fx_memio *m, unsigned id, bool index, size_t max)
{
    char path[64];
    snprintf(path, sizeof(path), "/s/%020u.%s", id, index ? "index" : "log");
    char *buf = NULL;
    size_t len = 0;
    if (fx_sio_read_file(fx_memio_sio(m), path, 1 << 16, &buf, &len) != 0)
        return 0; /* no such file */
    len = len < max ? len : max;
    if (len > 0xffff || dlog_len + 3 + len > sizeof(dlog_seed)) {
        free(buf);
        fprintf(stderr, "fx_fuzz_seeds: %s does not fit a seed\n", path);
        return -1;
    }
    dlog_seed[dlog_len++] = (uint8_t)(id | (index ? 8u : 0u));
    dlog_seed[dlog_len++] = (uint8_t)(len >> 8);
    dlog_seed[dlog_len++] = (uint8_t)len;
    memcpy(dlog_seed + dlog_len, buf, len);
    dlog_len += len;
    free(buf);
    return 0;
}

/* Appends the `producers` snapshot of |m|'s "/s" to dlog_seed (kind 0x10). */
static int dlog_add_snapshot(fx_memio *m)
{
    char *buf = NULL;
    size_t len = 0;
    int rv = fx_sio_read_file(fx_memio_sio(m), "/s/" FX_PRODUCERS_SNAPSHOT_NAME, 0xffff, &buf,
                              &len);
    if (rv == 0 && dlog_len + 3 + len <= sizeof(dlog_seed)) {
        dlog_seed[dlog_len++] = 0x10;
        dlog_seed[dlog_len++] = (uint8_t)(len >> 8);
        dlog_seed[dlog_len++] = (uint8_t)len;
        memcpy(dlog_seed + dlog_len, buf, len);
        dlog_len += len;
    } else if (rv == 0) {
        rv = -1;
    }
    free(buf);
    return rv;
}

/* Whether dlog_make writes each record as a one-record producer batch
 * (producer 7, sequence = record number): format v3 segments after an empty
 * v2 one, and a `producers` snapshot. */
static bool dlog_marked;

/* A log of |n| records in segments of 256 bytes, index entries every 64
 * bytes (the options byte 0x00), the last |unsynced| records appended after
 * the last flush; its memio in |*pm|. */
static int dlog_make(fx_memio **pm, int n, int unsynced)
{
    fx_dlog_config c;
    fx_dlog_config_default(&c);
    c.segment_bytes = 256;
    c.index_spacing_bytes = 64;
    if (fx_memio_new(pm) != 0)
        return -1;
    c.io = fx_memio_sio(*pm);
    fx_dlog *log;
    if (fx_dlog_open(&log, "/s", &c, 1, NULL) != 0)
        return -1;
    int rv = 0;
    for (int i = 0; i < n && rv == 0; i++) {
        char p[40];
        int len = snprintf(p, sizeof(p), "record %d of the seed log", i);
        fx_dlog_iov iov = {.data = p, .len = (uint32_t)len};
        fx_dlog_mark m = {.producer_id = 7,
                          .sequence = (uint64_t)i,
                          .count = 1,
                          .digest = fx_producer_digest_step(0, p, (uint32_t)len)};
        rv = dlog_marked ? fx_dlog_append_marked(log, &iov, 1, 1000 + (uint64_t)i, &m, NULL)
                         : fx_dlog_append(log, &iov, 1, 1000 + (uint64_t)i, NULL);
        if (rv == 0 && i == n - unsynced - 1)
            rv = fx_dlog_sync(log, NULL);
    }
    fx_dlog_close(log, false);
    return rv;
}

/* Writes seed |name|: the log of dlog_make(|n|, |unsynced|) with its active
 * segment |active| cut to |cut| bytes (SIZE_MAX: whole), then |zeros| zero
 * bytes over its end (the length kept) and, with |no_point|, the durable
 * point cleared (a segment of the original's). */
static int dlog_seed_write(const char *name, int unsynced, size_t cut, size_t zeros, bool no_point)
{
    fx_memio *m = NULL;
    int rv = dlog_make(&m, 14, unsynced);
    dlog_len = 0;
    dlog_seed[dlog_len++] = 0x00;
    unsigned active = 0;
    char path[64];
    uint64_t flen;
    while (rv == 0 && (snprintf(path, sizeof(path), "/s/%020u.log", active + 1),
                       fx_memio_file_len(m, path, &flen) == 0))
        active++;
    if (rv == 0 && dlog_marked)
        rv = dlog_add_snapshot(m);
    for (unsigned id = 0; rv == 0 && id <= active; id++) {
        rv = dlog_add_file(m, id, true, SIZE_MAX);
        if (rv == 0)
            rv = dlog_add_file(m, id, false, id == active ? cut : SIZE_MAX);
    }
    uint8_t *seg = NULL;
    size_t seg_len = 0;
    if (rv == 0) {
        /* The active segment's file is the seed's last one. */
        size_t at = 1, last = 0;
        while (at + 3 <= dlog_len) {
            size_t l = (size_t)dlog_seed[at + 1] << 8 | dlog_seed[at + 2];
            last = at;
            at += 3 + l;
        }
        seg = dlog_seed + last + 3;
        seg_len = (size_t)dlog_seed[last + 1] << 8 | dlog_seed[last + 2];
    }
    if (seg != NULL && zeros > 0)
        memset(seg + (seg_len > zeros ? seg_len - zeros : 0), 0, zeros < seg_len ? zeros : seg_len);
    if (seg != NULL && no_point && seg_len >= FX_SEG_HEADER_LEN)
        memset(seg + FX_SEG_POINT_POS, 0, 4);
    fx_memio_free(m);
    if (rv != 0) {
        fprintf(stderr, "fx_fuzz_seeds: building the log of %s failed\n", name);
        return -1;
    }
    return write_seed("fuzz_dlog_recover", name, dlog_seed, 1, dlog_seed + 1, dlog_len - 1);
}

static int dlog_seeds(void)
{
    int rv = dlog_seed_write("clean", 0, SIZE_MAX, 0, false);
    rv |= dlog_seed_write("torn_tail", 3, 100, 0, false);
    rv |= dlog_seed_write("zeroed_unsynced_tail", 3, SIZE_MAX, 40, false);
    rv |= dlog_seed_write("original_zero_tail", 3, SIZE_MAX, 40, true);
    rv |= dlog_seed_write("damage_before_point", 0, SIZE_MAX, 20, false);
    dlog_marked = true;
    rv |= dlog_seed_write("marked_clean", 0, SIZE_MAX, 0, false);
    rv |= dlog_seed_write("marked_torn_tail", 3, 100, 0, false);
    dlog_marked = false;
    return rv;
}

/* ---- fuzz_catalog_parse ---------------------------------------------------- */

/* The options byte of fuzz_catalog_parse (see its header). */
enum {
    CAT_DIR_A = 1,
    CAT_DIR_B = 2,
    CAT_DIR_A_G3 = 4,
    CAT_NO_FILE = 32,
    CAT_FAIL_RENAME = 64,
};

static const fx_catalog_params cat_params = {
    .created_us = 1700000000000000ull, .segment_bytes = 1 << 20, .index_spacing_bytes = 4096};

/* Writes seed |name|: |opts|, then the catalog.json |c| wrote in |m|. */
static int cat_seed_write(const char *name, uint8_t opts, fx_memio *m)
{
    char *text = NULL;
    size_t len = 0;
    int rv = fx_sio_read_file(fx_memio_sio(m), "/r/" FX_CATALOG_FILE, 1 << 20, &text, &len);
    if (rv == 0)
        rv = write_seed("fuzz_catalog_parse", name, &opts, 1, (const uint8_t *)text, len);
    else
        fprintf(stderr, "fx_fuzz_seeds: reading the catalogue of %s failed\n", name);
    free(text);
    return rv == 0 ? 0 : -1;
}

/* Declares t1/default/|stream| in |c|; with |dir|, creates its directory
 * as its log would. Returns its generation, 0 on failure. */
static uint64_t cat_declare(fx_catalog *c, fx_memio *m, const char *stream, bool dir)
{
    const fx_catalog_entry *e;
    if (fx_catalog_declare(c, "t1", "default", stream, &cat_params, NULL, &e) != 0)
        return 0;
    char path[FX_CATALOG_DIR_MAX + 8];
    if (dir && (fx_catalog_dir_path(c, e, path, sizeof(path)) != 0 ||
                fx_sio_mkdirs(fx_memio_sio(m), path) != 0))
        return 0;
    return e->generation;
}

/* Live entries with generations and a retention override; a deletion left
 * marked (its directory still there); a stream declared again meanwhile
 * (".g3"); an entry written before generations. */
static int catalog_seeds(void)
{
    fx_memio *m = NULL;
    fx_catalog *c = NULL;
    if (fx_memio_new(&m) != 0 || fx_catalog_open(&c, fx_memio_sio(m), "/r", NULL, 0) != 0) {
        fprintf(stderr, "fx_fuzz_seeds: opening a catalogue on the in-memory layer failed\n");
        fx_memio_free(m);
        return -1;
    }
    int rv = cat_seed_write("empty", 0, m);
    rv |= cat_seed_write("missing_beside_a_directory", CAT_NO_FILE | CAT_DIR_A, m);
    uint64_t a = cat_declare(c, m, "a", true);
    rv |= a != 0 && cat_declare(c, m, "b", true) != 0 ? 0 : -1;
    rv |= fx_catalog_set_retention(c, "t1", "default", "b", 4096, 600);
    rv |= cat_seed_write("generations", CAT_DIR_A | CAT_DIR_B, m);
    rv |= cat_seed_write("generations_failing_write", CAT_DIR_A | CAT_FAIL_RENAME, m);
    rv |= fx_catalog_begin_delete(c, a);
    rv |= cat_seed_write("deleting", CAT_DIR_A | CAT_DIR_B, m);
    rv |= cat_declare(c, m, "a", true) != 0 ? 0 : -1;
    rv |= cat_seed_write("suffixed_while_deleting", CAT_DIR_A | CAT_DIR_A_G3 | CAT_DIR_B, m);
    fx_catalog_free(c);
    fx_memio_free(m);
    static const char legacy[] =
        "{\"format\": 1, \"streams\": [{\"tenant\": \"t1\", \"namespace\": \"default\", "
        "\"stream\": \"a\", \"shard\": 0, \"dir\": \"t1_default_a_0-305dfd27ad47ed50\", "
        "\"created_at_us\": 1, \"segment_bytes\": 1048576, \"index_spacing_bytes\": 4096}]}\n";
    static const char near_bound[] =
        "{\"format\": 1, \"streams\": [], \"next_generation\": 4611686018427387900}\n";
    uint8_t opts = CAT_DIR_A;
    rv |= write_seed("fuzz_catalog_parse", "before_generations", &opts, 1, (const uint8_t *)legacy,
                     sizeof(legacy) - 1);
    rv |= write_seed("fuzz_catalog_parse", "generations_near_the_bound", &opts, 1,
                     (const uint8_t *)near_bound, sizeof(near_bound) - 1);
    if (rv != 0)
        fprintf(stderr, "fx_fuzz_seeds: building the catalogue seeds failed\n");
    return rv;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s OUT_DIR [VECTORS_DIR]\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];
    if (ensure_dir(out_dir) < 0)
        return 1;
    int rv = golden_seeds();
    rv |= bidi_seeds();
    rv |= client_seeds();
    rv |= dlog_seeds();
    rv |= catalog_seeds();
    if (argc == 3)
        rv |= vector_seeds(argv[2]);
    rv |= write_seed("fuzz_frame_decoder", "all_frames", stream_prefix, 2, all, all_len);
    return rv == 0 ? 0 : 1;
}
