package faults

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/harness"
)

// clusterBroker is the cluster profile's broker as far as the management API goes: its
// nodes' management API is managementURL.
type clusterBroker struct {
	harness.BrokerNodes
	managementURL string
}

func (b clusterBroker) ManagementURL() string { return b.managementURL }

// managementServer records the requests it gets and answers 404 for a vhost it lacks,
// as RabbitMQ does.
type managementServer struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
}

func newManagementServer(t *testing.T, vhost string) *managementServer {
	m := &managementServer{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.paths = append(m.paths, r.Method+" "+r.URL.EscapedPath())
		m.mu.Unlock()
		if !strings.HasPrefix(r.URL.EscapedPath(), "/api/policies/"+vhost+"/") {
			http.Error(w, `{"error":"Object Not Found","reason":"Not Found"}`, http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *managementServer) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.paths...)
}

// In the cluster profile the run's vhost (chaoscluster) lives on the cluster's nodes, not
// on the machine's broker that --rabbitmq-management names: queue_full's and
// consumer_timeout's policies must go to the cluster. The first cluster run put
// queue_full's on the machine's broker, which has no such vhost, and got a 404.
func TestAQueuePolicyGoesToTheRunsVhostOnTheClustersBroker(t *testing.T) {
	cfg, err := config.Parse([]string{"--profile", "cluster"}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	machine := newManagementServer(t, "no-vhost-of-this-run")
	cluster := newManagementServer(t, cfg.Prefix)
	cfg.ManagementURL = "http://guest:guest@" + strings.TrimPrefix(machine.URL, "http://")
	sys := &harness.System{
		Cfg:     cfg,
		Vhost:   cfg.Prefix,
		Cluster: &harness.Cluster{Broker: clusterBroker{managementURL: "http://admin:secret@" + strings.TrimPrefix(cluster.URL, "http://")}},
	}
	in := NewInjector(sys, nil, nil)
	ctx := context.Background()
	if err := in.putPolicy(ctx, "chaos-queue-full", queueFullPolicy); err != nil {
		t.Fatalf("put: %v (machine's broker got %v)", err, machine.requests())
	}
	if err := in.putPolicy(ctx, "chaos-queue-full", ""); err != nil {
		t.Fatalf("delete: %v", err)
	}
	want := []string{"PUT /api/policies/chaoscluster/chaos-queue-full", "DELETE /api/policies/chaoscluster/chaos-queue-full"}
	if got := cluster.requests(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the cluster's broker got %v, want %v", got, want)
	}
	if got := machine.requests(); len(got) > 0 {
		t.Errorf("the machine's broker got %v; it has no vhost of the run", got)
	}
}
