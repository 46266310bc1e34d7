package deploy

import (
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v4"
)

const alertsFile = "deploy/prometheus/alerts.yml"

// alertedMetrics are the metrics an operator must be told about, not only shown: what
// waits for a command (dead outbox rows, dead letters) and a relay falling
// behind. Each must appear in an alert's expression.
var alertedMetrics = []string{
	"bookstore_outbox_dead",
	"bookstore_consumer_dead_letters",
	"bookstore_outbox_oldest_pending_age_seconds",
}

// TestAlertRulesParseAndWatchWhatIsParked parses alerts.yml with Prometheus's own rule
// parser (the check `promtool check rules` makes: YAML, PromQL, templates), checks that
// each alert says how bad it is and what to do, and that every metric it uses is graphed
// on the dashboard, whose metrics TestDashboardMetricsAreExported proves exported: an
// alert on a metric no service exports never fires.
func TestAlertRulesParseAndWatchWhatIsParked(t *testing.T) {
	t.Parallel()
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(filepath.Join(repoRoot(t), alertsFile), false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	graphed := map[string]bool{}
	for _, s := range dashboardSelectors(t) {
		graphed[s.metric] = true
	}
	alerted := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: recording rule %s; this file holds alerts", g.Name, r.Record)
				continue
			}
			if r.For == 0 {
				t.Errorf("alert %s fires on a single evaluation; give it a for: duration", r.Alert)
			}
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, sev)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a summary or a description", r.Alert)
			}
			ast, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
				continue
			}
			for _, s := range selectorsOf(r.Alert, r.Expr, ast) {
				alerted[s.metric] = true
				if !graphed[s.metric] {
					t.Errorf("alert %s uses %s, which the dashboard does not graph", r.Alert, s.metric)
				}
			}
		}
	}
	for _, m := range alertedMetrics {
		if !alerted[m] {
			t.Errorf("no alert watches %s", m)
		}
	}
	// What the operator runs is in the text the alert carries.
	text, _ := os.ReadFile(filepath.Join(repoRoot(t), alertsFile))
	for _, cmd := range []string{"outbox list-dead", "outbox retry-dead", "dlq list", "dlq replay"} {
		if !strings.Contains(string(text), cmd) {
			t.Errorf("%s never names the command %q", alertsFile, cmd)
		}
	}
}

// TestPrometheusLoadsTheAlertRules checks that prometheus.yml names alerts.yml in
// rule_files and that compose mounts the file where that name resolves: beside the
// configuration file, whose directory Prometheus resolves relative rule paths against.
func TestPrometheusLoadsTheAlertRules(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, prometheusFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", prometheusFile, err)
	}
	prom, ok := loadCompose(t, nil, composeFile).Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service in compose")
	}
	configDir := ""
	for _, arg := range prom.Command {
		if f, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configDir = path.Dir(f)
		}
	}
	if configDir == "" {
		t.Fatalf("prometheus command %v names no --config.file", prom.Command)
	}
	mounted := func(source, target string) bool {
		return slices.ContainsFunc(prom.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Source == filepath.Join(root, source) && v.Target == target
		})
	}
	found := false
	for _, f := range cfg.RuleFiles {
		target := f
		if !path.IsAbs(f) {
			target = path.Join(configDir, f)
		}
		if !mounted(alertsFile, target) {
			t.Errorf("%s loads rule file %s (%s in the container), which compose does not mount from %s", prometheusFile, f, target, alertsFile)
		}
		found = found || path.Base(f) == path.Base(alertsFile)
	}
	if !found {
		t.Errorf("%s does not load %s (rule_files: %v)", prometheusFile, alertsFile, cfg.RuleFiles)
	}
}
