/* _claude: a run of Claude Code's plain message lines, read in one call (ctxd/agents/claude.py).
 *
 * Why: most lines of a transcript are a main-chain reply or a user line of tool results. A
 * summary reads each one for a few facts (its time, its uuid for rewinds, the reply's usage and
 * cost), and doing that line by line in Python was most of what `ctxd sessions` spent above the
 * skimmer (issue #38). This reads as many such lines as follow one another and returns what they
 * changed, once; ClaudeReader applies it. The rules are `ClaudeReader._take_plain`'s, and for a
 * user line of text (a prompt, or Claude Code's own output) `ClaudeReader.record`'s: the text is
 * judged by `user_text` (Python), its turn made by `fold` after the run. A line this cannot read
 * exactly as those would (an escaped string, a key seen before the run, a sidechain, a slash
 * command, a prompt that rewinds, a reply that reports nothing) ends the run, and Python reads it.
 * Without this extension every line goes through `_take_plain` or `record`, with the same result.
 *
 * run(data, rows, i, layout, limits, messages, lines, state, user_text) -> tuple | None
 *     rows[i:] as `skim.scan` gave them, read while they are plain. `layout`: where a row holds
 *     its type, isSidechain, message, isCompactSummary, content, parentUuid and isMeta, then
 *     timestamp, uuid, cwd, sessionId, version, requestId, message id, model and usage. `limits`:
 *     (MAX_MESSAGES, MAX_TOKENS): a run holds no more messages than the reader remembers.
 *     `messages` and `lines`: the reader's message ids and uuids so far (a line naming one ends
 *     the run). `state`: (line, window, turns, reports, baseline, last usage, model, leaf).
 *     `user_text(data, content)`: a user line's text and whether it is a prompt, or None when
 *     Python reads the line. None when rows[i] is not plain; else the tuple `ClaudeReader.fold`
 *     reads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_json.h"
#include "_runs.h"

#define LAYOUT 16

enum { KIND, SIDECHAIN, MESSAGE, COMPACT, CONTENT, PARENT, META, TIME, UUID, CWD, SESSION, VERSION, REQUEST, ID, MODEL,
       USAGE };

static PyObject *EMPTY, *INPUT, *CACHE_READ, *CACHE_WRITE, *OUTPUT, *CACHE_CREATION, *HOUR;

typedef struct {
    PyObject *key; /* borrowed from the rows */
    int model;
    long long usage[FIELDS];
    int alive;
} Message;

typedef struct {
    Py_ssize_t line, start, stop;
} Kept;

typedef struct {
    int results, others;
} Blocks;

/* A user line's content blocks: tool results, beside which only text and images (`_RESULT_KINDS`). */
static int count_block(const char *s, Py_ssize_t vs, Py_ssize_t ve, void *context) {
    Blocks *blocks = context;
    Py_ssize_t length = ve - vs;
    if (length == 13 && memcmp(s + vs, "\"tool_result\"", 13) == 0) blocks->results++;
    else if (!((length == 6 && memcmp(s + vs, "\"text\"", 6) == 0) || (length == 7 && memcmp(s + vs, "\"image\"", 7) == 0)))
        blocks->others++;
    return 0;
}

/* `token_counts(usage, ints_only=True)`: the usage's int values, clamped. */
static PyObject *counts_of(PyObject *usage, long long most) {
    PyObject *counts = PyDict_New(), *key, *value;
    Py_ssize_t at = 0;
    while (counts != NULL && PyDict_Next(usage, &at, &key, &value)) {
        if (!PyLong_CheckExact(value)) continue;
        long long n = token_count(value, most);
        int same = 0;
        if (n > 0) {
            int overflow = 0;
            same = PyLong_AsLongLongAndOverflow(value, &overflow) == n && overflow == 0;
        }
        PyObject *count = same ? Py_NewRef(value) : PyLong_FromLongLong(n);
        if (count == NULL || PyDict_SetItem(counts, key, count) < 0) Py_CLEAR(counts);
        Py_XDECREF(count);
    }
    return counts;
}

static PyObject *claude_run(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *rows, *layout_tuple, *limits, *messages, *lines, *state, *user_text;
    Py_ssize_t first;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!nO!O!O!O!O!O", &buf, &PyList_Type, &rows, &first, &PyTuple_Type, &layout_tuple,
                          &PyTuple_Type, &limits, &PyDict_Type, &messages, &PyDict_Type, &lines, &PyTuple_Type, &state,
                          &user_text))
        return NULL;
    PyObject *data = PyTuple_GET_ITEM(args, 0);
    Py_ssize_t at[LAYOUT], max_index, max_messages, line, window, turns, reports;
    long long most;
    PyObject *baseline, *last_usage, *model_now, *leaf;
    if (PyTuple_GET_SIZE(layout_tuple) != LAYOUT
        || !PyArg_ParseTuple(limits, "nL", &max_messages, &most)
        || !PyArg_ParseTuple(state, "nnnnOOOO", &line, &window, &turns, &reports, &baseline, &last_usage, &model_now,
                             &leaf)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a layout of 16 places");
        PyBuffer_Release(&buf);
        return NULL;
    }
    max_index = read_layout(layout_tuple, at, LAYOUT);
    if (PyErr_Occurred() || max_index < 0 || first < 0 || max_messages < 1 || max_messages > 1 << 16) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a place, the first row or a limit out of range");
        PyBuffer_Release(&buf);
        return NULL;
    }
    const char *s = buf.buf;
    Py_ssize_t n = buf.len, count = PyList_GET_SIZE(rows), j = first, line_stop = -1;
    Message *held = PyMem_Calloc((size_t)max_messages, sizeof(Message));
    Kept *kept = NULL;
    Py_ssize_t nkept = 0, kept_room = 0;
    Sums sums = {0};
    int nheld = 0, failed = held == NULL;
    PyObject *run_keys = PyDict_New(), *run_uuids = PySet_New(NULL), *ends = PyList_New(0), *prompts = PyList_New(0);
    PyObject *first_time = NULL, *last_time = NULL, *cwd = NULL, *session = NULL, *version = NULL;
    Noted noted = {0, NULL, NULL, -1};
    int usage_changed = 0, model_changed = 0, reset = 0;
    Py_ssize_t added_reports = 0;
    Py_INCREF(baseline);
    Py_INCREF(last_usage);
    Py_INCREF(model_now);
    failed = failed || run_keys == NULL || run_uuids == NULL || ends == NULL || prompts == NULL;
    for (; !failed && j < count; j++) {
        PyObject *row = PyList_GET_ITEM(rows, j);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) <= max_index) break;
        PyObject *kind = PyTuple_GET_ITEM(row, at[KIND]), *sidechain = PyTuple_GET_ITEM(row, at[SIDECHAIN]);
        PyObject *message = PyTuple_GET_ITEM(row, at[MESSAGE]);
        if (!PyUnicode_Check(kind) || (sidechain != Py_None && sidechain != Py_False)) break;
        int reply = PyUnicode_CompareWithASCIIString(kind, "assistant") == 0;
        if (!reply && PyUnicode_CompareWithASCIIString(kind, "user") != 0) break;
        Py_ssize_t m0 = 0, m1 = 0;
        if (!PyTuple_Check(message) || !PyArg_ParseTuple(message, "nn", &m0, &m1) || m0 < 0 || m0 >= n || s[m0] != '{') {
            PyErr_Clear();
            break;
        }
        PyObject *content = PyTuple_GET_ITEM(row, at[CONTENT]);
        int texted = 0; /* a user line of text (`record`), not of tool results (`_take_plain`) */
        if (!reply) {
            PyObject *compact = PyTuple_GET_ITEM(row, at[COMPACT]);
            Py_ssize_t c0 = -1, c1 = 0;
            if (compact != Py_None && compact != Py_False) break;
            if (PyTuple_Check(content)) {
                if (!PyArg_ParseTuple(content, "nn", &c0, &c1) || c0 < 0 || c0 >= n) {
                    PyErr_Clear();
                    break;
                }
            } else if (!PyUnicode_Check(content)) break;
            if (c0 >= 0 && s[c0] == '[') {
                Blocks blocks = {0, 0};
                if (array_types(s, c0, c1 < n ? c1 : n, count_block, &blocks) != 0 || blocks.results == 0 || blocks.others > 0)
                    break;
            } else {
                PyObject *meta = PyTuple_GET_ITEM(row, at[META]);
                if (meta != Py_None && meta != Py_False) break;
                texted = 1;
            }
        }
        PyObject *v[LAYOUT];
        int spans = 0;
        for (int k = TIME; k < LAYOUT; k++) spans |= PyTuple_Check(v[k] = PyTuple_GET_ITEM(row, at[k]));
        if (spans) break; /* (a string with escapes, say: `_take_plain` decodes it) */
        PyObject *uuid = PyUnicode_Check(v[UUID]) ? v[UUID] : NULL;
        if (uuid != NULL) {
            int seen = PyDict_Contains(lines, uuid);
            if (seen == 0) seen = PySet_Contains(run_uuids, uuid);
            if (seen != 0) {
                failed = seen < 0;
                break;
            }
        }
        /* A user line's text: a prompt (a turn, unless it rewinds: `_rewind`), or Claude Code's own. */
        PyObject *said = NULL;
        int prompt = 0;
        if (texted) {
            said = PyObject_CallFunctionObjArgs(user_text, data, content, NULL);
            if (said == NULL) {
                failed = 1;
                break;
            }
            if (!PyTuple_Check(said) || PyTuple_GET_SIZE(said) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(said, 0))) {
                Py_DECREF(said);
                break;
            }
            prompt = PyObject_IsTrue(PyTuple_GET_ITEM(said, 1));
            PyObject *parent = PyTuple_GET_ITEM(row, at[PARENT]);
            int same = 1;
            if (prompt > 0 && PyTuple_Check(parent)) same = 0; /* (an escaped string) */
            else if (prompt > 0 && PyUnicode_Check(parent)) same = leaf != Py_None && PyObject_RichCompareBool(parent, leaf, Py_EQ);
            if (prompt < 0 || same <= 0) {
                failed = prompt < 0 || same < 0;
                Py_DECREF(said);
                break;
            }
        }
        /* The reply's usage, billed (`_cost`), checked before anything of the line is taken. */
        PyObject *model = PyUnicode_Check(v[MODEL]) ? v[MODEL] : EMPTY, *key = NULL, *counts = NULL;
        int billed = reply && PyDict_CheckExact(v[USAGE]) && PyUnicode_CompareWithASCIIString(model, "<synthetic>") != 0;
        int slot = -1, model_at = -1, replaced = -1;
        if (billed) {
            PyObject *named[3] = {v[ID], v[REQUEST], v[UUID]};
            for (int k = 0; k < 3 && key == NULL; k++) {
                int truth = PyObject_IsTrue(named[k]);
                if (truth < 0) failed = 1;
                if (truth > 0) key = named[k];
            }
            if (failed) break;
            if (!PyUnicode_Check(key)) key = NULL;
            if (key != NULL) {
                int seen = PyDict_Contains(messages, key);
                if (seen != 0) {
                    failed = seen < 0;
                    break;
                }
                PyObject *index = PyDict_GetItemWithError(run_keys, key);
                if (index == NULL && PyErr_Occurred()) {
                    failed = 1;
                    break;
                }
                if (nheld >= max_messages) break;
                if (index != NULL) replaced = (int)PyLong_AsLong(index); /* a streamed copy: it replaces */
                slot = nheld;
            }
            model_at = model_place(&sums, model);
            if (model_at < 0) {
                failed = model_at == -2;
                break;
            }
            counts = counts_of(v[USAGE], most);
            if (counts == NULL) {
                failed = 1;
                break;
            }
        }
        /* A reply that reports nothing (Claude Code's own, or a streamed copy with no usage) ends the
           run: what of it the tail holds depends on its message's blocks before it (`_in_run`). */
        if (reply && (!billed || count_at(counts, INPUT) + count_at(counts, CACHE_READ) + count_at(counts, CACHE_WRITE)
                                         + count_at(counts, OUTPUT) == 0)) {
            Py_XDECREF(counts);
            if (PyErr_Occurred()) failed = 1;
            break;
        }
        /* The line is taken from here on. */
        if (prompt) {
            PyObject *turn = PyTuple_Pack(2, PyTuple_GET_ITEM(said, 0), v[TIME]);
            if (turn == NULL || PyList_Append(prompts, turn) < 0) failed = 1;
            Py_XDECREF(turn);
            turns++;
        }
        Py_XDECREF(said);
        PyObject *facts[5] = {v[TIME], v[CWD], v[SESSION], v[VERSION], NULL};
        if (PyUnicode_Check(facts[0])) {
            if (first_time == NULL) first_time = facts[0];
            last_time = facts[0];
        }
        if (cwd == NULL && PyUnicode_Check(facts[1])) cwd = facts[1];
        if (session == NULL && PyUnicode_Check(facts[2])) session = facts[2];
        if (PyUnicode_Check(facts[3])) version = facts[3];
        long long used = 0;
        if (billed) {
            long long usage[FIELDS] = {count_at(counts, INPUT), count_at(counts, CACHE_READ), count_at(counts, CACHE_WRITE),
                                       count_at(counts, OUTPUT), 0, 0};
            PyObject *split = PyDict_GetItemWithError(v[USAGE], CACHE_CREATION);
            if (split != NULL && PyDict_Check(split)) {
                long long hour = token_count(PyDict_GetItemWithError(split, HOUR), most);
                usage[5] = hour < usage[2] ? hour : usage[2];
            }
            if (PyErr_Occurred()) {
                Py_DECREF(counts);
                failed = 1;
                break;
            }
            if (replaced >= 0) {
                held[replaced].alive = 0;
                for (int f = 0; f < FIELDS; f++) sums.sum[held[replaced].model][f] -= held[replaced].usage[f];
            }
            if (key != NULL) {
                PyObject *index = PyLong_FromLong(slot);
                if (index == NULL || PyDict_SetItem(run_keys, key, index) < 0) failed = 1;
                Py_XDECREF(index);
                held[slot].key = key;
                held[slot].model = model_at;
                memcpy(held[slot].usage, usage, sizeof(usage));
                held[slot].alive = 1;
                nheld++;
            }
            for (int f = 0; f < FIELDS; f++) sums.sum[model_at][f] += usage[f];
            used = usage[0] + usage[1] + usage[2] + usage[3];
            if (used) { /* the baseline (`_reply`), then `note_report` */
                int changed = report(&baseline, &last_usage, used, counts);
                if (changed < 0 || note(&noted, used, model, usage[0], usage[1], usage[2], usage[5], facts[0]) < 0)
                    failed = 1;
                usage_changed |= changed > 0;
            }
            if (PyUnicode_GET_LENGTH(model) > 0) {
                int changed = replace_changed(&model_now, model);
                failed |= changed < 0;
                model_changed |= changed > 0;
            }
            Py_DECREF(counts);
        }
        line++;
        if (used) {
            reports++;
            added_reports++;
            nkept = 0;
            reset = 1;
        } else {
            if (nkept == kept_room) {
                kept_room = kept_room ? 2 * kept_room : 16;
                Kept *grown = PyMem_Realloc(kept, (size_t)kept_room * sizeof(Kept));
                if (grown == NULL) {
                    failed = 1;
                    break;
                }
                kept = grown;
            }
            kept[nkept].line = line;
            kept[nkept].start = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 0));
            kept[nkept].stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 1));
            nkept++;
        }
        if (uuid != NULL) { /* `_link` */
            Py_ssize_t where[4] = {line, window, turns, reports};
            PyObject *at = ints_tuple(4, where), *end = at != NULL ? PyTuple_Pack(2, uuid, at) : NULL;
            if (end == NULL || PyList_Append(ends, end) < 0 || PySet_Add(run_uuids, uuid) < 0) failed = 1;
            Py_XDECREF(at);
            Py_XDECREF(end);
            leaf = uuid;
        }
        line_stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(row, 1));
        if (PyErr_Occurred()) failed = 1;
    }
    PyObject *out = NULL;
    if (!failed && j > first) {
        PyObject *pending = PyList_New(nkept), *sum_list = sums_list(&sums), *message_list = PyList_New(0);
        for (Py_ssize_t k = 0; pending != NULL && k < nkept; k++) {
            Py_ssize_t a = kept[k].start, b = kept[k].stop;
            if (a < 0 || b > n || b < a) a = b = 0;
            PyObject *item = Py_BuildValue("(ny#)", kept[k].line, s + a, b - a);
            if (item == NULL) Py_CLEAR(pending);
            else PyList_SET_ITEM(pending, k, item);
        }
        for (int k = 0; message_list != NULL && k < nheld; k++) {
            if (!held[k].alive) continue;
            PyObject *item = Py_BuildValue("(O(ON))", held[k].key, sums.model[held[k].model], usage_tuple(held[k].usage));
            if (item == NULL || PyList_Append(message_list, item) < 0) Py_CLEAR(message_list);
            Py_XDECREF(item);
        }
        if (pending != NULL && sum_list != NULL && message_list != NULL)
            out = Py_BuildValue("(nnnnOOOOOOOiLOOiOOiOiOOO)", j, line_stop, line, added_reports,
                                first_time ? first_time : Py_None, last_time ? last_time : Py_None,
                                cwd ? cwd : Py_None, session ? session : Py_None, version ? version : Py_None,
                                ends, pending, reset, noted.first_used, noted.prompted ? noted.prompted : Py_None,
                                noted.request_at ? noted.request_at : Py_None, noted.cache_1h, baseline, last_usage,
                                usage_changed,
                                model_now, model_changed, sum_list, message_list, prompts);
        Py_XDECREF(pending);
        Py_XDECREF(sum_list);
        Py_XDECREF(message_list);
    }
    Py_XDECREF(noted.prompted);
    Py_DECREF(baseline);
    Py_DECREF(last_usage);
    Py_DECREF(model_now);
    Py_XDECREF(run_keys);
    Py_XDECREF(run_uuids);
    Py_XDECREF(ends);
    Py_XDECREF(prompts);
    PyMem_Free(held);
    PyMem_Free(kept);
    PyBuffer_Release(&buf);
    if (out == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return out;
}

static PyMethodDef METHODS[] = {
    {"run", claude_run, METH_VARARGS,
     "run(data, rows, i, layout, limits, messages, lines, state, user_text) -> what a run of plain lines changed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_claude", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__claude(void) {
    EMPTY = PyUnicode_InternFromString("");
    INPUT = PyUnicode_InternFromString("input_tokens");
    CACHE_READ = PyUnicode_InternFromString("cache_read_input_tokens");
    CACHE_WRITE = PyUnicode_InternFromString("cache_creation_input_tokens");
    OUTPUT = PyUnicode_InternFromString("output_tokens");
    CACHE_CREATION = PyUnicode_InternFromString("cache_creation");
    HOUR = PyUnicode_InternFromString("ephemeral_1h_input_tokens");
    if (!EMPTY || !INPUT || !CACHE_READ || !CACHE_WRITE || !OUTPUT || !CACHE_CREATION || !HOUR) return NULL;
    return PyModule_Create(&MODULE);
}
