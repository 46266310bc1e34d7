// Package harness runs the Bookstore as real processes on this machine: it supervises
// them (kill, freeze, restart, hold down), puts a Toxiproxy link and an AMQP alarm proxy
// in front of each dependency, and reads the system's databases, queues and APIs
// directly.
package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// Services are the four binaries the run starts, in the order they start: the provider
// first (notification needs it), inventory before ordering (it seeds the catalogue the
// load orders from).
var Services = []string{"emailprovider", "inventory", "notification", "ordering"}

// System is the running Bookstore: the processes, their links and the harness's own
// direct connections to each database (never through a proxy: the checker must see the
// truth even while a link is down).
type System struct {
	Cfg       config.Config
	Cluster   *Cluster // the cluster profile's servers; nil: the machine's own
	dir       string   // the report directory
	Vhost     string
	AMQPURL   string // the run's vhost, direct: every node (broker.Dial tries them in turn)
	Net       *network
	Procs     []*Process
	DBs       map[string]*pgxpool.Pool // by service, connected as the superuser
	onFPCrash func(p *Process, spec string)
	alarmMu   sync.Mutex
	alarms    map[string][]*alarmProxy // by process: between its RabbitMQ link and the broker (alarm.go)
	orphanMu  sync.Mutex
	orphans   map[string]*orphanProxy // by process: between its Postgres link and Postgres (orphan.go)
}

// Process returns the process called name.
func (s *System) Process(name string) *Process {
	for _, p := range s.Procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ProcessesOf returns the processes that run service.
func (s *System) ProcessesOf(service string) []*Process {
	var out []*Process
	for _, p := range s.Procs {
		if p.Service == service {
			out = append(out, p)
		}
	}
	return out
}

// ResetStores drops the run's databases and roles and recreates its RabbitMQ vhost, so
// every run starts from nothing; the services create and migrate their databases
// themselves on start, as in production.
//
// In the cluster profile the cluster's servers are new: only the email provider's
// database, on the machine's Postgres, is dropped, and the vhost is made on the cluster.
func ResetStores(ctx context.Context, cfg config.Config, cluster *Cluster) error {
	conn, err := pgx.Connect(ctx, cfg.AdminURL)
	if err != nil {
		return fmt.Errorf("postgres: %w (is it running? make services)", err)
	}
	defer conn.Close(ctx)
	if cluster != nil {
		cfg.ManagementURL = cluster.Broker.ManagementURL()
	}
	for _, svc := range Services {
		if cluster.postgresOf(svc) != nil {
			continue
		}
		id := pgx.Identifier{cfg.DatabaseName(svc)}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", id, err)
		}
		if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+id); err != nil {
			return fmt.Errorf("drop role %s: %w", id, err)
		}
	}
	m := broker.Management{URL: cfg.ManagementURL}
	if err := m.DeleteVHost(ctx, cfg.Prefix); err != nil {
		return fmt.Errorf("rabbitmq: %w (is the management plugin on? make services)", err)
	}
	if err := m.CreateVHost(ctx, cfg.Prefix, cmp.Or(m.User(), "guest")); err != nil {
		return fmt.Errorf("rabbitmq: %w", err)
	}
	return setDeliveryLimit(ctx, m, cfg)
}

// setDeliveryLimit, with --delivery-limit, shrinks the delivery limit of ordering's and
// inventory's queues with a policy on the run's vhost (for a quorum queue RabbitMQ takes
// the lower of the policy's and the queue's own x-delivery-limit), so that a Postgres
// outage of seconds outlasts what the old consumers spent on it (see budgets).
// Notification's queue keeps its own: its deliveries also pay for the provider's
// failures, which the run injects all the time. It is off by default: RabbitMQ 3.10 also
// counts every return to the queue (a channel closed, a consumer killed) against the
// limit, and under the default run's crashes and outages a limit of 5 dead-lettered
// valid messages.
func setDeliveryLimit(ctx context.Context, m broker.Management, cfg config.Config) error {
	if cfg.DeliveryLimit == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{
		"pattern":    "^(" + regexp.QuoteMeta(contracts.QueueInventoryOrderPlaced) + "|" + regexp.QuoteMeta(contracts.QueueOrderingStockEvents) + ")$",
		"apply-to":   "queues",
		"definition": map[string]any{"delivery-limit": cfg.DeliveryLimit},
	})
	if err != nil {
		return err
	}
	path := "/api/policies/" + url.PathEscape(cfg.Prefix) + "/chaos-delivery-limit"
	if err := m.Do(ctx, http.MethodPut, path, string(body), nil); err != nil {
		return fmt.Errorf("rabbitmq: delivery-limit policy: %w", err)
	}
	return nil
}

// DropStores removes the run's databases, roles and vhost.
func DropStores(ctx context.Context, cfg config.Config) error {
	var errs []error
	conn, err := pgx.Connect(ctx, cfg.AdminURL)
	if err == nil {
		defer conn.Close(ctx)
		for _, svc := range Services {
			id := pgx.Identifier{cfg.DatabaseName(svc)}.Sanitize()
			_, e1 := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)")
			_, e2 := conn.Exec(ctx, "DROP ROLE IF EXISTS "+id)
			errs = append(errs, e1, e2)
		}
	}
	errs = append(errs, err)
	errs = append(errs, broker.Management{URL: cfg.ManagementURL}.DeleteVHost(ctx, cfg.Prefix))
	return errors.Join(errs...)
}

// Start starts the Toxiproxy links and every process, and waits until each
// answers /readyz.
//
// With a cluster (the cluster profile), each process is given every broker node and its
// service's primary and standby, each behind a proxy of the process's link, and the
// harness's own connections go to the cluster directly.
func Start(ctx context.Context, cfg config.Config, cluster *Cluster, dir string, onFPCrash func(*Process, string)) (*System, error) {
	s := &System{Cfg: cfg, Cluster: cluster, dir: dir, Vhost: cfg.Prefix, DBs: map[string]*pgxpool.Pool{}, onFPCrash: onFPCrash}
	pgAdmin, err := url.Parse(cfg.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	amqpBase, err := broker.ParseEndpoints(cfg.AMQPURL)
	if err != nil {
		return nil, fmt.Errorf("amqp url: %w", err)
	}
	if cluster != nil {
		// The services log in as the cluster's administrator, as they log in as guest to
		// the machine's broker.
		m, err := url.Parse(cluster.Broker.ManagementURL())
		if err != nil {
			return nil, fmt.Errorf("management url: %w", err)
		}
		pass, _ := m.User.Password()
		if amqpBase, err = broker.ParseEndpoints(cluster.Broker.URL(m.User.Username(), pass, "/")); err != nil {
			return nil, fmt.Errorf("cluster amqp url: %w", err)
		}
	}
	s.AMQPURL = amqpBase.WithVHost(cfg.Prefix).String()
	toxiLog, err := os.Create(filepath.Join(dir, "logs", "toxiproxy.log"))
	if err != nil {
		return nil, err
	}
	if s.Net, err = startNetwork(toxiLog); err != nil {
		return nil, err
	}

	// INVENTORY_ADMIN=1: the harness sets the stock of the catalogue with PUT /books/{id}
	// before the load, on loopback, as an administrator would.
	inventoryEnv := []string{"INVENTORY_STRATEGY=" + cfg.InventoryStrategy, "INVENTORY_CANCELLATIONS=" + cfg.Cancellations, "INVENTORY_ADMIN=1"}
	// Shorter leases and reconciliation delays than production's: a killed relay's claimed
	// rows, and an email record a crash left "processing", are taken over within seconds,
	// so a run with a kill every few seconds settles in minutes. Both only decide how soon
	// another instance may take over; neither changes what the checker must find.
	// RELAY_MAX_ATTEMPTS is shrunk so that a broker outage of seconds outlasts what the old
	// relay spent on one (see budgets); an outage now spends no attempt at all.
	relayAttempts := fmt.Sprintf("RELAY_MAX_ATTEMPTS=%d", cfg.RelayMaxAttempts)
	// The consumers' retry backoff is shrunk too, for the same reason (see config/budget.go).
	consumerRetry := []string{"CONSUMER_RETRY_BASE=" + config.ConsumerRetryBase.String(), "CONSUMER_RETRY_MAX=" + config.ConsumerRetryMax.String()}
	inventoryEnv = append(append(inventoryEnv, relayAttempts), consumerRetry...)
	orderingEnv := append([]string{"ORDERING_PUBLISHER=" + cfg.Publisher, "RELAY_LEASE=12s", "RELAY_CONFIRM_TIMEOUT=2s", relayAttempts}, consumerRetry...)
	if cfg.OrderingPoolWait > 0 {
		// Load shedding's bound (docs/performance.md#load-shedding); 1h all but turns it off.
		orderingEnv = append(orderingEnv, "ORDERING_POOL_WAIT="+cfg.OrderingPoolWait.String())
	}
	notificationEnv := []string{"RECONCILE_AFTER=5s", "SWEEP_INTERVAL=1s",
		// The provider is faulty about half the time in a default run (a fault window every
		// second or two, up to 90% failures, plus the link's own faults). The default budget
		// of 8 attempts is then used up by transient faults alone and the email is parked
		// for an operator: a legitimate escalation, but not the failure this run is about.
		"NOTIFICATION_MAX_ATTEMPTS=30"}
	// The processes and their RELAY_IDs: the default layout, or every service doubled
	// (--double, make chaos-load; config/loadprofile.go).
	specs := cfg.Layout(inventoryEnv, notificationEnv, orderingEnv)
	for _, sp := range specs {
		p, err := s.newProcess(ctx, sp.Name, sp.Service, sp.Args, sp.Extra, pgAdmin, amqpBase)
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.Procs = append(s.Procs, p)
	}
	// Start one at a time: each creates or migrates its database on start, and the second
	// inventory should find the first one's catalogue rather than race it.
	for _, p := range s.Procs {
		if err := p.start(ctx); err != nil {
			s.Stop()
			return nil, err
		}
		if err := p.WaitReady(ctx, 60*time.Second); err != nil {
			s.Stop()
			return nil, err
		}
	}
	for _, svc := range Services {
		u := *pgAdmin
		if pg := cluster.postgresOf(svc); pg != nil {
			// Both hosts, read-write: the pool follows the primary through a failover.
			if _, admin, err := hostsOf(pg.AdminURL()); err == nil {
				u = *admin
			}
		}
		u.Path = "/" + cfg.DatabaseName(svc)
		pool, err := pgxpool.New(ctx, u.String())
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("connect %s: %w", svc, err)
		}
		s.DBs[svc] = pool
	}
	return s, nil
}

// newProcess creates the process's links (Postgres, RabbitMQ, and for notification the
// provider) and its environment, all pointing at the proxies.
func (s *System) newProcess(ctx context.Context, name, service string, args, extra []string, pgAdmin *url.URL, amqpBase broker.Endpoints) (*Process, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dbURL, adminURL, err := s.postgresLinks(name, service, pgAdmin)
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"HTTP_ADDR=" + httpAddr,
		"DATABASE_URL=" + dbURL,
		"DATABASE_ADMIN_URL=" + adminURL,
		"LOG_LEVEL=info",
	}
	if service == "emailprovider" {
		env = append(env, "EMAILPROVIDER_API_KEYS="+ProviderAPIKeys)
	}
	if service != "emailprovider" {
		amqpURL, err := s.brokerLink(name, service, amqpBase)
		if err != nil {
			return nil, err
		}
		env = append(env, "AMQP_URL="+amqpURL)
		// Every process of a run logs in as the harness's one broker user, so each
		// consumer takes its events from that user.
		env = append(env, "CONSUMER_PRODUCER="+amqpBase.Login())
		env = append(env, s.Cfg.DesignEnv()...)
	}
	if service == "notification" {
		provider := s.Process("emailprovider")
		if provider == nil {
			return nil, errors.New("the email provider must be set up before notification")
		}
		providerLink, err := s.Net.AddLink(name+"-emailprovider", provider.HTTPAddr)
		if err != nil {
			return nil, err
		}
		env = append(env, "EMAILPROVIDER_URL=http://"+providerLink, "EMAILPROVIDER_API_KEY="+NotificationProviderKey)
	}
	log, err := os.Create(filepath.Join(s.dir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	return &Process{
		Name: name, Service: service, HTTPAddr: httpAddr,
		bin: filepath.Join(s.Cfg.BinDir, service), Args: args, Env: append(env, extra...), log: log,
		onFailpoint: s.onFPCrash,
	}, nil
}

// Stop stops every process at once (the checker has its snapshot: the order no longer
// matters), closes the links and the harness's connections.
func (s *System) Stop() {
	var wg sync.WaitGroup
	for _, p := range s.Procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(5 * time.Second)
			p.log.Close()
		}()
	}
	wg.Wait()
	for _, pool := range s.DBs {
		pool.Close()
	}
	if s.Net != nil {
		s.Net.close()
	}
	s.closeAlarmProxies()
	s.closeOrphanProxies()
}

// ProcessStats returns every process's counters.
func (s *System) ProcessStats() []ProcessStats {
	out := make([]ProcessStats, len(s.Procs))
	for i, p := range s.Procs {
		out[i] = p.counters()
	}
	return out
}
