package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/bookstore-go/bookstore/testenv/cluster"
)

// OwnPostgres is -postgres own: a Postgres 15 server the run starts for itself
// (testenv/cluster.StartPostgresAlone) instead of using the machine's, with the server's
// defaults, so that what the machine's server has turned off (autovacuum, here) is on
// as in production. Every service's database is on it; the run never changes a setting
// of the machine's server.
type OwnPostgres struct {
	pg *cluster.Postgres
}

// StartOwnPostgres starts the run's own server under testenv/cluster's root, which also
// sweeps what a killed run left, and returns once it answers.
func StartOwnPostgres(ctx context.Context) (*OwnPostgres, error) {
	pg, err := cluster.StartPostgresAlone(ctx, "", "chaos")
	if err != nil {
		return nil, err
	}
	return &OwnPostgres{pg: pg}, nil
}

// AdminURL is the superuser's URL of the server: the run's -postgres.
func (o *OwnPostgres) AdminURL() string { return o.pg.AdminURL() }

// Close copies the server's log to logDir/postgres.log (its autovacuum runs are in it;
// no copy when logDir is empty), stops the server and removes its directory.
func (o *OwnPostgres) Close(logDir string) error {
	var errs []error
	if logDir != "" {
		if b, err := os.ReadFile(o.pg.LogFiles()[0]); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, os.WriteFile(filepath.Join(logDir, "postgres.log"), b, 0o644))
		}
	}
	errs = append(errs, o.pg.Close())
	return errors.Join(errs...)
}
