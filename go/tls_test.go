package runstore_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	runstore "github.com/runstore/runstore/go"
)

// writeServerCertificate makes a CA and a certificate for 127.0.0.1 signed
// by it; returns the CA pool and the files of the server's pair.
func writeServerCertificate(t *testing.T, dir string) (*x509.CertPool, string, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runstore test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	serverKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "runstore"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &serverKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(serverKey)
	certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}))
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, certFile, keyFile
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLSAndTokens: a server with TLS and an auth file takes the client's
// CA-verified connection and bearer token; a token file rotated to another
// principal's token is used from the next call; a wrong token is
// UNAUTHENTICATED, and an unverifiable certificate fails the handshake, and
// neither is retried.
func TestTLSAndTokens(t *testing.T) {
	server := newOwnServer(t)
	dir := t.TempDir()
	pool, certFile, keyFile := writeServerCertificate(t, dir)
	tokens := []string{"first-token-0123456789", "second-token-0123456789"}
	auth := ""
	for i, token := range tokens {
		sum := sha256.Sum256([]byte(token))
		auth += "[[principal]]\nname = \"worker-" + string(rune('a'+i)) + "\"\nrole = \"worker\"\ntoken_sha256 = \"" + hex.EncodeToString(sum[:]) + "\"\n\n"
	}
	authFile := filepath.Join(dir, "auth.toml")
	writeFile(t, authFile, []byte(auth))
	server.args = []string{"--tls-cert", certFile, "--tls-key", keyFile, "--auth-file", authFile}
	server.start()
	ctx := testContext(t)
	verified := runstore.WithTLS(&tls.Config{RootCAs: pool})

	tokenFile := filepath.Join(dir, "worker.token")
	writeFile(t, tokenFile, []byte(tokens[0]+"\n"))
	c := dial2(t, server.target, verified, runstore.WithTokenFile(tokenFile))
	if _, err := c.LoadSessionStatus(ctx, "none"); !errors.Is(err, runstore.ErrSessionNotFound) {
		t.Fatalf("with the first token: %v", err)
	}
	writeFile(t, tokenFile, []byte(tokens[1]+"\n"))
	if _, err := c.LoadSessionStatus(ctx, "none"); !errors.Is(err, runstore.ErrSessionNotFound) {
		t.Fatalf("with the rotated token: %v", err)
	}
	writeFile(t, tokenFile, []byte("revoked-or-mistyped\n"))
	_, err := c.LoadSessionStatus(ctx, "none")
	expectReason(t, err, runstore.ErrUnauthenticated, runstore.ErrAccessDenied, codes.Unauthenticated)

	seen := &refusals{}
	untrusted := dial2(t, server.target, runstore.WithTLS(&tls.Config{RootCAs: x509.NewCertPool()}),
		runstore.WithToken(tokens[0]), runstore.WithRefusalHook(seen.hook), runstore.WithRetry(fast))
	_, err = untrusted.LoadSessionStatus(ctx, "none")
	var failure *runstore.Error
	if !errors.As(err, &failure) || failure.Retryable() || !errors.Is(err, runstore.ErrRPC) {
		t.Fatalf("an unverifiable server certificate: %v", err)
	}
	if got := seen.decisions(); len(got) != 1 || got[0] != runstore.NotRetryable {
		t.Fatalf("refusals: %v", got)
	}
}

// dial2 is Dial with the transport chosen by the test.
func dial2(t *testing.T, target string, opts ...runstore.Option) *runstore.Client {
	t.Helper()
	client, err := runstore.Dial(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}
