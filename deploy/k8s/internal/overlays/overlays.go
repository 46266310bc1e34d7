// Package overlays makes the files of deploy/k8s's overlays that have another source:
// the local overlay's copies of deploy/'s broker and Postgres configuration, and the
// production overlay's broker topology from services/contracts. Write is the only way
// they change: `make generate-k8s` runs it on deploy/k8s, deploy/k8s's tests run it on a
// temporary directory and compare. The copies exist because kustomize reads a file only
// from inside the kustomization's directory, so the overlay cannot name deploy/'s.
package overlays

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/bookstore-go/bookstore/deploy/k8s/internal/topology"
)

// File is one generated file: Path is relative to deploy/k8s, Source says what it is made
// of (relative to the repository root), and make produces its content.
type File struct {
	Path   string
	Source string
	make   func(root string) ([]byte, error)
}

// Files are every file Write writes.
var Files = []File{
	copyOf("overlays/local/rabbitmq/definitions.json", "deploy/rabbitmq/definitions.json"),
	copyOf("overlays/local/rabbitmq/rabbitmq.conf", "deploy/rabbitmq/rabbitmq.conf"),
	copyOf("overlays/local/rabbitmq/enabled_plugins", "deploy/rabbitmq/enabled_plugins"),
	copyOf("overlays/local/postgres/01-roles.sql", "deploy/postgres/init/01-roles.sql"),
	{
		Path:   "overlays/production/broker/topology.yaml",
		Source: "services/contracts (internal/topology)",
		make:   func(string) ([]byte, error) { return topology.Manifest() },
	},
}

// copyOf is the file at path, byte for byte the repository's file source.
func copyOf(path, source string) File {
	return File{Path: path, Source: source, make: func(root string) ([]byte, error) {
		return os.ReadFile(filepath.Join(root, source))
	}}
}

// Write makes every file of Files from the repository at root and writes it under dir
// (deploy/k8s, or any directory to compare with it), creating directories as needed.
func Write(root, dir string) error {
	for _, f := range Files {
		b, err := f.make(root)
		if err != nil {
			return fmt.Errorf("%s from %s: %w", f.Path, f.Source, err)
		}
		out := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
