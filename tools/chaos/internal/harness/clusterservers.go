package harness

import (
	"context"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/bookstore-go/bookstore/testenv/cluster"
	"github.com/bookstore-go/bookstore/tools/chaos/internal/config"
)

// startClusterServers starts the cluster's servers into c with testenv/cluster, the
// broker's nodes and each service's primary and standby at once (each takes tens of
// seconds on two cores, mostly waiting).
func startClusterServers(ctx context.Context, c *Cluster, root string) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		r, err := cluster.StartRabbitMQ(gctx, root, 3)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		c.Broker = r
		c.closers = append(c.closers, r.Close)
		return nil
	})
	for _, svc := range config.ClusterServices {
		g.Go(func() error {
			p, err := cluster.StartPostgres(gctx, root, svc)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			c.Postgres[svc] = p
			c.closers = append(c.closers, p.Close)
			return nil
		})
	}
	return g.Wait()
}
