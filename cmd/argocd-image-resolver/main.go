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

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Exit codes, as every command's help documents them (exitCodesHelp).
const (
	exitOK       = 0
	exitNoTag    = 1
	exitInput    = 2
	exitRegistry = 3
	exitFailure  = 4
)

// exitCodesHelp ends the help of resolve and preview.
const exitCodesHelp = `Exit status: 0 done, 1 no tag qualifies, 2 bad input (flags, policy, configuration),
3 registry error, 4 any other failure (a render that failed, I/O).`

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
	var pe *plugin.PolicyError
	var ue *usageError
	var fe *config.FileError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, resolve.ErrNoTag):
		return exitNoTag
	case errors.As(err, &ie), errors.As(err, &pe), errors.As(err, &ue), errors.As(err, &fe):
		return exitInput
	case errors.As(err, &re):
		return exitRegistry
	}
	// Not the user's input: an I/O failure, a render that failed, a bug.
	return exitFailure
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
	root.Version = buildVersion().Version
	root.SetVersionTemplate(buildVersion().String() + "\n")
	root.AddCommand(newResolveCommand(), newRenderWorkerCommand(), newWebhookListenerCommand(), newGenerateCommand(), newPreviewCommand(), newParametersCommand(),
		newServeCommand(), newSidecarCommand(), newVersionCommand(), newMigrateCommand(), newInstallCommand())
	return root
}

// usageError is a command line cobra refused before the command ran: an unknown
// command or flag, a flag value that does not parse, wrong arguments.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// execute runs root; an error returned before any command ran is a usageError.
func execute(ctx context.Context, root *cobra.Command) error {
	ran := false
	root.PersistentPreRun = func(*cobra.Command, []string) { ran = true }
	err := root.ExecuteContext(ctx)
	if err != nil && !ran {
		return &usageError{err}
	}
	return err
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	cmd := newRootCommand(os.Stdout, os.Stderr)
	err := execute(ctx, cmd)
	if err != nil {
		fmt.Fprintf(os.Stderr, "argocd-image-resolver: %v\n", err)
	}
	stop()
	os.Exit(exitCode(err))
}
