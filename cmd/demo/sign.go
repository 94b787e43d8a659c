package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// signOptions are the flags of the signing mode (--sign-remote).
type signOptions struct {
	remote  string // --sign-remote: http://HOST[:PORT], https://HOST[:PORT] or HOST[:PORT]
	image   string // --image: REPOSITORY:TAG in that registry
	keyFile string // --key: PEM file of an ECDSA P-256 private key
	keyName string // --key-name: the name the verifier knows the public key by
	layout  string // --layout: referrers, referrers-tag or cosign-tag
}

const (
	signTimeout = time.Minute
	maxKeyFile  = 64 << 10
)

var (
	layouts = []signtest.Layout{signtest.Referrers, signtest.ReferrersTag, signtest.CosignTag}
)

// signRemote signs the image's digest with the key, as `cosign sign --key` would
// in CI, storing a key-mode signature in the layout, and returns what it did in
// one line. The tag is resolved to its digest first (a HEAD).
func signRemote(ctx context.Context, o signOptions) (string, error) {
	layout, err := parseLayout(o.layout)
	if err != nil {
		return "", err
	}
	if !resolve.CheckKeyName(o.keyName) {
		return "", fmt.Errorf("--key-name %q: accepted: a letter or digit, then up to 62 letters, digits, ., _ or - (the name trust.keys gives the public key)", o.keyName)
	}
	key, err := readSigningKey(o.keyFile)
	if err != nil {
		return "", err
	}
	tag, err := parseSignImage(o.remote, o.image)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, signTimeout)
	defer cancel()
	desc, err := remote.Head(tag, remote.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("--image %q: %w", o.image, err)
	}
	sg, err := signtest.New()
	if err != nil {
		return "", err
	}
	if err := sg.SetKey(o.keyName, key); err != nil {
		return "", err
	}
	subject := tag.Context().Digest(desc.Digest.String())
	if err := sg.Sign(ctx, subject, layout, signtest.Spec{Key: o.keyName}); err != nil {
		return "", fmt.Errorf("sign %s: %w", o.image, err)
	}
	return fmt.Sprintf("signed %s (%s) with key %s, stored as %s", o.image, desc.Digest, o.keyName, layout), nil
}

func parseLayout(s string) (signtest.Layout, error) {
	for _, l := range layouts {
		if s == string(l) {
			return l, nil
		}
	}
	return "", fmt.Errorf("--layout %q: accepted: referrers (the OCI 1.1 referrers API), referrers-tag (the sha256-<hex> index), cosign-tag (sha256-<hex>.sig)", s)
}

// parseSignImage is --image in the --sign-remote registry, which must name a tag.
func parseSignImage(registry, image string) (name.Tag, error) {
	host, opts := registry, []name.Option{name.StrictValidation}
	switch {
	case strings.HasPrefix(host, "http://"):
		host, opts = strings.TrimPrefix(host, "http://"), append(opts, name.Insecure)
	case strings.HasPrefix(host, "https://"):
		host = strings.TrimPrefix(host, "https://")
	}
	host = strings.TrimSuffix(host, "/")
	if _, err := name.NewRegistry(host, opts...); err != nil || host == "" || strings.Contains(host, "/") {
		return name.Tag{}, fmt.Errorf("--sign-remote %q: accepted: http://HOST[:PORT], https://HOST[:PORT] or HOST[:PORT]", registry)
	}
	tag, err := name.NewTag(host+"/"+image, opts...)
	if err != nil || image == "" || strings.Contains(image, "@") {
		return name.Tag{}, fmt.Errorf("--image %q: accepted: REPOSITORY:TAG in the --sign-remote registry, e.g. demo/web:1.6.0", image)
	}
	return tag, nil
}

// readSigningKey reads an unencrypted ECDSA P-256 private key from a PEM file
// (PKCS #8 "PRIVATE KEY" or SEC 1 "EC PRIVATE KEY"). Errors name the file, never
// what it holds.
func readSigningKey(path string) (*ecdsa.PrivateKey, error) {
	const accepted = `accepted: a PEM file of an unencrypted ECDSA P-256 private key ("PRIVATE KEY" PKCS #8 or "EC PRIVATE KEY")`
	if path == "" {
		return nil, errors.New("--key \"\": " + accepted)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--key %q: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("--key %q: %w", path, err)
	case len(b) > maxKeyFile:
		return nil, fmt.Errorf("--key %q: larger than %d bytes (%s)", path, maxKeyFile, accepted)
	}
	blk, _ := pem.Decode(b)
	var key any
	switch {
	case blk == nil:
		err = errors.New("no PEM block")
	case blk.Type == "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case blk.Type == "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		err = fmt.Errorf("a PEM %q block", blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("--key %q: %w (%s)", path, err, accepted)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("--key %q: not an ECDSA P-256 key (%s)", path, accepted)
	}
	return ec, nil
}

// signDemo signs demo/web:1.0.0 of the demo registry with a fresh key named ci,
// as a CI pipeline would, and writes the key's public half into dir for the
// resolver's trust.keys; it returns that file.
func signDemo(srv *registrytest.Server, dir string) (string, error) {
	sg, err := signtest.New()
	if err != nil {
		return "", err
	}
	digest, err := srv.DigestE("demo/web", "1.0.0")
	if err != nil {
		return "", err
	}
	subject, err := name.NewDigest(srv.Host+"/demo/web@"+digest, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := sg.Sign(context.Background(), subject, signtest.Referrers, signtest.Spec{Key: "ci"}); err != nil {
		return "", fmt.Errorf("sign demo/web:1.0.0: %w", err)
	}
	pemBytes, err := sg.PublicKeyPEM("ci")
	if err != nil {
		return "", err
	}
	pub := filepath.Join(dir, "ci.pub")
	return pub, os.WriteFile(pub, pemBytes, 0o644)
}
