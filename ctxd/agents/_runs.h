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

/* `layout`'s places (the reader's constants: where a row holds what `run` reads) into `at`, and the
 * largest; -1 when one is not an index (an exception set, or not). */
static Py_ssize_t read_layout(PyObject *layout, Py_ssize_t *at, int count) {
    Py_ssize_t largest = 0;
    for (int k = 0; k < count; k++) {
        at[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(layout, k));
        if (at[k] < 0) return -1;
        if (at[k] > largest) largest = at[k];
    }
    return largest;
}

/* `*now` becomes `value` when they differ (a model, a window): 1 then, 0 when they are equal, -1 on
 * an error. */
static int replace_changed(PyObject **now, PyObject *value) {
    int same = PyObject_RichCompareBool(value, *now, Py_EQ);
    if (same == 0) Py_SETREF(*now, Py_NewRef(value));
    return same < 0 ? -1 : !same;
}

/* A report of `used` tokens whose counts are `counts` (`_reply`, `_usage`): the baseline is `used`
 * from now on and the latest counts `counts`; 1 when either differs from what it was, 0 when not,
 * -1 on an error. */
static int report(PyObject **baseline, PyObject **last_usage, long long used, PyObject *counts) {
    PyObject *used_object = PyLong_FromLongLong(used);
    if (used_object == NULL) return -1;
    int same = PyObject_RichCompareBool(used_object, *baseline, Py_EQ);
    if (same == 1) same = PyObject_RichCompareBool(counts, *last_usage, Py_EQ);
    Py_SETREF(*baseline, used_object);
    if (same == 0) Py_SETREF(*last_usage, Py_NewRef(counts));
    return same < 0 ? -1 : !same;
}

/* What `note_reports` is given of a run (session.py): the first report's fill, the first that sent a
 * prompt (model, input, cache write, its 1-hour part), the latest such request's time (at most 64
 * characters) and where its cache write went (-1: none). */
typedef struct {
    long long first_used;
    PyObject *prompted; /* owned */
    PyObject *request_at;
    int cache_1h;
} Noted;

/* `note_report` of one report of `used` tokens (none when 0); -1 on an error. */
static int note(Noted *noted, long long used, PyObject *model, long long sent, long long cached, long long written,
                long long hour, PyObject *time) {
    if (!used) return 0;
    if (!noted->first_used) noted->first_used = used;
    if (!(sent || cached || written)) return 0;
    if (noted->prompted == NULL && (noted->prompted = Py_BuildValue("(OLLL)", model, sent, written, hour)) == NULL)
        return -1;
    if (time != NULL && PyUnicode_Check(time) && PyUnicode_GET_LENGTH(time) <= 64) noted->request_at = time;
    if (written) noted->cache_1h = hour > 0;
    return 0;
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
