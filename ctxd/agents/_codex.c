/* _codex: a run of Codex rollout lines read in one call (ctxd/agents/codex.py).
 *
 * Why: a summary of a rollout reads its usage reports (`token_count` events, three or so a
 * turn) and its turns, and passes over the lines around them (turn contexts, `task_started`,
 * response items once the title is known), and doing that line by line in Python was most of
 * what Codex's files cost `ctxd sessions` above the skimmer (issue #38). This reads as many such
 * lines as follow one another and returns what they changed, once; CodexReader applies it. The
 * rules are `CodexReader.take`'s and `_usage`'s; a turn's event is handed back as the row has it
 * (`_event` makes the turn after the run: nothing else in a run depends on it). A line this
 * cannot read as they would (an escaped string, a value not built, any other kind) ends the run,
 * and Python reads it. Without this extension every line goes through `take`, with the same
 * result.
 *
 * run(data, rows, i, layout, most, state) -> tuple | None
 *     rows[i:] as `skim.scan` gave them with codex.PATHS. `layout`: where a row holds its
 *     timestamp, type, payload, payload type, model, info, model_context_window, message and
 *     item. `most`: MAX_TOKENS. `state`: (title known, model, context window, baseline, last
 *     usage, total). None when rows[i] is not one of those lines; else the tuple
 *     `CodexReader.fold` reads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_runs.h"

#define LAYOUT 9
#define TOTALS 5

enum { TIME, KIND, PAYLOAD, EVENT, MODEL, INFO, WINDOW, MESSAGE, ITEM };

static PyObject *EMPTY, *LAST, *TOTAL, *CONTEXT_WINDOW, *TYPE, *INPUT, *OUTPUT, *ALL, *CACHED, *WRITTEN;
static PyObject *TOTAL_KEYS[TOTALS];

static int is(PyObject *value, const char *text) {
    return PyUnicode_Check(value) && PyUnicode_CompareWithASCIIString(value, text) == 0;
}

/* `isinstance(value, int) and value > 0` (a bool too, as Python has it). */
static int positive(PyObject *value) {
    if (value == NULL || !PyLong_Check(value)) return 0;
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    return overflow > 0 || (overflow == 0 && n > 0);
}

/* `token_counts(last)`: every value of the report, clamped (a value that is not an int: 0). */
static PyObject *counts_of(PyObject *report, long long most) {
    PyObject *counts = PyDict_New(), *key, *value;
    Py_ssize_t at = 0;
    while (counts != NULL && PyDict_Next(report, &at, &key, &value)) {
        PyObject *count = PyLong_FromLongLong(token_count(value, most));
        if (count == NULL || PyDict_SetItem(counts, key, count) < 0) Py_CLEAR(counts);
        Py_XDECREF(count);
    }
    return counts;
}

static PyObject *codex_run(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *rows, *layout, *state;
    Py_ssize_t first;
    long long most;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!nO!LO!", &buf, &PyList_Type, &rows, &first, &PyTuple_Type, &layout, &most,
                          &PyTuple_Type, &state))
        return NULL;
    Py_ssize_t at[LAYOUT], max_index;
    int title_known = 0;
    PyObject *model_now, *window_now, *baseline, *last_usage, *total_tuple;
    if (PyTuple_GET_SIZE(layout) != LAYOUT
        || !PyArg_ParseTuple(state, "pOOOOO!", &title_known, &model_now, &window_now, &baseline, &last_usage,
                             &PyTuple_Type, &total_tuple)
        || PyTuple_GET_SIZE(total_tuple) != TOTALS) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a layout of 9 places and a total of 5");
        PyBuffer_Release(&buf);
        return NULL;
    }
    long long total[TOTALS];
    max_index = read_layout(layout, at, LAYOUT);
    for (int k = 0; k < TOTALS; k++) total[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(total_tuple, k));
    if (PyErr_Occurred() || max_index < 0 || first < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a place or the first row out of range");
        PyBuffer_Release(&buf);
        return NULL;
    }
    const char *s = buf.buf;
    Py_ssize_t n = buf.len, count = PyList_GET_SIZE(rows), j = first, line_stop = -1, report_end = -1;
    PyObject *activity = NULL, *stamp = NULL;
    Noted noted = {0, NULL, NULL, -1};
    int stamped = 0, model_changed = 0, window_changed = 0, reported = 0, usage_changed = 0;
    int failed = 0, total_changed = 0;
    long long fill = 0;
    Sums sums = {0};
    Py_INCREF(model_now);
    Py_INCREF(window_now);
    Py_INCREF(baseline);
    Py_INCREF(last_usage);
    PyObject *turns = PyList_New(0); /* (event type, its message or item as the row has it, timestamp) */
    failed = turns == NULL;
    for (; !failed && j < count; j++) {
        PyObject *row = PyList_GET_ITEM(rows, j);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) <= max_index) break;
        PyObject *v[LAYOUT];
        for (int k = 0; k < LAYOUT; k++) v[k] = PyTuple_GET_ITEM(row, at[k]);
        if (PyTuple_Check(v[TIME]) || PyTuple_Check(v[KIND])) break; /* (escaped: `take` decodes it) */
        PyObject *time = PyUnicode_Check(v[TIME]) ? v[TIME] : NULL;
        if (is(v[KIND], "response_item")) { /* read for its title, known already */
            if (!title_known) break;
            if (time != NULL) activity = time;
            line_stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 1));
            continue;
        }
        int context = is(v[KIND], "turn_context");
        if (!context && !is(v[KIND], "event_msg")) break;
        Py_ssize_t p0 = 0, p1 = 0;
        if (!PyTuple_Check(v[PAYLOAD]) || !PyArg_ParseTuple(v[PAYLOAD], "nn", &p0, &p1) || p0 < 0 || p0 >= n || s[p0] != '{') {
            PyErr_Clear();
            break;
        }
        PyObject *info = NULL, *said = NULL; /* said: a turn's message, or its item */
        if (context) {
            if (PyTuple_Check(v[MODEL])) break;
        } else {
            if (PyTuple_Check(v[EVENT])) break;
            if (is(v[EVENT], "user_message")) said = v[MESSAGE];
            else if (is(v[EVENT], "token_count")) {
                if (PyTuple_Check(v[INFO])) break;
                info = PyDict_Check(v[INFO]) ? v[INFO] : NULL;
            } else if (is(v[EVENT], "item_completed")) {
                if (PyTuple_Check(v[ITEM])) break;
                if (PyDict_Check(v[ITEM])) {
                    PyObject *type = PyDict_GetItemWithError(v[ITEM], TYPE);
                    if (type == NULL && PyErr_Occurred()) {
                        failed = 1;
                        break;
                    }
                    if (type != NULL && is(type, "UserMessage")) said = v[ITEM];
                }
            } else if (is(v[EVENT], "task_started")) {
                if (PyTuple_Check(v[WINDOW])) break;
            }
        }
        /* A report's parts, checked before anything of the line is taken. */
        PyObject *last = NULL, *totals = NULL, *counts = NULL;
        if (info != NULL) {
            last = PyDict_GetItemWithError(info, LAST);
            if (last == NULL && PyErr_Occurred()) failed = 1;
            totals = PyDict_GetItemWithError(info, TOTAL);
            if (totals == NULL && PyErr_Occurred()) failed = 1;
            if (failed) break;
            if (last != NULL && !PyDict_Check(last)) last = NULL;
            if (totals != NULL && !PyDict_Check(totals)) totals = NULL;
            if (totals != NULL && sums.count >= MAX_MODELS) break; /* (the rest is read next) */
            counts = last != NULL ? counts_of(last, most) : PyDict_New();
            if (counts == NULL) {
                failed = 1;
                break;
            }
        }
        /* The line is taken from here on. */
        if (said != NULL) {
            PyObject *turn = PyTuple_Pack(3, v[EVENT], said, v[TIME]);
            if (turn == NULL || PyList_Append(turns, turn) < 0) failed = 1;
            Py_XDECREF(turn);
        }
        if (time != NULL) activity = time;
        stamp = time;
        stamped = 1;
        PyObject *window = context ? NULL : info != NULL ? PyDict_GetItemWithError(info, CONTEXT_WINDOW)
                           : is(v[EVENT], "task_started") ? v[WINDOW] : NULL;
        if (positive(window)) {
            int changed = replace_changed(&window_now, window);
            failed |= changed < 0;
            window_changed |= changed > 0;
        }
        if (context && PyUnicode_Check(v[MODEL])) { /* `_context` */
            int changed = replace_changed(&model_now, v[MODEL]);
            failed |= changed < 0;
            model_changed |= changed > 0;
        }
        if (counts != NULL) { /* `_usage` */
            long long input = count_at(counts, INPUT), output = count_at(counts, OUTPUT);
            if (input || output) {
                long long used = count_at(counts, ALL), cached = count_at(counts, CACHED);
                long long written = count_at(counts, WRITTEN), sent = input - cached > 0 ? input - cached : 0;
                if (note(&noted, used, PyUnicode_Check(model_now) ? model_now : EMPTY, sent, cached, written, 0,
                         time) < 0)
                    failed = 1;
                fill = used ? used : fill;
                int changed = report(&baseline, &last_usage, used, counts);
                failed |= changed < 0;
                if (changed > 0) { /* `Session.reported` */
                    reported = usage_changed = 1;
                    report_end = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 1));
                }
            }
            Py_DECREF(counts);
            if (totals != NULL) { /* cost from the running total */
                long long now[TOTALS], before[TOTALS] = {0, 0, 0, 0, 0};
                int same = 1;
                for (int k = 0; k < TOTALS; k++) {
                    PyObject *value = PyDict_GetItemWithError(totals, TOTAL_KEYS[k]);
                    if (value == NULL && PyErr_Occurred()) failed = 1;
                    now[k] = token_count(value, most);
                    same = same && now[k] == total[k];
                }
                if (!same) {
                    if (now[0] >= total[0]) memcpy(before, total, sizeof(before));
                    long long billed = now[1] - before[1] > 0 ? now[1] - before[1] : 0;
                    long long read = now[2] - before[2] > 0 ? now[2] - before[2] : 0;
                    long long out = now[3] - before[3] > 0 ? now[3] - before[3] : 0;
                    long long reasoning = now[4] - before[4] > 0 ? now[4] - before[4] : 0;
                    if (read > billed) read = billed;
                    if (billed || out) {
                        int place = model_place(&sums, PyUnicode_Check(model_now) && PyUnicode_GET_LENGTH(model_now) ? model_now : EMPTY);
                        long long usage[FIELDS] = {billed - read, read, 0, out, reasoning, 0};
                        for (int f = 0; place >= 0 && f < FIELDS; f++) sums.sum[place][f] += usage[f];
                        usage_changed = 1;
                    }
                    memcpy(total, now, sizeof(total));
                    total_changed = 1;
                }
            }
        }
        line_stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 1));
        if (PyErr_Occurred()) failed = 1;
    }
    PyObject *out = NULL;
    if (!failed && j > first) {
        PyObject *sum_list = sums_list(&sums);
        if (sum_list != NULL)
            out = Py_BuildValue("(nnOiOOiOiLOOiLiOOnii(LLLLL)NO)", j, line_stop, activity ? activity : Py_None, stamped,
                                stamp ? stamp : Py_None, model_now, model_changed, window_now, window_changed,
                                noted.first_used, noted.prompted ? noted.prompted : Py_None,
                                noted.request_at ? noted.request_at : Py_None, noted.cache_1h,
                                fill, reported, baseline, last_usage, report_end, usage_changed, total_changed,
                                total[0], total[1], total[2], total[3], total[4], sum_list, turns);
    }
    Py_XDECREF(turns);
    Py_XDECREF(noted.prompted);
    Py_DECREF(model_now);
    Py_DECREF(window_now);
    Py_DECREF(baseline);
    Py_DECREF(last_usage);
    PyBuffer_Release(&buf);
    if (out == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return out;
}

static PyMethodDef METHODS[] = {
    {"run", codex_run, METH_VARARGS, "run(data, rows, i, layout, most, state) -> what a run of lines changed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_codex", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__codex(void) {
    static const char *totals[TOTALS] = {"total_tokens", "input_tokens", "cached_input_tokens", "output_tokens",
                                         "reasoning_output_tokens"};
    EMPTY = PyUnicode_InternFromString("");
    LAST = PyUnicode_InternFromString("last_token_usage");
    TOTAL = PyUnicode_InternFromString("total_token_usage");
    CONTEXT_WINDOW = PyUnicode_InternFromString("model_context_window");
    TYPE = PyUnicode_InternFromString("type");
    INPUT = PyUnicode_InternFromString("input_tokens");
    OUTPUT = PyUnicode_InternFromString("output_tokens");
    ALL = PyUnicode_InternFromString("total_tokens");
    CACHED = PyUnicode_InternFromString("cached_input_tokens");
    WRITTEN = PyUnicode_InternFromString("cache_write_input_tokens");
    if (!EMPTY || !LAST || !TOTAL || !CONTEXT_WINDOW || !TYPE || !INPUT || !OUTPUT || !ALL || !CACHED || !WRITTEN) return NULL;
    for (int k = 0; k < TOTALS; k++)
        if ((TOTAL_KEYS[k] = PyUnicode_InternFromString(totals[k])) == NULL) return NULL;
    return PyModule_Create(&MODULE);
}
