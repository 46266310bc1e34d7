// Command healthcheck GETs one URL and exits 0 if the answer is 2xx, 1 otherwise. It is
// the docker compose healthcheck of every Bookstore service image.
//
// The images are distroless: no shell, no curl, no wget, which is most of their point
// (nothing for an intruder to run). A healthcheck still has to run something inside the
// container, so the image carries this one static binary that can do exactly one thing.
//
//	healthcheck http://localhost:8081/readyz
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if err := check(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

func check(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: healthcheck URL")
	}
	// Shorter than any compose healthcheck timeout, so docker sees our verdict, not its own.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// /readyz names the dependency that failed; docker inspect shows this line.
		return fmt.Errorf("%s: %s %s", args[0], resp.Status, body)
	}
	return nil
}
