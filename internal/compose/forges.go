package compose

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
)

// forges builds the forge of each git.forges entry once, when a repository
// under its prefix first needs a pull request; tokens and keys are read at
// each request, so a rotated one is used at once.
type forges struct {
	git config.GitConfig
	reg prometheus.Registerer

	mu    sync.Mutex
	built map[string]forge.Forge // by prefix
}

// ForgeOf returns the pin writer's forge of repoURL (pin.WithForges).
func (f *forges) ForgeOf(repoURL string) (pin.ForgeRepo, error) {
	gf, repo, err := f.git.ForgeFor(repoURL)
	if err != nil {
		return pin.ForgeRepo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fg := f.built[gf.Prefix]
	if fg == nil {
		if fg, err = forge.New(forgeConfig(gf, f.reg)); err != nil {
			return pin.ForgeRepo{}, err
		}
		f.built[gf.Prefix] = fg
	}
	return pin.ForgeRepo{Forge: fg, Repo: repo, Labels: gf.Labels, Reviewers: gf.Reviewers, Assignees: gf.Assignees, AutoMerge: gf.AutoMerge}, nil
}

// forgeConfig is the forge.Config of a git.forges entry.
func forgeConfig(gf config.GitForge, reg prometheus.Registerer) forge.Config {
	cfg := forge.Config{Kind: gf.Kind, API: gf.API, Observe: pin.ForgeObserver(reg, gf.Kind)}
	if gf.AppID != 0 {
		keyFile := gf.PrivateKeyFile
		cfg.GitHubApp = &forge.GitHubApp{AppID: gf.AppID, InstallationID: gf.InstallationID, PrivateKey: func() ([]byte, error) {
			b, err := os.ReadFile(keyFile)
			if err != nil {
				return nil, fmt.Errorf("forge %s: privateKeyFile: %w", gf.Prefix, err)
			}
			return b, nil
		}}
		return cfg
	}
	cfg.Token = func(context.Context) (string, error) { return gf.ForgeToken() }
	return cfg
}
