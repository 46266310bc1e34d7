package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.yaml.in/yaml/v4"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/services/platform/event"
	"github.com/bookstore-go/bookstore/testenv"
)

const (
	dashboardFile   = "deploy/grafana/dashboards/bookstore.json"
	datasourceFile  = "deploy/grafana/provisioning/datasources/prometheus.yml"
	prometheusFile  = "deploy/prometheus/prometheus.yml"
	rabbitmqConf    = "deploy/rabbitmq/rabbitmq.conf"
	rabbitmqPlugins = "deploy/rabbitmq/enabled_plugins"
)

// externalMetrics are dashboard metrics that RabbitMQ's exporter (rabbitmq_prometheus,
// scraped on :15692) provides, not our services. They are exempt from the "really
// exported" check; any other metric in the dashboard must come from a service binary.
var externalMetrics = map[string]string{
	"rabbitmq_queue_messages": "rabbitmq", // per queue with prometheus.return_per_object_metrics
}

// promLabels are added by Prometheus at scrape time, not by the exporter.
var promLabels = []string{"job", "instance"}

// selector is one metric selector of a dashboard query.
type selector struct {
	panel, expr string
	metric      string
	labels      []string // label names the query matches or groups on
	job         string   // the job="..." it pins, if any
}

// dashboardSelectors parses every query of the dashboard with Prometheus's own PromQL
// parser and returns its metric selectors.
func dashboardSelectors(t testing.TB) []selector {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	dsUID := provisionedDatasourceUID(t)
	p := parser.NewParser(parser.Options{})
	var out []selector
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, pn := range panels {
			if ids[pn.ID] {
				t.Errorf("%s: panel id %d used twice", dashboardFile, pn.ID)
			}
			ids[pn.ID] = true
			walk(pn.Panels)
			if pn.Type != "row" && len(pn.Targets) == 0 {
				t.Errorf("panel %q has no query", pn.Title)
			}
			for _, tg := range pn.Targets {
				if tg.Datasource.UID != dsUID {
					t.Errorf("panel %q: datasource %q, want the provisioned %q", pn.Title, tg.Datasource.UID, dsUID)
				}
				// Grafana's interval variables, replaced as Grafana would.
				expr := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h").Replace(tg.Expr)
				if strings.Contains(expr, "$") {
					t.Errorf("panel %q: query uses a variable the test does not know: %s", pn.Title, tg.Expr)
					continue
				}
				ast, err := p.ParseExpr(expr)
				if err != nil {
					t.Errorf("panel %q: %s: %v", pn.Title, tg.Expr, err)
					continue
				}
				out = append(out, selectorsOf(pn.Title, tg.Expr, ast)...)
			}
		}
	}
	walk(dash.Panels)
	if len(out) == 0 {
		t.Fatalf("%s: no metric selector found", dashboardFile)
	}
	return out
}

// selectorsOf returns the metric selectors of a query, each with the labels it matches
// on and the labels an enclosing aggregation groups it by.
func selectorsOf(panel, expr string, ast parser.Expr) []selector {
	var out []selector
	var visit func(n parser.Node, grouping []string)
	visit = func(n parser.Node, grouping []string) {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			if !n.Without {
				grouping = append(slices.Clone(grouping), n.Grouping...)
			}
		case *parser.VectorSelector:
			s := selector{panel: panel, expr: expr, metric: n.Name, labels: slices.Clone(grouping)}
			for _, m := range n.LabelMatchers {
				switch {
				case m.Name == labels.MetricName:
					s.metric = m.Value
				case m.Name == "job" && m.Type == labels.MatchEqual:
					s.job = m.Value
				default:
					s.labels = append(s.labels, m.Name)
				}
			}
			out = append(out, s)
			return
		}
		for child := range parser.ChildrenIter(n) {
			visit(child, grouping)
		}
	}
	visit(ast, nil)
	return out
}

func provisionedDatasourceUID(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), datasourceFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", datasourceFile, err)
	}
	if len(cfg.Datasources) != 1 || cfg.Datasources[0].Type != "prometheus" || cfg.Datasources[0].URL != "http://prometheus:9090" {
		t.Fatalf("%s: want one prometheus datasource at http://prometheus:9090, got %+v", datasourceFile, cfg.Datasources)
	}
	return cfg.Datasources[0].UID
}

// prometheusJobs returns prometheus.yml's scrape jobs and their targets.
func prometheusJobs(t testing.TB) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), prometheusFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", prometheusFile, err)
	}
	jobs := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s scrapes %s, the services serve /metrics", sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			jobs[sc.JobName] = append(jobs[sc.JobName], st.Targets...)
		}
	}
	return jobs
}

// TestPrometheusScrapesEveryService checks that Prometheus scrapes each service, as its
// own job, at the compose service's name and port, and RabbitMQ's exporter with
// per-object metrics (which the DLQ depth panel needs).
func TestPrometheusScrapesEveryService(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	jobs := prometheusJobs(t)
	p := loadCompose(t, nil, composeFile)
	for _, c := range contractServices {
		want := []string{fmt.Sprintf("%s:%d", c.Name, c.Port)}
		if got := jobs[c.Name]; !slices.Equal(got, want) {
			t.Errorf("%s job %s targets %v, want %v", prometheusFile, c.Name, got, want)
		}
	}
	if got := jobs["rabbitmq"]; !slices.Equal(got, []string{"rabbitmq:15692"}) {
		t.Errorf("%s job rabbitmq targets %v, want [rabbitmq:15692]", prometheusFile, got)
	}
	for job, targets := range jobs {
		for _, target := range targets {
			if _, ok := p.Services[hostOf(target)]; !ok {
				t.Errorf("%s: job %s scrapes %s, which is not a compose service", prometheusFile, job, target)
			}
		}
	}
	conf, _ := os.ReadFile(filepath.Join(root, rabbitmqConf))
	if !strings.Contains(string(conf), "\nprometheus.return_per_object_metrics = true\n") {
		t.Errorf("%s does not switch on per-object metrics: rabbitmq_queue_messages{queue=...} would not exist", rabbitmqConf)
	}
	plugins, _ := os.ReadFile(filepath.Join(root, rabbitmqPlugins))
	for _, plugin := range []string{"rabbitmq_management", "rabbitmq_prometheus"} {
		if !strings.Contains(string(plugins), plugin) {
			t.Errorf("%s does not enable %s", rabbitmqPlugins, plugin)
		}
	}
	for _, s := range dashboardSelectors(t) {
		if _, ok := jobs[s.job]; s.job != "" && !ok {
			t.Errorf("panel %q selects job %q, which Prometheus does not scrape", s.panel, s.job)
		}
	}
	for metric, job := range externalMetrics {
		if _, ok := jobs[job]; !ok {
			t.Errorf("external metric %s is said to come from job %s, which Prometheus does not scrape", metric, job)
		}
	}
}

// exported is what one /metrics scrape showed: every sample name (histograms as their
// _bucket, _sum and _count series) with the label names seen on it.
type exported map[string]map[string]bool

func scrape(ctx context.Context, url string) (exported, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	out := exported{}
	add := func(name string, extra ...string) map[string]bool {
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for _, l := range extra {
			out[name][l] = true
		}
		return out[name]
	}
	for name, f := range families {
		var names []string
		switch f.GetType().String() {
		case "HISTOGRAM":
			names = []string{name + "_bucket", name + "_sum", name + "_count"}
			add(name+"_bucket", "le")
		case "SUMMARY":
			names = []string{name, name + "_sum", name + "_count"}
			add(name, "quantile")
		default:
			names = []string{name}
		}
		for _, n := range names {
			add(n)
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					add(n, l.GetName())
				}
			}
		}
	}
	return out, nil
}

// missing lists the selectors no running service satisfies: an unknown metric, or a
// label the metric does not carry, or a job="x" whose service does not export it.
func missing(selectors []selector, scrapes map[string]exported) []string {
	var out []string
	for _, s := range selectors {
		if _, external := externalMetrics[s.metric]; external {
			continue
		}
		where := slices.Sorted(keys(scrapes))
		if _, ok := scrapes[s.job]; s.job != "" && ok {
			where = []string{s.job}
		}
		found := false
		for _, svc := range where {
			labelsSeen, ok := scrapes[svc][s.metric]
			if !ok {
				continue
			}
			hasAll := true
			for _, l := range s.labels {
				hasAll = hasAll && (labelsSeen[l] || slices.Contains(promLabels, l))
			}
			found = found || hasAll
		}
		if !found {
			out = append(out, fmt.Sprintf("panel %q: %s with labels %v (in %v): %s", s.panel, s.metric, s.labels, where, s.expr))
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestDashboardMetricsAreExported starts every service binary that exists, drives the
// system through everything the dashboard graphs (an order and its replay, events and
// duplicates, poison messages, an ambiguous provider answer that needs reconciling), and
// checks that every metric and label the dashboard queries appears on some service's
// /metrics. OpenTelemetry counters appear on /metrics only once they have counted
// something, which is why the test makes each of them count.
func TestDashboardMetricsAreExported(t *testing.T) {
	t.Parallel()
	selectors := dashboardSelectors(t)
	used := map[string]bool{}
	for _, s := range selectors {
		used[s.metric] = true
	}
	for metric := range externalMetrics {
		if !used[metric] {
			t.Errorf("externalMetrics lists %s, which the dashboard does not use", metric)
		}
	}

	binaries := builtBinaries(t)
	running := existingServices(t)
	if !slices.Contains(running, "ordering") {
		t.Fatal("services/ordering/cmd/ordering does not exist")
	}
	amqpURL := testenv.VHost(t)
	// In compose, RabbitMQ loads definitions.json, queues included, before any service
	// starts. A service's restricted user may redeclare another service's queue, but is
	// refused (ACCESS_REFUSED) creating it; now that /readyz waits for the consumer,
	// notification, started first into an empty vhost, would never be ready. So the
	// queues are declared here first, as the definitions would have them.
	sut.Channel(t, amqpURL)
	sys := startSystem(t, binaries, running, amqpURL)

	drive(t, sys, amqpURL)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var last []string
	for {
		scrapes := map[string]exported{}
		for name, base := range sys.urls {
			e, err := scrape(ctx, base+"/metrics")
			if err != nil {
				t.Fatalf("scrape %s: %v", name, err)
			}
			scrapes[name] = e
		}
		last = missing(selectors, scrapes)
		if len(last) == 0 {
			t.Logf("every dashboard metric is exported by %v", running)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dashboard metrics not exported by any of %v after the workload:\n  %s\n(service logs below)",
				running, strings.Join(last, "\n  "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// system is the running service processes of one test.
type system struct {
	urls  map[string]string // service -> http://127.x.y.z:port
	users map[string]string // broker service -> the AMQP URL of its own user on the test's vhost
}

// startSystem starts the services in dependency order (the provider before notification)
// with a fresh database each, one shared fresh vhost and free ports, each through
// sut.StartProcess, which waits for its /readyz and prints its log if the test fails.
func startSystem(t *testing.T, binaries map[string]string, services []string, amqpURL string) system {
	t.Helper()
	sys := system{urls: map[string]string{}, users: map[string]string{}}
	// Each service logs in to RabbitMQ as its docker compose user would: the permissions
	// of definitions.json, tried by the real binaries doing their real work. Each
	// consumer takes its events from its producer's user (CONSUMER_PRODUCER, since the
	// users here are the test's own copies of ordering and inventory).
	defs := readDefinitions(t)
	compose := loadCompose(t, nil, composeFile)
	for _, name := range []string{"ordering", "inventory", "notification"} {
		if slices.Contains(services, name) {
			sys.users[name] = serviceUserURL(t, defs, compose, amqpURL, name)
		}
	}
	producer := map[string]string{"inventory": "ordering", "ordering": "inventory", "notification": "inventory"}
	order := []string{"emailprovider", "notification", "inventory", "ordering"}
	for _, name := range order {
		if !slices.Contains(services, name) {
			t.Logf("%s is not written yet: not started", name)
			continue
		}
		vars := serviceVariables(t, binaries[name])
		adminURL, dbURL := testenv.Database(t, name)
		serviceAMQPURL := amqpURL
		if _, reads := vars["AMQP_URL"]; reads {
			serviceAMQPURL = sys.users[name]
		}
		all := map[string]string{
			"DATABASE_URL": dbURL, "DATABASE_ADMIN_URL": adminURL, "AMQP_URL": serviceAMQPURL,
			"LOG_LEVEL":           "debug",
			"EMAILPROVIDER_ADMIN": "1",
			"PROVIDER_TIMEOUT":    "500ms", // notification gives up on a stalled send sooner
			// notification's key at the provider, and the test's own in the same account
			"EMAILPROVIDER_API_KEYS": "bookstore:" + dashboardNotificationKey + ":send,read,bookstore:" + dashboardKey + ":send,read,admin",
			"EMAILPROVIDER_API_KEY":  dashboardNotificationKey,
		}
		if u, ok := sys.urls["emailprovider"]; ok {
			all["EMAILPROVIDER_URL"] = u
		}
		if u, ok := sys.users[producer[name]]; ok {
			all["CONSUMER_PRODUCER"] = testenv.Login(u)
		}
		if name == "ordering" {
			// drive makes a publish the broker returns by unbinding inventory's queue;
			// ordering's relay would otherwise bind it back before publishing.
			all["RELAY_QUEUE_CHECK"] = "mandatory"
		}
		env := map[string]string{}
		for k, v := range all {
			if _, reads := vars[k]; reads { // what its --help says it reads, and only that
				env[k] = v
			}
		}
		sys.urls[name] = sut.StartProcess(t, binaries[name], nil, env).Base
	}
	return sys
}

// dune is the first book of inventory's seeded catalogue (docs/contracts.md).
var dune = uuid.MustParse("018f2b1e-0000-7000-8000-000000000001")

// drive makes every counter of the dashboard count at least once, in the order a
// reader of the dashboard would see it happen.
func drive(t *testing.T, sys system, amqpURL string) {
	t.Helper()
	provider, withProvider := sys.urls["emailprovider"]
	notification, withNotification := sys.urls["notification"]
	faults := func(body string) {
		if withProvider && withNotification {
			httpDo(t, http.MethodPut, provider+"/admin/faults", "", body, http.StatusOK)
		}
	}

	// The provider accepts and sends, then stalls past notification's timeout: the send
	// is ambiguous and notification must reconcile by key.
	faults(`{"fail_rate":0,"ambiguous_rate":1,"latency":"0s"}`)

	// An order, and its replay under the same Idempotency-Key.
	order := placeOrder(t, sys.urls["ordering"], uuid.NewString(), true)

	// Events published as a producer would, each twice with the same id: one processed,
	// one duplicate, for every consumer. Then poison for each queue.
	reserved := stockReserved(t, order)
	other := uuid.New()
	placed, err := event.New("bookstore/ordering", contracts.OrderPlaced, other.String(), 1,
		contracts.OrderPlacedData{OrderID: other, CustomerEmail: "other@example.com", Lines: []contracts.Line{{BookID: dune, Quantity: 1}}, PlacedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []event.Envelope{reserved, reserved, placed, placed} {
		publishEvent(t, sys, env)
	}
	for _, key := range []string{contracts.OrderPlaced, contracts.StockRejected} {
		sut.PublishPoison(t, amqpURL, broker.Message{RoutingKey: key, Publishing: amqp.Publishing{MessageId: uuid.NewString(), Type: key, ContentType: event.ContentType, Body: []byte("not json")}})
	}

	if withProvider && withNotification {
		// Reconciled: the record of the ambiguous send completes without a second send.
		testenv.Eventually(t, 60*time.Second, "notification of the first order completed by reconciliation", func() bool {
			var recs []struct{ Status string }
			resp, err := http.Get(notification + "/notifications?order_id=" + order.String())
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			_ = json.NewDecoder(resp.Body).Decode(&recs)
			return len(recs) > 0 && recs[0].Status == "completed"
		})
		// A plain send, and a client retrying one at the provider (a replay).
		faults(`{"fail_rate":0,"ambiguous_rate":0,"latency":"0s"}`)
		publishEvent(t, sys, stockReserved(t, uuid.New()))
		email := `{"to":"retry@example.com","subject":"retried","text":"sent once"}`
		key := uuid.NewString()
		httpDo(t, http.MethodPost, provider+"/v1/emails", key, email, http.StatusAccepted)
		httpDo(t, http.MethodPost, provider+"/v1/emails", key, email, http.StatusAccepted)
	}

	// Both producers published with their own restricted users: ordering the order
	// placed above, inventory its outcome (of that order or the published one).
	for _, producer := range []string{"ordering", "inventory"} {
		if base, ok := sys.urls[producer]; ok {
			testenv.Eventually(t, 60*time.Second, producer+" publishing with its definitions.json user", func() bool {
				return testenv.Metric(t, base, "bookstore_outbox_published_total") > 0
			})
		}
	}

	// A publish the broker cannot route: once ordering's outbox is drained, the binding
	// of inventory's queue goes, and the next order's event has nowhere to go (ordering's
	// relay trusts mandatory here: see startSystem).
	testenv.Eventually(t, 60*time.Second, "ordering's outbox drained", func() bool {
		v, ok := testenv.MetricOK(t, sys.urls["ordering"], "bookstore_outbox_pending")
		return ok && v == 0
	})
	if err := sut.Channel(t, amqpURL).QueueUnbind(contracts.QueueInventoryOrderPlaced, contracts.OrderPlaced, contracts.Exchange, nil); err != nil {
		t.Fatal(err)
	}
	placeOrder(t, sys.urls["ordering"], uuid.NewString(), false)
}

func placeOrder(t testing.TB, ordering, key string, replay bool) uuid.UUID {
	t.Helper()
	body := fmt.Sprintf(`{"customer_email":"dashboard@example.com","lines":[{"book_id":"%s","quantity":1}]}`, dune)
	first := httpDo(t, http.MethodPost, ordering+"/orders", key, body, http.StatusCreated)
	if replay {
		httpDo(t, http.MethodPost, ordering+"/orders", key, body, http.StatusOK)
	}
	var order struct {
		ID uuid.UUID `json:"id"`
	}
	if err := json.Unmarshal(first, &order); err != nil {
		t.Fatal(err)
	}
	return order.ID
}

func stockReserved(t testing.TB, order uuid.UUID) event.Envelope {
	t.Helper()
	env, err := event.New("bookstore/inventory", contracts.StockReserved, order.String(), 1,
		contracts.StockReservedData{OrderID: order, CustomerEmail: "dashboard@example.com", Lines: []contracts.Line{{BookID: dune, Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// publishEvent publishes an envelope with the AMQP properties of the contracts, as its
// producer: logged in as the producing service's user, with a publisher of its own.
func publishEvent(t testing.TB, sys system, env event.Envelope) {
	t.Helper()
	data, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	producer := strings.TrimPrefix(env.Source, "bookstore/")
	conn := broker.NewConn(sys.users[producer], "dashboard-"+producer)
	defer conn.Close()
	pub := broker.NewPublisher(conn, contracts.Topology, 10*time.Second)
	defer pub.Close()
	msg := broker.Message{RoutingKey: env.Type, Publishing: broker.EventPublishing(env.ID, env.Type, producer, env.Time, data)}
	if err := pub.PublishBatch(context.Background(), []broker.Message{msg})[0]; err != nil {
		t.Fatalf("publish %s as %s: %v", env.Type, producer, err)
	}
}

// The API keys notification and this test hold at the email provider.
const (
	dashboardNotificationKey = "dashboard-notification-key-0123456789"
	dashboardKey             = "dashboard-test-key-0123456789abcdef01"
)

func httpDo(t testing.TB, method, url, idempotencyKey, body string, want int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	req.Header.Set("Authorization", "Bearer "+dashboardKey) // the provider's; the others ignore it
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s %s, want %d", method, url, resp.Status, out, want)
	}
	return out
}
