package image

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// BundledCACerts is the PEM bundle of Mozilla's NSS roots trusted for TLS servers, as
// golang.org/x/crypto/x509roots/fallback carries them: pinned by go.mod, so every
// machine builds the same image (the build machine's /etc/ssl/certs differs between
// distributions and days). Roots that NSS trusts only with an extra constraint (a
// distrust-after date, which a PEM bundle cannot express) are left out: certificates
// they issued fail verification rather than being trusted beyond what NSS trusts.
func BundledCACerts() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if _, err := x509.ParseCertificate(root.Certificate); err != nil {
			return nil, fmt.Errorf("image: bundled CA certificate %d: %w", n, err)
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("image: golang.org/x/crypto/x509roots/fallback/bundle holds no unconstrained root")
	}
	return buf.Bytes(), nil
}

// ReadCACerts reads a PEM bundle of CA certificates (for Options.CACerts) and checks
// that it holds at least one certificate and nothing else.
func ReadCACerts(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image: CA certificates: %w", err)
	}
	rest, n := data, 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("image: CA certificates %s: block %d is a %q; only CERTIFICATE blocks are accepted", path, n+1, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("image: CA certificates %s: certificate %d: %w", path, n+1, err)
		}
		n++
	}
	if n == 0 || len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("image: CA certificates %s: %d PEM certificates, then %d bytes that are not PEM; want a PEM bundle such as /etc/ssl/certs/ca-certificates.crt", path, n, len(bytes.TrimSpace(rest)))
	}
	return data, nil
}
