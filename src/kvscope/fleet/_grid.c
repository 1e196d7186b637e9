/* Prometheus range answers onto a step grid, and the few folds `kvscope fleet` needs, in C.
 *
 * Why C: a week of 30 s steps for 1,000 replicas is 20 million samples per metric family, sent by
 * Prometheus as JSON text ([1733011200,"0.4213"] each). json.loads makes three Python objects per
 * sample and the folds touch each one again; here a sample costs a few nanoseconds and memory is the
 * page being read. kvscope/fleet/grid.py holds the same functions in Python (the lane used where
 * this module did not build) and the tests hold the two lanes to the same answers.
 *
 * A grid is `n` doubles (bytes, native order), one per step from `start`; NaN where the series had
 * no sample at that step (query_range leaves such steps out).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p;
    const char *end;
} Cur;

static void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

/* Past a JSON string whose opening quote is at c->p. 0 when it does not end. */
static int skip_string(Cur *c) {
    c->p++;
    while (c->p < c->end) {
        char ch = *c->p++;
        if (ch == '\\') {
            if (c->p >= c->end) return 0;
            c->p++;
        } else if (ch == '"') {
            return 1;
        }
    }
    return 0;
}

/* Past any JSON value (strings may hold brackets, so they are skipped as strings). */
static int skip_value(Cur *c) {
    ws(c);
    if (c->p >= c->end) return 0;
    if (*c->p == '"') return skip_string(c);
    if (*c->p == '{' || *c->p == '[') {
        int depth = 0;
        while (c->p < c->end) {
            char ch = *c->p;
            if (ch == '"') {
                if (!skip_string(c)) return 0;
                continue;
            }
            if (ch == '{' || ch == '[') depth++;
            else if (ch == '}' || ch == ']') {
                depth--;
                if (depth == 0) {
                    c->p++;
                    return 1;
                }
            }
            c->p++;
        }
        return 0;
    }
    while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']' && *c->p != ' ' && *c->p != '\n') c->p++;
    return 1;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A decimal number in [s, e). The plain shapes Prometheus prints ("0.4213", "12", "1733011200.5") are
 * computed as integer / 10^k, which is exact rounding when the digits fit 2^53 and k <= 22 (both
 * operands exact, one correctly rounded division): the same double strtod gives. Anything else
 * (exponents, NaN, ±Inf, long mantissas) goes through strtod on a bounded copy. */
static int parse_number(const char *s, const char *e, double *out) {
    const char *q = s;
    int neg = 0;
    if (q < e && (*q == '-' || *q == '+')) {
        neg = *q == '-';
        q++;
    }
    uint64_t m = 0;
    int digits = 0, frac = 0, seen_dot = 0, any = 0, plain = 1;
    for (; q < e; q++) {
        char ch = *q;
        if (ch >= '0' && ch <= '9') {
            any = 1;
            if (digits >= 18) {
                plain = 0;
                break;
            }
            m = m * 10 + (uint64_t)(ch - '0');
            if (m) digits++;
            if (seen_dot) frac++;
        } else if (ch == '.' && !seen_dot) {
            seen_dot = 1;
        } else {
            plain = 0;
            break;
        }
    }
    if (plain && any && m < (1ULL << 53) && frac <= 22) {
        double v = (double)m / POW10[frac];
        *out = neg ? -v : v;
        return 1;
    }
    char buf[64];
    size_t len = (size_t)(e - s);
    if (len == 0 || len >= sizeof buf) return 0;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *stop = NULL;
    double v = strtod(buf, &stop);
    if (stop != buf + len) {
        /* Go prints +Inf / -Inf / NaN; strtod reads inf and nan in any case, so only an odd spelling ends here */
        return 0;
    }
    *out = v;
    return 1;
}

/* `"values":[[ts,"v"],...]` into the grid. 0 on malformed input. */
static int read_values(Cur *c, double start, double step, Py_ssize_t n, double *grid) {
    ws(c);
    if (c->p >= c->end || *c->p != '[') return 0;
    c->p++;
    for (;;) {
        ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ']') {
            c->p++;
            return 1;
        }
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p != '[') return 0;
        c->p++;
        ws(c);
        const char *ts0 = c->p;
        while (c->p < c->end && *c->p != ',' && *c->p != ' ' && *c->p != ']') c->p++;
        double ts;
        if (!parse_number(ts0, c->p, &ts)) return 0;
        ws(c);
        if (c->p >= c->end || *c->p != ',') return 0;
        c->p++;
        ws(c);
        if (c->p >= c->end || *c->p != '"') return 0;
        const char *v0 = ++c->p;
        while (c->p < c->end && *c->p != '"') c->p++;
        if (c->p >= c->end) return 0;
        double v;
        if (!parse_number(v0, c->p, &v)) return 0;
        c->p++;
        ws(c);
        if (c->p >= c->end || *c->p != ']') return 0;
        c->p++;
        double at = (ts - start) / step;
        double idx = floor(at + 0.5);
        if (idx >= 0 && idx < (double)n) grid[(Py_ssize_t)idx] = v;
    }
}

/* Find `"result"` at the top of `data` (a plain search: the key cannot occur earlier in a
 * Prometheus answer, whose status, then data.resultType come first). */
static const char *find_result(const char *p, const char *end) {
    static const char key[] = "\"result\"";
    size_t k = sizeof key - 1;
    for (; p + k <= end; p++) {
        if (*p == '"' && memcmp(p, key, k) == 0) return p + k;
    }
    return NULL;
}

PyDoc_STRVAR(matrix_doc,
    "matrix(body, start, step, n) -> [(metric_json, grid_bytes)] or None\n\n"
    "Each series of a query_range answer: its metric object as JSON text and its samples on the grid of n steps "
    "from start (NaN where absent). None when the body is not a matrix answer (the caller reads its error).");

static PyObject *grid_matrix(PyObject *self, PyObject *args) {
    Py_buffer body;
    double start, step;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*ddn", &body, &start, &step, &n)) return NULL;
    if (n < 0 || step <= 0) {
        PyBuffer_Release(&body);
        PyErr_SetString(PyExc_ValueError, "n must be >= 0 and step > 0");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    if (!out) {
        PyBuffer_Release(&body);
        return NULL;
    }
    Cur c = {(const char *)body.buf, (const char *)body.buf + body.len};
    const char *r = find_result(c.p, c.end);
    if (!r) goto not_matrix;
    c.p = r;
    ws(&c);
    if (c.p >= c.end || *c.p != ':') goto not_matrix;
    c.p++;
    ws(&c);
    if (c.p >= c.end || *c.p != '[') goto not_matrix;
    c.p++;
    for (;;) {
        ws(&c);
        if (c.p >= c.end) goto not_matrix;
        if (*c.p == ']') break;
        if (*c.p == ',') {
            c.p++;
            continue;
        }
        if (*c.p != '{') goto not_matrix;
        c.p++;
        PyObject *grid = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
        if (!grid) goto fail;
        double *g = (double *)PyBytes_AS_STRING(grid);
        for (Py_ssize_t i = 0; i < n; i++) g[i] = NAN;
        PyObject *metric = NULL;
        for (;;) {
            ws(&c);
            if (c.p >= c.end) break;
            if (*c.p == '}') {
                c.p++;
                break;
            }
            if (*c.p == ',') {
                c.p++;
                continue;
            }
            if (*c.p != '"') {
                c.p = c.end;
                break;
            }
            const char *k0 = c.p + 1;
            if (!skip_string(&c)) break;
            size_t klen = (size_t)(c.p - 1 - k0);
            ws(&c);
            if (c.p >= c.end || *c.p != ':') {
                c.p = c.end;
                break;
            }
            c.p++;
            ws(&c);
            if (klen == 6 && memcmp(k0, "metric", 6) == 0) {
                const char *m0 = c.p;
                if (!skip_value(&c)) break;
                Py_XDECREF(metric);
                metric = PyUnicode_DecodeUTF8(m0, c.p - m0, "replace");
                if (!metric) {
                    Py_DECREF(grid);
                    goto fail;
                }
            } else if (klen == 6 && memcmp(k0, "values", 6) == 0) {
                if (!read_values(&c, start, step, n, g)) {
                    c.p = c.end;
                    break;
                }
            } else if (!skip_value(&c)) {
                break;
            }
        }
        if (c.p >= c.end && !metric) {
            Py_DECREF(grid);
            goto not_matrix;
        }
        if (!metric) metric = PyUnicode_FromString("{}");
        PyObject *pair = metric ? PyTuple_Pack(2, metric, grid) : NULL;
        Py_XDECREF(metric);
        Py_DECREF(grid);
        if (!pair || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            goto fail;
        }
        Py_DECREF(pair);
    }
    PyBuffer_Release(&body);
    return out;
not_matrix:
    PyBuffer_Release(&body);
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&body);
    Py_DECREF(out);
    return NULL;
}

static int grid_arg(PyObject *obj, Py_buffer *view, Py_ssize_t *n, const char *name) {
    if (obj == Py_None) {
        view->buf = NULL;
        return 1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return 0;
    if (view->len % (Py_ssize_t)sizeof(double)) {
        PyBuffer_Release(view);
        view->buf = NULL;
        PyErr_Format(PyExc_ValueError, "%s: not a whole number of doubles", name);
        return 0;
    }
    Py_ssize_t len = view->len / (Py_ssize_t)sizeof(double);
    if (*n >= 0 && len != *n) {
        PyBuffer_Release(view);
        view->buf = NULL;
        PyErr_Format(PyExc_ValueError, "%s: %zd steps where the others have %zd", name, len, *n);
        return 0;
    }
    *n = len;
    return 1;
}

static void release(Py_buffer *v) {
    if (v->buf) PyBuffer_Release(v);
}

PyDoc_STRVAR(fold_doc,
    "fold(usage, waiting, running, high, hist, queued_hist, spark, offset, total, run_before) -> tuple\n\n"
    "One window of one replica. usage/waiting/running: grids or None. hist / queued_hist: writable buffers "
    "of 1001 doubles, usage counts per 0.1 %% bin (all steps / steps with a queue), added to in place. spark: "
    "writable doubles, the peak usage per bucket of the whole range (offset: this window's first step in "
    "the range; total: the range's steps). run_before: steps of a queue still going at the window's start.\n"
    "Returns (usage_n, usage_peak, usage_peak_i, usage_sum, above_high_n, waiting_n, waiting_pos_n, "
    "waiting_peak, waiting_peak_i, episodes, longest_run, run_after, waiting_high_n, running_n, "
    "running_peak, running_pos_n, running_peak_queued); indices are of this window, -1 when none.");

static PyObject *grid_fold(PyObject *self, PyObject *args) {
    PyObject *uo, *wo, *ro, *ho, *qo, *so;
    double high;
    Py_ssize_t offset, total, run_before;
    if (!PyArg_ParseTuple(args, "OOOdOOOnnn", &uo, &wo, &ro, &high, &ho, &qo, &so, &offset, &total, &run_before))
        return NULL;
    Py_buffer u = {0}, w = {0}, r = {0}, h = {0}, q = {0}, s = {0};
    Py_ssize_t n = -1, nh = -1, nq = -1, ns = -1;
    if (!grid_arg(uo, &u, &n, "usage") || !grid_arg(wo, &w, &n, "waiting") || !grid_arg(ro, &r, &n, "running"))
        goto bad;
    if (PyObject_GetBuffer(ho, &h, PyBUF_WRITABLE) < 0) goto bad;
    if (PyObject_GetBuffer(qo, &q, PyBUF_WRITABLE) < 0) goto bad;
    if (PyObject_GetBuffer(so, &s, PyBUF_WRITABLE) < 0) goto bad;
    nh = h.len / (Py_ssize_t)sizeof(double);
    nq = q.len / (Py_ssize_t)sizeof(double);
    ns = s.len / (Py_ssize_t)sizeof(double);
    if (nh != 1001 || nq != 1001) {
        PyErr_SetString(PyExc_ValueError, "hist and queued_hist must hold 1001 doubles");
        goto bad;
    }
    if (n < 0) n = 0;
    {
        const double *U = u.buf, *W = w.buf, *R = r.buf;
        double *H = h.buf, *Q = q.buf, *S = s.buf;
        Py_ssize_t usage_n = 0, above = 0, usage_peak_i = -1, waiting_n = 0, waiting_pos = 0, waiting_peak_i = -1;
        Py_ssize_t episodes = 0, longest = run_before, run = run_before, waiting_high = 0, running_n = 0, running_pos = 0;
        double usage_peak = NAN, usage_sum = 0, waiting_peak = NAN, running_peak = NAN, running_peak_q = NAN;
        for (Py_ssize_t i = 0; i < n; i++) {
            double uv = U ? U[i] : NAN, wv = W ? W[i] : NAN, rv = R ? R[i] : NAN;
            if (!isnan(uv)) {
                usage_n++;
                usage_sum += uv;
                double b = floor(uv * 1000 + 0.5);
                Py_ssize_t bin = b < 0 ? 0 : b > 1000 ? 1000 : (Py_ssize_t)b;
                H[bin] += 1;
                if (isnan(usage_peak) || uv > usage_peak) {
                    usage_peak = uv;
                    usage_peak_i = i;
                }
                if (uv >= high) above++;
                if (ns > 0 && total > 0) {
                    Py_ssize_t k = (Py_ssize_t)(((double)(offset + i)) * (double)ns / (double)total);
                    if (k >= ns) k = ns - 1;
                    if (k >= 0 && (isnan(S[k]) || uv > S[k])) S[k] = uv;
                }
            }
            if (!isnan(wv)) {
                waiting_n++;
                if (isnan(waiting_peak) || wv > waiting_peak) {
                    waiting_peak = wv;
                    waiting_peak_i = i;
                }
                if (wv > 0) {
                    waiting_pos++;
                    if (run == 0) episodes++;
                    run++;
                    if (run > longest) longest = run;
                    if (!isnan(uv)) {
                        double b = floor(uv * 1000 + 0.5);
                        Py_ssize_t bin = b < 0 ? 0 : b > 1000 ? 1000 : (Py_ssize_t)b;
                        Q[bin] += 1;
                        if (uv >= high) waiting_high++;
                    }
                    if (!isnan(rv) && (isnan(running_peak_q) || rv > running_peak_q)) running_peak_q = rv;
                } else {
                    run = 0;
                }
            } else {
                run = 0; /* no sample for longer than Prometheus' lookback: the server was not seen */
            }
            if (!isnan(rv)) {
                running_n++;
                if (rv > 0) running_pos++;
                if (isnan(running_peak) || rv > running_peak) running_peak = rv;
            }
        }
        release(&u);
        release(&w);
        release(&r);
        PyBuffer_Release(&h);
        PyBuffer_Release(&q);
        PyBuffer_Release(&s);
        return Py_BuildValue("(ndndnnndnnnnnndnd)", usage_n, usage_peak, usage_peak_i, usage_sum, above, waiting_n,
                             waiting_pos, waiting_peak, waiting_peak_i, episodes, longest, run, waiting_high, running_n,
                             running_peak, running_pos, running_peak_q);
    }
bad:
    release(&u);
    release(&w);
    release(&r);
    if (h.buf) PyBuffer_Release(&h);
    if (q.buf) PyBuffer_Release(&q);
    if (s.buf) PyBuffer_Release(&s);
    return NULL;
}

PyDoc_STRVAR(counter_doc,
    "counter(grid, last) -> (increase, resets, last)\n\n"
    "A counter's increase over the grid, continuing from `last` (NaN: none yet). A drop is a restart: the "
    "counter began again from zero, so its new value is all increase (Prometheus' increase() reads it the same way).");

static PyObject *grid_counter(PyObject *self, PyObject *args) {
    PyObject *go;
    double last;
    if (!PyArg_ParseTuple(args, "Od", &go, &last)) return NULL;
    Py_buffer g = {0};
    Py_ssize_t n = -1;
    if (!grid_arg(go, &g, &n, "grid")) return NULL;
    const double *G = g.buf;
    double inc = 0;
    Py_ssize_t resets = 0;
    for (Py_ssize_t i = 0; G && i < n; i++) {
        double v = G[i];
        if (isnan(v)) continue;
        if (!isnan(last)) {
            if (v >= last) inc += v - last;
            else {
                inc += v;
                resets++;
            }
        }
        last = v;
    }
    release(&g);
    return Py_BuildValue("(dnd)", inc, resets, last);
}

PyDoc_STRVAR(combine_doc,
    "combine(a, b, op) -> bytes\n\n"
    "Two grids of one server's schedulers folded step by step: op 0 the larger (usage: the fullest pool preempts "
    "first), op 1 the sum (requests). NaN is absent: the other value stands.");

static PyObject *grid_combine(PyObject *self, PyObject *args) {
    PyObject *ao, *bo;
    int op;
    if (!PyArg_ParseTuple(args, "OOi", &ao, &bo, &op)) return NULL;
    Py_buffer a = {0}, b = {0};
    Py_ssize_t n = -1;
    if (!grid_arg(ao, &a, &n, "a")) return NULL;
    if (!grid_arg(bo, &b, &n, "b")) {
        release(&a);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    if (out) {
        const double *A = a.buf, *B = b.buf;
        double *O = (double *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            double x = A[i], y = B[i];
            if (isnan(x)) O[i] = y;
            else if (isnan(y)) O[i] = x;
            else O[i] = op == 0 ? (x > y ? x : y) : x + y;
        }
    }
    release(&a);
    release(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"matrix", grid_matrix, METH_VARARGS, matrix_doc},
    {"fold", grid_fold, METH_VARARGS, fold_doc},
    {"counter", grid_counter, METH_VARARGS, counter_doc},
    {"combine", grid_combine, METH_VARARGS, combine_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_grid", "Prometheus answers on a step grid (see grid.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__grid(void) { return PyModule_Create(&module); }
