package argocde2e

import (
	"strings"
	"testing"
	"time"
)

// testSignedTags: an app whose web image must be signed by the operator's key
// (parameter web.verify-key, the sidecar's trust key ci). CI signs the newest tag
// (1.6.0, pushed by pins-in-git) and the app runs it; an unsigned newer tag is
// pushed: the unverified app "demo" moves to it by itself (the loop saw it) while
// the signed app stays on 1.6.0 and is not refreshed, and a render says why
// 1.7.0 was skipped; CI signs 1.7.0: the app moves to it with no human action.
func testSignedTags(t *testing.T, lab *Lab) {
	const signed, old, next = "signed", "1.6.0", "1.7.0"
	resolvedWith := func(tag string) string {
		return "web=" + webRepo + ":" + tag + " (semver 1.x; platforms linux/amd64; signed by key " + TrustKeyName + ")"
	}
	syncApp(t, lab, "demo") // the control: live on the newest tag, 1.6.0
	if err := lab.SignTag("demo/web", old); err != nil {
		t.Fatal(err)
	}
	createAppFromFile(t, lab, AppSpec{Name: signed, Path: "apps/plain-cron", Namespace: "demo-signed",
		Params: [][2]string{{"web.verify-key", TrustKeyName}}})
	waitCompared(t, lab, signed)
	web := get(t, manifests(t, lab, signed), "Deployment/web")
	wantImages(t, "signed, "+old+" signed", web, webRepo+":"+old, webRepo+":"+old)
	wantAnnotation(t, web, annResolved, resolvedWith(old))
	wantAnnotation(t, web, annSkipped, "")
	syncApp(t, lab, signed)

	// An unsigned newer tag: demo follows it by itself, signed does not.
	pushed := time.Now()
	if err := lab.SeedTag("demo/web", next); err != nil {
		t.Fatal(err)
	}
	waitApp(t, lab, "demo", "OutOfSync with "+next+" by itself", func(a *Application) error {
		if err := SyncStatus("OutOfSync")(a); err != nil {
			return err
		}
		if imgs := get(t, manifests(t, lab, "demo"), "Deployment/web").Images(); !strings.Contains(strings.Join(imgs, " "), ":"+next) {
			return ErrNotYet
		}
		return nil
	})
	t.Logf("unsigned %s pushed -> demo (no verify) OutOfSync with it: %s", next, time.Since(pushed).Round(100*time.Millisecond))
	time.Sleep(3 * time.Second) // three more passes of the loop (a pass every 1s, tag TTL 1s)
	if a, err := lab.App(signed); err != nil {
		t.Fatal(err)
	} else if a.Status.Sync.Status != "Synced" {
		t.Errorf("%s with an unsigned %s: sync status %q, want Synced", signed, next, a.Status.Sync.Status)
	}
	if lines := lab.LogLines("sidecar", "application=argocd/"+signed+" "); len(lines) != 0 {
		t.Errorf("%s was refreshed for an unsigned tag: %q", signed, lines)
	}
	// A render now (a hard refresh, to look) keeps 1.6.0 and says why 1.7.0 was skipped.
	hardRefresh(t, lab, signed)
	if a := waitApp(t, lab, signed, "compared", Compared); a.Status.Sync.Status != "Synced" || len(a.Status.Conditions) > 0 {
		t.Errorf("%s rendered with an unsigned %s: %q, conditions %s", signed, next, a.Status.Sync.Status, a.ConditionsText())
	}
	web = get(t, manifests(t, lab, signed), "Deployment/web")
	wantImages(t, signed+", "+next+" unsigned", web, webRepo+":"+old, webRepo+":"+old)
	wantAnnotation(t, web, annResolved, resolvedWith(old))
	wantAnnotation(t, web, annSkipped, "web="+webRepo+":"+next+": signature: unsigned")

	// CI signs 1.7.0: the loop sees the signature (the failed check is cached for
	// the tag TTL only) and refreshes the app, with no human action.
	signedAt := time.Now()
	if err := lab.SignTag("demo/web", next); err != nil {
		t.Fatal(err)
	}
	waitApp(t, lab, signed, "OutOfSync by itself once "+next+" is signed", SyncStatus("OutOfSync"))
	t.Logf("%s signed -> %s OutOfSync with it, no human action: %s (tag TTL 1s, a pass every 1s)",
		next, signed, time.Since(signedAt).Round(100*time.Millisecond))
	web = get(t, manifests(t, lab, signed), "Deployment/web")
	wantImages(t, signed+", "+next+" signed", web, webRepo+":"+next, webRepo+":"+next)
	wantAnnotation(t, web, annResolved, resolvedWith(next))
	wantAnnotation(t, web, annSkipped, "")
	if lines := lab.LogLines("sidecar", "refresh requested", "application=argocd/"+signed+" ", "new="+webRepo+":"+next+" "); len(lines) != 1 {
		t.Errorf("refresh requests of %s for %s: %q, want one", signed, next, lines)
	}
}
