/* _runs.h: what the agents' run readers share (_claude.c, _codex.c): a token count as
 * session.py `tokens` has it, a Usage as a tuple, and the sums per model of a run's costs.
 * Static functions: each extension has its own copy. */
#ifndef CTXD_RUNS_H
#define CTXD_RUNS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define FIELDS 6 /* a Usage: input, cached input, cache write, output, reasoning, cache write 1h */
#define MAX_MODELS 16

/* `tokens()`: a positive int clamped to `most`, else 0 (NULL too). */
static long long token_count(PyObject *value, long long most) {
    if (value == NULL || !PyLong_CheckExact(value)) return 0;
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow > 0) return most;
    if (overflow < 0 || n <= 0) return 0;
    return n > most ? most : n;
}

/* A count of `counts` (a dict of clamped ints, `token_counts`'s), 0 when it has none. */
static long long count_at(PyObject *counts, PyObject *key) {
    PyObject *value = PyDict_GetItemWithError(counts, key);
    return value != NULL ? PyLong_AsLongLong(value) : 0;
}

/* `Usage.values()`. */
static PyObject *usage_tuple(const long long *usage) {
    return Py_BuildValue("(LLLLLL)", usage[0], usage[1], usage[2], usage[3], usage[4], usage[5]);
}

/* A run's costs per model, in the order the models were first billed (as `Session.cumulative`
 * gains them). Models are borrowed from the rows. */
typedef struct {
    int count;
    PyObject *model[MAX_MODELS];
    long long sum[MAX_MODELS][FIELDS];
} Sums;

/* The place of `model` in `sums`, added when new; -1 when the table is full, -2 on an error. */
static int model_place(Sums *sums, PyObject *model) {
    for (int k = 0; k < sums->count; k++) {
        int same = PyObject_RichCompareBool(sums->model[k], model, Py_EQ);
        if (same < 0) return -2;
        if (same) return k;
    }
    if (sums->count >= MAX_MODELS) return -1;
    sums->model[sums->count] = model;
    memset(sums->sum[sums->count], 0, sizeof(sums->sum[0]));
    return sums->count++;
}

/* [(model, Usage.values()), ...] */
static PyObject *sums_list(const Sums *sums) {
    PyObject *out = PyList_New(sums->count);
    for (int k = 0; out != NULL && k < sums->count; k++) {
        PyObject *item = Py_BuildValue("(ON)", sums->model[k], usage_tuple(sums->sum[k]));
        if (item == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, k, item);
    }
    return out;
}

#endif
