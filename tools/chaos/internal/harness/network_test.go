package harness

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A process of the cluster profile reaches each dependency through several hosts, one
// proxy each, behind one link: a fault on the link must strike every host, or a
// link_down would only move the process to the next node and test nothing.
func TestALinkDownOnADependencyOfSeveralHostsCutsEveryHost(t *testing.T) {
	log, err := os.Create(filepath.Join(t.TempDir(), "toxiproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNetwork(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	var upstreams []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("x"))
				_ = c.Close()
			}
		}()
		upstreams = append(upstreams, ln.Addr().String())
	}
	addrs, err := n.AddLinkGroup("p-postgres", upstreams)
	if err != nil {
		t.Fatal(err)
	}
	if names := n.LinkNames(); len(names) != 1 || names[0] != "p-postgres" {
		t.Fatalf("links %v, want the one link p-postgres", names)
	}
	reaches := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 1)
		_, err = c.Read(b)
		return err == nil && b[0] == 'x'
	}
	for i, a := range addrs {
		if !reaches(a) {
			t.Fatalf("host %d not reachable through %s before the fault", i, a)
		}
	}
	if err := n.Down("p-postgres"); err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if reaches(a) {
			t.Errorf("host %d still reachable through %s with the link down", i, a)
		}
	}
	if err := n.Up("p-postgres"); err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if !reaches(a) {
			t.Errorf("host %d not reachable through %s after the link came back", i, a)
		}
	}
}
