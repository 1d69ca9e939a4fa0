/*
 * tlog._speedups: the accelerator of the export run scanner (tlog.export.scan), and two
 * helpers, in C. Its one import point is tlog.export.accel (tlog.merkle and tlog.journal take
 * fold_leaves and body_names).
 *
 * body_names, scan_records and scan_runs are each a *sound subset* of the pure-Python checks
 * they speed up: a True (or a record or run counted as done) means the Python code would
 * accept the same bytes with the same result; anything this code is not sure of -- an escape in a key, a 16-digit integer, a
 * record followed by a sig line, the end of a block, any error -- makes it stop and leave the
 * verdict, and the error message, to the Python code (tlog.journal.decode_body,
 * tlog.export.scan.read_record and RunScanner). So it never decides a failure and never
 * writes a message.
 *
 *   body_names(raw: bytes, run: bytes, seq: int) -> bool
 *       True only when tlog.journal.decode_body(raw) succeeds and the body names run ``run``
 *       and record ``seq``. Requires: ``run`` is a valid run ID, 1 <= seq <= 2**63 - 1.
 *
 *   scan_records(buf, at, end, run: bytes, seq: int, count: int, prev: bytes,
 *                outcome: bytes | None) -> (at, records, prev)
 *       Verifies the record lines of one run from offset ``at`` of ``buf``, which holds
 *       LF-terminated lines up to offset ``end``: records ``seq``, ``seq + 1``, ... ``count``
 *       of run ``run`` whose predecessor's hash is ``prev``; ``outcome`` is the run line's
 *       outcome for a sealed run, None for an unsealed one. A record is taken when its line is
 *       ``<hash> <body>`` with the hash in canonical base64, the body passes body_names, the
 *       seal-record rule holds (record ``count`` of a sealed run is exactly its seal record
 *       naming ``outcome``; every other record's kind is not RunSealed), the line after it is
 *       in ``buf`` and is not a ``sig`` line (and, after the run's last record, is a whole
 *       ``run`` or ``end`` line: LF-terminated within the line limit), and SHA-256(prev ||
 *       body) is the written hash.
 *       Stops at the first record not taken; returns the offset after the last record taken,
 *       how many were taken, and the last taken record's hash (``prev`` when none).
 *
 *   scan_runs(buf, at, end, lineno) -> (at, lineno, runs)
 *       Whole runs from offset ``at`` (a run line; ``lineno`` is the number of the line before
 *       it): a run line in the common spelling ("run <ID> <count>[ sealed <pos> <outcome>]",
 *       tlog.export.check.RUN_LINE; a sealed run of at least 2 records), then all its records
 *       as scan_records takes them (with the run line's outcome). Stops
 *       before the first run not taken whole. ``runs`` are tlog.export.VerifiedRun tuples
 *       (run line, run ID, count, position or -1, leaf hash or None, last record's line).
 *       Parses and hashes with the GIL released, 64 runs at a time.
 *
 * And three exact helpers, the same result as the Python code always:
 *
 *   fold_leaves(frontier, leaves, size) -> stored hashes
 *       tlog.merkle.stored_hashes_for_leaves's loop (RFC 6962 node hashes), ``frontier``
 *       updated in place.
 *
 *   count_lines(buf, start, end) -> the number of LF bytes in buf[start:end].
 *
 *   leaf_hashes(buf, offset, stride, length, count) -> bytes
 *       The RFC 6962 leaf hashes SHA-256(0x00 || entry) of ``count`` entries of ``length``
 *       bytes at ``offset``, ``offset + stride``, ... of ``buf``, concatenated (a level-0
 *       tile): a bundle's 32-byte entries (stride 34), or sealed heads joined (stride 32).
 *
 * What body_names accepts, and why each acceptance is the Python verdict (the format is in
 * the docstring of tlog/journal.py): a JSON object with no whitespace between tokens; its keys
 * from {case, data, effect_key, epoch, kind, run, seq, v}, each written without escapes, in
 * strictly increasing byte order (UTF-8 byte order is code point order, the order of the
 * canonical encoder's sort_keys, and "strictly" excludes repeated keys), with v, run, seq,
 * epoch and kind present; v is 1; seq is the decimal of ``seq``; epoch a decimal without a
 * leading zero in 1..2**63-1; run the bytes of ``run``; kind and case match their patterns;
 * effect_key has no escape, 1..256 code points (strings here never hold a byte below 0x20);
 * data is any JSON value but null (optional fields are absent, never null) of the canonical
 * spelling: objects with keys as above (no escape,
 * strictly increasing), arrays, strings of strictly valid UTF-8 with only the escapes
 * json.dumps(ensure_ascii=False) writes (\" \\ \b \f \n \r \t and lowercase \u00XX for the
 * other bytes below 0x20), integers of at most 15 digits (within +-(2**53 - 1); no "-0"),
 * true, false, null, nested at most 32 containers deep (decode_body allows 64). At most
 * 1 MiB. Every such body decodes to a value whose canonical encoding is the same bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <openssl/evp.h>

#define MAX_RECORD_SIZE (1 << 20)
#define MAX_DEPTH 32
#define HASH_TEXT 44
#define MAX_LINE (HASH_TEXT + 1 + MAX_RECORD_SIZE) /* tlog.export.MAX_LINE, LF excluded */
#define MAX_SEQ 9223372036854775807ULL

typedef const unsigned char *ptr;

/* --- JSON of the canonical spelling ------------------------------------------------------ */

static int utf8_tail(ptr p, ptr end) {
    /* The length of the strictly valid UTF-8 sequence at p (p[0] >= 0x80), 0 if none:
       no overlong form, no surrogate, nothing above U+10FFFF (Python's decoder). */
    unsigned char c = p[0], lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        return end - p >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3) return 0;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4) return 0;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4
                                                                                          : 0;
    }
    return 0;
}

static int lower_hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* A string at *pp (which points at its opening quote), as the canonical encoder writes it.
   ``escapes``: whether escapes are allowed (not in keys: their raw bytes would not be the
   sorted text). On success *pp is past the closing quote, [*from, *to) is the content and
   *chars its number of code points. */
/* PLAIN[c]: c is a whole character of a string as the canonical encoder writes it. */
static unsigned char PLAIN[256];

static int string(ptr *pp, ptr end, int escapes, ptr *from, ptr *to, Py_ssize_t *chars) {
    ptr p = *pp + 1;
    Py_ssize_t n = 0;
    *from = p;
    while (p < end) {
        unsigned char c;
        ptr run = p;
        while (p < end && PLAIN[*p]) p++; /* printable ASCII: one character a byte */
        n += p - run;
        if (p >= end) break;
        c = *p;
        if (c == '"') {
            *to = p;
            *pp = p + 1;
            if (chars) *chars = n;
            return 1;
        }
        n++;
        if (c == '\\') {
            if (!escapes || end - p < 2) return 0;
            switch (p[1]) {
            case '"': case '\\': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                /* Only \u00XX for a byte below 0x20 that has no short escape. */
                int h1, h0, v;
                if (end - p < 6 || p[2] != '0' || p[3] != '0') return 0;
                h1 = lower_hex(p[4]);
                h0 = lower_hex(p[5]);
                if (h1 < 0 || h0 < 0) return 0;
                v = h1 * 16 + h0;
                if (v >= 0x20 || v == 0x08 || v == 0x09 || v == 0x0A || v == 0x0C || v == 0x0D)
                    return 0;
                p += 6;
                continue;
            }
            default:
                return 0;
            }
        }
        if (c < 0x20) return 0;
        if (c < 0x80) {
            p++;
        } else {
            int k = utf8_tail(p, end);
            if (!k) return 0;
            p += k;
        }
    }
    return 0;
}

/* An integer of data: 0 or -?[1-9][0-9]{0,14}; what follows is the caller's to check. */
static int small_int(ptr *pp, ptr end) {
    ptr p = *pp;
    int digits = 0;
    if (p < end && *p == '-') p++;
    if (p >= end || *p < '0' || *p > '9') return 0;
    if (*p == '0') {
        if (p != *pp) return 0; /* "-0" re-encodes as "0" */
        *pp = p + 1;
        return 1;
    }
    while (p < end && *p >= '0' && *p <= '9') {
        if (++digits > 15) return 0;
        p++;
    }
    *pp = p;
    return 1;
}

static int literal(ptr *pp, ptr end, const char *word, size_t n) {
    if ((size_t)(end - *pp) < n || memcmp(*pp, word, n) != 0) return 0;
    *pp += n;
    return 1;
}

static int value(ptr *pp, ptr end, int depth);

/* Strictly increasing keys: [a, a_end) < [b, b_end) as bytes. */
static int key_after(ptr a, ptr a_end, ptr b, ptr b_end) {
    size_t la = (size_t)(a_end - a), lb = (size_t)(b_end - b);
    int c = memcmp(a, b, la < lb ? la : lb);
    return c < 0 || (c == 0 && la < lb);
}

static int object(ptr *pp, ptr end, int depth) {
    ptr p = *pp + 1, last = NULL, last_end = NULL;
    if (depth > MAX_DEPTH) return 0;
    if (p < end && *p == '}') {
        *pp = p + 1;
        return 1;
    }
    for (;;) {
        ptr k, k_end;
        if (p >= end || *p != '"' || !string(&p, end, 0, &k, &k_end, NULL)) return 0;
        if (last != NULL && !key_after(last, last_end, k, k_end)) return 0;
        last = k;
        last_end = k_end;
        if (p >= end || *p != ':') return 0;
        p++;
        if (!value(&p, end, depth)) return 0;
        if (p >= end) return 0;
        if (*p == '}') {
            *pp = p + 1;
            return 1;
        }
        if (*p != ',') return 0;
        p++;
    }
}

static int array(ptr *pp, ptr end, int depth) {
    ptr p = *pp + 1;
    if (depth > MAX_DEPTH) return 0;
    if (p < end && *p == ']') {
        *pp = p + 1;
        return 1;
    }
    for (;;) {
        if (!value(&p, end, depth)) return 0;
        if (p >= end) return 0;
        if (*p == ']') {
            *pp = p + 1;
            return 1;
        }
        if (*p != ',') return 0;
        p++;
    }
}

/* A value, then one of , ] } (or the end, for the caller to refuse). */
static int value(ptr *pp, ptr end, int depth) {
    ptr from, to;
    if (*pp >= end) return 0;
    switch (**pp) {
    case '"':
        return string(pp, end, 1, &from, &to, NULL);
    case '{':
        return object(pp, end, depth + 1);
    case '[':
        return array(pp, end, depth + 1);
    case 't':
        return literal(pp, end, "true", 4);
    case 'f':
        return literal(pp, end, "false", 5);
    case 'n':
        return literal(pp, end, "null", 4);
    default:
        if (!small_int(pp, end)) return 0;
        /* A fraction or an exponent makes a float: refused where a separator must follow. */
        return *pp < end && (**pp == ',' || **pp == ']' || **pp == '}');
    }
}

/* --- the record body --------------------------------------------------------------------- */

static int is_alnum(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_alpha(unsigned char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/* [A-Za-z0-9][A-Za-z0-9._:@-]{0,127} */
static int case_id(ptr p, ptr end) {
    if (end - p < 1 || end - p > 128 || !is_alnum(*p)) return 0;
    for (p++; p < end; p++)
        if (!is_alnum(*p) && *p != '.' && *p != '_' && *p != ':' && *p != '@' && *p != '-')
            return 0;
    return 1;
}

/* [A-Za-z][A-Za-z0-9_.-]{0,63} */
static int kind_name(ptr p, ptr end) {
    if (end - p < 1 || end - p > 64 || !is_alpha(*p)) return 0;
    for (p++; p < end; p++)
        if (!is_alnum(*p) && *p != '_' && *p != '.' && *p != '-') return 0;
    return 1;
}

/* A decimal in 1..2**63-1 without a leading zero; *out is its value. */
static int positive(ptr *pp, ptr end, unsigned long long *out) {
    ptr p = *pp;
    unsigned long long v = 0;
    if (p >= end || *p < '1' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (v > (MAX_SEQ - d) / 10) return 0;
        v = v * 10 + d;
        p++;
    }
    *pp = p;
    *out = v;
    return 1;
}

enum { F_CASE, F_DATA, F_EFFECT_KEY, F_EPOCH, F_KIND, F_RUN, F_SEQ, F_V, F_COUNT };
static const struct {
    const char *name;
    size_t len;
} FIELDS[F_COUNT] = {
    {"case", 4}, {"data", 4}, {"effect_key", 10}, {"epoch", 5},
    {"kind", 4}, {"run", 3},  {"seq", 3},         {"v", 1},
};

static int field_of(ptr k, ptr k_end) {
    size_t n = (size_t)(k_end - k);
    int f;
    if (n == 0) return -1;
    switch (k[0]) { /* one candidate per first letter, "epoch" and "effect_key" aside */
    case 'c': f = F_CASE; break;
    case 'd': f = F_DATA; break;
    case 'e': f = n == 5 ? F_EPOCH : F_EFFECT_KEY; break;
    case 'k': f = F_KIND; break;
    case 'r': f = F_RUN; break;
    case 's': f = F_SEQ; break;
    case 'v': f = F_V; break;
    default: return -1;
    }
    return FIELDS[f].len == n && memcmp(FIELDS[f].name, k, n) == 0 ? f : -1;
}

/* ``*sealed`` is set when the kind is RunSealed (the reserved kind of a seal record). */
static int body_ok(ptr p, ptr end, const char *run, Py_ssize_t run_len, unsigned long long seq,
                   int *sealed) {
    int seen = 0, last = -1;
    *sealed = 0;
    if (end - p > MAX_RECORD_SIZE || p >= end || *p != '{') return 0;
    p++;
    for (;;) {
        ptr k, k_end, s, s_end;
        Py_ssize_t chars;
        unsigned long long n;
        int f;
        if (p >= end || *p != '"' || !string(&p, end, 0, &k, &k_end, NULL)) return 0;
        f = field_of(k, k_end);
        /* FIELDS is in byte order, so increasing indexes are increasing keys. */
        if (f <= last) return 0;
        last = f;
        seen |= 1 << f;
        if (p >= end || *p != ':') return 0;
        p++;
        switch (f) {
        case F_CASE:
            if (p >= end || *p != '"' || !string(&p, end, 0, &s, &s_end, NULL)) return 0;
            if (!case_id(s, s_end)) return 0;
            break;
        case F_DATA:
            /* "data":null is refused (optional fields are absent, never null). */
            if (end - p >= 4 && memcmp(p, "null", 4) == 0) return 0;
            if (!value(&p, end, 0)) return 0;
            break;
        case F_EFFECT_KEY:
            if (p >= end || *p != '"' || !string(&p, end, 0, &s, &s_end, &chars)) return 0;
            if (chars < 1 || chars > 256) return 0;
            break;
        case F_EPOCH:
            if (!positive(&p, end, &n)) return 0;
            break;
        case F_KIND:
            if (p >= end || *p != '"' || !string(&p, end, 0, &s, &s_end, NULL)) return 0;
            if (!kind_name(s, s_end)) return 0;
            *sealed = s_end - s == 9 && memcmp(s, "RunSealed", 9) == 0;
            break;
        case F_RUN:
            if (p >= end || *p != '"' || !string(&p, end, 0, &s, &s_end, NULL)) return 0;
            if (s_end - s != run_len || memcmp(s, run, (size_t)run_len) != 0) return 0;
            break;
        case F_SEQ:
            if (!positive(&p, end, &n) || n != seq) return 0;
            break;
        case F_V:
            if (p >= end || *p != '1') return 0;
            p++;
            break;
        }
        if (p >= end) return 0;
        if (*p == '}') {
            p++;
            break;
        }
        if (*p != ',') return 0;
        p++;
    }
    return p == end && (seen & (1 << F_V | 1 << F_RUN | 1 << F_SEQ | 1 << F_EPOCH | 1 << F_KIND)) ==
                           (1 << F_V | 1 << F_RUN | 1 << F_SEQ | 1 << F_EPOCH | 1 << F_KIND);
}

/* --- hashes ------------------------------------------------------------------------------ */

static signed char B64[256];

/* The 32 bytes of a canonical base64 hash (43 characters, "=", zero unused bits). */
static int hash_text(ptr t, unsigned char out[32]) {
    int v[43];
    for (int i = 0; i < 43; i++) {
        v[i] = B64[t[i]];
        if (v[i] < 0) return 0;
    }
    if (t[43] != '=' || (v[42] & 3) != 0) return 0;
    for (int g = 0; g < 10; g++) {
        const int *q = v + 4 * g;
        out[3 * g] = (unsigned char)(q[0] << 2 | q[1] >> 4);
        out[3 * g + 1] = (unsigned char)((q[1] & 15) << 4 | q[2] >> 2);
        out[3 * g + 2] = (unsigned char)((q[2] & 3) << 6 | q[3]);
    }
    out[30] = (unsigned char)(v[40] << 2 | v[41] >> 4);
    out[31] = (unsigned char)((v[41] & 15) << 4 | v[42] >> 2);
    return 1;
}

/* SHA-256, fetched once; each call makes its own context, since the scans hash with the GIL
   released and may run in several threads at once. */
static EVP_MD *SHA256_MD;

/* SHA-256(a || b || c) with b, c optional (NULL). */
static int sha256_3(EVP_MD_CTX *ctx, const void *a, size_t na, const void *b, size_t nb,
                    const void *c, size_t nc, unsigned char out[32]) {
    return EVP_DigestInit_ex(ctx, SHA256_MD, NULL) && EVP_DigestUpdate(ctx, a, na) &&
           (b == NULL || EVP_DigestUpdate(ctx, b, nb)) &&
           (c == NULL || EVP_DigestUpdate(ctx, c, nc)) && EVP_DigestFinal_ex(ctx, out, NULL);
}

static int starts(ptr base, Py_ssize_t at, Py_ssize_t end, const char *word) {
    return end - at >= 4 && memcmp(base + at, word, 4) == 0;
}

/* --- Python ------------------------------------------------------------------------------ */

static PyObject *py_body_names(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer raw, run;
    unsigned long long seq;
    int ok, sealed;
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "body_names takes 3 arguments (raw, run, seq)");
        return NULL;
    }
    seq = PyLong_AsUnsignedLongLong(args[2]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (PyObject_GetBuffer(args[0], &raw, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &run, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    ok = body_ok((ptr)raw.buf, (ptr)raw.buf + raw.len, (const char *)run.buf, run.len, seq,
                 &sealed);
    PyBuffer_Release(&run);
    PyBuffer_Release(&raw);
    return PyBool_FromLong(ok);
}

/* The seal record of a run naming ``outcome``, given a body that body_ok took for ``run`` and
   ``seq``: '{"data":{"outcome":"<outcome>"},"epoch":' then the epoch, then
   ',"kind":"RunSealed","run":"<run>","seq":<seq>,"v":1}' (tlog.export._is_seal_record: in a
   valid body no other field can stand between these, so the rest is the epoch). */
static int seal_record(ptr p, ptr end, const char *run, Py_ssize_t run_len,
                       unsigned long long seq, const char *outcome, Py_ssize_t outcome_len) {
    static const char HEAD[] = "{\"data\":{\"outcome\":\"", MID[] = "\"},\"epoch\":",
                      KIND[] = ",\"kind\":\"RunSealed\",\"run\":\"", SEQ[] = "\",\"seq\":",
                      TAIL[] = ",\"v\":1}";
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%llu", seq);
    size_t head = sizeof HEAD - 1 + (size_t)outcome_len + sizeof MID - 1;
    size_t tail = sizeof KIND - 1 + (size_t)run_len + sizeof SEQ - 1 + (size_t)n + sizeof TAIL - 1;
    ptr q;
    if (n <= 0 || (size_t)(end - p) <= head + tail) return 0;
    if (memcmp(p, HEAD, sizeof HEAD - 1) != 0) return 0;
    q = p + sizeof HEAD - 1;
    if (memcmp(q, outcome, (size_t)outcome_len) != 0) return 0;
    q += outcome_len;
    if (memcmp(q, MID, sizeof MID - 1) != 0) return 0;
    q = end - tail;
    if (memcmp(q, KIND, sizeof KIND - 1) != 0) return 0;
    q += sizeof KIND - 1;
    if (memcmp(q, run, (size_t)run_len) != 0) return 0;
    q += run_len;
    if (memcmp(q, SEQ, sizeof SEQ - 1) != 0) return 0;
    q += sizeof SEQ - 1;
    if (memcmp(q, digits, (size_t)n) != 0) return 0;
    q += n;
    return memcmp(q, TAIL, sizeof TAIL - 1) == 0;
}

/* Records seq.. of a run from *at (see scan_records); the number taken, prev their last hash.
   ``outcome`` (NULL for an unsealed run): the run's last record must be its seal record naming
   it; no other record may have the kind RunSealed. */
static unsigned long long take_records(EVP_MD_CTX *ctx, ptr base, Py_ssize_t *at, Py_ssize_t end,
                                       const char *run, Py_ssize_t run_len,
                                       unsigned long long seq, unsigned long long count,
                                       const char *outcome, Py_ssize_t outcome_len,
                                       unsigned char prev[32]) {
    unsigned long long taken = 0;
    unsigned char h[32], got[32];
    int sealed;
    while (seq + taken <= count) {
        ptr line = base + *at, lf = memchr(line, '\n', (size_t)(end - *at));
        Py_ssize_t next;
        if (lf == NULL || lf - line < HASH_TEXT + 2 || line[HASH_TEXT] != ' ') break;
        /* The look-ahead first: a signed record stops the scan before any parsing. */
        next = lf + 1 - base;
        if (seq + taken < count) {
            if (next >= end || starts(base, next, end, "sig ")) break;
        } else if ((!starts(base, next, end, "run ") && !starts(base, next, end, "end ")) ||
                   /* The reader reads that line whole before it hands on the last record (and
                      the run's leaf): it must end in LF within MAX_LINE bytes, as it checks. */
                   memchr(base + next, '\n', (size_t)(end - next < MAX_LINE + 1 ? end - next
                                                                                 : MAX_LINE + 1)) ==
                       NULL) {
            break;
        }
        if (!hash_text(line, h)) break;
        if (!body_ok(line + HASH_TEXT + 1, lf, run, run_len, seq + taken, &sealed)) break;
        if (outcome != NULL && seq + taken == count) {
            if (!sealed || !seal_record(line + HASH_TEXT + 1, lf, run, run_len, seq + taken,
                                        outcome, outcome_len))
                break;
        } else if (sealed) {
            break;
        }
        if (!sha256_3(ctx, prev, 32, line + HASH_TEXT + 1, (size_t)(lf - line - HASH_TEXT - 1),
                      NULL, 0, got) ||
            memcmp(got, h, 32) != 0)
            break;
        memcpy(prev, h, 32);
        *at = next;
        taken++;
    }
    return taken;
}

static PyObject *py_scan_records(PyObject *self, PyObject *args) {
    Py_buffer buf, prev_buf;
    Py_ssize_t at, end, run_len, outcome_len = 0;
    const char *run, *outcome = NULL;
    long long seq, count;
    unsigned long long taken;
    unsigned char prev[32];
    EVP_MD_CTX *ctx;
    (void)self;
    /* "L": a value beyond a long long is an OverflowError, not silently truncated. */
    if (!PyArg_ParseTuple(args, "y*nny#LLy*z#", &buf, &at, &end, &run, &run_len, &seq, &count,
                          &prev_buf, &outcome, &outcome_len))
        return NULL;
    if (prev_buf.len != 32 || at < 0 || end > buf.len || at > end || seq < 1 || count < 0) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&prev_buf);
        PyErr_SetString(PyExc_ValueError, "scan_records: bad arguments");
        return NULL;
    }
    memcpy(prev, prev_buf.buf, 32);
    PyBuffer_Release(&prev_buf);
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    taken = take_records(ctx, (ptr)buf.buf, &at, end, run, run_len, (unsigned long long)seq,
                         (unsigned long long)count, outcome, outcome_len, prev);
    EVP_MD_CTX_free(ctx);
    PyBuffer_Release(&buf);
    return Py_BuildValue("nKy#", at, taken, (const char *)prev, (Py_ssize_t)32);
}

/* A decimal of 1..18 digits without a leading zero (0 itself when ``zero``); below 2**63. */
static int short_decimal(ptr *pp, ptr end, int zero, unsigned long long *out) {
    ptr p = *pp;
    unsigned long long v = 0;
    if (p < end && *p == '0' && zero) {
        *pp = p + 1;
        *out = 0;
        return 1;
    }
    if (p >= end || *p < '1' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (p - *pp == 18) return 0;
        v = v * 10 + (unsigned)(*p - '0');
        p++;
    }
    *pp = p;
    *out = v;
    return 1;
}

/* A run line in its common spelling, "run <ID> <count>[ sealed <pos> <outcome>]" (the pattern
   tlog.export.check.RUN_LINE; the values need no further check). *pos is -1 when unsealed. */
static int run_line(ptr p, ptr lf, ptr *id, ptr *id_end, unsigned long long *count,
                    long long *pos, ptr *outcome) {
    ptr q;
    unsigned long long v;
    if (lf - p < 7 || memcmp(p, "run ", 4) != 0) return 0;
    q = p + 4;
    *id = q;
    while (q < lf && *q != ' ') q++;
    *id_end = q;
    if (!case_id(*id, q) || q >= lf) return 0; /* a run ID has the alphabet of a case ID */
    q++;
    if (!short_decimal(&q, lf, 0, count)) return 0;
    *pos = -1;
    *outcome = NULL;
    if (q == lf) return 1;
    /* A sealed run holds its records and its seal record: at least 2 (else the reader refuses). */
    if (*count < 2 || lf - q < 8 || memcmp(q, " sealed ", 8) != 0) return 0;
    q += 8;
    if (!short_decimal(&q, lf, 1, &v) || q >= lf || *q != ' ') return 0;
    *pos = (long long)v;
    *outcome = q + 1;
    return kind_name(q + 1, lf); /* an outcome has the alphabet of a kind */
}

/* One run that scan_runs took. */
struct taken_run {
    Py_ssize_t line; /* its run line */
    ptr id;
    Py_ssize_t id_len;
    unsigned long long count;
    long long pos; /* -1: unsealed */
    unsigned char leaf[32];
};

#define BATCH 64 /* runs taken between two holds of the GIL */

/* Up to BATCH whole runs from *at (without the GIL): how many were taken into out. */
static int take_runs(EVP_MD_CTX *ctx, ptr base, Py_ssize_t *at, Py_ssize_t end, Py_ssize_t *lineno,
                     struct taken_run *out) {
    static const unsigned char zero = 0;
    int k = 0;
    while (k < BATCH && *at < end) {
        ptr line = base + *at, lf = memchr(line, '\n', (size_t)(end - *at)), id, id_end, outcome;
        struct taken_run *r = out + k;
        unsigned char prev[32] = {0};
        Py_ssize_t after;
        if (lf == NULL || !run_line(line, lf, &id, &id_end, &r->count, &r->pos, &outcome)) break;
        after = lf + 1 - base;
        if (take_records(ctx, base, &after, end, (const char *)id, id_end - id, 1, r->count,
                         (const char *)outcome, outcome == NULL ? 0 : lf - outcome,
                         prev) != r->count)
            break;
        if (r->pos >= 0 && !sha256_3(ctx, &zero, 1, prev, 32, NULL, 0, r->leaf)) break;
        r->line = *lineno + 1;
        r->id = id;
        r->id_len = id_end - id;
        *lineno += 1 + (Py_ssize_t)r->count;
        *at = after;
        k++;
    }
    return k;
}

static PyObject *py_scan_runs(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t at, end, lineno;
    PyObject *runs;
    EVP_MD_CTX *ctx;
    struct taken_run batch[BATCH];
    int k;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnn", &buf, &at, &end, &lineno)) return NULL;
    if (at < 0 || end > buf.len || at > end) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "scan_runs: bad arguments");
        return NULL;
    }
    runs = PyList_New(0);
    ctx = EVP_MD_CTX_new();
    if (runs == NULL || ctx == NULL) {
        Py_XDECREF(runs);
        EVP_MD_CTX_free(ctx);
        PyBuffer_Release(&buf);
        return runs == NULL ? NULL : PyErr_NoMemory();
    }
    do {
        /* The hashing and parsing without the GIL: other threads (the digest, a pool's
           feeders) run meanwhile; the results become Python objects with it. */
        Py_BEGIN_ALLOW_THREADS
        k = take_runs(ctx, (ptr)buf.buf, &at, end, &lineno, batch);
        Py_END_ALLOW_THREADS
        for (int i = 0; i < k; i++) {
            struct taken_run *r = batch + i;
            PyObject *item = Py_BuildValue(
                "(nNKLNn)", r->line, PyUnicode_DecodeASCII((const char *)r->id, r->id_len, NULL),
                r->count, r->pos,
                r->pos >= 0 ? PyBytes_FromStringAndSize((const char *)r->leaf, 32) : Py_NewRef(Py_None),
                r->line + (Py_ssize_t)r->count);
            if (item == NULL || PyList_Append(runs, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(runs);
                EVP_MD_CTX_free(ctx);
                PyBuffer_Release(&buf);
                return NULL;
            }
            Py_DECREF(item);
        }
    } while (k == BATCH);
    EVP_MD_CTX_free(ctx);
    PyBuffer_Release(&buf);
    return Py_BuildValue("nnN", at, lineno, runs);
}

/* fold_leaves(frontier, leaves, start) -> stored hashes (tlog.merkle.stored_hashes_for_leaves):
   ``frontier`` is the right edge of a tree of ``start`` leaves (the hashes of its perfect
   subtrees, largest first); it is updated in place to the right edge after ``leaves``. */
static PyObject *py_fold_leaves(PyObject *self, PyObject *args) {
    PyObject *frontier, *leaves, *out = NULL;
    EVP_MD_CTX *ctx = NULL;
    long long size;
    unsigned long long n;
    unsigned char edge[64][32], h[32];
    Py_ssize_t depth, k;
    static const unsigned char one = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!L", &PyList_Type, &frontier, &PyList_Type, &leaves, &size))
        return NULL;
    if (size < 0 || size > LLONG_MAX - PyList_GET_SIZE(leaves)) {
        PyErr_SetString(PyExc_ValueError, "fold_leaves: the tree size is out of range");
        return NULL;
    }
    n = (unsigned long long)size;
    depth = PyList_GET_SIZE(frontier);
    if (depth > 63 || (unsigned long long)depth != (unsigned long long)__builtin_popcountll(n)) {
        PyErr_SetString(PyExc_ValueError, "fold_leaves: the frontier does not match the size");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < depth; i++) {
        PyObject *b = PyList_GET_ITEM(frontier, i);
        if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) != 32) goto bad_hash;
        memcpy(edge[i], PyBytes_AS_STRING(b), 32);
    }
    out = PyList_New(0);
    if (out == NULL) return NULL;
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    k = PyList_GET_SIZE(leaves);
    for (Py_ssize_t i = 0; i < k; i++, n++) {
        PyObject *leaf = PyList_GET_ITEM(leaves, i), *b;
        unsigned long long m = n;
        if (!PyBytes_Check(leaf) || PyBytes_GET_SIZE(leaf) != 32) goto bad_hash;
        if (PyList_Append(out, leaf) < 0) goto fail;
        memcpy(h, PyBytes_AS_STRING(leaf), 32);
        while (m & 1) {
            depth--;
            if (!sha256_3(ctx, &one, 1, edge[depth], 32, h, 32, h)) {
                PyErr_SetString(PyExc_RuntimeError, "fold_leaves: SHA-256 failed");
                goto fail;
            }
            b = PyBytes_FromStringAndSize((const char *)h, 32);
            if (b == NULL || PyList_Append(out, b) < 0) {
                Py_XDECREF(b);
                goto fail;
            }
            Py_DECREF(b);
            m >>= 1;
        }
        if (depth >= 64) {
            PyErr_SetString(PyExc_ValueError, "fold_leaves: the tree is too large");
            goto fail;
        }
        memcpy(edge[depth++], h, 32);
    }
    /* The new right edge, in place. */
    {
        PyObject *items = PyList_New(depth);
        if (items == NULL) goto fail;
        for (Py_ssize_t i = 0; i < depth; i++) {
            PyObject *b = PyBytes_FromStringAndSize((const char *)edge[i], 32);
            if (b == NULL) {
                Py_DECREF(items);
                goto fail;
            }
            PyList_SET_ITEM(items, i, b);
        }
        if (PyList_SetSlice(frontier, 0, PyList_GET_SIZE(frontier), items) < 0) {
            Py_DECREF(items);
            goto fail;
        }
        Py_DECREF(items);
    }
    EVP_MD_CTX_free(ctx);
    return out;
bad_hash:
    PyErr_SetString(PyExc_ValueError, "fold_leaves: a hash is not 32 bytes");
fail:
    EVP_MD_CTX_free(ctx);
    Py_XDECREF(out);
    return NULL;
}

/* leaf_hashes(buf, offset, stride, length, count) -> the RFC 6962 leaf hashes
   SHA-256(0x00 || buf[offset + i*stride : offset + i*stride + length]) for i < count, as one
   bytes object of count * 32 bytes (a level-0 tile's bytes). Hashes with the GIL released. */
static PyObject *py_leaf_hashes(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t offset, stride, length, count;
    PyObject *out;
    EVP_MD_CTX *ctx;
    unsigned char *dst;
    int ok = 1;
    static const unsigned char zero = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnn", &buf, &offset, &stride, &length, &count)) return NULL;
    /* Each bound is checked by a subtraction that cannot overflow (0 <= offset <= buf.len
       first), so that no argument, however large, reads outside the buffer. */
    if (offset < 0 || stride < 0 || length < 0 || count < 0 || count > PY_SSIZE_T_MAX / 32 ||
        (count > 0 &&
         (offset > buf.len || length > buf.len - offset ||
          (stride > 0 && count - 1 > (buf.len - offset - length) / stride)))) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "leaf_hashes: the entries are not all in the buffer");
        return NULL;
    }
    out = PyBytes_FromStringAndSize(NULL, count * 32);
    ctx = EVP_MD_CTX_new();
    if (out == NULL || ctx == NULL) {
        Py_XDECREF(out);
        EVP_MD_CTX_free(ctx);
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    dst = (unsigned char *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; ok && i < count; i++)
        ok = sha256_3(ctx, &zero, 1, (ptr)buf.buf + offset + i * stride, (size_t)length, NULL, 0,
                      dst + i * 32);
    Py_END_ALLOW_THREADS
    EVP_MD_CTX_free(ctx);
    PyBuffer_Release(&buf);
    if (!ok) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_RuntimeError, "leaf_hashes: SHA-256 failed");
        return NULL;
    }
    return out;
}

static PyObject *py_count_lines(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end, n = 0;
    ptr p, stop;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &start, &end)) return NULL;
    if (start < 0 || end > buf.len || start > end) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "count_lines: bad arguments");
        return NULL;
    }
    p = (ptr)buf.buf + start;
    stop = (ptr)buf.buf + end;
    Py_BEGIN_ALLOW_THREADS
    /* memchr is vectorized by the C library; the cost here is the pages of the map. */
    while ((p = memchr(p, '\n', (size_t)(stop - p))) != NULL) {
        n++;
        p++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef METHODS[] = {
    {"body_names", (PyCFunction)(void (*)(void))py_body_names, METH_FASTCALL,
     "body_names(raw, run, seq) -> bool: True only when decode_body accepts raw naming run/seq."},
    {"scan_records", py_scan_records, METH_VARARGS,
     "scan_records(buf, at, end, run, seq, count, prev, outcome) -> (at, records, prev)."},
    {"scan_runs", py_scan_runs, METH_VARARGS,
     "scan_runs(buf, at, end, lineno) -> (at, lineno, runs)."},
    {"fold_leaves", py_fold_leaves, METH_VARARGS,
     "fold_leaves(frontier, leaves, start) -> the stored hashes the leaves add."},
    {"leaf_hashes", py_leaf_hashes, METH_VARARGS,
     "leaf_hashes(buf, offset, stride, length, count) -> count leaf hashes, one bytes object."},
    {"count_lines", py_count_lines, METH_VARARGS,
     "count_lines(buf, start, end) -> the number of LF bytes in buf[start:end]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "tlog._speedups", "C fast paths of tlog (see tlog/_speedups.c).", -1,
    METHODS, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    static const char ALPHABET[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
    memset(B64, -1, sizeof B64);
    for (int i = 0; i < 64; i++) B64[(unsigned char)ALPHABET[i]] = (signed char)i;
    if (SHA256_MD == NULL) SHA256_MD = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (SHA256_MD == NULL) {
        PyErr_SetString(PyExc_ImportError, "tlog._speedups: OpenSSL has no SHA-256");
        return NULL;
    }
    return PyModule_Create(&MODULE);
}
