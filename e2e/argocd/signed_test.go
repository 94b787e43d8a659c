package argocde2e

import (
	"strings"
	"testing"
	"time"
)

// testSignedTags: an app whose web image must be signed by the operator's key
// (parameter web.verify-key, the sidecar's trust key ci). CI signs the newest tag
// (1.6.0, pushed by pins-in-git) and the app runs it. An unsigned newer tag is
// pushed: the unverified app "demo" moves to it by itself (the control: the loop
// saw the tag) while the signed app gets no refresh, renders 1.6.0 with the skip
// reason of 1.7.0 and stays on 1.6.0 when synced. CI signs 1.7.0: the loop sees
// the signature and the app turns OutOfSync with 1.7.0, with no human action.
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
	if lines := lab.LogLines("sidecar", "refresh requested", "application=argocd/demo ", "new="+webRepo+":"+next+" "); len(lines) != 1 {
		t.Errorf("refresh requests of demo for %s: %q, want one (the loop saw the tag)", next, lines)
	}
	time.Sleep(3 * time.Second) // three more passes of the loop (a pass every 1s, tag TTL 1s)
	if lines := lab.LogLines("sidecar", "application=argocd/"+signed+" "); len(lines) != 0 {
		t.Errorf("%s was refreshed for an unsigned tag: %q", signed, lines)
	}
	// A render now keeps 1.6.0 and says why 1.7.0 was skipped. (The pinned app's
	// pin commit of 1.7.0 may have re-rendered every app already: the skipped
	// annotation alone then shows signed OutOfSync.) Synced: live stays on 1.6.0.
	hardRefresh(t, lab, signed)
	if a := waitApp(t, lab, signed, "compared", Compared); len(a.Status.Conditions) > 0 {
		t.Errorf("%s rendered with an unsigned %s: conditions %s", signed, next, a.ConditionsText())
	}
	web = get(t, manifests(t, lab, signed), "Deployment/web")
	wantImages(t, signed+", "+next+" unsigned", web, webRepo+":"+old, webRepo+":"+old)
	wantAnnotation(t, web, annResolved, resolvedWith(old))
	wantAnnotation(t, web, annSkipped, "web="+webRepo+":"+next+": signature: unsigned")
	syncApp(t, lab, signed)
	wantImages(t, "kubectl get deployment web", live(t, lab, "demo-signed", "deployment", "web"), webRepo+":"+old, webRepo+":"+old)

	// CI signs 1.7.0: the loop sees the signature (the failed check is cached for
	// the tag TTL only) and refreshes the app, with no human action.
	signedAt := time.Now()
	if err := lab.SignTag("demo/web", next); err != nil {
		t.Fatal(err)
	}
	waitApp(t, lab, signed, "OutOfSync with "+next+" by itself once it is signed", func(a *Application) error {
		if err := SyncStatus("OutOfSync")(a); err != nil {
			return err
		}
		if imgs := get(t, manifests(t, lab, signed), "Deployment/web").Images(); !strings.Contains(strings.Join(imgs, " "), ":"+next) {
			return ErrNotYet
		}
		return nil
	})
	t.Logf("%s signed -> %s OutOfSync with it, no human action: %s (tag TTL 1s, a pass every 1s)",
		next, signed, time.Since(signedAt).Round(100*time.Millisecond))
	web = get(t, manifests(t, lab, signed), "Deployment/web")
	wantImages(t, signed+", "+next+" signed", web, webRepo+":"+next, webRepo+":"+next)
	wantAnnotation(t, web, annResolved, resolvedWith(next))
	wantAnnotation(t, web, annSkipped, "")
	// The loop did it: one refresh of signed, for the signed tag.
	if lines := lab.LogLines("sidecar", "refresh requested", "application=argocd/"+signed+" "); len(lines) != 1 ||
		!strings.Contains(lines[0], "new="+webRepo+":"+next+" ") {
		t.Errorf("refresh requests of %s: %q, want one for %s", signed, lines, next)
	}
}
