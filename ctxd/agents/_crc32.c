/* _crc32: zlib's CRC-32 (the same values as zlib.crc32), folded with carry-less multiplies.
 *
 * Why: a session reader keeps the CRC-32 of every byte it read (ctxd/agents/jsonl.py: a file
 * rewritten in place is never taken up where it was left), and zlib 1.2's table-driven crc32
 * was a tenth of a heavy history's first read. On an x86-64 CPU with PCLMULQDQ and SSE4.1 the
 * bulk is folded 64 bytes at a time (Intel's "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ", the bit-reflected constants of the CRC-32 polynomial, as zlib's own SIMD
 * variants use them), 256 at a time where it multiplies 512 bits at once (VPCLMULQDQ: a third
 * of the time again); the rest, and every byte elsewhere, goes through a byte-wise table.
 * The extension is optional (setup.py): without it zlib.crc32 gives the same values.
 *
 * crc32(data: bytes, value: int = 0) -> int
 *     The CRC-32 of `data`, continuing from `value` (a previous call's result), as zlib.crc32.
 * WIDE: bool
 *     Whether the bulk is folded 512 bits at a time (VPCLMULQDQ), else 128.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

static uint32_t TABLE[256];

static void make_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        TABLE[n] = c;
    }
}

/* Byte at a time, on the pre- and post-inverted register. */
static uint32_t bytewise(uint32_t crc, const unsigned char *p, size_t n) {
    while (n--) crc = TABLE[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

/* Four 128-bit lanes (x1 the earliest) into one, then the rest 16 bytes at a time (`n` a multiple
 * of 16), then 128 bits to 64 and Barrett's reduction to 32: the register, inverted. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t reduced(__m128i x1, __m128i x2, __m128i x3, __m128i x4,
                                                                  const unsigned char *p, size_t n) {
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0 = k3k4, x5;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x4), x5);
    while (n >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)p);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x2), x5);
        p += 16;
        n -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, x3), x0, 0x00), x2);
    x0 = poly;
    x2 = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, x3), x0, 0x10), x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

/* `n` a multiple of 16, at least 64; `crc` the inverted register. Four lanes of 128 bits, each
 * folded 512 bits ahead (k1k2: x^544 and x^480 mod P, bit-reflected). */
__attribute__((target("pclmul,sse4.1"))) static uint32_t folded(uint32_t crc, const unsigned char *p, size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k1k2, 0x11), _mm_clmulepi64_si128(x1, k1k2, 0x00)),
                           _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x2, k1k2, 0x11), _mm_clmulepi64_si128(x2, k1k2, 0x00)),
                           _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x3, k1k2, 0x11), _mm_clmulepi64_si128(x3, k1k2, 0x00)),
                           _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x4, k1k2, 0x11), _mm_clmulepi64_si128(x4, k1k2, 0x00)),
                           _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        n -= 64;
    }
    return reduced(x1, x2, x3, x4, p, n);
}

/* `folded`, four 512-bit lanes at a time where the CPU multiplies 512 bits at once (VPCLMULQDQ):
 * the bulk is bound by the multiplies' latency, so four times the bits per multiply is about
 * three times the speed. Each lane folded 2048 bits ahead (x^2080 and x^2016 mod P), then the
 * four into one (512 bits ahead: k1k2), whose four 128-bit parts go on as `folded`'s lanes.
 * `n` a multiple of 16, at least 256. */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) static uint32_t folded_wide(uint32_t crc,
                                                                                         const unsigned char *p,
                                                                                         size_t n) {
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01322d1430LL, 0x011542778aLL));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL));
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 0x00));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 0x40));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 0x80));
    __m512i z4 = _mm512_loadu_si512((const void *)(p + 0xc0));
    z1 = _mm512_xor_si512(z1, _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128((int)crc), 0));
    p += 256;
    n -= 256;
#define FOLD(z, k, next) _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, k, 0x11), \
                                                   _mm512_clmulepi64_epi128(z, k, 0x00), next, 0x96)
    while (n >= 256) {
        z1 = FOLD(z1, k2048, _mm512_loadu_si512((const void *)(p + 0x00)));
        z2 = FOLD(z2, k2048, _mm512_loadu_si512((const void *)(p + 0x40)));
        z3 = FOLD(z3, k2048, _mm512_loadu_si512((const void *)(p + 0x80)));
        z4 = FOLD(z4, k2048, _mm512_loadu_si512((const void *)(p + 0xc0)));
        p += 256;
        n -= 256;
    }
    z2 = FOLD(z1, k512, z2);
    z3 = FOLD(z2, k512, z3);
    z4 = FOLD(z3, k512, z4);
#undef FOLD
    return reduced(_mm512_extracti32x4_epi32(z4, 0), _mm512_extracti32x4_epi32(z4, 1),
                   _mm512_extracti32x4_epi32(z4, 2), _mm512_extracti32x4_epi32(z4, 3), p, n);
}

static int wide; /* the CPU (and the OS) has VPCLMULQDQ on 512 bits */

static PyObject *crc32(PyObject *self, PyObject *args) {
    Py_buffer buf;
    unsigned int value = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*|I", &buf, &value)) return NULL;
    const unsigned char *p = buf.buf;
    size_t n = (size_t)buf.len;
    uint32_t crc = ~(uint32_t)value;
    Py_BEGIN_ALLOW_THREADS
    if (n >= 64) {
        size_t bulk = n & ~(size_t)15;
        crc = wide && bulk >= 256 ? folded_wide(crc, p, bulk) : folded(crc, p, bulk);
        p += bulk;
        n -= bulk;
    }
    crc = bytewise(crc, p, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(~crc);
}

static PyMethodDef METHODS[] = {
    {"crc32", crc32, METH_VARARGS, "crc32(data, value=0) -> the CRC-32 of data, as zlib.crc32"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_crc32", NULL, -1, METHODS, NULL, NULL, NULL, NULL};
#define FOLDS 1
#endif

PyMODINIT_FUNC PyInit__crc32(void) {
#ifdef FOLDS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
        make_table();
        wide = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
        PyObject *module = PyModule_Create(&MODULE);
        if (module != NULL && PyModule_AddObjectRef(module, "WIDE", wide ? Py_True : Py_False) < 0) Py_CLEAR(module);
        return module;
    }
#endif
    PyErr_SetString(PyExc_ImportError, "no carry-less multiply on this CPU: zlib.crc32 is as fast");
    return NULL;
}
