// Sends one deposit through the signing sidecar and does with each answer what docs/clients.md says.
// JDK 11+ only (java.net.http): `java Deposit.java`. Reads SIDECAR_URL (default http://127.0.0.1:8080). Prints the
// answer's transaction_link and exits 0, or exits 1 naming the code of the answer that ended it.
// The JDK has no JSON parser: the three top-level fields read here are picked out of the answer by a pattern; a
// service of yours would use its own JSON library (Jackson, Gson) for the same three fields.
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Optional;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public class Deposit {
  static String env(String name, String fallback) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? fallback : value;
  }

  /** A top-level string field of a flat JSON object, or empty. */
  static Optional<String> stringField(String json, String name) {
    Matcher m = Pattern.compile("\"" + name + "\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"").matcher(json);
    return m.find() ? Optional.of(m.group(1).replace("\\/", "/")) : Optional.empty();
  }

  static boolean retryable(String json) {
    return Pattern.compile("\"retryable\"\\s*:\\s*true").matcher(json).find();
  }

  static String quote(String value) {
    return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  /** Retry-After when the sidecar gives one, else 0.5 s doubling up to 8 s. */
  static long backoffMillis(int attempt, Optional<String> retryAfter) {
    if (retryAfter.isPresent() && retryAfter.get().matches("[0-9]+")) return Long.parseLong(retryAfter.get()) * 1000;
    return Math.min(8000L, 500L << (attempt - 1));
  }

  static int run() throws InterruptedException {
    String sidecarUrl = env("SIDECAR_URL", "http://127.0.0.1:8080").replaceAll("/+$", "");
    int maxAttempts = Integer.parseInt(env("MAX_ATTEMPTS", "8"));
    // Longer than the sidecar's own request deadline (115 s by default): an attempt it is still working on is not cut.
    Duration attemptTimeout = Duration.ofMillis((long) (Double.parseDouble(env("ATTEMPT_TIMEOUT_SECONDS", "130")) * 1000));
    // One key per payment, made (and in a real service stored with the order) before the first attempt: every
    // retry sends it, so the sidecar answers a retry from its record instead of sending a second payment.
    String key = UUID.randomUUID().toString();
    String body = "{\"amount\":" + quote(env("AMOUNT", "100.50"))
        + ",\"currency\":" + quote(env("CURRENCY", "USD"))
        + ",\"gateway\":\"card\""
        + ",\"user_id\":" + quote(env("USER_ID", "u-42"))
        + ",\"invoice_no\":" + quote(env("INVOICE_NO", "INV-" + key.substring(0, 8))) + "}";
    HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    String last = "no answer";
    for (int attempt = 1; attempt <= maxAttempts; attempt++) {
      HttpRequest request = HttpRequest.newBuilder(URI.create(sidecarUrl + "/api/v2/transaction/init"))
          .timeout(attemptTimeout)
          .header("Content-Type", "application/json")
          .header("Idempotency-Key", key)
          .POST(HttpRequest.BodyPublishers.ofString(body))
          .build();
      HttpResponse<String> response;
      try {
        response = client.send(request, HttpResponse.BodyHandlers.ofString());
      } catch (IOException e) {
        // No answer: with the same key this is safe to send again (a replay, or 409 while the first runs).
        last = "no answer (" + e.getClass().getSimpleName() + ")";
        System.err.println("attempt " + attempt + ": " + last);
        Thread.sleep(backoffMillis(attempt, Optional.empty()));
        continue;
      }
      int status = response.statusCode();
      String text = response.body();
      if (status >= 200 && status < 300) {
        Optional<String> link = stringField(text, "transaction_link");
        if (link.isPresent()) {
          System.out.println(link.get());
          return 0;
        }
        System.err.println("deposit answered " + status + " without transaction_link");
        return 1;
      }
      String code = stringField(text, "code").orElse("http." + status);
      // Only the sidecar's own answers marked retryable (nothing was sent; 409: the first is still running) are
      // sent again. outcome_unknown, any other 4xx and every gateway answer are final: the payment may exist.
      if (code.startsWith("sidecar.") && retryable(text)) {
        long wait = backoffMillis(attempt, response.headers().firstValue("Retry-After"));
        System.err.println("attempt " + attempt + ": " + status + " " + code + ", again in " + wait + "ms");
        last = code;
        Thread.sleep(wait);
        continue;
      }
      System.err.println("deposit failed: " + code + " (HTTP " + status + ")");
      return 1;
    }
    System.err.println("deposit failed: " + last + " after " + maxAttempts + " attempts");
    return 1;
  }

  public static void main(String[] args) throws InterruptedException {
    System.exit(run());
  }
}
