package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that Parse never panics, that every failure is a
// ConfigErrors naming the file, and that every config it accepts validates.
// Seeds: every config in testdata and the reference job; Go adds
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	seeds = append(seeds, "../configs/colorshape.yaml")
	for _, file := range seeds {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data, nil)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned a config with error %v", err)
			}
			var problems ConfigErrors
			if !errors.As(err, &problems) || len(problems) == 0 {
				t.Fatalf("Parse error %T is not a non-empty ConfigErrors: %v", err, err)
			}
			for _, p := range problems {
				if p.File != "fuzz.yaml" || p.Msg == "" {
					t.Fatalf("problem without file or message: %#v", p)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate refuses:\n%v", err)
		}
		cp := *cfg
		cp.src = nil
		if err := cp.Validate(); err != nil {
			t.Fatalf("the accepted config, without positions, does not validate:\n%v", err)
		}
		_ = cfg.Topics()
		_ = cfg.Brokers()
		_ = cfg.MaxParallelism()
		for i := range cfg.Sinks {
			if p := cfg.SinkParallelism(&cfg.Sinks[i]); p < 1 {
				t.Fatalf("sinks[%d] resolved parallelism %d", i, p)
			}
		}
		for i := range cfg.Operators {
			if p := cfg.OperatorParallelism(&cfg.Operators[i]); p < 1 || p > cfg.MaxParallelism() {
				t.Fatalf("operators[%d] resolved parallelism %d outside [1, %d]", i, p, cfg.MaxParallelism())
			}
		}
	})
}
