// Command cmpserver stands in for Argo CD's argocd-cmp-server in TestImageRunsAsArgoCDUser:
// `sidecar` starts it as its child, in the image's root filesystem, as Argo CD would.
// Like argocd-cmp-server it runs plugin.yaml's generate command,
// argocd-image-resolver-generate, found on PATH, in an app directory with Argo CD's
// environment; it writes what it saw and what generate printed to
// /tmp/cmpserver-report.json, then waits for SIGTERM (which sidecar forwards) and
// exits 0.
//
// Environment: CMPSERVER_APP_DIR (the app directory), CMPSERVER_PARAMETERS (the
// value of ARGOCD_APP_PARAMETERS).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Report is what the stand-in writes; the test reads the same fields.
type Report struct {
	UID, GID       int
	Socket         string // $IMAGE_RESOLVER_SOCKET, set by sidecar
	Home           string
	GeneratePath   string // where PATH found argocd-image-resolver-generate
	GenerateStdout string
	GenerateStderr string
	GenerateExit   int
	Error          string
}

func main() {
	// Subscribe first: the test may send SIGTERM as soon as the report exists.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	r := Report{UID: os.Getuid(), GID: os.Getgid(), Socket: os.Getenv("IMAGE_RESOLVER_SOCKET"), Home: os.Getenv("HOME")}
	if err := generate(&r); err != nil {
		r.Error = err.Error()
	}
	data, _ := json.Marshal(r)
	// Written whole, then renamed: the test polls for the file.
	if err := os.WriteFile("/tmp/cmpserver-report.json.tmp", data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "cmpserver:", err)
		os.Exit(3)
	}
	if err := os.Rename("/tmp/cmpserver-report.json.tmp", "/tmp/cmpserver-report.json"); err != nil {
		fmt.Fprintln(os.Stderr, "cmpserver:", err)
		os.Exit(3)
	}
	<-sigs
}

func generate(r *Report) error {
	path, err := exec.LookPath("argocd-image-resolver-generate")
	if err != nil {
		return err
	}
	r.GeneratePath = path
	cmd := exec.Command(path)
	cmd.Dir = os.Getenv("CMPSERVER_APP_DIR")
	// What argocd-cmp-server sets for a generate command (Argo CD's build environment).
	cmd.Env = append(os.Environ(),
		"ARGOCD_APP_NAME=web",
		"ARGOCD_APP_NAMESPACE=default",
		"ARGOCD_APP_PARAMETERS="+os.Getenv("CMPSERVER_PARAMETERS"),
		"KUBE_VERSION=1.31.0",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r.GenerateStdout, r.GenerateStderr = stdout.String(), stderr.String()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		r.GenerateExit = exit.ExitCode()
		return nil
	}
	return err
}
