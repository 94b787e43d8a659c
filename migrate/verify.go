package migrate

import (
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
)

// argocd-image-updater (v1.3) verifies cosign signatures with a public key only,
// kept in a Kubernetes Secret: the ImageUpdater's imagesVerification, at the
// resource's spec, an applicationRef or an image (the most specific wins), e.g.
//
//	imagesVerification:
//	  cosignKey:
//	    secretName: org-cosign-pubkey
//	    key: cosign.pub
//
// The resolver names the operator's public key instead (trust.keys), so the
// mapping is a verify-key parameter of that name, and a note asking the operator
// to configure the key under it.

// crVerify is an ImageUpdater's imagesVerification.
type crVerify struct {
	Enabled   *bool `json:"enabled,omitempty"`
	CosignKey *struct {
		SecretName string `json:"secretName"`
		Key        string `json:"key,omitempty"`
	} `json:"cosignKey,omitempty"`
}

// Known field names of imagesVerification and its cosignKey.
var (
	crVerifyFields    = []string{"enabled", "cosignKey"}
	crCosignKeyFields = []string{"secretName", "key"}
)

// verifySetting is an image's signature requirement as argocd-image-updater has
// it: off, or a public key in a Secret.
type verifySetting struct {
	set     bool
	off     bool   // enabled: false
	secret  string // the Secret's name
	key     string // the Secret's field holding the PEM public key
	keyName string // the name of the key here (trust.keys)
	from    string
}

func (v *crVerify) setting(from string) verifySetting {
	if v == nil {
		return verifySetting{}
	}
	s := verifySetting{set: true, from: from, off: v.Enabled != nil && !*v.Enabled}
	if ck := v.CosignKey; ck != nil {
		s.secret, s.key = strings.TrimSpace(ck.SecretName), strings.TrimSpace(ck.Key)
		if s.key == "" {
			s.key = "cosign.pub"
		}
		if s.secret != "" {
			s.keyName = trustKeyName(s.secret, s.key)
		}
	}
	return s
}

// trustKeyName is the name the resolver's trust.keys gives the key of field key
// in Secret secret (not empty): the Secret's name, with the field's name (without
// .pub) when it is not cosign's default cosign.pub; any character a key name does
// not accept becomes "-", a name starts with a letter or digit and is at most 63
// characters.
func trustKeyName(secret, key string) string {
	n := secret
	if key != "cosign.pub" {
		n += "." + strings.TrimSuffix(key, ".pub")
	}
	var b strings.Builder
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_') {
			r = '-'
		}
		b.WriteRune(r)
	}
	s := b.String()
	if c := s[0]; c == '.' || c == '_' || c == '-' {
		s = "k" + s // a key name starts with a letter or digit
	}
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// verifyKeyOf converts a signature requirement: the verify-key value ("" when
// verification is off), or ok false when it cannot be carried over (said as
// Lost): the images it applies to must then be left out, never resolved without
// the signature check they had.
func verifyKeyOf(v verifySetting, c *converted) (name string, ok bool) {
	switch {
	case v.off:
		c.add(Note, "%s: enabled: false: no signature is required, here as there", v.from)
		return "", true
	case v.secret == "":
		c.add(Lost, "%s: names no cosignKey.secretName, so migrate knows no key to require signatures with; the images it applies to are left out of image-list, never resolved without the check they had (name the key with parameter verify-key once the operator has configured it under trust.keys)", v.from)
		return "", false
	case v.keyName == "":
		c.add(Lost, "%s: secret %q: no key name can be made of it; the images it applies to are left out of image-list", v.from, v.secret)
		return "", false
	}
	c.add(Differs, "%s: verify-key %q: the operator must add the public key (field %q of Secret %s, mounted into the sidecar) to the sidecar's configuration under that name: trust: {keys: {%s: /path/to/%s}}; the resolver reads keys from its own configuration, not from Secrets, and renders fail, naming the key, until it is there",
		v.from, v.keyName, v.key, v.secret, v.keyName, v.key)
	c.addOnce(Differs, "signatures: argocd-image-updater checked the signature of the one tag it picked and updated nothing when it was unsigned; the resolver walks the candidates newest first and takes the newest signed one (at most trust.verifyCandidates tried), saying in the skipped annotation why each newer tag was passed over")
	return v.keyName, true
}

// verifyParam is the verify-key parameter of name for an image (alias "") or
// for all images.
func verifyParam(alias, name string) param {
	p := plugin.KeyVerifyKey
	if alias != "" {
		p = alias + "." + p
	}
	return param{name: p, kind: plugin.KindString, str: name}
}
