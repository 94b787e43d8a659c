package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/migrate"
)

func newMigrateCommand() *cobra.Command {
	var (
		check         bool
		registriesOut string
		pluginName    string
		maxInput      = sizeFlag(migrate.DefaultMaxInput)
	)
	cmd := &cobra.Command{
		Use:   "migrate [FILE|DIR...|-]",
		Short: "Move Applications from argocd-image-updater to the plugin",
		Long: `Read YAML (files, directories of *.yaml, *.yml and *.json files, or stdin
with - or no argument; several documents each; at most --max-input bytes in all):
Applications with argocd-image-updater annotations, ImageUpdater resources
(argocd-image-updater.argoproj.io/v1alpha1) with the Applications they select, and
argocd-image-updater's ConfigMap or registries.conf. Print the Applications
rewritten to name the plugin, their policy in plugin parameters, other objects as
they were (every object without the fields the API server sets: resourceVersion,
uid, managedFields, status, ...), and a registries file for the credentials and
registries found (last, or in --registries-out). Above each Application, comments
say what could not be carried over ("not carried over"), which words the two tools
read differently and the spelling that keeps argocd-image-updater's meaning
("differs"), and what changed with nothing lost ("note"). The output is the same
for the same input.

Exit status: 0 migrated; 1 with --check, something could not be carried over (the
list on stderr, nothing on stdout); 2 bad input (YAML that does not parse, a key
repeated in a mapping, a file that cannot be read, a resource with fields of the
wrong type, inputs over --max-input).`,
		Example: `  argocd-image-resolver migrate apps/*.yaml > migrated.yaml
  kubectl get applications.argoproj.io,imageupdaters -n argocd -o yaml | argocd-image-resolver migrate --registries-out registries.yaml
  argocd-image-resolver migrate --check apps/web.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			inputs, err := migrate.ReadInputs(cmd.InOrStdin(), args, int64(maxInput))
			var res *migrate.Result
			if err == nil {
				res, err = migrate.Migrate(inputs, migrate.Options{PluginName: pluginName})
			}
			var ie *migrate.InputError
			if errors.As(err, &ie) {
				return &exitError{code: exitInput, err: err}
			}
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			if check {
				for _, o := range res.Objects {
					for _, f := range o.Findings {
						if f.Kind == migrate.Lost {
							fmt.Fprintf(stderr, "%s: not carried over: %s\n", o.Object, f.Text)
						}
					}
				}
				if res.Lost > 0 {
					return &exitError{code: exitNoTag, err: fmt.Errorf("migrate --check: %d things could not be carried over", res.Lost)}
				}
				return nil
			}
			out := res.Stream()
			if registriesOut != "" {
				out = res.Manifests
				if res.Registries != nil {
					if err := os.WriteFile(registriesOut, res.Registries, 0o644); err != nil {
						return fmt.Errorf("--registries-out: %w", err)
					}
				}
			}
			if _, err := cmd.OutOrStdout().Write(out); err != nil {
				return err
			}
			if res.Lost > 0 {
				fmt.Fprintf(stderr, "migrate: %d things could not be carried over; each is a \"not carried over\" comment above its object\n", res.Lost)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "print nothing; exit 1 if anything could not be carried over, listing it on stderr")
	cmd.Flags().StringVar(&registriesOut, "registries-out", "", "write the registries file to FILE instead of after the manifests")
	cmd.Flags().StringVar(&pluginName, "plugin-name", migrate.DefaultPluginName, "the plugin's name in Applications (plugin.yaml's name-version)")
	cmd.Flags().Var(&maxInput, "max-input", "bytes read at most, all inputs together (files, directories, stdin): "+sizeAccepted)
	return cmd
}

// sizeAccepted is how a size flag is written (config.ParseSize).
const sizeAccepted = "an integer or with a unit: 512KiB, 64MiB, 1GiB"

// sizeFlag is a byte size flag, read and written as configuration sizes are.
type sizeFlag int64

func (s *sizeFlag) String() string { return config.FormatSize(int64(*s)) }
func (s *sizeFlag) Type() string   { return "size" }

func (s *sizeFlag) Set(v string) error {
	n, err := config.ParseSize(v)
	if err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%q: a size of at least 1 byte (%s)", v, sizeAccepted)
	}
	*s = sizeFlag(n)
	return nil
}
