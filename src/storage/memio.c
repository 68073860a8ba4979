/* In-memory fx_sio with a durable and a volatile image of every file and of
 * the name space, error injection and power-cut simulation (see memio.h).
 * Files are "inodes" that live until the fx_memio is freed; names map paths
 * to inodes. Small and linear on purpose: tests hold tens of files.
 * Threads: every call takes |mu| for its whole length (the vtable entries
 * below are thin wrappers around the m_* bodies, which assume it held), but
 * fdatasync, which drops it while a test holds the flush, so that a storage
 * thread can go on appending while another thread's flush is in flight. */
#include "storage/memio.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"

/* By default a page the file system writes back as a unit, and a sector the
 * device writes whole or not at all (fx_memio_set_tear_unit). */
#define TEAR_BLOCK 4096u
#define TEAR_SECTOR 512u

typedef struct image {
    uint8_t *p;
    size_t len;
    size_t cap;
} image;

typedef struct inode {
    image cur;
    image dur;
    uint64_t reserved;
    bool is_dir;
} inode;

typedef struct name {
    char *path;
    int ino;
} name;

typedef struct names {
    name *v;
    size_t n;
    size_t cap;
} names;

struct fx_memio {
    fx_sio base;
    inode *inodes;
    size_t ninodes;
    size_t inodes_cap;
    names cur;
    names dur;
    int *handles; /* handle -> inode, -1 when free */
    size_t nhandles;
    uint64_t calls;
    uint64_t op_calls[FX_MEMIO_NOPS]; /* of each kind, failed ones included */
    uint64_t crash_at;                /* UINT64_MAX: never */
    bool down;
    uint64_t capacity;
    int fail_err[FX_MEMIO_NOPS];
    unsigned fail_count[FX_MEMIO_NOPS];
    char fail_suffix[64]; /* injected failures only for paths ending so; "" all */
    size_t tear_block;    /* appended bytes persist per block of this size */
    size_t tear_sector;   /* overwritten bytes persist per sector of this size */
    uint64_t epoch;       /* power cuts so far: a flush begun before one has no effect */
    pthread_mutex_t mu;   /* every field above, and the images */
    /* fx_memio_hold_next_sync (any thread; never taken with |mu| held). */
    pthread_mutex_t hold_mu;
    pthread_cond_t hold_cv;
    bool hold_armed, held;
    int held_rv; /* what the held sync returns once released (0: it takes effect) */
};

/* ---- images and names ---------------------------------------------------- */

static int image_reserve(image *im, size_t len)
{
    if (len <= im->cap)
        return 0;
    uint8_t *p = fx_grow(im->p, &im->cap, len, 1, 256);
    if (p == NULL)
        return -ENOMEM;
    im->p = p;
    return 0;
}

static int image_copy(image *dst, const image *src, size_t len)
{
    int rv = image_reserve(dst, len);
    if (rv != 0)
        return rv;
    if (len > 0)
        memcpy(dst->p, src->p, len);
    dst->len = len;
    return 0;
}

static int names_find(const names *ns, const char *path)
{
    for (size_t i = 0; i < ns->n; i++) {
        if (strcmp(ns->v[i].path, path) == 0)
            return (int)i;
    }
    return -1;
}

static int names_put(names *ns, const char *path, int ino)
{
    int i = names_find(ns, path);
    if (i >= 0) {
        ns->v[i].ino = ino;
        return 0;
    }
    name *v = fx_grow(ns->v, &ns->cap, ns->n + 1, sizeof(*v), 16);
    if (v == NULL)
        return -ENOMEM;
    ns->v = v;
    char *p = strdup(path);
    if (p == NULL)
        return -ENOMEM;
    ns->v[ns->n++] = (name){.path = p, .ino = ino};
    return 0;
}

static void names_del_at(names *ns, size_t i)
{
    free(ns->v[i].path);
    ns->v[i] = ns->v[--ns->n];
}

static void names_clear(names *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free(ns->v[i].path);
    ns->n = 0;
}

/* Whether |path|'s parent directory is exactly |dir|. */
static bool is_child(const char *path, const char *dir)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return false;
    size_t plen = (size_t)(slash - path);
    if (plen == 0)
        return strcmp(dir, "/") == 0;
    return strlen(dir) == plen && strncmp(path, dir, plen) == 0;
}

static int lookup(const fx_memio *m, const char *path)
{
    int i = names_find(&m->cur, path);
    return i < 0 ? -1 : m->cur.v[i].ino;
}

static bool parent_exists(const fx_memio *m, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL || slash == path)
        return true;
    char dir[4096];
    size_t n = (size_t)(slash - path);
    if (n >= sizeof(dir))
        return false;
    memcpy(dir, path, n);
    dir[n] = '\0';
    int ino = lookup(m, dir);
    return ino >= 0 && m->inodes[ino].is_dir;
}

static int inode_new(fx_memio *m, bool is_dir)
{
    inode *v = fx_grow(m->inodes, &m->inodes_cap, m->ninodes + 1, sizeof(*v), 16);
    if (v == NULL)
        return -ENOMEM;
    m->inodes = v;
    m->inodes[m->ninodes] = (inode){.is_dir = is_dir};
    return (int)m->ninodes++;
}

/* ---- fault gate --------------------------------------------------------- */

static bool path_matches(const fx_memio *m, const char *path)
{
    size_t n = strlen(m->fail_suffix), l = path != NULL ? strlen(path) : 0;
    return n == 0 || (l >= n && strcmp(path + l - n, m->fail_suffix) == 0);
}

/* The current name of handle |fd|'s file, or NULL. */
static const char *fd_path(const fx_memio *m, int fd)
{
    if (fd < 0 || (size_t)fd >= m->nhandles || m->handles[fd] < 0)
        return NULL;
    for (size_t i = 0; i < m->cur.n; i++) {
        if (m->cur.v[i].ino == m->handles[fd])
            return m->cur.v[i].path;
    }
    return NULL;
}

/* Counts a call on |path| and decides whether it fails: returns 0 to go on. */
static int gate_path(fx_memio *m, fx_memio_op op, const char *path)
{
    if (m->down)
        return -EIO;
    if (m->calls >= m->crash_at) {
        m->down = true;
        return -EIO;
    }
    m->calls++;
    if (op < FX_MEMIO_NOPS)
        m->op_calls[op]++;
    if (op < FX_MEMIO_NOPS && m->fail_count[op] > 0 && path_matches(m, path)) {
        m->fail_count[op]--;
        return m->fail_err[op];
    }
    return 0;
}

static int gate(fx_memio *m, fx_memio_op op)
{
    return gate_path(m, op, NULL);
}

static int gate_fd(fx_memio *m, fx_memio_op op, int fd)
{
    return gate_path(m, op, fd_path(m, fd));
}

static int handle_ino(const fx_memio *m, int fd)
{
    if (fd < 0 || (size_t)fd >= m->nhandles)
        return -1;
    return m->handles[fd];
}

/* Counts call |op| on handle |fd| and resolves the handle: 0 and *|pin| set to
 * go on, else the injected error or -EBADF. */
static int gate_inode(fx_memio *m, fx_memio_op op, int fd, inode **pin)
{
    int rv = gate_fd(m, op, fd);
    if (rv != 0)
        return rv;
    int ino = handle_ino(m, fd);
    if (ino < 0)
        return -EBADF;
    *pin = &m->inodes[ino];
    return 0;
}

/* The bytes |in| holds: its length or its fallocate reservation. */
static uint64_t inode_held(const inode *in)
{
    return in->cur.len > in->reserved ? in->cur.len : in->reserved;
}

static uint64_t used_of(const fx_memio *m)
{
    uint64_t used = 0;
    for (size_t i = 0; i < m->cur.n; i++) {
        const inode *in = &m->inodes[m->cur.v[i].ino];
        used += inode_held(in);
    }
    return used;
}

/* ---- fx_sio operations --------------------------------------------------- */

static int m_open(fx_sio *io, const char *path, fx_sio_mode mode, int *pfd)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate_path(m, FX_MEMIO_OPEN, path);
    if (rv != 0)
        return rv;
    int ino = lookup(m, path);
    if (mode == FX_SIO_CREATE) {
        if (ino >= 0)
            return -EEXIST;
        if (!parent_exists(m, path))
            return -ENOENT;
        if ((ino = inode_new(m, false)) < 0 || (rv = names_put(&m->cur, path, ino)) != 0)
            return -ENOMEM;
    } else if (ino < 0) {
        return -ENOENT;
    } else if (m->inodes[ino].is_dir) {
        return -EISDIR;
    }
    size_t h = 0;
    while (h < m->nhandles && m->handles[h] >= 0)
        h++;
    if (h == m->nhandles) {
        int *v = realloc(m->handles, (m->nhandles + 8) * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        m->handles = v;
        for (size_t i = m->nhandles; i < m->nhandles + 8; i++)
            m->handles[i] = -1;
        m->nhandles += 8;
    }
    m->handles[h] = ino;
    *pfd = (int)h;
    return 0;
}

static int m_close(fx_sio *io, int fd)
{
    fx_memio *m = (fx_memio *)io;
    if (handle_ino(m, fd) < 0)
        return -EBADF;
    m->handles[fd] = -1;
    return 0;
}

static int m_pwrite(fx_sio *io, int fd, const void *buf, size_t n, uint64_t off)
{
    fx_memio *m = (fx_memio *)io;
    inode *in = NULL;
    int rv = gate_inode(m, FX_MEMIO_PWRITE, fd, &in);
    if (rv != 0)
        return rv;
    size_t fit = n;
    if (m->capacity > 0) {
        uint64_t used = used_of(m);
        uint64_t held = inode_held(in);
        uint64_t room = m->capacity > used ? m->capacity - used : 0;
        uint64_t max_end = held + room;
        if (off + n > max_end)
            fit = off >= max_end ? 0 : (size_t)(max_end - off);
    }
    if (fit > 0) {
        size_t end = (size_t)off + fit;
        if (image_reserve(&in->cur, end) != 0)
            return -ENOMEM;
        if (off > in->cur.len)
            memset(in->cur.p + in->cur.len, 0, (size_t)off - in->cur.len);
        memcpy(in->cur.p + off, buf, fit);
        if (end > in->cur.len)
            in->cur.len = end;
    }
    return fit == n ? 0 : -ENOSPC;
}

static ssize_t m_pread(fx_sio *io, int fd, void *buf, size_t n, uint64_t off)
{
    fx_memio *m = (fx_memio *)io;
    inode *in = NULL;
    int rv = gate_inode(m, FX_MEMIO_PREAD, fd, &in);
    if (rv != 0)
        return rv;
    const image *im = &in->cur;
    if (off >= im->len)
        return 0;
    size_t k = im->len - (size_t)off < n ? im->len - (size_t)off : n;
    memcpy(buf, im->p + off, k);
    return (ssize_t)k;
}

/* Waits here while a test holds this sync (fx_memio_hold_next_sync);
 * returns the result the release gave it. */
static int hold_point(fx_memio *m)
{
    int rv = 0;
    pthread_mutex_lock(&m->hold_mu);
    if (m->hold_armed) {
        m->hold_armed = false;
        m->held = true;
        pthread_cond_broadcast(&m->hold_cv);
        while (m->held)
            pthread_cond_wait(&m->hold_cv, &m->hold_mu);
        rv = m->held_rv;
        m->held_rv = 0;
    }
    pthread_mutex_unlock(&m->hold_mu);
    return rv;
}

/* A flush makes durable what was written before it began (a snapshot taken
 * then), not what is written while it runs: a real fdatasync may also catch
 * those bytes, but nothing may count on it, and the snapshot lets a test see
 * a claim that does. |mu| is dropped while a test holds the flush. */
static int m_fdatasync(fx_sio *io, int fd)
{
    fx_memio *m = (fx_memio *)io;
    inode *in = NULL;
    pthread_mutex_lock(&m->mu);
    int rv = gate_inode(m, FX_MEMIO_FDATASYNC, fd, &in);
    image snap = {0};
    int ino = handle_ino(m, fd);
    uint64_t epoch = m->epoch;
    if (rv == 0)
        rv = image_copy(&snap, &in->cur, in->cur.len);
    pthread_mutex_unlock(&m->mu);
    if (rv != 0) {
        free(snap.p);
        return rv;
    }
    rv = hold_point(m);
    pthread_mutex_lock(&m->mu);
    if (m->epoch != epoch) {
        rv = -EIO; /* the power was cut meanwhile: this process is gone */
    } else if (rv == 0) {
        in = &m->inodes[ino]; /* the array may have moved */
        free(in->dur.p);
        in->dur = snap;
        snap = (image){0};
    }
    pthread_mutex_unlock(&m->mu);
    free(snap.p);
    return rv;
}

static int m_fallocate(fx_sio *io, int fd, uint64_t len)
{
    fx_memio *m = (fx_memio *)io;
    inode *in = NULL;
    int rv = gate_inode(m, FX_MEMIO_FALLOCATE, fd, &in);
    if (rv != 0)
        return rv;
    uint64_t held = inode_held(in);
    if (len <= held)
        return 0;
    if (m->capacity > 0 && used_of(m) + (len - held) > m->capacity)
        return -ENOSPC;
    in->reserved = len;
    return 0;
}

static int m_ftruncate(fx_sio *io, int fd, uint64_t len)
{
    fx_memio *m = (fx_memio *)io;
    inode *in = NULL;
    int rv = gate_inode(m, FX_MEMIO_FTRUNCATE, fd, &in);
    if (rv != 0)
        return rv;
    if (image_reserve(&in->cur, (size_t)len) != 0)
        return -ENOMEM;
    if (len > in->cur.len)
        memset(in->cur.p + in->cur.len, 0, (size_t)len - in->cur.len);
    in->cur.len = (size_t)len;
    /* Linux drops the KEEP_SIZE reservation beyond the new size. */
    if (in->reserved > len)
        in->reserved = len;
    return 0;
}

static int m_fsize(fx_sio *io, int fd, uint64_t *psize)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate(m, FX_MEMIO_NOPS);
    if (rv != 0)
        return rv;
    int ino = handle_ino(m, fd);
    if (ino < 0)
        return -EBADF;
    *psize = m->inodes[ino].cur.len;
    return 0;
}

/* Renames |from| (and, for a directory, every path under it) to |to| in |ns|. */
static int rename_in(names *ns, const char *from, const char *to)
{
    size_t flen = strlen(from);
    for (size_t i = 0; i < ns->n; i++) {
        const char *p = ns->v[i].path;
        if (strncmp(p, from, flen) != 0 || (p[flen] != '\0' && p[flen] != '/'))
            continue;
        size_t nlen = strlen(to) + strlen(p + flen) + 1;
        char *np = malloc(nlen);
        if (np == NULL)
            return -ENOMEM;
        memcpy(np, to, strlen(to));
        memcpy(np + strlen(to), p + flen, strlen(p + flen) + 1);
        free(ns->v[i].path);
        ns->v[i].path = np;
    }
    return 0;
}

static int m_rename(fx_sio *io, const char *from, const char *to)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate_path(m, FX_MEMIO_RENAME, from);
    if (rv != 0)
        return rv;
    int ino = lookup(m, from);
    if (ino < 0)
        return -ENOENT;
    if (!parent_exists(m, to))
        return -ENOENT;
    int old = names_find(&m->cur, to);
    if (old >= 0)
        names_del_at(&m->cur, (size_t)old);
    if (!m->inodes[ino].is_dir) {
        size_t i = (size_t)names_find(&m->cur, from);
        free(m->cur.v[i].path);
        if ((m->cur.v[i].path = strdup(to)) == NULL)
            return -ENOMEM;
        return 0;
    }
    if ((rv = rename_in(&m->cur, from, to)) != 0)
        return rv;
    return rename_in(&m->dur, from, to); /* directory renames are durable at once */
}

static int m_unlink(fx_sio *io, const char *path)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate_path(m, FX_MEMIO_UNLINK, path);
    if (rv != 0)
        return rv;
    int i = names_find(&m->cur, path);
    if (i < 0)
        return -ENOENT;
    if (m->inodes[m->cur.v[i].ino].is_dir)
        return -EISDIR;
    names_del_at(&m->cur, (size_t)i);
    return 0;
}

static int m_mkdir(fx_sio *io, const char *path)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate(m, FX_MEMIO_NOPS);
    if (rv != 0)
        return rv;
    if (strcmp(path, "/") == 0 || lookup(m, path) >= 0)
        return -EEXIST;
    if (!parent_exists(m, path))
        return -ENOENT;
    int ino = inode_new(m, true);
    if (ino < 0)
        return ino;
    return names_put(&m->cur, path, ino);
}

static int m_rmdir(fx_sio *io, const char *path)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate(m, FX_MEMIO_NOPS);
    if (rv != 0)
        return rv;
    int i = names_find(&m->cur, path);
    if (i < 0)
        return -ENOENT;
    if (!m->inodes[m->cur.v[i].ino].is_dir)
        return -ENOTDIR;
    for (size_t k = 0; k < m->cur.n; k++) {
        if (is_child(m->cur.v[k].path, path))
            return -ENOTEMPTY;
    }
    names_del_at(&m->cur, (size_t)i);
    return 0;
}

static int m_sync_dir(fx_sio *io, const char *path)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate_path(m, FX_MEMIO_SYNC_DIR, path);
    if (rv != 0)
        return rv;
    if (strcmp(path, "/") != 0 && lookup(m, path) < 0)
        return -ENOENT;
    for (size_t i = 0; i < m->dur.n;) {
        if (is_child(m->dur.v[i].path, path))
            names_del_at(&m->dur, i);
        else
            i++;
    }
    for (size_t i = 0; i < m->cur.n; i++) {
        if (is_child(m->cur.v[i].path, path) &&
            (rv = names_put(&m->dur, m->cur.v[i].path, m->cur.v[i].ino)) != 0)
            return rv;
    }
    return 0;
}

/* Takes |mu| for the snapshot only: the callback may call this layer again. */
static int m_list(fx_sio *io, const char *path, fx_sio_list_cb cb, void *user)
{
    fx_memio *m = (fx_memio *)io;
    pthread_mutex_lock(&m->mu);
    int rv = gate(m, FX_MEMIO_NOPS);
    if (rv == 0 && strcmp(path, "/") != 0 && lookup(m, path) < 0)
        rv = -ENOENT;
    size_t n = 0;
    char **v = NULL;
    bool *dirs = NULL;
    if (rv == 0) {
        v = calloc(m->cur.n + 1, sizeof(*v));
        dirs = calloc(m->cur.n + 1, sizeof(*dirs));
        if (v == NULL || dirs == NULL)
            rv = -ENOMEM;
    }
    for (size_t i = 0; rv == 0 && i < m->cur.n; i++) {
        if (is_child(m->cur.v[i].path, path)) {
            dirs[n] = m->inodes[m->cur.v[i].ino].is_dir;
            v[n++] = strdup(strrchr(m->cur.v[i].path, '/') + 1);
        }
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < n; i++) {
        if (rv == 0)
            rv = v[i] != NULL ? cb(user, v[i], dirs[i]) : -ENOMEM;
        free(v[i]);
    }
    free(v);
    free(dirs);
    return rv;
}

static int m_stat(fx_sio *io, const char *path, bool *pis_dir)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate(m, FX_MEMIO_NOPS);
    if (rv != 0)
        return rv;
    if (strcmp(path, "/") == 0) {
        *pis_dir = true;
        return 0;
    }
    int ino = lookup(m, path);
    if (ino < 0)
        return -ENOENT;
    *pis_dir = m->inodes[ino].is_dir;
    return 0;
}

/* Removes |path| and, for a directory, everything under it, depth first,
 * through the counted (and failing) unlink and rmdir, as the POSIX layer
 * does it. */
static int m_remove_tree(fx_sio *io, const char *path)
{
    fx_memio *m = (fx_memio *)io;
    int rv = gate(m, FX_MEMIO_NOPS);
    if (rv != 0)
        return rv;
    int ino = strcmp(path, "/") == 0 ? -1 : lookup(m, path);
    if (ino < 0)
        return strcmp(path, "/") == 0 ? -EBUSY : -ENOENT;
    if (!m->inodes[ino].is_dir)
        return m_unlink(io, path);
    size_t n = 0;
    char **kids = calloc(m->cur.n + 1, sizeof(*kids));
    if (kids == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < m->cur.n; i++) {
        if (is_child(m->cur.v[i].path, path) && (kids[n++] = strdup(m->cur.v[i].path)) == NULL)
            rv = -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (rv == 0 && (rv = m_remove_tree(io, kids[i])) == -ENOENT)
            rv = 0;
        free(kids[i]);
    }
    free(kids);
    return rv != 0 ? rv : m_rmdir(io, path);
}

/* ---- the vtable: each call under |mu| ------------------------------------- */

#define LOCKED_AS(type, m, call)                                                                   \
    do {                                                                                           \
        pthread_mutex_lock(&(m)->mu);                                                              \
        type rv_ = (call);                                                                         \
        pthread_mutex_unlock(&(m)->mu);                                                            \
        return rv_;                                                                                \
    } while (0)
#define LOCKED(m, call) LOCKED_AS(int, m, call)

static int l_open(fx_sio *io, const char *path, fx_sio_mode mode, int *pfd)
{
    LOCKED((fx_memio *)io, m_open(io, path, mode, pfd));
}

static int l_close(fx_sio *io, int fd)
{
    LOCKED((fx_memio *)io, m_close(io, fd));
}

static int l_pwrite(fx_sio *io, int fd, const void *buf, size_t n, uint64_t off)
{
    LOCKED((fx_memio *)io, m_pwrite(io, fd, buf, n, off));
}

static ssize_t l_pread(fx_sio *io, int fd, void *buf, size_t n, uint64_t off)
{
    LOCKED_AS(ssize_t, (fx_memio *)io, m_pread(io, fd, buf, n, off));
}

static int l_fallocate(fx_sio *io, int fd, uint64_t len)
{
    LOCKED((fx_memio *)io, m_fallocate(io, fd, len));
}

static int l_ftruncate(fx_sio *io, int fd, uint64_t len)
{
    LOCKED((fx_memio *)io, m_ftruncate(io, fd, len));
}

static int l_fsize(fx_sio *io, int fd, uint64_t *psize)
{
    LOCKED((fx_memio *)io, m_fsize(io, fd, psize));
}

static int l_rename(fx_sio *io, const char *from, const char *to)
{
    LOCKED((fx_memio *)io, m_rename(io, from, to));
}

static int l_unlink(fx_sio *io, const char *path)
{
    LOCKED((fx_memio *)io, m_unlink(io, path));
}

static int l_mkdir(fx_sio *io, const char *path)
{
    LOCKED((fx_memio *)io, m_mkdir(io, path));
}

static int l_rmdir(fx_sio *io, const char *path)
{
    LOCKED((fx_memio *)io, m_rmdir(io, path));
}

static int l_sync_dir(fx_sio *io, const char *path)
{
    LOCKED((fx_memio *)io, m_sync_dir(io, path));
}

/* m_list takes |mu| itself: its callback may call back into this layer. */
static int l_list(fx_sio *io, const char *path, fx_sio_list_cb cb, void *user)
{
    return m_list(io, path, cb, user);
}

static int l_stat(fx_sio *io, const char *path, bool *pis_dir)
{
    LOCKED((fx_memio *)io, m_stat(io, path, pis_dir));
}

static int l_remove_tree(fx_sio *io, const char *path)
{
    LOCKED((fx_memio *)io, m_remove_tree(io, path));
}

static const fx_sio_ops MEM_OPS = {
    .open = l_open,
    .close = l_close,
    .pwrite = l_pwrite,
    .pread = l_pread,
    .fdatasync = m_fdatasync,
    .fallocate = l_fallocate,
    .ftruncate = l_ftruncate,
    .fsize = l_fsize,
    .rename = l_rename,
    .unlink = l_unlink,
    .mkdir = l_mkdir,
    .rmdir = l_rmdir,
    .sync_dir = l_sync_dir,
    .list = l_list,
    .stat = l_stat,
    .remove_tree = l_remove_tree,
};

/* ---- public ------------------------------------------------------------- */

int fx_memio_new(fx_memio **pm)
{
    fx_memio *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->base.ops = &MEM_OPS;
    m->crash_at = UINT64_MAX;
    m->tear_block = TEAR_BLOCK;
    m->tear_sector = TEAR_SECTOR;
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->hold_mu, NULL);
    pthread_cond_init(&m->hold_cv, NULL);
    *pm = m;
    return 0;
}

void fx_memio_free(fx_memio *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->ninodes; i++) {
        free(m->inodes[i].cur.p);
        free(m->inodes[i].dur.p);
    }
    free(m->inodes);
    pthread_cond_destroy(&m->hold_cv);
    pthread_mutex_destroy(&m->hold_mu);
    pthread_mutex_destroy(&m->mu);
    names_clear(&m->cur);
    names_clear(&m->dur);
    free(m->cur.v);
    free(m->dur.v);
    free(m->handles);
    free(m);
}

fx_sio *fx_memio_sio(fx_memio *m)
{
    return &m->base;
}

void fx_memio_fail(fx_memio *m, fx_memio_op op, int neg_errno, unsigned count)
{
    pthread_mutex_lock(&m->mu);
    m->fail_err[op] = neg_errno;
    m->fail_count[op] = count;
    pthread_mutex_unlock(&m->mu);
}

void fx_memio_fail_only(fx_memio *m, const char *suffix)
{
    pthread_mutex_lock(&m->mu);
    snprintf(m->fail_suffix, sizeof(m->fail_suffix), "%s", suffix != NULL ? suffix : "");
    pthread_mutex_unlock(&m->mu);
}

void fx_memio_set_capacity(fx_memio *m, uint64_t bytes)
{
    pthread_mutex_lock(&m->mu);
    m->capacity = bytes;
    pthread_mutex_unlock(&m->mu);
}

void fx_memio_crash_after(fx_memio *m, uint64_t n)
{
    pthread_mutex_lock(&m->mu);
    m->crash_at = m->calls + n;
    pthread_mutex_unlock(&m->mu);
}

/* The getters read under |mu| (cast away: a lock is not a change). */
#define GET(m, expr)                                                                               \
    do {                                                                                           \
        pthread_mutex_t *mu_ = (pthread_mutex_t *)&(m)->mu;                                        \
        pthread_mutex_lock(mu_);                                                                   \
        uint64_t v_ = (uint64_t)(expr);                                                            \
        pthread_mutex_unlock(mu_);                                                                 \
        return v_;                                                                                 \
    } while (0)

uint64_t fx_memio_used(const fx_memio *m)
{
    GET(m, used_of(m));
}

bool fx_memio_is_down(const fx_memio *m)
{
    GET(m, m->down);
}

uint64_t fx_memio_calls(const fx_memio *m)
{
    GET(m, m->calls);
}

void fx_memio_hold_next_sync(fx_memio *m)
{
    pthread_mutex_lock(&m->hold_mu);
    m->hold_armed = true;
    m->held_rv = 0;
    pthread_mutex_unlock(&m->hold_mu);
}

void fx_memio_wait_held(fx_memio *m)
{
    pthread_mutex_lock(&m->hold_mu);
    while (!m->held)
        pthread_cond_wait(&m->hold_cv, &m->hold_mu);
    pthread_mutex_unlock(&m->hold_mu);
}

void fx_memio_release(fx_memio *m)
{
    fx_memio_release_failing(m, 0);
}

void fx_memio_release_failing(fx_memio *m, int neg_errno)
{
    pthread_mutex_lock(&m->hold_mu);
    m->hold_armed = false;
    m->held = false;
    m->held_rv = neg_errno;
    pthread_cond_broadcast(&m->hold_cv);
    pthread_mutex_unlock(&m->hold_mu);
}

uint64_t fx_memio_op_calls(const fx_memio *m, fx_memio_op op)
{
    GET(m, op < FX_MEMIO_NOPS ? m->op_calls[op] : 0);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* What of a file's unsynced contents one power cut leaves (memio.h). */
typedef struct tear {
    fx_memio_tear model;
    size_t block, sector;
    uint64_t *seed;
    size_t keep;        /* block |i| of the unsynced range persists if keep > i ... */
    size_t hole;        /* ... but not this one (SIZE_MAX: none); ZERO_BLOCKS */
    size_t first_block; /* index of the first block holding appended bytes */
} tear;

/* The length the file has after the cut: a truncation or an extension not
 * yet synced reaches the disk or not (the prefix and reorder models also
 * keep any length in between for an extension). */
static size_t torn_len(const inode *in, tear *t)
{
    size_t d = in->dur.len, c = in->cur.len;
    if (c < d)
        return splitmix(t->seed) & 1 ? c : d;
    if (t->model == FX_MEMIO_TEAR_ZERO_BLOCKS)
        return c;
    return d + (size_t)(splitmix(t->seed) % (c - d + 1));
}

/* Whether the unsynced appended block |b| (absolute block index) reached the
 * disk. */
static bool block_persists(tear *t, size_t b)
{
    size_t i = b - t->first_block;
    switch (t->model) {
    case FX_MEMIO_TEAR_PREFIX:
        return true; /* the length decides */
    case FX_MEMIO_TEAR_ZERO_BLOCKS:
        return i < t->keep && i != t->hole;
    case FX_MEMIO_TEAR_REORDER:
        return splitmix(t->seed) & 1;
    }
    return false;
}

/* Builds in |out| (already sized |len|, holding the synced image and zeros
 * past it) what a power cut leaves of |in|: overwritten bytes below the
 * synced length persist per sector, appended bytes per block as the model
 * says; a block that did not persist reads as its old contents (zeros
 * where the synced image had none, as an unwritten extent reads). */
static void tear_contents(const inode *in, tear *t, uint8_t *out, size_t len)
{
    size_t d = in->dur.len, c = in->cur.len;
    size_t over = d < c ? d : c;
    over = over < len ? over : len;
    for (size_t s = 0; s < over; s += t->sector) {
        size_t n = over - s < t->sector ? over - s : t->sector;
        if (memcmp(in->cur.p + s, in->dur.p + s, n) != 0 && (splitmix(t->seed) & 1))
            memcpy(out + s, in->cur.p + s, n);
    }
    size_t app_end = c < len ? c : len;
    if (app_end <= d)
        return;
    size_t bs = t->block;
    t->first_block = d / bs;
    size_t nblocks = (app_end - 1) / bs + 1 - t->first_block;
    t->keep = (size_t)(splitmix(t->seed) % (nblocks + 1));
    t->hole =
        t->keep > 0 && (splitmix(t->seed) & 1) ? (size_t)(splitmix(t->seed) % t->keep) : SIZE_MAX;
    for (size_t b = t->first_block; b * bs < app_end; b++) {
        size_t from = b * bs > d ? b * bs : d;
        size_t to = (b + 1) * bs < app_end ? (b + 1) * bs : app_end;
        if (block_persists(t, b))
            memcpy(out + from, in->cur.p + from, to - from);
    }
}

/* Replaces the synced image of |in| by what a torn power cut leaves. */
static int tear_inode(const fx_memio *m, inode *in, fx_memio_tear model, uint64_t *seed)
{
    bool changed = in->cur.len != in->dur.len ||
                   (in->dur.len > 0 && memcmp(in->cur.p, in->dur.p, in->dur.len) != 0);
    if (!changed)
        return 0;
    tear t = {.model = model,
              .block = m->tear_block,
              .sector = m->tear_sector,
              .seed = seed,
              .hole = SIZE_MAX};
    size_t len = torn_len(in, &t);
    image out = {0};
    int rv = image_reserve(&out, len);
    if (rv != 0)
        return rv;
    size_t old = in->dur.len < len ? in->dur.len : len;
    if (old > 0)
        memcpy(out.p, in->dur.p, old);
    if (len > old)
        memset(out.p + old, 0, len - old);
    out.len = len;
    tear_contents(in, &t, out.p, len);
    free(in->dur.p);
    in->dur = out;
    return 0;
}

void fx_memio_crash_torn(fx_memio *m, fx_memio_tear model, uint64_t seed)
{
    pthread_mutex_lock(&m->mu);
    m->epoch++;
    uint64_t s = seed;
    for (size_t i = 0; i < m->ninodes; i++) {
        inode *in = &m->inodes[i];
        /* On -ENOMEM the file keeps its synced image: a cut that tore nothing. */
        if (seed != 0 && !in->is_dir)
            (void)tear_inode(m, in, model, &s);
        (void)image_copy(&in->cur, &in->dur, in->dur.len);
        in->reserved = 0;
    }
    names_clear(&m->cur);
    for (size_t i = 0; i < m->dur.n; i++)
        (void)names_put(&m->cur, m->dur.v[i].path, m->dur.v[i].ino);
    for (size_t h = 0; h < m->nhandles; h++)
        m->handles[h] = -1;
    m->down = false;
    m->crash_at = UINT64_MAX;
    pthread_mutex_unlock(&m->mu);
}

void fx_memio_set_tear_unit(fx_memio *m, size_t block, size_t sector)
{
    pthread_mutex_lock(&m->mu);
    m->tear_block = block > 0 ? block : TEAR_BLOCK;
    m->tear_sector = sector > 0 ? sector : TEAR_SECTOR;
    pthread_mutex_unlock(&m->mu);
}

void fx_memio_crash(fx_memio *m, uint64_t torn_seed)
{
    fx_memio_crash_torn(m, FX_MEMIO_TEAR_PREFIX, torn_seed);
}

void fx_memio_kill(fx_memio *m)
{
    pthread_mutex_lock(&m->mu);
    for (size_t h = 0; h < m->nhandles; h++)
        m->handles[h] = -1;
    m->down = false;
    m->crash_at = UINT64_MAX;
    pthread_mutex_unlock(&m->mu);
}

static inode *path_inode(fx_memio *m, const char *path)
{
    int ino = lookup(m, path);
    return ino < 0 || m->inodes[ino].is_dir ? NULL : &m->inodes[ino];
}

static int corrupt_locked(fx_memio *m, const char *path, uint64_t off, uint8_t mask)
{
    inode *in = path_inode(m, path);
    if (in == NULL)
        return -ENOENT;
    if (off >= in->cur.len)
        return -EINVAL;
    in->cur.p[off] ^= mask;
    if (off < in->dur.len)
        in->dur.p[off] ^= mask;
    return 0;
}

static int cut_locked(fx_memio *m, const char *path, uint64_t len)
{
    inode *in = path_inode(m, path);
    if (in == NULL)
        return -ENOENT;
    if (len > in->cur.len)
        return -EINVAL;
    in->cur.len = (size_t)len;
    if (in->dur.len > len)
        in->dur.len = (size_t)len;
    return 0;
}

static int file_len_locked(fx_memio *m, const char *path, uint64_t *plen)
{
    inode *in = path_inode(m, path);
    if (in == NULL)
        return -ENOENT;
    *plen = in->cur.len;
    return 0;
}

int fx_memio_corrupt(fx_memio *m, const char *path, uint64_t off, uint8_t mask)
{
    LOCKED(m, corrupt_locked(m, path, off, mask));
}

int fx_memio_cut(fx_memio *m, const char *path, uint64_t len)
{
    LOCKED(m, cut_locked(m, path, len));
}

int fx_memio_file_len(fx_memio *m, const char *path, uint64_t *plen)
{
    LOCKED(m, file_len_locked(m, path, plen));
}
