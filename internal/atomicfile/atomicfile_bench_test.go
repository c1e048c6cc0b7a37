package atomicfile

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kstreamd/kstreamd/internal/testkit"
)

// BenchmarkCreateOnly: one create-only write (NoReplace) of a 200-byte
// object, as checkpoint.FileStore writes a unit checkpoint's marker, HEAD
// and files, then its removal; "sync" with the file and directory fsyncs,
// "nosync" without (the create, link and name costs alone). cpu-ns/op is
// the process's CPU time per write, which load distorts less than ns/op.
func BenchmarkCreateOnly(b *testing.B) {
	data := make([]byte, 200)
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"sync", Options{NoReplace: true, TempPattern: ".tmp-*"}},
		{"nosync", Options{NoReplace: true, TempPattern: ".tmp-*", NoSync: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			start := testkit.CPUTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				dst := filepath.Join(dir, "obj-"+strconv.Itoa(i))
				if err := WriteFile(dst, data, bc.opts); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(dst); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(testkit.CPUTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
