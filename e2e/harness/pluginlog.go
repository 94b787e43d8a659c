package harness

import (
	"sync"
	"testing"

	log "github.com/sirupsen/logrus"
)

// PluginStderr holds the stderr of the plugin commands the in-process cmp-server ran
// successfully. A failed run's stderr is in the render's error already; a successful
// one's is only logged by Argo CD (cmpserver/plugin.runCommand, "Plugin command
// successful" at info level, field "stderr"), which is where this takes it from.
type PluginStderr struct {
	mu   sync.Mutex
	runs []string
}

// CapturePluginStderr records the stderr of every successful plugin run from now to
// the end of the test. It raises logrus' level to info for that, and keeps the lines
// E2E_ARGOCD_LOGLEVEL would not print out of the test output.
func CapturePluginStderr(t testing.TB) *PluginStderr {
	t.Helper()
	p := &PluginStderr{}
	logger := log.StandardLogger()
	level, formatter := logger.GetLevel(), logger.Formatter
	hooks := make(log.LevelHooks)
	for l, hs := range logger.Hooks {
		hooks[l] = append([]log.Hook(nil), hs...)
	}
	if level < log.InfoLevel {
		logger.SetFormatter(quietFormatter{inner: formatter, max: level})
		logger.SetLevel(log.InfoLevel)
	}
	logger.AddHook(p)
	t.Cleanup(func() {
		logger.ReplaceHooks(hooks)
		logger.SetLevel(level)
		logger.SetFormatter(formatter)
	})
	return p
}

// Levels implements log.Hook.
func (p *PluginStderr) Levels() []log.Level { return []log.Level{log.InfoLevel, log.WarnLevel} }

// Fire implements log.Hook.
func (p *PluginStderr) Fire(e *log.Entry) error {
	switch e.Message {
	case "Plugin command successful", "Plugin command returned zero output":
	default:
		return nil
	}
	stderr, _ := e.Data["stderr"].(string)
	p.mu.Lock()
	p.runs = append(p.runs, stderr)
	p.mu.Unlock()
	return nil
}

// Runs returns the stderr of each successful run so far, oldest first.
func (p *PluginStderr) Runs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.runs...)
}

// Reset forgets the runs so far.
func (p *PluginStderr) Reset() {
	p.mu.Lock()
	p.runs = nil
	p.mu.Unlock()
}

// quietFormatter writes nothing for entries above max (the level the test run asked
// for), so raising the level to capture them does not print them.
type quietFormatter struct {
	inner log.Formatter
	max   log.Level
}

func (f quietFormatter) Format(e *log.Entry) ([]byte, error) {
	if e.Level > f.max {
		return nil, nil
	}
	return f.inner.Format(e)
}
