package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFiguresQuotedOnce: the daemon's memory figure (BenchmarkDaemonMemory's peak RSS) is
// quoted in benchmarks.md only; every other page links there, so two pages cannot give
// two figures for one benchmark.
func TestFiguresQuotedOnce(t *testing.T) {
	peak := regexp.MustCompile(`\d+(–\d+)? MiB (peak RSS|RSS|resident)`)
	for _, f := range userFacingFiles(t) {
		if filepath.Base(f) == "benchmarks.md" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if peak.MatchString(line) && strings.Contains(line, "100,000 tags") {
				t.Errorf("%s:%d quotes the daemon's memory figure (%s): link docs/benchmarks.md instead", f, i+1, peak.FindString(line))
			}
		}
	}
}

// TestAlertThresholdsAgree: a threshold the docs quote for an alert's expression is the
// one the shipped PrometheusRule has.
func TestAlertThresholdsAgree(t *testing.T) {
	rule, err := os.ReadFile("../deploy/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	expr := regexp.MustCompile(`(argocd_image_resolver_[a-z_]+)\)?\s*>\s*(\d+)`)
	shipped := map[string]string{}
	for _, m := range expr.FindAllStringSubmatch(string(rule), -1) {
		shipped[m[1]] = m[2]
	}
	if len(shipped) == 0 {
		t.Fatal("no thresholds found in prometheusrule.yaml")
	}
	for _, f := range userFacingFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range expr.FindAllStringSubmatch(line, -1) {
				if want, ok := shipped[m[1]]; ok && m[2] != want {
					t.Errorf("%s:%d: %s > %s, but the PrometheusRule alerts at > %s", f, i+1, m[1], m[2], want)
				}
			}
		}
	}
}

// TestMinimumArgoCDVersion: the pages that state which Argo CD the sidecar needs say
// 2.8 (argocd-cm plugins, the legacy variant, are for older ones).
func TestMinimumArgoCDVersion(t *testing.T) {
	claim := regexp.MustCompile(`(Argo CD (\d+\.\d+) or later|Kustomize, (\d+\.\d+) and later)`)
	for _, f := range userFacingFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range claim.FindAllStringSubmatch(line, -1) {
				if v := m[2] + m[3]; v != "2.8" {
					t.Errorf("%s:%d says %q: the sidecar's minimum is Argo CD 2.8", f, i+1, m[1])
				}
			}
		}
	}
}

// userFacingFiles are the README, docs/*.md and deploy/README.md.
func userFacingFiles(t *testing.T) []string {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(files, "../README.md", "../deploy/README.md")
}
