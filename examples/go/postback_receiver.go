// The application's postback webhook: receives what the signing sidecar forwards (docs/postbacks.md).
// Standard library only: `go run postback_receiver.go`. Each postback is the gateway's plain JSON (transaction_id,
// status, ...), signed by the sidecar with Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature).
// This receiver
//   - verifies the signature (HMAC-SHA256 keyed with the bytes after `whsec_` of POSTBACK_WEBHOOK_SECRET_FILE,
//     compared in constant time) and that the timestamp is within 5 minutes: anything else is answered 401;
//   - stores the status, durably, before it answers 2xx: a 2xx tells the sidecar the postback is done with;
//   - deduplicates by webhook-id (the postback's X-Postback-Id, the same on every attempt and redelivery): a
//     postback seen before is answered 200 again and not stored twice.
//
// Settings: POSTBACK_WEBHOOK_SECRET_FILE (required), HOST (127.0.0.1), PORT (3000), POSTBACK_STORE
// (postbacks.jsonl: one JSON line per postback, appended and fsynced; a real service writes to its database).
package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	tolerance    = 5 * time.Minute
	maxBodyBytes = 1 << 20
)

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

// store holds the ids already stored, loaded from the file at start; one writer at a time.
type store struct {
	mu   sync.Mutex
	path string
	seen map[string]bool
}

type record struct {
	WebhookID     string `json:"webhook_id"`
	TransactionID any    `json:"transaction_id"`
	Status        any    `json:"status"`
	ReceivedAt    int64  `json:"received_at"`
}

func openStore(path string) (*store, error) {
	s := &store{path: path, seen: map[string]bool{}}
	file, err := os.Open(path)
	if os.IsNotExist(err) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	defer file.Close()
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		var r record
		if json.Unmarshal(lines.Bytes(), &r) == nil {
			s.seen[r.WebhookID] = true
		}
	}
	return s, lines.Err()
}

// save stores the postback once; false for one stored before.
func (s *store) save(id string, postback map[string]any) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[id] {
		return false, nil
	}
	line, err := json.Marshal(record{id, postback["transaction_id"], postback["status"], time.Now().Unix()})
	if err != nil {
		return false, err
	}
	file, err := os.OpenFile(s.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	defer file.Close()
	if _, err := file.Write(append(line, '\n')); err != nil {
		return false, err
	}
	if err := file.Sync(); err != nil {
		return false, err
	}
	s.seen[id] = true
	return true, nil
}

// verified: one of the `v1,` signatures is the HMAC of `id.timestamp.body`, and the timestamp is recent.
func verified(key []byte, id, timestamp, signatures string, body []byte) bool {
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if id == "" || err != nil || signatures == "" {
		return false
	}
	if age := time.Since(time.Unix(seconds, 0)); age > tolerance || age < -tolerance {
		return false
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.", id, timestamp)
	mac.Write(body)
	expected := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, candidate := range strings.Split(signatures, " ") {
		version, value, found := strings.Cut(candidate, ",")
		if found && version == "v1" && hmac.Equal([]byte(value), expected) {
			return true
		}
	}
	return false
}

func main() {
	secretText, err := os.ReadFile(os.Getenv("POSTBACK_WEBHOOK_SECRET_FILE"))
	if err != nil {
		log.Fatal("POSTBACK_WEBHOOK_SECRET_FILE: ", err)
	}
	secret := strings.TrimSpace(string(secretText))
	if !strings.HasPrefix(secret, "whsec_") {
		log.Fatal("POSTBACK_WEBHOOK_SECRET_FILE must hold a whsec_ secret")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		log.Fatal("POSTBACK_WEBHOOK_SECRET_FILE: ", err)
	}
	postbacks, err := openStore(env("POSTBACK_STORE", "postbacks.jsonl"))
	if err != nil {
		log.Fatal("POSTBACK_STORE: ", err)
	}
	answer := func(w http.ResponseWriter, status int, text string) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		fmt.Fprintln(w, text)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			answer(w, http.StatusMethodNotAllowed, "POST only")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		if err != nil {
			answer(w, http.StatusRequestEntityTooLarge, "too large")
			return
		}
		id := r.Header.Get("webhook-id")
		if !verified(key, id, r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body) {
			answer(w, http.StatusUnauthorized, "signature refused")
			return
		}
		var postback map[string]any
		if err := json.Unmarshal(body, &postback); err != nil || postback == nil {
			answer(w, http.StatusBadRequest, "not a JSON object")
			return
		}
		// Only once the status is stored: an error here answers 500, and the sidecar delivers it again.
		stored, err := postbacks.save(id, postback)
		if err != nil {
			log.Print("storing postback: ", err)
			answer(w, http.StatusInternalServerError, "not stored")
			return
		}
		if stored {
			answer(w, http.StatusOK, "stored")
		} else {
			answer(w, http.StatusOK, "already stored")
		}
	})
	listener, err := net.Listen("tcp", net.JoinHostPort(env("HOST", "127.0.0.1"), env("PORT", "3000")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", listener.Addr())
	log.Fatal(http.Serve(listener, handler))
}
