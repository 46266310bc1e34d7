package schema

import (
	"embed"
	"io/fs"
)

//go:embed emailprovider/migrations/*.sql
var emailproviderFiles embed.FS

// EmailProvider holds the migrations of the emailprovider service.
var EmailProvider = func() fs.FS {
	f, err := fs.Sub(emailproviderFiles, "emailprovider/migrations")
	if err != nil {
		panic(err)
	}
	return f
}()
