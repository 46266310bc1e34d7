package e2e

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The throughput benchmark charges each order with the CPU every process spent on it:
// the four services, Postgres, RabbitMQ and the client. It reads the kernel's account of
// each process, /proc/<pid>/stat, before and after a run, so nothing in the processes is
// asked or slowed down.

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: sysconf(_SC_CLK_TCK)
// is 100 on Linux amd64, hard-coded because reading it needs cgo.
const clockTicks = 100

// procKey names one process for its whole life: a pid may be reused, its start time with it
// may not.
type procKey struct {
	pid   int
	start uint64 // starttime, field 22, in clock ticks since boot
}

// procCPU is one process's CPU so far.
type procCPU struct {
	pid   int
	ppid  int    // its parent: the postmaster, for a Postgres backend
	comm  string // the executable's name as the kernel keeps it: "postgres", "beam.smp"
	title string // its command line, which a Postgres backend rewrites to name its database
	ticks uint64 // utime + stime: user and system time of all its threads
}

// cpuSample is every process's CPU at one moment.
type cpuSample map[procKey]procCPU

// sampleCPU reads /proc/<pid>/stat of every process. A process that ends while it is read
// is left out.
func sampleCPU() cpuSample {
	s := cpuSample{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue
		}
		if key, p, ok := parseStat(pid, string(b)); ok {
			cmdline, _ := os.ReadFile(dir + "/cmdline")
			p.title = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
			s[key] = p
		}
	}
	return s
}

// parseStat reads comm, ppid, utime, stime and starttime from one /proc/<pid>/stat line. comm is
// in parentheses and may itself hold spaces and parentheses, so the fields are counted from
// its last ")".
func parseStat(pid int, stat string) (procKey, procCPU, bool) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return procKey{}, procCPU{}, false
	}
	// fields[0] is field 3 (state), so field n is fields[n-3].
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 20 {
		return procKey{}, procCPU{}, false
	}
	ppid, err0 := strconv.Atoi(fields[4-3])
	utime, err1 := strconv.ParseUint(fields[14-3], 10, 64)
	stime, err2 := strconv.ParseUint(fields[15-3], 10, 64)
	start, err3 := strconv.ParseUint(fields[22-3], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil || err3 != nil {
		return procKey{}, procCPU{}, false
	}
	return procKey{pid, start}, procCPU{pid: pid, ppid: ppid, comm: stat[open+1 : end], ticks: utime + stime}, true
}

// cpuSince returns the CPU that the processes matching match spent between before and s.
// A process that started in between counts whole. A process that ended in between is
// missed from its last sample on, and one that started and ended in between (a Postgres
// backend of a short-lived connection) is missed entirely.
func (s cpuSample) cpuSince(before cpuSample, match func(procCPU) bool) time.Duration {
	var ticks uint64
	for key, p := range s {
		if match(p) {
			ticks += p.ticks - before[key].ticks // a new process's before is zero
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// parentOf returns the pid of a process's parent.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	_, p, ok := parseStat(pid, string(b))
	if !ok {
		return 0, fmt.Errorf("/proc/%d/stat: cannot parse %q", pid, b)
	}
	return p.ppid, nil
}

// pidOf returns the pid of the running process whose executable is exe. The benchmark's
// service binaries are built into a directory of its own, so the path names one process.
func pidOf(exe string) (int, error) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		if target, err := os.Readlink(dir + "/exe"); err == nil && target == exe {
			return strconv.Atoi(filepath.Base(dir))
		}
	}
	return 0, fmt.Errorf("no running process of %s", exe)
}

// backendsOf matches the Postgres backends connected to one of the databases, whose
// title is "postgres: 15/main: <role> <database> <client> <state>". Their CPU is the part
// of Postgres's work that is surely this benchmark's when others use the server too; the
// WAL writer, the checkpointer and the other background processes serve every database.
func backendsOf(databaseURLs ...string) func(procCPU) bool {
	var names []string
	for _, u := range databaseURLs {
		if parsed, err := url.Parse(u); err == nil {
			names = append(names, " "+strings.TrimPrefix(parsed.Path, "/")+" ")
		}
	}
	return func(p procCPU) bool {
		return p.comm == "postgres" && slices.ContainsFunc(names, func(name string) bool { return strings.Contains(p.title, name) })
	}
}
