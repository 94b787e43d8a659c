// Command argocd-image-resolver is an Argo CD Config Management Plugin that renders
// an app and substitutes the newest image tags its policy allows.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Exit codes, as documented for the resolve command.
const (
	exitOK       = 0
	exitNoTag    = 1
	exitInput    = 2
	exitRegistry = 3
)

// exitError carries the exit status a command chose.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode maps an error to the process exit status.
func exitCode(err error) int {
	var ee *exitError
	var ie *resolve.InputError
	var re *resolve.RegistryError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, resolve.ErrNoTag):
		return exitNoTag
	case errors.As(err, &ie):
		return exitInput
	case errors.As(err, &re):
		return exitRegistry
	}
	return exitInput
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "argocd-image-resolver",
		Short:         "Render Argo CD apps with the newest image tags their policy allows",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newResolveCommand(), newGenerateCommand(), newPreviewCommand(), newParametersCommand(),
		newServeCommand(), newSidecarCommand())
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	cmd := newRootCommand(os.Stdout, os.Stderr)
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver: %v\n", err)
	}
	stop()
	os.Exit(exitCode(err))
}
