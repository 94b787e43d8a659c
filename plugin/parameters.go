package plugin

import (
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"

	"encoding/json"
	"slices"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// ParameterAnnouncement is one entry of the dynamic parameter announcement, with the
// JSON names of Argo CD's ParameterAnnouncement (reposerver/apiclient, which
// argocd-cmp-server unmarshals the command's output into).
type ParameterAnnouncement struct {
	Name           string            `json:"name,omitempty"`
	Title          string            `json:"title,omitempty"`
	Tooltip        string            `json:"tooltip,omitempty"`
	Required       bool              `json:"required,omitempty"`
	ItemType       string            `json:"itemType,omitempty"`
	CollectionType string            `json:"collectionType,omitempty"`
	String         string            `json:"string,omitempty"`
	Array          []string          `json:"array,omitempty"`
	Map            map[string]string `json:"map,omitempty"`
}

// Announce returns the dynamic parameter announcement the `parameters` command prints
// (JSON, no trailing newline), shown in the Parameters tab of Argo CD's UI.
// The policy file is confined to repoRoot (see LoadPolicyIn; "" means appDir).
func Announce(repoRoot, appDir string) ([]byte, error) {
	anns, err := Announcements(repoRoot, appDir)
	if err != nil {
		return nil, err
	}
	return json.Marshal(anns)
}

// Announcements lists the parameters for the application in appDir, in a fixed order:
// image-list (prefilled with the policy file's images as alias=repository[:constraint]),
// the application-wide defaults (update-strategy, allow-tags, ignore-tags, platforms,
// pin-digest, verify-identity, verify-issuer, verify-key), then for each alias of the
// policy file, sorted, its <alias>.* keys with the file's values as defaults, then
// pin-mode, pin-target, pin-branch, pin-push, pin-pr-group, refresh, values-files,
// helm-parameters, values, directory-recurse, directory-include and
// directory-exclude. Without a policy file only the general parameters are announced;
// a policy file that does not load is an error. Announced values are defaults shown in the UI:
// Argo CD does not send them back unless the user changes them, so they never
// override the file.
func Announcements(repoRoot, appDir string) ([]ParameterAnnouncement, error) {
	pf, err := readPolicyFile(repoRoot, appDir)
	if err != nil {
		return nil, err
	}
	// Check the file completely (values, constraints, aliases) so that a broken file
	// shows up in the UI before any render.
	pol, err := buildPolicy(pf, nil)
	if err != nil {
		return nil, err
	}

	anns := []ParameterAnnouncement{imageListAnnouncement(pol)}
	anns = append(anns, keyAnnouncements("", "all images (default)", nil)...)
	for _, ip := range pol.Images {
		anns = append(anns, keyAnnouncements(ip.Alias+".", ip.Alias, &ip)...)
	}
	anns = append(anns, pinAnnouncements(pol)...)
	anns = append(anns, renderAnnouncements()...)
	return append(anns, directoryAnnouncements()...), nil
}

// imageListAnnouncement is image-list, prefilled with the policy file's images
// as alias=repository[:constraint].
func imageListAnnouncement(pol *AppPolicy) ParameterAnnouncement {
	var list []string
	for _, ip := range pol.Images {
		e := ip.Alias + "=" + ip.Written
		if c := ip.Spec.Constraint; c != "" {
			e += ":" + c
		}
		list = append(list, e)
	}
	return ParameterAnnouncement{
		Name:           ParamImageList,
		Title:          "Images",
		Tooltip:        "Images to resolve, one per item: " + imageListAccepted + ". An entry overrides the image and constraint of its alias in " + PolicyFileName + ".",
		ItemType:       "string",
		CollectionType: "array",
		Array:          list,
	}
}

// pinAnnouncements are the pin settings, prefilled where they apply.
func pinAnnouncements(pol *AppPolicy) []ParameterAnnouncement {
	return []ParameterAnnouncement{
		ParameterAnnouncement{
			Name:           ParamPinMode,
			Title:          "Pin mode",
			Tooltip:        "Accepted: " + pinModeAccepted + ".",
			ItemType:       "string",
			CollectionType: "string",
			String:         pinModeDefault(pol),
		},
		ParameterAnnouncement{
			Name:           ParamPinTarget,
			Title:          "Pins file",
			Tooltip:        "Where pins are kept, with pin-mode write or use. Accepted: " + pin.TargetAccepted + ".",
			ItemType:       "string",
			CollectionType: "string",
			String:         pinTargetDefault(pol),
		},
		ParameterAnnouncement{
			Name:           ParamPinBranch,
			Title:          "Pins branch",
			Tooltip:        "Branch pins are committed to (default: the Application's target revision). Accepted: " + pinBranchAccepted + ".",
			ItemType:       "string",
			CollectionType: "string",
			String:         pol.Pins.Branch,
		},
		ParameterAnnouncement{
			Name:           ParamPinPush,
			Title:          "Pins by pull request",
			Tooltip:        "How pins reach the pins branch, with pin-mode write or use. Accepted: " + pinPushAccepted + ".",
			ItemType:       "string",
			CollectionType: "string",
			String:         pol.Pins.Push,
		},
		ParameterAnnouncement{
			Name:           ParamPinPRGroup,
			Title:          "Pull request per",
			Tooltip:        "What one pull request of pins carries (branch image-resolver/<app>, or image-resolver/repository-<base branch>). Accepted: " + pinPRGroupAccepted + ".",
			ItemType:       "string",
			CollectionType: "string",
			String:         pinPRGroupDefault(pol),
		},
	}
}

// renderAnnouncements are the refresh and Helm settings.
func renderAnnouncements() []ParameterAnnouncement {
	return []ParameterAnnouncement{
		ParameterAnnouncement{
			Name:           ParamRefresh,
			Title:          "Refresh on new images",
			Tooltip:        "Accepted: " + refreshAccepted + ". With off, a new image reaches the app only at its next render (a new commit, a hard refresh, or Argo CD's cache expiry).",
			ItemType:       "string",
			CollectionType: "string",
			String:         RefreshHard,
		},
		ParameterAnnouncement{
			Name:           ParamValuesFiles,
			Title:          "Helm values files",
			Tooltip:        "Helm values files, relative to the application directory, applied in order.",
			ItemType:       "string",
			CollectionType: "array",
		},
		ParameterAnnouncement{
			Name:           ParamHelmParameters,
			Title:          "Helm parameters",
			Tooltip:        "Helm parameters (--set name=value).",
			ItemType:       "string",
			CollectionType: "map",
		},
		ParameterAnnouncement{
			Name:           ParamValues,
			Title:          "Helm values",
			Tooltip:        "Helm values as a YAML string, applied after the values files.",
			ItemType:       "string",
			CollectionType: "string",
		},
	}
}

// directoryAnnouncements are Argo CD's directory options, for plain-YAML apps.
func directoryAnnouncements() []ParameterAnnouncement {
	const only = " Plain-YAML apps only (no Chart.yaml, no kustomization); ignored by Helm and Kustomize apps."
	return []ParameterAnnouncement{
		ParameterAnnouncement{
			Name:           ParamDirectoryRecurse,
			Title:          "Directory: recurse",
			Tooltip:        "Read the manifests of the subdirectories too. Accepted: " + dirRecurseAccepted + "." + only,
			ItemType:       "boolean",
			CollectionType: "string",
			String:         "false",
		},
		ParameterAnnouncement{
			Name:           ParamDirectoryInclude,
			Title:          "Directory: include",
			Tooltip:        "Read only the files this matches (default: every *.yaml, *.yml and *.json file). Accepted: " + dirGlobAccepted + "." + only,
			ItemType:       "string",
			CollectionType: "string",
		},
		ParameterAnnouncement{
			Name:           ParamDirectoryExclude,
			Title:          "Directory: exclude",
			Tooltip:        "Skip the files this matches; wins over the include pattern. Accepted: " + dirGlobAccepted + "." + only,
			ItemType:       "string",
			CollectionType: "string",
		},
	}
}

// keyAnnouncements announces the per-image keys with prefix ("" for the
// application-wide defaults, "alias." for one alias), prefilled from ip.
func keyAnnouncements(prefix, subject string, ip *ImagePolicy) []ParameterAnnouncement {
	var strategy, allow, pin string
	var ignore, platforms []string
	var verify resolve.VerifySpec
	if ip != nil {
		verify = ip.Spec.Verify
		strategy = ip.Spec.Strategy
		if strategy == "" {
			strategy = "semver"
		}
		allow = ip.Spec.AllowTags
		ignore = splitItems(ip.Spec.IgnoreTags)
		platforms = splitItems(ip.Spec.Platforms)
		pin = "false"
		if ip.Spec.PinDigest {
			pin = "true"
		}
	}
	anns := []ParameterAnnouncement{
		{
			Name:           prefix + KeyUpdateStrategy,
			Title:          subject + ": update strategy",
			Tooltip:        "How tags are ordered. Accepted: " + resolve.StrategyAccepted + ".",
			ItemType:       "string",
			CollectionType: "string",
			String:         strategy,
		},
		{
			Name:           prefix + KeyAllowTags,
			Title:          subject + ": allow tags",
			Tooltip:        "Only tags matching this are candidates. Accepted: " + allowAccepted + ".",
			ItemType:       "string",
			CollectionType: "string",
			String:         allow,
		},
		{
			Name:           prefix + KeyIgnoreTags,
			Title:          subject + ": ignore tags",
			Tooltip:        "Tags matching any of these are never candidates. Accepted: " + ignoreAccepted + ".",
			ItemType:       "string",
			CollectionType: "array",
			Array:          ignore,
		},
		{
			Name:           prefix + KeyPlatforms,
			Title:          subject + ": platforms",
			Tooltip:        "A tag qualifies only with a manifest for every one of these (default: the workload's nodeSelector/affinity, else the operator's default). Accepted: " + platformsAccepted + ".",
			ItemType:       "string",
			CollectionType: "array",
			Array:          platforms,
		},
		{
			Name:           prefix + KeyPinDigest,
			Title:          subject + ": pin digest",
			Tooltip:        "true: write tag@sha256:... Accepted: " + pinDigestAccepted + ".",
			ItemType:       "boolean",
			CollectionType: "string",
			String:         pin,
		},
	}
	return append(anns, verifyAnnouncements(prefix, subject, verify)...)
}

// splitItems turns list values (each possibly comma-separated) into one item per
// array entry; a regexp: value is kept whole, as ParseIgnoreTags reads it.
func splitItems(values []string) []string {
	var out []string
	for _, v := range values {
		v = strings.TrimSpace(v)
		if strings.HasPrefix(v, "regexp:") {
			out = append(out, v)
			continue
		}
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return slices.Clip(out)
}

func pinModeDefault(pol *AppPolicy) string { return pol.PinMode }

// pinPRGroupDefault is pin-pr-group's prefilled value: the effective one where it
// applies (pin-push pull-request), else none, so that a prefilled value read back
// as a parameter is never one that does not apply.
func pinPRGroupDefault(pol *AppPolicy) string {
	if pol.Pins.Push != PinPushPullRequest {
		return ""
	}
	return pol.Pins.PRGroup
}

func pinTargetDefault(pol *AppPolicy) string {
	if pol.Pins.Target == nil {
		return pin.TargetPins
	}
	return pol.Pins.Target.String()
}
