package schema

import (
	"embed"
	"io/fs"
)

//go:embed notification/migrations/*.sql
var notificationFiles embed.FS

// Notification holds the migrations of the notification service.
var Notification = func() fs.FS {
	f, err := fs.Sub(notificationFiles, "notification/migrations")
	if err != nil {
		panic(err)
	}
	return f
}()
