package devpeer

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/heraldhq/herald/internal/pushpeer"
)

// Files the TLS peer writes into Config.TLSDir for the push plugin's
// config: the CA to trust (ca_file), a throw-away APNs signing key
// (apns_key = "file:..."), and a VAPID key pair (vapid_public_key and
// vapid_private_key = "file:...").
const (
	FileCA              = "ca.pem"
	FileAPNsKey         = "apns-key.p8"
	FileVAPIDPublicKey  = "vapid-public-key"
	FileVAPIDPrivateKey = "vapid-private-key"
)

// newTLSHandler routes the push services that need TLS:
//
//	POST /webpush/{id}        Web Push (RFC 8030): checks the VAPID JWT and
//	                          decrypts the payload (pushpeer.DevSubscription's keys)
//	POST /3/device/{token}    APNs provider API over HTTP/2: checks the
//	                          provider token's shape and the apns-* headers
func newTLSHandler(log *lineLog) http.Handler {
	wp := pushpeer.NewWebPush("")
	wp.Log = func(line string) { log.printf("webpush", "%s", line) }
	ap := &pushpeer.APNs{AnyKey: true, Log: func(line string) { log.printf("apns", "%s", line) }}
	mux := http.NewServeMux()
	mux.Handle(pushpeer.WebPushPath, wp)
	mux.Handle(pushpeer.APNsPath, ap)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.printf("tls", "404 %s %s: no provider shape at this path", r.Method, r.URL.Path)
		http.NotFound(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		mux.ServeHTTP(w, r)
	})
}

// writeTLSFiles makes a self-signed certificate for the loopback names,
// and writes it, an APNs key and a VAPID key pair into dir (created,
// mode 0700). It returns the server's certificate.
func writeTLSFiles(dir string) (tls.Certificate, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("devpeer: tls dir: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "herald devpeers (development only)"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	apnsPEM, _, err := pushpeer.NewAPNsKey()
	if err != nil {
		return tls.Certificate{}, err
	}
	vapid, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	files := map[string][]byte{
		FileCA:              pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		FileAPNsKey:         apnsPEM,
		FileVAPIDPublicKey:  []byte(base64.RawURLEncoding.EncodeToString(vapid.PublicKey().Bytes())),
		FileVAPIDPrivateKey: []byte(base64.RawURLEncoding.EncodeToString(vapid.Bytes())),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return tls.Certificate{}, fmt.Errorf("devpeer: write %s: %w", name, err)
		}
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
