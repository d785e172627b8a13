// Command receiver is a local webhook endpoint for trying the WEBHOOK
// plugin: it checks each request's X-Herald-Signature against -secret,
// prints the delivery, and answers 204 (401 on a bad signature). It drops a
// request whose Idempotency-Key it has already seen, answering 204 again.
//
//	go run ./receiver -listen 127.0.0.1:9099 -secret "$WEBHOOK_SECRET"
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9099", "address to listen on (keep it on loopback)")
	secret := flag.String("secret", "", "the webhook provider's secret")
	flag.Parse()
	if *secret == "" {
		log.Fatal("receiver: -secret is required")
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	http.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m := hmac.New(sha256.New, []byte(*secret))
		m.Write(body)
		want := "sha256=" + hex.EncodeToString(m.Sum(nil))
		if !hmac.Equal([]byte(want), []byte(r.Header.Get("X-Herald-Signature"))) {
			log.Printf("rejected a request with a bad signature from %s", r.RemoteAddr)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		dup := seen[key]
		seen[key] = true
		mu.Unlock()
		if dup {
			log.Printf("duplicate delivery %s dropped", key)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var p map[string]any
		_ = json.Unmarshal(body, &p)
		out, _ := json.MarshalIndent(p, "", "  ")
		fmt.Printf("delivery %s (idempotency key %s):\n%s\n", r.Header.Get("X-Herald-Delivery"), key, out)
		w.WriteHeader(http.StatusNoContent)
	})
	log.Printf("receiver: listening on http://%s", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}
