// GroupCli: one long-lived consumer-group member on the Apache Kafka Java client (kafka-clients
// 3.9.1, classic group protocol), for odradek's group interop tests (tests/interop/groups/).
// The contract (arguments, JSON-lines events on stdout, "stop" on stdin) is the one written down
// in tests/support/group_member.py.
//
// Build (scripts/install-test-deps.sh does it):
//   javac -d .deps/java/classes -cp '.deps/java/*' tests/clients/java/GroupCli.java
//   java -cp '.deps/java/*:.deps/java/classes' GroupCli --bootstrap H:P --topic T --group G ...

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupCli {
    static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') b.append('\\').append(ch);
            else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
            else b.append(ch);
        }
        return b.append('"').toString();
    }

    static String ints(Collection<Integer> xs) {
        List<Integer> l = new ArrayList<>(xs);
        Collections.sort(l);
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < l.size(); i++) { if (i > 0) b.append(','); b.append(l.get(i)); }
        return b.append(']').toString();
    }

    static synchronized void emit(String json) { OUT.println(json); }

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) o.put(args[i], args[i + 1]);
        String topic = o.get("--topic");
        String assignor = o.getOrDefault("--assignor", "range");
        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("--bootstrap"));
        p.put("group.id", o.get("--group"));
        p.put("client.id", o.getOrDefault("--client-id", "member"));
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("session.timeout.ms", o.getOrDefault("--session-timeout-ms", "6000"));
        p.put("heartbeat.interval.ms", o.getOrDefault("--heartbeat-ms", "1000"));
        p.put("max.poll.interval.ms", "10000");
        p.put("partition.assignment.strategy", switch (assignor) {
            case "range" -> RangeAssignor.class.getName();
            case "roundrobin" -> RoundRobinAssignor.class.getName();
            case "cooperative-sticky" -> CooperativeStickyAssignor.class.getName();
            default -> throw new IllegalArgumentException("assignor " + assignor);
        });
        if (o.containsKey("--instance-id")) p.put("group.instance.id", o.get("--instance-id"));

        final boolean[] stop = {false};
        Thread in = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) if (line.trim().equals("stop")) break;
            } catch (Exception ignored) { }
            synchronized (stop) { stop[0] = true; }
        });
        in.setDaemon(true);
        in.start();

        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            Set<Integer> all = new TreeSet<>();
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                int gen() { try { return c.groupMetadata().generationId(); } catch (Exception e) { return -1; } }
                void ev(String kind, Collection<TopicPartition> tps) {
                    List<Integer> ps = new ArrayList<>();
                    for (TopicPartition tp : tps) ps.add(tp.partition());
                    if (kind.equals("assigned")) all.addAll(ps); else all.removeAll(ps);
                    emit("{\"ev\":\"" + kind + "\",\"partitions\":" + ints(ps) + ",\"all\":" + ints(all) + ",\"gen\":" + gen() + "}");
                }
                public void onPartitionsRevoked(Collection<TopicPartition> tps) { ev("revoked", tps); }
                public void onPartitionsAssigned(Collection<TopicPartition> tps) { ev("assigned", tps); }
                public void onPartitionsLost(Collection<TopicPartition> tps) { ev("revoked", tps); }
            });
            int lastGen = -1;
            while (true) {
                synchronized (stop) { if (stop[0]) break; }
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(200));
                int g = c.groupMetadata().generationId();
                if (g != lastGen) { lastGen = g; emit("{\"ev\":\"gen\",\"gen\":" + g + "}"); }
                if (recs.isEmpty()) continue;
                Map<TopicPartition, OffsetAndMetadata> last = new HashMap<>();
                StringBuilder b = new StringBuilder("{\"ev\":\"records\",\"records\":[");
                boolean first = true;
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    last.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    if (!first) b.append(',');
                    first = false;
                    b.append('[').append(r.partition()).append(',').append(r.offset()).append(',')
                     .append(q(new String(r.value(), StandardCharsets.UTF_8))).append(']');
                }
                try {
                    c.commitSync(last);
                } catch (CommitFailedException | RebalanceInProgressException e) {
                    emit("{\"ev\":\"commit_failed\",\"message\":" + q(e.toString()) + "}");
                    // A partition kept through a cooperative rebalance keeps its position:
                    // rewind it to the first uncommitted record, or those records are skipped.
                    for (TopicPartition tp : recs.partitions()) {
                        if (c.assignment().contains(tp)) c.seek(tp, recs.records(tp).get(0).offset());
                    }
                    continue;
                }
                emit(b.append("]}").toString());
            }
        } catch (Exception e) {
            emit("{\"ev\":\"error\",\"message\":" + q(e.toString()) + "}");
            System.exit(1);
        }
        emit("{\"ev\":\"closed\"}");
        System.exit(0);
    }
}
