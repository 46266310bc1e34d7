// Package schema holds every service's migrations and queries, in the module at sql/.
// The migrations are embedded here so a service binary carries its schema and applies it
// on start-up; sqlc reads the same files (sqlc.yaml) to generate each service's typed
// queries. Importers name it schema, which does not shadow database/sql.
package schema

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
