package main

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
)

// services are the four binaries the run starts, in the order they start: the provider
// first (notification needs it), inventory before ordering (it seeds the catalogue the
// load orders from).
var services = []string{"emailprovider", "inventory", "notification", "ordering"}

// system is the running Bookstore: the processes, their links and the harness's own
// direct connections to each database (never through a proxy: the checker must see the
// truth even while a link is down).
type system struct {
	cfg       config
	dir       string // the report directory
	vhost     string
	amqpURL   string // the run's vhost, direct
	net       *network
	procs     []*process
	dbs       map[string]*pgxpool.Pool // by service, connected as the superuser
	onFPCrash func(p *process, spec string)
	alarmMu   sync.Mutex
	alarms    map[string]*alarmProxy // by process: between its RabbitMQ link and the broker (alarm.go)
}

// databaseName is the run's database (and role) of a service, e.g. chaos_ordering.
func (c config) databaseName(service string) string { return c.Prefix + "_" + service }

// process returns the process called name.
func (s *system) process(name string) *process {
	for _, p := range s.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// processesOf returns the processes that run service.
func (s *system) processesOf(service string) []*process {
	var out []*process
	for _, p := range s.procs {
		if p.service == service {
			out = append(out, p)
		}
	}
	return out
}

// resetStores drops the run's databases and roles and recreates its RabbitMQ vhost, so
// every run starts from nothing; the services create and migrate their databases
// themselves on start, as in production.
func resetStores(ctx context.Context, cfg config) error {
	conn, err := pgx.Connect(ctx, cfg.AdminURL)
	if err != nil {
		return fmt.Errorf("postgres: %w (is it running? make services)", err)
	}
	defer conn.Close(ctx)
	for _, svc := range services {
		id := pgx.Identifier{cfg.databaseName(svc)}.Sanitize()
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
func setDeliveryLimit(ctx context.Context, m broker.Management, cfg config) error {
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

// dropStores removes the run's databases, roles and vhost.
func dropStores(ctx context.Context, cfg config) error {
	var errs []error
	conn, err := pgx.Connect(ctx, cfg.AdminURL)
	if err == nil {
		defer conn.Close(ctx)
		for _, svc := range services {
			id := pgx.Identifier{cfg.databaseName(svc)}.Sanitize()
			_, e1 := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)")
			_, e2 := conn.Exec(ctx, "DROP ROLE IF EXISTS "+id)
			errs = append(errs, e1, e2)
		}
	}
	errs = append(errs, err)
	errs = append(errs, broker.Management{URL: cfg.ManagementURL}.DeleteVHost(ctx, cfg.Prefix))
	return errors.Join(errs...)
}

// startSystem starts the Toxiproxy links and every process, and waits until each
// answers /readyz.
func startSystem(ctx context.Context, cfg config, dir string, onFPCrash func(*process, string)) (*system, error) {
	s := &system{cfg: cfg, dir: dir, vhost: cfg.Prefix, dbs: map[string]*pgxpool.Pool{}, onFPCrash: onFPCrash}
	var err error
	if s.amqpURL, err = withVHost(cfg.AMQPURL, cfg.Prefix); err != nil {
		return nil, err
	}
	pgAdmin, err := url.Parse(cfg.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	amqpBase, err := url.Parse(cfg.AMQPURL)
	if err != nil {
		return nil, fmt.Errorf("amqp url: %w", err)
	}
	toxiLog, err := os.Create(filepath.Join(dir, "logs", "toxiproxy.log"))
	if err != nil {
		return nil, err
	}
	if s.net, err = startNetwork(toxiLog); err != nil {
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
	// The consumers' retry backoff is shrunk too, for the same reason (see budget.go).
	consumerRetry := []string{"CONSUMER_RETRY_BASE=" + consumerRetryBase.String(), "CONSUMER_RETRY_MAX=" + consumerRetryMax.String()}
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
	// (--double, make chaos-load; loadprofile.go).
	specs := cfg.layout(inventoryEnv, notificationEnv, orderingEnv)
	for _, sp := range specs {
		p, err := s.newProcess(ctx, sp.name, sp.service, sp.args, sp.extra, pgAdmin, amqpBase)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	// Start one at a time: each creates or migrates its database on start, and the second
	// inventory should find the first one's catalogue rather than race it.
	for _, p := range s.procs {
		if err := p.start(ctx); err != nil {
			s.stop()
			return nil, err
		}
		if err := p.waitReady(ctx, 60*time.Second); err != nil {
			s.stop()
			return nil, err
		}
	}
	for _, svc := range services {
		u := *pgAdmin
		u.Path = "/" + cfg.databaseName(svc)
		pool, err := pgxpool.New(ctx, u.String())
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("connect %s: %w", svc, err)
		}
		s.dbs[svc] = pool
	}
	return s, nil
}

// newProcess creates the process's links (Postgres, RabbitMQ, and for notification the
// provider) and its environment, all pointing at the proxies.
func (s *system) newProcess(ctx context.Context, name, service string, args, extra []string, pgAdmin, amqpBase *url.URL) (*process, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pgLink, err := s.net.addLink(name+"-postgres", pgAdmin.Host)
	if err != nil {
		return nil, err
	}
	db := s.cfg.databaseName(service)
	dbURL := url.URL{Scheme: "postgres", User: url.User(db), Host: pgLink, Path: "/" + db, RawQuery: "sslmode=disable"}
	admin := *pgAdmin
	admin.Host = pgLink
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"HTTP_ADDR=" + httpAddr,
		"DATABASE_URL=" + dbURL.String(),
		"DATABASE_ADMIN_URL=" + admin.String(),
		"LOG_LEVEL=info",
	}
	if service != "emailprovider" {
		// The link's far end is the process's alarm proxy, which can tell its connections
		// what a broker alarm would (broker_alarm).
		alarm, err := s.addAlarmProxy(name, amqpBase.Host)
		if err != nil {
			return nil, err
		}
		amqpLink, err := s.net.addLink(name+"-rabbitmq", alarm.addr())
		if err != nil {
			return nil, err
		}
		u := *amqpBase
		u.Host = amqpLink
		amqpURL, err := withVHost(u.String(), s.vhost)
		if err != nil {
			return nil, err
		}
		env = append(env, "AMQP_URL="+amqpURL)
		env = append(env, s.cfg.designEnv()...)
	}
	if service == "notification" {
		provider := s.process("emailprovider")
		if provider == nil {
			return nil, errors.New("the email provider must be set up before notification")
		}
		providerLink, err := s.net.addLink(name+"-emailprovider", provider.httpAddr)
		if err != nil {
			return nil, err
		}
		env = append(env, "EMAILPROVIDER_URL=http://"+providerLink)
	}
	log, err := os.Create(filepath.Join(s.dir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	return &process{
		name: name, service: service, httpAddr: httpAddr,
		bin: filepath.Join(s.cfg.BinDir, service), args: args, env: append(env, extra...), log: log,
		onFailpoint: s.onFPCrash,
	}, nil
}

// withVHost returns the AMQP URL with its path set to the vhost.
func withVHost(amqpURL, vhost string) (string, error) {
	u, err := url.Parse(amqpURL)
	if err != nil {
		return "", fmt.Errorf("amqp url: %w", err)
	}
	u.Path = "/" + vhost
	u.RawPath = "/" + url.PathEscape(vhost)
	return u.String(), nil
}

// stop stops every process at once (the checker has its snapshot: the order no longer
// matters), closes the links and the harness's connections.
func (s *system) stop() {
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(5 * time.Second)
			p.log.Close()
		}()
	}
	wg.Wait()
	for _, pool := range s.dbs {
		pool.Close()
	}
	if s.net != nil {
		s.net.close()
	}
	s.closeAlarmProxies()
}

// processStats returns every process's counters.
func (s *system) processStats() []processStats {
	out := make([]processStats, len(s.procs))
	for i, p := range s.procs {
		out[i] = p.counters()
	}
	return out
}
