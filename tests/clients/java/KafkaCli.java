// KafkaCli: a small command-line driver around the Apache Kafka Java client
// (kafka-clients 3.9.1) used by odradek's interop tests (tests/support/clients.py).
//
// Build/run (scripts/install-test-deps.sh does the build):
//   javac -d .deps/java/classes -cp '.deps/java/*' tests/clients/java/KafkaCli.java
//   java -cp '.deps/java/*:.deps/java/classes' KafkaCli --bootstrap 127.0.0.1:9092 COMMAND ARGS...
//
// Output contract (shared with tests/clients/node/kafkajs_cli.js):
//   * stdout carries JSON lines only; logging goes to stderr.
//   * Bytes (keys, values, header values) are BASE64 strings in JSON; a null key,
//     value or header value is JSON null. Headers are a list of [name, base64|null]
//     pairs (order and duplicates kept).
//   * On a client exception the last stdout line is
//       {"error": "<Java exception simple class name>", "message": "..."}
//     and the exit code is 1 (2 for usage errors). Nothing waits forever: every
//     client timeout is --timeout-ms (default 10000) and a watchdog halts the JVM
//     with {"error": "WatchdogTimeout"} (exit 3) after --deadline-ms.
//
// Commands:
//   create-topic NAME PARTITIONS [config=value ...] [--replication-factor N]
//       -> {"topic": NAME, "created": true}
//   list-topics                       -> {"topics": [...]}
//   describe-topic NAME               -> {"topic": NAME, "partitions": [{"partition", "leader", "replicas", "isr"}]}
//   delete-topic NAME                 -> {"topic": NAME, "deleted": true}
//   produce TOPIC [--acks A] [--compression-type C] [--enable-idempotence true|false]
//                 [--linger-ms N] [--batch-size N] [--max-request-size N]
//       stdin: JSON lines {"key": b64|null, "value": b64|null, "headers": [[name, b64|null], ...],
//                          "partition": int|null, "timestamp": int|null}
//       -> one {"partition", "offset", "timestamp"} line per input record, in input order
//   consume TOPIC [--from-beginning] [--max N] [--timeout-ms T] [--group G] [--assign 0,1]
//                 [--offset N] [--isolation read_committed|read_uncommitted] [--reset none|earliest|latest]
//       -> {"partition", "offset", "key", "value", "headers", "timestamp", "timestampType"} per record;
//          stops after --max records or when --timeout-ms has elapsed (not an error).
//          Without --group the partitions are assigned (all, or --assign); --offset seeks them.
//   offsets-for-times TOPIC TS        -> {"partition", "offset": int|null, "timestamp": int|null} per partition
//   end-offsets TOPIC / beginning-offsets TOPIC -> {"partition", "offset"} per partition
// Common options: --bootstrap HOST:PORT (or env KAFKA_BOOTSTRAP), --timeout-ms T, --deadline-ms D,
//                 --prop key=value (any client config, repeatable).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KafkaCli {
    static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);

    static class Usage extends RuntimeException {
        Usage(String m) { super(m); }
    }

    // ---------------------------------------------------------------- args
    static final Set<String> FLAGS = Set.of("--from-beginning");
    final List<String> positional = new ArrayList<>();
    final Map<String, String> opts = new HashMap<>();
    final List<String> props = new ArrayList<>();
    String bootstrap;
    int timeoutMs;

    KafkaCli(String[] args) {
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.startsWith("--")) {
                String k = a, v;
                int eq = a.indexOf('=');
                if (eq > 0) { k = a.substring(0, eq); v = a.substring(eq + 1); }
                else if (FLAGS.contains(a)) v = "true";
                else {
                    if (i + 1 >= args.length) throw new Usage("missing value for " + a);
                    v = args[++i];
                }
                if (k.equals("--prop")) props.add(v); else opts.put(k, v);
            } else positional.add(a);
        }
        bootstrap = opts.getOrDefault("--bootstrap", System.getenv("KAFKA_BOOTSTRAP"));
        if (bootstrap == null) throw new Usage("--bootstrap HOST:PORT is required");
        timeoutMs = Integer.parseInt(opts.getOrDefault("--timeout-ms", "10000"));
    }

    String pos(int i, String what) {
        if (i >= positional.size()) throw new Usage("missing argument: " + what);
        return positional.get(i);
    }

    Properties base() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "odradek-java-cli");
        return p;
    }

    void applyProps(Properties p) {
        for (String kv : props) {
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new Usage("--prop wants key=value, got " + kv);
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
    }

    Admin admin() {
        Properties p = base();
        int api = Math.max(timeoutMs, 1000);
        p.put("request.timeout.ms", String.valueOf(api));
        p.put("default.api.timeout.ms", String.valueOf(api));
        p.put("retries", "3");
        applyProps(p);
        return Admin.create(p);
    }

    // ---------------------------------------------------------------- commands
    void run() throws Exception {
        String cmd = pos(0, "command");
        switch (cmd) {
            case "create-topic": createTopic(); break;
            case "list-topics": listTopics(); break;
            case "describe-topic": describeTopic(); break;
            case "delete-topic": deleteTopic(); break;
            case "produce": produce(); break;
            case "write-loop": writeLoop(); break;
            case "consume": consume(); break;
            case "offsets-for-times": listOffsets(OffsetSpec.forTimestamp(Long.parseLong(pos(2, "timestamp")))); break;
            case "end-offsets": listOffsets(OffsetSpec.latest()); break;
            case "beginning-offsets": listOffsets(OffsetSpec.earliest()); break;
            default: throw new Usage("unknown command " + cmd);
        }
    }

    void createTopic() throws Exception {
        String name = pos(1, "topic");
        int parts = Integer.parseInt(pos(2, "partitions"));
        short rf = Short.parseShort(opts.getOrDefault("--replication-factor", "1"));
        Map<String, String> cfg = new LinkedHashMap<>();
        for (int i = 3; i < positional.size(); i++) {
            String kv = positional.get(i);
            int eq = kv.indexOf('=');
            if (eq <= 0) throw new Usage("topic config wants key=value, got " + kv);
            cfg.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        try (Admin a = admin()) {
            NewTopic t = new NewTopic(name, parts, rf).configs(cfg);
            a.createTopics(List.of(t)).all().get();
        }
        OUT.println(obj("topic", name, "created", true));
    }

    void listTopics() throws Exception {
        try (Admin a = admin()) {
            Set<String> names = new TreeSet<>(a.listTopics(new ListTopicsOptions().listInternal(false)).names().get());
            OUT.println(obj("topics", new ArrayList<>(names)));
        }
    }

    void describeTopic() throws Exception {
        String name = pos(1, "topic");
        try (Admin a = admin()) {
            TopicDescription d = a.describeTopics(List.of(name)).allTopicNames().get().get(name);
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : d.partitions()) {
                List<Object> replicas = new ArrayList<>(), isr = new ArrayList<>();
                for (Node n : pi.replicas()) replicas.add(n.id());
                for (Node n : pi.isr()) isr.add(n.id());
                parts.add(obj("partition", pi.partition(), "leader", pi.leader() == null ? null : pi.leader().id(),
                        "replicas", replicas, "isr", isr));
            }
            OUT.println(obj("topic", name, "partitions", parts));
        }
    }

    void deleteTopic() throws Exception {
        String name = pos(1, "topic");
        try (Admin a = admin()) {
            a.deleteTopics(List.of(name)).all().get();
        }
        OUT.println(obj("topic", name, "deleted", true));
    }

    void listOffsets(OffsetSpec spec) throws Exception {
        String topic = pos(1, "topic");
        try (Admin a = admin()) {
            TopicDescription d = a.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            Map<TopicPartition, OffsetSpec> req = new LinkedHashMap<>();
            for (TopicPartitionInfo pi : d.partitions()) req.put(new TopicPartition(topic, pi.partition()), spec);
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res = a.listOffsets(req).all().get();
            List<TopicPartition> keys = new ArrayList<>(res.keySet());
            keys.sort(Comparator.comparingInt(TopicPartition::partition));
            boolean forTimes = positional.get(0).equals("offsets-for-times");
            for (TopicPartition tp : keys) {
                ListOffsetsResult.ListOffsetsResultInfo info = res.get(tp);
                if (forTimes) {
                    // Kafka answers -1 (and ts -1) when no record has timestamp >= TS.
                    boolean none = info.offset() < 0;
                    OUT.println(obj("partition", tp.partition(), "offset", none ? null : info.offset(),
                            "timestamp", none ? null : info.timestamp()));
                } else {
                    OUT.println(obj("partition", tp.partition(), "offset", info.offset()));
                }
            }
        }
    }

    void produce() throws Exception {
        String topic = pos(1, "topic");
        Properties p = base();
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        String linger = opts.getOrDefault("--linger-ms", "5");
        p.put("acks", opts.getOrDefault("--acks", "all"));
        p.put("linger.ms", linger);
        p.put("compression.type", opts.getOrDefault("--compression-type", "none"));
        if (opts.containsKey("--enable-idempotence")) p.put("enable.idempotence", opts.get("--enable-idempotence"));
        if (opts.containsKey("--batch-size")) p.put("batch.size", opts.get("--batch-size"));
        if (opts.containsKey("--max-request-size")) p.put("max.request.size", opts.get("--max-request-size"));
        p.put("request.timeout.ms", String.valueOf(timeoutMs));
        p.put("delivery.timeout.ms", String.valueOf(timeoutMs + Integer.parseInt(linger)));
        p.put("max.block.ms", String.valueOf(timeoutMs));
        applyProps(p);

        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) new Json(line).parse();
            List<Header> headers = new ArrayList<>();
            Object hs = m.get("headers");
            if (hs != null) for (Object h : (List<?>) hs) {
                List<?> pair = (List<?>) h;
                headers.add(new RecordHeader((String) pair.get(0), b64d(pair.get(1))));
            }
            Integer partition = m.get("partition") == null ? null : ((Number) m.get("partition")).intValue();
            Long ts = m.get("timestamp") == null ? null : ((Number) m.get("timestamp")).longValue();
            records.add(new ProducerRecord<>(topic, partition, ts, b64d(m.get("key")), b64d(m.get("value")), headers));
        }
        try (KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (ProducerRecord<byte[], byte[]> r : records) futures.add(prod.send(r));
            prod.flush();
            for (Future<RecordMetadata> f : futures) {
                RecordMetadata md = f.get();
                OUT.println(obj("partition", md.partition(), "offset", md.hasOffset() ? md.offset() : null,
                        "timestamp", md.hasTimestamp() ? md.timestamp() : null));
            }
        } // close() waits for in-flight requests
    }

    /** Fault tests' writer: values name-0, name-1, ... round-robin over --partitions, one every
     *  --interval-us, idempotent, acks=all, until stdin ends; one JSON line per attempt (before
     *  the send), per acknowledgement and per failed send, then {"done": true} once flushed. */
    void writeLoop() throws Exception {
        String topic = pos(1, "topic");
        String name = opts.getOrDefault("--name", "java");
        int partitions = Integer.parseInt(opts.getOrDefault("--partitions", "1"));
        long intervalUs = Long.parseLong(opts.getOrDefault("--interval-us", "2000"));
        Properties p = base();
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "2");
        p.put("request.timeout.ms", "5000");
        p.put("delivery.timeout.ms", "60000");
        p.put("metadata.max.age.ms", "500");
        applyProps(p);
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) { }
            } catch (java.io.IOException e) { }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        KafkaProducer<byte[], byte[]> prod = new KafkaProducer<>(p);
        try {
            for (long seq = 0; !stop.get(); seq++) {
                String v = name + "-" + seq;
                synchronized (OUT) { OUT.println(obj("attempt", v)); }
                prod.send(new ProducerRecord<>(topic, (int) (seq % partitions), null, v.getBytes(StandardCharsets.UTF_8)),
                        (md, e) -> {
                            synchronized (OUT) {
                                if (e == null) OUT.println(obj("ack", v, "partition", md.partition(), "offset", md.offset()));
                                else OUT.println(obj("error", v, "message", e.toString()));
                            }
                        });
                Thread.sleep(intervalUs / 1000, (int) (intervalUs % 1000) * 1000);
            }
            prod.flush();
        } finally {
            prod.close(java.time.Duration.ofSeconds(10));
        }
        synchronized (OUT) { OUT.println(obj("done", true)); }
    }

    void consume() throws Exception {
        String topic = pos(1, "topic");
        int max = Integer.parseInt(opts.getOrDefault("--max", "2147483647"));
        boolean fromBeginning = opts.containsKey("--from-beginning");
        String group = opts.get("--group");
        Properties p = base();
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("auto.offset.reset", opts.getOrDefault("--reset", fromBeginning ? "earliest" : "latest"));
        p.put("isolation.level", opts.getOrDefault("--isolation", "read_uncommitted"));
        p.put("default.api.timeout.ms", String.valueOf(Math.max(timeoutMs, 1000)));
        p.put("request.timeout.ms", String.valueOf(Math.max(timeoutMs, 1000)));
        p.put("enable.auto.commit", "false");
        if (group != null) p.put("group.id", group);
        applyProps(p);

        long deadline = System.currentTimeMillis() + timeoutMs;
        int count = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            if (group != null && !opts.containsKey("--assign")) {
                c.subscribe(List.of(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                if (opts.containsKey("--assign")) {
                    for (String s : opts.get("--assign").split(","))
                        if (!s.isBlank()) tps.add(new TopicPartition(topic, Integer.parseInt(s.trim().replaceFirst("^p", ""))));
                } else {
                    List<PartitionInfo> infos = c.partitionsFor(topic);
                    if (infos == null || infos.isEmpty())
                        throw new org.apache.kafka.common.errors.UnknownTopicOrPartitionException("no partitions for topic " + topic);
                    for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
                }
                c.assign(tps);
                if (opts.containsKey("--offset")) {
                    long off = Long.parseLong(opts.get("--offset"));
                    for (TopicPartition tp : tps) c.seek(tp, off);
                } else if (fromBeginning) {
                    c.seekToBeginning(tps);
                }
            }
            outer:
            while (count < max) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) break;
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(Math.min(left, 500)));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    List<Object> hs = new ArrayList<>();
                    for (Header h : r.headers()) hs.add(Arrays.asList(h.key(), b64e(h.value())));
                    OUT.println(obj("partition", r.partition(), "offset", r.offset(), "key", b64e(r.key()),
                            "value", b64e(r.value()), "headers", hs, "timestamp", r.timestamp(),
                            "timestampType", r.timestampType().name));
                    if (++count >= max) break outer;
                }
            }
            if (group != null && count > 0) c.commitSync();
        }
        System.err.println("consumed " + count + " records");
    }

    // ---------------------------------------------------------------- main
    public static void main(String[] args) {
        int code;
        KafkaCli cli = null;
        try {
            cli = new KafkaCli(args);
            long deadline = Long.parseLong(cli.opts.getOrDefault("--deadline-ms", String.valueOf(cli.timeoutMs * 3L + 20000)));
            Thread wd = new Thread(() -> {
                try { Thread.sleep(deadline); } catch (InterruptedException e) { return; }
                OUT.println(obj("error", "WatchdogTimeout", "message", "KafkaCli did not finish within " + deadline + " ms"));
                OUT.flush();
                Runtime.getRuntime().halt(3);
            }, "watchdog");
            wd.setDaemon(true);
            wd.start();
            cli.run();
            code = 0;
        } catch (Usage u) {
            OUT.println(obj("error", "Usage", "message", u.getMessage()));
            code = 2;
        } catch (Throwable t) {
            Throwable e = unwrap(t);
            OUT.println(obj("error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()),
                    "chain", chain(t)));
            code = 1;
        }
        OUT.flush();
        System.exit(code);
    }

    /** Strip the wrappers (ExecutionException, CompletionException, plain KafkaException) around the real error. */
    static Throwable unwrap(Throwable t) {
        Throwable e = t;
        while (e.getCause() != null && e.getCause() != e
                && (e instanceof ExecutionException || e instanceof CompletionException
                    || e.getClass() == KafkaException.class)) {
            e = e.getCause();
        }
        return e;
    }

    static List<Object> chain(Throwable t) {
        List<Object> out = new ArrayList<>();
        for (Throwable e = t; e != null && out.size() < 8; e = e.getCause() == e ? null : e.getCause())
            out.add(e.getClass().getName());
        return out;
    }

    // ---------------------------------------------------------------- bytes
    static byte[] b64d(Object o) {
        return o == null ? null : Base64.getDecoder().decode((String) o);
    }

    static String b64e(byte[] b) {
        return b == null ? null : Base64.getEncoder().encodeToString(b);
    }

    // ---------------------------------------------------------------- tiny JSON
    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return new LinkedHashMap<>(m) {
            @Override public String toString() { return Json.write(this); }
        };
    }

    static final class Json {
        final String s;
        int i;

        Json(String s) { this.s = s; }

        static String write(Object o) {
            StringBuilder b = new StringBuilder();
            write(b, o);
            return b.toString();
        }

        static void write(StringBuilder b, Object o) {
            if (o == null) b.append("null");
            else if (o instanceof String) str(b, (String) o);
            else if (o instanceof Number || o instanceof Boolean) b.append(o);
            else if (o instanceof Map) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                    if (!first) b.append(", ");
                    first = false;
                    str(b, String.valueOf(e.getKey()));
                    b.append(": ");
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (o instanceof Collection) {
                b.append('[');
                boolean first = true;
                for (Object x : (Collection<?>) o) {
                    if (!first) b.append(", ");
                    first = false;
                    write(b, x);
                }
                b.append(']');
            } else str(b, o.toString());
        }

        static void str(StringBuilder b, String s) {
            b.append('"');
            for (int k = 0; k < s.length(); k++) {
                char c = s.charAt(k);
                switch (c) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    case '\r': b.append("\\r"); break;
                    case '\t': b.append("\\t"); break;
                    default:
                        if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                        else b.append(c);
                }
            }
            b.append('"');
        }

        Object parse() {
            Object v = value();
            ws();
            if (i != s.length()) throw new IllegalArgumentException("trailing data in JSON at " + i);
            return v;
        }

        void ws() { while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++; }

        Object value() {
            ws();
            if (i >= s.length()) throw new IllegalArgumentException("unexpected end of JSON");
            char c = s.charAt(i);
            if (c == '{') {
                i++;
                Map<String, Object> m = new LinkedHashMap<>();
                ws();
                if (s.charAt(i) == '}') { i++; return m; }
                while (true) {
                    ws();
                    String k = (String) value();
                    ws();
                    expect(':');
                    m.put(k, value());
                    ws();
                    if (s.charAt(i) == ',') { i++; continue; }
                    expect('}');
                    return m;
                }
            }
            if (c == '[') {
                i++;
                List<Object> l = new ArrayList<>();
                ws();
                if (s.charAt(i) == ']') { i++; return l; }
                while (true) {
                    l.add(value());
                    ws();
                    if (s.charAt(i) == ',') { i++; continue; }
                    expect(']');
                    return l;
                }
            }
            if (c == '"') {
                i++;
                StringBuilder b = new StringBuilder();
                while (true) {
                    char d = s.charAt(i++);
                    if (d == '"') return b.toString();
                    if (d != '\\') { b.append(d); continue; }
                    char e = s.charAt(i++);
                    switch (e) {
                        case 'n': b.append('\n'); break;
                        case 'r': b.append('\r'); break;
                        case 't': b.append('\t'); break;
                        case 'b': b.append('\b'); break;
                        case 'f': b.append('\f'); break;
                        case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                        default: b.append(e);
                    }
                }
            }
            if (s.startsWith("null", i)) { i += 4; return null; }
            if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
            int st = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            String num = s.substring(st, i);
            if (num.isEmpty()) throw new IllegalArgumentException("bad JSON at " + st);
            if (num.contains(".") || num.contains("e") || num.contains("E")) return Double.parseDouble(num);
            return Long.parseLong(num);
        }

        void expect(char c) {
            if (i >= s.length() || s.charAt(i) != c) throw new IllegalArgumentException("expected '" + c + "' at " + i);
            i++;
        }
    }
}
