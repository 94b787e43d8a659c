package pin

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// HelmKey names the keys of a Helm values file that hold one alias's image:
// dotted paths into nested mappings (image.tag is image: {tag: ...}), as the
// plugin parameters <alias>.helm.image-tag, <alias>.helm.image-name and
// <alias>.helm.image-spec give them (argocd-image-updater's names).
type HelmKey struct {
	// Tag gets the tag, or tag@digest when the pin's reference carries a digest.
	// With no keys at all, an app with one alias uses image.tag.
	Tag string
	// Name, optional, gets the image (the repository, without tag).
	Name string
	// Spec, when set, gets the whole reference (image:tag or image:tag@digest);
	// Tag and Name are then not used.
	Spec string
}

// HelmKeys are the values-file keys of an app's aliases, by alias.
type HelmKeys map[string]HelmKey

// KustomizationFile is the kustomization target's file. Kustomize also reads
// kustomization.yml and Kustomization; pin-target kustomization edits only
// kustomization.yaml.
const KustomizationFile = "kustomization.yaml"

// helmValuesAccepted describes the accepted helmvalues:<path> values.
const helmValuesAccepted = `helmvalues:<path>, the path of a values file of the app, relative to the app directory, inside it and ending in .yaml or .yml, e.g. helmvalues:values-prod.yaml`

// helmKeyAccepted describes the accepted <alias>.helm.* values.
const helmKeyAccepted = `a dotted key of the values file, e.g. image.tag`

// ParseTarget parses the pin-target parameter: "" or "pins" (the pins file,
// PinsFile), "kustomization" (the images: of the overlay's kustomization.yaml),
// or "helmvalues:<path>" (a values file of the app, relative to the app
// directory). helm are the values-file keys of the aliases, used by helmvalues
// only.
//
// A value that is none of these is a *resolve.InputError naming it and
// TargetAccepted; so is a helmvalues path that is empty, absolute, leaves the
// app directory (..) or is not a .yaml or .yml file. A Helm key that is not a
// dotted key is an error naming its parameter.
func ParseTarget(s string, helm HelmKeys) (Target, error) {
	v := strings.TrimSpace(s)
	switch v {
	case "", TargetPins:
		return pinsTarget{}, nil
	case TargetKustomization:
		return kustomizationTarget{}, nil
	case TargetHelmValues:
		return nil, &resolve.InputError{Value: s, Accepted: helmValuesAccepted, Err: errors.New("helmvalues needs the path of the values file after a colon")}
	}
	p, ok := strings.CutPrefix(v, TargetHelmValues+":")
	if !ok {
		return nil, &resolve.InputError{Value: s, Accepted: TargetAccepted}
	}
	file, err := checkValuesPath(p)
	if err != nil {
		return nil, &resolve.InputError{Value: s, Accepted: helmValuesAccepted, Err: err}
	}
	keys, err := checkHelmKeys(helm)
	if err != nil {
		return nil, err
	}
	return helmValuesTarget{spelled: TargetHelmValues + ":" + p, file: file, keys: keys}, nil
}

// checkValuesPath checks a helmvalues path and returns it clean.
func checkValuesPath(p string) (string, error) {
	switch {
	case strings.TrimSpace(p) == "":
		return "", errors.New("the path is empty")
	case strings.TrimSpace(p) != p:
		return "", errors.New("the path starts or ends with a space")
	case strings.Contains(p, `\`):
		return "", errors.New(`the path has a backslash (accepted separator: /)`)
	case path.IsAbs(p) || (len(p) > 2 && p[1] == ':' && p[2] == '/'):
		return "", errors.New("the path is absolute")
	case slices.Contains(strings.Split(p, "/"), ".."):
		return "", errors.New("the path leaves the app directory (..)")
	}
	clean := path.Clean(p)
	if ext := path.Ext(clean); ext != ".yaml" && ext != ".yml" {
		return "", errors.New("not a .yaml or .yml file")
	}
	return clean, nil
}

// helmParam names the plugin parameter of an alias's Helm key.
func helmParam(alias, which string) string {
	return alias + ".helm.image-" + which
}

// checkHelmKeys checks that every key is a dotted key, trims them, and drops
// aliases without keys.
func checkHelmKeys(keys HelmKeys) (HelmKeys, error) {
	out := HelmKeys{}
	for _, alias := range sortedAliases(keys) {
		k := keys[alias]
		for _, f := range []struct {
			which string
			v     *string
		}{{"tag", &k.Tag}, {"name", &k.Name}, {"spec", &k.Spec}} {
			*f.v = strings.TrimSpace(*f.v)
			if *f.v == "" {
				continue
			}
			if slices.Contains(strings.Split(*f.v, "."), "") {
				return nil, fmt.Errorf("parameter %q: invalid value %q: an empty key between dots (accepted: %s)", helmParam(alias, f.which), *f.v, helmKeyAccepted)
			}
		}
		if k != (HelmKey{}) {
			out[alias] = k
		}
	}
	return out, nil
}

// splitPinReference splits a reference image:tag or image:tag@digest; the tag
// is required.
func splitPinReference(ref string) (resolve.Image, error) {
	img, err := resolve.ParseImage(ref)
	if err != nil {
		var ie *resolve.InputError
		if errors.As(err, &ie) && ie.Err != nil {
			return resolve.Image{}, fmt.Errorf("invalid reference %q: %v (accepted: image:tag or image:tag@digest)", ref, ie.Err)
		}
		return resolve.Image{}, fmt.Errorf("invalid reference %q (accepted: image:tag or image:tag@digest)", ref)
	}
	if img.Tag == "" {
		return resolve.Image{}, fmt.Errorf("invalid reference %q: no tag (accepted: image:tag or image:tag@digest)", ref)
	}
	return img, nil
}

// checkPins checks the pins given to Apply: one per alias, each with a reference
// of its image and tag. It returns the pins by alias and their references split.
func checkPins(pins []Pin) (map[string]Pin, map[string]resolve.Image, error) {
	byAlias := map[string]Pin{}
	refs := map[string]resolve.Image{}
	for _, p := range pins {
		if p.Alias == "" {
			return nil, nil, fmt.Errorf("a pin of %s has no alias", p.Reference)
		}
		if _, dup := byAlias[p.Alias]; dup {
			return nil, nil, fmt.Errorf("alias %s is pinned twice", p.Alias)
		}
		img, err := splitPinReference(p.Reference)
		if err != nil {
			return nil, nil, fmt.Errorf("pin of alias %s: %w", p.Alias, err)
		}
		if img.Written != p.Image || img.Tag != p.Tag {
			return nil, nil, fmt.Errorf("pin of alias %s: reference %s is not of image %s and tag %s", p.Alias, p.Reference, p.Image, p.Tag)
		}
		if img.Digest != "" && p.Digest != "" && img.Digest != p.Digest {
			return nil, nil, fmt.Errorf("pin of alias %s: reference %s is not of digest %s", p.Alias, p.Reference, p.Digest)
		}
		byAlias[p.Alias] = p
		refs[p.Alias] = img
	}
	return byAlias, refs, nil
}

func sortedAliases[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
