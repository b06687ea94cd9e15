// TxnProducerCli: one transactional producer on the Apache Kafka Java client (kafka-clients 3.9.1),
// driven line by line, for odradek's transaction coordinator tests (tests/interop/txn/test_coordinator.py).
//
// Build (scripts/install-test-deps.sh does it):
//   javac -d .deps/java/classes -cp '.deps/java/*' tests/clients/java/TxnProducerCli.java
//   java -cp '.deps/java/*:.deps/java/classes' TxnProducerCli --bootstrap H:P --transactional-id ID
//        [--transaction-timeout-ms MS]
//
// Commands on stdin, one per line; each answered by one JSON line on stdout once done:
//   init                      -> {"op":"init","ok":true}
//   begin                     -> {"op":"begin","ok":true}
//   send TOPIC PARTITION VALUE -> {"op":"send","ok":true,"offset":N}  (waits for the ack)
//   commit | abort            -> {"op":"commit","ok":true}
//   close                     -> {"op":"close","ok":true} and the process exits
// A failure answers {"op":..., "ok":false, "error":"<exception class>", "message":"..."}; the
// producer stays usable for what the client allows after it (abort after an abortable error).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnProducerCli {
    static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, StandardCharsets.UTF_8);

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') b.append('\\').append(ch);
            else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
            else b.append(ch);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) o.put(args[i], args[i + 1]);
        Properties p = new Properties();
        p.put("bootstrap.servers", o.get("--bootstrap"));
        p.put("transactional.id", o.get("--transactional-id"));
        p.put("transaction.timeout.ms", o.getOrDefault("--transaction-timeout-ms", "60000"));
        p.put("max.block.ms", o.getOrDefault("--max-block-ms", "20000"));
        p.put("delivery.timeout.ms", "20000");
        p.put("request.timeout.ms", "10000");
        p.put("linger.ms", "0");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ", 4);
            String op = w[0];
            if (op.isEmpty()) continue;
            try {
                String extra = "";
                switch (op) {
                    case "init": producer.initTransactions(); break;
                    case "begin": producer.beginTransaction(); break;
                    case "send": {
                        RecordMetadata md = producer.send(new ProducerRecord<>(w[1], Integer.parseInt(w[2]), null,
                            w[3].getBytes(StandardCharsets.UTF_8))).get();
                        extra = ",\"offset\":" + md.offset();
                        break;
                    }
                    case "commit": producer.commitTransaction(); break;
                    case "abort": producer.abortTransaction(); break;
                    case "close":
                        producer.close(Duration.ofSeconds(5));
                        OUT.println("{\"op\":\"close\",\"ok\":true}");
                        return;
                    default: throw new IllegalArgumentException("unknown command " + op);
                }
                OUT.println("{\"op\":" + q(op) + ",\"ok\":true" + extra + "}");
            } catch (Exception e) {
                Throwable c = (e instanceof ExecutionException && e.getCause() != null) ? e.getCause() : e;
                OUT.println("{\"op\":" + q(op) + ",\"ok\":false,\"error\":" + q(c.getClass().getSimpleName())
                    + ",\"message\":" + q(String.valueOf(c.getMessage())) + "}");
            }
        }
        producer.close(Duration.ofSeconds(5));
    }
}
