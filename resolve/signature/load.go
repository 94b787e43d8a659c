package signature

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/sigstore/sigstore-go/pkg/root"
)

// Bounds on the files the operator names.
const (
	maxKeyFile  = 64 << 10
	maxRootFile = 16 << 20
	// maxTUFRootFile is the TUF client's own bound on a root.json.
	maxTUFRootFile = 512000
)

// LoadPublicKeys reads the operator's named public keys (trust.keys: name -> PEM
// file, as `cosign generate-key-pair` writes cosign.pub: a "PUBLIC KEY" block of
// an ECDSA, RSA or Ed25519 key). An error names the key, the file and what is
// accepted.
func LoadPublicKeys(files map[string]string) (map[string]crypto.PublicKey, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make(map[string]crypto.PublicKey, len(files))
	for _, n := range names {
		pub, err := loadPublicKey(files[n])
		if err != nil {
			return nil, fmt.Errorf("trust.keys.%s: %s: %w (accepted: a PEM \"PUBLIC KEY\" block of an ECDSA, RSA or Ed25519 key, as cosign.pub)", n, files[n], err)
		}
		out[n] = pub
	}
	return out, nil
}

func loadPublicKey(path string) (crypto.PublicKey, error) {
	b, err := readBounded(path, maxKeyFile)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	switch {
	case blk == nil:
		return nil, fmt.Errorf("no PEM block")
	case blk.Type != "PUBLIC KEY":
		return nil, fmt.Errorf("a PEM %q block, not \"PUBLIC KEY\"", blk.Type)
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a public key: %w", err)
	}
	return pub, nil
}

// LoadTrustedRoot reads a Sigstore trusted root (trust.trustedRoot, a
// trusted_root.json as `cosign trusted-root create` or Sigstore's TUF repository
// give it). An error names the file.
func LoadTrustedRoot(path string) (root.TrustedMaterial, error) {
	b, err := readBounded(path, maxRootFile)
	if err != nil {
		return nil, fmt.Errorf("trust.trustedRoot: %s: %w", path, err)
	}
	tr, err := root.NewTrustedRootFromJSON(b)
	if err != nil {
		return nil, fmt.Errorf("trust.trustedRoot: %s: not a Sigstore trusted root (trusted_root.json): %w", path, err)
	}
	return tr, nil
}

// ReadTUFRoot reads the TUF root.json trust in a TUF repository starts from
// (trust.tufRoot); NewTUFRoot checks its signatures. An error names the file.
func ReadTUFRoot(path string) ([]byte, error) {
	b, err := readBounded(path, maxTUFRootFile)
	if err != nil {
		return nil, fmt.Errorf("trust.tufRoot: %s: %w", path, err)
	}
	return b, nil
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}
