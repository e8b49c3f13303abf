/* _skim: where the values of a JSON object's top-level keys are, found without building them.
 *
 * Why: a session file's summary (ctxd/sessions/summaries.py) needs a few small fields of each
 * line (its type, uuid, parent, time, a message's usage), while most of a line's bytes are a
 * tool's output or a file's content that the summary never looks at. json.loads builds all of it
 * (about 100 MB/s); this walks over it (strings by memchr for their closing quote) and returns
 * offsets, so that Python decodes only what it needs. ctxd/agents/skim.py has the same
 * functions in Python, used when this extension is not built.
 *
 * fields(data: bytes, start: int, keys: tuple[bytes, ...]) -> tuple[int, ...] | None
 *     The object at `start` (after blanks): for each key, the start and end offsets of its
 *     value (the last one, when a key is repeated), or -1, -1; then the offset just after the
 *     object. None when there is no object there, it is cut short or not JSON's structure, or
 *     a key has an escape (the caller then parses the line whole).
 * elements(data: bytes, start: int) -> tuple[int, ...] | None
 *     The array at `start`: the start and end offsets of each element, in order; None as above.
 * values(data: bytes, start: int, end: int, keys: tuple[bytes, ...]) -> tuple[Any, ...] | None
 *     `fields` of data[start:end], decoded where that is plain: a string without escapes (as
 *     str, bytes that are not UTF-8 replaced), true, false, an integer of up to 18 digits; an
 *     absent key or null is None; any other value is its (start, end) offsets in `data`.
 * lines(data: bytes, start: int, end: int, key: bytes, skip: tuple[bytes, ...], needles: tuple[bytes, ...])
 *         -> list[int]
 *     The lines of data[start:end] a reader must look at, as start and end offsets (the end at
 *     the newline): every line but those whose top-level `key` has a value in `skip` (its JSON
 *     text, quotes included) and that hold none of `needles`. A line that is not an object with
 *     that key is looked at; a blank one is not.
 *
 * Nothing here decodes a string or checks a number: a value is only skipped. No global state.
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_KEYS 32

static Py_ssize_t blanks(const char *s, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* The offset just after the string whose opening quote is at i; -1 when it is not closed. */
static Py_ssize_t string_end(const char *s, Py_ssize_t i, Py_ssize_t n) {
    Py_ssize_t p = i + 1;
    for (;;) {
        const char *q = memchr(s + p, '"', (size_t)(n - p));
        if (q == NULL) return -1;
        Py_ssize_t at = q - s, back = at - 1;
        while (back > i && s[back] == '\\') back--;
        if (((at - 1 - back) & 1) == 0) return at + 1; /* an even run of backslashes: not escaped */
        p = at + 1;
    }
}

/* The offset just after the value at i (blanks already skipped); -1 when it is cut short. */
static Py_ssize_t value_end(const char *s, Py_ssize_t i, Py_ssize_t n) {
    if (i >= n) return -1;
    char c = s[i];
    if (c == '"') return string_end(s, i, n);
    if (c == '{' || c == '[') {
        Py_ssize_t depth = 0;
        while (i < n) {
            c = s[i];
            if (c == '"') {
                i = string_end(s, i, n);
                if (i < 0) return -1;
                continue;
            }
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
            i++;
        }
        return -1;
    }
    /* A number, true, false or null: up to the next delimiter. */
    Py_ssize_t start = i;
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' && s[i] != '\r'
           && s[i] != '\n')
        i++;
    return i > start ? i : -1;
}

static PyObject *skim_fields(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start;
    PyObject *keys;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nO!", &buf, &start, &PyTuple_Type, &keys)) return NULL;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    if (nkeys > MAX_KEYS) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return NULL;
    }
    const char *names[MAX_KEYS];
    Py_ssize_t lengths[MAX_KEYS], spans[2 * MAX_KEYS];
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *key = PyTuple_GET_ITEM(keys, k);
        if (!PyBytes_Check(key)) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return NULL;
        }
        names[k] = PyBytes_AS_STRING(key);
        lengths[k] = PyBytes_GET_SIZE(key);
        spans[2 * k] = spans[2 * k + 1] = -1;
    }
    const char *s = buf.buf;
    Py_ssize_t n = buf.len, end = -1;
    Py_ssize_t i = start < 0 ? n : blanks(s, start, n);
    if (i < n && s[i] == '{') {
        i = blanks(s, i + 1, n);
        if (i < n && s[i] == '}') end = i + 1;
        while (end < 0 && i < n && s[i] == '"') {
            Py_ssize_t key_end = string_end(s, i, n);
            if (key_end < 0 || memchr(s + i + 1, '\\', (size_t)(key_end - i - 2)) != NULL) break;
            const char *name = s + i + 1;
            Py_ssize_t length = key_end - i - 2;
            i = blanks(s, key_end, n);
            if (i >= n || s[i] != ':') break;
            i = blanks(s, i + 1, n);
            Py_ssize_t value_start = i, stop = value_end(s, i, n);
            if (stop < 0) break;
            for (Py_ssize_t k = 0; k < nkeys; k++) {
                if (lengths[k] == length && memcmp(names[k], name, (size_t)length) == 0) {
                    spans[2 * k] = value_start;
                    spans[2 * k + 1] = stop;
                }
            }
            i = blanks(s, stop, n);
            if (i < n && s[i] == ',') {
                i = blanks(s, i + 1, n);
                continue;
            }
            if (i < n && s[i] == '}') end = i + 1;
            break;
        }
    }
    PyBuffer_Release(&buf);
    if (end < 0) Py_RETURN_NONE;
    PyObject *out = PyTuple_New(2 * nkeys + 1);
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < 2 * nkeys; k++) {
        PyObject *value = PyLong_FromSsize_t(spans[k]);
        if (value == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, value);
    }
    PyObject *last = PyLong_FromSsize_t(end);
    if (last == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 2 * nkeys, last);
    return out;
}

static PyObject *skim_elements(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &start)) return NULL;
    const char *s = buf.buf;
    Py_ssize_t n = buf.len;
    Py_ssize_t i = start < 0 ? n : blanks(s, start, n);
    PyObject *list = PyList_New(0);
    if (list == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    int closed = 0;
    if (i < n && s[i] == '[') {
        i = blanks(s, i + 1, n);
        if (i < n && s[i] == ']') closed = 1;
        while (!closed && i < n) {
            Py_ssize_t stop = value_end(s, i, n);
            if (stop < 0) break;
            PyObject *a = PyLong_FromSsize_t(i), *b = PyLong_FromSsize_t(stop);
            int failed = a == NULL || b == NULL || PyList_Append(list, a) < 0 || PyList_Append(list, b) < 0;
            Py_XDECREF(a);
            Py_XDECREF(b);
            if (failed) {
                Py_DECREF(list);
                PyBuffer_Release(&buf);
                return NULL;
            }
            i = blanks(s, stop, n);
            if (i < n && s[i] == ',') {
                i = blanks(s, i + 1, n);
                continue;
            }
            if (i < n && s[i] == ']') closed = 1;
            break;
        }
    }
    PyBuffer_Release(&buf);
    if (!closed) {
        Py_DECREF(list);
        Py_RETURN_NONE;
    }
    PyObject *out = PyList_AsTuple(list);
    Py_DECREF(list);
    return out;
}

static PyObject *decoded(const char *s, Py_ssize_t vs, Py_ssize_t ve) {
    if (vs < 0) Py_RETURN_NONE;
    char c = s[vs];
    if (c == '"' && memchr(s + vs + 1, '\\', (size_t)(ve - vs - 2)) == NULL)
        return PyUnicode_DecodeUTF8(s + vs + 1, ve - vs - 2, "replace");
    if (ve - vs == 4 && memcmp(s + vs, "true", 4) == 0) Py_RETURN_TRUE;
    if (ve - vs == 5 && memcmp(s + vs, "false", 5) == 0) Py_RETURN_FALSE;
    if (ve - vs == 4 && memcmp(s + vs, "null", 4) == 0) Py_RETURN_NONE;
    if ((c == '-' || (c >= '0' && c <= '9')) && ve - vs <= 18) {
        long long value = 0;
        Py_ssize_t i = vs + (c == '-');
        int plain = i < ve && !(s[i] == '0' && ve - i > 1);
        for (; plain && i < ve; i++) {
            if (s[i] < '0' || s[i] > '9') plain = 0;
            else value = value * 10 + (s[i] - '0');
        }
        if (plain) return PyLong_FromLongLong(c == '-' ? -value : value);
    }
    return Py_BuildValue("(nn)", vs, ve);
}

static PyObject *skim_values(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end;
    PyObject *keys;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnO!", &buf, &start, &end, &PyTuple_Type, &keys)) return NULL;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    if (nkeys > MAX_KEYS) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return NULL;
    }
    const char *names[MAX_KEYS];
    Py_ssize_t lengths[MAX_KEYS], spans[2 * MAX_KEYS];
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *key = PyTuple_GET_ITEM(keys, k);
        if (!PyBytes_Check(key)) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return NULL;
        }
        names[k] = PyBytes_AS_STRING(key);
        lengths[k] = PyBytes_GET_SIZE(key);
        spans[2 * k] = spans[2 * k + 1] = -1;
    }
    const char *s = buf.buf;
    Py_ssize_t n = end < buf.len ? end : buf.len, stop = -1;
    Py_ssize_t i = start < 0 ? n : blanks(s, start, n);
    if (i < n && s[i] == '{') {
        i = blanks(s, i + 1, n);
        if (i < n && s[i] == '}') stop = i + 1;
        while (stop < 0 && i < n && s[i] == '"') {
            Py_ssize_t key_end = string_end(s, i, n);
            if (key_end < 0 || memchr(s + i + 1, '\\', (size_t)(key_end - i - 2)) != NULL) break;
            const char *name = s + i + 1;
            Py_ssize_t length = key_end - i - 2;
            i = blanks(s, key_end, n);
            if (i >= n || s[i] != ':') break;
            i = blanks(s, i + 1, n);
            Py_ssize_t value_start = i, value_stop = value_end(s, i, n);
            if (value_stop < 0) break;
            for (Py_ssize_t k = 0; k < nkeys; k++) {
                if (lengths[k] == length && memcmp(names[k], name, (size_t)length) == 0) {
                    spans[2 * k] = value_start;
                    spans[2 * k + 1] = value_stop;
                }
            }
            i = blanks(s, value_stop, n);
            if (i < n && s[i] == ',') {
                i = blanks(s, i + 1, n);
                continue;
            }
            if (i < n && s[i] == '}') stop = i + 1;
            break;
        }
    }
    if (stop < 0) {
        PyBuffer_Release(&buf);
        Py_RETURN_NONE;
    }
    PyObject *out = PyTuple_New(nkeys);
    for (Py_ssize_t k = 0; out != NULL && k < nkeys; k++) {
        PyObject *value = decoded(s, spans[2 * k], spans[2 * k + 1]);
        if (value == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, k, value);
    }
    PyBuffer_Release(&buf);
    return out;
}

/* The span of the top-level `key`'s value in the object at s[i:n], or 0 when there is none. */
static int find_key(const char *s, Py_ssize_t i, Py_ssize_t n, const char *key, Py_ssize_t length,
                    Py_ssize_t *vs, Py_ssize_t *ve) {
    i = blanks(s, i, n);
    if (i >= n || s[i] != '{') return 0;
    i = blanks(s, i + 1, n);
    int found = 0;
    while (i < n && s[i] == '"') {
        Py_ssize_t key_end = string_end(s, i, n);
        if (key_end < 0) return 0;
        int match = key_end - i - 2 == length && memcmp(s + i + 1, key, (size_t)length) == 0;
        i = blanks(s, key_end, n);
        if (i >= n || s[i] != ':') return 0;
        i = blanks(s, i + 1, n);
        Py_ssize_t stop = value_end(s, i, n);
        if (stop < 0) return 0;
        if (match) {
            *vs = i;
            *ve = stop;
            found = 1; /* (a later repeat of the key wins, as in JSON parsers) */
        }
        i = blanks(s, stop, n);
        if (i < n && s[i] == ',') {
            i = blanks(s, i + 1, n);
            continue;
        }
        return i < n && s[i] == '}' ? found : 0;
    }
    return 0;
}

static PyObject *skim_lines(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end;
    const char *key;
    Py_ssize_t key_length;
    PyObject *skip, *needles;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nny#O!O!", &buf, &start, &end, &key, &key_length, &PyTuple_Type, &skip,
                          &PyTuple_Type, &needles))
        return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(skip); k++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(skip, k))) goto not_bytes;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(needles); k++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(needles, k))) goto not_bytes;
    const char *s = buf.buf;
    if (start < 0) start = 0;
    if (end > buf.len) end = buf.len;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    Py_ssize_t i = start;
    while (i < end) {
        const char *newline = memchr(s + i, '\n', (size_t)(end - i));
        Py_ssize_t stop = newline ? newline - s : end;
        Py_ssize_t first = blanks(s, i, stop);
        if (first < stop) {
            Py_ssize_t vs = 0, ve = 0;
            int take = 1;
            if (find_key(s, first, stop, key, key_length, &vs, &ve)) {
                for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(skip); k++) {
                    PyObject *value = PyTuple_GET_ITEM(skip, k);
                    if (PyBytes_GET_SIZE(value) == ve - vs && memcmp(PyBytes_AS_STRING(value), s + vs, (size_t)(ve - vs)) == 0) {
                        take = 0;
                        break;
                    }
                }
                for (Py_ssize_t k = 0; !take && k < PyTuple_GET_SIZE(needles); k++) {
                    PyObject *needle = PyTuple_GET_ITEM(needles, k);
                    if (memmem(s + i, (size_t)(stop - i), PyBytes_AS_STRING(needle), (size_t)PyBytes_GET_SIZE(needle)))
                        take = 1;
                }
            }
            if (take) {
                PyObject *a = PyLong_FromSsize_t(i), *b = PyLong_FromSsize_t(stop);
                int failed = a == NULL || b == NULL || PyList_Append(out, a) < 0 || PyList_Append(out, b) < 0;
                Py_XDECREF(a);
                Py_XDECREF(b);
                if (failed) {
                    Py_DECREF(out);
                    PyBuffer_Release(&buf);
                    return NULL;
                }
            }
        }
        i = stop + 1;
    }
    PyBuffer_Release(&buf);
    return out;
not_bytes:
    PyBuffer_Release(&buf);
    PyErr_SetString(PyExc_TypeError, "skip and needles must be bytes");
    return NULL;
}

static PyMethodDef METHODS[] = {
    {"fields", skim_fields, METH_VARARGS, "fields(data, start, keys) -> offsets of the top-level keys' values"},
    {"elements", skim_elements, METH_VARARGS, "elements(data, start) -> offsets of an array's elements"},
    {"values", skim_values, METH_VARARGS, "values(data, start, end, keys) -> the top-level keys' values"},
    {"lines", skim_lines, METH_VARARGS, "lines(data, start, end, key, skip, needles) -> the lines to look at"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_skim", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__skim(void) { return PyModule_Create(&MODULE); }
