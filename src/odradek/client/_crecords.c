/*
 * _crecords: the client's RecordBatch v2 hot path in C (optional; odradek.client._records
 * has the pure-Python reference and uses this module when it compiled).
 *
 *   configure(record_type, corrupt_error, crc32c, decompress)
 *       called once by _records.py: the ConsumerRecord class, the exception to raise on
 *       malformed input, and the Python callables for CRC32C and decompression (codecs
 *       stay in cramjam/zlib; only record parsing is done here).
 *   decode(out, topic, partition, data, pos, start_offset, next_offset, check_crcs, aborted)
 *       appends ConsumerRecords of the v2 batches at data[pos:] to `out`; returns
 *       (pos, next_offset, legacy): legacy is True when it stopped at a MessageSet
 *       v0/v1 batch (the caller decodes that one in Python and calls again).
 *       `aborted`: None, or a set of the base offsets of transactional batches to skip
 *       (read_committed: _records.aborted_batches); control batches are always skipped.
 *   decode_columns(data, pos, start_offset, next_offset, check_crcs, aborted)
 *       the same walk, but into column buffers (for Arrow); headers are skipped.
 *       Returns (pos, next_offset, legacy, columns) with columns = (count, offsets,
 *       timestamps, timestamp_types, key_validity, key_offsets, key_data, key_nulls,
 *       value_validity, value_offsets, value_data, value_nulls), all buffers bytes in
 *       native byte order (int64 / int32 arrays, LSB-first validity bitmaps).
 *   Builder(limit)
 *       the producer's open batch: .append(ts, key, value, headers) -> bool encodes one
 *       record at the end of its bytearray `buf`, unless the batch is not empty and would
 *       pass `limit` bytes (then returns False and leaves `buf` alone); keeps count,
 *       base_ts, max_ts and size (read-only members) up to date. _records.py subclasses
 *       it with build().
 *
 * Every read is checked against the end of its record (and the record against the end
 * of its batch): malformed input raises the configured CorruptRecordError, never reads
 * out of bounds. The rules match the Python fallback exactly (tests run both).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#define HEADER_SIZE 61      /* RecordBatch v2 header, base offset .. record count */
#define MIN_BATCH_LENGTH 49 /* HEADER_SIZE - 12: the length field counts from the epoch on */
#define MIN_ENTRY_LENGTH 14 /* smallest legacy message (v0: crc, magic, attrs, key, value) */

static PyObject *record_type;   /* ConsumerRecord (a tuple subclass) */
static PyObject *corrupt_error; /* CorruptRecordError */
static PyObject *crc32c_fn;     /* crc32c(buffer) -> int */
static PyObject *decompress_fn; /* decompress(codec, memoryview) -> bytes */

/* ------------------------------------------------------------------ big-endian reads */
static int64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* ------------------------------------------------------------------ varints
 * Zigzag varint of at most `maxbytes` bytes (5 for Kafka's varint, 10 for varlong) read
 * from [*pp, end). A varint keeps the low 32 bits of what it read. 0 on success, -1 when
 * the input ends first or the varint is longer than allowed. */
static int read_varint(const uint8_t **pp, const uint8_t *end, int maxbytes, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < maxbytes; i++) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            if (maxbytes == 5)
                v &= 0xFFFFFFFFu;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static int varint_size(uint64_t zz)
{
    int n = 1;
    while (zz >= 0x80) {
        zz >>= 7;
        n++;
    }
    return n;
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static uint8_t *write_varint(uint8_t *p, int64_t v)
{
    uint64_t zz = zigzag(v);
    while (zz >= 0x80) {
        *p++ = (uint8_t)(zz | 0x80);
        zz >>= 7;
    }
    *p++ = (uint8_t)zz;
    return p;
}

/* ------------------------------------------------------------------ errors */
static void *corrupt(PyObject *topic, PyObject *partition, int64_t base_offset, const char *what)
{
    PyErr_Format(corrupt_error, "%U-%S: %s in batch at offset %lld", topic, partition, what,
                 (long long)base_offset);
    return NULL;
}

/* ------------------------------------------------------------------ one record
 * The fields of one record, parsed from [p, end) of a batch's records section. */
typedef struct {
    int64_t ts_delta, offset_delta;
    const uint8_t *key, *value; /* NULL for a null key / value */
    Py_ssize_t key_len, value_len;
    const uint8_t *headers, *end; /* the header entries; the end of the record */
    int64_t header_count;
} Record;

/* A varint length (-1 for null) and that many bytes, within [*pp, end): *data is NULL for
 * null. Returns NULL on success or `bad` / `past` (what is wrong). */
static const char *read_nullable_bytes(const uint8_t **pp, const uint8_t *end, const uint8_t **data,
                                       Py_ssize_t *len, const char *bad, const char *past)
{
    int64_t x;
    if (read_varint(pp, end, 5, &x) || x < -1)
        return bad;
    if (x > end - *pp)
        return past;
    *data = x < 0 ? NULL : *pp;
    *len = x < 0 ? 0 : (Py_ssize_t)x;
    *pp += *len;
    return NULL;
}

/* Parse one record starting at *pp; on success *pp is past it. Returns NULL on success
 * or a description of what is wrong. Header entries are validated (bounds, lengths) but
 * their keys are decoded later, by whoever needs them. */
static const char *parse_record(const uint8_t **pp, const uint8_t *end, Record *r)
{
    const uint8_t *p = *pp;
    int64_t len, x;
    if (read_varint(&p, end, 5, &len))
        return "bad record length";
    if (len < 0 || len > end - p)
        return "record length past the end of the batch";
    const uint8_t *rend = p + len;
    if (p >= rend)
        return "record too short";
    p++; /* attributes (unused) */
    if (read_varint(&p, rend, 10, &r->ts_delta) || read_varint(&p, rend, 5, &r->offset_delta))
        return "bad record varint";
    const char *why;
    if ((why = read_nullable_bytes(&p, rend, &r->key, &r->key_len, "bad key length",
                                   "key past the end of the record"))
        || (why = read_nullable_bytes(&p, rend, &r->value, &r->value_len, "bad value length",
                                      "value past the end of the record")))
        return why;
    if (read_varint(&p, rend, 5, &r->header_count) || r->header_count < 0)
        return "bad header count";
    r->headers = p;
    for (int64_t i = 0; i < r->header_count; i++) {
        if (read_varint(&p, rend, 5, &x) || x < 0 || x > rend - p)
            return "bad header key";
        p += x;
        if (read_varint(&p, rend, 5, &x) || x < -1 || x > rend - p)
            return "bad header value";
        if (x > 0)
            p += x;
    }
    if (p != rend)
        return "record length does not match its fields";
    r->end = rend;
    *pp = rend;
    return NULL;
}

/* Header entries of a parsed record as a tuple of (str, bytes | None) pairs. Immutable and
 * holding only atomic objects, so neither it nor its pairs can be part of a reference cycle:
 * they are untracked by the cyclic GC (as CPython does lazily for such tuples). */
static PyObject *record_headers(const Record *r)
{
    PyObject *list = PyTuple_New((Py_ssize_t)r->header_count);
    if (list == NULL)
        return NULL;
    const uint8_t *p = r->headers, *end = r->end; /* lengths already validated by parse_record */
    for (Py_ssize_t i = 0; i < (Py_ssize_t)r->header_count; i++) {
        int64_t kl = 0, vl = -1;
        read_varint(&p, end, 5, &kl);
        PyObject *k = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)kl, "strict");
        p += kl;
        read_varint(&p, end, 5, &vl);
        PyObject *v;
        if (vl < 0) {
            v = Py_NewRef(Py_None);
        } else {
            v = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)vl);
            p += vl;
        }
        PyObject *t = (k && v) ? PyTuple_Pack(2, k, v) : NULL;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (t == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyObject_GC_UnTrack(t);
        PyTuple_SET_ITEM(list, i, t);
    }
    PyObject_GC_UnTrack(list);
    return list;
}

/* ------------------------------------------------------------------ record sinks
 * The batch walk is shared; what happens to each record differs: a ConsumerRecord
 * appended to a list, or values appended to column buffers. */
typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *d = PyMem_Realloc(b->data, cap);
    if (d == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n)
{
    if (buf_reserve(b, n))
        return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* One nullable binary column in Arrow's layout: validity bitmap, int32 offsets, data. */
typedef struct {
    Buf validity, offsets, data;
    Py_ssize_t nulls;
} BinaryColumn;

typedef struct {
    Py_ssize_t count;
    Buf offsets, timestamps, ts_types;
    BinaryColumn key, value;
} Columns;

typedef struct {
    PyObject *topic, *partition;
    PyObject *out;   /* list of ConsumerRecord, or NULL when filling `cols` */
    Columns *cols;
    const char *why; /* set when a header key is not UTF-8 (a corrupt record) */
} Sink;

static int column_put(BinaryColumn *c, Py_ssize_t index, const uint8_t *v, Py_ssize_t n)
{
    if (index % 8 == 0) {
        uint8_t zero = 0;
        if (buf_put(&c->validity, &zero, 1))
            return -1;
    }
    if (v == NULL)
        c->nulls++;
    else
        c->validity.data[index / 8] |= (uint8_t)(1u << (index % 8));
    if (v != NULL && buf_put(&c->data, v, (size_t)n))
        return -1;
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of keys or values in one fetch");
        return -1;
    }
    int32_t end = (int32_t)c->data.len;
    return buf_put(&c->offsets, &end, sizeof end);
}

static int sink_record(Sink *s, const Record *r, int64_t offset, int64_t ts, int ts_type)
{
    if (s->out == NULL) {
        Columns *c = s->cols;
        int32_t tt = ts_type;
        if (r->header_count) { /* not kept, but checked like the record path does */
            PyObject *h = record_headers(r);
            if (h == NULL) {
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    s->why = "header key is not UTF-8";
                }
                return -1;
            }
            Py_DECREF(h);
        }
        if (buf_put(&c->offsets, &offset, 8) || buf_put(&c->timestamps, &ts, 8) || buf_put(&c->ts_types, &tt, 4)
            || column_put(&c->key, c->count, r->key, r->key_len)
            || column_put(&c->value, c->count, r->value, r->value_len))
            return -1;
        c->count++;
        return 0;
    }
    PyTypeObject *type = (PyTypeObject *)record_type;
    PyObject *rec = type->tp_alloc(type, 8);
    if (rec == NULL)
        return -1;
    PyTuple_SET_ITEM(rec, 0, Py_NewRef(s->topic));
    PyTuple_SET_ITEM(rec, 1, Py_NewRef(s->partition));
    PyObject *items[6] = {
        PyLong_FromLongLong(offset),
        PyLong_FromLongLong(ts),
        PyLong_FromLong(ts_type),
        r->key ? PyBytes_FromStringAndSize((const char *)r->key, r->key_len) : Py_NewRef(Py_None),
        r->value ? PyBytes_FromStringAndSize((const char *)r->value, r->value_len) : Py_NewRef(Py_None),
        r->header_count ? record_headers(r) : PyTuple_New(0),
    };
    int ok = 1;
    for (int i = 0; i < 6; i++) {
        if (items[i] == NULL)
            ok = 0;
        PyTuple_SET_ITEM(rec, i + 2, items[i]); /* NULL slots are fine for dealloc */
    }
    /* Every field is atomic (int, str, bytes, None) or an untracked tuple of them, and a
     * NamedTuple has no __dict__: the record cannot be in a cycle, so the cyclic GC need not
     * scan it. Thousands of buffered records would otherwise make each collection slower
     * (measured: ~30% of a 100-byte consume loop). */
    if (ok)
        PyObject_GC_UnTrack(rec);
    if (!ok || PyList_Append(s->out, rec)) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            s->why = "header key is not UTF-8";
        }
        Py_DECREF(rec);
        return -1;
    }
    Py_DECREF(rec);
    return 0;
}

/* ------------------------------------------------------------------ the batch walk */
static int decode_records(Sink *s, const uint8_t *p, const uint8_t *end, int32_t count, int64_t base_offset,
                          int64_t base_ts, int64_t max_ts, int log_append, int64_t start_offset)
{
    for (int32_t i = 0; i < count; i++) {
        Record r;
        const char *why = parse_record(&p, end, &r);
        if (why) {
            corrupt(s->topic, s->partition, base_offset, why);
            return -1;
        }
        int64_t offset, ts = max_ts;
        if (__builtin_add_overflow(base_offset, r.offset_delta, &offset)
            || (!log_append && __builtin_add_overflow(base_ts, r.ts_delta, &ts))) {
            corrupt(s->topic, s->partition, base_offset, "offset or timestamp out of range");
            return -1;
        }
        if (offset < start_offset)
            continue;
        if (sink_record(s, &r, offset, ts, log_append ? 1 : 0)) {
            if (s->why)
                corrupt(s->topic, s->partition, base_offset, s->why);
            return -1;
        }
    }
    return 0;
}

/* Walks batches from `pos`; returns (pos, next_offset, legacy) or NULL with an error. */
static PyObject *walk(Sink *s, Py_buffer *data, Py_ssize_t pos, int64_t start_offset, int64_t next_offset,
                      int check_crcs, PyObject *aborted)
{
    const uint8_t *buf = data->buf;
    Py_ssize_t n = data->len;
    int legacy = 0;
    while (pos + 17 <= n) {
        const uint8_t *h = buf + pos;
        int64_t base_offset = be64(h);
        int32_t length = be32(h + 8);
        if (length < MIN_ENTRY_LENGTH)
            return corrupt(s->topic, s->partition, base_offset, "batch length too small");
        Py_ssize_t end = pos + 12 + (Py_ssize_t)length;
        if (end > n)
            break; /* a trailing partial batch */
        if (h[16] != 2) {
            legacy = 1;
            break;
        }
        if (length < MIN_BATCH_LENGTH)
            return corrupt(s->topic, s->partition, base_offset, "batch length too small");
        uint32_t crc = (uint32_t)be32(h + 17);
        int16_t attrs = be16(h + 21);
        int64_t last_offset;
        if (__builtin_add_overflow(base_offset, (int64_t)be32(h + 23) + 1, &last_offset))
            return corrupt(s->topic, s->partition, base_offset, "last offset out of range");
        last_offset--; /* computed +1 first so that next_offset below cannot overflow */
        int64_t base_ts = be64(h + 27), max_ts = be64(h + 35);
        int32_t count = be32(h + 57);
        if (last_offset < start_offset) {
            pos = end;
            continue;
        }
        if (check_crcs) {
            PyObject *mv = PyMemoryView_FromMemory((char *)h + 21, end - pos - 21, PyBUF_READ);
            PyObject *got = mv ? PyObject_CallOneArg(crc32c_fn, mv) : NULL;
            Py_XDECREF(mv);
            if (got == NULL)
                return NULL;
            unsigned long v = PyLong_AsUnsignedLong(got);
            Py_DECREF(got);
            if (v == (unsigned long)-1 && PyErr_Occurred())
                return NULL;
            if (v != crc) {
                PyErr_Format(corrupt_error, "%U-%S: CRC mismatch in batch at offset %lld", s->topic, s->partition,
                             (long long)base_offset);
                return NULL;
            }
        }
        next_offset = last_offset + 1;
        if (attrs & 0x20) { /* control batch (transaction marker) */
            pos = end;
            continue;
        }
        if (aborted != Py_None && (attrs & 0x10)) {
            PyObject *k = PyLong_FromLongLong(base_offset); /* aborted: base offsets of batches to skip */
            int hit = k ? PySequence_Contains(aborted, k) : -1;
            Py_XDECREF(k);
            if (hit < 0)
                return NULL;
            if (hit) {
                pos = end;
                continue;
            }
        }
        if (count < 0)
            return corrupt(s->topic, s->partition, base_offset, "negative record count");
        int codec = attrs & 0x07, rc;
        if (codec) {
            PyObject *mv = PyMemoryView_FromMemory((char *)h + HEADER_SIZE, end - pos - HEADER_SIZE, PyBUF_READ);
            PyObject *plain = mv ? PyObject_CallFunction(decompress_fn, "iO", codec, mv) : NULL;
            Py_XDECREF(mv);
            if (plain == NULL)
                return NULL;
            Py_buffer pb;
            if (PyObject_GetBuffer(plain, &pb, PyBUF_SIMPLE)) {
                Py_DECREF(plain);
                return NULL;
            }
            rc = decode_records(s, pb.buf, (const uint8_t *)pb.buf + pb.len, count, base_offset, base_ts, max_ts,
                                attrs & 0x08, start_offset);
            PyBuffer_Release(&pb);
            Py_DECREF(plain);
        } else {
            rc = decode_records(s, h + HEADER_SIZE, buf + end, count, base_offset, base_ts, max_ts, attrs & 0x08,
                                start_offset);
        }
        if (rc)
            return NULL;
        pos = end;
    }
    return Py_BuildValue("nLO", pos, (long long)next_offset, legacy ? Py_True : Py_False);
}

static int check_configured(void)
{
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_crecords.configure() was not called");
        return -1;
    }
    return 0;
}

static PyObject *py_decode(PyObject *self, PyObject *args)
{
    Sink s = {0};
    Py_buffer data;
    Py_ssize_t pos;
    long long start_offset, next_offset;
    int check_crcs;
    PyObject *aborted;
    if (check_configured()
        || !PyArg_ParseTuple(args, "O!UOy*nLLpO", &PyList_Type, &s.out, &s.topic, &s.partition, &data, &pos,
                             &start_offset, &next_offset, &check_crcs, &aborted))
        return NULL;
    PyObject *r = pos < 0 ? PyErr_Format(PyExc_ValueError, "negative position")
                          : walk(&s, &data, pos, start_offset, next_offset, check_crcs, aborted);
    PyBuffer_Release(&data);
    return r;
}

static void columns_free(Columns *c)
{
    Buf *all[] = {&c->offsets, &c->timestamps, &c->ts_types, &c->key.validity, &c->key.offsets, &c->key.data,
                  &c->value.validity, &c->value.offsets, &c->value.data};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        PyMem_Free(all[i]->data);
}

static PyObject *as_bytes(Buf *b) { return PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->len); }

static PyObject *py_decode_columns(PyObject *self, PyObject *args)
{
    Columns cols;
    memset(&cols, 0, sizeof cols);
    Sink s = {.cols = &cols};
    Py_buffer data;
    Py_ssize_t pos;
    long long start_offset, next_offset;
    int check_crcs;
    PyObject *aborted;
    if (check_configured()
        || !PyArg_ParseTuple(args, "UOy*nLLpO", &s.topic, &s.partition, &data, &pos, &start_offset, &next_offset,
                             &check_crcs, &aborted))
        return NULL;
    int32_t zero = 0;
    PyObject *r = NULL, *walked = NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "negative position");
    } else if (!buf_put(&cols.key.offsets, &zero, 4) && !buf_put(&cols.value.offsets, &zero, 4)) {
        walked = walk(&s, &data, pos, start_offset, next_offset, check_crcs, aborted);
    }
    PyBuffer_Release(&data);
    if (walked != NULL) { /* (pos, next_offset, legacy, columns) */
        PyObject *c = Py_BuildValue("(nNNNNNNnNNNn)", cols.count, as_bytes(&cols.offsets), as_bytes(&cols.timestamps),
                                    as_bytes(&cols.ts_types), as_bytes(&cols.key.validity),
                                    as_bytes(&cols.key.offsets), as_bytes(&cols.key.data), cols.key.nulls,
                                    as_bytes(&cols.value.validity), as_bytes(&cols.value.offsets),
                                    as_bytes(&cols.value.data), cols.value.nulls);
        if (c != NULL) {
            r = PyTuple_Pack(4, PyTuple_GET_ITEM(walked, 0), PyTuple_GET_ITEM(walked, 1),
                             PyTuple_GET_ITEM(walked, 2), c);
            Py_DECREF(c);
        }
        Py_DECREF(walked);
    }
    columns_free(&cols);
    return r;
}

/* ------------------------------------------------------------------ encoding */
/* Encode one record at the end of bytearray `buf`: 1 when appended, 0 when the batch is
 * not empty (count > 0) and the record would take it past `limit`, -1 on error. */
static int append_into(PyObject *buf, long long count, long long ts_delta, PyObject *key, PyObject *value,
                       PyObject *headers, Py_ssize_t limit)
{
    Py_buffer kb = {0}, vb = {0};
    PyObject *hseq = NULL;
    int result = -1;
    int have_k = 0, have_v = 0;
    if (key != Py_None) {
        if (PyObject_GetBuffer(key, &kb, PyBUF_SIMPLE))
            goto done;
        have_k = 1;
    }
    if (value != Py_None) {
        if (PyObject_GetBuffer(value, &vb, PyBUF_SIMPLE))
            goto done;
        have_v = 1;
    }
    /* size of the record body (everything after its length varint) */
    Py_ssize_t n = 1 + varint_size(zigzag(ts_delta)) + varint_size(zigzag(count));
    n += have_k ? varint_size(zigzag(kb.len)) + kb.len : 1;
    n += have_v ? varint_size(zigzag(vb.len)) + vb.len : 1;
    Py_ssize_t nh = 0;
    if (headers != Py_None) {
        hseq = PySequence_Fast(headers, "headers must be a sequence of (bytes, bytes | None)");
        if (hseq == NULL)
            goto done;
        nh = PySequence_Fast_GET_SIZE(hseq);
        for (Py_ssize_t i = 0; i < nh; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(hseq, i);
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(item, 0))
                || (PyTuple_GET_ITEM(item, 1) != Py_None && !PyBytes_Check(PyTuple_GET_ITEM(item, 1)))) {
                PyErr_SetString(PyExc_TypeError, "headers must be (bytes, bytes | None) pairs");
                goto done;
            }
            Py_ssize_t kl = PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 0));
            PyObject *hv = PyTuple_GET_ITEM(item, 1);
            n += varint_size(zigzag(kl)) + kl;
            n += hv == Py_None ? 1 : varint_size(zigzag(PyBytes_GET_SIZE(hv))) + PyBytes_GET_SIZE(hv);
        }
    }
    n += varint_size(zigzag(nh));
    Py_ssize_t old = PyByteArray_GET_SIZE(buf);
    if (count && HEADER_SIZE + old + n + 5 > limit) {
        result = 0;
        goto done;
    }
    if (PyByteArray_Resize(buf, old + varint_size(zigzag(n)) + n))
        goto done;
    uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(buf) + old;
    p = write_varint(p, n);
    *p++ = 0; /* attributes */
    p = write_varint(p, ts_delta);
    p = write_varint(p, count);
    if (have_k) {
        p = write_varint(p, kb.len);
        memcpy(p, kb.buf, kb.len);
        p += kb.len;
    } else {
        *p++ = 1; /* zigzag(-1): null */
    }
    if (have_v) {
        p = write_varint(p, vb.len);
        memcpy(p, vb.buf, vb.len);
        p += vb.len;
    } else {
        *p++ = 1;
    }
    p = write_varint(p, nh);
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(hseq, i);
        PyObject *hk = PyTuple_GET_ITEM(item, 0), *hv = PyTuple_GET_ITEM(item, 1);
        p = write_varint(p, PyBytes_GET_SIZE(hk));
        memcpy(p, PyBytes_AS_STRING(hk), PyBytes_GET_SIZE(hk));
        p += PyBytes_GET_SIZE(hk);
        if (hv == Py_None) {
            *p++ = 1;
        } else {
            p = write_varint(p, PyBytes_GET_SIZE(hv));
            memcpy(p, PyBytes_AS_STRING(hv), PyBytes_GET_SIZE(hv));
            p += PyBytes_GET_SIZE(hv);
        }
    }
    result = 1;
done:
    if (have_k)
        PyBuffer_Release(&kb);
    if (have_v)
        PyBuffer_Release(&vb);
    Py_XDECREF(hseq);
    return result;
}

/* ------------------------------------------------------------------ Builder */
/* The producer's open batch: records encoded into `buf` as they are appended (the Python
 * subclass in _records.py adds build()). One C call per record, no Python frame. */
typedef struct {
    PyObject_HEAD
    PyObject *buf; /* bytearray: the records, uncompressed */
    long long count, base_ts, max_ts;
    Py_ssize_t limit, size; /* size: HEADER_SIZE + len(buf), the batch's uncompressed size */
} Builder;

static PyObject *encode_headers_fn; /* (str | bytes, ...) pairs -> (bytes, bytes | None) list */

static int builder_init(Builder *self, PyObject *args, PyObject *kwds)
{
    Py_ssize_t limit;
    static char *kwlist[] = {"limit", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &limit))
        return -1;
    PyObject *buf = PyByteArray_FromStringAndSize(NULL, 0);
    if (buf == NULL)
        return -1;
    Py_XSETREF(self->buf, buf);
    self->count = 0;
    self->base_ts = -1;
    self->max_ts = -1;
    self->limit = limit;
    self->size = HEADER_SIZE;
    return 0;
}

static void builder_dealloc(Builder *self)
{
    Py_XDECREF(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *builder_append(Builder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "append(ts, key, value, headers) takes 4 arguments");
        return NULL;
    }
    if (self->buf == NULL) {
        PyErr_SetString(PyExc_ValueError, "Builder not initialised");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(args[0]);
    if (ts == -1 && PyErr_Occurred())
        return NULL;
    long long base = self->count ? self->base_ts : ts, delta;
    if (__builtin_sub_overflow(ts, base, &delta)) {
        PyErr_SetString(PyExc_OverflowError, "timestamp delta out of range");
        return NULL;
    }
    PyObject *headers = args[3], *enc = NULL;
    if (headers != Py_None) {
        int truth = PyObject_IsTrue(headers);
        if (truth < 0)
            return NULL;
        if (truth) {
            if (encode_headers_fn == NULL) {
                PyErr_SetString(PyExc_RuntimeError, "_crecords not configured");
                return NULL;
            }
            enc = PyObject_CallOneArg(encode_headers_fn, headers);
            if (enc == NULL)
                return NULL;
        }
    }
    int r = append_into(self->buf, self->count, delta, args[1], args[2], enc ? enc : Py_None, self->limit);
    Py_XDECREF(enc);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_FALSE;
    if (self->count == 0)
        self->base_ts = ts;
    self->count++;
    if (ts > self->max_ts)
        self->max_ts = ts;
    self->size = HEADER_SIZE + PyByteArray_GET_SIZE(self->buf);
    Py_RETURN_TRUE;
}

static PyMethodDef builder_methods[] = {
    {"append", (PyCFunction)(void (*)(void))builder_append, METH_FASTCALL,
     "append(ts, key, value, headers) -> bool: False when the batch is not empty and the record "
     "would take it past limit"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef builder_members[] = {
    {"buf", T_OBJECT_EX, offsetof(Builder, buf), READONLY, "the encoded records"},
    {"count", T_LONGLONG, offsetof(Builder, count), READONLY, "records appended"},
    {"base_ts", T_LONGLONG, offsetof(Builder, base_ts), READONLY, "first record's timestamp (-1 if empty)"},
    {"max_ts", T_LONGLONG, offsetof(Builder, max_ts), READONLY, "largest timestamp (-1 if empty)"},
    {"limit", T_PYSSIZET, offsetof(Builder, limit), READONLY, "batch size limit"},
    {"size", T_PYSSIZET, offsetof(Builder, size), READONLY, "uncompressed batch size (header included)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "odradek.client._crecords.Builder",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Builder(limit): records of one RecordBatch v2, encoded as appended",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)builder_init,
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_methods = builder_methods,
    .tp_members = builder_members,
};

/* ------------------------------------------------------------------ module */
static PyObject *py_configure(PyObject *self, PyObject *args)
{
    PyObject *rt, *ce, *crc, *dec, *eh = NULL;
    if (!PyArg_ParseTuple(args, "O!OOO|O", &PyType_Type, &rt, &ce, &crc, &dec, &eh))
        return NULL;
    if (eh != NULL)
        Py_XSETREF(encode_headers_fn, Py_NewRef(eh));
    if (!PyType_IsSubtype((PyTypeObject *)rt, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        return NULL;
    }
    Py_XSETREF(record_type, Py_NewRef(rt));
    Py_XSETREF(corrupt_error, Py_NewRef(ce));
    Py_XSETREF(crc32c_fn, Py_NewRef(crc));
    Py_XSETREF(decompress_fn, Py_NewRef(dec));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(record_type, corrupt_error, crc32c, decompress[, encode_headers])"},
    {"decode", py_decode, METH_VARARGS,
     "decode(out, topic, partition, data, pos, start_offset, next_offset, check_crcs, aborted)"
     " -> (pos, next_offset, legacy)"},
    {"decode_columns", py_decode_columns, METH_VARARGS,
     "decode_columns(topic, partition, data, pos, start_offset, next_offset, check_crcs, aborted)"
     " -> (pos, next_offset, legacy, columns)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_crecords", .m_doc = "RecordBatch v2 codec in C", .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__crecords(void)
{
    if (PyType_Ready(&BuilderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Builder", (PyObject *)&BuilderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
