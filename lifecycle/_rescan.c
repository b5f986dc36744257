/* The hot loop of lifecycle/rescan.py, in C: list every directory a previous fingerprint knew and
 * compare the lstat identity of each entry with what it recorded, on several threads at once.
 *
 * Why C: an unchanged re-scan of a 20k-file cache is 20k lstat calls, and in Python each one also
 * builds a stat_result of ~40 objects, which costs more than the syscall (bench/README.md). Here
 * the entries are read out of the Python objects once, under the GIL, into one array grouped by
 * directory; then the GIL is released and POSIX threads take directories from a shared counter,
 * touching no Python object.
 *
 * A directory flagged here is only "to be looked at again": rescan._listed_unchanged re-checks it
 * in Python by the walk's full rules. So this file knows nothing of transient files (a name with
 * one of the given suffixes is flagged), and any error at all (vanished, unreadable, a link
 * target too long for the buffer) flags the directory instead of raising.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SUFFIXES 8
#define MAX_THREADS 64

/* What a previous fingerprint recorded for one entry (a fingerprint.Entry). */
typedef struct {
    PyObject *object;  /* the Entry (the call holds a tuple of them) */
    const char *path;  /* relative, os.fsencode'd; NUL-terminated */
    Py_ssize_t path_len;
    const char *name;  /* the last component, inside `path` */
    const char *link;  /* a symlink's target; NULL for anything else */
    Py_ssize_t link_len;
    long long size;    /* st_size for regular files, 0 for anything else (as Entry stores it) */
    long long mtime_ns;
    unsigned long long inode;
    mode_t mode;       /* st_mode & 07777 */
    mode_t type;       /* S_IFREG, S_IFDIR, S_IFLNK; 0 for kind "other"; NO_TYPE never matches */
} expected_entry;

#define NO_TYPE ((mode_t)-1)

/* What listing a directory found. A verdict only orders and ends the work here: every directory
 * not shown to match goes back to Python, which decides. */
enum verdict {
    LOOK_AGAIN = 0, /* not listed yet, could not be listed, or holds a name for Python to judge */
    MATCHES,
    DIFFERS /* a name Python would not skip is new, missing or changed: the others can stop */
};

/* A directory to list: the entry naming it (NULL for the root) and its children, in name order. */
typedef struct {
    const expected_entry *self;
    size_t first, count; /* children are entries[children[first .. first + count)] */
    enum verdict verdict;
} expected_dir;

typedef struct {
    expected_entry *entries;
    size_t entry_count;
    expected_dir *dirs; /* dirs[0] is the root; the others in path order */
    size_t dir_count;
    size_t *children;
    const char *suffixes[MAX_SUFFIXES];
    size_t suffix_lens[MAX_SUFFIXES], suffix_count;
    int top;     /* the cache root, open */
    size_t next; /* the next directory to list, shared by the threads (atomic) */
    int stop;    /* set (atomic) once a directory DIFFERS: the answer is known */
} job;

static PyObject *attr_path, *attr_kind, *attr_size, *attr_mode, *attr_mtime_ns, *attr_inode,
    *attr_link;

/* ---- Listing, without the GIL ---- */

static mode_t type_of(mode_t st_mode) {
    mode_t type = st_mode & S_IFMT;
    return type == S_IFREG || type == S_IFDIR || type == S_IFLNK ? type : 0;
}

static const expected_entry *find(const job *j, const expected_dir *dir, const char *name) {
    size_t low = dir->first, high = dir->first + dir->count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        const expected_entry *entry = &j->entries[j->children[middle]];
        int order = strcmp(entry->name, name);
        if (order == 0) return entry;
        if (order < 0)
            low = middle + 1;
        else
            high = middle;
    }
    return NULL;
}

static int has_suffix(const job *j, const char *name) {
    size_t length = strlen(name);
    for (size_t k = 0; k < j->suffix_count; k++) {
        size_t n = j->suffix_lens[k];
        if (length >= n && memcmp(name + length - n, j->suffixes[k], n) == 0) return 1;
    }
    return 0;
}

/* Does `name` in the directory open as `fd` still have the identity `want` records? */
static int same_entry(int fd, const char *name, const expected_entry *want) {
    struct stat st;
    if (want == NULL || fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    mode_t type = type_of(st.st_mode);
    long long size = type == S_IFREG ? (long long)st.st_size : 0;
    long long mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (mtime_ns != want->mtime_ns || (unsigned long long)st.st_ino != want->inode ||
        type != want->type || (st.st_mode & 07777) != want->mode || size != want->size)
        return 0;
    if (type != S_IFLNK) return want->link == NULL;
    /* One byte more than the recorded target: a longer target shows as a length mismatch. */
    char target[PATH_MAX + 1];
    if (want->link == NULL || want->link_len >= PATH_MAX) return 0;
    ssize_t got = readlinkat(fd, name, target, (size_t)want->link_len + 1);
    return got == want->link_len && memcmp(target, want->link, (size_t)got) == 0;
}

/* List one directory: does it hold exactly its expected entries, each with the same identity? */
static enum verdict judge(const job *j, const expected_dir *dir) {
    /* O_NOFOLLOW below the root, as the walk does: a directory swapped for a symlink fails. */
    int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW;
    int fd = dir->self ? openat(j->top, dir->self->path, flags) : fcntl(j->top, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return LOOK_AGAIN;
    DIR *listing = fdopendir(fd);
    if (listing == NULL) {
        close(fd);
        return LOOK_AGAIN;
    }
    size_t seen = 0;
    int suffixed = 0;
    enum verdict verdict = MATCHES;
    struct dirent *item;
    for (errno = 0; verdict == MATCHES && (item = readdir(listing)) != NULL; errno = 0) {
        const char *name = item->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
        seen++;
        if (has_suffix(j, name))
            suffixed = 1; /* perhaps transient: for Python to judge */
        else if (!same_entry(fd, name, find(j, dir, name)))
            verdict = DIFFERS;
    }
    if (errno != 0 && verdict == MATCHES) verdict = LOOK_AGAIN; /* readdir failed, not ended */
    closedir(listing);                                        /* and fd with it */
    if (verdict != MATCHES) return verdict;
    if (suffixed) return LOOK_AGAIN;
    /* Names within one listing are distinct: as many as expected, each found, is the same set. */
    return seen == dir->count ? MATCHES : DIFFERS;
}

static void *work(void *arg) {
    job *j = arg;
    size_t i;
    while (!__atomic_load_n(&j->stop, __ATOMIC_RELAXED) &&
           (i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->dir_count)
        if ((j->dirs[i].verdict = judge(j, &j->dirs[i])) == DIFFERS)
            __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* List every directory on `threads` threads (this one included). */
static void list_all(job *j, int threads) {
    pthread_t helpers[MAX_THREADS];
    int started = 0;
    while (started < threads - 1 && started < MAX_THREADS &&
           pthread_create(&helpers[started], NULL, work, j) == 0)
        started++;
    work(j); /* fewer helpers than asked for (EAGAIN) only means less overlap */
    while (started > 0) pthread_join(helpers[--started], NULL);
}

/* ---- Reading the entries, with the GIL ---- */

/* `text` as os.fsencode bytes: the str's own UTF-8 when it has one (no copy for ASCII), else
 * new bytes (a name with undecodable bytes, as surrogate escapes). Whichever it is, `keep`
 * holds it, so the threads never read freed memory whatever other Python threads do meanwhile. */
static const char *encoded(PyObject *text, PyObject *keep, Py_ssize_t *length) {
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, length);
    if (utf8 != NULL) return PyList_Append(keep, text) < 0 ? NULL : utf8;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
    PyErr_Clear();
    PyObject *bytes = PyUnicode_EncodeFSDefault(text);
    if (bytes == NULL) return NULL;
    int kept = PyList_Append(keep, bytes);
    Py_DECREF(bytes); /* `keep` holds it */
    if (kept < 0) return NULL;
    *length = PyBytes_GET_SIZE(bytes);
    return PyBytes_AS_STRING(bytes);
}

/* An int attribute into `out`: 1, or 0 if out of range (the entry can never match), -1 error. */
static int int_attr(PyObject *object, PyObject *attr, long long low, long long high,
                    long long *out) {
    PyObject *value = PyObject_GetAttr(object, attr);
    if (value == NULL) return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (*out == -1 && PyErr_Occurred()) return -1;
    return !overflow && *out >= low && *out <= high;
}

/* Read one fingerprint.Entry into `out`; 0, or -1 with an exception set. */
static int read_entry(PyObject *object, expected_entry *out, PyObject *keep) {
    out->object = object;
    PyObject *value = PyObject_GetAttr(object, attr_path);
    if (value == NULL) return -1;
    out->path = encoded(value, keep, &out->path_len);
    Py_DECREF(value);
    if (out->path == NULL) return -1;
    const char *slash = strrchr(out->path, '/');
    out->name = slash ? slash + 1 : out->path;

    if ((value = PyObject_GetAttr(object, attr_kind)) == NULL) return -1;
    out->type = PyUnicode_CompareWithASCIIString(value, "file") == 0      ? S_IFREG
                : PyUnicode_CompareWithASCIIString(value, "dir") == 0     ? S_IFDIR
                : PyUnicode_CompareWithASCIIString(value, "symlink") == 0 ? S_IFLNK
                                                                          : 0;
    Py_DECREF(value);

    /* Out of range (corrupt, or an inode above LLONG_MAX, none seen on Linux): Python decides. */
    long long size, mode, inode;
    int fits;
    if ((fits = int_attr(object, attr_size, 0, LLONG_MAX, &size)) < 0) return -1;
    if (fits && (fits = int_attr(object, attr_mode, 0, 07777, &mode)) < 0) return -1;
    if (fits && (fits = int_attr(object, attr_mtime_ns, LLONG_MIN, LLONG_MAX, &out->mtime_ns)) < 0)
        return -1;
    if (fits && (fits = int_attr(object, attr_inode, 0, LLONG_MAX, &inode)) < 0) return -1;
    if (!fits) {
        out->type = NO_TYPE;
        return 0;
    }
    out->size = size;
    out->mode = (mode_t)mode;
    out->inode = (unsigned long long)inode;

    if ((value = PyObject_GetAttr(object, attr_link)) == NULL) return -1;
    if (value != Py_None) out->link = encoded(value, keep, &out->link_len);
    int failed = value != Py_None && out->link == NULL;
    Py_DECREF(value);
    return failed ? -1 : 0;
}

/* The directory (in dirs[1..]) whose path is path[:length], by binary search; 0 if none. */
static size_t dir_named(const job *j, const char *path, size_t length) {
    size_t low = 1, high = j->dir_count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        const expected_entry *dir = j->dirs[middle].self;
        size_t common = (size_t)dir->path_len < length ? (size_t)dir->path_len : length;
        int order = memcmp(dir->path, path, common);
        if (order == 0) order = dir->path_len < (Py_ssize_t)length ? -1 : dir->path_len > (Py_ssize_t)length;
        if (order == 0) return middle;
        if (order < 0)
            low = middle + 1;
        else
            high = middle;
    }
    return 0;
}

/* Group the entries by directory. 0, or 1 when no walk could have given them (not strictly in
 * path order, or an entry whose parent is not a directory among them). */
static int group(job *j) {
    size_t *parent = PyMem_Calloc(j->entry_count ? j->entry_count : 1, sizeof *parent);
    if (parent == NULL) return -1;
    j->dir_count = 1;
    for (size_t i = 0; i < j->entry_count; i++) {
        const expected_entry *entry = &j->entries[i];
        if (strlen(entry->path) != (size_t)entry->path_len) goto unwalkable; /* a NUL inside */
        if (i > 0 && strcmp(j->entries[i - 1].path, entry->path) >= 0) goto unwalkable;
        if (entry->type == S_IFDIR) j->dirs[j->dir_count++].self = entry;
    }
    size_t last = 0; /* most entries share the parent of the one before */
    for (size_t i = 0; i < j->entry_count; i++) {
        const expected_entry *entry = &j->entries[i];
        size_t length = (size_t)(entry->name - entry->path);
        if (length == 0)
            last = 0;
        else if (last == 0 || (size_t)j->dirs[last].self->path_len != length - 1 ||
                 memcmp(j->dirs[last].self->path, entry->path, length - 1) != 0)
            if ((last = dir_named(j, entry->path, length - 1)) == 0) goto unwalkable;
        parent[i] = last;
        j->dirs[last].count++;
    }
    for (size_t d = 1; d < j->dir_count; d++)
        j->dirs[d].first = j->dirs[d - 1].first + j->dirs[d - 1].count;
    size_t *filled = PyMem_Calloc(j->dir_count, sizeof *filled);
    if (filled == NULL) {
        PyMem_Free(parent);
        return -1;
    }
    /* In path order, so each directory's children are in name order (their paths share a prefix). */
    for (size_t i = 0; i < j->entry_count; i++) {
        expected_dir *dir = &j->dirs[parent[i]];
        j->children[dir->first + filled[parent[i]]++] = i;
    }
    PyMem_Free(filled);
    PyMem_Free(parent);
    return 0;
unwalkable:
    PyMem_Free(parent);
    return 1;
}

/* The directories not shown to match, as [(path, {name: Entry})] for rescan._listed_unchanged:
 * those that DIFFER first, so Python's check (which stops at the first mismatch) looks at them
 * before any directory left unlisted. */
static PyObject *flagged(const job *j) {
    PyObject *result = PyList_New(0);
    for (size_t n = 0; result != NULL && n < 2 * j->dir_count; n++) {
        const expected_dir *dir = &j->dirs[n % j->dir_count];
        if (dir->verdict != (n < j->dir_count ? DIFFERS : LOOK_AGAIN)) continue;
        PyObject *path = dir->self ? PyObject_GetAttr(dir->self->object, attr_path)
                                   : PyUnicode_FromString("");
        PyObject *entries = PyDict_New();
        int failed = path == NULL || entries == NULL;
        for (size_t c = 0; !failed && c < dir->count; c++) {
            const expected_entry *entry = &j->entries[j->children[dir->first + c]];
            PyObject *name = PyUnicode_DecodeFSDefault(entry->name);
            failed = name == NULL || PyDict_SetItem(entries, name, entry->object) < 0;
            Py_XDECREF(name);
        }
        PyObject *pair = failed ? NULL : PyTuple_Pack(2, path, entries);
        if (pair == NULL || PyList_Append(result, pair) < 0) Py_CLEAR(result);
        Py_XDECREF(pair);
        Py_XDECREF(entries);
        Py_XDECREF(path);
    }
    return result;
}

PyDoc_STRVAR(
    differing_doc,
    "differing(top, entries, threads, suffixes) -> list[tuple[str, dict[str, Entry]]] | None\n\n"
    "List every directory of `entries` (a previous fingerprint's, in path order) under `top` on\n"
    "`threads` threads. Gives the directories to look at again, each with its expected entries by\n"
    "name: first those not holding exactly their entries with the same kind, size, mode,\n"
    "mtime_ns, inode and link target (the listing stops at the first), then those that could not\n"
    "be listed, were not listed, or hold a name that ends in one of `suffixes`. None when no\n"
    "walk could have given `entries` (not in path order, or an entry whose parent is not a\n"
    "directory among them).");

static PyObject *differing(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *top, *sequence, *suffixes;
    int threads;
    if (!PyArg_ParseTuple(args, "O&OiO!", PyUnicode_FSConverter, &top, &sequence, &threads,
                          &PyTuple_Type, &suffixes))
        return NULL;
    job j = {.top = -1};
    PyObject *result = NULL, *keep = PyList_New(0);
    PyObject *entries = PySequence_Tuple(sequence); /* its own references to the entries */
    if (keep == NULL || entries == NULL) goto done;
    if (PyTuple_GET_SIZE(suffixes) > MAX_SUFFIXES) {
        PyErr_SetString(PyExc_ValueError, "too many suffixes");
        goto done;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(suffixes); k++) {
        Py_ssize_t length;
        j.suffixes[k] = encoded(PyTuple_GET_ITEM(suffixes, k), keep, &length);
        if (j.suffixes[k] == NULL) goto done;
        j.suffix_lens[j.suffix_count++] = (size_t)length;
    }
    j.entry_count = (size_t)PyTuple_GET_SIZE(entries);
    size_t room = j.entry_count + 1;
    j.entries = PyMem_Calloc(room, sizeof *j.entries);
    j.dirs = PyMem_Calloc(room, sizeof *j.dirs);
    j.children = PyMem_Calloc(room, sizeof *j.children);
    if (j.entries == NULL || j.dirs == NULL || j.children == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < j.entry_count; i++)
        if (read_entry(PyTuple_GET_ITEM(entries, i), &j.entries[i], keep) < 0) goto done;
    int grouped = group(&j);
    if (grouped != 0) {
        result = grouped < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
        goto done;
    }

    Py_BEGIN_ALLOW_THREADS
    /* The root is followed if it is a symlink (a cache moved to another disk); nothing below. */
    j.top = open(PyBytes_AS_STRING(top), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (j.top >= 0) { /* else every verdict stays LOOK_AGAIN */
        list_all(&j, threads);
        close(j.top);
    }
    Py_END_ALLOW_THREADS
    result = flagged(&j);
done:
    PyMem_Free(j.children);
    PyMem_Free(j.dirs);
    PyMem_Free(j.entries);
    Py_XDECREF(entries);
    Py_XDECREF(keep);
    Py_DECREF(top);
    return result;
}

static PyMethodDef methods[] = {
    {"differing", differing, METH_VARARGS, differing_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lifecycle._rescan", "The C half of lifecycle.rescan.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rescan(void) {
    PyObject **attrs[] = {&attr_path, &attr_kind,  &attr_size, &attr_mode,
                          &attr_mtime_ns, &attr_inode, &attr_link};
    const char *names[] = {"path", "kind", "size", "mode", "mtime_ns", "inode", "link"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if ((*attrs[k] = PyUnicode_InternFromString(names[k])) == NULL) return NULL;
    return PyModule_Create(&module);
}
