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
 * kinds(data: bytes, start: int, end: int) -> list[Any] | None
 *     The `type` of each element of the array data[start:end], as `values` decodes it (None for an
 *     element that is not an object); None when there is no array there, as above.
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
 * scan(data: bytes, start: int, end: int, key: bytes, skip: tuple[bytes, ...], needles: tuple[bytes, ...],
 *      paths: tuple[tuple[bytes, ...], ...], limits: tuple[int, ...],
 *      marks: tuple[tuple[tuple[bytes, ...], tuple[bytes, ...]], ...] = ()) -> tuple[int, list[tuple[Any, ...]]]
 *     What a summary reader reads of data[start:end] in one pass, so that most lines never reach
 *     Python: the newlines in it, and for each line it looks at, (start, end, *values), the
 *     value at each key path (a tuple of keys, from the line's object down) as `values` decodes
 *     it, except that a container of at most its `limit` bytes that is plain all through
 *     (objects and arrays of strings without an escape or a control character, integers of up
 *     to 18 digits, true, false, null: what json.loads would build) is built; just (start, end)
 *     when the line is not an object as JSON has it (the reader parses it whole). The lines it
 *     looks at: those whose `key` has no value in `skip`, and those where a mark holds (a path
 *     whose value is one of its texts, JSON text as `skip` has it); a line it cannot walk (not an
 *     object, an escaped key) is looked at as `lines` has it, `needles` and all.
 *
 * Only `scan` builds values, and only plain ones: a value it cannot build is left to Python's JSON
 * parser, as its offsets. No global state.
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "_json.h"

#define PLAIN_DEPTH 20 /* a container nested deeper is given as its span */

/* `keys` (a tuple of bytes) as names and lengths, their spans set to -1, -1; -1 with an exception when
 * they are too many or not bytes. */
static int read_keys(PyObject *keys, const char **names, Py_ssize_t *lengths, Py_ssize_t *spans) {
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    if (nkeys > MAX_KEYS) {
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return -1;
    }
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *key = PyTuple_GET_ITEM(keys, k);
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return -1;
        }
        names[k] = PyBytes_AS_STRING(key);
        lengths[k] = PyBytes_GET_SIZE(key);
        spans[2 * k] = spans[2 * k + 1] = -1;
    }
    return 0;
}

static PyObject *skim_fields(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start;
    PyObject *keys;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nO!", &buf, &start, &PyTuple_Type, &keys)) return NULL;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    const char *names[MAX_KEYS];
    Py_ssize_t lengths[MAX_KEYS] = {0}, spans[2 * MAX_KEYS];
    if (read_keys(keys, names, lengths, spans) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const char *s = buf.buf;
    Py_ssize_t end = object_spans(s, start, buf.len, names, lengths, nkeys, spans);
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
    Py_ssize_t span[2] = {vs, ve};
    return ints_tuple(2, span);
}

static PyObject *skim_values(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end;
    PyObject *keys;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnO!", &buf, &start, &end, &PyTuple_Type, &keys)) return NULL;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    const char *names[MAX_KEYS];
    Py_ssize_t lengths[MAX_KEYS] = {0}, spans[2 * MAX_KEYS];
    if (read_keys(keys, names, lengths, spans) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const char *s = buf.buf;
    Py_ssize_t stop = object_spans(s, start, end < buf.len ? end : buf.len, names, lengths, nkeys, spans);
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

/* kinds(data, start, end): the `type` of each element of the array data[start:end], as `values`
 * decodes it (None for an element that is not an object); None when there is no array there. What a
 * reader asks of a message's content blocks (a user line of tool results, say), in one call. */
/* Appends an element's type, decoded (`kinds`); None for an element that is not an object. */
static int append_kind(const char *s, Py_ssize_t vs, Py_ssize_t ve, void *list) {
    PyObject *kind = decoded(s, vs, ve);
    int failed = kind == NULL || PyList_Append((PyObject *)list, kind) < 0;
    Py_XDECREF(kind);
    return failed ? -2 : 0;
}

static PyObject *skim_kinds(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &start, &end)) return NULL;
    PyObject *out = PyList_New(0);
    if (out != NULL && array_types(buf.buf, start, end < buf.len ? end : buf.len, append_kind, out) != 0) Py_CLEAR(out);
    PyBuffer_Release(&buf);
    if (out == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
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

/* Whether one of `needles` starts at s[at]. */
static int needle_at(const char *s, Py_ssize_t at, Py_ssize_t stop, PyObject *needles) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(needles); k++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, k);
        Py_ssize_t length = PyBytes_GET_SIZE(needle);
        if (stop - at >= length && memcmp(s + at, PyBytes_AS_STRING(needle), (size_t)length) == 0) return 1;
    }
    return 0;
}

#define MAX_SECONDS 4

/* Whether s[i:stop] holds one of `needles`. When they all start with the same byte and their second
 * bytes are few (JSON names: a quote, then a letter), the places where such a pair of bytes starts
 * are found 16 bytes at a time (SSE2) and the needles compared there, one pass over the line;
 * else memmem, a pass each. */
static int holds_needle(const char *s, Py_ssize_t i, Py_ssize_t stop, PyObject *needles) {
    Py_ssize_t count = PyTuple_GET_SIZE(needles);
    char seconds[MAX_SECONDS];
    int nseconds = 0, paired = 1;
    for (Py_ssize_t k = 0; k < count && paired; k++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, k);
        const char *text = PyBytes_AS_STRING(needle);
        if (PyBytes_GET_SIZE(needle) < 2 || text[0] != PyBytes_AS_STRING(PyTuple_GET_ITEM(needles, 0))[0]) {
            paired = 0;
            break;
        }
        int known = 0;
        for (int m = 0; m < nseconds; m++) known |= seconds[m] == text[1];
        if (!known && nseconds == MAX_SECONDS) paired = 0;
        else if (!known) seconds[nseconds++] = text[1];
    }
#if defined(__SSE2__)
    if (paired && count > 0) {
        const char first = PyBytes_AS_STRING(PyTuple_GET_ITEM(needles, 0))[0];
        const __m128i firsts = _mm_set1_epi8(first);
        __m128i second[MAX_SECONDS];
        for (int m = 0; m < MAX_SECONDS; m++) second[m] = _mm_set1_epi8(seconds[m < nseconds ? m : 0]);
        Py_ssize_t p = i;
        for (; p + 17 <= stop; p += 16) {
            __m128i here = _mm_loadu_si128((const __m128i *)(s + p));
            __m128i next = _mm_loadu_si128((const __m128i *)(s + p + 1));
            __m128i match = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(next, second[0]), _mm_cmpeq_epi8(next, second[1])),
                                         _mm_or_si128(_mm_cmpeq_epi8(next, second[2]), _mm_cmpeq_epi8(next, second[3])));
            unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(here, firsts), match));
            while (mask != 0) {
                if (needle_at(s, p + __builtin_ctz(mask), stop, needles)) return 1;
                mask &= mask - 1;
            }
        }
        for (; p < stop; p++)
            if (s[p] == first && needle_at(s, p, stop, needles)) return 1;
        return 0;
    }
#endif
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, k);
        if (memmem(s + i, (size_t)(stop - i), PyBytes_AS_STRING(needle), (size_t)PyBytes_GET_SIZE(needle))) return 1;
    }
    return 0;
}

/* Whether the value s[vs:ve] is one of `skip`. */
static int in_skip(const char *s, Py_ssize_t vs, Py_ssize_t ve, PyObject *skip) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(skip); k++) {
        PyObject *value = PyTuple_GET_ITEM(skip, k);
        if (PyBytes_GET_SIZE(value) == ve - vs && memcmp(PyBytes_AS_STRING(value), s + vs, (size_t)(ve - vs)) == 0)
            return 1;
    }
    return 0;
}

/* Whether a reader looks at the line s[i:stop] (`lines`): not blank, and not one whose top-level `key`
 * has a value in `skip` unless it holds one of `needles`. */
static int wanted(const char *s, Py_ssize_t i, Py_ssize_t stop, const char *key, Py_ssize_t key_length,
                  PyObject *skip, PyObject *needles) {
    Py_ssize_t first = blanks(s, i, stop), vs = 0, ve = 0;
    if (first >= stop) return 0;
    if (!find_key(s, first, stop, key, key_length, &vs, &ve)) return 1;
    return !in_skip(s, vs, ve, skip) || holds_needle(s, i, stop, needles);
}

static int all_bytes(PyObject *tuple) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(tuple); k++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(tuple, k))) return 0;
    return 1;
}

static int append_span(PyObject *list, Py_ssize_t a, Py_ssize_t b) {
    PyObject *x = PyLong_FromSsize_t(a), *y = PyLong_FromSsize_t(b);
    int failed = x == NULL || y == NULL || PyList_Append(list, x) < 0 || PyList_Append(list, y) < 0;
    Py_XDECREF(x);
    Py_XDECREF(y);
    return failed ? -1 : 0;
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
    if (!all_bytes(skip) || !all_bytes(needles)) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_TypeError, "skip and needles must be bytes");
        return NULL;
    }
    const char *s = buf.buf;
    if (start < 0) start = 0;
    if (end > buf.len) end = buf.len;
    PyObject *out = PyList_New(0);
    Py_ssize_t i = start;
    while (out != NULL && i < end) {
        const char *newline = memchr(s + i, '\n', (size_t)(end - i));
        Py_ssize_t stop = newline ? newline - s : end;
        if (wanted(s, i, stop, key, key_length, skip, needles) && append_span(out, i, stop) < 0) Py_CLEAR(out);
        i = stop + 1;
    }
    PyBuffer_Release(&buf);
    return out;
}

/* --- scan: the lines to look at, each with the values at some key paths --- */

/* The value at s[*at] as Python objects when it is plain all through: objects and arrays of
 * strings without an escape or a control character, integers of up to 18 digits, true, false and
 * null (as json.loads would build it). NULL without an exception when it is not (the caller gives
 * its span, which Python decodes); *at moves past the value. */
/* The keys `scan` has built, so that a key repeated from line to line (a usage's) is one string,
 * made and hashed once per call rather than once per object. */
#define MAX_NAMES 64
#define MAX_NAME_BYTES 48

typedef struct {
    int count;
    Py_ssize_t length[MAX_NAMES];
    const char *text[MAX_NAMES];
    PyObject *name[MAX_NAMES];
} Names;

static void forget_names(Names *names) {
    for (int k = 0; k < names->count; k++) Py_DECREF(names->name[k]);
    names->count = 0;
}

/* The string s[i:j] (a key without escapes), from `names` when it was built before. */
static PyObject *name_of(const char *s, Py_ssize_t i, Py_ssize_t j, Names *names) {
    Py_ssize_t length = j - i;
    for (int k = 0; k < names->count; k++)
        if (names->length[k] == length && memcmp(names->text[k], s + i, (size_t)length) == 0) {
            Py_INCREF(names->name[k]);
            return names->name[k];
        }
    PyObject *name = PyUnicode_DecodeUTF8(s + i, length, "replace");
    if (name != NULL && names->count < MAX_NAMES && length <= MAX_NAME_BYTES) {
        names->length[names->count] = length;
        names->text[names->count] = s + i; /* (the buffer outlives the call) */
        names->name[names->count++] = name;
        Py_INCREF(name);
    }
    return name;
}

/* Where the string opened at s[i] closes, when it has no escape and no control character; else -1. */
static Py_ssize_t plain_string_end(const char *s, Py_ssize_t i, Py_ssize_t n) {
    for (Py_ssize_t j = i + 1; j < n; j++) {
        if (s[j] == '"') return j;
        if (s[j] == '\\' || (unsigned char)s[j] < 0x20) return -1;
    }
    return -1;
}

static PyObject *plain_value(const char *s, Py_ssize_t *at, Py_ssize_t n, int depth, Names *names) {
    Py_ssize_t i = blanks(s, *at, n);
    if (i >= n) return NULL;
    char c = s[i];
    if (c == '"') {
        Py_ssize_t j = plain_string_end(s, i, n);
        if (j < 0) return NULL;
        *at = j + 1;
        return PyUnicode_DecodeUTF8(s + i + 1, j - i - 1, "replace");
    }
    if (c == '{' || c == '[') {
        if (depth >= PLAIN_DEPTH) return NULL;
        char close = c == '{' ? '}' : ']';
        PyObject *out = c == '{' ? PyDict_New() : PyList_New(0);
        if (out == NULL) return NULL;
        i = blanks(s, i + 1, n);
        if (i < n && s[i] == close) {
            *at = i + 1;
            return out;
        }
        for (;;) {
            PyObject *key = NULL;
            if (c == '{') {
                Py_ssize_t j = i < n && s[i] == '"' ? plain_string_end(s, i, n) : -1;
                if (j < 0) break;
                key = name_of(s, i + 1, j, names);
                if (key == NULL) break;
                i = j + 1;
                i = blanks(s, i, n);
                if (i >= n || s[i] != ':') {
                    Py_DECREF(key);
                    break;
                }
                i++;
            }
            PyObject *item = plain_value(s, &i, n, depth + 1, names);
            if (item == NULL) {
                Py_XDECREF(key);
                break;
            }
            int failed = key != NULL ? PyDict_SetItem(out, key, item) : PyList_Append(out, item);
            Py_XDECREF(key);
            Py_DECREF(item);
            if (failed < 0) break;
            i = blanks(s, i, n);
            if (i < n && s[i] == ',') {
                i = blanks(s, i + 1, n);
                continue;
            }
            if (i < n && s[i] == close) {
                *at = i + 1;
                return out;
            }
            break;
        }
        Py_DECREF(out);
        return NULL;
    }
    Py_ssize_t j = i;
    while (j < n && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' && s[j] != '\t' && s[j] != '\r'
           && s[j] != '\n')
        j++;
    if (j == i) return NULL;
    PyObject *word = decoded(s, i, j);
    if (word == NULL || !PyTuple_Check(word)) {
        *at = j;
        return word;
    }
    Py_DECREF(word); /* a span: not plain */
    return NULL;
}

/* The value of path k: `decoded` for a scalar; a container of at most `limit` bytes built when it is
 * plain; else its span. */
static PyObject *path_value(const char *s, Paths *p, int k, Names *names) {
    Py_ssize_t vs = p->vs[k], ve = p->ve[k];
    if (vs < 0) Py_RETURN_NONE;
    if ((s[vs] == '{' || s[vs] == '[') && ve - vs <= p->limit[k]) {
        Py_ssize_t at = vs;
        PyObject *value = plain_value(s, &at, ve, 0, names);
        if (value != NULL && at == ve) return value;
        Py_XDECREF(value);
        if (PyErr_Occurred()) return NULL;
    }
    return decoded(s, vs, ve);
}

static PyObject *skim_scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end;
    const char *key;
    Py_ssize_t key_length;
    PyObject *skip, *needles, *paths, *limits, *marks = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nny#O!O!O!O!|O!", &buf, &start, &end, &key, &key_length, &PyTuple_Type, &skip,
                          &PyTuple_Type, &needles, &PyTuple_Type, &paths, &PyTuple_Type, &limits, &PyTuple_Type, &marks))
        return NULL;
    Paths p;
    p.count = (int)PyTuple_GET_SIZE(paths);
    int nmarks = marks != NULL ? (int)PyTuple_GET_SIZE(marks) : 0;
    PyObject *mark_texts[MAX_PATHS];
    const char *problem = NULL;
    if (!all_bytes(skip) || !all_bytes(needles)) problem = "skip and needles must be bytes";
    else if (p.count + 1 + nmarks > MAX_PATHS || PyTuple_GET_SIZE(limits) != p.count)
        problem = "too many paths and marks, or not a limit each";
    /* The paths, then `key`, then the marks' paths: the line is walked once, for all of them. */
    for (int k = 0; problem == NULL && k < p.count + 1 + nmarks; k++) {
        PyObject *path = k < p.count ? PyTuple_GET_ITEM(paths, k) : NULL;
        if (k == p.count) continue;
        if (k > p.count) {
            PyObject *mark = PyTuple_GET_ITEM(marks, k - p.count - 1);
            if (!PyTuple_Check(mark) || PyTuple_GET_SIZE(mark) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(mark, 1))
                || !all_bytes(PyTuple_GET_ITEM(mark, 1))) {
                problem = "a mark is a path and a tuple of texts (bytes)";
                break;
            }
            path = PyTuple_GET_ITEM(mark, 0);
            mark_texts[k] = PyTuple_GET_ITEM(mark, 1);
        }
        if (!PyTuple_Check(path) || PyTuple_GET_SIZE(path) < 1 || PyTuple_GET_SIZE(path) > MAX_PATH_DEPTH
            || !all_bytes(path)) {
            problem = "a path is a tuple of 1 to 8 keys (bytes)";
            break;
        }
        p.depth[k] = (int)PyTuple_GET_SIZE(path);
        for (int d = 0; d < p.depth[k]; d++) {
            p.key[k][d] = PyBytes_AS_STRING(PyTuple_GET_ITEM(path, d));
            p.key_length[k][d] = PyBytes_GET_SIZE(PyTuple_GET_ITEM(path, d));
        }
        p.limit[k] = k < p.count ? PyLong_AsSsize_t(PyTuple_GET_ITEM(limits, k)) : 0;
        if (p.limit[k] == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&buf);
            return NULL;
        }
    }
    if (problem != NULL) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_TypeError, problem);
        return NULL;
    }
    p.depth[p.count] = 1;
    p.key[p.count][0] = key;
    p.key_length[p.count][0] = key_length;
    int all[MAX_PATHS], walked_paths = p.count + 1 + nmarks;
    Oddities noted = {0};
    p.noted = &noted;
    for (int k = 0; k < walked_paths; k++) all[k] = k;
    Names names = {0};
    const char *s = buf.buf;
    if (start < 0) start = 0;
    if (end > buf.len) end = buf.len;
    PyObject *rows = PyList_New(0);
    Py_ssize_t i = start, newlines = 0;
    while (rows != NULL && i < end) {
        const char *newline = memchr(s + i, '\n', (size_t)(end - i));
        Py_ssize_t stop = newline ? newline - s : end;
        newlines += newline != NULL;
        for (int k = 0; k < walked_paths; k++) p.vs[k] = p.ve[k] = -1;
        noted.odd = 0;
        Py_ssize_t after = walk(s, i, stop, &p, all, walked_paths, 0);
        /* An object followed by more than blanks (two glued by a torn append), or one with an odd value
         * (NaN, 1e999: `Oddities`), is one `parse` may refuse: looked at, and parsed whole. */
        int whole = after >= 0 && (noted.odd || blanks(s, after, stop) < stop);
        int walked = after >= 0 && !whole;
        Py_ssize_t vs = p.vs[p.count], ve = p.ve[p.count];
        /* A line walked is looked at from the values found on the way: its key's, the marks'; any
         * other line (blank, not an object, an escaped key) is asked of `wanted`. */
        int look = whole || (walked ? vs < 0 || !in_skip(s, vs, ve, skip) : wanted(s, i, stop, key, key_length, skip, needles));
        for (int k = p.count + 1; walked && !look && k < walked_paths; k++)
            look = p.vs[k] >= 0 && in_skip(s, p.vs[k], p.ve[k], mark_texts[k]);
        if (look) {
            PyObject *row = PyTuple_New(walked ? 2 + p.count : 2);
            int failed = row == NULL;
            for (int k = 0; !failed && k < 2 + (walked ? p.count : 0); k++) {
                PyObject *value = k == 0 ? PyLong_FromSsize_t(i) : k == 1 ? PyLong_FromSsize_t(stop)
                                                                          : path_value(s, &p, k - 2, &names);
                if (value == NULL) failed = 1;
                else PyTuple_SET_ITEM(row, k, value);
            }
            if (failed || PyList_Append(rows, row) < 0) Py_CLEAR(rows);
            Py_XDECREF(row);
        }
        i = stop + 1;
    }
    forget_names(&names);
    PyBuffer_Release(&buf);
    if (rows == NULL) return NULL;
    PyObject *out = Py_BuildValue("(nN)", newlines, rows);
    return out;
}


static PyMethodDef METHODS[] = {
    {"fields", skim_fields, METH_VARARGS, "fields(data, start, keys) -> offsets of the top-level keys' values"},
    {"values", skim_values, METH_VARARGS, "values(data, start, end, keys) -> the top-level keys' values"},
    {"kinds", skim_kinds, METH_VARARGS, "kinds(data, start, end) -> the type of each element of an array"},
    {"lines", skim_lines, METH_VARARGS, "lines(data, start, end, key, skip, needles) -> the lines to look at"},
    {"scan", skim_scan, METH_VARARGS,
     "scan(data, start, end, key, skip, needles, paths, limits) -> (newlines, the lines to look at with values)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_skim", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__skim(void) {
    return PyModule_Create(&MODULE);
}
