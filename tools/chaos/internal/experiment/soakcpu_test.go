package experiment

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// The soak's window table says which process used the machine's processor: the two-hour
// soak's collapse came with a load average of 15-17, and nothing said whose.
func TestTheCPUOfAProcessIsReadFromItsStatPastACommandWithSpacesAndParentheses(t *testing.T) {
	// utime 250 and stime 50 ticks: 3 s.
	line := "4242 (bin/odd (name) x) S 1 4242 4242 0 -1 4194560 1203 0 0 0 250 50 0 0 20 0 9 0 1234 1000000 5000 18446744073709551615"
	if got := statCPU(line); got != 3*time.Second {
		t.Errorf("statCPU = %v, want 3s", got)
	}
	if got := statCPU("garbage"); got != 0 {
		t.Errorf("statCPU of a line without a command = %v, want 0", got)
	}
	// Spin until the kernel has charged this process 300 ms more (getrusage), however
	// long that takes on a busy machine, not for 300 ms of the clock: a process niced
	// behind others gets a fraction of it.
	before, used := readCPU(os.Getpid()), ownCPU(t)
	for ownCPU(t)-used < 300*time.Millisecond {
	}
	if after := readCPU(os.Getpid()); after-before < 250*time.Millisecond {
		t.Errorf("this process used 300ms of CPU, and its stat's went from %v to %v", before, after)
	}
	if got := readCPU(0); got != 0 {
		t.Errorf("readCPU of a process that is down = %v, want 0", got)
	}
}

// ownCPU is the user and system time of this process so far, by getrusage.
func ownCPU(t *testing.T) time.Duration {
	t.Helper()
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		t.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
