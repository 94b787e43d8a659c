// Package testtls makes TLS certificates for test servers: a fresh CA and a
// server certificate it signs for the loopback addresses (127.0.0.1, ::1) and
// localhost, valid from an hour ago for a day, with ECDSA P-256 keys.
//
// It is for tests and the test servers they start (resolve/registrytest,
// cache/redistest); product code does not import it.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// Certs are a test CA and a server certificate it signed.
type Certs struct {
	// CA is the CA's certificate, for clients to trust.
	CA *x509.Certificate
	// Server is the server's chain (its certificate, then the CA's), key and
	// parsed leaf, for a tls.Config's Certificates.
	Server tls.Certificate
}

// New makes a CA named name+" CA" and a server certificate named name, for
// 127.0.0.1, ::1 and localhost.
func New(name string) (*Certs, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Certs{CA: ca, Server: tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key, Leaf: leaf}}, nil
}

// CAPEM is the CA's certificate in PEM, as a client's CA file holds it.
func (c *Certs) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.CA.Raw})
}

// Pool is a certificate pool that trusts the CA only.
func (c *Certs) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(c.CA)
	return pool
}

// ServerPEM is the server's chain and key in PEM, for a server that reads them
// from files (redis-server's --tls-cert-file and --tls-key-file).
func (c *Certs) ServerPEM() (chain, key []byte, err error) {
	for _, der := range c.Server.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	kder, err := x509.MarshalECPrivateKey(c.Server.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, nil, err
	}
	return chain, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}
