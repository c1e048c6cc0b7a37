package bench

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime returns the user plus system CPU time the process has used
// (getrusage RUSAGE_SELF).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU returns the user plus system CPU time process pid has used so
// far, from /proc/<pid>/stat (Linux; clock ticks of 1/100 s, the kernel's
// USER_HZ), and false where that cannot be read.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields counted start after its closing one, at field 3 (state).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// rssMeter measures the process's peak resident set size over a phase. On
// Linux it resets the kernel's high-water mark (writing 5 to
// /proc/self/clear_refs) and reads VmHWM; where that fails it falls back to
// the largest VmRSS seen by Sample calls, or getrusage's lifetime maximum.
type rssMeter struct {
	reset   bool
	sampled int64
}

func newRSSMeter() *rssMeter {
	m := &rssMeter{}
	m.reset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	m.Sample()
	return m
}

// Sample records the current resident set size.
func (m *rssMeter) Sample() {
	if v := procStatus("VmRSS:"); v > m.sampled {
		m.sampled = v
	}
}

// Peak returns the peak resident set size in bytes since newRSSMeter.
func (m *rssMeter) Peak() int64 {
	m.Sample()
	if m.reset {
		if v := procStatus("VmHWM:"); v > 0 {
			return max(v, m.sampled)
		}
	}
	if m.sampled > 0 {
		return m.sampled
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return ru.Maxrss * 1024
	}
	return 0
}

// procStatus returns the value in bytes of a "kB" field of
// /proc/self/status, 0 when it cannot be read.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n * 1024
		}
	}
	return 0
}

// quantile returns the q-quantile (0 <= q <= 1, nearest rank) of xs, which
// it sorts; 0 for none.
func quantile[T int64 | time.Duration](xs []T, q float64) T {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
