package experiments

import (
	"context"

	"github.com/bookstore-go/bookstore/services/notification/internal/notifications"
	"github.com/bookstore-go/bookstore/services/platform/sandbox"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

// NewSandbox makes a Lab of its own on the Postgres at adminURL (a superuser connection):
// a fresh database and role, migrated as notification's own would be, and an email
// provider in-process, so the experiment touches neither the running system's
// notification database nor its provider. close drops the database and stops the
// provider.
func NewSandbox(ctx context.Context, adminURL string, tel *telemetry.Telemetry) (lab *Lab, close func(), err error) {
	box, err := sandbox.New(ctx, sandbox.Servers{DatabaseAdminURL: adminURL}, "notification_demo", notifications.Migrations...)
	if err != nil {
		return nil, nil, err
	}
	p, stop, err := StartProvider()
	if err != nil {
		box.Close()
		return nil, nil, err
	}
	return &Lab{Pool: box.Pool, Provider: p, Tel: tel}, func() { stop(); box.Close() }, nil
}
