package render

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	chart "helm.sh/helm/v4/pkg/chart/v2"
)

// addLocalDependencies adds to chrt each file:// dependency of its Chart.yaml that is
// not vendored in charts/, loaded from its directory in the repository: what Argo CD
// gets when `helm template` fails for a missing dependency and it runs `helm dependency
// build`, which packages a file:// dependency from its directory (Helm's
// downloader.tarFromLocalDir) offline. Dependencies from chart repositories are left
// missing: the sidecar downloads no chart.
func addLocalDependencies(chrt *chart.Chart, dir string, b *boundary) error {
	for _, d := range chrt.Metadata.Dependencies {
		if !strings.HasPrefix(d.Repository, "file://") || slices.ContainsFunc(chrt.Dependencies(), func(c *chart.Chart) bool { return c.Name() == d.Name }) {
			continue
		}
		sub, err := loadLocalDependency(d, dir, b)
		if err != nil {
			return err
		}
		chrt.AddDependency(sub)
	}
	return nil
}

// loadLocalDependency loads the chart of a file:// dependency and checks its version
// against the dependency's constraint, as `helm dependency build` does.
func loadLocalDependency(d *chart.Dependency, dir string, b *boundary) (*chart.Chart, error) {
	const accepted = "file://<a path relative to the chart directory that stays inside the repository>"
	rel := strings.TrimPrefix(d.Repository, "file://")
	if rel == "" || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("dependency %s: repository %q: an absolute path is outside the repository (accepted: %s)", d.Name, d.Repository, accepted)
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if !within(b.root, p) {
		return nil, fmt.Errorf("dependency %s: repository %q: the path leaves the repository (accepted: %s)", d.Name, d.Repository, accepted)
	}
	sub, err := loadChart(p, b)
	if err != nil {
		return nil, fmt.Errorf("dependency %s from %s: %w", d.Name, d.Repository, err)
	}
	constraint, err := semver.NewConstraint(d.Version)
	if err != nil {
		return nil, fmt.Errorf("dependency %s has an invalid version/constraint format: %w", d.Name, err)
	}
	v, err := semver.NewVersion(sub.Metadata.Version)
	if err != nil {
		return nil, fmt.Errorf("dependency %s from %s: chart version %q: %w", d.Name, d.Repository, sub.Metadata.Version, err)
	}
	if !constraint.Check(v) {
		return nil, fmt.Errorf("can't get a valid version for dependency %s (%s has version %s, Chart.yaml asks for %s)", d.Name, d.Repository, sub.Metadata.Version, d.Version)
	}
	return sub, nil
}
