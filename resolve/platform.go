package resolve

import (
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Platform is an os/arch[/variant] triple, normalised so that equal platforms compare
// equal (arm64 == arm64/v8, amd64 has no variant v1, ...). Its JSON and YAML form is
// the string os/arch[/variant] (MarshalText), which round-trips.
type Platform struct {
	OS      string
	Arch    string
	Variant string
}

const platformAccepted = "os/arch[/variant], e.g. linux/amd64, linux/arm64, linux/arm/v7"

// ParsePlatform parses "linux/arm64" or "linux/arm/v7".
func ParsePlatform(s string) (Platform, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Platform{}, &InputError{Field: string(FieldPlatforms), Policy: FieldPlatforms, Value: s, Accepted: platformAccepted}
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, " \t,:") || strings.ToLower(p) != p {
			return Platform{}, &InputError{Field: string(FieldPlatforms), Policy: FieldPlatforms, Value: s, Accepted: platformAccepted}
		}
	}
	p := Platform{OS: parts[0], Arch: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p.normalise(), nil
}

// ParsePlatforms parses a comma-separated list; empty items are ignored. The result
// is sorted and free of duplicates.
func ParsePlatforms(list ...string) ([]Platform, error) {
	var out []Platform
	for _, item := range list {
		for _, s := range strings.Split(item, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			p, err := ParsePlatform(s)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return SortPlatforms(out), nil
}

// SortPlatforms sorts and de-duplicates platforms in place and returns the result.
func SortPlatforms(ps []Platform) []Platform {
	slices.SortFunc(ps, func(a, b Platform) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(ps)
}

// PlatformOf converts a registry platform into a normalised Platform.
func PlatformOf(p *v1.Platform) Platform {
	if p == nil {
		return Platform{}
	}
	return Platform{OS: p.OS, Arch: p.Architecture, Variant: p.Variant}.normalise()
}

func (p Platform) normalise() Platform {
	switch {
	case p.Arch == "arm64" && p.Variant == "v8":
		p.Variant = ""
	case p.Arch == "amd64" && p.Variant == "v1":
		p.Variant = ""
	case p.Arch == "aarch64":
		p.Arch, p.Variant = "arm64", ""
	case p.Arch == "x86_64":
		p.Arch = "amd64"
	}
	return p
}

// IsUnknown reports whether this is an attestation entry (unknown/unknown), which is
// not a runnable platform.
func (p Platform) IsUnknown() bool { return p.OS == "unknown" || p.Arch == "unknown" }

// Satisfies reports whether an image built for p runs where req is required. A
// required platform without a variant accepts any variant (linux/arm accepts
// linux/arm/v7); a required variant must match exactly.
func (p Platform) Satisfies(req Platform) bool {
	if p.OS != req.OS || p.Arch != req.Arch {
		return false
	}
	return req.Variant == "" || req.Variant == p.Variant
}

func (p Platform) String() string {
	s := p.OS + "/" + p.Arch
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// MarshalText writes the os/arch[/variant] form.
func (p Platform) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses the os/arch[/variant] form.
func (p *Platform) UnmarshalText(b []byte) error {
	q, err := ParsePlatform(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// missingPlatforms returns the required platforms that have is missing.
func missingPlatforms(have, required []Platform) []Platform {
	var missing []Platform
	for _, r := range required {
		if !slices.ContainsFunc(have, func(h Platform) bool { return h.Satisfies(r) }) {
			missing = append(missing, r)
		}
	}
	return missing
}

// PlatformStrings renders platforms as strings.
func PlatformStrings(ps []Platform) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func joinPlatforms(ps []Platform) string {
	if len(ps) == 0 {
		return "none"
	}
	return strings.Join(PlatformStrings(ps), ",")
}
