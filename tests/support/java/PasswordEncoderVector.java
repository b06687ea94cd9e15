// Kafka's own PasswordEncoder, run against a Kafka line's jars (kafka-server-common 3.9):
//   java -cp '<libs>/*' PasswordEncoderVector.java encode|decode SECRET KEYFACTORY CIPHER KEYLENGTH ITERATIONS VALUE
// encode prints VALUE encoded (KEYFACTORY "" for Kafka's default); decode prints the password VALUE holds.
// It made the vectors of tests/unit/broker/security/test_password_encoder.py, and
// tests/reference/test_password_encoder_reference.py decodes odradek's encodings with it.
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.security.PasswordEncoder;

public class PasswordEncoderVector {
    public static void main(String[] a) throws Exception {
        PasswordEncoder e = PasswordEncoder.encrypting(new Password(a[1]), a[2].isEmpty() ? null : a[2], a[3],
            Integer.parseInt(a[4]), Integer.parseInt(a[5]));
        if (a[0].equals("encode"))
            System.out.println(e.encode(new Password(a[6])));
        else
            System.out.println(e.decode(a[6]).value());
    }
}
