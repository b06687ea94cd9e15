import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.security.PasswordEncoder;
import java.util.Optional;
public class PasswordEncoderVector {
  public static void main(String[] a) throws Exception {
    String mode = a[0];
    PasswordEncoder e = PasswordEncoder.encrypting(new Password(a[1]), a[2].isEmpty() ? null : a[2], a[3], Integer.parseInt(a[4]), Integer.parseInt(a[5]));
    if (mode.equals("encode")) System.out.println(e.encode(new Password(a[6])));
    else System.out.println(e.decode(a[6]).value());
  }
}
