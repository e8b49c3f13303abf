/* _json.h: walking JSON text without building it, for the C extensions that skim session lines
 * (_skim.c, _claude.c). Offsets, never values: strings are found by memchr for their closing
 * quote, containers by counting brackets outside strings. Static functions: each extension
 * has its own copy. */
#ifndef CTXD_JSON_H
#define CTXD_JSON_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_KEYS 32

static Py_ssize_t blanks(const char *s, Py_ssize_t i, Py_ssize_t n) {
    if (i < n && (unsigned char)s[i] > ' ') return i; /* (the agents write JSON without blanks: one test) */
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* Whether the quote at `at` closes the string opened at i: an even run of backslashes before it. */
static int closes(const char *s, Py_ssize_t i, Py_ssize_t at) {
    Py_ssize_t back = at - 1;
    while (back > i && s[back] == '\\') back--;
    return ((at - 1 - back) & 1) == 0;
}

/* The offset just after the string whose opening quote is at i; -1 when it is not closed. Most
 * strings of a session line are short (keys, ids, types, times): their first SHORT_STRING bytes
 * are looked at 16 at a time, without a call to memchr (a third of a first read's skimming). */
#define SHORT_STRING 64
static Py_ssize_t string_end(const char *s, Py_ssize_t i, Py_ssize_t n) {
    Py_ssize_t p = i + 1;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    for (Py_ssize_t stop = p + SHORT_STRING; p + 16 <= n && p < stop; p += 16) {
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + p)), quote));
        for (; mask != 0; mask &= mask - 1) {
            Py_ssize_t at = p + __builtin_ctz(mask);
            if (closes(s, i, at)) return at + 1;
        }
    }
#endif
    for (;;) {
        const char *q = memchr(s + p, '"', (size_t)(n - p));
        if (q == NULL) return -1;
        Py_ssize_t at = q - s;
        if (closes(s, i, at)) return at + 1;
        p = at + 1;
    }
}

/* --- Long values, 64 bytes at a time ---
 * A tool's output or a file's content is most of a session line's bytes: a string of kilobytes
 * with an escaped quote or newline every few dozen bytes, or a container of many such strings.
 * Taken a quote (memchr) or a byte at a time, they were most of a summary's skimming; here each
 * block of 64 bytes is read once, as bitmasks of its quotes, backslashes and brackets. */

typedef struct {
    uint64_t quote, backslash, open, close; /* bit k: s[p + k] is '"', '\\', '{' or '[', '}' or ']' */
    uint64_t odd; /* (`noting` only) an uppercase letter or an 'e': where an odd value may be */
} Block;

/* --- What only a full parse can judge ---
 * A line whose numbers or literals JSON does not have, or that may not fit a double, is one
 * ctxd/agents/jsonl.py `parse` refuses (NaN, Infinity, -Infinity, 1e999): a reader counts it bad and
 * skips it. A walk that notes them (`Oddities`) sets `odd` when, outside strings, a value holds 'N',
 * 'I' or 'E', an 'e' after a digit (an exponent) or a run of RUN_DIGITS digits (a float that may
 * overflow): such a line is left to the parse, which says (almost never: no agent writes them). Found
 * from the bytes the walk reads anyway: a container's from the bitmasks of its blocks, a number's as
 * it is passed over. */
#define RUN_DIGITS 309 /* DBL_MAX has 309 digits: a number of fewer cannot overflow without an exponent */

typedef struct {
    int odd;
} Oddities;

/* Whether the scalar s[i:j] (a number, true, false, null, or what is not JSON) is odd (see above). */
static int odd_scalar(const char *s, Py_ssize_t i, Py_ssize_t j) {
    Py_ssize_t run = 0;
    for (; i < j; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') {
            if (++run >= RUN_DIGITS) return 1;
            continue;
        }
        if (c == 'N' || c == 'I' || c == 'E' || (c == 'e' && run > 0)) return 1;
        run = 0;
    }
    return 0;
}

static void block_at(const char *s, Py_ssize_t p, Py_ssize_t n, Block *b, int noting) {
    char tail[64];
    const char *at = s + p;
    if (n - p < 64) { /* the last bytes, the rest zeros (which match nothing) */
        memset(tail, 0, sizeof tail);
        memcpy(tail, at, (size_t)(n - p));
        at = tail;
    }
    b->quote = b->backslash = b->open = b->close = b->odd = 0;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), lower = _mm_set1_epi8(0x20),
                  open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
    for (int k = 0; k < 4; k++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(at + 16 * k));
        __m128i folded = _mm_or_si128(v, lower); /* '[' | 0x20 is '{', ']' | 0x20 is '}' */
        b->quote |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) << (16 * k);
        b->backslash |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)) << (16 * k);
        b->open |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, open)) << (16 * k);
        b->close |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, close)) << (16 * k);
        if (noting) { /* an uppercase letter, or an 'e' */
            __m128i upper = _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8((char)(0x80 - 'A'))), _mm_set1_epi8((char)(0x80 + 26)));
            b->odd |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_or_si128(upper, _mm_cmpeq_epi8(v, _mm_set1_epi8('e'))))
                      << (16 * k);
        }
    }
#else
    for (int k = 0; k < 64; k++) {
        char c = at[k];
        uint64_t bit = (uint64_t)1 << k;
        if (c == '"') b->quote |= bit;
        else if (c == '\\') b->backslash |= bit;
        else if (c == '{' || c == '[') b->open |= bit;
        else if (c == '}' || c == ']') b->close |= bit;
        else if (noting && ((c >= 'A' && c <= 'Z') || c == 'e')) b->odd |= bit;
    }
#endif
}

/* Bit k: the parity of bits 0..k of x (after quotes: set inside a string, its opening quote included). */
static uint64_t prefix_xor(uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* The offset just after the container that opens at s[i], as a bytewise walk has it: inside a
 * string a backslash escapes the next byte and an unescaped quote closes it; outside, a quote
 * opens a string, brackets count, and any other byte (a backslash too) is passed over. -1 when it
 * is not closed before n. A string that runs past its block is passed over by `string_end`
 * (memchr: a file's content has few quotes), the blocks taken up again after it. */
static Py_ssize_t container_end(const char *s, Py_ssize_t i, Py_ssize_t n, Oddities *noted) {
    Py_ssize_t depth = 0;
    Py_ssize_t run = 0; /* (`noted`) the digits just before the block, outside strings */
    uint64_t odd = 0;   /* (`noted`) bit k: s[p + k] is odd, outside strings (see `Oddities`) */
    for (Py_ssize_t p = i; p < n; p += 64) { /* each block starts outside a string */
        Block b;
        block_at(s, p, n, &b, noted != NULL);
        uint64_t escaped = 0, quotes = b.quote;
        /* Backslashes in order: one inside a string escapes the byte after it. */
        for (uint64_t slashes = b.backslash; slashes != 0; slashes &= slashes - 1) {
            int k = __builtin_ctzll(slashes);
            uint64_t before = ((uint64_t)1 << k) - 1;
            if ((__builtin_parityll(quotes & ~escaped & before)) == 0 || k == 63) continue;
            escaped |= (uint64_t)1 << (k + 1);
            slashes &= ~((uint64_t)1 << (k + 1));
        }
        quotes &= ~escaped;
        uint64_t inside = prefix_xor(quotes);
        uint64_t opens = b.open & ~inside, closes = b.close & ~inside;
        if (noted != NULL && !noted->odd) {
            const char *at = s + p;
            Py_ssize_t size = n - p < 64 ? n - p : 64;
            odd = 0;
            /* Uppercase letters and 'e's outside strings: one of N, I, E, or an 'e' after a digit, is odd. */
            for (uint64_t maybe = b.odd & ~inside; maybe != 0; maybe &= maybe - 1) {
                int k = __builtin_ctzll(maybe);
                char c = at[k];
                if (c == 'N' || c == 'I' || c == 'E'
                    || (c == 'e' && (k > 0 ? at[k - 1] >= '0' && at[k - 1] <= '9' : run > 0)))
                    odd |= (uint64_t)1 << k;
            }
            /* The digits that go on from the block before, and those that end this one (outside strings). */
            Py_ssize_t lead = 0, trail = 0;
            if (run > 0)
                while (lead < size && at[lead] >= '0' && at[lead] <= '9') lead++;
            if (run + lead >= RUN_DIGITS) odd |= 1; /* (a digit of the run: before any close) */
            if (lead == 64) {
                run += 64;
            } else {
                while (trail < size && !(inside >> (size - 1 - trail) & 1) && at[size - 1 - trail] >= '0'
                       && at[size - 1 - trail] <= '9')
                    trail++;
                run = size < 64 ? 0 : trail;
            }
        }
        Py_ssize_t ncloses = __builtin_popcountll(closes);
        if (ncloses < depth) {
            depth += __builtin_popcountll(opens) - ncloses;
        } else {
            for (uint64_t marks = opens | closes; marks != 0; marks &= marks - 1) {
                int k = __builtin_ctzll(marks);
                if (opens >> k & 1) depth++;
                else if (--depth == 0) {
                    /* (only what is before the close: what follows is the walk's, not this value's) */
                    if (noted != NULL && (odd & (((uint64_t)2 << k) - 1)) != 0) noted->odd = 1;
                    return p + k + 1;
                }
            }
        }
        if (noted != NULL && odd != 0) noted->odd = 1;
        if (inside >> 63) { /* a string opened at the block's last quote runs on */
            Py_ssize_t after = string_end(s, p + 63 - __builtin_clzll(quotes), n);
            if (after < 0) return -1;
            p = after - 64;
        }
    }
    return -1;
}

/* The offset after the value at i (blanks already skipped); -1 when it is cut short. With `noted`, an
 * odd value (see `Oddities`) is noted there. */
static Py_ssize_t value_end_noting(const char *s, Py_ssize_t i, Py_ssize_t n, Oddities *noted) {
    if (i >= n) return -1;
    char c = s[i];
    if (c == '"') return string_end(s, i, n);
    if (c == '{' || c == '[') return container_end(s, i, n, noted);
    /* A number, true, false or null: up to the next delimiter. */
    Py_ssize_t start = i;
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' && s[i] != '\r'
           && s[i] != '\n')
        i++;
    if (noted != NULL && !noted->odd && odd_scalar(s, start, i)) noted->odd = 1;
    return i > start ? i : -1;
}

static Py_ssize_t value_end(const char *s, Py_ssize_t i, Py_ssize_t n) {
    return value_end_noting(s, i, n, NULL);
}

/* Whether the `length` bytes at s (of `room` readable) hold a backslash: a key of 16 bytes or fewer
 * in one compare, without a call to memchr (every key of every line is checked). */
static int has_backslash(const char *s, Py_ssize_t length, Py_ssize_t room) {
#if defined(__SSE2__)
    if (length <= 16 && room >= 16) {
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)s), _mm_set1_epi8('\\')));
        return (mask & ((1u << length) - 1)) != 0;
    }
#endif
    return length > 0 && memchr(s, '\\', (size_t)length) != NULL;
}

/* Key paths, each a tuple of keys from the line's object down: what `walk` finds in an object
 * (`scan`'s paths, and `object_spans`' keys as paths of one). */
#define MAX_PATHS 32
#define MAX_PATH_DEPTH 8
_Static_assert(MAX_KEYS <= MAX_PATHS, "object_spans walks its keys as paths");

typedef struct {
    int count;
    const char *key[MAX_PATHS][MAX_PATH_DEPTH];
    Py_ssize_t key_length[MAX_PATHS][MAX_PATH_DEPTH];
    int depth[MAX_PATHS];
    Py_ssize_t limit[MAX_PATHS];
    Py_ssize_t vs[MAX_PATHS], ve[MAX_PATHS];
    Oddities *noted; /* NULL, or where an odd value is noted (`scan`) */
} Paths;

/* Walk the object at s[i:n], recording where the values of the `active` paths are (`level`: how
 * many of their keys are matched already). A key repeated in an object: its last value, as JSON
 * parsers have it (the paths under an earlier one are forgotten). The offset after the object, or
 * -1 when it is not an object JSON's structure has (cut short, a key with an escape). */
static Py_ssize_t walk(const char *s, Py_ssize_t i, Py_ssize_t n, Paths *p, const int *active, int nactive,
                       int level) {
    i = blanks(s, i, n);
    if (i >= n || s[i] != '{') return -1;
    i = blanks(s, i + 1, n);
    if (i < n && s[i] == '}') return i + 1;
    /* The active paths by the length of their key here, chained: a key is compared with those of its
     * length only (most of a line's keys have none), not with each path (a third of a skim's work). */
    int by_length[64], next[MAX_PATHS];
    memset(by_length, -1, sizeof by_length);
    for (int a = nactive - 1; a >= 0; a--) {
        int length_bucket = (int)(p->key_length[active[a]][level] & 63);
        next[a] = by_length[length_bucket];
        by_length[length_bucket] = a;
    }
    while (i < n && s[i] == '"') {
        Py_ssize_t key_end = string_end(s, i, n);
        if (key_end < 0 || has_backslash(s + i + 1, key_end - i - 2, n - i - 1)) return -1;
        const char *name = s + i + 1;
        Py_ssize_t length = key_end - i - 2;
        i = blanks(s, key_end, n);
        if (i >= n || s[i] != ':') return -1;
        i = blanks(s, i + 1, n);
        int inner[MAX_PATHS], leaves[MAX_PATHS], ninner = 0, nleaves = 0;
        for (int a = by_length[length & 63]; a >= 0; a = next[a]) {
            int k = active[a];
            if (p->key_length[k][level] == length && (length == 0 || p->key[k][level][0] == name[0])
                && memcmp(p->key[k][level], name, (size_t)length) == 0) {
                if (p->depth[k] == level + 1) leaves[nleaves++] = k;
                else inner[ninner++] = k;
            }
        }
        Py_ssize_t stop;
        if (ninner > 0) {
            for (int a = 0; a < ninner; a++) p->vs[inner[a]] = p->ve[inner[a]] = -1;
            stop = s[i] == '{' ? walk(s, i, n, p, inner, ninner, level + 1) : value_end_noting(s, i, n, p->noted);
        } else {
            stop = value_end_noting(s, i, n, p->noted);
        }
        if (stop < 0) return -1;
        for (int a = 0; a < nleaves; a++) {
            p->vs[leaves[a]] = i;
            p->ve[leaves[a]] = stop;
        }
        i = blanks(s, stop, n);
        if (i < n && s[i] == ',') {
            i = blanks(s, i + 1, n);
            continue;
        }
        return i < n && s[i] == '}' ? i + 1 : -1;
    }
    return -1;
}

/* The object at s[start:n] (after blanks): the spans of `keys`' values (the last one, when a key is
 * repeated; -1, -1 when absent) into `spans`, and the offset just after the object; -1 when there is
 * no object there, it is cut short or not JSON's structure, or a key has an escape. `walk`, with
 * each key a path of one. */
static Py_ssize_t object_spans(const char *s, Py_ssize_t start, Py_ssize_t n, const char **names,
                               const Py_ssize_t *lengths, Py_ssize_t nkeys, Py_ssize_t *spans) {
    if (start < 0) return -1;
    Paths p;
    int all[MAX_KEYS] = {0};
    p.count = (int)nkeys;
    p.noted = NULL;
    for (int k = 0; k < p.count; k++) {
        p.depth[k] = 1;
        p.key[k][0] = names[k];
        p.key_length[k][0] = lengths[k];
        p.vs[k] = p.ve[k] = -1;
        all[k] = k;
    }
    Py_ssize_t end = walk(s, start, n, &p, all, p.count, 0);
    for (int k = 0; k < p.count; k++) {
        spans[2 * k] = p.vs[k];
        spans[2 * k + 1] = p.ve[k];
    }
    return end;
}


/* Each element of the array at s[start:n] (after blanks), given to `visit` with the span of its
 * `type` value (-1, -1 when the element is not an object or has none). 0 when the array is whole;
 * -1 when there is no array there or it is cut short; what `visit` returned when that is not 0
 * (it stops the walk). */
typedef int (*TypeVisit)(const char *s, Py_ssize_t vs, Py_ssize_t ve, void *context);

static int array_types(const char *s, Py_ssize_t start, Py_ssize_t n, TypeVisit visit, void *context) {
    static const char *type = "type";
    static const Py_ssize_t type_length = 4;
    Py_ssize_t i = start < 0 ? n : blanks(s, start, n);
    if (i >= n || s[i] != '[') return -1;
    i = blanks(s, i + 1, n);
    if (i < n && s[i] == ']') return 0;
    while (i < n) {
        Py_ssize_t stop = value_end(s, i, n), spans[2] = {-1, -1};
        if (stop < 0) return -1;
        if (object_spans(s, i, stop, &type, &type_length, 1, spans) < 0) spans[0] = spans[1] = -1;
        int visited = visit(s, spans[0], spans[1], context);
        if (visited != 0) return visited;
        i = blanks(s, stop, n);
        if (i < n && s[i] == ',') {
            i = blanks(s, i + 1, n);
            continue;
        }
        return i < n && s[i] == ']' ? 0 : -1;
    }
    return -1;
}

/* A tuple of `count` ints (NULL on an error): what `Py_BuildValue("(nn...)")` makes, without parsing
 * its format each time (2% of a summary's instructions, made for most lines). */
static PyObject *ints_tuple(int count, const Py_ssize_t *values) {
    PyObject *out = PyTuple_New(count);
    for (int k = 0; out != NULL && k < count; k++) {
        PyObject *value = PyLong_FromSsize_t(values[k]);
        if (value == NULL) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, k, value);
    }
    return out;
}

#endif
