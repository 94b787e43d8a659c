package harness

import (
	"context"
	"fmt"

	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v2/reposerver/apiclient"
	"github.com/argoproj/argo-cd/v2/util/app/discovery"
	argopath "github.com/argoproj/argo-cd/v2/util/app/path"
	"github.com/argoproj/argo-cd/v2/util/cmp"
	argoio "github.com/argoproj/argo-cd/v2/util/io"
	grpc_retry "github.com/grpc-ecosystem/go-grpc-middleware/retry"
)

// ParametersAnnouncement asks the plugin for its parameters the way the UI's
// Parameters tab does: repo-server's GetAppDetails for a plugin source
// (populatePluginAppDetails, unexported in Argo CD, reproduced here call for call)
// builds a smaller env than GenerateManifests (ARGOCD_APP_NAME and the source's
// repo URL, path and target revision, plus the plugin's env and parameters), streams
// the repository to the cmp-server, which runs spec.parameters.dynamic and merges its
// JSON with spec.parameters.static.
func ParametersAnnouncement(repo *GitRepo, app App) ([]*apiclient.ParameterAnnouncement, error) {
	app = app.withDefaults(repo.URL())
	q := app.Request()
	appPath, err := argopath.Path(repo.Root, app.Path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), app.Timeout)
	defer cancel()

	envVars := []string{
		fmt.Sprintf("ARGOCD_APP_NAME=%s", q.AppName),
		fmt.Sprintf("ARGOCD_APP_SOURCE_REPO_URL=%s", q.Repo.Repo),
		fmt.Sprintf("ARGOCD_APP_SOURCE_PATH=%s", q.ApplicationSource.Path),
		fmt.Sprintf("ARGOCD_APP_SOURCE_TARGET_REVISION=%s", q.ApplicationSource.TargetRevision),
	}
	env, err := pluginParamEnvs(envVars, q.ApplicationSource.Plugin)
	if err != nil {
		return nil, fmt.Errorf("failed to get env vars for plugin: %w", err)
	}

	conn, cmpClient, err := discovery.DetectConfigManagementPlugin(ctx, appPath, repo.Root, app.Plugin, env, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to detect CMP for app: %w", err)
	}
	defer argoio.Close(conn)

	stream, err := cmpClient.GetParametersAnnouncement(ctx, grpc_retry.Disable())
	if err != nil {
		return nil, fmt.Errorf("error getting parametersAnnouncementStream: %w", err)
	}
	if err := cmp.SendRepoStream(stream.Context(), appPath, repo.Root, stream, env, nil); err != nil {
		return nil, fmt.Errorf("error sending file to cmp-server: %w", err)
	}
	announcement, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fmt.Errorf("failed to get parameter announcement: %w", err)
	}
	return announcement.ParameterAnnouncements, nil
}

// pluginParamEnvs is repo-server's getPluginParamEnvs (unexported): the plugin's env
// entries as ARGOCD_ENV_<name> with $VARs substituted from envVars, then
// ARGOCD_APP_PARAMETERS and PARAM_*.
func pluginParamEnvs(envVars []string, plugin *v1alpha1.ApplicationSourcePlugin) ([]string, error) {
	env := envVars
	parsedEnv := make(v1alpha1.Env, len(env))
	for i, v := range env {
		parsedVar, err := v1alpha1.NewEnvEntry(v)
		if err != nil {
			return nil, fmt.Errorf("failed to parse env vars")
		}
		parsedEnv[i] = parsedVar
	}
	if plugin != nil {
		for _, entry := range plugin.Env {
			env = append(env, fmt.Sprintf("ARGOCD_ENV_%s=%s", entry.Name, parsedEnv.Envsubst(entry.Value)))
		}
		paramEnv, err := plugin.Parameters.Environ()
		if err != nil {
			return nil, fmt.Errorf("failed to generate env vars from parameters: %w", err)
		}
		env = append(env, paramEnv...)
	}
	return env, nil
}
