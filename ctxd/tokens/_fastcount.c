/* _fastcount: a fast estimate of tiktoken's token count (o200k_base, cl100k_base), in one pass.
 *
 * Why: the byte-class estimator in estimator.py cannot tell which words are in the vocabulary,
 * and tiktoken itself is too slow for the daemon's hot path. Here a text is cut into the pieces
 * the encoding's regex would cut it into (approximated by character class, exact for ASCII in
 * the common cases), and each piece counts 1 when the vocabulary holds it, else the number of
 * tokens of a greedy longest-prefix cut. The vocabulary is a Bloom filter of 64-bit words, two
 * bits per token in one word (one cache line per probe; 512 KB for o200k stays in L2), built by
 * build() from the encoding's .tiktoken file. A false positive (about 1 in 100 probes of a
 * non-token) only makes a piece count a little low.
 *
 * count(text: str, table: bytes, o200k: bool) -> int
 * build(data: bytes, log2_words: int) -> bytes       (data: the decompressed .tiktoken file)
 *
 * No global state: the table is an immutable bytes object that the caller owns.
 */
#ifndef MODE
#define MODE 0
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Character classes of the pre-tokenizer. */
enum { END, SPACE, NL, UPPER, LOWER, BOTH, DIGIT, PUNCT };
#define IS_LETTER(c) ((c) == UPPER || (c) == LOWER || (c) == BOTH)
/* Bytes of the UTF-8 character whose first byte is b (1 for a stray continuation byte). */
#define CHAR_LEN(b) ((b) < 0xC0 ? 1 : (b) < 0xE0 ? 2 : (b) < 0xF0 ? 3 : 4)

#define TOKEN_MAX 128    /* longest token of either encoding, in bytes */
#ifndef PROBE_MAX
#define PROBE_MAX 24
#endif
#define PROBE_MAX_UNUSED     /* longest prefix (bytes) the greedy cut tries inside a piece */
#define MULT 0x9E3779B97F4A7C15ULL


/* ASCII classes: \t \v \f and space are blanks; \r \n newlines; other control characters
 * count as punctuation, as in the regex (its \s is Unicode White_Space). */
static const unsigned char ASCII[128] = {
    PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, SPACE, NL, SPACE, SPACE, NL, PUNCT, PUNCT,
    PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    SPACE, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    PUNCT, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER,
    UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    PUNCT, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER,
    LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
};

/* Combining marks of the common scripts: letters for o200k (its letter sets hold \p{M}). */
static int is_mark(Py_UCS4 c)
{
    return (c >= 0x0300 && c <= 0x036F) || (c >= 0x0483 && c <= 0x0489) || (c >= 0x0591 && c <= 0x05C7) ||
           (c >= 0x0610 && c <= 0x061A) || (c >= 0x064B && c <= 0x065F) || c == 0x0670 ||
           (c >= 0x06D6 && c <= 0x06ED) || (c >= 0x0900 && c <= 0x0DFF) || (c >= 0x3099 && c <= 0x309A) ||
           (c >= 0x1DC0 && c <= 0x1DFF) || (c >= 0x20D0 && c <= 0x20FF) || (c >= 0xFE20 && c <= 0xFE2F);
}

static int class_of(Py_UCS4 c, int o200k)
{
    if (c < 128)
        return ASCII[c];
    if ((c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x3041 && c <= 0x30FA))
        return BOTH; /* CJK ideographs, Hangul syllables, kana: \p{Lo} (the common case, first) */
    if (Py_UNICODE_ISALPHA(c))
        return Py_UNICODE_ISUPPER(c) ? UPPER : Py_UNICODE_ISLOWER(c) ? LOWER : BOTH;
    if (Py_UNICODE_ISSPACE(c))
        return (c >= 0x1C && c <= 0x1F) ? PUNCT : SPACE;
    if (Py_UNICODE_ISNUMERIC(c))
        return DIGIT;
    if (o200k && is_mark(c))
        return BOTH;
    return PUNCT;
}

/* The text being cut: its UTF-8 bytes u[0..n) and the class of each byte's character c[0..n),
 * both followed by SLACK bytes (zeros in u, END in c) so that scans and hashes need no bounds
 * checks. */
#define SLACK 16
typedef struct {
    const unsigned char *u, *c;
    Py_ssize_t n;
    int o200k;
} Text;

/* Length of a contraction ('s 't 're 've 'm 'll 'd, any case) at i, or 0. */
static inline Py_ssize_t contraction(const Text *s, Py_ssize_t i)
{
    unsigned char a = s->u[i + 1] | 0x20, b = s->u[i + 2] | 0x20;
    if (s->u[i] != '\'')
        return 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* End of the piece that starts at byte i (i < n), following the encoding's regex alternatives
 * in order. Every loop stops at the END sentinel, and every piece is at least one byte long. */
static Py_ssize_t piece_end(const Text *s, Py_ssize_t i)
{
    const unsigned char *c = s->c;
    Py_ssize_t j, k, last_nl;
    int first = c[i];

    if (IS_LETTER(first) || ((first == SPACE || first == PUNCT) && IS_LETTER(c[i + CHAR_LEN(s->u[i])]))) {
        if (!s->o200k && (j = contraction(s, i)) > 0) /* cl100k: '(?i:[sdmt]|ll|ve|re) first */
            return i + j;
        j = IS_LETTER(first) ? i : i + CHAR_LEN(s->u[i]); /* one leading blank or punctuation */
        if (!s->o200k) {
            while (IS_LETTER(c[j]))
                j++;
            return j;
        }
        while (c[j] == UPPER || c[j] == BOTH) /* o200k: [upper]*[lower]+ or [upper]+[lower]*, 's */
            j++;
        while (c[j] == LOWER || c[j] == BOTH)
            j++;
        return j + contraction(s, j);
    }
    if (first == DIGIT) { /* \p{N}{1,3} (counted in bytes: a rare non-ASCII digit is cut sooner) */
        j = i + 1;
        j += c[j] == DIGIT;
        return j + (c[j] == DIGIT && j == i + 2);
    }
    if (first == PUNCT || (s->u[i] == ' ' && c[i + 1] == PUNCT)) { /* ' ?[^\s\p{L}\p{N}]+[\r\n/]*' */
        for (j = i + 1; c[j] == PUNCT; j++)
            ;
        while (c[j] == NL || (s->o200k && s->u[j] == '/'))
            j++;
        return j;
    }
    /* Whitespace: up to its last newline; else all of it, less the last blank when a
     * non-blank follows (that blank starts the next piece). */
    for (last_nl = -1, j = i; c[j] == SPACE || c[j] == NL; j++)
        if (c[j] == NL)
            last_nl = j;
    if (last_nl >= 0)
        return last_nl + 1;
    for (k = j - 1; (s->u[k] & 0xC0) == 0x80; k--) /* the run's last character */
        ;
    return (c[j] == END || k == i) ? j : k;
}

/* Hash of the byte string b[0..n), 8 bytes at a time, with no branch up to 16 bytes. Reads up
 * to 16 bytes past b + n (the callers' buffers have that slack) and masks them off. */
static const uint64_t LOW_BYTES[9] = {0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFULL, 0xFFFFFFFFFFFFULL,
                                      0xFFFFFFFFFFFFFFULL, ~0ULL};

static inline uint64_t word_at(const unsigned char *b, Py_ssize_t n) /* b[0..n) of 8 bytes, n <= 8 */
{
    uint64_t w;
    memcpy(&w, b, 8);
#if PY_BIG_ENDIAN
    return n ? w & ~(~0ULL >> (8 * n)) : 0;
#else
    return w & LOW_BYTES[n];
#endif
}

static inline uint64_t hash_bytes(const unsigned char *b, Py_ssize_t n)
{
    uint64_t h = (uint64_t)n * 0xD6E8FEB86659FD93ULL;
    for (; n > 16; b += 8, n -= 8) {
        h = (h ^ word_at(b, 8)) * MULT;
        h ^= h >> 32;
    }
    h = (h ^ word_at(b, n < 8 ? n : 8)) * MULT;
    h ^= h >> 32;
    h = (h ^ word_at(b + 8, n < 8 ? 0 : n - 8)) * MULT;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 29);
}

typedef struct {
    const unsigned char *words; /* the Bloom filter, 8 bytes a word */
    uint64_t mask;              /* words - 1 (a power of two) */
} Table;

/* Where hash h sets its two bits: the word's offset, and the bits. */
static inline uint64_t word_of(uint64_t h, uint64_t mask) { return 8 * ((h >> 12) & mask); }
static inline uint64_t bits_of(uint64_t h) { return (1ULL << (h & 63)) | (1ULL << ((h >> 6) & 63)); }

/* Whether b[0..n) is (probably) a token. */
static inline int probe(const Table *t, const unsigned char *b, Py_ssize_t n)
{
    uint64_t w, h = hash_bytes(b, n), bits = bits_of(h);
    memcpy(&w, t->words + word_of(h, t->mask), 8);
    return (w & bits) == bits;
}

/* Tokens of one piece b[0..n): 1 if it is a token, else a greedy cut into the longest prefixes
 * that are tokens, tried at character ends (inside a character only when no whole one is). */
static Py_ssize_t count_piece(const Table *t, const unsigned char *b, Py_ssize_t n)
{
    Py_ssize_t count = 0, i = 0, len, clen;
    if (probe(t, b, n))
        return 1;
    while (i < n) {
        clen = CHAR_LEN(b[i]);
        for (len = n - i < PROBE_MAX ? n - i : PROBE_MAX; len > 1; len--)
            if ((len < clen || i + len == n || (b[i + len] & 0xC0) != 0x80) && probe(t, b + i, len))
                break;
        i += len;
        count++;
    }
    return count;
}

/* UTF-8 of c (lone surrogates as their 3-byte form, like surrogatepass) at b; returns its size. */
static inline int put_utf8(unsigned char *b, Py_UCS4 c)
{
    if (c < 0x80) {
        b[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (unsigned char)(0xC0 | (c >> 6));
        b[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (c >> 12));
        b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | ((c >> 18) & 0x07));
    b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* The table's words, or NULL with an exception set when `obj` is not a usable table. */
static int get_table(PyObject *obj, Table *t)
{
    Py_ssize_t size;
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "table must be bytes");
        return -1;
    }
    size = PyBytes_GET_SIZE(obj);
    if (size < 8 || (size & (size - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "table size must be a power of two, at least 8");
        return -1;
    }
    t->words = (const unsigned char *)PyBytes_AS_STRING(obj);
    t->mask = (uint64_t)(size / 8 - 1);
    return 0;
}

/* Fills u (UTF-8, lone surrogates as surrogatepass writes them) and c (each byte's class) from
 * the str; u and c hold at least 4 * length bytes. Returns the number of bytes. */
static Py_ssize_t to_utf8(PyObject *text, unsigned char *u, unsigned char *c, int o200k)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), n = 0, i;
    if (PyUnicode_IS_ASCII(text)) {
        memcpy(u, data, (size_t)length);
        for (i = 0; i < length; i++)
            c[i] = ASCII[u[i]];
        return length;
    }
    for (i = 0; i < length; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        int size = put_utf8(u + n, ch), cls = ch < 128 ? ASCII[ch] : class_of(ch, o200k);
        memset(c + n, cls, (size_t)size);
        n += size;
    }
    return n;
}

static PyObject *count(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Text s;
    Table t;
    unsigned char local[2 * (4096 + SLACK) + 2048], *u = local, *c;
    Py_ssize_t length, i, j, total = 0;

    if (nargs != 3 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "count(text: str, table: bytes, o200k: bool)");
        return NULL;
    }
    if (get_table(args[1], &t) < 0 || (s.o200k = PyObject_IsTrue(args[2])) < 0)
        return NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(args[0]) < 0)
        return NULL;
#endif
    length = PyUnicode_GET_LENGTH(args[0]);
    if (length > (PY_SSIZE_T_MAX - 2 * SLACK) / 8)
        return PyErr_NoMemory();
    if (4 * length > 4096 && (u = PyMem_Malloc((size_t)(2 * (4 * length + SLACK) + 2048))) == NULL)
        return PyErr_NoMemory();
    c = u + 4 * (length > 1024 ? length : 1024) + SLACK + 2048; /* u, slack, then c half a page on */
    s.n = to_utf8(args[0], u, c, s.o200k);
    memset(u + s.n, 0, SLACK);
    memset(c + s.n, END, SLACK);
    s.u = u;
    s.c = c;
    for (i = 0; i < s.n; i = j) {
        j = piece_end(&s, i); /* i < j <= n */
#if MODE == 1
        total += 1;
#elif MODE == 2
        total += probe(&t, u + i, j - i);
#else
        total += count_piece(&t, u + i, j - i);
#endif
    }
    if (u != local)
        PyMem_Free(u);
    return PyLong_FromSsize_t(total);
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

static PyObject *build(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer data;
    long log2_words;
    PyObject *table;
    unsigned char *words, token[TOKEN_MAX + SLACK] = {0};
    const unsigned char *pos, *end;

    if (nargs != 2 || PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "build(data: bytes, log2_words: int)");
        return NULL;
    }
    log2_words = PyLong_AsLong(args[1]);
    if (log2_words < 0 || log2_words > 24) {
        PyBuffer_Release(&data);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "log2_words must be within 0..24");
        return NULL;
    }
    table = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)8 << log2_words);
    if (table == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    words = (unsigned char *)PyBytes_AS_STRING(table);
    memset(words, 0, (size_t)8 << log2_words);
    pos = (const unsigned char *)data.buf;
    end = pos + data.len;
    while (pos < end) { /* each line: base64 of a token, a space, its rank */
        uint64_t h, w, acc = 0;
        unsigned char *word;
        int n = 0, nbits = 0, v;
        for (; pos < end && (v = b64_value(*pos)) >= 0; pos++) {
            acc = (acc << 6) | (uint64_t)v;
            nbits += 6;
            if (nbits >= 8) {
                nbits -= 8;
                if (n < TOKEN_MAX)
                    token[n] = (unsigned char)(acc >> nbits);
                n++;
            }
        }
        while (pos < end && *pos != '\n')
            pos++;
        pos++;
        if (n == 0 || n > TOKEN_MAX) /* a blank line, or not a .tiktoken file */
            continue;
        h = hash_bytes(token, n);
        word = words + word_of(h, ((uint64_t)1 << log2_words) - 1);
        memcpy(&w, word, 8);
        w |= bits_of(h);
        memcpy(word, &w, 8);
    }
    PyBuffer_Release(&data);
    return table;
}

static PyMethodDef methods[] = {
    {"count", (PyCFunction)(void (*)(void))count, METH_FASTCALL,
     "count(text, table, o200k) -> estimated tiktoken count of text"},
    {"build", (PyCFunction)(void (*)(void))build, METH_FASTCALL,
     "build(data, log2_words) -> the vocabulary table of a decompressed .tiktoken file"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcount", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastcount(void)
{
    return PyModule_Create(&module);
}
