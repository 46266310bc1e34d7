package stock

import (
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
)

// Migrations are the schema of inventory's database, applied on every start by the
// service, its experiments and its tests alike: the platform's outbox and inbox, then
// inventory's own tables.
var Migrations = []pgdb.Migrations{
	{FS: schema.Platform, VersionTable: "goose_platform_version"},
	{FS: schema.Inventory, VersionTable: "goose_inventory_version"},
}
