// Command demo runs argocd-image-resolver against a built-in registry: no cluster, no
// network. It starts resolve/registrytest's registry on loopback, seeds it from a
// scenario (testdata/registry/demo.yaml), points the registry host the sample apps use
// (registry.demo.local) at it, and runs the real binary's commands, printing each
// command and its output.
//
// With --seed-remote HOST it only pushes the scenario to a running registry (the e2e
// tests seed the distribution registry this way) and exits.
//
// With --sign-remote HOST --image REPOSITORY:TAG --key FILE --key-name NAME it
// signs that tag's digest in a running registry with the ECDSA key in FILE, as CI
// would with `cosign sign --key`, storing a key-mode signature (a Sigstore bundle;
// --layout referrers, referrers-tag or cosign-tag), and exits: a resolver that
// has the public key as trust key NAME accepts the tag under verify-key NAME.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

func main() {
	bin := flag.String("bin", "bin/argocd-image-resolver", "the argocd-image-resolver binary to demonstrate")
	scenario := flag.String("scenario", "testdata/registry/demo.yaml", "registry content to seed")
	seedRemote := flag.String("seed-remote", "", "push the scenario to this registry host[:port] and exit")
	serve := flag.Bool("serve", false, "keep the seeded registry running (until interrupted) to try commands by hand")
	var so signOptions
	flag.StringVar(&so.remote, "sign-remote", "", "sign --image in this registry (http://HOST[:PORT], https://HOST[:PORT] or HOST[:PORT]) with --key and exit")
	flag.StringVar(&so.image, "image", "", "with --sign-remote: the REPOSITORY:TAG to sign (its digest is signed)")
	flag.StringVar(&so.keyFile, "key", "", "with --sign-remote: PEM file of an unencrypted ECDSA P-256 private key (PKCS #8 or EC)")
	flag.StringVar(&so.keyName, "key-name", "", "with --sign-remote: the key's name, as the resolver's trust.keys names its public half")
	flag.StringVar(&so.layout, "layout", string(signtest.Referrers), "with --sign-remote: where the signature goes: referrers, referrers-tag or cosign-tag")
	flag.Parse()
	if so.remote != "" {
		line, err := signRemote(context.Background(), so)
		if err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(line)
		return
	}
	if err := run(*bin, *scenario, *seedRemote, *serve); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(bin, scenarioPath, seedRemote string, serve bool) error {
	sc, err := registrytest.LoadScenario(scenarioPath)
	if err != nil {
		return err
	}
	if seedRemote != "" {
		return registrytest.SeedRemote(context.Background(), seedRemote, sc)
	}
	srv, err := registrytest.NewServer(registrytest.WithPageSize(100))
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.SeedScenario(sc); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "image-resolver-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "registries.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(
		"registries:\n- prefix: registry.demo.local\n  api: %q\n  insecure: true\n", srv.Host)), 0o644); err != nil {
		return err
	}
	env := append(os.Environ(), "IMAGE_RESOLVER_REGISTRIES_CONFIG="+cfg)
	if serve {
		fmt.Printf("registry %s seeded from %s; registry.demo.local points at it:\n  export IMAGE_RESOLVER_REGISTRIES_CONFIG=%s\ninterrupt to stop\n", srv.Host, scenarioPath, cfg)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-ctx.Done()
		return nil
	}

	pub, err := signDemo(srv, dir)
	if err != nil {
		return err
	}
	env = append(env, "IMAGE_RESOLVER_TRUST_KEYS=ci="+pub)
	fmt.Printf("# A registry with %s is up; registry.demo.local points at it.\n", scenarioPath)
	fmt.Printf("# CI signed demo/web:1.0.0 (not 1.1.0) with its key; trust.keys names the public half ci.\n\n")
	steps := []struct {
		say  string
		args []string
	}{
		{"Each sample app rendered as the plugin renders it: which tag each image gets, and why:",
			[]string{"preview", "testdata/apps/helm-web", "--app-name", "shop"}},
		{"", []string{"preview", "testdata/apps/kustomize-overlay/overlay"}},
		{"", []string{"preview", "testdata/apps/plain-cron"}},
		{"The Deployment's nodeSelector pins arm64, so 1.2.0 (arm64-only) qualifies:",
			[]string{"preview", "testdata/apps/arm64-pinned"}},
		{"The same chart with parameter web.platforms=linux/amd64: 1.2.0 is skipped and said so:",
			[]string{"preview", "testdata/apps/helm-web", "--app-name", "shop", "--param", "web.platforms=linux/amd64"}},
		{"The manifests Argo CD gets (generate's output) for each sample app:",
			[]string{"preview", "testdata/apps/helm-web", "--app-name", "shop", "-o", "yaml"}},
		{"", []string{"preview", "testdata/apps/kustomize-overlay/overlay", "-o", "yaml"}},
		{"", []string{"preview", "testdata/apps/plain-cron", "-o", "yaml"}},
		{"", []string{"preview", "testdata/apps/arm64-pinned", "-o", "yaml"}},
		{"Newest semver tag of demo/web, no platform required:",
			[]string{"resolve", "registry.demo.local/demo/web"}},
		{"The same for a linux/amd64 workload: 1.2.0 is arm64-only, so it is skipped and reported:",
			[]string{"resolve", "registry.demo.local/demo/web", "--platforms", "linux/amd64"}},
		{"For linux/arm64, pinned to the digest:",
			[]string{"resolve", "registry.demo.local/demo/web", "--platforms", "linux/arm64", "--pin-digest"}},
		{"Pre-releases only when the constraint asks for them:",
			[]string{"resolve", "registry.demo.local/demo/web:>=1.3.0-0"}},
		{"Newest build of demo/worker for both platforms, with the whole walk explained:",
			[]string{"resolve", "registry.demo.local/demo/worker", "--strategy", "newest-build",
				"--platforms", "linux/amd64,linux/arm64", "--explain"}},
		{"Numeric tags of demo/batch (numeric, not lexical order), as JSON:",
			[]string{"resolve", "registry.demo.local/demo/batch", "--strategy", "numeric", "-o", "json"}},
		{"Only what CI signed: 1.1.0 is unsigned, so the signed 1.0.0 wins, and the walk says why:",
			[]string{"resolve", "registry.demo.local/demo/web", "--platforms", "linux/amd64", "--verify-key", "ci", "--explain"}},
		{"A typo in the policy is an error that names the value and what is accepted (exit 2):",
			[]string{"resolve", "registry.demo.local/demo/web", "--strategy", "newest"}},
	}
	for _, st := range steps {
		if st.say != "" {
			fmt.Printf("# %s\n", st.say)
		}
		fmt.Printf("$ argocd-image-resolver %s\n", quote(st.args))
		cmd := exec.Command(bin, st.args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, os.Stdout, os.Stdout
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				fmt.Printf("(exit status %d)\n", ee.ExitCode())
			} else {
				return err
			}
		}
		fmt.Println()
	}
	fmt.Printf("# Registry requests served: %d (%v)\n", srv.Total(), srv.Counts())
	return nil
}

func quote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " <>~*|&;$") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
