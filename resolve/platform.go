package resolve

import (
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Platform is an os/arch[/variant] triple. Architecture aliases are normalised
// (aarch64 is arm64, x86_64 is amd64). A platform an image has is written without
// its architecture's default variant (arm64/v8 is arm64, amd64/v1 is amd64); a
// required platform keeps the variant it was written with, because a required
// variant is matched exactly (see Satisfies). Its JSON and YAML form is the string
// os/arch[/variant] (MarshalText), which round-trips.
type Platform struct {
	OS      string
	Arch    string
	Variant string
}

const platformAccepted = "os/arch[/variant], e.g. linux/amd64, linux/arm64, linux/arm/v7"

// ParsePlatform parses a required platform: "linux/arm64", "linux/arm64/v8" or
// "linux/arm/v7". The variant is kept as written: linux/arm64 accepts every arm64
// variant, linux/arm64/v8 only v8 (or an image that names no variant, v8 being
// arm64's default).
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
	p = p.normaliseArch()
	// A misspelt platform would match no image and show up only as "no tag
	// qualifies": name what is wrong instead.
	if !slices.Contains(knownOS, p.OS) {
		return Platform{}, &InputError{Field: string(FieldPlatforms), Policy: FieldPlatforms, Value: s,
			Accepted: "an operating system Go and OCI images name (" + strings.Join(knownOS, ", ") + ")"}
	}
	if !slices.Contains(knownArch, p.Arch) {
		return Platform{}, &InputError{Field: string(FieldPlatforms), Policy: FieldPlatforms, Value: s,
			Accepted: "an architecture Go and OCI images name (" + strings.Join(knownArch, ", ") + ")"}
	}
	return p, nil
}

// knownOS and knownArch are the values of GOOS and GOARCH (go/build's lists), the
// vocabulary of an OCI image's platform.
var (
	knownOS = []string{"aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js",
		"linux", "nacl", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos"}
	knownArch = []string{"386", "amd64", "amd64p32", "arm", "arm64", "arm64be", "armbe", "loong64", "mips",
		"mips64", "mips64le", "mips64p32", "mips64p32le", "mipsle", "ppc", "ppc64", "ppc64le", "riscv",
		"riscv64", "s390", "s390x", "sparc", "sparc64", "wasm"}
)

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

// PlatformOf converts a registry platform (what an image has) into a normalised
// Platform: architecture aliases resolved and the architecture's default variant
// left out.
func PlatformOf(p *v1.Platform) Platform {
	if p == nil {
		return Platform{}
	}
	return Platform{OS: p.OS, Arch: p.Architecture, Variant: p.Variant}.normalise()
}

// normalise is the form of a platform an image has: aliases resolved, the default
// variant left out.
func (p Platform) normalise() Platform {
	p = p.normaliseArch()
	if p.Variant != "" && p.Variant == defaultVariant[p.Arch] {
		p.Variant = ""
	}
	return p
}

// normaliseArch resolves architecture aliases (as containerd's platforms package
// does) and keeps the variant.
func (p Platform) normaliseArch() Platform {
	switch p.Arch {
	case "aarch64":
		p.Arch = "arm64"
	case "x86_64", "x86-64":
		p.Arch = "amd64"
	}
	return p
}

// defaultVariant is the variant an image of an architecture has when it names
// none. 32-bit arm has none here: its variants (v5, v6, v7) run different
// instruction sets, and an image that does not say which is not assumed to be v7.
var defaultVariant = map[string]string{"arm64": "v8", "amd64": "v1"}

// variantOrDefault is p's variant, or its architecture's default when it names none.
func (p Platform) variantOrDefault() string {
	if p.Variant != "" {
		return p.Variant
	}
	return defaultVariant[p.Arch]
}

// IsUnknown reports whether this is an attestation entry (unknown/unknown), which is
// not a runnable platform.
func (p Platform) IsUnknown() bool { return p.OS == "unknown" || p.Arch == "unknown" }

// Satisfies reports whether an image built for p runs where req is required. A
// required platform without a variant accepts any variant (linux/arm accepts
// linux/arm/v7, linux/arm64 accepts linux/arm64/v9). A required variant must
// match exactly, an image naming no variant having its architecture's default
// (v8 for arm64, v1 for amd64; none for arm): linux/arm64/v8 accepts linux/arm64
// and linux/arm64/v8, not an image that has only linux/arm64/v9.
func (p Platform) Satisfies(req Platform) bool {
	if p.OS != req.OS || p.Arch != req.Arch {
		return false
	}
	return req.Variant == "" || req.variantOrDefault() == p.variantOrDefault()
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
