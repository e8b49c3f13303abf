/* _fastcount: a fast estimate of tiktoken's token count (o200k_base, cl100k_base).
 *
 * Why: the byte-class estimator in estimator.py cannot tell which words are in the vocabulary
 * (its error is about 5%), and tiktoken itself is too slow for the daemon's hot path. Here a text
 * is cut into about the pieces the encoding's regex would cut it into, and each piece counts 1
 * when the vocabulary holds it; else a run of digits counts a token per three, a short ASCII
 * piece a fitted estimate from its length, and any other the tokens of a greedy cut into the
 * longest prefixes that are tokens. The vocabulary is a Bloom filter: three bits per token in one
 * 64-bit word (256 KB: it stays in L2), after the class of every character of the Basic
 * Multilingual Plane (64 KB) and the patterns of three bits that a token's hash picks from
 * (16 KB). A false positive (for o200k about 1 probe of a non-token in 60) makes a piece count
 * a little low; the fitted scale makes up for it on average.
 *
 * Speed comes from few instructions and few unpredictable branches per byte: the text is laid out
 * once (UTF-8 bytes, and for non-ASCII text a class and offset per character, 16 at a time while
 * they are ASCII), the pieces' starts are found 64 characters at a time by bit operations on
 * class masks (find_starts), and every piece is looked up in a loop with no branch that the text
 * decides; only the pieces that are not tokens (about 1 in 6) are counted in a branchy loop.
 *
 * build(data, log2_words, o200k, ascii_base, ascii_per_byte, ascii_max, scale) -> bytes (see build)
 * count(text: str, table: bytes) -> int
 *
 * No global mutable state: everything per encoding is in the table, an immutable bytes object
 * that the caller owns; count() allocates nothing for a text of up to about 1,800 characters
 * (a stack buffer), else one buffer that it frees.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Character classes of the pre-tokenizer (3 bits). NL doubles as the end of the text. */
enum { NL, BLANK, SPACE, UPPER, LOWER, BOTH, DIGIT, PUNCT };
#define APOS 8 /* or'ed into the class of an apostrophe, which o200k may keep in a word */

#define TOKEN_MAX 128   /* longest token of either encoding, in bytes */
#define PROBE_MAX 16    /* longest prefix, in bytes, that the greedy cut tries */
#define SLACK 16        /* bytes after a text that hashes and scans may read */
#define LOW_CHARS 0x10000 /* characters whose class the table holds: the whole Basic Multilingual Plane */
#define PATTERNS 2048   /* the bits a token sets in its word of the Bloom filter: one of these */
#define HEADER (24 + 8 * PATTERNS + LOW_CHARS) /* a table: Header, the patterns, the classes; then the Bloom filter */
#define MULT 0x9E3779B97F4A7C15ULL

/* ASCII classes: ' ' is BLANK, \t \v \f are SPACE, \r \n NL; other control characters are
 * punctuation, as in the regex (its \s is Unicode White_Space). */
static const unsigned char ASCII[128] = {
    PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, SPACE, NL, SPACE, SPACE, NL, PUNCT, PUNCT,
    PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    BLANK, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, DIGIT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    PUNCT, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER,
    UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, UPPER, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
    PUNCT, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER,
    LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, LOWER, PUNCT, PUNCT, PUNCT, PUNCT, PUNCT,
};
/* Bytes of the UTF-8 character by its first byte's high nibble (1 for a continuation byte). */
static const unsigned char CHAR_LEN[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

/* Combining marks of the common scripts: letters for o200k (its letter sets hold \p{M}). */
static int is_mark(Py_UCS4 c)
{
    return (c >= 0x0300 && c <= 0x036F) || (c >= 0x0483 && c <= 0x0489) || (c >= 0x0591 && c <= 0x05C7) ||
           (c >= 0x0610 && c <= 0x061A) || (c >= 0x064B && c <= 0x065F) || c == 0x0670 ||
           (c >= 0x06D6 && c <= 0x06ED) || (c >= 0x0900 && c <= 0x0DFF) || (c >= 0x3099 && c <= 0x309A) ||
           (c >= 0x1DC0 && c <= 0x1DFF) || (c >= 0x20D0 && c <= 0x20FF) || (c >= 0xFE20 && c <= 0xFE2F);
}

static inline int class_of(Py_UCS4 c, int o200k)
{
    if (c < 128)
        return ASCII[c];
    if ((c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x3041 && c <= 0x30FA) ||
        (c >= 0x0621 && c <= 0x064A))
        return BOTH; /* CJK ideographs, Hangul syllables, kana, Arabic letters: \p{Lo}, the common cases */
    if (c >= 0x0410 && c <= 0x044F)
        return c < 0x0430 ? UPPER : LOWER; /* basic Cyrillic */
    if (c >= 0xC0 && c <= 0xFF) /* Latin-1 letters, but for the signs x and / */
        return c == 0xD7 || c == 0xF7 ? PUNCT : c < 0xDF ? UPPER : LOWER;
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

/* Length of a contraction ('s 't 're 've 'm 'll 'd, any case) at u, or 0. */
static Py_ssize_t contraction(const unsigned char *u)
{
    unsigned char a = u[1] | 0x20, b = u[2] | 0x20;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
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
    return n >= 8 ? w : n ? w & ~(~0ULL >> (8 * n)) : 0;
#else
    return w & LOW_BYTES[n];
#endif
}

/* Its top bits index the Bloom filter; bits below them pick the pattern of bits to set. */
static inline uint64_t hash_bytes(const unsigned char *b, Py_ssize_t n)
{
    uint64_t h = (uint64_t)n, low, high;
    for (; n > 16; b += 8, n -= 8)
        h = (h ^ (h >> 32) ^ word_at(b, 8)) * MULT;
#if defined(__SSE2__) && defined(__x86_64__)
    { /* the same words, with one mask for both */
        static const unsigned char KEEP[32] = {255, 255, 255, 255, 255, 255, 255, 255,
                                               255, 255, 255, 255, 255, 255, 255, 255}; /* then 16 zeros */
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)b),
                                  _mm_loadu_si128((const __m128i *)(const void *)(KEEP + 16 - n)));
        low = (uint64_t)_mm_cvtsi128_si64(v);
        high = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v));
    }
#else
    low = word_at(b, n < 8 ? n : 8);
    high = word_at(b + 8, n < 8 ? 0 : n - 8);
#endif
    h = (h ^ low) * MULT;
    return (h ^ (h >> 32) ^ high) * 0xBF58476D1CE4E5B9ULL;
}

/* What build() was given besides the vocabulary: the table's first bytes. */
typedef struct {
    int32_t o200k;          /* 1 for o200k's pre-tokenizer, 0 for cl100k's */
    int32_t ascii_base;     /* an ASCII piece that is not a token, of at most ascii_max bytes: */
    int32_t ascii_per_byte; /*   ascii_base + ascii_per_byte per byte tokens, in 1/1024 */
    int32_t ascii_max;
    int32_t scale;          /* the count is scaled by scale / 1024 */
    int32_t unused;
} Header;

typedef struct {
    Header h;
    const uint64_t *patterns;     /* PATTERNS words of three bits */
    const unsigned char *classes; /* class_of(c) for c < LOW_CHARS */
    const unsigned char *words;  /* the Bloom filter, 8 bytes a word */
    int shift;                   /* 64 - log2(its words) */
} Table;

/* Where hash h sets its three bits: the word (its top log2_words bits), and the bits (the
 * pattern that bits 22 to 32 pick; log2_words <= 24). A pattern is one load where three bits at
 * three positions of the hash would be three shifts by a variable, many instructions each. */
static inline uint64_t word_of(uint64_t h, int shift) { return 8 * (h >> shift); }
static inline uint64_t bits_of(const uint64_t *patterns, uint64_t h) { return patterns[h >> 22 & (PATTERNS - 1)]; }

/* Whether the byte string of hash h is (probably) a token. */
static inline int in_table(const Table *t, uint64_t h)
{
    uint64_t w, bits = bits_of(t->patterns, h);
    memcpy(&w, t->words + word_of(h, t->shift), 8);
    return (w & bits) == bits;
}

/* Whether b[0..n) is (probably) a token. */
static inline int probe(const Table *t, const unsigned char *b, Py_ssize_t n) { return in_table(t, hash_bytes(b, n)); }

/* Tokens of a piece b[0..n) that is not a token: a greedy cut into the longest prefixes that are
 * tokens. For o200k, tried at character ends only (inside a character only when no whole one
 * is): its vocabulary holds whole characters; cl100k's cuts many of them, so every length. */
static Py_ssize_t greedy(const Table *t, const unsigned char *b, Py_ssize_t n)
{
    Py_ssize_t count = 0, i = 0, len, clen;
    /* CJK tokens have up to 4 characters, 12 bytes; longer prefixes are not worth trying */
    Py_ssize_t probe_max = b[0] >= 0xE0 && b[0] < 0xF0 ? 12 : PROBE_MAX;
    while (i < n) {
        clen = CHAR_LEN[b[i] >> 4];
        if (clen == 3) { /* CJK: the prefix of 1 to 4 characters, extended while it is a token */
            Py_ssize_t best = 0, most = i == 0 ? n - 1 : n; /* the whole piece is not a token */
            Py_ssize_t e = i + 3 + CHAR_LEN[b[i + 3] >> 4]; /* two characters first: when they are
                                                            * a token, one need not be tried */
            if (e - i <= 12 && e <= most && probe(t, b + i, e - i)) {
                best = e - i;
                for (int k = 2; k < 4; k++) {
                    e += CHAR_LEN[b[e] >> 4];
                    if (e - i > 12 || e > most || !probe(t, b + i, e - i))
                        break;
                    best = e - i;
                }
            } else if (i + 3 <= most && probe(t, b + i, 3))
                best = 3;
            if (best) {
                i += best;
                count++;
                continue;
            }
        }
        len = n - i < probe_max ? n - i : probe_max;
        if (len == n && len > 1) /* the whole piece is known not to be a token */
            len--;
        for (; len > 1; len--)
            if ((!t->h.o200k || len < clen || i + len == n || (b[i + len] & 0xC0) != 0x80) && probe(t, b + i, len))
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

/* Whether the constants are within the bounds that keep the arithmetic in range. */
static int header_ok(const Header *h)
{
    return (h->o200k == 0 || h->o200k == 1) && h->ascii_base >= 0 && h->ascii_base <= 8192 &&
           h->ascii_per_byte >= 0 && h->ascii_per_byte <= 1024 && h->ascii_max >= 0 && h->ascii_max <= 1024 &&
           h->scale >= 512 && h->scale <= 2048;
}

/* Reads a table made by build(); -1 with an exception set when `obj` is not one. */
static int get_table(PyObject *obj, Table *t)
{
    Py_ssize_t size;
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "table must be bytes");
        return -1;
    }
    size = PyBytes_GET_SIZE(obj) - HEADER;
    if (size < 8 || size > ((Py_ssize_t)8 << 24) || (size & (size - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "not a table made by build()");
        return -1;
    }
    memcpy(&t->h, PyBytes_AS_STRING(obj), sizeof(Header));
    if (!header_ok(&t->h)) {
        PyErr_SetString(PyExc_ValueError, "not a table made by build()");
        return -1;
    }
    t->patterns = (const uint64_t *)(const void *)(PyBytes_AS_STRING(obj) + sizeof(Header));
    t->classes = (const unsigned char *)PyBytes_AS_STRING(obj) + sizeof(Header) + 8 * PATTERNS;
    t->words = (const unsigned char *)PyBytes_AS_STRING(obj) + HEADER;
    t->shift = 64 - __builtin_ctzll((uint64_t)size / 8);
    return 0;
}

#ifdef __SSE2__
/* 0xFF in each byte of b within [low, high] (bytes below 128). */
static inline __m128i in_range(__m128i b, char low, char high)
{
    return _mm_and_si128(_mm_cmpgt_epi8(b, _mm_set1_epi8((char)(low - 1))),
                         _mm_cmplt_epi8(b, _mm_set1_epi8((char)(high + 1))));
}

/* The classes of 16 ASCII bytes, as the ASCII table and APOS say. */
static inline __m128i ascii_classes(__m128i b)
{
#define SET(mask, class) _mm_and_si128(mask, _mm_set1_epi8((char)(class - PUNCT)))
    __m128i nl = _mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('\n')), _mm_cmpeq_epi8(b, _mm_set1_epi8('\r')));
    __m128i space = _mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('\t')), in_range(b, '\v', '\f'));
    __m128i classes = _mm_add_epi8(_mm_set1_epi8(PUNCT), SET(nl, NL)); /* the masks do not overlap */
    classes = _mm_add_epi8(classes, SET(_mm_cmpeq_epi8(b, _mm_set1_epi8(' ')), BLANK));
    classes = _mm_add_epi8(classes, SET(space, SPACE));
    classes = _mm_add_epi8(classes, SET(in_range(b, 'A', 'Z'), UPPER));
    classes = _mm_add_epi8(classes, SET(in_range(b, 'a', 'z'), LOWER));
    classes = _mm_add_epi8(classes, SET(in_range(b, '0', '9'), DIGIT));
    return _mm_add_epi8(classes, SET(_mm_cmpeq_epi8(b, _mm_set1_epi8('\'')), PUNCT + APOS));
#undef SET
}
#endif

/* Lays out the 16 characters from character i of a str's data when they are all ASCII (most of
 * a text in a European language): their bytes at u, their classes at c, the offsets n, n + 1 ...
 * at offs. Returns whether they were. */
static inline int lay_out_ascii16(int kind, const void *data, Py_ssize_t i, unsigned char *u, unsigned char *c,
                                  int32_t *offs, int32_t n)
{
#ifdef __SSE2__
    __m128i b;
    if (kind == PyUnicode_1BYTE_KIND) {
        b = _mm_loadu_si128((const __m128i *)(const void *)((const Py_UCS1 *)data + i));
        if (_mm_movemask_epi8(b) != 0)
            return 0;
    } else {
        __m128i low = _mm_loadu_si128((const __m128i *)(const void *)((const Py_UCS2 *)data + i));
        __m128i high = _mm_loadu_si128((const __m128i *)(const void *)((const Py_UCS2 *)data + i + 8));
        __m128i wide = _mm_and_si128(_mm_or_si128(low, high), _mm_set1_epi16((short)0xFF80));
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(wide, _mm_setzero_si128())) != 0xFFFF)
            return 0;
        b = _mm_packus_epi16(low, high);
    }
    _mm_storeu_si128((__m128i *)(void *)u, b);
    _mm_storeu_si128((__m128i *)(void *)c, ascii_classes(b));
    for (int q = 0; q < 4; q++)
        _mm_storeu_si128((__m128i *)(void *)(offs + 4 * q),
                         _mm_add_epi32(_mm_set1_epi32(n + 4 * q), _mm_setr_epi32(0, 1, 2, 3)));
    return 1;
#else
    (void)kind, (void)data, (void)i, (void)u, (void)c, (void)offs, (void)n;
    return 0;
#endif
}

/* Lays out character i, ch, of the Basic Multilingual Plane at byte n: its class, its offset,
 * its UTF-8 (1 to 3 bytes; a lone surrogate as its 3-byte form), written without a branch that
 * the text decides, so that mixing scripts and ASCII costs no mispredictions. Returns the next
 * character's offset. */
static inline Py_ssize_t put_bmp(Py_UCS4 ch, Py_ssize_t i, Py_ssize_t n, const unsigned char *classes,
                                 unsigned char *c, int32_t *offs, unsigned char *u)
{
    unsigned two = ch >= 0x80, three = ch >= 0x800;
    offs[i] = (int32_t)n;
    c[i] = classes[ch];
    u[n] = (unsigned char)(three ? 0xE0 | ch >> 12 : two ? 0xC0 | ch >> 6 : ch);
    u[n + 1] = (unsigned char)(0x80 | ((three ? ch >> 6 : ch) & 0x3F)); /* kept if two or three */
    u[n + 2] = (unsigned char)(0x80 | (ch & 0x3F));                     /* kept if three */
    return n + 1 + two + three;
}

/* A text laid out for counting: its UTF-8 bytes u, and unless it is all ASCII the class c[i] of
 * each character (with APOS on an apostrophe) and its offset in u, offs[i] (an ASCII text's
 * classes are read from u, and offs[i] is i). c has 128 NL after the text, u 128 '\n' (ASCII) or
 * SLACK zeros after it, so that scans (find_starts reads whole blocks of 64, and the next one)
 * and hashes read no bound. */
typedef struct {
    const unsigned char *c, *u;
    const int32_t *offs;
    Py_ssize_t length; /* characters */
} Text;

#define OFFSET(s, i) ((s)->offs ? (s)->offs[i] : (i))

/* Bytes a Text of `length` characters needs; see lay_out. */
static Py_ssize_t text_bytes(Py_ssize_t length) { return 4 * (length + 1) + length + 128 + 4 * length + 128; }

/* Lays out `length` characters of a str's data (of `kind`; `ascii` when all are) in `mem`
 * (text_bytes(length) bytes, 4-aligned). */
static void lay_out(int kind, const void *data, Py_ssize_t length, int ascii, unsigned char *mem, const Table *t,
                    Text *s)
{
    Py_ssize_t i, n = 0;
    int32_t *offs = (int32_t *)(void *)mem;    /* length + 1 offsets */
    unsigned char *c = mem + 4 * (length + 1); /* then length + 128 classes */
    unsigned char *u = c + length + 128;       /* then 4 * length + 128 bytes */

    if (ascii) {
        memcpy(u, data, (size_t)length);
        memset(u + length, '\n', 128); /* the end of the text, as far as the scan can tell */
        c = NULL;
        offs = NULL;
        n = length;
    } else if (kind == PyUnicode_4BYTE_KIND) { /* seldom: a text with a character past the BMP */
        for (i = 0; i < length; i++) {
            Py_UCS4 ch = ((const Py_UCS4 *)data)[i];
            offs[i] = (int32_t)n;
            c[i] = ch < LOW_CHARS ? t->classes[ch] : (unsigned char)class_of(ch, t->h.o200k);
            n += put_utf8(u + n, ch);
        }
    } else { /* 16 characters at a time while they are ASCII, else one by one; a loop per kind */
#define LAY_OUT(type, kind)                                                                          \
        for (i = 0; i < length;) {                                                                   \
            Py_ssize_t end = length - i < 16 ? length : i + 16;                                      \
            if (end == i + 16 && lay_out_ascii16(kind, data, i, u + n, c + i, offs + i, (int32_t)n)) { \
                i = end;                                                                             \
                n += 16;                                                                             \
                continue;                                                                            \
            }                                                                                        \
            for (; i < end; i++)                                                                     \
                n = put_bmp(((const type *)data)[i], i, n, t->classes, c, offs, u);                  \
        }
        if (kind == PyUnicode_1BYTE_KIND)
            LAY_OUT(Py_UCS1, PyUnicode_1BYTE_KIND)
        else
            LAY_OUT(Py_UCS2, PyUnicode_2BYTE_KIND)
#undef LAY_OUT
    }
    if (!ascii) {
        offs[length] = (int32_t)n;
        memset(c + length, NL, 128); /* the end of the text, as far as the scan can tell */
        memset(u + n, 0, SLACK);
    }
    s->c = c;
    s->u = u;
    s->offs = offs;
    s->length = length;
}

/* Which of 64 characters (bit k: character k) are of each class. */
typedef struct {
    uint64_t nl, blank, space, upper, lower, letter, digit, punct, apos; /* apos: the apostrophes */
} Masks;

static void masks_of(const unsigned char *c, Masks *m)
{
    uint64_t p0 = 0, p1 = 0, p2 = 0, p3 = 0; /* bit k: bit 0, 1, 2, 3 of c[k] */
#ifdef __SSE2__
    for (int q = 0; q < 4; q++) { /* shifted left, a class's bit is its byte's top bit */
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(c + 16 * q));
        p0 |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_slli_epi16(v, 7)) << (16 * q);
        p1 |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_slli_epi16(v, 6)) << (16 * q);
        p2 |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_slli_epi16(v, 5)) << (16 * q);
        p3 |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_slli_epi16(v, 4)) << (16 * q);
    }
#else
    for (int k = 0; k < 64; k++) {
        p0 |= (uint64_t)(c[k] & 1) << k;
        p1 |= (uint64_t)(c[k] >> 1 & 1) << k;
        p2 |= (uint64_t)(c[k] >> 2 & 1) << k;
        p3 |= (uint64_t)(c[k] >> 3 & 1) << k;
    }
#endif
    m->nl = ~p2 & ~p1 & ~p0;    /* 0 */
    m->blank = ~p2 & ~p1 & p0;  /* 1 */
    m->space = ~p2 & p1 & ~p0;  /* 2 */
    m->upper = ~p2 & p1 & p0;   /* 3 */
    m->lower = p2 & ~p1 & ~p0;  /* 4 */
    m->letter = m->upper | (p2 & ~p1); /* 3, 4, 5 */
    m->digit = p2 & p1 & ~p0;   /* 6 */
    m->punct = p2 & p1 & p0;    /* 7 */
    m->apos = p3;              /* APOS */
}

/* The same from 64 ASCII bytes, straight from them (by ascii_classes and masks_of is 3%
 * slower on the whole held-out corpus, 7% on ASCII text). */
static void masks_ascii(const unsigned char *u, Masks *m)
{
#ifdef __SSE2__
    uint64_t nl = 0, blank = 0, space = 0, upper = 0, lower = 0, digits = 0, apos = 0;
    for (int q = 0; q < 4; q++) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(u + 16 * q));
#define MASK(v) ((uint64_t)(uint16_t)_mm_movemask_epi8(v) << (16 * q))
        nl |= MASK(_mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('\n')), _mm_cmpeq_epi8(b, _mm_set1_epi8('\r'))));
        blank |= MASK(_mm_cmpeq_epi8(b, _mm_set1_epi8(' ')));
        space |= MASK(_mm_or_si128(_mm_cmpeq_epi8(b, _mm_set1_epi8('\t')), in_range(b, '\v', '\f')));
        upper |= MASK(in_range(b, 'A', 'Z'));
        lower |= MASK(in_range(b, 'a', 'z'));
        digits |= MASK(in_range(b, '0', '9'));
        apos |= MASK(_mm_cmpeq_epi8(b, _mm_set1_epi8('\'')));
#undef MASK
    }
    m->nl = nl;
    m->blank = blank;
    m->space = space;
    m->upper = upper;
    m->lower = lower;
    m->letter = upper | lower;
    m->digit = digits;
    m->punct = ~(nl | blank | space | upper | lower | digits);
    m->apos = apos;
#else
    unsigned char c[64];
    for (int k = 0; k < 64; k++)
        c[k] = (unsigned char)(ASCII[u[k] & 127] | (u[k] == '\'' ? APOS : 0));
    masks_of(c, m);
#endif
}

/* The class masks of the 64 characters from `block` on. */
static void masks_at(const Text *s, Py_ssize_t block, Masks *m)
{
    if (s->c)
        masks_of(s->c + block, m);
    else
        masks_ascii(s->u + block, m);
}

/* o200k keeps 's, 't, 're, 've, 'm, 'll, 'd in the word before them: such an apostrophe after a
 * letter is a letter. `letter_before`: bit 0 set when the character before the block is one. */
static void keep_contractions(const Text *s, Py_ssize_t block, Masks *m, uint64_t letter_before)
{
    for (uint64_t after = m->apos & ((m->letter << 1) | letter_before); after; after &= after - 1) {
        Py_ssize_t at = block + __builtin_ctzll(after);
        if (contraction(s->u + OFFSET(s, at))) {
            m->letter |= after & -after;
            m->punct &= ~(after & -after);
        }
    }
}

/* Sets in `starts` (a bitmap, bit i of word i / 64) the characters where pieces start: the
 * encoding's regex, alternative by alternative, as far as the classes of a character (y), the
 * two before it (w, x) and the one after it (z) tell; 64 characters at a time, with bit
 * operations on class masks and no branch. Digit runs are cut in threes by count_miss, and
 * o200k's contractions are letters (apos). Bits past the text's end are for the caller to
 * ignore. */
static void find_starts(const Table *t, const Text *s, uint64_t *starts)
{
    Masks prev = {~0ULL, 0, 0, 0, 0, 0, 0, 0, 0}, y, next; /* the text starts as after newlines */
    uint64_t letter_top; /* the top bit of y's letters before keep_contractions */
    uint64_t case_split = t->h.o200k ? ~0ULL : 0;
    masks_at(s, 0, &y);
    letter_top = y.letter >> 63;
    if (t->h.o200k)
        keep_contractions(s, 0, &y, 0);
    for (Py_ssize_t block = 0; block < s->length; block += 64) {
        masks_at(s, block + 64, &next); /* past the end: NL, from the padding */
        if (t->h.o200k) {
            uint64_t top = next.letter >> 63;
            keep_contractions(s, block + 64, &next, letter_top);
            letter_top = top;
        }
#define X(m) ((y.m << 1) | (prev.m >> 63)) /* the class masks of the character before */
#define W(m) ((y.m << 2) | (prev.m >> 62)) /* and of the one before that */
#define Z(m) ((y.m >> 1) | (next.m << 63)) /* and of the one after */
        uint64_t x_blanks = X(blank) | X(space), x_punct = X(punct);
        starts[block >> 6] =
            /* [^\r\n\p{L}\p{N}]?\p{L}+ (o200k: [upper]*[lower]+ ...): a letter after a letter
             * continues the word (o200k: not upper after lower); after a blank or after
             * punctuation that began a piece (' ?[^\s\p{L}\p{N}]+' took no other) it too */
            (y.letter & ((case_split & X(lower) & y.upper) | (x_punct & (W(punct) | W(blank))) |
                         ~(X(letter) | x_blanks | x_punct))) |
            (y.punct & ~(x_punct | X(blank))) |              /* ' ?[^\s\p{L}\p{N}]+' */
            (y.nl & ~(x_blanks | X(nl) | x_punct)) |          /* '\s*[\r\n]+', punctuation's [\r\n]* */
            ((y.blank | y.space) & ~(x_blanks & (Z(blank) | Z(space) | Z(nl)))) | /* '\s+(?!\S)' */
            (y.digit & ~X(digit));                            /* '\p{N}{1,3}' */
#undef X
#undef W
#undef Z
        prev = y;
        y = next;
    }
}

/* Tokens of the piece of characters [start, end) that is not a token: a run of digits is cut in
 * threes ('\p{N}{1,3}', and every group is a token); a short ASCII piece is estimated from its
 * length (cutting it greedily costs more than it gains); any other piece is cut greedily. */
static Py_ssize_t count_miss(const Table *t, const Text *s, Py_ssize_t start, Py_ssize_t end)
{
    Py_ssize_t from = OFFSET(s, start), n = OFFSET(s, end) - from;
    if (s->c ? s->c[start] == DIGIT : (unsigned)(s->u[start] - '0') < 10)
        return (end - start + 2) / 3;
    if (n == end - start && n <= t->h.ascii_max)
        return (t->h.ascii_base + t->h.ascii_per_byte * n + 512) >> 10;
    return greedy(t, s->u + from, n);
}

/* 1 if the piece of characters [start, end) is a token; else 0, and the piece is added to
 * `misses` (its start and end) without a branch. */
static inline int look_up(const Table *t, const Text *s, Py_ssize_t start, Py_ssize_t end, int32_t *misses,
                          Py_ssize_t *misses_n)
{
    Py_ssize_t from = OFFSET(s, start);
    int hit = probe(t, s->u + from, OFFSET(s, end) - from);
    misses[*misses_n] = (int32_t)start;
    misses[*misses_n + 1] = (int32_t)end;
    *misses_n += 2 * !hit;
    return hit;
}

/* Tokens (before scaling) of `length` characters of a str's data; `mem` holds
 * window_bytes(length) bytes, 8-aligned. */
static Py_ssize_t count_window(const Table *t, int kind, const void *data, Py_ssize_t length, int ascii,
                               unsigned char *mem)
{
    Text s;
    Py_ssize_t words = (length + 63) / 64, w, k, start = 0, misses_n = 0, total = 0;
    uint64_t *starts = (uint64_t *)(void *)mem, word; /* a bitmap of words words */
    int32_t *misses = (int32_t *)(void *)(starts + words); /* at most 2 * (length + 1) */
    lay_out(kind, data, length, ascii, (unsigned char *)(void *)(misses + 2 * (length + 1)), t, &s);
    find_starts(t, &s, starts);
    starts[0] |= 1; /* the first piece starts at 0 */
    if (length & 63) /* and none past the end */
        starts[length >> 6] &= (1ULL << (length & 63)) - 1;
    /* Each piece [start, end) counts 1 if it is a token; the others are listed (their starts and
     * ends), and counted after: this loop has no branch that the text decides, so the processor
     * looks many pieces up at once. */
    for (w = 0; w < words; w++)
        for (word = w ? starts[w] : starts[0] & ~1ULL; word; word &= word - 1) {
            Py_ssize_t end = (w << 6) + __builtin_ctzll(word);
            total += look_up(t, &s, start, end, misses, &misses_n);
            start = end;
        }
    total += look_up(t, &s, start, length, misses, &misses_n);
    for (k = 0; k < misses_n; k += 2)
        total += count_miss(t, &s, misses[k], misses[k + 1]);
    return total;
}

/* Bytes count_window needs for `length` characters: the bitmap, the misses, the Text. */
static Py_ssize_t window_bytes(Py_ssize_t length)
{
    return 8 * ((length + 63) / 64) + 4 * 2 * (length + 1) + text_bytes(length);
}

#define WINDOW 65536 /* characters counted at once: bounds the memory a huge text takes */

static PyObject *count(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Table t;
    uint64_t local[4096]; /* 32 KB: enough for a text of about 1,800 characters */
    unsigned char *mem = (unsigned char *)local;
    Py_ssize_t length, at, end, total = 0;
    int kind, ascii;
    const char *data;

    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "count(text: str, table: bytes)");
        return NULL;
    }
    if (get_table(args[1], &t) < 0)
        return NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(args[0]) < 0)
        return NULL;
#endif
    length = PyUnicode_GET_LENGTH(args[0]);
    kind = PyUnicode_KIND(args[0]);
    data = (const char *)PyUnicode_DATA(args[0]);
    ascii = PyUnicode_IS_ASCII(args[0]);
    if (window_bytes(length < WINDOW ? length : WINDOW) > (Py_ssize_t)sizeof(local) &&
        (mem = PyMem_Malloc((size_t)window_bytes(length < WINDOW ? length : WINDOW))) == NULL)
        return PyErr_NoMemory();
    /* A text longer than WINDOW is counted a window at a time, each cut after a newline when
     * there is one in its second half (a piece seldom runs over one). */
    for (at = 0; at < length; at = end) {
        end = length - at > WINDOW ? at + WINDOW : length;
        if (end < length) {
            Py_ssize_t cut = end;
            while (cut > at + WINDOW / 2 && PyUnicode_READ(kind, data, cut - 1) != '\n')
                cut--;
            if (cut > at + WINDOW / 2)
                end = cut;
        }
        total += count_window(&t, kind, data + at * kind, end - at, ascii, mem);
    }
    if (mem != (unsigned char *)local)
        PyMem_Free(mem);
    return PyLong_FromSsize_t((total * t.h.scale + 512) >> 10);
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

/* The patterns: three distinct bits each, from a fixed sequence of splitmix64, so that a table
 * built anywhere is the same. */
static void make_patterns(uint64_t *patterns)
{
    uint64_t state = 0;
    for (int p = 0; p < PATTERNS; p++) {
        patterns[p] = 0;
        while (__builtin_popcountll(patterns[p]) < 3) {
            uint64_t z = state += 0x9E3779B97F4A7C15ULL;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            patterns[p] |= 1ULL << ((z ^ (z >> 31)) & 63);
        }
    }
}

/* build(data, log2_words, o200k, ascii_base, ascii_per_byte, ascii_max, scale): the table for one encoding,
 * from its decompressed .tiktoken file (a line per token: its bytes in base64, a space, its
 * rank), with 8 << log2_words bytes of Bloom filter, and the constants of Header. */
static PyObject *build(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer data;
    long log2_words;
    Header head;
    PyObject *table;
    unsigned char *words, token[TOKEN_MAX + SLACK] = {0};
    uint64_t *patterns;
    const unsigned char *pos, *end;

    if (nargs != 7 || PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "build(data, log2_words, o200k, ascii_base, ascii_per_byte, ascii_max, scale)");
        return NULL;
    }
    log2_words = PyLong_AsLong(args[1]);
    head.o200k = PyObject_IsTrue(args[2]);
    head.ascii_base = (int32_t)PyLong_AsLong(args[3]);
    head.ascii_per_byte = (int32_t)PyLong_AsLong(args[4]);
    head.ascii_max = (int32_t)PyLong_AsLong(args[5]);
    head.scale = (int32_t)PyLong_AsLong(args[6]);
    head.unused = 0;
    if (PyErr_Occurred() || log2_words < 0 || log2_words > 24 || !header_ok(&head)) {
        PyBuffer_Release(&data);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "build: an argument is out of its range");
        return NULL;
    }
    table = PyBytes_FromStringAndSize(NULL, HEADER + ((Py_ssize_t)8 << log2_words));
    if (table == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    words = (unsigned char *)PyBytes_AS_STRING(table);
    memset(words, 0, HEADER + ((size_t)8 << log2_words));
    memcpy(words, &head, sizeof head);
    patterns = (uint64_t *)(void *)(words + sizeof head);
    make_patterns(patterns);
    for (Py_UCS4 ch = 0; ch < LOW_CHARS; ch++)
        words[sizeof head + 8 * PATTERNS + ch] = (unsigned char)(class_of(ch, head.o200k) | (ch == '\'' ? APOS : 0));
    words += HEADER;
    pos = (const unsigned char *)data.buf;
    end = pos + data.len;
    while (pos < end) {
        uint64_t h, w, acc = 0;
        unsigned char *word;
        Py_ssize_t n = 0;
        int nbits = 0, v;
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
        word = words + word_of(h, 64 - (int)log2_words);
        memcpy(&w, word, 8);
        w |= bits_of(patterns, h);
        memcpy(word, &w, 8);
    }
    PyBuffer_Release(&data);
    return table;
}

/* ranks(data) -> {token: rank}: the mergeable ranks of a decompressed .tiktoken file (a line per
 * token: its bytes in base64, a space, its rank), as encodings.read_ranks makes them in Python:
 * there, 200,000 lines took twice as long, 0.1 s more of the 0.45-0.50 s an exact count's first
 * use waits for (most of the rest is tiktoken's own build). ValueError on anything else: a field
 * that is not base64, a rank that is not a decimal number, a token without its rank. */
static int space(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f'; }

static PyObject *ranks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer data;
    PyObject *out;
    unsigned char local[1024], *token = local;
    Py_ssize_t room = sizeof local;
    const unsigned char *pos, *end;

    if (nargs != 1 || PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "ranks(data)");
        return NULL;
    }
    pos = (const unsigned char *)data.buf;
    end = pos + data.len;
    {
        Py_ssize_t lines = 0; /* the dict made as large as the file asks at once: no resize on the way */
        for (const unsigned char *c = pos; (c = memchr(c, '\n', (size_t)(end - c))) != NULL; c++)
            lines++;
        out = _PyDict_NewPresized(lines + 1);
    }
    while (out != NULL) {
        const unsigned char *field;
        Py_ssize_t n = 0;
        uint64_t acc = 0;
        long long rank = 0;
        int nbits = 0, v, pad = 0;
        PyObject *key, *value;

        while (pos < end && space(*pos))
            pos++;
        if (pos == end)
            break;
        field = pos;
        while (pos < end && !space(*pos))
            pos++;
        if ((pos - field) / 4 * 3 + 3 > room) {
            if (token != local)
                PyMem_Free(token);
            room = (pos - field) / 4 * 3 + 3;
            token = PyMem_Malloc((size_t)room);
            if (token == NULL) {
                PyErr_NoMemory();
                Py_CLEAR(out);
                break;
            }
        }
        for (const unsigned char *c = field; c < pos; c++) {
            if (*c == '=' && c > field && (pos - field) % 4 == 0 && pos - c <= 2) {
                pad++;
                continue;
            }
            if ((v = b64_value(*c)) < 0 || pad) {
                n = -1;
                break;
            }
            acc = (acc << 6) | (uint64_t)v;
            nbits += 6;
            if (nbits >= 8) {
                nbits -= 8;
                token[n++] = (unsigned char)(acc >> nbits);
            }
        }
        if ((pos - field) % 4 != 0)
            n = -1;
        while (pos < end && space(*pos))
            pos++;
        if (n < 0 || pos == end || *pos < '0' || *pos > '9') {
            PyErr_SetString(PyExc_ValueError, "ranks: not a .tiktoken file (a token in base64, a space, its rank per line)");
            Py_CLEAR(out);
            break;
        }
        for (; pos < end && *pos >= '0' && *pos <= '9'; pos++)
            rank = rank < (1LL << 40) ? rank * 10 + (*pos - '0') : rank;
        if ((pos < end && !space(*pos)) || rank >= (1LL << 40)) {
            PyErr_SetString(PyExc_ValueError, "ranks: not a .tiktoken file (a rank that is not a number)");
            Py_CLEAR(out);
            break;
        }
        key = PyBytes_FromStringAndSize((const char *)token, n);
        value = key != NULL ? PyLong_FromLongLong(rank) : NULL;
        if (value == NULL || PyDict_SetItem(out, key, value) < 0)
            Py_CLEAR(out);
        Py_XDECREF(key);
        Py_XDECREF(value);
    }
    if (token != local)
        PyMem_Free(token);
    PyBuffer_Release(&data);
    return out;
}

static PyMethodDef methods[] = {
    {"count", (PyCFunction)(void (*)(void))count, METH_FASTCALL,
     "count(text, table) -> estimated tiktoken count of text"},
    {"build", (PyCFunction)(void (*)(void))build, METH_FASTCALL,
     "build(data, log2_words, o200k, ascii_base, ascii_per_byte, ascii_max, scale) -> a .tiktoken file's table"},
    {"ranks", (PyCFunction)(void (*)(void))ranks, METH_FASTCALL,
     "ranks(data) -> a .tiktoken file's mergeable ranks, {token bytes: rank}"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcount", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastcount(void)
{
    return PyModule_Create(&module);
}
