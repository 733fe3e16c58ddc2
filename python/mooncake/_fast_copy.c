/* mooncake._fast_copy: copies a list of arrays, back to back, into one destination address.
 *
 * concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1) -> int
 *
 * Copies arrays[start:start+count] (count < 0, or past the end: to the end of the list; start is
 * clamped to [0, len]) one after the other to dest_ptr, and returns the number of bytes copied.
 * Each element is any object with the buffer protocol (numpy arrays, bytes, bytearray,
 * memoryview, torch CPU tensors through numpy) and must be C-contiguous (ValueError otherwise);
 * dest_size is the room at dest_ptr, and a total above it raises ValueError before anything is
 * written. The copies run without the GIL, on up to nthreads threads that split the bytes
 * evenly (a thread's share may start or end inside an array); small copies use one thread.
 * This is upstream Mooncake's helper of the same name (its structured-object store packs
 * tensors with it); the implementation is ours. It compiles as C and as C++ (torch's
 * BuildExtension, which setup.py uses when torch is installed, compiles .c files with g++).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* Below this many bytes per thread, more threads cost more than they save. */
#define MIN_BYTES_PER_THREAD ((size_t)1 << 20)
#define MAX_THREADS 64

typedef struct {
    const Py_buffer *views; /* the sources, in order */
    const size_t *dst_off;  /* where each source starts in the destination */
    Py_ssize_t n;           /* number of sources */
    char *dst;
    size_t lo, hi; /* this worker's byte range of the destination */
} work_t;

/* Copies the part of every source that falls in [w->lo, w->hi) of the destination. */
static void *copy_range(void *arg) {
    const work_t *w = (const work_t *)arg;
    /* first source ending after lo: binary search over the start offsets */
    Py_ssize_t a = 0, b = w->n;
    while (a < b) {
        Py_ssize_t m = a + (b - a) / 2;
        if (w->dst_off[m] + (size_t)w->views[m].len <= w->lo)
            a = m + 1;
        else
            b = m;
    }
    for (Py_ssize_t i = a; i < w->n && w->dst_off[i] < w->hi; i++) {
        size_t s = w->dst_off[i], e = s + (size_t)w->views[i].len;
        size_t from = s > w->lo ? s : w->lo, to = e < w->hi ? e : w->hi;
        if (to > from)
            memcpy(w->dst + from, (const char *)w->views[i].buf + (from - s), to - from);
    }
    return NULL;
}

/* Copies the sources to dest on up to nthreads threads (called without the GIL). */
static void copy_all(const Py_buffer *views, const size_t *offs, Py_ssize_t n, char *dest, size_t total,
                     int nthreads) {
    size_t workers = nthreads < 1 ? 1 : (size_t)nthreads;
    if (workers > MAX_THREADS)
        workers = MAX_THREADS;
    if (workers > total / MIN_BYTES_PER_THREAD)
        workers = total / MIN_BYTES_PER_THREAD > 0 ? total / MIN_BYTES_PER_THREAD : 1;
    work_t works[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS];
    size_t share = (total + workers - 1) / workers;
    for (size_t t = 0; t < workers; t++) {
        size_t lo = t * share, hi = lo + share;
        works[t].views = views;
        works[t].dst_off = offs;
        works[t].n = n;
        works[t].dst = dest;
        works[t].lo = lo < total ? lo : total;
        works[t].hi = hi < total ? hi : total;
        started[t] = 0;
    }
    for (size_t t = 1; t < workers; t++)
        started[t] = pthread_create(&tids[t], NULL, copy_range, &works[t]) == 0;
    copy_range(&works[0]);
    for (size_t t = 1; t < workers; t++) {
        if (started[t])
            pthread_join(tids[t], NULL);
        else
            copy_range(&works[t]); /* no thread: copy its share here */
    }
}

/* Takes the buffers of the n sources (views[i], at dest offset offs[i]); *held is how many
 * views were taken (released by the caller), *total their bytes. 0, or -1 with an exception. */
static int take_views(PyObject *list, Py_ssize_t start, Py_ssize_t n, Py_buffer *views, size_t *offs,
                      Py_ssize_t *held, size_t *total) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, start + i);
        if (PyObject_GetBuffer(item, &views[i], PyBUF_RECORDS_RO) != 0) {
            PyErr_Format(PyExc_TypeError, "arrays[%zd] (%.100s) does not expose a buffer", start + i,
                         Py_TYPE(item)->tp_name);
            return -1;
        }
        (*held)++;
        if (!PyBuffer_IsContiguous(&views[i], 'C')) {
            PyErr_Format(PyExc_ValueError, "arrays[%zd] is not C-contiguous", start + i);
            return -1;
        }
        size_t nbytes = (size_t)views[i].len;
        if (nbytes > SIZE_MAX - *total) {
            PyErr_SetString(PyExc_OverflowError, "the arrays' byte sizes overflow");
            return -1;
        }
        offs[i] = *total;
        *total += nbytes;
    }
    return 0;
}

static PyObject *concat_arrays_into(PyObject *self, PyObject *args, PyObject *kwargs) {
    static const char *kwlist[] = {"arrays", "dest_ptr", "dest_size", "start", "count", "nthreads", NULL};
    PyObject *list, *ptr_obj, *size_obj;
    Py_ssize_t start = 0, count = -1;
    int nthreads = 1;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OO|nni", (char **)kwlist, &PyList_Type, &list, &ptr_obj,
                                     &size_obj, &start, &count, &nthreads))
        return NULL;
    /* both unsigned: a negative address or size is an OverflowError, not a wrapped value */
    unsigned long long dest = PyLong_AsUnsignedLongLong(ptr_obj);
    if (dest == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long long dest_size = PyLong_AsUnsignedLongLong(size_obj);
    if (dest_size == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;

    Py_ssize_t len = PyList_GET_SIZE(list);
    if (start < 0)
        start = 0;
    if (start > len)
        start = len;
    if (count < 0 || count > len - start)
        count = len - start;
    if (count == 0)
        return PyLong_FromSize_t(0);

    Py_buffer *views = (Py_buffer *)PyMem_Calloc((size_t)count, sizeof(Py_buffer));
    size_t *offs = (size_t *)PyMem_Calloc((size_t)count, sizeof(size_t));
    if (views == NULL || offs == NULL) {
        PyMem_Free(views);
        PyMem_Free(offs);
        return PyErr_NoMemory();
    }
    Py_ssize_t held = 0;
    size_t total = 0;
    int ok = take_views(list, start, count, views, offs, &held, &total) == 0;
    if (ok && total > dest_size) {
        PyErr_Format(PyExc_ValueError, "destination buffer too small: need %zu bytes, got %llu", total, dest_size);
        ok = 0;
    }
    if (ok && total > 0 && dest == 0) {
        PyErr_SetString(PyExc_ValueError, "dest_ptr is NULL");
        ok = 0;
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        copy_all(views, offs, count, (char *)(uintptr_t)dest, total, nthreads);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(offs);
    return ok ? PyLong_FromSize_t(total) : NULL;
}

static PyMethodDef methods[] = {
    {"concat_arrays_into", (PyCFunction)(void (*)(void))concat_arrays_into, METH_VARARGS | METH_KEYWORDS,
     "concat_arrays_into(arrays, dest_ptr, dest_size, start=0, count=-1, nthreads=1) -> int\n\n"
     "Copies arrays[start:start+count] (C-contiguous buffers) back to back to dest_ptr, which has\n"
     "dest_size bytes of room, without the GIL; returns the bytes copied."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast_copy",
    "Copies of lists of arrays into one destination address (upstream Mooncake's helper).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast_copy(void) { return PyModule_Create(&module); }
