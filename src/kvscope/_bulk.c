/* kvscope._bulk: the bulk lane of the reader (SGLang "Decode batch" / "Prefill batch" lines and the
 * retraction warnings) in C, and the reader's newline count.
 *
 * Why this exists: a week of serving journal is gigabytes of these line shapes, and in pure Python
 * each costs a regex match plus a loop turn of the runtime fold (kvscope.runtime.stream); measured,
 * that is 80x `grep -c 'Decode batch'`. This module does the same steps at C speed:
 *
 *   split(buf, lo, hi)
 *                the equivalent of kvscope.runtime.lines.BULK.split() over b"\n" + buf[lo:hi] (whole
 *                lines), read in place: the text with every matched line replaced by "\x01", and a
 *                Batch holding the groups of each match (Batch.rows() gives them as the regex's
 *                tuples) plus the numbers they convert to. None: no line matched. False: it cannot
 *                promise the regex's result (a number of more than MAX_DIGITS digits, more than
 *                MAX_LABELS rank labels); the caller then uses the regex. Ellipsis: the stretch
 *                holds the mark byte "\x01" itself, so no lane may take it (the per-line path reads
 *                it). Every look at the bytes is made without the GIL.
 *   fold(batch, streams)
 *                kvscope.runtime.stream.Stream.sample_rows() for every decode / prefill row, each row
 *                into the stream of its rank label, with the same arithmetic in the same order (the
 *                same doubles). Queue episodes open, merge and close here; Stream._close() and
 *                Timeline._halve() are called as Python methods, so that logic exists once.
 *                Retraction rows are counted by the accumulator (Batch.retracts()).
 *   count_lines(buf, lo, hi)
 *                bytes.count(b"\n", lo, hi), sixteen bytes at a time.
 *   low_bytes(buf)
 *                (buf.count(b"\0"), b"\x01" in buf) in one pass, with the GIL given up (the reading
 *                thread asks it of each block).
 *
 * Equivalence with the Python path is a tested property (tests/test_bulk_native.py): same split on
 * real logs, mutated lines and random bytes, same Stream state after folding the same rows; and the
 * work per line is linear whatever the line holds (a hostile line is a test too).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* SSE2: part of every x86-64 CPU; elsewhere the plain loops run */
#endif

#define NGROUPS 18
#define USAGE_BINS 1001
#define QUEUED_BINS 101
#define MAX_RUNNING_KEYS 512
#define RUNNING_CAP 1024 /* running-request counts below this are counted in C while queued */
#define GAP_CAP_S 30.0
#define SATURATED 0.90
#define FULL 0.99
#define MAX_USAGE 1.05
#define MAX_DIGITS 15 /* < 2**53: every int is an exact double, so tok / r in C is Python's int / int */
#define MERGE_S 15.0
#define MAX_FREE 1024 /* free text between two fields, as the regex bounds it (runtime/lines.py _FREE) */
#define MAX_LABELS 1024 /* rank labels per stretch: more (never seen in a real log) go to the regex */

typedef struct { /* what fold reads first (two cache lines), the spans after */
    double t, u, gen, hit, tps;
    long long r, tok, q, new_tok, cached, retracted;
    Py_ssize_t label;
    char kind; /* 'd' decode, 'p' prefill, 'r' retraction */
    char valid, graph, has_hit, has_tps; /* graph: -1 none, 0 False, 1 True */
    char st_u, st_gen, st_hit, st_tps;   /* what num_run made of each float field (see there) */
    int32_t span[NGROUPS][2]; /* [start, end) in the view; start -1: group did not take part */
} Row;

typedef struct {
    PyObject_HEAD
    PyObject *view;   /* bytes the spans point into */
    Row *rows;
    Py_ssize_t n, cap; /* rows made, rows the buffer holds */
    PyObject *labels; /* list of bytes: rank labels in order of first appearance */
    int32_t *sample;      /* label indexes in order of first appearance among valid sample rows */
    Py_ssize_t n_sample;  /* -1: not known (a slice): sample_labels() looks at the rows */
    Py_ssize_t n_retract; /* retraction rows; -1: not known */
    long long tot_r, tot_new, tot_cached; /* sums over the sample rows, LLONG_MAX when they would not fit; -1: not known */
} Batch;

static PyTypeObject BatchType;

/* ---------------------------------------------------------------- matching one line ---- */

/* Character classes of the pattern, one bit each, looked up in one table. */
enum { C_T = 1, C_DIGIT = 2, C_NUM = 4, C_HOST = 8, C_IDENT = 16, C_ISOTAIL = 32, C_RANK = 64, C_BLANK = 128 };
static unsigned char CLS[256];

static int32_t NO_SPANS[NGROUPS][2]; /* every group: did not take part (-1, -1) */

static void init_classes(void) {
    memset(NO_SPANS, 0xff, sizeof(NO_SPANS));
    for (int c = 0; c < 256; c++) {
        unsigned char k = 0;
        int digit = c >= '0' && c <= '9', alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int word = digit || alpha || c == '_';
        if (c == '\t' || (c >= 0x20 && c <= 0x7e && c != '[')) k |= C_T; /* printable ASCII and tab, no '[' */
        if (digit) k |= C_DIGIT | C_NUM | C_ISOTAIL;
        if (c == '.') k |= C_NUM;
        if (word || c == '.' || c == '-') k |= C_HOST;                       /* [\w.\-] */
        if (word || c == '.' || c == '@' || c == '/' || c == '-') k |= C_IDENT; /* [\w.@/\-] */
        if (c == '.' || c == ',' || c == ':' || c == '+' || c == '-') k |= C_ISOTAIL;
        if ((c >= 'A' && c <= 'Z') || c == '_') k |= C_RANK;
        if (c == ' ' || c == '\t') k |= C_BLANK;
        CLS[c] = k;
    }
}

#define IS(c, cls) (CLS[(unsigned char)(c)] & (cls))
static inline int is_T(unsigned char c) { return IS(c, C_T); }
static inline int is_digit(unsigned char c) { return IS(c, C_DIGIT); }
static inline int is_blank(unsigned char c) { return IS(c, C_BLANK); }

typedef struct {
    const unsigned char *s;
    Py_ssize_t hi;   /* index of the line's "\n" */
    Py_ssize_t h2;   /* hi, less a "\r" just before it */
    Py_ssize_t lo;   /* the line's first byte */
    Py_ssize_t last; /* index of the last char of s[..h2) that is not blank (may be < line start) */
    Py_ssize_t lastbad; /* the last byte of s[lo..last] that is not `_T` (lo - 1: none); LASTBAD_UNKNOWN until asked */
} Line;

#define LASTBAD_UNKNOWN (-2)

#define INLINE static inline __attribute__((always_inline))

INLINE int lit(const Line *L, Py_ssize_t *p, const char *text, Py_ssize_t len) {
    if (*p + len > L->hi || memcmp(L->s + *p, text, len) != 0) return 0;
    *p += len;
    return 1;
}
#define LIT(L, p, text) lit((L), (p), (text), (Py_ssize_t)(sizeof(text) - 1))

INLINE Py_ssize_t run_of(const Line *L, Py_ssize_t p, unsigned char cls) {
    while (p < L->hi && IS(L->s[p], cls)) p++;
    return p;
}

INLINE int digits(const Line *L, Py_ssize_t *p, int n) {
    for (int i = 0; i < n; i++)
        if (*p + i >= L->hi || !is_digit(L->s[*p + i])) return 0;
    *p += n;
    return 1;
}

/* `\d\d:\d\d:\d\d` */
INLINE int hms(const Line *L, Py_ssize_t *p) {
    return digits(L, p, 2) && LIT(L, p, ":") && digits(L, p, 2) && LIT(L, p, ":") && digits(L, p, 2);
}

/* The optional journald / ISO prefix (`Mon dd HH:MM:SS(.frac)? host ident[pid]: `), else nothing
 * (the line then starts with "["): 0 when the line cannot match. */
static int prefix(const Line *L, Py_ssize_t *p) {
    const unsigned char *s = L->s;
    Py_ssize_t q = *p;
    if (q < L->hi && s[q] == '[') return 1;
    if (q + 3 <= L->hi && s[q] >= 'A' && s[q] <= 'Z') { /* [A-Z][a-z]{2} +\d{1,2} HH:MM:SS(?:\.\d+)? */
        if (!(s[q + 1] >= 'a' && s[q + 1] <= 'z' && s[q + 2] >= 'a' && s[q + 2] <= 'z')) return 0;
        q += 3;
        Py_ssize_t sp = q;
        while (q < L->hi && s[q] == ' ') q++;
        if (q == sp) return 0;
        Py_ssize_t d = q;
        while (q < L->hi && is_digit(s[q]) && q - d < 2) q++;
        if (q == d || !LIT(L, &q, " ") || !hms(L, &q)) return 0;
        if (q + 1 < L->hi && s[q] == '.' && is_digit(s[q + 1])) {
            q++;
            while (q < L->hi && is_digit(s[q])) q++;
        }
    } else if (q < L->hi && is_digit(s[q])) { /* YYYY-MM-DDTHH:MM:SS[\d.,:+\-]* */
        if (!(digits(L, &q, 4) && LIT(L, &q, "-") && digits(L, &q, 2) && LIT(L, &q, "-") && digits(L, &q, 2) &&
              LIT(L, &q, "T") && hms(L, &q)))
            return 0;
        q = run_of(L, q, C_ISOTAIL);
    } else {
        return 0;
    }
    if (!LIT(L, &q, " ")) return 0;
    Py_ssize_t h = run_of(L, q, C_HOST);
    if (h == q || !LIT(L, &h, " ")) return 0;
    Py_ssize_t id = run_of(L, h, C_IDENT);
    if (id == h) return 0;
    if (id < L->hi && s[id] == '[') { /* (?:\[\d+\])? */
        Py_ssize_t k = id + 1, dd = k;
        while (k < L->hi && is_digit(s[k])) k++;
        if (k > dd && k < L->hi && s[k] == ']') id = k + 1;
    }
    if (!LIT(L, &id, ": ")) return 0;
    *p = id;
    return 1;
}

/* The last byte of s[lo..last] that is not `_T` (printable ASCII but '[', or tab), or lo - 1.
 * Found once per line, from the end, sixteen bytes at a time: a serving line's body (everything
 * after its head, which holds the last '[') is all `_T`, so every "is the free text between these
 * two fields `_T`?" question the pattern asks is then answered by one comparison, and the work per
 * line stays linear however many candidate fields a hostile line holds. */
static Py_ssize_t last_bad(Line *L) {
    if (L->lastbad != LASTBAD_UNKNOWN) return L->lastbad;
    const unsigned char *s = L->s;
    Py_ssize_t e = L->last + 1; /* bytes s[e..last] are known to be `_T` */
#if defined(__SSE2__)
    const __m128i below = _mm_set1_epi8(0x1f), del = _mm_set1_epi8(0x7f), open = _mm_set1_epi8('['),
                  tab = _mm_set1_epi8('\t');
    while (e - 16 >= L->lo) {
        __m128i c = _mm_loadu_si128((const __m128i *)(s + e - 16));
        /* signed: 0x20..0x7f are > 0x1f, 0x80..0xff are negative */
        __m128i ok = _mm_andnot_si128(_mm_or_si128(_mm_cmpeq_epi8(c, del), _mm_cmpeq_epi8(c, open)),
                                      _mm_cmpgt_epi8(c, below));
        unsigned bad = (~(unsigned)_mm_movemask_epi8(_mm_or_si128(ok, _mm_cmpeq_epi8(c, tab)))) & 0xffffu;
        if (bad) return L->lastbad = e - 16 + (31 - __builtin_clz(bad));
        e -= 16;
    }
#endif
    while (e > L->lo && is_T(s[e - 1])) e--;
    return L->lastbad = e - 1; /* e == lo: lo - 1, none */
}

/* `_END` then `[ \t]*\r?(?=\n)` from p: the END group's end, or -1. */
static Py_ssize_t tail_end(Line *L, Py_ssize_t p) {
    if (L->last < p) return p; /* only blanks (and the "\r") are left */
    unsigned char c = L->s[L->last];
    if (!(is_digit(c) || c == ',' || c == '.' || c == '%' || c == ')')) return -1;
    if (L->last - p > MAX_FREE) return -1; /* `_T{0,MAX_FREE}` then the last char */
    return last_bad(L) < p ? L->last + 1 : -1;
}

/* Whether s[from:b) is all `_T` (how far a lazy `_T*?` from `from` can reach), where s[from:*seen)
 * is known to be: one comparison on a clean line, else each byte is looked at once over all calls. */
INLINE int reach(Line *L, Py_ssize_t *seen, Py_ssize_t b) {
    Py_ssize_t k = *seen;
    if (b <= k) return 1;
    if (last_bad(L) < k && b <= L->h2) { /* past last: blanks, which are `_T`; then the "\r" */
        if (b > k) *seen = b;
        return 1;
    }
    while (k < b && is_T(L->s[k])) k++;
    *seen = k;
    return k >= b;
}

/* First occurrence of needle[0:n) in s[a:b), or -1. memchr on the first byte then memcmp: these
 * haystacks are one line long, where glibc memmem's per-call setup costs more than the search. */
static Py_ssize_t find_lit(const unsigned char *s, Py_ssize_t a, Py_ssize_t b, const char *needle, Py_ssize_t n) {
    while (b - a >= n) {
        const unsigned char *hit = memchr(s + a, (unsigned char)needle[0], (size_t)(b - a - n + 1));
        if (hit == NULL) return -1;
        Py_ssize_t at = hit - s;
        if (memcmp(hit + 1, needle + 1, (size_t)(n - 1)) == 0) return at;
        a = at + 1;
    }
    return -1;
}

#define SET(row, g, a, b) ((row)->span[(g)][0] = (int32_t)(a), (row)->span[(g)][1] = (int32_t)(b))

static const double P10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* A run of digits from *p, read once: the span and its value as int() gives it (-1: more than
 * MAX_DIGITS digits, which the C lane does not hold: the regex takes the stretch). The value is taken while the run is matched, so no second pass converts it. */
INLINE int int_run(const Line *L, Py_ssize_t *p, long long *v) {
    Py_ssize_t k = *p;
    unsigned long long x = 0; /* wraps on a hostile run; such a value is never used */
    while (k < L->hi && is_digit(L->s[k])) x = x * 10 + (unsigned)(L->s[k++] - '0');
    if (k == *p) return 0;
    *v = k - *p > MAX_DIGITS ? -1 : (long long)x;
    *p = k;
    return 1;
}

/* A [\d.]+ run from *p, read once, and what float() makes of it: *st 1 with the value in *v, 0
 * where Python's float() would raise (two dots, no digit), 2 for more than 15 digits (python_float
 * converts the span then). */
INLINE int num_run(const Line *L, Py_ssize_t *p, double *v, char *st) {
    Py_ssize_t k = *p;
    unsigned long long m = 0;
    Py_ssize_t dots = 0, nd = 0, frac = 0;
    for (; k < L->hi; k++) {
        unsigned char c = L->s[k];
        if (c == '.') {
            dots++;
        } else if (is_digit(c)) {
            m = m * 10 + (unsigned)(c - '0');
            nd++;
            frac += dots == 1;
        } else {
            break;
        }
    }
    if (k == *p) return 0;
    *p = k;
    if (dots > 1 || nd == 0) {
        *st = 0;
    } else if (nd > 15) {
        *st = 2;
    } else { /* exact integer / exact power of ten: one correctly rounded division, as float() gives */
        *st = 1;
        *v = (double)(long long)m / P10[frac];
    }
    return 1;
}

INLINE int number_span(const Line *L, Py_ssize_t *p, unsigned char cls) {
    Py_ssize_t e = run_of(L, *p, cls);
    if (e == *p) return 0;
    *p = e;
    return 1;
}

/* The regex's first (gen, queue) pair. The queue fields that can follow a gen field, and whether
 * each ends the line, do not depend on which gen field it is (the text between is `_T`), and a
 * later gen field sees a subset of them: so once the inner loop fails, every later gen field fails
 * too. That keeps a hostile line with thousands of both fields linear. */
static int decode_rest(Line *L, Py_ssize_t p, Row *row) {
    static const char GEN[] = "gen throughput (token/s): ";
    static const char QUE[] = "#queue-req: ";
    Py_ssize_t t1 = p, seen = p; /* s[t1:seen) is all `_T` */
    /* Where the gen field comes first after the fields before it: directly, or after the CUDA-graph
     * field of 0.4+ (that text holds no other gen field, so it is the first occurrence). */
    Py_ssize_t first = p;
    if (!(LIT(L, &first, "cuda graph: True, ") || LIT(L, &first, "cuda graph: False, "))) first = p;
    if (first + 26 <= L->hi && memcmp(L->s + first, GEN, 26) == 0)
        seen = first; /* what lies before it is one of those literals: `_T` */
    else
        first = find_lit(L->s, t1, L->hi, GEN, 26);
    for (Py_ssize_t g = first; g >= 0; g = find_lit(L->s, g + 1, L->hi, GEN, 26)) {
        if (g - t1 > MAX_FREE || !reach(L, &seen, g)) break; /* nor any later occurrence */
        Py_ssize_t q = g + 26, gs = q;
        double gen;
        char gen_st;
        if (!num_run(L, &q, &gen, &gen_st)) continue;
        Py_ssize_t ge = q;
        if (!LIT(L, &q, ", ")) continue;
        Py_ssize_t t2 = q; /* s[t1:t2) is `_T`, so s[t2:k) is `_T` iff s[t1:k) is */
        seen = t2;         /* s[t1:g) was reached; the field, its number and ", " are `_T` */
        Py_ssize_t k0 = t2 + 12 <= L->hi && memcmp(L->s + t2, QUE, 12) == 0 ? t2 : find_lit(L->s, t2, L->hi, QUE, 12);
        for (Py_ssize_t k = k0; k >= 0; k = find_lit(L->s, k + 1, L->hi, QUE, 12)) {
            if (k - t2 > MAX_FREE || !reach(L, &seen, k)) break;
            Py_ssize_t d = k + 12, ds = d;
            long long queued;
            if (!int_run(L, &d, &queued)) continue;
            Py_ssize_t end = tail_end(L, d);
            if (end < 0) continue;
            SET(row, 5, t1, g);
            SET(row, 6, gs, ge);
            SET(row, 7, t2, k);
            SET(row, 8, ds, d);
            SET(row, 9, d, end);
            row->gen = gen;
            row->st_gen = gen_st;
            row->q = queued;
            return 1;
        }
        return 0; /* no queue field after this gen field ends the line: none after a later one either */
    }
    return 0;
}

static int prefill_rest(Line *L, Py_ssize_t p, Row *row) {
    static const char TPS[] = "input throughput (token/s): ";
    Py_ssize_t seen = p; /* s[p:seen) is all `_T` */
    for (Py_ssize_t k = find_lit(L->s, p, L->hi, TPS, 28); k >= 0; k = find_lit(L->s, k + 1, L->hi, TPS, 28)) {
        if (k - p > MAX_FREE || !reach(L, &seen, k)) break;
        Py_ssize_t q = k + 28, ts = q;
        double tps;
        char tps_st;
        if (!num_run(L, &q, &tps, &tps_st)) continue;
        if (tail_end(L, q) < 0) continue;
        SET(row, 16, ts, q);
        row->tps = tps;
        row->st_tps = tps_st;
        return 1;
    }
    return tail_end(L, p) >= 0;
}

static void line_init(Line *L, const unsigned char *s, Py_ssize_t lo, Py_ssize_t hi) {
    *L = (Line){s, hi, hi, lo, 0, LASTBAD_UNKNOWN};
    if (hi > lo && s[hi - 1] == '\r') L->h2 = hi - 1;
    L->last = L->h2 - 1;
    while (L->last >= lo && is_blank(s[L->last])) L->last--;
}

static int match_body(Line *L, Py_ssize_t p, Row *row);

/* The line's head: the optional prefix, "[stamp ranks] " (groups 1 and 2). It reads no byte past
 * the "] " it ends with, so another line with the same head bytes has the same head (bulk_split
 * relies on that to parse a run of lines of one second and rank once). 0: no match. */
static int match_head(Line *L, Py_ssize_t lo, Py_ssize_t *pp, Row *row) {
    const unsigned char *s = L->s;
    Py_ssize_t hi = L->hi, p = lo;
    if (!prefix(L, &p)) return 0;
    if (!LIT(L, &p, "[")) return 0;
    Py_ssize_t st = p;
    if (!(digits(L, &p, 4) && LIT(L, &p, "-") && digits(L, &p, 2) && LIT(L, &p, "-") && digits(L, &p, 2) &&
          LIT(L, &p, " ") && hms(L, &p)))
        return 0;
    memcpy(row->span, NO_SPANS, sizeof(NO_SPANS));
    SET(row, 0, st, p);
    if (p + 1 < hi && (s[p] == '.' || s[p] == ',') && is_digit(s[p + 1])) {
        p++;
        while (p < hi && is_digit(s[p])) p++;
    }
    Py_ssize_t rs = p;
    for (;;) { /* ((?: [A-Z_]+\d+)*) */
        Py_ssize_t q = p;
        if (!(q < hi && s[q] == ' ')) break;
        Py_ssize_t a = q + 1, b = run_of(L, a, C_RANK);
        if (b == a) break;
        Py_ssize_t c = run_of(L, b, C_DIGIT);
        if (c == b) break;
        p = c;
    }
    SET(row, 1, rs, p);
    if (!LIT(L, &p, "] ")) return 0;
    *pp = p;
    return 1;
}

/* Whole-line match of the BULK pattern on s[lo:hi) (hi at "\n"); fills the spans. */
static int match_line(const unsigned char *s, Py_ssize_t lo, Py_ssize_t hi, Row *row, Py_ssize_t *head_end) {
    Line L;
    line_init(&L, s, lo, hi);
    return match_head(&L, lo, head_end, row) && match_body(&L, *head_end, row);
}

/* The same for a line whose first head_len bytes are those of a line already matched (whose
 * spans 0 and 1 are given, at offset shift from this one's). */
static int match_same_head(const unsigned char *s, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t head_len, const Row *prev,
                           Py_ssize_t shift, Row *row) {
    Line L;
    line_init(&L, s, lo, hi);
    memcpy(row->span[2], NO_SPANS[2], sizeof(int32_t) * 2 * (NGROUPS - 2));
    SET(row, 0, prev->span[0][0] + shift, prev->span[0][1] + shift);
    SET(row, 1, prev->span[1][0] + shift, prev->span[1][1] + shift);
    return match_body(&L, lo + head_len, row);
}

/* The rest of the line after its head: a decode, prefill or retraction line. */
static int match_body(Line *Lp, Py_ssize_t p, Row *row) {
    Line L = *Lp;
    const unsigned char *s = L.s;
    Py_ssize_t hi = L.hi;
    if (LIT(&L, &p, "Decode batch")) {
        if (!(p < hi && (s[p] == '.' || s[p] == ','))) return 0;
        p++;
        Py_ssize_t a, b;
        if (!LIT(&L, &p, " #running-req: ")) return 0;
        a = p;
        if (!int_run(&L, &p, &row->r)) return 0;
        SET(row, 2, a, p);
        if (!LIT(&L, &p, ", #token: ")) return 0;
        a = p;
        if (!int_run(&L, &p, &row->tok)) return 0;
        SET(row, 3, a, p);
        if (!LIT(&L, &p, ", token usage: ")) return 0;
        a = p;
        if (!num_run(&L, &p, &row->u, &row->st_u)) return 0;
        b = p;
        if (!LIT(&L, &p, ", ")) return 0;
        SET(row, 4, a, b);
        row->kind = 'd';
        return decode_rest(&L, p, row);
    }
    if (LIT(&L, &p, "Prefill batch")) {
        if (!(p < hi && (s[p] == '.' || s[p] == ','))) return 0;
        p++;
        Py_ssize_t a;
        if (!LIT(&L, &p, " #new-seq: ") || !number_span(&L, &p, C_DIGIT)) return 0;
        if (!LIT(&L, &p, ", #new-token: ")) return 0;
        a = p;
        if (!int_run(&L, &p, &row->new_tok)) return 0;
        SET(row, 10, a, p);
        if (!LIT(&L, &p, ", #cached-token: ")) return 0;
        a = p;
        if (!int_run(&L, &p, &row->cached)) return 0;
        SET(row, 11, a, p);
        if (!LIT(&L, &p, ", ")) return 0;
        Py_ssize_t q = p;
        if (LIT(&L, &q, "cache hit rate: ")) {
            Py_ssize_t hs = q;
            double hit;
            char hit_st;
            if (num_run(&L, &q, &hit, &hit_st)) {
                Py_ssize_t he = q;
                if (LIT(&L, &q, "%, ")) {
                    SET(row, 12, hs, he);
                    row->hit = hit;
                    row->st_hit = hit_st;
                    p = q;
                }
            }
        }
        if (!LIT(&L, &p, "token usage: ")) return 0;
        a = p;
        if (!num_run(&L, &p, &row->u, &row->st_u)) return 0;
        SET(row, 13, a, p);
        if (!LIT(&L, &p, ", #running-req: ")) return 0;
        a = p;
        if (!int_run(&L, &p, &row->r)) return 0;
        SET(row, 14, a, p);
        if (!LIT(&L, &p, ", #queue-req: ")) return 0;
        a = p;
        if (!int_run(&L, &p, &row->q)) return 0;
        SET(row, 15, a, p);
        row->kind = 'p';
        return prefill_rest(&L, p, row);
    }
    if (LIT(&L, &p, "KV cache pool is full. Retract requests. #retracted_reqs: ") ||
        LIT(&L, &p, "Decode out of memory happened. #retracted_reqs: ")) {
        Py_ssize_t a = p;
        if (!int_run(&L, &p, &row->retracted)) return 0;
        SET(row, 17, a, p);
        Py_ssize_t q = p;
        if (LIT(&L, &q, ", #new_tokens_gained: ") && number_span(&L, &q, C_DIGIT)) p = q;
        q = p;
        if (LIT(&L, &q, ", #new_token_ratio: ") && number_span(&L, &q, C_NUM) && LIT(&L, &q, " -> ") &&
            number_span(&L, &q, C_NUM))
            p = q;
        row->kind = 'r';
        return L.last < p; /* then only [ \t]*\r? is left */
    }
    return 0;
}

/* ---------------------------------------------------------------- converting numbers ---- */

/* float(span) by Python's own conversion, for a span num_run found to hold more than 15 digits
 * (and one dot at most): 1 done, 2 when the GIL is not held (gil 0: call again holding it), -1
 * error set. */
static int python_float(const unsigned char *s, const int32_t *span, double *out, int gil) {
    if (!gil) return 2;
    char buf[64];
    Py_ssize_t n = span[1] - span[0];
    if (n >= (Py_ssize_t)sizeof(buf)) { /* long: as a bytes object */
        PyObject *b = PyBytes_FromStringAndSize((const char *)s + span[0], n);
        if (b == NULL) return -1;
        PyObject *f = PyFloat_FromString(b);
        Py_DECREF(b);
        if (f == NULL) return -1;
        *out = PyFloat_AS_DOUBLE(f);
        Py_DECREF(f);
        return 1;
    }
    memcpy(buf, s + span[0], n);
    buf[n] = 0;
    double v = PyOS_string_to_double(buf, NULL, NULL);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = v;
    return 1;
}

static int leap(long y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* kvscope.runtime.accumulate._times: date.toordinal() * 86400 + h*3600 + m*60 + s; 0 for an impossible date. */
static int stamp_seconds(const unsigned char *s, Py_ssize_t at, double *out) {
#define D(i) (s[at + (i)] - '0')
    long y = D(0) * 1000 + D(1) * 100 + D(2) * 10 + D(3), mo = D(5) * 10 + D(6), d = D(8) * 10 + D(9);
    long h = D(11) * 10 + D(12), mi = D(14) * 10 + D(15), se = D(17) * 10 + D(18);
#undef D
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || mo < 1 || mo > 12 || d < 1) return 0;
    int dim = mdays[mo - 1] + (mo == 2 && leap(y));
    if (d > dim) return 0;
    long yy = y - 1, ord = yy * 365 + yy / 4 - yy / 100 + yy / 400;
    for (int m = 1; m < mo; m++) ord += mdays[m - 1] + (m == 2 && leap(y));
    ord += d;
    *out = (double)ord * 86400.0 + (double)(h * 3600 + mi * 60 + se);
    return 1;
}

/* The per-line path's CUDA-graph flag: None without "graph: ", else whether "graph: True" is there,
 * looked for in the decode line's three free-text groups (never across them). */
static char graph_flag(const unsigned char *s, const Row *row) {
    static const char ON[] = "cuda graph: True, ", OFF[] = "cuda graph: False, "; /* 0.4+: the whole first free text */
    Py_ssize_t first = row->span[5][1] - row->span[5][0];
    if (first == 18 && memcmp(s + row->span[5][0], ON, 18) == 0) return 1;
    int any = 0, g0 = 5;
    if (first == 19 && memcmp(s + row->span[5][0], OFF, 19) == 0) { /* batches past the graphs' sizes: */
        any = 1;                                                      /* only the other two can say True */
        g0 = 7;
    }
    for (int g = g0; g <= 9; g += 2) {
        Py_ssize_t a = row->span[g][0], b = row->span[g][1];
        for (Py_ssize_t at = find_lit(s, a, b, "graph: ", 7); at >= 0; at = find_lit(s, at + 1, b, "graph: ", 7)) {
            any = 1;
            if (at + 11 <= b && memcmp(s + at + 7, "True", 4) == 0) return 1;
        }
    }
    return any ? 0 : -1;
}

/* A float field num_run read: its value stands (st 1), Python would raise (0: the row is dropped,
 * convert returns 1 with valid 0), or Python converts the span (2: more than 15 digits; convert
 * returns 2 to be called again with the GIL, or -1 on an error). */
#define READ_FLOAT(st, g, dst)                                                                               \
    do {                                                                                                     \
        if ((st) == 0) return 1;                                                                             \
        if ((st) == 2) {                                                                                     \
            int ok_ = python_float(s, row->span[g], (dst), gil);                                             \
            if (ok_ != 1) return ok_;                                                                        \
        }                                                                                                    \
    } while (0)

/* Numbers of a matched row. 1: done (row->valid says whether Python would convert it);
 * 0: a number is out of this lane's range; -1: error set; 2: a number needs Python's conversion
 * and the GIL is not held (gil 0): call again holding it. */
static int convert(const unsigned char *s, Row *row, const Row *same_stamp, int gil) {
    row->valid = 0;
    row->has_hit = row->has_tps = 0;
    row->graph = -1;
    if (same_stamp != NULL) { /* the stamp's bytes are those of a row already converted */
        row->t = same_stamp->t; /* NaN (an impossible date) passes on to the next row of the run */
        if (row->t != row->t) return 1;
    } else if (!stamp_seconds(s, row->span[0][0], &row->t)) {
        row->t = Py_NAN;
        return 1;
    }
    if (row->kind == 'r') { /* the numbers were read while the line was matched (int_run, num_run) */
        if (row->retracted < 0) return 0;
    } else if (row->kind == 'd') {
        if (row->r < 0 || row->tok < 0 || row->q < 0) return 0;
        READ_FLOAT(row->st_u, 4, &row->u);
        READ_FLOAT(row->st_gen, 6, &row->gen);
        row->graph = graph_flag(s, row);
    } else {
        row->tok = 0;
        if (row->r < 0 || row->q < 0 || row->new_tok < 0 || row->cached < 0) return 0;
        READ_FLOAT(row->st_u, 13, &row->u);
        if (row->span[12][0] >= 0) {
            READ_FLOAT(row->st_hit, 12, &row->hit);
            row->has_hit = 1;
        }
        if (row->span[16][0] >= 0) {
            READ_FLOAT(row->st_tps, 16, &row->tps);
            row->has_tps = 1;
        }
    }
    row->valid = 1;
    return 1;
}

/* ---------------------------------------------------------------- Batch ---- */

/* Row buffers of folded batches, kept for the next split: a fresh megabyte per stretch cost a page
 * fault per 4 KiB (and with two threads the allocator gave the pages back to the system and took
 * them again). Touched with the GIL held only (batch_new, batch_dealloc). */
#define ROW_POOL 8
static Row *row_pool[ROW_POOL];
static Py_ssize_t row_pool_cap[ROW_POOL];
static int row_pool_n = 0;

static Row *rows_take(Py_ssize_t *cap) {
    if (row_pool_n > 0) {
        int k = --row_pool_n;
        if (row_pool_cap[k] >= *cap) {
            *cap = row_pool_cap[k];
            return row_pool[k];
        }
        PyMem_RawFree(row_pool[k]);
    }
    return PyMem_RawMalloc(sizeof(Row) * (size_t)*cap);
}

static void rows_give_back(Row *rows, Py_ssize_t cap) {
    if (rows == NULL) return;
    if (row_pool_n < ROW_POOL && cap <= (8 << 20) / (Py_ssize_t)sizeof(Row)) {
        row_pool[row_pool_n] = rows;
        row_pool_cap[row_pool_n++] = cap;
    } else {
        PyMem_RawFree(rows);
    }
}

static void batch_dealloc(Batch *b) {
    rows_give_back(b->rows, b->cap); /* rows use the raw allocator: split grows them without the GIL */
    PyMem_RawFree(b->sample);
    Py_XDECREF(b->view);
    Py_XDECREF(b->labels);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static Py_ssize_t batch_len(Batch *b) { return b->n; }

static PyObject *span_bytes(Batch *b, const int32_t *span) {
    if (span[0] < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(b->view) + span[0], span[1] - span[0]);
}

static PyObject *row_tuple(Batch *b, Py_ssize_t i) {
    PyObject *t = PyTuple_New(NGROUPS);
    if (t == NULL) return NULL;
    for (int g = 0; g < NGROUPS; g++) {
        PyObject *v = span_bytes(b, b->rows[i].span[g]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, g, v);
    }
    return t;
}

static Batch *batch_new(PyObject *view, Py_ssize_t cap) {
    Batch *b = PyObject_New(Batch, &BatchType);
    if (b == NULL) return NULL;
    b->cap = cap ? cap : 1;
    b->rows = rows_take(&b->cap);
    b->n = 0;
    b->sample = NULL;
    b->n_sample = b->n_retract = -1;
    b->tot_r = b->tot_new = b->tot_cached = -1;
    Py_INCREF(view);
    b->view = view;
    b->labels = PyList_New(0);
    if (b->rows == NULL || b->labels == NULL) {
        Py_DECREF(b);
        return (Batch *)PyErr_NoMemory();
    }
    return b;
}

/* The rank labels of a Batch being built, as spans into its buffer (no Python object, so split can
 * collect them without the GIL); labels_to_list makes them the Batch's labels once it is done. */
typedef struct {
    Py_ssize_t n;
    int32_t at[MAX_LABELS][2];
    /* what sample_labels() and retracts() would find, noted while the rows are made (in cache,
     * on the splitting thread) instead of by another pass over them on the folding one */
    unsigned char sampled[MAX_LABELS];
    int32_t order[MAX_LABELS];
    Py_ssize_t n_order, n_retract;
    long long tot_r, tot_new, tot_cached; /* saturating sums of the sample rows (all labels) */
} Labels;

static void labels_init(Labels *lab) {
    lab->n = lab->n_order = lab->n_retract = 0;
    lab->tot_r = lab->tot_new = lab->tot_cached = 0;
    memset(lab->sampled, 0, sizeof(lab->sampled));
}

INLINE long long add_saturating(long long a, long long v) { return a > LLONG_MAX - v ? LLONG_MAX : a + v; }

/* Note a row just made (its label known) for sample_labels() / retracts(). */
static void labels_note(Labels *lab, const Row *row) {
    if (row->kind == 'r') {
        lab->n_retract++;
        return;
    }
    if (!row->valid) return;
    if (!lab->sampled[row->label]) {
        lab->sampled[row->label] = 1;
        lab->order[lab->n_order++] = (int32_t)row->label;
    }
    lab->tot_r = add_saturating(lab->tot_r, row->r); /* valid rows' numbers are >= 0 */
    if (row->kind == 'p') {
        lab->tot_new = add_saturating(lab->tot_new, row->new_tok);
        lab->tot_cached = add_saturating(lab->tot_cached, row->cached);
    }
}

/* Index of the label s[a:e) in lab, adding it at first appearance; -2: more than MAX_LABELS. */
static Py_ssize_t label_span_index(Labels *lab, const unsigned char *s, Py_ssize_t a, Py_ssize_t e) {
    for (Py_ssize_t k = lab->n - 1; k >= 0; k--) /* few labels; the last one is the likely one */
        if (lab->at[k][1] - lab->at[k][0] == e - a && memcmp(s + lab->at[k][0], s + a, (size_t)(e - a)) == 0) return k;
    if (lab->n >= MAX_LABELS) return -2;
    lab->at[lab->n][0] = (int32_t)a;
    lab->at[lab->n][1] = (int32_t)e;
    return lab->n++;
}

/* b->labels = the labels of lab as bytes, in order of first appearance; -1: error set. */
static int labels_to_list(Batch *b, const Labels *lab) {
    const char *s = PyBytes_AS_STRING(b->view);
    for (Py_ssize_t k = 0; k < lab->n; k++) {
        PyObject *l = PyBytes_FromStringAndSize(s + lab->at[k][0], lab->at[k][1] - lab->at[k][0]);
        if (l == NULL || PyList_Append(b->labels, l) < 0) {
            Py_XDECREF(l);
            return -1;
        }
        Py_DECREF(l);
    }
    return 0;
}

static PyObject *batch_item(Batch *b, Py_ssize_t i) {
    if (i < 0 || i >= b->n) {
        PyErr_SetString(PyExc_IndexError, "Batch index out of range");
        return NULL;
    }
    return row_tuple(b, i);
}

/* Batch[a:] and friends: a new Batch with those rows (labels renumbered in order of appearance). */
static PyObject *batch_subscript(Batch *b, PyObject *key) {
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0) i += b->n;
        return batch_item(b, i);
    }
    if (!PySlice_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "Batch indices must be integers or slices");
        return NULL;
    }
    Py_ssize_t start, stop, step, len;
    if (PySlice_GetIndicesEx(key, b->n, &start, &stop, &step, &len) < 0) return NULL;
    if (step != 1) {
        PyErr_SetString(PyExc_ValueError, "Batch slices take no step");
        return NULL;
    }
    if (start == 0 && len == b->n) { /* the whole batch: rows never change, so no copy */
        Py_INCREF(b);
        return (PyObject *)b;
    }
    Batch *out = batch_new(b->view, len);
    Labels *lab = PyMem_RawMalloc(sizeof(Labels));
    if (out == NULL || lab == NULL) {
        Py_XDECREF(out);
        PyMem_RawFree(lab);
        return PyErr_NoMemory();
    }
    lab->n = 0;
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(b->view);
    for (Py_ssize_t i = 0; i < len; i++) { /* at most b's labels: never more than MAX_LABELS */
        Row *r = &out->rows[i];
        *r = b->rows[start + i];
        r->label = label_span_index(lab, s, r->span[1][0], r->span[1][1]);
        out->n++;
    }
    int ok = labels_to_list(out, lab);
    PyMem_RawFree(lab);
    if (ok < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *batch_rows(Batch *b, PyObject *unused) {
    PyObject *out = PyList_New(b->n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < b->n; i++) {
        PyObject *t = row_tuple(b, i);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *batch_labels(Batch *b, PyObject *unused) { return PyList_GetSlice(b->labels, 0, PyList_GET_SIZE(b->labels)); }

static PyObject *batch_first_valid(Batch *b, PyObject *unused) {
    for (Py_ssize_t i = 0; i < b->n; i++)
        if (b->rows[i].valid) return PyLong_FromSsize_t(i);
    Py_RETURN_NONE;
}

static PyObject *stamp_text(Batch *b, Py_ssize_t i) {
    return PyUnicode_DecodeASCII(PyBytes_AS_STRING(b->view) + b->rows[i].span[0][0], 19, NULL);
}

/* (stamp text, rank label bytes) of row i */
static PyObject *batch_head(Batch *b, PyObject *arg) {
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0 || i >= b->n) {
        PyErr_SetString(PyExc_IndexError, "Batch index out of range");
        return NULL;
    }
    PyObject *st = stamp_text(b, i);
    if (st == NULL) return NULL;
    PyObject *lab = PyList_GET_ITEM(b->labels, b->rows[i].label);
    return Py_BuildValue("(NO)", st, lab);
}

/* Label indexes in order of first appearance among the sample (decode / prefill) rows. */
static PyObject *batch_sample_labels(Batch *b, PyObject *unused) {
    if (b->n_sample >= 0) { /* noted by split */
        PyObject *out = PyList_New(b->n_sample);
        for (Py_ssize_t j = 0; out != NULL && j < b->n_sample; j++) {
            PyObject *v = PyLong_FromLong(b->sample[j]);
            if (v == NULL) Py_CLEAR(out);
            else PyList_SET_ITEM(out, j, v);
        }
        return out;
    }
    Py_ssize_t nl = PyList_GET_SIZE(b->labels);
    char *seen = PyMem_Calloc((size_t)(nl ? nl : 1), 1);
    PyObject *out = PyList_New(0);
    if (seen == NULL || out == NULL) {
        PyMem_Free(seen);
        Py_XDECREF(out);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        Py_ssize_t k = b->rows[i].label;
        if (b->rows[i].kind == 'r' || !b->rows[i].valid || seen[k]) continue; /* a dropped line routes nothing */
        seen[k] = 1;
        PyObject *v = PyLong_FromSsize_t(k);
        if (v == NULL || PyList_Append(out, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            PyMem_Free(seen);
            return NULL;
        }
        Py_DECREF(v);
    }
    PyMem_Free(seen);
    return out;
}

/* [(label index, retracted requests)] of the retraction rows whose stamp converts, in order. */
static PyObject *batch_retracts(Batch *b, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (out == NULL || b->n_retract == 0) return out; /* split counted none */
    for (Py_ssize_t i = 0; i < b->n; i++) {
        const Row *r = &b->rows[i];
        if (r->kind != 'r' || !r->valid) continue;
        PyObject *t = Py_BuildValue("(nL)", r->label, r->retracted);
        if (t == NULL || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
    }
    return out;
}

static PyMethodDef batch_methods[] = {
    {"sample_labels", (PyCFunction)batch_sample_labels, METH_NOARGS,
     "Indexes into labels() in order of first appearance among decode / prefill rows."},
    {"retracts", (PyCFunction)batch_retracts, METH_NOARGS, "[(label index, retracted)] of the retraction rows."},
    {"rows", (PyCFunction)batch_rows, METH_NOARGS, "The rows as the BULK regex's group tuples (bytes or None)."},
    {"labels", (PyCFunction)batch_labels, METH_NOARGS, "Rank-label bytes of the rows, in order of first appearance."},
    {"first_valid", (PyCFunction)batch_first_valid, METH_NOARGS, "Index of the first row whose numbers convert, or None."},
    {"head", (PyCFunction)batch_head, METH_O, "(stamp text, rank-label bytes) of row i."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods batch_as_sequence = {.sq_length = (lenfunc)batch_len, .sq_item = (ssizeargfunc)batch_item};
static PyMappingMethods batch_as_mapping = {.mp_length = (lenfunc)batch_len, .mp_subscript = (binaryfunc)batch_subscript};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvscope._bulk.Batch",
    .tp_basicsize = sizeof(Batch),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Rows matched by the bulk lane: spans into the stretch they came from, and their numbers.",
    .tp_methods = batch_methods,
    .tp_as_sequence = &batch_as_sequence,
    .tp_as_mapping = &batch_as_mapping,
};

/* ---------------------------------------------------------------- split ---- */

/* The output text is built in one buffer per thread, kept between calls: allocating a
 * stretch-sized buffer per call costs more in page faults than the copy itself. */
static _Thread_local char *scratch_buf = NULL;
static _Thread_local size_t scratch_len = 0;

static char *scratch(size_t n) { /* no GIL needed: the raw allocator */
    if (n > scratch_len) {
        char *grown = PyMem_RawRealloc(scratch_buf, n);
        if (grown == NULL) return NULL;
        scratch_buf = grown;
        scratch_len = n;
    }
    return scratch_buf;
}

enum { SPLIT_OK, SPLIT_NOMEM, SPLIT_ERROR, SPLIT_REGEX, SPLIT_NONE, SPLIT_MARK };
#define BULK_MARK '\x01' /* the reader's mark of a bulk-matched line (kvscope.reading.source.BULK_MARK) */

/* The line loop of split, run without the GIL (it takes the GIL back only for a number Python
 * must convert). Fills b's rows, lab and out; *w is the text's length. */
static int split_lines(Batch *b, const unsigned char *s, Py_ssize_t start, Py_ssize_t n, Py_ssize_t *cap, Labels *lab,
                       char *out, Py_ssize_t *wp, PyThreadState **save) {
    Py_ssize_t w = 1, copied = start; /* out[:w] holds "\n" + s[start:copied], matched lines replaced */
    Py_ssize_t lo = start;
    Py_ssize_t prev_lo = -1, head_len = 0; /* the last matched line (the row before b->n) and its head's length */
    while (lo < n) {
        const unsigned char *next = memchr(s + lo, '\n', (size_t)(n - lo));
        if (next == NULL) break;
        Py_ssize_t hi = next - s;
        if (b->n == *cap) {
            Row *grown = PyMem_RawRealloc(b->rows, sizeof(Row) * (size_t)(*cap * 2));
            if (grown == NULL) return SPLIT_NOMEM;
            b->rows = grown;
            *cap *= 2;
        }
        Row *row = &b->rows[b->n];
        /* A run of lines of one second and one rank share their head: compared in one memcmp, it
         * is parsed, its stamp converted and its label looked up once (same bytes, same result). */
        const Row *prev = prev_lo >= 0 ? &b->rows[b->n - 1] : NULL;
        int same = prev != NULL && hi - lo > head_len && memcmp(s + lo, s + prev_lo, (size_t)head_len) == 0;
        Py_ssize_t head_end = 0;
        if (hi - lo >= 40 && (same ? match_same_head(s, lo, hi, head_len, prev, lo - prev_lo, row)
                                   : match_line(s, lo, hi, row, &head_end))) {
            int ok = convert(s, row, same ? prev : NULL, 0);
            if (ok == 2 && save == NULL) return SPLIT_REGEX; /* a thread without Python: the caller's path reads it */
            if (ok == 2) { /* a long number: Python converts it, as float() would */
                PyEval_RestoreThread(*save);
                ok = convert(s, row, same ? prev : NULL, 1);
                *save = PyEval_SaveThread();
            }
            if (ok < 0) return SPLIT_ERROR;
            if (ok == 0) return SPLIT_REGEX; /* a number this lane cannot hold: the regex does this stretch */
            row->label = same ? prev->label : label_span_index(lab, s, row->span[1][0], row->span[1][1]);
            if (row->label == -2) return SPLIT_REGEX; /* labels without end: the regex does this stretch */
            if (!same) head_len = head_end - lo;
            labels_note(lab, row);
            prev_lo = lo;
            b->n++;
            memcpy(out + w, s + copied, (size_t)(lo - copied));
            w += lo - copied;
            out[w++] = '\x01';
            copied = hi;
        }
        lo = hi + 1;
    }
    memcpy(out + w, s + copied, (size_t)(n - copied));
    *wp = w + (n - copied);
    return SPLIT_OK;
}

/* What split noted while making b's rows (labels, sample order, sums) handed to the Batch; -1: error set. */
static int batch_finish(Batch *b, const Labels *lab) {
    if (labels_to_list(b, lab) < 0) return -1;
    b->sample = PyMem_RawMalloc(sizeof(int32_t) * (size_t)(lab->n_order ? lab->n_order : 1));
    if (b->sample == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(b->sample, lab->order, sizeof(int32_t) * (size_t)lab->n_order);
    b->n_sample = lab->n_order;
    b->n_retract = lab->n_retract;
    b->tot_r = lab->tot_r;
    b->tot_new = lab->tot_new;
    b->tot_cached = lab->tot_cached;
    return 0;
}

/* Whether s[lo:hi) may hold a serving line of this lane: every line the lane takes holds a '#'
 * (#running-req, #new-seq, #retracted_reqs), an access log rarely does. Without one (a vLLM
 * journal, a startup) no line is tried. */
static int may_hold_serving(const unsigned char *s, Py_ssize_t lo, Py_ssize_t hi) {
    return memchr(s + lo, '#', (size_t)(hi - lo)) != NULL &&
           (memmem(s + lo, (size_t)(hi - lo), " batch", 6) != NULL ||
            memmem(s + lo, (size_t)(hi - lo), "#retracted_reqs: ", 17) != NULL);
}

static PyTypeObject AnchorsType;
typedef struct Anchors Anchors;
static int scan_line_starts(const Anchors *a, const unsigned char *s, Py_ssize_t lo, Py_ssize_t hi,
                            Py_ssize_t **out, Py_ssize_t *n, Py_ssize_t *cap);
static PyObject *starts_list(const Py_ssize_t *starts, Py_ssize_t n);

/* split(buf, lo, hi): the lines of buf[lo:hi) (whole lines: it ends after a newline), as if a
 * newline came before lo. The text returned is "\n" + that region with matched lines marked.
 * The GIL is released while the lines are read (buf is immutable and the caller holds it), so the
 * reader can split the next stretch on another thread while this one's rows are folded. */
static PyObject *bulk_split(PyObject *mod, PyObject *args) {
    PyObject *arg, *anchors = Py_None;
    Py_ssize_t start, stop;
    int clean = 0; /* the caller knows buf holds no mark byte (low_bytes said so) */
    if (!PyArg_ParseTuple(args, "O!nn|Op", &PyBytes_Type, &arg, &start, &stop, &anchors, &clean)) return NULL;
    if (anchors != Py_None && !PyObject_TypeCheck(anchors, &AnchorsType)) {
        PyErr_SetString(PyExc_TypeError, "split(): anchors must be an Anchors object or None");
        return NULL;
    }
    /* With anchors, the anchor scan of the text left runs in the same GIL-free stretch as the split:
     * the thread preparing stretches then waits for the GIL once per stretch instead of twice. */
    const Anchors *scan = anchors == Py_None ? NULL : (const Anchors *)anchors;
    Py_ssize_t *starts = NULL, n_starts = 0, starts_cap = 0;
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    if (start < 0 || stop > n || start > stop) {
        PyErr_SetString(PyExc_ValueError, "split(): 0 <= lo <= hi <= len(buf)");
        return NULL;
    }
    if (n >= INT32_MAX) Py_RETURN_FALSE; /* spans are 32-bit offsets */
    n = stop;
    Py_ssize_t cap = (stop - start) / 160 + 16; /* serving lines are ~200 bytes: one allocation, rarely a second */
    Batch *b = batch_new(arg, cap);
    Labels *lab = PyMem_RawMalloc(sizeof(Labels));
    if (b == NULL || lab == NULL) {
        Py_XDECREF(b);
        PyMem_RawFree(lab);
        return PyErr_NoMemory();
    }
    labels_init(lab);
    int status;
    Py_ssize_t w = 0;
    PyThreadState *save = PyEval_SaveThread(); /* every look at the bytes is made without the GIL */
    char *out = NULL;
    if (!clean && memchr(s + start, BULK_MARK, (size_t)(stop - start)) != NULL) {
        status = SPLIT_MARK;
    } else if (!may_hold_serving(s, start, stop)) {
        status = SPLIT_NONE;
    } else if ((out = scratch((size_t)(stop - start) + 2)) == NULL) {
        status = SPLIT_NOMEM;
    } else {
        out[0] = '\n';
        status = split_lines(b, s, start, n, &b->cap, lab, out, &w, &save);
        if (status == SPLIT_OK && b->n > 0 && scan != NULL &&
            scan_line_starts(scan, (const unsigned char *)out, 1, w, &starts, &n_starts, &starts_cap) < 0)
            status = SPLIT_NOMEM;
    }
    PyEval_RestoreThread(save);
    PyObject *text = NULL, *found = NULL;
    if (status != SPLIT_OK || b->n == 0 || scan == NULL) {
        PyMem_RawFree(starts);
        starts = NULL;
    }
    if (status == SPLIT_NOMEM) PyErr_NoMemory();
    if (status == SPLIT_NOMEM || status == SPLIT_ERROR) goto fail;
    if (status == SPLIT_REGEX || status == SPLIT_MARK) {
        Py_DECREF(b);
        PyMem_RawFree(lab);
        if (status == SPLIT_MARK) return Py_NewRef(Py_Ellipsis);
        Py_RETURN_FALSE;
    }
    if (status == SPLIT_NONE || b->n == 0) {
        Py_DECREF(b);
        PyMem_RawFree(lab);
        Py_RETURN_NONE;
    }
    if (batch_finish(b, lab) < 0) goto fail;
    PyMem_RawFree(lab);
    lab = NULL;
    text = PyBytes_FromStringAndSize(out, w);
    if (text == NULL) goto fail;
    if (scan == NULL) return Py_BuildValue("(NN)", text, (PyObject *)b);
    found = starts_list(starts, n_starts);
    PyMem_RawFree(starts);
    starts = NULL;
    if (found == NULL) {
        Py_DECREF(text);
        goto fail;
    }
    return Py_BuildValue("(NNN)", text, (PyObject *)b, found);
fail:
    PyMem_RawFree(starts);
    PyMem_RawFree(lab);
    Py_DECREF(b);
    return NULL;
}


/* ---------------------------------------------------------------- prepare thread ---- */

/* Job(buf, lo, hi, anchors, clean, word, max_line): split (and anchor-scan) buf[lo:hi] on a C
 * thread that never takes the GIL.
 *
 * Why: the Python thread that prepared stretches (split, then the anchor scan) had to win the GIL
 * back after each one, against a folding thread that holds it through every fold: a fifth of its
 * time went to waiting. Here one C thread takes queued jobs in order; the folding thread builds
 * the Python objects when it takes a result (job.result()), and when its next job is still queued
 * it runs that job itself (run_here) instead of waiting. Results come back in the caller's order.
 *
 * result(): (text, Batch, starts) where SGLang serving lines matched (as split(..., anchors)
 * gives); a list (the candidate line starts of buf[lo:hi] itself) where no line matched and
 * ``word`` (the vLLM lane's) is absent; 1 where ``word`` is there (the vLLM lane reads this
 * stretch: the caller's path); 2 where the caller's path must read it for another reason (the mark
 * byte, a number only Python converts, a line that may pass max_line bytes). */
#ifndef _WIN32
#include <pthread.h>
#include <signal.h>
#define HAVE_JOBS 1

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };
enum { JOB_SPLIT = 100, JOB_RAW, JOB_WORD, JOB_CALLER };

typedef struct Job {
    PyObject_HEAD
    PyObject *buf, *anchors, *word, *batch; /* batch: the Batch its rows go into (made with the GIL) */
    Py_ssize_t lo, hi, max_line;
    int clean, state, status;                /* state under job_mu */
    Labels *lab;
    char *out;
    Py_ssize_t w;
    Py_ssize_t *starts, n_starts, starts_cap;
    unsigned gen; /* job_gen when it was queued */
    struct Job *next;
} Job;

static PyTypeObject JobType;
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_ready = PTHREAD_COND_INITIALIZER, job_done = PTHREAD_COND_INITIALIZER;
static Job *job_head = NULL, *job_tail = NULL;
static int job_thread_up = 0;
static unsigned job_gen = 0; /* one more in a forked child, whose parent's job thread is gone */

/* Whether some line of s[lo:hi) may be longer than max_line: a window of max_line/2 bytes without a
 * newline (a longer line holds one whole); the caller's path then looks closer. */
static int may_hold_overlong(const unsigned char *s, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t max_line) {
    Py_ssize_t h = max_line / 2 > 0 ? max_line / 2 : 1;
    if (hi - lo <= max_line + 1) return 0;
    for (Py_ssize_t p = lo; p + h <= hi; p += h)
        if (memchr(s + p, '\n', (size_t)h) == NULL) return 1;
    return 0;
}

/* The work of one job; no GIL, no Python object touched but the immutable bytes and Anchors it holds. */
static void job_run(Job *j) {
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(j->buf);
    Batch *b = (Batch *)j->batch;
    Py_ssize_t lo = j->lo, hi = j->hi;
    const Anchors *scan = j->anchors == Py_None ? NULL : (const Anchors *)j->anchors;
    if (may_hold_overlong(s, lo, hi, j->max_line) || (!j->clean && memchr(s + lo, BULK_MARK, (size_t)(hi - lo)))) {
        j->status = JOB_CALLER;
        return;
    }
    int status = SPLIT_NONE;
    if (may_hold_serving(s, lo, hi)) {
        j->out = PyMem_RawMalloc((size_t)(hi - lo) + 2);
        if (j->out == NULL) {
            j->status = SPLIT_NOMEM;
            return;
        }
        j->out[0] = '\n';
        status = split_lines(b, s, lo, hi, &b->cap, j->lab, j->out, &j->w, NULL);
    }
    if (status == SPLIT_OK && b->n > 0) {
        j->status = scan == NULL || scan_line_starts(scan, (const unsigned char *)j->out, 1, j->w, &j->starts,
                                                     &j->n_starts, &j->starts_cap) == 0 ? JOB_SPLIT : SPLIT_NOMEM;
        return;
    }
    if (status != SPLIT_OK && status != SPLIT_NONE) {
        j->status = status == SPLIT_NOMEM ? SPLIT_NOMEM : JOB_CALLER;
        return;
    }
    b->n = 0; /* no row: the stretch stays as it is */
    if (j->word != Py_None && memmem(s + lo, (size_t)(hi - lo), PyBytes_AS_STRING(j->word),
                                     (size_t)PyBytes_GET_SIZE(j->word)) != NULL) {
        j->status = JOB_WORD;
        return;
    }
    if (scan == NULL) {
        j->status = JOB_CALLER;
        return;
    }
    j->status = scan_line_starts(scan, s, lo, hi, &j->starts, &j->n_starts, &j->starts_cap) == 0 ? JOB_RAW : SPLIT_NOMEM;
}

/* Run a job this thread has taken (state RUNNING), then say it is done: called and returns with
 * job_mu held, which is let go while the job runs. */
static void job_run_claimed(Job *j) {
    pthread_mutex_unlock(&job_mu);
    job_run(j);
    pthread_mutex_lock(&job_mu);
    j->state = JOB_DONE;
    pthread_cond_broadcast(&job_done);
}

static void *job_thread(void *unused) {
    sigset_t all; /* signals are the main thread's to handle */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&job_mu);
    for (;;) {
        while (job_head == NULL) pthread_cond_wait(&job_ready, &job_mu);
        Job *j = job_head;
        job_head = j->next;
        if (job_head == NULL) job_tail = NULL;
        j->next = NULL;
        j->state = JOB_RUNNING;
        job_run_claimed(j);
    }
    return NULL;
}

static void job_after_fork(void) { /* the child has no job thread: start afresh (its queued jobs run where asked) */
    pthread_mutex_init(&job_mu, NULL);
    pthread_cond_init(&job_ready, NULL);
    pthread_cond_init(&job_done, NULL);
    job_head = job_tail = NULL;
    job_thread_up = 0;
    job_gen++;
}

/* Take j off the queue if it is still there (job_mu held). 1: it was queued and is now the caller's.
 * A job the job thread had begun before a fork is, in the child, begun again from nothing. */
static int job_claim(Job *j) {
    if (j->state == JOB_RUNNING && j->gen != job_gen) {
        ((Batch *)j->batch)->n = 0;
        labels_init(j->lab);
        PyMem_RawFree(j->out);
        PyMem_RawFree(j->starts);
        j->out = NULL, j->w = 0, j->starts = NULL, j->n_starts = j->starts_cap = 0;
        j->state = JOB_QUEUED;
    }
    if (j->state != JOB_QUEUED) return 0;
    Job **at = &job_head, *prev = NULL;
    while (*at != NULL && *at != j) {
        prev = *at;
        at = &(*at)->next;
    }
    if (*at == j) {
        *at = j->next;
        if (job_tail == j) job_tail = prev;
    }
    j->next = NULL;
    j->state = JOB_RUNNING;
    return 1;
}

/* Run j here if no thread has begun it, else wait for it; the GIL is given up meanwhile. */
static void job_finish(Job *j) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&job_mu);
    if (job_claim(j)) job_run_claimed(j);
    while (j->state != JOB_DONE) pthread_cond_wait(&job_done, &job_mu);
    pthread_mutex_unlock(&job_mu);
    Py_END_ALLOW_THREADS
}

static PyObject *job_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *buf, *anchors, *word;
    Py_ssize_t lo, hi, max_line;
    int clean;
    if (!PyArg_ParseTuple(args, "O!nnOpOn", &PyBytes_Type, &buf, &lo, &hi, &anchors, &clean, &word, &max_line))
        return NULL;
    if (lo < 0 || hi > PyBytes_GET_SIZE(buf) || lo > hi || max_line < 1) {
        PyErr_SetString(PyExc_ValueError, "Job(): 0 <= lo <= hi <= len(buf), max_line >= 1");
        return NULL;
    }
    if ((anchors != Py_None && !PyObject_TypeCheck(anchors, &AnchorsType)) || (word != Py_None && !PyBytes_Check(word))) {
        PyErr_SetString(PyExc_TypeError, "Job(): anchors is an Anchors object or None, word bytes or None");
        return NULL;
    }
    Job *j = PyObject_New(Job, type);
    if (j == NULL) return NULL;
    j->buf = Py_NewRef(buf);
    j->anchors = Py_NewRef(anchors);
    j->word = Py_NewRef(word);
    j->lo = lo, j->hi = hi, j->max_line = max_line, j->clean = clean;
    j->state = JOB_DONE; /* until queued: nothing for another thread to wait on */
    j->status = JOB_CALLER;
    j->out = NULL, j->w = 0;
    j->starts = NULL, j->n_starts = j->starts_cap = 0;
    j->next = NULL;
    j->gen = job_gen;
    j->lab = PyMem_RawMalloc(sizeof(Labels));
    j->batch = (PyObject *)batch_new(buf, (hi - lo) / 160 + 16);
    if (j->lab == NULL || j->batch == NULL) {
        Py_DECREF(j);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    labels_init(j->lab);
    if (PyBytes_GET_SIZE(buf) >= INT32_MAX) return (PyObject *)j; /* spans are 32-bit offsets: the caller's path */
    pthread_mutex_lock(&job_mu);
    if (!job_thread_up) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        job_thread_up = pthread_create(&t, &attr, job_thread, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    j->state = JOB_QUEUED;
    if (job_thread_up) { /* else: no thread could be made, and result() runs the job where it is asked */
        if (job_tail != NULL) job_tail->next = j;
        else job_head = j;
        job_tail = j;
        pthread_cond_signal(&job_ready);
    }
    pthread_mutex_unlock(&job_mu);
    return (PyObject *)j;
}

static void job_dealloc(Job *j) {
    Py_BEGIN_ALLOW_THREADS /* never free what the job thread is reading */
    pthread_mutex_lock(&job_mu);
    if (job_claim(j)) j->state = JOB_DONE; /* still queued: taken off, never run */
    while (j->state == JOB_RUNNING) pthread_cond_wait(&job_done, &job_mu);
    pthread_mutex_unlock(&job_mu);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(j->out);
    PyMem_RawFree(j->starts);
    PyMem_RawFree(j->lab);
    Py_XDECREF(j->batch);
    Py_XDECREF(j->buf);
    Py_XDECREF(j->anchors);
    Py_XDECREF(j->word);
    PyObject_Free(j);
}

/* job.result(): see Job; runs the job here if no thread has begun it. */
static PyObject *job_result(Job *j, PyObject *unused) {
    job_finish(j);
    switch (j->status) {
    case SPLIT_NOMEM:
        return PyErr_NoMemory();
    case JOB_RAW:
        return starts_list(j->starts, j->n_starts);
    case JOB_WORD:
        return PyLong_FromLong(1);
    case JOB_SPLIT:
        break;
    default:
        return PyLong_FromLong(2);
    }
    Batch *b = (Batch *)j->batch;
    if (b->sample == NULL && batch_finish(b, j->lab) < 0) return NULL;
    PyObject *text = PyBytes_FromStringAndSize(j->out, j->w);
    PyObject *found = j->anchors == Py_None ? Py_NewRef(Py_None) : starts_list(j->starts, j->n_starts);
    if (text == NULL || found == NULL) {
        Py_XDECREF(text);
        Py_XDECREF(found);
        return NULL;
    }
    return Py_BuildValue("(NON)", text, (PyObject *)b, found);
}

/* job.run_here(): run the job on this thread if no thread has begun it (True), else False. */
static PyObject *job_run_here(Job *j, PyObject *unused) {
    int mine;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&job_mu);
    mine = job_claim(j);
    if (mine) job_run_claimed(j);
    pthread_mutex_unlock(&job_mu);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(mine);
}

/* job.done(): whether result() would return without running or waiting. */
static PyObject *job_done_(Job *j, PyObject *unused) {
    int done;
    pthread_mutex_lock(&job_mu); /* held for a few instructions by any thread: no GIL hand-off needed */
    done = j->state == JOB_DONE;
    pthread_mutex_unlock(&job_mu);
    return PyBool_FromLong(done);
}

static PyMethodDef job_methods[] = {
    {"result", (PyCFunction)job_result, METH_NOARGS, "The prepared stretch (see Job); runs it here if not begun."},
    {"run_here", (PyCFunction)job_run_here, METH_NOARGS, "Run it on this thread if no thread has begun it."},
    {"done", (PyCFunction)job_done_, METH_NOARGS, "Whether it is done."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject JobType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvscope._bulk.Job",
    .tp_basicsize = sizeof(Job),
    .tp_dealloc = (destructor)job_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A stretch split and anchor-scanned on kvscope's C thread.",
    .tp_methods = job_methods,
    .tp_new = job_new,
};
#endif /* _WIN32 */

/* ---------------------------------------------------------------- fold ---- */

/* The state of one Stream while a batch is folded into it: loaded from its attributes before the
 * first row, stored back after the last, so that a row costs C arithmetic only. Stamps are kept as
 * row indexes and become str objects only when stored. */
typedef struct {
    PyObject *S; /* the Stream (borrowed from the streams list) */
    PyObject *timeline, *points, *kinds, *rates, *hist, *queued_hist, *queued_running, *gen_list;
    int loaded, timed; /* timed: -1 None, 0 False, 1 True */
    long long n, n_decode, n_prefill;
    char first_kind;
    int have_last_t, have_last_u;
    double last_t, last_u;
    long long last_q;
    Py_ssize_t last_stamp_row, peak_u_stamp_row, peak_q_stamp_row; /* -1: unchanged */
    double span_s, usage_time, above90_s, above99_s, queued_s;
    long long *hist_delta, *queued_delta;
    /* queued_running (a dict {running: count}, at most MAX_RUNNING_KEYS keys) counted in C for
     * running < RUNNING_CAP: qr_delta[r] waits to be added, qr_present[r] says r is a key (or will
     * be), qr_new lists the keys to insert, in order of first appearance, qr_size the dict's size
     * once they are. */
    long long *qr_delta;
    unsigned char *qr_present;
    int32_t *qr_new;
    Py_ssize_t qr_new_n, qr_size;
    long long usage_n, sum_r, r_n, peak_r, q_seen;
    double peak_u, pool_u;
    long long pool_tok;
    long long sat_n, sat_tok_n, sat_queued_n, peak_q_sat;
    double sat_u_per_req, sat_tok_per_req;
    double gen_sum, gen_max, gen_last;
    long long gen_n;
    long long new_tokens, cached_tokens;
    long long prefill_last, prefill_peak; /* new tokens of the last and of the largest prefill batch */
    long long fit_r, fit_new, fit_cached; /* sums_fit's running totals */
    long long graph_on, graph_off, graph_max_on, graph_min_off;
    int have_min_off;
    /* rates of prefill lines: input_tps, hit_pct */
    int rate_have[2], rate_order[2], rate_created;
    double rate_sum[2], rate_max[2], rate_last[2];
    long long rate_n[2];
    /* timeline: the last bucket, cached */
    double tl_width;
    Py_ssize_t tl_max;
    int cb_have, cb_dirty;
    double cb_t0, cb_t1, cb_umin, cb_umax;
    long long cb_q, cb_r, cb_n;
    /* queue: counters cached; the open episode's fields cached while it continues */
    long long peak_q, queued_n, low_queued_n, peak_r_queued;
    PyObject *ep;     /* owned reference to the open episode list, or NULL when none is open */
    PyObject *closed; /* owned reference to the episode just closed (may still merge), or NULL */
    int ep_dirty;
    double ep_end, ep_u;
    long long ep_peak;
    Py_ssize_t ep_peak_stamp_row;
} St;

static const char *RATE_KEYS[2] = {"input_tps", "hit_pct"};

static int get_double(PyObject *o, const char *name, double *out) {
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL) return -1;
    int ok = PyFloat_CheckExact(v) ? 0 : 1;
    if (!ok) *out = PyFloat_AS_DOUBLE(v);
    Py_DECREF(v);
    return ok; /* 1: not a float (the Python path then folds this batch) */
}

static int get_ll(PyObject *o, const char *name, long long *out) {
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL) return -1;
    int ok = 1;
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        *out = PyLong_AsLongLongAndOverflow(v, &overflow);
        ok = overflow ? 1 : 0;
    }
    Py_DECREF(v);
    return ok;
}

static int item_double(PyObject *list, Py_ssize_t i, double *out) {
    PyObject *v = PyList_GET_ITEM(list, i);
    if (!PyFloat_CheckExact(v)) return 1;
    *out = PyFloat_AS_DOUBLE(v);
    return 0;
}

static int item_ll(PyObject *list, Py_ssize_t i, long long *out) {
    PyObject *v = PyList_GET_ITEM(list, i);
    if (!PyLong_CheckExact(v)) return 1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow;
}

#define TRY(x)               \
    do {                     \
        int _r = (x);        \
        if (_r) return _r;   \
    } while (0)

static int load_bucket(St *st) {
    Py_ssize_t k = PyList_GET_SIZE(st->points);
    st->cb_have = k > 0;
    st->cb_dirty = 0;
    if (!k) return 0;
    PyObject *b = PyList_GET_ITEM(st->points, k - 1);
    if (!PyList_CheckExact(b) || PyList_GET_SIZE(b) != 7) return 1;
    TRY(item_double(b, 0, &st->cb_t0));
    TRY(item_double(b, 1, &st->cb_t1));
    TRY(item_double(b, 2, &st->cb_umin));
    TRY(item_double(b, 3, &st->cb_umax));
    TRY(item_ll(b, 4, &st->cb_q));
    TRY(item_ll(b, 5, &st->cb_r));
    TRY(item_ll(b, 6, &st->cb_n));
    return 0;
}

static int load_timeline(St *st) {
    Py_XDECREF(st->points);
    st->points = PyObject_GetAttrString(st->timeline, "points");
    if (st->points == NULL) return -1;
    if (!PyList_CheckExact(st->points)) return 1;
    TRY(get_double(st->timeline, "width", &st->tl_width));
    long long mx;
    TRY(get_ll(st->timeline, "max_points", &mx));
    st->tl_max = (Py_ssize_t)mx;
    return load_bucket(st);
}

static int episode_shape(PyObject *ep) {
    if (!PyList_CheckExact(ep) || PyList_GET_SIZE(ep) != 6) return 1;
    return !(PyFloat_CheckExact(PyList_GET_ITEM(ep, 1)) && PyLong_CheckExact(PyList_GET_ITEM(ep, 2)) &&
             PyFloat_CheckExact(PyList_GET_ITEM(ep, 5)));
}

/* The open episode's end, peak queue and peak usage, cached while it goes on. */
static int load_ep_fields(St *st) {
    st->ep_dirty = 0;
    st->ep_peak_stamp_row = -1;
    TRY(episode_shape(st->ep));
    TRY(item_double(st->ep, 1, &st->ep_end));
    TRY(item_ll(st->ep, 2, &st->ep_peak));
    TRY(item_double(st->ep, 5, &st->ep_u));
    return 0;
}

static int load_episode(St *st) {
    Py_CLEAR(st->ep);
    Py_CLEAR(st->closed);
    PyObject *closed = PyObject_GetAttrString(st->S, "closed");
    if (closed == NULL) return -1;
    if (closed == Py_None) Py_DECREF(closed);
    else st->closed = closed;
    if (st->closed != NULL && episode_shape(st->closed)) return 1;
    st->ep_dirty = 0;
    st->ep_peak_stamp_row = -1;
    TRY(get_ll(st->S, "peak_q", &st->peak_q));
    TRY(get_ll(st->S, "queued_n", &st->queued_n));
    TRY(get_ll(st->S, "low_queued_n", &st->low_queued_n));
    TRY(get_ll(st->S, "peak_r_queued", &st->peak_r_queued));
    st->peak_q_stamp_row = -1;
    PyObject *ep = PyObject_GetAttrString(st->S, "episode");
    if (ep == NULL) return -1;
    if (ep == Py_None) {
        Py_DECREF(ep);
        return 0;
    }
    st->ep = ep;
    return load_ep_fields(st);
}

static PyObject *attr_obj(PyObject *o, const char *name, PyTypeObject *type) {
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v != NULL && Py_TYPE(v) != type) {
        Py_DECREF(v);
        return Py_None; /* marker: unexpected type */
    }
    return v;
}

#define OBJ(field, name, type)                                  \
    do {                                                        \
        st->field = attr_obj(st->S, name, type);                \
        if (st->field == NULL) return -1;                       \
        if (st->field == Py_None) { st->field = NULL; return 1; } \
    } while (0)

/* 0 loaded; 1 some attribute has a shape this code does not handle (nothing was changed); -1 error */
/* Which running counts are keys of queued_running already (qr_present), and how many keys it has. */
static int load_running(St *st) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    st->qr_new_n = 0;
    st->qr_size = PyDict_GET_SIZE(st->queued_running);
    while (PyDict_Next(st->queued_running, &pos, &key, &value)) {
        if (!PyLong_CheckExact(key) || !PyLong_CheckExact(value)) return 1;
        long long r = PyLong_AsLongLong(key);
        if (r == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            continue; /* a key too big for C: never one of ours */
        }
        if (r >= 0 && r < RUNNING_CAP) st->qr_present[r] = 1;
    }
    return 0;
}

/* Add the counts waiting in C to queued_running: the new keys first, in the order they appeared
 * (a dict keeps insertion order, and ties of the mode go to the first key), then the rest. */
static int flush_running(St *st) {
    for (Py_ssize_t j = 0; j < st->qr_new_n; j++) {
        int32_t r = st->qr_new[j];
        PyObject *key = PyLong_FromLong(r), *v = PyLong_FromLongLong(st->qr_delta[r]);
        int rc = key == NULL || v == NULL ? -1 : PyDict_SetItem(st->queued_running, key, v);
        Py_XDECREF(key);
        Py_XDECREF(v);
        if (rc < 0) return -1;
        st->qr_delta[r] = 0;
    }
    st->qr_new_n = 0;
    for (int r = 0; r < RUNNING_CAP; r++) {
        if (!st->qr_delta[r]) continue;
        PyObject *key = PyLong_FromLong(r);
        if (key == NULL) return -1;
        PyObject *old = PyDict_GetItemWithError(st->queued_running, key); /* borrowed */
        PyObject *add = old == NULL ? NULL : PyLong_FromLongLong(st->qr_delta[r]);
        PyObject *nv = add == NULL ? NULL : PyNumber_Add(old, add);
        int rc = nv == NULL ? -1 : PyDict_SetItem(st->queued_running, key, nv);
        if (old == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "queued_running lost a key");
        Py_DECREF(key);
        Py_XDECREF(add);
        Py_XDECREF(nv);
        if (rc < 0) return -1;
        st->qr_delta[r] = 0;
    }
    return 0;
}

static int load(St *st) {
    PyObject *S = st->S;
    st->loaded = 1;
    st->timeline = PyObject_GetAttrString(S, "timeline");
    if (st->timeline == NULL) return -1;
    OBJ(kinds, "kinds", &PyDict_Type);
    OBJ(rates, "rates", &PyDict_Type);
    OBJ(queued_running, "queued_running", &PyDict_Type);
    OBJ(hist, "hist", &PyList_Type);
    OBJ(queued_hist, "queued_hist", &PyList_Type);
    OBJ(gen_list, "gen", &PyList_Type);
    if (PyList_GET_SIZE(st->hist) != USAGE_BINS || PyList_GET_SIZE(st->queued_hist) != QUEUED_BINS) return 1;
    if (PyList_GET_SIZE(st->gen_list) != 4) return 1;
    TRY(item_double(st->gen_list, 0, &st->gen_sum));
    TRY(item_ll(st->gen_list, 1, &st->gen_n));
    TRY(item_double(st->gen_list, 2, &st->gen_max));
    TRY(item_double(st->gen_list, 3, &st->gen_last));
    for (int k = 0; k < 2; k++) {
        PyObject *acc = PyDict_GetItemString(st->rates, RATE_KEYS[k]);
        st->rate_have[k] = acc != NULL;
        st->rate_order[k] = -1;
        if (acc == NULL) continue;
        if (!PyList_CheckExact(acc) || PyList_GET_SIZE(acc) != 4) return 1;
        TRY(item_double(acc, 0, &st->rate_sum[k]));
        TRY(item_ll(acc, 1, &st->rate_n[k]));
        TRY(item_double(acc, 2, &st->rate_max[k]));
        TRY(item_double(acc, 3, &st->rate_last[k]));
    }
    st->rate_created = 0;
    PyObject *timed = PyObject_GetAttrString(S, "timed");
    if (timed == NULL) return -1;
    st->timed = timed == Py_None ? -1 : timed == Py_True ? 1 : timed == Py_False ? 0 : 2;
    Py_DECREF(timed);
    if (st->timed == 2) return 1;
    TRY(get_ll(S, "n", &st->n));
    PyObject *v = PyObject_GetAttrString(S, "last_t");
    if (v == NULL) return -1;
    st->have_last_t = v != Py_None;
    if (st->have_last_t) {
        int bad = !PyFloat_CheckExact(v);
        if (!bad) st->last_t = PyFloat_AS_DOUBLE(v);
        Py_DECREF(v);
        if (bad) return 1;
    } else {
        Py_DECREF(v);
    }
    v = PyObject_GetAttrString(S, "last_u");
    if (v == NULL) return -1;
    st->have_last_u = v != Py_None;
    if (st->have_last_u) {
        int bad = !PyFloat_CheckExact(v);
        if (!bad) st->last_u = PyFloat_AS_DOUBLE(v);
        Py_DECREF(v);
        if (bad) return 1;
    } else {
        Py_DECREF(v);
    }
    TRY(get_ll(S, "last_q", &st->last_q));
    TRY(get_double(S, "span_s", &st->span_s));
    TRY(get_double(S, "usage_time", &st->usage_time));
    TRY(get_double(S, "above90_s", &st->above90_s));
    TRY(get_double(S, "above99_s", &st->above99_s));
    TRY(get_double(S, "queued_s", &st->queued_s));
    TRY(get_ll(S, "usage_n", &st->usage_n));
    TRY(get_double(S, "peak_u", &st->peak_u));
    TRY(get_ll(S, "sum_r", &st->sum_r));
    TRY(get_ll(S, "r_n", &st->r_n));
    TRY(get_ll(S, "peak_r", &st->peak_r));
    TRY(get_ll(S, "q_seen", &st->q_seen));
    TRY(get_double(S, "pool_u", &st->pool_u));
    TRY(get_ll(S, "pool_tok", &st->pool_tok));
    TRY(get_ll(S, "sat_n", &st->sat_n));
    TRY(get_double(S, "sat_u_per_req", &st->sat_u_per_req));
    TRY(get_double(S, "sat_tok_per_req", &st->sat_tok_per_req));
    TRY(get_ll(S, "sat_tok_n", &st->sat_tok_n));
    TRY(get_ll(S, "sat_queued_n", &st->sat_queued_n));
    TRY(get_ll(S, "peak_q_sat", &st->peak_q_sat));
    TRY(get_ll(S, "new_tokens", &st->new_tokens));
    TRY(get_ll(S, "cached_tokens", &st->cached_tokens));
    TRY(get_ll(S, "prefill_last", &st->prefill_last));
    TRY(get_ll(S, "prefill_peak", &st->prefill_peak));
    TRY(get_ll(S, "graph_on", &st->graph_on));
    TRY(get_ll(S, "graph_off", &st->graph_off));
    TRY(get_ll(S, "graph_max_on", &st->graph_max_on));
    v = PyObject_GetAttrString(S, "graph_min_off");
    if (v == NULL) return -1;
    st->have_min_off = v != Py_None;
    Py_DECREF(v);
    if (st->have_min_off) TRY(get_ll(S, "graph_min_off", &st->graph_min_off));
    st->n_decode = st->n_prefill = 0;
    st->first_kind = 0;
    st->last_stamp_row = st->peak_u_stamp_row = -1;
    st->hist_delta = PyMem_Calloc(USAGE_BINS + QUEUED_BINS + RUNNING_CAP, sizeof(long long));
    st->qr_present = PyMem_Calloc(RUNNING_CAP, 1);
    st->qr_new = PyMem_Calloc(MAX_RUNNING_KEYS, sizeof(int32_t));
    if (st->hist_delta == NULL || st->qr_present == NULL || st->qr_new == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    st->queued_delta = st->hist_delta + USAGE_BINS;
    st->qr_delta = st->queued_delta + QUEUED_BINS;
    TRY(load_running(st));
    TRY(load_timeline(st));
    TRY(load_episode(st));
    return 0;
}

static int set_attr(PyObject *o, const char *name, PyObject *v) { /* steals v */
    if (v == NULL) return -1;
    int r = PyObject_SetAttrString(o, name, v);
    Py_DECREF(v);
    return r;
}
#define SET_LL(name, v) if (set_attr(S, name, PyLong_FromLongLong(v)) < 0) return -1
#define SET_D(name, v) if (set_attr(S, name, PyFloat_FromDouble(v)) < 0) return -1

static int set_item(PyObject *list, Py_ssize_t i, PyObject *v) { /* steals v */
    if (v == NULL) return -1;
    return PyList_SetItem(list, i, v);
}

static int add_to_item(PyObject *list, Py_ssize_t i, long long delta) {
    PyObject *old = PyList_GET_ITEM(list, i);
    PyObject *d = PyLong_FromLongLong(delta);
    if (d == NULL) return -1;
    PyObject *sum = PyNumber_Add(old, d);
    Py_DECREF(d);
    return set_item(list, i, sum);
}

static int flush_ep_fields(St *st, Batch *b) {
    if (st->ep != NULL && st->ep_dirty) {
        if (set_item(st->ep, 1, PyFloat_FromDouble(st->ep_end)) < 0) return -1;
        if (set_item(st->ep, 2, PyLong_FromLongLong(st->ep_peak)) < 0) return -1;
        if (st->ep_peak_stamp_row >= 0 && set_item(st->ep, 3, stamp_text(b, st->ep_peak_stamp_row)) < 0) return -1;
        if (set_item(st->ep, 5, PyFloat_FromDouble(st->ep_u)) < 0) return -1;
    }
    st->ep_dirty = 0;
    st->ep_peak_stamp_row = -1;
    return 0;
}

static int flush_queue(St *st, Batch *b) {
    PyObject *S = st->S;
    SET_LL("peak_q", st->peak_q);
    if (st->peak_q_stamp_row >= 0 && set_attr(S, "peak_q_stamp", stamp_text(b, st->peak_q_stamp_row)) < 0) return -1;
    st->peak_q_stamp_row = -1;
    SET_LL("queued_n", st->queued_n);
    SET_LL("low_queued_n", st->low_queued_n);
    SET_LL("peak_r_queued", st->peak_r_queued);
    for (int k = 0; k < QUEUED_BINS; k++)
        if (st->queued_delta[k]) {
            if (add_to_item(st->queued_hist, k, st->queued_delta[k]) < 0) return -1;
            st->queued_delta[k] = 0;
        }
    if (flush_ep_fields(st, b) < 0) return -1;
    if (PyObject_SetAttrString(S, "episode", st->ep ? st->ep : Py_None) < 0) return -1;
    return PyObject_SetAttrString(S, "closed", st->closed ? st->closed : Py_None);
}

static int flush_bucket(St *st) {
    if (!st->cb_dirty) return 0;
    PyObject *bk = PyList_GET_ITEM(st->points, PyList_GET_SIZE(st->points) - 1);
    if (set_item(bk, 1, PyFloat_FromDouble(st->cb_t1)) < 0 || set_item(bk, 2, PyFloat_FromDouble(st->cb_umin)) < 0 ||
        set_item(bk, 3, PyFloat_FromDouble(st->cb_umax)) < 0 || set_item(bk, 4, PyLong_FromLongLong(st->cb_q)) < 0 ||
        set_item(bk, 5, PyLong_FromLongLong(st->cb_r)) < 0 || set_item(bk, 6, PyLong_FromLongLong(st->cb_n)) < 0)
        return -1;
    st->cb_dirty = 0;
    return 0;
}

/* Timeline.add */
static int timeline_add(St *st, double t, double u, long long q, long long r) {
    if (st->cb_have && t < st->cb_t0 + st->tl_width) {
        if (t > st->cb_t1) st->cb_t1 = t;
        if (u < st->cb_umin) st->cb_umin = u;
        if (u > st->cb_umax) st->cb_umax = u;
        if (q > st->cb_q) st->cb_q = q;
        if (r > st->cb_r) st->cb_r = r;
        st->cb_n++;
        st->cb_dirty = 1;
        return 0;
    }
    if (flush_bucket(st) < 0) return -1;
    PyObject *bk = Py_BuildValue("[ddddLLi]", t, t, u, u, q, r, 1);
    if (bk == NULL || PyList_Append(st->points, bk) < 0) {
        Py_XDECREF(bk);
        return -1;
    }
    Py_DECREF(bk);
    st->cb_have = 1;
    st->cb_t0 = st->cb_t1 = t;
    st->cb_umin = st->cb_umax = u;
    st->cb_q = q;
    st->cb_r = r;
    st->cb_n = 1;
    if (PyList_GET_SIZE(st->points) >= 2 * st->tl_max) {
        PyObject *res = PyObject_CallMethod(st->timeline, "_halve", NULL);
        if (res == NULL) return -1;
        Py_DECREF(res);
        int ok = load_timeline(st);
        if (ok) return ok < 0 ? -1 : (PyErr_SetString(PyExc_RuntimeError, "timeline changed shape"), -1);
    }
    return 0;
}

/* Stream._queue for one row: the continuing episode in C, its start and end in Python. */
static int queue_row(St *st, Batch *b, Py_ssize_t i, double t, long long q, int have_u, double u, long long r) {
    if (q > st->peak_q) {
        st->peak_q = q;
        st->peak_q_stamp_row = i;
    }
    if (q <= 0) { /* the episode ends here (it may still merge with one starting soon) */
        if (st->ep != NULL) {
            st->ep_end = t;
            st->ep_dirty = 1;
            if (flush_ep_fields(st, b) < 0) return -1;
            Py_XSETREF(st->closed, st->ep);
            st->ep = NULL;
        }
        return 0;
    }
    if (st->ep == NULL) {
        if (st->closed != NULL && t - PyFloat_AS_DOUBLE(PyList_GET_ITEM(st->closed, 1)) <= MERGE_S) {
            st->ep = st->closed; /* a flicker of the queue: the same episode goes on */
            st->closed = NULL;
        } else {
            if (st->closed != NULL) { /* Stream._close() counts it and keeps it if it is among the longest */
                if (PyObject_SetAttrString(st->S, "closed", st->closed) < 0) return -1;
                PyObject *res = PyObject_CallMethod(st->S, "_close", NULL);
                if (res == NULL) return -1;
                Py_DECREF(res);
                Py_CLEAR(st->closed);
            }
            PyObject *stamp = stamp_text(b, i);
            if (stamp == NULL) return -1;
            st->ep = Py_BuildValue("[ddLOOd]", t, t, 0LL, stamp, stamp, 0.0);
            Py_DECREF(stamp);
            if (st->ep == NULL) return -1;
        }
        int ok = load_ep_fields(st);
        if (ok) {
            if (ok > 0) PyErr_SetString(PyExc_RuntimeError, "queue episode of an unexpected shape");
            return -1;
        }
    }
    st->ep_end = t;
    st->ep_dirty = 1;
    if (q > st->ep_peak) {
        st->ep_peak = q;
        st->ep_peak_stamp_row = i;
    }
    st->queued_n++;
    if (have_u) {
        if (u > st->ep_u) st->ep_u = u;
        long long k = (long long)(u * 100 + 0.5);
        st->queued_delta[k < QUEUED_BINS - 1 ? k : QUEUED_BINS - 1]++;
        if (u < 0.8) st->low_queued_n++;
    }
    if (r > st->peak_r_queued) st->peak_r_queued = r;
    if (r >= 0 && r < RUNNING_CAP) {
        if (st->qr_present[r]) {
            st->qr_delta[r]++;
        } else if (st->qr_size < MAX_RUNNING_KEYS) {
            st->qr_present[r] = 1;
            st->qr_delta[r] = 1;
            st->qr_new[st->qr_new_n++] = (int32_t)r;
            st->qr_size++;
        }
        return 0;
    }
    if (flush_running(st) < 0) return -1; /* a count C does not keep: the dict in order, then this one */
    PyObject *key = PyLong_FromLongLong(r);
    if (key == NULL) return -1;
    PyObject *old = PyDict_GetItemWithError(st->queued_running, key);
    int rc = 0;
    if (old == NULL && PyErr_Occurred()) rc = -1;
    else if (old != NULL || PyDict_GET_SIZE(st->queued_running) < MAX_RUNNING_KEYS) {
        PyObject *one = PyLong_FromLong(1);
        PyObject *nv = old ? PyNumber_Add(old, one) : (Py_INCREF(one), one);
        Py_XDECREF(one);
        rc = nv == NULL ? -1 : PyDict_SetItem(st->queued_running, key, nv);
        Py_XDECREF(nv);
    }
    Py_DECREF(key);
    st->qr_size = PyDict_GET_SIZE(st->queued_running);
    return rc;
}

static void rate(St *st, int k, double v) {
    if (!st->rate_have[k]) {
        st->rate_have[k] = 1;
        st->rate_order[k] = st->rate_created++;
        st->rate_n[k] = 0;
    }
    if (st->rate_n[k] == 0) {
        st->rate_sum[k] = st->rate_max[k] = st->rate_last[k] = v;
        st->rate_n[k] = 1;
        return;
    }
    st->rate_sum[k] += v;
    st->rate_n[k]++;
    if (v > st->rate_max[k]) st->rate_max[k] = v;
    st->rate_last[k] = v;
}

/* One row into its stream: Stream.sample_rows' loop body, the same operations in the same order. */
static int fold_row(St *st, Batch *b, Py_ssize_t i) {
    const Row *row = &b->rows[i];
    int decode = row->kind == 'd';
    st->n++;
    if (decode) {
        if (!st->first_kind) st->first_kind = 'd';
        st->n_decode++;
    } else {
        if (!st->first_kind) st->first_kind = 'p';
        st->n_prefill++;
    }
    double t = row->t;
    if (st->timed < 0) {
        st->timed = 1;
        if (PyObject_SetAttrString(st->S, "timed", Py_True) < 0) return -1;
        if (set_attr(st->S, "first_t", PyFloat_FromDouble(t)) < 0) return -1;
        if (set_attr(st->S, "first_stamp", stamp_text(b, i)) < 0) return -1;
    }
    if (!st->timed) t = (double)st->n;
    double u = row->u;
    int have_u = 0.0 <= u && u <= MAX_USAGE;
    long long q = row->q, r = row->r;
    if (st->have_last_t) {
        double dt = t - st->last_t;
        if (dt > 0) {
            if (dt > GAP_CAP_S) dt = GAP_CAP_S;
            st->span_s += dt;
            if (st->have_last_u) {
                st->usage_time += st->last_u * dt;
                if (st->last_u >= SATURATED) {
                    st->above90_s += dt;
                    if (st->last_u >= FULL) st->above99_s += dt;
                }
            }
            if (st->last_q) st->queued_s += dt;
        }
    }
    if (!st->have_last_t || t >= st->last_t) {
        st->have_last_t = 1;
        st->last_t = t;
        st->last_stamp_row = i;
    }
    if (have_u) {
        long long k = (long long)(u * 1000 + 0.5);
        st->hist_delta[k < USAGE_BINS ? k : USAGE_BINS - 1]++;
        st->usage_n++;
        if (u > st->peak_u) {
            st->peak_u = u;
            st->peak_u_stamp_row = i;
        }
        st->have_last_u = 1;
        st->last_u = u;
    }
    st->sum_r += r;
    st->r_n++;
    if (r > st->peak_r) st->peak_r = r;
    st->q_seen++;
    if (q > 0 || st->ep != NULL)
        if (queue_row(st, b, i, t, q, have_u, u, r) < 0) return -1;
    st->last_q = q;
    long long tok = decode ? row->tok : 0;
    if (tok && have_u && u >= st->pool_u) {
        st->pool_u = u;
        st->pool_tok = tok;
    }
    if (have_u && u >= SATURATED && r) {
        st->sat_n++;
        st->sat_u_per_req += u / (double)r;
        if (tok) {
            st->sat_tok_per_req += (double)tok / (double)r;
            st->sat_tok_n++;
        }
        if (q) {
            st->sat_queued_n++;
            if (q > st->peak_q_sat) st->peak_q_sat = q;
        }
    }
    if (timeline_add(st, t, have_u ? u : 0.0, q, r) < 0) return -1;
    if (decode) {
        if (row->graph == 1) {
            st->graph_on++;
            if (r > st->graph_max_on) st->graph_max_on = r;
        } else if (row->graph == 0) {
            st->graph_off++;
            if (!st->have_min_off || r < st->graph_min_off) {
                st->have_min_off = 1;
                st->graph_min_off = r;
            }
        }
        double g = row->gen;
        st->gen_sum += g;
        st->gen_n++;
        if (g > st->gen_max) st->gen_max = g;
        st->gen_last = g;
    } else {
        if (row->has_tps) rate(st, 0, row->tps);
        if (row->has_hit) rate(st, 1, row->hit);
        st->new_tokens += row->new_tok;
        st->cached_tokens += row->cached;
        st->prefill_last = row->new_tok;
        if (row->new_tok > st->prefill_peak) st->prefill_peak = row->new_tok;
    }
    return 0;
}

static int add_kind(St *st, const char *key, long long count) {
    if (!count) return 0;
    PyObject *n = PyLong_FromLongLong(count);
    if (n == NULL) return -1;
    PyObject *old = PyDict_GetItemString(st->kinds, key); /* borrowed; no Python code runs before its use */
    PyObject *v = old != NULL ? PyNumber_Add(old, n) : (Py_INCREF(n), n);
    Py_DECREF(n);
    if (v == NULL) return -1;
    int rc = PyDict_SetItemString(st->kinds, key, v);
    Py_DECREF(v);
    return rc;
}

static int store_rates(St *st) {
    for (int pass = 0; pass < 3; pass++) /* existing lists first, then new ones in creation order */
        for (int k = 0; k < 2; k++) {
            if (!st->rate_have[k]) continue;
            int created = st->rate_order[k] >= 0;
            if (pass == 0 ? created : (!created || st->rate_order[k] != pass - 1)) continue;
            PyObject *acc = Py_BuildValue("[dLdd]", st->rate_sum[k], st->rate_n[k], st->rate_max[k], st->rate_last[k]);
            if (acc == NULL) return -1;
            PyObject *old = created ? NULL : PyDict_GetItemString(st->rates, RATE_KEYS[k]);
            int rc = old != NULL ? PyList_SetSlice(old, 0, 4, acc) : PyDict_SetItemString(st->rates, RATE_KEYS[k], acc);
            Py_DECREF(acc);
            if (rc < 0) return -1;
        }
    return 0;
}

static int store(St *st, Batch *b) {
    PyObject *S = st->S;
    SET_LL("n", st->n);
    if (st->first_kind == 'd') {
        if (add_kind(st, "decode", st->n_decode) < 0 || add_kind(st, "prefill", st->n_prefill) < 0) return -1;
    } else if (st->first_kind == 'p') {
        if (add_kind(st, "prefill", st->n_prefill) < 0 || add_kind(st, "decode", st->n_decode) < 0) return -1;
    }
    if (st->have_last_t) SET_D("last_t", st->last_t);
    if (st->last_stamp_row >= 0 && set_attr(S, "last_stamp", stamp_text(b, st->last_stamp_row)) < 0) return -1;
    if (st->have_last_u) SET_D("last_u", st->last_u);
    SET_LL("last_q", st->last_q);
    SET_D("span_s", st->span_s);
    SET_D("usage_time", st->usage_time);
    SET_D("above90_s", st->above90_s);
    SET_D("above99_s", st->above99_s);
    SET_D("queued_s", st->queued_s);
    SET_LL("usage_n", st->usage_n);
    SET_D("peak_u", st->peak_u);
    if (st->peak_u_stamp_row >= 0 && set_attr(S, "peak_u_stamp", stamp_text(b, st->peak_u_stamp_row)) < 0) return -1;
    SET_LL("sum_r", st->sum_r);
    SET_LL("r_n", st->r_n);
    SET_LL("peak_r", st->peak_r);
    SET_LL("q_seen", st->q_seen);
    SET_D("pool_u", st->pool_u);
    SET_LL("pool_tok", st->pool_tok);
    SET_LL("sat_n", st->sat_n);
    SET_D("sat_u_per_req", st->sat_u_per_req);
    SET_D("sat_tok_per_req", st->sat_tok_per_req);
    SET_LL("sat_tok_n", st->sat_tok_n);
    SET_LL("sat_queued_n", st->sat_queued_n);
    SET_LL("peak_q_sat", st->peak_q_sat);
    SET_LL("new_tokens", st->new_tokens);
    SET_LL("cached_tokens", st->cached_tokens);
    SET_LL("prefill_last", st->prefill_last);
    SET_LL("prefill_peak", st->prefill_peak);
    SET_LL("graph_on", st->graph_on);
    SET_LL("graph_off", st->graph_off);
    SET_LL("graph_max_on", st->graph_max_on);
    if (st->have_min_off) SET_LL("graph_min_off", st->graph_min_off);
    for (int k = 0; k < USAGE_BINS; k++)
        if (st->hist_delta[k] && add_to_item(st->hist, k, st->hist_delta[k]) < 0) return -1;
    if (set_item(st->gen_list, 0, PyFloat_FromDouble(st->gen_sum)) < 0 ||
        set_item(st->gen_list, 1, PyLong_FromLongLong(st->gen_n)) < 0 ||
        set_item(st->gen_list, 2, PyFloat_FromDouble(st->gen_max)) < 0 ||
        set_item(st->gen_list, 3, PyFloat_FromDouble(st->gen_last)) < 0)
        return -1;
    if (store_rates(st) < 0) return -1;
    if (flush_bucket(st) < 0 || flush_running(st) < 0) return -1;
    return flush_queue(st, b);
}

static void release(St *st) {
    Py_CLEAR(st->timeline);
    Py_CLEAR(st->points);
    Py_CLEAR(st->kinds);
    Py_CLEAR(st->rates);
    Py_CLEAR(st->hist);
    Py_CLEAR(st->queued_hist);
    Py_CLEAR(st->queued_running);
    Py_CLEAR(st->gen_list);
    Py_CLEAR(st->ep);
    Py_CLEAR(st->closed);
    PyMem_Free(st->hist_delta);
    PyMem_Free(st->qr_present);
    PyMem_Free(st->qr_new);
    st->hist_delta = NULL;
    st->qr_present = NULL;
    st->qr_new = NULL;
}

/* Whether every stream's sum_r, new_tokens and cached_tokens stay within long long over the batch
 * (Python's ints never overflow: where these would, the Python fold takes the batch). Split noted
 * the batch's sums over all labels, which bound each label's: where they fit, no pass over the rows
 * is needed (that pass cost a second trip through a megabyte of rows on the folding thread). */
static int sums_fit(St *states, const Batch *b) {
    if (b->tot_r >= 0 && b->tot_r < LLONG_MAX && b->tot_new < LLONG_MAX && b->tot_cached < LLONG_MAX) {
        int fit = 1;
        for (Py_ssize_t k = 0; fit && k < PyList_GET_SIZE(b->labels); k++) {
            const St *st = &states[k];
            if (st->S == NULL) continue;
            fit = st->sum_r <= LLONG_MAX - b->tot_r && st->new_tokens <= LLONG_MAX - b->tot_new &&
                  st->cached_tokens <= LLONG_MAX - b->tot_cached;
        }
        if (fit) return 1;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(b->labels); k++) {
        states[k].fit_r = states[k].sum_r;
        states[k].fit_new = states[k].new_tokens;
        states[k].fit_cached = states[k].cached_tokens;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) { /* row values are >= 0: LLONG_MAX - v cannot overflow */
        const Row *row = &b->rows[i];
        St *st = &states[row->label];
        if (st->S == NULL || !row->valid || row->kind == 'r') continue;
        if (st->fit_r > LLONG_MAX - row->r) return 0;
        st->fit_r += row->r;
        if (row->kind != 'p') continue;
        if (st->fit_new > LLONG_MAX - row->new_tok || st->fit_cached > LLONG_MAX - row->cached) return 0;
        st->fit_new += row->new_tok;
        st->fit_cached += row->cached;
    }
    return 1;
}

/* fold(batch, streams): streams[k] is the Stream for batch.labels()[k], or None for a rank whose
 * lines another rank speaks for. Returns the number of convertible rows of those ignored ranks, or
 * None (nothing changed) when a stream holds a value of a shape this code does not fold. */
static PyObject *bulk_fold(PyObject *mod, PyObject *args) {
    Batch *b;
    PyObject *streams;
    if (!PyArg_ParseTuple(args, "O!O!", &BatchType, &b, &PyList_Type, &streams)) return NULL;
    Py_ssize_t nl = PyList_GET_SIZE(b->labels);
    if (PyList_GET_SIZE(streams) != nl) {
        PyErr_SetString(PyExc_ValueError, "one stream (or None) per label");
        return NULL;
    }
    St *states = PyMem_Calloc((size_t)(nl ? nl : 1), sizeof(St));
    if (states == NULL) return PyErr_NoMemory();
    PyObject *result = NULL;
    long long ignored = 0;
    int unsupported = 0;
    for (Py_ssize_t k = 0; k < nl; k++) {
        PyObject *S = PyList_GET_ITEM(streams, k);
        if (S == Py_None) continue;
        states[k].S = S;
        int ok = load(&states[k]);
        if (ok < 0) goto done;
        if (ok > 0) unsupported = 1;
    }
    if (unsupported || !sums_fit(states, b)) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    for (Py_ssize_t i = 0; i < b->n; i++) {
        St *st = &states[b->rows[i].label];
        if (!b->rows[i].valid || b->rows[i].kind == 'r') continue; /* retractions: Accumulator._retract */
        if (st->S == NULL) {
            ignored++;
            continue;
        }
        if (fold_row(st, b, i) < 0) goto done;
    }
    for (Py_ssize_t k = 0; k < nl; k++)
        if (states[k].S != NULL && store(&states[k], b) < 0) goto done;
    result = PyLong_FromLongLong(ignored);
done:
    for (Py_ssize_t k = 0; k < nl; k++) release(&states[k]);
    PyMem_Free(states);
    return result;
}

/* count_lines(buf, lo, hi): buf.count(b"\n", lo, hi), eight bytes at a time (exact zero-byte
 * test on word ^ "\n\n\n\n\n\n\n\n", the flags summed by one multiply): as fast on a stretch of bulk marks, a newline
 * every other byte, as on a journal of long lines; bytes.count looks at one byte at a time. */
/* How many bytes of p[0:end - p) equal byte: 16 at a time, each match (-1) subtracted into byte
 * counters summed every 255 rounds (no popcount: without -mpopcnt it is a slow library call). */
static long long count_byte_in(const unsigned char *p, const unsigned char *end, unsigned char byte) {
    long long n = 0;
#if defined(__SSE2__)
    const __m128i b16 = _mm_set1_epi8((char)byte), zero = _mm_setzero_si128();
    while (end - p >= 16) {
        __m128i acc = zero;
        for (int k = 0; k < 255 && end - p >= 16; k++, p += 16)
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), b16));
        __m128i sums = _mm_sad_epu8(acc, zero);
        n += _mm_cvtsi128_si32(sums) + _mm_cvtsi128_si32(_mm_srli_si128(sums, 8));
    }
#endif
    const uint64_t ones7 = 0x7F7F7F7F7F7F7F7FULL, pattern = 0x0101010101010101ULL * byte;
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t t = w ^ pattern;
        uint64_t y = ~(((t & ones7) + ones7) | t | ones7); /* 0x80 in each byte of w that was `byte` */
        n += (long long)(((y >> 7) * 0x0101010101010101ULL) >> 56); /* bytes with 0x80 set, summed */
        p += 8;
    }
    for (; p < end; p++) n += *p == byte;
    return n;
}

static PyObject *bulk_count_lines(PyObject *mod, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &lo, &hi)) return NULL;
    if (lo < 0 && (lo += view.len) < 0) lo = 0; /* bytes.count's index rules: negative from the end */
    if (hi < 0 && (hi += view.len) < 0) hi = 0;
    if (hi > view.len) hi = view.len;
    if (lo > hi) lo = hi;
    const unsigned char *p = (const unsigned char *)view.buf;
    long long n = count_byte_in(p + lo, p + hi, '\n');
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(n);
}

/* Whether any byte of p[0:end - p) is 0 or 1: one pass (a byte's minimum with 1 equals it only
 * for 0 and 1). */
static int has_low_byte(const unsigned char *p, const unsigned char *end) {
#if defined(__SSE2__)
    const __m128i one = _mm_set1_epi8(1);
    while (end - p >= 64) {
        __m128i hit = _mm_setzero_si128();
        for (int k = 0; k < 4; k++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + 16 * k));
            hit = _mm_or_si128(hit, _mm_cmpeq_epi8(_mm_min_epu8(v, one), v));
        }
        if (_mm_movemask_epi8(hit)) return 1;
        p += 64;
    }
#endif
    for (; p < end; p++)
        if (*p <= 1) return 1;
    return 0;
}

/* low_bytes(buf): (buf.count(b"\0"), b"\x01" in buf), in one pass where neither occurs (text
 * logs), without the GIL. The reading thread asks it of each block: the NULs are counted for the
 * binary-input check, and a block without the mark byte needs no look for it when split. */
static PyObject *bulk_low_bytes(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = (const unsigned char *)view.buf, *end = p + view.len;
    long long n = 0;
    int mark = 0;
    Py_BEGIN_ALLOW_THREADS
    if (has_low_byte(p, end)) {
        if (memchr(p, 0, (size_t)view.len) != NULL) n = count_byte_in(p, end, 0);
        mark = memchr(p, BULK_MARK, (size_t)view.len) != NULL;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(LO)", n, mark ? Py_True : Py_False);
}

/* ---------------------------------------------------------------- anchor scan ---- */

/* Anchors(anchors).line_starts(buf, lo, hi): the sorted start offsets of the lines of buf[lo:hi]
 * that hold any anchor, as kvscope.reading.scan.AnchorScanner.line_starts finds them (a line starts
 * at lo or after a newline; an occurrence counts when it lies inside [lo, hi)).
 *
 * Why a different method from the Python scanner: there a key hit costs a Python-level look
 * (~400 ns), so it searches for rare key bytes and compiles regex lanes for common ones, planned
 * from samples of the data. Here a hit costs nanoseconds, so fixed filters do for any data, with
 * no plan to go stale:
 *  - anchors of five or more bytes: every second position's next four bytes are hashed into a
 *    65,536-bit set (8 KiB, in L1 cache) of each anchor's four-byte windows at offsets 0 and 1; an
 *    occurrence at p holds one of them at the first even-stepped position >= p. Only the positions
 *    in the set are compared against the anchors having that window. Four bytes, not two: two
 *    pass 7-13 % of a journal's positions ("gp" of gpu_memory_utilization is on every line of host
 *    gpu-node-7), four about one per line.
 *  - anchors of three or four bytes (a few: "mem", "KV "): compared whole at 16 positions at once
 *    (SSE2 byte compares, where the compiler has them).
 *  - any anchor of one or two bytes, or many short ones (none in kvscope's sets; tests use them):
 *    a hashed set of every anchor's first three bytes at every position, and a plain compare for
 *    the shortest, as a slower but general path.
 * After a hit the rest of its line is skipped. */

#define MAX_SIMD_ANCHORS 8

typedef struct {
    uint32_t gram;    /* four bytes of the anchor, little-endian */
    Py_ssize_t off;   /* where in the anchor they are */
    const char *text;
    Py_ssize_t len;
} Gram;

struct Anchors {
    PyObject_HEAD
    int general;            /* 1: the general path (one- or two-byte anchors, or too many short ones) */
    uint64_t set[1024];     /* hashed windows: of long anchors (fast path) / first three bytes (general) */
    Gram *grams;            /* long anchors' windows, sorted by gram (fast path) */
    Py_ssize_t ngrams;
    unsigned char simd[MAX_SIMD_ANCHORS][4]; /* short anchors' bytes (fast path) */
    Py_ssize_t simd_len[MAX_SIMD_ANCHORS], nsimd;
    PyObject *keep;         /* the tuple of anchor bytes the pointers point into */
};

static void anchors_dealloc(Anchors *a) {
    PyMem_Free(a->grams);
    Py_XDECREF(a->keep);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

INLINE uint32_t load4(const unsigned char *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w; /* native order on both sides (anchors are loaded the same way) */
}
INLINE unsigned hash16(uint32_t w) { return (unsigned)((w * 0x9E3779B1u) >> 16); }
#define SET_HAS(set, h) (((set)[(h) >> 6] >> ((h) & 63)) & 1)
#define SET_ADD(set, h) ((set)[(h) >> 6] |= 1ULL << ((h) & 63))
#define LOW3 (load4((const unsigned char *)"\xff\xff\xff\x00"))

static int gram_cmp(const void *x, const void *y) {
    uint32_t a = ((const Gram *)x)->gram, b = ((const Gram *)y)->gram;
    return (a > b) - (a < b);
}

/* The fast path's tables; 0 when these anchors need the general path (then a->grams lists every
 * anchor, off 0, gram = its first three bytes or fewer, for anchor_at_general). */
static int build_tables(Anchors *a, PyObject *tup) {
    Py_ssize_t n = PyTuple_GET_SIZE(tup), nshort = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(tup, k));
        if (len <= 2) a->general = 1;
        else if (len <= 4) nshort++;
    }
    if (nshort > MAX_SIMD_ANCHORS) a->general = 1;
    a->grams = PyMem_Calloc((size_t)(2 * n + 1), sizeof(Gram));
    if (a->grams == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *o = PyTuple_GET_ITEM(tup, k);
        const char *t = PyBytes_AS_STRING(o);
        Py_ssize_t len = PyBytes_GET_SIZE(o);
        if (a->general) {
            unsigned char first[4] = {0, 0, 0, 0};
            memcpy(first, t, (size_t)(len < 3 ? len : 3));
            a->grams[a->ngrams++] = (Gram){load4(first), 0, t, len};
            if (len >= 3) SET_ADD(a->set, hash16(load4(first)));
        } else if (len <= 4) {
            memcpy(a->simd[a->nsimd], t, (size_t)len);
            a->simd_len[a->nsimd++] = len;
        } else {
            for (Py_ssize_t off = 0; off < 2; off++) {
                uint32_t g = load4((const unsigned char *)t + off);
                a->grams[a->ngrams++] = (Gram){g, off, t, len};
                SET_ADD(a->set, hash16(g));
            }
        }
    }
    qsort(a->grams, (size_t)a->ngrams, sizeof(Gram), gram_cmp);
    return 0;
}

static PyObject *anchors_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
    PyObject *tup = PySequence_Tuple(seq);
    if (tup == NULL) return NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(tup); k++) {
        PyObject *o = PyTuple_GET_ITEM(tup, k);
        if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) == 0 || memchr(PyBytes_AS_STRING(o), '\n', PyBytes_GET_SIZE(o))) {
            Py_DECREF(tup);
            PyErr_SetString(PyExc_ValueError, "anchors must be non-empty bytes and hold no newline");
            return NULL;
        }
    }
    Anchors *a = (Anchors *)type->tp_alloc(type, 0);
    if (a == NULL) {
        Py_DECREF(tup);
        return NULL;
    }
    a->keep = tup;
    if (build_tables(a, tup) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return (PyObject *)a;
}

/* Index of the first gram >= g. */
static Py_ssize_t gram_lower_bound(const Gram *grams, Py_ssize_t n, uint32_t g) {
    Py_ssize_t l = 0, r = n;
    while (l < r) {
        Py_ssize_t mid = (l + r) / 2;
        if (grams[mid].gram < g) l = mid + 1;
        else r = mid;
    }
    return l;
}

/* Fast path, long anchors: the window at x is in the set; an anchor at x - off, inside [from, hi)? */
static int long_at(const Anchors *a, const unsigned char *s, Py_ssize_t x, Py_ssize_t from, Py_ssize_t hi) {
    uint32_t w = load4(s + x);
    for (Py_ssize_t l = gram_lower_bound(a->grams, a->ngrams, w); l < a->ngrams && a->grams[l].gram == w; l++) {
        const Gram *g = &a->grams[l];
        Py_ssize_t p = x - g->off;
        if (p >= from && p + g->len <= hi && memcmp(s + p, g->text, (size_t)g->len) == 0) return 1;
    }
    return 0;
}

/* Fast path: the first position >= from (stepping by two from there) whose window starts or
 * continues a long anchor lying inside [from, hi), or -1. The position lies in that anchor's line. */
static Py_ssize_t next_long(const Anchors *a, const unsigned char *s, Py_ssize_t from, Py_ssize_t hi) {
    if (a->ngrams == 0) return -1;
    const uint64_t *set = a->set;
    Py_ssize_t x = from;
    /* the hot loop: one hashed-set lookup per two bytes, four lookups per branch (independent
     * loads and multiplies overlap; a hit is rare, then each of the four is looked at in order) */
    for (; x + 10 <= hi; x += 8) {
        unsigned h0 = hash16(load4(s + x)), h1 = hash16(load4(s + x + 2));
        unsigned h2 = hash16(load4(s + x + 4)), h3 = hash16(load4(s + x + 6));
        if (!(SET_HAS(set, h0) | SET_HAS(set, h1) | SET_HAS(set, h2) | SET_HAS(set, h3))) continue;
        for (Py_ssize_t y = x; y < x + 8; y += 2)
            if (SET_HAS(set, hash16(load4(s + y))) && long_at(a, s, y, from, hi)) return y;
    }
    for (; x + 4 <= hi; x += 2)
        if (SET_HAS(set, hash16(load4(s + x))) && long_at(a, s, x, from, hi)) return x;
    return -1;
}

INLINE int short_at(const Anchors *a, const unsigned char *s, Py_ssize_t x, Py_ssize_t hi) {
    for (Py_ssize_t k = 0; k < a->nsimd; k++)
        if (x + a->simd_len[k] <= hi && memcmp(s + x, a->simd[k], (size_t)a->simd_len[k]) == 0) return 1;
    return 0;
}

/* Fast path: the first position >= from where a short anchor lies inside [from, hi), or -1. */
static Py_ssize_t next_short(const Anchors *a, const unsigned char *s, Py_ssize_t from, Py_ssize_t hi) {
    if (a->nsimd == 0) return -1;
    Py_ssize_t x = from;
#if defined(__SSE2__)
    __m128i b[MAX_SIMD_ANCHORS][4];
    for (Py_ssize_t k = 0; k < a->nsimd; k++)
        for (int j = 0; j < 4; j++) /* a three-byte anchor's fourth compare is made always true */
            b[k][j] = j < a->simd_len[k] ? _mm_set1_epi8((char)a->simd[k][j]) : _mm_set1_epi8(0);
    const __m128i zero = _mm_setzero_si128(), ones = _mm_cmpeq_epi8(zero, zero);
    for (; x + 19 <= hi; x += 16) { /* 16 positions, each anchor compared whole (the loads reach x + 18) */
        __m128i v0 = _mm_loadu_si128((const __m128i *)(s + x)), v1 = _mm_loadu_si128((const __m128i *)(s + x + 1));
        __m128i v2 = _mm_loadu_si128((const __m128i *)(s + x + 2)), v3 = _mm_loadu_si128((const __m128i *)(s + x + 3));
        __m128i any = zero;
        for (Py_ssize_t k = 0; k < a->nsimd; k++) {
            __m128i m = _mm_and_si128(_mm_cmpeq_epi8(v0, b[k][0]), _mm_cmpeq_epi8(v1, b[k][1]));
            m = _mm_and_si128(m, _mm_cmpeq_epi8(v2, b[k][2]));
            m = _mm_and_si128(m, a->simd_len[k] == 4 ? _mm_cmpeq_epi8(v3, b[k][3]) : ones);
            any = _mm_or_si128(any, m);
        }
        int mask = _mm_movemask_epi8(any);
        if (mask) return x + __builtin_ctz((unsigned)mask);
    }
#endif
    for (; x < hi; x++)
        if (short_at(a, s, x, hi)) return x;
    return -1;
}

/* General path: an anchor at x, inside [x, hi)? */
static int anchor_at_general(const Anchors *a, const unsigned char *s, Py_ssize_t x, Py_ssize_t hi) {
    for (Py_ssize_t k = 0; k < a->ngrams; k++) {
        const Gram *g = &a->grams[k];
        if (g->len <= 2 && x + g->len <= hi && memcmp(s + x, g->text, (size_t)g->len) == 0) return 1;
    }
    if (x + 4 > hi) {
        for (Py_ssize_t k = 0; k < a->ngrams; k++) {
            const Gram *g = &a->grams[k];
            if (g->len >= 3 && x + g->len <= hi && memcmp(s + x, g->text, (size_t)g->len) == 0) return 1;
        }
        return 0;
    }
    uint32_t w3 = load4(s + x) & LOW3;
    if (!SET_HAS(a->set, hash16(w3))) return 0;
    for (Py_ssize_t l = gram_lower_bound(a->grams, a->ngrams, w3); l < a->ngrams && a->grams[l].gram == w3; l++) {
        const Gram *g = &a->grams[l];
        if (g->len >= 3 && x + g->len <= hi && memcmp(s + x, g->text, (size_t)g->len) == 0) return 1;
    }
    return 0;
}

static Py_ssize_t next_general(const Anchors *a, const unsigned char *s, Py_ssize_t x, Py_ssize_t hi) {
    for (; x < hi; x++)
        if (anchor_at_general(a, s, x, hi)) return x;
    return -1;
}

/* The scan of line_starts, without the GIL: the start of every line holding an anchor, appended
 * to *out (grown with the raw allocator). 0, or -1 when memory ran out. */
static int scan_line_starts(const Anchors *a, const unsigned char *s, Py_ssize_t lo, Py_ssize_t hi,
                            Py_ssize_t **out, Py_ssize_t *n, Py_ssize_t *cap) {
    /* Fast path: the next hit of each filter, kept while it lies ahead (a hit found from an
     * earlier line start is still the first one at or after a later start that has not passed it). */
    Py_ssize_t i = lo, at_short = -2, at_long = -2; /* -2: not searched yet; -1: none left */
    while (i < hi) {
        Py_ssize_t x;
        if (a->general) {
            x = next_general(a, s, i, hi);
        } else {
            if (at_short == -2 || (at_short >= 0 && at_short < i)) at_short = next_short(a, s, i, hi);
            if (at_long == -2 || (at_long >= 0 && at_long < i)) at_long = next_long(a, s, i, hi);
            x = at_short < 0 ? at_long : at_long < 0 ? at_short : at_short < at_long ? at_short : at_long;
        }
        if (x < 0) break;
        Py_ssize_t b = x; /* back to the line's start (memrchr is not portable; lines are short) */
        while (b > i && s[b - 1] != '\n') b--;
        if (*n == *cap) {
            Py_ssize_t grown_cap = *cap ? 2 * *cap : 256;
            Py_ssize_t *grown = PyMem_RawRealloc(*out, sizeof(Py_ssize_t) * (size_t)grown_cap);
            if (grown == NULL) return -1;
            *out = grown;
            *cap = grown_cap;
        }
        (*out)[(*n)++] = b;
        const unsigned char *end = memchr(s + x, '\n', (size_t)(hi - x));
        if (end == NULL) break;
        i = end - s + 1;
    }
    return 0;
}

/* line_starts(buf, lo, hi): the scan gives up the GIL (the tables are never changed after
 * construction and buf is held), so a second thread can scan one stretch while another folds. */
static PyObject *anchors_line_starts(Anchors *a, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &lo, &hi)) return NULL;
    if (lo < 0 || hi > view.len || lo > hi) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "line_starts(): 0 <= lo <= hi <= len(buf)");
        return NULL;
    }
    Py_ssize_t *starts = NULL, n = 0, cap = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_line_starts(a, (const unsigned char *)view.buf, lo, hi, &starts, &n, &cap);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = rc < 0 ? PyErr_NoMemory() : starts_list(starts, n);
    PyMem_RawFree(starts);
    return out;
}

static PyObject *starts_list(const Py_ssize_t *starts, Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        PyObject *v = PyLong_FromSsize_t(starts[k]);
        if (v == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, k, v);
    }
    return out;
}

static PyMethodDef anchors_methods[] = {
    {"line_starts", (PyCFunction)anchors_line_starts, METH_VARARGS,
     "line_starts(buf, lo, hi): sorted start offsets of the lines of buf[lo:hi] holding an anchor."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AnchorsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvscope._bulk.Anchors",
    .tp_basicsize = sizeof(Anchors),
    .tp_dealloc = (destructor)anchors_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Anchors(anchors): a set of anchor words whose lines line_starts() finds in one pass.",
    .tp_methods = anchors_methods,
    .tp_new = anchors_new,
};

/* lines_with(buf, lo, hi, needle): start offsets of the lines of buf[lo:hi] (a region of whole
 * lines) that hold needle, by memmem: a rare long word (the vLLM stats line's "Avg prompt
 * throughput") is found at several GB/s, where bytes.find runs at 1-2. */
static PyObject *bulk_lines_with(PyObject *mod, PyObject *args) {
    Py_buffer view, word;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*nny*", &view, &lo, &hi, &word)) return NULL;
    PyObject *out = NULL;
    if (lo < 0 || hi > view.len || lo > hi || word.len == 0) {
        PyErr_SetString(PyExc_ValueError, "lines_with(): 0 <= lo <= hi <= len(buf) and a non-empty word");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) goto done;
    const char *s = (const char *)view.buf;
    Py_ssize_t i = lo;
    while (i < hi) {
        const char *hit = memmem(s + i, (size_t)(hi - i), word.buf, (size_t)word.len);
        if (hit == NULL) break;
        Py_ssize_t at = hit - s, b = at;
        while (b > i && s[b - 1] != '\n') b--;
        PyObject *start = PyLong_FromSsize_t(b);
        if (start == NULL || PyList_Append(out, start) < 0) {
            Py_XDECREF(start);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(start);
        const char *end = memchr(hit, '\n', (size_t)(hi - at));
        if (end == NULL) break;
        i = end - s + 1;
    }
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&word);
    return out;
}

static PyMethodDef module_methods[] = {
    {"count_lines", bulk_count_lines, METH_VARARGS, "buf.count(b'\\n', lo, hi), faster on long lines."},
    {"low_bytes", (PyCFunction)bulk_low_bytes, METH_O,
     "low_bytes(buf): (buf.count(b\"\\0\"), b\"\\x01\" in buf), one pass without the GIL where neither occurs"},
    {"lines_with", bulk_lines_with, METH_VARARGS, "lines_with(buf, lo, hi, word): starts of the lines holding word."},
    {"split", bulk_split, METH_VARARGS,
     "split(buf, lo, hi[, anchors[, clean]]): BULK.split() of b'\\n' + buf[lo:hi] (whole lines): (text, Batch), and "
     "with anchors the candidate line starts of text[1:] as a third item; None: no line matched; False: a "
     "number too long for this lane (use the regex); Ellipsis: the stretch holds the mark byte (clean: the caller "
     "knows it does not)."},
    {"fold", bulk_fold, METH_VARARGS, "Stream.sample_rows() for a Batch: ignored-row count, or None to fold in Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef bulk_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kvscope._bulk",
    .m_doc = "The reader's bulk lane in C (see _bulk.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__bulk(void) {
    init_classes();
    if (PyType_Ready(&BatchType) < 0 || PyType_Ready(&AnchorsType) < 0) return NULL;
#ifdef HAVE_JOBS
    if (PyType_Ready(&JobType) < 0) return NULL;
    pthread_atfork(NULL, NULL, job_after_fork);
#endif
    PyObject *m = PyModule_Create(&bulk_module);
    if (m == NULL) return NULL;
    Py_INCREF(&BatchType);
    if (PyModule_AddObject(m, "Batch", (PyObject *)&BatchType) < 0) {
        Py_DECREF(&BatchType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&AnchorsType);
    if (PyModule_AddObject(m, "Anchors", (PyObject *)&AnchorsType) < 0) {
        Py_DECREF(&AnchorsType);
        Py_DECREF(m);
        return NULL;
    }
#ifdef HAVE_JOBS
    Py_INCREF(&JobType);
    if (PyModule_AddObject(m, "Job", (PyObject *)&JobType) < 0) {
        Py_DECREF(&JobType);
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
