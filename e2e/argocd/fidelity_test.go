package argocde2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// knownDifferences are the apps whose render through the plugin is not Argo CD's, each
// a documented choice (docs/rendering.md), per Argo CD version ("" = every version).
// The scenario fails on a difference not listed here, and on a listed one that has gone.
var knownDifferences = map[string]map[string]string{
	"e-null-values":                       {"v2.14.21": "null values: Helm 3.16 removes a subchart default its parent's values.yaml sets to null, Helm 4 keeps it"},
	"a-helm-api-versions":                 {"v2.14.21": "the API versions Helm knows without a cluster: Helm 3.16's list, not Helm 4's"},
	"a-kustomize-api-versions-helm-chart": {"v2.14.21": "the API versions Helm knows without a cluster: Helm 3.16's list, not Helm 4's"},
}

// testFidelity: every app of the corpus (fidelitySources) is created twice, as Argo CD
// renders it natively (with the helm and kustomize that Argo CD version ships) and
// through the plugin with a policy that names no image; argocd-server's manifests of the
// two must be the same objects, byte for byte (CompareManifests says how they are
// normalised), or both refused.
func testFidelity(t *testing.T, lab *Lab) {
	work := filepath.Join(lab.Dir, "fidelity-work")
	apps, skipped, err := BuildCorpus(lab.Paths.Root, work)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range skipped {
		t.Logf("left out: %s", s)
	}
	repoURL := strings.Replace(lab.GitURL, "/apps.git", "/fidelity.git", 1)
	bare := filepath.Join(lab.Dir, "git", "fidelity.git")
	for _, c := range [][]string{
		{"git", "init", "-q", "--bare", "-b", "main", bare},
		{"git", "-C", work, "init", "-q", "-b", "main"},
		{"git", "-C", work, "add", "-A"},
		{"git", "-C", work, "-c", "user.name=e2e", "-c", "user.email=e2e@127.0.0.1", "commit", "-q", "-m", "fidelity corpus"},
		{"git", "-C", work, "push", "-q", bare, "main"},
	} {
		if _, err := lab.must("", c...); err != nil {
			t.Fatal(err)
		}
	}
	f := filepath.Join(lab.Dir, "tmp", "fidelity-apps.yaml")
	if err := os.WriteFile(f, FidelityApplications(repoURL, apps), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.must("", "kubectl", "apply", "-f", f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lab.Run("", "kubectl", "-n", "argocd", "delete", "applications", "-l", "e2e-fidelity=true", "--wait=false")
	})
	token, err := lab.Token()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	results := compareAll(t, lab, token, apps)
	t.Logf("%d apps rendered both ways in %s", len(apps), time.Since(t0).Round(time.Second))
	checkFidelity(t, lab.Version, apps, results)
}

// compareAll renders each app both ways, four apps at a time.
func compareAll(t *testing.T, lab *Lab, token string, apps []CorpusApp) []Fidelity {
	results := make([]Fidelity, len(apps))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, a := range apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var answers [2]ManifestsAnswer
			for j, name := range []string{"fn-" + a.Name, "fp-" + a.Name} {
				ans, err := lab.ManifestsAPI(token, name)
				if err != nil {
					ans.Error = "the API did not answer: " + err.Error()
				}
				answers[j] = ans
			}
			results[i] = CompareManifests(answers[0], answers[1], "fn-"+a.Name, "fp-"+a.Name)
		}()
	}
	wg.Wait()
	return results
}

// checkFidelity fails on each difference not known for version v, and on each known
// difference that has gone; it logs the table either way.
func checkFidelity(t *testing.T, v string, apps []CorpusApp, results []Fidelity) {
	counts := map[string]int{}
	var table []string
	for i, a := range apps {
		r := results[i]
		counts[r.Outcome]++
		known := knownDifferences[a.Name][v]
		if known == "" {
			known = knownDifferences[a.Name][""]
		}
		table = append(table, fmt.Sprintf("%-13s %-9s %-45s %s", r.Outcome, a.Type, a.Name, a.Origin))
		switch {
		case r.Outcome == "differs" && known == "":
			t.Errorf("%s (%s, %s): the plugin's render is not Argo CD %s's:\n%s", a.Name, a.Type, a.Origin, v, r.Detail)
		case r.Outcome != "differs" && known != "":
			t.Errorf("%s (%s): a known difference on %s (%s) has gone (%s): take it out of knownDifferences and the docs", a.Name, a.Origin, v, known, r.Outcome)
		case r.Outcome == "differs":
			t.Logf("%s: known difference on %s: %s\n%s", a.Name, v, known, r.Detail)
		case r.Outcome == "refused-both":
			t.Logf("%s: refused by both:\n%s", a.Name, r.Detail)
		}
	}
	sort.Strings(table)
	t.Logf("fidelity on Argo CD %s: %d apps: %d the same, %d refused by both, %d differ\n%s",
		v, len(apps), counts["same"], counts["refused-both"], counts["differs"], strings.Join(table, "\n"))
}
