package signtest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	sigsig "github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// TrustedRootTarget is the TUF target name Sigstore publishes its trusted root
// under.
const TrustedRootTarget = "trusted_root.json"

// TUFRepo is a TUF repository on disk laid out as Sigstore's: root, timestamp,
// snapshot and targets metadata, each role signed by an ed25519 key of its own,
// consistent snapshots (<version>.root.json, <version>.snapshot.json,
// <version>.targets.json, targets/<sha256>.<name>) and timestamp.json. Serve Dir
// over HTTP (http.FileServer) as the repository's base URL. It is not safe for
// concurrent use.
type TUFRepo struct {
	// Dir is the repository's directory.
	Dir       string
	keys      map[string]sigsig.Signer
	root      *metadata.Metadata[metadata.RootType]
	targets   *metadata.Metadata[metadata.TargetsType]
	snapshot  *metadata.Metadata[metadata.SnapshotType]
	timestamp *metadata.Metadata[metadata.TimestampType]
}

// NewTUFRepo makes a repository in dir with root version 1 (valid for a year) and
// no targets yet: Publish adds them.
func NewTUFRepo(dir string) (*TUFRepo, error) {
	if err := os.MkdirAll(filepath.Join(dir, "targets"), 0o755); err != nil {
		return nil, fmt.Errorf("signtest: tuf repository: %w", err)
	}
	r := &TUFRepo{Dir: dir, keys: map[string]sigsig.Signer{}, root: metadata.Root(time.Now().AddDate(1, 0, 0).UTC())}
	for _, role := range []string{metadata.ROOT, metadata.TIMESTAMP, metadata.SNAPSHOT, metadata.TARGETS} {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("signtest: tuf key: %w", err)
		}
		key, err := metadata.KeyFromPublicKey(pub)
		if err != nil {
			return nil, fmt.Errorf("signtest: tuf key: %w", err)
		}
		if err := r.root.Signed.AddKey(key, role); err != nil {
			return nil, fmt.Errorf("signtest: tuf key: %w", err)
		}
		if r.keys[role], err = sigsig.LoadSigner(priv, crypto.Hash(0)); err != nil {
			return nil, fmt.Errorf("signtest: tuf key: %w", err)
		}
	}
	if err := write(r, r.root, metadata.ROOT, fmt.Sprintf("%d.root.json", r.root.Signed.Version)); err != nil {
		return nil, err
	}
	expires := time.Now().AddDate(0, 0, 7).UTC()
	r.targets = metadata.Targets(expires)
	r.targets.Signed.Version = 0 // Publish makes version 1
	r.snapshot = metadata.Snapshot(expires)
	r.snapshot.Signed.Version = 0
	r.timestamp = metadata.Timestamp(expires)
	r.timestamp.Signed.Version = 0
	return r, nil
}

// RootJSON is the first signed root metadata (1.root.json), what a client starts
// its trust from (what an operator gives as trust.tufRoot).
func (r *TUFRepo) RootJSON() ([]byte, error) {
	return os.ReadFile(filepath.Join(r.Dir, "1.root.json"))
}

// Publish adds or replaces the target name with content and publishes new
// targets, snapshot and timestamp versions, valid for a week.
func (r *TUFRepo) Publish(name string, content []byte) error {
	tf, err := metadata.TargetFile().FromBytes(name, content, "sha256")
	if err != nil {
		return fmt.Errorf("signtest: tuf target %s: %w", name, err)
	}
	if err := os.WriteFile(r.TargetPath(name, tf), content, 0o644); err != nil {
		return fmt.Errorf("signtest: tuf target %s: %w", name, err)
	}
	r.targets.Signed.Targets[name] = tf
	r.targets.Signed.Version++
	if err := write(r, r.targets, metadata.TARGETS, fmt.Sprintf("%d.targets.json", r.targets.Signed.Version)); err != nil {
		return err
	}
	r.snapshot.Signed.Meta["targets.json"] = metadata.MetaFile(r.targets.Signed.Version)
	r.snapshot.Signed.Version++
	if err := write(r, r.snapshot, metadata.SNAPSHOT, fmt.Sprintf("%d.snapshot.json", r.snapshot.Signed.Version)); err != nil {
		return err
	}
	return r.PublishTimestamp(time.Now().AddDate(0, 0, 7))
}

// PublishTimestamp publishes a new timestamp version of the current snapshot
// that expires at expires (in the past: an expired timestamp).
func (r *TUFRepo) PublishTimestamp(expires time.Time) error {
	r.timestamp.Signed.Meta["snapshot.json"] = metadata.MetaFile(r.snapshot.Signed.Version)
	r.timestamp.Signed.Version++
	r.timestamp.Signed.Expires = expires.UTC()
	return write(r, r.timestamp, metadata.TIMESTAMP, "timestamp.json")
}

// RotateTimestampKey publishes the next root version, signed by the root key,
// with a new timestamp key, and a timestamp signed by it: a client that has not
// taken the new root refuses the new timestamp.
func (r *TUFRepo) RotateTimestampKey() error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("signtest: tuf key: %w", err)
	}
	key, err := metadata.KeyFromPublicKey(pub)
	if err != nil {
		return fmt.Errorf("signtest: tuf key: %w", err)
	}
	for _, id := range slices.Clone(r.root.Signed.Roles[metadata.TIMESTAMP].KeyIDs) {
		if err := r.root.Signed.RevokeKey(id, metadata.TIMESTAMP); err != nil {
			return fmt.Errorf("signtest: tuf key: %w", err)
		}
	}
	if err := r.root.Signed.AddKey(key, metadata.TIMESTAMP); err != nil {
		return fmt.Errorf("signtest: tuf key: %w", err)
	}
	if r.keys[metadata.TIMESTAMP], err = sigsig.LoadSigner(priv, crypto.Hash(0)); err != nil {
		return fmt.Errorf("signtest: tuf key: %w", err)
	}
	r.root.Signed.Version++
	if err := write(r, r.root, metadata.ROOT, fmt.Sprintf("%d.root.json", r.root.Signed.Version)); err != nil {
		return err
	}
	return r.PublishTimestamp(time.Now().AddDate(0, 0, 7))
}

// CurrentTargetPath is where the current version of target name is stored
// (targets/<sha256>.<name>); "" when it is not published.
func (r *TUFRepo) CurrentTargetPath(name string) string {
	tf, ok := r.targets.Signed.Targets[name]
	if !ok {
		return ""
	}
	return r.TargetPath(name, tf)
}

// TargetPath is where a version of a target is stored.
func (r *TUFRepo) TargetPath(name string, tf *metadata.TargetFiles) string {
	return filepath.Join(r.Dir, "targets", hex.EncodeToString(tf.Hashes["sha256"])+"."+name)
}

// write signs md with role's key and writes it to file.
func write[T metadata.Roles](r *TUFRepo, md *metadata.Metadata[T], role, file string) error {
	md.ClearSignatures()
	if _, err := md.Sign(r.keys[role]); err != nil {
		return fmt.Errorf("signtest: tuf %s: %w", role, err)
	}
	if err := md.ToFile(filepath.Join(r.Dir, file), true); err != nil {
		return fmt.Errorf("signtest: tuf %s: %w", role, err)
	}
	return nil
}
