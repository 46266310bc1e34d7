package harness

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// BrokerNodes is the cluster profile's RabbitMQ cluster (testenv/cluster.RabbitMQ): its
// nodes by index, which the node faults kill, stop and start again.
type BrokerNodes interface {
	URL(user, pass, vhost string) string // every node, in order
	Addrs() []string                     // each node's AMQP address
	ManagementURL() string               // a running node's management API, with the admin's credentials
	Leader(ctx context.Context, vhost, queue string) (int, error)
	Kill(i int) error
	Stop(i int) error
	Start(ctx context.Context, i int) error // returns once the node has rejoined
}

// PostgresNodes is one service's Postgres in the cluster profile
// (testenv/cluster.Postgres): a primary with one synchronous standby, which the harness
// fails over as CloudNativePG would.
type PostgresNodes interface {
	URL(user, db string) string // both hosts, target_session_attrs=read-write
	AdminURL() string           // the superuser's, likewise
	Primary() int
	PauseStandby() error
	ResumeStandby() error
	KillPrimary() error
	Promote(ctx context.Context) error
	Rejoin(ctx context.Context) error
}

// Cluster is what the cluster profile starts before the system and stops after it.
type Cluster struct {
	Broker   BrokerNodes
	Postgres map[string]PostgresNodes // by service (config.ClusterServices)
	closers  []func() error
}

// Close stops every server of the cluster and removes its directories.
func (c *Cluster) Close() error {
	var errs []error
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	return errors.Join(errs...)
}

// StartCluster starts the cluster profile's servers: a three-node RabbitMQ cluster and a
// primary with a synchronous standby for each of config.ClusterServices, in directories
// of their own under the system's temporary directory (testenv/cluster's root, which
// also sweeps what a killed run left; a report directory's path can be too long for a
// Postgres socket). On an error it stops whatever it had started.
func StartCluster(ctx context.Context) (*Cluster, error) {
	c := &Cluster{Postgres: map[string]PostgresNodes{}}
	if err := startClusterServers(ctx, c, ""); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// hostsOf returns the hosts of a multi-host URL (postgres://u@h1:p1,h2:p2/db): url.Parse
// keeps them as one Host, comma-separated.
func hostsOf(raw string) ([]string, *url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	return strings.Split(u.Host, ","), u, nil
}

// withHosts returns u with its hosts replaced.
func withHosts(u *url.URL, hosts []string) string {
	c := *u
	c.Host = strings.Join(hosts, ",")
	return c.String()
}

// management returns the management API's URL: a running node's in the cluster profile.
func (s *System) managementURL() string {
	if s.Cluster != nil {
		return s.Cluster.Broker.ManagementURL()
	}
	return s.Cfg.ManagementURL
}

// postgresLinks creates process name's link to its service's Postgres (every host of
// the cluster profile behind one link) and returns its DATABASE_URL and
// DATABASE_ADMIN_URL through it.
func (s *System) postgresLinks(name, service string, pgAdmin *url.URL) (dbURL, adminURL string, err error) {
	db := s.Cfg.DatabaseName(service)
	pg := s.Cluster.postgresOf(service)
	if pg == nil {
		// The link's far end is an orphan proxy, which can half-close the process's
		// connections (half_open).
		orphan, err := s.addOrphanProxy(name, pgAdmin.Host)
		if err != nil {
			return "", "", err
		}
		link, err := s.Net.AddLink(name+"-postgres", orphan.addr())
		if err != nil {
			return "", "", err
		}
		u := url.URL{Scheme: "postgres", User: url.User(db), Host: link, Path: "/" + db, RawQuery: "sslmode=disable"}
		admin := *pgAdmin
		admin.Host = link
		return u.String(), admin.String(), nil
	}
	hosts, u, err := hostsOf(pg.URL(db, db))
	if err != nil {
		return "", "", fmt.Errorf("%s postgres url: %w", service, err)
	}
	links, err := s.Net.AddLinkGroup(name+"-postgres", hosts)
	if err != nil {
		return "", "", err
	}
	if service == "ordering" && s.Cfg.OrderingCommit != "" {
		// The wrong design of -ordering-commit: ordering's commits return once the
		// primary has them, before the standby does.
		q := u.Query()
		// No space in the value (-cname=value, as getopt takes it): the services
		// re-encode DATABASE_URL (config.Common.PoolURL), a space comes out as +, and the
		// server refused "-c+synchronous_commit" as an unknown parameter.
		q.Set("options", "-csynchronous_commit="+s.Cfg.OrderingCommit)
		u.RawQuery = q.Encode()
	}
	adminHosts, admin, err := hostsOf(pg.AdminURL())
	if err != nil || len(adminHosts) != len(hosts) {
		return "", "", fmt.Errorf("%s postgres admin url %q: %v", service, pg.AdminURL(), err)
	}
	return withHosts(u, links), withHosts(admin, links), nil
}

// brokerLink creates process name's link to RabbitMQ (one proxy per node, each behind
// an alarm proxy of its own) and returns its AMQP_URL through it.
func (s *System) brokerLink(name, service string, amqpBase broker.Endpoints) (string, error) {
	nodes := amqpBase.Addrs()
	if s.Cluster != nil && slicesContains(s.Cfg.PinnedServices(), service) {
		nodes = nodes[config.PinnedNode : config.PinnedNode+1] // the wrong design of -pinned-broker
	}
	// Each link's far end is an alarm proxy, which can tell the process's connections
	// what a broker alarm would (broker_alarm).
	var targets []string
	for _, node := range nodes {
		alarm, err := s.addAlarmProxy(name, node)
		if err != nil {
			return "", err
		}
		targets = append(targets, alarm.addr())
	}
	links, err := s.Net.AddLinkGroup(name+"-rabbitmq", targets)
	if err != nil {
		return "", err
	}
	return amqpBase.WithHosts(links...).WithVHost(s.Vhost).String(), nil
}

func (c *Cluster) postgresOf(service string) PostgresNodes {
	if c == nil {
		return nil
	}
	return c.Postgres[service]
}

func slicesContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
