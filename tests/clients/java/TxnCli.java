// TxnCli: Apache Kafka's Java client (kafka-clients 3.9.1) driving transactions, for odradek's
// transaction tests (tests/interop/txn/test_clients.py, tests/interop/txn/test_faults.py, bench/txn/).
// Built beside KafkaCli (scripts/install-test-deps.sh), same output contract: stdout carries JSON
// lines only, logging goes to stderr, bytes are base64, a client exception is
// {"error": "<simple class name>", "message": ...}.
//
//   java -cp '.deps/java/*:.deps/java/classes' TxnCli --bootstrap HOST:PORT COMMAND ...
//
// Commands:
//   script TOPIC [--transaction-timeout-ms T] [--prop k=v ...]
//       stdin: JSON lines, one operation each, run in order on named producers:
//         {"op": "init", "p": NAME, "transactional_id": ID}   create the producer, initTransactions()
//         {"op": "begin", "p": NAME}                            beginTransaction()
//         {"op": "send", "p": NAME, "partition": N, "value": B64}
//         {"op": "flush", "p": NAME}                            flush(): every send acknowledged
//         {"op": "commit", "p": NAME} / {"op": "abort", "p": NAME}
//         {"op": "sleep", "ms": N}
//         {"op": "close", "p": NAME}
//       -> one line per operation: {"i": index, "op": OP, "ok": true} or {"i", "op", "error", "message"}
//          (a failed operation does not stop the script: the test decides what it expected)
//   describe-transaction ID -> {"transactional_id", "state", "coordinator", "producer_id", "epoch", "partitions", ...}
//   ctp --input IN --output OUT --group G --transactional-id ID [--name NAME] [--max-poll N]
//       [--pause-ms P] [--abort-every K] [--until-end] [--transaction-timeout-ms T]
//       The consume-transform-produce loop: a read_committed consumer of IN (partitions assigned,
//       positions from G's committed offsets) and a transactional producer; per non-empty poll one
//       transaction: every record copied to OUT's partition of the same number with headers
//       txn=NAME:K (K counts this process's transactions), n=<records in the transaction>,
//       src=<partition>:<offset>, then sendOffsetsToTransaction(next offsets, G), then commit.
//       Every --abort-every K-th transaction is aborted instead (after its sends), and the consumer
//       seeks back to where it began, so its records are copied again by a later transaction.
//       Lines: {"txn": "NAME:K", "values": [b64...]} before the commit or abort is asked,
//              {"committed": "NAME:K"} / {"aborted": "NAME:K", "why": ...} once answered,
//              {"fenced": "NAME:K", "error": ...} when the producer is fenced (exit 4),
//              {"done": true, "transactions": N} with --until-end once every partition's position
//              reached the input's last stable offset and nothing is left to copy.
// Common options: --bootstrap HOST:PORT, --timeout-ms T (client timeouts, default 10000),
//                 --deadline-ms D (watchdog), --prop key=value (producer config, repeatable).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnCli {
    static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);

    final List<String> positional = new ArrayList<>();
    final Map<String, String> opts = new HashMap<>();
    final List<String> props = new ArrayList<>();
    static final Set<String> FLAGS = Set.of("--until-end");
    String bootstrap;
    int timeoutMs;

    TxnCli(String[] args) {
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.startsWith("--")) {
                String v;
                if (FLAGS.contains(a)) v = "true";
                else {
                    if (i + 1 >= args.length) throw new IllegalArgumentException("missing value for " + a);
                    v = args[++i];
                }
                if (a.equals("--prop")) props.add(v); else opts.put(a, v);
            } else positional.add(a);
        }
        bootstrap = opts.get("--bootstrap");
        if (bootstrap == null) throw new IllegalArgumentException("--bootstrap HOST:PORT is required");
        timeoutMs = Integer.parseInt(opts.getOrDefault("--timeout-ms", "10000"));
    }

    Properties producerProps(String transactionalId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "odradek-txn-cli");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("transactional.id", transactionalId);
        p.put("linger.ms", "5");
        p.put("request.timeout.ms", String.valueOf(timeoutMs));
        p.put("delivery.timeout.ms", String.valueOf(timeoutMs + 5));
        p.put("max.block.ms", String.valueOf(timeoutMs));
        p.put("transaction.timeout.ms", opts.getOrDefault("--transaction-timeout-ms", "60000"));
        for (String kv : props) {
            int eq = kv.indexOf('=');
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return p;
    }

    void run() throws Exception {
        String cmd = positional.isEmpty() ? "" : positional.get(0);
        switch (cmd) {
            case "script": script(); break;
            case "ctp": ctp(); break;
            case "describe-transaction": describeTransaction(); break;
            default: throw new IllegalArgumentException("unknown command " + cmd);
        }
    }

    // ---------------------------------------------------------------- script
    void script() throws Exception {
        String topic = positional.get(1);
        Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int i = 0;
        try {
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) continue;
                @SuppressWarnings("unchecked")
                Map<String, Object> m = (Map<String, Object>) new KafkaCli.Json(line).parse();
                String op = (String) m.get("op");
                String name = (String) m.get("p");
                try {
                    KafkaProducer<byte[], byte[]> p = producers.get(name);
                    switch (op) {
                        case "init":
                            p = new KafkaProducer<>(producerProps((String) m.get("transactional_id")));
                            producers.put(name, p);
                            p.initTransactions();
                            break;
                        case "begin": p.beginTransaction(); break;
                        case "send": {
                            int partition = ((Number) m.get("partition")).intValue();
                            p.send(new ProducerRecord<>(topic, partition, null, KafkaCli.b64d(m.get("value"))));
                            break;
                        }
                        case "flush": p.flush(); break;
                        case "commit": p.commitTransaction(); break;
                        case "abort": p.abortTransaction(); break;
                        case "sleep": Thread.sleep(((Number) m.get("ms")).longValue()); break;
                        case "close": p.close(Duration.ofMillis(timeoutMs)); producers.remove(name); break;
                        default: throw new IllegalArgumentException("unknown op " + op);
                    }
                    OUT.println(KafkaCli.obj("i", i, "op", op, "ok", true));
                } catch (Exception e) {
                    Throwable u = KafkaCli.unwrap(e);
                    OUT.println(KafkaCli.obj("i", i, "op", op, "error", u.getClass().getSimpleName(),
                            "message", String.valueOf(u.getMessage()), "chain", KafkaCli.chain(e)));
                }
                i++;
            }
        } finally {
            for (KafkaProducer<byte[], byte[]> p : producers.values()) p.close(Duration.ZERO);
        }
    }

    /** Admin.describeTransactions, for a failing test's diagnosis. */
    void describeTransaction() throws Exception {
        String id = positional.get(1);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("default.api.timeout.ms", String.valueOf(timeoutMs));
        p.put("request.timeout.ms", String.valueOf(timeoutMs));
        try (org.apache.kafka.clients.admin.Admin a = org.apache.kafka.clients.admin.Admin.create(p)) {
            org.apache.kafka.clients.admin.TransactionDescription d =
                    a.describeTransactions(List.of(id)).description(id).get();
            List<Object> parts = new ArrayList<>();
            for (TopicPartition tp : d.topicPartitions()) parts.add(tp.toString());
            OUT.println(KafkaCli.obj("transactional_id", id, "state", d.state().toString(), "coordinator", d.coordinatorId(),
                    "producer_id", d.producerId(), "epoch", d.producerEpoch(), "partitions", parts,
                    "started_ms", d.transactionStartTimeMs().isPresent() ? d.transactionStartTimeMs().getAsLong() : null));
        }
    }

    // ---------------------------------------------------------------- consume-transform-produce
    void ctp() throws Exception {
        String input = opts.get("--input"), output = opts.get("--output"), group = opts.get("--group");
        String name = opts.getOrDefault("--name", "ctp");
        int maxPoll = Integer.parseInt(opts.getOrDefault("--max-poll", "20"));
        long pauseMs = Long.parseLong(opts.getOrDefault("--pause-ms", "0"));
        int abortEvery = Integer.parseInt(opts.getOrDefault("--abort-every", "0"));
        boolean untilEnd = opts.containsKey("--until-end");

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("client.id", "odradek-txn-ctp");
        c.put("group.id", group);
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("max.poll.records", String.valueOf(maxPoll));
        c.put("request.timeout.ms", String.valueOf(timeoutMs));
        c.put("default.api.timeout.ms", String.valueOf(Math.max(timeoutMs, 30000)));
        c.put("metadata.max.age.ms", "1000");
        Properties pp = producerProps(opts.get("--transactional-id"));
        pp.put("metadata.max.age.ms", "1000");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            producer.initTransactions(); // fences an earlier instance, aborts its open transaction
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : consumer.partitionsFor(input)) tps.add(new TopicPartition(input, pi.partition()));
            tps.sort(Comparator.comparingInt(TopicPartition::partition));
            consumer.assign(tps);
            ConsumerGroupMetadata meta = new ConsumerGroupMetadata(group);
            int k = 0, committed = 0;
            while (true) {
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
                if (recs.isEmpty()) {
                    if (untilEnd && caughtUp(consumer, tps)) break;
                    continue;
                }
                Map<TopicPartition, Long> start = new HashMap<>();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (TopicPartition tp : recs.partitions()) {
                    List<ConsumerRecord<byte[], byte[]>> l = recs.records(tp);
                    start.put(tp, l.get(0).offset());
                    next.put(tp, new OffsetAndMetadata(l.get(l.size() - 1).offset() + 1));
                }
                String id = name + ":" + (k++);
                List<Object> values = new ArrayList<>();
                boolean abort = abortEvery > 0 && k % abortEvery == 0;
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : recs) {
                        ProducerRecord<byte[], byte[]> out = new ProducerRecord<>(output, r.partition(), null, r.value());
                        out.headers().add(new RecordHeader("txn", id.getBytes(StandardCharsets.UTF_8)));
                        out.headers().add(new RecordHeader("n", String.valueOf(recs.count()).getBytes(StandardCharsets.UTF_8)));
                        out.headers().add(new RecordHeader("src", (r.partition() + ":" + r.offset()).getBytes(StandardCharsets.UTF_8)));
                        producer.send(out);
                        values.add(KafkaCli.b64e(r.value()));
                    }
                    producer.sendOffsetsToTransaction(next, meta);
                    OUT.println(KafkaCli.obj("txn", id, "values", values));
                    if (pauseMs > 0) Thread.sleep(pauseMs);
                    if (abort) {
                        producer.abortTransaction();
                        OUT.println(KafkaCli.obj("aborted", id, "why", "--abort-every"));
                        for (Map.Entry<TopicPartition, Long> e : start.entrySet()) consumer.seek(e.getKey(), e.getValue());
                        continue;
                    }
                    producer.commitTransaction();
                    committed++;
                    OUT.println(KafkaCli.obj("committed", id));
                } catch (ProducerFencedException | InvalidProducerEpochException e) {
                    OUT.println(KafkaCli.obj("fenced", id, "error", e.getClass().getSimpleName()));
                    OUT.flush();
                    Runtime.getRuntime().halt(4);
                } catch (KafkaException e) {
                    // abortable: abort, then reprocess from where this transaction began
                    Throwable u = KafkaCli.unwrap(e);
                    try {
                        producer.abortTransaction();
                    } catch (KafkaException fatal) {
                        OUT.println(KafkaCli.obj("fenced", id, "error", KafkaCli.unwrap(fatal).getClass().getSimpleName()));
                        OUT.flush();
                        Runtime.getRuntime().halt(4);
                    }
                    OUT.println(KafkaCli.obj("aborted", id, "why", u.getClass().getSimpleName() + ": " + u.getMessage()));
                    for (Map.Entry<TopicPartition, Long> e2 : start.entrySet()) consumer.seek(e2.getKey(), e2.getValue());
                }
            }
            OUT.println(KafkaCli.obj("done", true, "transactions", committed));
        }
    }

    /** Every position at the input's end (read_committed: the last stable offset). */
    static boolean caughtUp(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> tps) {
        Map<TopicPartition, Long> end = consumer.endOffsets(tps);
        for (TopicPartition tp : tps) if (consumer.position(tp) < end.get(tp)) return false;
        return true;
    }

    public static void main(String[] args) {
        int code;
        try {
            TxnCli cli = new TxnCli(args);
            long deadline = Long.parseLong(cli.opts.getOrDefault("--deadline-ms", "600000"));
            Thread wd = new Thread(() -> {
                try { Thread.sleep(deadline); } catch (InterruptedException e) { return; }
                OUT.println(KafkaCli.obj("error", "WatchdogTimeout", "message", "TxnCli did not finish within " + deadline + " ms"));
                OUT.flush();
                Runtime.getRuntime().halt(3);
            }, "watchdog");
            wd.setDaemon(true);
            wd.start();
            cli.run();
            code = 0;
        } catch (Throwable t) {
            Throwable e = KafkaCli.unwrap(t);
            OUT.println(KafkaCli.obj("error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()),
                    "chain", KafkaCli.chain(t)));
            code = 1;
        }
        OUT.flush();
        System.exit(code);
    }
}
