// Sends one deposit through the signing sidecar and does with each answer what docs/clients.md says.
// Standard library only: `go run deposit.go`. Reads SIDECAR_URL (default http://127.0.0.1:8080). Prints the
// answer's transaction_link and exits 0, or exits 1 naming the code of the answer that ended it.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var digits = regexp.MustCompile(`^[0-9]+$`)

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

func envNumber(name string, fallback float64) float64 {
	if value, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil {
		return value
	}
	return fallback
}

// newKey makes a random (version 4) UUID.
func newKey() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// backoff is Retry-After when the sidecar gives one, else 0.5 s doubling up to 8 s.
func backoff(attempt int, retryAfter string) time.Duration {
	if digits.MatchString(retryAfter) {
		seconds, _ := strconv.Atoi(retryAfter)
		return time.Duration(seconds) * time.Second
	}
	wait := 500 * time.Millisecond << (attempt - 1)
	if wait > 8*time.Second {
		wait = 8 * time.Second
	}
	return wait
}

type answer struct {
	TransactionLink *string `json:"transaction_link"`
	Code            *string `json:"code"`
	Retryable       *bool   `json:"retryable"`
}

func run() int {
	sidecarURL := strings.TrimRight(env("SIDECAR_URL", "http://127.0.0.1:8080"), "/")
	maxAttempts := int(envNumber("MAX_ATTEMPTS", 8))
	// Longer than the sidecar's own request deadline (115 s by default): an attempt it is still working on is not cut.
	client := &http.Client{Timeout: time.Duration(envNumber("ATTEMPT_TIMEOUT_SECONDS", 130) * float64(time.Second))}
	// One key per payment, made (and in a real service stored with the order) before the first attempt: every
	// retry sends it, so the sidecar answers a retry from its record instead of sending a second payment.
	key := newKey()
	body, _ := json.Marshal(map[string]string{
		"amount":     env("AMOUNT", "100.50"),
		"currency":   env("CURRENCY", "USD"),
		"gateway":    "card",
		"user_id":    env("USER_ID", "u-42"),
		"invoice_no": env("INVOICE_NO", "INV-"+key[:8]),
	})
	last := "no answer"
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		req, err := http.NewRequest(http.MethodPost, sidecarURL+"/api/v2/transaction/init", bytes.NewReader(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "deposit failed:", err)
			return 1
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		res, err := client.Do(req)
		var text []byte
		if err == nil {
			text, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		if err != nil {
			// No answer: with the same key this is safe to send again (a replay, or 409 while the first runs).
			last = "no answer (" + err.Error() + ")"
			fmt.Fprintf(os.Stderr, "attempt %d: %s\n", attempt, last)
			time.Sleep(backoff(attempt, ""))
			continue
		}
		var got answer
		_ = json.Unmarshal(text, &got) // not a JSON object: a gateway answer of its own kind, fields stay nil
		if res.StatusCode >= 200 && res.StatusCode < 300 {
			if got.TransactionLink != nil {
				fmt.Println(*got.TransactionLink)
				return 0
			}
			fmt.Fprintf(os.Stderr, "deposit answered %d without transaction_link\n", res.StatusCode)
			return 1
		}
		code := fmt.Sprintf("http.%d", res.StatusCode)
		if got.Code != nil {
			code = *got.Code
		}
		// Only the sidecar's own answers marked retryable (nothing was sent; 409: the first is still running) are
		// sent again. outcome_unknown, any other 4xx and every gateway answer are final: the payment may exist.
		if strings.HasPrefix(code, "sidecar.") && got.Retryable != nil && *got.Retryable {
			wait := backoff(attempt, res.Header.Get("Retry-After"))
			fmt.Fprintf(os.Stderr, "attempt %d: %d %s, again in %s\n", attempt, res.StatusCode, code, wait)
			last = code
			time.Sleep(wait)
			continue
		}
		fmt.Fprintf(os.Stderr, "deposit failed: %s (HTTP %d)\n", code, res.StatusCode)
		return 1
	}
	fmt.Fprintf(os.Stderr, "deposit failed: %s after %d attempts\n", last, maxAttempts)
	return 1
}

func main() {
	os.Exit(run())
}
