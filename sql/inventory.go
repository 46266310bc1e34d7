package schema

import (
	"embed"
	"io/fs"
)

//go:embed inventory/migrations/*.sql
var inventoryFiles embed.FS

// Inventory holds the migrations of the inventory service: its books, the catalogue it
// starts with, and its reservations.
var Inventory = func() fs.FS {
	f, err := fs.Sub(inventoryFiles, "inventory/migrations")
	if err != nil {
		panic(err)
	}
	return f
}()
