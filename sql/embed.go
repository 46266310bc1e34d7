// Package sql holds every service's migrations and queries. The migrations are embedded
// here so a service binary carries its schema and applies it on start-up; sqlc reads the
// same files (sqlc.yaml) to generate each service's typed queries.
package sql

import (
	"embed"
	"io/fs"
)

//go:embed platform/migrations/*.sql ordering/migrations/*.sql
var files embed.FS

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err)
	}
	return f
}

// Migration sets, one per owner. Platform holds the outbox and inbox tables that every
// service's database has.
var (
	Platform = sub("platform/migrations")
	Ordering = sub("ordering/migrations")
)
