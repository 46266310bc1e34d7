package notifications

import (
	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	schema "github.com/bookstore-go/bookstore/sql"
)

// Migrations are the schema of notification's database, applied on every start by the
// service, its experiments and its tests alike: the platform's outbox and inbox, then
// notification's own tables.
var Migrations = []pgdb.Migrations{
	{FS: schema.Platform, VersionTable: "goose_platform_version"},
	{FS: schema.Notification, VersionTable: "goose_notification_version"},
}
