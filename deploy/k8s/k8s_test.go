package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	local      = "overlays/local"
	production = "overlays/production"
	// productionBroker is the RabbitmqCluster and its topology, applied before the rest.
	productionBroker = "overlays/production/broker"
	partOf           = "app.kubernetes.io/part-of"
	appName          = "app.kubernetes.io/name"
)

// runtimeVariables are read by the Go runtime, not by a service's --help table.
var runtimeVariables = []string{"GOMEMLIMIT", "GOMAXPROCS", "GODEBUG"}

// podVariables are set from the pod itself, where compose has nothing to match: RELAY_ID
// is the pod's name, so a container restarted in its pod takes its claims back at once.
var podVariables = map[string]string{"RELAY_ID": "metadata.name"}

// consumers are the services that use the broker; the email provider does not.
var consumers = []string{"ordering", "inventory", "notification"}

// webServices serve a page rather than an API of the contracts: no database, no broker
// user, no row in docs/contracts.md's services table (its port is in the sentence beside
// it). Every check of a service's pod covers them too.
var webServices = []string{"storefront"}

// overlayServices: the email provider is a stand-in and runs in local only.
var overlayServices = map[string][]string{
	local:      {"ordering", "inventory", "notification", "emailprovider", "storefront"},
	production: {"ordering", "inventory", "notification", "storefront"},
}

// browserVariables name an address as the reader's browser reaches it, not one the pod
// dials: the storefront's links to Jaeger (compose's http://localhost:16686, a
// port-forward in local) and to the source. They are no Service of the overlay.
var browserVariables = []string{"JAEGER_URL", "SOURCE_URL"}

// storefrontDemos are the storefront's break-it switches, each with the value that keeps
// it off: STOREFRONT_DEMOS=0 hides the panel whose buttons fault the email provider and
// pause a relay, and an empty STOREFRONT_RELAY_PID names no relay to pause.
var storefrontDemos = map[string]string{"STOREFRONT_DEMOS": "0", "STOREFRONT_RELAY_PID": ""}

// storefrontSettings are the storefront's other STOREFRONT_ variables, which break
// nothing: how long a pause lasts.
var storefrontSettings = []string{"STOREFRONT_RELAY_PAUSE"}

func TestOverlaysBuildAndDecodeStrictly(t *testing.T) {
	for _, dir := range []string{"base", local, production, productionBroker} {
		b := build(t, dir) // fails the test on any object that does not decode
		if len(b.Objects) == 0 {
			t.Errorf("%s builds nothing", dir)
		}
	}
}

// Exactly the services each overlay should run, each a Deployment labelled part of
// Bookstore with a Service, a PodDisruptionBudget and a ConfigMap.
func TestOverlaysRunTheirServices(t *testing.T) {
	for dir, want := range overlayServices {
		b := build(t, dir)
		var have []string
		for _, o := range b.all("Deployment") {
			if o.Typed.(*appsv1.Deployment).Labels[partOf] == "bookstore" {
				have = append(have, o.Name)
			}
		}
		slices.Sort(have)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(have, w) {
			t.Errorf("%s runs %v, want %v", dir, have, w)
		}
		for _, o := range b.Objects {
			if dir == production && strings.Contains(o.Name, "emailprovider") {
				t.Errorf("%s: %s %s: the email provider is a stand-in for local only", dir, o.Kind, o.Name)
			}
		}
	}
}

// deployments returns the overlay's Bookstore Deployments by service name.
func deployments(b built) map[string]*appsv1.Deployment {
	out := map[string]*appsv1.Deployment{}
	for _, o := range b.all("Deployment") {
		if d := o.Typed.(*appsv1.Deployment); d.Labels[partOf] == "bookstore" {
			out[o.Name] = d
		}
	}
	return out
}

// environment is a container's variables as the pod sees them: a literal value, or
// where it comes from (configMap or secret, name, key).
type envSource struct {
	Value          string
	Kind, Ref, Key string // "ConfigMap" or "Secret"; empty for a literal
}

func environment(t testing.TB, b built, c corev1.Container) map[string]envSource {
	t.Helper()
	env := map[string]envSource{}
	for _, f := range c.EnvFrom {
		switch {
		case f.ConfigMapRef != nil:
			o, ok := b.get("ConfigMap", f.ConfigMapRef.Name)
			if !ok {
				t.Errorf("%s: container %s: envFrom ConfigMap %s is not in the overlay", b.Dir, c.Name, f.ConfigMapRef.Name)
				continue
			}
			for k, v := range o.Typed.(*corev1.ConfigMap).Data {
				env[f.Prefix+k] = envSource{Value: v, Kind: "ConfigMap", Ref: f.ConfigMapRef.Name, Key: k}
			}
		default:
			t.Errorf("%s: container %s: envFrom other than a ConfigMap (credentials are named one by one)", b.Dir, c.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envSource{Value: e.Value}
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = envSource{Kind: "Secret", Ref: e.ValueFrom.SecretKeyRef.Name, Key: e.ValueFrom.SecretKeyRef.Key}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			env[e.Name] = envSource{Kind: "ConfigMap", Ref: e.ValueFrom.ConfigMapKeyRef.Name, Key: e.ValueFrom.ConfigMapKeyRef.Key}
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = envSource{Kind: "Field", Key: e.ValueFrom.FieldRef.FieldPath}
		default:
			t.Errorf("%s: container %s: %s comes from neither a ConfigMap, a Secret nor a field of the pod", b.Dir, c.Name, e.Name)
		}
	}
	return env
}

// resolve is a variable's value where the overlay holds it: a literal, a ConfigMap, or a
// Secret with data (local's development credentials). ok is false for a Secret the
// overlay names but does not hold (production's).
func resolve(b built, s envSource) (string, bool) {
	switch s.Kind {
	case "":
		return s.Value, true
	case "ConfigMap":
		if o, ok := b.get("ConfigMap", s.Ref); ok {
			v, ok := o.Typed.(*corev1.ConfigMap).Data[s.Key]
			return v, ok
		}
	case "Secret":
		if o, ok := b.get("Secret", s.Ref); ok {
			sec := o.Typed.(*corev1.Secret)
			if v, ok := sec.StringData[s.Key]; ok {
				return v, true
			}
			v, ok := sec.Data[s.Key]
			return string(v), ok
		}
	}
	return "", false
}

// externalSecrets are the Secrets a production Deployment may name without the overlay
// holding them, with the keys each has: those an operator writes for a resource in the
// overlay (CloudNativePG's <cluster>-app for a Cluster it bootstraps), and those a
// Messaging Topology Operator User imports its credentials from, which docs/kubernetes.md
// tells the operator to create (username, password, and the service's AMQP url).
func externalSecrets(t testing.TB, b built) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range b.all("Cluster") {
		if o.APIVersion == "postgresql.cnpg.io/v1" {
			out[o.Name+"-app"] = []string{"uri", "username", "password", "host", "port", "dbname", "jdbc-uri", "pgpass"}
		}
	}
	for _, o := range b.all("User") {
		if name, ok := dig(o.fields(t), "spec", "importCredentialsSecret", "name").(string); ok {
			out[name] = []string{"username", "password", "url", "host"}
		}
	}
	// notification's and the storefront's API keys at the real email provider, which the
	// provider issues and the operator stores (docs/kubernetes.md creates them).
	out["notification-emailprovider"] = []string{"api-key"}
	out["storefront-emailprovider"] = []string{"api-key"}
	return out
}

// Every ConfigMap and Secret a Deployment or StatefulSet names exists in the overlay with
// the key it reads, or, in production, is one the operators write or the User CRs import.
func TestReferencedConfigMapsAndSecretsExist(t *testing.T) {
	for _, dir := range []string{local, production} {
		b := build(t, dir)
		external := externalSecrets(t, b)
		check := func(owner, kind, name, key string) {
			if o, ok := b.get(kind, name); ok {
				if key == "" {
					return
				}
				var keys []string
				switch x := o.Typed.(type) {
				case *corev1.ConfigMap:
					keys = slices.Collect(mapKeys(x.Data))
				case *corev1.Secret:
					keys = append(slices.Collect(mapKeys(x.Data)), slices.Collect(mapKeys(x.StringData))...)
				}
				if !slices.Contains(keys, key) {
					t.Errorf("%s: %s reads key %q of %s %s, which has %v", dir, owner, key, kind, name, keys)
				}
				return
			}
			if keys, ok := external[name]; ok && kind == "Secret" && dir == production {
				if key != "" && !slices.Contains(keys, key) {
					t.Errorf("%s: %s reads key %q of Secret %s, which holds %v", dir, owner, key, name, keys)
				}
				return
			}
			t.Errorf("%s: %s names %s %s, which is not in the overlay", dir, owner, kind, name)
		}
		var pods []struct {
			owner string
			spec  corev1.PodSpec
		}
		for _, o := range b.all("Deployment") {
			pods = append(pods, struct {
				owner string
				spec  corev1.PodSpec
			}{"Deployment " + o.Name, o.Typed.(*appsv1.Deployment).Spec.Template.Spec})
		}
		for _, o := range b.all("StatefulSet") {
			pods = append(pods, struct {
				owner string
				spec  corev1.PodSpec
			}{"StatefulSet " + o.Name, o.Typed.(*appsv1.StatefulSet).Spec.Template.Spec})
		}
		for _, p := range pods {
			for _, v := range p.spec.Volumes {
				if v.ConfigMap != nil {
					check(p.owner, "ConfigMap", v.ConfigMap.Name, "")
				}
				if v.Secret != nil {
					check(p.owner, "Secret", v.Secret.SecretName, "")
				}
			}
			for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
				for _, f := range c.EnvFrom {
					if f.ConfigMapRef != nil {
						check(p.owner, "ConfigMap", f.ConfigMapRef.Name, "")
					}
					if f.SecretRef != nil {
						check(p.owner, "Secret", f.SecretRef.Name, "")
					}
				}
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						check(p.owner, "Secret", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
					}
					if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
						check(p.owner, "ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key)
					}
				}
			}
		}
		for _, o := range b.all("TriggerAuthentication") {
			refs, _ := dig(o.fields(t), "spec", "secretTargetRef").([]any)
			for _, r := range refs {
				r := r.(map[string]any)
				check("TriggerAuthentication "+o.Name, "Secret", r["name"].(string), r["key"].(string))
			}
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// portOf resolves a probe's port (a number or a container port's name).
func portOf(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// Each service's pod: its port from docs/contracts.md, readiness on /readyz, liveness on
// /healthz, HTTP_ADDR :<port> (every interface of the pod), scrape annotations for
// /metrics on that port, a Service on it, resources, and a termination period longer
// than the drain.
func TestServicePods(t *testing.T) {
	ports := contractPorts(t)
	c := loadCompose(t)
	drain := shutdownTimeout(t)
	for _, dir := range []string{local, production} {
		b := build(t, dir)
		for name, d := range deployments(b) {
			id := dir + ": Deployment " + name
			port, ok := ports[name]
			if !ok {
				t.Errorf("%s: no such service in docs/contracts.md", id)
				continue
			}
			spec := d.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Errorf("%s: want one container, have %d", id, len(spec.Containers))
				continue
			}
			ctr := spec.Containers[0]
			if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port }) {
				t.Errorf("%s: container ports %v, want %d (docs/contracts.md)", id, ctr.Ports, port)
			}
			for _, pr := range []struct {
				kind, path string
				probe      *corev1.Probe
			}{{"readiness", "/readyz", ctr.ReadinessProbe}, {"liveness", "/healthz", ctr.LivenessProbe}, {"startup", "/healthz", ctr.StartupProbe}} {
				if pr.probe == nil {
					if pr.kind != "startup" {
						t.Errorf("%s: no %s probe", id, pr.kind)
					}
					continue
				}
				if g := pr.probe.HTTPGet; g == nil || g.Path != pr.path || portOf(ctr, g.Port) != port {
					t.Errorf("%s: %s probe %+v, want GET %s on %d", id, pr.kind, pr.probe.ProbeHandler, pr.path, port)
				}
			}
			env := environment(t, b, ctr)
			if v, _ := resolve(b, env["HTTP_ADDR"]); v != fmt.Sprintf(":%d", port) {
				t.Errorf("%s: HTTP_ADDR %q, want \":%d\": every interface of the pod, on its port", id, v, port)
			}
			ann := d.Spec.Template.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(int(port)) || ann["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s: scrape annotations %v, want scrape true, port %d, path /metrics", id, ann, port)
			}
			if o, ok := b.get("Service", name); !ok {
				t.Errorf("%s: no Service %s", id, name)
			} else {
				svc := o.Typed.(*corev1.Service)
				if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
					t.Errorf("%s: Service selector %v does not select the pods %v", id, svc.Spec.Selector, d.Spec.Template.Labels)
				}
				if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != port || portOf(ctr, svc.Spec.Ports[0].TargetPort) != port {
					t.Errorf("%s: Service ports %+v, want %d to the container's %d", id, svc.Spec.Ports, port, port)
				}
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := ctr.Resources.Requests[r]; !ok {
					t.Errorf("%s: no %s request", id, r)
				}
				if _, ok := ctr.Resources.Limits[r]; !ok {
					t.Errorf("%s: no %s limit", id, r)
				}
			}
			// The memory limit is compose's mem_limit, above GOMEMLIMIT so the GC works
			// harder near it before the kernel kills the process.
			if lim, ok := ctr.Resources.Limits[corev1.ResourceMemory]; ok {
				want := resource.MustParse(strings.TrimSuffix(c.Services[name].MemLimit, "m") + "Mi")
				gm, _ := resolve(b, env["GOMEMLIMIT"])
				if lim.Cmp(want) != 0 {
					t.Errorf("%s: memory limit %s, want compose's mem_limit %s", id, lim.String(), want.String())
				}
				if g, err := resource.ParseQuantity(strings.TrimSuffix(gm, "B")); err != nil || g.Cmp(lim) >= 0 {
					t.Errorf("%s: GOMEMLIMIT %q, want one below the memory limit %s", id, gm, lim.String())
				}
			}
			// Termination: the preStop pause, then the service's drain, within the grace
			// period, which is at least compose's stop_grace_period.
			var pause time.Duration
			if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil && ctr.Lifecycle.PreStop.Sleep != nil {
				pause = time.Duration(ctr.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			}
			grace := 30 * time.Second
			if spec.TerminationGracePeriodSeconds != nil {
				grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			}
			stop, err := time.ParseDuration(c.Services[name].StopGracePeriod)
			if err != nil {
				t.Fatalf("compose %s stop_grace_period: %v", name, err)
			}
			if grace <= pause+drain || grace < stop {
				t.Errorf("%s: terminationGracePeriodSeconds %v, want more than preStop %v + drain %v (httpapi.ShutdownTimeout) and at least compose's %v", id, grace, pause, drain, stop)
			}
			if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("%s: the pod does not require a non-root user (the image runs as nonroot)", id)
			}
		}
	}
}

// shutdownTimeout reads httpapi.ShutdownTimeout, the longest a service drains.
func shutdownTimeout(t testing.TB) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "services", "platform", "httpapi", "serve.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`ShutdownTimeout = (\d+) \* time\.Second`).FindSubmatch(b)
	if m == nil {
		t.Fatal("httpapi.ShutdownTimeout not found in services/platform/httpapi/serve.go")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return time.Duration(n) * time.Second
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Every variable a service's pod sets is one the service reads (its --help) or the Go
// runtime does; the broker users read AMQP_URL and the email provider does not; every
// service with a database (the storefront has none) is given its DATABASE_URL.
func TestEnvironmentMatchesHelp(t *testing.T) {
	vars := serviceVariables(t)
	for _, dir := range []string{local, production} {
		b := build(t, dir)
		for name, d := range deployments(b) {
			env := environment(t, b, d.Spec.Template.Spec.Containers[0])
			for v := range env {
				if !vars[name][v] && !slices.Contains(runtimeVariables, v) {
					t.Errorf("%s: Deployment %s sets %s, which %s --help does not list", dir, name, v, name)
				}
			}
			for _, v := range []string{"DATABASE_URL", "HTTP_ADDR"} {
				if _, ok := env[v]; !ok && vars[name][v] {
					t.Errorf("%s: Deployment %s does not set %s", dir, name, v)
				}
			}
			// A service with a relay names it after its pod (podVariables).
			if r, ok := env["RELAY_ID"]; vars[name]["RELAY_ID"] && (!ok || !isPodVariable("RELAY_ID", r)) {
				t.Errorf("%s: Deployment %s: RELAY_ID %+v, want the pod's name (fieldRef metadata.name)", dir, name, r)
			}
			if _, ok := env["AMQP_URL"]; ok != slices.Contains(consumers, name) {
				t.Errorf("%s: Deployment %s sets AMQP_URL: %v, want %v", dir, name, ok, !ok)
			}
		}
	}
}

// Credentials come from Secrets, referenced by name and key: no URL with a password is
// written in a ConfigMap or a literal, and no Secret with data is in the base or in
// production. Only local carries credentials, and they are compose's development ones.
func TestNoCredentialsOutsideLocal(t *testing.T) {
	userinfo := regexp.MustCompile(`://[^/@\s:]+:[^/@\s]+@`)
	for _, dir := range []string{"base", local, production, productionBroker} {
		b := build(t, dir)
		for name, d := range deployments(b) {
			env := environment(t, b, d.Spec.Template.Spec.Containers[0])
			for v, s := range env {
				if s.Kind != "Secret" && userinfo.MatchString(s.Value) {
					t.Errorf("%s: Deployment %s: %s holds a credential outside a Secret", dir, name, v)
				}
			}
			for _, v := range []string{"DATABASE_URL", "AMQP_URL", "DATABASE_ADMIN_URL"} {
				if s, ok := env[v]; ok && s.Kind != "Secret" {
					t.Errorf("%s: Deployment %s: %s is not from a Secret", dir, name, v)
				}
			}
		}
		for _, o := range b.all("ConfigMap") {
			for k, v := range o.Typed.(*corev1.ConfigMap).Data {
				if userinfo.MatchString(v) {
					t.Errorf("%s: ConfigMap %s key %s holds a credential", dir, o.Name, k)
				}
			}
		}
		if dir == local {
			continue
		}
		for _, o := range b.all("Secret") {
			if s := o.Typed.(*corev1.Secret); len(s.Data)+len(s.StringData) > 0 {
				t.Errorf("%s: Secret %s is defined with data; only the local overlay may carry credentials", dir, o.Name)
			}
		}
		for _, o := range b.Objects {
			if bytes.Contains(o.JSON, []byte("-dev@")) || bytes.Contains(o.JSON, []byte("postgres:postgres@")) {
				t.Errorf("%s: %s %s holds a development credential", dir, o.Kind, o.Name)
			}
		}
	}
}

// Images are the ones deploy/Dockerfile's target service builds for each service
// (compose's bookstore/<service>:dev in local; a registry's copy in production).
func TestImagesMatchTheDockerfile(t *testing.T) {
	df, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^FROM .* AS service$`).Match(df) || !bytes.Contains(df, []byte("./services/${SERVICE}/cmd/${SERVICE}")) {
		t.Fatal("deploy/Dockerfile has no target service building ./services/${SERVICE}/cmd/${SERVICE}")
	}
	c := loadCompose(t)
	for _, dir := range []string{local, production} {
		b := build(t, dir)
		for name, d := range deployments(b) {
			img := d.Spec.Template.Spec.Containers[0].Image
			cs := c.Services[name]
			if cs.Build.Target != "service" || cs.Build.Args["SERVICE"] != name {
				t.Errorf("compose builds %s with target %q and SERVICE %q", name, cs.Build.Target, cs.Build.Args["SERVICE"])
			}
			switch dir {
			case local:
				if img != cs.Image {
					t.Errorf("%s: Deployment %s runs %s, want compose's %s (kind load docker-image)", dir, name, img, cs.Image)
				}
			case production:
				repo, tag, _ := strings.Cut(img[strings.LastIndex(img, "/")+1:], ":")
				if !strings.HasSuffix(img[:strings.LastIndex(img, "/")+1]+repo, "/bookstore/"+name) || tag == "" || tag == "dev" || tag == "latest" {
					t.Errorf("%s: Deployment %s runs %s, want <registry>/bookstore/%s:<release tag>", dir, name, img, name)
				}
			}
		}
	}
}

// Production: at least two replicas of each service spread over nodes, and a
// PodDisruptionBudget that lets a drain take one but never all.
func TestProductionAvailability(t *testing.T) {
	b := build(t, production)
	for name, d := range deployments(b) {
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		if replicas < 2 {
			t.Errorf("Deployment %s: %d replicas, want at least 2", name, replicas)
		}
		if !slices.ContainsFunc(d.Spec.Template.Spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
			return c.TopologyKey == "kubernetes.io/hostname"
		}) {
			t.Errorf("Deployment %s: not spread over nodes", name)
		}
		var pdb *policyv1.PodDisruptionBudget
		for _, o := range b.all("PodDisruptionBudget") {
			p := o.Typed.(*policyv1.PodDisruptionBudget)
			if p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				pdb = p
			}
		}
		if pdb == nil {
			t.Errorf("Deployment %s: no PodDisruptionBudget selects its pods", name)
			continue
		}
		unavailable := int32(-1)
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(replicas), true)
			if err == nil {
				unavailable = int32(v)
			}
		case pdb.Spec.MinAvailable != nil:
			v, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(replicas), true)
			if err == nil {
				unavailable = replicas - int32(v)
			}
		}
		if unavailable < 1 || unavailable >= replicas {
			t.Errorf("PodDisruptionBudget %s: allows %d of %d replicas down, want at least one and fewer than all", pdb.Name, unavailable, replicas)
		}
	}
}

// Local is compose on one node: every variable compose gives a service, with compose's
// value (the development credentials included); every host and port a service's URL
// names is a Service of the overlay; and the infrastructure's images are compose's. The
// broker and Postgres configuration are deploy/'s files, generated (generated_test.go).
func TestLocalMatchesCompose(t *testing.T) {
	c := loadCompose(t)
	b := build(t, local)
	for name, d := range deployments(b) {
		env := environment(t, b, d.Spec.Template.Spec.Containers[0])
		want := c.Services[name].Environment
		for k, v := range want {
			s, ok := env[k]
			if !ok {
				t.Errorf("Deployment %s does not set %s, which compose sets to %q", name, k, v)
				continue
			}
			if have, _ := resolve(b, s); have != v {
				t.Errorf("Deployment %s: %s %q, compose %q", name, k, have, v)
			}
		}
		for k, s := range env {
			if _, ok := want[k]; !ok && !isPodVariable(k, s) {
				t.Errorf("Deployment %s sets %s, which compose does not", name, k)
			}
		}
		for k, s := range env {
			if slices.Contains(browserVariables, k) {
				continue
			}
			v, _ := resolve(b, s)
			u, err := url.Parse(v)
			if err != nil || u.Host == "" {
				if h, p, err := net.SplitHostPort(v); err == nil && h != "" && k != "HTTP_ADDR" {
					checkServicePort(t, b, name, k, h, p)
				}
				continue
			}
			checkServicePort(t, b, name, k, u.Hostname(), u.Port())
		}
	}
	for _, o := range append(b.all("StatefulSet"), b.all("Deployment")...) {
		if _, ok := deployments(b)[o.Name]; ok {
			continue
		}
		var spec corev1.PodSpec
		switch x := o.Typed.(type) {
		case *appsv1.StatefulSet:
			spec = x.Spec.Template.Spec
		case *appsv1.Deployment:
			spec = x.Spec.Template.Spec
		}
		cs, ok := c.Services[o.Name]
		if !ok {
			t.Errorf("%s %s: compose has no such service", o.Kind, o.Name)
			continue
		}
		if img := spec.Containers[0].Image; img != cs.Image {
			t.Errorf("%s %s runs %s, compose %s", o.Kind, o.Name, img, cs.Image)
		}
	}
}

// isPodVariable: the variable is one of podVariables, from its field of the pod.
func isPodVariable(name string, s envSource) bool {
	path, ok := podVariables[name]
	return ok && s.Kind == "Field" && s.Key == path
}

// checkServicePort: host:port is a Service of the overlay exposing that port.
func checkServicePort(t testing.TB, b built, owner, variable, host, port string) {
	t.Helper()
	o, ok := b.get("Service", host)
	if !ok {
		t.Errorf("Deployment %s: %s names host %s, which is no Service of the overlay", owner, variable, host)
		return
	}
	p, _ := strconv.Atoi(port)
	if !slices.ContainsFunc(o.Typed.(*corev1.Service).Spec.Ports, func(sp corev1.ServicePort) bool { return int(sp.Port) == p }) {
		t.Errorf("Deployment %s: %s names %s:%s, which Service %s does not expose", owner, variable, host, port, host)
	}
}

// Production changes what a deployment must (replicas, images, the email provider, the
// superuser link gone) and nothing compose fixes: every other variable it sets has
// compose's value, and it sets no variable compose does not name.
func TestProductionAgreesWithCompose(t *testing.T) {
	c := loadCompose(t)
	b := build(t, production)
	differs := map[string]bool{"DATABASE_URL": true, "AMQP_URL": true, "EMAILPROVIDER_URL": true, "EMAILPROVIDER_API_KEY": true, "OTEL_EXPORTER_OTLP_ENDPOINT": true}
	for name, d := range deployments(b) {
		env := environment(t, b, d.Spec.Template.Spec.Containers[0])
		want := c.Services[name].Environment
		if _, ok := env["DATABASE_ADMIN_URL"]; ok {
			t.Errorf("Deployment %s sets DATABASE_ADMIN_URL: production services never connect as a superuser", name)
		}
		for k, s := range env {
			w, ok := want[k]
			if !ok {
				if !isPodVariable(k, s) {
					t.Errorf("Deployment %s sets %s, which compose does not", name, k)
				}
				continue
			}
			if differs[k] {
				continue
			}
			if v, _ := resolve(b, s); v != w {
				t.Errorf("Deployment %s: %s %q, compose %q", name, k, v, w)
			}
		}
	}
	// The real provider: notification sends through it, and the storefront shows each
	// email's deliveries from that same one.
	deps := deployments(b)
	sends, _ := resolve(b, environment(t, b, deps["notification"].Spec.Template.Spec.Containers[0])["EMAILPROVIDER_URL"])
	for _, name := range []string{"notification", "storefront"} {
		d, ok := deps[name]
		if !ok {
			t.Errorf("no Deployment %s", name)
			continue
		}
		v, _ := resolve(b, environment(t, b, d.Spec.Template.Spec.Containers[0])["EMAILPROVIDER_URL"])
		if v == "" || strings.Contains(v, "emailprovider") || v != sends {
			t.Errorf("Deployment %s: EMAILPROVIDER_URL %q: want the real provider, not the stand-in, the one notification sends through (%q)", name, v, sends)
		}
	}
}

// Production's storefront has every break-it switch off, set so in the overlay rather than
// left to the binary's default: its panel would fault the real email provider and pause a
// relay. Every STOREFRONT_ variable its --help lists is either such a switch or a setting
// that breaks nothing, so a new switch fails here until it is classified.
func TestProductionTurnsEveryStorefrontDemoOff(t *testing.T) {
	for v := range serviceVariables(t)["storefront"] {
		if _, demo := storefrontDemos[v]; strings.HasPrefix(v, "STOREFRONT_") && !demo && !slices.Contains(storefrontSettings, v) {
			t.Errorf("storefront --help lists %s: a demo switch (storefrontDemos, with its off value) or a harmless setting (storefrontSettings)?", v)
		}
	}
	b := build(t, production)
	d, ok := deployments(b)["storefront"]
	if !ok {
		t.Fatal("production runs no storefront")
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if len(ctr.Command)+len(ctr.Args) > 0 {
		t.Errorf("Deployment storefront: command %q args %q, want the image's (the storefront takes no command)", ctr.Command, ctr.Args)
	}
	env := environment(t, b, ctr)
	for v, off := range storefrontDemos {
		s, set := env[v]
		have, _ := resolve(b, s)
		switch {
		case off == "" && set && have != "":
			t.Errorf("Deployment storefront: %s %q, want it unset in production", v, have)
		case off != "" && (!set || have != off):
			t.Errorf("Deployment storefront: %s %q (set: %v), want %q, set in the overlay", v, have, set, off)
		}
	}
}

// definitions is the part of deploy/rabbitmq/definitions.json the broker users need.
type definitions struct {
	Users []struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	} `json:"users"`
	Permissions []struct {
		User, Vhost, Configure, Write, Read string
	} `json:"permissions"`
	TopicPermissions []struct {
		User, Vhost, Exchange, Write, Read string
	} `json:"topic_permissions"`
	Queues []struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"queues"`
}

func loadDefinitions(t testing.TB) definitions {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "rabbitmq", "definitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d definitions
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Production's broker: a RabbitmqCluster of three; per service a User whose credentials
// Secret is the one the service's AMQP_URL comes from, and the Permission and
// TopicPermission of definitions.json, regular expression for regular expression.
func TestProductionBroker(t *testing.T) {
	b := build(t, production)
	defs := loadDefinitions(t)
	clusters := b.all("RabbitmqCluster")
	if len(clusters) != 1 {
		t.Fatalf("want one RabbitmqCluster, have %d", len(clusters))
	}
	rc := clusters[0].fields(t)
	if r, _ := dig(rc, "spec", "replicas").(float64); r != 3 {
		t.Errorf("RabbitmqCluster %s: %v replicas, want 3 (quorum queues survive the loss of one)", clusters[0].Name, dig(rc, "spec", "replicas"))
	}
	deps := deployments(b)
	for _, s := range consumers {
		u, ok := b.get("User", s)
		if !ok {
			t.Errorf("no User %s", s)
			continue
		}
		uf := u.fields(t)
		if ref := dig(uf, "spec", "rabbitmqClusterReference", "name"); ref != clusters[0].Name {
			t.Errorf("User %s: cluster %v, want %s", s, ref, clusters[0].Name)
		}
		secret, _ := dig(uf, "spec", "importCredentialsSecret", "name").(string)
		if d, ok := deps[s]; ok {
			amqp := environment(t, b, d.Spec.Template.Spec.Containers[0])["AMQP_URL"]
			if amqp.Kind != "Secret" || amqp.Ref != secret {
				t.Errorf("Deployment %s: AMQP_URL from %s %s, want the Secret %s its broker user imports", s, amqp.Kind, amqp.Ref, secret)
			}
		}
		want := map[string]any{}
		for _, p := range defs.Permissions {
			if p.User == s {
				want["Permission"] = map[string]any{"vhost": p.Vhost, "userReference": map[string]any{"name": s},
					"rabbitmqClusterReference": map[string]any{"name": clusters[0].Name},
					"permissions":              map[string]any{"configure": p.Configure, "write": p.Write, "read": p.Read}}
			}
		}
		for _, p := range defs.TopicPermissions {
			if p.User == s {
				want["TopicPermission"] = map[string]any{"vhost": p.Vhost, "userReference": map[string]any{"name": s},
					"rabbitmqClusterReference": map[string]any{"name": clusters[0].Name},
					"permissions":              map[string]any{"exchange": p.Exchange, "write": p.Write, "read": p.Read}}
			}
		}
		for _, kind := range []string{"Permission", "TopicPermission"} {
			o, ok := b.get(kind, s)
			if w, wanted := want[kind]; ok != wanted {
				t.Errorf("%s %s in the overlay: %v, in definitions.json: %v", kind, s, ok, wanted)
			} else if ok {
				have := o.fields(t)["spec"]
				hj, _ := json.Marshal(have)
				wj, _ := json.Marshal(w)
				if !bytes.Equal(hj, wj) {
					t.Errorf("%s %s:\n have %s\n want %s (definitions.json)", kind, s, hj, wj)
				}
			}
		}
	}
	for _, o := range b.all("User") {
		if !slices.Contains(consumers, o.Name) && o.Name != "keda" {
			t.Errorf("User %s: no service logs in as it", o.Name)
		}
	}
}

// Production's Postgres: per service a CloudNativePG Cluster of a primary and a standby
// that creates the service's database owned by its role, and whose -app Secret is where
// the service's DATABASE_URL comes from.
func TestProductionDatabases(t *testing.T) {
	b := build(t, production)
	owners := 0 // the Deployments with a database: all but the web pages
	for name, d := range deployments(b) {
		if slices.Contains(webServices, name) {
			continue
		}
		owners++
		db := environment(t, b, d.Spec.Template.Spec.Containers[0])["DATABASE_URL"]
		cluster, ok := strings.CutSuffix(db.Ref, "-app")
		if db.Kind != "Secret" || db.Key != "uri" || !ok {
			t.Errorf("Deployment %s: DATABASE_URL from %s %s key %s, want a CloudNativePG Cluster's <cluster>-app, key uri", name, db.Kind, db.Ref, db.Key)
			continue
		}
		o, ok := b.get("Cluster", cluster)
		if !ok || o.APIVersion != "postgresql.cnpg.io/v1" {
			t.Errorf("Deployment %s: DATABASE_URL from %s, but no CloudNativePG Cluster %s", name, db.Ref, cluster)
			continue
		}
		f := o.fields(t)
		if n, _ := dig(f, "spec", "instances").(float64); n < 2 {
			t.Errorf("Cluster %s: %v instances, want a primary and a standby", cluster, dig(f, "spec", "instances"))
		}
		if dbn, owner := dig(f, "spec", "bootstrap", "initdb", "database"), dig(f, "spec", "bootstrap", "initdb", "owner"); dbn != name || owner != name {
			t.Errorf("Cluster %s: initdb database %v owner %v, want %s and %s (compose: one database and role per service)", cluster, dbn, owner, name, name)
		}
		if dig(f, "spec", "affinity", "enablePodAntiAffinity") != true || dig(f, "spec", "affinity", "topologyKey") != "kubernetes.io/hostname" {
			t.Errorf("Cluster %s: primary and standby may share a node", cluster)
		}
	}
	if n := len(b.all("Cluster")); n != owners {
		t.Errorf("%d Clusters for %d services with a database", n, owners)
	}
}

// KEDA scales each consumer on its own queue's depth (docs/contracts.md), with at least
// the Deployment's two replicas, reading the depth as the monitoring user keda.
func TestProductionScaling(t *testing.T) {
	b := build(t, production)
	queues := contractQueues(t)
	deps := deployments(b)
	defs := loadDefinitions(t)
	for _, s := range consumers {
		o, ok := b.get("ScaledObject", s)
		if !ok {
			t.Errorf("no ScaledObject %s", s)
			continue
		}
		f := o.fields(t)
		if target := dig(f, "spec", "scaleTargetRef", "name"); target != s || deps[s] == nil {
			t.Errorf("ScaledObject %s scales %v, want Deployment %s", s, target, s)
		}
		if min, _ := dig(f, "spec", "minReplicaCount").(float64); min < 2 {
			t.Errorf("ScaledObject %s: minReplicaCount %v, want at least 2", s, dig(f, "spec", "minReplicaCount"))
		}
		triggers, _ := dig(f, "spec", "triggers").([]any)
		if len(triggers) != 1 {
			t.Errorf("ScaledObject %s: %d triggers, want one, the queue", s, len(triggers))
			continue
		}
		tr := triggers[0].(map[string]any)
		md, _ := tr["metadata"].(map[string]any)
		if tr["type"] != "rabbitmq" || md["queueName"] != queues[s] || md["mode"] != "QueueLength" {
			t.Errorf("ScaledObject %s: trigger %v, want rabbitmq on %s, mode QueueLength", s, tr, queues[s])
		}
		if !slices.ContainsFunc(defs.Queues, func(q struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		}) bool {
			return q.Name == md["queueName"]
		}) {
			t.Errorf("ScaledObject %s: queue %v is not in definitions.json", s, md["queueName"])
		}
		auth, _ := dig(tr, "authenticationRef", "name").(string)
		ta, ok := b.get("TriggerAuthentication", auth)
		if !ok {
			t.Errorf("ScaledObject %s: TriggerAuthentication %q is not in the overlay", s, auth)
			continue
		}
		refs, _ := dig(ta.fields(t), "spec", "secretTargetRef").([]any)
		for _, r := range refs {
			secret := r.(map[string]any)["name"]
			if !slices.ContainsFunc(b.all("User"), func(u object) bool {
				uf := u.fields(t)
				tags, _ := dig(uf, "spec", "tags").([]any)
				return dig(uf, "spec", "importCredentialsSecret", "name") == secret && slices.Contains(tags, any("monitoring"))
			}) {
				t.Errorf("TriggerAuthentication %s: Secret %v is no monitoring User's credentials", auth, secret)
			}
		}
	}
	for _, o := range b.all("ScaledObject") {
		if !slices.Contains(consumers, o.Name) {
			t.Errorf("ScaledObject %s: not a consumer", o.Name)
		}
	}
}

// The Secrets production names and no operator writes are the ones docs/kubernetes.md
// tells the reader to create, with every key the manifests read from them.
func TestProductionSecretsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	b := build(t, production)
	read := map[string]map[string]bool{} // Secret to the keys read from it
	note := func(name, key string) {
		if read[name] == nil {
			read[name] = map[string]bool{}
		}
		if key != "" {
			read[name][key] = true
		}
	}
	for _, d := range deployments(b) {
		for _, s := range environment(t, b, d.Spec.Template.Spec.Containers[0]) {
			if s.Kind == "Secret" {
				note(s.Ref, s.Key)
			}
		}
	}
	for _, o := range b.all("TriggerAuthentication") {
		refs, _ := dig(o.fields(t), "spec", "secretTargetRef").([]any)
		for _, r := range refs {
			r := r.(map[string]any)
			note(r["name"].(string), r["key"].(string))
		}
	}
	for _, o := range b.all("User") {
		if name, ok := dig(o.fields(t), "spec", "importCredentialsSecret", "name").(string); ok {
			note(name, "username")
			note(name, "password")
		}
	}
	for name, keys := range read {
		if _, ok := b.get("Secret", name); ok {
			continue
		}
		if c, ok := strings.CutSuffix(name, "-app"); ok {
			if _, ok := b.get("Cluster", c); ok {
				continue // CloudNativePG writes it
			}
		}
		// The doc creates the services' Secrets in a loop over $s.
		spelt := name
		for _, s := range consumers {
			if strings.HasPrefix(name, s+"-") {
				spelt = "$s-" + strings.TrimPrefix(name, s+"-")
			}
		}
		i := bytes.Index(doc, []byte("create secret generic "+spelt+" "))
		if i < 0 {
			t.Errorf("docs/kubernetes.md does not create the Secret %s (as %q)", name, spelt)
			continue
		}
		// The command: up to the next command, the loop's end or the code block's.
		cmd := doc[i:]
		for _, end := range []string{"\n   kubectl ", "\n   done", "```"} {
			if j := bytes.Index(cmd, []byte(end)); j > 0 {
				cmd = cmd[:j]
			}
		}
		for k := range keys {
			if !bytes.Contains(cmd, []byte("--from-literal="+k+"=")) {
				t.Errorf("docs/kubernetes.md creates the Secret %s without the key %s", name, k)
			}
		}
	}
}
