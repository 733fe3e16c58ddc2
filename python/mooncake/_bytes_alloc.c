/* mooncake._bytes_alloc: the allocator through which get and get_batch read values straight into
 * new bytes objects.
 *
 * bytes_alloc_fn is the address of a C function of the library's mc_store_alloc_fn type,
 * void *(*)(void *ctx, int32_t i, uint64_t n): ctx is a Python list (its address, held alive by
 * the caller for the whole mc_store_get call), and the function makes a new bytes object of n
 * bytes, stores it at index i of that list and returns the address of its data, which the library
 * then fills before the call returns (so no one sees the bytes unfilled). NULL (no memory, an index
 * outside the list) fails that item alone.
 *
 * The library calls it on the thread that called mc_store_get (ctypes released the GIL for the
 * call), once per value. The ctypes callback it replaces cost a Python frame and the conversion
 * of its arguments per value; this one takes the GIL and allocates. It compiles as C and as C++
 * (torch's BuildExtension, which setup.py uses when torch is installed, compiles .c files with
 * g++).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static void *bytes_alloc(void *ctx, int32_t i, uint64_t n) {
    void *data = NULL;
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *list = (PyObject *)ctx;
    if (n <= (uint64_t)PY_SSIZE_T_MAX && PyList_Check(list) && i >= 0 && i < PyList_GET_SIZE(list)) {
        PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
        if (b != NULL) {
            data = PyBytes_AS_STRING(b);
            PyList_SetItem(list, i, b); /* takes the reference; drops the item it replaces */
        }
    }
    if (data == NULL && PyErr_Occurred()) {
        PyErr_Clear(); /* the library reports the item's failure */
    }
    PyGILState_Release(st);
    return data;
}

static struct PyModuleDef bytes_alloc_module = {
    PyModuleDef_HEAD_INIT, "_bytes_alloc",
    "The C allocator that get and get_batch read values into new bytes objects with.", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bytes_alloc(void) {
    PyObject *m = PyModule_Create(&bytes_alloc_module);
    if (m == NULL) {
        return NULL;
    }
    PyObject *fn = PyLong_FromVoidPtr((void *)bytes_alloc);
    if (fn == NULL || PyModule_AddObject(m, "bytes_alloc_fn", fn) < 0) {
        Py_XDECREF(fn);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
