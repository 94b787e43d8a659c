package plugin

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

var aliasRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// normaliseAlias applies argocd-image-updater's rule: "/" in an alias is written "_" in
// parameter names.
func normaliseAlias(s string) string { return strings.ReplaceAll(s, "/", "_") }

func checkAlias(alias string) error {
	switch {
	case alias == "":
		return errors.New("empty alias")
	case len(alias) > maxAliasLen:
		return fmt.Errorf("alias longer than %d characters", maxAliasLen)
	case !aliasRE.MatchString(alias):
		return fmt.Errorf("alias %q", alias)
	}
	return nil
}

// deriveAlias names a bare image-list entry (repository[:constraint] without alias=)
// by the last path segment of its repository, "." read as "_":
// ghcr.io/org/web-api -> web-api, nginx -> nginx.
func deriveAlias(written string) string {
	last := written[strings.LastIndex(written, "/")+1:]
	return strings.ReplaceAll(last, ".", "_")
}

// parseImageList reads image-list entries.
func (m *merger) parseImageList(p Parameter) []imageListEntry {
	src := paramSource(p.Name)
	var raw []string
	if p.Kind == KindString {
		raw = strings.Split(p.String, ",")
	} else {
		raw = p.Array
	}
	var out []imageListEntry
	seen := map[string]string{}
	for _, item := range raw {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		alias, spec, explicit := splitImageListEntry(item)
		if explicit {
			alias = normaliseAlias(alias)
			if err := checkAlias(alias); err != nil {
				m.failf("%s: entry %q: invalid alias: %v (accepted: %s; alias %s)", src, item, err, imageListAccepted, aliasAccepted)
				continue
			}
		}
		repo, written, constraint, err := resolve.ParseImageSpec(spec)
		if err != nil {
			m.fail(resolve.WithField(err, fmt.Sprintf("%s (entry %q)", src, item)))
			continue
		}
		if !explicit {
			alias = deriveAlias(written)
			if checkAlias(alias) != nil {
				m.failf("%s: entry %q: cannot derive an alias from the repository (accepted: %s)", src, item, imageListAccepted)
				continue
			}
		}
		if prev, dup := seen[alias]; dup {
			how := ""
			if !explicit {
				how = " (derived from the repository's last path segment; write alias=repository to tell them apart)"
			}
			m.failf("%s: entries %q and %q both have alias %q%s (accepted: unique aliases)", src, prev, item, alias, how)
			continue
		}
		seen[alias] = item
		out = append(out, imageListEntry{
			alias: alias,
			image: value{set: true, str: written, repo: repo, src: src},
			cons:  value{set: true, str: constraint, src: src},
		})
	}
	return out
}

// splitImageListEntry splits "alias=spec". The "=" separates an alias only when no ":"
// comes before it: in "nginx:>=1.2" it belongs to the constraint.
func splitImageListEntry(item string) (alias, spec string, explicit bool) {
	i := strings.Index(item, "=")
	if i < 0 || strings.Contains(item[:i], ":") {
		return "", item, false
	}
	return strings.TrimSpace(item[:i]), strings.TrimSpace(item[i+1:]), true
}
