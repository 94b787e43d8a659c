package signature

import (
	"fmt"
	"io"
	"os"

	"github.com/sigstore/sigstore-go/pkg/root"
)

// Bounds on the files the operator names.
const (
	maxRootFile = 16 << 20
	// maxTUFRootFile is the TUF client's own bound on a root.json.
	maxTUFRootFile = 512000
)

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
